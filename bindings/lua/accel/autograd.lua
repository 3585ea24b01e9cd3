-- accel.autograd: custom differentiable operations written in Lua.
--
--   local Square = accel.autograd.Function{
--     forward = function(ctx, x) ctx:save_for_backward(x); return x * x end,
--     backward = function(ctx, g) local x = ctx.saved_tensors[1]; return g * 2 * x end,
--   }
--   local y = Square(x)           -- or Square.apply(x)
--
-- forward runs without recording a graph and returns one tensor, or
-- several (each gets the custom node; backward then receives one gradient
-- per output); backward returns one gradient (or nil) per argument of
-- forward, in order. As PyTorch checks: ctx.needs_input_grad is set before
-- forward; backward must return that many gradients (extra ones only nil;
-- trailing ones may be left out where no gradient is needed, since Lua
-- cannot tell a trailing nil from none), each of its input's shape; a tensor saved with ctx:save_for_backward and
-- modified in place before backward is an error. def.name names the
-- function in errors.
local accel = require("accel")
local compat = require("accel.compat")

local autograd = {}

local Ctx = {}
Ctx.__index = Ctx

function Ctx:save_for_backward(...)
  local saved = compat.pack(...)
  for i = 1, saved.n do
    if saved[i] ~= nil and not accel.is_tensor(saved[i]) then
      error(("save_for_backward can only save tensors (or nil), but argument %d is a %s"):format(i, type(saved[i])), 2)
    end
  end
  self.saved_tensors = {...}
end

local function shape_str(t)
  local d = {}
  for i = 1, t:dim() do d[i] = t:size(i) end
  return "[" .. table.concat(d, ", ") .. "]"
end

-- The saved tensors' versions when forward returned (in-place changes since
-- then make backward's inputs wrong).
local function saved_versions(ctx)
  local v = {}
  for i, t in ipairs(ctx.saved_tensors) do v[i] = accel.is_tensor(t) and t._version or false end
  return v
end

local function check_saved(name, ctx, versions)
  for i, t in ipairs(ctx.saved_tensors) do
    if versions[i] and t._version ~= versions[i] then
      error(("%s: saved tensor %d (shape %s) was modified by an in-place operation after forward, so its "
        .. "backward would use other values (version %d, saved at %d)"):format(name, i, shape_str(t), t._version,
        versions[i]), 0)
    end
  end
end

-- backward's results checked against forward's arguments. Lua cannot tell
-- a trailing nil from a missing value, so fewer results are fine while the
-- arguments left out need no gradient.
local function check_grads(name, grads, args, needs)
  local function count_error()
    error(("%s backward returned an incorrect number of gradients (expected %d, got %d)"):format(name, args.n,
      grads.n), 0)
  end
  for i = args.n + 1, grads.n do
    if grads[i] ~= nil then count_error() end
  end
  for i = grads.n + 1, args.n do
    if needs[i] then count_error() end
  end
  for i = 1, args.n do
    local g, x = grads[i], args[i]
    if g ~= nil and accel.is_tensor(x) and accel.is_tensor(g) and shape_str(g) ~= shape_str(x) then
      error(("%s backward returned an invalid gradient at index %d: got %s but expected shape %s"):format(name, i,
        shape_str(g), shape_str(x)), 0)
    end
  end
end

function autograd.Function(def)
  if type(def) ~= "table" or type(def.forward) ~= "function" or type(def.backward) ~= "function" then
    error("autograd.Function expects {forward = function(ctx, ...), backward = function(ctx, grad)}", 2)
  end
  local name = "autograd.Function" .. (def.name and (" " .. tostring(def.name)) or "")
  local F = {}
  function F.apply(...)
    local args = compat.pack(...)
    local ctx = setmetatable({saved_tensors = {}}, Ctx)
    local inputs = {}
    ctx.needs_input_grad = {}
    for i = 1, args.n do
      inputs[i] = accel.is_tensor(args[i]) and args[i] or false
      ctx.needs_input_grad[i] = inputs[i] and inputs[i].requires_grad or false
    end
    local outs = accel.no_grad(function() return compat.pack(def.forward(ctx, compat.unpack(args, 1, args.n))) end)
    for i = 1, math.max(outs.n, 1) do
      if not accel.is_tensor(outs[i]) then
        error(("%s forward must return a tensor, or several (value %d is %s)"):format(name, i, type(outs[i])), 2)
      end
    end
    local versions = saved_versions(ctx)
    local backward = function(...)
      check_saved(name, ctx, versions)
      local grads = compat.pack(def.backward(ctx, ...))
      check_grads(name, grads, args, ctx.needs_input_grad)
      return compat.unpack(grads, 1, args.n)
    end
    local node_name = def.name and tostring(def.name) or nil -- the grad_fn's name (default "custom Function")
    if outs.n == 1 then return accel._C.attach_custom(outs[1], inputs, backward, node_name) end
    local list = {}
    for i = 1, outs.n do list[i] = outs[i] end
    return compat.unpack(accel._C.attach_custom(list, inputs, backward, node_name), 1, outs.n)
  end
  return setmetatable(F, {__call = function(_, ...) return F.apply(...) end})
end

autograd.no_grad = accel.no_grad
autograd.enable_grad = accel.enable_grad
autograd.set_grad_enabled = accel.set_grad_enabled

-- backward(tensor, grad): the functional form of t:backward(grad);
-- backward({t1, t2, ...}, {g1, g2, ...}): one backward pass from several
-- tensors at once, each with its gradient (torch.autograd.backward).
-- autograd.backward(tensors, [grad_tensors]): a tensor, or a list of them
-- with a list of gradients (nil, or a nil entry, for a one-element root:
-- ones, as torch.autograd.backward). torch's retain_graph / create_graph /
-- inputs are refused, as by t:backward.
function autograd.backward(t, grad, ...)
  local raise = require("accel.util").raise
  if select("#", ...) > 0 and (...) ~= nil then
    raise("autograd.backward: argument 3 is not supported (retain_graph, create_graph, grad_variables and inputs "
      .. "are not), got %s", type((...)))
  end
  if accel.is_tensor(t) then return t:backward(grad) end
  if type(t) ~= "table" then raise("autograd.backward: expected a tensor or a list of tensors, got %s", type(t)) end
  if grad ~= nil and type(grad) ~= "table" then
    raise("autograd.backward: grad_tensors must be a list of tensors (nil entries for one-element roots), got %s",
      type(grad))
  end
  for k in pairs(grad or {}) do
    if type(k) ~= "number" or k < 1 or k > #t or k ~= math.floor(k) then
      raise("autograd.backward: %d tensors but a gradient at index %s", #t, tostring(k))
    end
  end
  local grads = {}
  for i = 1, #t do
    local root, g = t[i], grad and grad[i]
    if not accel.is_tensor(root) then raise("autograd.backward: tensors[%d] is a %s, not a tensor", i, type(root)) end
    if g == nil then
      if root:numel() ~= 1 then
        raise("autograd.backward: grad can be implicitly created only for one-element outputs (tensors[%d] has shape "
          .. "%s)", i, tostring(root.shape))
      end
      g = accel.ones_like(root)
    elseif not accel.is_tensor(g) then
      raise("autograd.backward: grad_tensors[%d] is a %s, not a tensor", i, type(g))
    end
    grads[i] = g
  end
  accel._C.backward_many(t, grads)
end

-- PyTorch's autograd functions that are not provided: an error naming them
require("accel.util").not_provided(autograd, {grad = true, functional = true, forward_ad = true}, "accel.autograd",
  "docs/api/autograd.md")

-- ctx.save_for_backward(x) (PyTorch spells it with a dot): "ctx:save_for_backward(...)"
require("accel.util").check_methods(Ctx, "ctx")

return autograd
