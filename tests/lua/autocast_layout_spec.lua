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

-- As torch, autocast rounds the bias of linear and conv2d to the autocast
-- dtype with the other operands (29 of the 64 linear outputs below differ
-- when the float32 bias is added unrounded). Expected values: PyTorch 2.15,
-- F.linear / F.conv2d under torch.autocast("cpu", dtype) on the same
-- inputs, and the float32 bias's gradient of sum(y:float()^2).
describe("autocast and the bias", function()
  local function seq(n, a, m, d) -- ((k * a) % m - m // 2) / d, k = 0 .. n - 1
    local t = {}
    for k = 0, n - 1 do t[#t + 1] = ((k * a) % m - m // 2) / d end
    return t
  end
  local function run(dt, fn, ...)
    local prev = C.set_autocast(dt)
    local ok, y = pcall(fn, ...)
    C.set_autocast(prev)
    assert(ok, y)
    assert.are.equal(dt, y.dtype)
    return y
  end
  local LINEAR = {
    [accel.bfloat16] = {y = {-0.171875, -0.212890625, 0.84765625, 0.10595703125, 0.06298828125, 1.125, 0.380859375,
      0.337890625, -0.6015625, 0.65625, 0.61328125, -0.328125, 0.9296875, 0.88671875, -0.05224609375, 1.1015625,
      -0.91796875, -0.396484375, 1.1171875, -0.62890625, -0.1103515625, 1.40625, -0.34375, 0.17578125, -0.310546875,
      -0.056640625, 0.462890625, -0.0262451171875, 0.228515625, 0.74609375, 0.259765625, 0.515625, -1.265625,
      -0.1865234375, 1.78125, -0.96875, 0.11083984375, 2.078125, -0.671875, 0.408203125, 0.375, -0.375, 0.70703125,
      0.671875, -0.07861328125, 1.0, 0.96875, 0.328125, -1.2265625, 0.41796875, 1.2734375, -0.9140625, 0.7265625,
      1.578125, -0.609375, 1.0390625, -0.111328125, -0.298828125, 1.34375, 0.1953125, 0.0084228515625, 1.6484375,
      0.50390625, 0.53515625},
      grad = {-7.15625, -0.7578125, 10.0625, -4.8125, 1.578125, 12.375, -2.484375, 3.921875, -1.296875, -0.1484375,
        6.25, 1.0234375, 2.171875, 8.5625, 3.359375, 4.96875}},
    [accel.float16] = {y = {-0.170166015625, -0.2127685546875, 0.84521484375, 0.105224609375, 0.0628662109375,
      1.12109375, 0.380859375, 0.33837890625, -0.603515625, 0.65625, 0.61376953125, -0.328125, 0.931640625,
      0.8896484375, -0.0523681640625, 1.0986328125, -0.916015625, -0.39697265625, 1.1142578125, -0.6298828125,
      -0.1103515625, 1.4013671875, -0.34326171875, 0.17626953125, -0.3125, -0.0567626953125, 0.46240234375,
      -0.0260009765625, 0.2298583984375, 0.74951171875, 0.2607421875, 0.5166015625, -1.267578125, -0.1866455078125,
      1.7783203125, -0.97021484375, 0.1109619140625, 2.076171875, -0.6728515625, 0.40869140625, 0.373046875,
      -0.375244140625, 0.70556640625, 0.67041015625, -0.07763671875, 1.00390625, 0.96826171875, 0.32861328125,
      -1.224609375, 0.418212890625, 1.2705078125, -0.916015625, 0.7265625, 1.5791015625, -0.607421875, 1.03515625,
      -0.112548828125, -0.29931640625, 1.34375, 0.19580078125, 0.0093994140625, 1.65234375, 0.50439453125, 0.53515625},
      grad = {-7.15625, -0.75634765625, 10.015625, -4.8203125, 1.580078125, 12.359375, -2.484375, 3.91796875,
        -1.310546875, -0.150146484375, 6.25, 1.0244140625, 2.1875, 8.59375, 3.361328125, 4.95703125}},
  }
  local CONV = {
    [accel.bfloat16] = {y = {11.875, 6.0, 4.3125, 6.96875, 7.125, 8.125, 6.84375, 9.0625, 5.25, 5.125, 5.625, 4.8125,
      4.21875, 2.3125, 4.21875, 3.875, 4.0, 6.5625, -13.0625, -11.6875, -6.125, -9.9375, -8.5, -11.1875, -10.5625,
      -12.5, -9.0}, grad = {131.0, 81.5, -185.0}},
    [accel.float16] = {y = {11.8828125, 6.00390625, 4.296875, 6.96875, 7.12109375, 8.1328125, 6.83203125, 9.046875,
      5.2265625, 5.12109375, 5.6171875, 4.80078125, 4.21484375, 2.294921875, 4.1953125, 3.86328125, 4.00390625,
      6.55859375, -13.046875, -11.6640625, -6.10546875, -9.9453125, -8.4609375, -11.1484375, -10.515625, -12.4453125,
      -9.0}, grad = {131.0, 81.3125, -184.625}},
  }

  for _, dt in ipairs({accel.bfloat16, accel.float16}) do
    it("linear under " .. tostring(dt) .. " autocast rounds the bias as torch does", function()
      local x = accel.tensor(seq(32, 37, 101, 64)):reshape(4, 8)
      local w = accel.tensor(seq(128, 53, 127, 128)):reshape(16, 8)
      local bias = {}
      for k = 0, 15 do bias[#bias + 1] = ((k * 12345) % 997) / 997 * 2 - 1 + 1 / 3 end
      local b = accel.tensor(bias):requires_grad_(true)
      local y = run(dt, F.linear, x, w, b)
      assert.are.same(LINEAR[dt].y, y:flatten():float():tolist())
      y:float():pow(2):sum():backward()
      assert.are.equal(accel.float32, b.grad.dtype)
      assert.are.same(LINEAR[dt].grad, b.grad:tolist())
    end)

    it("conv2d under " .. tostring(dt) .. " autocast rounds the bias as torch does", function()
      local img = accel.tensor(seq(50, 29, 103, 32)):reshape(1, 2, 5, 5)
      local k = accel.tensor(seq(54, 41, 109, 64)):reshape(3, 2, 3, 3)
      local b = accel.tensor({1 / 3 + 7, -2 / 3 + 5, 5 / 7 - 11}):requires_grad_(true)
      local y = run(dt, F.conv2d, img, k, b)
      assert.are.same(CONV[dt].y, y:flatten():float():tolist())
      y:float():pow(2):sum():backward()
      assert.are.equal(accel.float32, b.grad.dtype)
      assert.are.same(CONV[dt].grad, b.grad:tolist())
      -- an input already in the autocast dtype (a previous layer's output): the same values
      -- (img's are exact in both dtypes), the float32 bias cast all the same
      assert.are.same(CONV[dt].y, run(dt, F.conv2d, img:to(dt), k, b):flatten():float():tolist())
    end)
  end
end)

-- torch 2.15 under torch.autocast("cpu", dtype=torch.bfloat16) with float32 inputs: addmm, baddbmm and
-- scaled_dot_product_attention give bfloat16 (CPU autocast's lower-precision list); cumsum, mv and the inner
-- product of two vectors keep float32 (on no list), and cumsum's values are float32's
describe("autocast and the ops built from others", function()
  before_each(function() accel.set_seed(22) end)

  local function under_bf16(fn)
    local prev = C.set_autocast(accel.bfloat16)
    local ok, a, b = pcall(fn)
    C.set_autocast(prev)
    assert(ok, a)
    return a, b
  end

  it("addmm, baddbmm and scaled_dot_product_attention give the autocast dtype", function()
    local t, m1, m2 = accel.randn(3, 5), accel.randn(3, 4), accel.randn(4, 5)
    local q, k, v = accel.randn(2, 4, 8), accel.randn(2, 4, 8), accel.randn(2, 4, 8)
    local y, z = under_bf16(function() return accel.addmm(t, m1, m2), t:unsqueeze(1):baddbmm(m1:unsqueeze(1), m2:unsqueeze(1)) end)
    assert.are.equal(accel.bfloat16, y.dtype)
    assert.are.equal(accel.bfloat16, z.dtype)
    local ref = (t:bfloat16():float() + m1:bfloat16():float():matmul(m2:bfloat16():float()))
    assert.is_true(max_diff(y, ref) <= ref:abs():max():item() / 64)
    local a = under_bf16(function() return F.scaled_dot_product_attention(q, k, v, {is_causal = true}) end)
    assert.are.equal(accel.bfloat16, a.dtype)
    local a_ref = F.scaled_dot_product_attention(q:bfloat16(), k:bfloat16(), v:bfloat16(), {is_causal = true})
    assert.is_true(max_diff(a, a_ref) == 0)
  end)

  it("cumsum, mv and a vector inner product keep float32, with float32's values", function()
    local x = accel.arange(1, 301):float() * 1.001
    local c = under_bf16(function() return x:cumsum(1) end)
    assert.are.equal(accel.float32, c.dtype)
    assert.is_true(max_diff(c, x:cumsum(1)) == 0)
    local c64 = under_bf16(function() return x:cumsum(1, {dtype = accel.float64}) end)
    assert.are.equal(accel.float64, c64.dtype)
    local m, vec = accel.randn(3, 4), accel.randn(4)
    local y = under_bf16(function() return m:mv(vec) end)
    assert.are.equal(accel.float32, y.dtype)
    assert.is_true(max_diff(y, m:mv(vec)) == 0)
    local i = under_bf16(function() return accel.inner(vec, vec) end)
    assert.are.equal(accel.float32, i.dtype)
  end)
end)
