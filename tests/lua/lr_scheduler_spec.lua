-- lr_scheduler_spec.lua: busted spec, run inside accel-lua
--   build/accel-lua /usr/bin/busted tests/lua/lr_scheduler_spec.lua
-- accel.optim.lr_scheduler against PyTorch 2.15: tests/fixtures/lr_schedules.lua
-- (written by scripts/fixtures/make_optim_fixtures.py) holds the lr of two
-- param groups right after construction and after each of 30
-- optimizer:step(); scheduler:step() pairs (and OneCycleLR's momentum).
-- Also: state_dict round trips, initial_lr, positional vs options
-- arguments, and the error cases.
local accel = require("accel")
local optim = accel.optim
local S = optim.lr_scheduler
local support = dofile("tests/lua/support.lua")

-- Many checks here step a scheduler alone (the schedule's values, as
-- PyTorch's own tests do), which warns that optimizer:step() should come
-- first: that line is left out of this file's output; "warns when ..."
-- below checks it.
local WARNING = "warning: scheduler:step() was called before optimizer:step()"
local real_stderr = io.stderr
io.stderr = setmetatable({
  write = function(self, ...)
    local text = table.concat({...})
    if not text:find(WARNING, 1, true) then real_stderr:write(text) end
    return self
  end,
  flush = function(self) real_stderr:flush() return self end,
}, {__index = real_stderr})

local FIX = dofile("tests/fixtures/lr_schedules.lua")
local STEPS = 30
local REL = 1e-12 -- the formulas are PyTorch's, expression by expression

local function sgd2()
  local a, b = accel.zeros(2, {requires_grad = true}), accel.zeros(3, {requires_grad = true})
  return optim.SGD({{params = {a}}, {params = {b}, lr = 0.05}}, {lr = 0.1, momentum = 0.9})
end

local function adam2()
  local a, b = accel.zeros(2, {requires_grad = true}), accel.zeros(3, {requires_grad = true})
  return optim.Adam({{params = {a}}, {params = {b}, lr = 0.05}}, {lr = 0.1})
end

-- Must match SCHEDULES in scripts/fixtures/make_optim_fixtures.py.
local SCHEDULES = {
  StepLR = {sgd2, function(o) return S.StepLR(o, {step_size = 7, gamma = 0.5}) end},
  MultiStepLR = {sgd2, function(o) return S.MultiStepLR(o, {milestones = {5, 12, 12, 20}, gamma = 0.3}) end},
  ExponentialLR = {sgd2, function(o) return S.ExponentialLR(o, {gamma = 0.9}) end},
  CosineAnnealingLR = {sgd2, function(o) return S.CosineAnnealingLR(o, {T_max = 10, eta_min = 0.001}) end},
  LinearLR = {sgd2, function(o) return S.LinearLR(o, {start_factor = 0.25, end_factor = 0.9, total_iters = 8}) end},
  LambdaLR = {sgd2, function(o)
    return S.LambdaLR(o, {function(e) return 0.95 ^ e end, function(e) return 1.0 / (1 + e) end})
  end},
  OneCycleLR_cos = {sgd2, function(o) return S.OneCycleLR(o, {max_lr = {0.5, 0.2}, total_steps = 30}) end},
  OneCycleLR_linear3 = {adam2, function(o)
    return S.OneCycleLR(o, 0.3, {total_steps = 30, pct_start = 0.25, anneal_strategy = "linear", three_phase = true})
  end},
  CyclicLR_tri2 = {sgd2, function(o)
    return S.CyclicLR(o, {0.01, 0.02}, {0.1, 0.2}, {step_size_up = 4, step_size_down = 2, mode = "triangular2"})
  end},
  CyclicLR_exp = {adam2, function(o)
    return S.CyclicLR(o, {base_lr = 0.01, max_lr = 0.1, step_size_up = 3, mode = "exp_range", gamma = 0.95})
  end},
  SequentialLR = {sgd2, function(o)
    return S.SequentialLR(o, {S.LinearLR(o, {start_factor = 0.1, total_iters = 5}), S.CosineAnnealingLR(o, 20)},
      {milestones = {5}})
  end},
  SequentialLR3 = {sgd2, function(o)
    return S.SequentialLR(o, {S.ExponentialLR(o, 0.9), S.StepLR(o, 3, {gamma = 0.5}), S.MultiStepLR(o, {13, 15},
      {gamma = 0.1})}, {4, 10})
  end},
  cosine_warmup = {sgd2, function(o) return S.get_cosine_schedule_with_warmup(o, 5, 30) end},
  cosine_warmup_cycles = {sgd2, function(o) return S.get_cosine_schedule_with_warmup(o, 3, 25, {num_cycles = 1.5}) end},
  linear_warmup = {sgd2, function(o) return S.get_linear_schedule_with_warmup(o, 4, 25) end},
  SequentialLR_nested = {sgd2, function(o)
    return S.SequentialLR(o, {S.SequentialLR(o, {S.LinearLR(o, 0.5, {total_iters = 2}), S.ExponentialLR(o, 0.9)}, {2}),
      S.StepLR(o, 2, {gamma = 0.1})}, {4})
  end},
  SequentialLR_m0 = {sgd2, function(o)
    return S.SequentialLR(o, {S.ExponentialLR(o, 0.5), S.LinearLR(o, 0.5, {total_iters = 2})}, {milestones = {0}})
  end},
  ConstantLR = {sgd2, function(o) return S.ConstantLR(o, {factor = 0.5, total_iters = 4}) end},
  PolynomialLR = {sgd2, function(o) return S.PolynomialLR(o, {total_iters = 20, power = 2.0}) end},
  MultiplicativeLR = {sgd2, function(o)
    return S.MultiplicativeLR(o, {function() return 0.95 end, function(e) return e % 2 == 1 and 0.9 or 1.0 end})
  end},
  ChainedScheduler = {sgd2, function(o)
    return S.ChainedScheduler({S.ConstantLR(o, {factor = 0.5, total_iters = 4}), S.ExponentialLR(o, 0.9)})
  end},
  CosineAnnealingWarmRestarts = {sgd2, function(o)
    return S.CosineAnnealingWarmRestarts(o, 5, {T_mult = 2, eta_min = 0.001})
  end},
  ReduceLROnPlateau = {sgd2, function(o)
    return S.ReduceLROnPlateau(o, {patience = 2, factor = 0.5, cooldown = 1, min_lr = {0.01, 0.02}})
  end},
  ReduceLROnPlateau_max_abs = {sgd2, function(o)
    return S.ReduceLROnPlateau(o, {mode = "max", threshold_mode = "abs", threshold = 0.05, patience = 1})
  end},
}

-- the metric ReduceLROnPlateau gets at step i (PLATEAU_METRICS in the fixture script)
local function plateau_metric(i)
  return 1.0 - 0.1 * math.sin(i) - (i % 7 == 0 and 0.02 * i or 0.0)
end

-- Must match RESUME in the fixture script: built with last_epoch = e.
local RESUME = {
  ExponentialLR = function(o, e) return S.ExponentialLR(o, 0.9, {last_epoch = e}) end,
  CosineAnnealingLR = function(o, e) return S.CosineAnnealingLR(o, 10, {eta_min = 0.001, last_epoch = e}) end,
  LinearLR = function(o, e) return S.LinearLR(o, {start_factor = 0.2, total_iters = 6, last_epoch = e}) end,
  PolynomialLR = function(o, e) return S.PolynomialLR(o, {total_iters = 8, power = 2.0, last_epoch = e}) end,
  MultiplicativeLR = function(o, e) return S.MultiplicativeLR(o, function() return 0.9 end, {last_epoch = e}) end,
  StepLR = function(o, e) return S.StepLR(o, 2, {gamma = 0.5, last_epoch = e}) end,
}

local function momentum_of(opt)
  local out = {}
  for i, g in ipairs(opt.param_groups) do out[i] = g.betas and g.betas[1] or g.momentum end
  return out
end

local function close(a, b) return math.abs(a - b) <= REL * math.abs(b) end

local function check_list(actual, expected, what)
  assert.are.equal(#expected, #actual, what .. ": group count")
  for i = 1, #expected do
    if not close(actual[i], expected[i]) then
      error(("%s: group %d is %.17g, expected %.17g"):format(what, i, actual[i], expected[i]), 2)
    end
  end
end

-- Runs a schedule for steps first..last, checking lrs (and momentum) after each.
local function run(name, sched, opt, first, last)
  local want = FIX[name]
  for s = first, last do
    opt:step()
    if name:find("^ReduceLROnPlateau") then sched:step(plateau_metric(s)) else sched:step() end
    check_list(sched:get_last_lr(), want.lrs[s + 1], ("%s step %d lr"):format(name, s))
    local lrs = {}
    for i, g in ipairs(opt.param_groups) do lrs[i] = g.lr end
    check_list(lrs, want.lrs[s + 1], ("%s step %d param_groups lr"):format(name, s))
    if want.momentum then check_list(momentum_of(opt), want.momentum[s + 1], ("%s step %d momentum"):format(name, s)) end
  end
end

local names = {}
for name in pairs(SCHEDULES) do names[#names + 1] = name end
table.sort(names)

describe("lr schedulers resumed with last_epoch match PyTorch 2.x", function()
  local resumed = {}
  for name in pairs(RESUME) do resumed[#resumed + 1] = name end
  table.sort(resumed)
  for _, name in ipairs(resumed) do
    it(name .. ": 3 steps, optimizer state loaded, rebuilt with last_epoch = 3, 10 more steps", function()
      local opt = sgd2()
      local sched = RESUME[name](opt, -1)
      for _ = 1, 3 do opt:step(); sched:step() end
      local opt2 = sgd2()
      opt2:load_state_dict(opt:state_dict())
      local sched2 = RESUME[name](opt2, 3)
      local want = FIX.resume[name]
      check_list(sched2:get_last_lr(), want[1], name .. " after construction")
      for s = 1, 10 do
        opt2:step()
        sched2:step()
        check_list(sched2:get_last_lr(), want[s + 1], ("%s resumed step %d"):format(name, s))
      end
    end)
  end
end)

describe("lr schedulers match PyTorch", function()
  for _, name in ipairs(names) do
    it(name .. ", 30 steps", function()
      local make_opt, make = table.unpack(SCHEDULES[name])
      local opt = make_opt()
      local sched = make(opt)
      check_list(sched:get_last_lr(), FIX[name].lrs[1], name .. " after construction")
      if FIX[name].momentum then check_list(momentum_of(opt), FIX[name].momentum[1], name .. " momentum at 0") end
      run(name, sched, opt, 1, STEPS)
      if name ~= "ChainedScheduler" then assert.are.equal(STEPS, sched.last_epoch) end -- PyTorch's has none
    end)
  end

  it("ChainedScheduler in the options form, {schedulers = ..., optimizer = ...}", function()
    local opt = sgd2()
    local sched = S.ChainedScheduler({schedulers = {S.ConstantLR(opt, {factor = 0.5, total_iters = 4}),
      S.ExponentialLR(opt, 0.9)}, optimizer = opt})
    assert.are.equal(opt, sched.optimizer)
    run("ChainedScheduler", sched, opt, 1, STEPS)
  end)

  it("fixtures are not trivial", function()
    for _, name in ipairs(names) do
      local lrs, distinct = FIX[name].lrs, {}
      for _, l in ipairs(lrs) do distinct[l[1]] = true end
      local n = 0
      for _ in pairs(distinct) do n = n + 1 end
      assert.is_true(n >= (name == "ConstantLR" and 2 or 3), name) -- ConstantLR: factor * lr, then lr
    end
  end)
end)

describe("lr scheduler state", function()
  for _, name in ipairs(names) do
    it(name .. ": state_dict after 12 steps, load into a fresh optimizer + scheduler, continue == PyTorch", function()
      local make_opt, make = table.unpack(SCHEDULES[name])
      local opt = make_opt()
      local sched = make(opt)
      run(name, sched, opt, 1, 12)
      local osd, ssd = opt:state_dict(), sched:state_dict()
      assert.is_nil(ssd.optimizer)
      local epochs = name ~= "ChainedScheduler" -- PyTorch's ChainedScheduler has no last_epoch
      if epochs then assert.are.equal(12, ssd.last_epoch) end
      local opt2 = make_opt()
      local sched2 = make(opt2)
      opt2:load_state_dict(osd)
      sched2:load_state_dict(ssd)
      -- the saved dict is a copy: stepping the old scheduler does not change it
      opt:step()
      sched:step(name:find("^ReduceLROnPlateau") and 0.5 or nil)
      if epochs then
        assert.are.equal(12, ssd.last_epoch)
        assert.are.equal(12, sched2.last_epoch)
      end
      run(name, sched2, opt2, 13, STEPS)
    end)
  end

  it("records initial_lr in the param groups; base_lrs come from it", function()
    local opt = sgd2()
    local sched = S.StepLR(opt, 2)
    assert.are.equal(0.1, opt.param_groups[1].initial_lr)
    assert.are.equal(0.05, opt.param_groups[2].initial_lr)
    assert.are.same({0.1, 0.05}, sched.base_lrs)
    assert.are.equal(0, sched.last_epoch)
    assert.are.equal(0.1, opt:state_dict().param_groups[1].initial_lr)
  end)

  it("resuming with last_epoch needs initial_lr", function()
    local ok, err = pcall(S.StepLR, sgd2(), 2, {last_epoch = 5})
    assert.is_false(ok)
    assert.matches("lr_scheduler_spec.lua:%d+: StepLR: param 'initial_lr' is not specified in param_groups%[1%]", err)
    local opt = sgd2()
    for _, g in ipairs(opt.param_groups) do g.initial_lr = g.lr end
    local sched = S.StepLR(opt, 2, {gamma = 0.5, last_epoch = 5})
    assert.are.equal(6, sched.last_epoch)
    assert.are.same({0.05, 0.025}, sched:get_last_lr())
  end)

  it("LambdaLR keeps its functions across load_state_dict", function()
    local opt = sgd2()
    local sched = S.LambdaLR(opt, function(e) return 1 / (e + 1) end)
    sched:step()
    local sd = sched:state_dict()
    assert.is_nil(sd.lr_lambdas)
    local sched2 = S.LambdaLR(sgd2(), function(e) return 1 / (e + 1) end)
    sched2:load_state_dict(sd)
    sched2:step()
    assert.are.equal(2, sched2.last_epoch)
    assert.is_true(close(sched2:get_last_lr()[1], 0.1 / 3))
  end)

  it("get_last_lr returns a copy", function()
    local sched = S.ExponentialLR(sgd2(), 0.5)
    local l = sched:get_last_lr()
    l[1] = 7
    assert.are.equal(0.1, sched:get_last_lr()[1])
  end)

  -- PyTorch 2.15, SequentialLR(o, [ConstantLR(o, 0.5, 2), ExponentialLR(o, 0.9), StepLR(o, 1)], [5, 2]) with
  -- lr 0.1: 0.05 0.05 0.1 0.01 0.001 0.0001 1e-05 (bisect_right on the unsorted milestones)
  it("SequentialLR with unsorted milestones switches where PyTorch's bisect_right does", function()
    local p = accel.zeros(1, {requires_grad = true})
    local o = optim.SGD({p}, {lr = 0.1})
    local sched = S.SequentialLR(o, {S.ConstantLR(o, 0.5, 2), S.ExponentialLR(o, 0.9), S.StepLR(o, 1)}, {5, 2})
    local want = {0.05, 0.05, 0.1, 0.01, 0.001, 0.0001, 1e-05}
    for i = 1, #want do
      assert.is_true(close(sched:get_last_lr()[1], want[i]), ("step %d: %.17g"):format(i, sched:get_last_lr()[1]))
      o:step()
      sched:step()
    end
  end)

  it("step(epoch) uses the closed form", function()
    local opt = sgd2()
    local sched = S.CosineAnnealingLR(opt, {T_max = 10})
    sched:step(5)
    assert.are.equal(5, sched.last_epoch)
    assert.is_true(close(sched:get_last_lr()[1], 0.1 * (1 + math.cos(math.pi * 5 / 10)) / 2))
  end)
end)

describe("lr scheduler errors", function()
  local function fails(pattern, f, ...)
    local ok, err = pcall(f, ...)
    assert.is_false(ok, "expected an error matching " .. pattern)
    assert.matches("lr_scheduler_spec.lua:%d+: " .. pattern, err)
  end

  it("names the bad argument", function()
    fails("StepLR: missing required argument 'step_size'", S.StepLR, sgd2())
    fails("StepLR: 'step_size' must be a positive number, got 0", S.StepLR, sgd2(), 0)
    fails("StepLR: unknown option 'gama' %(options: step_size, gamma, last_epoch%)", S.StepLR, sgd2(), 3, {gama = 0.1})
    -- a mistyped required key is named (not reported as the required one missing)
    fails("StepLR: unknown option 'step' %(options: step_size, gamma, last_epoch%)", S.StepLR, sgd2(), {step = 1})
    fails("CosineAnnealingLR: unknown option 'Tmax' %(options: T_max, eta_min, last_epoch%)", S.CosineAnnealingLR,
      sgd2(), {Tmax = 1})
    fails("get_cosine_schedule_with_warmup: unknown option 'warmup' %(options: num_warmup_steps, num_training_steps, "
      .. "num_cycles, last_epoch%)", S.get_cosine_schedule_with_warmup, sgd2(), {warmup = 2})
    fails("StepLR: 'step_size' given both positionally and as an option", S.StepLR, sgd2(), 3, {step_size = 3})
    fails("StepLR: expected an optimizer", S.StepLR, {}, 3)
    fails("CosineAnnealingLR: 'T_max' must be positive", S.CosineAnnealingLR, sgd2(), 0)
    fails("LinearLR: Starting multiplicative factor expected", S.LinearLR, sgd2(), {start_factor = 0})
    fails("LinearLR: Ending multiplicative factor expected to be between 0 and 1", S.LinearLR, sgd2(),
      {end_factor = 1.5})
    fails("LambdaLR: Expected 2 lr_lambdas, but got 1", S.LambdaLR, sgd2(), {function() return 1 end})
    fails("LambdaLR: 'lr_lambda' must be a function", S.LambdaLR, sgd2(), 3)
    fails("OneCycleLR: You must define either total_steps OR %(epochs AND steps_per_epoch%)", S.OneCycleLR, sgd2(), 0.1)
    fails("OneCycleLR: Expected float between 0 and 1 pct_start", S.OneCycleLR, sgd2(), 0.1,
      {total_steps = 10, pct_start = 1.5})
    fails("OneCycleLR: anneal_strategy must be one of 'cos' or 'linear'", S.OneCycleLR, sgd2(), 0.1,
      {total_steps = 10, anneal_strategy = "exp"})
    fails("OneCycleLR: expected 2 values for max_lr, got 3", S.OneCycleLR, sgd2(), {0.1, 0.2, 0.3}, {total_steps = 10})
    local opt = sgd2()
    fails("SequentialLR: Sequential Schedulers expects number of schedulers provided to be one more",
      S.SequentialLR, opt, {S.StepLR(opt, 2), S.StepLR(opt, 3)}, {})
    fails("SequentialLR expects all schedulers to belong to the same optimizer, but got scheduler StepLR at index 2",
      S.SequentialLR, opt, {S.StepLR(opt, 2), S.StepLR(sgd2(), 3)}, {4})
    -- PyTorch: "ChainedScheduler expects all schedulers to belong to the same optimizer, but got scheduler
    -- ExponentialLR at index 1 has SGD (...), which is different from SGD." (0-based index)
    fails("ChainedScheduler expects all schedulers to belong to the same optimizer, but got scheduler ExponentialLR "
      .. "at index 2", S.ChainedScheduler, {S.ExponentialLR(opt, 0.9), S.ExponentialLR(sgd2(), 0.9)})
    -- PyTorch fails only at the step (TypeError: unsupported operand type(s) for %: 'int' and 'str')
    fails("StepLR: 'step_size' must be a positive number, got the string \"3\"", S.StepLR, sgd2(), "3")
    fails("LinearLR: 'total_iters' must be a non%-negative integer, got 2%.5", S.LinearLR, sgd2(), {total_iters = 2.5})
  end)

  -- PyTorch 2.15 (SGD lr 0.1, one lr per step): SequentialLR([LinearLR(start_factor=0.01, total_iters=0),
  -- CosineAnnealingLR(T_max=4)], milestones=[0]) -> [0.1, 0.08535533905932738, 0.05, 0.014644660940672627, 0];
  -- LinearLR(start_factor=0.5, total_iters=0) -> [0.05, 0.05, 0.05, 0.05]; StepLR(step_size=1.5) decays at 3 and 6
  it("LinearLR's total_iters 0 (a warmup switched off) and a fractional StepLR step_size, as PyTorch", function()
    local function lrs(opt, sched, n)
      local out = {}
      for i = 1, n do
        out[i] = sched:get_last_lr()[1]
        opt:step()
        sched:step()
      end
      return out
    end
    local function sgd() return optim.SGD({accel.zeros(1):requires_grad_(true)}, {lr = 0.1}) end
    local o = sgd()
    local seq = S.SequentialLR(o, {S.LinearLR(o, {start_factor = 0.01, total_iters = 0}), S.CosineAnnealingLR(o, {T_max = 4})}, {0})
    local got, want = lrs(o, seq, 5), {0.1, 0.08535533905932738, 0.05, 0.014644660940672627, 0}
    for i = 1, 5 do assert.is_true(math.abs(got[i] - want[i]) < 1e-15, ("step %d: %g"):format(i, got[i])) end
    o = sgd()
    assert.are.same({0.05, 0.05, 0.05, 0.05}, lrs(o, S.LinearLR(o, {start_factor = 0.5, total_iters = 0}), 4))
    o = sgd()
    got = lrs(o, S.StepLR(o, 1.5), 8)
    for i, w in ipairs({0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.001, 0.001}) do
      assert.is_true(math.abs(got[i] - w) < 1e-15, ("epoch %d: %g"):format(i - 1, got[i]))
    end
  end)

  it("ConstantLR's factor 0 and PolynomialLR's total_iters 0 are refused (PyTorch: ZeroDivisionError at a step)",
    function()
      -- PyTorch: ConstantLR(factor=0) gives lr 0.0, then ZeroDivisionError at step total_iters;
      -- PolynomialLR(total_iters=0).step(3) raises ZeroDivisionError
      fails("ConstantLR: 'factor' must be greater than 0", S.ConstantLR, sgd2(), {factor = 0, total_iters = 2})
      fails("PolynomialLR: 'total_iters' must be positive, got 0", S.PolynomialLR, sgd2(), {total_iters = 0})
      fails("PolynomialLR: 'total_iters' must be positive, got %-1", S.PolynomialLR, sgd2(), -1)
    end)

  it("SequentialLR and ChainedScheduler take no epoch in step (PyTorch: a TypeError)", function()
    -- PyTorch: SequentialLR.step() takes 1 positional argument but 2 were given
    local opt = sgd2()
    local seq = S.SequentialLR(opt, {S.ConstantLR(opt, 0.5, 2), S.ExponentialLR(opt, 0.9)}, {3})
    fails("SequentialLR:step: takes no epoch %(got 10%)", seq.step, seq, 10)
    assert.are.equal(0, seq.last_epoch)
    local chain = S.ChainedScheduler({S.ExponentialLR(opt, 0.9)})
    fails("ChainedScheduler:step: takes no epoch %(got 10%)", chain.step, chain, 10)
    -- restarting a SequentialLR at its milestone is a step(0): PyTorch raises NotImplementedError there
    fails("SequentialLR: the SequentialLR at index 2 cannot restart at its milestone", S.SequentialLR, opt,
      {S.StepLR(opt, 2), S.SequentialLR(opt, {S.ExponentialLR(opt, 0.9), S.StepLR(opt, 2)}, {2})}, {3})
  end)

  it("a lambda that returns no number is named, at the caller's line", function()
    local opt = sgd2()
    local sched = S.LambdaLR(opt, function(e) if e < 1 then return 1 end end)
    fails("LambdaLR: lr_lambda%[1%]%(1%) returned nil, expected a number", sched.step, sched)
    fails("MultiplicativeLR: lr_lambda%[2%]%(1%) returned the string \"x\", expected a number", function()
      S.MultiplicativeLR(opt, {function() return 1 end, function() return "x" end}):step()
    end)
  end)

  it("OneCycleLR refuses to step past total_steps", function()
    local opt = sgd2()
    local sched = S.OneCycleLR(opt, 0.1, {epochs = 2, steps_per_epoch = 3})
    assert.are.equal(6, sched.total_steps)
    for _ = 1, 6 do sched:step() end
    fails("OneCycleLR: Tried to step 7 times. The specified number of total steps is 6", sched.step, sched)
  end)

  it("OneCycleLR refuses a phase without steps (PyTorch divides by zero there)", function()
    fails("OneCycleLR: phase 1 of the schedule has no steps", S.OneCycleLR, sgd2(), 0.1,
      {total_steps = 10, pct_start = 0.1})
  end)

  it("refuses what PyTorch 2.x refuses: verbose, a NaN lr, a ReduceLROnPlateau inside SequentialLR", function()
    fails("StepLR: unknown option 'verbose'", S.StepLR, sgd2(), 3, {verbose = true})
    fails("Adam: Invalid learning rate: %-?nan", optim.Adam, {accel.zeros(1, {requires_grad = true})}, {lr = 0 / 0})
    fails("SGD: Invalid weight_decay value", optim.SGD, {accel.zeros(1, {requires_grad = true})},
      {lr = 0.1, weight_decay = 0 / 0})
    local opt = sgd2()
    fails("SequentialLR does not support `ReduceLROnPlateau`", S.SequentialLR, opt,
      {S.ReduceLROnPlateau(opt), S.StepLR(opt, 2)}, {3})
    fails("ReduceLROnPlateau: Factor should be < 1.0", S.ReduceLROnPlateau, sgd2(), {factor = 1})
    fails("ReduceLROnPlateau: mode up is unknown", S.ReduceLROnPlateau, sgd2(), {mode = "up"})
    local r = S.ReduceLROnPlateau(sgd2())
    fails("ReduceLROnPlateau:step: expected the metric", r.step, r)
    r:step(accel.tensor(0.5))
    assert.are.equal(0.5, r.best)
    fails("CosineAnnealingWarmRestarts: Expected positive integer T_0", S.CosineAnnealingWarmRestarts, sgd2(), 0)
  end)

  -- PyTorch 2.15: "Detected call of `lr_scheduler.step()` before `optimizer.step()`. ... Failure to do this
  -- will result in PyTorch skipping the first value of the learning rate schedule", once, at the first step
  it("warns when its first step comes before the optimizer's, as PyTorch", function()
    local function sgd() return optim.SGD({accel.zeros(1):requires_grad_(true)}, {lr = 0.1}) end
    local o = sgd()
    local s = S.StepLR(o, 1)
    local out = support.stderr_of(function() s:step(); s:step() end)
    assert.are.equal("StepLR: " .. WARNING .. "; call optimizer:step() first (as PyTorch warns: otherwise the first "
      .. "value of the learning rate schedule is skipped)\n", out)
    o = sgd()
    s = S.StepLR(o, 1)
    assert.are.equal("", support.stderr_of(function() o:step(); s:step(); s:step() end))
  end)

  it("a PyTorch scheduler or optimizer accel-lua lacks is a clear error, not nil", function()
    fails("accel.optim.lr_scheduler.SWALR is not provided", function() return S.SWALR end)
    fails("accel.optim.SparseAdam is not provided", function() return optim.SparseAdam end)
    fails("accel.optim.swa_utils is not provided", function() return optim.swa_utils end)
    local o = sgd2()
    fails("Optimizer.register_state_dict_pre_hook is not provided", function() o:register_state_dict_pre_hook(print) end)
    -- transformers' keyword form get_scheduler(name=..., optimizer=...) has no Lua spelling: the name comes first
    fails("get_scheduler: the first argument must be the schedule's name %(a string%), got table", S.get_scheduler,
      {name = "linear", optimizer = o})
    assert.is_nil(S.NoSuchThing)
  end)

  it("CyclicLR checks its arguments as PyTorch, and takes a scale_fn", function()
    fails("CyclicLR: mode is invalid and scale_fn is None", S.CyclicLR, sgd2(), 0.01, 0.1, {mode = "square"})
    fails("CyclicLR: scale_mode must be 'cycle' or 'iterations'", S.CyclicLR, sgd2(), 0.01, 0.1,
      {scale_fn = function() return 1 end, scale_mode = "epoch"})
    local opt = optim.Adagrad({accel.nn.Parameter(accel.zeros(1))}, {lr = 0.1}) -- (no momentum, no betas)
    fails("CyclicLR: optimizer must support momentum or beta1", S.CyclicLR, opt, 0.01, 0.1)
    -- scale_fn(cycle) halving each cycle is triangular2 (PyTorch's: the same lrs)
    local a, b = sgd2(), sgd2()
    local custom = S.CyclicLR(a, 0.01, 0.1, {step_size_up = 2, scale_fn = function(c) return 0.5 ^ (c - 1) end})
    local builtin = S.CyclicLR(b, 0.01, 0.1, {step_size_up = 2, mode = "triangular2"})
    for _ = 1, 9 do
      a:step(); custom:step(); b:step(); builtin:step()
      check_list(custom:get_last_lr(), builtin:get_last_lr(), "custom scale_fn")
    end
  end)

  it("OneCycleLR needs an optimizer with momentum or betas when cycling momentum", function()
    local Plain = optim.Optimizer:extend("Plain")
    function Plain:init(params) optim.Optimizer.init(self, params, {lr = 0.1}) end
    local opt = Plain({accel.zeros(1, {requires_grad = true})})
    fails("OneCycleLR: optimizer must support momentum", S.OneCycleLR, opt, 0.1, {total_steps = 5})
    local s = S.OneCycleLR(opt, 0.1, {total_steps = 5, cycle_momentum = false})
    assert.is_true(close(s:get_last_lr()[1], 0.1 / 25))
  end)
end)

describe("lr schedulers and a param group added after them", function()
  -- PyTorch 2.15: SGD(lr = 0.1, momentum = 0.9), a group with lr 0.2 added, then two steps
  local WORK = {
    {function(o) return S.StepLR(o, 1) end, {0.0010000000000000002, 0.0020000000000000005}},
    {function(o) return S.MultiStepLR(o, {1}) end, {0.010000000000000002, 0.020000000000000004}},
    {function(o) return S.ExponentialLR(o, 0.9) end, {0.08100000000000002, 0.16200000000000003}},
    {function(o) return S.CosineAnnealingLR(o, 10) end, {0.09045084971874738, 0.18090169943749476}},
    {function(o) return S.LinearLR(o) end, {0.060000000000000005, 0.36000000000000004}},
    {function(o) return S.ConstantLR(o) end, {0.03333333333333333, 0.2}},
    {function(o) return S.PolynomialLR(o) end, {0.060000000000000005, 0.12000000000000001}},
  }
  -- PyTorch: ValueError zip() argument 2 is shorter / longer than argument 1 (KeyError 'initial_lr' for OneCycleLR)
  local FAIL = {
    LambdaLR = function(o) return S.LambdaLR(o, function() return 0.5 end) end,
    MultiplicativeLR = function(o) return S.MultiplicativeLR(o, function() return 0.5 end) end,
    CosineAnnealingWarmRestarts = function(o) return S.CosineAnnealingWarmRestarts(o, 3) end,
    SequentialLR = function(o)
      return S.SequentialLR(o, {S.ExponentialLR(o, 0.9), S.LambdaLR(o, function() return 0.5 end)}, {1})
    end,
  }

  local function with_added_group(make)
    local opt = optim.SGD({accel.zeros(1, {requires_grad = true})}, {lr = 0.1, momentum = 0.9})
    local sched = make(opt)
    opt:add_param_group({params = {accel.ones(1, {requires_grad = true})}, lr = 0.2})
    return sched, opt
  end

  it("schedulers that read the group's lr go on as PyTorch's", function()
    for i, case in ipairs(WORK) do
      local sched, opt = with_added_group(case[1])
      sched:step()
      sched:step()
      check_list({opt.param_groups[1].lr, opt.param_groups[2].lr}, case[2], "case " .. i)
    end
  end)

  it("schedulers that need a base lr or lambda per group raise, naming the group count", function()
    for name, make in pairs(FAIL) do
      local sched = with_added_group(make)
      local ok, err = pcall(function()
        sched:step()
        sched:step()
      end)
      assert.is_false(ok, name)
      local who = name == "SequentialLR" and "LambdaLR" or name
      assert.matches("lr_scheduler_spec.lua:%d+: " .. who .. ": the optimizer has 2 param groups, but the scheduler "
        .. "has learning rates for 1", err)
    end
    local sched, opt = with_added_group(function(o) return S.CosineAnnealingLR(o, 2) end)
    sched:step()
    sched:step()
    check_list({opt.param_groups[1].lr, opt.param_groups[2].lr}, {0.0, 0.0}, "CosineAnnealingLR") -- PyTorch's
    assert.has_error(function() sched:step() end) -- the restart reads the base lrs: PyTorch's zip fails too
    local one = with_added_group(function(o) return S.OneCycleLR(o, 0.5, {total_steps = 10}) end)
    local ok, err = pcall(one.step, one)
    assert.is_false(ok)
    assert.matches("lr_scheduler_spec.lua:%d+: OneCycleLR: param_groups%[2%] has no 'initial_lr'", err)
  end)
end)

describe("transformers' get_scheduler", function()
  local function lrs(sched, opt, n)
    local out = {opt.param_groups[1].lr}
    for _ = 1, n do
      opt:step()
      sched:step()
      out[#out + 1] = opt.param_groups[1].lr
    end
    return out
  end
  local function sgd1() return optim.SGD({accel.zeros(1, {requires_grad = true})}, {lr = 0.1}) end

  -- transformers: lrs after construction and after each of 6 steps, SGD lr = 0.1
  local CASES = {
    {"linear", {num_warmup_steps = 2, num_training_steps = 5},
      {0.0, 0.05, 0.1, 0.06666666666666667, 0.03333333333333333, 0.0, 0.0}},
    {"cosine", {num_warmup_steps = 1, num_training_steps = 6, scheduler_specific_kwargs = {num_cycles = 1.0}},
      {0.0, 0.1, 0.06545084971874737, 0.009549150281252633, 0.009549150281252623, 0.06545084971874736, 0.1}},
    {"constant_with_warmup", {num_warmup_steps = 4, num_training_steps = 6},
      {0.0, 0.025, 0.05, 0.07500000000000001, 0.1, 0.1, 0.1}},
    {"constant", {}, {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}},
  }

  it("dispatches by name, with transformers' values", function()
    for _, case in ipairs(CASES) do
      local opt = sgd1()
      check_list(lrs(S.get_scheduler(case[1], opt, case[2]), opt, 6), case[3], case[1])
    end
    local opt = sgd1()
    check_list(lrs(S.get_constant_schedule_with_warmup(opt, 3), opt, 6),
      {0.0, 0.03333333333333333, 0.06666666666666667, 0.1, 0.1, 0.1, 0.1}, "get_constant_schedule_with_warmup")
    opt = sgd1()
    check_list(lrs(S.get_constant_schedule(opt), opt, 2), {0.1, 0.1, 0.1}, "get_constant_schedule")
  end)

  it("names what is missing, refused or not provided", function()
    local function fails(pattern, ...)
      local ok, err = pcall(S.get_scheduler, ...)
      assert.is_false(ok, pattern)
      assert.matches("lr_scheduler_spec.lua:%d+: get_scheduler: " .. pattern, err)
    end
    -- transformers: "SchedulerType.LINEAR requires `num_warmup_steps`, please provide that argument."
    fails("linear requires `num_warmup_steps`, please provide that argument.", "linear", sgd1())
    fails("linear requires `num_training_steps`", "linear", sgd1(), {num_warmup_steps = 2})
    fails("constant_with_warmup requires `num_warmup_steps`", "constant_with_warmup", sgd1())
    fails("\"foo\" is not a valid SchedulerType", "foo", sgd1())
    fails("the schedule \"polynomial\" is not provided", "polynomial", sgd1(), {num_warmup_steps = 1})
    fails("the schedule \"constant\" has no warmup", "constant", sgd1(), {num_warmup_steps = 3})
    local ok, err = pcall(S.get_scheduler, "linear", sgd1(),
      {num_warmup_steps = 1, num_training_steps = 5, scheduler_specific_kwargs = {num_cycles = 2}})
    assert.is_false(ok)
    assert.matches("lr_scheduler_spec.lua:%d+: get_linear_schedule_with_warmup: unknown option 'num_cycles'", err)
    ok, err = pcall(function() return S.get_polynomial_decay_schedule_with_warmup end)
    assert.is_false(ok)
    assert.matches("accel.optim.lr_scheduler.get_polynomial_decay_schedule_with_warmup is not provided", err)
  end)
end)
