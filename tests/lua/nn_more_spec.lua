-- nn.utils.rnn.pad_sequence / unpad_sequence, the in-place functional
-- forms (F.relu_, ...) and the convolutions' padding_mode. Expected values
-- are PyTorch 2.15's for the same calls; gradients are closed forms.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local F, rnn = accel.nn.functional, accel.nn.utils.rnn
local unpack = table.unpack or unpack -- luacheck: ignore (LuaJIT)

local function f(data) return accel.tensor(data, {dtype = accel.float32}) end
local function flat(t) return t:reshape(-1):double():tolist() end
local function near(expected, t, tol) support.assert_near(expected, t, tol or 1e-4) end

describe("nn.utils.rnn.pad_sequence", function()
  local function seqs() return accel.arange(6, {dtype = accel.float32}):reshape({3, 2}), f({{10, 11}}) end

  it("stacks sequences time-first or batch-first, padded as torch", function()
    local a, b = seqs()
    local p = rnn.pad_sequence({a, b})
    assert.are.same({3, 2, 2}, p.shape)
    near({0, 1, 10, 11, 2, 3, 0, 0, 4, 5, 0, 0}, p)
    near({1, 2, 3, 4, -1, -1}, rnn.pad_sequence({accel.tensor({1, 2, 3}), accel.tensor({4})}, {batch_first = true,
      padding_value = -1}))
    near({1, 2, 3, 0, 0, 4}, rnn.pad_sequence({accel.tensor({1, 2, 3}), accel.tensor({4})}, true, 0, "left"))
  end)

  it("passes gradients back to each sequence", function()
    local a, b = seqs()
    a:requires_grad_()
    b:requires_grad_()
    local p = rnn.pad_sequence({a, b}, true) -- (2, 3, 2)
    p:mul(accel.arange(1, 13, {dtype = accel.float32}):reshape({2, 3, 2})):sum():backward()
    near({1, 2, 3, 4, 5, 6}, a.grad)
    near({7, 8}, b.grad)
  end)

  it("unpad_sequence gives the sequences back", function()
    local a, b = seqs()
    local out = rnn.unpad_sequence(rnn.pad_sequence({a, b}), accel.tensor({3, 1}))
    assert.are.equal(2, #out)
    near(flat(a), out[1])
    near(flat(b), out[2])
  end)

  it("refuses an empty list, mismatched trailing shapes and PackedSequence, naming them", function()
    support.expect_error(function() local _ = rnn.pad_sequence({}) end, "pad_sequence: received an empty list of sequences")
    support.expect_error(function() local _ = rnn.pad_sequence({accel.ones(2, 3), accel.ones(2, 4)}) end,
      "pad_sequence: sequence 2 has trailing shape [4], sequence 1 has [3]")
    support.expect_error(function() local _ = rnn.pad_sequence({accel.ones(2)}, {padding_side = "middle"}) end,
      'pad_sequence: padding_side must be "left" or "right"')
    support.expect_error(function() local _ = rnn.pack_padded_sequence end,
      "accel.nn.utils.rnn.pack_padded_sequence is not provided")
  end)
end)

describe("in-place functional forms", function()
  it("write the activation into the input, as torch", function()
    local x = f({-1, 2})
    assert.are.equal(x, F.relu_(x))
    near({0, 2}, x)
    -- {function, input, its other arguments, torch's result}
    for _, case in ipairs({{"hardtanh_", {-3, 0.5, 3}, {-1, 1}, {-1, 0.5, 1}}, {"elu_", {-1, 2}, {}, {-0.6321, 2}},
      {"celu_", {-1, 2}, {2.0}, {-0.7869, 2}}, {"selu_", {-1, 2}, {}, {-1.1113, 2.1014}},
      {"leaky_relu_", {-1, 2}, {0.5}, {-0.5, 2}}, {"threshold_", {-1, 2}, {0.5, 9}, {9, 2}}}) do
      local t = f(case[2])
      F[case[1]](t, unpack(case[3]))
      near(case[4], t)
    end
    support.expect_error(function() F.relu_(f({1}), {inplace = false}) end, "relu_: inplace = false contradicts the in-place form")
  end)
end)

-- Conv2d / Conv1d padding_mode: PyTorch 2.15's outputs for the same
-- weights (arange / 10) and input (arange)
describe("convolution padding_mode", function()
  local function conv2d(mode, o)
    o = o or {}
    local c = accel.nn.Conv2d(1, o.out or 2, 3, {padding = o.padding or 1, dilation = o.dilation, padding_mode = mode,
      bias = false})
    accel.no_grad(function() c.weight:copy_(accel.arange(c.weight:numel(), {dtype = accel.float32}):reshape(c.weight.shape) / 10) end)
    return c
  end
  local x = function() return accel.arange(16, {dtype = accel.float32}):reshape({1, 1, 4, 4}) end

  it("pads with F.pad in that mode, then convolves, as torch", function()
    for mode, want in pairs({reflect = {{12, 13.8, 17.4, 18}, 1960.8}, replicate = {{9.9, 12.6, 16.2, 18.3}, 2023.2},
      circular = {{16.2, 16.2, 19.8, 17.4}, 1836}}) do
      local y = conv2d(mode)(x())
      assert.are.same({1, 2, 4, 4}, y.shape)
      near(want[1], y[1][1][1])
      near({want[2]}, y:sum())
    end
    local same = conv2d("reflect", {out = 1, padding = "same", dilation = 2})
    local y = same(x())
    near({24, 25.8, 24.6, 25.2, 36, 37.8}, y:reshape(-1):narrow(1, 1, 6))
    near({494.4}, y:sum())
    assert.matches("padding=same, dilation=(2, 2), bias=False, padding_mode=reflect", tostring(same), 1, true)
    local c1 = accel.nn.Conv1d(1, 1, 3, {padding = 2, padding_mode = "circular", bias = false})
    accel.no_grad(function() c1.weight:copy_(f({{{1, 2, 3}}})) end)
    near({11, 7, 8, 14, 20, 11, 7}, c1(accel.arange(5, {dtype = accel.float32}):reshape({1, 1, 5})))
  end)

  it("refuses a mode torch does not have", function()
    support.expect_error(function() local _ = accel.nn.Conv2d(1, 1, 3, {padding_mode = "mirror"}) end,
      "Conv2d: padding_mode must be one of 'zeros', 'reflect', 'replicate', 'circular', got 'mirror'")
  end)
end)

-- torch 2.6's get_total_norm / clip_grads_with_norm_: torch 2.15's values
describe("nn.utils.get_total_norm and clip_grads_with_norm_", function()
  it("give torch's norms and scale the gradients as clip_grad_norm_ would", function()
    local U = accel.nn.utils
    local a, b = f({3, 4}), f({{1, -2}, {2, 0}})
    near({5.8310}, U.get_total_norm({a, b}), 1e-4)
    near({12}, U.get_total_norm({a, b}, 1))
    near({4}, U.get_total_norm({a, b}, math.huge))
    near({0}, U.get_total_norm({}))
    local p, q = accel.nn.Parameter(accel.ones(2)), accel.nn.Parameter(accel.ones(2))
    p.grad, q.grad = f({3, 4}), f({0, 12})
    local total = U.get_total_norm({p.grad, q.grad})
    near({13}, total)
    U.clip_grads_with_norm_({p, q}, 6.5, total)
    near({1.5, 2}, p.grad, 1e-6)
    near({0, 6}, q.grad, 1e-6)
    support.expect_error(function() local _ = U.get_total_norm({f({0 / 0})}, {error_if_nonfinite = true}) end,
      "get_total_norm: The total norm of order")
  end)
end)
