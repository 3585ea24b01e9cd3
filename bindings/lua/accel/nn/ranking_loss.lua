-- accel.nn.ranking_loss: the margin and embedding losses, PyTorch's
-- formulas composed from tensor ops (autograd comes with them):
-- F.margin_ranking_loss, hinge_embedding_loss, soft_margin_loss,
-- cosine_embedding_loss, triplet_margin_loss, multilabel_soft_margin_loss,
-- multi_margin_loss, multilabel_margin_loss and their modules. Targets are the data PyTorch takes (1 / -1, or 0 / 1
-- labels); the settings positionally or by name, reduction in the table.
-- Loaded on first use of one of its names.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local util = require("accel.util")

local raise, export_class = base.raise, base.export_class
local torch_args = util.torch_args

local M = {}
local FUNCTIONS = {}

local function tensors(op, ...)
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if not accel.is_tensor(t) then raise("%s: argument %d must be a Tensor, got %s", op, i, type(t)) end
  end
end

-- margin_ranking_loss(x1, x2, y, [margin = 0], [{reduction =}]): max(0, -y (x1 - x2) + margin)
function FUNCTIONS.margin_ranking_loss(x1, x2, y, ...)
  local a = torch_args("margin_ranking_loss", {"margin:number", "reduction:string"}, ...)
  tensors("margin_ranking_loss", x1, x2, y)
  if x1:dim() ~= x2:dim() or x1:dim() ~= y:dim() then
    raise("margin_ranking_loss: All input tensors should have same dimension but got sizes: input1: %s, input2: %s, "
      .. "target: %s", util.shape_str(x1), util.shape_str(x2), util.shape_str(y))
  end
  return F._reduce("margin_ranking_loss", (-y * (x1 - x2) + (a.margin or 0)):clamp(0), a.reduction)
end

-- hinge_embedding_loss(x, y, [margin = 1], [{reduction =}]): x where y is 1, max(0, margin - x) where y is -1
function FUNCTIONS.hinge_embedding_loss(x, y, ...)
  local a = torch_args("hinge_embedding_loss", {"margin:number", "reduction:string"}, ...)
  tensors("hinge_embedding_loss", x, y)
  local margin_part = accel.where(y:ne(1), ((a.margin or 1) - x):clamp(0), 0)
  return F._reduce("hinge_embedding_loss", margin_part + accel.where(y:ne(-1), x, 0), a.reduction)
end

-- soft_margin_loss(x, y, [{reduction =}]): log(1 + exp(-y x))
function FUNCTIONS.soft_margin_loss(x, y, ...)
  local a = torch_args("soft_margin_loss", {"reduction:string"}, ...)
  tensors("soft_margin_loss", x, y)
  return F._reduce("soft_margin_loss", (-y * x):exp():log1p(), a.reduction)
end

-- cosine_embedding_loss(x1, x2, y, [margin = 0], [{reduction =}]) over the last
-- dim of 1-D or 2-D inputs: 1 - cos where y is 1, max(0, cos - margin) where y is -1
function FUNCTIONS.cosine_embedding_loss(x1, x2, y, ...)
  local a = torch_args("cosine_embedding_loss", {"margin:number", "reduction:string"}, ...)
  tensors("cosine_embedding_loss", x1, x2, y)
  if x1:dim() ~= x2:dim() or (x1:dim() ~= 1 and x1:dim() ~= 2) or y:dim() ~= x1:dim() - 1 then
    raise("cosine_embedding_loss: expected 1-D or 2-D inputs of one shape and a target of one dim less, got %s, %s "
      .. "and %s", util.shape_str(x1), util.shape_str(x2), util.shape_str(y))
  end
  local eps = 1e-12 -- PyTorch's EPSILON, added to each squared magnitude
  local dot = (x1 * x2):sum(-1)
  local cos = dot / (((x1 * x1):sum(-1) + eps) * ((x2 * x2):sum(-1) + eps)):sqrt()
  local loss = accel.where(y:eq(1), 1 - cos, 0) + accel.where(y:eq(-1), (cos - (a.margin or 0)):clamp(0), 0)
  return F._reduce("cosine_embedding_loss", loss, a.reduction)
end

-- triplet_margin_loss(anchor, positive, negative, [margin = 1], [p = 2], [eps = 1e-6],
--   [swap = false], [{reduction =}]): max(0, margin + d(a, p) - d(a, n)), d the
-- pairwise p-norm distance (with swap: the nearer of d(a, n) and d(p, n))
function FUNCTIONS.triplet_margin_loss(anchor, positive, negative, ...)
  local a = torch_args("triplet_margin_loss", {"margin:number", "p:number", "eps:number", "swap:bool",
    "reduction:string"}, ...)
  tensors("triplet_margin_loss", anchor, positive, negative)
  if anchor:dim() ~= positive:dim() or anchor:dim() ~= negative:dim() then
    raise("triplet_margin_loss: The anchor, positive, and negative tensors are expected to have the same number of "
      .. "dimensions, but got: anchor %dD, positive %dD, and negative %dD inputs", anchor:dim(), positive:dim(),
      negative:dim())
  end
  local o = {p = a.p or 2, eps = a.eps or 1e-6}
  local d_pos = F.pairwise_distance(anchor, positive, o)
  local d_neg = F.pairwise_distance(anchor, negative, o)
  if a.swap then d_neg = d_neg:minimum(F.pairwise_distance(positive, negative, o)) end
  return F._reduce("triplet_margin_loss", ((a.margin or 1) + d_pos - d_neg):clamp(0), a.reduction)
end

-- multilabel_soft_margin_loss(x (N, C), y (N, C) of 0 / 1, [weight (C)], [{reduction =}]):
-- the mean over classes of -(y log sigmoid(x) + (1 - y) log sigmoid(-x))
function FUNCTIONS.multilabel_soft_margin_loss(x, y, ...)
  local a = torch_args("multilabel_soft_margin_loss", {"weight:tensor", "reduction:string"}, ...)
  tensors("multilabel_soft_margin_loss", x, y)
  local loss = -(y * F.logsigmoid(x) + (1 - y) * F.logsigmoid(-x))
  if a.weight ~= nil then loss = loss * a.weight end
  return F._reduce("multilabel_soft_margin_loss", loss:sum(-1) / x:size(-1), a.reduction)
end

-- multi_margin_loss(x (N, C) or (C), y (N) of 0-based classes, [p = 1], [margin = 1], [weight (C)],
-- [{reduction =}]): the mean over i != y of max(0, margin - x[y] + x[i])^p (times weight[y])
function FUNCTIONS.multi_margin_loss(x, y, ...)
  local a = torch_args("multi_margin_loss", {"p:number", "margin:number", "weight:tensor", "reduction:string"}, ...)
  tensors("multi_margin_loss", x, y)
  if a.p ~= nil and a.p ~= 1 and a.p ~= 2 then raise("multi_margin_loss: only p == 1 and p == 2 supported") end
  local xs = x:dim() == 1 and x:unsqueeze(1) or x
  local ys = y:reshape({-1, 1})
  if xs:dim() ~= 2 or ys:size(1) ~= xs:size(1) then
    raise("multi_margin_loss: inconsistent target size %s for input of size %s", util.shape_str(y), util.shape_str(x))
  end
  local c = xs:size(2)
  local picked = xs:gather(2, ys) -- (N, 1)
  local terms = ((a.margin or 1) - picked + xs):clamp(0)
  if (a.p or 1) == 2 then terms = terms * terms end
  if a.weight ~= nil then terms = terms * a.weight:index_select(1, ys:reshape({-1})):unsqueeze(2) end
  -- the target's own term (margin^p, or weighted) is left out
  terms = terms:scatter(2, ys, 0)
  local loss = terms:sum(2) / c
  if x:dim() == 1 then loss = loss:reshape({}) end
  return F._reduce("multi_margin_loss", loss, a.reduction)
end

-- multilabel_margin_loss(x (N, C) or (C), y (N, C) of 0-based classes ended by -1, [{reduction =}]):
-- for each sample, the sum over its targets j and the other classes i of max(0, 1 - (x[j] - x[i])), over C
function FUNCTIONS.multilabel_margin_loss(x, y, ...)
  local a = torch_args("multilabel_margin_loss", {"reduction:string"}, ...)
  tensors("multilabel_margin_loss", x, y)
  local xs, ys = x:dim() == 1 and x:unsqueeze(1) or x, y:dim() == 1 and y:unsqueeze(1) or y
  if xs.shape ~= ys.shape then
    raise("multilabel_margin_loss: inconsistent target size %s for input of size %s", util.shape_str(y), util.shape_str(x))
  end
  local n, c = xs:size(1), xs:size(2)
  -- is_target (N, C): class k is among the sample's targets (those before its first -1)
  local before_end = ys:eq(-1):long():cumsum(2):eq(0)
  local targets = accel.where(before_end, ys, 0)
  local is_target = accel.zeros(n, c, {dtype = x.dtype, device = x.device}):scatter_add(2, targets,
    before_end:to(x.dtype)):gt(0)
  local pair = (1 - (xs:unsqueeze(3) - xs:unsqueeze(2))):clamp(0) -- (N, j, i)
  local mask = is_target:unsqueeze(3):logical_and(is_target:logical_not():unsqueeze(2)):to(x.dtype)
  local loss = (pair * mask):sum({2, 3}) / c
  if x:dim() == 1 then loss = loss:reshape({}) end
  return F._reduce("multilabel_margin_loss", loss, a.reduction)
end

-- on torch's autocast float32 list (CPU): half inputs widened under autocast
require("accel.amp").fp32_ops(FUNCTIONS, {"hinge_embedding_loss", "cosine_embedding_loss", "triplet_margin_loss",
  "multi_margin_loss", "multilabel_margin_loss"})

for name, f in pairs(FUNCTIONS) do F[name] = f end

-- ---- modules: name(settings..., [{reduction = "mean"}]) -> criterion(inputs...) ----

local MODULES = {
  {"MarginRankingLoss", FUNCTIONS.margin_ranking_loss, {"margin:number"}, 3},
  {"HingeEmbeddingLoss", FUNCTIONS.hinge_embedding_loss, {"margin:number"}, 2},
  {"SoftMarginLoss", FUNCTIONS.soft_margin_loss, {}, 2},
  {"CosineEmbeddingLoss", FUNCTIONS.cosine_embedding_loss, {"margin:number"}, 3},
  {"TripletMarginLoss", FUNCTIONS.triplet_margin_loss, {"margin:number", "p:number", "eps:number", "swap:bool"}, 3},
  {"MultiLabelSoftMarginLoss", FUNCTIONS.multilabel_soft_margin_loss, {"weight:tensor"}, 2},
  {"MultiMarginLoss", FUNCTIONS.multi_margin_loss, {"p:number", "margin:number", "weight:tensor"}, 2},
  {"MultiLabelMarginLoss", FUNCTIONS.multilabel_margin_loss, {}, 2},
}

for _, spec in ipairs(MODULES) do
  local name, fn, settings, n_inputs = spec[1], spec[2], spec[3], spec[4]
  local specs = {}
  for i, s in ipairs(settings) do specs[i] = s end
  specs[#specs + 1] = "reduction:string"
  local cls = export_class(M, name)
  function cls:init(...)
    local a = torch_args(name, specs, ...)
    F._reduction(name, a.reduction)
    self.options = a
    if a.weight ~= nil then self:register_buffer("weight", a.weight) end
  end
  function cls:forward(...)
    if select("#", ...) ~= n_inputs then raise("%s: takes %d inputs, got %d", name, n_inputs, select("#", ...)) end
    local args = {...}
    local o = {}
    for k, v in pairs(self.options) do o[k] = v end
    if self.weight ~= nil then o.weight = self.weight end
    if n_inputs == 3 then return fn(args[1], args[2], args[3], o) end
    return fn(args[1], args[2], o)
  end
end

return M
