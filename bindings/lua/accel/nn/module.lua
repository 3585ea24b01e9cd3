-- accel.nn.module: nn.Module, the base class of every layer, and nn.Parameter.
--
-- The class idiom (the same for built-in layers and user models):
--
--   local nn = accel.nn
--   local Net = nn.Module:extend("Net")          -- a subclass named "Net"
--   function Net:init(d_in, d_out)               -- the constructor body
--     self.fc = nn.Linear(d_in, d_out)           -- a Module: registers submodule "fc"
--     self.scale = nn.Parameter(accel.ones(1))   -- nn.Parameter: registers a parameter
--     self:register_buffer("steps", accel.zeros(1)) -- a buffer (in state_dict, moved by :to)
--     self.act = "relu"                          -- anything else: a plain field
--   end
--   function Net:forward(x) return self.fc(x) * self.scale end
--   local net = Net(20, 3)                       -- construct (runs init)
--   local y = net(x)                             -- calls forward
--
-- A subclass of a subclass calls its parent's constructor explicitly, as
-- PyTorch's super().__init__(...): `function Big:init(...) Net.init(self, ...) end`
-- (Class.super is the parent class). The base state (training flag and the
-- registries) exists before init runs, so Module.init needs no call.
--
-- Registered names keep registration order, and keys follow PyTorch:
-- "fc.weight", "0.weight" (Sequential), "h.3.attn.c_attn.bias" (ModuleList).
-- Lookup order of m.name: plain fields, then parameters, buffers and
-- submodules, then the class's methods; registering a name that a method of
-- the class already uses is refused (it would shadow the method).
--
-- Decisions where PyTorch has no Lua shape (also in docs/nn.md):
--  * parameters(), buffers(), children(), modules() return Lua lists;
--    named_*() return iterators for `for name, t in m:named_parameters() do`.
--  * assigning a plain Lua table that holds modules or parameters is an error
--    (PyTorch silently ignores a Python list; use nn.ModuleList / ModuleDict).
--    Plain fields live in m._attrs (so every assignment is seen); the raw
--    fields of an instance are the registries (_parameters, _buffers,
--    _modules, _non_persistent, _attrs, _hooks).
--  * a tensor is a parameter when made by nn.Parameter(t) (a new leaf sharing
--    t's storage, requires_grad = true); a plain tensor assigned to a field is
--    a plain field, as in PyTorch.
--  * m:to(...) cannot change a tensor's dtype or device in place, so it puts
--    new parameter tensors into the module (shared parameters stay shared).
--    Build optimizers after moving the model, as PyTorch recommends.
--  * load_state_dict checks every key before copying anything, so a refused
--    load leaves the module untouched; it returns missing, unexpected (lists).
--  * forward hooks: register_forward_pre_hook(fn(module, args)) and
--    register_forward_hook(fn(module, args, results)); args and results are
--    packed lists ({n = ...}); a hook returning a list (an n field or a
--    non-empty array part) replaces them, any other value ({logits = y}
--    too) is the one value.
--  * backward hooks: register_full_backward_hook(fn(module, grad_input,
--    grad_output)) and register_full_backward_pre_hook(fn(module,
--    grad_output)), through identity autograd Functions around the call
--    (see "backward hooks" below).
local accel = require("accel")
local compat = require("accel.compat")
local util = require("accel.util")

local M = {}

-- ---- errors at the user's line ----

-- error(msg) reported at the first frame of the user's code.
M.raise = util.raise
local raise = M.raise

-- check_options(name, o, keys): see accel.util
M.check_options = util.check_options

-- A table holding PyTorch's keyword `name` where the positional argument
-- `name` belongs (nn.Conv2d(1, 16, {kernel_size = 3})): an error saying so.
function M.not_in_options(v, what, name)
  if type(v) == "table" and not accel.is_tensor(v) and rawget(v, name) ~= nil then
    M.raise("%s: %s is a positional argument (%s(..., %s, ...)); only the arguments after it may go in the options "
      .. "table", what, name, what, util.show(rawget(v, name)))
  end
end

-- v when it is an integer >= min (0 or 1), else "<what>: <name> must be a
-- non-negative (positive) integer, got <v>" at the user's line.
function M.check_integer(v, what, name, min)
  M.not_in_options(v, what, name)
  if type(v) ~= "number" or v < min or math.floor(v) ~= v then
    M.raise("%s: %s must be a %s integer, got %s", what, name, min == 0 and "non-negative" or "positive", tostring(v))
  end
  return v
end

-- ---- Parameter ----

local param_set = accel._C.parameters -- weak keys; also read by printing ("Parameter containing:")

-- nn.Parameter(t, [requires_grad = true | {requires_grad = ...}]): a leaf
-- tensor sharing t's storage, marked as a parameter.
function M.Parameter(t, requires_grad)
  if not accel.is_tensor(t) then raise("nn.Parameter: expected a tensor, got %s", type(t)) end
  if type(requires_grad) == "table" then
    requires_grad = M.check_options("nn.Parameter", requires_grad, {"requires_grad"}).requires_grad
  end
  if requires_grad == nil then requires_grad = true end
  local p = t:detach()
  if requires_grad then p:requires_grad_(true) end
  param_set[p] = true
  return p
end

function M.is_parameter(t) return param_set[t] == true end

-- ---- ordered registries (names in registration order; values may be nil) ----

local function new_reg() return {keys = {}, pos = {}, vals = {}} end

local function reg_set(r, name, v)
  if not r.pos[name] then
    r.keys[#r.keys + 1] = name
    r.pos[name] = #r.keys
  end
  r.vals[name] = v
end

local function reg_remove(r, name)
  local i = r.pos[name]
  if not i then return end
  table.remove(r.keys, i)
  r.pos[name], r.vals[name] = nil, nil
  for j = i, #r.keys do r.pos[r.keys[j]] = j end
end
M.new_reg, M.reg_set, M.reg_remove = new_reg, reg_set, reg_remove

-- ---- classes ----

local Module = {__name = "Module"}
M.Module = Module

local function class_of(obj)
  local mt = getmetatable(obj)
  return type(mt) == "table" and rawget(mt, "__class") or nil
end

function M.is_module(x) return type(x) == "table" and class_of(x) ~= nil end
local is_module = M.is_module

local call_hooked, repr

local function make_meta(cls)
  local mt = {__class = cls, __name = cls.__name}
  mt.__index = function(self, k)
    local v = self._attrs[k]
    if v ~= nil then return v end
    v = self._parameters.vals[k]
    if v ~= nil then return v end
    v = self._buffers.vals[k]
    if v ~= nil then return v end
    v = self._modules.vals[k]
    if v ~= nil then return v end
    if type(k) == "number" then
      local get = cls.__getitem
      if get then return get(self, k) end
    end
    return cls[k]
  end
  mt.__newindex = function(self, k, v) return cls.__setattr(self, k, v) end
  mt.__call = function(self, ...)
    if rawget(self, "_hooks") then return call_hooked(self, ...) end
    return self:forward(...)
  end
  mt.__tostring = function(self) return repr(self) end
  -- pairs(container): its children in order (i, module) or (name, module);
  -- any other module: its raw fields
  mt.__pairs = function(self)
    local children = cls.__children
    if children then return children(self) end
    return next, self, nil
  end
  mt.__len = function(self)
    local len = cls.__len
    if not len then raise("%s has no length (only containers such as Sequential do)", cls.__name) end
    return len(self)
  end
  return mt
end

local function new_instance(cls, ...)
  local self = {_attrs = {training = true}, _parameters = new_reg(), _buffers = new_reg(), _modules = new_reg(),
                _non_persistent = {}}
  setmetatable(self, rawget(cls, "__meta"))
  cls.init(self, ...)
  return self
end

-- A method defined on a Module class (`function Net:helper()`) is checked:
-- `net.helper()` raises "Net.helper: call it as obj:helper(...)" at the
-- user's line (accel.util.check_methods). forward is left unchecked: it is
-- the hot path, and m(x) is how it is called.
local NOT_CHECKED = {forward = true}

-- is_instance(x): x is a module of class cls or of a subclass of it.
local function class_is(c, cls)
  while c do
    if c == cls then return true end
    c = rawget(c, "super")
  end
  return false
end

local function instance_checker(cls)
  return function(x)
    return type(x) == "table" and class_is(class_of(x), cls)
  end
end

local function define_method(cls, k, v)
  rawset(cls, k, util.method_field(k, v, rawget(cls, "__name"), instance_checker(cls), NOT_CHECKED))
end

local class_mt = {
  __call = new_instance,
  __tostring = function(cls) return "class " .. cls.__name end,
  __newindex = define_method,
}

-- Class:extend(name) -> a subclass of Class named name.
function Module.extend(parent, name)
  if type(parent) ~= "table" then raise('Module:extend: call it with a colon: nn.Module:extend("Name")') end
  if type(name) ~= "string" or name == "" then
    raise("Module:extend: expected a class name (a string), got %s", type(name))
  end
  local cls = {__name = name, super = parent}
  cls.__meta = make_meta(cls)
  return setmetatable(cls, {__index = parent, __call = class_mt.__call, __tostring = class_mt.__tostring,
                            __newindex = define_method})
end

Module.__meta = make_meta(Module)
setmetatable(Module, class_mt)
-- PyTorch's module backward hooks: an error naming them
util.not_provided(Module, {register_backward_hook = true}, "nn.Module",
  "it is PyTorch's deprecated form: use register_full_backward_hook")

-- Module:extend(name), also stored as exports[name]: how the nn files
-- declare the classes they export.
function M.export_class(exports, name)
  local cls = Module:extend(name)
  exports[name] = cls
  return cls
end

function Module:init() end

function Module:forward()
  raise('Module [%s] is missing the required "forward" function', self:_get_name())
end

function Module:_get_name() return class_of(self).__name end

-- m:isinstance(nn.Linear): m's class is cls or a subclass of it.
function Module:isinstance(cls) return class_is(class_of(self), cls) end

-- ---- registration ----

local REGISTRIES = {{"parameter", "_parameters"}, {"buffer", "_buffers"}, {"module", "_modules"}}

local function check_name(self, what, name)
  if type(name) ~= "string" then raise("%s name should be a string, got %s", what, type(name)) end
  if name == "" then raise('%s name can\'t be empty string ""', what) end
  if name:find(".", 1, true) then raise('%s name can\'t contain ".", got "%s"', what, name) end
  if type(class_of(self)[name]) == "function" then
    raise('%s: the name "%s" is a method of %s; choose another name', what, name, self:_get_name())
  end
  if self._attrs[name] ~= nil then raise('%s: attribute "%s" already exists', what, name) end
  -- a name registered as another kind (re-registering the same kind replaces the entry)
  for _, kind in ipairs(REGISTRIES) do
    if self[kind[2]].pos[name] then raise('%s: attribute "%s" already exists (a %s)', what, name, kind[1]) end
  end
end

-- drops name from the registries of the other kinds (keep: the kept one)
local function forget(self, name, keep)
  if keep ~= "p" then reg_remove(self._parameters, name) end
  if keep ~= "b" then reg_remove(self._buffers, name); self._non_persistent[name] = nil end
  if keep ~= "m" then reg_remove(self._modules, name) end
end

function Module:register_parameter(name, p)
  if not (self._parameters.pos[name]) then check_name(self, "parameter", name) end
  if p ~= nil and not M.is_parameter(p) then
    raise('cannot assign %s as parameter "%s" (nn.Parameter or nil expected)',
      accel.is_tensor(p) and "a plain tensor" or type(p), name)
  end
  reg_set(self._parameters, name, p)
end

-- register_buffer(name, tensor_or_nil, [{persistent = true}] or [persistent])
function Module:register_buffer(name, t, o)
  local persistent = o ~= false
  if type(o) == "table" then persistent = M.check_options("register_buffer", o, {"persistent"}).persistent ~= false
  elseif o ~= nil and type(o) ~= "boolean" then
    raise("register_buffer: persistent must be a boolean or {persistent = ...}, got %s", type(o))
  end
  if not (self._buffers.pos[name]) then check_name(self, "buffer", name) end
  if t ~= nil and not accel.is_tensor(t) then raise('cannot assign %s as buffer "%s" (tensor or nil expected)', type(t), name) end
  reg_set(self._buffers, name, t)
  self._non_persistent[name] = (not persistent) or nil
end

function Module:register_module(name, m)
  if not (self._modules.pos[name]) then check_name(self, "module", name) end
  if m ~= nil and not is_module(m) then raise('cannot assign %s as child module "%s" (Module or nil expected)', type(m), name) end
  reg_set(self._modules, name, m)
end
Module.add_module = Module.register_module

local function holds_registrable(t)
  for _, v in pairs(t) do
    if is_module(v) or (accel.is_tensor(v) and M.is_parameter(v)) then return true end
  end
  return false
end

-- self.k = v: registers Modules and Parameters (replacing an entry of
-- another kind, as PyTorch's setattr), updates registered buffers.
function Module:__setattr(k, v)
  if type(k) == "number" then
    local set = class_of(self).__setitem
    if not set then raise("%s does not support item assignment (m[%s] = ...)", self:_get_name(), tostring(k)) end
    return set(self, k, v)
  end
  if is_module(v) then
    self._attrs[k] = nil
    forget(self, k, "m")
    return self:register_module(k, v)
  end
  if accel.is_tensor(v) and M.is_parameter(v) then
    self._attrs[k] = nil
    forget(self, k, "p")
    return self:register_parameter(k, v)
  end
  if self._parameters.pos[k] then return self:register_parameter(k, v) end
  if self._buffers.pos[k] then return self:register_buffer(k, v, {persistent = not self._non_persistent[k]}) end
  if self._modules.pos[k] then return self:register_module(k, v) end
  if type(v) == "table" and getmetatable(v) == nil and holds_registrable(v) then
    raise('%s.%s: a plain table of modules or parameters is not registered; use nn.ModuleList{...} or '
      .. 'nn.ModuleDict{...} (or m._attrs.name = t to keep a plain table)', self:_get_name(), tostring(k))
  end
  self._attrs[k] = v
end

-- ---- traversal ----

local function join(prefix, name) return prefix == "" and name or prefix .. "." .. name end

-- Ordered list of {name, module} for m and its descendants (pre-order),
-- each module once unless remove_duplicate is false.
local function collect_modules(m, prefix, memo, out)
  if memo then
    if memo[m] then return out end
    memo[m] = true
  end
  out[#out + 1] = {prefix, m}
  local r = m._modules
  for _, name in ipairs(r.keys) do
    local child = r.vals[name]
    if child ~= nil then collect_modules(child, join(prefix, name), memo, out) end
  end
  return out
end

local function list_iter(list)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2] end
  end
end

local opts_of = util.opts_of -- options or PyTorch's positional values (accel.util)

-- PyTorch's (recurse) of parameters / buffers and (prefix, recurse,
-- remove_duplicate) of named_parameters / named_buffers
local RECURSE_KEYS, RECURSE_POSITIONAL = {"recurse"}, {{"recurse", "boolean"}}
local MEMBER_KEYS = {"prefix", "recurse", "remove_duplicate"}
local MEMBER_POSITIONAL = {{"prefix", "string"}, {"recurse", "boolean"}, {"remove_duplicate", "boolean"}}

-- {name, tensor} of the registry field, as o (parsed options) selects them
local function named_members(self, field, o)
  local prefix = o.prefix or ""
  local dedup = o.remove_duplicate ~= false
  local mods = o.recurse == false and {{prefix, self}} or collect_modules(self, prefix, dedup and {} or nil, {})
  local seen, out = {}, {}
  for _, e in ipairs(mods) do
    local r = e[2][field]
    for _, name in ipairs(r.keys) do
      local t = r.vals[name]
      if t ~= nil and not (dedup and seen[t]) then
        seen[t] = true
        out[#out + 1] = {join(e[1], name), t}
      end
    end
  end
  return out
end

local function values(list)
  local out = {}
  for i, e in ipairs(list) do out[i] = e[2] end
  return out
end

-- named_parameters([prefix], [recurse], [remove_duplicate]) or ({prefix =, recurse =, remove_duplicate =})
function Module:named_parameters(...)
  return list_iter(named_members(self, "_parameters", opts_of("named_parameters", MEMBER_KEYS, MEMBER_POSITIONAL, ...)))
end
-- parameters(): the hot path (optimizers, zero_grad), without building names
local function members(m, field, seen_m, seen_t, out)
  if seen_m[m] then return out end
  seen_m[m] = true
  local r = m[field]
  for _, name in ipairs(r.keys) do
    local t = r.vals[name]
    if t ~= nil and not seen_t[t] then
      seen_t[t] = true
      out[#out + 1] = t
    end
  end
  local mods = m._modules
  for _, name in ipairs(mods.keys) do
    local child = mods.vals[name]
    if child ~= nil then members(child, field, seen_m, seen_t, out) end
  end
  return out
end

-- parameters([recurse = true] or [{recurse =}])
function Module:parameters(...)
  if select("#", ...) <= 1 and (...) == nil then return members(self, "_parameters", {}, {}, {}) end
  return values(named_members(self, "_parameters", opts_of("parameters", RECURSE_KEYS, RECURSE_POSITIONAL, ...)))
end
function Module:named_buffers(...)
  return list_iter(named_members(self, "_buffers", opts_of("named_buffers", MEMBER_KEYS, MEMBER_POSITIONAL, ...)))
end
function Module:buffers(...)
  if select("#", ...) <= 1 and (...) == nil then return members(self, "_buffers", {}, {}, {}) end
  return values(named_members(self, "_buffers", opts_of("buffers", RECURSE_KEYS, RECURSE_POSITIONAL, ...)))
end

local function direct_children(self)
  local out, seen = {}, {}
  local r = self._modules
  for _, name in ipairs(r.keys) do
    local m = r.vals[name]
    if m ~= nil and not seen[m] then
      seen[m] = true
      out[#out + 1] = {name, m}
    end
  end
  return out
end

function Module:named_children() return list_iter(direct_children(self)) end
function Module:children() return values(direct_children(self)) end

function Module:named_modules(o, ...)
  o = opts_of("named_modules", {"prefix", "remove_duplicate"}, {{"prefix", "string"}}, o, ...)
  return list_iter(collect_modules(self, o.prefix or "", o.remove_duplicate ~= false and {} or nil, {}))
end
function Module:modules() return values(collect_modules(self, "", {}, {})) end

-- get_submodule("h.3.attn") (empty string: the module itself)
function Module:get_submodule(target)
  local m = self
  if target == "" then return m end
  for atom in tostring(target):gmatch("[^.]+") do
    local child = m._modules.vals[atom]
    if child == nil then raise('%s has no submodule "%s" (looking up "%s")', m:_get_name(), atom, target) end
    m = child
  end
  return m
end

local function split_target(target)
  local mod, name = tostring(target):match("^(.*)%.([^.]+)$")
  if not mod then return "", target end
  return mod, name
end

-- The tensor "path.to.name" of a submodule's registry (_parameters or
-- _buffers); kind names it in the error. nil_ok: a registered name set to
-- nil gives nil.
local function get_registered(self, target, registry, kind, nil_ok)
  local mod, name = split_target(target)
  local m = self:get_submodule(mod)
  local r = m[registry]
  local t = r.vals[name]
  if t == nil and not (nil_ok and r.pos[name]) then raise('%s has no %s "%s"', m:_get_name(), kind, name) end
  return t
end

-- (a parameter set to nil is refused, a buffer set to nil is nil: PyTorch's
-- "is not an nn.Parameter" and None)
function Module:get_parameter(target) return get_registered(self, target, "_parameters", "parameter") end

function Module:get_buffer(target) return get_registered(self, target, "_buffers", "buffer", true) end

-- ---- state ----

-- Ordered {key, tensor} list: each module's parameters, then its persistent
-- buffers, then its children (PyTorch's state_dict order; no deduplication).
local function state_entries(self, prefix, out)
  for _, name in ipairs(self._parameters.keys) do
    local p = self._parameters.vals[name]
    if p ~= nil then out[#out + 1] = {prefix .. name, p} end
  end
  local optional = self._optional_state or {}
  for _, name in ipairs(self._buffers.keys) do
    local b = self._buffers.vals[name]
    if b ~= nil and not self._non_persistent[name] then out[#out + 1] = {prefix .. name, b, optional[name]} end
  end
  for _, name in ipairs(self._modules.keys) do
    local m = self._modules.vals[name]
    if m ~= nil then state_entries(m, prefix .. name .. ".", out) end
  end
  return out
end

-- ---- printing a state_dict ----
-- print(model:state_dict()) shows one line per entry, in PyTorch's order
-- (keys added later follow, sorted), with the tensor's shape and dtype:
--   OrderedDict(
--     fc.weight  [2, 3]  float32
--     fc.bias    [2]     float32
--   )
-- The metatable holds only __name, __tostring, the key order and
-- __container (accel.util.is_container: still a plain table for pairs,
-- indexing and accel.operations).

local function entry_text(v)
  if not accel.is_tensor(v) then return tostring(v), "" end
  local dims = {}
  for d = 1, v:dim() do dims[d] = tostring(v:size(d)) end
  return "[" .. table.concat(dims, ", ") .. "]", (tostring(v.dtype):gsub("^accel%.", ""))
end

local function state_dict_order(sd, keys)
  local order, seen, rest = {}, {}, {}
  for _, k in ipairs(keys) do
    if rawget(sd, k) ~= nil then order[#order + 1], seen[k] = k, true end
  end
  for k in pairs(sd) do
    if not seen[k] then rest[#rest + 1] = tostring(k) end
  end
  table.sort(rest)
  for _, k in ipairs(rest) do order[#order + 1] = k end
  return order
end

local function state_dict_tostring(sd)
  local order = state_dict_order(sd, getmetatable(sd).keys)
  if #order == 0 then return "OrderedDict()" end
  local rows, w1, w2 = {}, 0, 0
  for i, k in ipairs(order) do
    local shape, dtype = entry_text(sd[k])
    rows[i] = {k, shape, dtype}
    w1, w2 = math.max(w1, #k), math.max(w2, #shape)
  end
  local lines = {"OrderedDict("}
  for _, r in ipairs(rows) do
    lines[#lines + 1] = (("  %-" .. w1 .. "s  %-" .. w2 .. "s  %s"):format(r[1], r[2], r[3])):gsub("%s+$", "")
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

-- state_dict([{prefix = "", keep_vars = false}]) -> {key = tensor}: detached
-- tensors sharing the module's storage (a plain table that prints as above).
-- state_dict_keys() lists the keys in PyTorch's order.

-- The open stage-3 sharding engine whose model is m, or nil: its
-- parameters are released between uses, so state_dict gathers them.
-- engine_of(m): the open engine of any stage whose model is m (its
-- float32 master pieces are what the next step starts from).
local function engine_of(m)
  local eng = package.loaded["accel.shard"] and package.loaded["accel.shard"].engine_of(m)
  if eng and rawequal(eng.model, m) then return eng end
  return nil
end

local function stage3_engine_of(m)
  local eng = engine_of(m)
  if eng and eng.stage == 3 then return eng end
  return nil
end

function Module:state_dict(o)
  o = opts_of("state_dict", {"prefix", "keep_vars"}, nil, o)
  if not o.keep_vars and stage3_engine_of(self) then
    -- under ZeRO-3 / FULL_SHARD: the full weights, gathered one tensor at a
    -- time (collective: every process calls it), as accelerator:get_state_dict
    local full, sd = require("accel.shard_checkpoint").full_state_dict(self), {}
    for k, t in pairs(full) do sd[(o.prefix or "") .. k] = t end
    return setmetatable(sd, {__name = "OrderedDict", __tostring = state_dict_tostring, __container = true,
      keys = self:state_dict_keys()})
  end
  local sd, keys = {}, {}
  for i, e in ipairs(state_entries(self, o.prefix or "", {})) do
    sd[e[1]] = o.keep_vars and e[2] or e[2]:detach()
    keys[i] = e[1]
  end
  return setmetatable(sd, {__name = "OrderedDict", __tostring = state_dict_tostring, __container = true, keys = keys})
end

function Module:state_dict_keys()
  local keys = {}
  for i, e in ipairs(state_entries(self, "", {})) do keys[i] = e[1] end
  return keys
end

-- (through .shape, which a parameter released by a stage-3 engine keeps; sizes compare by value)
local function same_shape(a, b) return a.shape == b.shape end

-- load_state_dict(sd, [{strict = true}]) -> missing_keys, unexpected_keys
-- (accel.load's metadata table in place of the options is ignored).
-- Mis-shaped or non-tensor entries are always an error; with strict,
-- missing and unexpected keys are too. Nothing is copied when it errors.
function Module:load_state_dict(sd, ...)
  local o = opts_of("load_state_dict", {"strict", "assign"}, {{"strict", "boolean"}, {"assign", "boolean"}},
    util.without_load_metadata(...))
  if o.assign then raise("load_state_dict: assign = true is not supported (values are copied into the parameters)") end
  local strict = o.strict ~= false
  if type(sd) ~= "table" or is_module(sd) then
    raise("load_state_dict: expected a table of name -> tensor, got %s", is_module(sd) and "a Module" or type(sd))
  end
  local entries = state_entries(self, "", {})
  local expected, missing, mismatched, missing_names, kept_names = {}, {}, {}, {}, {}
  for _, e in ipairs(entries) do
    local key, t = e[1], e[2]
    expected[key] = true
    local v = sd[key]
    if v == nil and e[3] then -- a buffer older state dicts lack (BatchNorm's num_batches_tracked): kept, as PyTorch
      kept_names[#kept_names + 1] = key
    elseif v == nil then
      missing[#missing + 1] = ('"%s" (shape %s)'):format(key, tostring(t.shape))
      missing_names[#missing_names + 1] = key
    elseif not accel.is_tensor(v) then
      mismatched[#mismatched + 1] = ("value for %s is a %s, not a tensor."):format(key, type(v))
    elseif not same_shape(v, t) then
      mismatched[#mismatched + 1] = ("size mismatch for %s: copying a param with shape %s from checkpoint, "
        .. "the shape in current model is %s."):format(key, tostring(v.shape), tostring(t.shape))
    end
  end
  local unexpected, unexpected_names = {}, {}
  local extra = {}
  for k in pairs(sd) do
    if not expected[k] then extra[#extra + 1] = k end
  end
  table.sort(extra, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(extra) do
    local v = sd[k]
    unexpected_names[#unexpected_names + 1] = k
    unexpected[#unexpected + 1] = accel.is_tensor(v) and ('"%s" (shape %s)'):format(tostring(k), tostring(v.shape))
      or ('"%s" (a %s)'):format(tostring(k), type(v))
  end
  local errs = {}
  if strict and #missing > 0 then errs[#errs + 1] = "Missing key(s) in state_dict: " .. table.concat(missing, ", ") .. "." end
  if strict and #unexpected > 0 then errs[#errs + 1] = "Unexpected key(s) in state_dict: " .. table.concat(unexpected, ", ") .. "." end
  for _, m in ipairs(mismatched) do errs[#errs + 1] = m end
  if #errs > 0 then
    raise("Error(s) in loading state_dict for %s:\n\t%s", self:_get_name(), table.concat(errs, "\n\t"))
  end
  local eng = engine_of(self)
  if eng then
    -- under a sharding engine: the engine keeps each rank's pieces of the
    -- full tensors (ZeRO-3 / FULL_SHARD releases the parameters; stages 1-2
    -- keep float32 master pieces), buffers and frozen parameters are the
    -- model's own (missing keys keep their values: gathered, a collective
    -- like state_dict)
    local full = {}
    for k, v in pairs(sd) do
      if expected[k] then full[k] = v end
    end
    if #missing_names + #kept_names > 0 then
      local current = require("accel.shard_checkpoint").full_state_dict(self)
      for _, k in ipairs(missing_names) do full[k] = current[k] end
      for _, k in ipairs(kept_names) do full[k] = current[k] end
    end
    accel.no_grad(function() eng:load_full_state_dict(full) end)
    return missing_names, unexpected_names
  end
  accel.no_grad(function()
    for _, e in ipairs(entries) do
      local v = sd[e[1]]
      if v ~= nil and not rawequal(v, e[2]) then e[2]:copy_(v) end
    end
  end)
  return missing_names, unexpected_names
end

-- ---- modes, gradients, apply ----

function Module:train(mode)
  if mode == nil then mode = true end
  if type(mode) ~= "boolean" then raise("train: mode is expected to be a boolean, got %s", type(mode)) end
  for _, m in ipairs(self:modules()) do m._attrs.training = mode end
  return self
end

function Module:eval() return self:train(false) end

function Module:requires_grad_(flag)
  if flag == nil then flag = true end
  if type(flag) ~= "boolean" then
    raise("requires_grad_: argument 'requires_grad' (position 1) must be boolean, not %s", type(flag))
  end
  for _, p in ipairs(self:parameters()) do p:requires_grad_(flag) end
  return self
end

-- zero_grad([{set_to_none = true}])
function Module:zero_grad(...)
  local to_none = opts_of("zero_grad", {"set_to_none"}, {{"set_to_none", "boolean"}}, ...).set_to_none ~= false
  for _, p in ipairs(self:parameters()) do
    local g = p.grad
    if g ~= nil then
      if to_none then p.grad = nil else accel.no_grad(function() g:zero_() end) end
    end
  end
  return self
end

-- apply(fn): fn(m) for every submodule (children first) and then self.
function Module:apply(fn)
  if type(fn) ~= "function" then raise("apply: expected a function, got %s", type(fn)) end
  for _, m in ipairs(self:children()) do m:apply(fn) end
  fn(self)
  return self
end

-- ---- to(device | dtype | tensor | {device=, dtype=}) ----

-- The target (device, dtype or nil) that t:to(...) would pick: dtype is nil
-- when the arguments name none (a float32 and a float64 probe agree only when
-- a dtype was given).
-- The device one argument of to(...) names (a tensor's, a device, a
-- device string, an options table's device=), or nil.
local function named_device(v)
  if accel.is_tensor(v) then return v.device end
  if type(v) == "table" then v = v.device end
  if v == nil then return nil end
  local ok, d = pcall(accel.device, v)
  return ok and d or nil
end

-- The device and floating dtype to(...) names: nil for one it leaves alone
-- (a dtype alone keeps each tensor's device, as PyTorch).
local function to_target(...)
  local a = accel.empty(0):to(...) -- checks the arguments as Tensor.to does
  local b = accel.empty(0, {dtype = accel.float64}):to(...)
  local device
  for i = 1, select("#", ...) do device = named_device((select(i, ...))) or device end
  return device, a.dtype == b.dtype and a.dtype or nil
end

local function moved(t, device, dtype)
  local dt = (dtype and t.dtype.is_floating_point) and dtype or t.dtype
  if (device == nil or tostring(t.device) == tostring(device)) and t.dtype == dt then return t end
  return accel.no_grad(function() return t:to(device, dt) end)
end

function Module:to(...)
  local ok, device, dtype = pcall(to_target, ...)
  if not ok then raise("Module.to: %s", util.strip_position(device)) end
  if dtype and not dtype.is_floating_point then
    raise("Module.to: nn.Module.to only accepts floating point dtypes, but got desired dtype=%s", tostring(dtype))
  end
  local memo, params = {}, {}
  local function convert(t, is_param)
    if memo[t] then return memo[t] end
    local n = moved(t, device, dtype)
    if n ~= t then
      if is_param then
        n = M.Parameter(n, t.requires_grad)
        local g = t.grad
        if g ~= nil then n.grad = moved(g, device, dtype) end
        params[t] = n
      end
    end
    memo[t] = n
    return n
  end
  for _, m in ipairs(self:modules()) do
    for _, name in ipairs(m._parameters.keys) do
      local p = m._parameters.vals[name]
      if p ~= nil then m._parameters.vals[name] = convert(p, true) end
    end
    for _, name in ipairs(m._buffers.keys) do
      local b = m._buffers.vals[name]
      if b ~= nil then m._buffers.vals[name] = convert(b, false) end
    end
  end
  require("accel.optim")._follow(params) -- optimizers keep training the moved parameters
  return self
end

function Module:float() return self:to(accel.float32) end
function Module:double() return self:to(accel.float64) end
function Module:half() return self:to(accel.float16) end
function Module:bfloat16() return self:to(accel.bfloat16) end
function Module:cpu() return self:to("cpu") end
function Module:cuda(i) return self:to(i and ("cuda:" .. i) or "cuda") end

-- ---- deep copy (PyTorch's copy.deepcopy of a module) ----

local deep_copy

-- A new leaf holding t's values, dtype and device, requiring grad as t
-- does. As PyTorch's: a parameter stays one and its copy has no grad, a
-- plain tensor's grad is copied; a tensor an operation computed (not a
-- leaf) is refused.
local function copy_tensor(t, memo)
  if not t.is_leaf then
    raise("nn.deepcopy: only tensors created explicitly by the user (graph leaves) can be copied; the module holds "
      .. "one an operation computed (detach it first)")
  end
  local c = accel.no_grad(function() return t:detach():clone() end)
  local param = M.is_parameter(t)
  if param then c = M.Parameter(c, t.requires_grad) elseif t.requires_grad then c:requires_grad_(true) end
  memo[t] = c
  local g = not param and t.grad or nil
  if g ~= nil then c.grad = deep_copy(g, memo) end
  return c
end

-- v copied as Python's deepcopy: tensors as above, modules (class kept) and
-- plain tables key by key, each once (memo: what v shares stays shared in
-- the copy, cycles end); functions, strings and the tables of another
-- metatable (classes, dtypes, devices) are the same values in the copy.
deep_copy = function(v, memo)
  if memo[v] ~= nil then return memo[v] end
  if accel.is_tensor(v) then return copy_tensor(v, memo) end
  if type(v) ~= "table" or (getmetatable(v) ~= nil and not is_module(v)) then return v end
  local c = {}
  memo[v] = c
  -- (a module's raw fields: its registries, _attrs, _hooks, ...)
  for k, x in next, v do c[deep_copy(k, memo)] = deep_copy(x, memo) end
  return setmetatable(c, getmetatable(v))
end

-- nn.deepcopy(m): a module of m's class (a subclass keeps its forward)
-- whose parameters and buffers (non-persistent too) are new tensors with
-- m's values and requires_grad, its submodules, plain fields and forward
-- hooks / pre-hooks copied the same way, recursively.
function M.deepcopy(m)
  if not is_module(m) then raise("nn.deepcopy: expected a Module, got %s", accel.is_tensor(m) and "a tensor" or type(m)) end
  return deep_copy(m, {})
end

-- ---- forward hooks ----

local Handle = {}
Handle.__index = Handle
function Handle:remove()
  local hooks = rawget(self.module, "_hooks")
  if not hooks then return end
  for i, h in ipairs(hooks[self.kind]) do
    if h == self.fn then table.remove(hooks[self.kind], i) break end
  end
  for _, list in pairs(hooks) do
    if #list > 0 then return end
  end
  rawset(self.module, "_hooks", nil)
end

local HOOK_KINDS = {pre = "register_forward_pre_hook", post = "register_forward_hook",
  backward = "register_full_backward_hook", backward_pre = "register_full_backward_pre_hook"}

-- add_hook(self, kind (HOOK_KINDS), fn, opts): {prepend = true} runs fn
-- before the hooks already there (PyTorch's prepend); with_kwargs (no
-- keyword arguments reach a forward here) and always_call are refused when
-- true.
local function add_hook(self, kind, fn, o)
  local name = HOOK_KINDS[kind]
  if type(fn) ~= "function" then raise("%s: expected a function", name) end
  local backward = kind == "backward" or kind == "backward_pre"
  o = M.check_options(name, o, backward and {"prepend"} or {"prepend", "with_kwargs", "always_call"})
  for _, k in ipairs({"with_kwargs", "always_call"}) do
    if o[k] then raise("%s: %s = true is not supported", name, k) end
  end
  local hooks = rawget(self, "_hooks")
  if not hooks then
    hooks = {pre = {}, post = {}, backward = {}, backward_pre = {}}
    rawset(self, "_hooks", hooks)
  end
  table.insert(hooks[kind], o.prepend and 1 or #hooks[kind] + 1, fn)
  return setmetatable({module = self, kind = kind, fn = fn}, Handle)
end

function Module:register_forward_pre_hook(fn, o) return add_hook(self, "pre", fn, o) end
function Module:register_forward_hook(fn, o) return add_hook(self, "post", fn, o) end
function Module:register_full_backward_hook(fn, o) return add_hook(self, "backward", fn, o) end
function Module:register_full_backward_pre_hook(fn, o) return add_hook(self, "backward_pre", fn, o) end

-- A hook's replacement for the arguments / results: a plain table with an
-- n field or a non-empty array part is a list of all of them; anything else
-- (a tensor, a string-keyed table such as {logits = ...}) is the one value.
local function as_values(r)
  if type(r) == "table" and getmetatable(r) == nil and (r.n ~= nil or #r > 0) then
    if r.n == nil then r.n = #r end
    return r
  end
  return {r, n = 1}
end

-- ---- backward hooks ----
--
-- As PyTorch's BackwardHook: the tensor arguments that require grad go
-- through one identity Function before forward, the tensor results through
-- another after it. The results' node runs once every result's gradient is
-- complete: the pre-hooks see (and may replace) grad_output there. The
-- arguments' node then receives grad_input, one entry per argument (nil
-- where none; zeros for a tensor argument that needs no gradient), and the
-- hooks see (and may replace) it. Without an argument that requires grad
-- the hooks run at the results' node, with grad_input all nil, as
-- PyTorch's.

-- A hook's list of gradients: n entries, each a tensor or nil.
local function check_grads(name, r, n, what)
  if type(r) ~= "table" or getmetatable(r) ~= nil then
    raise("%s must return nil or a list of %s, got %s", name, what, accel.is_tensor(r) and "a tensor" or type(r))
  end
  local count = r.n or #r
  if count ~= n then
    raise("%s returned an invalid number of %s, got %d, but expected %d", name, what, count, n)
  end
  for i = 1, n do
    if r[i] ~= nil and not accel.is_tensor(r[i]) then raise("%s: %s %d must be a tensor or nil", name, what, i) end
  end
  return r
end

-- Each hook on the current list; a returned list replaces it.
local function run_grad_hooks(list, name, what, call)
  local cur = list
  for _, h in ipairs(call.hooks) do
    local r = call.run(h, cur)
    if r ~= nil then cur = check_grads(name, r, cur.n, what) end
  end
  return cur
end

local function run_backward_hooks(state, grad_input)
  return run_grad_hooks(grad_input, "register_full_backward_hook", "grad_input",
    {hooks = state.hooks.backward, run = function(h, gi) return h(state.module, gi, state.grad_output) end})
end

local function run_backward_pre_hooks(state, grad_output)
  return run_grad_hooks(grad_output, "register_full_backward_pre_hook", "grad_output",
    {hooks = state.hooks.backward_pre, run = function(h, go) return h(state.module, go) end})
end

-- Both identity Functions' forward: the state for backward, the tensors
-- as new tensors sharing their storage.
local function hook_forward(ctx, state, ...)
  ctx.state = state
  local out = compat.pack(...)
  for i = 1, out.n do out[i] = out[i]:detach() end
  return compat.unpack(out, 1, out.n)
end

local InputsHook = accel.autograd.Function{name = "BackwardHookFunction", forward = hook_forward,
  backward = function(ctx, ...)
    local state, grads = ctx.state, compat.pack(...)
    local gi = {n = state.n_args}
    for pos, t in pairs(state.constants) do gi[pos] = accel.zeros_like(t) end
    for k, pos in ipairs(state.positions) do gi[pos] = grads[k] end
    gi = run_backward_hooks(state, gi)
    local out = {n = #state.positions + 1}
    for k, pos in ipairs(state.positions) do out[k + 1] = gi[pos] end
    return compat.unpack(out, 1, out.n)
  end}

local OutputsHook = accel.autograd.Function{name = "BackwardHookFunction", forward = hook_forward,
  backward = function(ctx, ...)
    local state = ctx.state
    local go = run_backward_pre_hooks(state, compat.pack(...))
    state.grad_output = go
    if #state.positions == 0 then run_backward_hooks(state, {n = state.n_args}) end
    return nil, compat.unpack(go, 1, go.n)
  end}

-- Route the tensors of list (positions that pass keep(t)) through Fn.
local function through(Fn, state, list, keep)
  local pos, ts = {}, {}
  for i = 1, list.n do
    if accel.is_tensor(list[i]) and keep(list[i]) then pos[#pos + 1], ts[#ts + 1] = i, list[i] end
  end
  if #pos == 0 then return list, pos end
  local out = compat.pack(Fn(state, compat.unpack(ts, 1, #ts)))
  local copy = {n = list.n}
  for i = 1, list.n do copy[i] = list[i] end
  for k, i in ipairs(pos) do copy[i] = out[k] end
  return copy, pos
end

local function requires_grad(t) return t.requires_grad end

call_hooked = function(self, ...)
  local hooks = rawget(self, "_hooks")
  local args = compat.pack(...)
  for _, h in ipairs({compat.unpack(hooks.pre)}) do
    local r = h(self, args)
    if r ~= nil then args = as_values(r) end
  end
  local state
  if (#hooks.backward > 0 or #hooks.backward_pre > 0) and accel.is_grad_enabled() then
    state = {module = self, hooks = {backward = {compat.unpack(hooks.backward)},
      backward_pre = {compat.unpack(hooks.backward_pre)}}, n_args = args.n}
    args, state.positions = through(InputsHook, state, args, requires_grad)
    state.constants = {} -- the tensor arguments that need no gradient
    for i = 1, args.n do
      if accel.is_tensor(args[i]) and not args[i].requires_grad then state.constants[i] = args[i] end
    end
  end
  local res = compat.pack(self:forward(compat.unpack(args, 1, args.n)))
  for _, h in ipairs({compat.unpack(hooks.post)}) do
    local r = h(self, args, res)
    if r ~= nil then res = as_values(r) end
  end
  if state then res = through(OutputsHook, state, res, requires_grad) end
  return compat.unpack(res, 1, res.n)
end

-- ---- printing (PyTorch's module tree) ----

function Module:extra_repr() return "" end

local function add_indent(s, n)
  local pad = (" "):rep(n)
  return (s:gsub("\n", "\n" .. pad))
end

-- the "(name): child" lines of the printed tree (ModuleList collapses repeats)
function Module:_child_lines()
  local lines, r = {}, self._modules
  for _, name in ipairs(r.keys) do
    local m = r.vals[name]
    lines[#lines + 1] = "(" .. name .. "): " .. add_indent(m ~= nil and repr(m) or "None", 2)
  end
  return lines
end
M.add_indent = add_indent

repr = function(self)
  local lines = {}
  local extra = self:extra_repr()
  local n_extra = 0
  if extra ~= "" then
    for line in (extra .. "\n"):gmatch("(.-)\n") do
      lines[#lines + 1] = line
      n_extra = n_extra + 1
    end
  end
  for _, line in ipairs(self:_child_lines()) do lines[#lines + 1] = line end
  local s = self:_get_name() .. "("
  if #lines > 0 then
    if n_extra == 1 and #lines == 1 then s = s .. lines[1]
    else s = s .. "\n  " .. table.concat(lines, "\n  ") .. "\n" end
  end
  return s .. ")"
end

-- ---- formatting helpers for extra_repr (Python's spelling) ----

function M.pyrepr(v)
  if type(v) == "boolean" then return v and "True" or "False" end
  if v == nil then return "None" end
  if type(v) == "string" then return "'" .. v .. "'" end
  if type(v) == "number" then return require("accel.util").py_repr_number(v) end -- (Python's shortest repr)
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = M.pyrepr(x) end
    return "(" .. table.concat(parts, ", ") .. (#parts == 1 and ",)" or ")")
  end
  return tostring(v)
end

-- An output size as PyTorch prints it: a number, or the n entries of a list
-- with None for the nil ones ({nil, 3} -> "(None, 3)")
function M.size_repr(size, n)
  if type(size) ~= "table" then return M.pyrepr(size) end
  local parts = {}
  for i = 1, n do parts[i] = M.pyrepr(size[i]) end
  return "(" .. table.concat(parts, ", ") .. ")"
end

-- An integer or a list of n integers (PyTorch's int or tuple setting) -> a
-- list of n, each at least low; else op's error naming the setting.
-- PyTorch's pooled (or convolved) length along one axis of len: (len + 2p - d (k - 1) - 1) / s rounded down
-- (up in ceil mode), plus 1; in ceil mode the last window must start inside the input or its left padding
function M.pooled_len(len, k, s, p, d, ceil_mode)
  local span = len + 2 * p - d * (k - 1) - 1
  local o = (ceil_mode and math.ceil(span / s) or math.floor(span / s)) + 1
  if ceil_mode and (o - 1) * s >= len + p then o = o - 1 end
  return o
end

function M.int_list(op, name, v, n, low)
  local p = v
  if type(v) == "number" then
    p = {}
    for i = 1, n do p[i] = v end
  end
  local ok = type(p) == "table" and #p == n
  for i = 1, n do ok = ok and type(p[i]) == "number" and p[i] == math.floor(p[i]) and p[i] >= low end
  if not ok then raise("%s: %s must be an integer >= %d or a list of %d of them, got %s", op, name, low, n, M.pyrepr(v)) end
  return p
end

-- A convolution module's extra_repr as PyTorch prints it: the channels,
-- kernel_size and stride, then padding, output_padding and dilation where
-- they are not their defaults, groups, bias=False.
function M.conv_repr(self)
  local function any(list, v)
    for _, x in ipairs(list or {}) do if x ~= v then return true end end
    return false
  end
  local s = ("%d, %d, kernel_size=%s, stride=%s"):format(self.in_channels, self.out_channels,
    M.pyrepr(self.kernel_size), M.pyrepr(self.stride))
  if any(self.padding, 0) then s = s .. ", padding=" .. M.pyrepr(self.padding) end
  if any(self.output_padding, 0) then s = s .. ", output_padding=" .. M.pyrepr(self.output_padding) end
  if any(self.dilation, 1) then s = s .. ", dilation=" .. M.pyrepr(self.dilation) end
  if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
  if self.bias == nil then s = s .. ", bias=False" end
  return s
end

return M
