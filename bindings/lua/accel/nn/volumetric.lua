-- accel.nn.volumetric: the 3-D layers over (N, C, D, H, W): F.conv3d /
-- nn.Conv3d, F.max_pool3d / nn.MaxPool3d, F.avg_pool3d / nn.AvgPool3d and
-- F.adaptive_avg_pool3d / nn.AdaptiveAvgPool3d, built on their 2-D
-- versions: the depth folded into the batch, one 2-D op per kernel depth
-- offset over every depth-stride-th slice, then combined along the depth
-- (a sum for the convolution, a maximum or mean for the pools). So autograd
-- comes with them; PyTorch's arguments, weights, initialisation and printed
-- forms. The pools' options that path cannot express (dilation, ceil_mode,
-- indices, count_include_pad = false, divisor_override) gather every window
-- with unfold instead. Loaded on first use of one of their names.
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
  local o = base.pooled_len(len, k, s, p, d, false)
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

-- A 3-D pool's geometry over x (N, C, D, H, W): the kernel, stride, padding and dilation triples and the
-- output sizes, with PyTorch's checks
local function pool_geometry(op, x, kernel_size, a)
  local g = {k = triple(op, "kernel_size", kernel_size, 1)}
  g.s = a.stride == nil and g.k or triple(op, "stride", a.stride, 1)
  g.p, g.d = triple(op, "padding", a.padding or 0, 0), triple(op, "dilation", a.dilation or 1, 1)
  g.out = {}
  for i = 1, 3 do
    local eff = g.d[i] * (g.k[i] - 1) + 1
    if g.p[i] > math.floor(eff / 2) then
      raise("%s: padding %s must be at most half of the effective kernel size (kernel_size %s, dilation %s)", op,
        py(g.p), py(g.k), py(g.d))
    end
    g.out[i] = base.pooled_len(x:size(i + 2), g.k[i], g.s[i], g.p[i], g.d[i], a.ceil_mode)
  end
  if g.out[1] < 1 or g.out[2] < 1 or g.out[3] < 1 then
    raise("%s: input of shape %s gives the output size (%d, %d, %d): too small", op, util.shape_str(x), g.out[1],
      g.out[2], g.out[3])
  end
  return g
end

-- the pooled depth slices of a 3-D pool without dilation or ceil mode: each kernel depth offset's 2-D pool,
-- combined by combine(acc, part)
local function pool3d(x, g, pad_value, pool2d, combine, finish)
  local k, s, p, count = g.k, g.s, g.p, g.out[1]
  local xp = p[1] > 0 and F.pad(x, {0, 0, 0, 0, p[1], p[1]}, "constant", pad_value) or x
  local y
  for off = 0, k[1] - 1 do
    local part = pool2d(depth_slices(xp, off, s[1], count), {k[2], k[3]}, {s[2], s[3]}, {p[2], p[3]})
    y = y and combine(y, part) or part
  end
  return unfold_depth(finish and finish(y, k) or y, x:size(1), count)
end

-- Every window of x (N, C, D, H, W) padded with fill: (N, C, oD, oH, oW, kd kh kw), a copy
local function windows(x, g, fill)
  local pads = {}
  for i = 3, 1, -1 do -- F.pad lists the last dim first: left padding, then up to the last window's end
    local reach = (g.out[i] - 1) * g.s[i] + g.d[i] * (g.k[i] - 1) + 1
    pads[#pads + 1], pads[#pads + 2] = g.p[i], math.max(0, reach - x:size(i + 2) - g.p[i])
  end
  local w = F.pad(x, pads, "constant", fill)
  for i = 1, 3 do
    local eff = g.d[i] * (g.k[i] - 1) + 1
    w = w:unfold(i + 2, eff, g.s[i]):narrow(i + 2, 1, g.out[i])
    if g.d[i] > 1 then w = w:index_select(w:dim(), accel.arange(0, eff, g.d[i], {device = x.device})) end
  end
  return w:reshape({x:size(1), x:size(2), g.out[1], g.out[2], g.out[3], -1})
end

-- Per axis i, the input positions (o s - p + j d) of the windows' entries, (out, k), as Lua lists
local function window_positions(g, i)
  local rows = {}
  for o = 0, g.out[i] - 1 do
    local row = {}
    for j = 0, g.k[i] - 1 do row[j + 1] = o * g.s[i] - g.p[i] + j * g.d[i] end
    rows[o + 1] = row
  end
  return rows
end

-- The windows' entries as flat input positions d H W + h W + w, and which lie inside the input:
-- (oD, oH, oW, kd kh kw) each
local function window_indices(x, g)
  local flat, valid = nil, nil
  local scale = {x:size(4) * x:size(5), x:size(5), 1}
  for i = 1, 3 do
    local shape = {1, 1, 1, 1, 1, 1}
    shape[i], shape[i + 3] = g.out[i], g.k[i]
    local pos = accel.tensor(window_positions(g, i), {dtype = accel.int64, device = x.device}):reshape(shape)
    local inside = pos:ge(0):logical_and(pos:lt(x:size(i + 2)))
    flat = flat and flat + pos * scale[i] or pos * scale[i]
    valid = valid and valid:logical_and(inside) or inside
  end
  local shape = {g.out[1], g.out[2], g.out[3], -1}
  return flat:reshape(shape), valid:reshape(shape)
end

-- max_pool3d with dilation, ceil mode or indices: PyTorch's choice in each window (the first maximum in
-- (d, h, w) order; with a NaN, the last NaN) as flat indices, then the values gathered at them, so the
-- gradient goes where PyTorch's does
local function max_pool3d_windows(op, x, g)
  local flat, valid = window_indices(x, g)
  if not valid:any(-1):all():item() then
    raise("%s: a window of input shape %s covers padding only (padding %s, dilation %s)", op, util.shape_str(x),
      py(g.p), py(g.d))
  end
  local win = windows(x:detach(), g, -math.huge) -- (N, C, oD, oH, oW, K)
  local m = win:amax(6, true)
  local first = win:eq(m):logical_and(valid):argmax(6, true)
  local last = win:isnan():flip({6}):argmax(6, true):neg():add(win:size(6) - 1)
  local pick = accel.where(m:isnan(), last, first)
  local n, c = x:size(1), x:size(2)
  local index = flat:expand({n, c, g.out[1], g.out[2], g.out[3], flat:size(4)}):gather(6, pick):squeeze(6)
  local values = x:reshape({n, c, -1}):gather(3, index:reshape({n, c, -1})):reshape(index.shape)
  return values, index
end

-- max_pool3d(input, kernel_size, [stride = kernel_size], [padding = 0], [dilation = 1], [ceil_mode = false],
-- [return_indices = false]) -> values[, int64 indices d H W + h W + w]
function FUNCTIONS.max_pool3d(input, kernel_size, ...)
  local op = "max_pool3d"
  local a = util.torch_args(op, {"stride", "padding", "dilation", "ceil_mode:bool", "return_indices:bool"}, ...)
  local x = volumes(op, input)
  local g = pool_geometry(op, x, kernel_size, a)
  local y, indices
  if a.ceil_mode or a.return_indices or g.d[1] > 1 or g.d[2] > 1 or g.d[3] > 1 then
    y, indices = max_pool3d_windows(op, x, g)
  else
    -- a later depth wins only when larger (or NaN): on a tie the first keeps the value and the whole
    -- gradient, as PyTorch's kernel (maximum would split the gradient)
    y = pool3d(x, g, -math.huge, function(t, k, s, p)
      return F.max_pool2d(t, k, {stride = s, padding = p})
    end, function(acc, part) return accel.where(part:gt(acc):logical_or(part:isnan()), part, acc) end)
  end
  if input:dim() == 4 then y, indices = y:squeeze(1), indices and indices:squeeze(1) end
  if a.return_indices then return y, indices end
  return y
end

-- Per output position, PyTorch's avg_pool3d divisor: divisor_override, else the window's size within the
-- padded input (count_include_pad) or within the input: (oD, oH, oW)
local function avg_divisors(x, g, a)
  if a.divisor_override ~= nil then return a.divisor_override end
  local divisor
  for i = 1, 3 do
    local len, counts = x:size(i + 2), {}
    for o = 0, g.out[i] - 1 do
      local lo = o * g.s[i] - g.p[i]
      local hi = math.min(lo + g.k[i], len + g.p[i])
      counts[o + 1] = a.count_include_pad == false and math.min(hi, len) - math.max(lo, 0) or hi - lo
    end
    local shape = {1, 1, 1}
    shape[i] = g.out[i]
    local t = accel.tensor(counts, {dtype = x.dtype, device = x.device}):reshape(shape)
    divisor = divisor and divisor * t or t
  end
  return divisor
end

-- avg_pool3d(input, kernel_size, [stride = kernel_size], [padding = 0], [ceil_mode = false],
-- [count_include_pad = true], [divisor_override])
function FUNCTIONS.avg_pool3d(input, kernel_size, ...)
  local op = "avg_pool3d"
  local a = util.torch_args(op, {"stride", "padding", "ceil_mode:bool", "count_include_pad:bool",
    "divisor_override:int"}, ...)
  if a.divisor_override ~= nil and a.divisor_override == 0 then raise("%s: divisor_override must not be zero", op) end
  local x = volumes(op, input)
  local g = pool_geometry(op, x, kernel_size, a)
  local y
  if a.ceil_mode or a.count_include_pad == false or a.divisor_override ~= nil then
    y = windows(x, g, 0):sum(6) / avg_divisors(x, g, a)
  else
    y = pool3d(x, g, 0, function(t, k, s, p)
      return F.avg_pool2d(t, k, {stride = s, padding = p})
    end, function(acc, part) return acc + part end, function(y, k) return y / k[1] end)
  end
  return input:dim() == 4 and y:squeeze(1) or y
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

-- on torch's autocast float32 list (CPU): half inputs widened under autocast
require("accel.amp").fp32_ops(FUNCTIONS, {"max_pool3d", "avg_pool3d", "adaptive_avg_pool3d"})

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

-- MaxPool3d(kernel_size, [stride = kernel_size], [padding = 0], [dilation = 1], [return_indices = false],
-- [ceil_mode = false])
local MaxPool3d = export_class(M, "MaxPool3d")
function MaxPool3d:init(kernel_size, ...)
  local a = util.torch_args("MaxPool3d", {"stride", "padding", "dilation", "return_indices:bool", "ceil_mode:bool"}, ...)
  self.kernel_size, self.stride, self.padding = kernel_size, a.stride == nil and kernel_size or a.stride, a.padding or 0
  self.dilation, self.return_indices, self.ceil_mode = a.dilation or 1, a.return_indices == true, a.ceil_mode == true
end
function MaxPool3d:forward(x)
  return FUNCTIONS.max_pool3d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
    self.return_indices)
end
function MaxPool3d:extra_repr()
  return ("kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s"):format(py(self.kernel_size),
    py(self.stride), py(self.padding), py(self.dilation), py(self.ceil_mode))
end

-- AvgPool3d(kernel_size, [stride = kernel_size], [padding = 0], [ceil_mode = false], [count_include_pad = true],
-- [divisor_override])
local AvgPool3d = export_class(M, "AvgPool3d")
function AvgPool3d:init(kernel_size, ...)
  local a = util.torch_args("AvgPool3d", {"stride", "padding", "ceil_mode:bool", "count_include_pad:bool",
    "divisor_override:int"}, ...)
  self.kernel_size, self.stride, self.padding = kernel_size, a.stride == nil and kernel_size or a.stride, a.padding or 0
  self.ceil_mode, self.count_include_pad, self.divisor_override = a.ceil_mode == true, a.count_include_pad ~= false,
    a.divisor_override
end
function AvgPool3d:forward(x)
  return FUNCTIONS.avg_pool3d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
    self.divisor_override)
end
function AvgPool3d:extra_repr()
  return ("kernel_size=%s, stride=%s, padding=%s"):format(py(self.kernel_size), py(self.stride), py(self.padding))
end

-- AdaptiveAvgPool3d(output_size)
local AdaptiveAvgPool3d = export_class(M, "AdaptiveAvgPool3d")
function AdaptiveAvgPool3d:init(output_size) self.output_size = output_size end
function AdaptiveAvgPool3d:forward(x) return FUNCTIONS.adaptive_avg_pool3d(x, self.output_size) end
function AdaptiveAvgPool3d:extra_repr() return "output_size=" .. py(self.output_size) end

return M
