-- dist_ddp_agree.lua: run by tests/lua/dist_mpi_test.lua under
-- `mpirun -np N accel-lua dist_ddp_agree.lua MODE`. The last rank differs:
--   layout  its model has other parameter shapes / counts: making the DDP
--           reducer fails on every rank with the same error naming the
--           first differing parameter and both ranks;
--   debug   (run with ACCEL_LUA_DEBUG_MODE=true) it calls a plain
--           all_reduce while the others run a DDP backward: the bucket's
--           all-reduce is checked too, and every rank gets the error naming
--           the differing rank.
-- Each rank prints "ok rank R: C checks" at the end, or raises.
local accel = require("accel")
local nn = accel.nn
local dist = accel.dist

local mode = arg[1]
local r, N = dist.get_rank(), dist.get_world_size()
local odd, last = r == N - 1, N - 1
local rc = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/rank_checks.lua")(r)
local expect = rc.expect

if mode == "layout" then
  local m = odd and nn.Linear(3, 4) or nn.Linear(4, 3)
  expect(("ddp: parameter 1 'weight' (of the 2 that require grad, in registration order) is float32 [3, 4] on rank 0 but "
    .. "float32 [4, 3] on rank %d (every rank must prepare the same model)"):format(last), accel.ddp.Reducer, m)
  m = odd and nn.Linear(4, 3, {bias = false}) or nn.Linear(4, 3)
  expect(("ddp: rank 0's model has 2 parameters that require grad, rank %d's has 1 (every rank must prepare the "
    .. "same model)"):format(last), accel.ddp.Reducer, m)
  -- through the Accelerator, the model broadcast at prepare already differs
  local acc = accel.Accelerator()
  expect(("broadcast: rank 0 has float32 [3, 4], rank %d has float32 [4, 3]"):format(last),
    acc.prepare, acc, odd and nn.Linear(3, 4) or nn.Linear(4, 3))
  -- the same model everywhere still works
  local red = accel.ddp.Reducer(nn.Linear(4, 3))
  rc.check(#red:buckets() == 1, "one bucket")
elseif mode == "debug" then
  local m = nn.Linear(4, 3)
  local red = accel.ddp.Reducer(m)
  local want = ("all_reduce: rank 0 reduces with avg, rank %d with sum"):format(last)
  if odd then
    expect(want, dist.all_reduce, accel.ones(4), "sum")
  else
    expect(want, function()
      m(accel.ones(2, 4)):sum():backward()
      red:finalize()
    end)
  end
else
  error("mode layout or debug expected")
end

print(("ok rank %d: %d checks"):format(r, rc.count))
