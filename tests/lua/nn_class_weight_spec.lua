-- The per-class weight of cross_entropy / nll_loss and of their modules.
-- Expected values are PyTorch 2.15's for the same calls
-- (F.cross_entropy(x, y, weight=w, reduction=..., label_smoothing=...)),
-- printed to 8 digits; the gradient too.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local F, nn = accel.nn.functional, accel.nn

local function f(data) return accel.tensor(data, {dtype = accel.float32}) end

local function near(expected, t, tol) support.assert_near(expected, t, tol or 2e-6) end

local function logits() return f({{1.0, 2, 0.5}, {0.1, -1, 3}, {2, 2, 2}, {0.3, 0.2, 0.1}}) end
local ids = function() return accel.tensor({0, 2, 1, -100}) end -- (the last one ignored)
local weight = function() return f({0.2, 1.0, 3.0}) end

describe("cross_entropy with a per-class weight", function()
  it("gives torch's values for each reduction, with and without label smoothing", function()
    local x, y, w = logits(), ids(), weight()
    near({0.38185924}, F.cross_entropy(x, y, {weight = w}))
    near({0.47178262}, F.cross_entropy(x, y, {weight = w, label_smoothing = 0.1}))
    near({1.60380876}, F.cross_entropy(x, y, {weight = w, reduction = "sum"}))
    near({1.98148692}, F.cross_entropy(x, y, {weight = w, reduction = "sum", label_smoothing = 0.1}))
    near({0.29287377, 0.21232268, 1.09861231, 0}, F.cross_entropy(x, y, {weight = w, reduction = "none"}))
    near({0.48526469, 0.35366547, 1.14255679, 0},
      F.cross_entropy(x, y, {weight = w, reduction = "none", label_smoothing = 0.1}))
    near({0.38185924}, F.cross_entropy(x, y, w)) -- torch's third positional argument
  end)

  it("gives torch's gradient", function()
    local x = logits():requires_grad_()
    F.cross_entropy(x, ids(), {weight = weight(), label_smoothing = 0.1}):backward()
    near({-0.02682739, 0.03995162, -0.01312424, 0.03307665, 0.00360212, -0.03667879,
      0.08095238, -0.13968255, 0.05873015, 0, 0, 0}, x.grad)
  end)

  it("weights probability targets as torch (mean over samples)", function()
    local x, w = logits(), weight()
    local p = f({{1.0, 0, 0}, {0, 2, 0}, {1, 1, 1}, {0, 0, 3}}):softmax(2)
    near({2.28723240}, F.cross_entropy(x, p, {weight = w, label_smoothing = 0.2}))
    near({9.14892960}, F.cross_entropy(x, p, {weight = w, label_smoothing = 0.2, reduction = "sum"}))
    near({1.65627098, 2.95678020, 1.53805721, 2.99782109},
      F.cross_entropy(x, p, {weight = w, label_smoothing = 0.2, reduction = "none"}))
  end)

  it("handles (N, C, d) and (C) inputs, half inputs and an all-ignored batch as torch", function()
    local x3 = accel.arange(24, {dtype = accel.float32}):reshape({2, 3, 4}):sin()
    local y3 = accel.tensor({{0, 1, 2, 1}, {2, 2, 0, -100}})
    near({1.06084096}, F.cross_entropy(x3, y3, {weight = weight()}))
    near({1.08034110}, F.cross_entropy(x3, y3, {weight = weight(), label_smoothing = 0.3}))
    near({0.40760598}, F.cross_entropy(f({1, 2, 3}), accel.tensor(2), {weight = weight()}))
    local half = F.cross_entropy(logits():bfloat16(), ids(), {weight = weight():bfloat16()})
    assert.are.equal(accel.bfloat16, half.dtype)
    near({0.38281250}, half)
    near({0 / 0}, F.cross_entropy(logits(), accel.tensor({-100, -100, -100, -100}), {weight = weight()}))
  end)

  it("refuses a weight of the wrong size or dtype, naming it", function()
    support.expect_error(function() local _ = F.cross_entropy(logits(), ids(), {weight = accel.ones(2)}) end,
      "cross_entropy: weight tensor should be defined either for all 3 classes or no classes but got weight tensor of shape: [2]")
    support.expect_error(function() local _ = F.nll_loss(logits(), ids(), {weight = accel.ones(3, 1)}) end,
      "nll_loss: weight tensor should be defined either for all 3 classes or no classes but got weight tensor of shape: [3, 1]")
    support.expect_error(function() local _ = F.cross_entropy(logits(), ids(), {weight = accel.ones({3}, {dtype = accel.float64})}) end,
      "cross_entropy: weight must have the input's dtype (float32), got float64")
    support.expect_error(function() local _ = nn.CrossEntropyLoss({weight = {1, 2, 3}}) end,
      "CrossEntropyLoss: weight must be a tensor, got table")
  end)
end)

describe("nll_loss with a per-class weight", function()
  it("gives torch's values (mean divides by the picked weights)", function()
    local lp = logits():log_softmax(2)
    near({0.38185924}, F.nll_loss(lp, ids(), {weight = weight()}))
    near({1.60380876}, F.nll_loss(lp, ids(), weight(), {reduction = "sum"}))
    near({0.29287377, 0.21232268, 1.09861231, 0}, F.nll_loss(lp, ids(), {weight = weight(), reduction = "none"}))
  end)
end)

describe("CrossEntropyLoss / NLLLoss with a weight", function()
  it("keep it as a buffer in state_dict and use it, as torch", function()
    local m = nn.CrossEntropyLoss(weight())
    near({0.2, 1.0, 3.0}, m:state_dict().weight)
    assert.is_nil(next(nn.CrossEntropyLoss():state_dict()))
    near({0.38185924}, m(logits(), ids()))
    near({0.47178262}, nn.CrossEntropyLoss({weight = weight(), label_smoothing = 0.1})(logits(), ids()))
    near({0.38185924}, nn.NLLLoss({weight = weight()})(logits():log_softmax(2), ids()))
  end)
end)
