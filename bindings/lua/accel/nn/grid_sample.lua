-- accel.nn.grid_sample: F.affine_grid and F.grid_sample for 2-D images, as
-- PyTorch's, composed of tensor ops (the samples are gathers) so autograd
-- gives the gradients of the input, the grid and theta. grid_sample takes
-- mode "bilinear" or "nearest" and padding_mode "zeros", "border" or
-- "reflection"; "bicubic" and the 5-D (volumetric) forms are errors that say
-- so. align_corners left out is false, with PyTorch's warning (once per
-- function and process). Loaded on first use of either name.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local util = require("accel.util")

local raise, torch_args = base.raise, util.torch_args

local FUNCTIONS = {}

local ALIGN_WARNING = "Default grid_sample and affine_grid behavior has changed to align_corners=False since 1.3.0. "
  .. "Please specify align_corners=True if the old behavior is desired. See the documentation of grid_sample for details."
local warned = {}

-- align_corners as given, or false with PyTorch's warning
local function align_corners_of(op, v)
  if v ~= nil then return v end
  if not warned[op] then
    warned[op] = true
    io.stderr:write(("accel-lua: warning: %s: %s\n"):format(op, ALIGN_WARNING))
  end
  return false
end

-- affine_grid's coordinates of n pixel centres in [-1, 1] (a 0 for n = 1)
local function centres(n, align_corners, like)
  local o = {dtype = like.dtype, device = like.device}
  if n <= 1 then return accel.zeros(n, o) end
  local range = accel.linspace(-1, 1, n, o)
  if not align_corners then range = range * ((n - 1) / n) end
  return range
end

-- affine_grid(theta (N, 2, 3), size {N, C, H, W}, [align_corners]) -> grid (N, H, W, 2):
-- theta applied to each output pixel's (x, y, 1)
function FUNCTIONS.affine_grid(theta, size, ...)
  local a = torch_args("affine_grid", {"align_corners:bool"}, ...)
  local align_corners = align_corners_of("affine_grid", a.align_corners)
  if not accel.is_tensor(theta) or not theta.dtype.is_floating_point then
    raise("affine_grid: expected theta to have floating point type, got %s",
      accel.is_tensor(theta) and theta.dtype.name or type(theta))
  end
  local sizes = type(size) == "table" and util.copy_plain(size) or nil -- (a list, or t.shape)
  if type(sizes) ~= "table" or (#sizes ~= 4 and #sizes ~= 5) then
    raise("affine_grid: only supports 4D and 5D sizes, for 2D and 3D affine transforms, got size %s", util.show(size))
  end
  if #sizes == 5 then raise("affine_grid: 3-D transforms (a 5-D size) are not provided; 2-D ones (N, C, H, W) are") end
  local n, h, w = sizes[1], sizes[3], sizes[4]
  if theta:dim() ~= 3 or theta:size(2) ~= 2 or theta:size(3) ~= 3 or theta:size(1) ~= n then
    raise("affine_grid: expected a batch of 2D affine matrices of shape Nx2x3 for size [%s], got %s",
      table.concat(sizes, ", "), util.shape_str(theta))
  end
  local xs = centres(w, align_corners, theta):reshape({1, w}):expand({h, w})
  local ys = centres(h, align_corners, theta):reshape({h, 1}):expand({h, w})
  local points = accel.stack({xs, ys, accel.ones({h, w}, {dtype = theta.dtype, device = theta.device})}, 3)
  return points:reshape({1, h * w, 3}):matmul(theta:transpose(2, 3)):reshape({n, h, w, 2})
end

-- PyTorch's reflection of x into [twice_low / 2, twice_high / 2] (bouncing at both ends)
local function reflect(x, twice_low, twice_high)
  if twice_low == twice_high then return x * 0 end
  local low, span = twice_low / 2, (twice_high - twice_low) / 2
  x = (x - low):abs()
  local extra = x:fmod(span)
  local even = (x / span):floor():remainder(2):eq(0)
  return accel.where(even, extra + low, (-extra) + (span + low))
end

-- a grid coordinate in [-1, 1] as a pixel position along a dim of n pixels,
-- moved inside by the padding mode; what is not finite (or far out) becomes
-- -100, outside every image, as PyTorch
local function pixel_position(coord, n, padding_mode, align_corners)
  local x
  if align_corners then x = (coord + 1) / 2 * (n - 1) else x = ((coord + 1) * n - 1) / 2 end
  if padding_mode == "reflection" then
    x = align_corners and reflect(x, 0, 2 * (n - 1)) or reflect(x, -1, 2 * n - 1)
  end
  if padding_mode ~= "zeros" then x = x:clamp(0, n - 1) end
  return accel.where(x:abs():lt(2 ^ 30), x, -100)
end

-- the input's values at integer pixels (px, py) (N, Ho, Wo): (N, C, Ho, Wo),
-- 0 where the pixel is outside
local function pixels_at(flat, px, py, h, w)
  local n, c, ho, wo = flat:size(1), flat:size(2), px:size(2), px:size(3)
  local inside = px:ge(0):logical_and(px:le(w - 1)):logical_and(py:ge(0)):logical_and(py:le(h - 1))
  local index = (py:clamp(0, h - 1) * w + px:clamp(0, w - 1)):long():reshape({n, 1, ho * wo}):expand({n, c, ho * wo})
  local values = flat:gather(3, index):reshape({n, c, ho, wo})
  return values * inside:unsqueeze(2):to(flat.dtype)
end

local function check_sample_args(input, grid)
  if not accel.is_tensor(input) or not accel.is_tensor(grid) then raise("grid_sample: input and grid must be Tensors") end
  if input:dim() == 5 and grid:dim() == 5 then
    raise("grid_sample: 5-D (volumetric) input is not provided; 4-D input (N, C, H, W) is")
  end
  if input:dim() ~= 4 or grid:dim() ~= 4 then
    raise("grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, but got input with "
      .. "sizes %s and grid with sizes %s", util.shape_str(input), util.shape_str(grid))
  end
  if input:size(1) ~= grid:size(1) then
    raise("grid_sampler(): expected input and grid to have same batch size, but got input with sizes %s and grid "
      .. "with sizes %s", util.shape_str(input), util.shape_str(grid))
  end
  if grid:size(4) ~= 2 then
    raise("grid_sampler(): expected grid to have size 2 in last dimension, but got grid with sizes %s", util.shape_str(grid))
  end
  if input.dtype ~= grid.dtype or not input.dtype.is_floating_point then
    raise("grid_sampler(): expected input and grid to have the same floating point dtype, but input has %s and grid has %s",
      input.dtype.name, grid.dtype.name)
  end
  if input:size(3) == 0 or input:size(4) == 0 then
    raise("grid_sampler(): expected input to have non-empty spatial dimensions, but input has sizes %s",
      util.shape_str(input))
  end
end

-- grid_sample(input (N, C, H, W), grid (N, Ho, Wo, 2) of (x, y) in [-1, 1], [mode = "bilinear"],
--   [padding_mode = "zeros"], [align_corners]) -> (N, C, Ho, Wo)
function FUNCTIONS.grid_sample(input, grid, ...)
  local a = torch_args("grid_sample", {"mode:string", "padding_mode:string", "align_corners:bool"}, ...)
  local mode, padding_mode = a.mode or "bilinear", a.padding_mode or "zeros"
  if mode == "bicubic" then raise("grid_sample: mode 'bicubic' is not provided ('bilinear' and 'nearest' are)") end
  if mode ~= "bilinear" and mode ~= "nearest" then
    raise("grid_sample: expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: '%s'", mode)
  end
  if padding_mode ~= "zeros" and padding_mode ~= "border" and padding_mode ~= "reflection" then
    raise("grid_sample: expected padding_mode to be 'zeros', 'border', or 'reflection', but got: '%s'", padding_mode)
  end
  local align_corners = align_corners_of("grid_sample", a.align_corners)
  check_sample_args(input, grid)
  local n, c, h, w = input:size(1), input:size(2), input:size(3), input:size(4)
  local flat = input:reshape({n, c, h * w})
  local x = pixel_position(grid:select(4, 1), w, padding_mode, align_corners) -- (N, Ho, Wo)
  local y = pixel_position(grid:select(4, 2), h, padding_mode, align_corners)
  if mode == "nearest" then -- the grid's gradient is zero, as PyTorch's (not absent): a where that never picks it
    local never = accel.zeros(1, {dtype = accel.bool, device = input.device})
    return accel.where(never, (x + y):unsqueeze(2), pixels_at(flat, x:round(), y:round(), h, w))
  end
  local x0, y0 = x:floor(), y:floor()
  local x1, y1 = x0 + 1, y0 + 1
  local function weighted(px, py, weight) return pixels_at(flat, px, py, h, w) * weight:unsqueeze(2) end
  return weighted(x0, y0, (x1 - x) * (y1 - y)) + weighted(x1, y0, (x - x0) * (y1 - y))
    + weighted(x0, y1, (x1 - x) * (y - y0)) + weighted(x1, y1, (x - x0) * (y - y0))
end

for name, f in pairs(FUNCTIONS) do F[name] = f end

return {}
