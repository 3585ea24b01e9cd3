-- accel.nn.functional: PyTorch's torch.nn.functional names over the fused C
-- ops (accel._C) and tensor methods. Positional arguments as PyTorch takes
-- them; keyword arguments in one trailing options table.
local accel = require("accel")
local C = accel._C

local F = {}

local function opt(o, k, default)
  if o == nil or o[k] == nil then return default end
  return o[k]
end

function F.linear(x, weight, bias) return C.linear(x, weight, bias) end

function F.relu(x) return x:relu() end
function F.gelu(x, o) return x:gelu({approximate = opt(o, "approximate", "none")}) end
function F.silu(x) return x:silu() end
function F.sigmoid(x) return x:sigmoid() end
function F.tanh(x) return x:tanh() end
function F.leaky_relu(x, slope) return x:leaky_relu(type(slope) == "table" and opt(slope, "negative_slope", 0.01) or slope or 0.01) end

local function softmax_dim(x, dim, o)
  if type(dim) == "table" then o, dim = dim, dim.dim end
  if dim == nil then error("softmax: dim must be given (e.g. F.softmax(x, -1))", 3) end
  if o and o.dtype then x = x:to(o.dtype) end
  return x, dim
end

function F.softmax(x, dim, o)
  x, dim = softmax_dim(x, dim, o)
  return C.softmax(x, dim, false)
end

function F.log_softmax(x, dim, o)
  x, dim = softmax_dim(x, dim, o)
  return C.softmax(x, dim, true)
end

function F.cross_entropy(input, target, o)
  return C.cross_entropy(input, target, opt(o, "ignore_index", -100), opt(o, "label_smoothing", 0.0),
    opt(o, "reduction", "mean"))
end

local function reduce(t, reduction)
  if reduction == "mean" then return t:mean()
  elseif reduction == "sum" then return t:sum()
  elseif reduction == "none" then return t end
  error(("reduction must be \"mean\", \"sum\" or \"none\", got %q"):format(tostring(reduction)), 3)
end

function F.nll_loss(input, target, o)
  local ignore = opt(o, "ignore_index", -100)
  local safe = target:masked_fill(target:eq(ignore), 0)
  local picked
  if input:dim() == 1 then
    picked = -input:gather(1, safe:reshape(1))
  else
    picked = -input:gather(2, safe:unsqueeze(2)):squeeze(2)
  end
  local keep = target:ne(ignore)
  picked = picked:masked_fill(keep:logical_not(), 0)
  local reduction = opt(o, "reduction", "mean")
  if reduction == "mean" then return picked:sum() / keep:sum():item() end
  return reduce(picked, reduction)
end

function F.mse_loss(input, target, o)
  local d = input - target
  return reduce(d * d, opt(o, "reduction", "mean"))
end

function F.l1_loss(input, target, o)
  return reduce((input - target):abs(), opt(o, "reduction", "mean"))
end

-- max(x, 0) - x*t + log(1 + exp(-|x|)), stable for large |x|
function F.binary_cross_entropy_with_logits(input, target, o)
  local loss = input:relu() - input * target + (-input:abs()):exp():log1p()
  local pw = opt(o, "pos_weight", nil)
  if pw then
    local logsig = -((-input):relu() + (-input:abs()):exp():log1p())
    loss = (1 - target) * input - (target * (pw - 1) + 1) * logsig
  end
  local w = opt(o, "weight", nil)
  if w then loss = loss * w end
  return reduce(loss, opt(o, "reduction", "mean"))
end

function F.dropout(x, p, o)
  if type(p) == "table" then o, p = p, p.p end
  p = p or 0.5
  local training = opt(o, "training", true)
  if not training or p == 0 then return x end
  return C.dropout(x, p)
end

function F.embedding(input, weight) return C.embedding(weight, input) end

function F.layer_norm(x, normalized_shape, weight, bias, eps)
  if type(weight) == "table" and not accel.is_tensor(weight) then
    local o = weight
    weight, bias, eps = o.weight, o.bias, o.eps
  end
  if type(normalized_shape) == "number" then normalized_shape = {normalized_shape} end
  return C.layer_norm(x, normalized_shape, weight, bias, eps or 1e-5)
end

function F.rms_norm(x, normalized_shape, weight, eps)
  if type(normalized_shape) == "number" then normalized_shape = {normalized_shape} end
  local dims = {}
  for i = 1, #normalized_shape do dims[i] = -i end
  local ms = (x * x):mean(dims, {keepdim = true})
  local y = x * (ms + (eps or 1.1920928955078125e-07)):rsqrt()
  if weight then y = y * weight end
  return y
end

function F.normalize(x, o)
  local p, dim, eps = opt(o, "p", 2), opt(o, "dim", 2), opt(o, "eps", 1e-12)
  return x / x:norm(p, dim, {keepdim = true}):clamp(eps)
end

-- Causal or masked attention: softmax(q k^T * scale + mask) v over the last two dims.
function F.scaled_dot_product_attention(q, k, v, o)
  local scale = opt(o, "scale", 1 / math.sqrt(q:size(-1)))
  local scores = q:matmul(k:transpose(-2, -1)) * scale
  local L, S = q:size(-2), k:size(-2)
  if opt(o, "is_causal", false) then
    local mask = accel.ones(L, S, {dtype = accel.bool}):triu(1)
    scores = scores:masked_fill(mask, -math.huge)
  end
  local am = opt(o, "attn_mask", nil)
  if am then
    if am.dtype == accel.bool then scores = scores:masked_fill(am:logical_not(), -math.huge)
    else scores = scores + am end
  end
  local attn = C.softmax(scores, -1, false)
  local pdrop = opt(o, "dropout_p", 0)
  if pdrop > 0 then attn = C.dropout(attn, pdrop) end
  return attn:matmul(v)
end

return F
