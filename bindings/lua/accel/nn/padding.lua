-- accel.nn.padding: PyTorch's padding modules over F.pad: ZeroPad1d/2d/3d,
-- ConstantPad1d/2d/3d, ReflectionPad1d/2d/3d, ReplicationPad1d/2d/3d and
-- CircularPad1d/2d/3d. padding is an integer (every side) or a list of
-- 2 / 4 / 6 amounts {left, right, top, bottom, front, back}; printed as
-- PyTorch's. Loaded on first use of one of their names.
local base = require("accel.nn.module")
local F = require("accel.nn.functional")

local raise, py, export_class = base.raise, base.pyrepr, base.export_class

local M = {}

-- padding as the 2 * dims amounts F.pad takes
local function amounts(name, padding, dims)
  local n = 2 * dims
  if type(padding) == "number" then
    if padding ~= math.floor(padding) then raise("%s: padding must be an integer, got %s", name, py(padding)) end
    local out = {}
    for i = 1, n do out[i] = padding end
    return out
  end
  if type(padding) ~= "table" or #padding ~= n then
    raise("%s: padding must be an integer or a list of %d integers, got %s", name, n, py(padding))
  end
  local out = {}
  for i = 1, n do
    if type(padding[i]) ~= "number" or padding[i] ~= math.floor(padding[i]) then
      raise("%s: padding must be an integer or a list of %d integers, got %s", name, n, py(padding))
    end
    out[i] = padding[i]
  end
  return out
end

local function tuple(t) return "(" .. table.concat(t, ", ") .. ")" end

-- name (mode, dims): value = nil pads with zeros or the mode's rule; the
-- Constant ones take (padding, value).
local function padding_class(name, mode, dims)
  local cls = export_class(M, name)
  function cls:init(padding, value)
    self.padding = amounts(name, padding, dims)
    if mode == "constant" and name:find("^Constant") then
      if type(value) ~= "number" then raise("%s: value must be a number, got %s", name, type(value)) end
      self.value = value
    elseif value ~= nil then
      raise("%s: takes only padding, got a second argument", name)
    end
  end
  function cls:forward(x) return F.pad(x, self.padding, mode, self.value) end
  function cls:extra_repr()
    if self.value ~= nil then return ("padding=%s, value=%s"):format(tuple(self.padding), py(self.value)) end
    return tuple(self.padding)
  end
end

for dims = 1, 3 do
  padding_class("ZeroPad" .. dims .. "d", "constant", dims)
  padding_class("ConstantPad" .. dims .. "d", "constant", dims)
  padding_class("ReflectionPad" .. dims .. "d", "reflect", dims)
  padding_class("ReplicationPad" .. dims .. "d", "replicate", dims)
  padding_class("CircularPad" .. dims .. "d", "circular", dims)
end

return M
