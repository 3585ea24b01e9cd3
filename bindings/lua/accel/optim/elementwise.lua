-- accel.optim.elementwise: RMSprop and Adagrad, PyTorch's formulas written
-- as tensor ops per parameter (no fused C kernel: these are for porting
-- scripts, not the sharding engine, which takes SGD / Adam / AdamW). Loaded
-- on first use of accel.optim.RMSprop or Adagrad.
--
-- State as PyTorch's (step a number here, as for Adam): RMSprop keeps
-- square_avg, momentum_buffer (momentum > 0) and grad_avg (centered);
-- Adagrad keeps sum, made at construction from initial_accumulator_value
-- as PyTorch makes it.
local accel = require("accel")
local optim = require("accel.optim")

local parts = optim._parts
local options, ctor_options, step_groups, param_state = parts.options, parts.ctor_options, parts.step_groups,
  parts.param_state
local check_nonnegative, check_bool = parts.check_nonnegative, parts.check_bool

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
    for _, p in ipairs(g.params) do self:_init_state(p, g) end
  end
end

-- PyTorch makes Adagrad's state when the parameter joins: step 0 and the
-- accumulator filled with initial_accumulator_value.
function Adagrad:_init_state(p, g)
  local st = param_state(self.state, p)
  if st.sum == nil then st.step, st.sum = 0, accel.full_like(p, g.initial_accumulator_value) end
  return st
end

Adagrad._torch_keys = {differentiable = "False", foreach = "None", fused = "None"}
Adagrad._state_keys = {required = {"step", "sum"}, optional = {}}

Adagrad._check_group = group_checker({"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"}, {"maximize"})

-- sum += grad^2; p -= lr / (1 + (step - 1) lr_decay) grad / (sqrt(sum) + eps)
local function adagrad_group_step(self, _, g, grads)
  for i, p in ipairs(g.params) do
    if grads[i] then
      local st = self:_init_state(p, g)
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

return M
