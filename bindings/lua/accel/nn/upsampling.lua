-- accel.nn.upsampling: nn.Upsample over F.interpolate, and PixelShuffle /
-- PixelUnshuffle over F.pixel_shuffle / pixel_unshuffle (a reshape and a
-- permute, so autograd comes with them), printed as PyTorch's. Loaded on
-- first use (accel.nn).
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")

local py, export_class, raise = base.pyrepr, base.export_class, base.raise

local M = {}

-- x (..., C, H, W) checked for op with factor r; returns the leading sizes, C, H, W
local function planes(op, x, r)
  if not accel.is_tensor(x) or x:dim() < 3 then
    raise("%s: expected an input of at least 3 dims (..., C, H, W), got %s", op,
      accel.is_tensor(x) and tostring(x.shape) or type(x))
  end
  if type(r) ~= "number" or r ~= math.floor(r) or r < 1 then raise("%s: the factor must be a positive integer, got %s", op, py(r)) end
  local lead = {}
  for d = 1, x:dim() - 3 do lead[d] = x:size(d) end
  return lead, x:size(-3), x:size(-2), x:size(-1)
end

-- a list of the leading sizes followed by the rest
local function shape(lead, ...)
  local s = {}
  for i, v in ipairs(lead) do s[i] = v end
  for _, v in ipairs({...}) do s[#s + 1] = v end
  return s
end

-- pixel_shuffle(x (..., C r^2, H, W), r) -> (..., C, H r, W r)
function F.pixel_shuffle(x, upscale_factor)
  local lead, c, h, w = planes("pixel_shuffle", x, upscale_factor)
  local r, k = upscale_factor, #lead
  if c % (r * r) ~= 0 then
    raise("pixel_shuffle: expects its input's 'channel' dimension to be divisible by the square of upscale_factor, "
      .. "but input.size(-3)=%d is not divisible by %d", c, r * r)
  end
  local oc = math.floor(c / (r * r))
  local y = x:reshape(shape(lead, oc, r, r, h, w)) -- (..., oc, r, r, h, w) -> (..., oc, h, r, w, r)
  local perm = {}
  for d = 1, k do perm[d] = d end
  for _, d in ipairs({1, 4, 2, 5, 3}) do perm[#perm + 1] = k + d end
  return y:permute(perm):reshape(shape(lead, oc, h * r, w * r))
end

-- pixel_unshuffle(x (..., C, H r, W r), r) -> (..., C r^2, H, W)
function F.pixel_unshuffle(x, downscale_factor)
  local lead, c, h, w = planes("pixel_unshuffle", x, downscale_factor)
  local r, k = downscale_factor, #lead
  for _, side in ipairs({{"height", h, -2}, {"width", w, -1}}) do
    if side[2] % r ~= 0 then
      raise("pixel_unshuffle: expects %s to be divisible by downscale_factor, but input.size(%d)=%d is not divisible "
        .. "by %d", side[1], side[3], side[2], r)
    end
  end
  local oh, ow = math.floor(h / r), math.floor(w / r)
  local y = x:reshape(shape(lead, c, oh, r, ow, r)) -- (..., c, oh, r, ow, r) -> (..., c, r, r, oh, ow)
  local perm = {}
  for d = 1, k do perm[d] = d end
  for _, d in ipairs({1, 3, 5, 2, 4}) do perm[#perm + 1] = k + d end
  return y:permute(perm):reshape(shape(lead, c * r * r, oh, ow))
end

-- PixelShuffle(upscale_factor), PixelUnshuffle(downscale_factor)
for _, spec in ipairs({{"PixelShuffle", "upscale_factor", F.pixel_shuffle},
                       {"PixelUnshuffle", "downscale_factor", F.pixel_unshuffle}}) do
  local name, field, fn = spec[1], spec[2], spec[3]
  local cls = export_class(M, name)
  function cls:init(factor)
    self[field] = base.check_integer(factor, name, field, 1)
  end
  function cls:forward(x) return fn(x, self[field]) end
  function cls:extra_repr() return field .. "=" .. self[field] end
end

local Upsample = export_class(M, "Upsample")

-- Upsample([{size =, scale_factor =, mode = "nearest", align_corners =}])
function Upsample:init(...) -- PyTorch's positional order, or an options table
  local o = require("accel.util").torch_args("Upsample", {"size", "scale_factor", "mode:string", "align_corners:bool",
    "recompute_scale_factor"}, ...)
  self.size, self.scale_factor, self.mode, self.align_corners = o.size, o.scale_factor, o.mode or "nearest", o.align_corners
  self.recompute_scale_factor = o.recompute_scale_factor
end

function Upsample:forward(x)
  return F.interpolate(x, {size = self.size, scale_factor = self.scale_factor, mode = self.mode,
    align_corners = self.align_corners, recompute_scale_factor = self.recompute_scale_factor})
end

function Upsample:extra_repr()
  local what
  if self.scale_factor ~= nil then
    local f = self.scale_factor
    what = "scale_factor=" .. (type(f) == "number" and math.type and math.type(f) == "integer" and py(f + 0.0) or py(f))
  else
    what = "size=" .. py(self.size)
  end
  return what .. ", mode=" .. py(self.mode)
end

return M
