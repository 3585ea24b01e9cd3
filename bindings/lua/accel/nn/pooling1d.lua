-- accel.nn.pooling1d: pooling over one dim and distances, built on the 2-D
-- pooling and on tensor ops: F.max_pool1d / avg_pool1d / adaptive_avg_pool1d
-- (an (N, C, L) or (C, L) input viewed as a height of 1) with MaxPool1d /
-- AvgPool1d / AdaptiveAvgPool1d, and F.pairwise_distance with
-- PairwiseDistance / CosineSimilarity. PyTorch's arguments (positionally or
-- in a table) and printed forms. Loaded on first use of one of its names.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local util = require("accel.util")

local raise, py, export_class = base.raise, base.pyrepr, base.export_class
local torch_args = util.torch_args

local M = {}
local FUNCTIONS = {}

-- x (N, C, L) or (C, L) as (..., 1, L), else op's error
local function as_planes(op, x)
  if not accel.is_tensor(x) or (x:dim() ~= 2 and x:dim() ~= 3) then
    raise("%s: expected input of shape (N, C, L) or (C, L), got %s", op,
      accel.is_tensor(x) and tostring(x.shape) or type(x))
  end
  return x:unsqueeze(-2)
end

local function int_arg(op, name, v)
  if type(v) == "table" and #v == 1 then v = v[1] end
  if type(v) ~= "number" or v ~= math.floor(v) then
    raise("%s: %s must be an integer (or a list of one), got %s", op, name, util.show(v))
  end
  return v
end

local MAX_SPECS = {"stride", "padding", "dilation", "ceil_mode:bool", "return_indices:bool"}

-- max_pool1d(x, kernel_size, [stride = kernel_size], [padding = 0], [dilation = 1], [ceil_mode], [return_indices])
-- -> values[, indices (0-based positions along L)]
function FUNCTIONS.max_pool1d(x, kernel_size, ...)
  local a = torch_args("max_pool1d", MAX_SPECS, ...)
  local planes, op = as_planes("max_pool1d", x), "max_pool1d"
  local k = int_arg(op, "kernel_size", kernel_size)
  local stride = a.stride == nil and k or int_arg(op, "stride", a.stride)
  local y, idx = F.max_pool2d(planes, {1, k}, {stride = {1, stride}, padding = {0, int_arg(op, "padding", a.padding or 0)},
    dilation = {1, int_arg(op, "dilation", a.dilation or 1)}, ceil_mode = a.ceil_mode == true,
    return_indices = a.return_indices == true})
  if idx then return y:squeeze(-2), idx:squeeze(-2) end
  return y:squeeze(-2)
end

-- avg_pool1d(x, kernel_size, [stride = kernel_size], [padding = 0], [ceil_mode = false], [count_include_pad = true])
function FUNCTIONS.avg_pool1d(x, kernel_size, ...)
  local a = torch_args("avg_pool1d", {"stride", "padding", "ceil_mode:bool", "count_include_pad:bool"}, ...)
  local planes, op = as_planes("avg_pool1d", x), "avg_pool1d"
  local k = int_arg(op, "kernel_size", kernel_size)
  local stride = a.stride == nil and k or int_arg(op, "stride", a.stride)
  return F.avg_pool2d(planes, {1, k}, {stride = {1, stride}, padding = {0, int_arg(op, "padding", a.padding or 0)},
    ceil_mode = a.ceil_mode == true, count_include_pad = a.count_include_pad ~= false}):squeeze(-2)
end

-- adaptive_avg_pool1d(x, output_size)
function FUNCTIONS.adaptive_avg_pool1d(x, output_size, ...)
  torch_args("adaptive_avg_pool1d", {}, ...)
  local n = int_arg("adaptive_avg_pool1d", "output_size", output_size)
  return F.adaptive_avg_pool2d(as_planes("adaptive_avg_pool1d", x), {1, n}):squeeze(-2)
end

-- pairwise_distance(x1, x2, [p = 2], [eps = 1e-6], [keepdim = false]):
-- the p-norm of x1 - x2 + eps over the last dim (broadcast)
function FUNCTIONS.pairwise_distance(x1, x2, ...)
  local a = torch_args("pairwise_distance", {"p:number", "eps:number", "keepdim:bool"}, ...)
  for name, t in pairs({x1 = x1, x2 = x2}) do
    if not accel.is_tensor(t) then raise("pairwise_distance: %s must be a Tensor, got %s", name, type(t)) end
  end
  return (x1 - x2 + (a.eps or 1e-6)):norm(a.p or 2, -1, {keepdim = a.keepdim == true})
end

-- pdist(input (N, M), [p = 2]): the N (N - 1) / 2 distances of rows i < j, in row-major order
function FUNCTIONS.pdist(x, ...)
  local a = torch_args("pdist", {"p:number"}, ...)
  if not accel.is_tensor(x) or x:dim() ~= 2 then
    raise("pdist: only supports 2D tensors, got: %s", accel.is_tensor(x) and (x:dim() .. "D") or type(x))
  end
  local n = x:size(1)
  local pairs_ = accel.triu_indices(n, n, 1, {device = x.device})
  local i, j = pairs_[1], pairs_[2]
  local xi, xj = x:index_select(1, i), x:index_select(1, j) -- (K, M)
  local p = a.p or 2
  if p == math.huge then -- cdist's, for its gradient: every element tied for the maximum gets all of it
    return accel.cdist(xi:unsqueeze(2), xj:unsqueeze(2), math.huge):reshape({xi:size(1)})
  end
  return (xi - xj):norm(p, 2)
end

-- (sum over each window of x^p)^(1 / p) in n dims, PyTorch's computation: an average pool of x^p (with
-- ceil_mode) times the kernel's size
local function lp_pool(op, n, avg_pool, x, norm_type, kernel_size, ...)
  local a = torch_args(op, {"stride", "ceil_mode:bool"}, ...)
  local k = base.int_list(op, "kernel_size", kernel_size, n, 1)
  local stride = a.stride
  if type(stride) == "table" and next(stride) == nil then stride = nil end -- {}: the kernel size, as torch's
  if stride ~= nil then stride = base.int_list(op, "stride", stride, n, 1) end -- (checked here to name lp_pool)
  local out = avg_pool(x:pow(norm_type), k, {stride = stride, ceil_mode = a.ceil_mode == true})
  local size = 1
  for _, v in ipairs(k) do size = size * v end
  return (out:sign() * out:abs():relu()):mul(size):pow(1 / norm_type)
end

-- lp_pool2d(x, norm_type, kernel_size, [stride = kernel_size], [ceil_mode = false]),
-- lp_pool3d(x (N, C, D, H, W) or (C, D, H, W), ...)
function FUNCTIONS.lp_pool2d(...) return lp_pool("lp_pool2d", 2, F.avg_pool2d, ...) end
function FUNCTIONS.lp_pool3d(...) return lp_pool("lp_pool3d", 3, F.avg_pool3d, ...) end

-- lp_pool1d(x (N, C, L) or (C, L), norm_type, kernel_size, [stride], [ceil_mode]): lp_pool2d over a height of 1
function FUNCTIONS.lp_pool1d(x, norm_type, kernel_size, ...)
  local a = torch_args("lp_pool1d", {"stride", "ceil_mode:bool"}, ...)
  local k = int_arg("lp_pool1d", "kernel_size", kernel_size)
  local stride = a.stride == nil and k or int_arg("lp_pool1d", "stride", a.stride)
  return FUNCTIONS.lp_pool2d(as_planes("lp_pool1d", x), norm_type, {1, k}, {1, stride}, a.ceil_mode):squeeze(-2)
end

for name, fn in pairs(FUNCTIONS) do rawset(F, name, fn) end

-- ---- modules ----

-- LPPool1d / LPPool2d / LPPool3d(norm_type, kernel_size, [stride], [ceil_mode = false])
for n = 1, 3 do
  local name, fn = ("LPPool%dd"):format(n), FUNCTIONS[("lp_pool%dd"):format(n)]
  local cls = export_class(M, name)
  function cls:init(norm_type, kernel_size, ...)
    local a = torch_args(name, {"stride", "ceil_mode:bool"}, ...)
    if type(norm_type) ~= "number" or norm_type <= 0 then raise("%s: norm_type must be a positive number, got %s", name, py(norm_type)) end
    self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, a.stride, a.ceil_mode == true
  end
  function cls:forward(x) return fn(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode) end
  function cls:extra_repr()
    return ("norm_type=%s, kernel_size=%s, stride=%s, ceil_mode=%s"):format(py(self.norm_type), py(self.kernel_size),
      self.stride == nil and "None" or py(self.stride), py(self.ceil_mode))
  end
end

local MaxPool1d = export_class(M, "MaxPool1d")

-- MaxPool1d(kernel_size, [stride = kernel_size], [padding = 0], [dilation = 1], [return_indices], [ceil_mode])
function MaxPool1d:init(kernel_size, ...)
  local a = torch_args("MaxPool1d", {"stride", "padding", "dilation", "return_indices:bool", "ceil_mode:bool"}, ...)
  self.kernel_size = int_arg("MaxPool1d", "kernel_size", kernel_size)
  self.stride = a.stride == nil and self.kernel_size or int_arg("MaxPool1d", "stride", a.stride)
  self.padding = int_arg("MaxPool1d", "padding", a.padding or 0)
  self.dilation = int_arg("MaxPool1d", "dilation", a.dilation or 1)
  self.return_indices, self.ceil_mode = a.return_indices == true, a.ceil_mode == true
end
function MaxPool1d:forward(x)
  return FUNCTIONS.max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
    self.return_indices)
end
function MaxPool1d:extra_repr()
  return ("kernel_size=%d, stride=%d, padding=%d, dilation=%d, ceil_mode=%s"):format(self.kernel_size, self.stride,
    self.padding, self.dilation, py(self.ceil_mode))
end

local AvgPool1d = export_class(M, "AvgPool1d")

-- AvgPool1d(kernel_size, [stride = kernel_size], [padding = 0], [ceil_mode = false], [count_include_pad = true])
function AvgPool1d:init(kernel_size, ...)
  local a = torch_args("AvgPool1d", {"stride", "padding", "ceil_mode:bool", "count_include_pad:bool"}, ...)
  self.kernel_size = int_arg("AvgPool1d", "kernel_size", kernel_size)
  self.stride = a.stride == nil and self.kernel_size or int_arg("AvgPool1d", "stride", a.stride)
  self.padding = int_arg("AvgPool1d", "padding", a.padding or 0)
  self.ceil_mode, self.count_include_pad = a.ceil_mode == true, a.count_include_pad ~= false
end
function AvgPool1d:forward(x)
  return FUNCTIONS.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)
end
function AvgPool1d:extra_repr()
  return ("kernel_size=(%d,), stride=(%d,), padding=(%d,)"):format(self.kernel_size, self.stride, self.padding)
end

local AdaptiveAvgPool1d = export_class(M, "AdaptiveAvgPool1d")
function AdaptiveAvgPool1d:init(output_size)
  self.output_size = int_arg("AdaptiveAvgPool1d", "output_size", output_size)
end
function AdaptiveAvgPool1d:forward(x) return FUNCTIONS.adaptive_avg_pool1d(x, self.output_size) end
function AdaptiveAvgPool1d:extra_repr() return "output_size=" .. self.output_size end

local PairwiseDistance = export_class(M, "PairwiseDistance")

-- PairwiseDistance([p = 2], [eps = 1e-6], [keepdim = false])
function PairwiseDistance:init(...)
  local a = torch_args("PairwiseDistance", {"p:number", "eps:number", "keepdim:bool"}, ...)
  self.norm, self.eps, self.keepdim = a.p or 2.0, a.eps or 1e-6, a.keepdim == true
end
function PairwiseDistance:forward(x1, x2) return FUNCTIONS.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim) end
function PairwiseDistance:extra_repr() return "" end

local CosineSimilarity = export_class(M, "CosineSimilarity")

-- CosineSimilarity([dim = 2], [eps = 1e-8]); dim 1-based (PyTorch's default dim=1)
function CosineSimilarity:init(...)
  local a = torch_args("CosineSimilarity", {"dim:int", "eps:number"}, ...)
  self.dim, self.eps = a.dim or 2, a.eps or 1e-8
end
function CosineSimilarity:forward(x1, x2) return F.cosine_similarity(x1, x2, self.dim, self.eps) end
function CosineSimilarity:extra_repr() return "" end

return M
