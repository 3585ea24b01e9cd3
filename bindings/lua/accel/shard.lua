-- accel.shard: sharded data parallelism (ZeRO stages 1-3 / FSDP) on one
-- engine (the work is C: core/dist/shard.c, bindings/shard_lua.c; user guide:
-- docs/sharding.md).
--
--   local eng = accel.shard.Engine(model, optimizer, {
--     stage = 2,                      -- 1: optimizer state, 2: + gradients, 3: + parameters
--     wrap = "no_wrap",               -- or a list of modules, {min_num_params = n},
--                                     -- {transformer_cls_names = {"Block"}}, "module_list"
--     bucket_cap_mb = 25,             -- stage 1's DDP buckets; stage 1-2 default units
--     offload_optimizer = false,      -- "cpu" / true: optimizer shards on the host
--     broadcast = true,               -- rank 0's parameters to every rank first
--     backward_prefetch = true,       -- stage 3: gather the next unit during a backward
--     forward_prefetch = true,        -- stage 3: gather the next unit during a forward
--                                     -- (the order of the previous forward; none in the first)
--     hybrid = false})                -- HYBRID_SHARD (stage 3) / HYBRID_SHARD_ZERO2 (stage 2):
--                                     -- shard inside each machine, replicate across machines
--   for each step:
--     loss:backward(); eng:finalize()        -- (step / clip call finalize themselves)
--     eng:clip_grad_norm_(1.0)               -- -> total norm (0-dim float32 tensor)
--     eng:clip_grad_value_(0.5)              -- or: every gradient element clamped to [-0.5, 0.5]
--     eng:step(); eng:zero_grad()            -- also optimizer:step() / optimizer:zero_grad()
--   eng:set_sync(false)                      -- gradient accumulation micro-steps
--   eng:unscale_(1 / scale) -> found_inf     -- fp16 loss scaling, agreed by every rank
--   eng:full_state_dict()                    -- {name = full tensor}, gathered one at a time
--   eng:full_optim_state()                   -- {name = {step, exp_avg, ...}} in full, the same way
--   eng:load_full_state_dict(sd), eng:load_full_optim_state(st)  -- local: reshards onto these ranks
--   eng:shard_state()                        -- this rank's shards + the index of all ranks'
--   eng:gathered(fn)                         -- stage 3: fn() with every parameter present
--   eng:close()                              -- collective: full parameters back, hooks off
--   accel.shard.engine_of(param | model | optimizer) -> the open engine holding it, or nil
--
-- The stage is read once, by the C engine (core/dist/shard.h). While an engine
-- is open, optimizer:step() and optimizer:zero_grad() of the wrapped
-- optimizer run the engine's (the optimizer keeps its param_groups, read
-- at every step, so schedulers and per-group lr / weight_decay work; its
-- own state stays empty: the state lives in the shards). Supported
-- optimizers: accel.optim.SGD, Adam, AdamW (float32 parameters).
--
-- What .grad holds: stage 1, after finalize, the full average over the
-- ranks (as DDP); stages 2-3, nil (the gradient lives only in the
-- engine's shards): clip through eng:clip_grad_norm_ / clip_grad_value_ and unscale through
-- eng:unscale_, not accel.nn.utils / GradScaler on .grad.
--
-- Accumulation: stage 1 with set_sync(false) communicates nothing and .grad
-- accumulates locally (DDP's no_sync); stages 2-3 reduce-scatter every
-- backward into the rank's gradient shard, which sums the micro-steps
-- (set_sync has no effect there), so nothing full-size is held in between.
--
-- Stage 3: between uses a wrapped module's parameters have no memory;
-- using one raises "... its memory is released ...". Each unit is
-- all-gathered by a forward pre-hook, released by a forward hook, and
-- gathered again before its backward (an identity node on its outputs);
-- parameters in no unit (the root unit) are gathered when the model's
-- forward starts and kept until their gradients are reduced. A parameter
-- belongs to the innermost unit enclosing every module that uses it (holds
-- it, or returns it from output_weight(): GPT-2's tied embedding), so a
-- weight shared across units goes up to their common ancestor's unit, the
-- root unit when there is none.
--
-- Wrap units (the granularity of stage 3's gathers and of the gradient
-- reductions): a list of modules; {min_num_params = n} (PyTorch's
-- size_based_auto_wrap_policy: a module whose not-yet-wrapped parameters
-- reach n elements becomes a unit, children first; never a ModuleList /
-- ModuleDict, nothing inside a MultiheadAttention); {transformer_cls_names
-- = {...}} (modules whose class name is listed; each class must be in the
-- model); "module_list" (each child of every ModuleList); "no_wrap" (one
-- unit). A ModuleList / ModuleDict is never called, so it cannot be a unit
-- (an error when named). Default: stage 3 "no_wrap"; stages 1-2
-- consecutive parameters in chunks of bucket_cap_mb.
local accel = require("accel")
local plugins = require("accel.plugins")
local util = require("accel.util")
local raise = util.raise
local C = accel._C

local shard = {}

local OPTIONS = {stage = "number", wrap = "any", bucket_cap_mb = "number", offload_optimizer = "any",
  broadcast = "boolean", backward_prefetch = "boolean", forward_prefetch = "boolean", hybrid = "boolean"}

local Engine = {}
Engine.__index = Engine
local owned = setmetatable({}, {__mode = "k"}) -- parameter -> the open engine holding it
Engine.__name = "accel.shard.Engine"
shard.Engine_class = Engine

-- ---- wrap policies -> unit lists ----

local function is_module(x) return type(x) == "table" and type(x.parameters) == "function" end

-- Containers that are never called (code iterates over or indexes them;
-- their forward raises): never a wrap unit, since a unit is gathered by its
-- module's forward pre-hook (PyTorch's size-based policy never wraps them).
local NEVER_CALLED = {"ModuleList", "ModuleDict"}
-- Modules whose children size_based_wrap never wraps on their own
-- (PyTorch's FORCE_LEAF_MODULES).
local FORCE_LEAF = {"MultiheadAttention"}

-- Whether module m is an instance of one of the accel.nn classes named.
local function is_any(m, classes)
  for _, name in ipairs(classes) do
    if m:isinstance(accel.nn[name]) then return true end
  end
  return false
end

-- The modules of model (itself excluded) in registration order.
local function submodules(model)
  local out = {}
  for _, m in ipairs(model:modules()) do
    if m ~= model then out[#out + 1] = m end
  end
  return out
end

-- The distinct class names of a list of modules, in order.
local function class_names(mods)
  local out, seen = {}, {}
  for _, m in ipairs(mods) do
    local name = m:_get_name()
    if not seen[name] then seen[name], out[#out + 1] = true, name end
  end
  return out
end

-- Every listed class must be one of the model's (Accelerate: "Could not
-- find the transformer layer class {name} in the model.").
local function check_classes_present(model, names)
  local classes, present = class_names(model:modules()), {}
  for _, c in ipairs(classes) do present[c] = true end
  for _, n in ipairs(names) do
    if not present[n] then
      raise("shard.Engine: could not find the transformer layer class %s in the model (wrap.transformer_cls_names, "
        .. "FSDP's transformer_cls_names_to_wrap); the model's module classes are: %s", tostring(n),
        table.concat(classes, ", "))
    end
  end
end

-- transformer_cls_names: the modules (model excluded) whose class is listed.
local function by_class(model, names)
  check_classes_present(model, names)
  local want = {}
  for _, n in ipairs(names) do want[n] = true end
  local out = {}
  for _, m in ipairs(submodules(model)) do
    if want[m:_get_name()] then out[#out + 1] = m end
  end
  return out
end

-- module_list: each child of every ModuleList (a container child is left
-- out: a ModuleList's own children are listed in turn).
local function module_lists(model)
  local out = {}
  for _, m in ipairs(submodules(model)) do
    if m:_get_name() == "ModuleList" then
      for _, c in ipairs(m:children()) do
        if not is_any(c, NEVER_CALLED) then out[#out + 1] = c end
      end
    end
  end
  return out
end

-- A callable auto-wrap policy, as PyTorch FSDP calls one:
-- policy(module, true, n) says whether to look inside a module whose
-- parameters not yet in a unit number n; after its children,
-- policy(module, false, rest) whether it becomes a unit itself (never the
-- model: it is the root unit; nothing inside a FORCE_LEAF module, and
-- never a NEVER_CALLED container: their parameters count for the parent).
local function by_policy(model, policy)
  local out, taken = {}, {}
  local function unclaimed(m)
    local n = 0
    for _, p in ipairs(m:parameters()) do
      if not taken[p] then n = n + p:numel() end
    end
    return n
  end
  local function visit(m)
    if not policy(m, true, unclaimed(m)) then return end
    if not is_any(m, FORCE_LEAF) then
      for _, c in ipairs(m:children()) do visit(c) end
    end
    if m ~= model and not is_any(m, NEVER_CALLED) and policy(m, false, unclaimed(m)) then
      for _, p in ipairs(m:parameters()) do taken[p] = true end
      out[#out + 1] = m
    end
  end
  visit(model)
  return out
end

-- size_based: PyTorch's size_based_auto_wrap_policy as a policy: look
-- inside every module; one whose unclaimed parameters reach min elements is
-- a unit (their parameters count for the parent otherwise).
local function size_based(model, min)
  return by_policy(model, function(_, recurse, n) return recurse or n >= min end)
end

-- The wrapped modules of a wrap option (any but the default).
local function wrapped_modules(model, wrap)
  if wrap == "no_wrap" then return {} end
  if type(wrap) == "function" then return by_policy(model, wrap) end
  if wrap == "module_list" then return module_lists(model) end
  if type(wrap) == "table" and wrap.min_num_params ~= nil then
    if type(wrap.min_num_params) ~= "number" or wrap.min_num_params < 1 then
      raise("shard.Engine: wrap.min_num_params must be a positive number, got %s", tostring(wrap.min_num_params))
    end
    return size_based(model, wrap.min_num_params)
  end
  if type(wrap) == "table" and wrap.transformer_cls_names ~= nil then
    if type(wrap.transformer_cls_names) ~= "table" then
      raise("shard.Engine: wrap.transformer_cls_names must be a list of class names")
    end
    return by_class(model, wrap.transformer_cls_names)
  end
  if type(wrap) == "table" and not is_module(wrap) then
    for i, m in ipairs(wrap) do
      if not is_module(m) then raise("shard.Engine: wrap[%d] must be a module, got %s", i, type(m)) end
    end
    return wrap
  end
  raise("shard.Engine: wrap must be \"no_wrap\", \"module_list\", a list of modules, {min_num_params = n}, "
    .. "{transformer_cls_names = {...}} or a function (module, recurse, nonwrapped_numel) -> boolean, got %s",
    tostring(wrap))
end

-- Stages 1-2 default units: consecutive parameters in chunks of cap_mb
-- -> units, owner (parameter -> index in units).
local function bucket_units(trainable, cap_mb)
  local units, owner, bytes = {}, {}, math.huge
  for _, p in ipairs(trainable) do
    if bytes + p:numel() * 4 > cap_mb * 1048576 then
      units[#units + 1], bytes = {}, 0
    end
    owner[p], bytes = #units, bytes + p:numel() * 4
  end
  return units, owner
end

-- The parent of a dotted module path ("" is the model).
local function parent_path(path) return path:match("^(.*)%.[^.]*$") or "" end

-- paths[m]: every registration path of each module of model ("" the model;
-- a module registered in two places has two).
local function module_paths(model)
  local paths = {}
  for path, m in model:named_modules({remove_duplicate = false}) do
    paths[m] = paths[m] or {}
    table.insert(paths[m], path)
  end
  return paths
end

-- users[p]: the paths of the modules that use parameter p: each module that
-- holds it, and a module with an output_weight() method for the weight it
-- returns (accel.models' GPT-2 LM head: its forward projects onto the tied
-- token embedding held by transformer.wte; there is no lm_head module).
local function parameter_users(model, paths)
  local users = {}
  local function add(p, m)
    users[p] = users[p] or {}
    for _, path in ipairs(paths[m]) do table.insert(users[p], path) end
  end
  for _, m in ipairs(model:modules()) do
    for _, p in ipairs(m:parameters({recurse = false})) do add(p, m) end
    if type(m.output_weight) == "function" then add(m:output_weight(), m) end
  end
  return users
end

-- The innermost module path at or above every path of the list.
local function common_path(paths)
  local common = paths[1]
  for i = 2, #paths do
    local p = paths[i]
    while common ~= "" and p ~= common and p:sub(1, #common + 1) ~= common .. "." do common = parent_path(common) end
  end
  return common
end

-- A wrap unit's module must be part of the model and be called (its
-- forward pre-hook gathers the unit).
local function check_unit_module(m, paths)
  if is_any(m, NEVER_CALLED) then
    local inside = class_names(m:children())
    raise("shard.Engine: a %s cannot be a wrap unit: it is never called (code iterates over or indexes it), so "
      .. "its unit would never be gathered; wrap the modules in it instead (their classes: %s)", m:_get_name(),
      #inside > 0 and table.concat(inside, ", ") or "none")
  end
  if not paths[m] then raise("shard.Engine: a wrap unit's module (a %s) is not part of the model", m:_get_name()) end
end

-- owner[p] (index in mods; nil: the root unit) of each trainable parameter:
-- the innermost wrapped module at or above every module that uses p, so a
-- parameter shared by modules of two units (a tied weight) goes up to the
-- unit enclosing both, the root unit when none does (PyTorch FSDP's rule: a
-- shared parameter lives in a unit enclosing every user).
local function module_owners(model, trainable, mods)
  local paths, unit_at = module_paths(model), {}
  for u, m in ipairs(mods) do
    check_unit_module(m, paths)
    for _, path in ipairs(paths[m]) do unit_at[path] = unit_at[path] or u end
  end
  local users, owner = parameter_users(model, paths), {}
  for _, p in ipairs(trainable) do
    local path = common_path(users[p])
    while unit_at[path] == nil and path ~= "" do path = parent_path(path) end
    owner[p] = unit_at[path]
  end
  return owner
end

-- The units of the wrap option ({module = m}, or {} for a default bucket)
-- and owner[p] (index in them; nil: the root unit).
local function plan_units(model, wrap, params_sharded, cap_mb, trainable)
  if wrap == nil and not params_sharded then return bucket_units(trainable, cap_mb) end
  local mods = wrap == nil and {} or wrapped_modules(model, wrap)
  local units = {}
  for u, m in ipairs(mods) do units[u] = {module = m} end
  return units, module_owners(model, trainable, mods)
end

-- unit_of[i] (the C unit index, 1-based) of each trainable parameter, the C
-- units, and whether there is a root unit: the root (when a parameter is in
-- no unit) first, then the units that own a parameter, in the order of their
-- first one.
local function layout(trainable, units, owner)
  local has_root, order, cidx = false, {}, {}
  for _, p in ipairs(trainable) do
    local u = owner[p]
    if u == nil then
      has_root = true
    elseif not cidx[u] then
      order[#order + 1], cidx[u] = u, true
    end
  end
  local cunits = has_root and {{root = true}} or {}
  for _, u in ipairs(order) do
    cunits[#cunits + 1] = units[u]
    cidx[u] = #cunits
  end
  local unit_of = {}
  for i, p in ipairs(trainable) do unit_of[i] = owner[p] and cidx[owner[p]] or 1 end
  return unit_of, cunits, has_root
end

-- shard.unit_sizes(model, trainable, wrap, params_sharded, cap_mb): the
-- units an Engine would build over the trainable parameters, in its order,
-- as {numel =, root = true|nil} (accel-lua estimate-memory's layout).
function shard.unit_sizes(model, trainable, wrap, params_sharded, cap_mb)
  local unit_of, cunits = layout(trainable, plan_units(model, wrap, params_sharded, cap_mb, trainable))
  local out = {}
  for i, u in ipairs(cunits) do out[i] = {numel = 0, root = u.root} end
  for i, p in ipairs(trainable) do
    local u = out[unit_of[i]]
    u.numel = u.numel + p:numel()
  end
  return out
end

-- ---- stage 3 hooks ----

-- res with every tensor that requires grad passed through u's pre-backward
-- identity (tables recursed, copied).
local function wrap_outputs(c, u, v)
  if accel.is_tensor(v) then
    if v.requires_grad then return c:pre_backward(u, v) end
    return v
  end
  if type(v) == "table" and getmetatable(v) == nil then
    local out = {}
    for k, x in pairs(v) do out[k] = wrap_outputs(c, u, x) end
    return out
  end
  return v
end

local function install_hooks(self)
  local c, handles = self._c, {}
  for u, unit in ipairs(self._units) do
    if unit.module then
      handles[#handles + 1] = unit.module:register_forward_pre_hook(function() c:before_forward(u) end)
      handles[#handles + 1] = unit.module:register_forward_hook(function(_, _, res)
        local out = wrap_outputs(c, u, res)
        c:release(u)
        return out
      end)
    end
  end
  local root = self._has_root
  handles[#handles + 1] = self.model:register_forward_pre_hook(function()
    c:forward_begin()
    if root then c:gather(1) end
  end)
  self._handles = handles
end

-- ---- the optimizer ----

local function optimizer_kind(opt)
  local optim = accel.optim
  local mt = getmetatable(opt)
  if mt == optim.SGD then return "sgd" end
  if mt == optim.Adam then return "adam" end
  if mt == optim.AdamW then return "adamw" end
  raise("shard.Engine: the optimizer must be accel.optim.SGD, Adam or AdamW, got %s",
    type(opt) == "table" and tostring(opt.__name) or type(opt))
end

-- Refuse a trainable parameter of param group gi that the engine does not
-- shard: one of the model's that was frozen when it was prepared, or one
-- from elsewhere (both added by add_param_group after prepare, typically).
local function refuse_unsharded(self, gi, p)
  for name, q in self.model:named_parameters() do
    if q == p then
      raise("shard.Engine: param group %d holds %s, which did not require grad when the model was prepared; under "
        .. "sharding the set of trained parameters is fixed at prepare: call requires_grad_(true) on it before "
        .. "prepare", gi, name)
    end
  end
  raise("shard.Engine: param group %d holds a parameter that is not in the sharded model (added after "
    .. "prepare, e.g. by add_param_group?); under sharding the optimizer may hold only the prepared model's "
    .. "parameters", gi)
end

-- group_of[i]: the param group (index) of trainable parameter i.
local function group_index(self)
  local where, mine = {}, {}
  for _, p in ipairs(self.params) do mine[p] = true end
  for gi, g in ipairs(self.optimizer.param_groups) do
    for _, p in ipairs(g.params) do
      if not mine[p] and p.requires_grad then refuse_unsharded(self, gi, p) end
      where[p] = gi
    end
  end
  local out = {}
  for i, p in ipairs(self.params) do
    out[i] = where[p]
    if not out[i] then
      raise("shard.Engine: parameter %s requires grad but is in none of the optimizer's param groups",
        self.names[i] or tostring(i))
    end
  end
  return out
end

local function hijack_optimizer(self)
  local opt, eng = self.optimizer, self
  rawset(opt, "step", require("accel.optim")._with_step_hooks(function(_, closure)
    rawset(opt, "_opt_called", true) -- a scheduler's check that the optimizer stepped first (lr_scheduler.lua)
    return eng:step(closure)
  end))
  rawset(opt, "zero_grad", function(_, ...) return eng:zero_grad(...) end)
  rawset(opt, "_shard_engine", eng)
end

-- ---- construction ----

local function trainable_of(model)
  local params, names, seen = {}, {}, {}
  for name, p in model:named_parameters() do
    if p.requires_grad and not seen[p] then
      seen[p] = true
      params[#params + 1] = p
      names[#params] = name
    end
  end
  return params, names
end

local function check_engine_options(o)
  plugins.check_options("shard.Engine", o, OPTIONS)
  local stage = o.stage
  if stage == nil then raise("shard.Engine: option stage is required (1, 2 or 3)") end
  if stage ~= math.floor(stage) or not pcall(C.shard_stage_flags, stage) then
    raise("shard.Engine: stage must be 1, 2 or 3, got %s (stage 0 / NO_SHARD is DDP: accel.ddp)", tostring(stage))
  end
  local off = o.offload_optimizer
  if off ~= nil and off ~= false and off ~= true and off ~= "cpu" and off ~= "none" then
    raise("shard.Engine: offload_optimizer must be false, true, \"cpu\" or \"none\", got %s", tostring(off))
  end
  if o.hybrid and stage < 2 then
    raise("shard.Engine: hybrid = true needs stage 2 (HYBRID_SHARD_ZERO2) or 3 (HYBRID_SHARD), got stage %s",
      tostring(stage))
  end
  local cap = o.bucket_cap_mb or 25
  if not (cap > 0) then raise("shard.Engine: bucket_cap_mb must be a positive number, got %s", tostring(cap)) end
  return stage, cap, off == true or off == "cpu"
end

-- Engine(model, optimizer, opts): see the top of this file.
function shard.Engine(model, optimizer, o)
  if not is_module(model) then raise("shard.Engine: expected a module, got %s", type(model)) end
  o = o or {}
  local stage, cap, offload = check_engine_options(o)
  local kind = optimizer_kind(optimizer)
  local params, names = trainable_of(model)
  if #params == 0 then raise("shard.Engine: the model has no parameters that require grad") end
  for i, p in ipairs(params) do
    if owned[p] then raise("shard.Engine: parameter %s is already held by another engine (close that one first)", names[i]) end
  end
  local self = setmetatable({model = model, optimizer = optimizer, params = params, names = names, stage = stage,
    _kind = kind}, Engine)
  group_index(self)
  local _, params_sharded = C.shard_stage_flags(stage)
  self._params_sharded = params_sharded
  local unit_of, units, has_root = layout(params, plan_units(model, o.wrap, params_sharded, cap, params))
  self._units, self._has_root = units, has_root
  self._c = C.shard_engine(params, unit_of, {stage = stage, bucket_cap_mb = cap, offload_optimizer = offload,
    broadcast = o.broadcast ~= false, backward_prefetch = o.backward_prefetch ~= false,
    forward_prefetch = o.forward_prefetch ~= false, hybrid = o.hybrid == true})
  self._unit_of = unit_of
  if params_sharded then install_hooks(self) end
  for _, p in ipairs(params) do owned[p] = self end
  hijack_optimizer(self)
  return self
end

function shard.is_engine(x) return getmetatable(x) == Engine end

-- The open engine that holds x (a parameter, a module's first trainable
-- parameter, or a wrapped optimizer), or nil: for code that must route
-- gradient work (clipping, unscaling, state dicts) through the engine.
function shard.engine_of(x)
  if accel.is_tensor(x) then return owned[x] end
  if type(x) ~= "table" then return nil end
  if rawget(x, "_shard_engine") then return rawget(x, "_shard_engine") end
  if is_module(x) then
    for _, p in ipairs(x:parameters()) do
      if owned[p] then return owned[p] end
    end
  end
  return nil
end

-- ---- the step and the gradients ----

function Engine:_live()
  if not self._c then raise("shard.Engine: the engine was closed") end
  return self._c
end

function Engine:finalize() self:_live():finalize() end

function Engine:step(closure)
  local c = self:_live()
  local loss = accel.optim._run_closure(closure, self.optimizer.__name)
  c:step(self._kind, group_index(self), self.optimizer.param_groups)
  return loss
end

-- zero_grad([{set_to_none = true}]): stage 1 sets .grad to nil, or zeroes
-- it in place with set_to_none = false; stages 2-3 keep no .grad and free
-- the gradient shards either way (the next backward makes them again).
function Engine:zero_grad(...)
  local set_to_none = accel.optim._zero_grad_options(...).set_to_none ~= false
  self:_live():zero_grad(set_to_none)
end

function Engine:set_sync(on) self:_live():set_sync(on and true or false) end

-- clip_grad_norm_(max_norm, norm_type = 2, error_if_nonfinite = false) -> total norm (0-dim float32)
-- (norm_type as accel.nn.utils.clip_grad_norm_'s: negative too, -math.huge the smallest |element|)
function Engine:clip_grad_norm_(max_norm, norm_type, error_if_nonfinite)
  if type(max_norm) ~= "number" then raise("shard.Engine:clip_grad_norm_: max_norm must be a number") end
  local p = accel.nn.utils._norm_type("shard.Engine:clip_grad_norm_", norm_type)
  if p == 0 then
    -- its total is the number of gradients with a nonzero element: not a sum over shards
    raise("shard.Engine:clip_grad_norm_: norm_type 0 is not supported on sharded gradients (use 1, 2 or \"inf\")")
  end
  return accel.tensor(self:_live():clip_grad_norm(max_norm, p, error_if_nonfinite == true))
end

-- clip_grad_value_(clip_value): every gradient element clamped to
-- [-clip_value, clip_value], as torch.nn.utils.clip_grad_value_ (each rank
-- clamps the shard it holds: the clamp is element by element).
function Engine:clip_grad_value_(clip_value)
  if type(clip_value) ~= "number" then raise("shard.Engine:clip_grad_value_: clip_value must be a number") end
  self:_live():clamp_grads(clip_value)
end

-- unscale_(factor) -> found_inf: gradients times factor; true on every rank
-- when any rank's gradient holds an inf / NaN.
function Engine:unscale_(factor) return self:_live():unscale(factor) end

-- ---- state ----

-- Element count from the shape (readable while a parameter is released).
local function numel_of(p)
  local n = 1
  for _, d in ipairs(p.shape) do n = n * d end
  return n
end

-- {name = full float32 tensor} of parameters, then buffers (clones), one
-- parameter gathered at a time (collective at stage 3).
function Engine:full_state_dict()
  local c, sd = self:_live(), {}
  c:finalize()
  for i, name in ipairs(self.names) do sd[name] = c:full_tensor(i, 0) end
  for name, b in self.model:named_buffers() do sd[name] = b:detach():clone() end
  return sd
end

-- {name = {step = n, exp_avg = t, ...}}: the optimizer state in full, one
-- tensor gathered at a time (collective).
function Engine:full_optim_state()
  local c, out = self:_live(), {}
  c:finalize()
  local names = c:state_names()
  for i, name in ipairs(self.names) do
    local st = {step = c:steps(i)}
    for k, s in ipairs(names) do st[s] = c:full_tensor(i, k) end
    out[name] = st
  end
  return out
end

-- Full tensor t for parameter i, checked and made float32 / contiguous.
local function full_arg(self, i, t, what)
  local name, p = self.names[i], self.params[i]
  if not accel.is_tensor(t) then raise("shard.Engine:%s: no tensor for %s", what, name) end
  local want, got = p.shape, t.shape
  local same = #want == #got
  for d = 1, #want do same = same and want[d] == got[d] end
  if not same then
    raise("shard.Engine:%s: %s has shape [%s], the parameter [%s]", what, name, table.concat(got, ", "),
      table.concat(want, ", "))
  end
  return t:detach():float():contiguous()
end

-- load_full_state_dict(sd): every parameter from full tensors keyed as
-- full_state_dict's (buffers and frozen parameters, which the model holds
-- in full, too, where present). Local: each rank keeps its part, so a state
-- saved on any number of ranks loads on this one.
function Engine:load_full_state_dict(sd)
  local c = self:_live()
  local held = {}
  for i, name in ipairs(self.names) do
    held[self.params[i]] = true
    c:load_full(i, 0, full_arg(self, i, sd[name], "load_full_state_dict"))
  end
  accel.no_grad(function()
    for name, p in self.model:named_parameters() do
      if not held[p] and sd[name] ~= nil then p:copy_(sd[name]) end
    end
    for name, b in self.model:named_buffers() do
      if sd[name] ~= nil then b:copy_(sd[name]) end
    end
  end)
end

local KIND_STATES = {sgd = {"momentum_buffer"}, adam = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}}
KIND_STATES.adamw = KIND_STATES.adam

-- load_full_optim_state(st): the reverse of full_optim_state (local).
function Engine:load_full_optim_state(st)
  local c = self:_live()
  c:set_kind(self._kind)
  for i, name in ipairs(self.names) do
    local s = st[name]
    if type(s) ~= "table" then raise("shard.Engine:load_full_optim_state: no state for parameter %s", name) end
    c:set_steps(i, s.step or 0) -- (a checkpoint's SGD state gets its step from shard_checkpoint's Dense:step)
    for k, n in ipairs(KIND_STATES[self._kind]) do
      if s[n] ~= nil then c:load_full(i, k, full_arg(self, i, s[n], "load_full_optim_state")) end
    end
  end
end

-- This rank's shards and the index of every rank's:
-- {rank, world, stage, replica, replicas, state_names = {"exp_avg", ...},
-- (hybrid: rank / world / index are within this machine; replica is the
-- machine's index, replicas their number: every machine holds the same
-- shards, so replica 0's files are a complete checkpoint)
--  tensors = {["unit1.param"] = t, ["unit1.exp_avg"] = t, ...},
--  steps = {[name] = n},
--  units = {{numel, padded, shard, params = {{name, shape, offset, numel}}}},
--  index = {{param = name, state = "param" | "exp_avg" | ..., rank = r, unit = u,
--            begin = first element in the parameter (0-based), len, at = first element in the shard}}}
function Engine:shard_state()
  local c = self:_live()
  local info, units = c:info(), c:units()
  local out = {rank = info.rank, world = info.world, stage = info.stage, replica = info.replica,
    replicas = info.replicas, state_names = c:state_names(),
    tensors = {}, steps = {}, units = {}, index = {}}
  local states = {"param"}
  for k, n in ipairs(out.state_names) do states[k + 1] = n end
  for u, unit in ipairs(units) do
    local entry = {numel = unit.numel, padded = unit.padded, shard = unit.shard, params = {}}
    for k, i in ipairs(unit.params) do
      local p = self.params[i]
      local n = numel_of(p)
      entry.params[k] = {name = self.names[i], shape = p.shape, offset = unit.offsets[k], numel = n}
      out.steps[self.names[i]] = c:steps(i)
      for r = 0, info.world - 1 do
        local lo, hi = r * unit.shard, (r + 1) * unit.shard
        local b, e = math.max(lo, unit.offsets[k]), math.min(hi, unit.offsets[k] + n)
        for _, s in ipairs(states) do
          if e > b then
            out.index[#out.index + 1] = {param = self.names[i], state = s, rank = r, unit = u,
              begin = b - unit.offsets[k], len = e - b, at = b - lo}
          end
        end
      end
    end
    out.units[u] = entry
    for w, s in ipairs(states) do out.tensors[("unit%d.%s"):format(u, s)] = c:shard(u, w - 1) end
  end
  return out
end

-- fn() with every unit gathered (stage 3; collective), released after.
function Engine:gathered(fn)
  local c = self:_live()
  c:gather_all()
  local ok, err = pcall(fn)
  if self._params_sharded then
    for u = 1, #self._units do c:release(u) end
  end
  if not ok then error(err, 0) end
end

function Engine:stats() return self:_live():stats() end
function Engine:units() return self:_live():units() end

-- Collective: every parameter back in full, hooks removed, the optimizer's
-- own step / zero_grad restored, shards freed.
function Engine:close()
  local c = self._c
  if not c then return end
  c:gather_all()
  for _, h in ipairs(self._handles or {}) do h:remove() end
  rawset(self.optimizer, "step", nil)
  rawset(self.optimizer, "zero_grad", nil)
  rawset(self.optimizer, "_shard_engine", nil)
  c:close()
  for _, p in ipairs(self.params) do owned[p] = nil end
  self._c = nil
end

function Engine:__tostring()
  if not self._c then return "accel.shard.Engine(closed)" end
  return tostring(self._c)
end

return shard
