-- Torch tensor methods built from existing ops (accel.tensor_products,
-- accel.tensor_aliases, accel.tensor_view_scatter): addr, addbmm, angle,
-- hardshrink, prelu, mvlgamma, select_scatter, slice_scatter,
-- diagonal_scatter, and the properties is_cpu, itemsize, nbytes. Expected
-- values are PyTorch 2.15's for the same calls (dims and starts made
-- 1-based) or closed forms; gradients are closed forms.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")

local function f(data) return accel.tensor(data, {dtype = accel.float32}) end
local function flat(t) return t:reshape(-1):double():tolist() end

local function near(expected, t, tol)
  local got = flat(t)
  assert.are.equal(#expected, #got)
  for i = 1, #expected do
    local e, g = expected[i], got[i]
    local ok = (e ~= e and g ~= g) or e == g or math.abs(e - g) <= (tol or 1e-6) * math.max(1, math.abs(e))
    assert(ok, ("element %d: expected %s, got %s"):format(i, e, g))
  end
end

local function fails(pattern, fn) assert.matches(pattern, support.errmsg(fn), 1, true) end

-- (3, 4) weights 1..12: a loss sum(out * w) gives out's gradient w
local function weights() return accel.arange(1, 13, {dtype = accel.float32}):reshape({3, 4}) end

describe("addr and addbmm", function()
  it("give beta * t + alpha * the product, as torch", function()
    local t = accel.ones({2, 3}, {dtype = accel.float32})
    near({5, 8, 11, 8, 14, 20}, t:addr(f({1, 2}), f({1, 2, 3}), {beta = 2, alpha = 3}))
    near({2, 3, 4, 3, 5, 7}, accel.ones({3}, {dtype = accel.float32}):addr(f({1, 2}), f({1, 2, 3})))
    local int = accel.ones({2, 3}, {dtype = accel.int64}):addr(accel.tensor({1, 2}), accel.tensor({1, 2, 3}))
    assert.are.equal(accel.int64, int.dtype)
    near({2, 3, 4, 3, 5, 7}, int)
    local b1 = accel.arange(12, {dtype = accel.float32}):reshape({2, 2, 3})
    local b2 = accel.arange(12, {dtype = accel.float32}):reshape({2, 3, 2})
    near({364.5, 412.5, 544.5, 628.5}, accel.ones({2, 2}, {dtype = accel.float32}):addbmm(b1, b2, {beta = 0.5, alpha = 2}))
    local u = accel.ones({2, 3}, {dtype = accel.float32})
    assert.are.equal(u, u:addr_(f({1, 2}), f({1, 2, 3})))
    near({2, 3, 4, 3, 5, 7}, u)
    local v = accel.ones({2, 2}, {dtype = accel.float32})
    v:addbmm_(b1, b2)
    near({183, 207, 273, 315}, v)
  end)

  it("pass gradients to every input (closed form)", function()
    local v1 = f({1, 2}):requires_grad_()
    local v2 = f({1, -1, 3}):requires_grad_()
    local t = accel.ones({2, 3}, {dtype = accel.float32}):requires_grad_()
    local w = weights():narrow(1, 1, 2):narrow(2, 1, 3) -- {{1, 2, 3}, {5, 6, 7}}
    local out = t:addr(v1, v2, {beta = 2, alpha = 3})
    out:mul(w):sum():backward()
    near({24, 60}, v1.grad) -- 3 * w @ v2
    near({33, 42, 51}, v2.grad) -- 3 * v1 @ w
    near({2, 4, 6, 10, 12, 14}, t.grad) -- 2 * w
  end)

  it("follow autocast as torch: addbmm runs in bf16, addr stays float32", function()
    local acc = accel.Accelerator({mixed_precision = "bf16"})
    local a, r = acc:autocast(function()
      return accel.ones({2, 2}):addbmm(accel.ones({2, 2, 3}), accel.ones({2, 3, 2})),
        accel.ones({2, 3}):addr(accel.ones({2}), accel.ones({3}))
    end)
    assert.are.equal(accel.bfloat16, a.dtype)
    assert.are.equal(accel.float32, r.dtype)
  end)

  it("refuse bad arguments by name", function()
    local t = accel.ones({2, 3})
    fails("addr: expected 1-D argument vec1, got 2-D", function() return t:addr(accel.ones({2, 1}), accel.ones({3})) end)
    fails("addr: t of shape [2, 3] does not broadcast", function() return t:addr(accel.ones({3}), accel.ones({3})) end)
    fails("argument alpha must not be a floating point number", function()
      return accel.ones({2, 3}, {dtype = accel.int64}):addr(accel.tensor({1, 2}), accel.tensor({1, 2, 3}), {alpha = 0.5})
    end)
    fails("addbmm: batch1 and batch2 must have the same number of batches, got 2 and 1", function()
      return accel.ones({2, 2}):addbmm(accel.ones({2, 2, 3}), accel.ones({1, 3, 2}))
    end)
    fails("addbmm: batch1 must be a 3-D tensor, got 2-D", function()
      return accel.ones({2, 2}):addbmm(accel.ones({2, 3}), accel.ones({3, 2}))
    end)
  end)
end)

describe("angle, hardshrink, prelu, mvlgamma", function()
  it("give torch's values", function()
    near({math.pi, 0, 0, 0 / 0, 0}, f({-2, 0, 3, 0 / 0, -0.0}):angle())
    local a = accel.tensor({-2, 0, 3}):angle()
    assert.are.equal(accel.float32, a.dtype)
    near({math.pi, 0, 0}, a)
    near({-1, 0, 0, 0.7}, f({-1, -0.5, 0.5, 0.7}):hardshrink(0.6))
    near({-1, 0, 2}, f({-1, 0.3, 2}):hardshrink())
    near({-0.25, 2}, f({-1, 2}):prelu(f({0.25})))
    near({1.8810, 2.6949}, f({2.5, 3}):mvlgamma(3), 1e-4)
    near({1 / 0, 2.6949}, f({0.5, 3}):mvlgamma(3), 1e-4)
    near({0.4516, 1.5502}, accel.tensor({2, 3}):mvlgamma(2), 1e-4)
    local m = f({2.5, 3})
    m:mvlgamma_(3)
    near({1.8810, 2.6949}, m, 1e-4)
  end)

  it("give torch's gradients", function()
    local x = f({-2, 1, 3}):requires_grad_()
    x:angle():sum():backward()
    near({0, 0, 0}, x.grad)
    -- mvlgamma's derivative: the sum of digamma(x - (j - 1) / 2) over j
    local z = f({2.5, 3}):requires_grad_()
    z:mvlgamma(3):sum():backward()
    local d = f({2.5, 3}):detach()
    near(flat(d:digamma() + (d - 0.5):digamma() + (d - 1):digamma()), z.grad)
    near({1.1624, 2.0487}, z.grad, 1e-4)
  end)

  it("refuse a dimension below 1", function()
    fails("mvlgamma: p has to be greater than or equal to 1, got 0", function() return f({2.5}):mvlgamma(0) end)
    fails("mvlgamma: p must be an integer", function() return f({2.5}):mvlgamma(1.5) end)
  end)
end)

describe("select_scatter, slice_scatter, diagonal_scatter", function()
  it("write src where the view lies, as torch", function()
    near({0, 0, 0, 1, 1, 1}, accel.zeros({2, 3}):select_scatter(accel.ones({3}), 1, 2))
    near({1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0}, accel.zeros({4, 3}):slice_scatter(accel.ones({2, 3}), 1, 1, 4, 2))
    near({0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1}, accel.zeros({3, 4}):slice_scatter(accel.ones({3, 1}), 2, -1))
    near({0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}, accel.zeros({3, 4}):slice_scatter(accel.ones({3, 2}), {dim = 2, start = 2, step = 2}))
    near({0, 1, 0, 0, 0, 1, 0, 0, 0}, accel.zeros({3, 3}):diagonal_scatter(accel.ones({2}), 1))
    near({0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0}, accel.zeros({3, 4}):diagonal_scatter(accel.ones({2}), -1))
    local int = accel.zeros({3, 4}):select_scatter(accel.ones({4}, {dtype = accel.int64}), 1, 2)
    assert.are.equal(accel.float32, int.dtype) -- src takes t's dtype, as torch's copy
    near({0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0}, int)
  end)

  it("leave t unchanged", function()
    local t = accel.zeros({2, 3})
    t:select_scatter(accel.ones({3}), 1, 2)
    near({0, 0, 0, 0, 0, 0}, t)
  end)

  it("pass the gradient to t outside the view and to src inside it (closed form)", function()
    local w = weights()
    local t = accel.zeros({3, 4}, {requires_grad = true})
    local s = accel.ones({2, 4}, {requires_grad = true})
    local out = t:slice_scatter(s, 1, 2, 3)
    out:mul(w):sum():backward()
    near({1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0}, t.grad)
    near({5, 6, 7, 8, 9, 10, 11, 12}, s.grad)
    t, s = accel.zeros({3, 4}, {requires_grad = true}), accel.ones({3}, {requires_grad = true})
    out = t:diagonal_scatter(s)
    out:mul(w):sum():backward()
    near({0, 2, 3, 4, 5, 0, 7, 8, 9, 10, 0, 12}, t.grad)
    near({1, 6, 11}, s.grad)
    t, s = accel.zeros({3, 4}, {requires_grad = true}), accel.ones({3}, {requires_grad = true})
    out = t:select_scatter(s, 2, -1)
    out:mul(w):sum():backward()
    near({1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11, 0}, t.grad)
    near({4, 8, 12}, s.grad)
  end)

  it("refuse a src of the wrong shape, naming both", function()
    fails("select_scatter: expected src to have a size equal to the slice of self, src size = [2], slice size = [3]",
      function() return accel.zeros({2, 3}):select_scatter(accel.ones({2}), 1, 2) end)
    fails("slice_scatter: expected src to have a size equal to the slice of self, src size = [3, 4], slice size = [2, 4]",
      function() return accel.zeros({3, 4}):slice_scatter(accel.ones({3, 4}), 1, 2) end)
    fails("slice_scatter: step must be a positive integer", function()
      return accel.zeros({3, 4}):slice_scatter(accel.ones({3, 4}), {step = 0})
    end)
    fails("select_scatter: src must be a tensor", function() return accel.zeros({2, 3}):select_scatter(1, 1, 2) end)
  end)
end)

describe("is_cpu, itemsize, nbytes", function()
  it("are torch's properties", function()
    local t = accel.zeros({2, 3}, {device = "cpu"})
    assert.is_true(t.is_cpu)
    assert.is_false(t.is_cuda)
    assert.are.equal(4, t.itemsize)
    assert.are.equal(24, t.nbytes)
    assert.are.equal(8, t:select(2, 2).nbytes) -- the view's bytes, not the storage's
    assert.are.equal(1, accel.tensor({1, 2}, {dtype = accel.uint8}).itemsize)
    assert.are.equal(8, accel.zeros({4}, {dtype = accel.bfloat16}).nbytes)
  end)
end)

describe("where(condition), diff's prepend / append, normal, set_num_threads", function()
  it("accel.where(cond) gives one index tensor per dim, as torch's nonzero(as_tuple)", function()
    local rows, cols = accel.where(f({{1, 0}, {0, 2}}):gt(0))
    near({0, 1}, rows)
    near({0, 1}, cols)
    assert.are.equal(accel.int64, rows.dtype)
  end)

  it("diff joins prepend and append along dim first, as torch", function()
    near({1, 2, 3, 4}, accel.tensor({1, 3, 6}):diff({prepend = accel.tensor({0}), append = accel.tensor({10})}))
    near({1, 3, 5, 7}, accel.tensor({{1, 3}, {6, 10}}):diff({dim = 1, prepend = accel.tensor({{0, 0}})}))
    near({1, 2, 3, 4}, accel.tensor({1, 3, 6}):diff({prepend = 0, append = 10})) -- (a number fills one slice)
    fails("diff: prepend / append must have the same number of dims as the input (2), got 1", function()
      return accel.tensor({{1, 3}, {6, 10}}):diff({prepend = accel.tensor({0})})
    end)
  end)

  it("normal samples N(mean, std) with torch's argument forms", function()
    accel.manual_seed(0)
    local n = accel.normal(accel.zeros(4000), 2.0)
    assert.are.equal(4000, n:numel())
    assert(math.abs(n:std():item() - 2) < 0.1 and math.abs(n:mean():item()) < 0.1, "N(0, 2) moments")
    near({3, 3, 3, 3}, accel.normal(3, 0, {2, 2}))
    near({1, 100}, accel.normal(f({1, 100}), f({0, 0})))
    local m = accel.normal(5, accel.zeros(3))
    assert.are.equal(accel.float32, m.dtype)
    near({5, 5, 5}, m)
    fails("normal: expects std >= 0.0", function() return accel.normal(0, -1, {2}) end)
    fails("normal: with a number mean and std, give the size", function() return accel.normal(0, 1) end)
  end)

  it("set_num_threads / get_num_threads are accel.num_threads", function()
    local before = accel.get_num_threads()
    accel.set_num_threads(1)
    assert.are.equal(1, accel.get_num_threads())
    assert.are.equal(1, accel.num_threads())
    accel.set_num_threads(before)
    fails("num_threads: expects a positive integer, got 0", function() accel.set_num_threads(0) end)
  end)
end)

describe("unravel_index, scalar_tensor, float_power_, matmul precision, random fills", function()
  it("unravel_index gives torch's coordinates, modulo the shape's size", function()
    local r, c = accel.unravel_index(accel.tensor({4, 1, 5}), {2, 3})
    near({1, 0, 1}, r)
    near({1, 1, 2}, c)
    for _, case in ipairs({{6, 0, 0}, {-7, 1, 2}, {-1, 1, 2}}) do
      local a, b = accel.unravel_index(accel.tensor(case[1]), {2, 3})
      near({case[2]}, a)
      near({case[3]}, b)
    end
    fails("unravel_index: expected 'indices' to be integer dtype, got float32",
      function() return accel.unravel_index(f({1.5}), {2, 3}) end)
  end)

  it("scalar_tensor, float_power_, unsafe_chunk, is_inference are torch's", function()
    local s = accel.scalar_tensor(3)
    assert.are.equal(0, s:dim())
    assert.are.equal(accel.float32, s.dtype)
    assert.are.equal(accel.int64, accel.scalar_tensor(3, {dtype = accel.int64}).dtype)
    near({4, 9}, accel.tensor({2, 3}, {dtype = accel.float64}):float_power_(2))
    fails("float_power_: the base given to float_power_ has dtype float32 but the operation's result requires dtype float64",
      function() return f({2, 3}):float_power_(2) end)
    assert.are.equal(2, #accel.ones(4):unsafe_chunk(2))
    assert.is_false(accel.ones(2):is_inference())
  end)

  it("set_float32_matmul_precision keeps torch's value and refuses others", function()
    assert.are.equal("highest", accel.get_float32_matmul_precision())
    accel.set_float32_matmul_precision("high")
    assert.are.equal("high", accel.get_float32_matmul_precision())
    accel.set_float32_matmul_precision("highest")
    fails([[set_float32_matmul_precision: "low" is not one of 'highest', 'high', or 'medium']],
      function() accel.set_float32_matmul_precision("low") end)
  end)

  it("cauchy_, log_normal_ and geometric_ draw their distributions (sample moments)", function()
    accel.manual_seed(1)
    local c = accel.empty(20000):cauchy_(2, 1)
    assert(math.abs(c:median():item() - 2) < 0.05, "Cauchy median")
    local logs = accel.empty(20000):log_normal_(0, 0.5):log()
    assert(math.abs(logs:mean():item()) < 0.02 and math.abs(logs:std():item() - 0.5) < 0.02, "log-normal")
    local g = accel.empty(20000):geometric_(0.25)
    assert(math.abs(g:mean():item() - 4) < 0.1 and g:min():item() == 1, "geometric mean 1 / p")
    near({1, 1}, accel.empty(2):geometric_(1))
    fails("geometric_: expects p to be in (0, 1], but got p=0", function() return accel.empty(3):geometric_(0) end)
    fails("cauchy_: expects sigma > 0.0", function() return accel.empty(3):cauchy_(0, -1) end)
  end)

  it("names torch has and accel-lua does not are errors naming them", function()
    fails("accel.vmap is not provided by accel-lua", function() return accel.vmap end)
    fails("Tensor.i0 is not provided by accel-lua", function() return accel.ones(2).i0 end)
  end)
end)

describe("quantile's interpolations and nanquantile", function()
  local x = function() return f({{3, 1, 4, 1.5}, {9, 2, 6, 5}}) end
  local q = function() return f({0.25, 0.5, 0.9}) end

  it("give torch's values for each interpolation", function()
    near({1.375, 4.25, 2.25, 5.5, 3.7, 8.1}, x():quantile(q(), 2), 1e-6)
    near({1.375, 4.25, 2.25, 5.5, 3.7, 8.1}, x():quantile(q(), 2, false, {interpolation = "linear"}))
    near({1, 2, 1.5, 5, 3, 6}, x():quantile(q(), {dim = 2, interpolation = "lower"}))
    near({1.5, 5, 3, 6, 4, 9}, x():quantile(q(), {dim = 2, interpolation = "higher"}))
    near({1.5, 5, 3, 6, 4, 9}, x():quantile(q(), {dim = 2, interpolation = "nearest"}))
    near({1.25, 3.5, 2.25, 5.5, 3.5, 7.5}, x():quantile(q(), {dim = 2, interpolation = "midpoint"}))
    near({3}, f({1, 2, 3, 4}):quantile(0.5, {interpolation = "nearest"})) -- (1.5 rounds half to even: 2)
    fails("quantile: interpolation must be one of linear, lower, higher, midpoint or nearest, got 'cubic'",
      function() return x():quantile(0.5, {interpolation = "cubic"}) end)
  end)

  it("nanquantile leaves NaNs out where quantile gives NaN", function()
    local y = f({{3, 0 / 0, 4, 1.5}, {0 / 0, 0 / 0, 0 / 0, 0 / 0}})
    near({3, 0 / 0}, y:nanquantile(0.5, 2))
    near({3, 0 / 0}, y:nanquantile(0.5, {dim = 2, interpolation = "nearest"}))
    near({0 / 0, 0 / 0}, y:quantile(0.5, 2))
  end)

  it("pass torch's gradients through the sort", function()
    local z = f({3, 1, 4, 1.5}):requires_grad_()
    z:quantile(0.4):backward()
    near({0.2, 0, 0, 0.8}, z.grad)
    local w = f({3, 0 / 0, 4, 1.5}):requires_grad_()
    w:nanquantile(0.5):backward()
    near({1, 0, 0, 0}, w.grad)
  end)
end)
