-- accel.nn.fractional_max_pool: F.fractional_max_pool2d / 3d and
-- nn.FractionalMaxPool2d / 3d, as PyTorch's: each (sample, channel) plane
-- draws u in [0, 1) per dim (PyTorch's _random_samples (N, C, 2 or 3),
-- columns as SAMPLE_COLUMN says, given or drawn from accel's generator) and
-- places window i of the output at int((i + u) alpha) - int(u alpha),
-- alpha = (in - k) / (out - 1), in the input's dtype, the last window at
-- in - k. The windows are gathered and reduced by t:max, which keeps the
-- first of equal values (PyTorch's pick); autograd comes with the gather.
-- Loaded on first use of one of their names.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local util = require("accel.util")

local raise, py, export_class, torch_args = base.raise, base.pyrepr, base.export_class, util.torch_args

local M = {}
local OPTIONS = {"output_size", "output_ratio", "return_indices:bool", "_random_samples:tensor"}

-- the window starts (N, C, out) along one dim of size len for the draws u (N, C)
local function window_starts(u, len, out, k)
  if out == 1 then return accel.full({u:size(1), u:size(2), 1}, len - k, {dtype = accel.int64, device = u.device}) end
  local alpha = accel.tensor((len - k) / (out - 1), {dtype = u.dtype, device = u.device})
  local i = accel.arange(out - 1, {dtype = u.dtype, device = u.device}):reshape({1, 1, out - 1})
  local u3 = u:unsqueeze(3)
  local starts = ((i + u3) * alpha):trunc():long() - (u3 * alpha):trunc():long()
  local last = accel.full({u:size(1), u:size(2), 1}, len - k, {dtype = accel.int64, device = u.device})
  return accel.cat({starts, last}, 3)
end

-- the output size along the n dims from output_size or output_ratio
local function output_dims(op, a, n, lens)
  if a.output_size ~= nil then return base.int_list(op, "output_size", a.output_size, n, 1) end
  if a.output_ratio == nil then raise("%s requires specifying either an output_size or an output_ratio", op) end
  local r = a.output_ratio
  if type(r) == "number" then
    r = {}
    for i = 1, n do r[i] = a.output_ratio end
  end
  local out = {}
  for i = 1, n do
    if type(r[i]) ~= "number" or not (r[i] > 0 and r[i] < 1) then
      raise("%s: output_ratio must be between 0 and 1 (exclusive), got %s", op, py(a.output_ratio))
    end
    out[i] = math.floor(lens[i] * r[i])
  end
  return out
end

-- Per spatial dim, the column of _random_samples that places its windows: PyTorch's 2-D kernel reads
-- [1] for the width and [2] for the height, its 3-D kernel [1] depth, [2] height, [3] width
local SAMPLE_COLUMN = {[2] = {2, 1}, [3] = {1, 2, 3}}
local DIM_NAMES = {[2] = {"height", "width"}, [3] = {"time", "height", "width"}}

-- The flat input positions (N, C, o1 .. on, k1 .. kn) of every window, row-major within a window
local function window_positions(u, n, lens, out, k)
  local b, c = u:size(1), u:size(2)
  local flat, stride = nil, 1
  for i = n, 1, -1 do
    local starts = window_starts(u:select(3, SAMPLE_COLUMN[n][i]), lens[i], out[i], k[i]) -- (N, C, o_i)
    local pos = starts:unsqueeze(4) + accel.arange(k[i], {device = u.device}):reshape({1, 1, 1, k[i]})
    local shape = {b, c}
    for j = 1, 2 * n do shape[j + 2] = 1 end
    shape[2 + i], shape[2 + n + i] = out[i], k[i]
    local term = pos:reshape(shape) * stride
    flat = flat and flat + term or term
    stride = stride * lens[i]
  end
  return flat
end

-- fractional_max_pool2d / 3d in n dims: x (N, C, spatial...) or (C, spatial...), kernel_size, [output_size],
-- [output_ratio], [return_indices = false], [_random_samples (N, C, n)] -> values[, indices (flat, row-major)]
local function fractional_max_pool(op, n, x, kernel_size, ...)
  local a = torch_args(op, OPTIONS, ...)
  if not accel.is_tensor(x) or (x:dim() ~= n + 1 and x:dim() ~= n + 2) or not x.dtype.is_floating_point then
    raise("%s: expected a floating point input of shape (N, C, %s) or (C, ...), got %s", op,
      table.concat(DIM_NAMES[n], ", "), accel.is_tensor(x) and (x.dtype.name .. " " .. util.shape_str(x)) or type(x))
  end
  local batched = x:dim() == n + 2 and x or x:unsqueeze(1)
  local b, c, lens, numel = batched:size(1), batched:size(2), {}, 1
  for i = 1, n do lens[i], numel = batched:size(i + 2), numel * batched:size(i + 2) end
  local k = base.int_list(op, "kernel_size", kernel_size, n, 1)
  local out = output_dims(op, a, n, lens)
  local window, cells = 1, 1
  for i = 1, n do
    if out[i] < 1 or out[i] + k[i] - 1 > lens[i] then
      raise("%s: pool %s %d too large relative to input %s %d (output %d)", op, DIM_NAMES[n][i], k[i],
        DIM_NAMES[n][i], lens[i], out[i])
    end
    window, cells = window * k[i], cells * out[i]
  end
  local u = a._random_samples
  if u == nil then
    u = accel.rand({b, c, n}, {dtype = x.dtype, device = x.device})
  elseif u:dim() ~= 3 or u:size(1) ~= b or u:size(2) ~= c or u:size(3) ~= n then
    raise("%s: _random_samples must have shape (%d, %d, %d), got %s", op, b, c, n, util.shape_str(u))
  end
  local flat = window_positions(u:to({dtype = x.dtype, device = x.device}), n, lens, out, k)
    :reshape({b, c, cells, window})
  local windows = batched:reshape({b, c, numel}):gather(3, flat:reshape({b, c, -1})):reshape({b, c, cells, window})
  local values, pick = windows:max(4)
  local shape = {b, c}
  for i = 1, n do shape[i + 2] = out[i] end
  local unbatch = function(t) return x:dim() == n + 1 and t:reshape(shape):squeeze(1) or t:reshape(shape) end
  if not a.return_indices then return unbatch(values) end
  return unbatch(values), unbatch(flat:gather(4, pick:unsqueeze(4)))
end

function F.fractional_max_pool2d(x, kernel_size, ...)
  return fractional_max_pool("fractional_max_pool2d", 2, x, kernel_size, ...)
end
function F.fractional_max_pool3d(x, kernel_size, ...)
  return fractional_max_pool("fractional_max_pool3d", 3, x, kernel_size, ...)
end

-- on torch's autocast float32 list (CPU): half inputs widened under autocast
require("accel.amp").fp32_ops(F, {"fractional_max_pool2d", "fractional_max_pool3d"})

-- FractionalMaxPool2d / 3d(kernel_size, [output_size], [output_ratio], [return_indices = false], [_random_samples])
for n = 2, 3 do
  local name, fn = ("FractionalMaxPool%dd"):format(n), F[("fractional_max_pool%dd"):format(n)]
  local cls = export_class(M, name)
  function cls:init(kernel_size, ...)
    local a = torch_args(name, OPTIONS, ...)
    self.kernel_size = base.int_list(name, "kernel_size", kernel_size, n, 1)
    if a.output_size == nil and a.output_ratio == nil then
      raise("%s requires specifying either an output size, or a pooling ratio", name)
    end
    self.output_size, self.output_ratio, self.return_indices = a.output_size, a.output_ratio, a.return_indices == true
    self._random_samples = a._random_samples
  end
  function cls:forward(x)
    return fn(x, self.kernel_size, {output_size = self.output_size, output_ratio = self.output_ratio,
      return_indices = self.return_indices, _random_samples = self._random_samples})
  end
end

return M
