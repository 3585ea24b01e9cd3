-- accel.amp: mixed precision for the Accelerator: the autocast scope
-- (matmul / linear / conv2d GEMMs in bf16 or fp16 with float32
-- accumulation, float32 master weights; see core/precision.h), the patched
-- model forward that runs under it and hands float32 outputs back (as
-- Accelerate's convert_outputs_to_fp32), and GradScaler, PyTorch's dynamic
-- loss scaling for fp16. Under "fp8" the model's nn.Linear layers run the
-- fp8 recipe (accel.fp8) and every other GEMM runs under bf16 autocast, as
-- Accelerate's fp8 does.
local accel = require("accel")
local compat = require("accel.compat")
local C = accel._C
local raise = require("accel.util").raise

local amp = {}

-- The autocast dtype of a mixed_precision string (nil for "no"; fp8's
-- GEMMs outside the fp8 Linears use bf16).
function amp.dtype_of(mixed_precision)
  if mixed_precision == "bf16" or mixed_precision == "fp8" then return accel.bfloat16 end
  if mixed_precision == "fp16" then return accel.float16 end
  return nil
end

-- The autocast dtype in force now (nil: autocast off), left as it is.
function amp.current_dtype()
  local cur = C.set_autocast(nil)
  C.set_autocast(cur)
  return cur
end

-- fn(...) with autocast set to dtype; the previous setting is restored
-- even when fn raises. Returns fn's results.
function amp.run(dtype, fn, ...)
  if dtype == nil then return fn(...) end
  local prev = C.set_autocast(dtype)
  local res = compat.pack(pcall(fn, ...))
  C.set_autocast(prev)
  if not res[1] then error(res[2], 0) end
  return compat.unpack(res, 2, res.n)
end

-- Half-precision tensors (also inside plain tables) back to float32.
local function to_fp32(v)
  if accel.is_tensor(v) then
    if v.dtype == accel.bfloat16 or v.dtype == accel.float16 then return v:float() end
    return v
  end
  if type(v) == "table" and getmetatable(v) == nil then
    local out = {}
    for k, x in pairs(v) do out[k] = to_fp32(x) end
    return out
  end
  return v
end

local function outputs_to_fp32(...)
  local n = select("#", ...)
  if n == 1 then return to_fp32((...)) end
  local res = compat.pack(...)
  for i = 1, n do res[i] = to_fp32(res[i]) end
  return compat.unpack(res, 1, n)
end

-- Patched forwards: model -> the forward it had before (weak keys).
local patched = setmetatable({}, {__mode = "k"})

-- Make model's forward run under autocast(dtype) and return float32
-- outputs; with fp8_recipe (accel.fp8.DelayedScaling) its nn.Linear layers
-- also get the fp8 recipe (accel.fp8.convert_model), active inside this
-- forward while the model is in training mode. The model stays the same object (as Accelerate does on one
-- process); amp.unpatch_forward restores the original.
function amp.patch_forward(model, dtype, fp8_recipe)
  if patched[model] or (dtype == nil and fp8_recipe == nil) then return model end
  local fp8 = fp8_recipe and require("accel.fp8")
  if fp8 then fp8.convert_model(model, fp8_recipe) end -- first: the model may be a Linear itself
  local orig = model.forward
  patched[model] = orig
  local run = orig
  if fp8 then -- fp8 only in training mode (Accelerate's fp8_use_autocast_during_eval = false)
    run = function(self, ...)
      if self.training == false then return orig(self, ...) end
      return fp8.run(orig, self, ...)
    end
  end
  model.forward = function(self, ...)
    return outputs_to_fp32(amp.run(dtype, run, self, ...))
  end
  return model
end

function amp.unpatch_forward(model)
  local orig = patched[model]
  if not orig then return model end
  patched[model] = nil
  model.forward = nil -- an nn.Module falls back to its class's forward
  if model.forward ~= orig then model.forward = orig end
  require("accel.fp8").unconvert_model(model)
  return model
end

-- ---------------------------------------------------------------- GradScaler

-- PyTorch's torch.cuda.amp.GradScaler semantics: the loss is multiplied by
-- scale before backward; before an optimizer step the gradients are
-- unscaled (once per step) and checked, and a step whose gradients hold an
-- inf or NaN on any process is skipped on every process; update() then halves the scale after a skipped
-- step, or doubles it after growth_interval good steps in a row.
local GradScaler = {}
GradScaler.__index = GradScaler

-- amp.GradScaler{init_scale=, growth_factor=, backoff_factor=, growth_interval=,
-- agree = function(found) -> found on any process}: agree makes every
-- process skip the step when any of them found an inf or NaN (the
-- Accelerator passes an all_reduce through its communicator).
function amp.GradScaler(o)
  o = o or {}
  return setmetatable({_scale = o.init_scale or 65536.0, growth_factor = o.growth_factor or 2.0,
    backoff_factor = o.backoff_factor or 0.5, growth_interval = o.growth_interval or 2000,
    agree = o.agree or function(found) return found end,
    growth_tracker = 0, per_opt = setmetatable({}, {__mode = "k"}), found_inf_any = false}, GradScaler)
end

function GradScaler:scale_loss(loss) return loss * self._scale end

-- torch's GradScaler API: scale(outputs) (a tensor or a table of them),
-- update([new_scale]), is_enabled(), get_scale() and the factor getters /
-- setters.
function GradScaler:scale(outputs)
  if accel.is_tensor(outputs) then return self:scale_loss(outputs) end
  if type(outputs) ~= "table" then raise("GradScaler:scale: expected a tensor or a table of tensors, got %s", type(outputs)) end
  local out = {}
  for k, v in pairs(outputs) do out[k] = self:scale(v) end
  return out
end

function GradScaler:is_enabled() return true end
function GradScaler:get_growth_factor() return self.growth_factor end
function GradScaler:set_growth_factor(v) self.growth_factor = v end
function GradScaler:get_backoff_factor() return self.backoff_factor end
function GradScaler:set_backoff_factor(v) self.backoff_factor = v end
function GradScaler:get_growth_interval() return self.growth_interval end
function GradScaler:set_growth_interval(v) self.growth_interval = v end

local function opt_state(self, opt)
  local s = self.per_opt[opt]
  if not s then
    s = {unscaled = false, found_inf = false, checked = false}
    self.per_opt[opt] = s
  end
  return s
end

-- true when every element of g is finite (element by element: a sum of
-- large finite values could overflow to inf).
local function finite(g)
  return g:isfinite():sum():item() == g:numel()
end

-- Divide every gradient of opt's parameters by the scale, once per step.
-- An optimizer held by a sharding engine (accel.shard) is unscaled through
-- it: under ZeRO stages 2-3 .grad is nil and the gradients live in the
-- engine's shards; its found_inf is already agreed by every rank.
function GradScaler:unscale_(opt)
  if opt_state(self, opt).unscaled then
    raise("GradScaler:unscale_: unscale_() has already been called on this optimizer since the last update() (once "
      .. "per step: clip_grad_norm_ unscales; the optimizer's step ends the step)")
  end
  self:_unscale_once(opt)
end

-- unscale_ unless this step's gradients are unscaled already (the step
-- itself, and DeepSpeed's gradient_clipping before it). st.checked: some
-- gradient was checked (PyTorch records an inf check per device that has
-- one).
function GradScaler:_unscale_once(opt)
  local st = opt_state(self, opt)
  if st.unscaled then return end
  local inv = 1.0 / self._scale
  local eng = package.loaded["accel.shard"] and package.loaded["accel.shard"].engine_of(opt)
  if eng then
    st.found_inf, st.unscaled, st.checked = eng:unscale_(inv), true, true
    return
  end
  accel.no_grad(function()
    for _, group in ipairs(opt.param_groups) do
      for _, p in ipairs(group.params) do
        local g = p.grad
        if g ~= nil then
          g:mul_(inv)
          st.checked = true
          if not st.found_inf and not finite(g) then st.found_inf = true end
        end
      end
    end
  end)
  st.unscaled = true
end

-- Unscale (unless done already), then opt:step(closure) unless a gradient
-- overflowed. Returns true when the step ran. As PyTorch's, a step with no
-- gradient to check (no backward since zero_grad) is an error, and the
-- scale does not move.
function GradScaler:step(opt, closure)
  self:_unscale_once(opt)
  local st = opt_state(self, opt)
  local found, checked = self.agree(st.found_inf), st.checked
  st.unscaled, st.found_inf, st.checked = false, false, false
  if not checked then
    raise("optimizer step (fp16 GradScaler): no parameter of the optimizer has a gradient, so no inf/NaN check was "
      .. "recorded (run accelerator:backward(loss) before the step)")
  end
  if found then
    self.found_inf_any = true
    return false
  end
  opt:step(closure)
  return true
end

-- update([new_scale]): after a step, the scale backs off or grows; with
-- new_scale (a number or a one-element tensor) it is set to that instead.
function GradScaler:update(new_scale)
  if new_scale ~= nil then
    if accel.is_tensor(new_scale) then new_scale = new_scale:item() end
    if type(new_scale) ~= "number" or not (new_scale > 0) then
      raise("GradScaler:update: new_scale must be a positive number or a one-element tensor, got %s", tostring(new_scale))
    end
    self._scale = new_scale
  elseif self.found_inf_any then
    self._scale = self._scale * self.backoff_factor
    self.growth_tracker = 0
  else
    self.growth_tracker = self.growth_tracker + 1
    if self.growth_tracker == self.growth_interval then
      self._scale = self._scale * self.growth_factor
      self.growth_tracker = 0
    end
  end
  self.found_inf_any = false
end

function GradScaler:get_scale() return self._scale end

function GradScaler:state_dict()
  return {scale = self._scale, growth_factor = self.growth_factor, backoff_factor = self.backoff_factor,
    growth_interval = self.growth_interval, _growth_tracker = self.growth_tracker}
end

function GradScaler:load_state_dict(s)
  self._scale, self.growth_factor, self.backoff_factor = s.scale, s.growth_factor, s.backoff_factor
  self.growth_interval, self.growth_tracker = s.growth_interval, s._growth_tracker
end


-- A method called with "." instead of ":" raises at the caller's line.
require("accel.util").check_methods(GradScaler, "GradScaler")
return amp
