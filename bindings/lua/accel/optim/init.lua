-- accel.optim: PyTorch's optimizers SGD, Adam and AdamW (RMSprop, Adagrad,
-- Adadelta, Adamax, NAdam and RAdam: accel.optim.elementwise, loaded on
-- first use). Each param group is
-- updated by ONE fused C call (accel._C.sgd_step / adam_step over flat
-- buffers); this file keeps param groups and per-parameter state.
-- accel.optim.lr_scheduler holds the schedulers.
--
--   local opt = optim.AdamW(model:parameters(), {lr = 1e-3, weight_decay = 0.01})
--   local opt = optim.SGD({{params = body}, {params = head, lr = 1e-2}}, {lr = 0.1, momentum = 0.9})
--   loss:backward(); opt:step(); opt:zero_grad()
--
-- PyTorch's semantics (update formulas, bias correction, defaults, params
-- with a nil grad skipped, state_dict layout). Decisions where PyTorch does
-- not carry over, or where versions differ:
-- * Defaults follow current PyTorch (2.x) where it differs from 1.13:
--   zero_grad() sets grads to nil (set_to_none = true), SGD's lr defaults to
--   1e-3.
-- * state_dict(): {state = {[i] = {step = n, exp_avg = t, exp_avg_sq = t,
--   max_exp_avg_sq = t} or {momentum_buffer = t}}, param_groups = {{lr = ...,
--   betas = {b1, b2}, ..., params = {i, ...}}}} with i the 1-based position
--   of the parameter across all groups; `step` is a number; state tensors are
--   the live ones (as PyTorch). load_state_dict copies them, cast to the
--   parameter's dtype and device (so are the numbers of a class's
--   _scalar_state, PyTorch's 0-dim tensors), and checks their shapes. Keys
--   of `state` may be numbers or numeric strings (from JSON).
-- * SGD with momentum = 0 keeps no state (PyTorch stores momentum_buffer =
--   None, which a Lua table cannot hold).
-- * A parameter listed twice, in one group or across groups, is an error
--   (PyTorch warns for the first); parameters must be float32 / float64
--   leaf tensors. Hyper-parameters are validated for every group, not only
--   the defaults. Unknown options are an error (a param group may carry keys
--   of its own, as in PyTorch: a name, a scheduler's initial_lr; its
--   hyper-parameters get the options' checks); foreach / fused / capturable are
--   accepted and ignored (updates are always fused; kept in the group as
--   given, and printed), differentiable = true is refused. lr may be a 1-element tensor: its value is read when the
--   optimizer or the group is made (later changes to it are not seen).
-- * SGD / Adam / AdamW take lr positionally too: SGD(params, 0.1, {...}).
-- * Named parameters (model:named_parameters()'s iterator, or {name, tensor}
--   pairs) give the group PyTorch 2.15's param_names. A nil inside a list is
--   an error (ipairs would drop what follows it; PyTorch refuses a None).
-- * Module:to gives moved parameters new objects (PyTorch moves them in
--   place): it switches every optimizer made to them (optim._follow), their
--   state kept where it is, so an optimizer keeps training a moved model.
-- * load_state_dict refuses a parameter state with keys this optimizer does
--   not keep or without those it needs (a state_dict of another optimizer).
--   Its checks are one method, _state_dict_problem(sd), which changes
--   nothing: Accelerator:load_state runs it before it loads anything.
-- * Custom optimizers: `local My = optim.Optimizer:extend("My")`, define
--   `My:init(params, opts)` calling `optim.Optimizer.init(self, params,
--   defaults)` and `My:step(closure)`.
local accel = require("accel")
local C = accel._C

local optim = {}

-- ---- errors at the user's line ----

local util = require("accel.util")
local compat = require("accel.compat")
local raise = util.raise
optim._raise = raise

local is_tensor = accel.is_tensor

local copy_plain = util.copy_plain -- betas, lists: copied; tensors shared

local function show(v)
  if type(v) == "table" and not is_tensor(v) then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = show(x) end
    return "(" .. table.concat(parts, ", ") .. ")"
  end
  if type(v) == "boolean" then return v and "True" or "False" end -- as PyTorch prints a group
  if type(v) == "number" then return util.py_repr_number(v) end
  return tostring(v)
end

-- ---- Optimizer base class ----

local Optimizer = {}
Optimizer.__index = Optimizer
Optimizer.__name = "Optimizer"
optim.Optimizer = Optimizer

local function new_instance(cls, ...)
  local self = setmetatable({}, cls)
  self:init(...)
  return self
end

-- ---- step hooks: torch's register_step_pre_hook / register_step_post_hook ----

-- hook(optimizer, args) runs before (pre) or after (post) every step of
-- this optimizer; args is the list of step's arguments (args.n of them: the
-- closure, if any); a pre hook may return a new list, which step then
-- takes. Returns a handle whose remove() takes the hook off.
local function add_step_hook(self, kind, hook)
  if not util.callable(hook) then
    raise("%s.register_step_%s_hook: hook must be a function, got %s", self.__name, kind, type(hook))
  end
  local key = "_step_" .. kind .. "_hooks"
  local list = rawget(self, key) or {}
  rawset(self, key, list)
  local entry = {fn = hook}
  list[#list + 1] = entry
  return {remove = function()
    for i, e in ipairs(list) do
      if e == entry then return table.remove(list, i) and nil end
    end
  end}
end

-- step (a function of the optimizer and step's arguments) with the
-- optimizer's step hooks around it: what every optimizer class's step is
-- (Optimizer:extend), and a sharding engine's step in its place
function optim._with_step_hooks(step)
  return function(self, ...)
    local pre, post = rawget(self, "_step_pre_hooks"), rawget(self, "_step_post_hooks")
    if not pre and not post then return step(self, ...) end
    local args = compat.pack(...)
    for _, e in ipairs(pre or {}) do
      local new = e.fn(self, args)
      if new ~= nil then
        if type(new) ~= "table" then
          raise("%s: a step pre-hook must return nil or a list of step's arguments, got %s", self.__name, type(new))
        end
        args = new
        args.n = args.n or #new
      end
    end
    local results = compat.pack(step(self, compat.unpack(args, 1, args.n)))
    for _, e in ipairs(post or {}) do e.fn(self, args) end
    return compat.unpack(results, 1, results.n)
  end
end

-- Optimizer:extend(name): a subclass, constructed by calling it.
function Optimizer:extend(name)
  local cls = {}
  for k, v in pairs(self) do
    if type(k) == "string" and k:sub(1, 2) == "__" then cls[k] = v end
  end
  cls.__index = cls
  cls.__name = name
  cls._super = self
  -- methods defined on the class later are checked (accel.util.check_methods)
  local function is_instance(x) return util.instance_of(x, cls) end
  local function define(c, k, v)
    if k == "step" and type(v) == "function" then v = optim._with_step_hooks(v) end
    rawset(c, k, util.method_field(k, v, name, is_instance))
  end
  return setmetatable(cls, {__index = self, __call = new_instance, __newindex = define})
end

-- isinstance(x, Optimizer) for any subclass, and for the optimizer
-- Accelerator:prepare returns (Accelerate's AcceleratedOptimizer subclasses
-- torch.optim.Optimizer)
function optim.is_optimizer(x)
  if require("accel.prepared").is_optimizer(x) then return true end
  local mt = type(x) == "table" and getmetatable(x)
  while mt do
    if mt == Optimizer then return true end
    mt = rawget(mt, "_super")
  end
  return false
end

-- A (name, tensor) pair of named_parameters(), written {name, tensor}.
local function is_named(x)
  return type(x) == "table" and not is_tensor(x) and type(x[1]) == "string" and x[3] == nil and x.params == nil
end

-- The items of an iterator function (model:named_parameters()) as a list:
-- {name, tensor} pairs, or the values of a one-value iterator.
local function drain(f)
  local list = {}
  for k, v in f do list[#list + 1] = v == nil and k or {k, v} end
  return list
end

-- Optimizer.init(self, params, defaults): params is a list of tensors, of
-- {name, tensor} pairs or of param-group tables {params = {...}, lr = ...},
-- or the iterator model:named_parameters() returns.
-- Every optimizer made (weak keys): Module:to and prepare switch those that
-- hold the parameters they replace (optim._follow).
local live = setmetatable({}, {__mode = "k"})

-- optimizer: every parameter in map (old -> new) replaced in its groups, its
-- state kept under the new one (where it is: PyTorch's module.to moves a
-- parameter in place, leaving the optimizer state alone).
function optim._switch_parameters(optimizer, map)
  for _, g in ipairs(optimizer.param_groups or {}) do
    for i, p in ipairs(g.params) do
      local n = map[p]
      if n ~= nil then g.params[i] = n end
    end
  end
  local state = optimizer.state
  if type(state) ~= "table" then return end
  for old, new in pairs(map) do
    if state[old] ~= nil then state[new], state[old] = state[old], nil end
  end
end

-- Every live optimizer switched to the parameters of map (old -> new).
function optim._follow(map)
  if next(map) == nil then return end
  for opt in pairs(live) do optim._switch_parameters(opt, map) end
end

function Optimizer:init(params, defaults)
  local name = self.__name
  live[self] = true
  self.defaults = defaults
  self.state = {}
  self.param_groups = {}
  if type(params) == "function" then params = drain(params) end
  if is_tensor(params) then
    raise("%s: params must be a list of tensors or of param-group tables, got a single tensor (wrap it: {t})", name)
  end
  if type(params) ~= "table" then
    raise("%s: params must be a list of tensors or of param-group tables, got %s", name, type(params))
  end
  util.check_list(params, name, "params")
  if params[1] == nil and next(params) ~= nil then
    raise("%s: params must be a list of tensors or of param-group tables, got a table that is not a list "
      .. "(for a module, pass model:parameters())", name)
  end
  if #params == 0 then raise("%s: optimizer got an empty parameter list", name) end
  local groups = params
  if is_tensor(params[1]) or is_named(params[1]) then groups = {{params = params}} end
  for _, g in ipairs(groups) do self:add_param_group(g) end
end

-- Hyper-parameter checks of one group; subclasses override.
function Optimizer:_check_group(group) end -- luacheck: ignore

local function check_number(name, group, key)
  local v = group[key]
  if type(v) ~= "number" then raise("%s: option '%s' must be a number, got %s", name, key, type(v)) end
  return v
end

-- check_number and v >= 0; NaN fails too (PyTorch: `not 0.0 <= v`)
local function check_nonnegative(name, group, key, what)
  local v = check_number(name, group, key)
  if not (v >= 0) then raise("%s: Invalid %s: %s", name, what, tostring(v)) end
  return v
end

local function check_params(name, list)
  local seen = {}
  for i, p in ipairs(list) do
    if not is_tensor(p) then
      raise("%s: optimizer can only optimize tensors, but params[%d] is a %s", name, i, type(p))
    end
    if not p.is_leaf then raise("%s: can't optimize a non-leaf tensor (params[%d])", name, i) end
    if p.dtype ~= accel.float32 and p.dtype ~= accel.float64 then
      raise("%s: params[%d] is %s; optimizers update float32 or float64 parameters", name, i, tostring(p.dtype))
    end
    if seen[p] then
      raise("%s: params[%d] is the same tensor as params[%d]; a parameter may appear only once", name, i, seen[p])
    end
    seen[p] = i
  end
end

-- The tensors of the list ps and, when its items are {name, tensor} pairs,
-- their names (PyTorch's param_names; all or none must be named).
local function split_named(name, ps)
  util.check_list(ps, name, "params")
  local list, names = {}, {}
  for i, p in ipairs(ps) do
    if is_named(p) then
      names[#names + 1] = p[1]
      p = p[2]
    end
    list[i] = p
  end
  if #names == 0 then return list, nil end
  if #names ~= #list then
    raise("%s: all optimizer params should be with/without names. Some param names are missing", name)
  end
  return list, names
end

function Optimizer:add_param_group(group)
  local name = self.__name
  if type(group) ~= "table" or is_tensor(group) then raise("%s: a param group must be a table {params = ...}", name) end
  local ps = group.params
  if is_tensor(ps) then ps = {ps} end
  if type(ps) == "function" then ps = drain(ps) end
  if type(ps) ~= "table" then raise("%s: a param group needs a 'params' list of tensors", name) end
  local g = {}
  for k, v in pairs(group) do
    if k ~= "params" then g[k] = self:_group_value(k, v) end
  end
  local list, names = split_named(name, ps)
  check_params(name, list)
  if names then g.param_names = names end
  local taken = {}
  for _, other in ipairs(self.param_groups) do
    for _, p in ipairs(other.params) do taken[p] = true end
    if (other.param_names ~= nil) ~= (g.param_names ~= nil) then
      raise("%s: all optimizer param groups should be with/without names. cannot add param group %s names to the "
        .. "optimizer", name, g.param_names and "with" or "without")
    end
  end
  for _, p in ipairs(list) do
    if taken[p] then raise("%s: some parameters appear in more than one parameter group", name) end
  end
  for k, v in pairs(self.defaults) do
    if g[k] == nil then g[k] = copy_plain(v) end
  end
  g.params = list
  self:_check_group(g)
  self.param_groups[#self.param_groups + 1] = g
end

-- zero_grad([{set_to_none = true}]) (or PyTorch's positional boolean)
local ZERO_GRAD_KEYS, ZERO_GRAD_POSITIONAL = {"set_to_none"}, {{"set_to_none", "boolean"}}
function optim._zero_grad_options(...)
  return util.opts_of("zero_grad", ZERO_GRAD_KEYS, ZERO_GRAD_POSITIONAL, ...)
end

function Optimizer:zero_grad(...)
  local set_to_none = optim._zero_grad_options(...).set_to_none ~= false
  for _, g in ipairs(self.param_groups) do
    if set_to_none then
      C.clear_grads(g.params) -- no Lua handle to the gradients (see bindings/optim_lua.c)
    else
      for _, p in ipairs(g.params) do
        local grad = p.grad
        if grad ~= nil then
          if grad.grad_fn then grad:detach_() elseif grad.requires_grad then grad:requires_grad_(false) end
          grad:zero_()
        end
      end
    end
  end
end

function Optimizer:step(closure) -- luacheck: ignore
  raise("%s: step() is not implemented", self.__name)
end

-- The closure's loss, evaluated with gradients enabled (nil without one);
-- name: the optimizer, for the error when closure cannot be called.
local function run_closure(closure, name)
  if closure == nil then return nil end
  if not util.callable(closure) then
    raise("%s.step: closure must be a function (or a callable table), got %s", name, type(closure))
  end
  return accel.enable_grad(closure)
end
optim._run_closure = run_closure

-- Name for errors of group gi.
function Optimizer:_who(gi)
  if #self.param_groups == 1 then return self.__name end
  return ("%s (param group %d)"):format(self.__name, gi)
end

function Optimizer:state_dict()
  local index, n, groups = {}, 0, {}
  for gi, g in ipairs(self.param_groups) do
    local packed = {}
    for k, v in pairs(g) do
      if k ~= "params" then packed[k] = copy_plain(v) end
    end
    local ids = {}
    for i, p in ipairs(g.params) do
      if index[p] == nil then
        n = n + 1
        index[p] = n
      end
      ids[i] = index[p]
    end
    packed.params = ids
    groups[gi] = packed
  end
  local state = {}
  for p, st in pairs(self.state) do
    if index[p] and next(st) ~= nil then
      local s = {}
      for k, v in pairs(st) do s[k] = v end
      state[index[p]] = s
    end
  end
  return {state = state, param_groups = groups}
end

local shape_str = util.shape_str

local sorted_keys = util.sorted_keys

-- Why a non-empty saved state lacks a key in kept.required or has one in
-- neither kept.required nor kept.optional (kept: the class's _state_keys;
-- nil for custom optimizers, which are not checked); nil when it fits.
local function state_keys_problem(name, id, saved, keys, kept)
  if not kept or #keys == 0 then return nil end
  for _, k in ipairs(kept.required) do
    if saved[k] == nil then
      return ("the state of parameter %d has no '%s' (a state_dict of another optimizer?)"):format(id, k)
    end
  end
  local known = {}
  for _, list in pairs(kept) do
    for _, k in ipairs(list) do known[k] = true end
  end
  for _, k in ipairs(keys) do
    if not known[k] then
      return ("the state of parameter %d has '%s', which %s does not keep (a state_dict of another optimizer?)"):format(
        id, tostring(k), name)
    end
  end
end

-- Why one saved state entry cannot be the state of parameter p (number
-- id): not a table, its keys, a tensor of another shape (step and the
-- class's _scalar_state: one element); nil when it fits.
local function param_state_problem(name, id, p, saved, kept, scalar)
  if type(saved) ~= "table" or is_tensor(saved) then return ("state of parameter %d must be a table"):format(id) end
  local keys = sorted_keys(saved)
  local why = state_keys_problem(name, id, saved, keys, kept)
  if why then return why end
  for _, k in ipairs(keys) do
    local v = saved[k]
    if is_tensor(v) and (k == "step" or scalar[k]) then
      if v:numel() ~= 1 then
        return ("state '%s' of parameter %d must be a number or a one-element tensor, got shape %s"):format(k, id,
          shape_str(v))
      end
    elseif is_tensor(v) and shape_str(v) ~= shape_str(p) then
      return ("state '%s' of parameter %d has shape %s but the parameter has shape %s"):format(tostring(k), id,
        shape_str(v), shape_str(p))
    end
  end
end

-- The class's _scalar_state keys as a set.
local function scalar_keys(self)
  local set = {}
  for _, k in ipairs(self._scalar_state or {}) do set[k] = true end
  return set
end

-- What load_state_dict(sd) would refuse, as the message after
-- "<name>: load_state_dict: ", and nil when sd fits: its groups and their
-- sizes, state only for grouped parameters, the state keys this class
-- keeps, every state tensor's shape. Changes nothing; also the check
-- Accelerator:load_state runs before it loads anything. The second result
-- maps each saved parameter id to the optimizer's parameter.
function Optimizer:_state_dict_problem(sd)
  if type(sd) ~= "table" or type(sd.state) ~= "table" or type(sd.param_groups) ~= "table" then
    return "expected a table {state = ..., param_groups = ...} from state_dict()"
  end
  local name, groups, saved = self.__name or "optimizer", self.param_groups, sd.param_groups
  if #groups ~= #saved then
    return ("loaded state dict has %d parameter groups, but the optimizer has %d"):format(#saved, #groups)
  end
  local id_map = {}
  for i, g in ipairs(groups) do
    local sp = type(saved[i]) == "table" and saved[i].params
    if type(sp) ~= "table" or #sp ~= #g.params then
      return ("loaded state dict's parameter group %d has %d parameters, but the optimizer's group has %d"):format(i,
        type(sp) == "table" and #sp or 0, #g.params)
    end
    for j, id in ipairs(sp) do id_map[tonumber(id) or id] = g.params[j] end
  end
  for k, st in pairs(sd.state) do
    local id = tonumber(k)
    local p = id and id_map[id]
    if not p then
      return ("loaded state dict has state for parameter %s, which is in none of its parameter groups"):format(
        tostring(k))
    end
    local why = param_state_problem(name, id, p, st, self._state_keys, scalar_keys(self))
    if why then return why end
  end
  return nil, id_map
end

-- The number state a class names in _scalar_state (NAdam's mu_product,
-- ASGD's eta and mu) stands for PyTorch's 0-dim float32 tensors, which
-- PyTorch's load_state_dict casts to the parameter's dtype (its
-- _process_value_according_to_param_policy; `step` is left as it is).
-- scalar_dtype[st]: that dtype for a loaded state table st (weak keys).
local scalar_dtype = setmetatable({}, {__mode = "k"})

-- v rounded to the dtype the _scalar_state of state table st is kept in:
-- float32, or float64 once load_state_dict cast it to a float64 parameter's.
local function round_scalar(st, v)
  if scalar_dtype[st] == accel.float64 then return v end
  return require("accel.amp").round_f32(v)
end

-- A private copy of one saved state entry (checked) for parameter p;
-- scalar: the class's _scalar_state keys as a set.
local function copy_param_state(p, saved, scalar)
  local st = {}
  scalar_dtype[st] = p.dtype
  for k, v in pairs(saved) do
    if (k == "step" or scalar[k]) and is_tensor(v) then v = v:item() end
    if scalar[k] and type(v) == "number" then v = round_scalar(st, v) end
    if is_tensor(v) then
      local c, copied = v:detach(), false
      if tostring(c.device) ~= tostring(p.device) then c, copied = c:to(p.device), true end
      if c.dtype ~= p.dtype then c, copied = c:to(p.dtype), true end
      if not copied then c = c:clone() end
      v = c:contiguous()
    elseif type(v) == "table" then
      v = copy_plain(v)
    end
    st[k] = v
  end
  return st
end

function Optimizer:load_state_dict(sd)
  local why, id_map = self:_state_dict_problem(sd)
  if why then raise("%s: load_state_dict: %s", self.__name, why) end
  local state, scalar = {}, scalar_keys(self)
  for k, st in pairs(sd.state) do
    local p = id_map[tonumber(k)]
    state[p] = copy_param_state(p, st, scalar)
  end
  for i, g in ipairs(self.param_groups) do
    for k, v in pairs(sd.param_groups[i]) do
      if k ~= "params" then g[k] = copy_plain(v) end
    end
  end
  self.state = state
end

-- PyTorch's Optimizer.__repr__: each group's keys sorted, the groups apart
-- by a blank line (numbered from 1, as opt.param_groups). Keys of the
-- class's _torch_keys that a group lacks (not given: their PyTorch
-- default) are printed as PyTorch prints that default.
function Optimizer:__tostring()
  local out, extra = {self.__name .. " ("}, self._torch_keys or {}
  for gi, g in ipairs(self.param_groups) do
    if gi > 1 then out[#out + 1] = "" end
    out[#out + 1] = ("Parameter Group %d"):format(gi)
    local keys, text = {}, {}
    for k, v in pairs(extra) do keys[#keys + 1], text[k] = k, v end
    for k in pairs(g) do
      if k ~= "params" and text[k] == nil then keys[#keys + 1] = tostring(k) end
      if k ~= "params" then text[tostring(k)] = show(g[k]) end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do out[#out + 1] = ("    %s: %s"):format(k, text[k]) end
  end
  out[#out + 1] = ")"
  return table.concat(out, "\n")
end

-- ---- options ----

-- Options accepted and ignored (updates are always fused); a given value
-- is kept in the group, as PyTorch keeps it (and prints it).
local IGNORED = {foreach = true, fused = true, capturable = true}

-- The option keys an optimizer with these defaults takes, sorted.
local function option_keys(defaults)
  local keys = {"differentiable"}
  for k in pairs(defaults) do keys[#keys + 1] = k end
  for k in pairs(IGNORED) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- The value option k = v takes, or an error: an unknown key,
-- differentiable = true, a tensor lr that is not 1-element (read as a number).
local function option_value(name, known, k, v)
  if k == "differentiable" and v then raise("%s: differentiable = true is not supported", name) end
  if IGNORED[k] or k == "differentiable" then return copy_plain(v) end
  if known[k] == nil then util.unknown_option(name, k, option_keys(known)) end
  if k == "lr" and is_tensor(v) then
    if v:numel() ~= 1 then raise("%s: Tensor lr must be 1-element, got %d elements", name, v:numel()) end
    return v:item()
  end
  return copy_plain(v)
end

-- A param group's key k = v: a hyper-parameter gets the checks of the
-- options; any other key (a name of the user's, a scheduler's initial_lr)
-- is carried along, as PyTorch carries it.
function Optimizer:_group_value(k, v)
  if self.defaults[k] == nil and k ~= "differentiable" and not IGNORED[k] then return copy_plain(v) end
  return option_value(self.__name, self.defaults, k, v)
end

-- opts merged over defaults; unknown keys are an error.
local function options(name, opts, defaults)
  if opts ~= nil and type(opts) ~= "table" then
    raise("%s: expected lr (a number) or an options table after params, got %s", name, type(opts))
  end
  local d = {}
  for k, v in pairs(defaults) do d[k] = copy_plain(v) end
  for k, v in pairs(opts or {}) do d[k] = option_value(name, defaults, k, v) end
  if d.fused == true and d.foreach == true then raise("%s: `fused` and `foreach` cannot be `True` together.", name) end
  return d
end

-- PyTorch's Adam / AdamW refuse a tensor lr with foreach = true (and
-- capturable false) at construction.
local function check_tensor_lr_foreach(name, o)
  if type(o) == "table" and is_tensor(o.lr) and o.foreach == true and o.capturable ~= true then
    raise("%s: lr as a Tensor is not supported for capturable=False and foreach=True", name)
  end
  return o
end

-- The options of (params, [lr], [opts]): PyTorch's lr may come positionally.
local function ctor_options(name, lr, opts)
  if type(lr) ~= "number" and not is_tensor(lr) then
    if opts ~= nil then raise("%s: expected (params, [lr], [options]), got a %s before the options", name, type(lr)) end
    return lr
  end
  if opts ~= nil and type(opts) ~= "table" then raise("%s: options must be a table, got %s", name, type(opts)) end
  if opts and opts.lr ~= nil then raise("%s: lr given twice (positionally and in the options)", name) end
  local o = copy_plain(opts or {})
  o.lr = lr
  return o
end

local function check_bool(name, group, key)
  if type(group[key]) ~= "boolean" then raise("%s: option '%s' must be a boolean, got %s", name, key, type(group[key])) end
end

-- ---- what the optimizers' steps share ----

-- p's entry of an optimizer's state table, created empty on first use.
local function param_state(state, p)
  local st = state[p]
  if not st then
    st = {}
    state[p] = st
  end
  return st
end

-- An optimizer's step: runs closure, then
-- step_group(self, gi, g, grads) for each param group g where some
-- parameter has a .grad (grads[i]: whether g.params[i] has one; the C step
-- reads the gradients itself); returns the closure's loss.
local function step_groups(self, closure, step_group)
  local loss = run_closure(closure, self.__name)
  for gi, g in ipairs(self.param_groups) do
    local grads = C.has_grads(g.params)
    for i = 1, #grads do
      if grads[i] then
        step_group(self, gi, g, grads)
        break
      end
    end
  end
  return loss
end

-- ---- SGD ----

local SGD = Optimizer:extend("SGD")
optim.SGD = SGD

local SGD_DEFAULTS = {lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false}

-- SGD(params, [lr], {lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false})
function SGD:init(params, lr, opts)
  Optimizer.init(self, params, options("SGD", ctor_options("SGD", lr, opts), SGD_DEFAULTS))
end

-- The keys PyTorch 2.15's SGD groups hold beyond ours, as it prints their defaults.
SGD._torch_keys = {differentiable = "False", foreach = "None", fused = "None"}

-- What an SGD state holds (step: from a sharded checkpoint).
SGD._state_keys = {required = {}, optional = {"momentum_buffer", "step"}}

function SGD:_check_group(g)
  local name = self.__name
  check_nonnegative(name, g, "lr", "learning rate")
  check_nonnegative(name, g, "momentum", "momentum value")
  check_number(name, g, "dampening")
  check_nonnegative(name, g, "weight_decay", "weight_decay value")
  check_bool(name, g, "nesterov")
  check_bool(name, g, "maximize")
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    raise("%s: Nesterov momentum requires a momentum and zero dampening", name)
  end
end

local function sgd_group_step(self, gi, g, grads)
  local ps, state, bufs = g.params, self.state, {}
  for i = 1, #ps do
    local st = grads[i] and state[ps[i]]
    if st then bufs[i] = st.momentum_buffer end
  end
  C.sgd_step(self:_who(gi), ps, nil, bufs, g)
  if g.momentum ~= 0 then
    for i = 1, #ps do
      if grads[i] then param_state(state, ps[i]).momentum_buffer = bufs[i] end
    end
  end
end

function SGD:step(closure) return step_groups(self, closure, sgd_group_step) end

-- ---- Adam / AdamW ----

-- a group's betas: two numbers in [0, 1) (PyTorch's "Invalid beta parameter at index")
local function check_betas(name, g)
  local b = g.betas
  if type(b) ~= "table" or type(b[1]) ~= "number" or type(b[2]) ~= "number" or #b ~= 2 then
    raise("%s: option 'betas' must be a list of two numbers {beta1, beta2}", name)
  end
  for i = 1, 2 do
    if not (b[i] >= 0 and b[i] < 1) then raise("%s: Invalid beta parameter at index %d: %s", name, i, tostring(b[i])) end
  end
end

local function check_adam_group(self, g)
  local name = self.__name
  check_nonnegative(name, g, "lr", "learning rate")
  check_nonnegative(name, g, "eps", "epsilon value")
  check_betas(name, g)
  check_nonnegative(name, g, "weight_decay", "weight_decay value")
  check_bool(name, g, "amsgrad")
  check_bool(name, g, "maximize")
  check_bool(name, g, "decoupled_weight_decay")
end

local function adam_group_step(self, gi, g, grads)
  local ps, state, ms, vs, steps = g.params, self.state, {}, {}, {}
  local vmaxs = g.amsgrad and {} or nil
  for i = 1, #ps do
    if grads[i] then
      local st = state[ps[i]]
      if st then
        steps[i], ms[i], vs[i] = (st.step or 0) + 1, st.exp_avg, st.exp_avg_sq
        if vmaxs then vmaxs[i] = st.max_exp_avg_sq end
      else
        steps[i] = 1
      end
    end
  end
  C.adam_step(self:_who(gi), ps, nil, ms, vs, vmaxs, steps, g, g.decoupled_weight_decay)
  for i = 1, #ps do
    if grads[i] then
      local st = param_state(state, ps[i])
      st.step, st.exp_avg, st.exp_avg_sq = steps[i], ms[i], vs[i]
      if vmaxs then st.max_exp_avg_sq = vmaxs[i] end
    end
  end
end

local function adam_step(self, closure) return step_groups(self, closure, adam_group_step) end

local function adam_class(name, default_wd, decoupled)
  local cls = Optimizer:extend(name)
  local defaults = {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = default_wd, amsgrad = false,
                    maximize = false, decoupled_weight_decay = decoupled}
  cls._check_group = check_adam_group
  cls._torch_keys = {capturable = "False", differentiable = "False", foreach = "None", fused = "None"}
  cls._state_keys = {required = {"step", "exp_avg", "exp_avg_sq"}, optional = {"max_exp_avg_sq"}}
  cls.step = adam_step
  function cls:init(params, lr, opts)
    Optimizer.init(self, params, options(name, check_tensor_lr_foreach(name, ctor_options(name, lr, opts)), defaults))
  end
  return cls
end

-- Adam(params, [lr], {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, amsgrad = false,
-- maximize = false, decoupled_weight_decay = false})
optim.Adam = adam_class("Adam", 0, false)
-- AdamW: as Adam, decoupled weight decay (default 1e-2; decoupled_weight_decay = true)
optim.AdamW = adam_class("AdamW", 1e-2, true)

-- What optimizers defined in other files of accel.optim build on.
optim._parts = {options = options, ctor_options = ctor_options, check_number = check_number,
  check_nonnegative = check_nonnegative, check_bool = check_bool, check_betas = check_betas, step_groups = step_groups,
  param_state = param_state, round_scalar = round_scalar}

-- opt.step() and the like: "Optimizer.step: call it as obj:step(...)"
util.check_methods(Optimizer, "Optimizer")
-- PyTorch's optimizer hooks: an error naming them, not a nil to call
function Optimizer:register_step_pre_hook(hook) return add_step_hook(self, "pre", hook) end
function Optimizer:register_step_post_hook(hook) return add_step_hook(self, "post", hook) end

util.not_provided(Optimizer, {register_state_dict_pre_hook = true, register_state_dict_post_hook = true, register_load_state_dict_pre_hook = true,
  register_load_state_dict_post_hook = true}, "Optimizer", "optimizer hooks are not supported; docs/optim.md")

-- accel.optim.lr_scheduler, loaded on first use
-- the optimizers of accel.optim.elementwise, loaded on first use of one
local ELEMENTWISE = {RMSprop = true, Adagrad = true, Adadelta = true, Adamax = true, NAdam = true, RAdam = true,
                     Rprop = true, ASGD = true}

setmetatable(optim, {
  __index = function(t, k)
    if k == "lr_scheduler" then
      local m = require("accel.optim.lr_scheduler")
      rawset(t, k, m)
      return m
    end
    if k == "LBFGS" then
      local cls = require("accel.optim.lbfgs").LBFGS
      rawset(t, k, cls)
      return cls
    end
    if ELEMENTWISE[k] then
      for name, cls in pairs(require("accel.optim.elementwise")) do rawset(t, name, cls) end
      return rawget(t, k)
    end
  end,
})
-- PyTorch's optimizers accel-lua does not provide: a clear error, not nil.
return util.not_provided(optim, {SparseAdam = true, Adafactor = true, Muon = true, swa_utils = true}, "accel.optim",
  "accel.optim has SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD and LBFGS; "
  .. "docs/optim.md")
