-- device_ranks.lua: run by tests/lua/device_placement_test.lua as
-- `mpirun -np N accel-lua device_ranks.lua` with ACCEL_LUA_DEVICE=sim. On
-- every rank: accelerator.device is sim; the Accelerator's control values
-- (check_trigger's flag, pad_across_processes' sizes) travel as host
-- tensors, so they agree across ranks whatever the device; a prepared
-- loader deals rank r the samples r, r + N, ... (Accelerate's sharding), on
-- sim. Expected values are closed forms. Each rank prints
-- "ok rank R: C checks" or raises.
local accel = require("accel")
local data = accel.data

local acc = accel.Accelerator()
local rank, N = acc.process_index, acc.num_processes
local rc = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/rank_checks.lua")(rank)
local check = rc.check

check(tostring(acc.device) == "sim", "accelerator.device is %s, expected sim", tostring(acc.device))
check(N > 1, "expected several processes, got %d", N)

-- check_trigger: one rank sets it, every rank sees it, once
if rank == N - 1 then acc:set_trigger() end
check(acc:check_trigger() == true, "check_trigger after rank %d's set_trigger", N - 1)
check(acc:check_trigger() == false, "check_trigger a second time")

-- pad_across_processes: rank r has r + 1 values on sim; all padded to N
local t = accel.arange(1, rank + 2, {device = "sim"})
local p = acc:pad_across_processes(t, {dim = 1, pad_index = -1})
check(tostring(p.device) == "sim", "padded tensor on %s", tostring(p.device))
local want = {}
for i = 1, N do want[i] = i <= rank + 1 and i or -1 end
local got = p:tolist()
check(#got == N, "padded to %d values, expected %d", #got, N)
for i = 1, N do check(got[i] == want[i], "padded value %d is %s, expected %d", i, tostring(got[i]), want[i]) end

-- a prepared loader: rank r's batches are samples r, r + N, ... on sim
local ds = data.TensorDataset(accel.arange(4 * N, {device = "cpu"}))
local loader = acc:prepare(data.DataLoader(ds, {batch_size = 1}))
local k = 0
for xb in loader:iter() do
  check(tostring(xb.device) == "sim", "batch %d on %s", k + 1, tostring(xb.device))
  check(xb:item() == rank + k * N, "batch %d is sample %d, expected %d", k + 1, xb:item(), rank + k * N)
  k = k + 1
end
check(k == 4, "%d batches, expected 4", k)

print(("ok rank %d: %d checks"):format(rank, rc.count))
