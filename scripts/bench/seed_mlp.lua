-- seed_mlp.lua: benchmark A of shared/anchors/bench_mlp.py in accel-lua: the
-- seed MLP (Linear(20,128)-ReLU-Linear(128,64)-ReLU-Linear(64,3), AdamW 1e-3,
-- CrossEntropyLoss), batch 32 shuffled, 5 epochs = 315 steps. Times only the
-- training loop; prints one JSON line per repeat like the PyTorch script
-- (plus "loop_cpu_s": the process's CPU seconds during the loop, which other
-- work on a loaded machine does not inflate).
--   accel-lua scripts/bench/seed_mlp.lua THREADS [manual|dataloader] [REPEATS]
local accel = require("accel")
local nn, optim, data = accel.nn, accel.optim, accel.data

local threads = tonumber(arg[1]) or 1
local mode = arg[2] or "manual"
local repeats = tonumber(arg[3]) or 1
accel.num_threads(threads)
accel.set_seed(0)
local N, D, K, BS, EPOCHS = 2000, 20, 3, 32, 5
local x = accel.randn(N, D)
local y = accel.randint(0, K, {N})

for rep = 0, repeats - 1 do
  local model = nn.Sequential(nn.Linear(D, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, K))
  local opt = optim.AdamW(model:parameters(), {lr = 1e-3})
  local lossf = nn.CrossEntropyLoss()
  local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = BS, shuffle = true})
  local steps, loss = 0, nil
  local t0, c0 = accel.clock(), os.clock()
  for _ = 1, EPOCHS do
    local function step(xb, yb)
      opt:zero_grad()
      loss = lossf(model(xb), yb)
      loss:backward()
      opt:step()
      steps = steps + 1
    end
    if mode == "dataloader" then
      for xb, yb in loader:iter() do step(xb, yb) end
    else
      local perm = accel.randperm(N)
      for i = 1, N, BS do
        local idx = perm:narrow(1, i, math.min(BS, N - i + 1))
        step(x:index_select(1, idx), y:index_select(1, idx))
      end
    end
  end
  local dt, cpu = accel.clock() - t0, os.clock() - c0
  print(('{"bench": "mlp", "impl": "accel-lua", "mode": "%s", "threads": %d, "rep": %d, "steps": %d, "loop_s": %.5f, "loop_cpu_s": %.5f, "steps_per_s": %.1f, "final_loss": %.4f}')
    :format(mode, threads, rep, steps, dt, cpu, steps / dt, loss:item()))
end
