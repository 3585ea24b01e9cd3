-- accel.nn.activations: the less common activations, as functions
-- (installed into nn.functional) and modules, each PyTorch's formula and
-- gradient (piecewise ones pass the gradient where PyTorch's backward does:
-- hardtanh / relu6 / hardsigmoid strictly inside their range), with its
-- printed form. Loaded on first use of one of its names.
--
--   F.relu6 hardtanh hardsigmoid hardswish mish selu celu prelu softsign
--     tanhshrink glu threshold softmin hardshrink softshrink
--   nn.ReLU6 Hardtanh Hardsigmoid Hardswish Mish SELU CELU PReLU Softsign
--     Tanhshrink GLU Threshold Softmin Hardshrink Softshrink
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local util = require("accel.util")
local compat = require("accel.compat")

local Parameter, raise, py, export_class = base.Parameter, base.raise, base.pyrepr, base.export_class
local torch_args = util.torch_args

local M = {}
local FUNCTIONS = {}

local function input_arg(op, x)
  if not accel.is_tensor(x) then raise("%s: input must be a Tensor, got %s", op, type(x)) end
end

-- y, written into x when inplace (as PyTorch's inplace=True)
local function result(x, y, inplace)
  if inplace then return x:copy_(y) end
  return y
end

-- x where lo < x < hi (gradient 1), else the constant v (gradient 0)
local function inside(x, lo, hi, y_inside, y_outside)
  return accel.where(x:gt(lo):logical_and(x:lt(hi)), y_inside, y_outside:detach())
end

-- hardtanh(x, [min_val = -1], [max_val = 1], [inplace = false])
function FUNCTIONS.hardtanh(x, ...)
  local a = torch_args("hardtanh", {"min_val:number", "max_val:number", "inplace:bool"}, ...)
  input_arg("hardtanh", x)
  local lo, hi = a.min_val or -1, a.max_val or 1
  if lo > hi then raise("hardtanh: min_val cannot be greater than max_val") end
  return result(x, inside(x, lo, hi, x, x:clamp(lo, hi)), a.inplace)
end

-- relu6(x, [inplace = false]) = hardtanh(x, 0, 6)
function FUNCTIONS.relu6(x, ...)
  local a = torch_args("relu6", {"inplace:bool"}, ...)
  input_arg("relu6", x)
  return result(x, inside(x, 0, 6, x, x:clamp(0, 6)), a.inplace)
end

-- hardsigmoid(x, [inplace = false]) = relu6(x + 3) / 6 (NaN stays NaN, as torch's)
function FUNCTIONS.hardsigmoid(x, ...)
  local a = torch_args("hardsigmoid", {"inplace:bool"}, ...)
  input_arg("hardsigmoid", x)
  return result(x, inside(x, -3, 3, x / 6 + 0.5, x:clamp(-3, 3) / 6 + 0.5), a.inplace)
end

-- hardswish(x, [inplace = false]) = x relu6(x + 3) / 6; the gradient at
-- -3 is 0 and at 3 is 1, as PyTorch's backward gives (and at NaN 1, NaN
-- staying NaN)
function FUNCTIONS.hardswish(x, ...)
  local a = torch_args("hardswish", {"inplace:bool"}, ...)
  input_arg("hardswish", x)
  local inner = x:gt(-3):logical_and(x:lt(3))
  local xs = accel.where(inner, x, 0) -- (the unused side finite: its zero gradient stays 0 at inf and NaN)
  local low = accel.where(x:eq(-math.huge), 0 / 0, accel.zeros_like(x)) -- -inf * relu6(-inf) is NaN, as PyTorch's
  local y = accel.where(inner, xs * (xs + 3) / 6, accel.where(x:le(-3), low, x))
  return result(x, y, a.inplace)
end

-- mish(x, [inplace = false]) = x tanh(softplus(x))
function FUNCTIONS.mish(x, ...)
  local a = torch_args("mish", {"inplace:bool"}, ...)
  input_arg("mish", x)
  return result(x, x * F.softplus(x):tanh(), a.inplace)
end

local SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

-- As PyTorch's elu: x above 0, alpha (exp(x s) - 1) from 0 down (s = input_scale; the exp side clamped
-- finite), so the gradient at 0 is the lower side's
local function elu_core(x, alpha, s)
  return accel.where(x:gt(0), x, ((s == 1 and x or x * s):clamp(nil, 1):exp() - 1) * alpha)
end

-- selu(x, [inplace = false]) = scale (x above 0, alpha (exp(x) - 1) below)
function FUNCTIONS.selu(x, ...)
  local a = torch_args("selu", {"inplace:bool"}, ...)
  input_arg("selu", x)
  return result(x, elu_core(x, SELU_ALPHA, 1) * SELU_SCALE, a.inplace)
end

-- celu(x, [alpha = 1], [inplace = false])
function FUNCTIONS.celu(x, ...)
  local a = torch_args("celu", {"alpha:number", "inplace:bool"}, ...)
  input_arg("celu", x)
  if a.alpha == 0 then raise("celu: ZeroDivisionError: alpha cannot be 0") end
  return result(x, elu_core(x, a.alpha or 1, 1 / (a.alpha or 1)), a.inplace)
end

-- prelu(x, weight): x above 0, weight x below; weight has 1 element or one
-- per channel (x's dim 2, or dim 1 of a 1-D x)
function FUNCTIONS.prelu(x, weight, ...)
  torch_args("prelu", {}, ...)
  input_arg("prelu", x)
  if not accel.is_tensor(weight) then raise("prelu: weight must be a Tensor, got %s", type(weight)) end
  local amp = require("accel.amp") -- on autocast's lower-precision list, as torch's: x and weight in its dtype
  x, weight = amp.cast_input(x), amp.cast_input(weight)
  local n, w = weight:numel(), weight
  if n ~= 1 then
    local c = x:dim() >= 2 and x:size(2) or x:size(1)
    if weight:dim() ~= 1 or n ~= c then
      raise("prelu: Mismatch of parameter numbers and input channel size. Found parameter numbers = %d and channel size = %d.", n, c)
    end
    if x:dim() >= 2 then
      local shape = {1, c}
      for d = 3, x:dim() do shape[d] = 1 end
      w = weight:reshape(shape)
    end
  end
  return accel.where(x:gt(0), x, x * w)
end

-- softsign(x) = x / (1 + |x|)
function FUNCTIONS.softsign(x, ...)
  torch_args("softsign", {}, ...)
  input_arg("softsign", x)
  return x / (x:abs() + 1)
end

-- tanhshrink(x) = x - tanh(x)
function FUNCTIONS.tanhshrink(x, ...)
  torch_args("tanhshrink", {}, ...)
  input_arg("tanhshrink", x)
  return x - x:tanh()
end

-- glu(x, [dim = -1]): a sigmoid(b), a and b the halves of x along dim
function FUNCTIONS.glu(x, ...)
  local a = torch_args("glu", {"dim:int"}, ...)
  input_arg("glu", x)
  local dim = a.dim or -1
  if x:dim() == 0 then raise("glu: glu does not support scalars because halving size must be even") end
  local size = x:size(dim)
  if size % 2 ~= 0 then raise("glu: Halving dimension must be even, but dimension %d is size %d", dim, size) end
  local halves = x:chunk(2, dim)
  return halves[1] * halves[2]:sigmoid()
end

-- threshold(x, threshold, value, [inplace = false]): value up to threshold, else x (NaN too, as torch's)
function FUNCTIONS.threshold(x, ...)
  local a = torch_args("threshold", {"threshold:number", "value:number", "inplace:bool"}, ...)
  input_arg("threshold", x)
  if a.threshold == nil or a.value == nil then raise("threshold: threshold and value must be given") end
  return result(x, accel.where(x:le(a.threshold), accel.full_like(x, a.value), x), a.inplace)
end

-- softmin(x, dim, [{dtype =}]) = softmax(-x, dim)
function FUNCTIONS.softmin(x, dim, o)
  input_arg("softmin", x)
  return F.softmax(-x, dim, o)
end

-- hardshrink(x, [lambd = 0.5]): 0 where |x| <= lambd, else x (NaN too, as torch's)
function FUNCTIONS.hardshrink(x, ...)
  local a = torch_args("hardshrink", {"lambd:number"}, ...)
  input_arg("hardshrink", x)
  local l = a.lambd or 0.5
  return accel.where(x:abs():le(l), accel.zeros_like(x), x)
end

-- softshrink(x, [lambd = 0.5]): x - lambd above lambd, x + lambd below -lambd, else 0
-- (inside, x * 0 as torch's, so -0 below 0; NaN stays NaN with gradient 1, as torch's)
function FUNCTIONS.softshrink(x, ...)
  local a = torch_args("softshrink", {"lambd:number"}, ...)
  input_arg("softshrink", x)
  local l = a.lambd or 0.5
  if l < 0 then raise("softshrink: lambda must be greater or equal to 0, but found to be %s.", py(l)) end
  return accel.where(x:abs():le(l), x:detach() * 0, x - x:sign() * l)
end

for name, fn in pairs(FUNCTIONS) do rawset(F, name, fn) end

-- ---- modules ----

local function inplace_text(self, first)
  if not self.inplace then return "" end
  return first and "inplace=True" or ", inplace=True"
end

-- A module class name whose forward is F[fn](x, self[fields]...) and
-- init takes torch_args specs (defaults: the values when not given).
local function activation(name, fn, specs, defaults, repr)
  local cls = export_class(M, name)
  local fields = {}
  for i, spec in ipairs(specs) do fields[i] = spec:match("^[^:]+") end
  function cls:init(...)
    local a = torch_args(name, specs, ...)
    for i, field in ipairs(fields) do
      local v = a[field]
      if v == nil then v = defaults[i] end
      self[field] = v
    end
  end
  function cls:forward(x)
    local args = {}
    for i, field in ipairs(fields) do args[i] = self[field] end
    return FUNCTIONS[fn](x, compat.unpack(args, 1, #fields))
  end
  cls.extra_repr = repr
  return cls
end

activation("ReLU6", "relu6", {"inplace:bool"}, {false}, function(self) return inplace_text(self, true) end)
activation("Hardtanh", "hardtanh", {"min_val:number", "max_val:number", "inplace:bool"}, {-1.0, 1.0, false},
  function(self) return ("min_val=%s, max_val=%s%s"):format(py(self.min_val), py(self.max_val), inplace_text(self)) end)
activation("Hardsigmoid", "hardsigmoid", {"inplace:bool"}, {false}, function() return "" end)
activation("Hardswish", "hardswish", {"inplace:bool"}, {false}, function() return "" end)
activation("Mish", "mish", {"inplace:bool"}, {false}, function() return "" end)
activation("SELU", "selu", {"inplace:bool"}, {false}, function(self) return inplace_text(self, true) end)
activation("CELU", "celu", {"alpha:number", "inplace:bool"}, {1.0, false},
  function(self) return "alpha=" .. py(self.alpha) .. inplace_text(self) end)
activation("Softsign", "softsign", {}, {}, function() return "" end)
activation("Tanhshrink", "tanhshrink", {}, {}, function() return "" end)
activation("GLU", "glu", {"dim:int"}, {-1}, function(self) return "dim=" .. py(self.dim) end)
activation("Threshold", "threshold", {"threshold:number", "value:number", "inplace:bool"}, {nil, nil, false},
  function(self) return ("threshold=%s, value=%s%s"):format(py(self.threshold), py(self.value), inplace_text(self)) end)
activation("Hardshrink", "hardshrink", {"lambd:number"}, {0.5}, function(self) return py(self.lambd) end)
activation("Softshrink", "softshrink", {"lambd:number"}, {0.5}, function(self) return py(self.lambd) end)

local Threshold = M.Threshold
local threshold_init = Threshold.init
function Threshold:init(...)
  threshold_init(self, ...)
  if self.threshold == nil or self.value == nil then raise("Threshold: threshold and value must be given") end
end

-- Softmin(dim) or Softmin({dim =}), dim 1-based
local Softmin = export_class(M, "Softmin")
function Softmin:init(dim)
  if type(dim) == "table" then dim = base.check_options("Softmin", dim, {"dim"}).dim end
  if type(dim) ~= "number" then raise("Softmin: dim must be given (e.g. nn.Softmin(-1)), got %s", type(dim)) end
  self.dim = dim
end
function Softmin:forward(x) return FUNCTIONS.softmin(x, self.dim) end
function Softmin:extra_repr() return "dim=" .. self.dim end

-- PReLU([num_parameters = 1], [init = 0.25], [{dtype =, device =}]): a learnt slope per channel (or one)
local PReLU = export_class(M, "PReLU")
function PReLU:init(...)
  local a = torch_args("PReLU", {"num_parameters:int", "init:number", "device", "dtype"}, ...)
  self.num_parameters = a.num_parameters or 1
  if self.num_parameters < 1 then raise("PReLU: num_parameters must be >= 1, got %d", self.num_parameters) end
  self.init_value = a.init or 0.25
  self.weight = Parameter(accel.full({self.num_parameters}, self.init_value, {dtype = a.dtype, device = a.device}))
end
function PReLU:reset_parameters()
  accel.no_grad(function() self.weight:fill_(self.init_value) end)
end
function PReLU:forward(x) return FUNCTIONS.prelu(x, self.weight) end
function PReLU:extra_repr() return "num_parameters=" .. self.num_parameters end

-- gumbel_softmax(logits, [tau = 1], [hard = false], [eps = 1e-10], [dim = -1]): softmax((logits + g) / tau)
-- with g Gumbel noise from accel's generator (so the draws differ from torch's); hard: the one-hot of
-- its maximum in the forward, the soft sample's gradient in the backward (the straight-through trick)
function FUNCTIONS.gumbel_softmax(logits, ...)
  local a = torch_args("gumbel_softmax", {"tau:number", "hard:bool", "eps:number", "dim:int"}, ...)
  if not accel.is_tensor(logits) then raise("gumbel_softmax: logits must be a Tensor, got %s", type(logits)) end
  local noise = -accel.empty_like(logits):exponential_():log()
  local soft = ((logits + noise) / (a.tau or 1)):softmax(a.dim or -1)
  if not a.hard then return soft end
  local _, index = soft:max(a.dim or -1, true)
  local one_hot = accel.zeros_like(logits):scatter(a.dim or -1, index, 1.0)
  return one_hot - soft:detach() + soft
end
F.gumbel_softmax = FUNCTIONS.gumbel_softmax

-- rrelu(x, [lower = 1/8], [upper = 1/3], [training = false], [inplace = false]): x where x > 0, else
-- a x with a drawn uniformly from [lower, upper] per element in training (accel's generator), else
-- (lower + upper) / 2 (x = 0 takes the slope, as PyTorch's x <= 0: its gradient there is a)
function F.rrelu(x, ...)
  local a = torch_args("rrelu", {"lower:number", "upper:number", "training:bool", "inplace:bool"}, ...)
  if not accel.is_tensor(x) then raise("rrelu: input must be a Tensor, got %s", type(x)) end
  local lower, upper = a.lower or 1 / 8, a.upper or 1 / 3
  if lower > upper then raise("rrelu: Lower bound should be less than or equal to the upper bound") end
  local slope = a.training and accel.empty_like(x):uniform_(lower, upper) or (lower + upper) / 2
  local y = accel.where(x:gt(0), x, x * slope)
  return a.inplace and x:copy_(y) or y
end

-- alpha_dropout(x, [p = 0.5], [training = false], [inplace = false]): dropout that keeps SELU's
-- mean and variance: dropped elements set to -lambda alpha, then an affine map a x + b;
-- feature_alpha_dropout (same arguments) drops whole channels: one draw per (N, C) entry,
-- shared by the dims after them
local SELU_NEG = -1.7580993408473766 -- -lambda alpha of SELU
local function alpha_dropout(op, per_channel, x, ...)
  local a = torch_args(op, {"p:number", "training:bool", "inplace:bool"}, ...)
  local p = F._dropout_p(op, a.p)
  if not a.training or p == 0 or x:numel() == 0 then return x end
  if p == 1 then return x * 0 end
  if per_channel and x:dim() < 2 then raise("%s: Feature dropout requires at least 2 dimensions in the input", op) end
  local draws = x
  if per_channel then
    local shape = {x:size(1), x:size(2)}
    for d = 3, x:dim() do shape[d] = 1 end
    draws = accel.empty(shape, {dtype = x.dtype, device = x.device})
  end
  local keep = accel.empty_like(draws):bernoulli_(1 - p)
  local scale = ((1 - p) * (1 + p * SELU_NEG * SELU_NEG)) ^ -0.5
  local y = (x * keep + (1 - keep) * SELU_NEG) * scale + (-scale * SELU_NEG * p)
  return a.inplace and x:copy_(y) or y
end
function F.alpha_dropout(x, ...) return alpha_dropout("alpha_dropout", false, x, ...) end
function F.feature_alpha_dropout(x, ...) return alpha_dropout("feature_alpha_dropout", true, x, ...) end

-- RReLU([lower], [upper], [inplace]); AlphaDropout([p = 0.5], [inplace])
local RReLU = export_class(M, "RReLU")
function RReLU:init(...)
  local a = torch_args("RReLU", {"lower:number", "upper:number", "inplace:bool"}, ...)
  self.lower, self.upper, self.inplace = a.lower or 1 / 8, a.upper or 1 / 3, a.inplace == true
end
function RReLU:forward(x) return F.rrelu(x, self.lower, self.upper, self.training, self.inplace) end
function RReLU:extra_repr()
  return ("lower=%s, upper=%s%s"):format(py(self.lower), py(self.upper), self.inplace and ", inplace=True" or "")
end

-- AlphaDropout / FeatureAlphaDropout([p = 0.5], [inplace])
for name, fn in pairs({AlphaDropout = "alpha_dropout", FeatureAlphaDropout = "feature_alpha_dropout"}) do
  local cls = export_class(M, name)
  function cls:init(...)
    local a = torch_args(name, {"p:number", "inplace:bool"}, ...)
    self.p, self.inplace = F._dropout_p(name, a.p), a.inplace == true
  end
  function cls:forward(x) return F[fn](x, self.p, self.training, self.inplace) end
  function cls:extra_repr() return ("p=%s, inplace=%s"):format(py(self.p), py(self.inplace)) end
end

-- Softmax2d(): softmax over the channels (dim -3) of a (N, C, H, W) or (C, H, W) input
local Softmax2d = export_class(M, "Softmax2d")
function Softmax2d:forward(x)
  if not accel.is_tensor(x) or (x:dim() ~= 3 and x:dim() ~= 4) then
    raise("Softmax2d: expected an input of 3 or 4 dims, got %s", accel.is_tensor(x) and (x:dim() .. "D") or type(x))
  end
  return x:softmax(-3)
end

return M
