-- accel.nn.likelihood_loss: the negative log-likelihood losses of a Poisson
-- and of a Gaussian, PyTorch's formulas composed from tensor ops (autograd
-- comes with them): F.poisson_nll_loss / nn.PoissonNLLLoss and
-- F.gaussian_nll_loss / nn.GaussianNLLLoss. Loaded on first use of one of
-- their names.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local util = require("accel.util")

local raise, export_class = base.raise, base.export_class
local torch_args = util.torch_args

local M = {}
local FUNCTIONS = {}

local POISSON = {"log_input:bool", "full:bool", "size_average", "eps:number", "reduce", "reduction:string"}
local GAUSSIAN = {"full:bool", "eps:number", "reduction:string"}

local function deprecated(op, a)
  if a.size_average ~= nil or a.reduce ~= nil then
    raise("%s: size_average and reduce are deprecated and not taken; use reduction", op)
  end
end

-- poisson_nll_loss(input, target, [log_input = true], [full = false], [size_average], [eps = 1e-8],
--   [reduce], [reduction = "mean"]): exp(input) - target input (log_input), or input - target
--   log(input + eps); full adds Stirling's term target log target - target + log(2 pi target) / 2 where target > 1
function FUNCTIONS.poisson_nll_loss(input, target, ...)
  local a = torch_args("poisson_nll_loss", POISSON, ...)
  deprecated("poisson_nll_loss", a)
  if not accel.is_tensor(input) or not accel.is_tensor(target) then raise("poisson_nll_loss: input and target must be Tensors") end
  local loss
  if a.log_input ~= false then loss = input:exp() - target * input
  else loss = input - target * (input + (a.eps or 1e-8)):log() end
  if a.full then
    local safe = accel.where(target:gt(1), target, 2) -- (the term is 0 at and below 1)
    local stirling = safe * safe:log() - safe + (2 * math.pi * safe):log() * 0.5
    loss = loss + accel.where(target:gt(1), stirling, 0)
  end
  return F._reduce("poisson_nll_loss", loss, a.reduction)
end

-- gaussian_nll_loss(input, target, var, [full = false], [eps = 1e-6], [reduction = "mean"]):
-- (log(max(var, eps)) + (input - target)^2 / max(var, eps)) / 2 (+ log(2 pi) / 2 with full); var
-- of input's shape, or without its last dim, or with a last dim of 1; the clamp passes the
-- gradient through unchanged, as PyTorch's (it clamps a copy without recording)
function FUNCTIONS.gaussian_nll_loss(input, target, var, ...)
  local a = torch_args("gaussian_nll_loss", GAUSSIAN, ...)
  for name, t in pairs({input = input, target = target, var = var}) do
    if not accel.is_tensor(t) then raise("gaussian_nll_loss: %s must be a Tensor, got %s", name, type(t)) end
  end
  if input.shape ~= var.shape then
    local nd = input:dim()
    local same_lead = var:dim() == nd - 1
    for d = 1, nd - 1 do same_lead = same_lead and var:size(d) == input:size(d) end
    local last_one = var:dim() == nd and var:size(nd) == 1
    for d = 1, nd - 1 do last_one = last_one and var:size(d) == input:size(d) end
    if same_lead then var = var:unsqueeze(-1)
    elseif not last_one then raise("gaussian_nll_loss: var is of incorrect size (%s for an input of %s)",
      util.shape_str(var), util.shape_str(input)) end
  end
  if var:lt(0):any():item() then raise("gaussian_nll_loss: var has negative entry/entries") end
  local eps = a.eps or 1e-6
  local v = var + (var:clamp(eps) - var):detach()
  local loss = (v:log() + (input - target):pow(2) / v) * 0.5
  if a.full then loss = loss + 0.5 * math.log(2 * math.pi) end
  return F._reduce("gaussian_nll_loss", loss, a.reduction)
end

-- on torch's autocast float32 list (CPU): half inputs widened under autocast
require("accel.amp").fp32_ops(FUNCTIONS, {"poisson_nll_loss"})

for name, f in pairs(FUNCTIONS) do F[name] = f end

-- PoissonNLLLoss([log_input = true], [full = false], [size_average], [eps = 1e-8], [reduce], [{reduction =}])
local PoissonNLLLoss = export_class(M, "PoissonNLLLoss")
function PoissonNLLLoss:init(...)
  self.options = torch_args("PoissonNLLLoss", POISSON, ...)
  deprecated("PoissonNLLLoss", self.options)
  F._reduction("PoissonNLLLoss", self.options.reduction)
end
function PoissonNLLLoss:forward(input, target) return FUNCTIONS.poisson_nll_loss(input, target, self.options) end

-- GaussianNLLLoss([{full = false, eps = 1e-6, reduction = "mean"}]); forward(input, target, var)
local GaussianNLLLoss = export_class(M, "GaussianNLLLoss")
function GaussianNLLLoss:init(...)
  self.options = torch_args("GaussianNLLLoss", GAUSSIAN, ...)
  F._reduction("GaussianNLLLoss", self.options.reduction)
end
function GaussianNLLLoss:forward(input, target, var)
  return FUNCTIONS.gaussian_nll_loss(input, target, var, self.options)
end

return M
