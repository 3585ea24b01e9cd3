-- accel.nn.bilinear: F.bilinear and nn.Bilinear, y = x1^T A x2 + b per
-- output feature, with PyTorch's weight (out, in1, in2), initialisation
-- (uniform within 1 / sqrt(in1)) and printed form; one matmul and a
-- multiply-sum, so autograd comes with it. Loaded on first use.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local init = require("accel.nn.initializers")

local raise, export_class = base.raise, base.export_class

local M = {}

-- bilinear(x1 (..., in1), x2 (..., in2), weight (out, in1, in2), [bias (out)]) -> (..., out)
function F.bilinear(x1, x2, weight, bias, ...)
  require("accel.util").no_more("bilinear", 4, ...)
  for name, t in pairs({input1 = x1, input2 = x2, weight = weight}) do
    if not accel.is_tensor(t) then raise("bilinear: %s must be a Tensor, got %s", name, type(t)) end
  end
  if weight:dim() ~= 3 or x1:size(-1) ~= weight:size(2) or x2:size(-1) ~= weight:size(3) then
    raise("bilinear: weight %s does not fit inputs %s and %s (weight (out, in1, in2))", tostring(weight.shape),
      tostring(x1.shape), tostring(x2.shape))
  end
  local lead = {}
  for d = 1, x1:dim() - 1 do lead[d] = x1:size(d) end
  local out, in1, in2 = weight:size(1), weight:size(2), weight:size(3)
  local a = x1:reshape({-1, in1}):matmul(weight:permute({2, 1, 3}):reshape({in1, out * in2})) -- (B, out * in2)
  local y = (a:view(-1, out, in2) * x2:reshape({-1, 1, in2})):sum(3)
  if bias ~= nil then y = y + bias end
  lead[#lead + 1] = out
  return y:reshape(lead)
end

local Bilinear = export_class(M, "Bilinear")

-- Bilinear(in1_features, in2_features, out_features, [bias = true], [{dtype =, device =}])
function Bilinear:init(in1, in2, out, ...)
  local a = require("accel.util").torch_args("Bilinear", {"bias:bool", "dtype", "device"}, ...)
  self.in1_features = base.check_integer(in1, "Bilinear", "in1_features", 1)
  self.in2_features = base.check_integer(in2, "Bilinear", "in2_features", 1)
  self.out_features = base.check_integer(out, "Bilinear", "out_features", 1)
  local o = {dtype = a.dtype, device = a.device}
  self.weight = base.Parameter(accel.empty({out, in1, in2}, o))
  if a.bias ~= false then self.bias = base.Parameter(accel.empty({out}, o))
  else self:register_parameter("bias", nil) end
  self:reset_parameters()
end

function Bilinear:reset_parameters()
  local bound = 1 / math.sqrt(self.weight:size(2))
  init.uniform_(self.weight, -bound, bound)
  if self.bias ~= nil then init.uniform_(self.bias, -bound, bound) end
end

function Bilinear:forward(x1, x2) return F.bilinear(x1, x2, self.weight, self.bias) end

function Bilinear:extra_repr()
  return ("in1_features=%d, in2_features=%d, out_features=%d, bias=%s"):format(self.in1_features, self.in2_features,
    self.out_features, self.bias ~= nil and "True" or "False")
end

return M
