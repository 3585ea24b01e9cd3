-- ddp_local_sgd.lua: accel.LocalSGD on 2 ranks against closed-form values.
-- A Linear(1, 1) with weight 1, bias 0; rank r's loss is model(r + 1):sum(),
-- so its local gradients are (r + 1, 1); SGD lr 0.1, local_sgd_steps = 2.
--   step 1: weights 0.9 / 0.8 (differ), bias -0.1
--   step 2: local 0.8 / 0.6, averaged to 0.7 on both, bias -0.2
--   step 3: local 0.6 / 0.5; exit averages to 0.55, bias -0.3
-- Inside, gradients are not averaged (rank r sees r + 1); after exit they
-- are again (1.5). The run(fn) form and the :enter() / :close() handle give
-- the same. enabled = false averages nothing. Prints "ok rank R: N checks".
-- Accelerate 1.15's LocalSGD prints these values
-- (scripts/fixtures/print_local_sgd_reference.py, 2 gloo ranks).
local accel = require("accel")
local acc = accel.Accelerator()
local rank, checks = acc.process_index, 0

local function expect(cond, what)
  if not cond then error(("rank %d: %s"):format(rank, what), 2) end
  checks = checks + 1
end

local function near(got, want, what)
  expect(math.abs(got - want) <= 1e-6, ("%s: got %.9g, expected %.9g"):format(what, got, want))
end

local function setup()
  local m = accel.nn.Linear(1, 1)
  accel.no_grad(function()
    m.weight:fill_(1)
    m.bias:fill_(0)
  end)
  local opt = accel.optim.SGD(m:parameters(), {lr = 0.1})
  return acc:prepare(m, opt)
end

-- one SGD step on rank r's data; the gradient of the weight it used
local function train_step(m, opt)
  acc:backward(m(accel.tensor({{rank + 1.0}})):sum())
  local g = m.weight.grad:item()
  opt:step()
  opt:zero_grad()
  return g
end

local WEIGHT = {{0.9, 0.8}, {0.7, 0.7}, {0.6, 0.5}}

local function body(m, opt, ls)
  for s = 1, 3 do
    near(train_step(m, opt), rank + 1, "step " .. s .. " gradient (not averaged inside LocalSGD)")
    ls:step()
    near(m.weight:item(), WEIGHT[s][rank + 1], "weight after step " .. s)
    near(m.bias:item(), -0.1 * s, "bias after step " .. s)
  end
  expect(ls.num_steps == 3, "num_steps " .. tostring(ls.num_steps))
end

local function after_exit(m, opt, form)
  near(m.weight:item(), 0.55, form .. ": weight after exit (the mean)")
  near(m.bias:item(), -0.3, form .. ": bias after exit")
  near(train_step(m, opt), 1.5, form .. ": gradient after exit (averaged again)")
end

do -- run(fn)
  local m, opt = setup()
  local ls = accel.LocalSGD{accelerator = acc, model = m, local_sgd_steps = 2}
  expect(ls:run(function(l) body(m, opt, l); return "r" end) == "r", "run returns fn's result")
  after_exit(m, opt, "run")
end

do -- handle (:enter() / :close(), as under LuaJIT)
  local m, opt = setup()
  local ls = accel.local_sgd.LocalSGD{accelerator = acc, model = m, local_sgd_steps = 2}:enter()
  body(m, opt, ls)
  ls:close()
  ls:close()
  after_exit(m, opt, "handle")
end

do -- enabled = false: plain DDP (gradients averaged, parameters equal, nothing else)
  local m, opt = setup()
  accel.LocalSGD{accelerator = acc, model = m, local_sgd_steps = 1, enabled = false}:run(function(ls)
    near(train_step(m, opt), 1.5, "enabled = false: gradient averaged")
    ls:step()
    expect(ls.num_steps == 1, "enabled = false still counts")
  end)
  near(m.weight:item(), 0.85, "enabled = false: weight")
end

print(("ok rank %d: %d checks"):format(rank, checks))
