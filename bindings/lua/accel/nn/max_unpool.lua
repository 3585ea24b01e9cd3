-- accel.nn.max_unpool: F.max_unpool1d / 2d / 3d and MaxUnpool1d / 2d /
-- 3d, the partial inverse of max pooling: each value put back at
-- the position its index names (max_pool's return_indices: 0-based flat
-- positions in each plane), zeros elsewhere; the gradient gathers back from
-- those positions (a value whose index repeats, as overlapping windows give,
-- is put there once and gets the whole gradient, as PyTorch's). PyTorch's
-- output size rule and printed forms. Loaded on first use of one of their
-- names.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local util = require("accel.util")

local raise, py, export_class = base.raise, base.pyrepr, base.export_class

local M = {}
local FUNCTIONS = {}

-- values (N, C, m) put at the flat positions idx (N, C, m) of (N, C, size) zeros; repeated
-- positions hold their (equal) values once: the mean of the values put there
local Unpool = require("accel.autograd").Function{
  name = "MaxUnpool",
  forward = function(ctx, values, idx, size)
    ctx:save_for_backward(idx)
    local shape = {values:size(1), values:size(2), size}
    local sums = accel.zeros(shape, {dtype = values.dtype, device = values.device}):scatter_add(3, idx, values)
    local counts = accel.zeros(shape, {dtype = values.dtype, device = values.device}):scatter_add(3, idx,
      accel.ones_like(values))
    return sums / counts:clamp(1)
  end,
  backward = function(ctx, g) return g:gather(3, ctx.saved_tensors[1]) end,
}

local function ints(op, name, v, n) return base.int_list(op, name, v, n, 0) end

-- the output's spatial sizes: PyTorch's default (in - 1) stride - 2 padding + kernel, or output_size
-- (its last n entries) within a stride of it
local function output_sizes(op, x, n, k, s, p, output_size)
  local sizes = {}
  for i = 1, n do sizes[i] = (x:size(x:dim() - n + i) - 1) * s[i] - 2 * p[i] + k[i] end
  if output_size == nil then return sizes end
  if type(output_size) == "number" then output_size = {output_size} end
  local got = {}
  for i = 1, n do got[i] = output_size[#output_size - n + i] end
  for i = 1, n do
    if type(got[i]) ~= "number" or got[i] < sizes[i] - s[i] or got[i] > sizes[i] + s[i] then
      raise('%s: invalid output_size "%s" (dim %d must be between %d and %d)', op, py(output_size), i - 1,
        sizes[i] - s[i], sizes[i] + s[i])
    end
  end
  return got
end

local SPECS = {"stride", "padding", "output_size"}

local SHAPES = {[2] = "(N, C, H, W) or (C, H, W)", [3] = "(N, C, D, H, W) or (C, D, H, W)"}

-- max_unpool2d / 3d (nd spatial dims): input (N, C, ...) or (C, ...), indices of its shape, kernel_size,
-- [stride = kernel_size], [padding = 0], [output_size] -> (N, C, out...)
local function max_unpool(op, nd, input, indices, kernel_size, ...)
  local a = util.torch_args(op, SPECS, ...)
  if not accel.is_tensor(input) or (input:dim() ~= nd + 1 and input:dim() ~= nd + 2) then
    raise("%s: expected input of shape %s, got %s", op, SHAPES[nd], accel.is_tensor(input) and
      tostring(input.shape) or type(input))
  end
  if not accel.is_tensor(indices) or indices.shape ~= input.shape or indices.dtype ~= accel.int64 then
    raise("%s: indices must be an int64 tensor of the input's shape %s (max_pool%dd's return_indices), got %s", op,
      tostring(input.shape), nd, accel.is_tensor(indices) and (indices.dtype.name .. " " .. tostring(indices.shape)) or
      type(indices))
  end
  local k = ints(op, "kernel_size", kernel_size, nd)
  local s = a.stride == nil and k or ints(op, "stride", a.stride, nd)
  local p = ints(op, "padding", a.padding or 0, nd)
  local out = output_sizes(op, input, nd, k, s, p, a.output_size)
  local unbatched = input:dim() == nd + 1
  local x = unbatched and input:unsqueeze(1) or input
  local idx = unbatched and indices:unsqueeze(1) or indices
  local n, c, size, shape = x:size(1), x:size(2), 1, {x:size(1), x:size(2)}
  for i = 1, nd do size, shape[2 + i] = size * out[i], out[i] end
  local y = Unpool(x:reshape({n, c, -1}), idx:reshape({n, c, -1}), size):reshape(shape)
  return unbatched and y:squeeze(1) or y
end

function FUNCTIONS.max_unpool2d(input, indices, kernel_size, ...)
  return max_unpool("max_unpool2d", 2, input, indices, kernel_size, ...)
end
function FUNCTIONS.max_unpool3d(input, indices, kernel_size, ...)
  return max_unpool("max_unpool3d", 3, input, indices, kernel_size, ...)
end

-- max_unpool1d(input (N, C, L) or (C, L), indices, kernel_size, [stride], [padding], [output_size])
function FUNCTIONS.max_unpool1d(input, indices, kernel_size, ...)
  local op = "max_unpool1d"
  local a = util.torch_args(op, SPECS, ...)
  if not accel.is_tensor(input) or (input:dim() ~= 2 and input:dim() ~= 3) then
    raise("%s: expected input of shape (N, C, L) or (C, L), got %s", op, accel.is_tensor(input) and
      tostring(input.shape) or type(input))
  end
  local k = ints(op, "kernel_size", kernel_size, 1)[1]
  local s = a.stride == nil and k or ints(op, "stride", a.stride, 1)[1]
  local p = ints(op, "padding", a.padding or 0, 1)[1]
  local out = output_sizes(op, input, 1, {k}, {s}, {p}, a.output_size)[1]
  local planes = accel.is_tensor(indices) and indices:unsqueeze(-2) or indices
  return FUNCTIONS.max_unpool2d(input:unsqueeze(-2), planes, {1, k}, {1, s}, {0, p}, {1, out}):squeeze(-2)
end

-- on torch's autocast float32 list (CPU): half inputs widened under autocast
require("accel.amp").fp32_ops(FUNCTIONS, {"max_unpool1d", "max_unpool2d", "max_unpool3d"})

for name, f in pairs(FUNCTIONS) do F[name] = f end

-- MaxUnpool2d(kernel_size, [stride = kernel_size], [padding = 0]), MaxUnpool1d / 3d(...);
-- forward(input, indices, [output_size])
for n = 1, 3 do
  local name, fn = ("MaxUnpool%dd"):format(n), FUNCTIONS[("max_unpool%dd"):format(n)]
  local cls = export_class(M, name)
  function cls:init(kernel_size, ...)
    local a = util.torch_args(name, {"stride", "padding"}, ...)
    self.kernel_size = ints(name, "kernel_size", kernel_size, n)
    self.stride = a.stride == nil and self.kernel_size or ints(name, "stride", a.stride, n)
    self.padding = ints(name, "padding", a.padding or 0, n)
  end
  function cls:forward(x, indices, output_size)
    local one = function(v) return n == 1 and v[1] or v end
    return fn(x, indices, one(self.kernel_size), one(self.stride), one(self.padding), output_size)
  end
  function cls:extra_repr()
    return ("kernel_size=%s, stride=%s, padding=%s"):format(py(self.kernel_size), py(self.stride), py(self.padding))
  end
end

return M
