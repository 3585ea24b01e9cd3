-- accel.nn.grid_sample: F.affine_grid and F.grid_sample for 2-D images and
-- 3-D volumes, as PyTorch's, composed of tensor ops (the samples are
-- gathers) so autograd gives the gradients of the input, the grid and theta.
-- grid_sample takes mode "bilinear" (trilinear on volumes) or "nearest" and
-- padding_mode "zeros", "border" or "reflection"; "bicubic" is an error that
-- says so. align_corners left out is false, with PyTorch's warning (once per
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

-- affine_grid(theta (N, 2, 3), size {N, C, H, W}, [align_corners]) -> grid (N, H, W, 2), or
-- theta (N, 3, 4), size {N, C, D, H, W} -> grid (N, D, H, W, 3): theta applied to each output pixel's
-- (x, y, [z,] 1)
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
  local dims, n = #sizes - 2, sizes[1]
  if theta:dim() ~= 3 or theta:size(2) ~= dims or theta:size(3) ~= dims + 1 or theta:size(1) ~= n then
    raise("affine_grid: expected a batch of %dD affine matrices of shape Nx%dx%d for size [%s], got %s", dims, dims,
      dims + 1, table.concat(sizes, ", "), util.shape_str(theta))
  end
  local spatial, count = {}, 1 -- the output's spatial sizes, the coordinates x, y[, z] along the last, ...
  for i = 1, dims do spatial[i], count = sizes[i + 2], count * sizes[i + 2] end
  local o = {dtype = theta.dtype, device = theta.device}
  local columns = {}
  for c = 1, dims do
    local along = dims + 1 - c -- x varies along the last spatial dim, y the one before, z the first
    local shape = {}
    for i = 1, dims do shape[i] = 1 end
    shape[along] = spatial[along]
    columns[c] = centres(spatial[along], align_corners, theta):reshape(shape):expand(spatial)
  end
  columns[dims + 1] = accel.ones(spatial, o)
  local points = accel.stack(columns, dims + 1):reshape({1, count, dims + 1})
  local out = {n}
  for i = 1, dims do out[i + 1] = spatial[i] end
  out[dims + 2] = dims
  return points:matmul(theta:transpose(2, 3)):reshape(out)
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

-- the input flat (N, C, pixels)'s values at integer positions pos[i] (N, out...) along the spatial dims
-- of sizes lens[i] (i = 1 the width, as the grid's coordinates), 0 where a position is outside:
-- (N, C, out...)
local function pixels_at(flat, pos, lens)
  local inside, index, stride = nil, nil, 1
  for i, p in ipairs(pos) do
    local ok = p:ge(0):logical_and(p:le(lens[i] - 1))
    local term = p:clamp(0, lens[i] - 1) * stride
    inside, index = inside and inside:logical_and(ok) or ok, index and index + term or term
    stride = stride * lens[i]
  end
  local n, c, m = flat:size(1), flat:size(2), pos[1]:numel() / flat:size(1)
  local shape = {n, c}
  for j = 2, pos[1]:dim() do shape[j + 1] = pos[1]:size(j) end
  local values = flat:gather(3, index:long():reshape({n, 1, m}):expand({n, c, m})):reshape(shape)
  return values * inside:unsqueeze(2):to(flat.dtype)
end

local function check_sample_args(input, grid)
  if not accel.is_tensor(input) or not accel.is_tensor(grid) then raise("grid_sample: input and grid must be Tensors") end
  if (input:dim() ~= 4 and input:dim() ~= 5) or grid:dim() ~= input:dim() then
    raise("grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, but got input with "
      .. "sizes %s and grid with sizes %s", util.shape_str(input), util.shape_str(grid))
  end
  if input:size(1) ~= grid:size(1) then
    raise("grid_sampler(): expected input and grid to have same batch size, but got input with sizes %s and grid "
      .. "with sizes %s", util.shape_str(input), util.shape_str(grid))
  end
  local dims = input:dim() - 2
  if grid:size(-1) ~= dims then
    raise("grid_sampler(): expected grid to have size %d in last dimension, but got grid with sizes %s", dims,
      util.shape_str(grid))
  end
  if input.dtype ~= grid.dtype or not input.dtype.is_floating_point then
    raise("grid_sampler(): expected input and grid to have the same floating point dtype, but input has %s and grid has %s",
      input.dtype.name, grid.dtype.name)
  end
  for i = 3, input:dim() do
    if input:size(i) == 0 then
      raise("grid_sampler(): expected input to have non-empty spatial dimensions, but input has sizes %s",
        util.shape_str(input))
    end
  end
end

-- grid_sample(input (N, C, H, W), grid (N, Ho, Wo, 2) of (x, y) in [-1, 1], [mode = "bilinear"],
--   [padding_mode = "zeros"], [align_corners]) -> (N, C, Ho, Wo); or input (N, C, D, H, W), grid
--   (N, Do, Ho, Wo, 3) of (x, y, z) -> (N, C, Do, Ho, Wo), "bilinear" being trilinear there
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
  local dims, n, c = input:dim() - 2, input:size(1), input:size(2)
  local lens, pos, pixels = {}, {}, 1 -- per grid coordinate (x, y[, z]): its dim's size, pixel positions
  for i = 1, dims do
    lens[i] = input:size(input:dim() + 1 - i)
    pixels = pixels * lens[i]
    pos[i] = pixel_position(grid:select(-1, i), lens[i], padding_mode, align_corners) -- (N, out...)
  end
  local flat = input:reshape({n, c, pixels})
  if mode == "nearest" then -- the grid's gradient is zero, as PyTorch's (not absent): a where that never picks it
    local never = accel.zeros(1, {dtype = accel.bool, device = input.device})
    local rounded, sum = {}, nil
    for i = 1, dims do rounded[i], sum = pos[i]:round(), sum and sum + pos[i] or pos[i] end
    return accel.where(never, sum:unsqueeze(2), pixels_at(flat, rounded, lens))
  end
  local low, high = {}, {}
  for i = 1, dims do low[i] = pos[i]:floor(); high[i] = low[i] + 1 end
  local out
  for corner = 0, 2 ^ dims - 1 do -- x varies fastest: (x0, y0), (x1, y0), (x0, y1), (x1, y1), ...
    local at, weight = {}, nil
    for i = 1, dims do
      local up = math.floor(corner / 2 ^ (i - 1)) % 2 == 1
      at[i] = up and high[i] or low[i]
      local w = up and pos[i] - low[i] or high[i] - pos[i]
      weight = weight and weight * w or w
    end
    local part = pixels_at(flat, at, lens) * weight:unsqueeze(2)
    out = out and out + part or part
  end
  return out
end

-- on torch's autocast float32 list (CPU): half inputs widened under autocast
require("accel.amp").fp32_ops(FUNCTIONS, {"grid_sample"})

for name, f in pairs(FUNCTIONS) do F[name] = f end

return {}
