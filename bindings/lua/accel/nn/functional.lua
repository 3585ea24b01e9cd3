-- accel.nn.functional: PyTorch's torch.nn.functional names over the fused C
-- ops (accel._C) and tensor methods. Positional arguments as PyTorch takes
-- them; keyword arguments in one trailing options table, whose keys each
-- function checks (check(name, o, keys): an unknown key is an error).
local accel = require("accel")
local check = require("accel.nn.module").check_options
local pooled_len = require("accel.nn.module").pooled_len
local int_list = require("accel.nn.module").int_list
local C = accel._C
local util = require("accel.util")
local compat = require("accel.compat")
local raise = util.raise

local F = {}

local function opt(o, k, default)
  if o == nil or o[k] == nil then return default end
  return o[k]
end

-- Refuses arguments past the at most n positional ones that op takes, as
-- PyTorch's TypeError (takes: the count as its message words it).
local function no_more(op, n, takes, ...)
  local extra = select("#", ...)
  if extra > 0 then
    raise("%s: takes %s positional argument%s but %d were given", op, takes, n == 1 and "" or "s", n + extra)
  end
end

local torch_args = util.torch_args

-- v when it is a tensor, else PyTorch's TypeError for op's argument name.
local function tensor_arg(op, name, v)
  if not accel.is_tensor(v) then raise("%s: argument '%s' must be a tensor, got %s", op, name, type(v)) end
  return v
end

-- A 1-D weight (in) maps (..., in) to (...), as PyTorch's (which takes no
-- bias with it).
function F.linear(x, weight, bias, ...)
  no_more("linear", 3, "from 2 to 3", ...)
  if accel.is_tensor(weight) and weight:dim() == 1 then
    if bias ~= nil then raise("linear: a 1-D weight takes no bias (PyTorch's linear refuses it too)") end
    return C.linear(x, weight:unsqueeze(1)):squeeze(-1)
  end
  return C.linear(x, weight, bias)
end

local INPLACE, LEAKY_KEYS = {"inplace"}, {"negative_slope", "inplace"}

-- PyTorch's trailing inplace flag: a boolean, or an options table of keys.
local function inplace_flag(op, o, keys)
  if type(o) == "boolean" then return o end
  return check(op, o, keys or INPLACE).inplace == true
end

-- relu / silu / leaky_relu with inplace = true write into x (its in-place
-- op, under the same autograd rules as PyTorch's) and return it.
function F.relu(x, o, ...)
  no_more("relu", 2, "from 1 to 2", ...)
  tensor_arg("relu", "input", x)
  if inplace_flag("relu", o) then return x:relu_() end
  return x:relu()
end
function F.gelu(x, o, ...)
  no_more("gelu", 2, "1 (and an options table)", ...)
  return tensor_arg("gelu", "input", x):gelu({approximate = check("gelu", o, {"approximate"}).approximate})
end
function F.silu(x, o, ...)
  no_more("silu", 2, "from 1 to 2", ...)
  tensor_arg("silu", "input", x)
  if inplace_flag("silu", o) then return x:silu_() end
  return x:silu()
end
function F.sigmoid(x, ...)
  no_more("sigmoid", 1, "1", ...)
  return tensor_arg("sigmoid", "input", x):sigmoid()
end
function F.tanh(x, ...)
  no_more("tanh", 1, "1", ...)
  return tensor_arg("tanh", "input", x):tanh()
end
-- leaky_relu(x, [negative_slope = 0.01], [inplace | {inplace =}]) or leaky_relu(x, {negative_slope =, inplace =})
function F.leaky_relu(x, slope, o, ...)
  no_more("leaky_relu", 3, "from 1 to 3", ...)
  tensor_arg("leaky_relu", "input", x)
  local keys
  if type(slope) == "table" then
    if o ~= nil then raise("leaky_relu: an argument (%s) after the options table", tostring(o)) end
    o, slope, keys = slope, slope.negative_slope, LEAKY_KEYS
  end
  slope = slope or 0.01
  if inplace_flag("leaky_relu", o, keys) then return x:leaky_relu_(slope) end
  return x:leaky_relu(slope)
end

-- softplus(x, [beta = 1], [threshold = 20]): log(1 + exp(beta x)) / beta,
-- x itself where beta x > threshold; a half dtype computes in float32, as
-- torch's (exp(12) is past float16's range)
function F.softplus(x, ...)
  local a = torch_args("softplus", {"beta:number", "threshold:number"}, ...)
  tensor_arg("softplus", "input", x)
  local beta, threshold = a.beta or 1, a.threshold or 20
  local half = x.dtype == accel.float16 or x.dtype == accel.bfloat16
  local cx = half and x:float() or x
  local bx = beta == 1 and cx or cx * beta
  -- the unused side kept finite (0 above threshold); NaN passes, with a NaN gradient as PyTorch's
  local soft = accel.where(bx:gt(threshold), 0, bx):exp():log1p()
  local y = accel.where(bx:gt(threshold), cx, beta == 1 and soft or soft / beta)
  return half and y:to(x.dtype) or y
end

-- elu(x, [alpha = 1], [inplace = false]): x where x > 0, else alpha (exp(x) - 1)
function F.elu(x, ...)
  local a = torch_args("elu", {"alpha:number", "inplace:bool"}, ...)
  tensor_arg("elu", "input", x)
  local y = accel.where(x:gt(0), x, x:clamp(nil, 1):exp():sub(1) * (a.alpha or 1)) -- (clamp: finite unused side)
  return a.inplace and x:copy_(y) or y
end

-- logsigmoid(x) = -softplus(-x), stable for large |x|
function F.logsigmoid(x, ...)
  no_more("logsigmoid", 1, "1", ...)
  tensor_arg("logsigmoid", "input", x)
  -- x - log(1 + e^x) below 0, -log(1 + e^-x) from 0 (clamps keep the unused side finite)
  return accel.where(x:lt(0), x - x:clamp(nil, 1):exp():log1p(), -(-x:clamp(-1, nil)):exp():log1p())
end

-- one_hot(ids, [num_classes = -1]): int64 (..., num_classes) with a 1 at
-- each id (0-based); -1 takes the largest id + 1
function F.one_hot(ids, num_classes, ...)
  no_more("one_hot", 2, "from 1 to 2", ...)
  tensor_arg("one_hot", "input", ids)
  if ids.dtype ~= accel.int64 then raise("one_hot: is only applicable to index tensor of type LongTensor (int64), got %s", ids.dtype.name) end
  local n = num_classes or -1
  if type(n) ~= "number" or n ~= math.floor(n) or n < -1 then
    raise("one_hot: num_classes must be a non-negative integer or -1, got %s", util.show(num_classes))
  end
  if ids:numel() > 0 then
    if ids:min():item() < 0 then raise("one_hot: Class values must be non-negative.") end
    local top = ids:max():item()
    if n == -1 then n = top + 1 elseif top >= n then raise("one_hot: Class values must be smaller than num_classes.") end
  elseif n == -1 then
    raise("one_hot: Can not infer total number of classes from empty tensor.")
  end
  return ids:unsqueeze(-1):eq(accel.arange(n, {device = ids.device})):long()
end

-- Source position (0-based) of output position i (0-based, i < 0 or
-- i >= n: the padding) along a dim of size n, per non-constant pad mode.
local PAD_SOURCE = {
  reflect = function(i, n)
    if i < 0 then return -i end
    if i >= n then return 2 * (n - 1) - i end
    return i
  end,
  replicate = function(i, n) return math.max(0, math.min(n - 1, i)) end,
  circular = function(i, n) return i % n end,
}

-- The amounts a non-constant mode can take along a dim of size n.
local function check_pad_amount(mode, amount, n, d)
  if amount < 0 then raise("pad: mode '%s' takes no negative padding, got %d at dim %d", mode, amount, d) end
  if mode == "reflect" and amount >= n then
    raise("pad: Padding size should be less than the corresponding input dimension, but got: padding %d at dim %d "
      .. "of size %d", amount, d, n)
  end
  if mode == "circular" and amount > n then
    raise("pad: Padding value causes wrapping around more than once (padding %d at dim %d of size %d)", amount, d, n)
  end
end

-- x padded along its last #pad / 2 dims by reflection, repetition of the
-- edge or wrapping around: one index_select per dim (so the gradient of a
-- source element sums over the places it was copied to).
local function pad_by_index(x, pad, mode)
  local k = #pad / 2
  if x:dim() ~= k + 1 and x:dim() ~= k + 2 then
    raise("pad: mode '%s' with %d padded dims expects a %dD or %dD (batched) input, got %dD", mode, k, k + 1, k + 2,
      x:dim())
  end
  local y = x
  for j = 1, k do
    local d, before, after, n = x:dim() - j + 1, pad[2 * j - 1], pad[2 * j], x:size(x:dim() - j + 1)
    check_pad_amount(mode, before, n, d)
    check_pad_amount(mode, after, n, d)
    local idx = {}
    for i = 1, n + before + after do idx[i] = PAD_SOURCE[mode](i - 1 - before, n) end
    y = y:index_select(d, accel.tensor(idx, {dtype = accel.int64, device = x.device}))
  end
  return y
end

-- pad(x, pad, [mode = "constant"], [value = 0]): pad = {left, right, top,
-- bottom, ...} from the last dim backwards. "constant" fills with value (a
-- negative amount crops); "reflect", "replicate" and "circular" pad the last
-- 1-3 dims of a batched or unbatched input, as PyTorch's.
function F.pad(x, pad, ...)
  local a = torch_args("pad", {"mode:string", "value:number"}, ...)
  tensor_arg("pad", "input", x)
  local mode = a.mode or "constant"
  if mode ~= "constant" and not PAD_SOURCE[mode] then
    raise("pad: Unrecognised padding mode %s (constant, reflect, replicate or circular)", mode)
  end
  if type(pad) ~= "table" or #pad % 2 ~= 0 then raise("pad: Padding length must be divisible by 2") end
  if #pad / 2 > x:dim() then raise("pad: Padding length should be less than or equal to two times the input dimension") end
  if mode ~= "constant" then
    if a.value ~= nil and a.value ~= 0 then raise('pad: Padding mode "%s" doesn\'t take in value argument', mode) end
    if #pad == 0 or #pad > 6 then raise("pad: mode '%s' pads 1, 2 or 3 dims, got %d amounts", mode, #pad) end
    -- torch's autocast float32 list (CPU) has replication_pad1d-3d and reflection_pad1d / 2d
    if mode == "replicate" or (mode == "reflect" and #pad <= 4) then x = require("accel.amp").fp32_input(x) end
    return pad_by_index(x, pad, mode)
  end
  local y = x
  for i = 1, #pad, 2 do
    local d, before, after = x:dim() - math.floor(i / 2), pad[i], pad[i + 1]
    for side, amount in ipairs({before, after}) do
      if amount < 0 then
        local n = y:size(d)
        if -amount > n then raise("pad: padding %d crops more than dim %d's size %d", amount, d, n) end
        y = side == 1 and y:narrow(d, 1 - amount, n + amount) or y:narrow(d, 1, n + amount)
      elseif amount > 0 then
        local shape = {}
        for k = 1, y:dim() do shape[k] = y:size(k) end
        shape[d] = amount
        local fill = accel.full(shape, a.value or 0, {dtype = y.dtype, device = y.device})
        y = accel.cat(side == 1 and {fill, y} or {y, fill}, d)
      end
    end
  end
  return y
end

-- cosine_similarity(x1, x2, [dim = 2], [eps = 1e-8]): along dim (PyTorch's
-- dim=1), each vector divided by max(its norm, eps) first, as PyTorch's
function F.cosine_similarity(x1, x2, ...)
  local a = torch_args("cosine_similarity", {"dim:int", "eps:number"}, ...)
  tensor_arg("cosine_similarity", "x1", x1)
  tensor_arg("cosine_similarity", "x2", x2)
  local dim, eps = a.dim or 2, a.eps or 1e-8
  -- broadcast first (as PyTorch): dim counts in the broadcast shape, and a
  -- vector repeated along dim has the norm of the repeats
  while x1:dim() < x2:dim() do x1 = x1:unsqueeze(1) end
  while x2:dim() < x1:dim() do x2 = x2:unsqueeze(1) end
  local shape = {}
  for i = 1, x1:dim() do shape[i] = x1:size(i) == 1 and x2:size(i) or x1:size(i) end
  x1, x2 = x1:broadcast_to(shape), x2:broadcast_to(shape)
  local n1 = x1:norm(2, dim, {keepdim = true}):clamp(eps)
  local n2 = x2:norm(2, dim, {keepdim = true}):clamp(eps)
  return ((x1 / n1) * (x2 / n2)):sum(dim)
end

-- PyTorch's third positional argument is _stacklevel, so F.softmax(x, 1,
-- torch.float64) computes in float32 there: a dtype in that place is refused
-- here, naming the option that takes it.
local function softmax_dim(name, x, dim, o)
  tensor_arg(name, "input", x)
  if type(o) == "table" and rawget(o, "__dtype") ~= nil then
    raise("%s: pass the dtype as an option, F.%s(x, dim, {dtype = accel.%s}) (PyTorch's third positional argument is "
      .. "_stacklevel, not dtype)", name, name, o.name)
  end
  if type(dim) == "table" then o, dim = check(name, dim, {"dim", "dtype"}), dim.dim
  else o = check(name, o, {"dtype"}) end
  if dim == nil then raise("%s: dim must be given (e.g. F.%s(x, -1))", name, name) end
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

-- Under autocast, the losses below run in float32, as on PyTorch's autocast
-- float32 list (a bf16 / fp16 input is widened first; outside autocast a
-- half input keeps its dtype, as in PyTorch).
local fp32_in_autocast = function(t) return require("accel.amp").fp32_input(t) end

-- The loss is computed in float32; outside autocast a bf16 / fp16 input gets
-- its loss back in its own dtype, as PyTorch's (inside autocast, float32).
-- A floating-point target holds class probabilities, any other class ids.

-- the class dim of a class-target loss's input: 1 for (C), else 2
local function class_dim(input) return input:dim() == 1 and 1 or 2 end

-- PyTorch's per-class weight of cross_entropy / nll_loss, checked against
-- input: a 1-D tensor of one weight per class, in input's dtype (under
-- autocast both are float32); nil when not given
local function class_weight(op, input, w)
  if w == nil then return nil end
  if not accel.is_tensor(w) then raise("%s: weight must be a tensor, got %s", op, util.show(w)) end
  w = fp32_in_autocast(w)
  local classes = input:dim() == 0 and 0 or input:size(class_dim(input))
  if w:dim() ~= 1 or w:size(1) ~= classes then
    raise("%s: weight tensor should be defined either for all %d classes or no classes but got weight tensor of shape: %s",
      op, classes, util.shape_str(w))
  end
  if w.dtype ~= input.dtype then
    raise("%s: weight must have the input's dtype (%s), got %s", op, input.dtype.name, w.dtype.name)
  end
  return w
end

-- w shaped to broadcast over input's class dim: (1, C, 1, ...)
local function weight_view(w, input)
  if input:dim() == 1 then return w end
  local shape = {1, w:size(1)}
  for d = 3, input:dim() do shape[d] = 1 end
  return w:reshape(shape)
end

-- ignore_index and label_smoothing of the class-target losses (nil: their
-- defaults), checked as PyTorch's argument parser does: an integer; a
-- number in [0, 1].
function F._ignore_index(op, v)
  if v == nil then return -100 end
  if type(v) ~= "number" or v ~= math.floor(v) or v == math.huge or v == -math.huge then
    raise("%s: ignore_index must be an integer, got %s", op, util.show(v))
  end
  return v
end

function F._label_smoothing(op, v)
  if v == nil then return 0.0 end
  if type(v) ~= "number" then raise("%s: label_smoothing must be a number, got %s", op, util.show(v)) end
  if not (v >= 0 and v <= 1) then raise("%s: label_smoothing must be between 0.0 and 1.0, got %s", op, util.show(v)) end
  return v
end

-- t with PyTorch's node name for the op the user called as its grad_fn's
-- name (printing shows it: tensor(2.30, grad_fn=<NllLossBackward0>)); the
-- composite's last node keeps its function
local function node_named(t, name)
  if t.grad_fn ~= nil then C.name_grad_fn(t, name) end
  return t
end

-- PyTorch's node of a class-target loss over input: NllLoss (NllLoss2D
-- above 2 dims), or Add when label smoothing mixes in the uniform term
local function nll_node(input, smoothing)
  if smoothing > 0 then return "AddBackward0" end
  return input:dim() > 2 and "NllLoss2DBackward0" or "NllLossBackward0"
end

-- PyTorch's third positional argument of the weighted losses is weight:
-- (input, target, w, [options]) is (input, target, options with weight = w).
local function with_weight(op, w, opts, ...)
  no_more(op, 4, "from 2 to 4", ...)
  local o = {}
  if opts ~= nil then
    if not util.is_options(opts) then raise("%s: options must be a table, got %s", op, type(opts)) end
    for k, v in pairs(opts) do o[k] = v end
  end
  if o.weight ~= nil then raise("%s: got multiple values for argument 'weight'", op) end
  o.weight = w
  return o
end

function F.cross_entropy(input, target, o, ...)
  if accel.is_tensor(o) then return F.cross_entropy(input, target, with_weight("cross_entropy", o, ...)) end
  no_more("cross_entropy", 3, "from 2 to 3", ...) -- options in one table (PyTorch's positional layout is not read)
  tensor_arg("cross_entropy", "input", input)
  tensor_arg("cross_entropy", "target", target)
  o = check("cross_entropy", o, {"weight", "ignore_index", "label_smoothing", "reduction"})
  local ignore = F._ignore_index("cross_entropy", o.ignore_index)
  local smoothing = F._label_smoothing("cross_entropy", o.label_smoothing)
  local reduction = F._reduction("cross_entropy", o.reduction)
  if accel.is_tensor(target) and target.dtype.is_floating_point then
    if ignore >= 0 then raise("cross_entropy: ignore_index is not supported for floating point target") end
  else
    check_class_target("cross_entropy", target)
  end
  input, target = fp32_in_autocast(input), fp32_in_autocast(target)
  local weight = class_weight("cross_entropy", input, o.weight)
  if weight ~= nil then return F._weighted_cross_entropy(input, target, weight, ignore, smoothing, reduction) end
  local loss = C.cross_entropy(input, target, ignore, smoothing, reduction)
  local half = input.dtype == accel.bfloat16 or input.dtype == accel.float16 -- only outside autocast
  if half then loss = loss:to(input.dtype) end
  return target.dtype.is_floating_point and loss or node_named(loss, nll_node(input, smoothing))
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
F._reduce = reduce -- (for the losses in other files)

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
-- (A uint8 target, which torch takes here, gathers as int64.)
local function pick_classes(input, safe)
  local cdim = input:dim() == 1 and 1 or 2
  local ok, picked = pcall(input.gather, input, cdim, safe:to(accel.int64):unsqueeze(cdim))
  if ok then return -picked:squeeze(cdim) end
  for _, v in ipairs(safe:reshape(-1):tolist()) do
    if v < 0 or v >= input:size(cdim) then raise("nll_loss: Target %d is out of bounds.", v) end
  end
  error(picked, 0)
end

-- The negative log-likelihood of the class ids target under the
-- log-probabilities input (ids equal to ignore count nothing), each scaled
-- by its class's weight in w (nil: 1); and the divisor of "mean": the
-- summed weight (or the number) of the counted ids
local function nll(input, target, w, ignore, reduction)
  if input:dim() == 1 then target = target:reshape({}) end
  local ignored = target:eq(ignore)
  local safe = target:masked_fill(ignored, 0)
  local picked = pick_classes(input, safe):masked_fill(ignored, 0)
  local total
  if w == nil then
    total = target:numel() - ignored:sum():item()
  else
    local picked_w = w:index_select(1, safe:reshape({-1}):to(accel.int64)):reshape(safe.shape):masked_fill(ignored, 0)
    picked, total = picked * picked_w, picked_w:sum()
  end
  if reduction == "mean" then return picked:sum() / total, total end
  return reduce("nll_loss", picked, reduction), total
end

function F.nll_loss(input, target, o, ...)
  if accel.is_tensor(o) then return F.nll_loss(input, target, with_weight("nll_loss", o, ...)) end
  no_more("nll_loss", 3, "from 2 to 3", ...) -- options in one table (PyTorch's positional layout is not read)
  tensor_arg("nll_loss", "input", input)
  tensor_arg("nll_loss", "target", target)
  o = check("nll_loss", o, {"weight", "ignore_index", "reduction"})
  local reduction = F._reduction("nll_loss", o.reduction)
  check_class_target("nll_loss", target)
  input = fp32_in_autocast(input)
  check_nll_shapes(input, target)
  local weight = class_weight("nll_loss", input, o.weight)
  return node_named(nll(input, target, weight, F._ignore_index("nll_loss", o.ignore_index), reduction), nll_node(input, 0))
end

-- The class-target cross entropy with a per-class weight w (class ids or
-- probabilities), as PyTorch composes it: log_softmax, then the weighted
-- nll_loss; label smoothing mixes in -sum(w * log p) / C per sample
-- (normalised by the picked weights under "mean"); a probability target is
-- smoothed towards uniform and its "mean" divides by the sample count.
function F._weighted_cross_entropy(input, target, w, ignore, smoothing, reduction)
  local half = input.dtype == accel.bfloat16 or input.dtype == accel.float16 -- (only outside autocast)
  local x = half and input:float() or input
  local wv = weight_view(half and w:float() or w, x)
  local cdim, classes = class_dim(x), x:size(class_dim(x))
  local logp = x:log_softmax(cdim)
  local loss
  if target.dtype.is_floating_point then
    if util.shape_str(target) ~= util.shape_str(x) then
      raise("cross_entropy: a probability target must have the input's shape %s, got %s", util.shape_str(x),
        util.shape_str(target))
    end
    local probs = smoothing > 0 and target * (1 - smoothing) + smoothing / classes or target
    local per = -(logp * probs:to(x.dtype) * wv):sum(cdim)
    loss = reduction == "mean" and per:sum() / (x:numel() / classes) or reduce("cross_entropy", per, reduction)
  else
    check_class_target("cross_entropy", target)
    check_nll_shapes(x, target)
    local picked_weight
    loss, picked_weight = nll(logp, target, wv:reshape({-1}), ignore, reduction)
    if smoothing > 0 then
      local ignored = (x:dim() == 1 and target:reshape({}) or target):eq(ignore)
      local smooth = -(logp * wv):sum(cdim):masked_fill(ignored, 0)
      smooth = reduction == "mean" and smooth:sum() / picked_weight or reduce("cross_entropy", smooth, reduction)
      loss = loss * (1 - smoothing) + smooth * (smoothing / classes)
    end
    loss = node_named(loss, nll_node(x, smoothing))
  end
  return half and loss:to(input.dtype) or loss
end

-- A target of another shape than the input broadcasts ((N, 1) against (N)
-- gives an (N, N) loss): PyTorch's warning, once per loss and process.
local warned_shapes = {}
local function warn_target_shape(op, input, target)
  if warned_shapes[op] or not accel.is_tensor(target) or input.shape == target.shape then return end
  warned_shapes[op] = true
  io.stderr:write(("accel-lua: warning: %s: Using a target size (%s) that is different to the input size (%s). "
    .. "This will likely lead to incorrect results due to broadcasting. Please ensure they have the same size.\n")
    :format(op, shape_text(target.shape), shape_text(input.shape)))
end

-- The checked arguments of an element-wise loss op(input, target, [o]):
-- input and target (float32 under autocast) and the options (keys).
local function pointwise_loss_args(op, keys, input, target, o, ...)
  no_more(op, 3, "from 2 to 3", ...) -- options in one table (PyTorch's positional layout is not read)
  tensor_arg(op, "input", input)
  tensor_arg(op, "target", target)
  o = check(op, o, keys)
  warn_target_shape(op, input, target)
  return fp32_in_autocast(input), fp32_in_autocast(target), o
end

local REDUCTION = {"reduction"}

function F.mse_loss(...)
  local x, t, o = pointwise_loss_args("mse_loss", REDUCTION, ...)
  local d = x - t
  return node_named(reduce("mse_loss", d * d, o.reduction), "MseLossBackward0")
end

function F.l1_loss(...)
  local x, t, o = pointwise_loss_args("l1_loss", REDUCTION, ...)
  return reduce("l1_loss", (x - t):abs(), o.reduction)
end

-- a non-negative number option k of op (default when nil)
local function nonnegative(op, o, k, default)
  local v = o[k]
  if v == nil then return default end
  if type(v) ~= "number" or v < 0 then raise("%s: %s must be a non-negative number, got %s", op, k, util.show(v)) end
  return v
end

-- smooth_l1_loss(input, target, [{reduction = "mean", beta = 1}]):
-- 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta 0: l1)
function F.smooth_l1_loss(...)
  local x, t, o = pointwise_loss_args("smooth_l1_loss", {"reduction", "beta"}, ...)
  local beta = nonnegative("smooth_l1_loss", o, "beta", 1.0)
  local d = (x - t):abs()
  local loss = beta == 0 and d or accel.where(d:lt(beta), d * d * (0.5 / beta), d - 0.5 * beta)
  return node_named(reduce("smooth_l1_loss", loss, o.reduction), "SmoothL1LossBackward0")
end

-- huber_loss(input, target, [{reduction = "mean", delta = 1}]): 0.5 d^2
-- where |d| <= delta, else delta (|d| - 0.5 delta)
function F.huber_loss(...)
  local x, t, o = pointwise_loss_args("huber_loss", {"reduction", "delta"}, ...)
  local delta = nonnegative("huber_loss", o, "delta", 1.0)
  if delta == 0 then raise("huber_loss: huber_loss does not support non-positive values for delta") end
  local d = (x - t):abs()
  return node_named(reduce("huber_loss", accel.where(d:le(delta), d * d * 0.5, (d - 0.5 * delta) * delta),
    o.reduction), "HuberLossBackward0")
end

-- The tensor t (op's argument what) broadcasts to the shape of like (named
-- whose) without growing it, as PyTorch requires of a loss weight (the loss
-- keeps the input's shape) or an attention mask.
local function check_broadcasts_to(op, what, t, like, whose)
  if not accel.is_tensor(t) then return end
  local nd, td = like:dim(), t:dim()
  local ok = td <= nd
  for i = 1, math.min(nd, td) do
    local n = t:size(td - i + 1)
    ok = ok and (n == 1 or n == like:size(nd - i + 1))
  end
  if not ok then
    raise("%s: %s of shape %s does not broadcast to %s shape %s", op, what, shape_text(sizes(t)), whose,
      shape_text(sizes(like)))
  end
end

-- -(t log x + (1 - t) log(1 - x)), each log at least -100, with PyTorch's
-- gradients: (x - t) / max(x (1 - x), 1e-12) for x (finite where x is 0
-- or 1, as a saturated sigmoid gives; 1e-12 rounded to float32, PyTorch's
-- EPSILON) and log(1 - x) - log(x) for t.
local BCE_EPSILON = 9.999999960041972e-13
local BinaryCrossEntropy = require("accel.autograd").Function{
  name = "BinaryCrossEntropy",
  forward = function(ctx, x, t)
    ctx:save_for_backward(x, t)
    return -(t * x:log():clamp(-100) + (1 - t) * (-x):log1p():clamp(-100))
  end,
  backward = function(ctx, g)
    local x, t = ctx.saved_tensors[1], ctx.saved_tensors[2]
    local gx = ctx.needs_input_grad[1] and g * (x - t) / (x * (1 - x)):clamp(BCE_EPSILON) or nil
    local gt = ctx.needs_input_grad[2] and g * ((-x):log1p() - x:log()) or nil
    return gx, gt
  end,
}

-- binary_cross_entropy(input, target, [{weight =, reduction = "mean"}]) of
-- probabilities in [0, 1]: -(t log x + (1 - t) log(1 - x)), each log
-- clamped at -100, as PyTorch's
function F.binary_cross_entropy(input, target, ...)
  if accel.is_tensor((...)) then
    return F.binary_cross_entropy(input, target, with_weight("binary_cross_entropy", ...))
  end
  if accel.is_tensor(input) and accel.is_tensor(target) and input.shape ~= target.shape then
    raise("binary_cross_entropy: Using a target size (%s) that is different to the input size (%s) is deprecated. "
      .. "Please ensure they have the same size.", shape_text(sizes(target)), shape_text(sizes(input)))
  end
  local x, t, o = pointwise_loss_args("binary_cross_entropy", {"weight", "reduction"}, input, target, ...)
  if not t.dtype.is_floating_point then -- (PyTorch's words)
    raise("binary_cross_entropy: Found dtype %s but expected a floating point target (the input's, %s)",
      t.dtype.name, x.dtype.name)
  end
  local outside = x:lt(0):logical_or(x:gt(1)):logical_or(x:isnan()):any():item()
  if outside then raise("binary_cross_entropy: all elements of input should be between 0 and 1") end
  local loss = BinaryCrossEntropy(x, t)
  if o.weight ~= nil then
    check_broadcasts_to("binary_cross_entropy", "weight", tensor_arg("binary_cross_entropy", "weight", o.weight), x,
      "the input's")
    loss = loss * o.weight
  end
  return node_named(reduce("binary_cross_entropy", loss, o.reduction), "BinaryCrossEntropyBackward0")
end

-- kl_div(input, target, [{reduction = "mean", log_target = false}]) of
-- log-probabilities input: target (log target - input), 0 where target is
-- 0; reduction "batchmean" divides the sum by the batch size (dim 1)
function F.kl_div(...)
  local x, t, o = pointwise_loss_args("kl_div", {"reduction", "log_target"}, ...)
  if o.reduction ~= nil and o.reduction ~= "batchmean" and o.reduction ~= "mean" and o.reduction ~= "sum"
    and o.reduction ~= "none" then
    raise('kl_div: reduction must be "mean", "batchmean", "sum" or "none", got %s', util.show(o.reduction))
  end
  if o.log_target ~= nil and type(o.log_target) ~= "boolean" then
    raise("kl_div: log_target must be a boolean, got %s", util.show(o.log_target))
  end
  local loss
  if o.log_target then loss = t:exp() * (t - x)
  else loss = accel.where(t:eq(0), 0, t * t:log()) - t * x end -- xlogy(t, t) - t x
  if o.reduction == "batchmean" then return loss:sum() / (x:dim() > 0 and x:size(1) or 1) end
  return reduce("kl_div", loss, o.reduction)
end


-- max(x, 0) - x*t + log(1 + exp(-|x|)), stable for large |x|
function F.binary_cross_entropy_with_logits(input, target, o, ...)
  local op = "binary_cross_entropy_with_logits"
  if accel.is_tensor(o) then return F.binary_cross_entropy_with_logits(input, target, with_weight(op, o, ...)) end
  no_more(op, 3, "from 2 to 3", ...) -- options in one table (PyTorch's positional layout is not read)
  tensor_arg(op, "input", input)
  tensor_arg(op, "target", target)
  o = check(op, o, {"weight", "pos_weight", "reduction"})
  if not target.dtype.is_floating_point then
    raise("%s: result type %s can't be cast to the target's dtype %s: the target must be floating point (:float())", op,
      input.dtype.name, target.dtype.name)
  end
  if accel.is_tensor(input) and accel.is_tensor(target) then
    if input.shape ~= target.shape then
      raise("%s: Target size (%s) must be the same as input size (%s)", op, tostring(target:size()), tostring(input:size()))
    end
    check_broadcasts_to(op, "weight", o.weight, input, "the input's")
    check_broadcasts_to(op, "pos_weight", o.pos_weight, input, "the input's")
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
  return node_named(reduce(op, loss, o.reduction), "BinaryCrossEntropyWithLogitsBackward0")
end

-- p (nil: 0.5) checked for op (also by nn.Dropout), training or not, as PyTorch's
function F._dropout_p(op, p)
  if p == nil then return 0.5 end
  if type(p) ~= "number" or p < 0 or p > 1 then
    raise("%s: dropout probability has to be between 0 and 1, but got %s", op, tostring(p))
  end
  return p
end

-- dropout(x, [p = 0.5], [training = true], [inplace = false]), or those in
-- a trailing options table; inplace writes the result into x (as
-- nn.Dropout's) and returns x.
-- The arguments of op(x, [p], [training], [inplace]) checked: p and the options.
local function dropout_args(op, x, ...)
  local a = torch_args(op, {"p", "training:bool", "inplace:bool"}, ...)
  tensor_arg(op, "input", x)
  return F._dropout_p(op, a.p), a
end

function F.dropout(x, ...)
  local p, a = dropout_args("dropout", x, ...)
  if a.training == false or p == 0 then return x end
  local y = C.dropout(x, p)
  return a.inplace and x:copy_(y) or y
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
function F.embedding(input, weight, ...)
  -- PyTorch's positional order; the renorming and sparse options are refused, never dropped
  local a = torch_args("embedding", {"padding_idx:int", "max_norm:number", "norm_type:number",
    "scale_grad_by_freq:bool", "sparse:bool"}, ...)
  if a.max_norm ~= nil then raise("embedding: max_norm is not supported (the weight is not renormalised)") end
  if a.scale_grad_by_freq then raise("embedding: scale_grad_by_freq = true is not supported") end
  if a.sparse then raise("embedding: sparse = true is not supported (gradients are dense)") end
  local out = C.embedding(weight, input)
  local pad = F._padding_index("embedding", weight:size(1), a.padding_idx)
  if pad ~= nil and weight.requires_grad then
    local hit = input:eq(pad):unsqueeze(-1)
    out = out:masked_fill(hit, 0) + hit * weight[pad + 1]:detach()
  end
  return node_named(out, "EmbeddingBackward0")
end

-- normalized_shape (an integer or a list) as a list, checked against x's
-- trailing dims as PyTorch's layer_norm / rms_norm check it.
local function normalized_dims(op, x, normalized_shape)
  tensor_arg(op, "input", x)
  if type(normalized_shape) == "number" then normalized_shape = {normalized_shape} end
  if type(normalized_shape) ~= "table" then
    raise("%s: normalized_shape must be an integer or a list of integers, got %s", op, type(normalized_shape))
  end
  for i, n in ipairs(normalized_shape) do
    if type(n) ~= "number" then raise("%s: normalized_shape[%d] must be an integer, got %s", op, i, type(n)) end
  end
  local n, nd = #normalized_shape, x:dim()
  local ok = n >= 1 and n <= nd
  for i = 1, n do ok = ok and x:size(nd - n + i) == normalized_shape[i] end
  if not ok then
    raise("%s: Given normalized_shape=%s, expected input with shape [*, %s], but got input of size%s", op,
      shape_text(normalized_shape), table.concat(normalized_shape, ", "), shape_text(sizes(x)))
  end
  return normalized_shape
end

-- layer_norm / rms_norm's weight and bias: exactly normalized_shape, as
-- PyTorch checks them.
local function check_affine(op, what, t, dims)
  if not accel.is_tensor(t) or type(dims) ~= "table" then return end
  local ok = t:dim() == #dims
  for i = 1, #dims do ok = ok and t:size(i) == dims[i] end
  if not ok then
    raise("%s: Expected %s to be of same shape as normalized_shape, but got %s of shape %s and normalized_shape = %s",
      op, what, what, shape_text(sizes(t)), shape_text(dims))
  end
end

-- torch's eps: a number
local function check_eps(op, eps)
  if eps ~= nil and type(eps) ~= "number" then raise("%s: eps must be a number, got %s", op, util.show(eps)) end
  return eps
end

-- layer_norm(x, normalized_shape, [weight], [bias], [eps = 1e-5]), the last
-- three also by name in a trailing options table
function F.layer_norm(x, normalized_shape, ...)
  local a = torch_args("layer_norm", {"weight", "bias", "eps"}, ...)
  local weight, bias, eps = a.weight, a.bias, check_eps("layer_norm", a.eps)
  local dims = normalized_dims("layer_norm", x, normalized_shape)
  check_affine("layer_norm", "weight", weight, dims)
  check_affine("layer_norm", "bias", bias, dims)
  return C.layer_norm(x, dims, weight, bias, eps or 1e-5)
end

-- torch.finfo(dtype).eps: rms_norm's default eps
local machine_eps = {float64 = 2.220446049250313e-16, float32 = 1.1920928955078125e-07}

-- As PyTorch's: a bf16 / fp16 input is normalized (and scaled by weight) in
-- float32, eps=nil meaning float32's epsilon, and rounded once to its dtype.
function F.rms_norm(x, normalized_shape, ...)
  local a = torch_args("rms_norm", {"weight", "eps"}, ...)
  local weight, eps = a.weight, check_eps("rms_norm", a.eps)
  normalized_shape = normalized_dims("rms_norm", x, normalized_shape)
  check_affine("rms_norm", "weight", weight, normalized_shape)
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

-- normalize(x, [p = 2], [dim = 2], [eps = 1e-12]), also by name in a
-- trailing options table (dim is 1-based: PyTorch's default dim=1 is 2)
function F.normalize(x, ...)
  tensor_arg("normalize", "input", x)
  local o = torch_args("normalize", {"p:number", "dim:int|table", "eps:number"}, ...)
  local p, dim, eps = opt(o, "p", 2), opt(o, "dim", 2), check_eps("normalize", opt(o, "eps", 1e-12))
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

-- enable_gqa (grouped-query attention, as torch's): key / value t with
-- fewer heads (dim -3) than the query, each head repeated for its group of
-- query heads (torch's repeat_interleave), so q heads h*g .. h*g + g - 1 use
-- kv head h. (..., Hkv, S, E) -> (..., Hq, S, E)
local function gqa_heads(q, t)
  if q:dim() < 3 or t:dim() < 3 then return t end
  local hq, hkv = q:size(-3), t:size(-3)
  if hq == hkv then return t end
  if hq % hkv ~= 0 then
    raise("scaled_dot_product_attention: Number of heads in key and value must divide the number of heads in query "
      .. "(query %s, %s)", tostring(q.shape), tostring(t.shape))
  end
  local d = t:dim() - 2 -- the heads' dim, 1-based
  local expanded, grouped = {}, {}
  for i = 1, t:dim() do
    expanded[#expanded + 1] = t:size(i)
    if i == d then expanded[#expanded + 1] = math.floor(hq / hkv) end
    grouped[i] = i == d and hq or t:size(i)
  end
  return t:unsqueeze(d + 1):expand(expanded):reshape(grouped)
end

-- Causal or masked attention: softmax(q k^T * scale + mask) v over the last
-- two dims. Without attn_mask and dropout it runs the fused kernel
-- (accel._C.scaled_dot_product_attention: flash-style, the (L, S) scores are
-- never formed); otherwise the composite below.
function F.scaled_dot_product_attention(q, k, v, ...)
  local qkv = {q, k, v} -- (ipairs would stop at a nil query)
  for i, name in ipairs({"query", "key", "value"}) do tensor_arg("scaled_dot_product_attention", name, qkv[i]) end
  local o = torch_args("scaled_dot_product_attention", {"attn_mask:tensor", "dropout_p:number", "is_causal:bool",
    "scale:number", "enable_gqa:bool"}, ...)
  if opt(o, "enable_gqa", false) then k, v = gqa_heads(q, k), gqa_heads(q, v) end
  local amp = require("accel.amp") -- on autocast's lower-precision list, as torch's: q, k, v in its dtype
  q, k, v = amp.cast_input(q), amp.cast_input(k), amp.cast_input(v)
  local scale = opt(o, "scale", nil) or 1 / math.sqrt(q:size(-1))
  local mask = amp.cast_input(opt(o, "attn_mask", nil))
  if mask ~= nil then
    if opt(o, "is_causal", false) then
      raise("scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    end
    F._check_mask("scaled_dot_product_attention", "attn_mask", mask, q)
  end
  if mask == nil and opt(o, "dropout_p", 0) == 0 and fused_attention_ok(q, k, v) then
    return C.scaled_dot_product_attention(q, k, v, scale, opt(o, "is_causal", false))
  end
  -- q and k each scaled by sqrt(scale) before the product, as PyTorch's math
  -- path: q k^T itself may overflow a half dtype
  local root = math.sqrt(math.abs(scale))
  local scores = (q * (scale < 0 and -root or root)):matmul(k:transpose(-2, -1) * root)
  local L, S = q:size(-2), k:size(-2)
  if opt(o, "is_causal", false) then
    scores = scores:masked_fill(accel.ones(L, S, {dtype = accel.bool, device = q.device}):triu(1), -math.huge)
  end
  local dead -- query rows whose every key is masked out: output 0 there, as PyTorch 2.x (not NaN)
  if mask then
    check_broadcasts_to("scaled_dot_product_attention", "attn_mask", mask, scores, "the attention scores'")
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

-- conv2d(input, weight, [bias], [stride = 1], [padding = 0], [dilation = 1], [groups = 1]), the
-- optional ones positionally or in an options table; input (N, C, H, W) or (C, H, W), weight (out, C / groups, kH, kW); stride,
-- padding, dilation: an integer or an {h, w} pair; padding also "same" /
-- "valid" or {top, bottom, left, right}.
local CONV_ARGS = {"bias:tensor", "stride", "padding", "dilation", "groups:int"}
function F.conv2d(input, weight, ...)
  local o = torch_args("conv2d", CONV_ARGS, ...)
  return C.conv2d(input, weight, o.bias, opt(o, "stride", 1), opt(o, "padding", 0), opt(o, "dilation", 1),
    opt(o, "groups", 1))
end

-- a 1-D convolution's kernel_size, stride, padding or dilation v (op's argument name): an integer >= low
-- or a list of one (PyTorch's (v,)), as that integer; a padding string ("same" / "valid") as it is
function F._conv1d_setting(op, name, v, low)
  if name == "padding" and type(v) == "string" then return v end
  return int_list(op, name, v, 1, low)[1]
end
local conv1d_setting = F._conv1d_setting

-- conv1d's arguments checked in its own terms (conv2d would name the
-- (N, C, 1, L) view it runs on): x (N, C, L), weight (out, C / groups, k).
local function check_conv1d(x, weight, bias, dilation, padding, groups)
  if type(groups) ~= "number" or groups ~= math.floor(groups) or groups < 1 then
    raise("conv1d: groups must be an integer >= 1, got %s", util.show(groups))
  end
  local c, out, k = x:size(2), weight:size(1), weight:size(3)
  if c % groups ~= 0 or out % groups ~= 0 then
    raise("conv1d: in_channels (%d) and out_channels (%d) must be divisible by groups (%d)", c, out, groups)
  end
  if weight:size(2) * groups ~= c then
    raise("conv1d: weight %s with groups=%d expects input with %d channels, but input %s has %d",
      shape_text(sizes(weight)), groups, weight:size(2) * groups, shape_text(sizes(x)), c)
  end
  if bias ~= nil and (not accel.is_tensor(bias) or bias:dim() ~= 1 or bias:size(1) ~= out) then
    raise("conv1d: bias must have shape [%d] (out_channels of weight %s), got %s", out, shape_text(sizes(weight)),
      accel.is_tensor(bias) and shape_text(sizes(bias)) or type(bias))
  end
  local span, length = (k - 1) * dilation + 1, x:size(3) + (type(padding) == "number" and 2 * padding or 0)
  if type(padding) == "number" and span > length then
    raise("conv1d: kernel size %d (dilation %d) is larger than the padded input length %d of input %s", k, dilation,
      length, shape_text(sizes(x)))
  end
end

-- conv1d(x, weight, [bias], [stride = 1], [padding = 0], [dilation = 1], [groups = 1]) (as conv2d's):
-- (N, C, L) or (C, L) with weight (out, C / groups, k), as conv2d over a
-- height of 1 (stride, padding, dilation: integers or lists of one; padding also "same" / "valid")
function F.conv1d(input, weight, ...)
  local o = torch_args("conv1d", CONV_ARGS, ...)
  local bias = o.bias
  tensor_arg("conv1d", "input", input)
  tensor_arg("conv1d", "weight", weight)
  if input:dim() ~= 2 and input:dim() ~= 3 then
    raise("conv1d: expected input of shape (N, C, L) or (C, L), got %s", shape_text(sizes(input)))
  end
  if weight:dim() ~= 3 then raise("conv1d: weight must be 3-D (out, in / groups, k), got %s", shape_text(sizes(weight))) end
  local x = input:dim() == 2 and input:unsqueeze(1) or input
  local stride, dilation = conv1d_setting("conv1d", "stride", opt(o, "stride", 1), 1),
    conv1d_setting("conv1d", "dilation", opt(o, "dilation", 1), 1)
  local padding, groups = conv1d_setting("conv1d", "padding", opt(o, "padding", 0), 0), opt(o, "groups", 1)
  check_conv1d(x, weight, bias, dilation, padding, groups)
  local y = F.conv2d(x:unsqueeze(3), weight:unsqueeze(3), bias, {stride = {1, stride},
    padding = type(padding) == "string" and padding or {0, padding}, dilation = {1, dilation}, groups = groups}):squeeze(3)
  return input:dim() == 2 and y:squeeze(1) or y
end

-- PyTorch's stride=None / stride=[] mean "the kernel size"
local function pool_stride(o)
  local s = opt(o, "stride", nil)
  if type(s) == "table" and #s == 0 then return nil end
  return s
end

-- max_pool2d(input, kernel_size, [stride = kernel_size], [padding = 0], [dilation = 1],
--   [ceil_mode = false], [return_indices = false]) -> values[, indices] (the optional
-- arguments positionally, in this order, which is not MaxPool2d's, or in an options table)
-- indices: int64 flat positions h * W + w within each input plane (0-based).
function F.max_pool2d(input, kernel_size, ...)
  local o = torch_args("max_pool2d", {"stride", "padding", "dilation", "ceil_mode:bool", "return_indices:bool"}, ...)
  return C.max_pool2d(input, kernel_size, pool_stride(o), opt(o, "padding", 0), opt(o, "dilation", 1),
    opt(o, "ceil_mode", false), opt(o, "return_indices", false))
end

local function int_pair(v, name)
  if type(v) == "table" and #v == 2 then v = {v[1], v[2]} elseif type(v) == "number" then v = {v, v}
  else raise("avg_pool2d: %s must be an integer or a pair {h, w}, got %s", name, tostring(v)) end
  for i = 1, 2 do
    if type(v[i]) ~= "number" or v[i] ~= math.floor(v[i]) then
      raise("avg_pool2d: %s must be an integer or a pair {h, w}, got %s", name, tostring(v[i]))
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

-- The dtype avg_pool2d sums and divides in, as PyTorch's: float32 for a
-- 1- or 2-byte float (its window sums may overflow it), float64 for int64
-- (averages truncated toward zero; exact while window sums stay below 2^53),
-- else its own.
local function pool_compute_dtype(dtype)
  if not dtype.is_floating_point then return accel.float64 end
  return dtype.itemsize < 4 and accel.float32 or dtype
end

-- avg_pool2d's output size per spatial dim (out) and the extra bottom /
-- right padding that ceil_mode needs (hi), with the window geometry.
local function avg_geometry(input, H, W, k, s, p, ceil_mode)
  local out, hi = {}, {}
  for i, n in ipairs({H, W}) do
    local span = n + 2 * p[i] - k[i]
    local m = pooled_len(n, k[i], s[i], p[i], 1, ceil_mode)
    if span < 0 or m < 1 then
      raise("avg_pool2d: input %s is too small for kernel_size {%d, %d} with padding {%d, %d}",
        tostring(input.shape), k[1], k[2], p[1], p[2])
    end
    out[i], hi[i] = m, math.max(0, (m - 1) * s[i] + k[i] - n - p[i])
  end
  return {k = k, s = s, p = p, out = out, hi = hi, H = H, W = W}
end

-- The window averages of planes (P, 1, H, W), (P, 1, oh, ow): sums by a
-- convolution with a ones kernel (outside autocast) in the compute dtype,
-- divided as PyTorch divides, rounded once to the input's dtype.
local function avg_windows(planes, geo, divisor, include_pad)
  local dtype = planes.dtype
  local on = {dtype = pool_compute_dtype(dtype), device = planes.device}
  local k, s, p, out = geo.k, geo.s, geo.p, geo.out
  local ones = accel.ones(1, 1, k[1], k[2], on)
  local prev = C.set_autocast(nil)
  local ok, sums = pcall(C.conv2d, planes:to(on.dtype), ones, nil, s, {p[1], geo.hi[1], p[2], geo.hi[2]}, 1, 1)
  C.set_autocast(prev)
  if not ok then error(sums, 0) end
  if divisor then
    sums = sums / divisor
  else
    local dh = accel.tensor(avg_divisors(geo.H, out[1], k[1], s[1], p[1], include_pad), on)
    local dw = accel.tensor(avg_divisors(geo.W, out[2], k[2], s[2], p[2], include_pad), on)
    sums = sums / (dh:view(out[1], 1) * dw:view(1, out[2]))
  end
  if not dtype.is_floating_point then sums = sums:trunc() end
  return sums:to(dtype)
end

-- avg_pool2d(input, kernel_size, [stride = kernel_size], [padding = 0], [ceil_mode = false],
--   [count_include_pad = true], [divisor_override]), positionally or in an options table; a float input gives
-- its dtype, an int64 one its averages truncated toward zero (as PyTorch's).
function F.avg_pool2d(input, kernel_size, ...)
  local o = torch_args("avg_pool2d", {"stride", "padding", "ceil_mode:bool", "count_include_pad:bool",
    "divisor_override:int"}, ...)
  local k = int_pair(kernel_size, "kernel_size")
  local s = int_pair(pool_stride(o) or k, "stride")
  local p = int_pair(opt(o, "padding", 0), "padding")
  local divisor = opt(o, "divisor_override", nil)
  if not accel.is_tensor(input) or (input:dim() ~= 3 and input:dim() ~= 4) then
    raise("avg_pool2d: expected input of shape (N, C, H, W) or (C, H, W), got %s",
      accel.is_tensor(input) and tostring(input.shape) or type(input))
  end
  if not input.dtype.is_floating_point and input.dtype ~= accel.int64 then
    raise("avg_pool2d: input dtype %s is not supported (floating point or int64, as PyTorch's)", input.dtype.name)
  end
  for i = 1, 2 do
    if k[i] < 1 or s[i] < 1 or p[i] < 0 or p[i] > k[i] / 2 then
      raise("avg_pool2d: need kernel_size, stride >= 1 and 0 <= padding <= kernel_size / 2, got kernel_size " ..
        "{%d, %d}, stride {%d, %d}, padding {%d, %d}", k[1], k[2], s[1], s[2], p[1], p[2])
    end
  end
  if divisor ~= nil and (type(divisor) ~= "number" or divisor == 0) then
    raise("avg_pool2d: divisor_override must be a nonzero number, got %s", tostring(divisor))
  end
  local shape = sizes(input)
  local geo = avg_geometry(input, shape[#shape - 1], shape[#shape], k, s, p, opt(o, "ceil_mode", false))
  local sums = avg_windows(input:reshape(-1, 1, geo.H, geo.W), geo, divisor, opt(o, "count_include_pad", true))
  shape[#shape - 1], shape[#shape] = geo.out[1], geo.out[2]
  return sums:reshape(shape)
end

-- source index of each of the n outputs along a dim of n_in for "nearest", as ATen's
-- nearest_neighbor_compute_source_index: floor(i * s) in float32, s = float32(1 / factor) with a
-- scale_factor, float32(n_in) / n without
local function nearest_source(n_in, n, factor, device, exact)
  local f32 = {dtype = accel.float32, device = device}
  local s = factor and accel.tensor(1 / factor, f32) or accel.tensor(n_in, f32) / n
  local i = accel.arange(n, f32)
  if exact then i = i + 0.5 end -- ("nearest-exact": the pixel centres, floor((i + 0.5) s))
  return (i * s):floor():clamp(nil, n_in - 1):long()
end

-- x resized along dim d to n by bicubic convolution (A = -0.75) of the
-- four neighbours of src = (i + 0.5) step - 0.5 (align_corners: i (n_in -
-- 1) / (n - 1)), not clamped, the neighbours' indices clamped to the
-- edges, as ATen's upsample_bicubic2d (separable: rows, then columns)
local function bicubic_dim(x, d, n, align_corners, factor)
  local n_in, A = x:size(d), -0.75
  local dst = accel.arange(n, {dtype = accel.float64, device = x.device})
  local src
  if align_corners then src = n > 1 and dst * ((n_in - 1) / (n - 1)) or dst * 0
  else src = (dst + 0.5) * (factor and 1 / factor or n_in / n) - 0.5 end
  local i0 = src:floor()
  local t = src - i0
  local function outer(u) return ((u * A - 5 * A) * u + 8 * A) * u - 4 * A end -- |u| in [1, 2]
  local function inner(u) return ((u * (A + 2)) - (A + 3)) * u * u + 1 end -- |u| in [0, 1]
  local weights = {outer(t + 1), inner(t), inner(1 - t), outer(2 - t)}
  local shape = {}
  for k = 1, x:dim() do shape[k] = k == d and n or 1 end
  local y
  for k = 1, 4 do
    local idx = (i0 + (k - 2)):clamp(0, n_in - 1):long()
    local term = x:index_select(d, idx) * weights[k]:to(x.dtype):reshape(shape)
    y = y and y + term or term
  end
  return y
end

-- x resized along dim d to n positions by interpolate's rule, the source step
-- being 1 / factor (a scale_factor) or n_in / n (factor nil): the source of
-- output i is nearest_source's (mode "nearest") or linear between the
-- neighbours of (i + 0.5) * step - 0.5 (align_corners: i * (n_in - 1) / (n - 1))
local function resize_dim(x, d, n, mode, align_corners, factor)
  local n_in = x:size(d)
  if mode == "nearest" or mode == "nearest-exact" then
    return x:index_select(d, nearest_source(n_in, n, factor, x.device, mode == "nearest-exact"))
  end
  if mode == "bicubic" then return bicubic_dim(x, d, n, align_corners, factor) end
  local dst = accel.arange(n, {dtype = accel.float64, device = x.device})
  local src
  if align_corners then src = n > 1 and dst * ((n_in - 1) / (n - 1)) or dst * 0
  else src = ((dst + 0.5) * (factor and 1 / factor or n_in / n) - 0.5):clamp(0, nil) end
  local i0 = src:floor():clamp(nil, n_in - 1)
  local w = (src - i0):to(x.dtype)
  local i1 = (i0 + 1):clamp(nil, n_in - 1)
  local shape = {}
  for k = 1, x:dim() do shape[k] = k == d and n or 1 end
  w = w:reshape(shape)
  return x:index_select(d, i0:long()) * (1 - w) + x:index_select(d, i1:long()) * w
end

-- whether interpolate changes a dim of n_in resized to n with scale_factor factor (nil:
-- none, or recomputed), and the factor it resizes with. As ATen: the linear modes copy a
-- dim whose size stays (compute_source_index_and_lambda), so does "nearest" on 2-D
-- inputs, which takes i // 2 where n == 2 n_in (nearest_idx); 1-D and 3-D "nearest" use
-- floor(i / factor) also there (PyTorch 2.15's backward of those uses the 2-D shortcuts,
-- so its gradient then is not its forward's: here it is)
local function resize_plan(mode, spatial, n_in, n, factor)
  if mode == "nearest-exact" then return n ~= n_in or (factor ~= nil and factor ~= 1), factor end
  if mode ~= "nearest" then return n ~= n_in, factor end
  if spatial == 2 and (n == n_in or n == 2 * n_in) then factor = nil end
  return n ~= n_in or (factor ~= nil and factor ~= 1), factor
end

local INTERPOLATE_MODES = {nearest = true, ["nearest-exact"] = true, area = true, linear = 3, bilinear = 4,
  trilinear = 5, bicubic = 4}
local ALIGNING = {linear = true, bilinear = true, trilinear = true, bicubic = true}
local AREA_POOLS = {"adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d"}

-- interpolate(x, [size], [scale_factor], [mode = "nearest"], [align_corners], [recompute_scale_factor]):
-- (N, C, *spatial) resized to size (a number or a list) or by scale_factor (recompute_scale_factor:
-- to floor(in * scale_factor) as if that were the size); modes "nearest", "nearest-exact",
-- "linear" / "bilinear" / "trilinear" (by the input's dims) and "bicubic" (4-D), separably
-- along each spatial dim, and "area" (adaptive average pooling), as PyTorch's
function F.interpolate(x, ...)
  local a = torch_args("interpolate", {"size:int|table", "scale_factor:number|table", "mode:string",
                                       "align_corners:bool", "recompute_scale_factor:bool", "antialias:bool"}, ...)
  tensor_arg("interpolate", "input", x)
  local mode = a.mode or "nearest"
  if not INTERPOLATE_MODES[mode] then
    raise("interpolate: mode '%s' is not supported (nearest, nearest-exact, area, linear, bilinear, trilinear, bicubic)",
      tostring(mode))
  end
  if INTERPOLATE_MODES[mode] ~= true and INTERPOLATE_MODES[mode] ~= x:dim() then
    raise("interpolate: mode '%s' expects a %dD input, got %dD", mode, INTERPOLATE_MODES[mode], x:dim())
  end
  if not ALIGNING[mode] and a.align_corners ~= nil then
    raise("interpolate: align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | trilinear")
  end
  if a.antialias then raise("interpolate: antialias = true is not supported") end
  if (a.size == nil) == (a.scale_factor == nil) then raise("interpolate: either size or scale_factor should be defined, not both") end
  if a.recompute_scale_factor and a.size ~= nil then
    raise("interpolate: recompute_scale_factor is not meaningful with an explicit size")
  end
  local spatial = x:dim() - 2
  if spatial < 1 then raise("interpolate: expected an input (N, C, ...) with spatial dims, got %dD", x:dim()) end
  local function per_dim(v, i) return type(v) == "table" and v[i] or v end
  if mode == "area" then -- adaptive average pooling to the output size, as torch's
    if spatial > 3 then raise("interpolate: mode 'area' expects a 3D, 4D or 5D input, got %dD", x:dim()) end
    local out = {}
    for i = 1, spatial do
      out[i] = a.size ~= nil and per_dim(a.size, i) or math.floor(x:size(i + 2) * per_dim(a.scale_factor, i))
    end
    return F[AREA_POOLS[spatial]](x, spatial == 1 and out[1] or out)
  end
  local y = x
  for i = 1, spatial do
    local d, n_in = i + 2, x:size(i + 2)
    local n, factor
    if a.size ~= nil then n = per_dim(a.size, i)
    else
      factor = per_dim(a.scale_factor, i)
      n = math.floor(n_in * factor)
      if a.recompute_scale_factor then factor = nil end
    end
    if type(n) ~= "number" or n < 1 then raise("interpolate: the output size must be positive, got %s", util.show(n)) end
    local resize
    resize, factor = resize_plan(mode, spatial, n_in, n, factor)
    if resize then y = resize_dim(y, d, n, ALIGNING[mode] and mode ~= "bicubic" and "linear" or mode, a.align_corners, factor) end
  end
  return y
end

-- adaptive_avg_pool2d(x, output_size): (N, C, H, W) or (C, H, W) to
-- output_size (an integer or {h, w}; nil keeps that size) by averaging, cell
-- i of n rows covering [floor(i H / n), ceil((i + 1) H / n)), as PyTorch's
-- (rows, then columns: the cells are rectangles)
function F.adaptive_avg_pool2d(x, output_size, ...)
  no_more("adaptive_avg_pool2d", 2, "2", ...)
  tensor_arg("adaptive_avg_pool2d", "input", x)
  if x:dim() ~= 3 and x:dim() ~= 4 then
    raise("adaptive_avg_pool2d: expected input of shape (N, C, H, W) or (C, H, W), got %s", shape_text(sizes(x)))
  end
  local out = type(output_size) == "table" and output_size or {output_size, output_size}
  local y = x
  for i, d in ipairs({x:dim() - 1, x:dim()}) do
    local n_in, n = x:size(d), out[i] == nil and x:size(d) or out[i]
    if type(n) ~= "number" or n < 1 or n ~= math.floor(n) then
      raise("adaptive_avg_pool2d: output_size must be positive integers, got %s", util.show(out[i]))
    end
    if n ~= n_in then
      local cells = {}
      for c = 0, n - 1 do
        local lo, hi = math.floor(c * n_in / n), math.ceil((c + 1) * n_in / n)
        cells[c + 1] = y:narrow(d, lo + 1, hi - lo):mean(d, true)
      end
      y = accel.cat(cells, d)
    end
  end
  return y
end

-- channels dropped whole: the last `spatial` dims share each draw
local function channel_dropout(op, spatial, x, ...)
  local p, a = dropout_args(op, x, ...)
  if a.training == false or p == 0 then return x end
  if x:dim() ~= spatial + 1 and x:dim() ~= spatial + 2 then
    raise("%s: expected a %d-D or %d-D input, got %dD", op, spatial + 1, spatial + 2, x:dim())
  end
  local shape = sizes(x)
  for d = x:dim() - spatial + 1, x:dim() do shape[d] = 1 end
  local keep = accel.rand(shape, {device = x.device}):ge(p):to(x.dtype)
  local y = p == 1 and x * 0 or x * keep * (1 / (1 - p))
  return a.inplace and x:copy_(y) or y
end

-- dropout2d(x, [p = 0.5], [training = true], [inplace = false]): whole
-- channels of (N, C, H, W) (or (C, H, W)) zeroed with probability p, the
-- rest scaled by 1 / (1 - p)
function F.dropout2d(x, ...) return channel_dropout("dropout2d", 2, x, ...) end
-- dropout1d(x (N, C, L) or (C, L), ...), dropout3d(x (N, C, D, H, W) or (C, D, H, W), ...): as dropout2d
function F.dropout1d(x, ...) return channel_dropout("dropout1d", 1, x, ...) end
function F.dropout3d(x, ...) return channel_dropout("dropout3d", 3, x, ...) end

-- The per-channel shape (1, C, 1, ...) of x, and the dims other than the channel one.
local function channel_layout(x)
  local shape, dims = {1, x:size(2)}, {1}
  for d = 3, x:dim() do shape[d], dims[#dims + 1] = 1, d end
  return shape, dims
end

-- This process's batch statistics per channel: the mean and the biased
-- variance (dims kept) and the number of values behind them.
local function local_batch_stats(x, dims, c)
  return x:mean(dims, true), x:var(dims, {correction = 0, keepdim = true}), x:numel() / c
end

-- batch_norm with the batch statistics of stats(x, dims, c) -> mean, var, n
-- (nn.SyncBatchNorm passes those of every process); a: the options of
-- batch_norm (weight, bias, training, momentum, eps).
function F._batch_norm_stats(stats, x, running_mean, running_var, a)
  tensor_arg("batch_norm", "input", x)
  if x:dim() < 2 then raise("batch_norm: expected an input of at least 2 dims (N, C, ...), got %dD", x:dim()) end
  local shape, dims = channel_layout(x)
  local c, eps, mean, var = x:size(2), check_eps("batch_norm", a.eps) or 1e-5, nil, nil
  for _, stat in ipairs({{"running_mean", running_mean}, {"running_var", running_var}, {"weight", a.weight},
                         {"bias", a.bias}}) do
    local t = stat[2]
    if accel.is_tensor(t) and t:numel() ~= c then
      raise("batch_norm: %s should contain %d elements not %d (the input's channels, dim 2 of %s)", stat[1], c,
        t:numel(), shape_text(sizes(x)))
    end
  end
  if a.training or running_mean == nil then
    if a.training and x:numel() / c <= 1 then
      raise("batch_norm: Expected more than 1 value per channel when training, got input size %s", shape_text(sizes(x)))
    end
    local n
    mean, var, n = stats(x, dims, c)
    if a.training and running_mean ~= nil then
      local m = a.momentum or 0.1
      accel.no_grad(function()
        running_mean:mul_(1 - m):add_(mean:detach():reshape({c}):to(running_mean.dtype) * m)
        running_var:mul_(1 - m):add_(var:detach():reshape({c}):to(running_var.dtype) * (m * n / (n - 1)))
      end)
    end
  else
    mean, var = running_mean:reshape(shape), running_var:reshape(shape)
  end
  local y = (x - mean) * (var + eps):rsqrt()
  if a.weight ~= nil then y = y * a.weight:reshape(shape) end
  if a.bias ~= nil then y = y + a.bias:reshape(shape) end
  return y.dtype == x.dtype and y or y:to(x.dtype)
end

-- batch_norm(x, running_mean, running_var, [weight], [bias], [training =
-- false], [momentum = 0.1], [eps = 1e-5]): per channel (dim 2), with the
-- batch's statistics when training (and the running ones updated in place,
-- the variance unbiased, as PyTorch's) or without running statistics, else
-- the running ones. The result has x's dtype.
function F.batch_norm(x, running_mean, running_var, ...)
  local a = torch_args("batch_norm", {"weight:tensor", "bias:tensor", "training:bool", "momentum:number",
                                    "eps:number"}, ...)
  return F._batch_norm_stats(local_batch_stats, x, running_mean, running_var, a)
end

-- group_norm(x, num_groups, [weight], [bias], [eps = 1e-5]): x (N, C, ...)
-- normalized over each group of C / num_groups channels (and the other
-- dims), then scaled per channel
function F.group_norm(x, num_groups, ...)
  local a = torch_args("group_norm", {"weight:tensor", "bias:tensor", "eps:number"}, ...)
  tensor_arg("group_norm", "input", x)
  if x:dim() < 2 then raise("group_norm: expected an input of at least 2 dims (N, C, ...), got %dD", x:dim()) end
  local n, c = x:size(1), x:size(2)
  if type(num_groups) ~= "number" or num_groups < 1 or c % num_groups ~= 0 then
    raise("group_norm: Expected number of channels in input to be divisible by num_groups, but got input of shape %s "
      .. "and num_groups=%s", shape_text(sizes(x)), util.show(num_groups))
  end
  for _, k in ipairs({"weight", "bias"}) do
    if a[k] ~= nil and a[k]:numel() ~= c then
      raise("group_norm: Expected %s to be a vector of size equal to the number of channels in input, but got %s of "
        .. "shape %s and input of shape %s", k, k, shape_text(sizes(a[k])), shape_text(sizes(x)))
    end
  end
  local g = x:reshape({n, num_groups, -1})
  local mean, var = g:mean(3, true), g:var(3, {correction = 0, keepdim = true})
  local y = ((g - mean) * (var + (check_eps("group_norm", a.eps) or 1e-5)):rsqrt()):reshape(x.shape)
  local shape = channel_layout(x)
  if a.weight ~= nil then y = y * a.weight:reshape(shape) end
  if a.bias ~= nil then y = y + a.bias:reshape(shape) end
  return y
end

-- The less common functions live in accel.nn.activations and
-- accel.nn.pooling1d, each loaded on the first use of one of its names (it
-- installs them all here).
local LAZY_FUNCTIONS = {max_pool1d = "pooling1d", avg_pool1d = "pooling1d", adaptive_avg_pool1d = "pooling1d",
  pairwise_distance = "pooling1d", conv_transpose1d = "conv_transpose", conv_transpose2d = "conv_transpose",
  conv_transpose3d = "conv_transpose",
  pixel_shuffle = "upsampling", pixel_unshuffle = "upsampling", instance_norm = "normalization"}
for _, name in ipairs({"margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss", "cosine_embedding_loss",
                       "triplet_margin_loss", "multilabel_soft_margin_loss"}) do
  LAZY_FUNCTIONS[name] = "ranking_loss"
end
LAZY_FUNCTIONS.poisson_nll_loss, LAZY_FUNCTIONS.gaussian_nll_loss = "likelihood_loss", "likelihood_loss"
LAZY_FUNCTIONS.bilinear = "bilinear"
LAZY_FUNCTIONS.grid_sample, LAZY_FUNCTIONS.affine_grid = "grid_sample", "grid_sample"
LAZY_FUNCTIONS.ctc_loss, LAZY_FUNCTIONS.fractional_max_pool2d = "ctc_loss", "fractional_max_pool"
LAZY_FUNCTIONS.fractional_max_pool3d = "fractional_max_pool"
LAZY_FUNCTIONS.adaptive_max_pool1d, LAZY_FUNCTIONS.adaptive_max_pool2d = "adaptive_max_pool", "adaptive_max_pool"
LAZY_FUNCTIONS.adaptive_max_pool3d = "adaptive_max_pool"
LAZY_FUNCTIONS.unfold, LAZY_FUNCTIONS.fold, LAZY_FUNCTIONS.local_response_norm = "fold", "fold", "normalization"
LAZY_FUNCTIONS.gumbel_softmax, LAZY_FUNCTIONS.embedding_bag = "activations", "embedding_bag"
LAZY_FUNCTIONS.pdist, LAZY_FUNCTIONS.lp_pool1d, LAZY_FUNCTIONS.lp_pool2d = "pooling1d", "pooling1d", "pooling1d"
LAZY_FUNCTIONS.lp_pool3d = "pooling1d"
LAZY_FUNCTIONS.multi_margin_loss, LAZY_FUNCTIONS.multilabel_margin_loss = "ranking_loss", "ranking_loss"
LAZY_FUNCTIONS.rrelu, LAZY_FUNCTIONS.alpha_dropout = "activations", "activations"
LAZY_FUNCTIONS.feature_alpha_dropout = "activations"
LAZY_FUNCTIONS.max_unpool1d, LAZY_FUNCTIONS.max_unpool2d = "max_unpool", "max_unpool"
LAZY_FUNCTIONS.max_unpool3d = "max_unpool"
for _, name in ipairs({"conv3d", "max_pool3d", "avg_pool3d", "adaptive_avg_pool3d"}) do LAZY_FUNCTIONS[name] = "volumetric" end
for _, name in ipairs({"relu6", "hardtanh", "hardsigmoid", "hardswish", "mish", "selu", "celu", "prelu", "softsign",
                       "tanhshrink", "glu", "threshold", "softmin", "hardshrink", "softshrink"}) do
  LAZY_FUNCTIONS[name] = "activations"
end

setmetatable(F, {__index = function(t, k)
  if LAZY_FUNCTIONS[k] then
    require("accel.nn." .. LAZY_FUNCTIONS[k])
    return rawget(t, k)
  end
end})

-- PyTorch's in-place forms: F.relu_(x, ...) is F.relu(x, ..., {inplace = true})
for _, name in ipairs({"relu", "elu", "leaky_relu", "hardtanh", "selu", "celu", "threshold", "rrelu"}) do
  F[name .. "_"] = function(x, ...)
    local args, n = {...}, select("#", ...)
    if n > 0 and util.is_options(args[n]) then
      local o = {}
      for k, v in pairs(args[n]) do o[k] = v end
      if o.inplace == false then raise("%s_: inplace = false contradicts the in-place form", name) end
      o.inplace, args[n] = true, o
    else
      n = n + 1
      args[n] = {inplace = true}
    end
    return F[name](x, compat.unpack(args, 1, n))
  end
end

-- PyTorch's functions accel-lua does not provide: a clear error, not nil.
local NOT_PROVIDED = {}
return util.not_provided(F, NOT_PROVIDED, "accel.nn.functional", "docs/api/nn.md lists the functions there are")
