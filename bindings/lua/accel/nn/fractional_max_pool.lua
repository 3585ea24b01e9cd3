-- accel.nn.fractional_max_pool: F.fractional_max_pool2d and
-- nn.FractionalMaxPool2d, as PyTorch's: each (sample, channel) plane draws
-- u in [0, 1) per dim (PyTorch's _random_samples (N, C, 2): [1] for the
-- width, [2] for the height, given or drawn from accel's generator) and
-- places window i of the output at int((i + u) alpha) - int(u alpha),
-- alpha = (in - k) / (out - 1), in the input's dtype, the last window at
-- in - k. The windows are gathered and reduced by t:max, which keeps the
-- first of equal values (PyTorch's pick); autograd comes with the gather.
-- Loaded on first use of either name.
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

-- the output size along the two dims from output_size or output_ratio
local function output_dims(op, a, h, w)
  if a.output_size ~= nil then return base.int_list(op, "output_size", a.output_size, 2, 1) end
  if a.output_ratio == nil then raise("%s requires specifying either an output_size or an output_ratio", op) end
  local r = type(a.output_ratio) == "number" and {a.output_ratio, a.output_ratio} or a.output_ratio
  for i = 1, 2 do
    if type(r[i]) ~= "number" or not (r[i] > 0 and r[i] < 1) then
      raise("%s: output_ratio must be between 0 and 1 (exclusive), got %s", op, py(a.output_ratio))
    end
  end
  return {math.floor(h * r[1]), math.floor(w * r[2])}
end

-- fractional_max_pool2d(x (N, C, H, W) or (C, H, W), kernel_size, [output_size], [output_ratio],
--   [return_indices = false], [_random_samples (N, C, 2)]) -> values[, indices (flat h W + w)]
function F.fractional_max_pool2d(x, kernel_size, ...)
  local op = "fractional_max_pool2d"
  local a = torch_args(op, OPTIONS, ...)
  if not accel.is_tensor(x) or (x:dim() ~= 3 and x:dim() ~= 4) or not x.dtype.is_floating_point then
    raise("%s: expected a floating point input of shape (N, C, H, W) or (C, H, W), got %s", op,
      accel.is_tensor(x) and (x.dtype.name .. " " .. util.shape_str(x)) or type(x))
  end
  local batched = x:dim() == 4 and x or x:unsqueeze(1)
  local n, c, h, w = batched:size(1), batched:size(2), batched:size(3), batched:size(4)
  local k = base.int_list(op, "kernel_size", kernel_size, 2, 1)
  local out = output_dims(op, a, h, w)
  local names, lens = {"height", "width"}, {h, w}
  for i = 1, 2 do
    if out[i] < 1 or out[i] + k[i] - 1 > lens[i] then
      raise("%s: pool %s %d too large relative to input %s %d (output %d)", op, names[i], k[i], names[i], lens[i], out[i])
    end
  end
  local u = a._random_samples
  if u == nil then
    u = accel.rand({n, c, 2}, {dtype = x.dtype, device = x.device})
  elseif u:dim() ~= 3 or u:size(1) ~= n or u:size(2) ~= c or u:size(3) ~= 2 then
    raise("%s: _random_samples must have shape (%d, %d, 2), got %s", op, n, c, util.shape_str(u))
  end
  u = u:to({dtype = x.dtype, device = x.device})
  local rows = window_starts(u:select(3, 2), h, out[1], k[1]) -- (N, C, oH)
  local cols = window_starts(u:select(3, 1), w, out[2], k[2]) -- (N, C, oW)
  local function along(starts, size) -- (N, C, o, k): every position of each window
    return starts:unsqueeze(4) + accel.arange(size, {device = x.device}):reshape({1, 1, 1, size})
  end
  local r, q = along(rows, k[1]), along(cols, k[2])
  -- (N, C, oH, oW, kH, kW) flat positions r W + q, in row-major window order
  local flat = r:reshape({n, c, out[1], 1, k[1], 1}) * w + q:reshape({n, c, 1, out[2], 1, k[2]})
  flat = flat:reshape({n, c, out[1] * out[2] * k[1] * k[2]})
  local windows = batched:reshape({n, c, h * w}):gather(3, flat):reshape({n, c, out[1], out[2], k[1] * k[2]})
  local values, pick = windows:max(5)
  local unbatch = function(t) return x:dim() == 3 and t:squeeze(1) or t end
  if not a.return_indices then return unbatch(values) end
  local indices = flat:reshape({n, c, out[1], out[2], k[1] * k[2]}):gather(5, pick:unsqueeze(5)):squeeze(5)
  return unbatch(values), unbatch(indices)
end

-- FractionalMaxPool2d(kernel_size, [output_size], [output_ratio], [return_indices = false], [_random_samples])
local FractionalMaxPool2d = export_class(M, "FractionalMaxPool2d")
function FractionalMaxPool2d:init(kernel_size, ...)
  local a = torch_args("FractionalMaxPool2d", OPTIONS, ...)
  self.kernel_size = base.int_list("FractionalMaxPool2d", "kernel_size", kernel_size, 2, 1)
  if a.output_size == nil and a.output_ratio == nil then
    raise("FractionalMaxPool2d requires specifying either an output size, or a pooling ratio")
  end
  self.output_size, self.output_ratio, self.return_indices = a.output_size, a.output_ratio, a.return_indices == true
  self._random_samples = a._random_samples
end
function FractionalMaxPool2d:forward(x)
  return F.fractional_max_pool2d(x, self.kernel_size, {output_size = self.output_size, output_ratio = self.output_ratio,
    return_indices = self.return_indices, _random_samples = self._random_samples})
end

return M
