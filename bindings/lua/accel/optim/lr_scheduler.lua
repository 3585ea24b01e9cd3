-- accel.optim.lr_scheduler: PyTorch's learning-rate schedulers, with the
-- same (chainable, recursive) formulas, so the values match torch's to the
-- last bit: StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR,
-- ConstantLR, PolynomialLR, OneCycleLR, LambdaLR, MultiplicativeLR,
-- SequentialLR, ChainedScheduler, CosineAnnealingWarmRestarts,
-- ReduceLROnPlateau, and HF transformers' get_cosine_schedule_with_warmup,
-- get_linear_schedule_with_warmup, get_constant_schedule(_with_warmup) and
-- get_scheduler. As PyTorch 2.x, the constructor's step
-- keeps the optimizer's lr (self._is_initial), so a scheduler rebuilt with
-- last_epoch = k continues where it stopped.
--
--   local sched = lr_scheduler.CosineAnnealingLR(optimizer, {T_max = 100})
--   local sched = lr_scheduler.StepLR(optimizer, 30, {gamma = 0.1})   -- positional works too
--   optimizer:step(); sched:step(); print(sched:get_last_lr()[1], sched.last_epoch)
--
-- Arguments PyTorch takes positionally may be given positionally or in the
-- trailing options table. Constructing a scheduler records `initial_lr` in
-- each param group and performs the initial step (last_epoch becomes 0), as
-- in PyTorch. state_dict() holds every field but the optimizer and functions
-- (LambdaLR keeps its lambdas; SequentialLR nests its schedulers' state
-- dicts); MultiStepLR keeps its milestones as a sorted list (PyTorch: a
-- Counter). step(epoch) sets last_epoch and uses the closed form, as
-- PyTorch's deprecated form does (SequentialLR relies on it). Any object
-- with a `param_groups` list is accepted as the optimizer. Checks PyTorch
-- leaves out raise clear errors here: StepLR's step_size must be positive
-- (a fraction works as in PyTorch: 1.5 decays at epochs 3, 6, ...),
-- LinearLR's total_iters a non-negative integer (0: the start factor for
-- good, a warmup switched off), CosineAnnealingLR's T_max and
-- PolynomialLR's total_iters positive, LinearLR's start_factor > 0 (as
-- PyTorch 2 requires), ConstantLR's factor > 0 (PyTorch divides by it at
-- step total_iters); a lambda must return a number; a scheduler whose
-- values are fewer than the param groups (one added after it) raises.
local optim = require("accel.optim")
local raise = optim._raise
local util = require("accel.util")

local S = {}

local REQUIRED = {} -- marks an argument without default

local function is_options(t)
  return type(t) == "table" and getmetatable(t) == nil and rawget(t, 1) == nil
end

-- An option key that spec does not name is an error listing the names.
local function check_keys(name, spec, opts)
  local names, known = {}, {}
  for i, s in ipairs(spec) do names[i], known[s[1]] = s[1], true end
  for k in pairs(opts) do
    if not known[k] then util.unknown_option(name, k, names) end
  end
end

-- Binds positional arguments and one trailing options table to the names of
-- spec ({{name, default}, ...} in PyTorch's order, after the optimizer).
local function parse(name, spec, ...)
  local n = select("#", ...)
  local args = {...}
  local opts, required = {}, 0
  for _, s in ipairs(spec) do
    if s[2] == REQUIRED then required = required + 1 end
  end
  -- the trailing table is the options, unless it is an empty one that a
  -- required positional argument still needs (e.g. milestones = {})
  if n > 0 and is_options(args[n]) and not (next(args[n]) == nil and n <= required) then
    opts = args[n]
    n = n - 1
  end
  if n > #spec then raise("%s: too many arguments (%d given, at most %d)", name, n, #spec) end
  check_keys(name, spec, opts)
  local out = {}
  for i, s in ipairs(spec) do
    local key, default = s[1], s[2]
    local v = args[i]
    if i <= n and v ~= nil and opts[key] ~= nil then raise("%s: '%s' given both positionally and as an option", name, key) end
    if i > n or v == nil then v = opts[key] end
    if v == nil then
      if default == REQUIRED then raise("%s: missing required argument '%s'", name, key) end
      v = default
    end
    out[key] = v
  end
  return out
end

local function need_number(name, key, v)
  if type(v) ~= "number" then raise("%s: '%s' must be a number, got %s", name, key, type(v)) end
  return v
end

-- v as a message shows it: a number as is, a string quoted and called one, else its type
local function shown(v)
  if type(v) == "number" then return tostring(v) end
  if type(v) == "string" then return "the string " .. util.show(v) end
  return type(v)
end

local function need_positive_int(name, key, v)
  if type(v) ~= "number" or v <= 0 or v ~= math.floor(v) then
    raise("%s: '%s' must be a positive integer, got %s", name, key, shown(v))
  end
  return v
end

local copy_plain = util.copy_plain

-- ---- base class ----

local LRScheduler = {}
LRScheduler.__index = LRScheduler
LRScheduler.__name = "LRScheduler"
LRScheduler.extend = optim.Optimizer.extend
S.LRScheduler = LRScheduler
S._LRScheduler = LRScheduler

local function check_optimizer(name, optimizer)
  if type(optimizer) ~= "table" or type(optimizer.param_groups) ~= "table" then
    raise("%s: expected an optimizer (with param_groups), got %s", name, type(optimizer))
  end
end

-- The optimizer's step marks the optimizer as stepped (its _opt_called), so
-- a scheduler can tell a step of its own that comes first: wrapped once, on
-- the instance, as PyTorch wraps optimizer.step when a scheduler is made.
local function watch_optimizer_steps(optimizer)
  if rawget(optimizer, "_step_watched") or type(optimizer.step) ~= "function" then return end
  local step = optimizer.step
  rawset(optimizer, "_step_watched", true)
  rawset(optimizer, "step", function(opt, ...)
    rawset(opt, "_opt_called", true)
    return step(opt, ...)
  end)
end

-- LRScheduler.init(self, optimizer, last_epoch): records initial_lr and
-- base_lrs, then takes the initial step.
function LRScheduler:init(optimizer, last_epoch)
  local name = self.__name
  check_optimizer(name, optimizer)
  watch_optimizer_steps(optimizer)
  self.optimizer = optimizer
  last_epoch = need_number(name, "last_epoch", last_epoch or -1)
  for i, g in ipairs(optimizer.param_groups) do
    if last_epoch == -1 then
      if g.initial_lr == nil then g.initial_lr = g.lr end
    elseif g.initial_lr == nil then
      raise("%s: param 'initial_lr' is not specified in param_groups[%d] when resuming an optimizer", name, i)
    end
  end
  self.base_lrs = {}
  for i, g in ipairs(optimizer.param_groups) do self.base_lrs[i] = g.initial_lr end
  self.last_epoch = last_epoch
  self:_initial_step()
end

-- The constructor's step: get_lr sees self._is_initial (as PyTorch 2.x), so
-- a scheduler resumed with last_epoch = k keeps the optimizer's lr there.
function LRScheduler:_initial_step()
  self._step_count = 0
  self._is_initial = true
  self:step()
  self._is_initial = nil
end

function LRScheduler:get_lr() raise("%s: get_lr is not implemented", self.__name) end

-- the current lr of every group
function LRScheduler:_group_lrs(factor)
  local out = {}
  for i, g in ipairs(self.optimizer.param_groups) do out[i] = factor and g.lr * factor or g.lr end
  return out
end

-- step([epoch])
function LRScheduler:step(epoch)
  if self._step_count == 1 and rawget(self.optimizer, "_step_watched") and not rawget(self.optimizer, "_opt_called") then
    io.stderr:write(("%s: warning: scheduler:step() was called before optimizer:step(); call optimizer:step() first "
      .. "(as PyTorch warns: otherwise the first value of the learning rate schedule is skipped)\n"):format(self.__name))
  end
  self._step_count = self._step_count + 1
  local values
  if epoch == nil then
    self.last_epoch = self.last_epoch + 1
    values = self:get_lr()
  else
    self.last_epoch = need_number(self.__name, "epoch", epoch)
    values = self._get_closed_form_lr and self:_get_closed_form_lr() or self:get_lr()
  end
  self:_set_lrs(values)
end

-- Why a param group has no schedule: it was added after the scheduler.
local ADDED_GROUP = "a param group added after the scheduler was created has none (create the scheduler after "
  .. "add_param_group)"

-- Every group's lr from values (one per group), remembered for get_last_lr.
-- A group added (add_param_group) after the scheduler was made has no
-- base lr or lambda, so a scheduler that needs them has a value too few.
function LRScheduler:_set_lrs(values)
  local groups, last = self.optimizer.param_groups, {}
  if #values ~= #groups then
    raise("%s: the optimizer has %d param groups, but the scheduler has learning rates for %d: " .. ADDED_GROUP,
      self.__name, #groups, #values)
  end
  for i, g in ipairs(groups) do
    g.lr = values[i]
    last[i] = g.lr
  end
  self._last_lr = last
end

function LRScheduler:get_last_lr()
  local out = {}
  for i, v in ipairs(self._last_lr) do out[i] = v end
  return out
end

-- Every field but the optimizer and functions, copied.
function LRScheduler:state_dict()
  local sd = {}
  for k, v in pairs(self) do
    if k ~= "optimizer" and type(v) ~= "function" then sd[k] = copy_plain(v) end
  end
  return sd
end

function LRScheduler:load_state_dict(sd)
  if type(sd) ~= "table" then raise("%s: load_state_dict expects a table from state_dict()", self.__name) end
  for k, v in pairs(sd) do
    if k ~= "optimizer" then self[k] = copy_plain(v) end
  end
end

-- A scheduler class: Cls(optimizer, ...) parses spec and calls setup(self, args).
local function scheduler_class(name, spec, setup)
  local cls = LRScheduler:extend(name)
  function cls:init(optimizer, ...)
    check_optimizer(name, optimizer)
    local a = parse(name, spec, ...)
    setup(self, a, optimizer)
    LRScheduler.init(self, optimizer, a.last_epoch)
  end
  S[name] = cls
  return cls
end

local TAIL = {{"last_epoch", -1}}
local function with_tail(spec)
  for _, s in ipairs(TAIL) do spec[#spec + 1] = s end
  return spec
end

-- ---- StepLR(optimizer, step_size, {gamma = 0.1}) ----

local StepLR = scheduler_class("StepLR", with_tail({{"step_size", REQUIRED}, {"gamma", 0.1}}), function(self, a)
  local size = a.step_size
  if type(size) ~= "number" or not (size > 0) then
    raise("StepLR: 'step_size' must be a positive number, got %s", shown(size))
  end
  self.step_size = size
  self.gamma = need_number("StepLR", "gamma", a.gamma)
end)

function StepLR:get_lr()
  if self.last_epoch == 0 or self.last_epoch % self.step_size ~= 0 then return self:_group_lrs() end
  return self:_group_lrs(self.gamma)
end

function StepLR:_get_closed_form_lr()
  local out = {}
  for i, b in ipairs(self.base_lrs) do out[i] = b * self.gamma ^ math.floor(self.last_epoch / self.step_size) end
  return out
end

-- ---- MultiStepLR(optimizer, milestones, {gamma = 0.1}) ----

local MultiStepLR = scheduler_class("MultiStepLR", with_tail({{"milestones", REQUIRED}, {"gamma", 0.1}}),
  function(self, a)
    if type(a.milestones) ~= "table" then raise("MultiStepLR: 'milestones' must be a list of epochs") end
    local ms = {}
    for i, m in ipairs(a.milestones) do ms[i] = need_number("MultiStepLR", "milestones", m) end
    table.sort(ms)
    self.milestones = ms
    self.gamma = need_number("MultiStepLR", "gamma", a.gamma)
  end)

function MultiStepLR:get_lr()
  local count = 0
  for _, m in ipairs(self.milestones) do
    if m == self.last_epoch then count = count + 1 end
  end
  if count == 0 then return self:_group_lrs() end
  return self:_group_lrs(self.gamma ^ count)
end

-- Python's bisect_right: the insertion point after the values <= x, by
-- binary search (for a sorted list, how many values are <= x; for an
-- unsorted SequentialLR milestone list, the same index as PyTorch's)
local function bisect_right(list, x)
  local lo, hi = 0, #list
  while lo < hi do
    local mid = (lo + hi - (lo + hi) % 2) / 2
    if x < list[mid + 1] then hi = mid else lo = mid + 1 end
  end
  return lo
end

function MultiStepLR:_get_closed_form_lr()
  local out = {}
  for i, b in ipairs(self.base_lrs) do out[i] = b * self.gamma ^ bisect_right(self.milestones, self.last_epoch) end
  return out
end

-- ---- ExponentialLR(optimizer, gamma) ----

local ExponentialLR = scheduler_class("ExponentialLR", with_tail({{"gamma", REQUIRED}}), function(self, a)
  self.gamma = need_number("ExponentialLR", "gamma", a.gamma)
end)

function ExponentialLR:get_lr()
  if self._is_initial then return self:_group_lrs() end
  return self:_group_lrs(self.gamma)
end

function ExponentialLR:_get_closed_form_lr()
  local out = {}
  for i, b in ipairs(self.base_lrs) do out[i] = b * self.gamma ^ self.last_epoch end
  return out
end

-- ---- CosineAnnealingLR(optimizer, T_max, {eta_min = 0}) ----

local CosineAnnealingLR = scheduler_class("CosineAnnealingLR", with_tail({{"T_max", REQUIRED}, {"eta_min", 0}}),
  function(self, a)
    local t = need_number("CosineAnnealingLR", "T_max", a.T_max)
    if t <= 0 then raise("CosineAnnealingLR: 'T_max' must be positive, got %s", tostring(t)) end
    self.T_max = t
    self.eta_min = need_number("CosineAnnealingLR", "eta_min", a.eta_min)
  end)

-- eta_min + (base - eta_min) * (1 + cos(pi * t / T)) / 2 for every base lr
local function cosine_lrs(base_lrs, eta_min, t, T)
  local out = {}
  for i, b in ipairs(base_lrs) do out[i] = eta_min + (b - eta_min) * (1 + math.cos(math.pi * t / T)) / 2 end
  return out
end

-- PyTorch's recursive form, expression by expression (the branches that
-- read the base lrs give one value per base lr, as PyTorch's zip).
function CosineAnnealingLR:get_lr()
  local e, T, eta, pi = self.last_epoch, self.T_max, self.eta_min, math.pi
  local groups, out = self.optimizer.param_groups, {}
  if self._is_initial then return self:_group_lrs() end
  if self._step_count == 1 and e > 0 then return cosine_lrs(self.base_lrs, eta, e, T) end
  if (e - 1 - T) % (2 * T) == 0 then
    for i, base in ipairs(self.base_lrs) do out[i] = groups[i].lr + (base - eta) * (1 - math.cos(pi / T)) / 2 end
    return out
  end
  for i, g in ipairs(groups) do
    out[i] = (1 + math.cos(pi * e / T)) / (1 + math.cos(pi * (e - 1) / T)) * (g.lr - eta) + eta
  end
  return out
end

function CosineAnnealingLR:_get_closed_form_lr()
  return cosine_lrs(self.base_lrs, self.eta_min, self.last_epoch, self.T_max)
end

-- ---- LinearLR(optimizer, {start_factor = 1/3, end_factor = 1, total_iters = 5}) ----

local LinearLR = scheduler_class("LinearLR",
  with_tail({{"start_factor", 1.0 / 3}, {"end_factor", 1.0}, {"total_iters", 5}}), function(self, a)
    local s = need_number("LinearLR", "start_factor", a.start_factor)
    local e = need_number("LinearLR", "end_factor", a.end_factor)
    if s > 1 or s <= 0 then
      raise("LinearLR: Starting multiplicative factor expected to be greater than 0 and less or equal to 1.")
    end
    if e > 1 or e < 0 then raise("LinearLR: Ending multiplicative factor expected to be between 0 and 1.") end
    self.start_factor, self.end_factor = s, e
    local T = a.total_iters
    if type(T) ~= "number" or T < 0 or T ~= math.floor(T) then
      raise("LinearLR: 'total_iters' must be a non-negative integer, got %s", shown(T))
    end
    self.total_iters = T
  end)

function LinearLR:get_lr()
  local e, s, f, T = self.last_epoch, self.start_factor, self.end_factor, self.total_iters
  if e == 0 then return self:_group_lrs(s) end
  if self._is_initial or e > T then return self:_group_lrs() end
  return self:_group_lrs(1 + (f - s) / (T * s + (e - 1) * (f - s)))
end

function LinearLR:_get_closed_form_lr()
  local s, f, T = self.start_factor, self.end_factor, self.total_iters
  local out = {}
  for i, b in ipairs(self.base_lrs) do -- (total_iters 0: the start factor, as the chained form keeps it)
    out[i] = b * (T == 0 and s or s + (f - s) * math.min(T, self.last_epoch) / T)
  end
  return out
end

-- ---- LambdaLR(optimizer, lr_lambda) ----

local function is_callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return mt ~= nil and type(mt) == "table" and mt.__call ~= nil
end

local function lambdas_of(name, f, optimizer)
  local n, fns = #optimizer.param_groups, {}
  if is_callable(f) then
    for i = 1, n do fns[i] = f end
  elseif type(f) == "table" then
    if #f ~= n then raise("%s: Expected %d lr_lambdas, but got %d", name, n, #f) end
    for i = 1, n do
      if not is_callable(f[i]) then raise("%s: lr_lambda[%d] must be a function", name, i) end
      fns[i] = f[i]
    end
  else
    raise("%s: 'lr_lambda' must be a function of the epoch or a list of them, got %s", name, type(f))
  end
  return fns
end

-- lr_lambdas[i](last_epoch), which must be a number
local function lambda_value(self, i)
  local v = self.lr_lambdas[i](self.last_epoch)
  if type(v) ~= "number" then
    raise("%s: lr_lambda[%d](%s) returned %s, expected a number (the lr factor)", self.__name, i,
      tostring(self.last_epoch), shown(v))
  end
  return v
end

local LambdaLR = scheduler_class("LambdaLR", with_tail({{"lr_lambda", REQUIRED}}), function(self, a, optimizer)
  self.lr_lambdas = lambdas_of("LambdaLR", a.lr_lambda, optimizer)
end)

function LambdaLR:get_lr()
  local out = {}
  for i, b in ipairs(self.base_lrs) do out[i] = b * lambda_value(self, i) end
  return out
end

-- The lambdas are code, not state: kept as they are.
function LambdaLR:state_dict()
  local sd = LRScheduler.state_dict(self)
  sd.lr_lambdas = nil
  return sd
end

function LambdaLR:load_state_dict(sd)
  local fns = self.lr_lambdas
  LRScheduler.load_state_dict(self, sd)
  self.lr_lambdas = fns
end

-- ---- MultiplicativeLR(optimizer, lr_lambda): lr *= lr_lambda(epoch) ----


local MultiplicativeLR = scheduler_class("MultiplicativeLR", with_tail({{"lr_lambda", REQUIRED}}),
  function(self, a, optimizer) self.lr_lambdas = lambdas_of("MultiplicativeLR", a.lr_lambda, optimizer) end)

function MultiplicativeLR:get_lr()
  if self._is_initial then return self:_group_lrs() end
  local groups, out = self.optimizer.param_groups, {}
  for i = 1, #self.lr_lambdas do out[i] = groups[i].lr * lambda_value(self, i) end
  return out
end

MultiplicativeLR.state_dict = LambdaLR.state_dict
MultiplicativeLR.load_state_dict = LambdaLR.load_state_dict

-- ---- ConstantLR(optimizer, {factor = 1/3, total_iters = 5}) ----

local ConstantLR = scheduler_class("ConstantLR", with_tail({{"factor", 1.0 / 3}, {"total_iters", 5}}),
  function(self, a)
    local f = need_number("ConstantLR", "factor", a.factor)
    if f > 1 or f < 0 then raise("ConstantLR: Constant multiplicative factor expected to be between 0 and 1.") end
    if f == 0 then
      raise("ConstantLR: 'factor' must be greater than 0: the lr is divided by it at step total_iters (PyTorch "
        .. "raises ZeroDivisionError there)")
    end
    self.factor = f
    self.total_iters = need_number("ConstantLR", "total_iters", a.total_iters)
  end)

function ConstantLR:get_lr()
  local e = self.last_epoch
  if e == 0 then return self:_group_lrs(self.factor) end
  if e ~= self.total_iters then return self:_group_lrs() end
  return self:_group_lrs(1.0 / self.factor)
end

function ConstantLR:_get_closed_form_lr()
  local out = {}
  for i, b in ipairs(self.base_lrs) do
    out[i] = b * (self.factor + (self.last_epoch >= self.total_iters and 1 or 0) * (1 - self.factor))
  end
  return out
end

-- ---- PolynomialLR(optimizer, {total_iters = 5, power = 1}) ----

local PolynomialLR = scheduler_class("PolynomialLR", with_tail({{"total_iters", 5}, {"power", 1.0}}),
  function(self, a)
    local t = need_number("PolynomialLR", "total_iters", a.total_iters)
    if not (t > 0) then raise("PolynomialLR: 'total_iters' must be positive, got %s", tostring(t)) end
    self.total_iters = t
    self.power = need_number("PolynomialLR", "power", a.power)
  end)

function PolynomialLR:get_lr()
  local e, T = self.last_epoch, self.total_iters
  if self._is_initial or e > T then return self:_group_lrs() end
  return self:_group_lrs(((1.0 - e / T) / (1.0 - (e - 1) / T)) ^ self.power)
end

function PolynomialLR:_get_closed_form_lr()
  local out = {}
  for i, b in ipairs(self.base_lrs) do
    out[i] = b * (1.0 - math.min(self.total_iters, self.last_epoch) / self.total_iters) ^ self.power
  end
  return out
end

-- ---- CosineAnnealingWarmRestarts(optimizer, T_0, {T_mult = 1, eta_min = 0}) ----

local CosineAnnealingWarmRestarts = scheduler_class("CosineAnnealingWarmRestarts",
  with_tail({{"T_0", REQUIRED}, {"T_mult", 1}, {"eta_min", 0.0}}), function(self, a)
    local name = "CosineAnnealingWarmRestarts"
    if type(a.T_0) ~= "number" or a.T_0 <= 0 or a.T_0 ~= math.floor(a.T_0) then
      raise("%s: Expected positive integer T_0, but got %s", name, shown(a.T_0))
    end
    if type(a.T_mult) ~= "number" or a.T_mult < 1 or a.T_mult ~= math.floor(a.T_mult) then
      raise("%s: Expected integer T_mult >= 1, but got %s", name, shown(a.T_mult))
    end
    self.T_0, self.T_i, self.T_mult = a.T_0, a.T_0, a.T_mult
    self.eta_min = need_number(name, "eta_min", a.eta_min)
    self.T_cur = a.last_epoch
  end)

function CosineAnnealingWarmRestarts:get_lr() return cosine_lrs(self.base_lrs, self.eta_min, self.T_cur, self.T_i) end

-- step([epoch]): epoch may be fractional (steps within an epoch), as PyTorch's.
function CosineAnnealingWarmRestarts:step(epoch)
  if epoch == nil and self.last_epoch < 0 then epoch = 0 end
  if epoch == nil then
    epoch = self.last_epoch + 1
    self.T_cur = self.T_cur + 1
    if self.T_cur >= self.T_i then
      self.T_cur = self.T_cur % self.T_i
      self.T_i = self.T_i * self.T_mult
    end
  else
    need_number(self.__name, "epoch", epoch)
    if epoch < 0 then raise("%s: Expected non-negative epoch, but got %s", self.__name, tostring(epoch)) end
    if epoch >= self.T_0 then
      if self.T_mult == 1 then
        self.T_cur = epoch % self.T_0
      else
        local n = math.floor(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1) / math.log(self.T_mult))
        self.T_cur = epoch - self.T_0 * (self.T_mult ^ n - 1) / (self.T_mult - 1)
        self.T_i = self.T_0 * self.T_mult ^ n
      end
    else
      self.T_i, self.T_cur = self.T_0, epoch
    end
  end
  self.last_epoch = math.floor(epoch)
  self:_set_lrs(self:get_lr())
end

-- ---- OneCycleLR(optimizer, max_lr, {total_steps | epochs + steps_per_epoch, ...}) ----

local ONECYCLE_SPEC = with_tail({
  {"max_lr", REQUIRED}, {"total_steps", nil}, {"epochs", nil}, {"steps_per_epoch", nil}, {"pct_start", 0.3},
  {"anneal_strategy", "cos"}, {"cycle_momentum", true}, {"base_momentum", 0.85}, {"max_momentum", 0.95},
  {"div_factor", 25.0}, {"final_div_factor", 1e4}, {"three_phase", false},
})

-- one value per param group from a number or a list
local function per_group(name, key, optimizer, v)
  local n, out = #optimizer.param_groups, {}
  if type(v) == "table" then
    if #v ~= n then raise("%s: expected %d values for %s, got %d", name, n, key, #v) end
    for i = 1, n do out[i] = need_number(name, key, v[i]) end
  else
    need_number(name, key, v)
    for i = 1, n do out[i] = v end
  end
  return out
end

local function phases(total, pct, three)
  if three then
    return {
      {end_step = pct * total - 1, start_lr = "initial_lr", end_lr = "max_lr", start_momentum = "max_momentum",
       end_momentum = "base_momentum"},
      {end_step = 2 * pct * total - 2, start_lr = "max_lr", end_lr = "initial_lr", start_momentum = "base_momentum",
       end_momentum = "max_momentum"},
      {end_step = total - 1, start_lr = "initial_lr", end_lr = "min_lr", start_momentum = "max_momentum",
       end_momentum = "max_momentum"},
    }
  end
  return {
    {end_step = pct * total - 1, start_lr = "initial_lr", end_lr = "max_lr", start_momentum = "max_momentum",
     end_momentum = "base_momentum"},
    {end_step = total - 1, start_lr = "max_lr", end_lr = "min_lr", start_momentum = "base_momentum",
     end_momentum = "max_momentum"},
  }
end

-- group g's momentum, or Adam's beta1, set to m
local function set_momentum(self, g, m)
  if self.use_beta1 then g.betas = {m, g.betas[2]} else g.momentum = m end
end

-- OneCycleLR's and CyclicLR's cycle_momentum: the optimizer must have a
-- momentum or betas (else "optimizer must support <what> ..."); a fresh
-- schedule starts every group at max_momentum. Returns the per-group
-- max and base momenta (nil without cycling).
local function cycle_momentum(self, name, what, a, optimizer, fresh)
  self.cycle_momentum = a.cycle_momentum and true or false
  if not self.cycle_momentum then return end
  local d = optimizer.defaults or optimizer.param_groups[1] or {}
  if d.momentum == nil and d.betas == nil then
    raise("%s: optimizer must support %s with `cycle_momentum` option enabled", name, what)
  end
  self.use_beta1 = d.betas ~= nil
  local maxm = per_group(name, "max_momentum", optimizer, a.max_momentum)
  local basem = per_group(name, "base_momentum", optimizer, a.base_momentum)
  if fresh then
    for i, g in ipairs(optimizer.param_groups) do
      set_momentum(self, g, maxm[i])
      g.max_momentum, g.base_momentum = maxm[i], basem[i]
    end
  end
  return maxm, basem
end

local OneCycleLR = scheduler_class("OneCycleLR", ONECYCLE_SPEC, function(self, a, optimizer)
  local name = "OneCycleLR"
  if a.total_steps == nil and (a.epochs == nil or a.steps_per_epoch == nil) then
    raise("%s: You must define either total_steps OR (epochs AND steps_per_epoch)", name)
  elseif a.total_steps ~= nil then
    self.total_steps = need_positive_int(name, "total_steps", a.total_steps)
  else
    self.total_steps = need_positive_int(name, "epochs", a.epochs) * need_positive_int(name, "steps_per_epoch",
      a.steps_per_epoch)
  end
  local pct = a.pct_start
  if type(pct) ~= "number" or pct < 0 or pct > 1 then
    raise("%s: Expected float between 0 and 1 pct_start, but got %s", name, shown(pct))
  end
  self._schedule_phases = phases(self.total_steps, pct, a.three_phase)
  if a.anneal_strategy ~= "cos" and a.anneal_strategy ~= "linear" then
    raise("%s: anneal_strategy must be one of 'cos' or 'linear', instead got %s", name, tostring(a.anneal_strategy))
  end
  self.anneal_strategy = a.anneal_strategy
  local div, final_div = need_number(name, "div_factor", a.div_factor), need_number(name, "final_div_factor",
    a.final_div_factor)
  local max_lrs = per_group(name, "max_lr", optimizer, a.max_lr)
  local fresh = (a.last_epoch or -1) == -1
  if fresh then
    for i, g in ipairs(optimizer.param_groups) do
      g.initial_lr = max_lrs[i] / div
      g.max_lr = max_lrs[i]
      g.min_lr = g.initial_lr / final_div
    end
  end
  cycle_momentum(self, name, "momentum", a, optimizer, fresh)
end)

local function anneal(strategy, start, stop, pct)
  if strategy == "cos" then
    local cos_out = math.cos(math.pi * pct) + 1
    return stop + (start - stop) / 2.0 * cos_out
  end
  return (stop - start) * pct + start
end

-- param group gi's key, which the constructor set
local function group_value(g, gi, key)
  local v = g[key]
  if v == nil then raise("OneCycleLR: param_groups[%d] has no '%s': " .. ADDED_GROUP, gi, key) end
  return v
end

function OneCycleLR:get_lr()
  local step_num = self.last_epoch
  if step_num > self.total_steps then
    raise("OneCycleLR: Tried to step %d times. The specified number of total steps is %d", step_num,
      self.total_steps)
  end
  local lrs, ph = {}, self._schedule_phases
  for gi, g in ipairs(self.optimizer.param_groups) do
    local start_step, lr, mom = 0, nil, nil
    for i, phase in ipairs(ph) do
      local end_step = phase.end_step
      if step_num <= end_step or i == #ph then
        if end_step == start_step then
          raise("OneCycleLR: phase %d of the schedule has no steps (it ends at step %g, as the one before it): "
            .. "choose pct_start and total_steps so that every phase has at least one step (PyTorch divides by zero "
            .. "here)", i, end_step)
        end
        local pct = (step_num - start_step) / (end_step - start_step)
        lr = anneal(self.anneal_strategy, group_value(g, gi, phase.start_lr), group_value(g, gi, phase.end_lr), pct)
        if self.cycle_momentum then
          mom = anneal(self.anneal_strategy, group_value(g, gi, phase.start_momentum),
            group_value(g, gi, phase.end_momentum), pct)
        end
        break
      end
      start_step = phase.end_step
    end
    lrs[gi] = lr
    if self.cycle_momentum then
      set_momentum(self, g, mom)
    end
  end
  return lrs
end

-- ---- SequentialLR(optimizer, schedulers, milestones) ----

local SequentialLR = LRScheduler:extend("SequentialLR")
S.SequentialLR = SequentialLR

-- Takes back the constructors' initial steps of the schedulers s holds, and
-- of those they hold (PyTorch's recursive_undo).
local function undo_initial_steps(s)
  if type(rawget(s, "_schedulers")) == "table" then
    for _, c in ipairs(s._schedulers) do undo_initial_steps(c) end
  elseif type(s.last_epoch) == "number" then
    s.last_epoch = s.last_epoch - 1
  end
end

-- Checks a list of schedulers all on `optimizer` (SequentialLR, ChainedScheduler).
local function check_scheduler_list(name, scheds, optimizer)
  if type(scheds) ~= "table" or #scheds == 0 then raise("%s: 'schedulers' must be a non-empty list", name) end
  for i, s in ipairs(scheds) do
    if type(s) ~= "table" or s.optimizer == nil then
      raise("%s: the scheduler at index %d should have `optimizer` as its attribute", name, i)
    end
    if getmetatable(s) == S.ReduceLROnPlateau then
      raise("%s does not support `ReduceLROnPlateau` scheduler as it requires additional kwargs to be specified "
        .. "when calling `step`, but got one at index %d in the given schedulers sequence.", name, i)
    end
    if s.optimizer ~= optimizer then
      raise("%s expects all schedulers to belong to the same optimizer, but got scheduler %s at index %d with "
        .. "another optimizer.", name, tostring(s.__name), i)
    end
  end
end

-- SequentialLR and ChainedScheduler step their schedulers by one: no
-- step(epoch) (PyTorch: a TypeError).
local function refuse_epoch(name, epoch)
  if epoch ~= nil then
    raise("%s:step: takes no epoch (got %s): it steps its schedulers by one, call step()", name, shown(epoch))
  end
end

function SequentialLR:init(optimizer, ...)
  local name = "SequentialLR"
  check_optimizer(name, optimizer)
  local a = parse(name, with_tail({{"schedulers", REQUIRED}, {"milestones", REQUIRED}}), ...)
  local scheds, ms = a.schedulers, a.milestones
  check_scheduler_list(name, scheds, optimizer)
  if type(ms) ~= "table" or #ms ~= #scheds - 1 then
    raise("%s: Sequential Schedulers expects number of schedulers provided to be one more than the number of "
      .. "milestone points, but got number of schedulers %d and the number of milestones to be equal to %d", name,
      #scheds, type(ms) == "table" and #ms or 0)
  end
  for i = 2, #scheds do
    if rawget(scheds[i], "_schedulers") ~= nil then
      raise("%s: the %s at index %d cannot restart at its milestone (a step(0)): only the first scheduler may be a "
        .. "SequentialLR or ChainedScheduler (PyTorch fails at the milestone)", name, tostring(scheds[i].__name), i)
    end
  end
  self._schedulers = {}
  for i, s in ipairs(scheds) do self._schedulers[i] = s end
  self._milestones = {}
  for i, m in ipairs(ms) do self._milestones[i] = need_number(name, "milestones", m) end
  self.last_epoch = need_number(name, "last_epoch", a.last_epoch) + 1
  self.optimizer = optimizer
  for _, g in ipairs(optimizer.param_groups) do g.lr = g.initial_lr end
  undo_initial_steps(self)
  local first = self._schedulers[bisect_right(self._milestones, 0) + 1]
  first:_initial_step()
  self._last_lr = first:get_last_lr()
end

function SequentialLR:step(epoch)
  refuse_epoch("SequentialLR", epoch)
  self.last_epoch = self.last_epoch + 1
  local idx = bisect_right(self._milestones, self.last_epoch)
  local s = self._schedulers[idx + 1]
  if idx > 0 and self._milestones[idx] == self.last_epoch then
    s:step(0)
  else
    s:step()
  end
  self._last_lr = s:get_last_lr()
end

function SequentialLR:state_dict()
  local sd = {}
  for k, v in pairs(self) do
    if k ~= "optimizer" and k ~= "_schedulers" and type(v) ~= "function" then sd[k] = copy_plain(v) end
  end
  sd._schedulers = {}
  for i, s in ipairs(self._schedulers) do sd._schedulers[i] = s:state_dict() end
  return sd
end

function SequentialLR:load_state_dict(sd)
  if type(sd) ~= "table" then raise("SequentialLR: load_state_dict expects a table from state_dict()") end
  local subs = sd._schedulers
  if type(subs) ~= "table" or #subs ~= #self._schedulers then
    raise("SequentialLR: load_state_dict: expected states for %d schedulers", #self._schedulers)
  end
  for k, v in pairs(sd) do
    if k ~= "optimizer" and k ~= "_schedulers" then self[k] = copy_plain(v) end
  end
  for i, s in ipairs(self._schedulers) do s:load_state_dict(subs[i]) end
end

-- ---- ChainedScheduler(schedulers, [optimizer]): steps them all ----

local ChainedScheduler = LRScheduler:extend("ChainedScheduler")
S.ChainedScheduler = ChainedScheduler

function ChainedScheduler:init(...)
  local name = "ChainedScheduler"
  local a = parse(name, {{"schedulers", REQUIRED}, {"optimizer", nil}}, ...)
  local schedulers = a.schedulers
  local optimizer = a.optimizer or (type(schedulers) == "table" and type(schedulers[1]) == "table"
    and schedulers[1].optimizer) or nil
  check_scheduler_list(name, schedulers, optimizer)
  self._schedulers = {}
  for i, s in ipairs(schedulers) do self._schedulers[i] = s end
  self.optimizer = optimizer
  self._last_lr = self:_group_lrs()
end

function ChainedScheduler:step(epoch)
  refuse_epoch("ChainedScheduler", epoch)
  for _, s in ipairs(self._schedulers) do s:step() end
  self._last_lr = self:_group_lrs()
end

ChainedScheduler.state_dict = SequentialLR.state_dict
ChainedScheduler.load_state_dict = SequentialLR.load_state_dict

-- ---- ReduceLROnPlateau(optimizer, {mode = "min", factor = 0.1, patience = 10, ...}): step(metric) ----

local ReduceLROnPlateau = LRScheduler:extend("ReduceLROnPlateau")
S.ReduceLROnPlateau = ReduceLROnPlateau

local PLATEAU_SPEC = {{"mode", "min"}, {"factor", 0.1}, {"patience", 10}, {"threshold", 1e-4},
  {"threshold_mode", "rel"}, {"cooldown", 0}, {"min_lr", 0}, {"eps", 1e-8}}

function ReduceLROnPlateau:init(optimizer, ...)
  local name = "ReduceLROnPlateau"
  check_optimizer(name, optimizer)
  local a = parse(name, PLATEAU_SPEC, ...)
  if need_number(name, "factor", a.factor) >= 1.0 then raise("%s: Factor should be < 1.0.", name) end
  if a.mode ~= "min" and a.mode ~= "max" then raise("%s: mode %s is unknown!", name, tostring(a.mode)) end
  if a.threshold_mode ~= "rel" and a.threshold_mode ~= "abs" then
    raise("%s: threshold mode %s is unknown!", name, tostring(a.threshold_mode))
  end
  self.optimizer = optimizer
  self.factor, self.mode, self.threshold_mode = a.factor, a.mode, a.threshold_mode
  self.threshold = need_number(name, "threshold", a.threshold)
  self.patience = need_number(name, "patience", a.patience)
  self.cooldown = need_number(name, "cooldown", a.cooldown)
  self.eps = need_number(name, "eps", a.eps)
  if type(a.min_lr) ~= "table" then self.default_min_lr = need_number(name, "min_lr", a.min_lr) end
  self.min_lrs = per_group(name, "min_lr", optimizer, a.min_lr)
  self.last_epoch = 0
  self._last_lr = self:_group_lrs()
  self.best = self.mode == "min" and math.huge or -math.huge
  self.cooldown_counter, self.num_bad_epochs = 0, 0
end

function ReduceLROnPlateau:_is_better(a)
  local best, t = self.best, self.threshold
  if self.mode == "min" then
    if self.threshold_mode == "rel" then return a < best * (1.0 - t) end
    return a < best - t
  end
  if self.threshold_mode == "rel" then return a > best * (t + 1.0) end
  return a > best + t
end

function ReduceLROnPlateau:_reduce_lr()
  local groups = self.optimizer.param_groups
  if #groups ~= #self.min_lrs then
    if self.default_min_lr == nil then
      raise("ReduceLROnPlateau: The number of param groups in the `optimizer` (%d) differs from when "
        .. "`ReduceLROnPlateau` was initialized (%d), usually due to a new param group being added to the optimizer. "
        .. "Please modify the `min_lrs` field to match the length of the `optimizer` param groups.", #groups,
        #self.min_lrs)
    end
    self.min_lrs = per_group("ReduceLROnPlateau", "min_lr", self.optimizer, self.default_min_lr)
  end
  for i, g in ipairs(groups) do
    local new_lr = math.max(g.lr * self.factor, self.min_lrs[i])
    if g.lr - new_lr > self.eps then g.lr = new_lr end
  end
end

-- step(metric): metric a number or a one-element tensor (e.g. the validation loss).
function ReduceLROnPlateau:step(metric, epoch)
  local name = "ReduceLROnPlateau:step"
  if require("accel").is_tensor(metric) then metric = metric:item() end
  if type(metric) ~= "number" then raise("%s: expected the metric (a number or a one-element tensor), got %s", name,
    type(metric)) end
  self.last_epoch = epoch ~= nil and need_number(name, "epoch", epoch) or self.last_epoch + 1
  if self:_is_better(metric) then
    self.best, self.num_bad_epochs = metric, 0
  else
    self.num_bad_epochs = self.num_bad_epochs + 1
  end
  if self.cooldown_counter > 0 then
    self.cooldown_counter = self.cooldown_counter - 1
    self.num_bad_epochs = 0
  end
  if self.num_bad_epochs > self.patience then
    self:_reduce_lr()
    self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
  end
  self._last_lr = self:_group_lrs()
end

-- ---- CyclicLR(optimizer, base_lr, max_lr, [step_size_up = 2000], ...) ----
-- PyTorch's: the lr climbs from base_lr to max_lr over step_size_up steps
-- and back over step_size_down (default: as many), the climb scaled per
-- cycle ("triangular": 1, "triangular2": halved each cycle) or per step
-- ("exp_range": gamma ^ step), or by scale_fn(cycle or step) with
-- scale_mode; with cycle_momentum the momentum (or Adam's beta1) moves the
-- other way between max_momentum and base_momentum.

local CYCLIC_SPEC = with_tail({
  {"base_lr", REQUIRED}, {"max_lr", REQUIRED}, {"step_size_up", 2000}, {"step_size_down", nil},
  {"mode", "triangular"}, {"gamma", 1.0}, {"scale_fn", nil}, {"scale_mode", "cycle"}, {"cycle_momentum", true},
  {"base_momentum", 0.8}, {"max_momentum", 0.9},
})

local CYCLIC_SCALES = {
  triangular = {function() return 1.0 end, "cycle"},
  triangular2 = {function(x) return 1 / (2.0 ^ (x - 1)) end, "cycle"},
}

local CyclicLR = scheduler_class("CyclicLR", CYCLIC_SPEC, function(self, a, optimizer)
  local name = "CyclicLR"
  local base_lrs = per_group(name, "base_lr", optimizer, a.base_lr)
  local fresh = (a.last_epoch or -1) == -1
  if fresh then
    for i, g in ipairs(optimizer.param_groups) do g.lr = base_lrs[i] end
  end
  self._cyclic_base_lrs = base_lrs
  self.max_lrs = per_group(name, "max_lr", optimizer, a.max_lr)
  local up = need_number(name, "step_size_up", a.step_size_up)
  local down = a.step_size_down ~= nil and need_number(name, "step_size_down", a.step_size_down) or up
  if not (up + down > 0) then raise("%s: step_size_up + step_size_down must be positive, got %g", name, up + down) end
  self.total_size, self.step_ratio = up + down, up / (up + down)
  if a.scale_fn ~= nil and not util.callable(a.scale_fn) then
    raise("%s: scale_fn must be a function, got %s", name, type(a.scale_fn))
  end
  if a.scale_fn == nil and not CYCLIC_SCALES[a.mode] and a.mode ~= "exp_range" then
    raise("%s: mode is invalid and scale_fn is None (mode must be triangular, triangular2 or exp_range, got %s)", name,
      shown(a.mode))
  end
  if a.scale_mode ~= "cycle" and a.scale_mode ~= "iterations" then
    raise("%s: scale_mode must be 'cycle' or 'iterations', got %s", name, shown(a.scale_mode))
  end
  self.mode, self.gamma = a.mode, need_number(name, "gamma", a.gamma)
  self._scale_fn_custom = a.scale_fn
  self.scale_mode = a.scale_fn ~= nil and a.scale_mode or (a.mode == "exp_range" and "iterations" or "cycle")
  self.max_momentums, self.base_momentums = cycle_momentum(self, name, "momentum or beta1", a, optimizer, fresh)
end)

function CyclicLR:scale_fn(x)
  if self._scale_fn_custom then return self._scale_fn_custom(x) end
  if self.mode == "exp_range" then return self.gamma ^ x end
  return CYCLIC_SCALES[self.mode][1](x)
end

function CyclicLR:get_lr()
  local cycle = math.floor(1 + self.last_epoch / self.total_size)
  local x = 1.0 + self.last_epoch / self.total_size - cycle
  local factor = x <= self.step_ratio and x / self.step_ratio or (x - 1) / (self.step_ratio - 1)
  local scale = self:scale_fn(self.scale_mode == "cycle" and cycle or self.last_epoch)
  local lrs = {}
  for i, base in ipairs(self._cyclic_base_lrs) do lrs[i] = base + (self.max_lrs[i] - base) * factor * scale end
  if self.cycle_momentum then
    for i, g in ipairs(self.optimizer.param_groups) do
      local m = self.max_momentums[i] - (self.max_momentums[i] - self.base_momentums[i]) * factor * scale
      set_momentum(self, g, m)
    end
  end
  return lrs
end

-- PyTorch's schedulers and transformers' schedules accel-lua does not
-- provide: a clear error, not nil.
util.not_provided(S, {SWALR = true, get_cosine_with_hard_restarts_schedule_with_warmup = true,
  get_polynomial_decay_schedule_with_warmup = true, get_inverse_sqrt_schedule = true,
  get_reduce_on_plateau_schedule = true, get_cosine_with_min_lr_schedule_with_warmup = true,
  get_cosine_with_min_lr_schedule_with_warmup_lr_rate = true, get_wsd_schedule = true, get_greedy_schedule = true},
  "accel.optim.lr_scheduler", "see docs/optim.md for the schedulers there are")

-- ---- HF transformers' schedules (LambdaLRs) ----

-- Binds (optimizer, num_warmup_steps, num_training_steps, {opts}) given
-- positionally or as options.
local function warmup_args(name, extra, ...)
  local spec = {{"num_warmup_steps", REQUIRED}, {"num_training_steps", REQUIRED}}
  for _, s in ipairs(extra) do spec[#spec + 1] = s end
  spec[#spec + 1] = {"last_epoch", -1}
  local a = parse(name, spec, ...)
  need_number(name, "num_warmup_steps", a.num_warmup_steps)
  need_number(name, "num_training_steps", a.num_training_steps)
  return a
end

-- get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, {num_cycles = 0.5, last_epoch = -1})
function S.get_cosine_schedule_with_warmup(optimizer, ...)
  local name = "get_cosine_schedule_with_warmup"
  local a = warmup_args(name, {{"num_cycles", 0.5}}, ...)
  local warm, total, cycles = a.num_warmup_steps, a.num_training_steps, need_number(name, "num_cycles", a.num_cycles)
  local function lr_lambda(step)
    if step < warm then return step / math.max(1, warm) end
    local progress = (step - warm) / math.max(1, total - warm)
    return math.max(0.0, 0.5 * (1.0 + math.cos(math.pi * cycles * 2.0 * progress)))
  end
  return S.LambdaLR(optimizer, lr_lambda, {last_epoch = a.last_epoch})
end

-- get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, {last_epoch = -1})
function S.get_linear_schedule_with_warmup(optimizer, ...)
  local a = warmup_args("get_linear_schedule_with_warmup", {}, ...)
  local warm, total = a.num_warmup_steps, a.num_training_steps
  local function lr_lambda(step)
    if step < warm then return step / math.max(1, warm) end
    return math.max(0.0, (total - step) / math.max(1, total - warm))
  end
  return S.LambdaLR(optimizer, lr_lambda, {last_epoch = a.last_epoch})
end

-- get_constant_schedule(optimizer, {last_epoch = -1}): the optimizer's lr throughout
function S.get_constant_schedule(optimizer, ...)
  local a = parse("get_constant_schedule", TAIL, ...)
  return S.LambdaLR(optimizer, function() return 1 end, {last_epoch = a.last_epoch})
end

-- get_constant_schedule_with_warmup(optimizer, num_warmup_steps, {last_epoch = -1})
function S.get_constant_schedule_with_warmup(optimizer, ...)
  local name = "get_constant_schedule_with_warmup"
  local a = parse(name, with_tail({{"num_warmup_steps", REQUIRED}}), ...)
  local warm = need_number(name, "num_warmup_steps", a.num_warmup_steps)
  local function lr_lambda(step)
    if step < warm then return step / math.max(1.0, warm) end
    return 1.0
  end
  return S.LambdaLR(optimizer, lr_lambda, {last_epoch = a.last_epoch})
end

-- get_scheduler's names: the schedule and the arguments it needs
local SCHEDULE_OF = {
  linear = {"get_linear_schedule_with_warmup", "num_warmup_steps", "num_training_steps"},
  cosine = {"get_cosine_schedule_with_warmup", "num_warmup_steps", "num_training_steps"},
  constant_with_warmup = {"get_constant_schedule_with_warmup", "num_warmup_steps"},
  constant = {"get_constant_schedule"},
}
-- transformers' names of schedules accel-lua does not provide
local SCHEDULES_NOT_PROVIDED = {cosine_with_restarts = true, polynomial = true, inverse_sqrt = true,
  reduce_lr_on_plateau = true, cosine_with_min_lr = true, cosine_warmup_with_min_lr = true,
  warmup_stable_decay = true, greedy = true}

-- get_scheduler's entry for name
local function schedule_of(name)
  if type(name) ~= "string" then
    raise("get_scheduler: the first argument must be the schedule's name (a string), got %s: call it as "
      .. "get_scheduler(\"linear\", optimizer, {num_warmup_steps =, num_training_steps =})", type(name))
  end
  local entry = SCHEDULE_OF[name]
  if entry ~= nil then return entry end
  if SCHEDULES_NOT_PROVIDED[name] then
    raise("get_scheduler: the schedule %s is not provided (accel-lua has constant, constant_with_warmup, cosine, "
      .. "linear)", util.show(name))
  end
  raise("get_scheduler: %s is not a valid SchedulerType, please select one of constant, constant_with_warmup, "
    .. "cosine, linear", util.show(name))
end

-- The options get_scheduler's arguments a give the schedule of entry.
local function schedule_options(name, entry, a)
  local fname, kw = "get_scheduler", {}
  for i = 2, #entry do
    if a[entry[i]] == nil then raise("%s: %s requires `%s`, please provide that argument.", fname, name, entry[i]) end
    kw[entry[i]] = a[entry[i]]
  end
  if kw.num_warmup_steps == nil and (a.num_warmup_steps or 0) ~= 0 then
    raise("%s: the schedule \"%s\" has no warmup (num_warmup_steps = %s): use \"constant_with_warmup\"", fname,
      name, tostring(a.num_warmup_steps))
  end
  local extra = a.scheduler_specific_kwargs or {}
  if type(extra) ~= "table" then
    raise("%s: 'scheduler_specific_kwargs' must be a table, got %s", fname, type(extra))
  end
  for k, v in pairs(extra) do
    if kw[k] ~= nil then raise("%s: '%s' given both as an argument and in scheduler_specific_kwargs", fname, k) end
    kw[k] = v
  end
  return kw
end

-- get_scheduler(name, optimizer, {num_warmup_steps, num_training_steps,
-- scheduler_specific_kwargs}): transformers' dispatch by name. What a
-- schedule does not use is refused (a warmup for "constant"), but for
-- num_training_steps, which a constant schedule takes as any length.
function S.get_scheduler(name, optimizer, ...)
  local a = parse("get_scheduler", {{"num_warmup_steps", nil}, {"num_training_steps", nil},
    {"scheduler_specific_kwargs", nil}}, ...)
  local entry = schedule_of(name)
  return S[entry[1]](optimizer, schedule_options(name, entry, a))
end

-- sched.step() and the like: "LRScheduler.step: call it as obj:step(...)"
util.check_methods(LRScheduler, "LRScheduler")

return S
