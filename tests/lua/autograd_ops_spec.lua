-- Gradients of every differentiable op against central finite differences
-- in float64 (DESIGN invariant 1). The reference side (tests/lua/gradcheck.lua)
-- only evaluates forwards under no_grad; closed forms are used where finite
-- differences cannot apply (dropout's random mask, float32 round trips).
local accel = require("accel")
local gc = dofile("tests/lua/gradcheck.lua")
local support = dofile("tests/lua/support.lua")
local F = accel.nn.functional

local f64 = accel.float64
local check, max_abs_diff = gc.check, support.max_abs_diff

local randn, uniform = gc.randn, gc.uniform

-- a float64 leaf from a Lua table
local function leaf(data) return gc.leaf(accel.tensor(data, {dtype = f64})) end

describe("gradcheck helper", function()
  before_each(function() accel.set_seed(1) end)

  it("accepts a correct gradient", function()
    check(function(a) return a * a end, {randn(3)})
  end)

  it("rejects a wrong gradient (a custom op that lies)", function()
    local Lie = accel.autograd.Function{
      forward = function(ctx, x) return x * x end,
      backward = function(ctx, g) return g * 3 end,
    }
    local ok, msg = gc.gradcheck(function(a) return Lie(a) end, {randn(3)})
    assert.is_false(ok)
    assert.matches("gradcheck failed", msg)
  end)

  it("restores the inputs exactly", function()
    local x = randn(2, 3)
    local before = x:clone()
    check(function(a) return a:exp() end, {x})
    assert.is_true(x:equal(before))
  end)
end)

describe("elementwise binary ops", function()
  before_each(function() accel.set_seed(2) end)

  it("add / sub / mul / div", function()
    check(function(a, b) return a + b end, {randn(2, 3), randn(2, 3)})
    check(function(a, b) return a - b end, {randn(2, 3), randn(2, 3)})
    check(function(a, b) return a * b end, {randn(2, 3), randn(2, 3)})
    check(function(a, b) return a / b end, {randn(2, 3), uniform(0.5, 2, 2, 3)})
    check(function(a, b) return b / a end, {uniform(-2, -0.5, 2, 3), randn(2, 3)})
  end)

  it("method forms with alpha", function()
    check(function(a, b) return a:add(b, {alpha = 2.5}) end, {randn(4), randn(4)})
    check(function(a, b) return a:sub(b, {alpha = -3}) end, {randn(4), randn(4)})
    check(function(a, b) return a:mul(b):div(b:exp()) end, {randn(4), randn(4)})
  end)

  it("pow: tensor ^ scalar", function()
    check(function(a) return a ^ 2 end, {randn(5)})
    check(function(a) return a ^ 3 end, {randn(5)})
    check(function(a) return a ^ 0.5 end, {uniform(0.5, 2, 5)})
    check(function(a) return a ^ -1.5 end, {uniform(0.5, 2, 5)})
    check(function(a) return a:pow(2.7) end, {uniform(0.5, 2, 5)})
    check(function(a) return a ^ 0 end, {randn(5)})
  end)

  it("pow: scalar ^ tensor", function()
    check(function(a) return 2 ^ a end, {randn(5)})
    check(function(a) return 0.5 ^ a end, {randn(5)})
    check(function(a) return 2.5 ^ (a * a) end, {randn(2, 3)})
  end)

  it("pow: tensor ^ tensor with a positive base", function()
    check(function(a, b) return a ^ b end, {uniform(0.5, 2, 2, 3), randn(2, 3)})
    check(function(a, b) return a:pow(b) end, {uniform(0.5, 2, 2, 3), randn(3)})
  end)

  it("neg", function()
    check(function(a) return -a end, {randn(2, 3)})
    check(function(a) return a:neg() end, {randn(2, 3)})
  end)

  it("maximum / minimum", function()
    check(function(a, b) return a:maximum(b) end, {randn(3, 4), randn(3, 4)})
    check(function(a, b) return a:minimum(b) end, {randn(3, 4), randn(3, 4)})
    check(function(a, b) return a:maximum(b) end, {randn(3, 4), randn(4)})
    check(function(a, b) return a:max(b) end, {randn(3, 4), randn(3, 4)})
    check(function(a, b) return a:min(b) end, {randn(3, 4), randn(3, 4)})
  end)

  it("maximum with ties splits the gradient (as PyTorch)", function()
    local a, b = leaf({1, 2, 3}), leaf({1, 5, 0})
    a:maximum(b):sum():backward()
    assert.same({0.5, 0, 1}, a.grad:tolist())
    assert.same({0.5, 1, 0}, b.grad:tolist())
  end)
end)

describe("broadcasting gradients", function()
  before_each(function() accel.set_seed(3) end)

  it("(3,1) * (1,4)", function()
    check(function(a, b) return a * b end, {randn(3, 1), randn(1, 4)})
  end)

  it("(2,3) + (3)", function()
    check(function(a, b) return a + b end, {randn(2, 3), randn(3)})
  end)

  it("(2,1,4) / (3,1) and (4) - (2,3,4)", function()
    check(function(a, b) return a / b end, {randn(2, 1, 4), uniform(1, 2, 3, 1)})
    check(function(a, b) return a - b end, {randn(4), randn(2, 3, 4)})
  end)

  it("0-dim with n-dim", function()
    check(function(a, b) return a * b end, {randn(2, 3), gc.leaf(accel.randn({}))})
  end)

  it("scalar operands on either side", function()
    check(function(a) return a + 2 end, {randn(3)})
    check(function(a) return 2 + a end, {randn(3)})
    check(function(a) return a - 1.5 end, {randn(3)})
    check(function(a) return 1.5 - a end, {randn(3)})
    check(function(a) return a * 3 end, {randn(3)})
    check(function(a) return 3 * a end, {randn(3)})
    check(function(a) return a / 4 end, {randn(3)})
    check(function(a) return 4 / a end, {uniform(0.5, 2, 3)})
  end)

  -- torch 2.15: a = zeros(0, 3, 3, 3), b = ones(1, 3, 1, 3, requires_grad=True); y = a / b, a * b,
  -- a.addcmul(b, b), a.lerp(b, 0.3) or a.remainder(b); y.backward(zeros(0, 3, 3, 3)): b.grad = zeros(1, 3, 1, 3)
  it("an empty result gives a broadcast operand a zero gradient", function()
    local ops = {
      function(a, b) return a / b end, function(a, b) return a * b end, function(a, b) return a:addcmul(b, b) end,
      function(a, b) return a:lerp(b, 0.3) end, function(a, b) return a:remainder(b) end,
    }
    local f32 = {dtype = accel.float32}
    for i, op in ipairs(ops) do
      local b = accel.ones({1, 3, 1, 3}, {dtype = accel.float32, requires_grad = true})
      local y = op(accel.zeros({0, 3, 3, 3}, f32), b)
      support.dirty_cache()
      y:backward(accel.zeros({0, 3, 3, 3}, f32))
      assert.same({1, 3, 1, 3}, support.shape_of(b.grad), i)
      assert.same({0, 0, 0, 0, 0, 0, 0, 0, 0}, support.flatten(b.grad:tolist()), i)
    end
  end)

  it("broadcast grads are reduced to the input's shape", function()
    local a, b = randn(3, 1), randn(1, 4)
    ;(a * b):sum():backward()
    assert.same({3, 1}, {a.grad:size(1), a.grad:size(2)})
    assert.same({1, 4}, {b.grad:size(1), b.grad:size(2)})
  end)
end)

describe("unary math", function()
  before_each(function() accel.set_seed(4) end)

  local cases = {
    {"exp", function(a) return a:exp() end, function() return randn(2, 3) end},
    {"log", function(a) return a:log() end, function() return uniform(0.5, 3, 2, 3) end},
    {"sqrt", function(a) return a:sqrt() end, function() return uniform(0.5, 3, 2, 3) end},
    {"rsqrt", function(a) return a:rsqrt() end, function() return uniform(0.5, 3, 2, 3) end},
    {"tanh", function(a) return a:tanh() end, function() return randn(2, 3) end},
    {"sigmoid", function(a) return a:sigmoid() end, function() return randn(2, 3) end},
    {"relu", function(a) return a:relu() end, function() return randn(2, 3) end},
    {"gelu (exact)", function(a) return a:gelu() end, function() return randn(2, 3) end},
    {"gelu (exact, F)", function(a) return F.gelu(a) end, function() return randn(2, 3) end},
    {"gelu (tanh)", function(a) return F.gelu(a, {approximate = "tanh"}) end, function() return randn(2, 3) end},
    {"silu", function(a) return a:silu() end, function() return randn(2, 3) end},
    {"abs", function(a) return a:abs() end, function() return randn(2, 3) end},
    {"clamp(min, max)", function(a) return a:clamp(-0.5, 0.5) end, function() return randn(3, 4) end},
    {"clamp{min}", function(a) return a:clamp({min = 0.1}) end, function() return randn(3, 4) end},
    {"clamp{max}", function(a) return a:clamp({max = -0.1}) end, function() return randn(3, 4) end},
    {"sin", function(a) return a:sin() end, function() return randn(2, 3) end},
    {"cos", function(a) return a:cos() end, function() return randn(2, 3) end},
    {"square", function(a) return a:square() end, function() return randn(2, 3) end},
    {"reciprocal", function(a) return a:reciprocal() end, function() return uniform(0.5, 2, 2, 3) end},
    {"log1p", function(a) return a:log1p() end, function() return uniform(-0.5, 2, 2, 3) end},
    {"expm1", function(a) return a:expm1() end, function() return randn(2, 3) end},
    {"erf", function(a) return a:erf() end, function() return randn(2, 3) end},
    {"tan", function(a) return a:tan() end, function() return uniform(-1.2, 1.2, 2, 3) end},
    {"asin", function(a) return a:asin() end, function() return uniform(-0.9, 0.9, 2, 3) end},
    {"acos", function(a) return a:acos() end, function() return uniform(-0.9, 0.9, 2, 3) end},
    {"atan", function(a) return a:atan() end, function() return randn(2, 3) end},
    {"sinh", function(a) return a:sinh() end, function() return randn(2, 3) end},
    {"cosh", function(a) return a:cosh() end, function() return randn(2, 3) end},
    {"asinh", function(a) return a:asinh() end, function() return randn(2, 3) end},
    {"acosh", function(a) return a:acosh() end, function() return uniform(1.1, 3, 2, 3) end},
    {"atanh", function(a) return a:atanh() end, function() return uniform(-0.9, 0.9, 2, 3) end},
    {"log2", function(a) return a:log2() end, function() return uniform(0.5, 3, 2, 3) end},
    {"log10", function(a) return a:log10() end, function() return uniform(0.5, 3, 2, 3) end},
    {"leaky_relu (default slope)", function(a) return a:leaky_relu() end, function() return randn(3, 4) end},
    {"leaky_relu(0.2)", function(a) return a:leaky_relu(0.2) end, function() return randn(3, 4) end},
    {"F.leaky_relu{negative_slope}", function(a) return F.leaky_relu(a, {negative_slope = 0.3}) end,
      function() return randn(3, 4) end},
    {"F.relu / F.silu / F.sigmoid / F.tanh", function(a) return F.relu(a) + F.silu(a) * F.sigmoid(a) - F.tanh(a) end,
      function() return randn(3, 4) end},
  }
  for _, c in ipairs(cases) do
    it(c[1], function() check(c[2], {c[3]()}) end)
  end

  it("on non-contiguous inputs", function()
    check(function(a) return a:t():exp() end, {randn(3, 4)})
    check(function(a) return a:transpose(1, 2):tanh() * a:t() end, {randn(3, 4)})
  end)

  -- torch 2.15, x = [0., 1, -2, 0] (float64), y.backward(full(y.shape, up)): abs, F.l1_loss / smooth_l1_loss /
  -- huber_loss(x, zeros, reduction='none'), x.norm(1), x.norm(inf) give x.grad [nan, nan, nan, nan] for up = nan;
  -- for up = inf: [nan, inf, -inf, nan] (norm(inf): [nan, nan, -inf, nan]); x = [0., 2]: (1 / x.abs()).sum() grad
  -- [nan, -0.25], x.abs().sqrt().sum() [nan, 0.35355339059327373]; relu / clamp(-1, 1) / hardtanh of
  -- [0., 1, -1, 2] with up = nan: [0, nan, 0, nan], [nan, 0, 0, 0], [nan, 0, 0, 0]
  it("abs and kinked losses / norms pass an inf or NaN gradient on at the kink as NaN (grad * sgn(x))", function()
    local nan, inf = 0 / 0, math.huge
    local zeros = accel.zeros(4, {dtype = f64})
    local fs = {
      abs = function(x) return x:abs() end,
      l1_loss = function(x) return F.l1_loss(x, zeros, {reduction = "none"}) end,
      smooth_l1_loss = function(x) return F.smooth_l1_loss(x, zeros, {reduction = "none"}) end,
      huber_loss = function(x) return F.huber_loss(x, zeros, {reduction = "none"}) end,
      norm1 = function(x) return x:norm(1) end,
      norm_inf = function(x) return x:norm(inf) end,
    }
    local function grad_of(list, f, up)
      local x = leaf(list)
      local y = f(x)
      y:backward(up and accel.full(y.shape, up, {dtype = f64}) or nil)
      return x.grad:tolist()
    end
    local function same(want, got, what) -- NaN-aware
      for i = 1, #want do
        local w, g = want[i], got[i]
        assert.is_true(w == g or (w ~= w and g ~= g), ("%s [%d]: %s, want %s"):format(what, i, g, w))
      end
    end
    for name, f in pairs(fs) do
      same({nan, nan, nan, nan}, grad_of({0, 1, -2, 0}, f, nan), name .. " nan")
      same(name == "norm_inf" and {nan, nan, -inf, nan} or {nan, inf, -inf, nan}, grad_of({0, 1, -2, 0}, f, inf),
        name .. " inf")
    end
    same({nan, -0.25}, grad_of({0, 2}, function(x) return (1 / x:abs()):sum() end), "1 / abs")
    same({nan, 0.35355339059327373}, grad_of({0, 2}, function(x) return x:abs():sqrt():sum() end), "sqrt(abs)")
    same({0, nan, 0, nan}, grad_of({0, 1, -1, 2}, function(x) return x:relu() end, nan), "relu")
    same({nan, 0, 0, 0}, grad_of({0, 1, -1, 2}, function(x) return x:clamp(-1, 1) end, nan), "clamp")
    same({nan, 0, 0, 0}, grad_of({0, 1, -1, 2}, function(x) return F.hardtanh(x) end, nan), "hardtanh")
  end)
end)

describe("reductions", function()
  before_each(function() accel.set_seed(5) end)

  it("sum: all, one dim, dims, keepdim, negative dim", function()
    check(function(a) return a:sum() end, {randn(2, 3, 4)})
    check(function(a) return a:sum(2) end, {randn(2, 3, 4)})
    check(function(a) return a:sum({1, 3}) end, {randn(2, 3, 4)})
    check(function(a) return a:sum(2, {keepdim = true}) end, {randn(2, 3, 4)})
    check(function(a) return a:sum(-1, true) end, {randn(2, 3, 4)})
  end)

  it("mean", function()
    check(function(a) return a:mean() end, {randn(2, 3, 4)})
    check(function(a) return a:mean(3) end, {randn(2, 3, 4)})
    check(function(a) return a:mean({1, 2}, {keepdim = true}) end, {randn(2, 3, 4)})
  end)

  it("prod", function()
    check(function(a) return a:prod() end, {randn(2, 3)})
    check(function(a) return a:prod(2) end, {randn(3, 4)})
    check(function(a) return a:prod(1, {keepdim = true}) end, {randn(3, 4)})
  end)

  it("prod with zeros in the input", function()
    -- one zero in a row: its grad is the product of the others; two zeros: all zero
    check(function(a) return a:prod(2) end, {leaf({{1.5, 0, -2, 0.5}, {0, 0, 3, 1}, {1, 2, 3, 4}})})
    check(function(a) return a:prod() end, {leaf({{1.5, 0.7}, {0, -2}})})
  end)

  it("amax / amin", function()
    check(function(a) return a:amax() end, {randn(3, 4)})
    check(function(a) return a:amax(2) end, {randn(3, 4)})
    check(function(a) return a:amin({1, 3}, {keepdim = true}) end, {randn(2, 3, 4)})
    check(function(a) return a:amin(1) end, {randn(3, 4)})
  end)

  it("amax with ties splits evenly", function()
    local a = leaf({{1, 3, 3}, {2, 0, 1}})
    a:amax(2):sum():backward()
    assert.same({{0, 0.5, 0.5}, {1, 0, 0}}, a.grad:tolist())
  end)

  -- PyTorch 2.15: s = a * 1; s.clamp_(m, mx) with tensor bounds, then s.sum().backward()
  it("in-place clamp_ with tensor bounds on a tensor in the graph: torch's gradients", function()
    local a = leaf({{1, -2, 3}, {0.5, 4, -1}})
    local m, mx = leaf({0, 0, 2}), leaf({2, 2, 2.5})
    local s = a * 1
    s:clamp_(m, mx)
    s:sum():backward()
    assert.same({{1, 0, 0}, {1, 0, 0}}, a.grad:tolist())
    assert.same({0, 1, 1}, m.grad:tolist())
    assert.same({0, 1, 1}, mx.grad:tolist())
    assert.same({{1, 0, 2.5}, {0.5, 2, 2}}, s:tolist())
  end)

  -- PyTorch 2.15, for x, lo, hi each in (0, 1, 2, nan) in that nested order:
  --   x, lo, hi = (torch.tensor([v], requires_grad=True) for v in (xv, lv, hv))
  --   torch.clamp(x, lo, hi).sum().backward(); [x.grad, lo.grad, hi.grad]
  -- (ClampBackward0: ties with one bound split the gradient, lo > hi gives it to hi)
  it("clamp with two tensor bounds: torch's gradients for every order of x, lo, hi with ties and NaN", function()
    local want = {
      {1,0,0}, {0.5,0.5,0}, {0.5,0.5,0}, {1,0,0}, {0,0,1}, {0,1,0}, {0,1,0}, {0,0,0},
      {0,0,1}, {0,0,1}, {0,1,0}, {0,0,0}, {1,0,0}, {1,0,0}, {1,0,0}, {1,0,0},
      {0,0,1}, {0.5,0,0.5}, {1,0,0}, {1,0,0}, {0,0,1}, {1,0,0}, {0.5,0.5,0}, {1,0,0},
      {0,0,1}, {0,0,1}, {0,1,0}, {0,0,0}, {0,0,0}, {1,0,0}, {1,0,0}, {1,0,0},
      {0,0,1}, {0,0,1}, {0.5,0,0.5}, {1,0,0}, {0,0,1}, {0,0,1}, {0.5,0,0.5}, {1,0,0},
      {0,0,1}, {0,0,1}, {1,0,0}, {1,0,0}, {0,0,0}, {0,0,0}, {1,0,0}, {1,0,0},
      {1,0,0}, {1,0,0}, {1,0,0}, {1,0,0}, {1,0,1}, {1,0,0}, {1,0,0}, {1,0,0},
      {1,0,1}, {1,0,1}, {1,0,0}, {1,0,0}, {1,0,0}, {1,0,0}, {1,0,0}, {1,0,0},
    }
    local vals, k = {0, 1, 2, 0 / 0}, 0
    for _, xv in ipairs(vals) do
      for _, lv in ipairs(vals) do
        for _, hv in ipairs(vals) do
          k = k + 1
          local x, lo, hi = leaf({xv}), leaf({lv}), leaf({hv})
          accel.clamp(x, lo, hi):sum():backward()
          local got = {x.grad:item(), lo.grad:item(), hi.grad:item()}
          assert.same(want[k], got, ("x=%s lo=%s hi=%s"):format(xv, lv, hv))
        end
      end
    end
    -- broadcast bounds: the gradients summed to their shapes (torch: lo.grad [1, 9, 10.5, 0, 0, 6], hi.grad [[7], [28]])
    local x = leaf({{-2, 0, 1, 2, 3, 0 / 0}, {5, -1, 0.5, 2, 1, 0}})
    local lo, hi = leaf({0, 0, 1, 1, 4, 0}), leaf({{2}, {1}})
    local y = x:clamp(lo, hi) * accel.arange(1, 13, {dtype = f64}):view(2, 6)
    y:sum():backward()
    assert.same({{0, 1, 1.5, 2, 0, 6}, {0, 0, 0, 0, 0, 6}}, x.grad:tolist())
    assert.same({1, 9, 10.5, 0, 0, 6}, lo.grad:tolist())
    assert.same({{7}, {28}}, hi.grad:tolist())
  end)

  -- PyTorch 2.15: x.max() of [1, nan, 3, nan] gives the gradient [0, .5, 0, .5]
  -- (evenly_distribute_backward), x.amax() gives NaN everywhere
  it("full max() / min() of a NaN result split the gradient among the NaN positions; amax stays NaN", function()
    local nan = 0 / 0
    local a = leaf({1, nan, 3, nan})
    a:max():backward()
    assert.same({0, 0.5, 0, 0.5}, a.grad:tolist())
    local b = leaf({nan, 2})
    b:min():backward()
    assert.same({1, 0}, b.grad:tolist())
    local c = leaf({1, nan})
    c:amax():backward()
    local g = c.grad:tolist()
    assert.is_true(g[1] ~= g[1] and g[2] ~= g[2])
    local d = leaf({1, 3, 3, 2})
    d:max():backward()
    assert.same({0, 0.5, 0.5, 0}, d.grad:tolist())
  end)

  it("full max() / min() give 0 off the extremes even for an inf or NaN incoming gradient; amax gives NaN", function()
    local nan, inf = 0 / 0, math.huge
    local function grad_of(list, f, up)
      local x = leaf(list)
      f(x):backward(accel.tensor(up, {dtype = f64}))
      return x.grad:tolist()
    end
    local function isnan(v) return v ~= v end
    -- torch 2.15: x = [-1., 0, -3]; x.max().log() grad [0, inf, 0] (x.amax().log(): [nan, inf, nan]);
    -- x.min().backward(nan) [0, 0, nan]; [2., 5, 5].max().backward(inf) [0, inf, inf], backward(2.) [0, 1, 1];
    -- [1., nan, nan].max().backward(-inf) [0, -inf, -inf]
    assert.same({0, inf, 0}, grad_of({-1, 0, -3}, function(x) return x:max():log() end, 1))
    local g = grad_of({-1, 0, -3}, function(x) return x:min() end, nan)
    assert.is_true(g[1] == 0 and g[2] == 0 and isnan(g[3]))
    assert.same({0, inf, inf}, grad_of({2, 5, 5}, function(x) return x:max() end, inf))
    assert.same({0, 1, 1}, grad_of({2, 5, 5}, function(x) return x:max() end, 2))
    assert.same({0, -inf, -inf}, grad_of({1, nan, nan}, function(x) return x:max() end, -inf))
    g = grad_of({-1, 0, -3}, function(x) return x:amax():log() end, 1)
    assert.is_true(isnan(g[1]) and g[2] == inf and isnan(g[3]))
  end)

  it("max(dim) / min(dim) values (and keepdim)", function()
    check(function(a) local v = a:max(2) return v end, {randn(3, 4)})
    check(function(a) local v = a:max(1, true) return v end, {randn(3, 4)})
    check(function(a) local v = a:min(-1) return v end, {randn(2, 3, 4)})
    check(function(a) local v = a:min(2, {keepdim = true}) return v end, {randn(2, 3, 4)})
    check(function(a) return a:max() end, {randn(3, 4)})
    check(function(a) return a:min() end, {randn(3, 4)})
  end)

  it("var / std", function()
    check(function(a) return a:var() end, {randn(3, 4)})
    check(function(a) return a:var(2) end, {randn(3, 4)})
    check(function(a) return a:var(1, {keepdim = true, correction = 0}) end, {randn(3, 4)})
    check(function(a) return a:var({1, 3}, {unbiased = false}) end, {randn(2, 3, 4)})
    check(function(a) return a:std() end, {randn(3, 4)})
    check(function(a) return a:std(2, {keepdim = true}) end, {randn(3, 4)})
    check(function(a) return a:std(1, {correction = 0}) end, {randn(3, 4)})
  end)

  it("std where it is 0 has gradient 0 (PyTorch's std_backward), not NaN, in every form", function()
    -- expected values from PyTorch 2.15
    local y = leaf({2, 2, 2})
    y:std():backward()
    assert.same({0, 0, 0}, y.grad:tolist())
    local x = leaf({{1, 1, 1}, {1, 2, 3}})
    ;(x:std(2, {keepdim = true}) * accel.tensor({{3}, {5}}, {dtype = f64})):sum():backward()
    assert.same({{0, 0, 0}, {-2.5, 0, 2.5}}, x.grad:tolist())
    x.grad = nil
    ;(x:std(2, {correction = 0}) * accel.tensor({3, 5}, {dtype = f64})):sum():backward()
    local want = accel.tensor({{0, 0, 0}, {-2.0412414523193148, 0, 2.0412414523193148}}, {dtype = f64})
    assert.is_true(max_abs_diff(x.grad, want) < 1e-12)
    x.grad = nil
    ;(x:std(1, false) * accel.tensor({1, 2, 3}, {dtype = f64})):sum():backward()
    assert.same({{0, -1, -1.5}, {0, 1, 1.5}}, x.grad:tolist())
    -- sqrt's own gradient at 0 stays inf
    local z = leaf({0, 4})
    z:sqrt():sum():backward()
    assert.same({math.huge, 0.25}, z.grad:tolist())
  end)

  it("norm p = 1, 2, 3, inf, with dims and keepdim", function()
    check(function(a) return a:norm() end, {randn(3, 4)})
    check(function(a) return a:norm(1) end, {randn(3, 4)})
    check(function(a) return a:norm(2, 2) end, {randn(3, 4)})
    check(function(a) return a:norm(3) end, {randn(3, 4)})
    check(function(a) return a:norm(3, 1, {keepdim = true}) end, {randn(3, 4)})
    check(function(a) return a:norm(1, 2) end, {randn(3, 4)})
    check(function(a) return a:norm(math.huge) end, {randn(3, 4)})
    check(function(a) return a:norm("inf", 2) end, {randn(3, 4)})
    check(function(a) return a:norm(2, {1, 2}, {keepdim = true}) end, {randn(2, 3, 4)})
  end)

  it("norm at a zero vector has gradient 0 (PyTorch's subgradient), not NaN", function()
    for _, p in ipairs({1, 2, 3, math.huge}) do
      local x = gc.leaf(accel.zeros(3, {dtype = f64}))
      x:norm(p):backward()
      assert.same({0, 0, 0}, x.grad:tolist())
    end
    -- a zero row next to a nonzero one
    local y = leaf({{0, 0}, {3, 4}})
    y:norm(2, 2):sum():backward()
    assert.same({{0, 0}, {0.6, 0.8}}, y.grad:tolist())
  end)

  -- torch 2.15 (float64): x = [0., 1, -2]; x.norm(p).backward() grad for p = 3: [0, 0.2311204247835449,
  -- -0.9244816991341795], p = 0.5: [0, 2.414213562373095, -1.7071067811865472], p = 1.5: [0, 0.6392340078652324,
  -- -0.9040134034531215]; with a NaN incoming gradient [nan, nan, nan] for each p; zeros(3).norm(p): [0, 0, 0]
  it("norm with another p: torch's gradients, 0 at a zero vector, NaN everywhere for a NaN incoming gradient", function()
    local want = {
      [3] = {0, 0.2311204247835449, -0.9244816991341795},
      [0.5] = {0, 2.414213562373095, -1.7071067811865472},
      [1.5] = {0, 0.6392340078652324, -0.9040134034531215},
    }
    for p, w in pairs(want) do
      local x = leaf({0, 1, -2})
      x:norm(p):backward()
      local g = x.grad:tolist()
      for i = 1, 3 do assert.is_true(math.abs(g[i] - w[i]) <= 1e-15, ("p=%s [%d] %s"):format(p, i, g[i])) end
      x = leaf({0, 1, -2})
      x:norm(p):backward(accel.tensor(0 / 0, {dtype = f64}))
      g = x.grad:tolist()
      assert.is_true(g[1] ~= g[1] and g[2] ~= g[2] and g[3] ~= g[3], "p=" .. p)
      x = gc.leaf(accel.zeros(3, {dtype = f64}))
      x:norm(p):backward()
      assert.same({0, 0, 0}, x.grad:tolist())
    end
  end)

  it("norm with p = 0 counts nonzeros and has gradient 0", function()
    local x = leaf({1.5, 0, -2, 0, 3})
    local n = x:norm(0)
    assert.equal(3, n:item())
    n:backward()
    assert.same({0, 0, 0, 0, 0}, x.grad:tolist())
  end)
end)

describe("views", function()
  before_each(function() accel.set_seed(6) end)

  local cases = {
    {"view", function(a) return a:view(4, 6) end},
    {"view(-1)", function(a) return a:view(-1) end},
    {"reshape", function(a) return a:reshape(3, 8) end},
    {"reshape of a transposed view (copies)", function(a) return a:transpose(1, 3):reshape(-1) end},
    {"transpose", function(a) return a:transpose(1, 2) end},
    {"permute", function(a) return a:permute(3, 1, 2) end},
    {"permute{}", function(a) return a:permute({2, 3, 1}) end},
    {"narrow", function(a) return a:narrow(2, 2, 2) end},
    {"narrow (negative start)", function(a) return a:narrow(3, -2, 2) end},
    {"select", function(a) return a:select(2, 3) end},
    {"select (negative index)", function(a) return a:select(3, -1) end},
    {"indexing t[i]", function(a) return a[2] end},
    {"unsqueeze", function(a) return a:unsqueeze(2) end},
    {"squeeze(dim)", function(a) return a:narrow(2, 1, 1):squeeze(2) end},
    {"squeeze()", function(a) return a:narrow(1, 2, 1):squeeze() end},
    {"expand", function(a) return a:narrow(2, 1, 1):expand(2, 5, 4) end},
    {"expand with new leading dims", function(a) return a:expand(3, 2, 3, 4) end},
    {"flatten", function(a) return a:flatten() end},
    {"flatten(2, 3)", function(a) return a:flatten(2, 3) end},
    {"contiguous", function(a) return a:transpose(1, 2):contiguous() end},
    {"t", function(a) return a:select(1, 1):t() end},
    {"T", function(a) return a.T end},
    {"chained views then math", function(a) return a:permute(2, 3, 1):narrow(1, 2, 2):reshape(2, -1):exp() end},
    {"split / chunk / unbind", function(a)
      local parts = a:split(1, 2)
      local ch = a:chunk(2, 3)
      local ub = a:unbind(1)
      local s = (parts[1] * 2 + parts[3]) * ub[2]:narrow(1, 1, 1) -- (2, 1, 4)
      return accel.cat({s:reshape(-1), ch[2]:reshape(-1) * 3, ub[1]:reshape(-1)}, 1)
    end},
  }
  for _, c in ipairs(cases) do
    it(c[1], function() check(c[2], {randn(2, 3, 4)}) end)
  end

  it("t on a 1-D tensor keeps the graph", function()
    check(function(a) return a:t() * a end, {randn(4)})
  end)
end)

describe("matmul and linear", function()
  before_each(function() accel.set_seed(7) end)

  it("1-D @ 1-D", function() check(function(a, b) return a:matmul(b) end, {randn(4), randn(4)}) end)
  it("1-D @ 2-D", function() check(function(a, b) return a:matmul(b) end, {randn(4), randn(4, 3)}) end)
  it("2-D @ 1-D", function() check(function(a, b) return a:matmul(b) end, {randn(3, 4), randn(4)}) end)
  it("2-D @ 2-D", function() check(function(a, b) return accel.matmul(a, b) end, {randn(3, 4), randn(4, 5)}) end)
  it("transposed operands", function()
    check(function(a, b) return a:t():matmul(b:t()) end, {randn(4, 3), randn(5, 4)})
  end)
  it("3-D batched", function() check(function(a, b) return a:matmul(b) end, {randn(2, 3, 4), randn(2, 4, 5)}) end)
  it("3-D @ 2-D (broadcast)", function() check(function(a, b) return a:matmul(b) end, {randn(2, 3, 4), randn(4, 5)}) end)
  it("2-D @ 3-D (broadcast)", function() check(function(a, b) return a:matmul(b) end, {randn(3, 4), randn(2, 4, 5)}) end)
  it("batch broadcasting (2,1,3,4) @ (3,4,2)", function()
    check(function(a, b) return a:matmul(b) end, {randn(2, 1, 3, 4), randn(3, 4, 2)})
  end)
  it("1-D @ 3-D and 3-D @ 1-D", function()
    check(function(a, b) return a:matmul(b) end, {randn(4), randn(2, 4, 3)})
    check(function(a, b) return a:matmul(b) end, {randn(2, 3, 4), randn(4)})
  end)
  it("mm / bmm", function()
    check(function(a, b) return a:mm(b) end, {randn(3, 4), randn(4, 2)})
    check(function(a, b) return a:bmm(b) end, {randn(2, 3, 4), randn(2, 4, 2)})
  end)

  it("F.linear with bias", function()
    check(function(x, w, b) return F.linear(x, w, b) end, {randn(5, 4), randn(3, 4), randn(3)})
  end)
  it("F.linear without bias", function()
    check(function(x, w) return F.linear(x, w) end, {randn(5, 4), randn(3, 4)})
  end)
  it("F.linear on a 3-D input and a 1-D input", function()
    check(function(x, w, b) return F.linear(x, w, b) end, {randn(2, 5, 4), randn(3, 4), randn(3)})
    check(function(x, w, b) return F.linear(x, w, b) end, {randn(4), randn(3, 4), randn(3)})
  end)
  it("F.linear with only the weight requiring grad", function()
    local x = accel.randn(5, 4, {dtype = f64})
    check(function(w, b) return F.linear(x, w, b) end, {randn(3, 4), randn(3)})
  end)
end)

describe("softmax family", function()
  before_each(function() accel.set_seed(8) end)

  for _, dim in ipairs({1, 2, 3, -1}) do
    it("softmax over dim " .. dim, function()
      check(function(a) return F.softmax(a, dim) end, {randn(2, 3, 4)})
      check(function(a) return a:softmax(dim) end, {randn(2, 3, 4)})
    end)
    it("log_softmax over dim " .. dim, function()
      check(function(a) return F.log_softmax(a, dim) end, {randn(2, 3, 4)})
      check(function(a) return a:log_softmax(dim) end, {randn(2, 3, 4)})
    end)
  end

  it("softmax of a non-contiguous input", function()
    check(function(a) return F.softmax(a:t(), 1) end, {randn(3, 4)})
  end)
end)

describe("losses", function()
  before_each(function() accel.set_seed(9) end)

  local function targets(t) return accel.tensor(t, {dtype = accel.int64}) end

  it("cross_entropy mean / sum / none", function()
    local y = targets({0, 3, 1, 4, 2})
    check(function(x) return F.cross_entropy(x, y) end, {randn(5, 5)})
    check(function(x) return F.cross_entropy(x, y, {reduction = "sum"}) end, {randn(5, 5)})
    check(function(x) return F.cross_entropy(x, y, {reduction = "none"}) end, {randn(5, 5)})
  end)

  it("cross_entropy with ignore_index", function()
    local y = targets({0, -100, 1, 3, -100})
    check(function(x) return F.cross_entropy(x, y) end, {randn(5, 4)})
    check(function(x) return F.cross_entropy(x, y, {reduction = "none"}) end, {randn(5, 4)})
    local y2 = targets({0, 2, 1, 2})
    check(function(x) return F.cross_entropy(x, y2, {ignore_index = 2}) end, {randn(4, 3)})
  end)

  it("cross_entropy with label_smoothing", function()
    local y = targets({0, 3, 1, 2})
    check(function(x) return F.cross_entropy(x, y, {label_smoothing = 0.1}) end, {randn(4, 4)})
    check(function(x) return F.cross_entropy(x, y, {label_smoothing = 0.25, reduction = "sum"}) end, {randn(4, 4)})
    local yi = targets({0, -100, 1, 2})
    check(function(x) return F.cross_entropy(x, yi, {label_smoothing = 0.2}) end, {randn(4, 4)})
    check(function(x) return F.cross_entropy(x, yi, {label_smoothing = 0.2, reduction = "none"}) end, {randn(4, 4)})
  end)

  it("cross_entropy on a 3-D input (N, C, d)", function()
    local y = targets({{0, 2, 1}, {1, 1, 0}})
    check(function(x) return F.cross_entropy(x, y) end, {randn(2, 3, 3)})
    check(function(x) return F.cross_entropy(x, y, {reduction = "none"}) end, {randn(2, 3, 3)})
    local yi = targets({{0, -100, 1}, {1, 2, -100}})
    check(function(x) return F.cross_entropy(x, yi, {label_smoothing = 0.1}) end, {randn(2, 3, 3)})
  end)

  it("cross_entropy on a 1-D input with a 0-dim target", function()
    check(function(x) return F.cross_entropy(x, accel.tensor(2, {dtype = accel.int64})) end, {randn(4)})
  end)

  it("cross_entropy with probability targets", function()
    local p = F.softmax(accel.randn(3, 4, {dtype = f64}), 2)
    check(function(x) return F.cross_entropy(x, p) end, {randn(3, 4)})
    check(function(x) return F.cross_entropy(x, p, {label_smoothing = 0.1, reduction = "sum"}) end, {randn(3, 4)})
  end)

  it("mse_loss", function()
    check(function(a, b) return F.mse_loss(a, b) end, {randn(3, 4), randn(3, 4)})
    check(function(a, b) return F.mse_loss(a, b, {reduction = "sum"}) end, {randn(3, 4), randn(3, 4)})
    check(function(a, b) return F.mse_loss(a, b, {reduction = "none"}) end, {randn(3, 4), randn(3, 4)})
  end)

  it("nll_loss", function()
    local y = targets({0, 2, 1, 2})
    check(function(x) return F.nll_loss(F.log_softmax(x, 2), y) end, {randn(4, 3)})
    check(function(x) return F.nll_loss(x, y, {reduction = "sum"}) end, {randn(4, 3)})
    check(function(x) return F.nll_loss(x, y, {reduction = "none"}) end, {randn(4, 3)})
    local yi = targets({0, -100, 1, 2})
    check(function(x) return F.nll_loss(x, yi) end, {randn(4, 3)})
  end)

  it("binary_cross_entropy_with_logits", function()
    local t = accel.rand(3, 4, {dtype = f64})
    check(function(x) return F.binary_cross_entropy_with_logits(x, t) end, {randn(3, 4)})
    check(function(x) return F.binary_cross_entropy_with_logits(x, t, {reduction = "sum"}) end, {randn(3, 4)})
    check(function(x) return F.binary_cross_entropy_with_logits(x * 10, t, {reduction = "none"}) end, {randn(3, 4)})
    -- gradient wrt the target too
    check(function(x, tt) return F.binary_cross_entropy_with_logits(x, tt) end, {randn(3, 4), gc.leaf(t)})
    local pw = accel.tensor({0.5, 1, 2, 3}, {dtype = f64})
    check(function(x) return F.binary_cross_entropy_with_logits(x, t, {pos_weight = pw}) end, {randn(3, 4)})
    -- logits exactly 0 (a zero-initialised head): the loss is smooth there
    local zeros = accel.tensor({{0, 0, 1, -1}, {0, 2, 0, -3}, {0, 0, 0, 0}}, {dtype = f64})
    check(function(x) return F.binary_cross_entropy_with_logits(x, t) end, {gc.leaf(zeros)})
    check(function(x) return F.binary_cross_entropy_with_logits(x, t, {pos_weight = pw}) end, {gc.leaf(zeros)})
    local ok, err = pcall(F.binary_cross_entropy_with_logits, accel.zeros(4, 1), accel.zeros(4))
    assert.is_false(ok)
    assert.matches("Target size %(accel.Size%({4}%)%) must be the same as input size %(accel.Size%({4, 1}%)%)", err)
  end)
end)

describe("normalisation, embedding, indexing", function()
  before_each(function() accel.set_seed(10) end)

  it("layer_norm without weight / bias", function()
    check(function(x) return F.layer_norm(x, {4}) end, {randn(3, 4)})
    check(function(x) return F.layer_norm(x, 4) end, {randn(2, 3, 4)})
  end)

  it("layer_norm with weight and bias", function()
    check(function(x, w, b) return F.layer_norm(x, {4}, w, b) end, {randn(3, 4), randn(4), randn(4)})
  end)

  it("layer_norm with weight only, bias only, and options table", function()
    check(function(x, w) return F.layer_norm(x, {4}, w) end, {randn(3, 4), randn(4)})
    check(function(x, b) return F.layer_norm(x, {4}, nil, b) end, {randn(3, 4), randn(4)})
    check(function(x, w, b) return F.layer_norm(x, {4}, {weight = w, bias = b, eps = 1e-3}) end,
      {randn(3, 4), randn(4), randn(4)})
  end)

  it("layer_norm over two trailing dims", function()
    check(function(x, w, b) return F.layer_norm(x, {3, 4}, w, b) end, {randn(2, 3, 4), randn(3, 4), randn(3, 4)})
  end)

  it("layer_norm over a normalized_shape ending in 1, with weight and bias", function()
    -- the (3, 1) weight's gradient was once taken for a broadcast one and refused
    check(function(x, w, b) return F.layer_norm(x, {3, 1}, w, b) end, {randn(2, 3, 1), randn(3, 1), randn(3, 1)})
    check(function(x, w, b) return F.layer_norm(x, {2, 3, 1}, w, b) end, {randn(2, 2, 3, 1), randn(2, 3, 1), randn(2, 3, 1)})
    check(function(x, w) return F.rms_norm(x, {3, 1}, w) end, {randn(2, 3, 1), randn(3, 1)})
  end)

  it("layer_norm of a non-contiguous input", function()
    check(function(x, w, b) return F.layer_norm(x:t(), {3}, w, b) end, {randn(3, 4), randn(3), randn(3)})
  end)

  it("embedding (with repeated ids)", function()
    local ids = accel.tensor({{1, 0, 3}, {3, 3, 2}}, {dtype = accel.int64})
    check(function(w) return F.embedding(ids, w) end, {randn(5, 3)})
  end)

  it("gather", function()
    local idx = accel.tensor({{0, 2, 2}, {1, 0, 3}}, {dtype = accel.int64})
    check(function(a) return a:gather(2, idx) end, {randn(2, 4)})
    local idx1 = accel.tensor({{0, 1, 1, 0}, {1, 1, 0, 0}}, {dtype = accel.int64})
    check(function(a) return a:gather(1, idx1) end, {randn(3, 4)})
  end)

  it("index_select (with repeats)", function()
    local idx = accel.tensor({2, 0, 2}, {dtype = accel.int64})
    check(function(a) return a:index_select(1, idx) end, {randn(3, 4)})
    check(function(a) return a:index_select(2, idx) end, {randn(3, 4)})
    check(function(a) return a:index_select(-1, idx) end, {randn(2, 3, 4)})
  end)

  it("where", function()
    local c = accel.randn(3, 4):gt(0)
    check(function(a, b) return accel.where(c, a, b) end, {randn(3, 4), randn(3, 4)})
    check(function(a, b) return a:where(c, b) end, {randn(3, 4), randn(4)})
    check(function(a) return accel.where(c, a, 0) end, {randn(3, 4)})
  end)

  it("masked_fill", function()
    local m = accel.randn(3, 4):gt(0)
    check(function(a) return a:masked_fill(m, 0.5) end, {randn(3, 4)})
    check(function(a) return a:masked_fill(m:narrow(1, 1, 1), -1) end, {randn(3, 4)})
  end)

  it("cat", function()
    check(function(a, b, c) return accel.cat({a, b, c}, 1) end, {randn(2, 3), randn(1, 3), randn(3, 3)})
    check(function(a, b) return accel.cat({a, b}, 2) end, {randn(2, 3), randn(2, 1)})
    check(function(a, b) return accel.cat({a, b}, -1) end, {randn(2, 3), randn(2, 2)})
  end)

  it("cat with an input that does not require grad", function()
    local c = accel.randn(2, 3, {dtype = f64})
    check(function(a) return accel.cat({c, a, c}, 1) end, {randn(1, 3)})
  end)

  it("stack", function()
    check(function(a, b) return accel.stack({a, b}) end, {randn(2, 3), randn(2, 3)})
    check(function(a, b) return accel.stack({a, b}, 2) end, {randn(2, 3), randn(2, 3)})
    check(function(a, b) return accel.stack({a, b}, -1) end, {randn(2, 3), randn(2, 3)})
  end)

  it("tril / triu", function()
    check(function(a) return a:tril() end, {randn(4, 4)})
    check(function(a) return a:triu() end, {randn(3, 5)})
    check(function(a) return a:tril(-1) end, {randn(2, 4, 4)})
    check(function(a) return a:triu(1) end, {randn(4, 3)})
  end)
end)

describe("attention, dropout, casts", function()
  before_each(function() accel.set_seed(11) end)

  it("scaled_dot_product_attention", function()
    check(function(q, k, v) return F.scaled_dot_product_attention(q, k, v) end,
      {randn(1, 2, 3, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 3)})
  end)

  it("scaled_dot_product_attention with is_causal", function()
    check(function(q, k, v) return F.scaled_dot_product_attention(q, k, v, {is_causal = true}) end,
      {randn(2, 2, 4, 3), randn(2, 2, 4, 3), randn(2, 2, 4, 3)})
  end)

  it("scaled_dot_product_attention with a float mask and a scale", function()
    local mask = accel.randn(3, 3, {dtype = f64})
    check(function(q, k, v) return F.scaled_dot_product_attention(q, k, v, {attn_mask = mask, scale = 0.3}) end,
      {randn(2, 3, 4), randn(2, 3, 4), randn(2, 3, 4)})
  end)

  it("dropout with p = 0 is the identity (gradient 1)", function()
    check(function(x) return F.dropout(x, 0) end, {randn(3, 4)})
    check(function(x) return F.dropout(x, 0.5, {training = false}) end, {randn(3, 4)})
    check(function(x) return F.dropout(x * 2, {p = 0}) end, {randn(3, 4)})
  end)

  it("dropout with p > 0: grad = upstream * mask / (1 - p) = upstream * output / input", function()
    for _, p in ipairs({0.25, 0.5, 0.9}) do
      local x = uniform(0.5, 2, 50, 40)
      local y = F.dropout(x, p)
      local R = accel.randn(50, 40, {dtype = f64})
      y:backward(R)
      local ratio = y:detach() / x:detach()
      -- every ratio is either 0 or 1 / (1 - p)
      local scale = 1 / (1 - p)
      local zero = ratio:abs():lt(1e-12)
      local kept = (ratio - scale):abs():lt(1e-9)
      assert.is_true(zero:logical_or(kept):all():item())
      -- some dropped, some kept (2000 elements)
      assert.is_true(zero:any():item())
      assert.is_true(kept:any():item())
      local frac = kept:double():mean():item()
      assert.is_true(math.abs(frac - (1 - p)) < 0.05, ("kept fraction %g for p = %g"):format(frac, p))
      assert.is_true(max_abs_diff(x.grad, R * ratio) < 1e-12)
    end
  end)

  it("to(dtype): float64 -> float32 -> float64 chain", function()
    local x = randn(3, 4)
    local y = x:to(accel.float32)
    assert.equal(accel.float32, y.dtype)
    assert.is_true(y.requires_grad)
    local z = (y * y):to(accel.float64)
    assert.equal(accel.float64, z.dtype)
    local R = accel.randn(3, 4, {dtype = f64})
    z:backward(R)
    assert.equal(accel.float64, x.grad.dtype)
    -- closed form: d/dx sum(R * x^2) = 2 x R (float32 precision in the middle)
    local expected = x:detach() * R * 2
    local err = (x.grad - expected):abs():max():item()
    local scale = expected:abs():max():item()
    assert.is_true(err <= 1e-5 * scale, ("error %g"):format(err))
    -- float() / double() methods too
    local x2 = randn(5)
    x2:float():double():sum():backward()
    assert.same({1, 1, 1, 1, 1}, x2.grad:tolist())
  end)

  it("float32 gradients match the float64 ones", function()
    local x = randn(4, 5)
    local w = randn(3, 5)
    local function f(a, b) return F.log_softmax(F.linear(a, b):tanh(), 2):sum() end
    f(x, w):backward()
    local x32, w32 = x:detach():float(), w:detach():float()
    x32.requires_grad = true
    w32.requires_grad = true
    f(x32, w32):backward()
    assert.equal(accel.float32, x32.grad.dtype)
    assert.is_true(max_abs_diff(x.grad, x32.grad) < 1e-4)
    assert.is_true(max_abs_diff(w.grad, w32.grad) < 1e-4)
  end)
end)
