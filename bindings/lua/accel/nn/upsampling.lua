-- accel.nn.upsampling: nn.Upsample over F.interpolate, printed as PyTorch's.
-- Loaded on first use (accel.nn).
local base = require("accel.nn.module")
local F = require("accel.nn.functional")

local py, export_class = base.pyrepr, base.export_class

local M = {}

local Upsample = export_class(M, "Upsample")

-- Upsample([{size =, scale_factor =, mode = "nearest", align_corners =}])
function Upsample:init(o)
  o = base.check_options("Upsample", o, {"size", "scale_factor", "mode", "align_corners", "recompute_scale_factor"})
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
