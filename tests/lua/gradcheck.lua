-- tests/lua/gradcheck.lua: numerical gradient checking for accel-lua specs.
--
--   local gc = dofile("tests/lua/gradcheck.lua")
--   assert(gc.gradcheck(function(a, b) return a * b end, {a, b}))
--
-- gradcheck(fn, inputs, opts) -> true | false, report
--   fn      called as fn(table.unpack(inputs)); returns a tensor (extra return
--           values are ignored). Non-tensor inputs and tensors that do not
--           require grad are passed through untouched.
--   inputs  list; the float64 tensors with requires_grad are checked.
--   opts    eps (1e-6), atol (1e-6), rtol (1e-5), seed (1234),
--           only = {i, ...} (check just these input positions).
-- check(fn, inputs, opts): gradcheck, raising its report when it fails.
--
-- Analytic gradients: backward of sum(fn(...) * R) for a fixed random R of
-- the output's shape (R = 1 when the output has one element is just a
-- special case; R is random there too). Numeric gradients: central finite
-- differences of the same scalar in float64, each input element perturbed in
-- place under accel.no_grad. The reference never touches the gradient code.
local accel = require("accel")

local M = {}

local function first_tensor(...)
  local r = ...
  if not accel.is_tensor(r) then error("gradcheck: fn must return a tensor, got " .. type(r), 3) end
  return r
end

-- sum(out * R) as a plain Lua number, computed in float64 without autograd.
local function objective(fn, inputs, n, R)
  return accel.no_grad(function()
    local out = first_tensor(fn(table.unpack(inputs, 1, n)))
    return (out:double() * R):sum():item()
  end)
end

local function checked_positions(inputs, n, only)
  local pos = {}
  if only then
    for _, i in ipairs(only) do pos[#pos + 1] = i end
    return pos
  end
  for i = 1, n do
    local t = inputs[i]
    if accel.is_tensor(t) and t.requires_grad then pos[#pos + 1] = i end
  end
  return pos
end

function M.gradcheck(fn, inputs, opts)
  opts = opts or {}
  local eps = opts.eps or 1e-6
  local atol = opts.atol or 1e-6
  local rtol = opts.rtol or 1e-5
  local n = inputs.n or #inputs
  local pos = checked_positions(inputs, n, opts.only)
  if #pos == 0 then return false, "gradcheck: no input requires grad" end
  for _, i in ipairs(pos) do
    local t = inputs[i]
    if t.dtype ~= accel.float64 then
      return false, ("gradcheck: input %d must be float64, got %s"):format(i, tostring(t.dtype))
    end
    if not t.is_leaf then return false, ("gradcheck: input %d must be a leaf tensor"):format(i) end
    if not t:is_contiguous() then return false, ("gradcheck: input %d must be contiguous"):format(i) end
  end

  -- fixed random weighting of the output
  local out0 = accel.no_grad(function() return first_tensor(fn(table.unpack(inputs, 1, n))) end)
  local state = {accel.get_rng_state()}
  accel.set_seed(opts.seed or 1234)
  local R = accel.randn(out0:size(), {dtype = accel.float64})
  accel.set_rng_state(state[1], state[2])

  -- analytic
  for _, i in ipairs(pos) do inputs[i].grad = nil end
  local out = first_tensor(fn(table.unpack(inputs, 1, n)))
  if not out.requires_grad then return false, "gradcheck: the output does not require grad (no graph was recorded)" end
  local loss = (out * R:to(out.dtype)):sum()
  loss:backward()
  local analytic = {}
  for _, i in ipairs(pos) do
    local t = inputs[i]
    local g = t.grad
    if g == nil then
      analytic[i] = accel.zeros(t:size(), {dtype = accel.float64})
    else
      if g:dim() ~= t:dim() or g:numel() ~= t:numel() then
        return false, ("gradcheck: grad of input %d has shape %s, input has %s"):format(i, tostring(g.shape), tostring(t.shape))
      end
      for d = 1, t:dim() do
        if g:size(d) ~= t:size(d) then
          return false, ("gradcheck: grad of input %d has shape %s, input has %s"):format(i, tostring(g.shape), tostring(t.shape))
        end
      end
      if g.dtype ~= t.dtype then
        return false, ("gradcheck: grad of input %d has dtype %s, input has %s"):format(i, tostring(g.dtype), tostring(t.dtype))
      end
      analytic[i] = g:clone():reshape(-1)
    end
    t.grad = nil
  end

  -- numeric, and comparison
  local bad = {}
  local worst = 0
  for _, i in ipairs(pos) do
    local t = inputs[i]
    local flat = accel.no_grad(function() return t:reshape(-1) end)
    local a = analytic[i]
    for j = 1, t:numel() do
      local orig = flat[j]:item()
      accel.no_grad(function() flat[j] = orig + eps end)
      local fp = objective(fn, inputs, n, R)
      accel.no_grad(function() flat[j] = orig - eps end)
      local fm = objective(fn, inputs, n, R)
      accel.no_grad(function() flat[j] = orig end)
      local num = (fp - fm) / (2 * eps)
      local ana = a[j]:item()
      local err = math.abs(ana - num)
      local tol = atol + rtol * math.abs(num)
      if err / tol > worst then worst = err / tol end
      if not (err <= tol) then
        if #bad < 8 then
          bad[#bad + 1] = ("  input %d element %d: analytic %.10g, numeric %.10g (diff %.3g)"):format(i, j, ana, num, err)
        else
          bad.more = (bad.more or 0) + 1
        end
      end
    end
  end
  if #bad > 0 then
    local msg = "gradcheck failed:\n" .. table.concat(bad, "\n")
    if bad.more then msg = msg .. ("\n  ... and %d more"):format(bad.more) end
    return false, msg
  end
  return true, ("gradcheck ok (worst error / tolerance = %.3g)"):format(worst)
end

-- check(fn, inputs, opts): raises gradcheck's report unless the gradients pass.
function M.check(fn, inputs, opts)
  local ok, msg = M.gradcheck(fn, inputs, opts)
  assert(ok, msg)
end

-- A float64 leaf requiring grad: M.leaf(accel.randn(2, 3, {dtype = accel.float64}))
function M.leaf(t)
  t = t:double():detach()
  t:requires_grad_(true)
  return t
end

-- randn(shape...) as a float64 leaf requiring grad.
function M.randn(...)
  return M.leaf(accel.randn(...))
end

-- rand(shape...) in [lo, hi) as a float64 leaf requiring grad.
function M.uniform(lo, hi, ...)
  local u = accel.rand(...):double()
  return M.leaf(u * (hi - lo) + lo)
end

setmetatable(M, {__call = function(_, ...) return M.gradcheck(...) end})

return M
