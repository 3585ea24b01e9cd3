-- accel.nn.loss: loss modules over accel.nn.functional, with PyTorch's
-- options in one table: CrossEntropyLoss({ignore_index = -100,
-- label_smoothing = 0, reduction = "mean"}), NLLLoss({ignore_index =,
-- reduction =}), MSELoss, L1Loss, BCEWithLogitsLoss({weight =, pos_weight =,
-- reduction =}). Called as criterion(input, target). Class targets are
-- 0-based ids. Per-class `weight` for CrossEntropyLoss / NLLLoss is not
-- supported (a clear error).
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")

local raise, export_class = base.raise, base.export_class

local M = {}

-- o checked against keys (a tensor in o's place is the caller's to refuse)
local function opts(name, o, keys)
  if accel.is_tensor(o) then return {} end
  return base.check_options(name, o, keys)
end

local function reduction(name, o) return F._reduction(name, o.reduction) end

-- PyTorch's positional layouts (size_average, reduce, reduction, ...) are
-- not read: arguments past the options table (or past target in a call)
-- are refused rather than dropped.
local function no_more(name, n, ...)
  local extra = select("#", ...)
  if extra > 0 then
    raise("%s: takes %d argument%s (options in one table) but %d were given", name, n, n == 1 and "" or "s", n + extra)
  end
end

-- The options of a class-target loss (o: its constructor's argument, or
-- PyTorch's first positional one, the weight), with ignore_index set on
-- self and the per-class weight a buffer, as PyTorch's (state_dict holds it
-- when given; :to() moves it)
local function class_target_opts(self, name, o, keys)
  if accel.is_tensor(o) then o = {weight = o} end
  o = opts(name, o, keys)
  if o.weight ~= nil and not accel.is_tensor(o.weight) then
    raise("%s: weight must be a tensor, got %s", name, type(o.weight))
  end
  self.ignore_index = F._ignore_index(name, o.ignore_index)
  self:register_buffer("weight", o.weight)
  return o
end

local CrossEntropyLoss = export_class(M, "CrossEntropyLoss")
function CrossEntropyLoss:init(o, ...)
  no_more("CrossEntropyLoss", 1, ...)
  o = class_target_opts(self, "CrossEntropyLoss", o, {"weight", "ignore_index", "reduction", "label_smoothing"})
  self.label_smoothing = F._label_smoothing("CrossEntropyLoss", o.label_smoothing)
  self.reduction = reduction("CrossEntropyLoss", o)
end
function CrossEntropyLoss:forward(input, target, ...)
  no_more("CrossEntropyLoss", 2, ...)
  return F.cross_entropy(input, target, {weight = self.weight, ignore_index = self.ignore_index,
                                         label_smoothing = self.label_smoothing, reduction = self.reduction})
end

local NLLLoss = export_class(M, "NLLLoss")
function NLLLoss:init(o, ...)
  no_more("NLLLoss", 1, ...)
  o = class_target_opts(self, "NLLLoss", o, {"weight", "ignore_index", "reduction"})
  self.reduction = reduction("NLLLoss", o)
end
function NLLLoss:forward(input, target, ...)
  no_more("NLLLoss", 2, ...)
  return F.nll_loss(input, target, {weight = self.weight, ignore_index = self.ignore_index, reduction = self.reduction})
end

-- A loss module over F[fn](input, target, {keys...}): its constructor takes
-- those options (reduction checked at once; a weight becomes a buffer, as
-- PyTorch's, and may come first positionally), its forward passes them on.
local function pointwise_loss(name, fn, keys, allow_batchmean)
  local cls = export_class(M, name)
  function cls:init(o, ...)
    no_more(name, 1, ...)
    if accel.is_tensor(o) then o = {weight = o} end
    o = opts(name, o, keys)
    self.reduction = allow_batchmean and o.reduction == "batchmean" and "batchmean" or reduction(name, o)
    for _, k in ipairs(keys) do
      if k == "weight" then self:register_buffer("weight", o.weight)
      elseif k ~= "reduction" then self[k] = o[k] end
    end
  end
  function cls:forward(input, target, ...)
    no_more(name, 2, ...)
    local o = {}
    for _, k in ipairs(keys) do o[k] = self[k] end
    return F[fn](input, target, o)
  end
  return cls
end

pointwise_loss("MSELoss", "mse_loss", {"reduction"})
pointwise_loss("L1Loss", "l1_loss", {"reduction"})
pointwise_loss("SmoothL1Loss", "smooth_l1_loss", {"reduction", "beta"})
pointwise_loss("HuberLoss", "huber_loss", {"reduction", "delta"})
pointwise_loss("BCELoss", "binary_cross_entropy", {"weight", "reduction"})
pointwise_loss("KLDivLoss", "kl_div", {"reduction", "log_target"}, true)

-- BCEWithLogitsLoss([{weight =, pos_weight =, reduction =}]): weight and
-- pos_weight are buffers, as in PyTorch (so they follow :to() and appear in
-- state_dict when given).
local BCEWithLogitsLoss = export_class(M, "BCEWithLogitsLoss")
function BCEWithLogitsLoss:init(o, ...)
  no_more("BCEWithLogitsLoss", 1, ...)
  if accel.is_tensor(o) then o = {weight = o} end -- PyTorch's first positional argument
  o = opts("BCEWithLogitsLoss", o, {"weight", "reduction", "pos_weight"})
  self.reduction = reduction("BCEWithLogitsLoss", o)
  self:register_buffer("weight", o.weight)
  self:register_buffer("pos_weight", o.pos_weight)
end
function BCEWithLogitsLoss:forward(input, target, ...)
  no_more("BCEWithLogitsLoss", 2, ...)
  return F.binary_cross_entropy_with_logits(input, target,
    {weight = self.weight, pos_weight = self.pos_weight, reduction = self.reduction})
end

return M
