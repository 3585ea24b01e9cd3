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
local util = require("accel.util")
local raise = util.raise

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

-- fn(...) with autocast off (an op built from matmuls that autocast would
-- otherwise round, where torch's op is on no autocast list); restored after.
function amp.off(fn, ...)
  local prev = C.set_autocast(nil)
  if prev == nil then return fn(...) end
  local res = compat.pack(pcall(fn, ...))
  C.set_autocast(prev)
  if not res[1] then error(res[2], 0) end
  return compat.unpack(res, 2, res.n)
end

-- t as an op on autocast's lower-precision list takes it: cast to the
-- autocast dtype when autocast is on and t is float32 or a half dtype
-- (float64, integers and non-tensors pass), as torch's cached_cast
function amp.cast_input(t)
  local dt = accel.is_tensor(t) and t.dtype.is_floating_point and t.dtype ~= accel.float64 and amp.current_dtype()
  return dt and t:to(dt) or t
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

-- Several values, each as to_fp32 gives it.
local function values_to_fp32(...)
  local n = select("#", ...)
  if n == 1 then return to_fp32((...)) end
  local res = compat.pack(...)
  for i = 1, n do res[i] = to_fp32(res[i]) end
  return compat.unpack(res, 1, n)
end

-- t as an input of an op on torch's autocast float32 list: widened to float32 when autocast is on and t
-- is bf16 / fp16 (outside autocast a half input keeps its dtype, as in torch)
function amp.fp32_input(t)
  if amp.current_dtype() == nil then return t end
  return accel.is_tensor(t) and to_fp32(t) or t
end

-- torch's autocast "fp32" policy for fn (an op on its CPU float32 list): under autocast, the bf16 / fp16
-- tensors among the arguments (also in a plain table such as the options) are widened to float32 first
function amp.fp32_op(fn)
  return function(...)
    if amp.current_dtype() == nil then return fn(...) end
    return fn(values_to_fp32(...))
  end
end

-- tbl[name] wrapped by fp32_op for each of names (a module's functions on the float32 list)
function amp.fp32_ops(tbl, names)
  for _, name in ipairs(names) do tbl[name] = amp.fp32_op(tbl[name]) end
end

-- Patched forwards: model -> the forward it had before (weak keys).
local patched = setmetatable({}, {__mode = "k"})

-- Make model's forward run under autocast(dtype) and return float32
-- outputs (dtype accel.float32: autocast off inside, as Accelerate's
-- autocast(enabled=False) wrapper; nil without fp8_recipe: no patch);
-- with fp8_recipe (accel.fp8.DelayedScaling) its nn.Linear layers also
-- get the fp8 recipe (accel.fp8.convert_model), active inside this forward
-- while the model is in training mode. The model stays the same object (as Accelerate does on one
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
    return values_to_fp32(amp.run(dtype, run, self, ...))
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

-- PyTorch's torch.amp.GradScaler semantics: the loss is multiplied by
-- scale before backward; before an optimizer step the gradients are
-- unscaled (once per step) and checked, and a step whose gradients hold an
-- inf or NaN on any process is skipped on every process; update() then
-- halves the scale when any optimizer's check (by step or unscale_) found
-- one, or doubles it after growth_interval good steps in a row. Each
-- optimizer goes READY -> UNSCALED (unscale_) -> STEPPED (step) and back to
-- READY at update(), as torch's OptState.
local GradScaler = {}
GradScaler.__index = GradScaler

local READY, UNSCALED, STEPPED = "ready", "unscaled", "stepped"

local function fresh_states() return setmetatable({}, {__mode = "k"}) end

-- v rounded to float32, the dtype torch keeps the scale in after its first update (inf beyond its range)
local function f32(v) return accel.tensor(v, {dtype = accel.float64}):float():item() end
amp.round_f32 = f32 -- (NAdam's mu_product is kept in float32 too: accel.optim.elementwise)

-- amp.GradScaler{init_scale=, growth_factor=, backoff_factor=, growth_interval=,
-- agree = function(found) -> found on any process}: agree makes every
-- process skip the step when any of them found an inf or NaN (the
-- Accelerator passes an all_reduce through its communicator).
-- The Accelerator's scaler, from settings already checked (a DeepSpeed static
-- loss scale is growth 1 and backoff 1, outside what a user may ask).
function amp.scaler_from_settings(o)
  o = o or {}
  return setmetatable({_scale = o.init_scale or 65536.0, growth_factor = o.growth_factor or 2.0,
    backoff_factor = o.backoff_factor or 0.5, growth_interval = o.growth_interval or 2000,
    agree = o.agree or function(found) return found end, enabled = o.enabled ~= false, device = o.device,
    growth_tracker = 0, per_opt = fresh_states()}, GradScaler)
end

-- amp.GradScaler([device = "cuda"], [init_scale], [growth_factor], [backoff_factor], [growth_interval],
-- [enabled = true]), positionally or by name, as torch.amp.GradScaler. Disabled, it is torch's pass-through:
-- scale returns its argument, step only steps, unscale_ and update do nothing, get_scale is 1.
local SCALER_ARGS = {"device", "init_scale:number", "growth_factor:number", "backoff_factor:number",
  "growth_interval:number", "enabled:bool", "agree:function"}
function amp.GradScaler(...)
  local o = util.torch_args("GradScaler", SCALER_ARGS, ...)
  local options = {} -- checked as GradScalerKwargs's (device is checked below, agree is the Accelerator's own)
  for k, v in pairs(o) do if k ~= "agree" and k ~= "device" then options[k] = v end end
  require("accel.plugins").check_scaler_options("GradScaler", options)
  if o.device ~= nil then
    local ok, dev = pcall(accel.device, o.device) -- "sim:3", "gpu", 5: accel.device's own reason
    if not ok then raise("GradScaler: %s", util.strip_position(dev)) end
    o.device = dev
  end
  return amp.scaler_from_settings(o)
end

-- loss times the scale, a float32 0-d tensor as torch keeps it (so a 0-d half loss comes back float32)
function GradScaler:scale_loss(loss)
  if not self.enabled then return loss end
  return loss * accel.tensor(self._scale, {dtype = accel.float32, device = loss.device})
end

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

function GradScaler:is_enabled() return self.enabled end
function GradScaler:get_growth_factor() return self.growth_factor end
function GradScaler:set_growth_factor(v) self.growth_factor = v end
function GradScaler:get_backoff_factor() return self.backoff_factor end
function GradScaler:set_backoff_factor(v) self.backoff_factor = v end
function GradScaler:get_growth_interval() return self.growth_interval end
function GradScaler:set_growth_interval(v) self.growth_interval = v end

-- opt's state this iteration: stage, and found_inf (nil until a gradient
-- was checked: torch records an inf check per device that has one).
local function opt_state(self, opt)
  local s = self.per_opt[opt]
  if not s then
    s = {stage = READY}
    self.per_opt[opt] = s
  end
  return s
end

-- true when every element of g is finite (element by element: a sum of
-- large finite values could overflow to inf).
local function finite(g)
  return g:isfinite():sum():item() == g:numel()
end

-- Divide every gradient of opt's parameters by the scale (torch's
-- unscale_): an error when opt was unscaled or stepped since the last
-- update().
function GradScaler:unscale_(opt)
  if not self.enabled then return end
  local stage = opt_state(self, opt).stage
  if stage == UNSCALED then
    raise("GradScaler:unscale_: unscale_() has already been called on this optimizer since the last update() (once "
      .. "per step: clip_grad_norm_ unscales; the optimizer's step ends the step)")
  elseif stage == STEPPED then
    raise("GradScaler:unscale_: unscale_() is being called after step() (call update() first)")
  end
  self:_unscale(opt)
end

-- unscale_ unless this step's gradients are unscaled already (DeepSpeed's
-- gradient_clipping before the step).
function GradScaler:_unscale_once(opt)
  if opt_state(self, opt).stage == READY then self:_unscale(opt) end
end

-- Unscale and check opt's gradients; found_inf is agreed by every process.
-- An optimizer held by a sharding engine (accel.shard) is unscaled through
-- it: under ZeRO stages 2-3 .grad is nil and the gradients live in the
-- engine's shards; its found_inf is already agreed by every rank.
function GradScaler:_unscale(opt)
  local st = opt_state(self, opt)
  local inv = 1.0 / self._scale
  st.stage = UNSCALED
  local eng = package.loaded["accel.shard"] and package.loaded["accel.shard"].engine_of(opt)
  if eng then
    st.found_inf = eng:unscale_(inv)
    return
  end
  local checked, found = false, false
  accel.no_grad(function()
    for _, group in ipairs(opt.param_groups) do
      for _, p in ipairs(group.params) do
        local g = p.grad
        if g ~= nil then
          g:mul_(inv)
          checked = true
          if not found and not finite(g) then found = true end
        end
      end
    end
  end)
  found = self.agree(found) -- every process, also one without gradients
  if checked then st.found_inf = found end
end

-- Unscale (unless unscale_ did), then opt:step(closure) unless a gradient
-- overflowed. Returns true when the step ran. As PyTorch's, a second step
-- before update() is an error, and so is a step with no gradient to check
-- (no backward since zero_grad); unlike PyTorch, that failed step leaves
-- the optimizer ready for the next one.
function GradScaler:step(opt, closure)
  if not self.enabled then return opt:step(closure) end
  local st = opt_state(self, opt)
  if st.stage == STEPPED then
    raise("GradScaler:step: step() has already been called since the last update()")
  end
  if st.stage == READY then self:_unscale(opt) end
  if st.found_inf == nil then
    st.stage = READY
    raise("optimizer step (fp16 GradScaler): no parameter of the optimizer has a gradient, so no inf/NaN check was "
      .. "recorded (run accelerator:backward(loss) before the step)")
  end
  if not st.found_inf then opt:step(closure) end
  st.stage = STEPPED
  return not st.found_inf
end

-- Whether any optimizer's check since the last update() found an inf or
-- NaN (of the optimizers in `stage` only, when given); an error when none
-- was checked.
local function found_inf_any(self, stage)
  local checked, found = false, false
  for _, st in pairs(self.per_opt) do
    if st.found_inf ~= nil and (stage == nil or st.stage == stage) then checked, found = true, found or st.found_inf end
  end
  if not checked then
    raise("GradScaler:update: No inf checks were recorded prior to update() (call step(optimizer) or "
      .. "unscale_(optimizer) after backward first)")
  end
  return found
end

-- update([new_scale]): the scale backs off when any check since the last
-- update found an inf or NaN, else grows after growth_interval good
-- updates; with new_scale (a number or a one-element tensor) it is set to
-- that instead. Every optimizer is READY again afterwards.
local function update_scale(self, new_scale, stage)
  if new_scale ~= nil then
    if accel.is_tensor(new_scale) then new_scale = new_scale:item() end
    if type(new_scale) ~= "number" or not (new_scale > 0) then
      raise("GradScaler:update: new_scale must be a positive number or a one-element tensor, got %s", tostring(new_scale))
    end
    self._scale = new_scale
  elseif found_inf_any(self, stage) then
    self._scale = self._scale * self.backoff_factor
    self.growth_tracker = 0
  else
    self.growth_tracker = self.growth_tracker + 1
    if self.growth_tracker == self.growth_interval then
      local grown = f32(self._scale * self.growth_factor)
      if grown < math.huge then self._scale = grown end -- as torch: kept where it would pass float32's range
      self.growth_tracker = 0
    end
  end
  self._scale = f32(self._scale) -- (torch keeps it in a float32 tensor from the first update on)
  if stage == nil then
    self.per_opt = fresh_states()
  else
    for opt, st in pairs(self.per_opt) do -- (one unscaled with no gradient to divide has nothing to keep)
      if st.stage == stage or st.found_inf == nil then self.per_opt[opt] = nil end
    end
  end
end

function GradScaler:update(new_scale)
  if self.enabled then update_scale(self, new_scale, nil) end
end

-- The update after one optimizer's step through the Accelerator (which,
-- as Accelerate, updates after every optimizer's step): from the stepped
-- optimizers' checks, and only they (and those unscaled before they had
-- a gradient) are READY again. torch's update()
-- would also reset an optimizer that clip_grad_norm_ has unscaled but that
-- has not stepped yet, and its step would divide its gradients by the
-- scale a second time (what Accelerate does with two fp16 optimizers).
function GradScaler:_update_stepped() update_scale(self, nil, STEPPED) end

function GradScaler:get_scale() return self.enabled and self._scale or 1.0 end

local STATE_FIELDS = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}

function GradScaler:state_dict()
  if not self.enabled then return {} end
  return {scale = self._scale, growth_factor = self.growth_factor, backoff_factor = self.backoff_factor,
    growth_interval = self.growth_interval, _growth_tracker = self.growth_tracker}
end

-- As torch's: an empty dict is refused; every field must be there (a number).
function GradScaler:load_state_dict(s)
  if not self.enabled then return end
  if type(s) ~= "table" then raise("GradScaler:load_state_dict: expected a table, got %s", type(s)) end
  if next(s) == nil then
    raise("GradScaler:load_state_dict: the source state dict is empty, possibly because it was saved from a "
      .. "disabled instance of GradScaler")
  end
  for _, k in ipairs(STATE_FIELDS) do
    if type(s[k]) ~= "number" then
      raise("GradScaler:load_state_dict: the state dict's %s must be a number, got %s", k, util.show(s[k]))
    end
  end
  self._scale, self.growth_factor, self.backoff_factor = s.scale, s.growth_factor, s.backoff_factor
  self.growth_interval, self.growth_tracker = s.growth_interval, s._growth_tracker
end


-- A method called with "." instead of ":" raises at the caller's line.
util.check_methods(GradScaler, "GradScaler")
return amp
