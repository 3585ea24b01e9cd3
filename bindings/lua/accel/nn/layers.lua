-- accel.nn.layers: the standard layers (Linear, Embedding, LayerNorm,
-- RMSNorm, Dropout, Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d,
-- Dropout2d, Flatten, Unflatten, Identity) and the
-- activation modules, each with PyTorch's parameters, default
-- initialisation and printed form. Forward passes go through
-- accel.nn.functional. Keyword arguments go in a trailing options table
-- (nn.Linear(4, 2, {bias = false}), nn.Conv2d(1, 32, 3, {padding = 1}));
-- dims are 1-based (nn.Softmax(2) is PyTorch's Softmax(dim=1); nn.Flatten()
-- flattens dims 2..-1 like PyTorch's flatten(1)); token / padding ids are
-- 0-based data (Embedding's padding_idx).
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local init = require("accel.nn.initializers")

local Parameter, raise, py, export_class = base.Parameter, base.raise, base.pyrepr, base.export_class
local check_options = base.check_options
local torch_args = require("accel.util").torch_args

local M = {}

local function check_size(v, what, name) return base.check_integer(v, what, name, 0) end

-- factory options for new parameters: {dtype=, device=}
local function empty(shape, o) return accel.empty(shape, {dtype = o.dtype, device = o.device}) end

local function is_int(x) return type(x) == "number" and math.floor(x) == x end

-- an integer or a pair {h, w} of integers -> {h, w}
local function pair(v, what, name)
  base.not_in_options(v, what, name)
  local p = type(v) == "number" and {v, v} or v
  if type(p) ~= "table" or #p ~= 2 or not is_int(p[1]) or not is_int(p[2]) then
    raise("%s: %s must be an integer or a pair {h, w} of integers, got %s", what, name, py(v))
  end
  return {p[1], p[2]}
end

-- a pair as F takes it: one number when both agree
local function compact(p)
  if type(p) == "table" and p[1] == p[2] then return p[1] end
  return p
end

local function bias_bound(weight)
  local fan_in = init._calculate_fan_in_and_fan_out(weight)
  return fan_in > 0 and 1 / math.sqrt(fan_in) or 0
end

-- ---- Linear ----

local Linear = export_class(M, "Linear")

-- Linear(in_features, out_features, [bias = true], [device], [dtype]), positionally as PyTorch's
-- or in a last options table
function Linear:init(in_features, out_features, ...)
  local o = torch_args("Linear", {"bias:bool", "device", "dtype"}, ...)
  self.in_features = check_size(in_features, "Linear", "in_features")
  self.out_features = check_size(out_features, "Linear", "out_features")
  self.weight = Parameter(empty({out_features, in_features}, o))
  if o.bias ~= false then self.bias = Parameter(empty({out_features}, o))
  else self:register_parameter("bias", nil) end
  self:reset_parameters()
end

-- weight: kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)); bias the same bound
function Linear:reset_parameters()
  init.kaiming_uniform_(self.weight, {a = math.sqrt(5)})
  if self.bias ~= nil then
    local b = bias_bound(self.weight)
    init.uniform_(self.bias, -b, b)
  end
end

function Linear:forward(x)
  if self.fp8_meta ~= nil then -- given by Accelerator{mixed_precision = "fp8"} (accel.fp8)
    local y = require("accel.fp8").linear_forward(self, x)
    if y ~= nil then return y end
  end
  return F.linear(x, self.weight, self.bias)
end

function Linear:extra_repr()
  return ("in_features=%d, out_features=%d, bias=%s"):format(self.in_features, self.out_features, py(self.bias ~= nil))
end

-- ---- Embedding ----

local Embedding = export_class(M, "Embedding")

-- Embedding(num_embeddings, embedding_dim, [padding_idx], [max_norm], [norm_type], [scale_grad_by_freq],
--   [sparse], [_weight], [_freeze], [device], [dtype]), the optional ones positionally or in an options table
function Embedding:init(num_embeddings, embedding_dim, ...)
  local o = torch_args("Embedding", {"padding_idx", "max_norm", "norm_type", "scale_grad_by_freq:bool", "sparse:bool",
    "_weight:tensor", "_freeze:bool", "device", "dtype"}, ...)
  for _, k in ipairs({"max_norm", "scale_grad_by_freq", "sparse"}) do
    if o[k] then raise("Embedding: option %s is not supported", k) end
  end
  self.num_embeddings = check_size(num_embeddings, "Embedding", "num_embeddings")
  self.embedding_dim = check_size(embedding_dim, "Embedding", "embedding_dim")
  self.padding_idx = F._padding_index("Embedding", num_embeddings, o.padding_idx)
  if o._weight ~= nil then
    local w = o._weight
    if w:dim() ~= 2 or w:size(1) ~= num_embeddings or w:size(2) ~= embedding_dim then
      raise("Embedding: _weight has shape %s, expected {%d, %d}", tostring(w.shape), num_embeddings, embedding_dim)
    end
    self.weight = Parameter(w, o._freeze ~= true)
  else
    self.weight = Parameter(empty({num_embeddings, embedding_dim}, o))
    self:reset_parameters()
  end
end

-- weight ~ N(0, 1), the padding row zero
function Embedding:reset_parameters()
  init.normal_(self.weight)
  if self.padding_idx then accel.no_grad(function() self.weight[self.padding_idx + 1]:fill_(0) end) end
end

-- Embedding.from_pretrained(weight, [{freeze = true, padding_idx =}])
function Embedding.from_pretrained(embeddings, o)
  o = check_options("Embedding.from_pretrained", o,
    {"freeze", "padding_idx", "max_norm", "scale_grad_by_freq", "sparse"})
  if not accel.is_tensor(embeddings) or embeddings:dim() ~= 2 then
    raise("Embedding.from_pretrained: embeddings must be a 2-D tensor")
  end
  return Embedding(embeddings:size(1), embeddings:size(2),
    {_weight = embeddings, _freeze = o.freeze ~= false, padding_idx = o.padding_idx, max_norm = o.max_norm,
     scale_grad_by_freq = o.scale_grad_by_freq, sparse = o.sparse})
end

function Embedding:forward(input) return F.embedding(input, self.weight, {padding_idx = self.padding_idx}) end

function Embedding:extra_repr()
  local s = ("%d, %d"):format(self.num_embeddings, self.embedding_dim)
  if self.padding_idx then s = s .. ", padding_idx=" .. self.padding_idx end
  return s
end

-- ---- LayerNorm / RMSNorm ----

local function shape_list(s, what)
  base.not_in_options(s, what, "normalized_shape")
  if type(s) == "number" then s = {s} end
  if type(s) ~= "table" or #s == 0 then raise("%s: normalized_shape must be an integer or a list of integers", what) end
  local out = {}
  for i, v in ipairs(s) do out[i] = check_size(v, what, "normalized_shape") end
  return out
end

local LayerNorm = export_class(M, "LayerNorm")

-- LayerNorm(normalized_shape, [eps = 1e-5], [elementwise_affine = true], [bias = true], [device], [dtype]),
-- positionally or in an options table
function LayerNorm:init(normalized_shape, ...)
  local o = torch_args("LayerNorm", {"eps:number", "elementwise_affine:bool", "bias:bool", "device", "dtype"}, ...)
  self.normalized_shape = shape_list(normalized_shape, "LayerNorm")
  self.eps = o.eps or 1e-5
  self.elementwise_affine = o.elementwise_affine ~= false
  if self.elementwise_affine then
    self.weight = Parameter(empty(self.normalized_shape, o))
    if o.bias ~= false then self.bias = Parameter(empty(self.normalized_shape, o))
    else self:register_parameter("bias", nil) end
  else
    self:register_parameter("weight", nil)
    self:register_parameter("bias", nil)
  end
  self:reset_parameters()
end

function LayerNorm:reset_parameters()
  if self.weight ~= nil then init.ones_(self.weight) end
  if self.bias ~= nil then init.zeros_(self.bias) end
end

function LayerNorm:forward(x) return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps) end

function LayerNorm:extra_repr()
  return ("%s, eps=%s, elementwise_affine=%s, bias=%s"):format(py(self.normalized_shape), py(self.eps),
    py(self.elementwise_affine), py(self.bias ~= nil))
end

local RMSNorm = export_class(M, "RMSNorm")

-- RMSNorm(normalized_shape, [eps = nil (the dtype's machine epsilon)], [elementwise_affine = true], [device],
-- [dtype]), positionally or in an options table
function RMSNorm:init(normalized_shape, ...)
  local o = torch_args("RMSNorm", {"eps:number", "elementwise_affine:bool", "device", "dtype"}, ...)
  self.normalized_shape = shape_list(normalized_shape, "RMSNorm")
  self.eps = o.eps
  self.elementwise_affine = o.elementwise_affine ~= false
  if self.elementwise_affine then self.weight = Parameter(empty(self.normalized_shape, o))
  else self:register_parameter("weight", nil) end
  self:reset_parameters()
end

function RMSNorm:reset_parameters()
  if self.weight ~= nil then init.ones_(self.weight) end
end

function RMSNorm:forward(x) return F.rms_norm(x, self.normalized_shape, self.weight, self.eps) end

function RMSNorm:extra_repr()
  return ("%s, eps=%s, elementwise_affine=%s"):format(py(self.normalized_shape), py(self.eps), py(self.elementwise_affine))
end

-- ---- Dropout ----

local Dropout = export_class(M, "Dropout")

-- Dropout([p = 0.5], [inplace = false]), positionally or in an options table
function Dropout:init(...)
  local o = torch_args("Dropout", {"p:number", "inplace:bool"}, ...)
  self.p = F._dropout_p("Dropout", o.p)
  self.inplace = o.inplace == true
end

function Dropout:forward(x)
  local y = F.dropout(x, self.p, {training = self.training})
  if self.inplace and y ~= x then return x:copy_(y) end
  return y
end

function Dropout:extra_repr() return ("p=%s, inplace=%s"):format(py(self.p), py(self.inplace)) end

-- ---- Conv2d / MaxPool2d (through F.conv2d / F.max_pool2d) ----

local Conv2d = export_class(M, "Conv2d")
local CONV_ARGS = {"stride", "padding", "dilation", "groups:int", "bias:bool", "padding_mode:string", "device", "dtype"}
M._CONV_ARGS = CONV_ARGS

-- A convolution's padding_mode, one of PyTorch's four. Under any but
-- "zeros" the forward pads with F.pad in that mode, then convolves without
-- padding, as PyTorch's _ConvNd does.
local PADDING_MODES = {zeros = true, reflect = true, replicate = true, circular = true}
function M._padding_mode(name, mode)
  mode = mode or "zeros"
  if not PADDING_MODES[mode] then
    raise("%s: padding_mode must be one of 'zeros', 'reflect', 'replicate', 'circular', got '%s'", name, tostring(mode))
  end
  return mode
end

-- F.pad's amounts (last dim first, each side) for a padding_mode other than
-- "zeros": padding a list per spatial dim (first dim first), or "valid"
-- (none) / "same" (dilation (k - 1) in all, the smaller half first)
function M._mode_pads(padding, kernel, dilation)
  local pads = {}
  for i = #kernel, 1, -1 do
    local lo, hi
    if padding == "valid" then lo, hi = 0, 0
    elseif padding == "same" then
      local total = dilation[i] * (kernel[i] - 1)
      lo = math.floor(total / 2)
      hi = total - lo
    else lo, hi = padding[i], padding[i] end
    pads[#pads + 1], pads[#pads + 2] = lo, hi
  end
  return pads
end

-- Conv2d(in_channels, out_channels, kernel_size, [stride = 1], [padding = 0], [dilation = 1], [groups = 1],
--   [bias = true], [padding_mode = "zeros"], [device], [dtype]), the optional ones positionally or in an
-- options table; weight {out, in / groups, kh, kw}
function Conv2d:init(in_channels, out_channels, kernel_size, ...)
  local o = torch_args("Conv2d", CONV_ARGS, ...)
  self.in_channels = check_size(in_channels, "Conv2d", "in_channels")
  self.out_channels = check_size(out_channels, "Conv2d", "out_channels")
  self.kernel_size = pair(kernel_size, "Conv2d", "kernel_size")
  self.stride = pair(o.stride or 1, "Conv2d", "stride")
  local padding = o.padding or 0
  if type(padding) == "string" then
    if padding ~= "same" and padding ~= "valid" then
      raise("Conv2d: invalid padding string '%s', should be one of 'valid', 'same'", padding)
    end
    if padding == "same" and (self.stride[1] ~= 1 or self.stride[2] ~= 1) then
      raise("Conv2d: padding='same' is not supported for strided convolutions")
    end
    self.padding = padding
  else
    self.padding = pair(padding, "Conv2d", "padding")
  end
  self.dilation = pair(o.dilation or 1, "Conv2d", "dilation")
  self.groups = check_size(o.groups or 1, "Conv2d", "groups")
  self.padding_mode = M._padding_mode("Conv2d", o.padding_mode)
  if self.groups < 1 or in_channels % self.groups ~= 0 then raise("Conv2d: in_channels (%d) must be divisible by groups (%d)", in_channels, self.groups) end
  if out_channels % self.groups ~= 0 then raise("Conv2d: out_channels (%d) must be divisible by groups (%d)", out_channels, self.groups) end
  local ks = self.kernel_size
  self.weight = Parameter(empty({out_channels, math.floor(in_channels / self.groups), ks[1], ks[2]}, o))
  if o.bias ~= false then self.bias = Parameter(empty({out_channels}, o))
  else self:register_parameter("bias", nil) end
  self:reset_parameters()
end

Conv2d.reset_parameters = Linear.reset_parameters

function Conv2d:forward(x)
  if not F.conv2d then raise("Conv2d: accel.nn.functional.conv2d is not available in this build") end
  local padding = compact(self.padding)
  if self.padding_mode ~= "zeros" then
    x, padding = F.pad(x, M._mode_pads(self.padding, self.kernel_size, self.dilation), self.padding_mode), 0
  end
  return F.conv2d(x, self.weight, self.bias, {stride = compact(self.stride), padding = padding,
                                              dilation = compact(self.dilation), groups = self.groups})
end

local function all_equal(p, v) return p[1] == v and p[2] == v end

function Conv2d:extra_repr()
  local s = ("%d, %d, kernel_size=%s, stride=%s"):format(self.in_channels, self.out_channels, py(self.kernel_size), py(self.stride))
  if type(self.padding) == "string" then s = s .. ", padding=" .. self.padding
  elseif not all_equal(self.padding, 0) then s = s .. ", padding=" .. py(self.padding) end
  if not all_equal(self.dilation, 1) then s = s .. ", dilation=" .. py(self.dilation) end
  if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
  if self.bias == nil then s = s .. ", bias=False" end
  if self.padding_mode ~= "zeros" then s = s .. ", padding_mode=" .. self.padding_mode end
  return s
end

local MaxPool2d = export_class(M, "MaxPool2d")
local MAX_POOL_ARGS = {"stride", "padding", "dilation", "return_indices:bool", "ceil_mode:bool"}

-- MaxPool2d(kernel_size, [stride = kernel_size], [padding = 0], [dilation = 1],
--   [return_indices = false], [ceil_mode = false]), positionally or in an options
-- table; with return_indices the forward returns values, indices (0-based flat
-- positions in each plane)
function MaxPool2d:init(kernel_size, ...)
  local o = torch_args("MaxPool2d", MAX_POOL_ARGS, ...)
  self.kernel_size = kernel_size
  self.stride = o.stride or kernel_size
  self.padding = o.padding or 0
  self.dilation = o.dilation or 1
  for _, k in ipairs({"kernel_size", "stride", "padding", "dilation"}) do pair(self[k], "MaxPool2d", k) end
  self.return_indices = o.return_indices == true
  self.ceil_mode = o.ceil_mode == true
end

function MaxPool2d:forward(x)
  if not F.max_pool2d then raise("MaxPool2d: accel.nn.functional.max_pool2d is not available in this build") end
  return F.max_pool2d(x, self.kernel_size, {stride = self.stride, padding = self.padding, dilation = self.dilation,
                                            ceil_mode = self.ceil_mode, return_indices = self.return_indices})
end

function MaxPool2d:extra_repr()
  return ("kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s"):format(py(self.kernel_size),
    py(self.stride), py(self.padding), py(self.dilation), py(self.ceil_mode))
end

-- ---- shape modules ----

local Flatten = export_class(M, "Flatten")

-- Flatten([start_dim = 2], [end_dim = -1]) or Flatten({start_dim =, end_dim =}); 1-based dims
function Flatten:init(start_dim, end_dim)
  if type(start_dim) == "table" then
    local o = check_options("Flatten", start_dim, {"start_dim", "end_dim"})
    start_dim, end_dim = o.start_dim, o.end_dim
  end
  self.start_dim = start_dim or 2
  self.end_dim = end_dim or -1
end

function Flatten:forward(x) return x:flatten(self.start_dim, self.end_dim) end

function Flatten:extra_repr() return ("start_dim=%d, end_dim=%d"):format(self.start_dim, self.end_dim) end

local Unflatten = export_class(M, "Unflatten")

-- Unflatten(dim, unflattened_size): dim (1-based) becomes the sizes given
function Unflatten:init(dim, unflattened_size)
  if type(dim) ~= "number" or type(unflattened_size) ~= "table" or #unflattened_size == 0 then
    raise("Unflatten: expected (dim, {sizes...}), got (%s, %s)", type(dim), type(unflattened_size))
  end
  local inferred = 0
  for _, s in ipairs(unflattened_size) do
    if s == -1 then inferred = inferred + 1 elseif not is_int(s) or s < 0 then
      raise("Unflatten: unflattened_size must hold non-negative integers (one may be -1), got %s", py(unflattened_size))
    end
  end
  if inferred > 1 then raise("Unflatten: only one size can be -1, got %s", py(unflattened_size)) end
  self.dim, self.unflattened_size = dim, unflattened_size
end

-- the sizes for a dim of n elements, the -1 (if any) inferred; nil when they cannot make n
local function unflatten_sizes(sizes, n)
  local known, free = 1, nil
  for i, s in ipairs(sizes) do
    if s == -1 then free = i else known = known * s end
  end
  if not free then return known == n and sizes or nil end
  if known == 0 or n % known ~= 0 then return nil end
  local out = {}
  for i, s in ipairs(sizes) do out[i] = s end
  out[free] = math.floor(n / known)
  return out
end

function Unflatten:forward(x)
  local nd = x:dim()
  local d = self.dim < 0 and nd + self.dim + 1 or self.dim
  if d < 1 or d > nd then raise("Unflatten: dim %d is out of range for a %d-d input", self.dim, nd) end
  local shape = {}
  for i = 1, d - 1 do shape[#shape + 1] = x:size(i) end
  local sizes = unflatten_sizes(self.unflattened_size, x:size(d))
  if not sizes then
    raise("Unflatten: sizes %s don't multiply up to the size of dim %d (%d) of the input, shape %s",
      py(self.unflattened_size), d, x:size(d), tostring(x.shape))
  end
  for _, s in ipairs(sizes) do shape[#shape + 1] = s end
  for i = d + 1, nd do shape[#shape + 1] = x:size(i) end
  return x:reshape(shape)
end

function Unflatten:extra_repr() return ("dim=%d, unflattened_size=%s"):format(self.dim, py(self.unflattened_size)) end

local Identity = export_class(M, "Identity")
function Identity:init() end -- accepts and ignores any arguments, as PyTorch's
function Identity:forward(x) return x end

-- ---- AvgPool2d / AdaptiveAvgPool2d / Dropout2d ----

local AvgPool2d = export_class(M, "AvgPool2d")

-- AvgPool2d(kernel_size, [stride = kernel_size], [padding = 0], [ceil_mode = false],
--   [count_include_pad = true], [divisor_override]), positionally or in an options table
function AvgPool2d:init(kernel_size, ...)
  local o = torch_args("AvgPool2d", {"stride", "padding", "ceil_mode:bool", "count_include_pad:bool",
    "divisor_override:int"}, ...)
  self.kernel_size, self.stride, self.padding = kernel_size, o.stride or kernel_size, o.padding or 0
  for _, k in ipairs({"kernel_size", "stride", "padding"}) do pair(self[k], "AvgPool2d", k) end
  self.ceil_mode, self.count_include_pad = o.ceil_mode == true, o.count_include_pad ~= false
  self.divisor_override = o.divisor_override
end

function AvgPool2d:forward(x)
  return F.avg_pool2d(x, self.kernel_size, {stride = self.stride, padding = self.padding, ceil_mode = self.ceil_mode,
    count_include_pad = self.count_include_pad, divisor_override = self.divisor_override})
end

function AvgPool2d:extra_repr()
  return ("kernel_size=%s, stride=%s, padding=%s"):format(py(self.kernel_size), py(self.stride), py(self.padding))
end

local AdaptiveAvgPool2d = export_class(M, "AdaptiveAvgPool2d")

-- AdaptiveAvgPool2d(output_size): an integer or {h, w}
function AdaptiveAvgPool2d:init(output_size) self.output_size = output_size end
function AdaptiveAvgPool2d:forward(x) return F.adaptive_avg_pool2d(x, self.output_size) end
-- {nil, 3} prints as PyTorch's (None, 3)
function AdaptiveAvgPool2d:extra_repr() return "output_size=" .. base.size_repr(self.output_size, 2) end

-- Dropout1d / Dropout2d / Dropout3d([p = 0.5], [{inplace = false}]) or ({p =, inplace =}): whole channels
for n = 1, 3 do
  local name, fn = ("Dropout%dd"):format(n), F[("dropout%dd"):format(n)]
  local cls = export_class(M, name)
  function cls:init(...)
    local a = require("accel.util").torch_args(name, {"p:number", "inplace:bool"}, ...)
    self.p, self.inplace = F._dropout_p(name, a.p), a.inplace == true
  end
  function cls:forward(x) return fn(x, self.p, self.training, self.inplace) end
  function cls:extra_repr() return ("p=%s, inplace=%s"):format(py(self.p), py(self.inplace)) end
end

-- ---- activations ----

-- A module with no parameters whose forward is fn(self, x).
local function activation(name, fn, extra)
  local cls = export_class(M, name)
  cls.forward = fn
  if extra then cls.extra_repr = extra end
  return cls
end

local function inplace_repr(self) return self.inplace and "inplace=True" or "" end
local function inplace_init(name)
  return function(self, ...)
    self.inplace = torch_args(name, {"inplace:bool"}, ...).inplace == true
  end
end

-- init of a module PyTorch builds without arguments: any argument is refused
local function no_args_init(name)
  return function(_, ...) torch_args(name, {}, ...) end
end

activation("ReLU", function(self, x) return self.inplace and x:relu_() or F.relu(x) end, inplace_repr).init =
  inplace_init("ReLU")
activation("SiLU", function(self, x) return self.inplace and x:silu_() or F.silu(x) end, inplace_repr).init =
  inplace_init("SiLU")
activation("Tanh", function(_, x) return F.tanh(x) end).init = no_args_init("Tanh")
activation("Sigmoid", function(_, x) return F.sigmoid(x) end).init = no_args_init("Sigmoid")

-- GELU([{approximate = "none" | "tanh"}]) (a plain string is accepted too)
local GELU = activation("GELU", function(self, x) return F.gelu(x, {approximate = self.approximate}) end,
  function(self) return "approximate=" .. py(self.approximate) end)
function GELU:init(...)
  local a = torch_args("GELU", {"approximate:string"}, ...).approximate or "none"
  if a ~= "none" and a ~= "tanh" then raise("GELU: approximate must be 'none' or 'tanh', got '%s'", tostring(a)) end
  self.approximate = a
end

-- LeakyReLU([negative_slope = 0.01], [inplace = false]), positionally or in an options table
local LeakyReLU = activation("LeakyReLU", function(self, x)
    if self.inplace then return x:leaky_relu_(self.negative_slope) end
    return F.leaky_relu(x, self.negative_slope)
  end,
  function(self)
    return "negative_slope=" .. py(self.negative_slope) .. (self.inplace and ", inplace=True" or "")
  end)
function LeakyReLU:init(...)
  local o = torch_args("LeakyReLU", {"negative_slope:number", "inplace:bool"}, ...)
  self.negative_slope = o.negative_slope or 0.01
  self.inplace = o.inplace == true
end

activation("LogSigmoid", function(_, x) return F.logsigmoid(x) end).init = no_args_init("LogSigmoid")

-- Softplus([beta = 1], [threshold = 20]) or Softplus({beta =, threshold =})
local Softplus = activation("Softplus", function(self, x) return F.softplus(x, self.beta, self.threshold) end,
  function(self) return ("beta=%s, threshold=%s"):format(py(self.beta), py(self.threshold)) end)
function Softplus:init(...)
  local a = require("accel.util").torch_args("Softplus", {"beta:number", "threshold:number"}, ...)
  self.beta, self.threshold = a.beta or 1.0, a.threshold or 20.0
end

-- ELU([alpha = 1], [inplace = false]) or ELU({alpha =, inplace =})
local ELU = activation("ELU", function(self, x) return F.elu(x, self.alpha, self.inplace) end,
  function(self) return "alpha=" .. py(self.alpha) .. (self.inplace and ", inplace=True" or "") end)
function ELU:init(...)
  local a = require("accel.util").torch_args("ELU", {"alpha:number", "inplace:bool"}, ...)
  self.alpha, self.inplace = a.alpha or 1.0, a.inplace == true
end

-- Softmax(dim) / LogSoftmax(dim), dim 1-based, or {dim =}
local function dim_init(name)
  return function(self, ...)
    local dim = torch_args(name, {"dim:int"}, ...).dim
    if type(dim) ~= "number" then raise("%s: dim must be given (e.g. nn.%s(-1)), got %s", name, name, type(dim)) end
    self.dim = dim
  end
end
local function dim_repr(self) return "dim=" .. self.dim end

activation("Softmax", function(self, x) return F.softmax(x, self.dim) end, dim_repr).init = dim_init("Softmax")
activation("LogSoftmax", function(self, x) return F.log_softmax(x, self.dim) end, dim_repr).init = dim_init("LogSoftmax")

return M
