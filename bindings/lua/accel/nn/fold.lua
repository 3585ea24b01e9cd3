-- accel.nn.fold: F.unfold / nn.Unfold (im2col: every kernel-sized window of
-- an (N, C, H, W) input as a column of C kh kw values) and F.fold /
-- nn.Fold (col2im: the columns summed back into place), with PyTorch's
-- layout, arguments and printed forms. unfold is a grouped convolution
-- with one-hot kernels (one output channel per (channel, kernel position),
-- PyTorch's order) and fold the transposed convolution with the same
-- kernels, so each is the other's gradient and autograd comes with both.
-- Loaded on first use of one of their names.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local util = require("accel.util")

local raise, py, export_class = base.raise, base.pyrepr, base.export_class

local M = {}
local FUNCTIONS = {}

local SPECS = {"dilation", "padding", "stride"}

local function pair(op, name, v, low) return base.int_list(op, name, v, 2, low) end

-- the settings of op as pairs
local function settings(op, kernel_size, a)
  return pair(op, "kernel_size", kernel_size, 1), pair(op, "dilation", a.dilation or 1, 1),
    pair(op, "padding", a.padding or 0, 0), pair(op, "stride", a.stride or 1, 1)
end

-- (C kh kw, 1, kh, kw): kernel r of channel c is one at position r (PyTorch's row order (c, i, j))
local function one_hot_kernels(c, k, dtype, device)
  local n = k[1] * k[2]
  local eye = accel.eye(n, {dtype = dtype, device = device}):reshape({1, n, k[1], k[2]})
  return eye:expand({c, n, k[1], k[2]}):reshape({c * n, 1, k[1], k[2]})
end

-- unfold(input (N, C, H, W) or (C, H, W), kernel_size, [dilation = 1], [padding = 0], [stride = 1])
-- -> (N, C kh kw, L), L the number of windows
function FUNCTIONS.unfold(input, kernel_size, ...)
  local a = util.torch_args("unfold", SPECS, ...)
  if not accel.is_tensor(input) or (input:dim() ~= 3 and input:dim() ~= 4) then
    raise("unfold: expected a 3-D or 4-D input (N, C, H, W), got %s", accel.is_tensor(input) and tostring(input.shape) or
      type(input))
  end
  local k, d, p, s = settings("unfold", kernel_size, a)
  local x = input:dim() == 3 and input:unsqueeze(1) or input
  local c = x:size(2)
  local cols = F.conv2d(x, one_hot_kernels(c, k, x.dtype, x.device), nil, {stride = s, padding = p, dilation = d,
    groups = c})
  cols = cols:reshape({x:size(1), c * k[1] * k[2], -1})
  return input:dim() == 3 and cols:squeeze(1) or cols
end

-- fold(input (N, C kh kw, L) or (C kh kw, L), output_size, kernel_size, [dilation = 1], [padding = 0],
-- [stride = 1]) -> (N, C, H, W): each column's values added at their window's places
function FUNCTIONS.fold(input, output_size, kernel_size, ...)
  local a = util.torch_args("fold", SPECS, ...)
  if not accel.is_tensor(input) or (input:dim() ~= 2 and input:dim() ~= 3) then
    raise("fold: expected a 2-D or 3-D input (N, C kh kw, L), got %s", accel.is_tensor(input) and tostring(input.shape) or
      type(input))
  end
  local k, d, p, s = settings("fold", kernel_size, a)
  local out = pair("fold", "output_size", output_size, 1)
  local x = input:dim() == 2 and input:unsqueeze(1) or input
  local n = k[1] * k[2]
  if x:size(2) % n ~= 0 then
    raise("fold: Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got "
      .. "input.size(1)=%d and kernel_size=%s", x:size(2), py(k))
  end
  local blocks = {}
  for i = 1, 2 do blocks[i] = math.floor((out[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) / s[i]) + 1 end
  if blocks[1] < 1 or blocks[2] < 1 or blocks[1] * blocks[2] ~= x:size(3) then
    raise("fold: Given output_size=%s, kernel_size=%s, dilation=%s, padding=%s, stride=%s, expected size of input's "
      .. "dimension 2 to match the calculated number of sliding blocks %d * %d = %d, but got input.size(2)=%d",
      py(out), py(k), py(d), py(p), py(s), blocks[1], blocks[2], blocks[1] * blocks[2], x:size(3))
  end
  local c = math.floor(x:size(2) / n)
  local planes = x:reshape({x:size(1), c * n, blocks[1], blocks[2]})
  -- the transposed convolution, its output_padding making up output_size (less than a stride beyond its
  -- natural size, since blocks is the most that fit)
  local extra = {}
  for i = 1, 2 do extra[i] = out[i] - ((blocks[i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + 1) end
  local y = F.conv_transpose2d(planes, one_hot_kernels(c, k, x.dtype, x.device), nil, s, p, extra, c, d)
  return input:dim() == 2 and y:squeeze(1) or y
end

for name, f in pairs(FUNCTIONS) do F[name] = f end

-- Unfold(kernel_size, [dilation = 1], [padding = 0], [stride = 1]); Fold(output_size, kernel_size, ...)
local Unfold = export_class(M, "Unfold")
function Unfold:init(kernel_size, ...)
  local a = util.torch_args("Unfold", SPECS, ...)
  self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, a.dilation or 1, a.padding or 0, a.stride or 1
end
function Unfold:forward(x) return FUNCTIONS.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride) end

local Fold = export_class(M, "Fold")
function Fold:init(output_size, kernel_size, ...)
  local a = util.torch_args("Fold", SPECS, ...)
  self.output_size, self.kernel_size = output_size, kernel_size
  self.dilation, self.padding, self.stride = a.dilation or 1, a.padding or 0, a.stride or 1
end
function Fold:forward(x)
  return FUNCTIONS.fold(x, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)
end

local function settings_repr(self)
  return ("kernel_size=%s, dilation=%s, padding=%s, stride=%s"):format(py(self.kernel_size), py(self.dilation),
    py(self.padding), py(self.stride))
end
Unfold.extra_repr = settings_repr
function Fold:extra_repr() return ("output_size=%s, "):format(py(self.output_size)) .. settings_repr(self) end

return M
