-- accel.nn.volumetric: the 3-D layers over (N, C, D, H, W): F.conv3d /
-- nn.Conv3d, F.max_pool3d / nn.MaxPool3d, F.avg_pool3d / nn.AvgPool3d and
-- F.adaptive_avg_pool3d / nn.AdaptiveAvgPool3d, built on their 2-D
-- versions: the depth folded into the batch, one 2-D op per kernel depth
-- offset over every depth-stride-th slice, then combined along the depth
-- (a sum for the convolution, a maximum or mean for the pools). So autograd
-- comes with them; PyTorch's arguments, weights, initialisation and printed
-- forms. Loaded on first use of one of their names.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local layers = require("accel.nn.layers")
local util = require("accel.util")

local raise, py, export_class = base.raise, base.pyrepr, base.export_class

local M = {}
local FUNCTIONS = {}

local function triple(op, name, v, low) return base.int_list(op, name, v, 3, low) end

-- x (N, C, D, H, W) or (C, D, H, W) as a batched (N, C, D, H, W)
local function volumes(op, x)
  if not accel.is_tensor(x) or (x:dim() ~= 4 and x:dim() ~= 5) then
    raise("%s: expected input of shape (N, C, D, H, W) or (C, D, H, W), got %s", op,
      accel.is_tensor(x) and tostring(x.shape) or type(x))
  end
  return x:dim() == 4 and x:unsqueeze(1) or x
end

-- slices offset, offset + step, ... (count of them) along the depth of x (N, C, D, H, W), folded
-- into the batch: (N count, C, H, W)
local function depth_slices(x, offset, step, count)
  local ids = accel.arange(offset, offset + step * (count - 1) + 1, step, {device = x.device})
  local s = x:index_select(3, ids) -- (N, C, count, H, W)
  return s:transpose(2, 3):reshape({x:size(1) * count, x:size(2), x:size(4), x:size(5)})
end

-- y (N count, C', H', W') back to (N, C', count, H', W')
local function unfold_depth(y, n, count)
  return y:reshape({n, count, y:size(2), y:size(3), y:size(4)}):transpose(2, 3)
end

local function out_len(op, len, k, s, p, d)
  local o = math.floor((len + 2 * p - d * (k - 1) - 1) / s) + 1
  if o < 1 then raise("%s: the kernel (%d, dilation %d) is larger than the padded depth %d", op, k, d, len + 2 * p) end
  return o
end

-- conv3d(input, weight (out, in / groups, kd, kh, kw), [bias], [stride = 1], [padding = 0], [dilation = 1],
-- [groups = 1]), positionally or by name
function FUNCTIONS.conv3d(input, weight, ...)
  local op = "conv3d"
  local a = util.torch_args(op, {"bias:tensor", "stride", "padding", "dilation", "groups:int"}, ...)
  local x = volumes(op, input)
  if not accel.is_tensor(weight) or weight:dim() ~= 5 then
    raise("%s: weight must be 5-D (out, in / groups, kd, kh, kw), got %s", op, accel.is_tensor(weight) and
      tostring(weight.shape) or type(weight))
  end
  local s, p, d = triple(op, "stride", a.stride or 1, 1), triple(op, "padding", a.padding or 0, 0),
    triple(op, "dilation", a.dilation or 1, 1)
  local kd = weight:size(3)
  local xp = p[1] > 0 and F.pad(x, {0, 0, 0, 0, p[1], p[1]}) or x
  local count = out_len(op, x:size(3), kd, s[1], p[1], d[1])
  local y
  for k = 0, kd - 1 do
    local part = F.conv2d(depth_slices(xp, k * d[1], s[1], count), weight:select(3, k + 1), nil,
      {stride = {s[2], s[3]}, padding = {p[2], p[3]}, dilation = {d[2], d[3]}, groups = a.groups or 1})
    y = y and y + part or part
  end
  y = unfold_depth(y, x:size(1), count)
  if a.bias ~= nil then y = y + a.bias:reshape({1, -1, 1, 1, 1}) end
  return input:dim() == 4 and y:squeeze(1) or y
end

-- the pooled depth slices of a 3-D pool: each kernel depth offset's 2-D pool, combined by combine(acc, part)
local function pool3d(op, input, kernel_size, a, pool2d, combine, finish)
  local x = volumes(op, input)
  local k = triple(op, "kernel_size", kernel_size, 1)
  local s = a.stride == nil and k or triple(op, "stride", a.stride, 1)
  local p = triple(op, "padding", a.padding or 0, 0)
  local count = out_len(op, x:size(3), k[1], s[1], p[1], 1)
  local xp = p[1] > 0 and F.pad(x, {0, 0, 0, 0, p[1], p[1]}, "constant", a.pad_value or 0) or x
  local y
  for off = 0, k[1] - 1 do
    local part = pool2d(depth_slices(xp, off, s[1], count), {k[2], k[3]}, {s[2], s[3]}, {p[2], p[3]})
    y = y and combine(y, part) or part
  end
  y = unfold_depth(finish and finish(y, k) or y, x:size(1), count)
  return input:dim() == 4 and y:squeeze(1) or y
end

-- max_pool3d(input, kernel_size, [stride = kernel_size], [padding = 0]) (no dilation, ceil_mode or indices)
function FUNCTIONS.max_pool3d(input, kernel_size, ...)
  local a = util.torch_args("max_pool3d", {"stride", "padding", "dilation", "ceil_mode:bool", "return_indices:bool"}, ...)
  if (a.dilation ~= nil and a.dilation ~= 1) or a.ceil_mode or a.return_indices then
    raise("max_pool3d: dilation, ceil_mode and return_indices are not supported")
  end
  a.pad_value = -math.huge
  -- a later depth wins only when larger (or NaN): on a tie the first keeps the value and the whole
  -- gradient, as PyTorch's kernel (maximum would split the gradient)
  return pool3d("max_pool3d", input, kernel_size, a, function(t, k, s, p)
    return F.max_pool2d(t, k, {stride = s, padding = p})
  end, function(acc, part) return accel.where(part:gt(acc):logical_or(part:isnan()), part, acc) end)
end

-- avg_pool3d(input, kernel_size, [stride = kernel_size], [padding = 0]) (padding counted, as PyTorch's default)
function FUNCTIONS.avg_pool3d(input, kernel_size, ...)
  local a = util.torch_args("avg_pool3d", {"stride", "padding", "ceil_mode:bool", "count_include_pad:bool",
    "divisor_override"}, ...)
  if a.ceil_mode or a.count_include_pad == false or a.divisor_override ~= nil then
    raise("avg_pool3d: ceil_mode, count_include_pad = false and divisor_override are not supported")
  end
  return pool3d("avg_pool3d", input, kernel_size, a, function(t, k, s, p)
    return F.avg_pool2d(t, k, {stride = s, padding = p})
  end, function(acc, part) return acc + part end, function(y, k) return y / k[1] end)
end

-- adaptive_avg_pool3d(input, output_size (an integer or a triple; nil entries keep that size))
function FUNCTIONS.adaptive_avg_pool3d(input, output_size, ...)
  util.no_more("adaptive_avg_pool3d", 2, ...)
  local x = volumes("adaptive_avg_pool3d", input)
  local out = type(output_size) == "table" and output_size or {output_size, output_size, output_size}
  local n_out = out[1] == nil and x:size(3) or out[1]
  if type(n_out) ~= "number" or n_out < 1 then raise("adaptive_avg_pool3d: output_size must be positive integers") end
  local d, cells = x:size(3), {}
  for c = 0, n_out - 1 do -- the depth cells, as the 2-D ones: [floor(c D / n), ceil((c + 1) D / n))
    local lo, hi = math.floor(c * d / n_out), math.ceil((c + 1) * d / n_out)
    cells[c + 1] = x:narrow(3, lo + 1, hi - lo):mean(3, true)
  end
  local y = accel.cat(cells, 3) -- (N, C, n, H, W)
  local planes = y:transpose(2, 3):reshape({-1, y:size(2), y:size(4), y:size(5)})
  local pooled = F.adaptive_avg_pool2d(planes, {out[2], out[3]})
  y = unfold_depth(pooled, x:size(1), n_out)
  return input:dim() == 4 and y:squeeze(1) or y
end

for name, f in pairs(FUNCTIONS) do F[name] = f end

-- ---- modules ----

local Conv3d = export_class(M, "Conv3d")

-- Conv3d(in_channels, out_channels, kernel_size, [stride = 1], [padding = 0], [dilation = 1], [groups = 1],
--   [bias = true], [padding_mode = "zeros"], [{dtype =, device =}])
function Conv3d:init(in_channels, out_channels, kernel_size, ...)
  local a = util.torch_args("Conv3d", {"stride", "padding", "dilation", "groups:int", "bias:bool",
    "padding_mode:string", "dtype", "device"}, ...)
  self.in_channels = base.check_integer(in_channels, "Conv3d", "in_channels", 1)
  self.out_channels = base.check_integer(out_channels, "Conv3d", "out_channels", 1)
  self.kernel_size = triple("Conv3d", "kernel_size", kernel_size, 1)
  self.stride, self.padding = triple("Conv3d", "stride", a.stride or 1, 1), triple("Conv3d", "padding", a.padding or 0, 0)
  self.dilation, self.groups = triple("Conv3d", "dilation", a.dilation or 1, 1), a.groups or 1
  if (a.padding_mode or "zeros") ~= "zeros" then raise("Conv3d: padding_mode '%s' is not supported (only 'zeros')", a.padding_mode) end
  if self.groups < 1 or in_channels % self.groups ~= 0 or out_channels % self.groups ~= 0 then
    raise("Conv3d: in_channels (%d) and out_channels (%d) must be divisible by groups (%d)", in_channels, out_channels,
      self.groups)
  end
  local o, k = {dtype = a.dtype, device = a.device}, self.kernel_size
  self.weight = base.Parameter(accel.empty({out_channels, math.floor(in_channels / self.groups), k[1], k[2], k[3]}, o))
  if a.bias ~= false then self.bias = base.Parameter(accel.empty({out_channels}, o))
  else self:register_parameter("bias", nil) end
  self:reset_parameters()
end

Conv3d.reset_parameters = layers.Linear.reset_parameters

function Conv3d:forward(x)
  return FUNCTIONS.conv3d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
end

Conv3d.extra_repr = base.conv_repr

-- MaxPool3d(kernel_size, [stride = kernel_size], [padding = 0]), AvgPool3d(kernel_size, [stride], [padding])
local MaxPool3d = export_class(M, "MaxPool3d")
function MaxPool3d:init(kernel_size, ...)
  local a = util.torch_args("MaxPool3d", {"stride", "padding"}, ...)
  self.kernel_size, self.stride, self.padding = kernel_size, a.stride == nil and kernel_size or a.stride, a.padding or 0
end
function MaxPool3d:forward(x) return FUNCTIONS.max_pool3d(x, self.kernel_size, self.stride, self.padding) end
function MaxPool3d:extra_repr()
  return ("kernel_size=%s, stride=%s, padding=%s, dilation=1, ceil_mode=False"):format(py(self.kernel_size),
    py(self.stride), py(self.padding))
end

local AvgPool3d = export_class(M, "AvgPool3d")
function AvgPool3d:init(kernel_size, ...)
  local a = util.torch_args("AvgPool3d", {"stride", "padding"}, ...)
  self.kernel_size, self.stride, self.padding = kernel_size, a.stride == nil and kernel_size or a.stride, a.padding or 0
end
function AvgPool3d:forward(x) return FUNCTIONS.avg_pool3d(x, self.kernel_size, self.stride, self.padding) end
function AvgPool3d:extra_repr()
  return ("kernel_size=%s, stride=%s, padding=%s"):format(py(self.kernel_size), py(self.stride), py(self.padding))
end

-- AdaptiveAvgPool3d(output_size)
local AdaptiveAvgPool3d = export_class(M, "AdaptiveAvgPool3d")
function AdaptiveAvgPool3d:init(output_size) self.output_size = output_size end
function AdaptiveAvgPool3d:forward(x) return FUNCTIONS.adaptive_avg_pool3d(x, self.output_size) end
function AdaptiveAvgPool3d:extra_repr() return "output_size=" .. py(self.output_size) end

return M
