-- accel.nn.conv_transpose: F.conv_transpose1d / 2d / 3d and the modules
-- ConvTranspose1d / 2d / 3d, PyTorch's arguments
-- (positionally or in a table), weights (in, out / groups, k...),
-- initialisation and printed forms. A transposed convolution is computed as
-- the ordinary convolution it is the gradient of: the input with stride - 1
-- zeros between its elements, padded by dilation * (k - 1) - padding on
-- each side (output_padding more at the end), convolved with the kernel
-- flipped and its in / out channels swapped per group. So autograd comes
-- with it; the zeros cost stride^n times the work of a direct kernel.
-- Loaded on first use of one of its names.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local layers = require("accel.nn.layers")
local util = require("accel.util")

local raise, py, export_class = base.raise, base.pyrepr, base.export_class
local torch_args = util.torch_args

local M = {}
local FUNCTIONS = {}

local ints = base.int_list
local function is_int(v) return type(v) == "number" and v == math.floor(v) end

-- x with stride - 1 zeros between its elements along dim
local function spread_dim(x, dim, stride)
  if stride == 1 then return x end
  local len, shape, merged = x:size(dim), util.sizes_of(x), util.sizes_of(x)
  table.insert(shape, dim + 1, 1)
  merged[dim] = len * stride
  local pads = {}
  for _ = dim + 2, x:dim() + 1 do pads[#pads + 1], pads[#pads + 2] = 0, 0 end
  pads[#pads + 1], pads[#pads + 2] = 0, stride - 1 -- the new dim after `dim`: (..., L, stride, ...)
  return F.pad(x:reshape(shape), pads):reshape(merged):narrow(dim, 1, (len - 1) * stride + 1)
end

-- weight (in, out / g, k...) as an ordinary convolution's (out, in / g, k...), flipped
local function as_conv_weight(weight, groups)
  local shape = util.sizes_of(weight)
  local per_group = math.floor(shape[1] / groups)
  local split, merged, spatial = {groups, per_group, shape[2]}, {groups * shape[2], per_group}, {}
  for d = 3, #shape do
    split[#split + 1], merged[#merged + 1], spatial[#spatial + 1] = shape[d], shape[d], d
  end
  return weight:reshape(split):transpose(2, 3):reshape(merged):flip(spatial)
end

-- x (N, C, ...) or (C, ...) and weight (in, out / groups, ...) with `spatial` dims, else op's error
local DIMS = {"L", "H, W", "D, H, W"}
local KERNELS = {"k", "kh, kw", "kd, kh, kw"}
local function check_ranks(op, x, weight, spatial)
  local dims, kernel = DIMS[spatial], KERNELS[spatial]
  if not accel.is_tensor(x) or (x:dim() ~= spatial + 1 and x:dim() ~= spatial + 2) then
    raise("%s: expected input of shape (N, C, %s) or (C, %s), got %s", op, dims, dims, accel.is_tensor(x) and
      tostring(x.shape) or type(x))
  end
  if not accel.is_tensor(weight) or weight:dim() ~= spatial + 2 then
    raise("%s: weight must be %d-D (in_channels, out_channels / groups, %s), got %s", op, spatial + 2, kernel,
      accel.is_tensor(weight) and tostring(weight.shape) or type(weight))
  end
end

local function check_tensors(op, x, weight, bias, groups, spatial)
  check_ranks(op, x, weight, spatial)
  local c = x:size(x:dim() - spatial)
  if weight:size(1) ~= c then
    raise("%s: weight %s expects an input with %d channels (its dim 1), but the input %s has %d", op,
      tostring(weight.shape), weight:size(1), tostring(x.shape), c)
  end
  if c % groups ~= 0 then raise("%s: in_channels (%d) must be divisible by groups (%d)", op, c, groups) end
  local out = weight:size(2) * groups
  if bias ~= nil and (bias:dim() ~= 1 or bias:size(1) ~= out) then
    raise("%s: bias must have shape [%d] (out_channels), got %s", op, out, tostring(bias.shape))
  end
end

local SPECS = {"bias:tensor", "stride", "padding", "output_padding", "groups:int", "dilation"}

-- conv_transpose2d / 3d (n spatial dims) of input (N, C, ...) or (C, ...) with weight (in, out / groups, k...)
local function conv_transpose(op, n, input, weight, ...)
  local a = torch_args(op, SPECS, ...)
  local groups = a.groups or 1
  if groups < 1 then raise("%s: groups must be at least 1, got %d", op, groups) end
  check_tensors(op, input, weight, a.bias, groups, n)
  local s, p = ints(op, "stride", a.stride or 1, n, 1), ints(op, "padding", a.padding or 0, n, 0)
  local d, q = ints(op, "dilation", a.dilation or 1, n, 1), ints(op, "output_padding", a.output_padding or 0, n, 0)
  for i = 1, n do
    if q[i] >= s[i] and q[i] >= d[i] then
      raise("%s: output_padding (%d) must be smaller than either stride (%d) or dilation (%d)", op, q[i], s[i], d[i])
    end
  end
  local x = input:dim() == n + 1 and input:unsqueeze(1) or input
  for i = 1, n do x = spread_dim(x, 2 + i, s[i]) end
  local pads, k = {}, {}
  for i = n, 1, -1 do -- (F.pad lists the last dim first)
    k[i] = weight:size(2 + i)
    local edge = d[i] * (k[i] - 1) - p[i] -- (negative: cropped)
    if x:size(2 + i) + 2 * edge + q[i] < d[i] * (k[i] - 1) + 1 then
      raise("%s: the output would be empty: input %s, kernel %s, stride %s, padding %s", op, tostring(input.shape),
        tostring(weight.shape), py(s), py(p))
    end
    pads[#pads + 1], pads[#pads + 2] = edge, edge + q[i]
  end
  local conv = n == 2 and F.conv2d or F.conv3d
  local y = conv(F.pad(x, pads), as_conv_weight(weight, groups), a.bias, {dilation = d, groups = groups})
  return input:dim() == n + 1 and y:squeeze(1) or y
end

-- conv_transpose2d(input, weight, [bias], [stride = 1], [padding = 0],
--   [output_padding = 0], [groups = 1], [dilation = 1]), positionally or by name; conv_transpose3d likewise
function FUNCTIONS.conv_transpose2d(input, weight, ...) return conv_transpose("conv_transpose2d", 2, input, weight, ...) end
function FUNCTIONS.conv_transpose3d(input, weight, ...) return conv_transpose("conv_transpose3d", 3, input, weight, ...) end

-- conv_transpose1d(input (N, C, L) or (C, L), weight (in, out / groups, k), ...): conv_transpose2d over a height of 1
function FUNCTIONS.conv_transpose1d(input, weight, ...)
  local op = "conv_transpose1d"
  local a = torch_args(op, SPECS, ...)
  check_ranks(op, input, weight, 1)
  -- each 1-D setting v as the pair {the height's, v} of a height of 1
  local function lift(name, v, low, height) return {height, ints(op, name, v, 1, low)[1]} end
  local y = FUNCTIONS.conv_transpose2d(input:unsqueeze(-2), weight:unsqueeze(3), a.bias,
    lift("stride", a.stride or 1, 1, 1), lift("padding", a.padding or 0, 0, 0),
    lift("output_padding", a.output_padding or 0, 0, 0), a.groups or 1, lift("dilation", a.dilation or 1, 1, 1))
  return y:squeeze(-2)
end

for name, f in pairs(FUNCTIONS) do F[name] = f end

-- ---- modules ----

local OPTIONS = {"stride", "padding", "output_padding", "groups:int", "bias:bool", "dilation", "padding_mode:string",
                 "dtype", "device"}

-- the module's geometry from its arguments, n = 1, 2 or 3 spatial dims
local function build(self, name, n, in_channels, out_channels, kernel_size, a)
  self.in_channels = base.check_integer(in_channels, name, "in_channels", 1)
  self.out_channels = base.check_integer(out_channels, name, "out_channels", 1)
  self.kernel_size = ints(name, "kernel_size", kernel_size, n, 1)
  self.stride = ints(name, "stride", a.stride or 1, n, 1)
  self.padding = ints(name, "padding", a.padding or 0, n, 0)
  self.output_padding = ints(name, "output_padding", a.output_padding or 0, n, 0)
  self.dilation = ints(name, "dilation", a.dilation or 1, n, 1)
  self.groups = a.groups or 1
  self.padding_mode = a.padding_mode or "zeros"
  if self.padding_mode ~= "zeros" then
    raise('%s: Only "zeros" padding mode is supported for %s, got "%s"', name, name, self.padding_mode)
  end
  if self.groups < 1 or in_channels % self.groups ~= 0 then
    raise("%s: in_channels (%d) must be divisible by groups (%d)", name, in_channels, self.groups)
  end
  if out_channels % self.groups ~= 0 then
    raise("%s: out_channels (%d) must be divisible by groups (%d)", name, out_channels, self.groups)
  end
  local shape = {in_channels, math.floor(out_channels / self.groups)}
  for i = 1, n do shape[2 + i] = self.kernel_size[i] end
  local o = {dtype = a.dtype, device = a.device}
  self.weight = base.Parameter(accel.empty(shape, o))
  if a.bias ~= false then self.bias = base.Parameter(accel.empty({out_channels}, o))
  else self:register_parameter("bias", nil) end
  self:reset_parameters()
end

-- the output_padding that makes the output output_size (PyTorch's forward(input, output_size))
local function padding_for(self, name, x, output_size)
  if output_size == nil then return self.output_padding end
  local n = #self.kernel_size
  if type(output_size) == "number" then output_size = {output_size} end
  if type(output_size) ~= "table" then raise("%s: output_size must be a list of sizes, got %s", name, py(output_size)) end
  local sizes = {}
  for i = 1, n do sizes[i] = output_size[#output_size - n + i] end -- (N, C, ...) or just the spatial sizes
  local out = {}
  for i = 1, n do
    local len = x:size(x:dim() - n + i)
    local smallest = (len - 1) * self.stride[i] - 2 * self.padding[i] + self.dilation[i] * (self.kernel_size[i] - 1) + 1
    local extra = is_int(sizes[i]) and sizes[i] - smallest or -1
    if extra < 0 or extra >= math.max(self.stride[i], self.dilation[i]) then
      raise("%s: requested an output size of %s, but valid sizes range from %d to %d (for an input of %s)", name,
        py(output_size), smallest, smallest + math.max(self.stride[i], self.dilation[i]) - 1, tostring(x.shape))
    end
    out[i] = extra
  end
  return out
end

-- ConvTranspose2d(in_channels, out_channels, kernel_size, [stride = 1], [padding = 0],
--   [output_padding = 0], [groups = 1], [bias = true], [dilation = 1], [padding_mode = "zeros"],
--   [{dtype =, device =}]), and ConvTranspose1d / 3d(...) likewise; forward(input, [output_size])
for n = 1, 3 do
  local name, fn = ("ConvTranspose%dd"):format(n), FUNCTIONS[("conv_transpose%dd"):format(n)]
  local cls = export_class(M, name)
  function cls:init(in_channels, out_channels, kernel_size, ...)
    build(self, name, n, in_channels, out_channels, kernel_size, torch_args(name, OPTIONS, ...))
  end
  function cls:forward(x, output_size)
    return fn(x, self.weight, self.bias, self.stride, self.padding, padding_for(self, name, x, output_size), self.groups,
      self.dilation)
  end
  cls.reset_parameters, cls.extra_repr = layers.Linear.reset_parameters, base.conv_repr
end

return M
