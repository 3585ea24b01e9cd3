-- max_rel.lua: `accel-lua max_rel.lua A.safetensors B.safetensors` prints
-- "max_rel D at KEY": the largest relative difference, per tensor
-- max |a - b| / max |b|, between the tensors of two files (B is the
-- reference; a tensor missing from A, or a file that cannot be read, gives
-- "max_rel inf at <why>"). Used by scripts/test-machines.sh.
local accel = require("accel")

local ok_a, a = pcall(accel.load, arg[1])
local ok_b, b = pcall(accel.load, arg[2])
if not (ok_a and ok_b) then
  print("max_rel inf at " .. tostring(ok_a and b or a):gsub("\n", " "))
  return
end
local worst, where = 0, "-"
for k, t in pairs(b) do
  if not a[k] then
    worst, where = math.huge, "no " .. k
    break
  end
  local scale = t:double():abs():max():item()
  local d = (a[k]:double() - t:double()):abs():max():item() / (scale > 0 and scale or 1)
  if d > worst then worst, where = d, k end
end
print(("max_rel %.3g at %s"):format(worst, where))
