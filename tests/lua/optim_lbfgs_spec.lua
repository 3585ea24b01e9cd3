-- optim_lbfgs_spec.lua: accel.optim.LBFGS against PyTorch 2.15
-- (tests/fixtures/lbfgs.safetensors, written by
-- scripts/fixtures/make_lbfgs_fixtures.py): the parameters, returned loss,
-- closure calls and iterations after each of 6 steps on a float64
-- Rosenbrock problem and a least-squares fit of two parameters, with the
-- fixed step and the strong-Wolfe line search, a short history, maximize,
-- max_eval and the tolerance stops; a state_dict round trip mid-run; the
-- printed form and option checks (PyTorch's messages beside them).
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local optim = accel.optim
local close, expect_error = support.assert_close, support.expect_error

local fx = accel.load("tests/fixtures/lbfgs.safetensors")
local STEPS = 6
local f64 = {dtype = accel.float64}

-- Must match CONFIGS in the fixture script.
local CONFIGS = {
  rosenbrock = {"rosenbrock", {lr = 0.1, max_iter = 10}},
  rosenbrock_wolfe = {"rosenbrock", {line_search_fn = "strong_wolfe", max_iter = 10}},
  rosenbrock_max = {"rosenbrock", {line_search_fn = "strong_wolfe", maximize = true, max_iter = 5}},
  lsq = {"lsq", {lr = 0.5, history_size = 3}},
  lsq_wolfe = {"lsq", {line_search_fn = "strong_wolfe", history_size = 2, max_iter = 4, max_eval = 6}},
  lsq_tolerance = {"lsq", {line_search_fn = "strong_wolfe", tolerance_grad = 1e-3, tolerance_change = 1e-4}},
}

-- the parameters and the objective of a problem (negated to maximize)
local function problem(kind, maximize)
  local sign = maximize and -1 or 1
  if kind == "rosenbrock" then
    local x = accel.tensor({-1.5, 2.0}, f64):requires_grad_(true)
    return {x}, function() return ((1 - x[1]) ^ 2 + 100 * (x[2] - x[1] ^ 2) ^ 2) * sign end
  end
  local a, y = {}, {}
  for i = 0, 7 do
    a[i + 1], y[i + 1] = {}, {}
    for j = 0, 2 do a[i + 1][j + 1] = math.cos(0.3 * (i + 2 * j)) end
    for j = 0, 1 do y[i + 1][j + 1] = math.sin(0.5 * (i + j)) end
  end
  a, y = accel.tensor(a, f64), accel.tensor(y, f64)
  local w, b = accel.zeros(3, 2, f64):requires_grad_(true), accel.zeros(2, f64):requires_grad_(true)
  return {w, b}, function() return (accel.matmul(a, w) + b - y):pow(2):sum() * sign end
end

local function setup(name)
  local c = CONFIGS[name]
  local params, f = problem(c[1], c[2].maximize)
  local opt = optim.LBFGS(params, c[2])
  local function closure()
    opt:zero_grad()
    local loss = f()
    loss:backward()
    return loss
  end
  return params, opt, closure
end

local function check_step(name, s, params, opt, loss)
  for k, p in ipairs(params) do close(p, fx[("%s.x%d"):format(name, k)][s], 1e-9, ("%s step %d x%d"):format(name, s, k)) end
  close(loss, fx[name .. ".loss"][s], 1e-9, ("%s step %d loss"):format(name, s))
  local st = opt.state[params[1]]
  assert.are.same(fx[name .. ".counts"][s]:tolist(), {st.func_evals, st.n_iter}, ("%s step %d counts"):format(name, s))
end

local names = {}
for name in pairs(CONFIGS) do names[#names + 1] = name end
table.sort(names)

describe("LBFGS matches PyTorch", function()
  for _, name in ipairs(names) do
    it(name .. ": parameters, loss, closure calls and iterations after each step", function()
      local params, opt, closure = setup(name)
      for s = 1, STEPS do check_step(name, s, params, opt, opt:step(closure)) end
    end)
  end

  it("a state_dict after 3 steps continues in a new optimizer as an unbroken run", function()
    for _, name in ipairs({"lsq", "rosenbrock_wolfe"}) do
      local params, opt, closure = setup(name)
      for _ = 1, 3 do opt:step(closure) end
      local sd = opt:state_dict()
      local params2, opt2, closure2 = setup(name)
      for k, p in ipairs(params) do accel.no_grad(function() params2[k]:copy_(p) end) end
      opt2:load_state_dict(sd)
      opt:step(closure) -- the original goes on too: the loaded state is a copy
      for s = 4, STEPS do check_step(name, s, params2, opt2, opt2:step(closure2)) end
    end
  end)
end)

describe("LBFGS under the Accelerator", function()
  it("steps a prepared model through the closure, and save_state / load_state resume it exactly", function()
    local function run(save_at)
      accel.set_seed(0)
      local model = accel.nn.Linear(3, 2)
      local opt = optim.LBFGS(model:parameters(), {lr = 0.3, history_size = 4, max_iter = 3})
      local acc = accel.Accelerator()
      model, opt = acc:prepare(model, opt)
      accel.set_seed(1)
      local x, y = accel.randn(20, 3), accel.randn(20, 2)
      local dir = support.tmpdir()
      local first
      for i = 1, 6 do
        local loss = opt:step(function()
          opt:zero_grad()
          local l = accel.nn.functional.mse_loss(model(x), y)
          acc:backward(l)
          return l
        end)
        first = first or loss:item()
        if i == save_at then
          acc:save_state(dir .. "/ckpt")
          acc:load_state(dir .. "/ckpt")
        end
      end
      support.remove_tree(dir)
      return model.weight:clone(), first
    end
    local straight, first = run(nil)
    assert.is_true(straight:equal((run(3)))) -- (run returns two values; equal takes one)
    assert.is_true(first > 0.5)
  end)
end)

describe("LBFGS's options", function()
  it("prints as PyTorch's", function()
    -- torch 2.15: print(torch.optim.LBFGS([p])), groups numbered 1-based here
    local p = accel.zeros(2):requires_grad_(true)
    assert.are.equal(table.concat({"LBFGS (", "Parameter Group 1", "    history_size: 100", "    line_search_fn: None",
      "    lr: 1", "    max_eval: 25", "    max_iter: 20", "    maximize: False", "    tolerance_change: 1e-09",
      "    tolerance_grad: 1e-07", ")"}, "\n"), tostring(optim.LBFGS({p})))
    assert.are.equal(5, optim.LBFGS({p}, {max_iter = 4}).param_groups[1].max_eval) -- max_iter * 5 // 4
  end)

  it("refuses what PyTorch refuses", function()
    local p, q = accel.zeros(2):requires_grad_(true), accel.zeros(3):requires_grad_(true)
    -- torch 2.15: "LBFGS doesn't support per-parameter options (parameter groups)", "Invalid learning rate: -1",
    -- "only 'strong_wolfe' is supported"
    expect_error(function() optim.LBFGS({{params = {p}}, {params = {q}}}) end,
      "LBFGS: LBFGS doesn't support per-parameter options (parameter groups)")
    expect_error(function() optim.LBFGS({p}, {lr = -1}) end, "LBFGS: Invalid learning rate: -1")
    expect_error(function() optim.LBFGS({p}, {line_search_fn = "backtracking"}) end,
      "LBFGS: only 'strong_wolfe' is supported as line_search_fn, got backtracking")
    expect_error(function() optim.LBFGS({p}):step() end, "LBFGS.step: a closure that re-evaluates the model")
  end)
end)
