-- accel.fp8: the fp8 training recipe of Accelerator{mixed_precision = "fp8"}
-- (Transformer Engine's DelayedScaling, configured by accel.FP8RecipeKwargs):
-- every nn.Linear of a prepared model computes its products from fp8
-- operands with per-tensor scales.
--
--   forward:  y = (q(x) * x_scale_inv) @ (q(W) * w_scale_inv)^T + b
--             x and W quantised to e4m3fn
--   backward: the output gradient quantised to e5m2 (HYBRID) or e4m3fn
--             (E4M3); dx = q(g) @ q(W), dW = q(g)^T @ q(x), with the same
--             quantised x and W as the forward; db = sum of g (float32)
--
-- q(t) = saturate(fl32(t * scale)) (core/fp8.c; e4m3fn saturates to +-448,
-- e5m2 to +-57344, NaN stays NaN). Each product accumulates in float32 and
-- is float32 (the scaled-GEMM contract of core/fp8.h).
--
-- Delayed scaling, per tensor role (input, weight, grad_output) of each
-- Linear: the cast of step k uses the scale computed after step k-1 (1.0
-- at first); each cast records the tensor's amax (before scaling) into a
-- history of the last amax_history_len steps, and every `interval` steps
-- the scale becomes (fp8_max / amax) / 2^margin, with amax the history's
-- maximum ("max") or the amax just recorded ("most_recent"), kept unchanged
-- when that amax is 0, inf or NaN (TE's rule). A step is one forward of the
-- Linear (input, weight) or one backward through it (grad_output).
--
-- In eval mode (model:eval()) the prepared forward runs without fp8, as
-- Accelerate's default fp8_use_autocast_during_eval = false: plain Linears
-- under bf16 autocast, and the scaling state does not move.
--
-- Where this differs from TE + Accelerate: the Linear's input is quantised
-- from its own dtype (TE first casts it to the autocast dtype, bf16), and
-- the output is float32 (TE returns the autocast dtype). Products outside
-- nn.Linear run under bf16 autocast, as Accelerate's fp8 does.
--
-- The casts and the amax run on the tensors' device (the backend's fp8
-- entries). The products run on the device's native fp8 GEMM where its
-- backend has one (CUDA: cuBLASLt on compute capability 8.9+; fp8_backend
-- "CUBLASLT"), for the operands it takes, and are otherwise emulated
-- exactly: the codes decoded and multiplied by the device's float32 GEMM
-- (fp8_backend "CPU_EMULATION", the name kept from its first home).
local accel = require("accel")
local compat = require("accel.compat")
local autograd = require("accel.autograd")
local base = require("accel.nn.module")
local raise = base.raise
local C = accel._C

local fp8 = {}

-- The fp8 backend on device: "CUBLASLT" on a CUDA GPU of compute
-- capability 8.9 or newer (an older GPU is one error saying so, as
-- Transformer Engine refuses it), else "CPU_EMULATION".
function fp8.backend_for(device)
  if device.type ~= "cuda" then return "CPU_EMULATION" end
  local major, minor = accel.cuda.get_device_capability(device)
  if major * 10 + minor < 89 then
    raise('mixed_precision = "fp8" needs a GPU of compute capability 8.9 or newer (Ada, Hopper); %s is %d.%d '
      .. '(use "bf16" there)', tostring(device), major, minor)
  end
  return "CUBLASLT"
end

-- ---------------------------------------------------------------- the recipe

-- fp8.DelayedScaling(kwargs): the recipe of an accel.FP8RecipeKwargs (its
-- checked fields), with the dtypes of the forward and backward casts.
function fp8.DelayedScaling(kw)
  if kw.fp8_format == "E5M2" then
    raise('FP8RecipeKwargs: fp8_format = "E5M2" is not a training recipe (Transformer Engine refuses pure e5m2 '
      .. 'training: the forward needs e4m3\'s precision); use "HYBRID" (e4m3 forward, e5m2 gradients) or "E4M3"')
  end
  return {fp8_format = kw.fp8_format, amax_history_len = kw.amax_history_len,
    amax_compute_algo = kw.amax_compute_algo, margin = kw.margin, interval = kw.interval,
    fwd_dtype = accel.float8_e4m3fn,
    bwd_dtype = kw.fp8_format == "HYBRID" and accel.float8_e5m2 or accel.float8_e4m3fn}
end

-- ---------------------------------------------------------------- one tensor's scaling state

local Meta = {}
Meta.__index = Meta

-- fp8.ScalingMeta(recipe, dtype): scale 1, empty history.
function fp8.ScalingMeta(recipe, dtype)
  return setmetatable({dtype = dtype, len = recipe.amax_history_len, algo = recipe.amax_compute_algo,
    margin = recipe.margin, interval = recipe.interval, history = {}, pos = 0, steps = 0,
    scale = 1.0, scale_inv = 1.0}, Meta)
end

-- The amax the next scale comes from (NaN when the history holds one).
function Meta:current_amax()
  if self.algo == "most_recent" then return self.history[self.pos] end
  local m = 0
  for _, a in ipairs(self.history) do
    if a ~= a then return a end
    if a > m then m = a end
  end
  return m
end

-- Record one step's amax; every interval steps, recompute the scale.
function Meta:record(amax)
  self.pos = self.pos % self.len + 1
  self.history[self.pos] = amax
  self.steps = self.steps + 1
  if self.steps % self.interval == 0 then
    self.scale, self.scale_inv = C.fp8_update_scale(self:current_amax(), self.dtype, self.margin, self.scale)
  end
end

-- ---------------------------------------------------------------- activation checkpointing

-- A checkpointed forward (accel.utils.checkpoint) runs twice: in the
-- forward and again in backward. Its recompute must compute what the
-- forward computed (Transformer Engine's rule for activation recompute):
-- the fp8 Linears on or off as they were, every cast with the scale the
-- forward's cast used, and no amax recorded a second time. The forward
-- tapes its casts (meta, scale, scale_inv); the recompute replays the tape.
local recording = {} -- the tapes of the checkpointed forwards running now (nested ones: several)
local replaying = nil -- {tape =, pos =} while a recompute runs
local active = 0 -- > 0 inside fp8.run

-- The scale and scale_inv of the recompute's next cast (the forward's).
local function replayed_scale(meta)
  local r = replaying
  r.pos = r.pos + 1
  local e = r.tape[r.pos]
  if e == nil or e.meta ~= meta then
    error("checkpoint: the recompute in backward cast through other fp8 Linears than the checkpointed forward did "
      .. "(fn must run the same Linears in the same order both times)", 0)
  end
  return e.scale, e.inv
end

-- fp8.checkpoint_begin() -> tape: the fp8 state of a checkpointed forward
-- about to run; every cast until fp8.checkpoint_end(tape) goes on the tape.
function fp8.checkpoint_begin()
  local tape = {active = active > 0}
  recording[#recording + 1] = tape
  return tape
end

function fp8.checkpoint_end(tape)
  for i = #recording, 1, -1 do
    if recording[i] == tape then table.remove(recording, i) end
  end
end

-- fp8.replay(tape, fn, ...): fn(...) as the recompute of the forward that
-- made tape (also restores the state when fn raises).
function fp8.replay(tape, fn, ...)
  local prev_replay, prev_active = replaying, active
  replaying, active = {tape = tape, pos = 0}, tape.active and 1 or 0
  local res = compat.pack(pcall(fn, ...))
  local done = replaying.pos == #tape
  replaying, active = prev_replay, prev_active
  if not res[1] then error(res[2], 0) end
  if not done then
    error("checkpoint: the recompute in backward made fewer fp8 casts than the checkpointed forward (fn must run "
      .. "the same Linears both times)", 0)
  end
  return compat.unpack(res, 2, res.n)
end

-- t quantised with the current scale -> codes, the scale_inv used; the
-- step's amax is recorded (the next cast's scale may change). In a
-- recompute: the forward's scale, nothing recorded.
function Meta:quantize(t)
  local scale, inv = self.scale, self.scale_inv
  if replaying then scale, inv = replayed_scale(self) end
  local q, amax = C.fp8_quantize(t, scale, self.dtype)
  if not replaying then self:record(amax) end
  for _, tape in ipairs(recording) do tape[#tape + 1] = {meta = self, scale = scale, inv = inv} end
  return q, inv
end

-- ---------------------------------------------------------------- the fp8 linear

local function rows_of(t, n) return t:reshape({-1, n}) end

-- x's shape as a plain list, its last size replaced by n when given.
local function shape_of(x, n)
  local s = {}
  for i = 1, x:dim() do s[i] = x:size(i) end
  if n then s[#s] = n end
  return s
end

local Fp8Linear = autograd.Function{
  forward = function(ctx, x, w, b, meta)
    local in_f, out_f = w:size(2), w:size(1)
    if x:dim() == 0 or x:size(x:dim()) ~= in_f then
      raise("Linear (fp8): the input's last dimension must be in_features = %d, got shape %s", in_f,
        table.concat(shape_of(x), "x"))
    end
    local qx, xinv = meta.input:quantize(rows_of(x, in_f))
    local qw, winv = meta.weight:quantize(w)
    local y = C.fp8_scaled_mm(qx, xinv, qw:t(), winv)
    if b ~= nil then y = y + b end
    ctx.qx, ctx.xinv, ctx.qw, ctx.winv, ctx.meta = qx, xinv, qw, winv, meta
    ctx.x_shape, ctx.x_dtype, ctx.w_dtype, ctx.out_f = shape_of(x), x.dtype, w.dtype, out_f
    ctx.b_dtype = b ~= nil and b.dtype or nil
    return y:reshape(shape_of(x, out_f))
  end,
  backward = function(ctx, g)
    local g2 = rows_of(g, ctx.out_f)
    local qg, ginv = ctx.meta.grad_output:quantize(g2)
    local dx = ctx.needs_input_grad[1] and C.fp8_scaled_mm(qg, ginv, ctx.qw, ctx.winv):reshape(ctx.x_shape)
      :to(ctx.x_dtype) or nil
    local dw = ctx.needs_input_grad[2] and C.fp8_scaled_mm(qg:t(), ginv, ctx.qx, ctx.xinv):to(ctx.w_dtype) or nil
    local db = ctx.b_dtype and ctx.needs_input_grad[3] and g2:float():sum(1):to(ctx.b_dtype) or nil
    return dx, dw, db, nil
  end,
}

-- fp8.linear(x, weight, bias, meta): the fp8 product (differentiable in x,
-- weight and bias); meta = fp8.LinearMeta(recipe).
function fp8.linear(x, weight, bias, meta) return Fp8Linear(x, weight, bias, meta) end

-- The scaling state of one Linear: input, weight, grad_output.
function fp8.LinearMeta(recipe)
  return {input = fp8.ScalingMeta(recipe, recipe.fwd_dtype), weight = fp8.ScalingMeta(recipe, recipe.fwd_dtype),
    grad_output = fp8.ScalingMeta(recipe, recipe.bwd_dtype)}
end

-- ---------------------------------------------------------------- the fp8 scope and model conversion

-- fn(...) with the fp8 Linears on (restored even when fn raises).
function fp8.run(fn, ...)
  active = active + 1
  local res = compat.pack(pcall(fn, ...))
  active = active - 1
  if not res[1] then error(res[2], 0) end
  return compat.unpack(res, 2, res.n)
end

function fp8.is_active() return active > 0 end

local function is_linear(m)
  local Linear = require("accel.nn.layers").Linear
  return m:isinstance(Linear)
end

-- nn.Linear's forward for a Linear with a scaling state (m.fp8_meta):
-- the fp8 product inside fp8.run, the plain one outside it.
function fp8.linear_forward(m, x)
  if active == 0 then return nil end
  return Fp8Linear(x, m.weight, m.bias, m.fp8_meta)
end

-- Give every nn.Linear of model its scaling state m.fp8_meta (its forward
-- then takes the fp8 path inside fp8.run; a subclass that overrides
-- forward keeps its own). Returns the number of Linears converted.
function fp8.convert_model(model, recipe)
  local n = 0
  if not base.is_module(model) then return n end
  for _, m in ipairs(model:modules()) do
    if is_linear(m) and m.fp8_meta == nil then
      m.fp8_meta = fp8.LinearMeta(recipe)
      n = n + 1
    end
  end
  return n
end

-- The scaling state of every converted Linear of model back to its start
-- (scale 1, empty history): load_state does this, so a run resumed in the
-- same process continues as one resumed in a new process (the state is not
-- in checkpoints).
function fp8.reset_model(model)
  if not base.is_module(model) then return end
  for _, m in ipairs(model:modules()) do
    for _, meta in pairs(is_linear(m) and m.fp8_meta or {}) do
      meta.history, meta.pos, meta.steps, meta.scale, meta.scale_inv = {}, 0, 0, 1.0, 1.0
    end
  end
end

-- Undo convert_model (the scaling state goes too).
function fp8.unconvert_model(model)
  if not base.is_module(model) then return model end
  for _, m in ipairs(model:modules()) do
    if is_linear(m) then m.fp8_meta = nil end
  end
  return model
end

return fp8
