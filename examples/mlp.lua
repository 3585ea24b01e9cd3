-- mlp.lua: the seed tutorial's complete example (DESIGN §2): an MLP on random
-- data with AdamW, a cosine schedule, bf16 autocast and gradient
-- accumulation through the Accelerator, then save_model and save_state.
--   accel-lua examples/mlp.lua            (or: accel-lua launch ... examples/mlp.lua)
local accel = require("accel")          -- preloaded inside accel-lua
local nn, optim, data = accel.nn, accel.optim, accel.data

accel.set_seed(42)
local x = accel.randn(2000, 20)                 -- float32 on cpu
local y = accel.randint(0, 3, {2000})           -- int64, values 0..2
local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = 32, shuffle = true})

local model = nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 3))
local optimizer = optim.AdamW(model:parameters(), {lr = 1e-3, weight_decay = 0.01})
local scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, {T_max = 5})
local criterion = nn.CrossEntropyLoss()

local accelerator = accel.Accelerator{mixed_precision = "bf16", gradient_accumulation_steps = 2}
model, optimizer, loader, scheduler = accelerator:prepare(model, optimizer, loader, scheduler)

for epoch = 1, 5 do
  model:train()
  local loss
  for xb, yb in loader:iter() do                -- batches already on accelerator.device
    accelerator:accumulate(model, function()
      loss = criterion(model(xb), yb)
      accelerator:backward(loss)
      optimizer:step()
      optimizer:zero_grad()
    end)
  end
  scheduler:step()
  accelerator:print(("epoch %d loss %.4f"):format(epoch, loss:item()))
end
accelerator:wait_for_everyone()
local out = arg and arg[1] or "out"
accelerator:save_model(model, out)              -- out/model.safetensors, loadable by PyTorch
accelerator:save_state(out .. "/ckpt")          -- model, optimizer, scheduler, RNG, loader position
