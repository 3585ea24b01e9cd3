-- accel.optim.lbfgs: optim.LBFGS, PyTorch's L-BFGS (after minFunc): a
-- closure-driven optimizer over all parameters as one flat vector, with the
-- two-loop recursion over the last history_size curvature pairs and either
-- a fixed step (lr; lr times min(1, 1 / |g|_1) at the very first iteration)
-- or a strong-Wolfe line search (line_search_fn = "strong_wolfe": cubic
-- interpolation, bracketing then zooming, c1 = 1e-4, c2 = 0.9). One step
-- runs up to max_iter iterations and max_eval closure calls, stopping early
-- as PyTorch does (gradient below tolerance_grad, a step or a loss change
-- below tolerance_change, no descent direction). The state is kept in the
-- first parameter's entry under PyTorch's keys (func_evals, n_iter, d, t,
-- old_dirs, old_stps, ro, H_diag, prev_flat_grad, prev_loss, al). Scalars
-- that PyTorch keeps as tensors of the parameters' dtype are Lua numbers
-- here, rounded to float32 for float32 parameters.
local accel = require("accel")
local optim = require("accel.optim")
local util = require("accel.util")

local parts = optim._parts
local raise = util.raise

local LBFGS = optim.Optimizer:extend("LBFGS")

local DEFAULTS = {lr = 1, max_iter = 20, max_eval = false, tolerance_grad = 1e-7, tolerance_change = 1e-9,
                  history_size = 100, line_search_fn = false, maximize = false}

-- LBFGS(params, [lr], {lr = 1, max_iter = 20, max_eval = max_iter * 5 // 4, tolerance_grad = 1e-7,
--   tolerance_change = 1e-9, history_size = 100, line_search_fn = nil | "strong_wolfe", maximize = false})
function LBFGS:init(params, lr, opts)
  local o = parts.options("LBFGS", parts.ctor_options("LBFGS", lr, opts), DEFAULTS)
  optim.Optimizer.init(self, params, o)
  if #self.param_groups ~= 1 then raise("LBFGS: LBFGS doesn't support per-parameter options (parameter groups)") end
  local g = self.param_groups[1]
  if g.max_eval == false then g.max_eval = math.floor(g.max_iter * 5 / 4) end
  if g.line_search_fn == false then g.line_search_fn = nil end
  self._params = g.params
end

LBFGS._torch_keys = {line_search_fn = "None"}
LBFGS._state_keys = nil -- (the flat vectors and lists are not per-parameter shapes)

function LBFGS:_check_group(g)
  parts.check_nonnegative("LBFGS", g, "lr", "learning rate")
  for _, k in ipairs({"max_iter", "history_size"}) do
    local v = g[k]
    if type(v) ~= "number" or v ~= math.floor(v) or v < 1 then
      raise("LBFGS: option '%s' must be a positive integer, got %s", k, tostring(v))
    end
  end
  if g.line_search_fn ~= false and g.line_search_fn ~= nil and g.line_search_fn ~= "strong_wolfe" then
    raise("LBFGS: only 'strong_wolfe' is supported as line_search_fn, got %s", tostring(g.line_search_fn))
  end
  parts.check_bool("LBFGS", g, "maximize")
end

-- v as a scalar of the parameters' dtype (PyTorch's 0-d tensors)
function LBFGS:_scalar(v)
  if self._params[1].dtype == accel.float32 then return require("accel.amp").round_f32(v) end
  return v
end

-- the gradients as one flat vector (zeros for a parameter without one), negated under maximize
function LBFGS:_flat_grad()
  local views = {}
  for i, p in ipairs(self._params) do views[i] = p.grad and p.grad:reshape({-1}) or accel.zeros(p:numel(), {dtype = p.dtype, device = p.device}) end
  local flat = accel.cat(views)
  if self.param_groups[1].maximize then flat = flat:neg() end
  return flat
end

-- p += step * (p's part of the flat update)
function LBFGS:_add_grad(step, update)
  local offset = 0
  for _, p in ipairs(self._params) do
    local n = p:numel()
    p:add_(update:narrow(1, offset + 1, n):view_as(p), {alpha = step})
    offset = offset + n
  end
end

local function dot(a, b) return a:dot(b):item() end
local function abs_max(v) return v:abs():max():item() end

-- the closure's loss as a number (negated under maximize)
function LBFGS:_loss(closure)
  local l = optim._run_closure(closure, "LBFGS")
  local v = accel.is_tensor(l) and l:item() or l
  if type(v) ~= "number" then raise("LBFGS.step: the closure must return the loss (a number or a 1-element tensor)") end
  return self.param_groups[1].maximize and -v or v, l
end

-- loss and flat gradient at x + t d; the parameters are put back to x
function LBFGS:_directional_evaluate(closure, x, t, d)
  self:_add_grad(t, d)
  local loss = self:_loss(closure)
  local flat = self:_flat_grad()
  for i, p in ipairs(self._params) do p:copy_(x[i]) end
  return loss, flat
end

-- the minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), within bounds (default: [x1, x2] sorted)
local function cubic_interpolate(x1, f1, g1, x2, f2, g2, lo, hi)
  if lo == nil then lo, hi = math.min(x1, x2), math.max(x1, x2) end
  local d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
  local d2_square = d1 * d1 - g1 * g2
  if d2_square >= 0 then
    local d2, min_pos = math.sqrt(d2_square), nil
    if x1 <= x2 then min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2)) end
    return math.min(math.max(min_pos, lo), hi)
  end
  return (lo + hi) / 2
end

-- The strong-Wolfe line search from (f, g, gtd) along d: f, g, t at the accepted point and the closure calls made.
local function strong_wolfe(obj, t, d, f, g, gtd, tolerance_change, max_ls)
  local c1, c2 = 1e-4, 0.9
  local d_norm = abs_max(d)
  local f_new, g_new = obj(t)
  local evals, gtd_new = 1, dot(g_new, d)
  local t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
  local done, ls_iter = false, 0
  local bracket, bf, bg, bgtd
  while ls_iter < max_ls do -- bracketing
    if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev) then
      bracket, bf, bg, bgtd = {t_prev, t}, {f_prev, f_new}, {g_prev, g_new}, {gtd_prev, gtd_new}
      break
    end
    if math.abs(gtd_new) <= -c2 * gtd then
      bracket, bf, bg, done = {t}, {f_new}, {g_new}, true
      break
    end
    if gtd_new >= 0 then
      bracket, bf, bg, bgtd = {t_prev, t}, {f_prev, f_new}, {g_prev, g_new}, {gtd_prev, gtd_new}
      break
    end
    local min_step, max_step, prev = t + 0.01 * (t - t_prev), t * 10, t
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, min_step, max_step)
    t_prev, f_prev, g_prev, gtd_prev = prev, f_new, g_new, gtd_new
    f_new, g_new = obj(t)
    evals, gtd_new, ls_iter = evals + 1, dot(g_new, d), ls_iter + 1
  end
  if ls_iter == max_ls then bracket, bf, bg = {0, t}, {f, f_new}, {g, g_new} end
  local insufficient = false
  local low, high = 1, 2
  if bf[1] > bf[#bf] then low, high = 2, 1 end
  while not done and ls_iter < max_ls do -- zooming
    if math.abs(bracket[2] - bracket[1]) * d_norm < tolerance_change then break end
    t = cubic_interpolate(bracket[1], bf[1], bgtd[1], bracket[2], bf[2], bgtd[2])
    local bmax, bmin = math.max(bracket[1], bracket[2]), math.min(bracket[1], bracket[2])
    local eps = 0.1 * (bmax - bmin)
    if math.min(bmax - t, t - bmin) < eps then
      if insufficient or t >= bmax or t <= bmin then
        t = math.abs(t - bmax) < math.abs(t - bmin) and bmax - eps or bmin + eps
        insufficient = false
      else
        insufficient = true
      end
    else
      insufficient = false
    end
    f_new, g_new = obj(t)
    evals, gtd_new, ls_iter = evals + 1, dot(g_new, d), ls_iter + 1
    if f_new > f + c1 * t * gtd or f_new >= bf[low] then
      bracket[high], bf[high], bg[high], bgtd[high] = t, f_new, g_new, gtd_new
      if bf[1] <= bf[2] then low, high = 1, 2 else low, high = 2, 1 end
    else
      if math.abs(gtd_new) <= -c2 * gtd then
        done = true
      elseif gtd_new * (bracket[high] - bracket[low]) >= 0 then
        bracket[high], bf[high], bg[high], bgtd[high] = bracket[low], bf[low], bg[low], bgtd[low]
      end
      bracket[low], bf[low], bg[low], bgtd[low] = t, f_new, g_new, gtd_new
    end
  end
  return bf[low], bg[low], bracket[low], evals
end

-- The L-BFGS direction -H g from the curvature pairs (two-loop recursion).
function LBFGS:_direction(st, flat_grad)
  local n, al = #st.old_dirs, st.al
  local q = flat_grad:neg()
  for i = n, 1, -1 do
    al[i] = self:_scalar(dot(st.old_stps[i], q) * st.ro[i])
    q:add_(st.old_dirs[i], {alpha = -al[i]})
  end
  local r = q:mul(st.H_diag)
  for i = 1, n do
    local be_i = self:_scalar(dot(st.old_dirs[i], r) * st.ro[i])
    r:add_(st.old_stps[i], {alpha = al[i] - be_i})
  end
  return r
end

-- A new curvature pair y = g - g_prev, s = t d when y s > 1e-10 (the oldest dropped past history_size).
function LBFGS:_update_history(st, flat_grad, history_size)
  local y, s = flat_grad:sub(st.prev_flat_grad), st.d:mul(st.t)
  local ys = self:_scalar(dot(y, s))
  if ys > 1e-10 then
    if #st.old_dirs == history_size then
      table.remove(st.old_dirs, 1)
      table.remove(st.old_stps, 1)
      table.remove(st.ro, 1)
    end
    st.old_dirs[#st.old_dirs + 1], st.old_stps[#st.old_stps + 1] = y, s
    st.ro[#st.ro + 1] = self:_scalar(1 / ys)
    st.H_diag = self:_scalar(ys / dot(y, y))
  end
end

-- step(closure): up to max_iter iterations; returns the closure's first loss
function LBFGS:step(closure)
  if closure == nil then raise("LBFGS.step: a closure that re-evaluates the model and returns the loss is required") end
  return accel.no_grad(function()
    local g = self.param_groups[1]
    local st = parts.param_state(self.state, self._params[1])
    st.func_evals, st.n_iter = st.func_evals or 0, st.n_iter or 0
    local loss, orig_loss = self:_loss(closure)
    local evals = 1
    st.func_evals = st.func_evals + 1
    local flat_grad = self:_flat_grad()
    if abs_max(flat_grad) <= g.tolerance_grad then return orig_loss end
    local n_iter = 0
    while n_iter < g.max_iter do
      n_iter, st.n_iter = n_iter + 1, st.n_iter + 1
      if st.n_iter == 1 then
        st.d, st.old_dirs, st.old_stps, st.ro, st.H_diag = flat_grad:neg(), {}, {}, {}, 1
      else
        self:_update_history(st, flat_grad, g.history_size)
        st.al = st.al or {}
        st.d = self:_direction(st, flat_grad)
      end
      st.prev_flat_grad = flat_grad:clone()
      st.prev_loss = loss
      if st.n_iter == 1 then
        st.t = math.min(1, self:_scalar(1 / flat_grad:abs():sum():item())) * g.lr
      else
        st.t = g.lr
      end
      local gtd = dot(flat_grad, st.d)
      if gtd > -g.tolerance_change then break end
      local ls_evals, done = 0, false
      if g.line_search_fn == "strong_wolfe" then
        local x = {}
        for i, p in ipairs(self._params) do x[i] = p:clone() end
        local function obj(t) return self:_directional_evaluate(closure, x, t, st.d) end
        loss, flat_grad, st.t, ls_evals = strong_wolfe(obj, st.t, st.d, loss, flat_grad, gtd, g.tolerance_change,
          g.max_eval - evals)
        self:_add_grad(st.t, st.d)
        done = abs_max(flat_grad) <= g.tolerance_grad
      else
        self:_add_grad(st.t, st.d)
        if n_iter ~= g.max_iter then
          loss = self:_loss(closure)
          flat_grad = self:_flat_grad()
          done = abs_max(flat_grad) <= g.tolerance_grad
          ls_evals = 1
        end
      end
      evals, st.func_evals = evals + ls_evals, st.func_evals + ls_evals
      if n_iter == g.max_iter or evals >= g.max_eval or done then break end
      if abs_max(st.d:mul(st.t)) <= g.tolerance_change then break end
      if math.abs(loss - st.prev_loss) < g.tolerance_change then break end
    end
    return orig_loss
  end)
end

-- a private copy of a saved state value for parameter p: tensors cloned
-- onto p's device and dtype (a checkpoint loads onto the CPU), lists copied
local function copy_state(v, p)
  if accel.is_tensor(v) then return v:detach():to(p.device):to(p.dtype):clone() end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy_state(x, p) end
  return out
end

-- What load_state_dict(sd) would refuse: the groups as for every
-- optimizer; the state (flat vectors and lists) only under the first
-- parameter, where state_dict puts it.
function LBFGS:_state_dict_problem(sd)
  if type(sd) ~= "table" or type(sd.state) ~= "table" then
    return "expected a table {state = ..., param_groups = ...} from state_dict()"
  end
  local why, id_map = optim.Optimizer._state_dict_problem(self, {state = {}, param_groups = sd.param_groups})
  if why then return why end
  for k, st in pairs(sd.state) do
    if tonumber(k) ~= 1 then return ("state for parameter %s: LBFGS keeps its state under the first"):format(tostring(k)) end
    if type(st) ~= "table" then return "the state of parameter 1 must be a table" end
  end
  return nil, id_map
end

-- The groups as every optimizer loads them; the state copied as it is.
function LBFGS:load_state_dict(sd)
  local why = self:_state_dict_problem(sd)
  if why then raise("LBFGS: load_state_dict: %s", why) end
  optim.Optimizer.load_state_dict(self, {state = {}, param_groups = sd.param_groups})
  local saved = sd.state[1] or sd.state["1"]
  self.state = {}
  if saved ~= nil then self.state[self._params[1]] = copy_state(saved, self._params[1]) end
end

return {LBFGS = LBFGS}
