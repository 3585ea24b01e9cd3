-- sync_batchnorm.lua: the run behind sync_batchnorm_test.lua, on N ranks:
--
--   accel-lua launch --cpu --num_processes N sync_batchnorm.lua
--
-- A small CNN whose BatchNorm2d / BatchNorm1d are converted by
-- nn.SyncBatchNorm.convert_sync_batchnorm trains 5 SGD steps under the
-- Accelerator (DDP), each rank on its 4 samples of a global batch of 4 N.
-- In the same process a plain copy (the same initial values, plain
-- BatchNorm, no Accelerator) trains on the whole global batch: the synced
-- batch statistics are the global batch's, so parameters, running
-- statistics and eval-mode outputs must agree to 1e-5 relative. Also: a
-- SyncBatchNorm on a process_group of one rank (a split group) computes
-- local statistics. Each rank prints "ok rank R: N checks".
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local accel = require("accel")
local nn, optim, dist = accel.nn, accel.optim, accel.dist

local function net()
  accel.set_seed(11)
  return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 8),
    nn.BatchNorm1d(8, {momentum = 0.3}), nn.Tanh(), nn.Linear(8, 3))
end

local accelerator = accel.Accelerator()
local rank, world = accelerator.process_index, accelerator.num_processes
local rc = dofile(HERE .. "/rank_checks.lua")(rank)
local per_rank, steps = 4, 5

accel.set_seed(3)
local x = accel.randn(per_rank * world, 3, 6, 6) * 2 + 0.5
local y = accel.randint(0, 3, {per_rank * world})
local mine = {x:narrow(1, rank * per_rank + 1, per_rank), y:narrow(1, rank * per_rank + 1, per_rank)}

local synced = nn.SyncBatchNorm.convert_sync_batchnorm(net())
rc.check(synced[2]:_get_name() == "SyncBatchNorm" and synced[6]:_get_name() == "SyncBatchNorm", "not converted")
local opt = optim.SGD(synced:parameters(), {lr = 0.1})
synced, opt = accelerator:prepare(synced, opt)
local plain = net()
local plain_opt = optim.SGD(plain:parameters(), {lr = 0.1})

for _ = 1, steps do
  local loss = nn.functional.cross_entropy(synced(mine[1]), mine[2])
  accelerator:backward(loss)
  opt:step()
  opt:zero_grad()
  local ref = nn.functional.cross_entropy(plain(x), y)
  ref:backward()
  plain_opt:step()
  plain_opt:zero_grad()
end

local function rel(a, b) return ((a - b):abs():max() / (b:abs():max() + 1e-12)):item() end
local got = accelerator:unwrap_model(synced):state_dict()
for name, want in pairs(plain:state_dict()) do
  if want:is_floating_point() then
    rc.check(rel(got[name], want) < 1e-5, "%s differs from the global batch's BatchNorm run by %g", name, rel(got[name], want))
  else
    rc.check(got[name]:equal(want), "%s differs", name)
  end
end
synced:eval()
plain:eval()
rc.check(rel(synced(mine[1]), plain(mine[1])) < 1e-5, "eval outputs differ")

-- a group of one rank: local statistics, no collective
local alone = dist.split_group(rank, 0)
local bn = nn.SyncBatchNorm(3, {process_group = alone})
local local_bn = nn.BatchNorm2d(3)
rc.check(rel(bn(mine[1]), local_bn(mine[1])) < 1e-6, "a one-rank group is not local batch norm")
rc.check(bn.running_mean:equal(local_bn.running_mean), "one-rank group: running mean")
print(("ok rank %d: %d checks"):format(rank, rc.count))
