-- ddp_bare_backward.lua: a prepared model's bare loss:backward() leaves
-- gradients averaged over the ranks, as PyTorch's DDP does at the end of
-- backward: with an optimizer that was not prepared, with two backward
-- passes before one step (manual accumulation), and with two losses through
-- one model. Values are closed forms: Linear(1, 1) without bias, weight 1,
-- rank r's input at step i is r + i, so the averaged gradient of
-- weight * x is i + 0.5 on 2 ranks (PyTorch 2.15's DDP gives the same
-- weights). With an argument (zero1, zero2, zero3, fsdp) only the manual
-- accumulation runs, under that sharding. Run on 2 ranks by ddp_test.lua;
-- prints "ok rank R: N checks".
local accel = require("accel")
local nn, optim = accel.nn, accel.optim
local kind = arg[1] or "ddp"
local plugins = {ddp = {}, fsdp = {fsdp_plugin = accel.FullyShardedDataParallelPlugin({})}}
for stage = 1, 3 do plugins["zero" .. stage] = {deepspeed_plugin = accel.DeepSpeedPlugin({zero_stage = stage})} end
local acc = accel.Accelerator(assert(plugins[kind], "unknown kind " .. kind))
local rank, checks = acc.process_index, 0

local function expect(cond, what)
  if not cond then error(("rank %d: %s"):format(rank, what), 2) end
  checks = checks + 1
end
local function near(a, b) return math.abs(a - b) < 1e-6 end

local function model()
  local m = nn.Linear(1, 1, {bias = false})
  accel.no_grad(function() m.weight:fill_(1) end)
  return m
end
local function input(i) return accel.tensor({{rank + i * 1.0}}) end

-- the optimizer is not prepared: nothing but backward can average
if kind == "ddp" then
  local m = acc:prepare(model())
  local o = optim.SGD(m:parameters(), {lr = 0.1})
  for i = 1, 2 do
    m(input(i)):sum():backward()
    expect(near(m.weight.grad:item(), i + 0.5), ("step %d: .grad %g after backward, not the average %g"):format(i,
      m.weight.grad:item(), i + 0.5))
    o:step()
    o:zero_grad()
  end
  expect(near(m.weight:item(), 0.6), "unprepared optimizer: weight " .. m.weight:item() .. ", expected 0.6")
end

-- two bare backward passes per step (each loss / 2), prepared optimizer
do
  local m = model()
  local o = optim.SGD(m:parameters(), {lr = 0.1})
  m, o = acc:prepare(m, o)
  for i = 1, 4 do
    m(input(i)):sum():div(2):backward()
    if i % 2 == 0 then
      o:step()
      o:zero_grad()
    end
  end
  local w = acc:get_state_dict(m).weight:item()
  expect(near(w, 0.4), "manual accumulation: weight " .. w .. ", expected 0.4")
end

-- two losses through one model before one step
if kind == "ddp" then
  local m = acc:prepare(model())
  local o = acc:prepare(optim.SGD(m:parameters(), {lr = 0.1}))
  local x = input(1)
  m(x):sum():backward()
  m(x):sum():mul(3):backward()
  expect(near(m.weight.grad:item(), 6), "two losses: .grad " .. m.weight.grad:item() .. ", expected 4 * 1.5")
  o:step()
  expect(near(m.weight:item(), 0.4), "two losses: weight " .. m.weight:item() .. ", expected 0.4")
end

print(("ok rank %d: %d checks"):format(rank, checks))
