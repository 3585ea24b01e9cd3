-- dist_mpi_error.lua: run by tests/lua/dist_mpi_test.lua under
-- `mpirun -np 2 accel-lua dist_mpi_error.lua`. The ranks pass all_gather
-- inputs of different sizes (a caller's bug MPI would report on one rank
-- only, as MPI_ERR_TRUNCATE): every rank must get the same Lua error naming
-- both ranks' shapes, and no rank may crash. Each rank prints "rank R: ok"
-- or "rank R: error <message>".
local accel = require("accel")
local dist = accel.dist

local r = dist.get_rank()
local ok, err = pcall(dist.all_gather, accel.ones(r == 0 and 2 or 3))
print(ok and ("rank %d: ok"):format(r) or ("rank %d: error %s"):format(r, err))
