-- accel.nn.functional: PyTorch's torch.nn.functional names over the fused C
-- ops (accel._C) and tensor methods. Positional arguments as PyTorch takes
-- them; keyword arguments in one trailing options table, whose keys each
-- function checks (check(name, o, keys): an unknown key is an error).
local accel = require("accel")
local check = require("accel.nn.module").check_options
local C = accel._C
local util = require("accel.util")
local raise = util.raise

local F = {}

local function opt(o, k, default)
  if o == nil or o[k] == nil then return default end
  return o[k]
end

-- A 1-D weight (in) maps (..., in) to (...), as PyTorch's (which takes no
-- bias with it).
function F.linear(x, weight, bias)
  if accel.is_tensor(weight) and weight:dim() == 1 then
    if bias ~= nil then raise("linear: a 1-D weight takes no bias (PyTorch's linear refuses it too)") end
    return C.linear(x, weight:unsqueeze(1)):squeeze(-1)
  end
  return C.linear(x, weight, bias)
end

function F.relu(x) return x:relu() end
function F.gelu(x, o) return x:gelu({approximate = check("gelu", o, {"approximate"}).approximate or "none"}) end
function F.silu(x) return x:silu() end
function F.sigmoid(x) return x:sigmoid() end
function F.tanh(x) return x:tanh() end
function F.leaky_relu(x, slope)
  if type(slope) == "table" then slope = check("leaky_relu", slope, {"negative_slope"}).negative_slope end
  return x:leaky_relu(slope or 0.01)
end

local function softmax_dim(name, x, dim, o)
  if type(dim) == "table" then o, dim = check(name, dim, {"dim", "dtype"}), dim.dim
  else o = check(name, o, {"dtype"}) end
  if dim == nil then error("softmax: dim must be given (e.g. F.softmax(x, -1))", 3) end
  if o.dtype then x = x:to(o.dtype) end
  return x, dim
end

function F.softmax(x, dim, o)
  x, dim = softmax_dim("softmax", x, dim, o)
  return C.softmax(x, dim, false)
end

function F.log_softmax(x, dim, o)
  x, dim = softmax_dim("log_softmax", x, dim, o)
  return C.softmax(x, dim, true)
end

-- PyTorch's names of the dtypes, as its target dtype messages show them.
local torch_dtype_names = {float32 = "Float", float64 = "Double", bfloat16 = "BFloat16", float16 = "Half",
  float8_e4m3fn = "Float8_e4m3fn", float8_e5m2 = "Float8_e5m2", int64 = "Long", int32 = "Int", uint8 = "Byte",
  bool = "Bool"}

-- Class-index targets are int64 or uint8, as PyTorch requires (a bool or
-- int32 target is an error rather than read as class ids).
local function check_class_target(op, target)
  if not accel.is_tensor(target) then return end
  local name = target.dtype.name
  if name ~= "int64" and name ~= "uint8" then
    raise("%s: expected target dtype to be Long or Byte (int64 or uint8 class indices), but got %s (%s)", op,
      torch_dtype_names[name] or name, name)
  end
end

-- The loss is computed in float32; outside autocast a bf16 / fp16 input gets
-- its loss back in its own dtype, as PyTorch's (inside autocast, float32).
-- A floating-point target holds class probabilities, any other class ids.
function F.cross_entropy(input, target, o)
  o = check("cross_entropy", o, {"ignore_index", "label_smoothing", "reduction"})
  local ignore = opt(o, "ignore_index", -100)
  if accel.is_tensor(target) and target.dtype.is_floating_point then
    if ignore >= 0 then raise("cross_entropy: ignore_index is not supported for floating point target") end
  else
    check_class_target("cross_entropy", target)
  end
  local loss = C.cross_entropy(input, target, ignore, opt(o, "label_smoothing", 0.0), opt(o, "reduction", "mean"))
  local half = input.dtype == accel.bfloat16 or input.dtype == accel.float16
  if half and require("accel.amp").current_dtype() == nil then return loss:to(input.dtype) end
  return loss
end

-- Under autocast, the losses below run in float32, as on PyTorch's autocast
-- float32 list (a bf16 / fp16 input is widened first; outside autocast a
-- half input keeps its dtype, as in PyTorch).
local function fp32_in_autocast(t)
  if not accel.is_tensor(t) or (t.dtype ~= accel.bfloat16 and t.dtype ~= accel.float16) then return t end
  return require("accel.amp").current_dtype() ~= nil and t:float() or t
end

-- reduction (nil: "mean") checked for the loss op (also by the loss modules)
function F._reduction(op, reduction)
  if reduction == nil then return "mean" end
  if reduction ~= "mean" and reduction ~= "sum" and reduction ~= "none" then
    raise('%s: reduction must be "mean", "sum" or "none", got %s', op, util.show(reduction))
  end
  return reduction
end

local function reduce(op, t, reduction)
  reduction = F._reduction(op, reduction)
  if reduction == "mean" then return t:mean()
  elseif reduction == "sum" then return t:sum() end
  return t
end

local function shape_text(dims) return "[" .. table.concat(dims, ", ") .. "]" end

local function sizes(t)
  local dims = {}
  for d = 1, t:dim() do dims[d] = t:size(d) end
  return dims
end

-- nll_loss's shapes, as PyTorch checks them: input (C) with target () or
-- (1); (N, C) with (N); (N, C, d1, ...) with (N, d1, ...).
local function check_nll_shapes(input, target)
  local nd, td = input:dim(), target:dim()
  if nd == 0 then raise("nll_loss: Expected 1 or more dimensions (got 0)") end
  if td > 1 and nd <= 2 then raise("nll_loss: 0D or 1D target tensor expected, multi-target not supported") end
  if nd == 1 then
    if td == 1 and target:size(1) ~= 1 then
      raise("nll_loss: For 1D input, 1D target must have size 1, but got target size: %d", target:size(1))
    end
    return
  end
  local tn = td == 0 and 0 or target:size(1)
  if tn ~= input:size(1) then
    raise("nll_loss: Expected input batch_size (%d) to match target batch_size (%d).", input:size(1), tn)
  end
  local want = sizes(input)
  table.remove(want, 2)
  if shape_text(want) ~= shape_text(sizes(target)) then
    raise("nll_loss: Expected target size %s, got %s", shape_text(want), shape_text(sizes(target)))
  end
end

-- -input[target] over the class dim; a target outside [0, C) is named.
local function pick_classes(input, safe)
  local cdim = input:dim() == 1 and 1 or 2
  local ok, picked = pcall(input.gather, input, cdim, safe:unsqueeze(cdim))
  if ok then return -picked:squeeze(cdim) end
  for _, v in ipairs(safe:reshape(-1):tolist()) do
    if v < 0 or v >= input:size(cdim) then raise("nll_loss: Target %d is out of bounds.", v) end
  end
  error(picked, 0)
end

function F.nll_loss(input, target, o)
  o = check("nll_loss", o, {"ignore_index", "reduction"})
  local reduction = F._reduction("nll_loss", o.reduction)
  check_class_target("nll_loss", target)
  input = fp32_in_autocast(input)
  check_nll_shapes(input, target)
  if input:dim() == 1 then target = target:reshape({}) end
  local ignore = opt(o, "ignore_index", -100)
  local ignored = target:eq(ignore)
  local picked = pick_classes(input, target:masked_fill(ignored, 0)):masked_fill(ignored, 0)
  if reduction == "mean" then return picked:sum() / (target:numel() - ignored:sum():item()) end
  return reduce("nll_loss", picked, reduction)
end

function F.mse_loss(input, target, o)
  local d = fp32_in_autocast(input) - fp32_in_autocast(target)
  return reduce("mse_loss", d * d, check("mse_loss", o, {"reduction"}).reduction)
end

function F.l1_loss(input, target, o)
  return reduce("l1_loss", (fp32_in_autocast(input) - fp32_in_autocast(target)):abs(),
    check("l1_loss", o, {"reduction"}).reduction)
end

-- max(x, 0) - x*t + log(1 + exp(-|x|)), stable for large |x|
function F.binary_cross_entropy_with_logits(input, target, o)
  o = check("binary_cross_entropy_with_logits", o, {"weight", "pos_weight", "reduction"})
  if accel.is_tensor(input) and accel.is_tensor(target) and input.shape ~= target.shape then
    raise("binary_cross_entropy_with_logits: Target size (%s) must be the same as input size (%s)",
      tostring(target:size()), tostring(input:size()))
  end
  input, target = fp32_in_autocast(input), fp32_in_autocast(target)
  -- softplus(-x) = relu(-x) + log1p(exp(-|x|)), with |x| = x + 2 relu(-x) and
  -- max(x, 0) = x + relu(-x): exact for x ~= 0, and at x = 0 the pieces'
  -- gradients add up to the true one (sigmoid(0) - t), as PyTorch's.
  local r = (-input):relu()
  local softplus_neg = r + (-(input + 2 * r)):exp():log1p()
  local loss
  local pw = opt(o, "pos_weight", nil)
  if pw then
    loss = (1 - target) * input + (target * (pw - 1) + 1) * softplus_neg
  else
    loss = input - input * target + softplus_neg
  end
  local w = opt(o, "weight", nil)
  if w then loss = loss * w end
  return reduce("binary_cross_entropy_with_logits", loss, o.reduction)
end

function F.dropout(x, p, o)
  if type(p) == "table" then o, p = check("dropout", p, {"p", "training"}), p.p
  else o = check("dropout", o, {"training"}) end
  p = p or 0.5
  local training = opt(o, "training", true)
  if not training or p == 0 then return x end
  return C.dropout(x, p)
end

-- padding_idx (a 0-based id in [-num, num), negative from the end) as the
-- row id in [0, num), or nil; checked for op (also by nn.Embedding).
function F._padding_index(op, num, padding_idx)
  if padding_idx == nil then return nil end
  if type(padding_idx) ~= "number" or math.floor(padding_idx) ~= padding_idx or padding_idx >= num
      or padding_idx < -num then
    raise("%s: padding_idx must be within num_embeddings (0-based id in [%d, %d)), got %s", op, -num, num,
      tostring(padding_idx))
  end
  return padding_idx < 0 and num + padding_idx or padding_idx
end

-- embedding(input, weight, [padding_idx] or [{padding_idx =}]): rows of weight
-- at the 0-based ids in input; the row padding_idx (a 0-based id, negative
-- from the end) gets no gradient, as in PyTorch.
function F.embedding(input, weight, o)
  local out = C.embedding(weight, input)
  local pad = o
  if type(o) == "table" then pad = check("embedding", o, {"padding_idx"}).padding_idx end
  pad = F._padding_index("embedding", weight:size(1), pad)
  if pad == nil or not weight.requires_grad then return out end
  local hit = input:eq(pad):unsqueeze(-1)
  return out:masked_fill(hit, 0) + hit * weight[pad + 1]:detach()
end

-- normalized_shape (an integer or a list) as a list, checked against x's
-- trailing dims as PyTorch's layer_norm / rms_norm check it.
local function normalized_dims(op, x, normalized_shape)
  if type(normalized_shape) == "number" then normalized_shape = {normalized_shape} end
  if not accel.is_tensor(x) or type(normalized_shape) ~= "table" then return normalized_shape end
  local n, nd = #normalized_shape, x:dim()
  local ok = n >= 1 and n <= nd
  for i = 1, n do ok = ok and x:size(nd - n + i) == normalized_shape[i] end
  if not ok then
    raise("%s: Given normalized_shape=%s, expected input with shape [*, %s], but got input of size%s", op,
      shape_text(normalized_shape), table.concat(normalized_shape, ", "), shape_text(sizes(x)))
  end
  return normalized_shape
end

function F.layer_norm(x, normalized_shape, weight, bias, eps)
  if type(weight) == "table" and not accel.is_tensor(weight) then
    local o = check("layer_norm", weight, {"weight", "bias", "eps"})
    weight, bias, eps = o.weight, o.bias, o.eps
  end
  return C.layer_norm(x, normalized_dims("layer_norm", x, normalized_shape), weight, bias, eps or 1e-5)
end

-- torch.finfo(dtype).eps: rms_norm's default eps
local machine_eps = {float64 = 2.220446049250313e-16, float32 = 1.1920928955078125e-07}

-- As PyTorch's: a bf16 / fp16 input is normalized (and scaled by weight) in
-- float32, eps=nil meaning float32's epsilon, and rounded once to its dtype.
function F.rms_norm(x, normalized_shape, weight, eps)
  if type(weight) == "table" and not accel.is_tensor(weight) then
    local o = check("rms_norm", weight, {"weight", "eps"})
    weight, eps = o.weight, o.eps
  end
  normalized_shape = normalized_dims("rms_norm", x, normalized_shape)
  local dims = {}
  for i = 1, #normalized_shape do dims[i] = -i end
  local cx = x
  if x.dtype == accel.bfloat16 or x.dtype == accel.float16 then cx = x:float() end
  local ms = (cx * cx):mean(dims, {keepdim = true})
  local y = cx * (ms + (eps or machine_eps[cx.dtype.name] or machine_eps.float32)):rsqrt()
  if weight then y = y * weight end
  if y.dtype ~= x.dtype then y = y:to(x.dtype) end -- a float32 weight on a bf16 input: bf16 out, as torch's
  return y
end

function F.normalize(x, o)
  o = check("normalize", o, {"p", "dim", "eps"})
  local p, dim, eps = opt(o, "p", 2), opt(o, "dim", 2), opt(o, "eps", 1e-12)
  return x / x:norm(p, dim, {keepdim = true}):clamp(eps)
end

-- Can the fused kernel take q, k, v? 3-D or 4-D, equal batch dims, one
-- float dtype, cpu, at least one key.
local function fused_attention_ok(q, k, v)
  local nd = q:dim()
  if (nd ~= 3 and nd ~= 4) or k:dim() ~= nd or v:dim() ~= nd then return false end
  for d = 1, nd - 2 do
    if k:size(d) ~= q:size(d) or v:size(d) ~= q:size(d) then return false end
  end
  return q.dtype.is_floating_point and k.dtype == q.dtype and v.dtype == q.dtype and k:size(-2) > 0
    and q:size(-1) == k:size(-1) and v:size(-2) == k:size(-2)
    and k.device == q.device and v.device == q.device
end

-- An attention mask is bool (true = attend / masked, as the caller defines)
-- or floating point (added to the scores), as PyTorch requires: an integer
-- mask, easily made from Lua literals, is an error rather than added.
function F._check_mask(op, what, mask, query)
  if not accel.is_tensor(mask) then raise("%s: %s must be a tensor, got %s", op, what, type(mask)) end
  if mask.dtype ~= accel.bool and not mask.dtype.is_floating_point then
    raise("%s: %s is %s; only bool and floating-point masks are supported (query is %s)", op, what,
      tostring(mask.dtype), tostring(query.dtype))
  end
end

-- Causal or masked attention: softmax(q k^T * scale + mask) v over the last
-- two dims. Without attn_mask and dropout it runs the fused kernel
-- (accel._C.scaled_dot_product_attention: flash-style, the (L, S) scores are
-- never formed); otherwise the composite below.
function F.scaled_dot_product_attention(q, k, v, o)
  o = check("scaled_dot_product_attention", o, {"attn_mask", "dropout_p", "is_causal", "scale"})
  local scale = opt(o, "scale", nil) or 1 / math.sqrt(q:size(-1))
  local mask = opt(o, "attn_mask", nil)
  if mask ~= nil then
    if opt(o, "is_causal", false) then
      raise("scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    end
    F._check_mask("scaled_dot_product_attention", "attn_mask", mask, q)
  end
  if mask == nil and opt(o, "dropout_p", 0) == 0 and fused_attention_ok(q, k, v) then
    return C.scaled_dot_product_attention(q, k, v, scale, opt(o, "is_causal", false))
  end
  local scores = q:matmul(k:transpose(-2, -1)) * scale
  local L, S = q:size(-2), k:size(-2)
  if opt(o, "is_causal", false) then
    scores = scores:masked_fill(accel.ones(L, S, {dtype = accel.bool, device = q.device}):triu(1), -math.huge)
  end
  local dead -- query rows whose every key is masked out: output 0 there, as PyTorch 2.x (not NaN)
  if mask then
    if mask.dtype == accel.bool then scores = scores:masked_fill(mask:logical_not(), -math.huge)
    else scores = scores + mask end
    dead = scores:ne(-math.huge):sum(-1, true):eq(0)
    scores = scores:masked_fill(dead, 0) -- finite, so neither softmax nor its backward makes NaN
  end
  local attn = C.softmax(scores, -1, false)
  if dead then attn = attn:masked_fill(dead, 0) end
  local pdrop = opt(o, "dropout_p", 0)
  if pdrop > 0 then attn = C.dropout(attn, pdrop) end
  return attn:matmul(v)
end

-- ---- convolution and pooling (accel._C.conv2d / max_pool2d, conv_lua.c) ----

-- conv2d(input, weight, [bias], [{stride = 1, padding = 0, dilation = 1, groups = 1}])
-- input (N, C, H, W) or (C, H, W), weight (out, C / groups, kH, kW); stride,
-- padding, dilation: an integer or an {h, w} pair; padding also "same" /
-- "valid" or {top, bottom, left, right}.
function F.conv2d(input, weight, bias, o)
  if type(bias) == "table" and not accel.is_tensor(bias) then o, bias = bias, bias.bias end
  o = check("conv2d", o, {"bias", "stride", "padding", "dilation", "groups"})
  return C.conv2d(input, weight, bias, opt(o, "stride", 1), opt(o, "padding", 0), opt(o, "dilation", 1),
    opt(o, "groups", 1))
end

-- PyTorch's stride=None / stride=[] mean "the kernel size"
local function pool_stride(o)
  local s = opt(o, "stride", nil)
  if type(s) == "table" and #s == 0 then return nil end
  return s
end

-- max_pool2d(input, kernel_size, [{stride = kernel_size, padding = 0, dilation = 1,
--   ceil_mode = false, return_indices = false}]) -> values[, indices]
-- indices: int64 flat positions h * W + w within each input plane (0-based).
function F.max_pool2d(input, kernel_size, o)
  o = check("max_pool2d", o, {"stride", "padding", "dilation", "ceil_mode", "return_indices"})
  return C.max_pool2d(input, kernel_size, pool_stride(o), opt(o, "padding", 0), opt(o, "dilation", 1),
    opt(o, "ceil_mode", false), opt(o, "return_indices", false))
end

local function int_pair(v, name)
  if type(v) == "table" and #v == 2 then v = {v[1], v[2]} elseif type(v) == "number" then v = {v, v}
  else error(("avg_pool2d: %s must be an integer or a pair {h, w}, got %s"):format(name, tostring(v)), 3) end
  for i = 1, 2 do
    if type(v[i]) ~= "number" or v[i] ~= math.floor(v[i]) then
      error(("avg_pool2d: %s must be an integer or a pair {h, w}, got %s"):format(name, tostring(v[i])), 3)
    end
  end
  return v
end

-- Per output row (or column): the divisor of each window, as PyTorch's
-- avg_pool2d counts it (clipped to the padded input, or to the input).
local function avg_divisors(n_in, n_out, k, s, p, include_pad)
  local d = {}
  for i = 0, n_out - 1 do
    local lo = i * s - p
    local hi = math.min(lo + k, n_in + p)
    if include_pad then d[i + 1] = hi - lo
    else d[i + 1] = math.min(hi, n_in) - math.max(lo, 0) end
  end
  return d
end

-- avg_pool2d(input, kernel_size, [{stride = kernel_size, padding = 0, ceil_mode = false,
--   count_include_pad = true, divisor_override = nil}]): window sums by a
-- convolution with a ones kernel (outside autocast), divided as PyTorch divides.
function F.avg_pool2d(input, kernel_size, o)
  o = check("avg_pool2d", o, {"stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"})
  local k = int_pair(kernel_size, "kernel_size")
  local s = int_pair(pool_stride(o) or k, "stride")
  local p = int_pair(opt(o, "padding", 0), "padding")
  local ceil_mode, include_pad = opt(o, "ceil_mode", false), opt(o, "count_include_pad", true)
  local divisor = opt(o, "divisor_override", nil)
  if not accel.is_tensor(input) or (input:dim() ~= 3 and input:dim() ~= 4) then
    error("avg_pool2d: expected input of shape (N, C, H, W) or (C, H, W), got " ..
      (accel.is_tensor(input) and tostring(input.shape) or type(input)), 2)
  end
  for i = 1, 2 do
    if k[i] < 1 or s[i] < 1 or p[i] < 0 or p[i] > k[i] / 2 then
      error(("avg_pool2d: need kernel_size, stride >= 1 and 0 <= padding <= kernel_size / 2, got kernel_size " ..
        "{%d, %d}, stride {%d, %d}, padding {%d, %d}"):format(k[1], k[2], s[1], s[2], p[1], p[2]), 2)
    end
  end
  if divisor ~= nil and (type(divisor) ~= "number" or divisor == 0) then
    error("avg_pool2d: divisor_override must be a nonzero number, got " .. tostring(divisor), 2)
  end
  local shape = {}
  for d = 1, input:dim() do shape[d] = input:size(d) end
  local H, W = shape[#shape - 1], shape[#shape]
  local out, hi = {}, {}
  for i, n in ipairs({H, W}) do
    local span = n + 2 * p[i] - k[i]
    local m = (ceil_mode and math.ceil(span / s[i]) or math.floor(span / s[i])) + 1
    if ceil_mode and (m - 1) * s[i] >= n + p[i] then m = m - 1 end
    if span < 0 or m < 1 then
      error(("avg_pool2d: input %s is too small for kernel_size {%d, %d} with padding {%d, %d}"):format(
        tostring(input.shape), k[1], k[2], p[1], p[2]), 2)
    end
    out[i], hi[i] = m, math.max(0, (m - 1) * s[i] + k[i] - n - p[i])
  end
  local planes = input:reshape(-1, 1, H, W)
  local ones = accel.ones(1, 1, k[1], k[2], {dtype = input.dtype, device = input.device})
  local prev = C.set_autocast(nil)
  local ok, sums = pcall(C.conv2d, planes, ones, nil, s, {p[1], hi[1], p[2], hi[2]}, 1, 1)
  C.set_autocast(prev)
  if not ok then error(sums, 0) end
  if divisor then
    sums = sums / divisor
  else
    local on = {dtype = input.dtype, device = input.device}
    local dh = accel.tensor(avg_divisors(H, out[1], k[1], s[1], p[1], include_pad), on)
    local dw = accel.tensor(avg_divisors(W, out[2], k[2], s[2], p[2], include_pad), on)
    sums = sums / (dh:view(out[1], 1) * dw:view(1, out[2]))
  end
  shape[#shape - 1], shape[#shape] = out[1], out[2]
  return sums:reshape(shape)
end

return F
