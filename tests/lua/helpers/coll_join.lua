-- coll_join.lua: run by tests/lua/collectives_test.lua as
-- `accel-lua launch --cpu --num_processes N coll_join.lua MODE SAMPLES [K]`.
-- A linear model trained with SGD (lr 0.1, MSE) on SAMPLES samples in
-- batches of 2, prepared with even_batches = false, so rank 0 gets one
-- batch more than the others (SAMPLES / 2 = 2N + 1 global batches), with
-- K-step gradient accumulation (accelerator:accumulate, default 1).
--   join    the loop runs inside accelerator:join_uneven_inputs; every rank
--           prints "params R: w1 w2 w3 b" (%.17g) at the end
--   nojoin  the same loop without join: must fail at once, naming
--           join_uneven_inputs
-- The driver compares the parameters with its own computation.
local accel = require("accel")
local nn, optim, data = accel.nn, accel.optim, accel.data

local mode, samples, accumulation = arg[1], tonumber(arg[2]), tonumber(arg[3] or 1)

-- sample i (0-based): x = {i / 4, 1 - i / 8, (i % 3) / 2}, y = x . {1, -2, 0.5} + 0.25
local xs, ys = {}, {}
for i = 0, samples - 1 do
  local x = {i / 4, 1 - i / 8, (i % 3) / 2}
  xs[i + 1], ys[i + 1] = x, {x[1] - 2 * x[2] + 0.5 * x[3] + 0.25}
end
local ds = data.TensorDataset(accel.tensor(xs), accel.tensor(ys))

local acc = accel.Accelerator{even_batches = false, gradient_accumulation_steps = accumulation}
local model = nn.Linear(3, 1)
accel.no_grad(function()
  model.weight:copy_(accel.tensor({{0.1, -0.2, 0.3}}))
  model.bias:copy_(accel.tensor({0.05}))
end)
local opt = optim.SGD(model:parameters(), {lr = 0.1})
local loader = data.DataLoader(ds, {batch_size = 2})
model, opt, loader = acc:prepare(model, opt, loader)

local function train()
  for xb, yb in loader:iter() do
    acc:accumulate(model, function()
      local loss = ((model(xb) - yb) ^ 2):mean()
      acc:backward(loss)
      opt:step()
      opt:zero_grad()
    end)
  end
end

if mode == "join" then
  local steps = 0
  local ret = acc:join_uneven_inputs({model}, {even_batches = false}, function()
    train()
    steps = steps + 1
    return "done"
  end)
  assert(ret == "done" and steps == 1, "join_uneven_inputs returns fn's result")
  local w, b = model.weight:double():reshape(-1):tolist(), model.bias:double():tolist()
  print(("params %d: %.17g %.17g %.17g %.17g"):format(acc.process_index, w[1], w[2], w[3], b[1]))
elseif mode == "nojoin" then
  train()
  print(("rank %d finished without join"):format(acc.process_index))
else
  error("mode join or nojoin expected")
end
