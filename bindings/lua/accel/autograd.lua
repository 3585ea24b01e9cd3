-- accel.autograd: custom differentiable operations written in Lua.
--
--   local Square = accel.autograd.Function{
--     forward = function(ctx, x) ctx:save_for_backward(x); return x * x end,
--     backward = function(ctx, g) local x = ctx.saved_tensors[1]; return g * 2 * x end,
--   }
--   local y = Square(x)           -- or Square.apply(x)
--
-- forward runs without recording a graph and returns one tensor, or
-- several values (each tensor gets the custom node; backward then receives
-- one gradient per output: zeros of the output's shape for one that got
-- none, or nil after ctx:set_materialize_grads(false), as PyTorch; nil for
-- a value that is not a tensor, returned as it is). With setup_context
-- (PyTorch's newer style) forward takes no ctx and
-- setup_context(ctx, inputs, output) saves what backward needs. Keys other
-- than forward, backward, setup_context and name are errors. backward returns one
-- gradient (or nil) per argument of forward, in order. As PyTorch checks:
-- ctx.needs_input_grad is set before forward; backward must return that
-- many gradients (extra ones only nil; trailing ones may be left out where
-- no gradient is needed, since Lua cannot tell a trailing nil from none),
-- none for an argument that is not a tensor, each of its input's shape or
-- one that shape expands to (the engine sums it back, as PyTorch's sum_to);
-- a tensor saved with ctx:save_for_backward and modified in place before
-- backward is an error. Outputs given to ctx:mark_non_differentiable do
-- not require grad. def.name names the function in errors.
local accel = require("accel")
local compat = require("accel.compat")
local util = require("accel.util")

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
  self.saved_tensors = saved -- n counts a nil among them too
end

-- PyTorch's default (true): an output that gets no gradient is given to
-- backward as zeros of its shape; false: as nil.
function Ctx:set_materialize_grads(on)
  if type(on) ~= "boolean" then util.raise("ctx:set_materialize_grads: expected a boolean, got %s", type(on)) end
  self._materialize = on
end

-- The outputs among these tensors do not require grad; backward gets zeros
-- (or nil, see set_materialize_grads) for them.
function Ctx:mark_non_differentiable(...)
  local marked = self._non_differentiable or {}
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if not accel.is_tensor(t) then
      util.raise("ctx:mark_non_differentiable only accepts tensors, but argument %d is a %s", i, type(t))
    end
    marked[t] = true
  end
  self._non_differentiable = marked
end

local shape_str = util.shape_str

-- The saved tensors' versions when forward returned (in-place changes since
-- then make backward's inputs wrong).
local function saved_versions(ctx)
  local v, saved = {}, ctx.saved_tensors
  for i = 1, saved.n or #saved do v[i] = accel.is_tensor(saved[i]) and saved[i]._version or false end
  return v
end

local function check_saved(name, ctx, versions)
  for i = 1, #versions do
    local t = ctx.saved_tensors[i]
    if versions[i] and t._version ~= versions[i] then
      error(("%s: saved tensor %d (shape %s) was modified by an in-place operation after forward, so its "
        .. "backward would use other values (version %d, saved at %d)"):format(name, i, shape_str(t), t._version,
        versions[i]), 0)
    end
  end
end

-- x's shape expands to g's (PyTorch's is_expandable_to)
local function expands_to(x, g)
  local lead = g:dim() - x:dim()
  if lead < 0 then return false end
  for i = 1, x:dim() do
    if x:size(i) ~= 1 and x:size(i) ~= g:size(i + lead) then return false end
  end
  return true
end

-- backward's results checked against forward's arguments. Lua cannot tell
-- a trailing nil from a missing value, so fewer results are fine while the
-- arguments left out need no gradient. A gradient x's shape expands to is
-- summed back to it by the engine.
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
    if g ~= nil and not accel.is_tensor(x) then
      error(("%s backward returned a gradient at index %d, but forward's argument %d is not a tensor (a %s): "
        .. "return nil there"):format(name, i, i, type(x)), 0)
    end
    if accel.is_tensor(g) and not expands_to(x, g) then
      error(("%s backward returned an invalid gradient at index %d: got %s but expected shape compatible with %s")
        :format(name, i, shape_str(g), shape_str(x)), 0)
    end
  end
end

-- The custom node's backward over the k differentiable outputs of n (at
-- positions at[1..k]): backward gets one gradient per output, zeros (made
-- from zeros[i] = {shape, opts}) where none came unless materializing is off.
local function all_output_grads(ctx, backward, n, at, zeros)
  return function(...)
    local got, g = compat.pack(...), {}
    for j = 1, got.n do g[at[j]] = got[j] end
    for i = 1, n do -- (a non-tensor output gets nil, as in PyTorch)
      if g[i] == nil and zeros[i] and ctx._materialize ~= false then g[i] = accel.zeros(zeros[i][1], zeros[i][2]) end
    end
    return backward(compat.unpack(g, 1, n))
  end
end

-- forward's outputs, the custom node attached to the tensors not marked
-- non-differentiable (the others come back detached; values that are not
-- tensors come back as they are).
local function attach_outputs(ctx, outs, inputs, backward, node_name)
  local marked = ctx._non_differentiable or {}
  if outs.n == 1 and accel.is_tensor(outs[1]) then
    if marked[outs[1]] then return outs[1]:detach() end
    return accel._C.attach_custom(outs[1], inputs, backward, node_name)
  end
  local res, list, at, zeros, k = {}, {}, {}, {}, 0
  for i = 1, outs.n do
    local o = outs[i]
    zeros[i] = accel.is_tensor(o) and {o.shape, {dtype = o.dtype, device = o.device}}
    if not zeros[i] then
      res[i] = o
    elseif marked[o] then
      res[i] = o:detach()
    else
      k = k + 1
      list[k], at[k] = o, i
    end
  end
  if k > 0 then
    local bw = all_output_grads(ctx, backward, outs.n, at, zeros)
    local attached = accel._C.attach_custom(list, inputs, bw, node_name)
    for j = 1, k do res[at[j]] = attached[j] end
  end
  return compat.unpack(res, 1, outs.n)
end

-- The keys of a Function's definition; PyTorch's jvp and vmap ones are refused by name.
local FUNCTION_KEYS = {forward = true, backward = true, setup_context = true, name = true}
local FUNCTION_REFUSED = {jvp = "forward-mode AD", vmap = "vmap", generate_vmap_rule = "vmap"}

local function check_definition(def)
  if type(def) ~= "table" or type(def.forward) ~= "function" or type(def.backward) ~= "function" then
    error("autograd.Function expects {forward = function(ctx, ...), backward = function(ctx, grad)}", 3)
  end
  for k in pairs(def) do
    if FUNCTION_REFUSED[k] then
      error(("autograd.Function: '%s' is not supported (%s is not provided)"):format(tostring(k), FUNCTION_REFUSED[k]), 3)
    elseif not FUNCTION_KEYS[k] then
      error(("autograd.Function: unknown key '%s' (keys: forward, backward, setup_context, name)"):format(tostring(k)), 3)
    end
  end
  if def.setup_context ~= nil and type(def.setup_context) ~= "function" then
    error(("autograd.Function: setup_context must be a function, got %s"):format(type(def.setup_context)), 3)
  end
end

-- forward's results: forward(ctx, ...), or with setup_context (PyTorch's
-- newer style) forward(...) then setup_context(ctx, inputs, output), output
-- being forward's one result or the list of them
local function run_forward(def, ctx, args)
  if not def.setup_context then return compat.pack(def.forward(ctx, compat.unpack(args, 1, args.n))) end
  local outs = compat.pack(def.forward(compat.unpack(args, 1, args.n)))
  local inputs = {}
  for i = 1, args.n do inputs[i] = args[i] end
  def.setup_context(ctx, inputs, outs.n == 1 and outs[1] or {compat.unpack(outs, 1, outs.n)})
  return outs
end

function autograd.Function(def)
  check_definition(def)
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
    local outs = accel.no_grad(run_forward, def, ctx, args)
    if outs.n == 0 then error(("%s forward returned nothing (a tensor, or several values)"):format(name), 2) end
    local versions = saved_versions(ctx)
    local backward = function(...)
      check_saved(name, ctx, versions)
      local grads = compat.pack(def.backward(ctx, ...))
      check_grads(name, grads, args, ctx.needs_input_grad)
      return compat.unpack(grads, 1, args.n)
    end
    local node_name = def.name and tostring(def.name) or nil -- the grad_fn's name (default "custom Function")
    return attach_outputs(ctx, outs, inputs, backward, node_name)
  end
  return setmetatable(F, {__call = function(_, ...) return F.apply(...) end})
end

autograd.no_grad = accel.no_grad
autograd.enable_grad = accel.enable_grad
autograd.set_grad_enabled = accel.set_grad_enabled
autograd.inference_mode = accel.inference_mode

-- autograd.backward(tensors, [grad_tensors], [retain_graph], [create_graph], [grad_variables], [inputs])
-- (torch.autograd.backward; the arguments after tensors also in an options
-- table): tensors is a tensor or a list of them, grad_tensors a tensor or a
-- list of them (nil, or a nil entry, for a one-element root: ones). One
-- tensor with a tensor or nil is t:backward(grad, retain_graph); otherwise
-- one backward pass from all the roots at once. create_graph = true,
-- grad_variables and inputs are refused, as by t:backward.
local BACKWARD_ARGS = {"retain_graph:bool", "create_graph:bool", "grad_variables", "inputs"}

-- a table of keyword options only (a list of gradients, even {nil, g}, has a number key)
local function keywords_only(v)
  if type(v) ~= "table" or accel.is_tensor(v) or next(v) == nil then return false end
  for k in pairs(v) do if type(k) ~= "string" then return false end end
  return true
end

-- The gradient of each root: given[i], or ones for a one-element root (op,
-- the names of the roots' and the gradients' arguments: for errors)
local function root_grads(op, roots, given, roots_name, given_name)
  local grads = {}
  for i, root in ipairs(roots) do
    local g = given and given[i]
    if g == nil then
      if root:numel() ~= 1 then
        util.raise("%s: grad can be implicitly created only for one-element outputs (%s[%d] has shape %s)", op,
          roots_name, i, tostring(root.shape))
      end
      g = accel.ones_like(root)
    elseif not accel.is_tensor(g) then
      util.raise("%s: %s[%d] is a %s, not a tensor", op, given_name, i, type(g))
    end
    grads[i] = g
  end
  return grads
end

function autograd.backward(t, grad_tensors, ...)
  local raise = util.raise
  local a
  if select("#", ...) == 0 and keywords_only(grad_tensors) then
    a = util.torch_args("autograd.backward", {"grad_tensors", BACKWARD_ARGS[1], BACKWARD_ARGS[2], BACKWARD_ARGS[3],
      BACKWARD_ARGS[4]}, grad_tensors)
  else
    a = util.torch_args("autograd.backward", BACKWARD_ARGS, ...)
    a.grad_tensors = grad_tensors
  end
  if a.create_graph then raise("autograd.backward: create_graph = true is not supported (no higher-order gradients)") end
  if a.grad_variables ~= nil or a.inputs ~= nil then
    raise("autograd.backward: %s is not supported", a.inputs ~= nil and "inputs" or "grad_variables")
  end
  local grad, retain = a.grad_tensors, a.retain_graph == true
  if grad ~= nil and type(grad) ~= "table" and not accel.is_tensor(grad) then
    raise("autograd.backward: argument 2 (grad_tensors) must be a tensor, a list of tensors (nil entries for "
      .. "one-element roots) or nil, got %s", type(grad))
  end
  if accel.is_tensor(t) and type(grad) ~= "table" then return t:backward(grad, retain) end
  if accel.is_tensor(t) then t = {t} end
  if accel.is_tensor(grad) then grad = {grad} end
  if type(t) ~= "table" then
    raise("autograd.backward: argument 1 (tensors) must be a tensor or a list of tensors, got %s", type(t))
  end
  for k in pairs(grad or {}) do
    if type(k) ~= "number" or k < 1 or k > #t or k ~= math.floor(k) then
      raise("autograd.backward: %d tensors but a gradient at index %s", #t, tostring(k))
    end
  end
  for i = 1, #t do
    if not accel.is_tensor(t[i]) then raise("autograd.backward: tensors[%d] is a %s, not a tensor", i, type(t[i])) end
  end
  accel._C.backward_many(t, root_grads("autograd.backward", t, grad, "tensors", "grad_tensors"), retain)
end

-- a tensor or a list of tensors as a list (what: the argument, for errors)
local function tensor_list(what, v)
  if accel.is_tensor(v) then return {v} end
  if type(v) ~= "table" then util.raise("autograd.grad: %s must be a tensor or a list of tensors, got %s", what, type(v)) end
  for i = 1, #v do
    if not accel.is_tensor(v[i]) then util.raise("autograd.grad: %s[%d] is a %s, not a tensor", what, i, type(v[i])) end
  end
  return v
end

local GRAD_ARGS = {"grad_outputs", "retain_graph:bool", "create_graph:bool", "only_inputs:bool", "allow_unused:bool",
  "is_grads_batched:bool", "materialize_grads:bool"}

-- autograd.grad(outputs, inputs, [grad_outputs], [retain_graph], [create_graph],
-- [only_inputs], [allow_unused], [is_grads_batched], [materialize_grads]), or
-- the options in a table: the gradients of outputs with respect to inputs
-- (a Lua list, one per input, as torch's tuple) from one backward pass that
-- leaves every .grad and DDP's reduction alone. An input no gradient
-- reaches is an error, nil with allow_unused, zeros with materialize_grads.
-- create_graph (higher-order gradients) and is_grads_batched are refused.
function autograd.grad(outputs, inputs, ...)
  local raise = util.raise
  local a = util.torch_args("autograd.grad", GRAD_ARGS, ...)
  if a.create_graph then raise("autograd.grad: create_graph = true is not supported (no higher-order gradients)") end
  if a.is_grads_batched then raise("autograd.grad: is_grads_batched = true is not supported") end
  if a.only_inputs == false then raise("autograd.grad: only_inputs = false is not supported (torch deprecated it)") end
  outputs, inputs = tensor_list("outputs", outputs), tensor_list("inputs", inputs)
  local given = a.grad_outputs
  if accel.is_tensor(given) then given = {given} end
  if given ~= nil and type(given) ~= "table" then
    raise("autograd.grad: grad_outputs must be a tensor or a list of tensors, got %s", type(given))
  end
  for i, y in ipairs(outputs) do
    if not y.requires_grad then
      raise("autograd.grad: element %d of tensors does not require grad and does not have a grad_fn", i)
    end
  end
  local grads = root_grads("autograd.grad", outputs, given, "outputs", "grad_outputs")
  for i, x in ipairs(inputs) do
    if not x.requires_grad then raise("autograd.grad: inputs[%d] does not require grad", i) end
  end
  local out = accel._C.grad(outputs, grads, inputs, a.retain_graph == true)
  for i, x in ipairs(inputs) do
    if out[i] == nil then
      if a.materialize_grads then out[i] = accel.zeros_like(x)
      elseif not a.allow_unused then
        raise("autograd.grad: inputs[%d] appears to not have been used in the graph; set allow_unused = true if this "
          .. "is the desired behavior", i)
      end
    end
  end
  return out
end

-- PyTorch's autograd functions that are not provided: an error naming them
util.not_provided(autograd, {functional = true, forward_ad = true, gradcheck = true,
  set_detect_anomaly = true, detect_anomaly = true}, "accel.autograd", "docs/api/autograd.md")

-- PyTorch's ctx.mark_dirty (in-place custom Functions) is not provided
function Ctx.mark_dirty()
  util.raise("ctx:mark_dirty is not provided: a custom Function's forward may not modify its inputs in place here; "
    .. "return new tensors (docs/api/autograd.md)")
end

-- ctx.save_for_backward(x) (PyTorch spells it with a dot): "ctx:save_for_backward(...)"
util.check_methods(Ctx, "ctx")

return autograd
