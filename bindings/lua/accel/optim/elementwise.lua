-- accel.optim.elementwise: RMSprop, Adagrad, Adadelta, Adamax, NAdam, Rprop, ASGD and
-- RAdam, PyTorch's single-tensor formulas written as tensor ops per
-- parameter (no fused C kernel: these are for porting scripts, not the
-- sharding engine, which takes SGD / Adam / AdamW). Loaded on first use of
-- one of them.
--
-- State as PyTorch's (step a number here, as for Adam): RMSprop keeps
-- square_avg, momentum_buffer (momentum > 0) and grad_avg (centered);
-- Adagrad keeps sum, made at construction from initial_accumulator_value
-- as PyTorch makes it; Adadelta square_avg and acc_delta; Adamax exp_avg and
-- exp_inf; NAdam mu_product (a number, rounded to float32 at each step as
-- PyTorch's float32 tensor is, to the parameter's dtype after
-- load_state_dict as PyTorch casts that tensor: optim._parts.round_scalar),
-- exp_avg and exp_avg_sq; RAdam exp_avg and exp_avg_sq.
local accel = require("accel")
local optim = require("accel.optim")

local parts = optim._parts
local options, ctor_options, step_groups, param_state = parts.options, parts.ctor_options, parts.step_groups,
  parts.param_state
local round_scalar = parts.round_scalar
local check_nonnegative, check_bool, check_betas = parts.check_nonnegative, parts.check_bool, parts.check_betas

local M = {}

-- p's gradient as the update reads it: negated under maximize, plus
-- weight_decay * p (a new tensor; p.grad is left as it is).
local function update_grad(p, g)
  local grad = g.maximize and -p.grad or p.grad
  if g.weight_decay ~= 0 then grad = grad + p * g.weight_decay end
  return grad
end

-- ---- RMSprop ----

local RMSprop = optim.Optimizer:extend("RMSprop")
M.RMSprop = RMSprop

local RMSPROP_DEFAULTS = {lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0, centered = false,
                          maximize = false}

-- RMSprop(params, [lr], {lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0,
-- centered = false, maximize = false})
function RMSprop:init(params, lr, opts)
  optim.Optimizer.init(self, params, options("RMSprop", ctor_options("RMSprop", lr, opts), RMSPROP_DEFAULTS))
end

RMSprop._torch_keys = {capturable = "False", differentiable = "False", foreach = "None"}
RMSprop._state_keys = {required = {"step", "square_avg"}, optional = {"momentum_buffer", "grad_avg"}}

-- A group's checks: the keys of nonnegative >= 0 (PyTorch's "Invalid <what>"
-- messages: the learning rate, epsilon, else "<key> value"), those of bools booleans.
local function group_checker(nonnegative, bools)
  local what = {lr = "learning rate", eps = "epsilon value"}
  return function(self, g)
    for _, k in ipairs(nonnegative) do check_nonnegative(self.__name, g, k, what[k] or k .. " value") end
    for _, k in ipairs(bools) do check_bool(self.__name, g, k) end
  end
end

RMSprop._check_group = group_checker({"lr", "eps", "momentum", "weight_decay", "alpha"}, {"centered", "maximize"})

-- square_avg = alpha square_avg + (1 - alpha) grad^2; avg = sqrt(square_avg
-- [- grad_avg^2 when centered]) + eps; p -= lr buf (buf = momentum buf +
-- grad / avg) or lr grad / avg
local function rmsprop_group_step(self, _, g, grads)
  for i, p in ipairs(g.params) do
    if grads[i] then
      local st = param_state(self.state, p)
      if st.square_avg == nil then
        st.step, st.square_avg = 0, accel.zeros_like(p)
        if g.momentum > 0 then st.momentum_buffer = accel.zeros_like(p) end
        if g.centered then st.grad_avg = accel.zeros_like(p) end
      end
      st.step = st.step + 1
      local grad = update_grad(p, g)
      st.square_avg:mul_(g.alpha):addcmul_(grad, grad, {value = 1 - g.alpha})
      local avg
      if g.centered then
        st.grad_avg:lerp_(grad, 1 - g.alpha)
        avg = st.square_avg:addcmul(st.grad_avg, st.grad_avg, {value = -1}):sqrt_()
      else
        avg = st.square_avg:sqrt()
      end
      avg:add_(g.eps)
      if g.momentum > 0 then
        st.momentum_buffer:mul_(g.momentum):addcdiv_(grad, avg)
        p:add_(st.momentum_buffer, {alpha = -g.lr})
      else
        p:addcdiv_(grad, avg, {value = -g.lr})
      end
    end
  end
end

function RMSprop:step(closure)
  return accel.no_grad(function() return step_groups(self, closure, rmsprop_group_step) end)
end

-- ---- Adagrad ----

local Adagrad = optim.Optimizer:extend("Adagrad")
M.Adagrad = Adagrad

local ADAGRAD_DEFAULTS = {lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10,
                          maximize = false}

-- Adagrad(params, [lr], {lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0,
-- eps = 1e-10, maximize = false})
function Adagrad:init(params, lr, opts)
  optim.Optimizer.init(self, params, options("Adagrad", ctor_options("Adagrad", lr, opts), ADAGRAD_DEFAULTS))
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do self:_init_state(p) end
  end
end

-- PyTorch makes Adagrad's state when the parameter joins: step 0 and the
-- accumulator filled with the optimizer's initial_accumulator_value
-- (self.defaults: PyTorch 2.15 reads no group's own, also for a group
-- added later).
function Adagrad:_init_state(p)
  local st = param_state(self.state, p)
  if st.sum == nil then st.step, st.sum = 0, accel.full_like(p, self.defaults.initial_accumulator_value) end
  return st
end

Adagrad._torch_keys = {differentiable = "False", foreach = "None", fused = "None"}
Adagrad._state_keys = {required = {"step", "sum"}, optional = {}}

Adagrad._check_group = group_checker({"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"}, {"maximize"})

-- sum += grad^2; p -= lr / (1 + (step - 1) lr_decay) grad / (sqrt(sum) + eps)
local function adagrad_group_step(self, _, g, grads)
  for i, p in ipairs(g.params) do
    if grads[i] then
      local st = self:_init_state(p)
      st.step = st.step + 1
      local grad = update_grad(p, g)
      local clr = g.lr / (1 + (st.step - 1) * g.lr_decay)
      st.sum:addcmul_(grad, grad, {value = 1})
      p:addcdiv_(grad, st.sum:sqrt():add_(g.eps), {value = -clr})
    end
  end
end

function Adagrad:step(closure)
  return accel.no_grad(function() return step_groups(self, closure, adagrad_group_step) end)
end

-- ---- Adadelta, Adamax, NAdam, RAdam ----

-- cls(params, [lr], {options}) with defaults; checks: nonnegative keys, bools, betas when given
local function elementwise_class(name, defaults, nonnegative, bools, torch_keys, state_keys, group_step)
  local cls = optim.Optimizer:extend(name)
  M[name] = cls
  function cls:init(params, lr, opts)
    optim.Optimizer.init(self, params, options(name, ctor_options(name, lr, opts), defaults))
  end
  local check = group_checker(nonnegative, bools)
  cls._check_group = function(self, g)
    check(self, g)
    if defaults.betas then check_betas(name, g) end
  end
  cls._torch_keys, cls._state_keys = torch_keys, state_keys
  function cls:step(closure)
    return accel.no_grad(function() return step_groups(self, closure, group_step) end)
  end
  return cls
end

-- each parameter with a gradient: its state (made by fresh(p) the first time, step counted) and update gradient
local function each_update(self, g, grads, fresh, fn)
  for i, p in ipairs(g.params) do
    if grads[i] then
      local st = param_state(self.state, p)
      if st.step == nil then
        st.step = 0
        for k, v in pairs(fresh(p)) do st[k] = v end
      end
      st.step = st.step + 1
      fn(p, st)
    end
  end
end

-- the weight decay of NAdam / RAdam: decoupled (p scaled) or added to the gradient
local function decayed_grad(p, g)
  local grad = g.maximize and -p.grad or p.grad
  if g.weight_decay ~= 0 then
    if g.decoupled_weight_decay then p:mul_(1 - g.lr * g.weight_decay)
    else grad = grad + p * g.weight_decay end
  end
  return grad
end

local ADAM_KEYS = {capturable = "False", differentiable = "False", foreach = "None"}

-- Adadelta: square_avg = rho square_avg + (1 - rho) grad^2; delta = sqrt(acc_delta + eps) /
-- sqrt(square_avg + eps) grad; acc_delta = rho acc_delta + (1 - rho) delta^2; p -= lr delta
local Adadelta = elementwise_class("Adadelta", {lr = 1.0, rho = 0.9, eps = 1e-6, weight_decay = 0, maximize = false},
  {"lr", "rho", "eps", "weight_decay"}, {"maximize"}, ADAM_KEYS,
  {required = {"step", "square_avg", "acc_delta"}, optional = {}},
  function(self, _, g, grads)
    each_update(self, g, grads, function(p) return {square_avg = accel.zeros_like(p), acc_delta = accel.zeros_like(p)} end,
      function(p, st)
        local grad = update_grad(p, g)
        st.square_avg:mul_(g.rho):addcmul_(grad, grad, {value = 1 - g.rho})
        local delta = st.acc_delta:add(g.eps):sqrt_():div_(st.square_avg:add(g.eps):sqrt_()):mul_(grad)
        st.acc_delta:mul_(g.rho):addcmul_(delta, delta, {value = 1 - g.rho})
        p:add_(delta, {alpha = -g.lr})
      end)
  end)

local check_adadelta = Adadelta._check_group
function Adadelta._check_group(self, g) -- (rho in [0, 1])
  check_adadelta(self, g)
  if g.rho > 1 then require("accel.util").raise("Adadelta: Invalid rho value: %s", tostring(g.rho)) end
end

-- Adamax: exp_avg = lerp(exp_avg, grad, 1 - beta1); exp_inf = max(beta2 exp_inf, |grad| + eps);
-- p -= lr / (1 - beta1^step) exp_avg / exp_inf
elementwise_class("Adamax", {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, maximize = false},
  {"lr", "eps", "weight_decay"}, {"maximize"}, ADAM_KEYS,
  {required = {"step", "exp_avg", "exp_inf"}, optional = {}},
  function(self, _, g, grads)
    local b1, b2 = g.betas[1], g.betas[2]
    each_update(self, g, grads, function(p) return {exp_avg = accel.zeros_like(p), exp_inf = accel.zeros_like(p)} end,
      function(p, st)
        local grad = update_grad(p, g)
        st.exp_avg:lerp_(grad, 1 - b1)
        st.exp_inf:copy_(st.exp_inf:mul_(b2):maximum(grad:abs():add_(g.eps)))
        p:addcdiv_(st.exp_avg, st.exp_inf, {value = -g.lr / (1 - b1 ^ st.step)})
      end)
  end)

-- v rounded to float32 (PyTorch computes ASGD's eta and mu in float32 tensors)
local f32 = require("accel.amp").round_f32

-- NAdam: mu = beta1 (1 - 0.96^(step momentum_decay) / 2); mu_product *= mu; Adam's moments;
-- p -= lr (1 - mu) / (1 - mu_product) grad / denom + lr mu_next / (1 - mu_product mu_next) exp_avg / denom,
-- denom = sqrt(exp_avg_sq / (1 - beta2^step)) + eps
elementwise_class("NAdam", {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, momentum_decay = 4e-3,
                            decoupled_weight_decay = false, maximize = false},
  {"lr", "eps", "weight_decay", "momentum_decay"}, {"maximize", "decoupled_weight_decay"}, ADAM_KEYS,
  {required = {"step", "mu_product", "exp_avg", "exp_avg_sq"}, optional = {}},
  function(self, _, g, grads)
    local b1, b2 = g.betas[1], g.betas[2]
    each_update(self, g, grads, function(p)
        return {mu_product = 1.0, exp_avg = accel.zeros_like(p), exp_avg_sq = accel.zeros_like(p)}
      end,
      function(p, st)
        local step = st.step
        local grad = decayed_grad(p, g)
        local mu = b1 * (1 - 0.5 * 0.96 ^ (step * g.momentum_decay))
        local mu_next = b1 * (1 - 0.5 * 0.96 ^ ((step + 1) * g.momentum_decay))
        -- (a float32 tensor times a scalar: both in float32; float64 after a load on a float64 parameter)
        st.mu_product = round_scalar(st, st.mu_product * round_scalar(st, mu))
        st.exp_avg:lerp_(grad, 1 - b1)
        st.exp_avg_sq:mul_(b2):addcmul_(grad, grad, {value = 1 - b2})
        local denom = st.exp_avg_sq:div(1 - b2 ^ step):sqrt():add_(g.eps)
        p:addcdiv_(grad, denom, {value = -g.lr * (1 - mu) / (1 - st.mu_product)})
        p:addcdiv_(st.exp_avg, denom, {value = -g.lr * mu_next / (1 - st.mu_product * mu_next)})
      end)
  end)

M.NAdam._scalar_state = {"mu_product"} -- (load_state_dict: optim._parts.round_scalar)

-- RAdam: Adam's moments; with the variance tractable (rho_t > 5) the rectified adaptive step,
-- else the bias-corrected momentum alone
elementwise_class("RAdam", {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
                            decoupled_weight_decay = false, maximize = false},
  {"lr", "eps", "weight_decay"}, {"maximize", "decoupled_weight_decay"}, ADAM_KEYS,
  {required = {"step", "exp_avg", "exp_avg_sq"}, optional = {}},
  function(self, _, g, grads)
    local b1, b2 = g.betas[1], g.betas[2]
    each_update(self, g, grads, function(p) return {exp_avg = accel.zeros_like(p), exp_avg_sq = accel.zeros_like(p)} end,
      function(p, st)
        local step = st.step
        local grad = decayed_grad(p, g)
        st.exp_avg:lerp_(grad, 1 - b1)
        st.exp_avg_sq:mul_(b2):addcmul_(grad, grad, {value = 1 - b2})
        local bc1, bc2 = 1 - b1 ^ step, 1 - b2 ^ step
        local corrected = st.exp_avg / bc1
        local rho_inf = 2 / (1 - b2) - 1
        local rho_t = rho_inf - 2 * step * b2 ^ step / bc2
        if rho_t > 5 then
          local rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ^ 0.5
          local adaptive = bc2 ^ 0.5 / st.exp_avg_sq:sqrt():add_(g.eps)
          p:add_(corrected * g.lr * adaptive * rect, {alpha = -1})
        else
          p:add_(corrected * g.lr, {alpha = -1})
        end
      end)
  end)

-- Rprop: sign = sign(grad prev) mapped to etaplus (> 0), etaminus (< 0), 1;
-- step_size = clamp(step_size sign, step_sizes); grad = 0 where the sign
-- flipped; p -= sign(grad) step_size; prev = grad
local Rprop = elementwise_class("Rprop", {lr = 1e-2, etas = {0.5, 1.2}, step_sizes = {1e-6, 50}, maximize = false},
  {"lr"}, {"maximize"}, ADAM_KEYS, {required = {"step", "prev", "step_size"}, optional = {}},
  function(self, _, g, grads)
    local eta_minus, eta_plus = g.etas[1], g.etas[2]
    each_update(self, g, grads, function(p)
        return {prev = accel.zeros_like(p), step_size = accel.full_like(p, g.lr)}
      end,
      function(p, st)
        local grad = g.maximize and -p.grad or p.grad
        local sign = grad:mul(st.prev):sign()
        local flipped = sign:lt(0)
        local factor = accel.ones_like(sign):masked_fill(sign:gt(0), eta_plus):masked_fill(flipped, eta_minus)
        st.step_size:mul_(factor):clamp_(g.step_sizes[1], g.step_sizes[2])
        grad = grad:masked_fill(flipped, 0)
        p:addcmul_(grad:sign(), st.step_size, {value = -1})
        st.prev:copy_(grad)
      end)
  end)

local check_rprop = Rprop._check_group
function Rprop._check_group(self, g) -- (0 < etaminus < 1 < etaplus)
  check_rprop(self, g)
  local e = g.etas
  if type(e) ~= "table" or type(e[1]) ~= "number" or type(e[2]) ~= "number" or not (0 < e[1] and e[1] < 1 and 1 < e[2]) then
    require("accel.util").raise("Rprop: Invalid eta values: %s, %s", tostring(type(e) == "table" and e[1] or e),
      tostring(type(e) == "table" and e[2] or nil))
  end
  local s = g.step_sizes
  if type(s) ~= "table" or type(s[1]) ~= "number" or type(s[2]) ~= "number" then
    require("accel.util").raise("Rprop: step_sizes must be a pair of numbers {min, max}, got %s", tostring(s))
  end
end

-- ASGD: p *= 1 - lambd eta; p -= eta grad; ax = p while mu is 1, else ax +=
-- mu (p - ax); then eta = lr / (1 + lambd lr step)^alpha and mu = 1 /
-- max(1, step - t0), both float32 values as PyTorch keeps them in float32
-- tensors (eta starts at lr, mu at 1)
elementwise_class("ASGD", {lr = 1e-2, lambd = 1e-4, alpha = 0.75, t0 = 1e6, weight_decay = 0, maximize = false},
  {"lr", "lambd", "alpha", "weight_decay"}, {"maximize"}, ADAM_KEYS,
  {required = {"step", "eta", "mu", "ax"}, optional = {}},
  function(self, _, g, grads)
    each_update(self, g, grads, function(p) return {eta = f32(g.lr), mu = 1.0, ax = accel.zeros_like(p)} end,
      function(p, st)
        local grad = update_grad(p, g)
        p:mul_(1 - g.lambd * st.eta)
        p:add_(grad, {alpha = -st.eta})
        if st.mu ~= 1 then st.ax:add_((p - st.ax):mul_(st.mu)) else st.ax:copy_(p) end
        st.eta = f32(g.lr / (1 + g.lambd * g.lr * st.step) ^ g.alpha)
        st.mu = f32(1 / math.max(1, st.step - g.t0))
      end)
  end)

M.ASGD._scalar_state = {"eta", "mu"}

return M
