-- optim_spec.lua: busted spec, run inside accel-lua
--   build/accel-lua /usr/bin/busted tests/lua/optim_spec.lua
-- accel.optim's SGD / Adam / AdamW against PyTorch 1.13
-- (tests/fixtures/optim_steps.safetensors, written by
-- scripts/fixtures/make_optim_fixtures.py: 10 steps over a fixed gradient
-- sequence, float64 and float32), param groups, state_dict round trips,
-- zero_grad, closures, error cases, and nn.utils' gradient clipping against
-- closed forms; the options as PyTorch 2.15 takes them (lr positionally or
-- as a tensor, Adam's decoupled_weight_decay, param-group keys), refusing
-- another optimizer's state and clip_grad_norm_'s norm_type 0 against
-- PyTorch 2.15's values.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["bumps the parameter's version: a graph that saved it refuses backward"] = support.NO_FLOAT_SUBTYPE,
  ["skips parameters whose grad is nil (no update, no state)"] = support.NO_FLOAT_SUBTYPE,
  ["casts a gradient of another float dtype to the parameter's"] = support.NO_FLOAT_SUBTYPE,
  ["zero_grad sets grads to nil by default, or zeroes them"] = support.NO_FLOAT_SUBTYPE,
  ["step(closure) evaluates the closure with grad enabled and returns its loss"] = support.NO_FLOAT_SUBTYPE,
  ["SGD's momentum buffer round-trips; SGD without momentum keeps no state"] = support.NO_FLOAT_SUBTYPE,
  ["clip_grad_norm_ scales by max_norm / (total + 1e-6) when above"] = support.NO_FLOAT_SUBTYPE,
  ["clip_grad_norm_ leaves gradients alone below max_norm and skips nil grads"] = support.NO_FLOAT_SUBTYPE,
  ["clip_grad_norm_ with norm_type 1, inf and 3"] = support.NO_FLOAT_SUBTYPE,
  ["parameters_to_vector / vector_to_parameters"] = support.NO_FLOAT_SUBTYPE,
  ["keeps parameters leaves that require grad, float32 state like the params"] = support.NO_MATH_TYPE,
})
local optim = accel.optim
local nn = accel.nn

local FIXTURE = "tests/fixtures/optim_steps.safetensors"
local STEPS = 10

-- Must match CONFIGS in scripts/fixtures/make_optim_fixtures.py.
local CONFIGS = {
  sgd_plain = {"SGD", nil, {lr = 0.1}},
  sgd_momentum = {"SGD", nil, {lr = 0.1, momentum = 0.9, dampening = 0.1}},
  sgd_nesterov = {"SGD", nil, {lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 0.01}},
  sgd_wd = {"SGD", nil, {lr = 0.1, weight_decay = 0.1}},
  sgd_maximize = {"SGD", nil, {lr = 0.1, momentum = 0.5, maximize = true}},
  adam = {"Adam", nil, {lr = 0.01}},
  adam_wd = {"Adam", nil, {lr = 0.01, betas = {0.8, 0.99}, weight_decay = 0.1}},
  adam_amsgrad = {"Adam", nil, {lr = 0.01, amsgrad = true, weight_decay = 0.05}},
  adamw = {"AdamW", nil, {lr = 0.01}},
  adamw_amsgrad_max = {"AdamW", nil, {lr = 0.02, weight_decay = 0.1, amsgrad = true, maximize = true, eps = 1e-6}},
  groups_sgd = {"SGD", function(p1, p2)
    return {{params = {p1}, lr = 0.1}, {params = {p2}, lr = 0.01, momentum = 0.9}}
  end, {lr = 0.05}},
  groups_adamw = {"AdamW", function(p1, p2)
    return {{params = {p1}}, {params = {p2}, lr = 0.1, weight_decay = 0.0}}
  end, {lr = 0.01}},
  adamw_skip = {"AdamW", nil, {lr = 0.05, weight_decay = 0.02}},
}

-- Tolerances (relative, plus an absolute floor for values near zero).
-- float64 runs the same formulas as torch: agreement to rounding.
-- float32: torch's and our kernels round a few operations differently.
local TOL = {f64 = {rel = 1e-12, abs = 1e-14}, f32 = {rel = 1e-6, abs = 1e-7}}

local fx = accel.load(FIXTURE)

local function flat(t)
  local out, v = {}, t:reshape(-1):tolist()
  for i = 1, #v do out[i] = v[i] end
  return out
end

-- asserts |a - b| <= rel |b| + abs elementwise; returns the worst relative error
local function assert_close(actual, expected, tol, what)
  local a, b = flat(actual), flat(expected)
  assert.are.equal(#b, #a, what .. ": element count")
  local worst = 0
  for i = 1, #b do
    local d = math.abs(a[i] - b[i])
    if d > tol.rel * math.abs(b[i]) + tol.abs then
      error(("%s: element %d is %.17g, expected %.17g (diff %.3g)"):format(what, i, a[i], b[i], d), 2)
    end
    if b[i] ~= 0 then worst = math.max(worst, d / math.abs(b[i])) end
  end
  return worst
end

local function leaf(t) return t:clone():requires_grad_(true) end

-- Runs a fixture config for STEPS steps; calls check(step, p1, p2) after each.
local function run_config(dname, name, check, first, last, opt, p1, p2)
  local cls, groups, opts = table.unpack(CONFIGS[name])
  if not opt then
    p1, p2 = leaf(fx[dname .. ".init.p1"]), leaf(fx[dname .. ".init.p2"])
    opt = optim[cls](groups and groups(p1, p2) or {p1, p2}, opts)
  end
  local g1, g2, skip = fx[dname .. ".grad.p1"], fx[dname .. ".grad.p2"], fx["skip_p2"]
  for s = first or 1, last or STEPS do
    p1.grad = g1[s]:clone()
    if name == "adamw_skip" and skip[s]:item() == 1 then p2.grad = nil else p2.grad = g2[s]:clone() end
    opt:step()
    if check then check(s, p1, p2) end
  end
  return opt, p1, p2
end

describe("optimizers match PyTorch", function()
  local names = {}
  for name in pairs(CONFIGS) do names[#names + 1] = name end
  table.sort(names)
  for _, dname in ipairs({"f64", "f32"}) do
    for _, name in ipairs(names) do
      it(("%s %s, %d steps"):format(name, dname, STEPS), function()
        run_config(dname, name, function(s, p1, p2)
          assert_close(p1, fx[("%s.%s.p1"):format(dname, name)][s], TOL[dname], ("%s step %d p1"):format(name, s))
          assert_close(p2, fx[("%s.%s.p2"):format(dname, name)][s], TOL[dname], ("%s step %d p2"):format(name, s))
        end)
      end)
    end
  end

  it("the fixture really moves the parameters (and differs between configs)", function()
    local init = fx["f64.init.p1"]
    for name in pairs(CONFIGS) do
      assert.is_false(fx["f64." .. name .. ".p1"][STEPS]:allclose(init, 0, 1e-3), name)
    end
    assert.is_false(fx["f64.adam.p1"]:allclose(fx["f64.adamw.p1"]))
    assert.is_false(fx["f64.sgd_momentum.p1"]:allclose(fx["f64.sgd_nesterov.p1"]))
  end)
end)

describe("optimizer behaviour", function()
  it("keeps parameters leaves that require grad, float32 state like the params", function()
    local opt, p1 = run_config("f32", "adam_amsgrad", nil, 1, 2)
    assert.is_true(p1.is_leaf)
    assert.is_true(p1.requires_grad)
    local st = opt.state[p1]
    assert.are.equal(2, st.step)
    assert.are.equal(math.type(st.step), "integer")
    for _, k in ipairs({"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) do
      assert.are.equal(accel.float32, st[k].dtype)
      assert.are.same({3, 5}, {st[k]:size(1), st[k]:size(2)})
      assert.is_false(st[k].requires_grad)
    end
  end)

  it("bumps the parameter's version: a graph that saved it refuses backward", function()
    local p = accel.tensor({1.0, 2.0}, {requires_grad = true})
    local opt = optim.SGD({p}, {lr = 0.1})
    local y = (p * p):sum()
    p.grad = accel.tensor({1.0, 1.0})
    opt:step()
    assert.has_error(function() y:backward() end)
  end)

  it("skips parameters whose grad is nil (no update, no state)", function()
    local a, b = accel.tensor({1.0, 2.0}, {requires_grad = true}), accel.tensor({3.0}, {requires_grad = true})
    for _, cls in ipairs({"SGD", "Adam", "AdamW"}) do
      local opt = optim[cls]({a, b}, {lr = 0.1, momentum = cls == "SGD" and 0.9 or nil})
      a.grad, b.grad = accel.tensor({1.0, 1.0}), nil
      opt:step()
      assert.are.same({3.0}, b:tolist())
      assert.is_nil(opt.state[b])
      assert.is_not_nil(opt.state[a])
    end
  end)

  it("updates a non-contiguous parameter in place", function()
    local base = accel.arange(6, {dtype = accel.float64}):reshape(2, 3)
    local p = base:t()
    p:requires_grad_(true)
    assert.is_false(p:is_contiguous())
    local opt = optim.SGD({p}, {lr = 0.5})
    p.grad = accel.ones(3, 2, {dtype = accel.float64})
    opt:step()
    assert.are.same({{-0.5, 2.5}, {0.5, 3.5}, {1.5, 4.5}}, p:tolist())
    assert.are.same({{-0.5, 0.5, 1.5}, {2.5, 3.5, 4.5}}, base:tolist())
  end)

  it("a gradient of another dtype is refused when assigned (torch: \"assigned grad has data of a different type\")", function()
    local p = accel.tensor({1.0, 2.0}, {dtype = accel.float32, requires_grad = true})
    local opt = optim.SGD({p}, {lr = 1})
    local ok, err = pcall(function() p.grad = accel.tensor({0.25, 0.5}, {dtype = accel.float64}) end)
    assert.is_false(ok)
    assert.matches("assigned grad has dtype float64 but the tensor is float32", err)
    p.grad = accel.tensor({0.25, 0.5}, {dtype = accel.float64}):float()
    opt:step()
    assert.are.same({0.75, 1.5}, p:tolist())
  end)

  it("large tensors (parallel chunks) follow Adam's first step closed form", function()
    local n = 100003
    local p0 = accel.randn(n, {dtype = accel.float64})
    local g = accel.randn(n, {dtype = accel.float64})
    local p = leaf(p0)
    local lr, eps = 1e-2, 1e-8
    local opt = optim.Adam({p}, {lr = lr, eps = eps})
    p.grad = g
    opt:step()
    -- step 1: m_hat = g, v_hat = g^2 -> p = p0 - lr g / (|g| + eps)
    local want = p0 - g * lr / (g:abs() + eps)
    assert.is_true(p:detach():allclose(want, 1e-12, 1e-15))
    -- and float32 against the same formula in float32
    local q = leaf(p0:float())
    local opt32 = optim.AdamW({q}, {lr = lr, eps = eps, weight_decay = 0})
    q.grad = g:float()
    opt32:step()
    assert.is_true(q:detach():double():allclose(want, 1e-5, 1e-7))
  end)

  it("param groups: different lr per group, lr writable between steps", function()
    local f64 = {requires_grad = true, dtype = accel.float64}
    local a, b = accel.tensor({1.0}, f64), accel.tensor({1.0}, f64)
    local opt = optim.SGD({{params = {a}}, {params = {b}, lr = 0.5}}, {lr = 0.1})
    assert.are.equal(0.1, opt.param_groups[1].lr)
    assert.are.equal(0.5, opt.param_groups[2].lr)
    assert.are.equal(0, opt.param_groups[2].momentum)
    a.grad, b.grad = accel.ones(1, {dtype = accel.float64}), accel.ones(1, {dtype = accel.float64})
    opt:step()
    assert.are.same({0.9}, a:tolist())
    assert.are.same({0.5}, b:tolist())
    opt.param_groups[1].lr = 0.25
    opt:step()
    assert.are.equal(0.9 - 0.25, a:item())
    assert.are.same({0.0}, b:tolist())
  end)

  it("add_param_group fills defaults and refuses a parameter already present", function()
    local a, b = accel.zeros(2, {requires_grad = true}), accel.zeros(3, {requires_grad = true})
    local opt = optim.AdamW({a}, {lr = 0.01, betas = {0.8, 0.9}})
    opt:add_param_group({params = {b}, lr = 0.1})
    local g = opt.param_groups[2]
    assert.are.equal(0.1, g.lr)
    assert.are.same({0.8, 0.9}, g.betas)
    assert.are.equal(0.01, g.weight_decay)
    assert.are.equal(1e-8, g.eps)
    assert.are.equal(false, g.amsgrad)
    -- betas tables are not shared between groups
    g.betas[1] = 0.5
    assert.are.equal(0.8, opt.param_groups[1].betas[1])
    local ok, err = pcall(opt.add_param_group, opt, {params = {a}})
    assert.is_false(ok)
    assert.matches("optim_spec.lua:%d+: AdamW: some parameters appear in more than one parameter group", err)
  end)

  it("zero_grad sets grads to nil by default, or zeroes them", function()
    local a = accel.tensor({1.0, 2.0}, {requires_grad = true})
    local opt = optim.SGD({a}, {lr = 0.1})
    a.grad = accel.tensor({3.0, 4.0})
    opt:zero_grad()
    assert.is_nil(a.grad)
    a.grad = accel.tensor({3.0, 4.0})
    local g = a.grad
    opt:zero_grad({set_to_none = false})
    assert.are.equal(g, a.grad)
    assert.are.same({0.0, 0.0}, a.grad:tolist())
    opt:zero_grad(false)
    assert.are.same({0.0, 0.0}, a.grad:tolist())
    -- PyTorch: TypeError for an unexpected keyword; here the grads stay as they were
    local err = support.errmsg(function() opt:zero_grad({set_to_nonee = false}) end)
    assert.matches("optim_spec.lua:%d+: zero_grad: unknown option 'set_to_nonee' %(options: set_to_none%)", err)
    assert.matches("zero_grad: argument 'set_to_none' %(position 1%) must be boolean, not string",
      support.errmsg(function() opt:zero_grad("x") end))
    assert.are.same({0.0, 0.0}, a.grad:tolist())
  end)

  it("step(closure) evaluates the closure with grad enabled and returns its loss", function()
    local w = accel.tensor({2.0}, {requires_grad = true})
    local opt = optim.SGD({w}, {lr = 0.1})
    local loss = accel.no_grad(function()
      return opt:step(function()
        opt:zero_grad()
        local l = (w * w):sum()
        l:backward()
        return l
      end)
    end)
    assert.are.equal(4.0, loss:item())
    assert.is_true(math.abs(w:item() - 1.6) < 1e-6) -- 2 - 0.1 * 4
    assert.is_nil(opt:step())
  end)

  it("prints its param groups", function()
    local opt = optim.Adam({accel.zeros(1, {requires_grad = true})}, {lr = 0.5})
    local s = tostring(opt)
    assert.matches("^Adam %(", s)
    assert.matches("Parameter Group 1", s, 1, true)
    assert.matches("betas: (0.9, 0.999)", s, 1, true)
    assert.matches("lr: 0.5", s, 1, true)
    -- floats as Python's repr (torch 2.15: "lr: 0.30000000000000004", "momentum: 0.3333333333333333")
    local sgd = tostring(optim.SGD({accel.zeros(1, {requires_grad = true})}, {lr = 0.1 + 0.2, momentum = 1 / 3}))
    assert.matches("lr: 0.30000000000000004\n", sgd, 1, true)
    assert.matches("momentum: 0.3333333333333333\n", sgd, 1, true)
    assert.matches("weight_decay: 0\n", sgd, 1, true)
  end)
end)

-- Expected values: PyTorch 2.15 on the same problems.
describe("optimizer options as PyTorch 2.15 takes them", function()
  local F32 = {dtype = accel.float32}

  -- p = {1, -2, 3}, q = {0.5, 1.5}; 3 steps with grads {0.5, -1, 0.25} * step and {-0.75, 2}
  local function three_steps(make)
    local p, q = accel.tensor({1.0, -2.0, 3.0}, F32):requires_grad_(), accel.tensor({0.5, 1.5}, F32):requires_grad_()
    local opt = make(p, q)
    for i = 1, 3 do
      p.grad = accel.tensor({0.5 * i, -1.0 * i, 0.25 * i}, F32)
      q.grad = accel.tensor({-0.75, 2.0}, F32)
      opt:step()
    end
    return p:tolist(), q:tolist()
  end
  local DECOUPLED_P = {0.6809359192848206, -1.6512348651885986, 2.6215341091156006}
  local DECOUPLED_Q = {0.7821596264839172, 1.1584384441375732}

  it("Adam's decoupled_weight_decay = true is AdamW, per param group too", function()
    local opts = {lr = 0.1, weight_decay = 0.1}
    local p, q = three_steps(function(a, b)
      return optim.Adam({a, b}, {lr = 0.1, weight_decay = 0.1, decoupled_weight_decay = true})
    end)
    assert.are.same(DECOUPLED_P, p)
    assert.are.same(DECOUPLED_Q, q)
    p, q = three_steps(function(a, b) return optim.AdamW({a, b}, opts) end)
    assert.are.same(DECOUPLED_P, p)
    p, q = three_steps(function(a, b)
      return optim.Adam({{params = {a}}, {params = {b}, decoupled_weight_decay = true}}, opts)
    end)
    assert.are.same({0.7056953310966492, -1.7057867050170898, 2.70154070854187}, p) -- L2 weight decay
    assert.are.same(DECOUPLED_Q, q)
    assert.are.equal(false, optim.Adam({accel.zeros(1):requires_grad_()}).param_groups[1].decoupled_weight_decay)
    assert.are.equal(true, optim.AdamW({accel.zeros(1):requires_grad_()}).param_groups[1].decoupled_weight_decay)
  end)

  it("Adam's decoupled_weight_decay under a sharding engine (one process)", function()
    local ok, shard = pcall(require, "accel.shard")
    if not ok then return pending("accel.shard (the sharding engine) is not in this build") end
    local eng
    local p, q = three_steps(function(a, b)
      local model = nn.Module()
      model.p, model.q = nn.Parameter(a), nn.Parameter(b)
      local opt = optim.Adam({model.p, model.q}, {lr = 0.1, weight_decay = 0.1, decoupled_weight_decay = true})
      eng = shard.Engine(model, opt, {stage = 1})
      return {step = function()
        model.p.grad, model.q.grad = a.grad, b.grad
        eng:step()
        accel.no_grad(function() a:copy_(model.p); b:copy_(model.q) end)
      end}
    end)
    eng:close()
    assert.are.same(DECOUPLED_P, p)
    assert.are.same(DECOUPLED_Q, q)
  end)

  it("lr positionally: SGD(params, lr, [options]), Adam(params, lr)", function()
    local p = accel.tensor({1.0, 2.0}, F32):requires_grad_()
    local opt = optim.SGD({p}, 0.1, {momentum = 0.9})
    for _ = 1, 2 do
      p.grad = accel.tensor({1.0, -1.0}, F32)
      opt:step()
    end
    assert.are.same({0.7099999785423279, 2.2899999618530273}, p:tolist())
    local a = accel.tensor({1.0, 2.0}, F32):requires_grad_()
    local adam = optim.Adam({a}, 0.1)
    for _ = 1, 2 do
      a.grad = accel.tensor({1.0, -1.0}, F32)
      adam:step()
    end
    assert.are.same({0.800000011920929, 2.1999998092651367}, a:tolist())
    assert.are.equal(0.5, optim.AdamW({a}, 0.5).param_groups[1].lr)
  end)

  it("lr as a 1-element tensor is read as a number", function()
    local p = accel.zeros(3, {requires_grad = true})
    local opt = optim.SGD({p}, {lr = accel.tensor(0.25)})
    assert.are.equal("number", type(opt.param_groups[1].lr))
    p.grad = accel.tensor({1.0, -2.0, 0.5}, F32)
    opt:step()
    assert.are.same({-0.25, 0.5, -0.125}, p:tolist())
    local q = accel.zeros(1, {requires_grad = true})
    opt:add_param_group({params = {q}, lr = accel.tensor({0.5})})
    assert.are.equal(0.5, opt.param_groups[2].lr)
  end)
end)

describe("optimizer state_dict", function()
  local function copy_params(p1, p2) return leaf(p1:detach()), leaf(p2:detach()) end

  for _, case in ipairs({{"f32", "adam_amsgrad"}, {"f32", "sgd_nesterov"}, {"f64", "adamw_skip"},
    {"f32", "groups_adamw"}}) do
    local dname, name = case[1], case[2]
    it(("save after 4 steps, load into a new optimizer, continue == uninterrupted (%s %s)"):format(name, dname),
      function()
        local _, u1, u2 = run_config(dname, name)
        local opt, p1, p2 = run_config(dname, name, nil, 1, 4)
        local sd = opt:state_dict()
        local q1, q2 = copy_params(p1, p2)
        local cls, groups, opts = table.unpack(CONFIGS[name])
        local fresh = optim[cls](groups and groups(q1, q2) or {q1, q2}, cls == "SGD" and {lr = 123} or {})
        fresh:load_state_dict(sd)
        -- the loaded state is a copy: running the old optimizer on does not touch it
        run_config(dname, name, nil, 5, 6, opt, p1, p2)
        run_config(dname, name, nil, 5, STEPS, fresh, q1, q2)
        assert.is_true(q1:equal(u1), "p1 bitwise equal")
        assert.is_true(q2:equal(u2), "p2 bitwise equal")
        assert.are.equal(opts.lr or 0.01, fresh.param_groups[1].lr)
      end)
  end

  it("has PyTorch's structure with 1-based parameter indices", function()
    local a, b, c = accel.zeros(2, {requires_grad = true}), accel.zeros(3, {requires_grad = true}),
      accel.zeros(1, {requires_grad = true})
    local opt = optim.Adam({{params = {a, b}}, {params = {c}, lr = 0.5}}, {lr = 0.1, betas = {0.8, 0.9}})
    a.grad, c.grad = accel.ones(2), accel.ones(1)
    opt:step()
    opt:step()
    local sd = opt:state_dict()
    assert.are.same({1, 2}, sd.param_groups[1].params)
    assert.are.same({3}, sd.param_groups[2].params)
    assert.are.same({0.8, 0.9}, sd.param_groups[1].betas)
    assert.are.equal(0.1, sd.param_groups[1].lr)
    assert.are.equal(0.5, sd.param_groups[2].lr)
    assert.are.equal(false, sd.param_groups[1].amsgrad)
    assert.is_nil(sd.state[2]) -- b never had a gradient
    assert.are.equal(2, sd.state[1].step)
    assert.are.equal(2, sd.state[3].step)
    assert.is_true(accel.is_tensor(sd.state[1].exp_avg))
    assert.is_true(accel.is_tensor(sd.state[3].exp_avg_sq))
    -- param_groups in the dict are copies
    sd.param_groups[1].betas[1] = 0
    assert.are.equal(0.8, opt.param_groups[1].betas[1])
    -- keys as strings (e.g. after JSON) load too
    local opt2 = optim.Adam({{params = {a, b}}, {params = {c}}}, {lr = 0.1})
    opt2:load_state_dict({state = {["1"] = sd.state[1], ["3"] = sd.state[3]}, param_groups = sd.param_groups})
    assert.are.equal(2, opt2.state[a].step)
    assert.are.equal(0, opt2.param_groups[1].betas[1])
  end)

  it("SGD's momentum buffer round-trips; SGD without momentum keeps no state", function()
    local a = accel.tensor({1.0}, {requires_grad = true})
    local opt = optim.SGD({a}, {lr = 0.1, momentum = 0.9})
    a.grad = accel.tensor({1.0})
    opt:step()
    local sd = opt:state_dict()
    assert.are.same({1.0}, sd.state[1].momentum_buffer:tolist())
    local plain = optim.SGD({a}, {lr = 0.1})
    plain:step()
    assert.are.same({}, plain:state_dict().state)
  end)

  it("refuses a state dict that does not fit", function()
    local a, b = accel.zeros(2, {requires_grad = true}), accel.zeros(3, {requires_grad = true})
    local opt = optim.Adam({a, b})
    a.grad, b.grad = accel.ones(2), accel.ones(3)
    opt:step()
    local sd = opt:state_dict()
    local function fails(o, d, pattern)
      local ok, err = pcall(o.load_state_dict, o, d)
      assert.is_false(ok)
      assert.matches(pattern, err)
    end
    fails(optim.Adam({{params = {a}}, {params = {b}}}), sd, "loaded state dict has 1 parameter groups, but the optimizer has 2")
    fails(optim.Adam({a}), sd, "parameter group 1 has 2 parameters, but the optimizer's group has 1")
    local c = accel.zeros(4, {requires_grad = true})
    fails(optim.Adam({a, c}), sd, "state 'exp_avg' of parameter 2 has shape %[3%] but the parameter has shape %[4%]")
    fails(optim.Adam({a, b}), {state = {[7] = {step = 1}}, param_groups = sd.param_groups},
      "state for parameter 7, which is in none of its parameter groups")
    fails(optim.Adam({a, b}), {}, "load_state_dict: expected a table")
  end)

  it("refuses the state of another optimizer (PyTorch: KeyError 'step'); keeps loading its own", function()
    local q = accel.ones(2, {requires_grad = true})
    local sgd = optim.SGD({q}, {lr = 0.1, momentum = 0.9})
    q.grad = accel.ones(2)
    sgd:step()
    local adam = optim.Adam({q}, {lr = 0.1})
    local ok, err = pcall(adam.load_state_dict, adam, sgd:state_dict())
    assert.is_false(ok)
    assert.matches("optim_spec.lua:%d+: Adam: load_state_dict: the state of parameter 1 has no 'step' %(a state_dict "
      .. "of another optimizer%?%)", err)
    assert.is_nil(adam.state[q])
    adam:step()
    ok, err = pcall(sgd.load_state_dict, sgd, adam:state_dict())
    assert.is_false(ok)
    assert.matches("SGD: load_state_dict: the state of parameter 1 has 'exp_avg', which SGD does not keep", err)
    -- an empty state, and SGD's step (written by sharded checkpoints), load
    local groups = sgd:state_dict().param_groups
    sgd:load_state_dict({state = {[1] = {}}, param_groups = groups})
    sgd:load_state_dict({state = {[1] = {step = 3, momentum_buffer = accel.ones(2)}}, param_groups = groups})
    assert.are.equal(3, sgd.state[q].step)
    local ams = optim.Adam({q}, {amsgrad = true})
    ams:step()
    local sd = ams:state_dict()
    assert.is_true(accel.is_tensor(sd.state[1].max_exp_avg_sq))
    optim.Adam({q}):load_state_dict(sd)
  end)
end)

describe("optimizer errors", function()
  local p = accel.zeros(2, {requires_grad = true})
  local function fails(pattern, f, ...)
    local ok, err = pcall(f, ...)
    assert.is_false(ok, "expected an error matching " .. pattern)
    assert.matches("optim_spec.lua:%d+: " .. pattern, err)
  end

  it("rejects bad hyper-parameters", function()
    fails("SGD: Invalid learning rate: %-0.1", optim.SGD, {p}, {lr = -0.1})
    fails("Adam: Invalid learning rate: %-1", optim.Adam, {p}, {lr = -1})
    fails("AdamW: Invalid beta parameter at index 1: 1", optim.AdamW, {p}, {betas = {1.0, 0.999}})
    fails("Adam: Invalid beta parameter at index 2: %-0.1", optim.Adam, {p}, {betas = {0.9, -0.1}})
    fails("Adam: option 'betas' must be a list of two numbers", optim.Adam, {p}, {betas = 0.9})
    fails("Adam: Invalid epsilon value", optim.Adam, {p}, {eps = -1e-8})
    fails("Adam: Invalid weight_decay value", optim.Adam, {p}, {weight_decay = -1})
    fails("SGD: Invalid momentum value", optim.SGD, {p}, {momentum = -0.5})
    fails("SGD: Nesterov momentum requires a momentum and zero dampening", optim.SGD, {p}, {nesterov = true})
    fails("SGD: Nesterov momentum requires", optim.SGD, {p}, {nesterov = true, momentum = 0.9, dampening = 0.1})
    -- an unknown key names the keys taken: torch's plus those accepted and ignored (capturable for SGD too)
    fails("SGD: unknown option 'lrr' %(options: capturable, dampening, differentiable, foreach, fused, lr, maximize, "
      .. "momentum, nesterov, weight_decay%)", optim.SGD, {p}, {lrr = 0.1})
    fails("Adam: unknown option 'beta' %(options: amsgrad, betas, capturable, decoupled_weight_decay, differentiable, "
      .. "eps, foreach, fused, lr, maximize, weight_decay%)", optim.Adam, {p}, {beta = {0.9, 0.99}})
    fails("AdamW: option 'lr' must be a number", optim.AdamW, {p}, {lr = "0.1"})
    fails("SGD: Invalid learning rate", optim.SGD, {{params = {p}, lr = -2}}, {lr = 0.1})
    fails("Adam: differentiable = true is not supported", optim.Adam, {p}, {differentiable = true})
    fails("Adam: Tensor lr must be 1%-element, got 2 elements", optim.Adam, {p}, {lr = accel.tensor({0.01, 0.02})})
    fails("SGD: lr given twice", optim.SGD, {p}, 0.1, {lr = 0.2})
    fails("SGD: expected %(params, %[lr%], %[options%]%), got a string before the options", optim.SGD, {p}, "0.1", {})
    fails("Adam: expected lr %(a number%) or an options table after params, got string", optim.Adam, {p}, "0.1")
    -- PyTorch 2.15's constructors: "`fused` and `foreach` cannot be `True` together." (SGD, Adam, AdamW) and, for
    -- Adam / AdamW, "lr as a Tensor is not supported for capturable=False and foreach=True"
    fails("SGD: `fused` and `foreach` cannot be `True` together.", optim.SGD, {p}, {lr = 0.1, fused = true, foreach = true})
    fails("AdamW: `fused` and `foreach` cannot be `True` together.", optim.AdamW, {p}, {fused = true, foreach = true})
    fails("Adam: lr as a Tensor is not supported for capturable=False and foreach=True", optim.Adam, {p},
      {lr = accel.tensor(0.01), foreach = true})
    assert.are.equal(0.5, optim.SGD({p}, {lr = accel.tensor(0.5), foreach = true}).param_groups[1].lr)
    assert.are.equal(true, optim.Adam({p}, {fused = true}).param_groups[1].fused)
  end)

  it("checks a param group's hyper-parameters as the options", function()
    fails("SGD: differentiable = true is not supported", optim.SGD, {{params = {p}, differentiable = true}}, {lr = 0.1})
    fails("Adam: Tensor lr must be 1%-element", optim.Adam, {{params = {p}, lr = accel.ones(2)}})
    fails("SGD: option 'momentum' must be a number", optim.SGD, {{params = {p}, momentum = "0.9"}}, {lr = 0.1})
    -- ignored as in the options but kept as given (PyTorch 2.15: a group {'params': [p], 'foreach': True}
    -- holds foreach True); other keys are the group's own and carried along, as PyTorch 2.15 carries
    -- them ({'params': [p], 'name': 'dec'} keeps 'name', also in state_dict)
    local g = optim.Adam({{params = {p}, foreach = true, differentiable = false, initial_lr = 0.5, name = "dec"}})
    assert.are.equal(true, g.param_groups[1].foreach)
    assert.are.equal(0.5, g.param_groups[1].initial_lr)
    assert.are.equal("dec", g.param_groups[1].name)
    assert.are.equal("dec", g:state_dict().param_groups[1].name)
  end)

  it("rejects bad parameter lists", function()
    fails("SGD: optimizer got an empty parameter list", optim.SGD, {}, {lr = 0.1})
    fails("Adam: params must be a list of tensors or of param%-group tables, got a single tensor", optim.Adam, p)
    fails("Adam: params%[2%] is the same tensor as params%[1%]", optim.Adam, {p, p})
    local q = accel.zeros(1, {requires_grad = true})
    fails("Adam: some parameters appear in more than one parameter group", optim.Adam,
      {{params = {p, q}}, {params = {q}}})
    fails("SGD: optimizer can only optimize tensors, but params%[2%] is a number", optim.SGD, {p, 3})
    local nonleaf = p * 2
    fails("AdamW: can't optimize a non%-leaf tensor", optim.AdamW, {nonleaf})
    fails("Adam: params%[1%] is accel.int64; optimizers update float32 or float64", optim.Adam, {accel.zeros(2, {dtype = accel.int64})})
    fails("SGD: a param group needs a 'params' list", optim.SGD, {{lr = 0.1}})
    fails("Adam: params must be a list .*, got a table that is not a list %(for a module, pass model:parameters%(%)%)",
      optim.Adam, {weight = p})
  end)

  it("reports a parameter the C update cannot take, before changing anything", function()
    local a = accel.zeros(2, {requires_grad = true})
    local opt = optim.Adam({a})
    -- a bfloat16 parameter slipped into the group after construction
    local h = accel.zeros(3, {dtype = accel.bfloat16, requires_grad = true})
    opt.param_groups[1].params[2] = h
    a.grad, h.grad = accel.ones(2), accel.ones(3, {dtype = accel.bfloat16})
    fails("Adam: parameter 2 is bfloat16; optimizers update float32 or float64 parameters", opt.step, opt)
    -- the group is checked before any update: a is untouched, no state was made
    assert.are.same({0.0, 0.0}, a:tolist())
    assert.is_nil(opt.state[a])
    local two = optim.SGD({{params = {a}}, {params = {accel.zeros(1, {requires_grad = true})}}}, {lr = 0.1})
    two.param_groups[2].params[1] = h
    fails("SGD %(param group 2%): parameter 1 is bfloat16", two.step, two)
  end)
end)

describe("nn.utils clipping", function()
  local function params(...)
    local out = {}
    for i, g in ipairs({...}) do
      out[i] = accel.zeros(#g, {requires_grad = true})
      out[i].grad = accel.tensor(g, {dtype = accel.float32}) -- (under LuaJIT integral literals would give int64)
    end
    return out
  end

  it("clip_grad_norm_ scales by max_norm / (total + 1e-6) when above", function()
    local ps = params({3.0, 4.0}, {12.0}) -- total 2-norm 13
    local total = nn.utils.clip_grad_norm_(ps, 6.5)
    assert.are.equal(0, total:dim())
    assert.are.equal(accel.float32, total.dtype)
    assert.are.equal(13.0, total:item())
    local c = 6.5 / (13 + 1e-6)
    assert.is_true(ps[1].grad:allclose(accel.tensor({3 * c, 4 * c}), 1e-6, 0))
    assert.is_true(ps[2].grad:allclose(accel.tensor({12 * c}), 1e-6, 0))
  end)

  it("clip_grad_norm_ leaves gradients alone below max_norm and skips nil grads", function()
    local ps = params({3.0, 4.0}, {12.0})
    ps[3] = accel.zeros(2, {requires_grad = true})
    local total = nn.utils.clip_grad_norm_(ps, 100)
    assert.are.equal(13.0, total:item())
    assert.are.same({3.0, 4.0}, ps[1].grad:tolist())
    assert.are.same({12.0}, ps[2].grad:tolist())
    assert.are.equal(0.0, nn.utils.clip_grad_norm_({ps[3]}, 1.0):item())
  end)

  it("clip_grad_norm_ with norm_type 1, inf and 3", function()
    local ps = params({3.0, -4.0}, {-12.0})
    assert.are.equal(19.0, nn.utils.clip_grad_norm_(ps, 100, {norm_type = 1}):item())
    assert.are.equal(12.0, nn.utils.clip_grad_norm_(ps, 100, {norm_type = math.huge}):item())
    assert.are.equal(12.0, nn.utils.clip_grad_norm_(ps, 100, {norm_type = "inf"}):item())
    local want3 = (27 + 64 + 1728) ^ (1 / 3)
    assert.is_true(math.abs(nn.utils.clip_grad_norm_(ps, 100, {norm_type = 3}):item() - want3) < 1e-5 * want3)
    nn.utils.clip_grad_norm_(ps, 6, {norm_type = math.huge})
    assert.is_true(ps[2].grad:allclose(accel.tensor({-12 * 6 / (12 + 1e-6)}), 1e-6, 0))
  end)

  it("total norm of large gradients (parallel partial sums) in float64", function()
    local p = accel.zeros(200001, {requires_grad = true, dtype = accel.float64})
    p.grad = accel.full({200001}, 0.5, {dtype = accel.float64})
    local total = nn.utils.clip_grad_norm_({p}, 1e9)
    assert.are.equal(accel.float64, total.dtype)
    assert.is_true(math.abs(total:item() - math.sqrt(200001 * 0.25)) < 1e-9)
    assert.are.equal(math.sqrt(200001 * 0.25), accel._C.total_norm({p.grad}, 2))
  end)

  it("clip_grad_norm_ on a non-finite norm: error when asked, else scales like PyTorch", function()
    local ps = params({1.0, 0 / 0})
    local ok, err = pcall(nn.utils.clip_grad_norm_, ps, 1.0, {error_if_nonfinite = true})
    assert.is_false(ok)
    assert.matches("optim_spec.lua:%d+: clip_grad_norm_: The total norm of order 2", err)
    local total = nn.utils.clip_grad_norm_(ps, 1.0)
    assert.is_true(total:item() ~= total:item())
    local inf = params({1.0, math.huge})
    assert.are.equal(math.huge, nn.utils.clip_grad_norm_(inf, 1.0):item())
  end)

  it("clip_grad_norm_ takes PyTorch's positional error_if_nonfinite and foreach", function()
    local ps = params({1.0, 0 / 0})
    -- torch 2.15: clip_grad_norm_([p], 1.0, 2.0, True) raises "The total norm of order 2.0 for gradients from
    -- `parameters` is non-finite, so it cannot be clipped. ..."
    local ok, err = pcall(nn.utils.clip_grad_norm_, ps, 1.0, 2.0, true)
    assert.is_false(ok)
    assert.matches("clip_grad_norm_: The total norm of order 2[%.0]* for gradients from `parameters` is non%-finite", err)
    ok = pcall(nn.utils.clip_grad_norm_, ps, 1.0, nil, true, false)
    assert.is_false(ok)
    assert.is_true(pcall(nn.utils.clip_grad_norm_, ps, 1.0, 2.0, false, true))
    ok, err = pcall(nn.utils.clip_grad_norm_, ps, 1.0, {norm_type = 2}, true)
    assert.is_false(ok)
    assert.matches("clip_grad_norm_: error_if_nonfinite / foreach given positionally after the options table", err)
  end)

  -- the gradients of PyTorch 2.15's check (a third parameter has no grad, a fourth a zero one)
  local function torch_case()
    local ps = params({1.5, -2.0, 0.25, 3.0, 0.0, -1.0}, {0.5, -0.5, 4.0, 0.0}, {0.0, 0.0, 0.0})
    table.insert(ps, 3, accel.zeros(2, {requires_grad = true}))
    return ps
  end

  it("clip_grad_norm_ with norm_type 0 counts the gradients with a nonzero element (PyTorch 2.15)", function()
    local ps = torch_case()
    assert.are.equal(2.0, nn.utils.clip_grad_norm_(ps, 1.0, {norm_type = 0}):item())
    assert.are.same({0.7499996423721313, -0.9999995231628418, 0.12499994039535522, 1.4999992847442627, 0.0,
      -0.4999997615814209}, ps[1].grad:tolist())
    assert.are.same({0.24999988079071045, -0.24999988079071045, 1.9999990463256836, 0.0}, ps[2].grad:tolist())
  end)

  it("clip_grad_norm_ takes norm_type positionally", function()
    assert.are.equal(2.0, nn.utils.clip_grad_norm_(torch_case(), 1.0, 0):item())
    assert.are.equal(4.0, nn.utils.clip_grad_norm_(torch_case(), 1.0, "inf"):item())
    local ps = torch_case()
    assert.are.equal(12.75, nn.utils.clip_grad_norm_(ps, 1.0, 1):item())
    assert.are.same({0.11764705181121826, -0.15686273574829102, 0.019607841968536377, 0.23529410362243652, 0.0,
      -0.07843136787414551}, ps[1].grad:tolist())
  end)

  it("a sharding engine refuses norm_type 0 (a count of gradients, not a sum over shards)", function()
    local ok, shard = pcall(require, "accel.shard")
    if not ok then return pending("accel.shard (the sharding engine) is not in this build") end
    local m = nn.Linear(3, 2)
    local eng = shard.Engine(m, optim.Adam(m:parameters()), {stage = 2})
    m(accel.ones(4, 3)):sum():backward()
    local err
    ok, err = pcall(eng.clip_grad_norm_, eng, 1.0, 0)
    assert.is_false(ok)
    assert.matches("optim_spec.lua:%d+: shard.Engine:clip_grad_norm_: norm_type 0 is not supported on sharded "
      .. "gradients", err)
    eng:close()
  end)

  it("a sharding engine takes a negative norm_type: the min / the sum of |g|^p over the shards", function()
    local ok, shard = pcall(require, "accel.shard")
    if not ok then return pending("accel.shard (the sharding engine) is not in this build") end
    local m = nn.Linear(3, 2)
    local eng = shard.Engine(m, optim.Adam(m:parameters()), {stage = 2})
    m(accel.ones(4, 3)):sum():backward() -- every gradient element is 4 (8 of them)
    -- closed forms: -inf gives min |g| = 4; -1 gives (8 / 4)^-1 = 0.5; -2 gives (8 / 16)^-0.5 = sqrt(2)
    assert.are.equal(0.5, eng:clip_grad_norm_(100, -1):item())
    assert.is_true(math.abs(eng:clip_grad_norm_(100, -2):item() - math.sqrt(2)) < 1e-6)
    assert.are.equal(4.0, eng:clip_grad_norm_(100, "-inf"):item())
    assert.are.equal(4.0, eng:clip_grad_norm_(1.0, -math.huge):item())
    -- clipped to max_norm 1: every element 4 / (4 + 1e-6), so the min is now about 1
    assert.is_true(math.abs(eng:clip_grad_norm_(100, -math.huge):item() - 1) < 1e-6)
    eng:close()
  end)

  it("clip_grad_value_ and accelerator:clip_grad_value_ take {foreach =} (ignored), refuse other options", function()
    local want = {{0.75, -0.75, 0.25, 0.75, 0.0, -0.75}, {0.5, -0.5, 0.75, 0.0}}
    local ps = torch_case()
    nn.utils.clip_grad_value_(ps, 0.75, {foreach = true})
    assert.are.same(want, {ps[1].grad:tolist(), ps[2].grad:tolist()})
    local acc = accel.Accelerator({cpu = true})
    ps = torch_case()
    acc:clip_grad_value_(ps, 0.75, {foreach = false})
    assert.are.same(want, {ps[1].grad:tolist(), ps[2].grad:tolist()})
    for _, f in ipairs({nn.utils.clip_grad_value_, function(...) return acc:clip_grad_value_(...) end}) do
      local ok, err = pcall(f, torch_case(), 0.75, {bogus = true})
      assert.is_false(ok)
      assert.matches("optim_spec.lua:%d+: clip_grad_value_: unknown option 'bogus'", err)
    end
  end)

  it("clip_grad_value_ clamps every gradient", function()
    local ps = params({3.0, -4.0, 0.5}, {-12.0})
    nn.utils.clip_grad_value_(ps, 1.0)
    assert.are.same({1.0, -1.0, 0.5}, ps[1].grad:tolist())
    assert.are.same({-1.0}, ps[2].grad:tolist())
  end)

  it("parameters_to_vector / vector_to_parameters", function()
    local a, b = accel.tensor({{1.0, 2.0}}, {requires_grad = true}), accel.tensor({3.0}, {requires_grad = true})
    assert.are.same({1.0, 2.0, 3.0}, nn.utils.parameters_to_vector({a, b}):tolist())
    nn.utils.vector_to_parameters(accel.tensor({4.0, 5.0, 6.0}), {a, b})
    assert.are.same({{4.0, 5.0}}, a:tolist())
    assert.are.same({6.0}, b:tolist())
    assert.has_error(function() nn.utils.vector_to_parameters(accel.tensor({1.0}), {a, b}) end)
  end)

  it("rejects bad arguments", function()
    assert.has_error(function() nn.utils.clip_grad_norm_({1}, 1.0) end)
    assert.has_error(function() nn.utils.clip_grad_norm_({weight = params({1.0})[1]}, 1.0) end)
    assert.has_error(function() nn.utils.clip_grad_norm_(params({1.0}), "1") end)
    assert.has_error(function() nn.utils.clip_grad_norm_(params({1.0}), 1.0, {norm_type = 0 / 0}) end)
  end)
end)

-- Expected values and messages: PyTorch 2.15 (and Accelerate 1.15) on the same inputs.
describe("optimizers and clipping on PyTorch 2.15's edge cases", function()
  local F32, F64 = {dtype = accel.float32}, {dtype = accel.float64}
  local function fails(pattern, f, ...)
    local ok, err = pcall(f, ...)
    assert.is_false(ok, "expected an error matching " .. pattern)
    assert.matches("optim_spec.lua:%d+: " .. pattern, err)
  end
  local function leaves(n)
    local out = {}
    for i = 1, n do out[i] = accel.zeros(2, {requires_grad = true}) end
    return table.unpack(out)
  end

  -- torch: TypeError "optimizer can only optimize Tensors, but one of the params is NoneType"
  -- (clip_grad_value_: AttributeError 'NoneType' object has no attribute 'grad'); a Lua list
  -- with a nil inside would otherwise lose every item after it
  it("a nil inside a params / group / parameters list is an error naming its position", function()
    local a, b, c = leaves(3)
    local missing
    fails("SGD: params%[2%] is nil", optim.SGD, {a, missing, b}, 0.1)
    fails("Adam: params%[2%] is nil", optim.Adam, {{params = {a}}, missing, {params = {b}, lr = 0.5}}, 0.1)
    fails("SGD: params%[2%] is nil", optim.SGD, {{params = {a, missing, b}}}, 0.1)
    local opt = optim.Adam({a}, 0.1)
    fails("Adam: params%[1%] is nil", opt.add_param_group, opt, {params = {missing, c}})
    assert.are.equal(1, #opt.param_groups)
    a.grad, b.grad = accel.full({2}, 5.0, F32), accel.full({2}, 5.0, F32)
    fails("clip_grad_value_: parameters%[2%] is nil", nn.utils.clip_grad_value_, {a, missing, b}, 1.0)
    fails("clip_grad_norm_: parameters%[2%] is nil", nn.utils.clip_grad_norm_, {a, missing, b}, 1.0)
    fails("parameters_to_vector: parameters%[2%] is nil", nn.utils.parameters_to_vector, {a, missing, b})
    local acc = accel.Accelerator({cpu = true})
    fails("clip_grad_value_: parameters%[2%] is nil", acc.clip_grad_value_, acc, {a, missing, b}, 0.5)
    assert.are.same({5.0, 5.0}, a.grad:tolist()) -- nothing was clipped
    assert.are.same({5.0, 5.0}, b.grad:tolist())
  end)

  it("a parameter with no elements steps like any other (contiguous, as torch)", function()
    local e = accel.zeros(2, 0, {requires_grad = true})
    for _, c in ipairs({{"SGD", {momentum = 0.9}, {"momentum_buffer"}},
                        {"Adam", {amsgrad = true}, {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"}}}) do
      local opt = optim[c[1]]({e}, 0.1, c[2])
      for _ = 1, 2 do
        e.grad = accel.zeros(2, 0)
        opt:step()
      end
      local keys = {}
      for k in pairs(opt.state[e]) do keys[#keys + 1] = k end
      table.sort(keys)
      table.sort(c[3])
      assert.are.same(c[3], keys)
    end
    -- nn.Linear(4, 0) trains: grads of shape [0, 4] and [0]
    local l = nn.Linear(4, 0)
    local opt = optim.SGD(l:parameters(), 0.1, {momentum = 0.9})
    for _ = 1, 2 do
      l(accel.ones(3, 4)):sum():backward()
      assert.are.same({0, 4}, {table.unpack(l.weight.grad.shape)})
      assert.are.same({0}, {table.unpack(l.bias.grad.shape)})
      opt:step()
      opt:zero_grad()
    end
  end)

  -- torch: RuntimeError "unsupported operation: more than one element of the written-to tensor
  -- refers to a single memory location. Please clone() the tensor before performing the operation."
  it("an expanded (self-overlapping) parameter is refused by the step, nothing written", function()
    for _, cls in ipairs({"SGD", "Adam"}) do
      local base = accel.zeros(1)
      local w = base:expand(3):detach():requires_grad_()
      local opt = optim[cls]({w}, 1.0)
      w.grad = accel.tensor({1.0, 2.0, 3.0}, F32)
      fails(cls .. ": parameter 1: unsupported operation: more than one element of the written%-to tensor .* refers "
        .. "to a single memory location", opt.step, opt)
      assert.are.same({0.0}, base:tolist())
    end
  end)

  it("clip_grad_norm_ of float32 and float64 gradients returns the float64 total, in either order", function()
    for _, order in ipairs({{1, 2}, {2, 1}}) do
      local a, b = accel.zeros(3, {requires_grad = true}), accel.zeros(2, {requires_grad = true, dtype = accel.float64})
      a.grad, b.grad = accel.tensor({3.0, -4.0, 1.0}, F32), accel.tensor({0.5, -2.0}, F64)
      local ps = {a, b}
      local total = nn.utils.clip_grad_norm_({ps[order[1]], ps[order[2]]}, 1.0)
      assert.are.equal(accel.float64, total.dtype)
      -- each gradient's norm in its own dtype, then the norm of the norms in float64
      assert.are.equal(5.500000012833322, total:item())
      assert.are.same({0.5454544425010681, -0.7272725701332092, 0.1818181425333023}, a.grad:tolist())
      assert.are.same({0.09090907416804735, -0.3636362966721894}, b.grad:tolist())
    end
    local a, b = accel.zeros(3, {requires_grad = true}), accel.zeros(2, {requires_grad = true})
    a.grad, b.grad = accel.tensor({3.0, -4.0, 1.0}, F32), accel.tensor({0.5, -2.0}, F32)
    assert.are.equal(4.643522262573242, nn.utils.clip_grad_norm_({a, b}, 1.0, 3):item())
  end)

  it("clip_grad_norm_ takes a negative norm_type as PyTorch 2.15 (-inf: the smallest |element|)", function()
    -- torch 2.15: grads {0.3, -1.2}, {2.5}, max_norm 1: -inf gives 0.30000001192092896, -1 gives
    -- 0.21897810697555542, both float32, the gradients left alone (the total is below max_norm)
    local function case()
      local a, b = accel.zeros(2, {requires_grad = true}), accel.zeros(1, {requires_grad = true})
      a.grad, b.grad = accel.tensor({0.3, -1.2}, F32), accel.tensor({2.5}, F32)
      return {a, b}
    end
    local acc = accel.Accelerator({cpu = true})
    for _, nt in ipairs({-math.huge, "-inf", {norm_type = -math.huge}}) do
      local ps = case()
      assert.are.equal(0.30000001192092896, nn.utils.clip_grad_norm_(ps, 1.0, nt):item())
      assert.are.same({{0.30000001192092896, -1.2000000476837158}, {2.5}}, {ps[1].grad:tolist(), ps[2].grad:tolist()})
      assert.are.equal(0.30000001192092896, acc:clip_grad_norm_(case(), 1.0, nt):item())
    end
    assert.is_true(math.abs(nn.utils.clip_grad_norm_(case(), 1.0, -1):item() - 0.21897810697555542) < 1e-7)
    -- torch 2.15 with a float64 gradient and clipping (max_norm 0.5): -inf gives 3.0 (float64),
    -- -2 gives 2.1636554078002685; the gradients after each
    local want = {
      [-math.huge] = {3.0, {0.4999998211860657, -0.6666664481163025}, {0.8333330555556482}},
      [-2] = {2.1636554078002685, {0.6932708621025085, -0.9243611693382263}, {1.1554514806450635}}}
    for nt, w in pairs(want) do
      local a, b = accel.zeros(2, {requires_grad = true}), accel.zeros(1, {requires_grad = true, dtype = accel.float64})
      a.grad, b.grad = accel.tensor({3.0, -4.0}, F32), accel.tensor({5.0}, F64)
      local total = nn.utils.clip_grad_norm_({a, b}, 0.5, nt)
      assert.are.equal(accel.float64, total.dtype)
      assert.is_true(math.abs(total:item() - w[1]) < 1e-6 * w[1], tostring(nt))
      support.assert_values(w[2], a.grad, 1e-6, "a.grad")
      support.assert_values(w[3], b.grad, 1e-6, "b.grad")
    end
    -- a zero element makes the norm 0 (torch 2.15: 0.0); an empty gradient has no such norm (torch:
    -- "linalg.vector_norm cannot compute the -1 norm on an empty tensor")
    local z = accel.zeros(2, {requires_grad = true})
    z.grad = accel.tensor({0.0, 2.0}, F32)
    assert.are.equal(0.0, nn.utils.clip_grad_norm_({z}, 1.0, -1):item())
    local e = accel.zeros(0, {requires_grad = true})
    e.grad = accel.zeros(0)
    fails("clip_grad_norm_: cannot compute the %-1 norm of an empty tensor", nn.utils.clip_grad_norm_, {z, e}, 1.0, -1)
    fails("clip_grad_norm_: cannot compute the %-inf norm of an empty tensor", nn.utils.clip_grad_norm_, {e}, 1.0,
      "-inf")
    fails("clip_grad_norm_: norm_type must be a number", nn.utils.clip_grad_norm_, {z}, 1.0, 0 / 0)
  end)

  -- torch: TypeError "'int' object is not callable"
  it("step(closure) refuses a closure that cannot be called; a callable table is fine", function()
    local w = accel.ones(1, {requires_grad = true})
    local opt = optim.SGD({w}, 0.1)
    fails("SGD%.step: closure must be a function %(or a callable table%), got number", opt.step, opt, 5)
    assert.are.equal(7, opt:step(setmetatable({}, {__call = function() return 7 end})))
  end)

  it("takes model:named_parameters() or {name, tensor} pairs and keeps param_names", function()
    local m = nn.Linear(2, 2)
    local opt = optim.AdamW(m:named_parameters(), 0.1)
    assert.are.same({"weight", "bias"}, opt.param_groups[1].param_names)
    assert.are.equal(m.weight, opt.param_groups[1].params[1])
    assert.are.same({"weight", "bias"}, opt:state_dict().param_groups[1].param_names)
    opt:add_param_group({params = {{"extra", accel.zeros(1, {requires_grad = true})}}})
    assert.are.same({"extra"}, opt.param_groups[2].param_names)
    fails("AdamW: all optimizer param groups should be with/without names%. cannot add param group without names "
      .. "to the optimizer", opt.add_param_group, opt, {params = {accel.zeros(1, {requires_grad = true})}})
    fails("AdamW: all optimizer params should be with/without names%. Some param names are missing", optim.AdamW,
      {{params = {{"w", accel.zeros(1, {requires_grad = true})}, accel.zeros(1, {requires_grad = true})}}}, 0.1)
    local g = optim.SGD({{params = {{"weight", m.weight}}, lr = 0.5}}, 0.1)
    assert.are.same({"weight"}, g.param_groups[1].param_names)
    m.weight.grad = accel.ones(2, 2)
    g:step()
  end)

  it("a prepared optimizer is an optimizer and prints as Accelerate's AcceleratedOptimizer", function()
    local acc = accel.Accelerator({cpu = true})
    local m = nn.Linear(2, 2)
    local _, opt = acc:prepare(m, optim.SGD(m:parameters(), 0.1))
    assert.is_true(optim.is_optimizer(opt))
    local s = tostring(opt)
    assert.matches("^AcceleratedOptimizer %(\nParameter Group 1\n", s)
    assert.matches("    lr: 0.1\n", s, 1, true)
  end)

  it("under a ZeRO stage 1 engine zero_grad({set_to_none = false}) zeroes .grad (one process)", function()
    local ok, shard = pcall(require, "accel.shard")
    if not ok then return pending("accel.shard (the sharding engine) is not in this build") end
    local m = nn.Linear(4, 2)
    local opt = optim.SGD(m:parameters(), 0.1)
    local eng = shard.Engine(m, opt, {stage = 1})
    m(accel.ones(2, 4)):sum():backward()
    opt:step()
    opt:zero_grad({set_to_none = false})
    assert.are.same({{0.0, 0.0, 0.0, 0.0}, {0.0, 0.0, 0.0, 0.0}}, m.weight.grad:tolist())
    m(accel.ones(2, 4)):sum():backward() -- accumulates into the zeros: 2 per element, as a fresh backward
    assert.are.same({2.0, 2.0}, m.bias.grad:tolist())
    opt:zero_grad(false)
    assert.are.same({0.0, 0.0}, m.bias.grad:tolist())
    opt:zero_grad()
    assert.is_nil(m.bias.grad)
    eng:close()
  end)
end)

describe("optimizer step hooks", function()
  it("run around every step, in order, until removed; a pre hook may replace step's arguments", function()
    local p = accel.nn.Parameter(accel.ones(2))
    local opt = optim.SGD({p}, {lr = 0.1})
    local log = {}
    local pre = opt:register_step_pre_hook(function(o, args)
      log[#log + 1] = ("pre %s %d"):format(tostring(o == opt), args.n)
    end)
    local post = opt:register_step_post_hook(function() log[#log + 1] = ("post %.2f"):format(p[1]:item()) end)
    p.grad = accel.ones(2)
    opt:step()
    pre:remove()
    opt:step()
    post:remove()
    opt:step()
    assert.are.same({"pre true 0", "post 0.90", "post 0.80"}, log)
    local opt2 = optim.SGD({p}, {lr = 0.1})
    opt2:register_step_pre_hook(function() return {function() return accel.tensor(5.0) end} end) -- a closure
    assert.are.equal(5, opt2:step():item())
    assert.has_error(function() opt2:register_step_post_hook(3) end)
  end)

  it("run when a prepared optimizer steps, also under FSDP's sharded step", function()
    for _, acc in ipairs({accel.Accelerator(), accel.Accelerator({fsdp_plugin = accel.FullyShardedDataParallelPlugin({})})}) do
      local m = accel.nn.Linear(2, 1)
      local opt = optim.SGD(m:parameters(), {lr = 0.1})
      local n = 0
      opt:register_step_post_hook(function() n = n + 1 end)
      m, opt = acc:prepare(m, opt)
      acc:backward(m(accel.ones(3, 2)):sum())
      opt:step()
      assert.are.equal(1, n)
    end
  end)
end)
