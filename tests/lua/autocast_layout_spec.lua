-- bf16 autocast of a matrix used transposed (w:t(), as HF's Conv1D does):
-- core/precision.c casts it in storage order and hands GEMM the transposed
-- layout. Values and gradients must equal those of the same weight made
-- contiguous first; both against a float32 reference on bf16-rounded inputs.
local accel = require("accel")
local F = accel.nn.functional
local C = accel._C

local function max_diff(a, b) return (a:float() - b:float()):abs():max():item() end

describe("autocast and transposed weights", function()
  before_each(function() accel.set_seed(21) end)

  it("linear(x, W:t(), b) under bf16 autocast = the contiguous weight's result", function()
    local x = accel.randn(6, 40)
    local W1 = accel.randn(40, 24, {requires_grad = true}) -- stored (in, out)
    local W2 = W1:detach():clone():requires_grad_(true)
    local b = accel.randn(24)
    local prev = C.set_autocast(accel.bfloat16)
    local y1 = F.linear(x, W1:t(), b)
    local y2 = F.linear(x, W2:t():contiguous(), b)
    C.set_autocast(prev)
    assert.equal(accel.bfloat16, y1.dtype)
    assert.is_true(max_diff(y1, y2) == 0)
    local ref = x:bfloat16():float():matmul(W1:detach():bfloat16():float()) + b
    assert.is_true(max_diff(y1, ref) <= ref:abs():max():item() / 128) -- bf16 output rounding
    local g = accel.randn(6, 24)
    y1:float():backward(g)
    y2:float():backward(g)
    assert.is_true(max_diff(W1.grad, W2.grad) < 1e-6)
    local gref = x:bfloat16():float():t():matmul(g:bfloat16():float())
    assert.is_true(max_diff(W1.grad, gref) <= gref:abs():max():item() / 128)
  end)
end)
