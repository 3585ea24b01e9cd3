-- dist_failure.lua: run by tests/lua/dist_mpi_test.lua under
-- `mpirun -np 2 accel-lua dist_failure.lua exit|error|abort`. After one
-- collective, rank 1 fails (os.exit(3), an uncaught error, or
-- dist.abort(5)) while rank 0 waits in the next collective: the whole job
-- must end at once, non-zero.
local accel = require("accel")
local dist = accel.dist

local r = dist.get_rank()
dist.all_reduce(accel.ones(4))
if r == 1 then
  if arg[1] == "exit" then os.exit(3) end
  if arg[1] == "abort" then dist.abort(5) end
  error("rank 1 fails on purpose")
end
dist.all_reduce(accel.ones(4))
print("rank 0 passed a collective that rank 1 never joined")
