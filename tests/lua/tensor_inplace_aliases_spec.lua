-- In-place forms, second names and small methods of torch's tensor API
-- (accel.tensor_aliases). Expected values are PyTorch 2.15's, printed by
-- the same calls (with dims made 1-based), and its error messages.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")

-- float32 tensors from literals (LuaJIT reads 1.0 as an integer)
local function f(data) return accel.tensor(data, {dtype = accel.float32}) end

local function flat(t) return t:reshape(-1):double():tolist() end

local function near(expected, t)
  local got = flat(t)
  assert.are.equal(#expected, #got)
  for i = 1, #expected do assert(math.abs(expected[i] - got[i]) <= 1e-6 * math.max(1, math.abs(expected[i])),
    ("element %d: %s vs %s"):format(i, expected[i], got[i])) end
end

local function fails(pattern, f) assert.matches(pattern, support.errmsg(f), 1, true) end

describe("in-place forms", function()
  local function a() return f({{1.5, -2.0}, {0.25, 3.0}}) end

  it("write the op's result into the tensor itself", function()
    local t = a()
    assert.are.equal(t, t:cumsum_(2))
    near({1.5, -0.5, 0.25, 3.25}, t)
    near({1.5, -3.0, 0.25, 0.75}, a():cumprod_(2))
    near({0, 1, 1, 0}, a():logical_and_(f({{0.0, 1.0}, {1.0, 0.0}})))
    near({0, 3.4028234663852886e+38, -3.4028234663852886e+38, 1}, f({0 / 0, math.huge, -math.huge, 1}):nan_to_num_())
    near({0.4769362807273865, -0.17914345860481262}, f({0.5, -0.2}):erfinv_())
    near({2, 8}, f({1.0, 3.0}):exp2_())
    near({0.5, 0, 0.25, 0}, a():frac_())
    near({1.0, 0.6366197466850281}, f({0.0, 0.5}):sinc_())
    near({-1.0986123085021973, 0}, f({0.25, 0.5}):logit_())
    near({5, 13}, f({3.0, 5.0}):hypot_(f({4.0, 12.0})))
    near({0, 2.1972246170043945}, f({0.0, 2.0}):xlogy_(f({0.0, 3.0})))
    near({0, 0.5, 1}, f({-1.0, 0.0, 2.0}):heaviside_(f({0.5})))
    near({0.75, -1, 0.125, 1.5}, a():divide_(2))
    near({1, -2, 0, 3}, a():fix())
  end)

  it("refuse a result that cannot be cast to the tensor's dtype, a leaf that requires grad", function()
    fails("erfinv_: result type Float can't be cast to the desired output type Long",
      function() return accel.tensor({1, 2}):erfinv_() end)
    fails("cumsum_: result type Long can't be cast to the desired output type Bool",
      function() return accel.tensor({true, false}):cumsum_(1) end)
    fails("frac_", function() return accel.ones(2, {requires_grad = true}):frac_() end)
  end)
end)

describe("further tensor methods", function()
  it("adjoint, is_same_size, is_nonzero, get_device, split_with_sizes, narrow_copy, diagflat", function()
    assert.same({{0, 3}, {1, 4}, {2, 5}}, accel.arange(6):reshape(2, 3):adjoint():tolist())
    assert.is_true(accel.ones(2, 2):is_same_size(accel.zeros(2, 2)))
    assert.is_false(accel.ones(2, 2):is_same_size(accel.zeros(4)))
    assert.is_false(f({0.0}):is_nonzero())
    assert.is_true(accel.tensor({2}):is_nonzero())
    fails("Boolean value of Tensor with more than one value is ambiguous", function() return accel.ones(2):is_nonzero() end)
    assert.are.equal(-1, accel.ones(1, {device = "cpu"}):get_device())
    local parts = accel.arange(6):split_with_sizes({2, 4})
    assert.same({{0, 1}, {2, 3, 4, 5}}, {parts[1]:tolist(), parts[2]:tolist()})
    local a = f({{1.5, -2.0}, {0.25, 3.0}})
    local c = a:narrow_copy(1, 2, 1)
    c:fill_(0)
    assert.same({{1.5, -2.0}, {0.25, 3.0}}, a:tolist())
    assert.same({{0, 1, 0}, {0, 0, 2}, {0, 0, 0}}, accel.tensor({1, 2}):diagflat(1):tolist())
    assert.same({{0, 1, 0}, {0, 0, 2}, {0, 0, 0}}, accel.diagflat(accel.tensor({1, 2}), 1):tolist())
  end)

  it("logaddexp2, dist, sum_to_size, dsplit", function()
    near({2.0, 3.5849623680114746}, f({1.0, 3.0}):logaddexp2(f({1.0, 2.0})))
    near({5}, f({1.0, 2.0}):dist(f({4.0, 6.0})))
    near({7}, f({1.0, 2.0}):dist(f({4.0, 6.0}), 1))
    local s = accel.ones(2, 3, 4):sum_to_size(3, 1)
    assert.same({{8}, {8}, {8}}, s:tolist())
    fails("sum_to_size: size {2} is not expandable to size {2, 3}", function() return accel.ones(2, 3):sum_to_size(2) end)
    assert.are.equal(3, #accel.arange(12):reshape(1, 2, 6):dsplit(3))
    fails("dsplit: requires a tensor with at least 3 dimensions, but got a tensor with 2 dimensions",
      function() return accel.ones(2, 2):dsplit(2) end)
  end)
end)
