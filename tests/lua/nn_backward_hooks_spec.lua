-- Module backward hooks, as PyTorch's register_full_backward_hook /
-- register_full_backward_pre_hook. A Linear layer y = x W^T + b with a loss
-- sum(y * c) has grad_output c, grad_input c W, W's gradient c^T x: the
-- expected values below are those closed forms; the calls, their order and
-- their arguments are PyTorch's documented behaviour.
local accel = require("accel")
local nn = accel.nn
local support = dofile("tests/lua/support.lua")

local f64 = accel.float64

local function tensor(data, grad) return accel.tensor(data, {dtype = f64, requires_grad = grad or false}) end

local function linear()
  local m = nn.Linear(2, 2, {dtype = f64})
  accel.no_grad(function()
    m.weight:copy_(tensor({{1, 2}, {3, 4}}))
    m.bias:copy_(tensor({0.5, -0.5}))
  end)
  return m
end

local C = {{1, 10}}             -- grad_output
local CW = {{31, 42}}           -- c W
local CTX = {{1, 2}, {10, 20}}  -- c^T x for x = (1, 2)

local function same(expected, t) assert.are.same(expected, t:tolist()) end

describe("register_full_backward_hook", function()
  it("sees grad_input and grad_output once per backward, after the module's gradients", function()
    local m, x = linear(), tensor({{1, 2}}, true)
    local calls = {}
    m:register_full_backward_hook(function(mod, gi, go)
      calls[#calls + 1] = {mod = mod, gi = gi, go = go}
    end)
    ;(m(x) * tensor(C)):sum():backward()
    assert.are.equal(1, #calls)
    assert.are.equal(m, calls[1].mod)
    assert.are.equal(1, calls[1].gi.n)
    same(CW, calls[1].gi[1])
    same(C, calls[1].go[1])
    same(CW, x.grad)
    same(CTX, m.weight.grad)
  end)

  it("a returned grad_input replaces the input's gradient; the parameters' are unchanged", function()
    local m, x = linear(), tensor({{1, 2}}, true)
    m:register_full_backward_hook(function(_, gi) return {gi[1] * 2} end)
    ;(m(x) * tensor(C)):sum():backward()
    same({{62, 84}}, x.grad)
    same(CTX, m.weight.grad)
  end)

  it("without an input that requires grad, grad_input is all nil", function()
    local m, x = linear(), tensor({{1, 2}})
    local seen
    m:register_full_backward_hook(function(_, gi, go) seen = {gi = gi, go = go} end)
    ;(m(x) * tensor(C)):sum():backward()
    assert.are.equal(1, seen.gi.n)
    assert.is_nil(seen.gi[1])
    same(C, seen.go[1])
    same(CTX, m.weight.grad)
  end)

  it("one grad_input entry per argument: nil for those that are not tensors, zeros for a tensor without grad", function()
    local Mul = nn.Module:extend("Mul")
    function Mul:init() end
    function Mul:forward(a, scale, b) return a * b * scale end
    local m = Mul()
    local a, b = tensor({2, 3}, true), tensor({5, 7})
    local seen
    m:register_full_backward_hook(function(_, gi) seen = gi end)
    m(a, 10, b):sum():backward()
    assert.are.equal(3, seen.n)
    same({50, 70}, seen[1]) -- 10 b
    assert.is_nil(seen[2])
    same({0, 0}, seen[3]) -- PyTorch 2.15 gives zeros there too
    same({50, 70}, a.grad)
  end)

  it("a hook returning the wrong number of gradients is an error naming the hook", function()
    local m, x = linear(), tensor({{1, 2}}, true)
    m:register_full_backward_hook(function(_, gi) return {gi[1], gi[1]} end)
    local err = support.errmsg(function() (m(x) * tensor(C)):sum():backward() end)
    assert.matches("register_full_backward_hook returned an invalid number of grad_input, got 2, but expected 1",
      err, 1, true)
  end)

  it("handle:remove() takes it off; under no_grad no hook runs", function()
    local m, x = linear(), tensor({{1, 2}}, true)
    local calls = 0
    local h = m:register_full_backward_hook(function() calls = calls + 1 end)
    accel.no_grad(function() return m(x) end)
    ;(m(x) * tensor(C)):sum():backward()
    h:remove()
    ;(m(x) * tensor(C)):sum():backward()
    assert.are.equal(1, calls)
  end)

  it("in a Sequential the hooks fire from the last module to the first", function()
    local seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    local order = {}
    for i = 1, 3 do seq[i]:register_full_backward_hook(function() order[#order + 1] = i end) end
    seq(accel.randn(4, 2)):sum():backward()
    assert.are.same({3, 2, 1}, order)
  end)

  it("PyTorch's deprecated register_backward_hook is refused, naming the replacement", function()
    local err = support.errmsg(function() return nn.Linear(1, 1).register_backward_hook end)
    assert.matches("register_full_backward_hook", err, 1, true)
  end)
end)

describe("register_full_backward_pre_hook", function()
  it("sees grad_output before the module's backward and may replace it", function()
    local m, x = linear(), tensor({{1, 2}}, true)
    local order, full_go = {}, nil
    m:register_full_backward_pre_hook(function(mod, go)
      assert.are.equal(m, mod)
      order[#order + 1] = "pre"
      same(C, go[1])
      return {go[1] * 3}
    end)
    m:register_full_backward_hook(function(_, _, go)
      order[#order + 1] = "full"
      full_go = go[1]
    end)
    ;(m(x) * tensor(C)):sum():backward()
    assert.are.same({"pre", "full"}, order)
    same({{3, 30}}, full_go)
    same({{93, 126}}, x.grad)              -- 3 c W
    same({{3, 6}, {30, 60}}, m.weight.grad) -- 3 c^T x
  end)
end)
