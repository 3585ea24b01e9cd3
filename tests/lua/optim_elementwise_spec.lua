-- optim_elementwise_spec.lua: accel.optim.RMSprop, Adagrad, Adadelta,
-- Adamax, NAdam, RAdam, Rprop and ASGD against
-- PyTorch 2.15 (tests/fixtures/optim_elementwise.safetensors, written by
-- scripts/fixtures/make_elementwise_optim_fixtures.py: 8 float64 steps over
-- closed-form gradients, p2 without a gradient at steps 3 and 6 in the
-- *_skip configs), their state, state_dict round trips, printed forms and
-- option checks (PyTorch's messages quoted beside them).
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
it = support.lua54_only(it, pending, {
  ["print their param groups as PyTorch's"] = support.NO_FLOAT_SUBTYPE,
})
local optim = accel.optim
local close, expect_error = support.assert_close, support.expect_error

local fx = accel.load("tests/fixtures/optim_elementwise.safetensors")
local STEPS, SKIPS = 8, {[3] = true, [6] = true}
local f64 = {dtype = accel.float64}

-- Must match CONFIGS in the fixture script.
local CONFIGS = {
  rmsprop = {"RMSprop", {lr = 0.01}},
  rmsprop_centered = {"RMSprop", {lr = 0.01, alpha = 0.9, momentum = 0.9, centered = true, weight_decay = 0.1}},
  rmsprop_max_skip = {"RMSprop", {lr = 0.005, momentum = 0.5, maximize = true, eps = 1e-6}},
  adagrad = {"Adagrad", {lr = 0.1}},
  adagrad_decay = {"Adagrad", {lr = 0.1, lr_decay = 0.05, weight_decay = 0.1, initial_accumulator_value = 0.5, eps = 1e-8}},
  adagrad_max_skip = {"Adagrad", {lr = 0.05, maximize = true}},
  adadelta = {"Adadelta", {}},
  adadelta_wd_max_skip = {"Adadelta", {lr = 0.5, rho = 0.8, eps = 1e-5, weight_decay = 0.1, maximize = true}},
  adamax = {"Adamax", {}},
  adamax_wd_skip = {"Adamax", {lr = 0.01, betas = {0.8, 0.99}, weight_decay = 0.1}},
  nadam = {"NAdam", {}},
  nadam_decoupled_skip = {"NAdam", {lr = 0.01, weight_decay = 0.1, decoupled_weight_decay = true, momentum_decay = 0.01}},
  nadam_wd_max = {"NAdam", {lr = 0.01, weight_decay = 0.1, maximize = true}},
  radam = {"RAdam", {lr = 0.01}},
  radam_decoupled_skip = {"RAdam", {lr = 0.01, betas = {0.9, 0.9}, weight_decay = 0.1, decoupled_weight_decay = true}},
  radam_wd_max = {"RAdam", {lr = 0.01, betas = {0.8, 0.95}, weight_decay = 0.1, maximize = true}},
  rprop = {"Rprop", {}},
  rprop_tight_max_skip = {"Rprop", {lr = 0.05, etas = {0.3, 1.5}, step_sizes = {0.01, 0.08}, maximize = true}},
  asgd = {"ASGD", {lr = 0.05}},
  asgd_averaging_skip = {"ASGD", {lr = 0.1, lambd = 0.01, alpha = 0.5, t0 = 3, weight_decay = 0.1}},
  asgd_max = {"ASGD", {lr = 0.02, t0 = 1, maximize = true}},
}

local function formula(n, f)
  local v = {}
  for i = 1, n do v[i] = f(i) end
  return accel.tensor(v, f64)
end

local function params()
  return formula(15, math.sin):view(3, 5):requires_grad_(true), formula(4, math.cos):requires_grad_(true)
end

-- Steps first..last of config name on (opt, p1, p2); check(s, p1, p2) after each.
local function run(name, opt, p1, p2, first, last, check)
  for s = first, last do
    p1.grad = formula(15, function(i) return 0.5 * math.cos(i + s) end):view(3, 5)
    if name:find("_skip$") and SKIPS[s] then p2.grad = nil else
      p2.grad = formula(4, function(i) return 0.2 * math.sin(3 * i + s) end)
    end
    opt:step()
    if check then check(s, p1, p2) end
  end
end

local function new(name, p1, p2)
  local c = CONFIGS[name]
  return optim[c[1]]({p1, p2}, c[2])
end

local names = {}
for name in pairs(CONFIGS) do names[#names + 1] = name end
table.sort(names)

describe("the element-wise optimizers match PyTorch", function()
  for _, name in ipairs(names) do
    it(name .. ": parameters after each step and the final state", function()
      local p1, p2 = params()
      local opt = new(name, p1, p2)
      run(name, opt, p1, p2, 1, STEPS, function(s, a, b)
        close(a, fx[name .. ".p1"][s], 1e-12, ("%s step %d p1"):format(name, s))
        close(b, fx[name .. ".p2"][s], 1e-12, ("%s step %d p2"):format(name, s))
      end)
      local st, keys = opt.state[p1], 0
      for k, v in pairs(st) do
        if type(v) ~= "number" then -- (step, NAdam's mu_product, ASGD's eta and mu)
          close(v, fx[name .. ".state." .. k], 1e-12, name .. " state " .. k)
          keys = keys + 1
        end
      end
      local want = 0
      for k in pairs(fx) do
        if k:sub(1, #name + 7) == name .. ".state." then want = want + 1 end
      end
      assert.are.equal(want, keys, name .. ": the state tensors PyTorch keeps")
      assert.are.equal(STEPS, st.step)
      assert.are.equal(name:find("_skip$") and STEPS - 2 or STEPS, opt.state[p2].step)
    end)

    it(name .. ": a state_dict after 4 steps continues in a new optimizer as an unbroken run", function()
      local p1, p2 = params()
      local opt = new(name, p1, p2)
      run(name, opt, p1, p2, 1, 4)
      local q1, q2 = p1:detach():clone():requires_grad_(true), p2:detach():clone():requires_grad_(true)
      local resumed = new(name, q1, q2)
      resumed:load_state_dict(opt:state_dict())
      run(name, resumed, q1, q2, 5, STEPS)
      -- NAdam: load_state_dict casts mu_product to the float64 parameters' dtype, as PyTorch's does, so the
      -- resumed run leaves the unbroken one's float32 rounding by about 1e-11 (PyTorch's resumed values: the
      -- mu_product test below)
      local tol = CONFIGS[name][1] == "NAdam" and 1e-10 or 1e-12
      close(q1, fx[name .. ".p1"][STEPS], tol)
      close(q2, fx[name .. ".p2"][STEPS], tol)
    end)
  end

  it("the fixture moves the parameters, differently per config", function()
    local p1 = params()
    for _, name in ipairs(names) do assert.is_false(fx[name .. ".p1"][STEPS]:allclose(p1:detach():to("cpu"), 0, 1e-3), name) end
    assert.is_false(fx["rmsprop.p1"]:allclose(fx["rmsprop_centered.p1"]))
    assert.is_false(fx["adagrad.p1"]:allclose(fx["adagrad_decay.p1"]))
  end)
end)

describe("the element-wise optimizers' options", function()
  it("Adagrad makes its state when built, as PyTorch (step 0, sum = initial_accumulator_value)", function()
    local p = accel.zeros(2, f64):requires_grad_(true)
    local sd = optim.Adagrad({p}, {initial_accumulator_value = 0.25}):state_dict()
    assert.are.equal(0, sd.state[1].step)
    close(sd.state[1].sum, accel.full({2}, 0.25, f64), 0)
    assert.is_nil(next(optim.RMSprop({p}):state_dict().state)) -- RMSprop: made at the first step
  end)

  it("Adagrad's sum starts at the optimizer's initial_accumulator_value, not a group's own, as PyTorch 2.15", function()
    -- torch 2.15 reads self.defaults["initial_accumulator_value"] when it makes the state (__init__ and
    -- _init_group), also for a group added later; the group keeps its own value, unused
    local a, b = accel.tensor({1.0, 2.0}, f64):requires_grad_(true), accel.tensor({1.0, 2.0}, f64):requires_grad_(true)
    local c = accel.tensor({-3.0}, f64):requires_grad_(true)
    local opt = optim.Adagrad({{params = {a}}, {params = {b}, initial_accumulator_value = 1.0}},
      {lr = 0.1, initial_accumulator_value = 0.1})
    opt:add_param_group({params = {c}, initial_accumulator_value = 2.0})
    assert.are.same({0.1, 1.0, 2.0}, {opt.param_groups[1].initial_accumulator_value,
      opt.param_groups[2].initial_accumulator_value, opt.param_groups[3].initial_accumulator_value})
    close(opt.state[b].sum, accel.full({2}, 0.1, f64), 0)
    a.grad, b.grad, c.grad = accel.tensor({0.5, -0.5}, f64), accel.tensor({0.5, -0.5}, f64), accel.tensor({0.5}, f64)
    opt:step()
    -- torch 2.15's parameters and sums after the step
    close(a, accel.tensor({0.91548457454143406, 2.0845154254585658}, f64), 1e-15)
    close(b, accel.tensor({0.91548457454143406, 2.0845154254585658}, f64), 1e-15)
    close(c, accel.tensor({-3.0845154254585658}, f64), 1e-15)
    close(opt.state[c].sum, accel.full({1}, 0.35, f64), 1e-15)
  end)

  it("NAdam's mu_product (and ASGD's eta) take the parameter's dtype in load_state_dict, as PyTorch's", function()
    -- torch 2.15 casts every state tensor but step to the parameter's dtype (_process_value_according_to_param_
    -- policy): a float64 parameter's resumed run keeps mu_product in float64 from then on
    local p = accel.tensor({1.0, -2.0, 0.5}, f64):requires_grad_(true)
    local function nadam() return optim.NAdam({p}, {lr = 0.1, betas = {0.678, 0.9341}, momentum_decay = 0.1}) end
    local opt = nadam()
    for s = 1, 30 do
      if s == 4 then
        local sd = opt:state_dict()
        opt = nadam()
        opt:load_state_dict(sd)
      end
      -- (math.fmod is Python's % here; LuaJIT's % is a - floor(a / b) b, not quite the same)
      p.grad = accel.tensor({math.fmod(0.3 * s, 1.7) - 0.8, 1.1 - 0.07 * s, -0.5 + 0.03 * s}, f64)
      opt:step()
    end
    -- torch 2.15's resumed run (its unbroken run ends at mu_product 4.6528898762316848e-14)
    assert.is_true(math.abs(opt.state[p].mu_product / 4.6528893084161508e-14 - 1) < 1e-14)
    close(p, accel.tensor({0.63807300908603926, -1.6789274354294923, 0.41930104577422123}, f64), 1e-14)
    -- a float32 parameter gets its mu_product (a number or a 0-dim tensor) rounded to float32; a
    -- float64 one keeps it; ASGD's eta the same (torch 2.15: 0.10000000149011612, float32)
    local q, r = accel.zeros(2):requires_grad_(true), accel.zeros(2, f64):requires_grad_(true)
    local state = {step = 1, mu_product = 0.1, exp_avg = accel.zeros(2), exp_avg_sq = accel.zeros(2)}
    local function load(cls, x, st) -- (an optimizer of x with st loaded)
      local o = optim[cls]({x})
      o:load_state_dict({state = {st}, param_groups = o:state_dict().param_groups})
      return o
    end
    assert.are.equal(0.10000000149011612, load("NAdam", q, state).state[q].mu_product)
    assert.are.equal(0.1, load("NAdam", r, state).state[r].mu_product)
    state.mu_product = accel.tensor(0.1, f64)
    assert.are.equal(0.10000000149011612, load("NAdam", q, state).state[q].mu_product)
    local asgd = {step = 1, eta = accel.tensor(0.1, f64), mu = 1.0, ax = accel.zeros(2)}
    assert.are.equal(0.10000000149011612, load("ASGD", q, asgd).state[q].eta)
    assert.are.equal(1, load("ASGD", q, asgd).state[q].step)
  end)

  it("print their param groups as PyTorch's", function()
    local p = accel.zeros(2):requires_grad_(true)
    -- torch 2.15: print(torch.optim.RMSprop([p])) and print(torch.optim.Adagrad([p])), groups numbered 1-based
    -- as every optimizer here
    assert.are.equal(table.concat({"RMSprop (", "Parameter Group 1", "    alpha: 0.99", "    capturable: False",
      "    centered: False", "    differentiable: False", "    eps: 1e-08", "    foreach: None", "    lr: 0.01",
      "    maximize: False", "    momentum: 0", "    weight_decay: 0", ")"}, "\n"), tostring(optim.RMSprop({p})))
    assert.are.equal(table.concat({"Adagrad (", "Parameter Group 1", "    differentiable: False", "    eps: 1e-10",
      "    foreach: None", "    fused: None", "    initial_accumulator_value: 0", "    lr: 0.01", "    lr_decay: 0",
      "    maximize: False", "    weight_decay: 0", ")"}, "\n"), tostring(optim.Adagrad({p})))
    -- torch 2.15: print(torch.optim.NAdam([p]))
    assert.are.equal(table.concat({"NAdam (", "Parameter Group 1", "    betas: (0.9, 0.999)", "    capturable: False",
      "    decoupled_weight_decay: False", "    differentiable: False", "    eps: 1e-08", "    foreach: None",
      "    lr: 0.002", "    maximize: False", "    momentum_decay: 0.004", "    weight_decay: 0", ")"}, "\n"),
      tostring(optim.NAdam({p})))
    -- torch 2.15: print(torch.optim.Rprop([p])) and print(torch.optim.ASGD([p]))
    assert.are.equal(table.concat({"Rprop (", "Parameter Group 1", "    capturable: False", "    differentiable: False",
      "    etas: (0.5, 1.2)", "    foreach: None", "    lr: 0.01", "    maximize: False", "    step_sizes: (1e-06, 50)",
      ")"}, "\n"), tostring(optim.Rprop({p})))
    assert.are.equal(table.concat({"ASGD (", "Parameter Group 1", "    alpha: 0.75", "    capturable: False",
      "    differentiable: False", "    foreach: None", "    lambd: 0.0001", "    lr: 0.01", "    maximize: False",
      "    t0: 1000000.0", "    weight_decay: 0", ")"}, "\n"), tostring(optim.ASGD({p})))
  end)

  it("refuse what PyTorch refuses, and the sharding engine names the optimizers it takes", function()
    local p = accel.zeros(2):requires_grad_(true)
    -- torch 2.15: "Invalid alpha value: -1", "Invalid lr_decay value: -1",
    -- "Invalid initial_accumulator_value value: -1"
    expect_error(function() optim.RMSprop({p}, {alpha = -1}) end, "RMSprop: Invalid alpha value: -1")
    expect_error(function() optim.RMSprop({p}, {centered = 1}) end, "RMSprop: option 'centered' must be a boolean")
    expect_error(function() optim.RMSprop({p}, {betas = {0.9, 0.99}}) end, "RMSprop: unknown option 'betas'")
    expect_error(function() optim.Adagrad({p}, {lr_decay = -1}) end, "Adagrad: Invalid lr_decay value: -1")
    expect_error(function() optim.Adagrad({p}, {initial_accumulator_value = -1}) end,
      "Adagrad: Invalid initial_accumulator_value value: -1")
    -- torch 2.15: "Invalid rho value: 2", "Invalid beta parameter at index 0: 1.0", "Invalid momentum_decay value: -1"
    expect_error(function() optim.Adadelta({p}, {rho = 2}) end, "Adadelta: Invalid rho value: 2")
    expect_error(function() optim.Adamax({p}, {betas = {1, 0.9}}) end, "Adamax: Invalid beta parameter at index 1: 1")
    expect_error(function() optim.NAdam({p}, {momentum_decay = -1}) end, "NAdam: Invalid momentum_decay value: -1")
    expect_error(function() optim.RAdam({p}, {momentum = 0.9}) end, "RAdam: unknown option 'momentum'")
    -- torch 2.15: "Invalid eta values: 1.5, 2", "Invalid lambd value: -1"
    expect_error(function() optim.Rprop({p}, {etas = {1.5, 2}}) end, "Rprop: Invalid eta values: 1.5, 2")
    expect_error(function() optim.ASGD({p}, {lambd = -1}) end, "ASGD: Invalid lambd value: -1")
    expect_error(function() local _ = optim.SparseAdam end, "accel.optim.SparseAdam is not provided")
    local model = accel.nn.Linear(3, 2)
    expect_error(function() accel.shard.Engine(model, optim.RMSprop(model:parameters()), {stage = 1}) end,
      "shard.Engine: the optimizer must be accel.optim.SGD, Adam or AdamW, got RMSprop")
  end)

  it("train through an Accelerator with a scheduler, a closure and gradient clipping", function()
    accel.manual_seed(0)
    local model = accel.nn.Linear(4, 1)
    local opt = optim.RMSprop(model:parameters(), 0.05)
    local sched = optim.lr_scheduler.StepLR(opt, {step_size = 2, gamma = 0.5})
    local acc = accel.Accelerator()
    model, opt, sched = acc:prepare(model, opt, sched)
    local x = accel.randn(32, 4)
    local y = x:sum(2, true)
    local first, last
    for step = 1, 10 do
      local loss = opt:step(function()
        opt:zero_grad()
        local l = accel.nn.functional.mse_loss(model(x), y)
        acc:backward(l)
        acc:clip_grad_norm_(model:parameters(), 1.0)
        return l
      end)
      sched:step()
      if step == 1 then first = loss:item() end
      last = loss:item()
    end
    assert.is_true(last < 0.5 * first, ("loss %g -> %g"):format(first, last))
    assert.are.equal(0.05 * 0.5 ^ 5, opt.param_groups[1].lr)
  end)
end)
