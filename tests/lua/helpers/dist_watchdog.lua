-- dist_watchdog.lua: run by tests/lua/dist_mpi_test.lua under
-- `mpirun -np 2 accel-lua dist_watchdog.lua [SECONDS]`. Rank 1 skips the
-- second all_reduce and stays busy outside MPI, so rank 0 stalls in
-- all_reduce #2 until its watchdog ends the job. With SECONDS the timeout
-- is set through dist.set_timeout, else ACCEL_LUA_COLLECTIVE_TIMEOUT applies.
local accel = require("accel")
local dist = accel.dist

if arg[1] then dist.set_timeout(tonumber(arg[1])) end
local r = dist.get_rank()
dist.all_reduce(accel.ones(4))
if r == 1 then
  local t0 = accel.clock()
  while accel.clock() - t0 < 60 do end -- killed with the job long before
  os.exit(0)
end
dist.all_reduce(accel.ones(4))
print("rank 0 passed a collective that rank 1 skipped")
