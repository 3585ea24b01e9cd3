-- accel.creation: tensor constructors written in Lua (accel.eye), loaded
-- the first time one is named.
local accel = require("accel")
local util = require("accel.util")

local M = {}

-- accel.eye(n, [m = n], [{dtype =, device =, requires_grad =}]): ones on
-- the main diagonal of an (n, m) matrix, as torch.eye
function M.eye(n, m, o)
  if util.is_options(m) and o == nil then m, o = nil, m end
  o = util.check_options("eye", o, {"dtype", "device", "requires_grad"})
  m = m or n
  for _, v in ipairs({n, m}) do
    if type(v) ~= "number" or v ~= math.floor(v) or v < 0 then
      util.raise("eye: n and m must be non-negative integers, got %s", util.show(v))
    end
  end
  local dev = o.device
  local r = accel.arange(n, {device = dev}):unsqueeze(2):eq(accel.arange(m, {device = dev}))
  r = r:to(o.dtype or accel.float32)
  if o.requires_grad then r:requires_grad_(true) end
  return r
end

return M
