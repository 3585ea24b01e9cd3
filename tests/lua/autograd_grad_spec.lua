-- accel.autograd.grad (torch.autograd.grad without create_graph): the
-- gradients of outputs with respect to inputs, leaves or not, from one
-- pass that leaves .grad, leaf hooks and DDP's reducer alone. Expected
-- values are closed forms.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local ag = accel.autograd
local f64 = {dtype = accel.float64}
local near = support.assert_near

local function leaf(values) return accel.tensor(values, {dtype = accel.float64, requires_grad = true}) end

describe("autograd.grad", function()
  it("gives d(sum x^2 w)/dx = 2 x w and touches no .grad", function()
    local x, w = leaf({1, 2, 3}), leaf({0.5, -1, 2})
    local g = ag.grad((x * x * w):sum(), x)
    assert.are.equal(1, #g)
    near({1, -4, 12}, g[1], 1e-12)
    assert.is_nil(x.grad)
    assert.is_nil(w.grad)
  end)

  it("takes non-leaf inputs, several at once, and retain_graph", function()
    local x, w = leaf({1, 2, 3}), leaf({0.5, -1, 2})
    local h = x * 3
    local z = (h:sin() * w):sum()
    local g = ag.grad(z, {h, w}, {retain_graph = true})
    near({math.cos(3) * 0.5, -math.cos(6), math.cos(9) * 2}, g[1], 1e-12) -- cos(h) w
    near({math.sin(3), math.sin(6), math.sin(9)}, g[2], 1e-12)
    near({3 * math.cos(3) * 0.5, -3 * math.cos(6), 6 * math.cos(9)}, ag.grad(z, x)[1], 1e-12) -- the graph was kept
    support.expect_error(function() local _ = ag.grad(z, x) end, "a second time")
  end)

  it("weights the outputs by grad_outputs and sums several outputs", function()
    local x, w = leaf({1, 2, 3}), leaf({0.5, -1, 2})
    near({0.5, -10, 200}, ag.grad(x * w, x, accel.tensor({1, 10, 100}, f64))[1], 1e-12)
    near({2.5, 1, 4}, ag.grad({(x * w):sum(), (x * 2):sum()}, {x})[1], 1e-12)
  end)

  it("names an unused input unless allow_unused (nil) or materialize_grads (zeros)", function()
    local x, u = leaf({1, 2, 3}), leaf({1})
    support.expect_error(function() local _ = ag.grad((x * 2):sum(), {x, u}) end,
      "autograd.grad: inputs[2] appears to not have been used in the graph")
    local r = ag.grad((x * 2):sum(), {x, u}, {allow_unused = true})
    near({2, 2, 2}, r[1])
    assert.is_nil(r[2])
    near({0}, ag.grad((x * 2):sum(), {x, u}, {materialize_grads = true})[2])
  end)

  it("leaves a model's .grad and its gradient reducer alone", function()
    local m = accel.nn.Linear(3, 1)
    local r = accel.ddp.Reducer(m, {finalize_in_backward = true})
    local inp = accel.randn(4, 3):requires_grad_()
    local gi = ag.grad(m(inp):sum(), inp)[1]
    support.assert_close(gi, m.weight:detach():expand(4, 3), 0) -- d(sum x W^T + b)/dx: each row is W
    assert.is_nil(m.weight.grad)
    assert.are.equal(0, r:stats().hook_calls)
    assert.is_false(r:active())
    r:close()
  end)

  it("goes through activation checkpointing's recompute", function()
    local x = leaf({0.5, 1.5})
    local y = accel.utils.checkpoint(function(v) return (v * v):exp() end, x, {use_reentrant = false})
    near({2 * 0.5 * math.exp(0.25), 2 * 1.5 * math.exp(2.25)}, ag.grad(y:sum(), x)[1], 1e-12)
    assert.is_nil(x.grad)
  end)

  it("refuses what it cannot do, naming it", function()
    local x = leaf({1, 2})
    support.expect_error(function() local _ = ag.grad((x * 2):sum(), x, {create_graph = true}) end,
      "autograd.grad: create_graph = true is not supported")
    support.expect_error(function() local _ = ag.grad(x * 2, x) end,
      "autograd.grad: grad can be implicitly created only for one-element outputs")
    support.expect_error(function() local _ = ag.grad((x * 2):sum(), accel.ones(2)) end,
      "autograd.grad: inputs[1] does not require grad")
    support.expect_error(function() local _ = ag.grad(accel.ones(1):sum(), x) end,
      "autograd.grad: element 1 of tensors does not require grad")
  end)
end)
