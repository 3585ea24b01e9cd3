-- shard_memory.lua: peak live tensor bytes per rank of a few training steps,
-- for shard_test.lua's memory check:
--
--   accel-lua launch --cpu --num_processes N shard_memory.lua ddp|stage1|stage2|stage3
--
-- A model whose activations are small next to its parameters (8 blocks of
-- Linear(64, 64), batch 2) trained with AdamW, either under DDP
-- (accel.ddp.Reducer: parameters, gradients, buckets, two Adam states) or
-- under the sharding engine (wrap = each block). Two warm-up steps create
-- the optimizer state; then the peak is reset and three steps measured.
-- Every rank prints "peak R BYTES" (accel.memory_stats' third value).
local accel = require("accel")
local nn, optim, dist = accel.nn, accel.optim, accel.dist

local mode = arg[1]
local Net = nn.Module:extend("Net")
function Net:init()
  local blocks = {}
  for i = 1, 8 do blocks[i] = nn.Linear(64, 64) end
  self.blocks = nn.ModuleList(blocks)
end
function Net:forward(x)
  for _, b in ipairs(self.blocks) do x = b(x):tanh() end
  return x
end

accel.set_seed(3)
local model = Net()
local optimizer = optim.AdamW(model:parameters(), {lr = 1e-3})
local x = accel.randn(2, 64)
local sync -- what completes the gradient after backward
if mode == "ddp" then
  sync = accel.ddp.Reducer(model)
else
  sync = accel.shard.Engine(model, optimizer, {stage = tonumber(mode:match("%d")), wrap = "module_list"})
end
local function step()
  model(x):pow(2):mean():backward()
  sync:finalize()
  optimizer:step()
  optimizer:zero_grad()
end
for _ = 1, 2 do step() end
collectgarbage()
collectgarbage()
accel.reset_peak_memory_stats()
for _ = 1, 3 do step() end
local _, _, peak = accel.memory_stats()
print(("peak %d %d"):format(dist.get_rank(), peak))
