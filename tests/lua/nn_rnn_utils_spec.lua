-- nn.utils.rnn.pad_sequence / unpad_sequence and the in-place functional
-- forms (F.relu_, ...). Expected values are PyTorch 2.15's for the same
-- calls; gradients are closed forms.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local F, rnn = accel.nn.functional, accel.nn.utils.rnn

local function f(data) return accel.tensor(data, {dtype = accel.float32}) end
local function flat(t) return t:reshape(-1):double():tolist() end
local function near(expected, t)
  local got = flat(t)
  assert.are.equal(#expected, #got)
  for i = 1, #expected do
    assert(math.abs(expected[i] - got[i]) <= 1e-4 * math.max(1, math.abs(expected[i])),
      ("element %d: expected %s, got %s"):format(i, expected[i], got[i]))
  end
end

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
    local h = f({-3, 0.5, 3})
    F.hardtanh_(h, -1, 1)
    near({-1, 0.5, 1}, h)
    local e = f({-1, 2})
    F.elu_(e)
    near({-0.6321, 2}, e)
    local c = f({-1, 2})
    F.celu_(c, 2.0)
    near({-0.7869, 2}, c)
    local s = f({-1, 2})
    F.selu_(s)
    near({-1.1113, 2.1014}, s)
    local l = f({-1, 2})
    F.leaky_relu_(l, 0.5)
    near({-0.5, 2}, l)
    local t = f({-1, 2})
    F.threshold_(t, 0.5, 9)
    near({9, 2}, t)
    support.expect_error(function() F.relu_(f({1}), {inplace = false}) end, "relu_: inplace = false contradicts the in-place form")
  end)
end)
