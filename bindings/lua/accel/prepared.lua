-- accel.prepared: the wrappers Accelerator:prepare returns for optimizers,
-- schedulers and data loaders (models stay the same object; see accel.amp).
--
-- Each wrapper forwards every field and method it does not define to the
-- wrapped object (methods are re-bound to it, so `opt.param_groups[1].lr`,
-- `opt:add_param_group(g)` or `sched:get_last_lr()` work unchanged), and
-- assignments go to the wrapped object too.
--
--  * AcceleratedOptimizer: step / zero_grad act only on synchronising steps
--    (the last micro-batch of an accumulation window); under fp16 the step
--    goes through the GradScaler (skipped when a gradient overflowed;
--    step_was_skipped tells).
--  * AcceleratedScheduler: steps only after a real optimizer step, and then
--    num_processes times unless split_batches (Accelerate's rule, so a
--    schedule written for one process ends at the same point; of those
--    num_processes steps, the ones past a total_steps are left out, while
--    the one step under split_batches raises there, as in Accelerate);
--    step_with_optimizer = false makes step() unconditional. The
--    GradientAccumulationPlugin's adjust_scheduler changes nothing, as in
--    Accelerate (whose GradientState reads it from the plugin's non-default
--    values with a default of false, so the adjustment never runs).
--  * DataLoaderShard: iterates this process's shard, marks the last batch of
--    a pass (the field end_of_dataloader, which closes an accumulation window), moves
--    batches to the Accelerator's device (every tensor, also inside tables;
--    none with device_placement = false), and reports its position (epoch, samples of the
--    global order consumed by all processes) for save_state. A resumed pass
--    starting at sample s has its padded last global batch counted from s
--    (remainder = (dataset_length - s) % total_batch_size).
local accel = require("accel")
local compat = require("accel.compat")
local raise = require("accel.nn.module").raise

local M = {}

-- Metatable pieces for a wrapper whose wrapped object is self[field].
local function delegating(class, field)
  local bound = setmetatable({}, {__mode = "k"}) -- wrapper -> {name -> bound method}
  class.__index = function(self, k)
    local own = class[k]
    if own ~= nil then return own end
    local inner = rawget(self, field)
    local v = inner[k]
    if type(v) ~= "function" then return v end
    local cache = bound[self]
    if not cache then
      cache = {}
      bound[self] = cache
    end
    local f = cache[k]
    if not f or cache[f] ~= v then
      f = function(s, ...)
        if rawequal(s, self) then s = inner end
        return v(s, ...)
      end
      cache[k], cache[f] = f, v
    end
    return f
  end
  class.__newindex = function(self, k, v) rawget(self, field)[k] = v end
  return class
end

-- ---------------------------------------------------------------- optimizer

local AcceleratedOptimizer = delegating({__name = "AcceleratedOptimizer"}, "optimizer")
M.AcceleratedOptimizer = AcceleratedOptimizer

function M.is_optimizer(x) return getmetatable(x) == AcceleratedOptimizer end

-- As Python's repr of Accelerate's AcceleratedOptimizer (torch's
-- Optimizer.__repr__): "AcceleratedOptimizer (" and the wrapped optimizer's
-- param groups.
function AcceleratedOptimizer.__tostring(self) return accel.optim.Optimizer.__tostring(self) end

-- gradient_state: the Accelerator's GradientState; scaler: a GradScaler or
-- nil; before_step: nil or a function run before each real step (DDP
-- completes the gradient averaging there).
function M.wrap_optimizer(optimizer, gradient_state, scaler, before_step)
  local self = {optimizer = optimizer, gradient_state = gradient_state, scaler = scaler, step_was_skipped = false,
    before_step = before_step}
  return setmetatable(self, AcceleratedOptimizer)
end

function AcceleratedOptimizer:step(closure)
  if not self.gradient_state.sync_gradients then return end
  local before = rawget(self, "before_step")
  if before then before() end
  local scaler = rawget(self, "scaler")
  if scaler then
    local ran = scaler:step(self.optimizer, closure)
    scaler:_update_stepped()
    rawset(self, "step_was_skipped", not ran)
  else
    rawset(self, "step_was_skipped", false)
    return self.optimizer:step(closure)
  end
end

function AcceleratedOptimizer:zero_grad(o)
  if self.gradient_state.sync_gradients then return self.optimizer:zero_grad(o) end
end

function AcceleratedOptimizer:state_dict() return self.optimizer:state_dict() end
function AcceleratedOptimizer:load_state_dict(s) return self.optimizer:load_state_dict(s) end

-- ---------------------------------------------------------------- scheduler

local AcceleratedScheduler = delegating({__name = "AcceleratedScheduler"}, "scheduler")
M.AcceleratedScheduler = AcceleratedScheduler

function M.is_scheduler(x) return getmetatable(x) == AcceleratedScheduler end

-- optimizers: the AcceleratedOptimizers whose skipped steps hold it back.
function M.wrap_scheduler(scheduler, optimizers, gradient_state, o)
  local self = {scheduler = scheduler, optimizers = optimizers, gradient_state = gradient_state,
    step_with_optimizer = o.step_with_optimizer, split_batches = o.split_batches, num_processes = o.num_processes}
  return setmetatable(self, AcceleratedScheduler)
end

-- OneCycleLR-like schedulers with total_steps are not stepped past the end
-- by the num_processes steps of one training step.
local function can_step(s)
  local total = s.total_steps
  if type(total) ~= "number" then return true end
  local count = s._step_count or ((s.last_epoch or 0) + 1)
  return count <= total
end

function AcceleratedScheduler:step(...)
  local s = self.scheduler
  if not self.step_with_optimizer then return s:step(...) end
  if not self.gradient_state.sync_gradients then return end
  for _, opt in ipairs(self.optimizers) do
    if opt.step_was_skipped then return end
  end
  -- split batches: one step, which may raise past total_steps (as Accelerate's)
  if self.split_batches then return s:step(...) end
  for _ = 1, self.num_processes do
    if can_step(s) then s:step(...) end
  end
end

function AcceleratedScheduler:state_dict() return self.scheduler:state_dict() end
function AcceleratedScheduler:load_state_dict(st) return self.scheduler:load_state_dict(st) end

-- ---------------------------------------------------------------- data loader

local DataLoaderShard = delegating({__name = "DataLoaderShard"}, "base")
M.DataLoaderShard = DataLoaderShard

-- loader.total_dataset_length: the dataset's length (read now), as Accelerate's property
local shard_index = DataLoaderShard.__index
DataLoaderShard.__index = function(self, k)
  if k == "total_dataset_length" then return rawget(self, "dataset_length")() end
  return shard_index(self, k)
end

function M.is_loader(x) return getmetatable(x) == DataLoaderShard end

-- base: the sharded loader (loader:shard(...), with iter, #, state_dict,
-- load_state_dict, set_epoch, skip_first_batches and end_of_dataloader() as
-- accel.data's DataLoader); o: {gradient_state, device, total_batch_size,
-- dataset_length, drop_last, even_batches} (for gather_for_metrics: the
-- samples repeated to fill the last global batch are those past
-- dataset_length() % total_batch_size; without even_batches none are).
-- dataset_length is a function, read at the start of every pass, as
-- Accelerate reads len(dataset): a dataset may change its length.
function M.wrap_loader(base, o)
  local self = {base = base, gradient_state = o.gradient_state, device = o.device, end_of_dataloader = false,
    remainder = -1, total_batch_size = o.total_batch_size, dataset_length = o.dataset_length, drop_last = o.drop_last,
    even_batches = o.even_batches ~= false}
  return setmetatable(self, DataLoaderShard)
end

DataLoaderShard.__len = function(self) return compat.len(rawget(self, "base")) end

-- Every tensor of a batch moved to device, in tables of them too (as
-- Accelerate's send_to_device); a tensor already there is kept, other
-- values pass through.
local ops = require("accel.operations")

local NO_KEYS = {}

local function send(device, v) return ops.send_to_device(v, device, NO_KEYS) end

local function to_device(device, v1, ...)
  local n = select("#", ...)
  if n == 0 then return send(device, v1) end
  if n == 1 then return send(device, v1), send(device, (...)) end
  local vals = compat.pack(v1, ...)
  for i = 1, vals.n do vals[i] = send(device, vals[i]) end
  return compat.unpack(vals, 1, vals.n)
end

-- True when loader l is among gs's active ones.
local function is_active(gs, l)
  local ls = gs.loaders
  for i = #ls, 1, -1 do
    if ls[i] == l then return true end
  end
  return false
end

-- for xb, yb in loader:iter() do ... end: this process's batches of the
-- current pass; while the last one is in use, the field end_of_dataloader
-- is true (a value, as Accelerate's property; the unprepared loader's is a
-- method). The fields and the gradient state's active loaders are set
-- again on every batch, for a pass nested in this one over the same loader
-- (ended or left) has set them for its own.
function DataLoaderShard:iter()
  local base, gs, device = self.base, self.gradient_state, self.device
  local move = device ~= nil
  local f, s, c = base:iter()
  rawset(self, "end_of_dataloader", false)
  local length, remainder = self.dataset_length and self.dataset_length(), rawget(self, "remainder")
  if not self.drop_last and length and self.total_batch_size then
    local start = type(base.pass_start) == "function" and base:pass_start() or 0 -- where this pass starts
    remainder = (length - start) % self.total_batch_size
    rawset(self, "remainder", remainder)
  end
  gs:add_dataloader(self)
  local done = false
  local function deliver(v1, ...)
    c = v1
    if v1 == nil then
      done = true
      gs:remove_dataloader(self)
      return nil
    end
    if not is_active(gs, self) then gs:add_dataloader(self) end
    rawset(self, "end_of_dataloader", base:end_of_dataloader())
    rawset(self, "remainder", remainder)
    if move then return to_device(device, v1, ...) end
    return v1, ...
  end
  return function()
    if done then return nil end
    return deliver(f(s, c))
  end
end


-- {epoch = e, samples = s}: the next iter() continues epoch e's global
-- order after its first s samples (consumed by all processes together).
function DataLoaderShard:state_dict() return self.base:state_dict() end

-- Also takes the older {epoch, batches} (batches of this process's shard).
function DataLoaderShard:load_state_dict(s)
  if type(s) ~= "table" or type(s.epoch) ~= "number"
    or (type(s.samples) ~= "number" and type(s.batches) ~= "number") then
    raise("DataLoader.load_state_dict: expected {epoch = number, samples = number}")
  end
  return self.base:load_state_dict(s)
end

function DataLoaderShard:set_epoch(e) return self.base:set_epoch(e) end

-- A loader over the same shard that starts at batch n + 1 of the current pass.
function DataLoaderShard:skip_first_batches(n)
  local o = {gradient_state = self.gradient_state, device = self.device, total_batch_size = self.total_batch_size,
    dataset_length = self.dataset_length, drop_last = self.drop_last, even_batches = self.even_batches}
  return M.wrap_loader(self.base:skip_first_batches(n), o)
end


-- A method called with "." instead of ":" raises at the caller's line.
require("accel.util").check_methods(AcceleratedOptimizer, "AcceleratedOptimizer")
require("accel.util").check_methods(AcceleratedScheduler, "AcceleratedScheduler")
require("accel.util").check_methods(DataLoaderShard, "DataLoaderShard")
DataLoaderShard.__call = require("accel.data.loader").__call
return M
