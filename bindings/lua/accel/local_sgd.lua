-- accel.local_sgd: Accelerate's LocalSGD (accelerate.local_sgd). Each
-- process runs local_sgd_steps optimizer steps on its own (the model's
-- gradient synchronisation off, as in no_sync), then the model's parameters
-- are averaged across the processes; once more on exit.
--
--   accel.LocalSGD{accelerator = acc, model = model, local_sgd_steps = 8}:run(function(local_sgd)
--     ... acc:backward(loss); opt:step(); local_sgd:step() ...
--   end)
--   local local_sgd <close> = accel.LocalSGD{...}:enter()   -- Lua 5.4; :close() exits explicitly
--
-- As in Accelerate: only without a sharding engine (distributed_type NO,
-- MULTI_CPU or MULTI_GPU); on one process (NO) it is disabled and step()
-- only counts; the average is wait_for_everyone, then reduce(p, "mean") of
-- every parameter under the Accelerator's autocast.
local accel = require("accel")
local plugins = require("accel.plugins")
local state = require("accel.state")
local util = require("accel.util")
local raise = util.raise

local M = {}

local OPTIONS = plugins.register("LocalSGD", {accelerator = "table", model = "table", local_sgd_steps = "number",
  enabled = "boolean"})

-- Accelerate's list of the distributed types it supports, as they are named here.
local SUPPORTED = {NO = true, MULTI_CPU = true, MULTI_GPU = true}

local LocalSGD = {}
LocalSGD.__index = LocalSGD
LocalSGD.__close = function(self) self:close() end
M.LocalSGD_class = LocalSGD

-- LocalSGD{accelerator =, model =, local_sgd_steps =, [enabled = true]} (local_sgd_steps may be nil when
-- enabled = false)
function M.LocalSGD(o)
  if type(o) ~= "table" then raise("LocalSGD: expected an options table, got %s", type(o)) end
  plugins.check_options("LocalSGD", o, OPTIONS)
  for _, k in ipairs({"accelerator", "model"}) do
    if o[k] == nil then raise("LocalSGD: option %s is required", k) end
  end
  -- (Accelerate's example passes local_sgd_steps=None with enabled=False: then it is never used)
  if o.local_sgd_steps == nil and o.enabled ~= false then raise("LocalSGD: option local_sgd_steps is required") end
  local steps = o.local_sgd_steps or 1
  if steps < 1 or steps ~= math.floor(steps) then
    raise("LocalSGD: local_sgd_steps must be a positive integer, got %s", tostring(steps))
  end
  local acc = o.accelerator
  if not SUPPORTED[acc.distributed_type] then
    raise("LocalSGD is supported only for CPUs and GPUs (no DeepSpeed or MegatronLM); distributed_type is %s",
      tostring(acc.distributed_type))
  end
  return setmetatable({accelerator = acc, model = o.model, local_sgd_steps = steps, num_steps = 0,
    enabled = o.enabled ~= false and acc.distributed_type ~= "NO"}, LocalSGD)
end

-- Every parameter of the model replaced by its mean across the processes.
function LocalSGD:_sync_and_avg_model_params()
  local acc = self.accelerator
  acc:wait_for_everyone()
  acc:autocast(function()
    local params, detached = self.model:parameters(), {}
    for i, p in ipairs(params) do detached[i] = p:detach() end
    local means = acc:reduce(detached, "mean") -- one reduce of the list: one agreement check, not one per parameter
    accel.no_grad(function()
      for i, p in ipairs(params) do p:copy_(means[i]) end
    end)
  end)
end

-- Enters (the model's gradient synchronisation off when enabled); returns self.
function LocalSGD:enter()
  if self._sync then raise("LocalSGD:enter: already entered") end
  self._sync = self.enabled and self.accelerator:no_sync(self.model) or true
  return self
end

-- Leaves: a last average and the gradient synchronisation back (when
-- enabled). A second close does nothing.
function LocalSGD:close()
  local sync = self._sync
  if not sync then return end
  self._sync = nil
  if sync == true then return end
  local ok, err = pcall(self._sync_and_avg_model_params, self)
  sync:close()
  if not ok then error(err, 0) end
end

-- run(fn): enter, fn(self), close (also when fn raises); fn's results.
function LocalSGD:run(fn)
  if not util.callable(fn) then raise("LocalSGD:run: expected a function, got %s", type(fn)) end
  return state.scoped("LocalSGD:run", function() self:enter() end, function() self:close() end,
    function() return fn(self) end)
end

-- step(): counts an optimizer step; every local_sgd_steps-th averages the parameters.
function LocalSGD:step()
  self.num_steps = self.num_steps + 1
  if self.enabled and self.num_steps % self.local_sgd_steps == 0 then self:_sync_and_avg_model_params() end
end

return M
