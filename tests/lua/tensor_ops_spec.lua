-- tensor_ops_spec.lua: the forward results of tensor operations: elementwise
-- math and operators, broadcasting, type promotion, reductions,
-- comparisons, indexing ops, joining/splitting, matmul, softmax and the
-- losses / layer_norm of accel.nn.functional.
-- Every reference is computed in plain Lua (float64, math.*) from the input
-- values read back with :tolist(), never by accel itself.
local accel = require("accel")
local F = accel.nn.functional
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["// floors and % takes the sign of the divisor (float)"] = support.NO_IDIV,
  ["// and % on integers follow Python (floor) semantics and stay int64"] = support.NO_IDIV,
  ["promotes a and b"] = support.NO_FLOAT_SUBTYPE,
  ["float32 results are the float32 rounding of the exact result"] = support.NO_STRING_PACK,
  ["sum/prod of integers give int64; mean of integers is an error or float like PyTorch"] = support.NO_MATH_TYPE,
  ["masked_fill and masked_fill_ (with a broadcast mask)"] = "reads int64's minimum back (beyond 2^53)",
  ["float32 sum of 10^7 values is accurate (no naive float32 accumulation)"] = support.NO_STRING_PACK,
  ["binary op on a large transposed operand plus a broadcast row"] = support.NO_STRING_PACK,
  ["Lua integers beyond 2^53 meet integer tensors exactly, as Python ints meet torch's"] = support.NO_INT64,
  ["sizes: a nil size is an error, extra view arguments too; shapes compare by value"] =
    "== with a plain table (LuaJIT calls __eq only when both operands share it)",
})
local idiv = support.lua54_binop("//")

---------------------------------------------------------------- helpers

local inf, nan = math.huge, 0 / 0
local flatten, shape_of, f32 = support.flatten, support.shape_of, support.f32

local RTOL32, ATOL32 = 1e-6, 1e-7
local RTOL64, ATOL64 = 1e-12, 1e-14

-- expected vs got, element by element (nested lists or flat), with
-- |got - exp| <= atol + rtol * |exp|; nan matches nan, inf matches inf.
local function assert_close(exp, got, rtol, atol, what)
  rtol, atol = rtol or RTOL32, atol or ATOL32
  local e, g = flatten(exp), flatten(got)
  assert.are.equal(#e, #g, (what or "") .. ": element count")
  for i = 1, #e do
    local x, y = e[i], g[i]
    local ok
    if x ~= x then ok = y ~= y
    elseif x == inf or x == -inf then ok = y == x
    else ok = type(y) == "number" and math.abs(y - x) <= atol + rtol * math.abs(x) end
    if not ok then
      error(("%s: element %d: expected %.17g, got %s"):format(what or "values", i, x, tostring(y)), 2)
    end
  end
end

local function assert_exact(exp, got, what)
  local e, g = flatten(exp), flatten(got)
  assert.are.equal(#e, #g, (what or "") .. ": element count")
  for i = 1, #e do
    if e[i] ~= g[i] then
      error(("%s: element %d: expected %s, got %s"):format(what or "values", i, tostring(e[i]), tostring(g[i])), 2)
    end
  end
end

local function map(list, f)
  local r = {}
  for i, v in ipairs(list) do r[i] = f(v) end
  return r
end

local function map2(a, b, f)
  local r = {}
  for i = 1, #a do r[i] = f(a[i], b[i]) end
  return r
end

-- Reference math not in Lua's math library, in float64.
local SQRT2, SQRT_2_OVER_PI = math.sqrt(2), math.sqrt(2 / math.pi)

-- erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) / (2n+1)!!  (all terms positive)
local function erf(x)
  if x == 0 then return 0.0 end
  if x > 6 then return 1.0 end
  if x < -6 then return -1.0 end
  local term, sum, n = x, x, 0
  repeat
    n = n + 1
    term = term * 2 * x * x / (2 * n + 1)
    sum = sum + term
  until math.abs(term) < 1e-17 * math.abs(sum)
  return 2 / math.sqrt(math.pi) * math.exp(-x * x) * sum
end

local function tanh(x)
  if math.abs(x) < 1e-3 then return x - x ^ 3 / 3 + 2 * x ^ 5 / 15 end
  if x > 20 then return 1.0 end
  if x < -20 then return -1.0 end
  local e = math.exp(2 * x)
  return (e - 1) / (e + 1)
end

local function log1p(x)
  local u = 1 + x
  if u == 1 then return x end
  return math.log(u) * x / (u - 1)
end

local function expm1(x)
  if math.abs(x) < 1e-5 then return x + x * x / 2 + x ^ 3 / 6 end
  return math.exp(x) - 1
end

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end

local function round_half_even(x)
  local f = math.floor(x)
  local d = x - f
  if d > 0.5 then return f + 1 elseif d < 0.5 then return f end
  return (f % 2 == 0) and f or f + 1
end

local function sign(x) return x > 0 and 1.0 or x < 0 and -1.0 or 0.0 end
local function trunc(x) return x >= 0 and math.floor(x) or math.ceil(x) end

-- Inputs: fixed values plus some random normals (read back, so exact).
local SPECIAL = {-3.5, -2.0, -1.25, -0.5, -0.1, 0.0, 0.1, 0.3, 0.5, 1.0, 1.7, 2.5, 4.0}
local function inputs(dtype, positive)
  accel.set_seed(7)
  local vals = {}
  for _, v in ipairs(SPECIAL) do vals[#vals + 1] = v end
  for _, v in ipairs(accel.randn(40, {dtype = accel.float64}):mul(2):tolist()) do vals[#vals + 1] = v end
  if positive then
    for i, v in ipairs(vals) do vals[i] = math.abs(v) + 0.05 end
  end
  return accel.tensor(vals, {dtype = dtype or accel.float32})
end

---------------------------------------------------------------- elementwise unary

local unary = {
  {"neg", function(x) return -x end},
  {"exp", math.exp},
  {"log", math.log, true},
  {"sqrt", math.sqrt, true},
  {"rsqrt", function(x) return 1 / math.sqrt(x) end, true},
  {"tanh", tanh},
  {"sigmoid", sigmoid},
  {"relu", function(x) return x > 0 and x or 0.0 end},
  {"gelu", function(x) return 0.5 * x * (1 + erf(x / SQRT2)) end},
  {"silu", function(x) return x * sigmoid(x) end},
  {"abs", math.abs},
  {"sin", math.sin},
  {"cos", math.cos},
  {"square", function(x) return x * x end},
  {"reciprocal", function(x) return 1 / x end, true},
  {"sign", sign},
  {"log1p", log1p, true},
  {"expm1", expm1},
  {"floor", math.floor},
  {"ceil", math.ceil},
  {"round", round_half_even},
  {"trunc", trunc},
  {"erf", erf},
}

-- The inverse trigonometric and hyperbolic functions and log2 / log10, on
-- inputs inside their domains, against float64 closed forms from Lua's math.
local function asinh(x) return x < 0 and -math.log(-x + math.sqrt(x * x + 1)) or math.log(x + math.sqrt(x * x + 1)) end
local more_unary = {
  {"tan", math.tan, {-1.4, -0.5, 0, 0.3, 1.2}},
  {"asin", math.asin, {-0.99, -0.5, 0, 0.25, 0.9}}, {"arcsin", math.asin, {-0.5, 0.75}},
  {"acos", math.acos, {-0.99, -0.5, 0, 0.25, 0.9}}, {"arccos", math.acos, {-0.5, 0.75}},
  {"atan", function(x) return math.atan(x) end, {-30, -1, 0, 0.5, 4}}, {"arctan", function(x) return math.atan(x) end, {2}},
  {"sinh", function(x) return (math.exp(x) - math.exp(-x)) / 2 end, {-3, -0.5, 0, 1, 4}},
  {"cosh", function(x) return (math.exp(x) + math.exp(-x)) / 2 end, {-3, -0.5, 0, 1, 4}},
  {"asinh", asinh, {-20, -0.5, 0, 1, 4}}, {"arcsinh", asinh, {3}},
  {"acosh", function(x) return math.log(x + math.sqrt(x * x - 1)) end, {1, 1.5, 3, 100}},
  {"atanh", function(x) return 0.5 * math.log((1 + x) / (1 - x)) end, {-0.9, -0.2, 0, 0.5, 0.99}},
  {"log2", function(x) return math.log(x) / math.log(2) end, {0.125, 0.3, 1, 8, 1000}},
  {"log10", function(x) return math.log(x) / math.log(10) end, {0.001, 0.3, 1, 10, 12345}},
}

describe("inverse trigonometric, hyperbolic, log2 and log10", function()
  for _, case in ipairs(more_unary) do
    local name, ref, xs = case[1], case[2], case[3]
    it(name .. " matches the float64 closed form (float32 and float64, in place, accel." .. name .. ")", function()
      for _, dt in ipairs{accel.float32, accel.float64} do
        local x = accel.tensor(xs, {dtype = dt})
        local rtol, atol = dt == accel.float32 and 2e-6 or 1e-13, dt == accel.float32 and 1e-6 or 1e-14
        assert_close(map(x:tolist(), ref), x[name](x):tolist(), rtol, atol, name)
        assert_close(map(x:tolist(), ref), accel[name](x):tolist(), rtol, atol, "accel." .. name)
        local z = x:clone()
        z[name .. "_"](z)
        assert_close(map(x:tolist(), ref), z:tolist(), rtol, atol, name .. "_")
      end
    end)
  end

  -- torch 2.15: asin(2) nan, acosh(0.5) nan, atanh(1) inf, log2(0) -inf, log10(-1) nan
  it("outside the domain: NaN and infinities, as torch", function()
    local function s(v) return v ~= v and "nan" or tostring(v) end
    assert.are.equal("nan", s(accel.tensor({2.0}):asin():item()))
    assert.are.equal("nan", s(accel.tensor({0.5}):acosh():item()))
    assert.are.equal(math.huge, accel.tensor({1.0}):atanh():item())
    assert.are.equal(-math.huge, accel.tensor({0.0}):log2():item())
    assert.are.equal("nan", s(accel.tensor({-1.0}):log10():item()))
  end)

  -- torch 2.15: torch.tensor([1, 8]).log2() is float32 tensor([0., 3.])
  it("an integer input gives float32", function()
    local y = accel.tensor({1, 8}):log2()
    assert.are.equal(accel.float32, y.dtype)
    assert.are.same({0, 3}, y:tolist())
  end)
end)

describe("elementwise unary math", function()
  for _, case in ipairs(unary) do
    local name, ref, positive = case[1], case[2], case[3]
    it(name .. " matches the float64 reference (float32 and float64)", function()
      for _, dt in ipairs{accel.float32, accel.float64} do
        local x = inputs(dt, positive)
        local xs = x:tolist()
        local y = x[name](x)
        assert.are.equal(dt, y.dtype)
        assert.are.same(shape_of(x), shape_of(y))
        local rtol = dt == accel.float32 and RTOL32 or RTOL64
        local atol = dt == accel.float32 and ATOL32 or ATOL64
        if dt == accel.float64 and (name == "erf" or name == "gelu") then rtol, atol = 1e-10, 1e-13 end
        assert_close(map(xs, ref), y:tolist(), rtol, atol, name .. " " .. tostring(dt))
        -- in-place variant gives the same values
        local z = x:clone()
        z[name .. "_"](z)
        assert_close(map(xs, ref), z:tolist(), rtol, atol, name .. "_ " .. tostring(dt))
      end
    end)
  end

  it("gelu with approximate='tanh'", function()
    local x = inputs()
    local ref = map(x:tolist(), function(v) return 0.5 * v * (1 + tanh(SQRT_2_OVER_PI * (v + 0.044715 * v ^ 3))) end)
    assert_close(ref, x:gelu({approximate = "tanh"}):tolist(), RTOL32, ATOL32, "gelu tanh")
    assert_close(ref, F.gelu(x, {approximate = "tanh"}):tolist(), RTOL32, ATOL32, "F.gelu tanh")
    local exact = map(x:tolist(), function(v) return 0.5 * v * (1 + erf(v / SQRT2)) end)
    assert_close(exact, F.gelu(x):tolist(), RTOL32, ATOL32, "F.gelu")
    assert_close(exact, x:gelu({approximate = "none"}):tolist(), RTOL32, ATOL32, "gelu none")
  end)

  -- torch 2.15: "gelu(): argument 'approximate' must be str, not bool"
  it("gelu's approximate must be a string, as torch's", function()
    local x = inputs()
    support.expect_error(function() local _ = x:gelu({approximate = true}) end, "gelu: approximate must be a string", "boolean")
    support.expect_error(function() local _ = F.gelu(x, {approximate = false}) end, "gelu: approximate must be a string")
    support.expect_error(function() local _ = F.gelu(x, {approximate = "exact"}) end, 'must be "none" or "tanh", got "exact"')
  end)

  it("clamp with min, max, both, and an options table", function()
    local x = inputs()
    local xs = x:tolist()
    assert_exact(map(xs, function(v) return math.min(math.max(v, -1), 2) end), x:clamp(-1, 2):tolist(), "clamp")
    assert_exact(map(xs, function(v) return math.max(v, 0.5) end), x:clamp(0.5):tolist(), "clamp min")
    assert_exact(map(xs, function(v) return math.min(v, 0.5) end), x:clamp(nil, 0.5):tolist(), "clamp max")
    assert_exact(map(xs, function(v) return math.min(v, 1.5) end), x:clamp({max = 1.5}):tolist(), "clamp {max}")
    assert_exact(map(xs, function(v) return math.min(math.max(v, -0.5), 0.5) end),
      x:clamp({min = -0.5, max = 0.5}):tolist(), "clamp {min,max}")
    local i = accel.tensor{-5, 0, 5}
    local c = i:clamp(-2, 3)
    assert.are.equal(accel.int64, c.dtype)
    assert_exact({-2, 0, 3}, c:tolist())
  end)

  it("clamp of an integer tensor by a float bound is float32 (PyTorch's promotion); in place it is an error", function()
    local i = accel.tensor({-4, 0, 3}, {dtype = accel.int32})
    local f = i:clamp(-1.5, 1.5)
    assert.are.equal(accel.float32, f.dtype)
    assert_exact({-1.5, 0, 1.5}, f:tolist())
    assert.are.equal(accel.int32, i:clamp(-1, 1).dtype) -- integer bounds keep the dtype
    if not support.luajit then -- LuaJIT has no float subtype: 2.0 is the integer 2 there
      assert.are.equal(accel.float32, i:clamp({max = 2.0}).dtype)
    end
    local ok, err = pcall(function() return i:clone():clamp_(0.5) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("clamp_: a float bound makes the result float32", 1, true), err)
  end)

  it("integer floor division and remainder by zero are errors (PyTorch's ZeroDivisionError); float gives inf", function()
    local a, z = accel.tensor{7, -7}, accel.tensor{0, 2}
    for _, f in ipairs({function() return a:floor_divide(z) end, function() return a % z end, function() return a:fmod(0) end,
      function() return a:clone():floor_divide_(z) end}) do
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("integer division by zero", 1, true), err)
    end
    assert.are.same({3, -4}, a:floor_divide(2):tolist())
    assert.are.same({inf, -inf}, a:float():floor_divide(0):tolist())
  end)

  -- torch 2.15, a = zeros(2, 0, int64), b = ones(2, 0, int64): a // b, a % b, a.fmod(b), a.floor_divide(b),
  -- a.div(b, rounding_mode="floor" / "trunc"), a.floor_divide_(b), a.remainder_(b) and a // zeros(1, int64)
  -- (a zero divisor, but nothing divided) all give an empty (2, 0) int64 tensor, no error
  it("integer floor division, remainder and fmod with an empty result give it, whatever the divisor", function()
    local i64 = {dtype = accel.int64}
    local a, b, z = accel.zeros({2, 0}, i64), accel.ones({2, 0}, i64), accel.zeros({1}, i64)
    local cases = {
      function() return a:floor_divide(b) end, function() return a % b end, function() return a:fmod(b) end,
      function() return a:remainder(z) end, function() return a:div(b, {rounding_mode = "floor"}) end,
      function() return a:div(b, {rounding_mode = "trunc"}) end, function() return a:clone():floor_divide_(b) end,
      function() return a:clone():remainder_(z) end, function() return a:clone():fmod_(0) end,
    }
    if not support.luajit then cases[#cases + 1] = function() return idiv(a, z) end end
    for i, f in ipairs(cases) do
      local ok, r = pcall(f)
      assert.is_true(ok, i .. ": " .. tostring(r))
      assert.are.same({2, 0}, shape_of(r), i)
      assert.are.equal(accel.int64, r.dtype, i)
    end
  end)

  -- torch 2.15, x = [2048, 100, 7, -7, 0.3]: x.half() // 1.0004 (and // torch.tensor(1.0004)) -> [2047, 99, 6, -7, 0],
  -- x.bfloat16() // 1.001 -> [2048, 99, 6, -7, 0]: its div_floor kernel keeps a CPU scalar divisor unrounded,
  -- while x.half() % 1.0004 rounds it to 1 -> [0, 0, 0, -0, 0.3]
  it("floor division of bf16 / fp16 by a number keeps the number's precision, as torch's", function()
    local x = accel.tensor({2048, 100, 7, -7, 0.3})
    for _, case in ipairs({{x:half():floor_divide(1.0004), {2047, 99, 6, -7, 0}},
      {x:half():floor_divide(accel.tensor(1.0004)), {2047, 99, 6, -7, 0}},
      {x:half():div(1.0004, {rounding_mode = "floor"}), {2047, 99, 6, -7, 0}},
      {x:bfloat16():floor_divide(1.001), {2048, 99, 6, -7, 0}},
      {x:half() % 1.0004, {0, 0, 0, 0, x:half()[5]:item()}}}) do
      assert.are.same(case[2], case[1]:float():tolist())
    end
  end)

  -- torch 2.15, big = 2**53 + 1: tensor([0]) + big -> [9007199254740993], tensor([big]).eq(big) -> [True],
  -- full((1,), big), zeros(1, dtype=int64).fill_(big), masked_fill(..., big), where(c, big, tensor([0])) ->
  -- [9007199254740993]; tensor([2]) * (2**63 - 1) -> [-2] (wraps); int32 tensor([1]) * big -> [1];
  -- full((1,), 2**63 - 1) -> [9223372036854775807]
  it("Lua integers beyond 2^53 meet integer tensors exactly, as Python ints meet torch's", function()
    local big = 9007199254740993
    local i64 = {dtype = accel.int64}
    for _, case in ipairs({{accel.tensor({0}) + big, big}, {big + accel.tensor({0}), big},
      {accel.tensor({1}) * big, big}, {accel.tensor({big}):sub(big), 0},
      {accel.full({1}, big), big}, {accel.zeros(1, i64):fill_(big), big},
      {accel.zeros(1, i64):masked_fill(accel.tensor({true}), big), big},
      {accel.where(accel.tensor({true}), big, accel.tensor({0})), big},
      {accel.tensor({2}) * math.maxinteger, -2}, {accel.full({1}, math.maxinteger), math.maxinteger},
      {accel.zeros(1, i64):fill_(math.maxinteger), math.maxinteger}}) do
      assert.are.same({case[2]}, case[1]:tolist())
    end
    assert.are.same({true}, accel.tensor({big}):eq(big):tolist())
    assert.are.same({false}, accel.tensor({big}):ne(big):tolist())
    assert.are.same({1}, (accel.tensor({1}, {dtype = accel.int32}) * big):tolist())
    assert.are.same({big + 1.0}, (accel.tensor({0.0}, {dtype = accel.float64}) + big):tolist()) -- floats round
  end)

  it("clamp's gradient is 0 at a bound, as PyTorch 2.x's (1.x passed it there)", function()
    local function grad(f)
      local z = accel.tensor({-1, 0, 0.5, 1, 2}, {requires_grad = true})
      f(z):sum():backward()
      return z.grad:tolist()
    end
    assert_exact({0, 0, 1, 0, 0}, grad(function(z) return z:clamp(0, 1) end))
    assert_exact({0, 0, 1, 1, 1}, grad(function(z) return z:clamp({min = 0}) end))
    assert_exact({1, 1, 1, 0, 0}, grad(function(z) return z:clamp(nil, 1) end))
  end)

  it("one-sided clamp passes the gradient of an infinite input on its open side, as torch's", function()
    local function grad(f)
      local z = accel.tensor({-inf, inf, 1, 2.5, -2.5, nan}, {requires_grad = true})
      f(z):sum():backward()
      return z.grad:tolist()
    end
    -- torch 2.15: clamp(max=2.5), clamp(min=-2.5), clamp(-2.5, 2.5) gradients at [-inf, inf, 1, 2.5, -2.5, nan]
    local max_grad, min_grad = {1, 0, 1, 0, 1, 0}, {0, 1, 1, 1, 0, 0}
    assert_exact(max_grad, grad(function(z) return z:clamp({max = 2.5}) end), "clamp {max}")
    assert_exact(max_grad, grad(function(z) return z:clamp(nil, 2.5) end), "clamp(nil, max)")
    assert_exact(max_grad, grad(function(z) return z:clamp_max(2.5) end), "clamp_max")
    assert_exact(max_grad, grad(function(z) return (z * 1):clamp_({max = 2.5}) end), "clamp_ {max}")
    assert_exact(min_grad, grad(function(z) return z:clamp({min = -2.5}) end), "clamp {min}")
    assert_exact(min_grad, grad(function(z) return z:clamp(-2.5) end), "clamp(min)")
    assert_exact(min_grad, grad(function(z) return z:clamp_min(-2.5) end), "clamp_min")
    assert_exact({0, 0, 1, 0, 0, 0}, grad(function(z) return z:clamp(-2.5, 2.5) end), "clamp(min, max)")
  end)

  it("clamp with tensor bounds (broadcast), a tensor and a number, and its gradient", function()
    local x = accel.tensor{-2, 0.5, 3, 10}
    assert_exact({0, 0.5, 3, 5}, x:clamp(accel.zeros(4), accel.tensor{1, 1, 5, 5}):tolist())
    assert_exact({-2, 0, 0, 10}, x:clamp(nil, accel.tensor{0, 0, 0, 20}):tolist())
    assert_exact({0, 0.5, 3, 4}, x:clamp(0, accel.tensor(4.0)):tolist())
    local w = accel.tensor({-2, 0.5, 3}, {requires_grad = true})
    w:clamp(accel.zeros(3), accel.ones(3)):sum():backward()
    assert_exact({0, 1, 0}, w.grad:tolist()) -- gradient only where no bound applies
    local y = x:clone()
    assert.are.equal(y, y:clamp_(accel.zeros(4), accel.tensor{1, 1, 5, 5})) -- in place, returns itself
    assert_exact({0, 0.5, 3, 5}, y:tolist())
    local ok, err = pcall(function() return x:clamp(accel.zeros(4), "1") end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("min and max must be tensors, numbers or nil, got string", 1, true), err)
  end)

  it("leaky_relu", function()
    local x = inputs()
    assert_close(map(x:tolist(), function(v) return v > 0 and v or 0.01 * v end), x:leaky_relu():tolist())
    assert_close(map(x:tolist(), function(v) return v > 0 and v or 0.2 * v end), x:leaky_relu(0.2):tolist())
  end)

  it("special values: exp(-inf)=0, log(0)=-inf, sqrt(-1)=nan, sigmoid saturates", function()
    local x = accel.tensor{-inf, 0.0, -1.0, inf}
    assert_close({0, 1, math.exp(-1), inf}, x:exp():tolist())
    assert_close({nan, -inf, nan, inf}, x:log():tolist())
    assert_close({nan, 0, nan, inf}, x:sqrt():tolist())
    assert_close({0, 0.5, sigmoid(-1), 1}, x:sigmoid():tolist())
    assert_close({-1, 0, tanh(-1), 1}, x:tanh():tolist())
    local big = accel.tensor({-100.0, 100.0}, {dtype = accel.float32})
    assert_close({0, 1}, big:sigmoid():tolist())
    assert_close({-100 * sigmoid(-100), 100}, big:silu():tolist())
  end)

  it("isnan / isinf / isfinite give bool tensors (an integer tensor is all finite)", function()
    local x = accel.tensor{1.5, nan, inf, -inf, 0.0}
    assert.are.same({false, true, false, false, false}, x:isnan():tolist())
    assert.are.same({false, false, true, true, false}, x:isinf():tolist())
    assert.are.same({true, false, false, false, true}, x:isfinite():tolist())
    assert.are.equal(accel.bool, x:isnan().dtype)
    local i = accel.tensor({3, -7}, {dtype = accel.int64})
    assert.are.same({false, false}, i:isnan():tolist())
    assert.are.same({true, true}, i:isfinite():tolist())
    -- torch 2.15: isfinite / isinf / isnan of tensor([True, False]) -> [True, True] / [False, False] / [False, False]
    local b = accel.tensor({true, false})
    assert.are.same({true, true}, b:isfinite():tolist())
    assert.are.same({false, false}, b:isinf():tolist())
    assert.are.same({false, false}, b:isnan():tolist())
    assert.are.same({false, false}, i:isinf():tolist())
    local u = accel.ones(1, 2, {dtype = accel.uint8}):isinf()
    assert.are.same({{false, false}}, u:tolist())
    assert.are.equal(accel.bool, u.dtype)
  end)

  it("int tensors: math functions give float32, neg/abs keep int", function()
    local i = accel.tensor{1, 4, 9}
    local s = i:sqrt()
    assert.are.equal(accel.float32, s.dtype)
    assert_exact({1, 2, 3}, s:tolist())
    assert.are.equal(accel.float32, i:exp().dtype)
    assert.are.equal(accel.int64, i:neg().dtype)
    assert_exact({-1, -4, -9}, i:neg():tolist())
    assert.are.equal(accel.int64, accel.tensor{-3, 3}:abs().dtype)
    assert_exact({3, 3}, accel.tensor{-3, 3}:abs():tolist())
  end)

  it("bf16 / f16 inputs compute in float32 and round the result once", function()
    local x = accel.tensor({0.5, 1.0, 2.0, 3.0}, {dtype = accel.bfloat16})
    local e = x:exp()
    assert.are.equal(accel.bfloat16, e.dtype)
    local ref = map({0.5, 1.0, 2.0, 3.0}, math.exp)
    -- bf16 has 8 significant bits: one rounding is within 2^-8 relative
    assert_close(ref, e:tolist(), 2 ^ -8, 0)
    local h = accel.tensor({0.5, 1.0, 2.0, 3.0}, {dtype = accel.float16}):exp()
    assert.are.equal(accel.float16, h.dtype)
    assert_close(ref, h:tolist(), 2 ^ -11, 0)
  end)
end)

---------------------------------------------------------------- elementwise binary

local function binary_cases()
  return {
    {"add", "+", function(a, b) return a + b end},
    {"sub", "-", function(a, b) return a - b end},
    {"mul", "*", function(a, b) return a * b end},
    {"div", "/", function(a, b) return a / b end},
  }
end

describe("elementwise binary ops", function()
  local a = accel.tensor{1.5, -2.0, 3.25, 0.1, -7.5, 100.0}
  local b = accel.tensor{0.5, 4.0, -1.5, 0.3, 2.5, -0.01}
  local as, bs = a:tolist(), b:tolist()

  for _, case in ipairs(binary_cases()) do
    local name, opname, ref = case[1], case[2], case[3]
    it(name .. " as a method and as the " .. opname .. " operator", function()
      local exp = map2(as, bs, ref)
      assert_close(exp, a[name](a, b):tolist(), RTOL32, ATOL32, name)
      local viaop = load("local a, b = ...; return a " .. opname .. " b")(a, b)
      assert_close(exp, viaop:tolist(), RTOL32, ATOL32, opname)
      -- scalar on the right and on the left
      local sr = load("local a = ...; return a " .. opname .. " 2.5")(a)
      assert_close(map(as, function(x) return ref(x, 2.5) end), sr:tolist(), RTOL32, ATOL32, "t " .. opname .. " 2.5")
      local sl = load("local a = ...; return 2.5 " .. opname .. " a")(a)
      assert_close(map(as, function(x) return ref(2.5, x) end), sl:tolist(), RTOL32, ATOL32, "2.5 " .. opname .. " t")
      -- in place
      local c = a:clone()
      c[name .. "_"](c, b)
      assert_close(exp, c:tolist(), RTOL32, ATOL32, name .. "_")
      local d = a:clone()
      d[name .. "_"](d, 3)
      assert_close(map(as, function(x) return ref(x, 3) end), d:tolist(), RTOL32, ATOL32, name .. "_ scalar")
    end)
  end

  it("add/sub take {alpha=}", function()
    assert_close(map2(as, bs, function(x, y) return x + 2 * y end), a:add(b, {alpha = 2}):tolist())
    assert_close(map2(as, bs, function(x, y) return x - 0.5 * y end), a:sub(b, {alpha = 0.5}):tolist())
    local c = a:clone()
    c:add_(b, {alpha = -1})
    assert_close(map2(as, bs, function(x, y) return x - y end), c:tolist())
  end)

  -- torch 2.15: alpha * other is computed in the result dtype, other converted first:
  -- int64 [10, 10].sub(uint8 [7, 200], alpha=-1) = [17, 210], .add(..., alpha=-1) = [3, -190],
  -- int64 / int32 / float32 [10, 10].add(uint8 [7, 200], alpha=2) = [24, 410],
  -- int64 [0].add(int32 [2**30], alpha=4) = [4294967296], float64 [0].add(float32 [3e38], alpha=10) =
  -- [3.000000005497756e+39], float32 [0].add(bf16 [1.0078125], alpha=3) = [3.0234375];
  -- int64 [-291, 97].add(bf16 [-21, 200], alpha=2) = bf16 [-334, 496] (-291 rounded to bf16 first),
  -- bf16 [7.486469, 100.95, 18].add(int32 [-250, 289, -199], alpha=2) = [-492, 676, -380],
  -- tensor(148.06).add(fp16 [-26.75521], alpha=4) = fp16 [41]; float [1, 2].sub(bool, alpha=2) and
  -- bool.add(bool, alpha=0.5) raise
  it("add/sub with alpha scale the other operand in the result dtype (mixed dtypes as torch)", function()
    local i64, i32, u8 = {dtype = accel.int64}, {dtype = accel.int32}, {dtype = accel.uint8}
    local x, u = accel.tensor({10, 10}, i64), accel.tensor({7, 200}, u8)
    assert.same({17, 210}, x:sub(u, {alpha = -1}):tolist())
    assert.same({3, -190}, x:add(u, {alpha = -1}):tolist())
    local c = x:clone()
    c:sub_(u, {alpha = -1})
    assert.same({17, 210}, c:tolist())
    for _, dt in ipairs({accel.int64, accel.int32, accel.float32}) do
      local r = accel.tensor({10, 10}, {dtype = dt}):add(u, {alpha = 2})
      assert.are.equal(dt, r.dtype)
      assert.same({24, 410}, r:tolist())
    end
    assert.same({4294967296}, accel.tensor({0}, i64):add(accel.tensor({2 ^ 30}, i32), {alpha = 4}):tolist())
    assert.same({3.000000005497756e+39},
      accel.tensor({0}, {dtype = accel.float64}):add(accel.tensor({3e38}, {dtype = accel.float32}), {alpha = 10}):tolist())
    local bf = {dtype = accel.bfloat16}
    assert.same({3.0234375}, accel.tensor({0}, {dtype = accel.float32}):add(accel.tensor({1.0078125}, bf), {alpha = 3}):tolist())
    assert.same({-334, 496}, accel.tensor({-291, 97}, i64):add(accel.tensor({-21, 200}, bf), {alpha = 2}):float():tolist())
    assert.same({-492, 676, -380},
      accel.tensor({7.486469, 100.95, 18}, bf):add(accel.tensor({-250, 289, -199}, i32), {alpha = 2}):float():tolist())
    local h = accel.tensor(148.06, {dtype = accel.float32}):add(accel.tensor({-26.75521}, {dtype = accel.float16}), {alpha = 4})
    assert.are.equal(accel.float16, h.dtype)
    assert.same({41}, h:float():tolist())
    support.expect_error(function() local _ = accel.tensor({1.0, 2.0}):sub(accel.tensor({true, false}), {alpha = 2}) end,
      "sub: Subtraction, the `-` operator, with a bool tensor is not supported")
    support.expect_error(function() local _ = accel.tensor({true}):add(accel.tensor({true}), {alpha = 0.5}) end,
      "add: For integral input tensors, argument alpha must not be a floating point number")
  end)

  it("float32 results are the float32 rounding of the exact result", function()
    local x = accel.tensor{0.1, 1 / 3}
    local y = accel.tensor{0.2, 1 / 7}
    local xs, ys = x:tolist(), y:tolist()
    assert_exact({f32(xs[1] + ys[1]), f32(xs[2] + ys[2])}, (x + y):tolist(), "add rounding")
    assert_exact({f32(xs[1] * ys[1]), f32(xs[2] * ys[2])}, (x * y):tolist(), "mul rounding")
    assert_exact({f32(xs[1] / ys[1]), f32(xs[2] / ys[2])}, (x / y):tolist(), "div rounding")
  end)

  it("pow: tensor^scalar, scalar^tensor, tensor^tensor", function()
    local x = accel.tensor{0.5, 1.0, 2.0, 3.5}
    local e = accel.tensor{2.0, -1.0, 0.5, 3.0}
    local xs, es = x:tolist(), e:tolist()
    assert_close(map(xs, function(v) return v ^ 2 end), (x ^ 2):tolist())
    assert_close(map(xs, function(v) return v ^ 0.5 end), x:pow(0.5):tolist())
    assert_close(map(xs, function(v) return v ^ -1.5 end), (x ^ -1.5):tolist())
    assert_close(map(xs, function(v) return 2 ^ v end), (2 ^ x):tolist())
    assert_close(map2(xs, es, function(p, q) return p ^ q end), (x ^ e):tolist())
    assert_close(map2(xs, es, function(p, q) return p ^ q end), x:pow(e):tolist())
    local c = x:clone()
    c:pow_(3)
    assert_close(map(xs, function(v) return v ^ 3 end), c:tolist())
    -- integer tensor with an integer exponent stays integer
    local i = accel.tensor{2, 3, -4}
    local p = i ^ 2
    assert.are.equal(accel.int64, p.dtype)
    assert_exact({4, 9, 16}, p:tolist())
  end)

  it("unary minus", function()
    assert_exact(map(as, function(v) return -v end), (-a):tolist())
    assert_exact({-1, 2}, (-accel.tensor{1, -2}):tolist())
  end)

  it("// floors and % takes the sign of the divisor (float)", function()
    local x = accel.tensor{7.5, -7.5, 7.5, -7.5, 3.0}
    local y = accel.tensor{2.0, 2.0, -2.0, -2.0, 1.5}
    local xs, ys = x:tolist(), y:tolist()
    assert_exact(map2(xs, ys, function(p, q) return math.floor(p / q) end), idiv(x, y):tolist(), "//")
    assert_exact(map2(xs, ys, function(p, q) return p - math.floor(p / q) * q end), (x % y):tolist(), "%")
    assert_exact(map2(xs, ys, function(p, q) return math.floor(p / q) end), x:floor_divide(y):tolist())
    assert_exact(map2(xs, ys, function(p, q) return p - math.floor(p / q) * q end), x:remainder(y):tolist())
    assert_exact(map(xs, function(p) return math.floor(p / 2) end), idiv(x, 2):tolist(), "// scalar")
    assert_exact(map(xs, function(p) return p % 2 end), (x % 2):tolist(), "% scalar")
    assert_exact(map(xs, function(p) return 10 % p end), (10 % x):tolist(), "scalar %")
  end)

  it("// and % on integers follow Python (floor) semantics and stay int64", function()
    local x = accel.tensor{7, -7, 7, -7, 0}
    local y = accel.tensor{2, 2, -2, -2, 3}
    local q, r = idiv(x, y), x % y
    assert.are.equal(accel.int64, q.dtype)
    assert.are.equal(accel.int64, r.dtype)
    assert_exact({3, -4, -4, 3, 0}, q:tolist(), "int //")
    assert_exact({1, 1, -1, -1, 0}, r:tolist(), "int %")
    assert_exact({3, -4, 3, -4, 0}, idiv(x, 2):tolist(), "int // scalar")
    assert_exact({1, 1, 1, 1, 0}, (x % 2):tolist(), "int % scalar")
  end)

  it("fmod takes the sign of the dividend (C fmod), unlike remainder", function()
    local x = accel.tensor{7.5, -7.5, 7.5, -7.5}
    local y = accel.tensor{2.0, 2.0, -2.0, -2.0}
    assert_exact({1.5, -1.5, 1.5, -1.5}, x:fmod(y):tolist(), "fmod")
    assert_exact({1.5, -1.5, 1.5, -1.5}, x:fmod(2):tolist(), "fmod scalar")
    assert_exact({1, -1, 1, -1}, accel.tensor{7, -7, 7, -7}:fmod(accel.tensor{2, 2, -2, -2}):tolist(), "int fmod")
  end)

  it("maximum / minimum and max/min with a tensor", function()
    assert_exact(map2(as, bs, math.max), a:maximum(b):tolist())
    assert_exact(map2(as, bs, math.min), a:minimum(b):tolist())
    assert_exact(map2(as, bs, math.max), a:max(b):tolist())
    assert_exact(map2(as, bs, math.min), a:min(b):tolist())
  end)

  it("logical ops on bool tensors", function()
    local p = accel.tensor{true, true, false, false}
    local q = accel.tensor{true, false, true, false}
    assert_exact({true, false, false, false}, p:logical_and(q):tolist())
    assert_exact({true, true, true, false}, p:logical_or(q):tolist())
    assert_exact({false, true, true, false}, p:logical_xor(q):tolist())
    assert_exact({false, false, true, true}, p:logical_not():tolist())
  end)
end)

describe("broadcasting", function()
  it("(3,1) + (1,4) -> (3,4)", function()
    local a = accel.tensor{{1.0}, {2.0}, {3.0}}
    local b = accel.tensor{{10.0, 20.0, 30.0, 40.0}}
    local c = a + b
    assert.are.same({3, 4}, shape_of(c))
    local exp = {}
    for i = 1, 3 do
      exp[i] = {}
      for j = 1, 4 do exp[i][j] = i + 10 * j end
    end
    assert.are.same(exp, c:tolist())
  end)

  it("(2,3) * (3) -> (2,3), and (3) - (2,3)", function()
    local a = accel.tensor{{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}
    local b = accel.tensor{10.0, 100.0, 1000.0}
    assert.are.same({{10, 200, 3000}, {40, 500, 6000}}, (a * b):tolist())
    assert.are.same({{9, 98, 997}, {6, 95, 994}}, (b - a):tolist())
  end)

  it("(2,1,3) + (4,1) -> (2,4,3)", function()
    local a = accel.arange(6, {dtype = accel.float32}):view(2, 1, 3)
    local b = accel.arange(4, {dtype = accel.float32}):view(4, 1):mul(10)
    local c = a + b
    assert.are.same({2, 4, 3}, shape_of(c))
    local l = c:tolist()
    for i = 1, 2 do
      for j = 1, 4 do
        for k = 1, 3 do assert.are.equal((i - 1) * 3 + (k - 1) + (j - 1) * 10, l[i][j][k]) end
      end
    end
  end)

  it("0-d tensor and scalars broadcast against anything", function()
    local s = accel.tensor(2.0)
    local m = accel.tensor{{1.0, 2.0}, {3.0, 4.0}}
    assert.are.same({{2, 4}, {6, 8}}, (s * m):tolist())
    assert.are.same({{3, 4}, {5, 6}}, (m + s):tolist())
    assert.are.same({{1, 0}, {-1, -2}}, (2 - m):tolist())
    assert_close({{2, 1}, {2 / 3, 0.5}}, (2 / m):tolist())
  end)

  it("in-place with a broadcast right-hand side", function()
    local m = accel.zeros(2, 3)
    m:add_(accel.tensor{1.0, 2.0, 3.0})
    assert.are.same({{1, 2, 3}, {1, 2, 3}}, m:tolist())
    m:mul_(accel.tensor{{2.0}, {3.0}})
    assert.are.same({{2, 4, 6}, {3, 6, 9}}, m:tolist())
  end)
end)

describe("type promotion", function()
  local i64 = accel.tensor{1, 2, 3}
  local f32t = accel.tensor{0.5, 1.5, 2.5}

  it("int64 + float32 -> float32", function()
    local r = i64 + f32t
    assert.are.equal(accel.float32, r.dtype)
    assert.are.same({1.5, 3.5, 5.5}, r:tolist())
    assert.are.equal(accel.float32, (f32t * i64).dtype)
  end)

  it("int64 + int scalar -> int64; int64 + float scalar -> float32", function()
    local r = i64 + 2
    assert.are.equal(accel.int64, r.dtype)
    assert_exact({3, 4, 5}, r:tolist())
    local s = i64 + 2.5
    assert.are.equal(accel.float32, s.dtype)
    assert.are.same({3.5, 4.5, 5.5}, s:tolist())
    assert.are.equal(accel.int64, (2 * i64).dtype)
    assert.are.equal(accel.float32, (0.5 * i64).dtype)
  end)

  it("int64 / int64 -> float32 (true division)", function()
    local r = accel.tensor{1, 7, -7} / accel.tensor{2, 2, 2}
    assert.are.equal(accel.float32, r.dtype)
    assert.are.same({0.5, 3.5, -3.5}, r:tolist())
    local s = accel.tensor{3} / 2
    assert.are.equal(accel.float32, s.dtype)
    assert.are.same({1.5}, s:tolist())
  end)

  it("bool + bool stays bool (logical or), bool + int scalar -> int64", function()
    local p = accel.tensor{true, true, false}
    local q = accel.tensor{true, false, false}
    local r = p:add(q)
    assert.are.equal(accel.bool, r.dtype)
    assert.are.same({true, true, false}, r:tolist())
    local m = p * q
    assert.are.equal(accel.bool, m.dtype)
    assert.are.same({true, false, false}, m:tolist())
    local s = p + 1
    assert.are.equal(accel.int64, s.dtype)
    assert_exact({2, 2, 1}, s:tolist())
    local t = p + i64
    assert.are.equal(accel.int64, t.dtype)
    assert_exact({2, 3, 3}, t:tolist())
  end)

  it("float32 + float64 -> float64", function()
    local d = accel.tensor({0.1, 0.2, 0.3}, {dtype = accel.float64})
    local r = f32t + d
    assert.are.equal(accel.float64, r.dtype)
    assert.are.same({0.5 + 0.1, 1.5 + 0.2, 2.5 + 0.3}, r:tolist())
  end)

  it("bfloat16 + float16 -> float32; bf16 + bf16 -> bf16; bf16 + float32 -> float32", function()
    local b = accel.tensor({1.0, 2.0}, {dtype = accel.bfloat16})
    local h = accel.tensor({0.5, 0.25}, {dtype = accel.float16})
    local r = b + h
    assert.are.equal(accel.float32, r.dtype)
    assert.are.same({1.5, 2.25}, r:tolist())
    assert.are.equal(accel.bfloat16, (b + b).dtype)
    assert.are.equal(accel.float32, (b + f32t:narrow(1, 1, 2)).dtype)
    -- a float scalar keeps the tensor's float dtype
    assert.are.equal(accel.bfloat16, (b * 0.5).dtype)
    assert.are.equal(accel.float16, (h + 1).dtype)
  end)

  it("int32 + int64 -> int64; uint8 + int32 -> int32; int32 + float32 -> float32", function()
    local i32 = accel.tensor({1, 2}, {dtype = accel.int32})
    local u8 = accel.tensor({250, 3}, {dtype = accel.uint8})
    assert.are.equal(accel.int64, (i32 + accel.tensor{1, 1}).dtype)
    local r = u8 + i32
    assert.are.equal(accel.int32, r.dtype)
    assert_exact({251, 5}, r:tolist())
    assert.are.equal(accel.float32, (i32 + accel.tensor{0.5, 0.5}).dtype)
    assert.are.equal(accel.int32, (i32 * 3).dtype)
  end)

  it("comparisons always give bool", function()
    assert.are.equal(accel.bool, (i64:lt(f32t)).dtype)
    assert.are.equal(accel.bool, i64:eq(2).dtype)
  end)
end)

---------------------------------------------------------------- reductions

-- 2x3x4 float64 test tensor with distinct values.
local function cube_values()
  local v = {}
  for i = 1, 2 do
    v[i] = {}
    for j = 1, 3 do
      v[i][j] = {}
      for k = 1, 4 do v[i][j][k] = math.sin(i * 7 + j * 3 + k) * 10 end
    end
  end
  return v
end

-- Reduce a nested 3-d Lua list over a set of 1-based dims with fn(list)->number.
-- Returns the keepdim=false nested result (or a number if all dims reduced).
local function lua_reduce(v, dims, fn, keepdim)
  local shape = {#v, #v[1], #v[1][1]}
  local red = {}
  for _, d in ipairs(dims) do red[d < 0 and d + 4 or d] = true end
  local outshape = {}
  for d = 1, 3 do
    if not red[d] then outshape[#outshape + 1] = {d, shape[d]}
    elseif keepdim then outshape[#outshape + 1] = {d, 1} end
  end
  -- collect groups
  local groups, order = {}, {}
  for i = 1, shape[1] do
    for j = 1, shape[2] do
      for k = 1, shape[3] do
        local idx = {i, j, k}
        local key = {}
        for d = 1, 3 do key[d] = red[d] and 1 or idx[d] end
        local ks = table.concat(key, ",")
        if not groups[ks] then groups[ks] = {}; order[#order + 1] = key end
        table.insert(groups[ks], v[i][j][k])
      end
    end
  end
  if #outshape == 0 then
    local ks = "1,1,1"
    return fn(groups[ks])
  end
  local out = {}
  for _, key in ipairs(order) do
    local val = fn(groups[table.concat(key, ",")])
    local node = out
    for n = 1, #outshape - 1 do
      local d = outshape[n][1]
      node[key[d]] = node[key[d]] or {}
      node = node[key[d]]
    end
    node[key[outshape[#outshape][1]]] = val
  end
  return out
end

local function l_sum(l) local s = 0; for _, x in ipairs(l) do s = s + x end; return s end
local function l_mean(l) return l_sum(l) / #l end
local function l_prod(l) local s = 1; for _, x in ipairs(l) do s = s * x end; return s end
local function l_max(l) local s = -inf; for _, x in ipairs(l) do s = math.max(s, x) end; return s end
local function l_min(l) local s = inf; for _, x in ipairs(l) do s = math.min(s, x) end; return s end
local function l_var(l, corr)
  corr = corr or 1
  local m = l_mean(l)
  local s = 0
  for _, x in ipairs(l) do s = s + (x - m) ^ 2 end
  return s / (#l - corr)
end
local function l_std(l) return math.sqrt(l_var(l)) end
local function l_norm2(l) local s = 0; for _, x in ipairs(l) do s = s + x * x end; return math.sqrt(s) end
local function l_norm1(l) local s = 0; for _, x in ipairs(l) do s = s + math.abs(x) end; return s end
local function l_norminf(l) local s = 0; for _, x in ipairs(l) do s = math.max(s, math.abs(x)) end; return s end

describe("reductions", function()
  local vals = cube_values()
  local x = accel.tensor(vals, {dtype = accel.float64})
  local x32 = accel.tensor(vals)
  local v32 = x32:tolist()

  local reds = {
    {"sum", l_sum}, {"mean", l_mean}, {"prod", l_prod}, {"amax", l_max}, {"amin", l_min},
    {"var", l_var}, {"std", l_std}, {"norm", l_norm2},
  }
  local dimsets = {{1}, {2}, {3}, {-1}, {-3}, {1, 2}, {1, 3}, {2, 3}, {-1, 1}}

  for _, r in ipairs(reds) do
    local name, fn = r[1], r[2]
    -- call t:NAME(dim, opts); norm's first positional argument is p, so norm(2, dim, opts)
    local function call(t, dim, o)
      if name == "norm" then return t:norm(2, dim, o) end
      return t[name](t, dim, o)
    end
    it(name .. " over everything, over each dim, negative dims and dim lists, with keepdim", function()
      -- no dim
      local all = x[name](x)
      assert.are.equal(0, all:dim())
      assert_close(lua_reduce(vals, {1, 2, 3}, fn), all:item(), 1e-12, 1e-12, name .. "()")
      assert_close(lua_reduce(v32, {1, 2, 3}, fn), x32[name](x32):item(), 1e-5, 1e-6, name .. "() f32")
      for _, dims in ipairs(dimsets) do
        local arg = #dims == 1 and dims[1] or dims
        local got = call(x, arg)
        local exp = lua_reduce(vals, dims, fn)
        local what = name .. "(" .. table.concat(dims, ",") .. ")"
        assert.are.equal(3 - #dims, got:dim(), what .. " dim count")
        assert_close(exp, got:tolist(), 1e-12, 1e-12, what)
        local kept = call(x, arg, {keepdim = true})
        assert.are.equal(3, kept:dim(), what .. " keepdim")
        for _, d in ipairs(dims) do assert.are.equal(1, kept:size(d)) end
        assert_close(lua_reduce(vals, dims, fn, true), kept:tolist(), 1e-12, 1e-12, what .. " keepdim")
        -- float32 input, float32 accumulation tolerance
        local got32 = call(x32, arg)
        assert.are.equal(accel.float32, got32.dtype)
        assert_close(lua_reduce(v32, dims, fn), got32:tolist(), 1e-5, 1e-6, what .. " f32")
      end
    end)
  end

  it("dim can also be given as {dim=}", function()
    assert_close(lua_reduce(vals, {2}, l_sum), x:sum({dim = 2}):tolist(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {2}, l_sum, true), x:sum({dim = 2, keepdim = true}):tolist(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {2}, l_sum, true), x:sum(2, true):tolist(), 1e-12, 1e-12)
  end)

  it("var/std with unbiased=false and correction=0", function()
    local biased = function(l) return l_var(l, 0) end
    assert_close(lua_reduce(vals, {3}, biased), x:var(3, {unbiased = false}):tolist(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {3}, biased), x:var(3, {correction = 0}):tolist(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {1, 2, 3}, biased), x:var({unbiased = false}):item(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {3}, function(l) return math.sqrt(l_var(l, 0)) end),
      x:std(3, {unbiased = false}):tolist(), 1e-12, 1e-12)
    -- torch's positional forms: (dim, unbiased, keepdim) and (unbiased)
    assert_close(lua_reduce(vals, {3}, biased, true), x:var(3, false, true):tolist(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {3}, biased), x:var(3, false):tolist(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {3}, biased, true), x:var(3, {correction = 0, keepdim = true}):tolist(), 1e-12,
      1e-12)
    assert_close(lua_reduce(vals, {1, 2, 3}, biased), x:var(false):item(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {1, 2, 3}, biased), x:std(false):item() ^ 2, 1e-12, 1e-12)
  end)

  it("norm with p = 1, inf and 'fro'", function()
    assert_close(lua_reduce(vals, {1, 2, 3}, l_norm1), x:norm(1):item(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {3}, l_norm1), x:norm(1, 3):tolist(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {2}, l_norminf), x:norm(inf, 2):tolist(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {2}, l_norminf), x:norm("inf", 2):tolist(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {1, 2, 3}, l_norm2), x:norm("fro"):item(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {3}, l_norm2, true), x:norm(2, 3, {keepdim = true}):tolist(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {3}, l_norm2, true), x:norm(2, 3, true):tolist(), 1e-12, 1e-12)
    assert_close(lua_reduce(vals, {3}, l_norm1), x:norm({p = 1, dim = 3}):tolist(), 1e-12, 1e-12)
  end)

  it("an options table with a key the method does not take is one error naming both", function()
    for _, c in ipairs({
      {function() local _ = x:sum({dimm = 1}) end, "sum: unknown option 'dimm' (options: dim keepdim dtype)"},
      {function() local _ = x:var(2, {corection = 0}) end, "var: unknown option 'corection'"},
      {function() local _ = x:norm(2, 3, {keepdm = true}) end, "norm: unknown option 'keepdm'"},
      {function() local _ = x:max(2, {keepdm = true}) end, "max: unknown option 'keepdm'"},
      {function() local _ = x:argmax({dimm = 1}) end, "argmax: unknown option 'dimm'"},
      {function() local _ = x:add(x, {alpah = 2}) end, "add: unknown option 'alpah' (options: alpha)"},
      {function() local _ = x:clamp({mn = 1}) end, "clamp: unknown option 'mn' (options: min max)"},
      {function() local _ = x:exp({foo = 1}) end, "exp: unknown option 'foo' (it takes no options)"},
      -- torch.matmul's out= is not provided: refused, never dropped with out left unwritten
      {function() local _ = accel.matmul(x, x:transpose(2, 3), {out = accel.zeros(2, 3, 3)}) end,
       "matmul: unknown option 'out' (it takes no options)"},
      {function() local _ = accel.matmul(x, x:transpose(2, 3), 7) end, "unexpected argument #3 (number)"},
      {function() local _ = x:to({dtyp = accel.float64}) end, "to: unknown option 'dtyp'"},
      {function() local _ = accel.zeros(2, {dtyp = accel.float64}) end, "zeros: unknown option 'dtyp'"},
      {function() local _ = accel.randint(0, 3, {2}, {devise = "cpu"}) end, "randint: unknown option 'devise'"},
    }) do
      local ok, err = pcall(c[1])
      assert.is_false(ok, c[2])
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err))
    end
  end)

  it("sum/prod of integers give int64; mean of integers is an error or float like PyTorch", function()
    local i = accel.tensor({{1, 2, 3}, {4, 5, 6}}, {dtype = accel.int32})
    local s = i:sum()
    assert.are.equal(accel.int64, s.dtype)
    assert.are.equal(21, s:item())
    assert.are.equal("integer", math.type(s:item()))
    assert_exact({6, 15}, i:sum(2):tolist())
    assert.are.equal(720, i:prod():item())
    local b = accel.tensor{true, false, true}
    assert.are.equal(2, b:sum():item())
    assert.are.equal(accel.int64, b:sum().dtype)
    assert.are.equal(6, i:amax():item())
    assert.are.equal(accel.int32, i:amax().dtype)
  end)

  it("max(dim)/min(dim) return values and 0-based indices", function()
    local m = accel.tensor{{3.0, 9.0, 1.0, 4.0}, {8.0, 2.0, 7.0, -1.0}, {0.5, 0.25, 6.0, 6.5}}
    local values, indices = m:max(2)
    assert.are.same({9, 8, 6.5}, values:tolist())
    assert.are.equal(accel.int64, indices.dtype)
    assert_exact({1, 0, 3}, indices:tolist())
    local v1, i1 = m:max(1)
    assert.are.same({8, 9, 7, 6.5}, v1:tolist())
    assert_exact({1, 0, 1, 2}, i1:tolist())
    local vmin, imin = m:min(-1)
    assert.are.same({1, -1, 0.25}, vmin:tolist())
    assert_exact({2, 3, 1}, imin:tolist())
    local vk, ik = m:max(2, {keepdim = true})
    assert.are.same({{9}, {8}, {6.5}}, vk:tolist())
    assert_exact({{1}, {0}, {3}}, ik:tolist())
    local vk2, ik2 = m:min(1, true)
    assert.are.same({{0.5, 0.25, 1, -1}}, vk2:tolist())
    assert_exact({{2, 2, 0, 1}}, ik2:tolist())
    -- whole-tensor max/min: one value
    assert.are.equal(9, m:max():item())
    assert.are.equal(-1, m:min():item())
  end)

  it("max(dim) picks the first index among ties", function()
    local _, i = accel.tensor{{1.0, 5.0, 5.0, 2.0}}:max(2)
    assert_exact({1}, i:tolist())
    local _, j = accel.tensor{{4.0, 1.0, 1.0}}:min(2)
    assert_exact({1}, j:tolist())
  end)

  it("argmax / argmin: 0-based, over a dim or the flattened tensor", function()
    local m = accel.tensor{{3.0, 9.0, 1.0, 4.0}, {8.0, 2.0, 7.0, -1.0}, {0.5, 0.25, 6.0, 6.5}}
    local a = m:argmax()
    assert.are.equal(accel.int64, a.dtype)
    assert.are.equal(0, a:dim())
    assert.are.equal(1, a:item())
    assert.are.equal(7, m:argmin():item())
    assert_exact({1, 0, 3}, m:argmax(2):tolist())
    assert_exact({1, 0, 1, 2}, m:argmax(1):tolist())
    assert_exact({2, 3, 1}, m:argmin(-1):tolist())
    assert_exact({{1}, {0}, {3}}, m:argmax(2, {keepdim = true}):tolist())
    assert_exact({1, 0, 3}, m:argmax({dim = 2}):tolist())
  end)

  it("mean of an empty reduction is nan, sum is 0", function()
    local e = accel.zeros(0, 3)
    assert_exact({0, 0, 0}, e:sum(1):tolist())
    assert.is_true(e:mean():item() ~= e:mean():item())
  end)

  -- torch 2.15, x = zeros(0, 3, 1) (float32 / float64 / bfloat16; int32: sum and prod, as int64):
  -- x.sum((0, 2)) -> [0, 0, 0], x.prod((0, 2)) -> [1, 1, 1], x.mean((0, 2)) and x.nanmean((0, 2)) ->
  -- [nan, nan, nan], each of shape (1, 3, 1) with keepdim; x.amax((0, 2)) raises "amax(): Expected reduction
  -- dim 0 to have non-zero size."
  it("over several dims, one of them empty: sum 0, prod 1, mean / nanmean nan, amax / amin an error", function()
    local function check(x, op, want)
      for _, keep in ipairs{false, true} do
        support.dirty_cache()
        local r = x[op](x, {1, 3}, keep)
        local what = op .. " " .. tostring(x.dtype) .. (keep and " keepdim" or "")
        assert.are.same(keep and {1, 3, 1} or {3}, shape_of(r), what)
        for _, v in ipairs(flatten(r:tolist())) do
          if want ~= want then assert.is_true(v ~= v, what) else assert.are.equal(want, v, what) end
        end
      end
    end
    for _, dt in ipairs{accel.float32, accel.float64, accel.bfloat16} do
      local x = accel.zeros({0, 3, 1}, {dtype = dt})
      for _, c in ipairs{{"sum", 0}, {"prod", 1}, {"mean", nan}, {"nanmean", nan}} do check(x, c[1], c[2]) end
      for _, op in ipairs{"amax", "amin"} do
        local ok, err = pcall(x[op], x, {1, 3})
        assert.is_false(ok)
        assert.truthy(tostring(err):find(op .. ": cannot reduce over a zero-size dimension", 1, true), err)
      end
    end
    local xi = accel.zeros({0, 3, 1}, {dtype = accel.int32})
    check(xi, "sum", 0)
    check(xi, "prod", 1)
    assert.are.equal(accel.int64, xi:sum({1, 3}).dtype)
  end)
end)

---------------------------------------------------------------- comparisons / where / masked_fill

describe("comparisons", function()
  local a = accel.tensor{1.0, 2.0, 3.0, nan}
  local b = accel.tensor{3.0, 2.0, 1.0, nan}
  local as, bs = a:tolist(), b:tolist()
  local ops = {
    eq = function(x, y) return x == y end, ne = function(x, y) return x ~= y end,
    lt = function(x, y) return x < y end, le = function(x, y) return x <= y end,
    gt = function(x, y) return x > y end, ge = function(x, y) return x >= y end,
  }
  for name, f in pairs(ops) do
    it(name .. " with a tensor and with a scalar returns bool", function()
      local r = a[name](a, b)
      assert.are.equal(accel.bool, r.dtype)
      assert_exact(map2(as, bs, f), r:tolist(), name)
      local s = a[name](a, 2)
      assert.are.equal(accel.bool, s.dtype)
      assert_exact(map(as, function(x) return f(x, 2) end), s:tolist(), name .. " scalar")
    end)
  end

  it("compare int and float tensors by value", function()
    assert_exact({false, true, false}, accel.tensor{1, 2, 3}:eq(accel.tensor{1.5, 2.0, 2.5}):tolist())
    assert_exact({true, false, true}, accel.tensor{1, 2, 3}:lt(2.5):logical_xor(accel.tensor{false, true, true}):tolist())
  end)

  it("equal / allclose / any / all", function()
    assert.is_true(accel.tensor{1.0, 2.0}:equal(accel.tensor{1.0, 2.0}))
    assert.is_false(accel.tensor{1.0, 2.0}:equal(accel.tensor{1.0, 2.5}))
    assert.is_true(accel.tensor{1.0, 2.0}:allclose(accel.tensor{1.0, 2.0 + 1e-7}))
    assert.is_false(accel.tensor{1.0, 2.0}:allclose(accel.tensor{1.0, 2.1}))
    assert.is_true(accel.tensor{false, true}:any():item())
    assert.is_false(accel.tensor{false, true}:all():item())
  end)
end)

describe("where / masked_fill", function()
  local c = accel.tensor{true, false, true, false}
  local a = accel.tensor{1.0, 2.0, 3.0, 4.0}
  local b = accel.tensor{-1.0, -2.0, -3.0, -4.0}

  it("accel.where(cond, a, b)", function()
    assert.are.same({1, -2, 3, -4}, accel.where(c, a, b):tolist())
    assert.are.same({1, 0, 3, 0}, accel.where(c, a, 0.0):tolist())
    assert.are.same({9, 2, 9, 4}, accel.where(c, 9.0, a):tolist())
  end)

  it("t:where(cond, other) keeps t where cond", function()
    assert.are.same({1, -2, 3, -4}, a:where(c, b):tolist())
  end)

  it("broadcasts cond and values", function()
    local cond = accel.tensor{{true}, {false}}
    local r = accel.where(cond, accel.tensor{1.0, 2.0, 3.0}, accel.tensor{{10.0}, {20.0}})
    assert.are.same({{1, 2, 3}, {20, 20, 20}}, r:tolist())
  end)

  it("promotes a and b", function()
    local r = accel.where(c, accel.tensor{1, 2, 3, 4}, b)
    assert.are.equal(accel.float32, r.dtype)
    assert.are.same({1, -2, 3, -4}, r:tolist())
  end)

  it("masked_fill and masked_fill_ (with a broadcast mask)", function()
    local m = accel.tensor{{1.0, 2.0}, {3.0, 4.0}}
    local mask = accel.tensor{{true, false}, {false, true}}
    assert.are.same({{0, 2}, {3, 0}}, m:masked_fill(mask, 0):tolist())
    assert.are.same({{1, 2}, {3, 4}}, m:tolist())
    assert.are.same({{-inf, -inf}, {3, 4}}, m:masked_fill(accel.tensor{{true}, {false}}, -inf):tolist())
    local r = m:masked_fill(accel.tensor{true, false}, 7.5)
    assert.are.same({{7.5, 2}, {7.5, 4}}, r:tolist())
    m:masked_fill_(mask, -1)
    assert.are.same({{-1, 2}, {3, -1}}, m:tolist())
  end)
end)

---------------------------------------------------------------- indexing ops

describe("gather / index_select", function()
  local src = accel.tensor{{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}

  it("gather along dim 2 with 0-based index values", function()
    local idx = accel.tensor{{2, 0}, {1, 1}}
    local g = src:gather(2, idx)
    assert.are.same({2, 2}, shape_of(g))
    assert.are.same({{3, 1}, {5, 5}}, g:tolist())
  end)

  it("gather along dim 1", function()
    local idx = accel.tensor{{1, 0, 1}}
    assert.are.same({{4, 2, 6}}, src:gather(1, idx):tolist())
    assert.are.same({{4, 2, 6}}, src:gather(-2, idx):tolist())
  end)

  it("index_select along each dim", function()
    assert.are.same({{3, 1, 3}, {6, 4, 6}}, src:index_select(2, accel.tensor{2, 0, 2}):tolist())
    assert.are.same({{4, 5, 6}, {1, 2, 3}, {4, 5, 6}}, src:index_select(1, accel.tensor{1, 0, 1}):tolist())
    assert.are.same({{2}, {5}}, src:index_select(-1, accel.tensor{1}):tolist())
  end)

  it("accept int32 index tensors", function()
    local idx = accel.tensor({2, 1}, {dtype = accel.int32})
    assert.are.same({{3, 2}, {6, 5}}, src:index_select(2, idx):tolist())
  end)
end)

describe("cat / stack / split / chunk / unbind", function()
  local a = accel.tensor{{1.0, 2.0}, {3.0, 4.0}}
  local b = accel.tensor{{5.0, 6.0}}
  local c = accel.tensor{{7.0}, {8.0}}

  it("cat along dim 1 (default) and dim 2", function()
    local r = accel.cat({a, b})
    assert.are.same({3, 2}, shape_of(r))
    assert.are.same({{1, 2}, {3, 4}, {5, 6}}, r:tolist())
    assert.are.same({{1, 2, 7}, {3, 4, 8}}, accel.cat({a, c}, 2):tolist())
    assert.are.same({{1, 2, 7}, {3, 4, 8}}, accel.cat({a, c}, -1):tolist())
    assert.are.same({{1, 2}, {3, 4}}, accel.cat({a}):tolist())
  end)

  it("cat promotes dtypes", function()
    local r = accel.cat({accel.tensor{1, 2}, accel.tensor{0.5}})
    assert.are.equal(accel.float32, r.dtype)
    assert.are.same({1, 2, 0.5}, r:tolist())
  end)

  it("stack adds a dim", function()
    local x, y = accel.tensor{1.0, 2.0, 3.0}, accel.tensor{4.0, 5.0, 6.0}
    local r = accel.stack({x, y})
    assert.are.same({2, 3}, shape_of(r))
    assert.are.same({{1, 2, 3}, {4, 5, 6}}, r:tolist())
    local s = accel.stack({x, y}, 2)
    assert.are.same({3, 2}, shape_of(s))
    assert.are.same({{1, 4}, {2, 5}, {3, 6}}, s:tolist())
    assert.are.same({3, 2}, shape_of(accel.stack({x, y}, -1)))
  end)

  it("split by size returns a Lua list, the last piece shorter", function()
    local t = accel.arange(10, {dtype = accel.float32})
    local parts = t:split(4)
    assert.are.equal(3, #parts)
    assert.are.same({0, 1, 2, 3}, parts[1]:tolist())
    assert.are.same({4, 5, 6, 7}, parts[2]:tolist())
    assert.are.same({8, 9}, parts[3]:tolist())
  end)

  it("split by a list of sizes and along a dim", function()
    local t = accel.arange(12, {dtype = accel.float32}):view(2, 6)
    local parts = t:split({1, 2, 3}, 2)
    assert.are.equal(3, #parts)
    assert.are.same({{0}, {6}}, parts[1]:tolist())
    assert.are.same({{1, 2}, {7, 8}}, parts[2]:tolist())
    assert.are.same({{3, 4, 5}, {9, 10, 11}}, parts[3]:tolist())
  end)

  it("chunk", function()
    local t = accel.arange(7)
    local parts = t:chunk(3)
    assert.are.equal(3, #parts)
    assert_exact({0, 1, 2}, parts[1]:tolist())
    assert_exact({3, 4, 5}, parts[2]:tolist())
    assert_exact({6}, parts[3]:tolist())
    local m = accel.arange(8):view(2, 4):chunk(2, 2)
    assert.are.equal(2, #m)
    assert_exact({{0, 1}, {4, 5}}, m[1]:tolist())
    assert_exact({{2, 3}, {6, 7}}, m[2]:tolist())
    -- PyTorch: chunk(6, 4) of 6 elements gives 3 chunks of 2
    assert.are.equal(3, #accel.arange(6):chunk(4))
  end)

  it("unbind", function()
    local t = accel.tensor{{1, 2, 3}, {4, 5, 6}}
    local rows = t:unbind()
    assert.are.equal(2, #rows)
    assert_exact({1, 2, 3}, rows[1]:tolist())
    assert_exact({4, 5, 6}, rows[2]:tolist())
    local cols = t:unbind(2)
    assert.are.equal(3, #cols)
    assert_exact({3, 6}, cols[3]:tolist())
  end)
end)

describe("tril / triu", function()
  local m = accel.arange(1, 13, {dtype = accel.float32}):view(3, 4)
  local ml = m:tolist()
  local function ref(k, upper)
    local r = {}
    for i = 1, 3 do
      r[i] = {}
      for j = 1, 4 do
        local keep = upper and (j - i >= k) or (not upper and j - i <= k)
        r[i][j] = keep and ml[i][j] or 0
      end
    end
    return r
  end
  for _, k in ipairs{0, 1, -1, 2, -3} do
    it("diagonal " .. k, function()
      assert.are.same(ref(k, false), m:tril(k):tolist())
      assert.are.same(ref(k, true), m:triu(k):tolist())
    end)
  end
  it("defaults to diagonal 0 and works on batches", function()
    assert.are.same(ref(0, false), m:tril():tolist())
    local b = accel.stack({m, m})
    local r = b:triu():tolist()
    assert.are.same(ref(0, true), r[1])
    assert.are.same(ref(0, true), r[2])
    local bl = accel.ones(3, 3, {dtype = accel.bool}):tril()
    assert.are.equal(accel.bool, bl.dtype)
    assert.are.same({{true, false, false}, {true, true, false}, {true, true, true}}, bl:tolist())
  end)
end)

---------------------------------------------------------------- matmul

local function naive_mm(A, B)
  local n, k, m = #A, #B, #B[1]
  assert(#A[1] == k)
  local C = {}
  for i = 1, n do
    C[i] = {}
    for j = 1, m do
      local s = 0
      for p = 1, k do s = s + A[i][p] * B[p][j] end
      C[i][j] = s
    end
  end
  return C
end

local function randm(dt, ...)
  return accel.randn(...):to(dt)
end

describe("matmul", function()
  for _, dt in ipairs{accel.float32, accel.float64} do
    local rtol = dt == accel.float32 and 1e-5 or 1e-12
    local atol = dt == accel.float32 and 1e-5 or 1e-12
    local tag = " (" .. tostring(dt) .. ")"

    it("1-D . 1-D gives a 0-d dot product" .. tag, function()
      local a, b = randm(dt, 7), randm(dt, 7)
      local r = a:matmul(b)
      assert.are.equal(0, r:dim())
      local as, bs = a:tolist(), b:tolist()
      local s = 0
      for i = 1, 7 do s = s + as[i] * bs[i] end
      assert_close({s}, {r:item()}, rtol, atol)
    end)

    it("2-D . 2-D" .. tag, function()
      local a, b = randm(dt, 5, 7), randm(dt, 7, 3)
      local r = accel.matmul(a, b)
      assert.are.equal(dt, r.dtype)
      assert.are.same({5, 3}, shape_of(r))
      assert_close(naive_mm(a:tolist(), b:tolist()), r:tolist(), rtol, atol)
      assert_close(naive_mm(a:tolist(), b:tolist()), a:mm(b):tolist(), rtol, atol)
    end)

    it("2-D . 2-D with transposed (non-contiguous) operands" .. tag, function()
      local a, b = randm(dt, 7, 5), randm(dt, 3, 7)
      local r = a:t():matmul(b:t())
      assert_close(naive_mm(a:t():contiguous():tolist(), b:t():contiguous():tolist()), r:tolist(), rtol, atol)
    end)

    it("1-D . 2-D and 2-D . 1-D drop the vector dim" .. tag, function()
      local v, m = randm(dt, 4), randm(dt, 4, 3)
      local r = v:matmul(m)
      assert.are.same({3}, shape_of(r))
      assert_close(naive_mm({v:tolist()}, m:tolist())[1], r:tolist(), rtol, atol)
      local m2, w = randm(dt, 3, 4), randm(dt, 4)
      local r2 = m2:matmul(w)
      assert.are.same({3}, shape_of(r2))
      local col = {}
      for i, x in ipairs(w:tolist()) do col[i] = {x} end
      assert_close(map(naive_mm(m2:tolist(), col), function(row) return row[1] end), r2:tolist(), rtol, atol)
    end)

    it("batched 3-D . 3-D" .. tag, function()
      local a, b = randm(dt, 2, 3, 4), randm(dt, 2, 4, 5)
      local r = a:matmul(b)
      assert.are.same({2, 3, 5}, shape_of(r))
      local al, bl, rl = a:tolist(), b:tolist(), r:tolist()
      for i = 1, 2 do assert_close(naive_mm(al[i], bl[i]), rl[i], rtol, atol) end
      assert_close(rl, a:bmm(b):tolist(), rtol, atol)
    end)

    it("3-D . 2-D broadcasts the matrix" .. tag, function()
      local a, b = randm(dt, 3, 2, 4), randm(dt, 4, 5)
      local r = a:matmul(b)
      assert.are.same({3, 2, 5}, shape_of(r))
      local al, bl, rl = a:tolist(), b:tolist(), r:tolist()
      for i = 1, 3 do assert_close(naive_mm(al[i], bl), rl[i], rtol, atol) end
    end)

    it("broadcast batch dims (2,1,3,4) . (3,4,2)" .. tag, function()
      local a, b = randm(dt, 2, 1, 3, 4), randm(dt, 3, 4, 2)
      local r = a:matmul(b)
      assert.are.same({2, 3, 3, 2}, shape_of(r))
      local al, bl, rl = a:tolist(), b:tolist(), r:tolist()
      for i = 1, 2 do
        for j = 1, 3 do assert_close(naive_mm(al[i][1], bl[j]), rl[i][j], rtol, atol) end
      end
    end)
  end

  it("integer matmul stays integer and exact", function()
    local a = accel.tensor{{1, 2}, {3, 4}}
    local b = accel.tensor{{5, 6}, {7, 8}}
    local r = a:matmul(b)
    assert.are.equal(accel.int64, r.dtype)
    assert_exact({{19, 22}, {43, 50}}, r:tolist())
  end)

  -- torch 2.15, for float32, float64 and bfloat16: zeros(1,2,0).bmm(zeros(1,0,3)), zeros(1,2,0) @ zeros(0,3),
  -- F.linear(zeros(1,2,0), zeros(3,0)) -> zeros(1,2,3); zeros(2,1,0) @ zeros(2,0,3) -> zeros(2,1,3);
  -- zeros(2,0).mm(zeros(0,3)) -> zeros(2,3); zeros(0) @ zeros(0,3) -> zeros(3); F.linear(.., ones(3)) and
  -- full((1,2,3), 2).baddbmm(zeros(1,2,0), zeros(1,0,3), beta=0.5) -> ones(1,2,3)
  it("an empty inner dimension (K = 0) gives zeros (or beta * C), never leftover memory, as torch", function()
    local z23, o23 = {{0, 0, 0}, {0, 0, 0}}, {{1, 1, 1}, {1, 1, 1}}
    for _, dt in ipairs{accel.float32, accel.float64, accel.bfloat16} do
      local o = {dtype = dt}
      local function z(...) return accel.zeros({...}, o) end
      local cases = {
        {"bmm", function() return z(1, 2, 0):bmm(z(1, 0, 3)) end, {z23}},
        {"3-D @ 2-D", function() return z(1, 2, 0):matmul(z(0, 3)) end, {z23}},
        {"batched", function() return z(2, 1, 0):matmul(z(2, 0, 3)) end, {{z23[1]}, {z23[1]}}},
        {"mm", function() return z(2, 0):mm(z(0, 3)) end, z23},
        {"1-D @ 2-D", function() return z(0):matmul(z(0, 3)) end, z23[1]},
        {"linear", function() return F.linear(z(1, 2, 0), z(3, 0)) end, {z23}},
        {"linear + bias", function() return F.linear(z(1, 2, 0), z(3, 0), accel.ones(3, o)) end, {o23}},
        {"baddbmm", function() return accel.full({1, 2, 3}, 2, o):baddbmm(z(1, 2, 0), z(1, 0, 3), {beta = 0.5}) end,
          {o23}},
      }
      for _, c in ipairs(cases) do
        support.dirty_cache()
        assert.are.same(c[3], c[2]():tolist(), c[1] .. " " .. tostring(dt))
      end
    end
  end)

  it("bf16 matmul is close to the float64 product", function()
    local a, b = accel.randn(8, 16):bfloat16(), accel.randn(16, 4):bfloat16()
    local r = a:matmul(b)
    assert.are.equal(accel.bfloat16, r.dtype)
    local exp = naive_mm(a:tolist(), b:tolist())
    -- each output rounded to bf16 once (fp32 accumulation): rel 2^-8 plus a little
    local e, g = flatten(exp), flatten(r:tolist())
    for i = 1, #e do assert.is_true(math.abs(e[i] - g[i]) <= 2 ^ -8 * math.abs(e[i]) + 1e-2, i) end
  end)
end)

---------------------------------------------------------------- softmax / log_softmax

local function softmax_rows(rows, log)
  local out = {}
  for i, r in ipairs(rows) do
    local m = -inf
    for _, v in ipairs(r) do m = math.max(m, v) end
    local s = 0
    for _, v in ipairs(r) do s = s + math.exp(v - m) end
    out[i] = {}
    for j, v in ipairs(r) do
      out[i][j] = log and (v - m - math.log(s)) or math.exp(v - m) / s
    end
  end
  return out
end

local function transpose(rows)
  local t = {}
  for i = 1, #rows[1] do
    t[i] = {}
    for j = 1, #rows do t[i][j] = rows[j][i] end
  end
  return t
end

describe("softmax / log_softmax", function()
  accel.set_seed(11)
  local x = accel.randn(4, 6):mul(3)
  local xl = x:tolist()

  it("along the last dim (2 and -1)", function()
    local exp = softmax_rows(xl)
    assert_close(exp, x:softmax(2):tolist())
    assert_close(exp, x:softmax(-1):tolist())
    assert_close(exp, F.softmax(x, -1):tolist())
    assert_close(exp, F.softmax(x, {dim = 2}):tolist())
    local lexp = softmax_rows(xl, true)
    assert_close(lexp, x:log_softmax(2):tolist(), 1e-6, 1e-6)
    assert_close(lexp, F.log_softmax(x, -1):tolist(), 1e-6, 1e-6)
  end)

  it("along dim 1", function()
    local exp = transpose(softmax_rows(transpose(xl)))
    assert_close(exp, x:softmax(1):tolist())
    local lexp = transpose(softmax_rows(transpose(xl), true))
    assert_close(lexp, F.log_softmax(x, 1):tolist(), 1e-6, 1e-6)
  end)

  it("is stable for large logits and handles -inf", function()
    local big = accel.tensor{{1000.0, 1001.0, 1002.0}, {-inf, 0.0, 0.0}}
    local exp = softmax_rows({{0, 1, 2}, {-inf, 0, 0}})
    assert_close(exp, big:softmax(2):tolist())
    local l = big:log_softmax(2):tolist()
    assert_close(softmax_rows({{0, 1, 2}}, true)[1], l[1], 1e-6, 1e-6)
    assert.are.equal(-inf, l[2][1])
  end)

  it("F.softmax with {dtype=} computes in that dtype", function()
    local r = F.softmax(x, -1, {dtype = accel.float64})
    assert.are.equal(accel.float64, r.dtype)
    assert_close(softmax_rows(xl), r:tolist(), 1e-12, 1e-14)
  end)

  it("F.softmax refuses a positional dtype (torch's third argument there is _stacklevel)", function()
    support.expect_error(function() local _ = F.log_softmax(x, 2, accel.float64) end, "log_softmax: pass the dtype as an option",
      "{dtype = accel.float64}")
    support.expect_error(function() local _ = x:softmax(2, 3) end, "softmax: argument #2 should be a dtype or an options table")
  end)

  it("takes the dtype positionally too, as torch's x.softmax(dim, torch.float64)", function()
    for _, r in ipairs({x:softmax(2, accel.float64), accel.softmax(x, 2, accel.float64)}) do
      assert.are.equal(accel.float64, r.dtype)
      assert_close(softmax_rows(xl), r:tolist(), 1e-12, 1e-14)
    end
    local l = x:log_softmax(2, accel.float64)
    assert.are.equal(accel.float64, l.dtype)
    assert_close(softmax_rows(xl, true), l:tolist(), 1e-12, 1e-14)
  end)
end)

---------------------------------------------------------------- nn.functional losses, layer_norm

local function ce_ref(logits, targets, o)
  o = o or {}
  local ignore = o.ignore_index or -100
  local eps = o.label_smoothing or 0
  local reduction = o.reduction or "mean"
  local lsm = softmax_rows(logits, true)
  local C = #logits[1]
  local losses, total, count = {}, 0, 0
  for i, t in ipairs(targets) do
    if t == ignore then
      losses[i] = 0
    else
      local smooth = 0
      for c = 1, C do smooth = smooth - lsm[i][c] end
      losses[i] = (1 - eps) * (-lsm[i][t + 1]) + eps / C * smooth
      total = total + losses[i]
      count = count + 1
    end
  end
  if reduction == "none" then return losses end
  if reduction == "sum" then return total end
  return total / count
end

describe("nn.functional.cross_entropy", function()
  accel.set_seed(21)
  local logits = accel.randn(6, 5):mul(2)
  local target = accel.tensor{0, 4, 2, 2, 1, 3}
  local ll, tl = logits:tolist(), target:tolist()

  it("mean (default), sum and none reductions", function()
    local m = F.cross_entropy(logits, target)
    assert.are.equal(0, m:dim())
    assert_close({ce_ref(ll, tl)}, {m:item()}, 1e-6, 1e-6, "mean")
    assert_close({ce_ref(ll, tl, {reduction = "sum"})}, {F.cross_entropy(logits, target, {reduction = "sum"}):item()},
      1e-6, 1e-6, "sum")
    local none = F.cross_entropy(logits, target, {reduction = "none"})
    assert.are.same({6}, shape_of(none))
    assert_close(ce_ref(ll, tl, {reduction = "none"}), none:tolist(), 1e-6, 1e-6, "none")
  end)

  it("ignore_index drops those rows (mean over the rest)", function()
    local t2 = accel.tensor{0, -100, 2, -100, 1, 3}
    local t2l = t2:tolist()
    assert_close({ce_ref(ll, t2l)}, {F.cross_entropy(logits, t2):item()}, 1e-6, 1e-6, "default ignore")
    local t3 = accel.tensor{0, 4, 2, 2, 1, 3}
    local o = {ignore_index = 2}
    assert_close({ce_ref(ll, tl, o)}, {F.cross_entropy(logits, t3, o):item()}, 1e-6, 1e-6, "ignore 2")
    local on = {ignore_index = 2, reduction = "none"}
    assert_close(ce_ref(ll, tl, on), F.cross_entropy(logits, t3, on):tolist(), 1e-6, 1e-6, "ignore none")
    local os = {ignore_index = 2, reduction = "sum"}
    assert_close({ce_ref(ll, tl, os)}, {F.cross_entropy(logits, t3, os):item()}, 1e-6, 1e-6, "ignore sum")
  end)

  it("label_smoothing", function()
    for _, eps in ipairs{0.1, 0.5} do
      for _, red in ipairs{"mean", "sum", "none"} do
        local o = {label_smoothing = eps, reduction = red}
        local got = F.cross_entropy(logits, target, o)
        local exp = ce_ref(ll, tl, o)
        if red == "none" then assert_close(exp, got:tolist(), 1e-6, 1e-6, red .. " " .. eps)
        else assert_close({exp}, {got:item()}, 1e-6, 1e-6, red .. " " .. eps) end
      end
    end
  end)

  it("label_smoothing with ignore_index", function()
    local t2 = accel.tensor{0, -100, 2, -100, 1, 3}
    local o = {label_smoothing = 0.2}
    assert_close({ce_ref(ll, t2:tolist(), o)}, {F.cross_entropy(logits, t2, o):item()}, 1e-6, 1e-6)
  end)

  it("(N, C, d) logits with (N, d) targets", function()
    local x = accel.randn(2, 3, 4)
    local t = accel.tensor{{0, 1, 2, 1}, {2, 2, 0, 1}}
    local xl = x:tolist()
    -- rows: for each n, d: logits[n][:][d]
    local rows, tgt = {}, {}
    for n = 1, 2 do
      for d = 1, 4 do
        local r = {}
        for c = 1, 3 do r[c] = xl[n][c][d] end
        rows[#rows + 1] = r
        tgt[#tgt + 1] = t:tolist()[n][d]
      end
    end
    assert_close({ce_ref(rows, tgt)}, {F.cross_entropy(x, t):item()}, 1e-6, 1e-6)
    local none = F.cross_entropy(x, t, {reduction = "none"})
    assert.are.same({2, 4}, shape_of(none))
    assert_close(ce_ref(rows, tgt, {reduction = "none"}), none:tolist(), 1e-6, 1e-6)
  end)

  it("float64 logits give float64 loss", function()
    local l64 = logits:double()
    local r = F.cross_entropy(l64, target)
    assert.are.equal(accel.float64, r.dtype)
    assert_close({ce_ref(ll, tl)}, {r:item()}, 1e-12, 1e-12)
  end)
end)

describe("nn.functional.mse_loss / layer_norm", function()
  accel.set_seed(31)
  local a, b = accel.randn(3, 4), accel.randn(3, 4)
  local al, bl = flatten(a:tolist()), flatten(b:tolist())

  it("mse_loss mean / sum / none", function()
    local sq = map2(al, bl, function(x, y) return (x - y) ^ 2 end)
    assert_close({l_mean(sq)}, {F.mse_loss(a, b):item()}, 1e-6, 1e-6)
    assert_close({l_sum(sq)}, {F.mse_loss(a, b, {reduction = "sum"}):item()}, 1e-6, 1e-6)
    assert_close(sq, F.mse_loss(a, b, {reduction = "none"}):tolist(), 1e-6, 1e-7)
  end)

  local ln_ref = support.ref_norm_rows

  it("layer_norm over the last dim, with and without weight/bias", function()
    local x = accel.randn(5, 8):mul(3):add(1)
    local xl = x:tolist()
    assert_close(ln_ref(xl, nil, nil, 1e-5), F.layer_norm(x, {8}):tolist(), 1e-5, 1e-5)
    assert_close(ln_ref(xl, nil, nil, 1e-5), F.layer_norm(x, 8):tolist(), 1e-5, 1e-5)
    local w, bias = accel.randn(8), accel.randn(8)
    assert_close(ln_ref(xl, w:tolist(), bias:tolist(), 1e-5), F.layer_norm(x, {8}, w, bias):tolist(), 1e-5, 1e-5)
    assert_close(ln_ref(xl, w:tolist(), bias:tolist(), 0.1), F.layer_norm(x, {8}, w, bias, 0.1):tolist(), 1e-5, 1e-5)
    assert_close(ln_ref(xl, w:tolist(), bias:tolist(), 0.1),
      F.layer_norm(x, {8}, {weight = w, bias = bias, eps = 0.1}):tolist(), 1e-5, 1e-5)
  end)

  it("layer_norm over the last two dims", function()
    local x = accel.randn(2, 3, 4, {dtype = accel.float64})
    local xl = x:tolist()
    local rows = {}
    for i = 1, 2 do rows[i] = flatten(xl[i]) end
    local exp = ln_ref(rows, nil, nil, 1e-5)
    local got = F.layer_norm(x, {3, 4}):tolist()
    for i = 1, 2 do assert_close(exp[i], flatten(got[i]), 1e-12, 1e-12) end
  end)
end)

describe("accel.nn.functional activations", function()
  it("relu / silu / sigmoid / tanh / leaky_relu match the methods", function()
    local x = inputs()
    local xs = x:tolist()
    assert_close(map(xs, function(v) return math.max(v, 0) end), F.relu(x):tolist())
    assert_close(map(xs, function(v) return v * sigmoid(v) end), F.silu(x):tolist())
    assert_close(map(xs, sigmoid), F.sigmoid(x):tolist())
    assert_close(map(xs, tanh), F.tanh(x):tolist())
    assert_close(map(xs, function(v) return v > 0 and v or 0.1 * v end), F.leaky_relu(x, 0.1):tolist())
  end)
end)

describe("large and non-contiguous inputs (threaded and strided paths)", function()
  it("float32 sum of 10^7 values is accurate (no naive float32 accumulation)", function()
    local t = accel.full({10000000}, 0.1)
    local exact = 1e7 * f32(0.1)
    local s = t:sum():item()
    assert.is_true(math.abs(s - exact) <= 1e-5 * exact, "sum " .. s .. " vs " .. exact)
    local m = t:mean():item()
    assert.is_true(math.abs(m - f32(0.1)) <= 1e-6, "mean " .. m)
  end)

  it("float32 sum past 2^24 keeps counting", function()
    local n = math.floor(2^24) + 10
    assert.are.equal(n, accel.ones(n):sum():item())
  end)

  it("var of values with a large offset (no catastrophic cancellation)", function()
    accel.set_seed(5)
    local x = accel.randn(100000, {dtype = accel.float64}):add(1e6)
    local l = x:tolist()
    assert_close({l_var(l)}, {x:var():item()}, 1e-8, 0)
    local x32 = accel.randn(100000):add(1000)
    local l32 = x32:tolist()
    assert_close({l_var(l32)}, {x32:var():item()}, 1e-3, 0)
  end)

  it("reductions of a transposed tensor", function()
    accel.set_seed(6)
    local a = accel.randn(37, 53, {dtype = accel.float64})
    local t = a:t() -- (53, 37), non-contiguous
    local al = a:tolist()
    local colsum = {}
    for j = 1, 53 do
      local s = 0
      for i = 1, 37 do s = s + al[i][j] end
      colsum[j] = s
    end
    assert_close(colsum, t:sum(2):tolist(), 1e-12, 1e-12)
    assert_close(colsum, t:sum(-1):tolist(), 1e-12, 1e-12)
    local _, idx = t:max(2)
    local il = idx:tolist()
    for j = 1, 53 do
      local best, bi = -inf, nil
      for i = 1, 37 do if al[i][j] > best then best, bi = al[i][j], i - 1 end end
      assert.are.equal(bi, il[j])
    end
  end)

  it("binary op on a large transposed operand plus a broadcast row", function()
    accel.set_seed(8)
    local a = accel.randn(300, 400)
    local b = accel.randn(300)
    local r = a:t() * b -- (400, 300) * (300)
    local al, bl, rl = a:tolist(), b:tolist(), r:tolist()
    for _, ij in ipairs{{1, 1}, {400, 300}, {17, 250}, {399, 2}, {200, 150}} do
      local i, j = ij[1], ij[2]
      assert.are.equal(f32(al[j][i] * bl[j]), rl[i][j])
    end
    local s = r:sum():item()
    local ref = 0
    for i = 1, 300 do for j = 1, 400 do ref = ref + al[i][j] * bl[i] end end
    assert.is_true(math.abs(s - ref) < 1e-3 * 300)
  end)

  it("unary op on a large strided view", function()
    local a = accel.arange(200000, {dtype = accel.float64}):view(400, 500):div(100000)
    local v = a:narrow(2, 101, 300):t() -- (300, 400), strided
    local e = v:exp()
    assert.is_true(e:is_contiguous())
    local l = e:tolist()
    for _, ij in ipairs{{1, 1}, {300, 400}, {150, 7}} do
      local i, j = ij[1], ij[2]
      local x = ((j - 1) * 500 + (i - 1) + 100) / 100000
      assert_close({math.exp(x)}, {l[i][j]}, 1e-12, 0)
    end
  end)

  it("softmax over a long row sums to one", function()
    accel.set_seed(9)
    local s = accel.randn(3, 50000):mul(5):softmax(2):sum(2):tolist()
    assert_close({1, 1, 1}, s, 1e-5, 0)
  end)
end)

-- Against values computed by hand and PyTorch 2.15's documented behaviour.
describe("PyTorch's rules for options, promotion and in-place writes", function()
  local function fails(pattern, f)
    local ok, err = pcall(f)
    assert.is_false(ok)
    assert.matches(pattern, tostring(err))
  end

  it("div rounding_mode, alpha with a number, unknown options refused", function()
    local a = accel.tensor({-7, 7, 6, -6})
    assert.same({-4, 3, 3, -3}, a:div(2, {rounding_mode = "floor"}):tolist())
    assert.same({-3, 3, 3, -3}, a:div(2, {rounding_mode = "trunc"}):tolist())
    assert.same({-3, -3, 1, -1}, a:div(accel.tensor({2, -2, 4, 4}), {rounding_mode = "trunc"}):tolist())
    assert.same({-3.5, 3.5, 3, -3}, a:div(2):tolist())
    assert.same({7, 8}, accel.tensor({1.0, 2.0}):add(2, {alpha = 3}):tolist())
    fails("alpha must not be a floating point number", function() return accel.tensor({1, 2}):add(1, {alpha = 0.5}) end)
    fails("unknown option 'beta'", function() return accel.ones(1):mul(1, {beta = 2}) end)
    fails("rounding_mode to be one of nil, 'trunc', or 'floor'", function() return accel.ones(1):div(1, {rounding_mode = "up"}) end)
    fails("unknown option 'out'", function() return accel.ones(2, 2):matmul(accel.ones(2, 2), {out = 1}) end)
  end)

  it("any / all over dims, softmax dtype, tril_ in place, full({}, v)", function()
    local b = accel.tensor({{true, false, true}, {true, true, true}})
    assert.same({true, true}, b:any(2):tolist())
    assert.same({true, false, true}, b:all(1):tolist())
    assert.same({{false}, {true}}, b:all(2, true):tolist())
    assert.are.equal(accel.float64, accel.randn(2, 3):softmax(2, {dtype = accel.float64}).dtype)
    local t = accel.ones(2, 2)
    t:tril_()
    assert.same({{1, 0}, {1, 1}}, t:tolist())
    assert.same({}, accel.full({}, 5).shape)
  end)

  it("0-dim tensors promote by kind only; integer rounding keeps the dtype", function()
    local bf = accel.ones(2, {dtype = accel.bfloat16})
    local i32 = accel.tensor({1, 2}, {dtype = accel.int32})
    assert.are.equal(accel.bfloat16, (bf * accel.tensor(1.5)).dtype)
    assert.are.equal(accel.int32, (i32 + accel.tensor(1)).dtype)
    assert.are.equal(accel.float64, (i32 + accel.tensor(1.5, {dtype = accel.float64})).dtype)
    assert.are.equal(accel.float32, (accel.ones(2) + accel.tensor(1.0, {dtype = accel.float64})).dtype)
    assert.are.equal(accel.int64, accel.tensor({2, 4}):floor().dtype)
    fails("Integers to negative integer powers are not allowed", function() return accel.tensor({1, 2}) ^ -1 end)
    fails("Negation, the `%-` operator, on a bool tensor", function() return -accel.tensor({true}) end)
    fails("Subtraction, the `%-` operator, with two bool tensors", function()
      return accel.tensor({true}) - accel.tensor({false})
    end)
  end)

  it("var / std positional arguments are torch's (dim, unbiased, keepdim)", function()
    local x = accel.tensor({{1, 2, 4}, {1, 1, 1}}, {dtype = accel.float64})
    assert_close({14 / 9, 0}, x:var(2, false):tolist(), 1e-12, 1e-12)
    assert_close({7 / 3, 0}, x:var(2, true):tolist(), 1e-12, 1e-12)
    assert.same({2, 1}, x:var(2, true, true).shape)
  end)

  -- expected values: PyTorch 2.15 (x.norm(1, keepdim=True), torch.norm(x, None, 1), x.sum(dim=None,
  -- keepdim=True), v.var(None, False), v.std(None, False, True), v.var(None, correction=0))
  it("a positional p before options, and nil for the default dim or keepdim, are read as torch's", function()
    local x = accel.tensor({{1, -2, 3}, {-4, 5, -6}}, {dtype = accel.float64})
    assert.same({{21}}, x:norm(1, {keepdim = true}):tolist())
    assert.same({5, 7, 9}, x:norm(1, {dim = 1}):tolist())
    assert.same({5, 7, 9}, accel.norm(x, 1, {dim = 1}):tolist())
    assert_close({3.7416573867739413, 8.774964387392123}, x:norm(nil, 2):tolist(), 1e-12, 0)
    assert_close({{7.611662611020244}}, x:norm(3, nil, true):tolist(), 1e-12, 0)
    assert.same({{-3}}, x:sum(nil, true):tolist())
    assert.same({{-3}}, x:sum(nil, {keepdim = true}):tolist())
    assert.same({{2}, {-5}}, x:sum(2, nil, {keepdim = true}):tolist())
    local v = accel.tensor({1, 2, 4, 7}, {dtype = accel.float64})
    assert.are.equal(5.25, v:var(nil, false):item())
    assert.are.equal(5.25, v:var(nil, {correction = 0}):item())
    assert.same({1}, v:std(nil, false, true).shape)
    assert_close({2.29128784747792}, v:std(nil, false, true):tolist(), 1e-12, 0)
  end)

  -- PyTorch 2.15: torch.add(b, b, alpha=2) of bools is [True, False]; tensor([1, nan, 0]).norm(0) is 2;
  -- zeros(3).clamp_(zeros(2, 3), ones(2, 3)) and v.var(unbiased=True, correction=0) raise
  it("bool add with alpha stays bool; norm(0) counts NaN as nonzero; clamp_ and var refuse what torch refuses", function()
    local b = accel.tensor({true, false})
    local r = accel.add(b, b, {alpha = 2})
    assert.are.equal(accel.bool, r.dtype)
    assert.same({true, false}, r:tolist())
    -- torch takes alpha as a bool for bool tensors: alpha=-1 and alpha=True give [True, False], b.add_(b, alpha=2) too
    assert.same({true, false}, accel.add(b, b, {alpha = -1}):tolist())
    assert.same({true, false}, accel.add(b, b, {alpha = true}):tolist())
    local c = b:clone()
    c:add_(b, {alpha = 2})
    assert.same({true, false}, c:tolist())
    assert.are.equal(2, accel.tensor({1, nan, 0}):norm(0):item())
    support.expect_error(function() accel.zeros(3):clamp_(accel.zeros(2, 3), accel.ones(2, 3)) end,
      "clamp_: output with shape [3] doesn't match the broadcast shape [2, 3]")
    support.expect_error(function() local _ = accel.tensor({1.0, 2, 4}):var({unbiased = true, correction = 0}) end,
      "var: give unbiased or correction, not both")
    support.expect_error(function() local _ = accel.tensor({1.0, 2, 4}):std(1, {unbiased = false, correction = 1}) end,
      "std: give unbiased or correction, not both")
    support.expect_error(function() local _ = accel.tensor({1.0, 2, 4}):var(1, false, {correction = 1}) end,
      "var: give unbiased or correction, not both")
    -- torch: x.max(keepdim=True) without a dim, x.norm(1, p=3), allclose(atol=-1) and x.exp(x) raise
    local x = accel.tensor({{1, 2}, {3, 4}}, {dtype = accel.float32})
    support.expect_error(function() local _ = x:max(nil, true) end, "max: keepdim needs a dim")
    support.expect_error(function() local _ = x:min({keepdim = true}) end, "min: keepdim needs a dim")
    support.expect_error(function() local _ = x:norm(1, {p = 3}) end, "norm: got multiple values for argument 'p'")
    support.expect_error(function() local _ = x:allclose(x, {atol = -1, rtol = 0}) end,
      "allclose: atol must be greater than or equal to zero, got -1")
    support.expect_error(function() local _ = x:exp(x) end, "exp: unexpected argument #1 (userdata)")
    support.expect_error(function() local _ = x:abs(1) end, "abs: unexpected argument #1 (number)")
    assert.same({2, 1}, x:var(2, nil, true).shape) -- a nil unbiased keeps its default; keepdim still read
    if math.type then -- Lua 5.4: a float dim is refused, as torch's (LuaJIT has no float subtype: 1.0 is 1)
      support.expect_error(function() local _ = x:sum(1.0) end, "sum: bad argument #1 (dimension or list")
      support.expect_error(function() local _ = x:norm(2, 1.0) end, "norm: bad argument #2 (dimension or list")
    end
  end)

  it("allclose: an infinity is close only to the same infinity (as torch.allclose)", function()
    assert.is_false(accel.tensor({5}):allclose(accel.tensor({inf})))
    assert.is_false(accel.tensor({inf}):allclose(accel.tensor({5})))
    assert.is_false(accel.tensor({-inf}):allclose(accel.tensor({inf})))
    assert.is_true(accel.tensor({inf, -inf}):allclose(accel.tensor({inf, -inf})))
  end)

  it("allclose broadcasts and takes rtol / atol / equal_nan; cat skips 1-D empties; gather reads a leading part", function()
    assert.is_true(accel.ones(2, 2):allclose(accel.ones(2)))
    assert.is_true(accel.tensor({0 / 0}):allclose(accel.tensor({0 / 0}), {equal_nan = true}))
    assert.is_false(accel.tensor({0 / 0}):allclose(accel.tensor({0 / 0})))
    assert.same({{1, 1}}, accel.cat({accel.tensor({}), accel.ones(1, 2)}):tolist())
    assert.same({{3}}, accel.arange(6):view(2, 3):gather(1, accel.tensor({{1}})):tolist())
    assert.are.equal(2, #accel.zeros(0):chunk(2))
    assert.same({{9, 9}}, accel.zeros(1, 2):masked_fill(accel.ones(1, 2):bool(), accel.tensor(9)):tolist())
  end)

  it("sizes: a nil size is an error, extra view arguments too; shapes compare by value", function()
    local cfg = {hidden = 8}
    fails("size 2 is nil", function() return accel.randn(4, cfg.hiden) end)
    fails("size 2 is nil", function() return accel.zeros(4, cfg.hiden, {dtype = accel.float64}) end)
    fails("view: bad argument #3", function() return accel.zeros(2, 3):view(2, 3, "x") end)
    fails("view: expected a shape", function() return accel.zeros(1):view() end)
    assert.is_true(accel.zeros(2, 3).shape == accel.ones(2, 3).shape)
    assert.is_true(accel.zeros(2, 3).shape == {2, 3})
    assert.is_false(accel.zeros(2, 3).shape == {3, 2})
    assert.is_true(accel.randint(0, 10 / 2, {3}):max():item() < 5) -- a float high (10 / 2 is 5.0)
  end)

  it("t[i] = v drops v's leading size-1 dims (as torch's __setitem__), with the gradient; huge dims are refused", function()
    local v = accel.zeros(3)
    v[1] = accel.tensor({5})
    assert.same({5, 0, 0}, v:tolist())
    local m = accel.zeros(3, 2)
    m[1] = accel.tensor({{1, 2}})
    assert.same({{1, 2}, {0, 0}, {0, 0}}, m:tolist())
    local c = accel.tensor({2.0}, {dtype = accel.float32, requires_grad = true})
    local w = accel.zeros(2)
    w[1] = c * 3
    w:sum():backward()
    assert.same({3}, c.grad:tolist())
    fails("dimension 4294967298 is out of range", function() return accel.zeros(2, 3):sum(4294967298) end)
  end)

  it("a fill value the dtype cannot hold is an error (torch's \"without overflow\"); inf fills a float", function()
    fails("full: value 300 cannot be converted to type uint8 without overflow",
      function() return accel.full({2}, 300, {dtype = "uint8"}) end)
    fails("fill_: value .* cannot be converted to type int32", function() return accel.zeros(1, {dtype = "int32"}):fill_(2 ^ 40) end)
    fails("masked_fill: value 100000 cannot be converted to type float16",
      function() return accel.zeros(2, {dtype = accel.float16}):masked_fill(accel.tensor({true, false}), 1e5) end)
    assert.same({255, 255}, accel.full({2}, 255, {dtype = "uint8"}):tolist())
    -- tensor literals of an integer dtype too; whole negatives wrap in uint8, out-of-range floats become inf
    fails("tensor: value 300 cannot be converted to type uint8", function() return accel.tensor({1, 300}, {dtype = "uint8"}) end)
    fails("tensor: value %-1.5 cannot be converted to type uint8", function() return accel.tensor({-1.5}, {dtype = "uint8"}) end)
    fails("tensor: value 1099511627776 cannot be converted to type int32", function() return accel.tensor({2 ^ 40}, {dtype = "int32"}) end)
    fails("tensor: value nan cannot be converted to type int64", function() return accel.tensor({0 / 0}, {dtype = "int64"}) end)
    assert.same({255, 1}, accel.tensor({-1, -255}, {dtype = "uint8"}):tolist())
    assert.same({255}, accel.full({1}, -1, {dtype = "uint8"}):tolist())
    assert.same({math.maxinteger}, accel.tensor({math.maxinteger}):tolist())
    assert.are.equal(math.huge, accel.tensor({70000.0}, {dtype = "float16"}):item())
    -- randint's bounds must be values of its dtype (torch: "from / to - 1 is out of bounds")
    fails("randint: high %- 1 = 299 is out of bounds for uint8", function() return accel.randint(0, 300, {3}, {dtype = "uint8"}) end)
    fails("randint: low = %-5 is out of bounds for uint8", function() return accel.randint(-5, 3, {3}, {dtype = "uint8"}) end)
    assert.are.equal(3, accel.randint(0, 2 ^ 53, {3}):numel()) -- any int64 bound is one
    assert.are.equal(accel.bool, accel.randint(0, 2, {3}, {dtype = "bool"}).dtype)
    assert.are.equal(-math.huge, accel.zeros(2):masked_fill(accel.tensor({true, false}), -math.huge):tolist()[1])
  end)

  it("in place: an overlapping operand is read before the write; an expanded destination is refused", function()
    local x = accel.arange(5):float()
    x:narrow(1, 2, 4):add_(x:narrow(1, 1, 4))
    assert.same({0, 1, 3, 5, 7}, x:tolist())
    local z = accel.arange(4):float():view(2, 2)
    z:add_(z:t())
    assert.same({{0, 3}, {3, 6}}, z:tolist())
    fails("more than one element of the written%-to tensor", function() return accel.zeros(1, 3):expand(2, 3):add_(1) end)
    fails("more than one element of the written%-to tensor", function() return accel.zeros(1, 3):expand(2, 3):mul_(2) end)
  end)

  -- values from PyTorch 2.15: a number meeting a bf16 / fp16 tensor is first rounded to
  -- that dtype (torch's common-dtype cast), except by mul, div and floor division; so is pow's exponent
  it("numbers meet half tensors in the tensor's dtype", function()
    local b = accel.tensor({0.1, 0.3, 2.5, 7.0}, {dtype = accel.bfloat16})
    assert.same({true, false, false, false}, b:eq(0.1):tolist())
    assert.same({true, true, false, false}, b:le(0.3):tolist())
    assert.same({0.43359375, 0.6328125, 2.828125, 7.34375}, (b + 1 / 3):tolist())
    assert.same({0.0198974609375, 0.12890625, 4.75, 27.5}, (b ^ 1.7):tolist())
    assert.same({0.010009765625, 0.030029296875, 0.25, 0.69921875}, (b * 0.1):tolist())
    assert.same({0.010009765625, 0.00048828125, 0.007568359375, 0.003173828125}, (b % 0.03):tolist())
    assert.same({true, false, false, false}, b:eq(accel.tensor(0.1)):tolist())
    local h = accel.tensor({0.1, 0.3}, {dtype = accel.float16})
    assert.same({true, false}, h:eq(0.1):tolist())
    assert.same({0.0, 0.2000732421875}, (h - 0.1):tolist())
    assert.same({0.467529296875, 0.671875}, (h ^ 0.33):tolist())
  end)

  -- gradients from PyTorch 2.15 (RemainderBackward0, FmodBackward0, RoundBackward0, ...)
  it("remainder and fmod have gradients; rounding ops have zero gradients", function()
    local x = accel.tensor({1.25, 2.75, -0.5}, {requires_grad = true})
    local y = accel.tensor({2.0, -3.0, 0.7}, {requires_grad = true})
    local r = x % y
    r:sum():backward()
    assert.same({1, 1, 1}, x.grad:tolist())
    assert.same({0, 1, 1}, y.grad:tolist())
    x.grad, y.grad = nil, nil
    x:fmod(y):sum():backward()
    assert.same({1, 1, 1}, x.grad:tolist())
    assert.same({0, 0, 0}, y.grad:tolist())
    x.grad = nil
    r = (x % 1) * 3
    r:sum():backward()
    assert.same({3, 3, 3}, x.grad:tolist())
    for _, name in ipairs({"round", "floor", "ceil", "trunc", "sign"}) do
      x.grad = nil
      r = x[name](x)
      assert.is_true(r.requires_grad, name)
      r:sum():backward()
      assert.same({0, 0, 0}, x.grad:tolist(), name)
    end
    x.grad = nil
    x:div(2, {rounding_mode = "floor"}):sum():backward()
    assert.same({0, 0, 0}, x.grad:tolist())
    -- in place, the divisor's gradient reads the dividend's old value (torch: -floor(a / b))
    local a0 = accel.tensor({1.25, 2.75, -0.5}, {requires_grad = true})
    local b = accel.tensor({2.0, -3.0, 0.7}, {requires_grad = true})
    local c = a0 * 1
    c:remainder_(b)
    c:sum():backward()
    assert.same({0, 1, 1}, b.grad:tolist())
    assert.same({1, 1, 1}, a0.grad:tolist())
  end)

  it("t[i] = v checks v against the dtype; a dtype is not a shape; function forms of methods", function()
    local u = accel.zeros(2, {dtype = accel.uint8})
    fails("t%[1%] = %.%.%.: value 300 cannot be converted to type uint8 without overflow", function() u[1] = 300 end)
    fails("value 1099511627776 cannot be converted to type int32",
      function() local w = accel.zeros(2, {dtype = accel.int32}); w[1] = 2 ^ 40 end)
    u[2] = -1
    assert.same({0, 255}, u:tolist())
    fails("a shape expected, got a dtype", function() return accel.zeros(accel.int64) end)
    fails("a shape expected, got a dtype", function() return accel.zeros(2, 3):reshape(accel.float64) end)
    local x = accel.tensor({{1.0, -2.0}, {3.0, 4.0}})
    assert.same({4, 2}, accel.sum(x, 1):tolist())
    assert.same({{1, 0}, {2, 2}}, accel.clamp(x, 0, 2):tolist())
    assert.same({{1, 3}, {-2, 4}}, accel.transpose(x, 1, 2):tolist())
    local values, indices = accel.max(x, 2)
    assert.same({1, 4}, values:tolist())
    assert.same({0, 1}, indices:tolist())
    assert.is_true(accel.allclose(x, x))
    assert.is_nil(accel.no_such_function)
    fails("accel%.%a+%(t, %.%.%.%); got number", function() return accel.exp(2.0) end)
  end)

  -- torch 2.15's answers: errors for these inputs, and sign(NaN) = 0
  it("0-dim split / chunk / unbind, a uint8 index, abs of bool, narrow's start are refused; sign(nan) is 0", function()
    local s = accel.tensor(1.0)
    fails("unbind expects at least a 1%-dimensional tensor", function() return s:unbind() end)
    fails("chunk expects at least a 1%-dimensional tensor", function() return s:chunk(1) end)
    fails("split expects at least a 1%-dimensional tensor", function() return s:split(1) end)
    fails("index_select: expected dtype int32 or int64 for index, got uint8",
      function() return accel.zeros(3):index_select(1, accel.tensor({0}, {dtype = "uint8"})) end)
    assert.same({0}, accel.zeros(3):index_select(1, accel.tensor({0}, {dtype = "int32"})):tolist())
    fails("abs: \"abs\" is not implemented for bool", function() return accel.tensor({true}):abs() end)
    fails("narrow: start %-6 is out of range for dimension 1 of size 5", function() return accel.zeros(5):narrow(1, -6, 1) end)
    assert.same({0}, accel.zeros(5):narrow(1, -5, 1):tolist())
    assert.same({}, accel.zeros(5):narrow(1, 6, 0):tolist())
    assert.same({0, 1, -1}, accel.tensor({0 / 0, 2.0, -3.0}):sign():tolist())
  end)

  -- torch 2.15's keyword forms: x.sum(dtype=torch.float64) = 15. (float64), x.mean(dtype=float32) = 2.5,
  -- x.split(2, dim=1), x.unbind(dim=1), z.squeeze((0, 2)).shape = [3, 2]
  it("sum / mean {dtype =}, split / chunk / unbind {dim =}, squeeze of a list of dims", function()
    local x = accel.arange(6):view(2, 3)
    local s = x:sum({dtype = accel.float64})
    assert.are.equal(accel.float64, s.dtype)
    assert.are.equal(15, s:item())
    assert.are.equal(2.5, x:mean({dtype = "float32"}):item())
    assert.same({3, 12}, x:sum(2, {dtype = accel.float32}):tolist())
    fails("unknown option 'dtype'", function() return x:amax({dtype = accel.float32}) end)
    assert.are.equal(2, #x:split(2, {dim = 2}))
    assert.are.equal(3, #x:chunk(3, {dim = 2}))
    assert.are.equal(3, #x:unbind({dim = 2}))
    fails("unknown option 'dm'", function() return x:split(2, {dm = 2}) end)
    local z = accel.zeros(1, 3, 1, 2)
    assert.same({3, 2}, {table.unpack(z:squeeze({1, 3}):size())})
    assert.same({1, 3, 1, 2}, {table.unpack(z:squeeze({2}):size())})
    assert.same({1, 3, 2}, {table.unpack(z:squeeze({-1, -2}):size())})
    local w = accel.tensor({2.0, 3.0}, {dtype = accel.float32, requires_grad = true})
    w:sum({dtype = accel.float64}):backward() -- the cast is part of the graph
    assert.same({1, 1}, w.grad:tolist())
  end)

  -- torch 2.15 (bf16 and fp16): embedding [1,1,0,0,2,2], index_select [0,0,1,2], max(2) [0,1,1,0]
  it("index_select, embedding, max(dim) and gather have gradients in bf16 / fp16 (they were zeros)", function()
    local F = accel.nn.functional
    for _, dt in ipairs({accel.bfloat16, accel.float16}) do
      local w = accel.tensor({{1, 2}, {3, 4}, {5, 6}}):to(dt):requires_grad_(true)
      F.embedding(accel.tensor({0, 2, 2}), w):sum():backward()
      assert.same({{1, 1}, {0, 0}, {2, 2}}, w.grad:tolist())
      assert.are.equal(dt, w.grad.dtype)
      local y = accel.tensor({1, 2, 3, 4}):to(dt):requires_grad_(true)
      y:index_select(1, accel.tensor({2, 3, 3})):sum():backward()
      assert.same({0, 0, 1, 2}, y.grad:tolist())
      local x = accel.tensor({{1, 5}, {7, 2}}):to(dt):requires_grad_(true)
      local v = x:max(2)
      v:sum():backward()
      assert.same({{0, 1}, {1, 0}}, x.grad:tolist())
      local q = accel.tensor({{1, 2}, {3, 4}}):to(dt):requires_grad_(true)
      q:gather(2, accel.tensor({{1, 1}, {0, 1}})):sum():backward()
      assert.same({{0, 2}, {1, 1}}, q.grad:tolist())
    end
  end)

  -- found by the sanitizer build: each was an out-of-bounds write, an overflow or a leak
  it("ragged literals that nest deeper after a number, huge conv/pool sizes, bad operands are clean errors", function()
    fails("nested lists have inconsistent depth", function() return accel.tensor({{1, 2}, {{}, {}}}) end)
    fails("nested lists have inconsistent depth", function() return accel.tensor({{1, 2}, {{3, 4}, {5, 6}}}) end)
    assert.same({2, 0}, {table.unpack(accel.tensor({{}, {}}):size())})
    local F = accel.nn.functional
    fails("padding=\"same\" with dilation 4611686018427387904 is past 2%^63", function()
      return F.conv2d(accel.zeros(1, 2, 5, 5), accel.zeros(3, 2, 3, 3), nil, {padding = "same", dilation = 2 ^ 62})
    end)
    assert.same({1, 1, 1, 1}, {table.unpack(F.max_pool2d(accel.zeros(1, 1, 4, 4), 3,
      {stride = 2 ^ 62, ceil_mode = true}):size())})
    local t = accel.zeros(2, 2)
    fails("t%[1%] = %.%.%.: the value must be a tensor or a number, got string", function() t[1] = "x" end)
    fails("bad argument #3 %(tensor or number expected, got table%)",
      function() return accel.where(accel.tensor({true}), 1.5, {}) end)
  end)

  -- torch 2.15: "expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != float"
  it("matmul / linear of different dtypes are errors outside autocast, cast under it", function()
    local a, b = accel.randn(2, 3), accel.randn(3, 2)
    fails("matmul: expected both operands to have the same dtype, got bfloat16 and float32",
      function() return accel.matmul(a:bfloat16(), b) end)
    fails("matmul: expected both operands to have the same dtype, got float32 and float64",
      function() return accel.matmul(a, b:double()) end)
    fails("linear: expected both operands to have the same dtype, got float16 and float32",
      function() return accel.nn.functional.linear(a:half(), b:t()) end)
    local acc = accel.Accelerator{mixed_precision = "bf16"}
    local y = acc:autocast(function() return accel.matmul(a:half(), b) end)
    assert.are.equal(accel.bfloat16, y.dtype)
  end)

  -- torch 2.15 under torch.autocast("cpu", torch.bfloat16): nn.Linear(3, 2)(an int64 tensor) raises "mat1 and
  -- mat2 must have the same dtype, but got Long and BFloat16" (autocast does not cast integers)
  it("a dtype mismatch autocast cannot resolve does not suggest autocast", function()
    local acc = accel.Accelerator{mixed_precision = "bf16"}
    local ids, w = accel.tensor({{1, 2, 3}}), accel.randn(2, 3)
    local msg = support.errmsg(function() acc:autocast(function() return accel.nn.functional.linear(ids, w) end) end)
    assert.matches("tensor_ops_spec.lua:%d+: linear: expected both operands to have the same dtype, got int64 and "
      .. "bfloat16 %(convert one with :to%(%)%)$", msg)
    msg = support.errmsg(function() acc:autocast(function() return accel.matmul(w:double(), w:t()) end) end)
    assert.matches("got float64 and bfloat16 %(convert one with :to%(%)%)$", msg)
    fails("got int64 and float32 %(convert one with :to%(%)%)$",
      function() return accel.nn.functional.linear(ids, w) end)
  end)
end)

-- Expected values and messages observed with PyTorch 2.15 (CPU) for the same inputs.
describe("PyTorch 2.15's answers at edge cases", function()
  local F32, F64, F16, BF16 = accel.float32, accel.float64, accel.float16, accel.bfloat16
  -- f's call is not a tail call (local _ = ...), so LuaJIT can name the function too
  local function fails(pattern, f)
    local ok, err = pcall(f)
    assert.is_false(ok)
    assert.matches(pattern, tostring(err))
  end
  local function t32(v, o)
    o = o or {}
    o.dtype = o.dtype or F32
    return accel.tensor(v, o)
  end

  it("fmod is C's fmod (truncated, the dividend's sign), also across signs and infinities", function()
    assert.same({9.99999993922529e-09}, t32({1e-8}):fmod(-1.0):tolist()) -- float32(1e-8)
    assert.same({0.10000000149011612}, t32({0.1}):fmod(-3.0):tolist())
    assert.same({1e-30}, accel.tensor({1e-30}, {dtype = F64}):fmod(-1.0):tolist())
    assert.same({-1, 1}, t32({-1, 1}):fmod(inf):tolist())
    assert.same({-1, 1, 2.5}, t32({-1, 1, 2.5}):fmod(-inf):tolist())
    assert.same({0.9111328125}, t32({0.9111}):half():fmod(-5.613):tolist())
    assert.same({1.5, -1.5, 1.5, -1.5}, t32({5.5, -5.5, 5.5, -5.5}):fmod(t32({2, 2, -2, -2})):tolist())
    assert.same({1, -1, 1, -1}, accel.tensor({7, -7, 7, -7}):fmod(accel.tensor({3, 3, -3, -3})):tolist())
    local u = accel.tensor({7, 200}, {dtype = accel.uint8}):fmod(3)
    assert.same({1, 2}, u:tolist())
    assert.are.equal(accel.uint8, u.dtype)
    fails("fmod: integer division by zero %(ZeroDivisionError%)", function() local _ = accel.tensor({7}):fmod(0) end)
    local a = t32({5, -5})
    a:fmod_(3)
    assert.same({2, -2}, a:tolist())
    -- FmodBackward0: g and -g * trunc(a / b)
    local x = t32({1.25, 2.75, -0.5, 7.5}, {requires_grad = true})
    local y = t32({2.0, -3.0, 0.7, -2.0}, {requires_grad = true})
    x:fmod(y):sum():backward()
    assert.same({1, 1, 1, 1}, x.grad:tolist())
    assert.same({0, 0, 0, 3}, y.grad:tolist())
  end)

  it("var / std / norm of fp16 and bf16 compute in float32 and round once", function()
    local x = t32({300, 400}):half()
    assert.are.equal(500, x:norm():item())
    assert.are.equal(449.75, x:norm(3):item())
    assert.are.equal(500, x:norm(2, 1):item())
    assert.are.equal(5000, x:var():item())
    assert.are.equal(70.6875, x:std():item())
    assert.are.equal(1393, x:norm(0.5):item())
    assert.are.equal(F16, x:norm().dtype)
    local s = t32({1e-4, 1e-4}):half()
    assert.are.equal(0.00014150142669677734, s:norm():item())
    assert.are.equal(0.00012600421905517578, s:norm(3):item())
    local v = t32({300, -300, 100, 0}):half()
    assert.are.equal(62496, v:var():item())
    assert.are.equal(250, v:std():item())
    assert.are.equal(216.5, v:std({correction = 0}):item())
    assert.are.equal(46880, v:var({correction = 0}):item())
    assert.same({inf, 5000}, t32({{300, -300}, {100, 0}}):half():var(2):tolist()) -- 180000 is past fp16
    local b = t32({-2.1875, 2.078125, 1.5859375, -1.46875, -0.02734375, -0.302734375, 0.91015625}):bfloat16()
    assert.same({2.4375, 1.5625, 3.828125}, {b:var():item(), b:std():item(), b:norm():item()})
    -- gradients (torch computes them in fp16: equal to about one fp16 ulp)
    local g = t32({300, -300, 100, 0}, {requires_grad = true})
    g:half():std():backward()
    assert_close({0.366943359375, -0.43359375, 0.10003662109375, -0.033355712890625}, g.grad:tolist(), 2e-3, 0)
    local n = t32({300, 400}, {requires_grad = true})
    n:half():norm():backward()
    assert_close({0.60009765625, 0.7998046875}, n.grad:tolist(), 1e-3, 0)
  end)

  it("pow's gradients are 0 where torch masks them (exponent 0; base 0 with exponent >= 0)", function()
    local x = t32({0, 0, 2}, {requires_grad = true})
    local e = t32({0.5, 2, 0.5}, {requires_grad = true})
    x:pow(e):sum():backward()
    assert_close({inf, 0, 0.3535533845424652}, x.grad:tolist())
    assert_close({0, 0, 0.9802581071853638}, e.grad:tolist())
    x = t32({0, 0, 0, -1, 3}, {requires_grad = true})
    e = t32({0, -1, 1, 0, 0}, {requires_grad = true})
    x:pow(e):sum():backward()
    assert_close({0, -inf, 1, 0, 0}, x.grad:tolist())
    assert_close({0, -inf, 0, nan, 1.0986123085021973}, e.grad:tolist())
    e = t32({0, 0.5, 2, -1}, {requires_grad = true})
    accel.pow(0, e):sum():backward()
    assert_close({0, 0, 0, -inf}, e.grad:tolist())
    x = t32({{0, 1}, {2, 0}}, {requires_grad = true})
    e = t32({0, 2}, {requires_grad = true})
    x:pow(e):sum():backward()
    assert_close({{0, 2}, {0, 0}}, x.grad:tolist())
    assert_close({0.6931471824645996, 0}, e.grad:tolist())
  end)

  it("clamp is min(max(x, lo), hi) for every dtype; a NaN bound gives NaN", function()
    assert.same({1, 1, 1, 1}, accel.tensor({-7, 0, 3, 8}):clamp(5, 1):tolist())
    assert.same({1, 1, 1, 1}, accel.tensor({-7, 0, 3, 8}, {dtype = accel.int32}):clamp(5, 1):tolist())
    assert.same({1, 1, 1, 1}, accel.tensor({0, 3, 8, 200}, {dtype = accel.uint8}):clamp(5, 1):tolist())
    local a = accel.tensor({-7, 0, 3, 8})
    a:clamp_(5, 1)
    assert.same({1, 1, 1, 1}, a:tolist())
    assert_close({1, 1, 1, 1}, t32({-7, 0, 3, 8}):clamp(5, 1):tolist())
    assert_close({nan, nan, nan}, t32({1, 2, 3}):clamp(nan):tolist())
    assert_close({nan, nan, nan}, t32({1, 2, 3}):clamp(nil, nan):tolist())
    assert_close({nan, nan, nan}, t32({1, 2, 3}):clamp({min = nan, max = 2}):tolist())
    assert_close({nan, nan, nan}, t32({1, 2, 3}):half():clamp(nan):tolist())
    local i = accel.tensor({1, 2, 3}):clamp(nan) -- a float bound: float32, as torch
    assert.are.equal(F32, i.dtype)
    assert_close({nan, nan, nan}, i:tolist())
    fails("clamp_: a float bound makes the result float32", function() accel.tensor({1, 2, 3}):clamp_(nan) end)
    local x = t32({1, 2, 3}, {requires_grad = true})
    x:clamp(nan):sum():backward()
    assert.same({0, 0, 0}, x.grad:tolist())
  end)

  it("clamp's {min =, max =} take tensors; unknown options and extra arguments are refused", function()
    local x = t32({-2, 0.5, 3})
    assert_close({0, 1, 3}, x:clamp({min = t32({0, 1, 1})}):tolist())
    assert_close({-2, 0.5, 1}, x:clamp({max = t32(1)}):tolist())
    local y = x:clone()
    y:clamp_({min = t32(0)})
    assert_close({0, 0.5, 3}, y:tolist())
    fails("clamp: unknown option 'mn'", function() local _ = x:clamp({mn = 1}) end)
    fails("clamp: at least one of min and max must be given", function() local _ = x:clamp({}) end)
    fails("clamp: unexpected argument #3", function() local _ = x:clamp(0, 1, 2) end)
  end)

  it("full_like and where refuse a number an integer dtype cannot hold", function()
    local u8, i32 = accel.tensor({1, 2}, {dtype = accel.uint8}), accel.tensor({1, 2}, {dtype = accel.int32})
    fails("full_like: value 256 cannot be converted to type uint8 without overflow", function() local _ = accel.full_like(u8, 256) end)
    fails("full_like: value 3000000000 cannot be converted to type int32", function() local _ = accel.full_like(i32, 3000000000) end)
    fails("full_like: value 100000 cannot be converted to type float16", function() local _ = accel.full_like(u8:half(), 1e5) end)
    assert.same({255, 255}, accel.full_like(u8, -1):tolist())
    assert.same({2, 2}, accel.full_like(u8, 2.5):tolist())
    assert.same({inf, inf}, accel.full_like(u8:half(), inf):tolist())
    assert.same({256, 256}, accel.full_like(u8, 256, {dtype = F32}):tolist())
    local c = accel.tensor({true, false})
    fails("where: value 256 cannot be converted to type uint8 without overflow", function() local _ = accel.where(c, u8, 256) end)
    fails("where: value 256 cannot be converted to type uint8", function() local _ = accel.where(c, 256, u8) end)
    fails("where: value 256 cannot be converted to type uint8", function() local _ = u8:where(c, 256) end)
    fails("where: value 3000000000 cannot be converted to type int32", function() local _ = accel.where(c, i32, 3000000000) end)
    assert.same({1, 255}, accel.where(c, u8, -1):tolist())
    local f = accel.where(c, u8, 2.5)
    assert.are.equal(F32, f.dtype)
    assert.same({1, 2.5}, f:tolist())
    assert.same({1, inf}, accel.where(c, u8:half(), 1e5):tolist())
  end)

  it("maximum / minimum gradients: halved at ties, all of it at a NaN on either side", function()
    local g = t32({1, 2, 4, 8, 16, 32, 64})
    local function grads(fn)
      local a = t32({nan, 1, 2, 3, nan, 1, 5}, {requires_grad = true})
      local b = t32({1, nan, 2, 1, nan, 3, 5}, {requires_grad = true})
      a[fn](a, b):backward(g)
      return a.grad:tolist(), b.grad:tolist()
    end
    local ga, gb = grads("maximum")
    assert.same({1, 2, 2, 8, 16, 0, 32}, ga)
    assert.same({1, 2, 2, 0, 16, 32, 32}, gb)
    ga, gb = grads("minimum")
    assert.same({1, 2, 2, 0, 16, 32, 32}, ga)
    assert.same({1, 2, 2, 8, 16, 0, 32}, gb)
    local a = t32({{1, nan}, {3, 4}}, {requires_grad = true})
    local b = t32({3, 4}, {requires_grad = true})
    a:maximum(b):sum():backward()
    assert.same({{0, 1}, {0.5, 0.5}}, a.grad:tolist())
    assert.same({1.5, 1.5}, b.grad:tolist())
  end)

  it("squeeze / unsqueeze take {dim =}; extra arguments and unknown options are refused", function()
    local z = accel.zeros(2, 1, 3, 1)
    assert.same({2, 3, 1}, {table.unpack(z:squeeze({dim = 2}):size())})
    assert.same({2, 3}, {table.unpack(z:squeeze({dim = {2, 4}}):size())})
    assert.same({2, 1, 3, 1}, {table.unpack(z:squeeze({}):size())}) -- no dims, as torch's squeeze(dim=())
    assert.same({1, 2, 1, 3, 1}, {table.unpack(z:unsqueeze({dim = 1}):size())})
    fails("squeeze: unknown option 'foo'", function() local _ = z:squeeze({foo = 1}) end)
    fails("squeeze: unexpected argument #2", function() local _ = z:squeeze(2, 3) end)
    fails("unsqueeze: unknown option 'foo'", function() local _ = z:unsqueeze(1, {foo = 2}) end)
    fails("permute: unknown option 'foo'", function() local _ = z:permute({1, 2, 3, 4}, {foo = 1}) end)
    fails("cat: unknown option 'foo'", function() local _ = accel.cat({z, z}, 1, {foo = 1}) end)
    fails("cat: unexpected argument #3", function() local _ = accel.cat({z, z}, 2, 3) end)
    fails("unsqueeze: bad argument #1 %(integer dimension expected, got string%)", function() local _ = z:unsqueeze("x") end)
  end)

  it("softmax, log_softmax, cat and stack take {dim =}; out-of-place masked_fill broadcasts", function()
    local x = t32({{0, math.log(3)}})
    assert_close({{0.25, 0.75}}, x:softmax({dim = 2}):tolist())
    assert_close({{math.log(0.25), math.log(0.75)}}, x:log_softmax({dim = 2}):tolist())
    assert.are.equal(F64, x:softmax({dim = 2, dtype = F64}).dtype)
    fails("softmax: unknown option 'dm'", function() local _ = x:softmax({dm = 2}) end)
    fails("softmax: bad argument #1 %(integer dimension expected, got string%)", function() local _ = x:softmax("2") end)
    local z = accel.zeros(2, 1, 3)
    assert.same({2, 2, 3}, {table.unpack(accel.cat({z, z}, {dim = 2}):size())})
    assert.same({2, 2, 1, 3}, {table.unpack(accel.stack({z, z}, {dim = 2}):size())})
    local m = accel.zeros(3, 4):bool()
    m[2][3] = true
    local r = t32({{0, 0, 0, 0}}, {requires_grad = true})
    local y = r:masked_fill(m, 1)
    assert.same({{0, 0, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 0}}, y:tolist())
    y:sum():backward()
    assert.same({{3, 3, 2, 3}}, r.grad:tolist())
    fails("masked_fill_: output with shape %[1, 4%] doesn't match the broadcast shape %[3, 4%]",
      function() local _ = accel.zeros(1, 4):masked_fill_(m, 1) end)
    fails("masked_fill: shapes %[3, 4%] and %[2, 4%] cannot be broadcast",
      function() local _ = accel.zeros(2, 4):masked_fill(m, 1) end)
  end)

  it("the arithmetic functions take a number first, as torch.pow(2, x) / torch.sub(1, x)", function()
    local a, ib = t32({1, 2, 4}), accel.tensor({3, 4, -3})
    assert.same({2, 4, 16}, accel.pow(2, a):tolist())
    assert.same({1, 0, -2}, accel.sub(2, a):tolist())
    assert.same({2, 4, 8}, accel.mul(2, a):tolist())
    assert.same({2, 1, 0.5}, accel.div(2, a):tolist())
    assert.same({3, 4, 6}, accel.add(2, a):tolist())
    assert.same({0, 0, 2}, accel.remainder(2, a):tolist())
    assert.same({2, 1, 0}, accel.floor_divide(2, a):tolist())
    assert.same({1, 0, -2}, accel.subtract(2, a):tolist())
    assert.same({2, 1, -1}, accel.remainder(5, ib):tolist())
    assert.same({8, 16, 0}, accel.pow(2, ib):tolist())
    assert.same({-1, -3, -7}, accel.sub(1, a, {alpha = 2}):tolist())
    local d = accel.sub(1, ib)
    assert.same({-2, -3, 4}, d:tolist())
    assert.are.equal(accel.int64, d.dtype)
    assert.same({2, 1, -3}, accel.div(7, ib, {rounding_mode = "floor"}):tolist())
    -- a refused option frees what the call made: live tensor bytes stay where they were
    collectgarbage()
    local live = accel.memory_stats()
    for _ = 1, 100 do assert.is_false(pcall(accel.sub, 1, ib, {alpha = 0.5})) end
    collectgarbage()
    assert.are.equal(live, (accel.memory_stats()))
    local h = t32({0.1, 0.3}):bfloat16()
    assert.same({0.010009765625, 0.0301513671875}, accel.mul(0.1, h):tolist())
    assert.same({0.0, -0.201171875}, accel.sub(0.1, h):tolist())
    local x = t32({1, 2}, {requires_grad = true})
    accel.pow(2, x):sum():backward()
    assert_close({1.3862943649291992, 2.7725887298583984}, x.grad:tolist())
    fails("call it as t:fmod%(%.%.%.%)", function() local _ = accel.fmod(2, a) end) -- torch refuses it too
    fails("call it as t:add%(%.%.%.%)", function() local _ = a.add(2) end)
  end)

  it("fp16 / bf16 add and sub with alpha: float32 arithmetic, alpha in the dtype, one rounding", function()
    -- 64 elements: torch's vectorised loop (its scalar tail, for a few elements, rounds alpha * b first)
    local function run(dt, va, vb, op, alpha)
      local a, b = accel.full({64}, va, {dtype = dt}), accel.full({64}, vb, {dtype = dt})
      local r = a[op](a, b, {alpha = alpha})
      local c = a:clone()
      c[op .. "_"](c, b, {alpha = alpha})
      return r:tolist()[64], c:tolist()[64]
    end
    assert.same({5.72265625, 5.72265625}, {run(F16, 6.046875, -1.0742, "add", 0.3)})
    assert.same({-2.689453125, -2.689453125}, {run(F16, -3.5, 2.7, "sub", -0.3)})
    assert.same({5.75, 5.75}, {run(BF16, 6.046875, -1.0742, "add", 0.3)})
    assert.same({-2.6875, -2.6875}, {run(BF16, -3.5, 2.7, "sub", -0.3)})
  end)

  it("gelu, silu and leaky_relu refuse integer tensors; accel.Size builds a size", function()
    fails("gelu: \"gelu\" is not implemented for int64", function() local _ = accel.tensor({1, 2}):gelu() end)
    fails("silu_: \"silu\" is not implemented for int64", function() local _ = accel.tensor({1, 2}):silu_() end)
    fails("leaky_relu: \"leaky_relu\" is not implemented for int32",
      function() local _ = accel.tensor({1, 2}, {dtype = accel.int32}):leaky_relu(0.1) end)
    assert.same({1, 2}, accel.tensor({1, 2}):relu():tolist())
    local s = accel.Size({2, 3})
    assert.are.equal("accel.Size({2, 3})", tostring(s))
    assert.is_true(s == accel.zeros(2, 3).shape)
    assert.same({2, 3}, {table.unpack(accel.zeros(s):size())})
    fails("Size: expected a list of sizes, got number", function() local _ = accel.Size(2, 3) end)
  end)
end)

-- Expected values are PyTorch 2.15's (torch.* printed at the call's comment).
describe("PyTorch's dtype rules for reduction dtype=, Lua booleans and uint8 / int32 scalars", function()
  local function fails(pattern, f)
    local ok, err = pcall(f)
    assert.is_false(ok)
    assert.matches(pattern, tostring(err))
  end
  local function val(t) return t:tolist(), t.dtype end

  it("sum / prod with an integer or bool dtype give that dtype, wrapping as torch", function()
    local f = accel.tensor({0.5, 1.5})
    -- torch.tensor([0.5, 1.5]).sum(dtype=torch.int32) -> tensor(1, dtype=torch.int32)
    assert.same({1, accel.int32}, {val(f:sum({dtype = accel.int32}))})
    assert.same({1, accel.int32}, {val(f:sum({dim = 1, dtype = accel.int32}))})
    assert.same({1, accel.int32}, {val(accel.sum(f, {dtype = accel.int32}))})
    assert.same({0, accel.int32}, {val(f:prod({dtype = accel.int32}))}) -- tensor(0, dtype=torch.int32)
    -- torch.full((3,), 100, dtype=torch.uint8).sum(dtype=torch.uint8) -> tensor(44, dtype=torch.uint8)
    assert.same({44, accel.uint8}, {val(accel.full({3}, 100, {dtype = accel.uint8}):sum({dtype = accel.uint8}))})
    -- torch.tensor([200, 100], dtype=torch.uint8).sum(dtype=torch.int32) -> tensor(300, dtype=torch.int32)
    assert.same({300, accel.int32}, {val(accel.tensor({200, 100}, {dtype = accel.uint8}):sum({dtype = accel.int32}))})
    -- torch.tensor([1, 2]).sum(dtype=torch.bool) -> tensor(True); .prod(dtype=torch.bool) -> tensor(True)
    assert.same({true, accel.bool}, {val(accel.tensor({1, 2}):sum({dtype = accel.bool}))})
    assert.same({true, accel.bool}, {val(accel.tensor({1, 2}):prod({dtype = accel.bool}))})
    -- torch.tensor([[0.5, 1.5], [0., 3.5]]).prod(1, dtype=torch.bool) -> tensor([ True, False])
    assert.same({{true, false}, accel.bool}, {val(accel.tensor({{0.5, 1.5}, {0, 3.5}}):prod(2, {dtype = accel.bool}))})
    -- torch.tensor([[2**31 - 1, 1], [1, 2]]).sum(1, keepdim=True, dtype=torch.int32) -> [[-2147483648], [3]]
    assert.same({{{-2147483648}, {3}}, accel.int32},
      {val(accel.tensor({{2147483647, 1}, {1, 2}}):sum(2, true, {dtype = accel.int32}))})
  end)

  it("a Lua boolean is a bool scalar: it never widens the tensor's dtype", function()
    local b, m = accel.tensor({true, false}), accel.tensor({{1, 2}, {3, 4}})
    assert.same({{true, true}, accel.bool}, {val(b + true)}) -- b + True -> tensor([True, True])
    assert.same({{true, true}, accel.bool}, {val(true + b)})
    assert.same({{{0, 0}, {0, 0}}, accel.int64}, {val(m * false)}) -- m * False -> int64 zeros
    assert.same({{{2, 3}, {4, 5}}, accel.int64}, {val(m:add(true))}) -- m.add(True)
    assert.same({{1.5, 2.5}, accel.float32}, {val(accel.tensor({1.5, 2.5}) * true)})
    assert.same({{true, true}, accel.bool}, {val(b:maximum(true))}) -- torch.maximum(b, tensor(True))
    assert.same({{true, true}, accel.bool}, {val(b:clone():add_(true))}) -- b.add_(True)
    assert.same({true, accel.bool}, {val(accel.tensor(true) + true)}) -- tensor(True) + True -> tensor(True)
    assert.same({{{true, false}, {false, false}}, accel.bool}, {val(m:eq(true))}) -- m.eq(True)
    -- b.clamp(0, 1) -> tensor([1, 0]) (int64); b.clamp(0.5) -> float32; b.clamp_(0, 1) refused
    assert.same({{1, 0}, accel.int64}, {val(b:clamp(0, 1))})
    assert.same({{1, 0}, accel.int64}, {val(b:clamp({max = 1}))})
    assert.same({{1, 0.5}, accel.float32}, {val(b:clamp(0.5))})
    fails("clamp_: an integer bound makes the result int64", function() b:clone():clamp_(0, 1) end)
  end)

  it("bool tensors refuse what torch refuses", function()
    local b = accel.tensor({true, false})
    -- b - True, b - b: "Subtraction, the `-` operator, with two bool tensors is not supported"
    fails("Subtraction, the `%-` operator, with two bool tensors", function() return b - true end)
    fails("Subtraction, the `%-` operator, with two bool tensors", function() return b:sub(true) end)
    -- m - True: "Subtraction, the `-` operator, with a bool tensor is not supported"
    fails("with a bool tensor is not supported", function() return accel.tensor({1, 2}) - true end)
    -- b // b, b % b, b ** b, fmod: "... not implemented for 'Bool'"
    fails("floor_divide: not implemented for 'Bool'", function() return b:floor_divide(b) end)
    fails("floor_divide: not implemented for 'Bool'", function() return b:clone():floor_divide_(b) end)
    fails("remainder: not implemented for 'Bool'", function() return b:remainder(b) end)
    fails("fmod: not implemented for 'Bool'", function() return b:fmod(b) end)
    fails("pow: not implemented for 'Bool'", function() return b ^ b end)
    fails("pow: not implemented for 'Bool'", function() return b:clone():pow_(b) end)
    fails("not implemented for 'Bool'", function() return b:div(b, {rounding_mode = "floor"}) end)
    -- with a number the result is int64 and allowed: b // 2 -> [0, 0], b % 2 -> [1, 0], b ** 2 -> [1, 0]
    assert.same({{0, 0}, accel.int64}, {val(b:floor_divide(2))})
    assert.same({{1, 0}, accel.int64}, {val(b:remainder(2))})
    assert.same({{1, 0}, accel.int64}, {val(b ^ 2)})
  end)

  it("an integer meeting a uint8 / int32 tensor is cast to its dtype first", function()
    local u = accel.tensor({5, 200}, {dtype = accel.uint8})
    assert.same({{0, 0}, accel.uint8}, {val(u:floor_divide(-2))}) -- u // -2
    assert.same({{5, 200}, accel.uint8}, {val(u:remainder(-3))}) -- u % -3
    assert.same({{5, 200}, accel.uint8}, {val(u:fmod(-3))})
    assert.same({{0, 0}, accel.uint8}, {val(u:div(-2, {rounding_mode = "trunc"}))})
    assert.same({{0, 0}, accel.uint8}, {val(u:div(-2, {rounding_mode = "floor"}))})
    assert.same({{255, 255}, accel.uint8}, {val(u:maximum(accel.tensor(-1)))}) -- torch.maximum(u, tensor(-1))
    assert.same({{5, 44}, accel.uint8}, {val(u:minimum(accel.tensor(300)))})
    assert.same({{0, 0}, accel.uint8}, {val(u:clone():floor_divide_(-2))})
    assert.same({0, accel.uint8}, {val(accel.tensor(5, {dtype = accel.uint8}):floor_divide(-2))})
    assert.same({{-2.5, -100}, accel.float32}, {val(u:div(-2))}) -- true division: the full value
    local w = accel.tensor({254, 44, 5}, {dtype = accel.uint8})
    assert.same({true, false, false}, w:eq(-2):tolist()) -- -2 is 254
    assert.same({false, false, true}, w:lt(300):tolist()) -- 300 is 44
    fails("integer division by zero", function() return u:floor_divide(256) end) -- 256 is 0: ZeroDivisionError
    local i = accel.tensor({5, -200}, {dtype = accel.int32})
    assert.same({{1, -67}, accel.int32}, {val(i:floor_divide(4294967299))}) -- 2^32 + 3 is 3
    assert.same({{2, 1}, accel.int32}, {val(i:remainder(4294967299))})
    assert.same({{1, -66}, accel.int32}, {val(i:div(4294967299, {rounding_mode = "trunc"}))})
    assert.same({{-1, 0}, accel.int32}, {val(i:floor_divide(2147483648))}) -- 2^31 is -2^31
    assert.same({{5, 3}, accel.int32}, {val(i:maximum(accel.tensor(4294967299)))})
  end)

  it("an integer given first, or to where, keeps a 0-dim uint8 / int32 tensor's dtype (a wrapped number)", function()
    local a, u = accel.tensor(3, {dtype = accel.int32}), accel.tensor(5, {dtype = accel.uint8})
    assert.same({6, accel.int32}, {val(accel.mul(2, a))}) -- torch.mul(2, a) -> tensor(6, dtype=torch.int32)
    assert.same({5, accel.int32}, {val(accel.add(2, a))}) -- torch.add(2, a) -> tensor(5, dtype=torch.int32)
    assert.same({1, accel.int32}, {val(accel.sub(7, a, {alpha = 2}))}) -- torch.sub(7, a, alpha=2) -> tensor(1, int32)
    -- torch.div(7, a, rounding_mode="floor") -> tensor(2, dtype=torch.int32)
    assert.same({2, accel.int32}, {val(accel.div(7, a, {rounding_mode = "floor"}))})
    assert.same({39, accel.uint8}, {val(accel.sub(300, u))}) -- torch.sub(300, u) -> tensor(39, dtype=torch.uint8)
    assert.same({4, accel.uint8}, {val(accel.remainder(300, u))}) -- torch.remainder(300, u) -> tensor(4, uint8)
    assert.same({8, accel.uint8}, {val(accel.floor_divide(300, u))}) -- torch.floor_divide(300, u) -> tensor(8, uint8)
    assert.same({60, accel.float32}, {val(accel.div(300, u))}) -- torch.div(300, u) -> tensor(60.): the full value
    local c, b = accel.tensor({true, false}), accel.tensor(7, {dtype = accel.uint8})
    assert.same({{3, 7}, accel.uint8}, {val(accel.where(c, 3, b))}) -- torch.where(c, 3, b) -> [3, 7] uint8
    assert.same({{7, 3}, accel.uint8}, {val(accel.where(c, b, 3))}) -- torch.where(c, b, 3) -> [7, 3] uint8
    assert.same({{255, 7}, accel.uint8}, {val(accel.where(c, -1, b))}) -- torch.where(c, -1, b) -> [255, 7] uint8
    assert.same({{3, 3}, accel.int32}, {val(accel.where(c, 3, a))}) -- torch.where(c, 3, a) -> [3, 3] int32
  end)

  it("where refusing an integer its tensor cannot hold leaks neither operand", function()
    local c = accel.ones({1000}, {dtype = accel.bool})
    local function live() collectgarbage(); collectgarbage(); return (accel.memory_stats()) end
    for _, call in ipairs({function(x) return accel.where(c, x, 300) end, function(x) return accel.where(c, 300, x) end,
                           function(x) return x:where(c, 300) end}) do
      local before = live()
      for _ = 1, 20 do
        local ok, err = pcall(call, accel.zeros({1000}, {dtype = accel.uint8}))
        assert.is_false(ok)
        assert.matches("where: value 300 cannot be converted to type uint8 without overflow", err)
      end
      assert.are.equal(before, live())
    end
  end)
end)
