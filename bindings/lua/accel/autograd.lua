-- accel.autograd: custom differentiable operations written in Lua.
--
--   local Square = accel.autograd.Function{
--     forward = function(ctx, x) ctx:save_for_backward(x); return x * x end,
--     backward = function(ctx, g) local x = ctx.saved_tensors[1]; return g * 2 * x end,
--   }
--   local y = Square(x)           -- or Square.apply(x)
--
-- forward runs without recording a graph and returns one tensor; backward
-- receives the gradient of that output and returns one gradient (or nil) per
-- argument of forward, in order.
local accel = require("accel")
local compat = require("accel.compat")

local autograd = {}

local Ctx = {}
Ctx.__index = Ctx

function Ctx:save_for_backward(...)
  self.saved_tensors = {...}
end

function autograd.Function(def)
  if type(def) ~= "table" or type(def.forward) ~= "function" or type(def.backward) ~= "function" then
    error("autograd.Function expects {forward = function(ctx, ...), backward = function(ctx, grad)}", 2)
  end
  local F = {}
  function F.apply(...)
    local args = compat.pack(...)
    local ctx = setmetatable({saved_tensors = {}}, Ctx)
    local out = accel.no_grad(function() return def.forward(ctx, compat.unpack(args, 1, args.n)) end)
    if not accel.is_tensor(out) then error("autograd.Function forward must return a tensor", 2) end
    local inputs = {}
    for i = 1, args.n do
      inputs[i] = accel.is_tensor(args[i]) and args[i] or false
    end
    ctx.needs_input_grad = {}
    for i = 1, args.n do ctx.needs_input_grad[i] = inputs[i] and inputs[i].requires_grad or false end
    return accel._C.attach_custom(out, inputs, function(grad)
      local grads = compat.pack(def.backward(ctx, grad))
      return compat.unpack(grads, 1, args.n)
    end)
  end
  return setmetatable(F, {__call = function(_, ...) return F.apply(...) end})
end

autograd.no_grad = accel.no_grad
autograd.enable_grad = accel.enable_grad
autograd.set_grad_enabled = accel.set_grad_enabled

-- backward(tensor, grad): the functional form of t:backward(grad);
-- backward({t1, t2, ...}, {g1, g2, ...}): one backward pass from several
-- tensors at once, each with its gradient (torch.autograd.backward).
function autograd.backward(t, grad)
  if accel.is_tensor(t) then return t:backward(grad) end
  if type(t) ~= "table" or type(grad) ~= "table" then
    require("accel.util").raise("autograd.backward: expected a tensor, or a list of tensors and a list of gradients")
  end
  accel._C.backward_many(t, grad)
end

-- ctx.save_for_backward(x) (PyTorch spells it with a dot): "ctx:save_for_backward(...)"
require("accel.util").check_methods(Ctx, "ctx")

return autograd
