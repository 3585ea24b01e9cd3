-- dist_split_watchdog.lua: the watchdog on a sub-communicator, run by
-- tests/lua/dist_split_test.lua under
--   ACCEL_LUA_TEST_RANKS_PER_NODE=2 ACCEL_LUA_COLLECTIVE_TIMEOUT=3 mpirun -np 4 accel-lua dist_split_watchdog.lua
-- World rank 3 skips the second all_reduce on its node group {2, 3} and
-- stays busy outside MPI, so world rank 2 stalls in that group's
-- all_reduce #2 until its watchdog ends the job; the other node's ranks
-- (0, 1) complete both of theirs, then stay busy too (as rank 3: the job
-- ends with the abort, not with their MPI_Finalize). The message must count the
-- node group's collectives (not the world's: every rank did more world
-- collectives while the groups were made) and name rank 1 of the group
-- with its world rank.
local accel = require("accel")
local dist = accel.dist

local r = dist.get_rank()
local node = dist.node_group()
local function spin()
  local t0 = accel.clock()
  while accel.clock() - t0 < 60 do end -- killed with the job long before
  os.exit(0)
end
dist.all_reduce(accel.ones(4), {group = node})
if r == 3 then spin() end
dist.all_reduce(accel.ones(4), {group = node})
if r == 2 then print("world rank 2 passed a collective that world rank 3 skipped") end
spin()
