-- ckpt_ddp.lua: the training run behind checkpoint_ddp_test.lua, on 2 ranks:
--
--   accel-lua launch --cpu --num_processes 2 ckpt_ddp.lua MODE OUT
--
-- MODE "plain" or "ckpt" (every block under accel.utils.checkpoint_module,
-- before prepare). Trains three residual blocks (LayerNorm, Linear, GELU,
-- Dropout 0.1) and a head with AdamW for 8 steps under DDP on a sharded,
-- shuffled loader. Rank 0 writes the parameters to OUT (safetensors) and
-- prints the reducer's "early E late L" bucket launch counts.
local accel = require("accel")
local nn, optim, data = accel.nn, accel.optim, accel.data

local mode, out = arg[1], arg[2]

local Block = nn.Module:extend("Block")
function Block:init(d)
  self.ln = nn.LayerNorm(d)
  self.fc = nn.Linear(d, 2 * d)
  self.proj = nn.Linear(2 * d, d)
  self.drop = nn.Dropout(0.1)
end
function Block:forward(x) return x + self.drop(self.proj(nn.functional.gelu(self.fc(self.ln(x))))) end

accel.set_seed(5)
local blocks = nn.ModuleList()
for _ = 1, 3 do blocks:append(Block(8)) end
local model = nn.Sequential(blocks[1], blocks[2], blocks[3], nn.Linear(8, 4))
if mode == "ckpt" then
  for i = 1, 3 do accel.utils.checkpoint_module(blocks[i]) end
end
local x, y = accel.randn(64, 8), accel.randint(0, 4, {64})
local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = 8, shuffle = true, seed = 3})
local acc = accel.Accelerator{}
local optimizer = optim.AdamW(model:parameters(), {lr = 1e-2})
model, optimizer, loader = acc:prepare(model, optimizer, loader)
local criterion = nn.CrossEntropyLoss()
local steps = 0
while steps < 8 do
  for xb, yb in loader:iter() do
    acc:backward(criterion(model(xb), yb))
    optimizer:step()
    optimizer:zero_grad()
    steps = steps + 1
    if steps == 8 then break end
  end
end
if acc.process_index == 0 then
  accel.save(acc:unwrap_model(model):state_dict(), out)
  local st = acc._reducers[1].reducer:stats()
  print(("early %d late %d"):format(st.early_launches, st.late_launches))
end
