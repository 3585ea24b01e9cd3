-- The autograd engine: accumulation, explicit gradients, graph lifetime,
-- grad modes, leaves, diamonds, long chains, in-place ops and custom Lua
-- functions. Expected values are closed forms or finite differences.
local accel = require("accel")
local gc = dofile("tests/lua/gradcheck.lua")
local support = dofile("tests/lua/support.lua")

local f64 = accel.float64
local check, errmsg = gc.check, support.errmsg

local function leaf(data) return gc.leaf(accel.tensor(data, {dtype = f64})) end

local function close(a, b, tol)
  tol = tol or 1e-12
  local d = support.max_abs_diff(a, b)
  return d <= tol, d
end

local function assert_close(a, b, tol)
  local ok, d = close(a, b, tol)
  assert(ok, ("max abs difference %g (tolerance %g)\n%s\nvs\n%s"):format(d, tol or 1e-12, tostring(a), tostring(b)))
end

describe("gradient accumulation", function()
  it("two backward calls add into .grad", function()
    local x = leaf({1, 2, 3});
    (x * x):sum():backward()
    assert.same({2, 4, 6}, x.grad:tolist())
    ;(x * 3):sum():backward()
    assert.same({5, 7, 9}, x.grad:tolist())
  end)

  it(".grad keeps its identity while accumulating; assigning nil resets", function()
    local x = leaf({1, 2})
    x:sum():backward()
    local g = x.grad
    x:sum():backward()
    assert.equal(g, x.grad)
    assert.same({2, 2}, g:tolist())
    x.grad = nil
    assert.is_nil(x.grad)
    ;(x * 5):sum():backward()
    assert.same({5, 5}, x.grad:tolist())
  end)

  it("zero_ on .grad then accumulate", function()
    local x = leaf({1, 2})
    x:sum():backward()
    x.grad:zero_()
    ;(x * x):sum():backward()
    assert.same({2, 4}, x.grad:tolist())
  end)

  it("the first .grad does not alias the upstream gradient", function()
    local x = leaf({1, 2, 3})
    local g = accel.tensor({1, 1, 1}, {dtype = f64})
    x:backward(g)
    assert.same({1, 1, 1}, x.grad:tolist())
    g:fill_(7)
    assert.same({1, 1, 1}, x.grad:tolist())
    local y = x * 1
    y:backward(g)
    assert.same({8, 8, 8}, x.grad:tolist())
    g:fill_(0)
    assert.same({8, 8, 8}, x.grad:tolist())
  end)

  it("non-leaf tensors get no .grad", function()
    local x = leaf({1, 2})
    local y = x * 2
    y:sum():backward()
    assert.is_nil(y.grad)
    assert.same({2, 2}, x.grad:tolist())
  end)
end)

describe("backward(grad)", function()
  it("a non-scalar output with an explicit gradient", function()
    local x = leaf({{1, 2}, {3, 4}})
    local y = x * x
    local g = accel.tensor({{1, 0.5}, {-1, 2}}, {dtype = f64})
    y:backward(g)
    assert.same({{2, 2}, {-6, 16}}, x.grad:tolist())
  end)

  it("a scalar output with an explicit gradient", function()
    local x = leaf({1, 2})
    ;(x * x):sum():backward(accel.tensor(3, {dtype = f64}))
    assert.same({6, 12}, x.grad:tolist())
  end)

  it("a non-scalar output without a gradient is an error", function()
    local x = leaf({1, 2})
    local msg = errmsg(function() (x * 2):backward() end)
    assert.matches("scalar", msg)
    assert.matches("%[2%]", msg)
    assert.matches("autograd_engine_spec.lua", msg)
  end)

  it("a gradient of the wrong shape is an error", function()
    local x = gc.randn(2, 3)
    local y = x * 2
    local msg = errmsg(function() y:backward(accel.ones(3, 2, {dtype = f64})) end)
    assert.matches("shape", msg)
    assert.matches("%[3, 2%]", msg)
    assert.matches("%[2, 3%]", msg)
    msg = errmsg(function() y:backward(accel.ones(5, {dtype = f64})) end)
    assert.matches("shape", msg)
  end)

  it("backward of a tensor that does not require grad is an error", function()
    local t = accel.ones(3):sum()
    assert.matches("does not require grad", errmsg(function() t:backward() end))
  end)

  it("backward on a leaf accumulates into itself", function()
    local x = leaf({5})
    x:backward()
    assert.same({1}, x.grad:tolist())
  end)

  it("float32 gradient into a float64 graph is cast", function()
    local x = leaf({1, 2})
    ;(x * 3):backward(accel.tensor({1, 2}, {dtype = accel.float32}))
    assert.equal(f64, x.grad.dtype)
    assert.same({3, 6}, x.grad:tolist())
  end)
end)

describe("graph lifetime", function()
  it("a second backward through a freed graph errors clearly", function()
    local x = leaf({1, 2, 3})
    local y = (x:exp() * x):sum()
    y:backward()
    local msg = errmsg(function() y:backward() end)
    assert.matches("second time", msg)
  end)

  it("nodes that saved nothing run again in a second backward (PyTorch: x.grad 3, 3, 3)", function()
    local x = leaf({1, 2, 3})
    local h = x + 1
    h:sum():backward()
    ;(h * 2):sum():backward()
    assert.same({3, 3, 3}, x.grad:tolist())
    local v = x:view(3, 1) -- a view's node saves nothing either
    v:sum():backward()
    v:sum():backward()
    assert.same({5, 5, 5}, x.grad:tolist())
  end)

  it("tensors PyTorch does not save may change before backward (relu keeps its output, mm / linear an operand only for the other's gradient)", function()
    -- PyTorch 2.15: x.grad [[1, 0], [1, 1]] for relu; [[1.5, 1], [1.5, 1]] for mm and linear
    local x = leaf({{1, -2}, {3, 4}})
    local a = x * 1
    local b = a:relu()
    a:add_(1)
    b:sum():backward()
    assert.same({{1, 0}, {1, 1}}, x.grad:tolist())
    local w = accel.tensor({{0.5, 1}, {1, 0}}, {dtype = f64})
    for _, f in ipairs({function(t) return t:matmul(w) end, function(t) return accel.nn.functional.linear(t, w) end}) do
      x.grad = nil
      a = x * 1
      b = f(a)
      a:add_(1)
      b:sum():backward()
      assert.same({{1.5, 1}, {1.5, 1}}, x.grad:tolist())
    end
    -- the operand the other's gradient needs is still checked
    local wl = leaf({{0.5, 1}, {1, 0}})
    a = x * 1
    b = a:matmul(wl)
    a:add_(1)
    assert.matches("modified by an in%-place operation", errmsg(function() b:sum():backward() end))
  end)

  it("neg saves nothing: its input may change before backward (PyTorch 2.15: x.grad -1, -1, -1)", function()
    local x = leaf({1, 2, 3})
    local h = x * 1
    local y = -h
    h:add_(1)
    y:sum():backward()
    assert.same({-1, -1, -1}, x.grad:tolist())
    x.grad = nil
    local z = x * 1
    z:neg_()
    z:mul(2):sum():backward()
    assert.same({-2, -2, -2}, x.grad:tolist())
  end)

  it("relu's gradient is PyTorch's at NaN and 0 (from its output: NaN passes the gradient)", function()
    local x = leaf({0 / 0, -1, 0, 2})
    x:relu():sum():backward()
    assert.same({1, 0, 0, 1}, x.grad:tolist()) -- PyTorch 2.15: tensor([1., 0., 0., 1.])
  end)

  it("a shared subgraph is freed by the first backward through it", function()
    local x = leaf({1, 2, 3})
    local z = x:sin()
    local a, b = z:sum(), (z * 2):sum()
    a:backward()
    assert.matches("second time", errmsg(function() b:backward() end))
  end)

  it("saved tensors are released right after backward", function()
    local x = gc.randn(100000)
    collectgarbage()
    collectgarbage()
    local before = accel.memory_stats()
    -- exp saves its output, sin its input (the same), tanh its output
    local y = x:exp():sin():tanh():sum()
    collectgarbage()
    collectgarbage()
    local during = accel.memory_stats()
    assert.is_true(during - before >= 2 * 800000, ("saved tensors should be alive before backward (%d)"):format(during - before))
    y:backward()
    collectgarbage()
    collectgarbage()
    local after = accel.memory_stats()
    -- only x.grad (800 kB) and y remain, although y is still referenced
    assert.is_true(after - before <= 800000 + 4096, ("live grew by %d bytes"):format(after - before))
    assert.is_not_nil(y)
  end)

  it("a graph that is never backpropagated is freed with its output", function()
    local x = gc.randn(10000)
    collectgarbage()
    collectgarbage()
    local before = accel.memory_stats()
    for _ = 1, 50 do
      local y = x:exp():sigmoid():tanh():sqrt():reciprocal() -- ops that save their outputs
      local z = (y * x):softmax(1)
    end
    collectgarbage()
    collectgarbage()
    assert.equal(before, (accel.memory_stats()))
  end)
end)

describe("grad mode", function()
  it("no_grad(fn) returns fn's results and records nothing", function()
    local x = leaf({1, 2})
    local a, b, c = accel.no_grad(function() return x * 2, x + 1, "done" end)
    assert.is_false(a.requires_grad)
    assert.is_false(b.requires_grad)
    assert.is_true(a.is_leaf)
    assert.same({2, 4}, a:tolist())
    assert.equal("done", c)
    assert.is_true(accel.is_grad_enabled())
  end)

  it("no_grad(fn, args...) passes the arguments", function()
    local x = leaf({1, 2})
    local r = accel.no_grad(function(t, k) return t * k end, x, 3)
    assert.same({3, 6}, r:tolist())
    assert.is_false(r.requires_grad)
  end)

  it("no_grad(fn) restores grad mode after an error", function()
    local ok, err = pcall(accel.no_grad, function()
      assert.is_false(accel.is_grad_enabled())
      error("boom inside")
    end)
    assert.is_false(ok)
    assert.matches("boom inside", tostring(err))
    assert.is_true(accel.is_grad_enabled())
  end)

  it("<close> form restores grad mode at scope end", function()
    local x = leaf({1, 2})
    local y
    do
      local _ <close> = accel.no_grad()
      assert.is_false(accel.is_grad_enabled())
      y = x * 2
    end
    assert.is_true(accel.is_grad_enabled())
    assert.is_false(y.requires_grad)
    assert.is_true((x * 2).requires_grad)
  end)

  it("<close> form restores grad mode after an error", function()
    local ok, err = pcall(function()
      local _ <close> = accel.no_grad()
      error("boom in scope")
    end)
    assert.is_false(ok)
    assert.matches("boom in scope", tostring(err))
    assert.is_true(accel.is_grad_enabled())
  end)

  it("nested: enable_grad inside no_grad, and set_grad_enabled", function()
    local x = leaf({1, 2})
    accel.no_grad(function()
      local y = accel.enable_grad(function() return x * 2 end)
      assert.is_true(y.requires_grad)
      assert.is_false(accel.is_grad_enabled())
      do
        local _ <close> = accel.enable_grad()
        assert.is_true(accel.is_grad_enabled())
      end
      assert.is_false(accel.is_grad_enabled())
    end)
    assert.is_true(accel.is_grad_enabled())
    local prev = accel.set_grad_enabled(false)
    assert.is_true(prev)
    assert.is_false((x * 2).requires_grad)
    accel.set_grad_enabled(true)
    assert.is_true((x * 2).requires_grad)
    assert.equal(accel.no_grad, accel.autograd.no_grad)
  end)

  it("inference_mode is no_grad under PyTorch's other name; is_inference_mode_enabled tells it", function()
    local x = leaf({1, 2})
    assert.is_false(accel.is_inference_mode_enabled())
    local rg, seven = accel.inference_mode(function(k)
      assert.is_true(accel.is_inference_mode_enabled())
      assert.is_false(accel.is_grad_enabled())
      accel.enable_grad(function() -- as PyTorch: grad on, still in inference mode
        assert.is_true(accel.is_inference_mode_enabled())
        assert.is_true(accel.is_grad_enabled())
      end)
      return (x * k).requires_grad, 7
    end, 2)
    assert.is_false(rg)
    assert.equal(7, seven)
    assert.is_false(accel.is_inference_mode_enabled())
    do
      local _ <close> = accel.inference_mode()
      assert.is_true(accel.is_inference_mode_enabled())
      assert.is_false((x * 2).requires_grad)
    end
    assert.is_false(accel.is_inference_mode_enabled())
    assert.is_true(accel.is_grad_enabled())
    assert.is_false(pcall(accel.inference_mode, function() error("boom") end))
    assert.is_false(accel.is_inference_mode_enabled())
    assert.is_true(accel.is_grad_enabled())
    assert.equal(accel.inference_mode, accel.autograd.inference_mode)
  end)

  it("inside inference_mode nothing records, even under enable_grad / set_grad_enabled(true) (PyTorch: requires_grad False)", function()
    local x = leaf({1, 2})
    local c, on = accel.inference_mode(function()
      return accel.enable_grad(function() return x * 2, accel.is_grad_enabled() end)
    end)
    assert.is_false(c.requires_grad)
    assert.is_true(on)
    c = accel.inference_mode(function() return accel.set_grad_enabled(true, function() return x * 2 end) end)
    assert.is_false(c.requires_grad)
    -- a graph built outside is still backpropagated inside
    local y = (x * x):sum()
    accel.inference_mode(function() y:backward() end)
    assert.same({2, 4}, x.grad:tolist())
  end)

  it("inference_mode(false) turns inference mode off and grad mode on, as torch.inference_mode(False)", function()
    local x = leaf({1, 2})
    -- PyTorch 2.15 under no_grad: True False True
    local g, inf, rg = accel.no_grad(function()
      return accel.inference_mode(false, function()
        return accel.is_grad_enabled(), accel.is_inference_mode_enabled(), (x * 2).requires_grad
      end)
    end)
    assert.same({true, false, true}, {g, inf, rg})
    local h = accel.inference_mode(true)
    assert.is_true(accel.is_inference_mode_enabled())
    h:close()
    assert.is_false(accel.is_inference_mode_enabled())
  end)

  it("no_grad / enable_grad / set_grad_enabled run a callable table (a module) as a function", function()
    local m = accel.nn.Linear(2, 2)
    assert.is_false(accel.no_grad(m, accel.ones(1, 2)).requires_grad)
    assert.is_true(accel.set_grad_enabled(true, m, accel.ones(1, 2)).requires_grad)
    assert.matches("no_grad: expected a function %(or a callable table%) to run, got number", errmsg(function() accel.no_grad(3) end))
  end)

  it("grad mode is restored after a failing backward", function()
    local x = leaf({1, 2})
    local y = x * 2
    pcall(function() y:backward() end)
    assert.is_true(accel.is_grad_enabled())
  end)
end)

describe("leaves, requires_grad, detach", function()
  it("requires_grad_ and t.requires_grad = true", function()
    local a = accel.randn(3, {dtype = f64})
    assert.is_false(a.requires_grad)
    assert.equal(a, a:requires_grad_())
    assert.is_true(a.requires_grad)
    a:requires_grad_(false)
    assert.is_false(a.requires_grad)
    local b = accel.randn(3, {dtype = f64})
    b.requires_grad = true
    assert.is_true(b.requires_grad)
    ;(a * b):sum():backward()
    assert.is_nil(a.grad)
    assert_close(b.grad, a)
    local c = accel.randn(3, {requires_grad = true})
    assert.is_true(c.requires_grad)
  end)

  it("integer tensors cannot require grad", function()
    local i = accel.tensor({1, 2, 3})
    assert.matches("floating point", errmsg(function() i:requires_grad_() end))
    assert.matches("floating point", errmsg(function() i.requires_grad = true end))
  end)

  it("requires_grad cannot be turned off on a non-leaf", function()
    local y = gc.randn(2) * 2
    assert.matches("leaf", errmsg(function() y:requires_grad_(false) end))
  end)

  it("is_leaf", function()
    local x = gc.randn(3)
    local p = accel.randn(3)
    assert.is_true(x.is_leaf)
    assert.is_true(p.is_leaf)
    assert.is_false((x * 2).is_leaf)
    assert.is_true((p * 2).is_leaf)
    assert.is_true(x:detach().is_leaf)
    assert.is_true(accel.no_grad(function() return x * 2 end).is_leaf)
  end)

  it("grad_fn names the op", function()
    local x = gc.randn(2, 3)
    assert.is_nil(x.grad_fn)
    local function name(t) return t.grad_fn:lower() end
    assert.matches("add", name(x + 1))
    assert.matches("mul", name(x * x))
    assert.matches("sum", name(x:sum()))
    assert.matches("exp", name(x:exp()))
    assert.matches("view", name(x:view(3, 2)))
    assert.matches("^tbackward", name(x:t())) -- PyTorch 2.15: TBackward0
    assert.matches("mm", name(x:matmul(x:t())))
    assert.matches("softmax", name(x:softmax(1)))
    assert.is_nil(accel.randn(2):exp().grad_fn)
  end)

  it("detach shares storage, drops the graph", function()
    local x = gc.randn(3)
    local y = x * 2
    local d = y:detach()
    assert.is_false(d.requires_grad)
    assert.is_nil(d.grad_fn)
    assert.is_true(d.is_leaf)
    d:fill_(1)
    assert.same({1, 1, 1}, y:tolist())
    -- the graph through y is untouched by the detached branch
    local z = y * 3 + d
    z:sum():backward()
    assert.same({6, 6, 6}, x.grad:tolist())
  end)

  it("detach_ in place", function()
    local x = gc.randn(3)
    local y = x * 2
    y:detach_()
    assert.is_false(y.requires_grad)
    assert.is_true(y.is_leaf)
    -- torch: "Can't detach views in-place. Use detach() instead." (x.view(3), x[1:], (x * 2)[0]; not x.detach())
    for _, v in ipairs({x:view(3), x:narrow(1, 2, 2), (x * 2)[1], accel.zeros(4):view(2, 2)}) do
      assert.matches("detach_: can't detach views in%-place", errmsg(function() v:detach_() end))
    end
    local d = x:detach()
    d:detach_()
    assert.is_false(d.requires_grad)
  end)

  it("t.requires_grad = nil is refused as torch's = None (nil is not false)", function()
    local x = gc.randn(3)
    assert.matches("t.requires_grad = nil: requires_grad must be a boolean", errmsg(function() x.requires_grad = nil end))
    assert.is_true(x.requires_grad)
    x.requires_grad = false
    assert.is_false(x.requires_grad)
  end)

  it(".data is a detached alias", function()
    local x = gc.randn(3)
    local d = x.data
    assert.is_false(d.requires_grad)
    d:fill_(2)
    assert.same({2, 2, 2}, x:tolist())
  end)
end)

describe("graph shapes", function()
  it("x used twice (x * x) and through two branches", function()
    local x = leaf({1, 2, 3})
    ;(x * x):sum():backward()
    assert.same({2, 4, 6}, x.grad:tolist())
    check(function(a) return a * a + a:exp() - a:sin() * a end, {gc.randn(2, 3)})
  end)

  it("diamond through an intermediate", function()
    check(function(a)
      local b = a:tanh()
      local c, d = b * 2, b:exp()
      return (c * d + b):sum()
    end, {gc.randn(4)})
    -- closed form: y = b^2 with b = 3x -> dy/dx = 18 x
    local x = leaf({1, -2})
    local b = x * 3
    ;(b * b):sum():backward()
    assert.same({18, -36}, x.grad:tolist())
  end)

  it("many consumers of one tensor", function()
    local x = leaf({1, 2})
    local s = x * 0
    for _ = 1, 100 do s = s + x end
    s:sum():backward()
    assert.same({100, 100}, x.grad:tolist())
  end)

  it("inputs with and without grad mixed", function()
    local x = leaf({1, 2})
    local c = accel.tensor({3, 4}, {dtype = f64})
    ;(x * c + c):sum():backward()
    assert.same({3, 4}, x.grad:tolist())
    assert.is_nil(c.grad)
  end)

  it("a long chain of 10000 ops: backward and freeing do not overflow the stack", function()
    local x = leaf({0.5, -0.25})
    local y = x
    for _ = 1, 10000 do y = y * 1.0001 end
    y:sum():backward()
    local expected = 1.0001 ^ 10000
    assert.is_true(math.abs(x.grad[1]:item() - expected) < 1e-9 * expected)
    -- nonlinear chain dropped without backward, after its intermediates were collected
    y = x
    for _ = 1, 10000 do y = (y * 0.5):sin() + y * 0.1 end
    collectgarbage()
    y = nil
    collectgarbage()
    collectgarbage()
    -- a chain that keeps inputs saved (sin saves its input), backward after collecting
    y = x
    for _ = 1, 10000 do y = y:sin() end
    collectgarbage()
    x.grad = nil
    y:sum():backward()
    assert.is_true(x.grad[1]:item() > 0)
  end)

  it("10000-op chain gradient matches the closed form", function()
    -- y = x + 1e-4 * sum_k x  (10000 additions of x * 1e-4) -> dy/dx = 2
    local x = leaf({1, 2, 3})
    local y = x
    for _ = 1, 10000 do y = y + x * 1e-4 end
    y:sum():backward()
    assert_close(x.grad, accel.full({3}, 2, {dtype = f64}), 1e-9)
  end)
end)

describe("in-place ops", function()
  it("add_ on a non-leaf keeps correct grads", function()
    local x = leaf({1, 2, 3})
    local y = x * 2
    y:add_(1)
    assert.same({3, 5, 7}, y:tolist())
    y:sum():backward()
    assert.same({2, 2, 2}, x.grad:tolist())
  end)

  it("mul_ / div_ / sub_ by scalars and tensors", function()
    check(function(a) local y = a * 1; y:mul_(3); y:sub_(1); y:div_(2); return y end, {gc.randn(4)})
    check(function(a, w) local y = a * 1; y:mul_(w); return y end, {gc.randn(4), gc.randn(4)})
    check(function(a, w) local y = a:sin(); y:div_(w); return y end, {gc.randn(4), gc.uniform(1, 2, 4)})
    check(function(a, w) local y = a:sin(); y:add_(w, {alpha = 2}); return y end, {gc.randn(4), gc.randn(4)})
    check(function(a, w) local y = a:sin(); y:pow_(w); return y end, {gc.uniform(0.5, 1.5, 4), gc.randn(4)})
  end)

  it("unary in-place ops on non-leaves", function()
    check(function(a) local y = a * 2; y:sin_(); return y end, {gc.randn(5)})
    check(function(a) local y = a * 2; y:relu_(); return y end, {gc.randn(5)})
    check(function(a) local y = a * 2; y:exp_(); return y end, {gc.randn(5)})
    check(function(a) local y = a * 2; y:tanh_(); y:sigmoid_(); return y end, {gc.randn(5)})
    check(function(a) local y = a * 2; y:pow_(3); return y end, {gc.randn(5)})
    check(function(a) local y = a * 2; y:clamp_(-0.5, 0.5); return y end, {gc.randn(5)})
  end)

  it("masked_fill_ on a non-leaf", function()
    local m = accel.tensor({true, false, true, false})
    check(function(a) local y = a * 2; y:masked_fill_(m, 0); return y end, {gc.randn(4)})
  end)

  it("in-place on a leaf that requires grad is an error (allowed under no_grad)", function()
    local x = leaf({1, 2})
    assert.matches("leaf", errmsg(function() x:add_(1) end))
    assert.matches("leaf", errmsg(function() x:mul_(2) end))
    assert.matches("leaf", errmsg(function() x:fill_(0) end))
    accel.no_grad(function() x:add_(1) end)
    assert.same({2, 3}, x:tolist())
  end)

  it("modifying a saved tensor in place after use, then backward: clear error", function()
    local x = leaf({1, 2, 3})
    local y = x * 2
    local z = y * y -- saves y
    y:add_(1)
    local msg = errmsg(function() z:sum():backward() end)
    assert.matches("in%-place", msg)
    assert.matches("mul", msg)

    local w = leaf({0.5, 1})
    local s = w:sin() -- saves w
    accel.no_grad(function() w:add_(1) end)
    msg = errmsg(function() s:sum():backward() end)
    assert.matches("modified by an in%-place operation", msg)
    assert.matches("sin", msg)

    -- exp saves its output: changing that output in place breaks exp's backward (as in PyTorch)
    local e = leaf({0.5, 1}):exp()
    e:mul_(2)
    msg = errmsg(function() e:sum():backward() end)
    assert.matches("modified by an in%-place operation", msg)
    assert.matches("exp", msg)
  end)

  it("in-place ops on views that would need a graph are errors", function()
    local x = leaf({1, 2})
    local y = x * 2
    assert.matches("view", errmsg(function() y:view(2, 1):mul_(2) end))
    -- the base does not require grad, the operand does: the base would lose the gradient
    local buf = accel.zeros(4, {dtype = f64})
    assert.matches("view", errmsg(function() buf:narrow(1, 1, 2):add_(x) end))
    assert.same({0, 0, 0, 0}, buf:tolist())
    -- a fresh tensor (not a view) is fine and picks up the history
    local acc = accel.zeros(2, {dtype = f64})
    acc:add_(x * 3)
    assert.is_true(acc.requires_grad)
    acc:sum():backward()
    assert.same({3, 3}, x.grad:tolist())
  end)

  it("modifying a tensor that was not saved is fine", function()
    local x = leaf({1, 2, 3})
    local y = x * 2
    local z = y + 1 -- add saves nothing
    y:mul_(10)
    z:sum():backward()
    assert.same({2, 2, 2}, x.grad:tolist())
  end)
end)

describe("overwrites: fill_, zero_, copy_, t[i] = v", function()
  it("fill_ / zero_ on a non-leaf cut the gradient of the old values", function()
    local x = leaf({1, 2, 3})
    local y = x * 2
    y:fill_(3)
    assert.is_true(y.requires_grad)
    ;(y * x):sum():backward()
    assert.same({3, 3, 3}, x.grad:tolist())
    x.grad = nil
    local z = x * 2
    z:zero_()
    ;(z + x):sum():backward()
    assert.same({1, 1, 1}, x.grad:tolist())
  end)

  it("copy_ into a non-leaf: gradient goes to the source, not to the old values", function()
    check(function(a, w) local y = a * 2; y:copy_(w); return y * a end, {gc.randn(3), gc.randn(3)})
    check(function(a, w) local y = a:sin(); y:copy_(w); return y end, {gc.randn(2, 3), gc.randn(3)})
  end)

  it("copy_ from a source that requires grad makes the destination require grad", function()
    local x = gc.randn(3)
    local buf = accel.zeros(3, {dtype = f64})
    buf:copy_(x * 3)
    assert.is_true(buf.requires_grad)
    assert.is_false(buf.is_leaf)
    buf:sum():backward()
    assert.same({3, 3, 3}, x.grad:tolist())
    check(function(a) local b = accel.zeros(2, 3, {dtype = f64}); b:copy_(a); return b end, {gc.randn(3)})
  end)

  it("t[i] = v on a non-leaf: row i takes v's gradient, the others keep theirs", function()
    check(function(a, w) local y = a * 2; y[2] = w; return y end, {gc.randn(3, 4), gc.randn(4)})
    check(function(a, w) local y = a:sin(); y[-1] = w; return y:exp() end, {gc.randn(3, 2), gc.randn(1)})
    check(function(a) local y = a * 2; y[1] = 5; return y end, {gc.randn(3, 2)})
    local x = leaf({{1, 2}, {3, 4}})
    local y = x * 2
    y[1] = 0
    y:sum():backward()
    assert.same({{0, 0}, {2, 2}}, x.grad:tolist())
  end)

  it("t[i] = v into a plain buffer from sources that require grad", function()
    check(function(a, b)
      local buf = accel.zeros(3, 2, {dtype = f64})
      buf[1] = a
      buf[3] = b * 2
      return buf
    end, {gc.randn(2), gc.randn(2)})
  end)

  it("overwrites that cannot be recorded are errors, not silently wrong gradients", function()
    local x = leaf({1, 2})
    assert.matches("leaf", errmsg(function() x:zero_() end))
    assert.matches("leaf", errmsg(function() x:copy_(accel.ones(2, {dtype = f64})) end))
    assert.matches("leaf", errmsg(function() x[1] = 3 end))
    local v = (x * 2):view(2, 1)
    assert.matches("view", errmsg(function() v[1] = 7 end))
    assert.matches("view", errmsg(function() v:fill_(1) end))
    local buf = accel.zeros(4, {dtype = f64})
    assert.matches("view", errmsg(function() buf:narrow(1, 1, 2):copy_(x) end))
    -- all fine without recording
    accel.no_grad(function()
      x:zero_()
      v[1] = 7
      buf:narrow(1, 1, 2):copy_(x)
    end)
    assert.same({0, 0}, x:tolist())
  end)
end)

describe("custom functions from Lua", function()
  local Square = accel.autograd.Function{
    forward = function(ctx, x)
      ctx:save_for_backward(x)
      return x * x
    end,
    backward = function(ctx, g)
      local x = ctx.saved_tensors[1]
      return g * 2 * x
    end,
  }

  it("called as F(x) and F.apply(x)", function()
    local x = leaf({1, 2, 3})
    local y = Square(x)
    assert.same({1, 4, 9}, y:tolist())
    assert.is_true(y.requires_grad)
    assert.is_false(y.is_leaf)
    y:sum():backward()
    assert.same({2, 4, 6}, x.grad:tolist())
    x.grad = nil
    Square.apply(x):sum():backward()
    assert.same({2, 4, 6}, x.grad:tolist())
  end)

  it("passes gradcheck, also inside a larger graph", function()
    check(function(a) return Square(a) end, {gc.randn(3, 2)})
    check(function(a) return Square(a:tanh()):exp() * a end, {gc.randn(3)})
  end)

  it("forward runs without recording a graph", function()
    local inner
    local F = accel.autograd.Function{
      forward = function(ctx, x) inner = x * 2; return inner end,
      backward = function(ctx, g) return g * 2 end,
    }
    F(gc.randn(2))
    assert.is_false(inner.requires_grad)
  end)

  it("two inputs, one of them not requiring grad", function()
    local Mul = accel.autograd.Function{
      forward = function(ctx, a, b)
        ctx:save_for_backward(a, b)
        return a * b
      end,
      backward = function(ctx, g)
        local a, b = ctx.saved_tensors[1], ctx.saved_tensors[2]
        local ga = ctx.needs_input_grad[1] and g * b or nil
        local gb = ctx.needs_input_grad[2] and g * a or nil
        return ga, gb
      end,
    }
    local a = gc.randn(4)
    local b = accel.randn(4, {dtype = f64})
    Mul(a, b):sum():backward()
    assert_close(a.grad, b)
    assert.is_nil(b.grad)
    check(function(x) return Mul(x, b) end, {gc.randn(4)})
    check(function(x, y) return Mul(x, y) end, {gc.randn(4), gc.randn(4)})
  end)

  it("a backward returning a gradient for an input without grad is ignored", function()
    local Add = accel.autograd.Function{
      forward = function(ctx, a, b) return a + b end,
      backward = function(ctx, g) return g, g end,
    }
    local a = gc.randn(3)
    local b = accel.randn(3, {dtype = f64})
    Add(a, b):sum():backward()
    assert.same({1, 1, 1}, a.grad:tolist())
    assert.is_nil(b.grad)
  end)

  it("non-tensor arguments are passed through", function()
    local Scale = accel.autograd.Function{
      forward = function(ctx, x, k) ctx.k = k; return x * k end,
      backward = function(ctx, g) return g * ctx.k, nil end,
    }
    local x = gc.randn(3)
    Scale(x, 4):sum():backward()
    assert.same({4, 4, 4}, x.grad:tolist())
  end)

  it("no input requires grad: the output does not either", function()
    local y = Square(accel.randn(3))
    assert.is_false(y.requires_grad)
  end)

  it("an error inside the Lua backward is reported cleanly", function()
    local Bad = accel.autograd.Function{
      forward = function(ctx, x) return x * 1 end,
      backward = function(ctx, g) error("my backward exploded") end,
    }
    local x = gc.randn(3)
    local y = Bad(x):sum()
    local ok, err = pcall(function() y:backward() end)
    assert.is_false(ok)
    assert.matches("my backward exploded", tostring(err))
    assert.is_true(accel.is_grad_enabled())
    assert.is_nil(x.grad)
    -- the runtime still works afterwards
    Square(x):sum():backward()
    assert.is_not_nil(x.grad)
  end)

  it("a backward returning a non-tensor is reported", function()
    local Bad = accel.autograd.Function{
      forward = function(ctx, x) return x * 1 end,
      backward = function(ctx, g) return "nope" end,
    }
    local y = Bad(gc.randn(3)):sum()
    local ok, err = pcall(function() y:backward() end)
    assert.is_false(ok)
    assert.matches("tensor or nil", tostring(err))
  end)

  it("a backward returning a gradient of the wrong shape is reported", function()
    local Bad = accel.autograd.Function{
      forward = function(ctx, x) return x * 1 end,
      backward = function(ctx, g) return accel.ones(7, {dtype = f64}) end,
    }
    local y = Bad(gc.randn(3)):sum()
    local ok = pcall(function() y:backward() end)
    assert.is_false(ok)
  end)

  it("forward in a coroutine that has finished and been collected, backward outside", function()
    local x = gc.randn(3)
    local y = coroutine.wrap(function() return Square(x):sum() end)()
    collectgarbage()
    collectgarbage()
    for _ = 1, 200 do coroutine.wrap(function() end)() end -- reuse the freed thread memory
    collectgarbage()
    y:backward()
    assert_close(x.grad, x:detach() * 2)
  end)

  it("backward inside a coroutine, and forward in a suspended one", function()
    local x = gc.randn(3)
    local y = Square(x):sum()
    coroutine.wrap(function() y:backward() end)()
    assert_close(x.grad, x:detach() * 2)
    x.grad = nil
    local co = coroutine.create(function()
      coroutine.yield(Square(x):sum())
    end)
    local _, z = coroutine.resume(co)
    z:backward()
    assert_close(x.grad, x:detach() * 2)
  end)

  it("definition errors", function()
    assert.matches("forward", errmsg(function() accel.autograd.Function{backward = function() end} end))
    local Nothing = accel.autograd.Function{forward = function() end, backward = function() end}
    assert.matches("forward returned nothing", errmsg(function() Nothing(gc.randn(2)) end))
    local none = function() end
    assert.matches("unknown key 'nmae' %(keys: forward, backward, setup_context, name%)",
      errmsg(function() accel.autograd.Function{forward = none, backward = none, nmae = "x"} end))
    assert.matches("'jvp' is not supported %(forward%-mode AD is not provided%)",
      errmsg(function() accel.autograd.Function{forward = none, backward = none, jvp = none} end))
    assert.matches("setup_context must be a function, got string",
      errmsg(function() accel.autograd.Function{forward = none, backward = none, setup_context = "x"} end))
  end)

  -- torch 2.15: a Function whose forward returns (x * 2, 5) gives (tensor, 5); backward gets None for the 5.
  -- With setup_context, forward(x) takes no ctx and setup_context(ctx, inputs, output) sees the tuple.
  it("takes forward results that are not tensors, and PyTorch's setup_context style", function()
    local seen = {}
    local Double = accel.autograd.Function{
      forward = function(x, k) return x * k, k end,
      setup_context = function(ctx, inputs, output)
        seen.n_inputs, seen.second = #inputs, output[2]
        ctx.k = inputs[2]
      end,
      backward = function(ctx, g, g_k)
        seen.g_k = g_k
        return g * ctx.k, nil
      end,
    }
    local x = gc.randn(3)
    local y, k = Double(x, 3)
    assert.are.equal(3, k)
    y:sum():backward()
    assert.are.same({n_inputs = 2, second = 3}, seen)
    assert_close(x.grad, accel.full({3}, 3, {dtype = x.dtype}))
    local One = accel.autograd.Function{forward = function(x) return x * 2 end,
      setup_context = function(ctx, _, output) ctx.out_shape = output.shape end,
      backward = function(ctx, g) return g * 2 end}
    x.grad = nil
    One(x):sum():backward()
    assert_close(x.grad, accel.full({3}, 2, {dtype = x.dtype}))
  end)

  it("checks backward's results as PyTorch does: count, shapes, saved tensors changed in place", function()
    local function ident(bw)
      return accel.autograd.Function{name = "Ident", forward = function(ctx, a, b)
        ctx:save_for_backward(a)
        return a * 1
      end, backward = bw}
    end
    local x, w = gc.randn(2), gc.randn(2)
    local few = ident(function(_, g) return g end)
    assert.matches("Ident backward returned an incorrect number of gradients %(expected 2, got 1%)",
      errmsg(function() few(x, w):sum():backward() end))
    few(x, w:detach()):sum():backward() -- fine: the missing trailing gradient is not needed
    local many = ident(function(_, g) return g, nil, g end)
    assert.matches("expected 2, got 3", errmsg(function() many(x, w):sum():backward() end))
    local bad = ident(function(_, g) return g:sum(), nil end)
    assert.matches("invalid gradient at index 1: got %[%] but expected shape compatible with %[2%]",
      errmsg(function() bad(x, w:detach()):sum():backward() end))
    local ok = ident(function(_, g) return g, nil end)
    local b = x * 1
    local y = ok(b, w:detach())
    b:add_(10)
    assert.matches("saved tensor 1 %(shape %[2%]%) was modified by an in%-place operation",
      errmsg(function() y:sum():backward() end))
  end)

  it("t:backward with something other than a gradient tensor is an error (torch's TypeError), not ignored", function()
    local x = gc.randn(2)
    local y = (x * x):sum()
    assert.matches("backward: the gradient %(argument 1%) must be a tensor or nil, got number",
      errmsg(function() y:backward(5) end))
    -- torch's Tensor.backward(gradient, retain_graph, create_graph, inputs): what is not provided is refused by name
    assert.matches("backward: create_graph = true is not supported", errmsg(function() y:backward(nil, nil, true) end))
    assert.matches("backward: inputs is not supported", errmsg(function() y:backward(nil, nil, nil, {x}) end))
    assert.matches("backward: inputs is not supported", errmsg(function() y:backward({inputs = {x}}) end))
    assert.matches("backward: argument 'retain_graph' must be a boolean, got number", errmsg(function() y:backward(nil, 1) end))
    assert.matches("unknown option 'retain_grap'", errmsg(function() y:backward({retain_grap = true}) end))
    assert.matches("unexpected argument #5", errmsg(function() y:backward(nil, nil, nil, nil, 9) end))
    y:backward(nil)
    assert_close(x.grad, x:detach() * 2)
  end)

  -- PyTorch's autograd tutorial: out = (inp + 1).pow(2).t() for inp = eye(4, 5); out.backward(ones_like(out),
  -- retain_graph=True) twice gives inp.grad 4 on the diagonal / 2 elsewhere, then 8 / 4; after
  -- inp.grad.zero_() once more 4 / 2. Without retain_graph the second backward is refused.
  it("retain_graph keeps the graph for another backward (positionally or by name)", function()
    local inp = accel.eye(4, 5, {requires_grad = true})
    local out = (inp + 1):pow(2):t()
    local function expect(d, o) assert.same(((accel.eye(4, 5) * (d - o)) + o):tolist(), inp.grad:tolist()) end
    out:backward(accel.ones_like(out), true)
    expect(4, 2)
    out:backward(accel.ones_like(out), {retain_graph = true})
    expect(8, 4)
    inp.grad:zero_()
    out:backward({gradient = accel.ones_like(out), retain_graph = true})
    expect(4, 2)
    out:backward(accel.ones_like(out))
    expect(8, 4)
    assert.matches("backward through pow a second time: the tensors it saved were freed after the first backward "
      .. "%(call backward once per forward, or pass retain_graph = true to the first",
      errmsg(function() out:backward(accel.ones_like(out)) end))
    -- a custom Function's backward runs again too
    local Twice = accel.autograd.Function{forward = function(ctx, a) ctx:save_for_backward(a) return a * 2 end,
      backward = function(ctx, g) local a = ctx.saved_tensors[1] return g * 2 + a * 0 end}
    local x = gc.randn(3)
    local y = Twice(x):sum()
    y:backward(nil, true)
    y:backward()
    assert_close(x.grad, accel.full({3}, 4, {dtype = x.dtype}))
  end)

  it("sets ctx.needs_input_grad before forward and takes several outputs", function()
    local seen
    local Two = accel.autograd.Function{forward = function(ctx, a)
      seen = ctx.needs_input_grad[1]
      return a * 2, a * 3
    end, backward = function(_, g1, g2) return g1 * 2 + g2 * 3 end}
    local x = gc.randn(3)
    local p, q = Two(x)
    assert.is_true(seen)
    assert.is_truthy(q, "the second output was lost")
    ;(p:sum() + q:sum()):backward()
    assert_close(x.grad, accel.full({3}, 5, {dtype = x.dtype}))
  end)

  -- Expected values and messages from PyTorch 2.15.
  it("a tensor saved after a nil is still checked for in-place changes", function()
    local Lin = accel.autograd.Function{name = "Lin",
      forward = function(ctx, x, bias, w) ctx:save_for_backward(bias, w); return x:matmul(w) end,
      backward = function(ctx, g)
        assert.is_nil(ctx.saved_tensors[1])
        assert.equal(2, ctx.saved_tensors.n)
        return g:matmul(ctx.saved_tensors[2]:t()), nil, nil
      end}
    local x = accel.ones(1, 2, {dtype = f64, requires_grad = true})
    local w = accel.tensor({{1, 2}, {3, 4}}, {dtype = f64})
    Lin(x, nil, w):sum():backward()
    assert.same({{3, 7}}, x.grad:tolist())
    local y = Lin(x, nil, w)
    w:mul_(10)
    assert.matches("Lin: saved tensor 2 %(shape %[2, 2%]%) was modified by an in%-place operation",
      errmsg(function() y:sum():backward() end))
  end)

  it("an output that gets no gradient reaches backward as zeros (set_materialize_grads(false): nil)", function()
    local got = {}
    local Two = accel.autograd.Function{
      forward = function(ctx, a, materialize)
        if materialize ~= nil then ctx:set_materialize_grads(materialize) end
        ctx:save_for_backward(a)
        return a * 2, a * a, a:gt(1):long()
      end,
      backward = function(ctx, g1, g2, g3)
        got = {g1, g2, g3}
        local r = g2 and g2 * 2 * ctx.saved_tensors[1] or nil
        if g1 then r = r and r + g1 * 2 or g1 * 2 end
        return r, nil
      end}
    local a = leaf({1, 2})
    local _, q = Two(a)
    q:sum():backward()
    assert.same({2, 4}, a.grad:tolist())
    assert.same({0, 0}, got[1]:tolist())
    assert.equal(accel.float64, got[1].dtype)
    assert.same({1, 1}, got[2]:tolist())
    assert.same({0, 0}, got[3]:tolist()) -- the integer output's zeros keep its dtype
    assert.equal(accel.int64, got[3].dtype)
    a.grad = nil
    local p = Two(a, false)
    p:sum():backward()
    assert.same({2, 2}, a.grad:tolist())
    assert.same({1, 1}, got[1]:tolist())
    assert.is_nil(got[2])
    assert.is_nil(got[3])
    assert.matches("set_materialize_grads: expected a boolean, got number", errmsg(function() Two(a, 1) end))
  end)

  it("ctx:mark_non_differentiable: those outputs do not require grad, backward gets zeros (or nil) for them", function()
    local got
    local function make(materialize)
      return accel.autograd.Function{
        forward = function(ctx, a)
          local b, c = a * 2, a * 3
          ctx:mark_non_differentiable(b)
          ctx:set_materialize_grads(materialize)
          return b, c
        end,
        backward = function(ctx, g1, g2) got = {g1, g2}; return g2 * 3 end}
    end
    local a = leaf({3, 1})
    local b, c = make(true)(a)
    assert.is_false(b.requires_grad)
    assert.is_true(c.requires_grad)
    assert.same({6, 2}, b:tolist())
    c:sum():backward()
    assert.same({3, 3}, a.grad:tolist())
    assert.same({0, 0}, got[1]:tolist())
    assert.same({1, 1}, got[2]:tolist())
    local _, c2 = make(false)(a)
    c2:sum():backward()
    assert.is_nil(got[1])
    local One = accel.autograd.Function{
      forward = function(ctx, x) local y = x * 2; ctx:mark_non_differentiable(y); return y end,
      backward = function(_, g) return g end}
    local y = One(a)
    assert.is_false(y.requires_grad)
    assert.is_nil(y.grad_fn)
    local Num = accel.autograd.Function{forward = function(ctx, x) ctx:mark_non_differentiable(3); return x * 2 end,
      backward = function(_, g) return g end}
    assert.matches("mark_non_differentiable only accepts tensors, but argument 1 is a number",
      errmsg(function() Num(a) end))
    local Dirty = accel.autograd.Function{forward = function(ctx, x) x:mul_(2); ctx:mark_dirty(x); return x end,
      backward = function(_, g) return g end}
    assert.matches("ctx:mark_dirty is not provided", errmsg(function() Dirty(a:detach():clone()) end))
  end)

  it("a gradient for an argument that is not a tensor is an error", function()
    local Scale = accel.autograd.Function{name = "Scale",
      forward = function(ctx, a, k) return a * k end,
      backward = function(_, g) return g * 2, g end}
    local a = leaf({1, 2})
    assert.matches("Scale backward returned a gradient at index 2, but forward's argument 2 is not a tensor %(a number%)",
      errmsg(function() Scale(a, 2):sum():backward() end))
  end)

  it("a gradient of a shape the input expands to is summed back to the input's shape; others are refused", function()
    local Sum = accel.autograd.Function{name = "Sum",
      forward = function(ctx, a) return a:sum() end,
      backward = function(_, g) return g:expand(3, 2, 3):contiguous() * accel.arange(1, 19, {dtype = f64}):view(3, 2, 3) end}
    local a = gc.leaf(accel.ones(2, 1, {dtype = f64}))
    Sum(a):backward()
    assert.same({{72}, {99}}, a.grad:tolist())
    local b = leaf({1, 2})
    local Expand = accel.autograd.Function{forward = function(ctx, x) return x:sum() end,
      backward = function(_, g) return g:expand(2, 2) end}
    Expand(b):backward()
    assert.same({2, 2}, b.grad:tolist())
    local Bad = accel.autograd.Function{name = "Bad", forward = function(ctx, x) return x:sum() end,
      backward = function(_, g) return g:expand(2, 3) end}
    assert.matches("Bad backward returned an invalid gradient at index 1: got %[2, 3%] but expected shape compatible "
      .. "with %[3, 2%]", errmsg(function() Bad(gc.leaf(accel.ones(3, 2, {dtype = f64}))):backward() end))
  end)

  -- PyTorch raises a backward's own exception object unchanged
  it("passes an error value that is not a string, raised in backward or in checkpoint's recompute, through unchanged", function()
    local MyError = setmetatable({code = 42}, {__tostring = function() return "MyError(42)" end})
    local w = accel.ones(2, {requires_grad = true})
    local Raises = accel.autograd.Function{forward = function(_, x) return x * 1 end,
      backward = function() error(MyError) end}
    local ok, err = pcall(function() Raises(w):sum():backward() end)
    assert.is_false(ok)
    assert.are.equal(MyError, err)
    local calls = 0
    local out = accel.utils.checkpoint(function(x)
      calls = calls + 1
      if calls == 2 then error(MyError) end
      return x * 2
    end, w)
    ok, err = pcall(function() accel.autograd.backward({out:sum()}, {accel.tensor(1.0)}) end)
    assert.is_false(ok)
    assert.are.equal(MyError, err)
    -- error() without a value: a message naming the Function, not "(null)"
    local Nil = accel.autograd.Function{name = "Nil", forward = function(_, x) return x * 1 end, backward = function() error() end}
    assert.matches("Nil backward failed: nil", errmsg(function() Nil(w):sum():backward() end))
    -- and the next backward is an ordinary one
    w.grad = nil
    (w * 3):sum():backward()
    assert.same({3, 3}, w.grad:tolist())
  end)
end)

-- Leaf hooks (Tensor.grad_hook, what DDP's reducer hangs on): one call per
-- backward pass after the leaf's last contribution. Observed through a
-- one-process reducer (accel.ddp): stats().hook_calls counts the calls and
-- r:slice(i) holds the gradient the hook saw (the reducer copies it then).
describe("leaf gradient hooks", function()
  local Stop = accel.autograd.Function{ -- passes values, returns no gradient
    forward = function(ctx, x) return x:clone() end,
    backward = function(ctx, g) return nil end,
  }

  local function reducer(params, o)
    return accel.ddp.Reducer(params, o)
  end

  it("a leaf used twice (tied weight) is reported once, with its complete gradient", function()
    local w = leaf({{0.5, -1}, {2, 0.25}})
    local x = leaf({{1, 2}, {3, 4}})
    local r = reducer({w})
    local y = accel.matmul(accel.matmul(x, w):tanh(), w)
    y:sum():backward()
    assert.equal(1, r:stats().hook_calls)
    assert_close(r:slice(1), w.grad)  -- not the first contribution only
    local w2 = w:detach():clone():requires_grad_(true)
    accel.matmul(accel.matmul(x:detach(), w2):tanh(), w2):sum():backward()
    assert_close(w.grad, w2.grad)
    r:finalize()
    r:close()
  end)

  it("a leaf used by many consumers, once per backward pass", function()
    local w = leaf({1, 2, 3})
    local r = reducer({w})
    r:set_sync(false)
    local y = w * 2 + w:exp() + (w * w):sum()
    y:sum():backward()
    assert.equal(0, r:stats().hook_calls) -- sync off: the hook returns at once
    r:set_sync(true)
    ;(w * 3 + w):sum():backward()
    assert.equal(1, r:stats().hook_calls)
    r:finalize()
    assert.equal(1, r:stats().syncs)
    r:close()
  end)

  it("a node that receives no gradient still lets the gradient below it through", function()
    local w = leaf({1, 2})
    local r = reducer({w})
    local m = w * 3
    ;(Stop(m):sum() + m:sum()):backward() -- Stop gives m no gradient; m:sum() does
    assert.same({3, 3}, w.grad:tolist())
    assert.equal(1, r:stats().hook_calls)
    assert_close(r:slice(1), w.grad)
    r:finalize()
    r:close()
  end)

  it("a leaf whose every path brings no gradient gets no call", function()
    local w, v = leaf({1, 2}), leaf({3})
    local r = reducer({w, v})
    ;(Stop(w):sum() + v:sum()):backward()
    assert.is_nil(w.grad)
    local st = r:stats()
    assert.equal(1, st.hook_calls) -- v only
    r:finalize()
    assert.equal(1, r:stats().missing) -- w's slice filled with zeros at finalize
    r:close()
  end)

  it("backward on the leaf itself calls its hook", function()
    local w = leaf({1, 2})
    local r = reducer({w})
    w:backward(accel.tensor({0.5, 0.25}, {dtype = f64}))
    assert.equal(1, r:stats().hook_calls)
    assert.same({0.5, 0.25}, r:slice(1):tolist())
    r:finalize()
    r:close()
  end)

  it("two passes reaching the parameters before their synchronisation: a clear error", function()
    local w = leaf({1, 2})
    local r = reducer({w})
    w:sum():backward()
    ;(w * 2):sum():backward()
    assert.matches("two backward passes in one synchronising step", errmsg(function() r:finalize() end))
    assert.is_false(r:active())
    r:close()
  end)
end)

-- Against PyTorch 2.15's documented behaviour (values by hand).
describe("grad modes, autograd.backward, .grad and fill values as PyTorch", function()
  local function fails(pattern, f, ...)
    local ok, err = pcall(f, ...)
    assert.is_false(ok)
    assert.matches(pattern, tostring(err))
  end

  it("a bad argument to no_grad / enable_grad changes no mode; set_grad_enabled takes a boolean and a function", function()
    local m, x = accel.nn.Linear(2, 2), accel.randn(1, 2)
    assert.is_false(pcall(accel.no_grad, {}, x))
    assert.is_true(accel.is_grad_enabled())
    assert.is_false(pcall(accel.enable_grad, 1))
    assert.is_true(accel.is_grad_enabled())
    assert.is_true(m(x).requires_grad)
    local inside, v = accel.set_grad_enabled(false, function() return accel.is_grad_enabled(), 7 end)
    assert.is_false(inside)
    assert.are.equal(7, v)
    assert.is_true(accel.is_grad_enabled())
    fails("set_grad_enabled: expected a boolean mode", accel.set_grad_enabled)
  end)

  it("autograd.backward: several roots with nil gradients for one-element roots; retain_graph; options refused", function()
    local x = leaf({1, 2, 3})
    accel.autograd.backward({(x * x):sum(), x * 3}, {nil, accel.ones(3, {dtype = f64})})
    assert.same({5, 7, 9}, x.grad:tolist())
    -- torch.autograd.backward(tensors, grad_tensors, retain_graph, create_graph, grad_variables, inputs)
    local y = (x * x):sum()
    accel.autograd.backward(y, nil, true)
    accel.autograd.backward({y}, {retain_graph = true})
    accel.autograd.backward(y)
    assert.same({11, 19, 27}, x.grad:tolist())
    fails("create_graph = true is not supported", accel.autograd.backward, (x * 2):sum(), nil, nil, true)
    fails("inputs is not supported", accel.autograd.backward, (x * 2):sum(), nil, nil, nil, nil, {x})
    fails("unknown option 'retain_grap'", accel.autograd.backward, (x * 2):sum(), {retain_grap = true})
    fails("only for one%-element outputs", accel.autograd.backward, {x * 2})
    -- a tensor with a list of gradients, a list with one gradient tensor (PyTorch takes both)
    x.grad = nil
    accel.autograd.backward(x * x, {accel.ones(3, {dtype = f64})})
    assert.same({2, 4, 6}, x.grad:tolist())
    accel.autograd.backward({x * x}, accel.ones(3, {dtype = f64}))
    assert.same({4, 8, 12}, x.grad:tolist())
    fails("autograd.backward: argument 2 %(grad_tensors%) must be a tensor, a list of tensors", accel.autograd.backward,
      (x * 2):sum(), 5)
    fails("autograd.backward: argument 1 %(tensors%) must be a tensor or a list of tensors, got number",
      accel.autograd.backward, 5)
  end)

  it(".grad assignment checks shape and dtype; a 0-dim fill value that requires grad gets its gradient", function()
    local w = accel.zeros(2, 3, {requires_grad = true})
    fails("assigned grad has shape %[3, 2%]", function() w.grad = accel.zeros(3, 2) end)
    fails("assigned grad has dtype float64", function() w.grad = accel.zeros(2, 3, {dtype = f64}) end)
    fails("can't assign a tensor as its own grad", function() w.grad = w end)
    assert.is_nil(w.grad)
    w.grad = w:detach() -- another tensor on the same values is allowed, as in PyTorch
    w.grad = nil
    local v = accel.tensor(2.0, {requires_grad = true})
    local r = accel.ones(3):masked_fill(accel.tensor({true, false, true}), v)
    r:sum():backward()
    assert.are.equal(2, v.grad:item())
    local u = accel.tensor(2.0, {requires_grad = true})
    local y = accel.zeros(3) * 1
    y:fill_(u)
    y:sum():backward()
    assert.are.equal(3, u.grad:item())
  end)

  it("custom Function: name names the grad_fn, only tensors may be saved; missing APIs are named", function()
    local S = accel.autograd.Function{name = "Square",
      forward = function(ctx, x) ctx:save_for_backward(x) return x * x end,
      backward = function(ctx, g) return 2 * ctx.saved_tensors[1] * g end}
    local y = S(accel.ones(2, {requires_grad = true}))
    assert.matches("SquareBackward", tostring(y))
    local B = accel.autograd.Function{forward = function(ctx, x) ctx:save_for_backward(x, 5) return x * 1 end,
      backward = function(_, g) return g end}
    fails("save_for_backward can only save tensors", B, accel.ones(2, {requires_grad = true}))
    fails("accel.autograd.gradcheck is not provided", function() return accel.autograd.gradcheck end)
    for _, k in ipairs({"gradcheck", "set_detect_anomaly", "detect_anomaly"}) do
      fails("accel.autograd." .. k .. " is not provided", function() return accel.autograd[k] end)
    end
    local m = accel.nn.Linear(2, 2)
    fails("nn.Module.register_backward_hook is not provided", function() return m:register_backward_hook(function() end) end)
  end)
end)
