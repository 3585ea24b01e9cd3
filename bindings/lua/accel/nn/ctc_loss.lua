-- accel.nn.ctc_loss: the connectionist temporal classification loss,
-- F.ctc_loss / nn.CTCLoss, as PyTorch's: the forward (alpha) recursion over
-- the targets with blanks between them, in log space, one time step at a
-- time for the whole batch, composed of tensor ops so autograd gives the
-- gradient of the log-probabilities (PyTorch's, which assumes they come from
-- a log_softmax: see pytorch_gradient_term). Sums of probabilities that are
-- all 0 stay -inf with a zero gradient inside the recursion; a batch entry
-- whose targets cannot fit its input (loss inf) gets PyTorch's NaN gradient
-- unless zero_infinity (see impossible_term). Loaded on first use.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local util = require("accel.util")

local raise, export_class, torch_args = base.raise, base.export_class, util.torch_args

local M = {}
local OPTIONS = {"blank:int", "reduction:string", "zero_infinity:bool"}
local NEG_INF = -math.huge

-- log(exp(a) + exp(b) [+ exp(c)]) elementwise; -inf (with a zero gradient) where all are -inf
local function log_add(a, b, c)
  local m = accel.maximum(a, b)
  if c then m = accel.maximum(m, c) end
  local none = m:eq(NEG_INF)
  local shift = accel.where(none, 0, m)
  local sum = (a - shift):exp() + (b - shift):exp()
  if c then sum = sum + (c - shift):exp() end
  return accel.where(none, NEG_INF, shift + accel.where(none, 1, sum):log())
end

-- v shifted right by k along dim 2 (N, L), -inf entering
local function shifted(v, k)
  local n, l = v:size(1), v:size(2)
  if k >= l then return accel.full({n, l}, NEG_INF, {dtype = v.dtype, device = v.device}) end
  local pad = accel.full({n, k}, NEG_INF, {dtype = v.dtype, device = v.device})
  return accel.cat({pad, v:narrow(2, 1, l - k)}, 2)
end

-- a list or 1-D tensor of N non-negative integer lengths, as a Lua list
local function lengths_of(op, name, v, n)
  local list = accel.is_tensor(v) and v:reshape({-1}):tolist() or v
  if type(list) ~= "table" or #list ~= n then
    raise("%s: %s must have one length per batch entry (%d), got %s", op, name, n, util.show(v))
  end
  for i, x in ipairs(list) do
    if type(x) ~= "number" or x ~= math.floor(x) or x < 0 then
      raise("%s: %s must be non-negative integers, got %s at %d", op, name, util.show(x), i)
    end
  end
  return list
end

-- targets padded to (N, S): from (N, S) or the concatenated 1-D form
local function padded_targets(op, targets, target_lengths, n)
  if not accel.is_tensor(targets) or targets.dtype.is_floating_point then
    raise("%s: targets must be an integer tensor", op)
  end
  if targets:dim() == 2 then
    for i, len in ipairs(target_lengths) do
      if len > targets:size(2) then
        raise("%s: target length %d of batch entry %d is longer than the padded targets (%d)", op, len, i, targets:size(2))
      end
    end
    return targets
  end
  local width, total, flat, rows, at = 1, 0, targets:reshape({-1}), {}, 0
  for _, len in ipairs(target_lengths) do width, total = math.max(width, len), total + len end
  if flat:numel() < total then
    raise("%s: the concatenated targets hold %d labels, fewer than the target lengths' sum %d", op, flat:numel(), total)
  end
  for i = 1, n do
    local len = target_lengths[i]
    local row = accel.zeros({width}, {dtype = accel.int64, device = targets.device})
    if len > 0 then row:narrow(1, 1, len):copy_(flat:narrow(1, at + 1, len)) end
    rows[i], at = row, at + len
  end
  return accel.stack(rows, 1)
end

-- (T, N): whether step t lies inside batch entry n's input length (in_len_t (N, 1))
local function inside_steps(t_max, in_len_t, opts)
  return accel.arange(t_max, opts):reshape({t_max, 1}):lt(in_len_t:reshape({1, -1}))
end

-- PyTorch's gradient of ctc_loss is exp(log_probs) - (each label's
-- posterior) at every step inside the input length: the true gradient plus
-- exp(log_probs), which a log_softmax before the loss cancels (the logits'
-- gradients agree either way). This term, 0 in value with exp(log_probs) as
-- its gradient there, gives log_probs.grad PyTorch's values. (N)
local function pytorch_gradient_term(log_probs, inside)
  local p = log_probs:exp()
  return ((p - p:detach()) * inside:unsqueeze(3):to(p.dtype)):sum({1, 3})
end

-- 0 (N) in value; its gradient is NaN wherever mask (T, N, 1) holds, whatever the loss's
local NanGradient = require("accel.autograd").Function{
  name = "CtcLossImpossible",
  forward = function(ctx, log_probs, mask)
    ctx:save_for_backward(mask)
    ctx.shape, ctx.dtype = log_probs.shape, log_probs.dtype
    return accel.zeros({log_probs:size(2)}, {dtype = log_probs.dtype, device = log_probs.device})
  end,
  backward = function(ctx, g)
    return accel.zeros(ctx.shape, {dtype = ctx.dtype, device = g.device}):masked_fill(ctx.saved_tensors[1], 0 / 0)
  end,
}

-- PyTorch's gradient for a batch entry whose targets cannot fit its input
-- (nll inf) is NaN at each step inside its input length (exp(log_probs) -
-- exp(-inf + inf - log_probs)), where the guarded sums here give 0: this
-- term, 0 in value, adds those NaNs (N; nil where there are none to add)
local function impossible_term(log_probs, nll, inside)
  local mask = inside:logical_and(nll:detach():eq(math.huge):reshape({1, -1})):unsqueeze(3) -- (T, N, 1)
  if not log_probs.requires_grad or not mask:any():item() then return nil end
  return NanGradient(log_probs, mask)
end

-- ctc_loss(log_probs (T, N, C) or (T, C), targets (N, S) or 1-D, input_lengths, target_lengths,
--   [blank = 0], [reduction = "mean"], [zero_infinity = false]) -> the loss (N) or reduced
function F.ctc_loss(log_probs, targets, input_lengths, target_lengths, ...)
  local op = "ctc_loss"
  local a = torch_args(op, OPTIONS, ...)
  local reduction, blank = F._reduction(op, a.reduction), a.blank or 0
  if not accel.is_tensor(log_probs) or not log_probs.dtype.is_floating_point or
      (log_probs:dim() ~= 3 and log_probs:dim() ~= 2) then
    raise("%s: log_probs must be a floating point tensor of shape (T, N, C) or (T, C)", op)
  end
  local unbatched = log_probs:dim() == 2
  if unbatched then
    log_probs = log_probs:unsqueeze(2)
    if accel.is_tensor(targets) then targets = targets:reshape({1, -1}) end
    if type(input_lengths) == "number" then input_lengths = {input_lengths} end
    if type(target_lengths) == "number" then target_lengths = {target_lengths} end
  end
  local t_max, n, c = log_probs:size(1), log_probs:size(2), log_probs:size(3)
  if blank < 0 or blank >= c then raise("%s: blank must be in label range [0, %d), got %d", op, c, blank) end
  local in_lens = lengths_of(op, "input_lengths", input_lengths, n)
  local tgt_lens = lengths_of(op, "target_lengths", target_lengths, n)
  for i, len in ipairs(in_lens) do
    if len > t_max then raise("%s: expected input_lengths to have value at most %d, but got value %d", op, t_max, len) end
    if len == 0 then raise("%s: an input length of 0 (batch entry %d) is not supported", op, i) end
  end
  local tg = padded_targets(op, targets, tgt_lens, n):to(log_probs.device):long()
  local s_max = tg:size(2)
  local opts = {dtype = accel.int64, device = log_probs.device}
  -- the extended labels (N, 2 S + 1): blank, target 1, blank, target 2, ..., blank
  local width = 2 * s_max + 1
  local labels = accel.full({n, width}, blank, opts)
  if s_max > 0 then
    local odd = accel.arange(s_max, opts):mul(2):add(1):reshape({1, s_max}):expand({n, s_max})
    labels = labels:scatter(2, odd, tg:clamp(0, c - 1))
  end
  -- a skip from s - 2 to s: s is a label (odd) that differs from the label two before
  local skip = accel.zeros({n, width}, {dtype = accel.bool, device = log_probs.device})
  if width > 2 then
    local same = labels:narrow(2, 3, width - 2):ne(labels:narrow(2, 1, width - 2))
    local odd = accel.arange(width - 2, opts):add(2):remainder(2):eq(1):reshape({1, width - 2})
    skip = accel.cat({skip:narrow(2, 1, 2), same:logical_and(odd)}, 2)
  end
  local positions = accel.arange(width, opts):reshape({1, width})
  local alpha = accel.where(positions:lt(2), log_probs:select(1, 1):gather(2, labels), NEG_INF)
  local in_len_t = accel.tensor(in_lens, opts):reshape({n, 1})
  for t = 2, t_max do
    local emit = log_probs:select(1, t):gather(2, labels)
    local two_back = accel.where(skip, shifted(alpha, 2), NEG_INF)
    local next_alpha = log_add(alpha, shifted(alpha, 1), two_back) + emit
    alpha = accel.where(in_len_t:ge(t), next_alpha, alpha)
  end
  local tgt_len_t = accel.tensor(tgt_lens, opts):reshape({n, 1})
  local last = alpha:gather(2, tgt_len_t * 2)
  local before = accel.where(tgt_len_t:gt(0), alpha:gather(2, (tgt_len_t * 2 - 1):clamp(0, width - 1)), NEG_INF)
  local nll, inside = -log_add(last, before):reshape({n}), inside_steps(t_max, in_len_t, opts)
  local loss = nll + pytorch_gradient_term(log_probs, inside)
  if a.zero_infinity then loss = accel.where(loss:eq(math.huge), 0, loss)
  else
    local nan_term = impossible_term(log_probs, nll, inside)
    if nan_term then loss = loss + nan_term end
  end
  if unbatched then loss = loss:reshape({}) end
  if reduction == "mean" then
    return (loss / accel.tensor(tgt_lens, {dtype = loss.dtype, device = loss.device}):clamp(1):reshape(loss.shape)):mean()
  end
  return F._reduce(op, loss, reduction)
end

-- CTCLoss([blank = 0], [reduction = "mean"], [zero_infinity = false]) or ({...});
-- forward(log_probs, targets, input_lengths, target_lengths)
require("accel.amp").fp32_ops(F, {"ctc_loss"}) -- on torch's autocast float32 list (CPU)

local CTCLoss = export_class(M, "CTCLoss")
function CTCLoss:init(...)
  local a = torch_args("CTCLoss", OPTIONS, ...)
  self.blank, self.zero_infinity = a.blank or 0, a.zero_infinity == true
  self.reduction = F._reduction("CTCLoss", a.reduction)
end
function CTCLoss:forward(log_probs, targets, input_lengths, target_lengths)
  return F.ctc_loss(log_probs, targets, input_lengths, target_lengths,
    {blank = self.blank, reduction = self.reduction, zero_infinity = self.zero_infinity})
end

return M
