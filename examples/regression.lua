-- regression.lua: fit y = 3 x1 - 2 x2 + 0.5 + noise with tensors and autograd
-- alone (no nn, no optim yet): a linear model trained by hand-written SGD.
--   accel-lua examples/regression.lua [steps]
local accel = require("accel")
-- PartialState:print prints on the main process only, so under
-- `accel-lua launch --num_processes N` (each rank fits the same model) the
-- lines appear once.
local state = accel.PartialState()

accel.set_seed(0)
local steps = tonumber(arg and arg[1]) or 300
local n = 256

local x = accel.randn(n, 2)
local true_w = accel.tensor({{3}, {-2}}, {dtype = accel.float32}) -- float32 under LuaJIT too (one number type)
local y = x:matmul(true_w) + 0.5 + accel.randn(n, 1) * 0.1

local w = accel.zeros(2, 1, {requires_grad = true})
local b = accel.zeros(1, {requires_grad = true})
local lr = 0.1

local t0 = accel.clock()
for step = 1, steps do
  local pred = x:matmul(w) + b
  local loss = ((pred - y) ^ 2):mean()
  loss:backward()
  accel.no_grad(function()
    w:sub_(w.grad * lr)
    b:sub_(b.grad * lr)
  end)
  w.grad:zero_()
  b.grad:zero_()
  if step == 1 or step % 50 == 0 then
    state:print(("step %4d  loss %.6f"):format(step, loss:item()))
  end
end
local wl = w:tolist()
state:print(("learned w = (%.3f, %.3f), b = %.3f  (true: 3, -2, 0.5)  in %.3f s"):format(
  wl[1][1], wl[2][1], b:item(), accel.clock() - t0))
