-- tensor_creation_spec.lua: creating tensors (tensor{}, zeros/ones/full/
-- empty, arange, linspace, the random constructors, *_like), the dtype
-- constants and their value round trips through :to(dtype) / :tolist(),
-- and the utilities accel.clock and accel.num_threads.
-- Reference values are closed forms or plain Lua arithmetic, never accel.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["infers int64 from Lua integers"] = support.NO_MATH_TYPE,
  ["infers float32 from Lua floats, also when mixed with integers"] = support.NO_MATH_TYPE,
  ["rounds float data to float32"] = support.NO_STRING_PACK,
  ["honours opts.requires_grad"] = support.NO_FLOAT_SUBTYPE,
  ["with a float argument gives float32"] = support.NO_STRING_PACK,
  ["randint(low, high, size) stays in [low, high) and hits every value"] = support.NO_MATH_TYPE,
  ["float32 rounds to nearest like IEEE single"] = support.NO_STRING_PACK,
  ["int64 and int32 truncate floats toward zero and keep their range"] = support.NO_MATH_TYPE,
  ["accel.clock is a monotonically increasing float"] = support.NO_MATH_TYPE,
  ["accel.num_threads reads and sets the thread count"] = support.NO_MATH_TYPE,
  ["float -> int64 / int32 / uint8 of NaN, inf and out-of-range values as PyTorch on x86"] = support.NO_INT64,
})
local f32, shape_of, flatten = support.f32, support.shape_of, support.flatten

local function assert_list_equal(expected, got)
  assert.are.equal(#expected, #got)
  for i = 1, #expected do
    local e, g = expected[i], got[i]
    if e ~= e then
      assert.is_true(g ~= g, ("element %d: expected nan, got %s"):format(i, tostring(g)))
    else
      assert.are.equal(e, g, ("element %d: expected %s, got %s"):format(i, tostring(e), tostring(g)))
    end
  end
end

local inf = math.huge

describe("accel.tensor{...}", function()
  it("infers int64 from Lua integers", function()
    local t = accel.tensor{1, 2, 3}
    assert.are.equal(accel.int64, t.dtype)
    assert.are.same({3}, shape_of(t))
    local l = t:tolist()
    assert.are.same({1, 2, 3}, l)
    for i = 1, 3 do assert.are.equal("integer", math.type(l[i])) end
  end)

  it("infers float32 from Lua floats, also when mixed with integers", function()
    local t = accel.tensor{1.5, 2.25}
    assert.are.equal(accel.float32, t.dtype)
    assert.are.same({1.5, 2.25}, t:tolist())
    local m = accel.tensor{1, 2.5}
    assert.are.equal(accel.float32, m.dtype)
    assert.are.same({1.0, 2.5}, m:tolist())
    assert.are.equal("float", math.type(m:tolist()[1]))
  end)

  it("infers bool from booleans", function()
    local t = accel.tensor{true, false, true}
    assert.are.equal(accel.bool, t.dtype)
    assert.are.same({true, false, true}, t:tolist())
  end)

  it("builds nested lists into matching shapes", function()
    local t = accel.tensor{{1, 2, 3}, {4, 5, 6}}
    assert.are.same({2, 3}, shape_of(t))
    assert.are.same({{1, 2, 3}, {4, 5, 6}}, t:tolist())
    local u = accel.tensor{{{1.0}, {2.0}}, {{3.0}, {4.0}}}
    assert.are.same({2, 2, 1}, shape_of(u))
    assert.are.same({{{1.0}, {2.0}}, {{3.0}, {4.0}}}, u:tolist())
  end)

  it("rounds float data to float32", function()
    local t = accel.tensor{0.1, 1 / 3}
    assert.are.same({f32(0.1), f32(1 / 3)}, t:tolist())
  end)

  it("honours opts.dtype", function()
    local t = accel.tensor({1, 2, 3}, {dtype = accel.float64})
    assert.are.equal(accel.float64, t.dtype)
    assert.are.same({1.0, 2.0, 3.0}, t:tolist())
    local d = accel.tensor({0.1}, {dtype = accel.float64})
    assert.are.equal(0.1, d:tolist()[1]) -- no float32 detour
    local i = accel.tensor({1.7, -2.7}, {dtype = accel.int32})
    assert.are.equal(accel.int32, i.dtype)
    assert.are.same({1, -2}, i:tolist())
    local s = accel.tensor({1, 2}, {dtype = "float16"})
    assert.are.equal(accel.float16, s.dtype)
  end)

  it("keeps int64 values beyond 2^53 exact", function()
    local big = 9007199254740993 -- 2^53 + 1
    local t = accel.tensor{big, -big, math.maxinteger, math.mininteger}
    assert.are.same({big, -big, math.maxinteger, math.mininteger}, t:tolist())
  end)

  it("honours opts.requires_grad", function()
    local t = accel.tensor({1.0, 2.0}, {requires_grad = true})
    assert.is_true(t.requires_grad)
    assert.is_true(t.is_leaf)
    local u = accel.tensor{1.0, 2.0}
    assert.is_false(u.requires_grad)
  end)

  it("makes a 0-d tensor from a bare number", function()
    local ok, t = pcall(accel.tensor, 3.5)
    assert.is_true(ok, tostring(t))
    assert.are.equal(0, t:dim())
    assert.are.equal(1, t:numel())
    assert.are.equal(3.5, t:item())
  end)

  it("copies another tensor", function()
    local a = accel.tensor{1.0, 2.0}
    local b = accel.tensor(a)
    b:add_(1)
    assert.are.same({1.0, 2.0}, a:tolist())
    assert.are.same({2.0, 3.0}, b:tolist())
  end)

  -- PyTorch 2.15: torch.tensor([tensor(1.5, float64), tensor(2.)]) is float64; of int32 0-d tensors int32, with a
  -- Python int int64, with a float float32; [[tensor(1.5)], [2.0]] -> [[1.5], [2.0]]; a 2-element entry:
  -- "only one element tensors can be converted to Python scalars"
  it("takes one-element tensors as entries, with torch's dtype inference", function()
    local f64 = {dtype = accel.float64}
    local i32 = {dtype = accel.int32}
    assert.are.equal(accel.float64, accel.tensor({accel.tensor(1.5, f64), accel.tensor(2, {dtype = accel.float32})}).dtype)
    assert.are.equal(accel.int32, accel.tensor({accel.tensor(1, i32), accel.tensor(2, i32)}).dtype)
    assert.are.equal(accel.int64, accel.tensor({accel.tensor(1, i32), 2}).dtype)
    assert.are.equal(accel.bool, accel.tensor({accel.tensor(true)}).dtype)
    assert.are.same({{1.5}, {2}}, accel.tensor({{accel.tensor(1.5, f64)}, {2}}):tolist())
    local ok, err = pcall(accel.tensor, {accel.tensor({1, 2})})
    assert.is_false(ok)
    assert.truthy(tostring(err):find("only one-element tensors can be entries of the data, got one of shape [2]", 1, true))
  end)
end)

describe("zeros / ones / full / empty", function()
  it("accept varargs sizes", function()
    local z = accel.zeros(2, 3)
    assert.are.same({2, 3}, shape_of(z))
    assert.are.equal(accel.float32, z.dtype)
    assert.are.same({{0, 0, 0}, {0, 0, 0}}, z:tolist())
    local o = accel.ones(3)
    assert.are.same({1.0, 1.0, 1.0}, o:tolist())
  end)

  it("accept a table size", function()
    local z = accel.zeros({4, 1, 2})
    assert.are.same({4, 1, 2}, shape_of(z))
    assert.are.equal(8, z:numel())
    local o = accel.ones({2, 2}, {dtype = accel.int32})
    assert.are.equal(accel.int32, o.dtype)
    assert.are.same({{1, 1}, {1, 1}}, o:tolist())
  end)

  it("accept a size object (t.shape)", function()
    local a = accel.zeros(3, 2)
    local b = accel.ones(a.shape)
    assert.are.same({3, 2}, shape_of(b))
    local c = accel.zeros(a:size())
    assert.are.same({3, 2}, shape_of(c))
  end)

  it("make 0-d tensors with an empty size", function()
    local z = accel.zeros({})
    assert.are.equal(0, z:dim())
    assert.are.equal(1, z:numel())
    assert.are.equal(0.0, z:item())
  end)

  it("allow zero-sized dimensions", function()
    local z = accel.zeros(0, 3)
    assert.are.equal(0, z:numel())
    assert.are.same({0, 3}, shape_of(z))
  end)

  it("full infers the dtype from the fill value", function()
    local a = accel.full({2, 2}, 7)
    assert.are.equal(accel.int64, a.dtype)
    assert.are.same({{7, 7}, {7, 7}}, a:tolist())
    local b = accel.full({3}, 2.5)
    assert.are.equal(accel.float32, b.dtype)
    assert.are.same({2.5, 2.5, 2.5}, b:tolist())
    local c = accel.full({2}, true)
    assert.are.equal(accel.bool, c.dtype)
    assert.are.same({true, true}, c:tolist())
    local d = accel.full({2}, 3, {dtype = accel.float64})
    assert.are.equal(accel.float64, d.dtype)
    assert.are.same({3.0, 3.0}, d:tolist())
    local e = accel.full({2, 3}, -1.5)
    assert.are.same({2, 3}, shape_of(e))
    assert.are.equal(-1.5, e:tolist()[2][3])
  end)

  it("empty has the right shape and dtype", function()
    local e = accel.empty(2, 5, {dtype = accel.float64})
    assert.are.same({2, 5}, shape_of(e))
    assert.are.equal(accel.float64, e.dtype)
    local f = accel.empty({3})
    assert.are.equal(accel.float32, f.dtype)
    assert.are.equal(3, f:numel())
  end)

  it("requires_grad option", function()
    local z = accel.zeros(2, {requires_grad = true})
    assert.is_true(z.requires_grad)
    local o = accel.ones({2}, {requires_grad = true, dtype = accel.float64})
    assert.is_true(o.requires_grad)
    assert.are.equal(accel.float64, o.dtype)
  end)
end)

describe("arange", function()
  it("with integers gives int64", function()
    local a = accel.arange(5)
    assert.are.equal(accel.int64, a.dtype)
    assert.are.same({0, 1, 2, 3, 4}, a:tolist())
    assert.are.same({2, 3, 4}, accel.arange(2, 5):tolist())
    assert.are.same({1, 4, 7}, accel.arange(1, 10, 3):tolist())
    assert.are.same({5, 3, 1}, accel.arange(5, 0, -2):tolist())
    assert.are.equal(0, accel.arange(3, 3):numel())
  end)

  it("with a float argument gives float32", function()
    local a = accel.arange(0, 1, 0.25)
    assert.are.equal(accel.float32, a.dtype)
    assert.are.same({0, 0.25, 0.5, 0.75}, a:tolist())
    local b = accel.arange(2.5)
    assert.are.same({0, 1, 2}, b:tolist())
    assert.are.equal(accel.float32, b.dtype)
    -- PyTorch: ceil((end - start) / step) elements
    local c = accel.arange(0, 1, 0.3)
    assert.are.equal(4, c:numel())
    local l = c:tolist()
    for i = 1, 4 do assert.are.equal(f32((i - 1) * 0.3), l[i]) end
  end)

  -- PyTorch 2.15: arange(2, 1, 2), arange(3, 4, -2), arange(0.001, 0.0, 0.01) raise "upper bound and lower
  -- bound inconsistent with step sign"; arange(3, 3, -1) -> tensor([], dtype=torch.int64)
  it("a step whose sign disagrees with end - start is an error, as PyTorch; end == start is empty", function()
    support.expect_error(function() local _ = accel.arange(2, 1, 2) end,
      "arange: upper bound and lower bound inconsistent with step sign (start 2, end 1, step 2)")
    support.expect_error(function() local _ = accel.arange(3, 4, -2) end, "arange: upper bound and lower bound inconsistent")
    support.expect_error(function() local _ = accel.arange(0.001, 0.0, 0.01) end, "inconsistent with step sign")
    assert.are.equal(0, accel.arange(3, 3, -1):numel())
    -- torch 2.15: arange(0, 1, inf) -> "step must be finite but got inf"
    support.expect_error(function() local _ = accel.arange(0, 1, math.huge) end, "arange: step must be finite but got inf")
  end)

  it("honours opts.dtype", function()
    local a = accel.arange(0, 4, {dtype = accel.float64})
    assert.are.equal(accel.float64, a.dtype)
    assert.are.same({0, 1, 2, 3}, a:tolist())
    local b = accel.arange(3, {dtype = accel.int32})
    assert.are.equal(accel.int32, b.dtype)
  end)
end)

describe("linspace", function()
  it("includes both ends, float32 by default", function()
    local l = accel.linspace(0, 1, 5)
    assert.are.equal(accel.float32, l.dtype)
    assert.are.same({0, 0.25, 0.5, 0.75, 1}, l:tolist())
  end)

  it("matches start + i * step", function()
    local l = accel.linspace(-1, 2, 7, {dtype = accel.float64}):tolist()
    assert.are.equal(7, #l)
    for i = 1, 7 do
      local ref = -1 + (i - 1) * 0.5
      assert.is_true(math.abs(l[i] - ref) < 1e-12)
    end
    assert.are.equal(-1, l[1])
    assert.are.equal(2, l[7])
  end)

  it("handles steps = 1 and decreasing ranges", function()
    assert.are.same({3}, accel.linspace(3, 10, 1):tolist())
    assert.are.same({4, 3, 2, 1}, accel.linspace(4, 1, 4):tolist())
    assert.are.equal(0, accel.linspace(0, 1, 0):numel())
  end)

  -- PyTorch 2.15: linspace(-3.3, 7.9, 13, dtype=int64) -> [-3, -2, -1, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7];
  -- linspace(5, -5, 6, dtype=uint8) -> [5, 54, 103, 152, 201, 251]; linspace(0.001, 1000, 11, dtype=uint8):
  -- "value cannot be converted to type uint8_t without overflow"
  it("an integer dtype converts the ends first, as PyTorch", function()
    assert.are.same({-3, -2, -1, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7}, accel.linspace(-3.3, 7.9, 13, {dtype = accel.int64}):tolist())
    assert.are.same({5, 54, 103, 152, 201, 251}, accel.linspace(5, -5, 6, {dtype = accel.uint8}):tolist())
    support.expect_error(function() local _ = accel.linspace(0.001, 1000, 11, {dtype = accel.uint8}) end,
      "linspace: value cannot be converted to type uint8 without overflow (end 1000)")
  end)

  -- PyTorch 2.15: linspace(10, -2.5, 6), linspace(-1, -2.5, 5), linspace(-0.5, 3, 4), linspace(-256, 0, 3)
  -- with dtype=uint8, linspace(2147483648, 0, 3) and linspace(0, -2147483648.5, 3) with dtype=int32 raise
  -- "value cannot be converted to type ... without overflow"; linspace(-1, 0, 3, dtype=uint8) and
  -- linspace(255.9, 0, 3, dtype=uint8) -> [255, 127, 0]; linspace(2147483647.5, 0, 3, dtype=int32) ->
  -- [2147483647, 1073741823, 0]
  it("an integer end below or above the dtype's range is an error, as PyTorch", function()
    local u8, i32 = {dtype = accel.uint8}, {dtype = accel.int32}
    support.expect_error(function() local _ = accel.linspace(10, -2.5, 6, u8) end,
      "linspace: value cannot be converted to type uint8 without overflow (end -2.5)")
    support.expect_error(function() local _ = accel.linspace(-1, -2.5, 5, u8) end, "(end -2.5)")
    support.expect_error(function() local _ = accel.linspace(-0.5, 3, 4, u8) end, "(start -0.5)")
    support.expect_error(function() local _ = accel.linspace(-256, 0, 3, u8) end, "(start -256)")
    support.expect_error(function() local _ = accel.linspace(2147483648, 0, 3, i32) end, "type int32 without overflow")
    support.expect_error(function() local _ = accel.linspace(0, -2147483648.5, 3, i32) end, "type int32 without overflow")
    assert.are.same({255, 127, 0}, accel.linspace(-1, 0, 3, u8):tolist())
    assert.are.same({255, 127, 0}, accel.linspace(255.9, 0, 3, u8):tolist())
    assert.are.same({2147483647, 1073741823, 0}, accel.linspace(2147483647.5, 0, 3, i32):tolist())
  end)
end)

describe("random constructors", function()
  it("rand is uniform in [0, 1)", function()
    accel.set_seed(1)
    local r = accel.rand(20000)
    assert.are.equal(accel.float32, r.dtype)
    local l = r:tolist()
    local sum, lo, hi = 0, inf, -inf
    for _, v in ipairs(l) do
      sum = sum + v
      lo, hi = math.min(lo, v), math.max(hi, v)
    end
    assert.is_true(lo >= 0 and hi < 1)
    local mean = sum / #l
    assert.is_true(math.abs(mean - 0.5) < 0.02, "mean " .. mean)
    -- buckets of width 0.1 hold about 10% each
    local b = {}
    for _, v in ipairs(l) do local k = math.floor(v * 10); b[k] = (b[k] or 0) + 1 end
    for k = 0, 9 do assert.is_true(math.abs(b[k] / #l - 0.1) < 0.015, "bucket " .. k) end
  end)

  it("randn has mean 0 and std 1", function()
    accel.set_seed(2)
    local l = accel.randn(20000):tolist()
    local s, s2 = 0, 0
    for _, v in ipairs(l) do s = s + v; s2 = s2 + v * v end
    local mean = s / #l
    local std = math.sqrt(s2 / #l - mean * mean)
    assert.is_true(math.abs(mean) < 0.03, "mean " .. mean)
    assert.is_true(math.abs(std - 1) < 0.03, "std " .. std)
    -- about 68.3% within one std
    local within = 0
    for _, v in ipairs(l) do if math.abs(v) < 1 then within = within + 1 end end
    assert.is_true(math.abs(within / #l - 0.6827) < 0.02)
  end)

  it("rand/randn take table sizes and a float dtype", function()
    local r = accel.rand({2, 3}, {dtype = accel.float64})
    assert.are.same({2, 3}, shape_of(r))
    assert.are.equal(accel.float64, r.dtype)
    local n = accel.randn(4, 5)
    assert.are.same({4, 5}, shape_of(n))
  end)

  it("randint(low, high, size) stays in [low, high) and hits every value", function()
    accel.set_seed(3)
    local t = accel.randint(-2, 3, {5000})
    assert.are.equal(accel.int64, t.dtype)
    local seen = {}
    for _, v in ipairs(t:tolist()) do
      assert.are.equal("integer", math.type(v))
      assert.is_true(v >= -2 and v < 3)
      seen[v] = true
    end
    for v = -2, 2 do assert.is_true(seen[v], "value " .. v .. " never drawn") end
  end)

  it("randint(high, size) starts at 0", function()
    local t = accel.randint(4, {2, 100})
    assert.are.same({2, 100}, shape_of(t))
    for _, v in ipairs(flatten(t:tolist())) do assert.is_true(v >= 0 and v < 4) end
  end)

  it("randint with varargs size and dtype", function()
    local t = accel.randint(0, 10, {3}, {dtype = accel.int32})
    assert.are.equal(accel.int32, t.dtype)
  end)

  it("randperm is a permutation of 0..n-1", function()
    accel.set_seed(4)
    local p = accel.randperm(50)
    assert.are.equal(accel.int64, p.dtype)
    local l = p:tolist()
    assert.are.equal(50, #l)
    local seen = {}
    for _, v in ipairs(l) do
      assert.is_true(v >= 0 and v < 50)
      assert.is_nil(seen[v])
      seen[v] = true
    end
    local ident = true
    for i = 1, 50 do if l[i] ~= i - 1 then ident = false end end
    assert.is_false(ident)
  end)

  it("are reproducible after accel.set_seed", function()
    local function draw()
      return {accel.rand(8):tolist(), accel.randn(8):tolist(), accel.randint(0, 1000, {8}):tolist(),
              accel.randperm(8):tolist()}
    end
    accel.set_seed(1234)
    local a = draw()
    local a2 = draw()
    accel.set_seed(1234)
    local b = draw()
    assert.are.same(a, b)
    assert.are_not.same(a, a2)
    accel.set_seed(1235)
    local c = draw()
    assert.are_not.same(a[1], c[1])
  end)
end)

describe("*_like", function()
  local base = accel.tensor({{1, 2, 3}, {4, 5, 6}}, {dtype = accel.float64})

  it("zeros_like / ones_like / full_like keep shape and dtype", function()
    local z = accel.zeros_like(base)
    assert.are.same({2, 3}, shape_of(z))
    assert.are.equal(accel.float64, z.dtype)
    assert.are.same({{0, 0, 0}, {0, 0, 0}}, z:tolist())
    assert.are.same({{1, 1, 1}, {1, 1, 1}}, accel.ones_like(base):tolist())
    local f = accel.full_like(base, 2.5)
    assert.are.equal(accel.float64, f.dtype)
    assert.are.same({{2.5, 2.5, 2.5}, {2.5, 2.5, 2.5}}, f:tolist())
  end)

  it("empty_like / rand_like / randn_like keep shape and dtype", function()
    for _, fn in ipairs{accel.empty_like, accel.rand_like, accel.randn_like} do
      local r = fn(base)
      assert.are.same({2, 3}, shape_of(r))
      assert.are.equal(accel.float64, r.dtype)
    end
    for _, v in ipairs(flatten(accel.rand_like(base):tolist())) do assert.is_true(v >= 0 and v < 1) end
  end)

  it("accept a dtype override", function()
    local z = accel.zeros_like(base, {dtype = accel.int32})
    assert.are.equal(accel.int32, z.dtype)
    assert.are.same({{0, 0, 0}, {0, 0, 0}}, z:tolist())
    local o = accel.ones_like(accel.tensor{1, 2}, {dtype = accel.float32})
    assert.are.equal(accel.float32, o.dtype)
  end)

  it("on an int tensor keep int", function()
    local z = accel.zeros_like(accel.tensor{1, 2})
    assert.are.equal(accel.int64, z.dtype)
    assert.are.same({0, 0}, z:tolist())
  end)
end)

describe("dtype constants", function()
  local names = {"float32", "float64", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "int64", "int32",
                 "uint8", "bool"}
  local sizes = {4, 8, 2, 2, 1, 1, 8, 4, 1, 1}

  it("exist, print as accel.X and report their size", function()
    for i, n in ipairs(names) do
      local dt = accel[n]
      assert.is_not_nil(dt, n)
      assert.are.equal("accel." .. n, tostring(dt))
      assert.are.equal(sizes[i], accel.zeros(2, {dtype = dt}):element_size())
      assert.are.equal(dt, accel.zeros(2, {dtype = dt}).dtype)
    end
    assert.is_true(accel.float32.is_floating_point)
    assert.is_false(accel.int64.is_floating_point)
  end)

  it("float8_e4m3 is an alias of float8_e4m3fn", function()
    assert.are.equal(accel.float8_e4m3fn, accel.float8_e4m3)
  end)

  -- values exactly representable in every float dtype
  local exact_all = {0.0, 1.0, -2.0, 0.5, 1.5, -0.25, 3.0, 16.0}

  local function roundtrip(values, dt, src_dt)
    local t = accel.tensor(values, {dtype = src_dt or accel.float64})
    local c = t:to(dt)
    assert.are.equal(dt, c.dtype)
    return c:tolist()
  end

  for _, n in ipairs{"float32", "float64", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"} do
    it(n .. " round-trips exactly representable values", function()
      assert_list_equal(exact_all, roundtrip(exact_all, accel[n]))
      -- and back to float64 unchanged
      local back = accel.tensor(exact_all, {dtype = accel.float64}):to(accel[n]):to(accel.float64):tolist()
      assert_list_equal(exact_all, back)
    end)
  end

  it("float32 rounds to nearest like IEEE single", function()
    local v = {0.1, 1 / 3, 1e-3, 123456789.0, 16777217.0}
    local exp = {}
    for i, x in ipairs(v) do exp[i] = f32(x) end
    assert_list_equal(exp, roundtrip(v, accel.float32))
    assert_list_equal({inf, -inf}, roundtrip({1e39, -1e39}, accel.float32))
  end)

  it("float64 keeps every double", function()
    local v = {0.1, 1 / 3, 1e-300, 1e300, -123456789.123456789}
    assert_list_equal(v, roundtrip(v, accel.float64))
  end)

  it("bfloat16 rounds to nearest even", function()
    -- 8 significant bits: spacing 2^-7 in [1, 2)
    local v = {1.00390625, 1.01171875, 1.0078125, 1.005, 1.0117, 256.0, 257.0, 259.0, -1.00390625, 3.0e38}
    -- 3.0e38 = 1.7632...* 2^127; nearest bf16 is 226/128 * 2^127 (0x7F62)
    local exp = {1.0, 1.015625, 1.0078125, 1.0078125, 1.0078125, 256.0, 256.0, 260.0, -1.0, 226 / 128 * 2 ^ 127}
    assert_list_equal(exp, roundtrip(v, accel.bfloat16))
    -- beyond the largest bf16 (about 3.39e38) -> inf
    assert_list_equal({inf, -inf}, roundtrip({3.4e38, -3.4e38}, accel.bfloat16, accel.float32))
    -- bf16 keeps float32's range: 1e-38 is representable approximately
    local small = roundtrip({1e-30}, accel.bfloat16)[1]
    assert.is_true(math.abs(small - 1e-30) / 1e-30 < 2 ^ -8)
  end)

  it("float16 rounds to nearest even, overflows to inf, has subnormals", function()
    -- 11 significant bits: spacing 2^-10 in [1, 2)
    local v = {1 + 2 ^ -11, 1 + 3 * 2 ^ -11, 65504.0, 65519.0, 65520.0, 1e6, 2 ^ -24, 2 ^ -25, 3 * 2 ^ -25,
               2 ^ -26, 0.1}
    -- 0.1 in fp16: 0x2E66 = (1 + 614/1024) * 2^-4
    local exp = {1.0, 1 + 2 ^ -9, 65504.0, 65504.0, inf, inf, 2 ^ -24, 0.0, 2 ^ -23, 0.0, (1 + 614 / 1024) * 2 ^ -4}
    assert_list_equal(exp, roundtrip(v, accel.float16))
  end)

  it("float8_e4m3fn rounds to nearest even, max 448, no infinities", function()
    -- 4 significant bits: spacing 2^-3 in [1, 2); bias 7; smallest subnormal 2^-9
    local v = {1.0625, 1.1875, 448.0, 464.0, 2 ^ -9, 2 ^ -10, 3 * 2 ^ -10, 0.3, -1.1875, 240.0, 250.0}
    local exp = {1.0, 1.25, 448.0, 448.0, 2 ^ -9, 0.0, 2 ^ -8, 0.3125, -1.25, 240.0, 256.0}
    assert_list_equal(exp, roundtrip(v, accel.float8_e4m3fn))
    -- out of range (inf too) saturates to +-448, as PyTorch 2.x converts
    -- (float8_e4m3fn has no inf; fp8_spec checks every case against PyTorch)
    assert_list_equal({448.0, 448.0, -448.0}, roundtrip({1000.0, inf, -inf}, accel.float8_e4m3fn))
  end)

  it("float8_e5m2 rounds to nearest even, max 57344, overflows to inf", function()
    -- 3 significant bits: spacing 2^-2 in [1, 2); bias 15; smallest subnormal 2^-16
    local v = {1.125, 1.375, 57344.0, 1e6, 2 ^ -16, 2 ^ -17, 3 * 2 ^ -17, 0.3, -inf}
    local exp = {1.0, 1.5, 57344.0, inf, 2 ^ -16, 0.0, 2 ^ -15, 0.3125, -inf}
    assert_list_equal(exp, roundtrip(v, accel.float8_e5m2))
  end)

  it("int64 and int32 truncate floats toward zero and keep their range", function()
    assert_list_equal({2, -2, 0, 7}, roundtrip({2.7, -2.7, -0.5, 7.0}, accel.int64))
    local i32 = accel.tensor({2147483647, -2147483648, 5}):to(accel.int32)
    assert.are.equal(accel.int32, i32.dtype)
    assert_list_equal({2147483647, -2147483648, 5}, i32:tolist())
    local l = roundtrip({3.9}, accel.int32)
    assert.are.equal("integer", math.type(l[1]))
    assert.are.equal(3, l[1])
  end)

  it("int64 -> float64 -> int64 keeps integers up to 2^53", function()
    local v = {0, 1, -1, math.floor(2^53), -math.floor(2^53)}
    local t = accel.tensor(v):to(accel.float64):to(accel.int64)
    assert_list_equal(v, t:tolist())
  end)

  it("uint8 holds 0..255", function()
    local u = accel.tensor({0, 1, 128, 255}, {dtype = accel.uint8})
    assert.are.equal(accel.uint8, u.dtype)
    assert_list_equal({0, 1, 128, 255}, u:tolist())
    assert_list_equal({0, 1, 128, 255}, u:to(accel.float32):tolist())
    assert_list_equal({3, 200}, roundtrip({3.9, 200.0}, accel.uint8))
  end)

  it("float -> int64 / int32 / uint8 of NaN, inf and out-of-range values as PyTorch on x86", function()
    -- PyTorch 2.15 (x86 CPU): x.to(float dtype).to(int64 / int32 / uint8), any
    -- length: truncation toward zero; NaN, +-inf and values out of int64 /
    -- int32 give INT64_MIN / INT32_MIN; uint8 is the int64 result's low byte.
    local MIN64 = math.mininteger
    local vals = {0 / 0, math.huge, -math.huge, -0.0, 1e30, -1e30, 3e9, -3e9, 2 ^ 31, -2 ^ 31, 2 ^ 63, -2 ^ 63,
      2 ^ 52 + 7, -2 ^ 52 - 7, -3.7, -1.5, -0.5, 255.9, 300.5, 300.7, -200.2, 1e5, -70000.0}
    local want = {
    float32 = {{MIN64, MIN64, MIN64, 0, MIN64, MIN64, 3000000000, -3000000000, 2147483648, -2147483648, MIN64,
      MIN64, 4503599627370496, -4503599627370496, -3, -1, 0, 255, 300, 300, -200, 100000, -70000}, {-2147483648,
      -2147483648, -2147483648, 0, -2147483648, -2147483648, -2147483648, -2147483648, -2147483648, -2147483648,
      -2147483648, -2147483648, -2147483648, -2147483648, -3, -1, 0, 255, 300, 300, -200, 100000, -70000}, {0,
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 253, 255, 0, 255, 44, 44, 56, 160, 144}},
    float64 = {{MIN64, MIN64, MIN64, 0, MIN64, MIN64, 3000000000, -3000000000, 2147483648, -2147483648, MIN64,
      MIN64, 4503599627370503, -4503599627370503, -3, -1, 0, 255, 300, 300, -200, 100000, -70000}, {-2147483648,
      -2147483648, -2147483648, 0, -2147483648, -2147483648, -2147483648, -2147483648, -2147483648, -2147483648,
      -2147483648, -2147483648, -2147483648, -2147483648, -3, -1, 0, 255, 300, 300, -200, 100000, -70000}, {0,
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 249, 253, 255, 0, 255, 44, 44, 56, 160, 144}},
    float16 = {{MIN64, MIN64, MIN64, 0, MIN64, MIN64, MIN64, MIN64, MIN64, MIN64, MIN64, MIN64, MIN64, MIN64,
      -3, -1, 0, 255, 300, 300, -200, MIN64, MIN64}, {-2147483648, -2147483648, -2147483648, 0, -2147483648,
      -2147483648, -2147483648, -2147483648, -2147483648, -2147483648, -2147483648, -2147483648, -2147483648,
      -2147483648, -3, -1, 0, 255, 300, 300, -200, -2147483648, -2147483648}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
      0, 0, 0, 253, 255, 0, 255, 44, 44, 56, 0, 0}},
    bfloat16 = {{MIN64, MIN64, MIN64, 0, MIN64, MIN64, 3003121664, -3003121664, 2147483648, -2147483648, MIN64,
      MIN64, 4503599627370496, -4503599627370496, -3, -1, 0, 256, 300, 300, -200, 99840, -70144}, {-2147483648,
      -2147483648, -2147483648, 0, -2147483648, -2147483648, -2147483648, -2147483648, -2147483648, -2147483648,
      -2147483648, -2147483648, -2147483648, -2147483648, -3, -1, 0, 256, 300, 300, -200, 99840, -70144}, {0, 0,
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 253, 255, 0, 0, 44, 44, 56, 0, 0}},
    }
    for name, rows in pairs(want) do
      local x = accel.tensor(vals, {dtype = accel.float64}):to(accel[name])
      for i, dt in ipairs({accel.int64, accel.int32, accel.uint8}) do
        assert.are.same(rows[i], x:to(dt):tolist(), name .. " -> " .. tostring(dt))
      end
    end
  end)

  it("bool: nonzero is true, and true/false convert to 1/0", function()
    local b = roundtrip({0.0, 2.0, -1.0, 0.5}, accel.bool)
    assert_list_equal({false, true, true, true}, b)
    local f = accel.tensor{true, false}:to(accel.float32)
    assert_list_equal({1.0, 0.0}, f:tolist())
    local i = accel.tensor{true, false}:to(accel.int64)
    assert_list_equal({1, 0}, i:tolist())
  end)

  it(":to accepts strings and the cast methods", function()
    local t = accel.tensor{1.5, 2.5}
    assert.are.equal(accel.bfloat16, t:to("bf16").dtype)
    assert.are.equal(accel.float16, t:to("float16").dtype)
    assert.are.equal(accel.float64, t:double().dtype)
    assert.are.equal(accel.float16, t:half().dtype)
    assert.are.equal(accel.bfloat16, t:bfloat16().dtype)
    assert.are.equal(accel.float32, t:double():float().dtype)
    assert.are.equal(accel.int64, t:long().dtype)
    assert.are.equal(accel.int32, t:int().dtype)
    assert.are.equal(accel.bool, t:bool().dtype)
    assert.are.same({1, 2}, t:long():tolist())
    assert.are.equal(accel.float64, t:to({dtype = accel.float64}).dtype)
  end)

  it(":to(same dtype) keeps the values", function()
    local t = accel.tensor{1.5, 2.5}
    assert.are.same({1.5, 2.5}, t:to(accel.float32):tolist())
  end)
end)

describe("utilities", function()
  it("accel.clock is a monotonically increasing float", function()
    local prev = accel.clock()
    assert.are.equal("float", math.type(prev))
    for _ = 1, 1000 do
      local now = accel.clock()
      assert.is_true(now >= prev)
      prev = now
    end
    local t0 = accel.clock()
    local x = 0
    for i = 1, 2e6 do x = x + i end
    local t1 = accel.clock()
    assert.is_true(t1 > t0)
    assert.is_true(t1 - t0 < 60)
  end)

  it("accel.num_threads reads and sets the thread count", function()
    local n = accel.num_threads()
    assert.are.equal("integer", math.type(n))
    assert.is_true(n >= 1)
    assert.are.equal(1, accel.num_threads(1))
    assert.are.equal(1, accel.num_threads())
    accel.num_threads(n)
    assert.are.equal(n, accel.num_threads())
  end)
end)

-- Expected values and refusals are PyTorch 2.15's (printed at each call's comment).
describe("creation inputs PyTorch refuses or rounds", function()
  local function fails(pattern, f)
    local ok, err = pcall(f)
    assert.is_false(ok)
    assert.matches(pattern, tostring(err))
  end

  it("tensor refuses a table that is not a list, naming the key and where it is", function()
    -- torch.tensor({'a': 1}) -> "Could not infer dtype of dict"; Lua keys outside 1..n are never data
    fails('tensor: data has key "a"; nested lists must be indexed 1..n', function() return accel.tensor({a = 1}) end)
    local zero_based = {}
    for i = 0, 2 do zero_based[i] = i end
    fails("tensor: data has key 0;", function() return accel.tensor(zero_based) end)
    fails('tensor: data%[2%] has key "x";', function() return accel.tensor({{1, 2}, {3, 4, x = 5}}) end)
    fails("tensor: data%[1%]%[2%] has key 1.5;", function() return accel.tensor({{{1}, {2, [1.5] = 3}}}) end)
    -- a hole: where # stops (Lua 5.4 and LuaJIT differ) decides which of the two errors names it
    fails("tensor: data has [^;]*[23]; nested lists must be indexed 1..n with no holes", function() return accel.tensor({1, nil, 3}) end)
    local after_hole = {1, 2}
    after_hole[4] = 4
    fails("tensor: data has [^;]*[34]; nested lists must be indexed 1..n with no holes", function() return accel.tensor(after_hole) end)
    local backwards = {} -- filled from the end: keys land in the hash part, still a list
    for i = 10, 1, -1 do backwards[i] = i end
    assert.same({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, accel.tensor(backwards):tolist())
  end)

  it("randperm and randint refuse dtypes that cannot hold every value exactly", function()
    -- torch.randperm(256, dtype=torch.uint8) is a permutation; 257 -> "value cannot be converted to type uint8_t"
    local p = accel.randperm(256, {dtype = accel.uint8}):tolist()
    table.sort(p)
    for i = 1, 256 do assert.are.equal(i - 1, p[i]) end
    fails("randperm: n = 257 does not fit dtype uint8", function() return accel.randperm(257, {dtype = accel.uint8}) end)
    fails("randperm: n = 300 does not fit dtype uint8", function() return accel.randperm(300, {dtype = accel.uint8}) end)
    -- float16 holds 0..2048 exactly: torch "n cannot be greater than 2049 for Half type"
    local h = accel.randperm(2049, {dtype = accel.float16}):tolist()
    table.sort(h)
    for i = 1, 2049 do assert.are.equal(i - 1, h[i]) end
    fails("only for n <= 2049", function() return accel.randperm(2050, {dtype = accel.float16}) end)
    fails("only for n <= 2049", function() return accel.randperm(5000, {dtype = accel.float16}) end)
    -- bfloat16 holds 0..256 exactly (torch returns duplicates beyond: 258 gives 257 distinct values)
    fails("randperm: n = 258 does not fit dtype bfloat16", function() return accel.randperm(258, {dtype = accel.bfloat16}) end)
    -- torch warns "to - 1 is out of bounds [-(2^8), 2^8]" and yields duplicates rounded up to high
    fails("randint: high %- 1 = 299 is out of bounds for bfloat16, which holds every integer exactly only in %[%-256, 256%]",
      function() return accel.randint(0, 300, {10}, {dtype = accel.bfloat16}) end)
    fails("randint: low = %-2049 is out of bounds for float16", function() return accel.randint(-2049, 0, {3}, {dtype = accel.float16}) end)
    local r = accel.randint(0, 257, {2000}, {dtype = accel.bfloat16})
    assert.is_true(r:max():item() <= 256 and r:min():item() >= 0)
  end)

  it("arange and linspace make no bool tensors; full_like takes a boolean", function()
    -- torch.arange(3, dtype=torch.bool): "arange_cpu" not implemented for 'Bool'
    fails("arange: not implemented for dtype bool", function() return accel.arange(3, {dtype = accel.bool}) end)
    fails("linspace: not implemented for dtype bool", function() return accel.linspace(0, 1, 3, {dtype = accel.bool}) end)
    -- torch.full_like(b, True) -> tensor([True, True]); full_like(int64 m, True) -> ones
    local b = accel.full_like(accel.tensor({true, false}), true)
    assert.same({true, true}, b:tolist())
    assert.are.equal(accel.bool, b.dtype)
    assert.same({{1, 1}, {1, 1}}, accel.full_like(accel.tensor({{1, 2}, {3, 4}}), true):tolist())
  end)

  it("linspace and arange give PyTorch's CPU values bit for bit", function()
    local function bits(list, idx)
      local out = {}
      for k, i in ipairs(idx) do out[k] = ("%.17g"):format(list[i]) end
      return out
    end
    local all9 = {1, 2, 3, 4, 5, 6, 7, 8, 9}
    -- torch.linspace(-3.3, 7.1, 9, dtype=torch.float32)
    assert.same({"-3.2999999523162842", "-2", "-0.70000004768371582", "0.59999990463256836", "1.9000000953674316",
      "3.2000000476837158", "4.5", "5.8000001907348633", "7.0999999046325684"},
      bits(accel.linspace(-3.3, 7.1, 9):double():tolist(), all9))
    assert.same({"-3.2999999999999998", "-2", "-0.70000000000000018", "0.59999999999999964", "1.9000000000000004",
      "3.2000000000000002", "4.5", "5.7999999999999998", "7.0999999999999996"},
      bits(accel.linspace(-3.3, 7.1, 9, {dtype = accel.float64}):tolist(), all9))
    -- torch.linspace(-1, 1, 1000) at 1-based positions 26, 76, 127, 498, 503
    assert.same({"-0.94994997978210449", "-0.8498498797416687", "-0.74774777889251709", "-0.0050050197169184685",
      "0.0050050197169184685"}, bits(accel.linspace(-1, 1, 1000):double():tolist(), {26, 76, 127, 498, 503}))
    -- the same in float64 at positions 22, 39, 101, 498, 503, 701
    assert.same({"-0.95795795795795791", "-0.92392392392392397", "-0.79979979979979976", "-0.0050050050050050136",
      "0.0050050050050050136", "0.4014014014014014"},
      bits(accel.linspace(-1, 1, 1000, {dtype = accel.float64}):tolist(), {22, 39, 101, 498, 503, 701}))
    -- torch.arange(-1, 1, 0.2, dtype=torch.float64)
    assert.same({"-1", "-0.80000000000000004", "-0.59999999999999998", "-0.39999999999999997", "-0.19999999999999996",
      "5.5511151231257827e-17", "0.20000000000000007", "0.40000000000000008", "0.60000000000000009",
      "0.80000000000000004"}, bits(accel.arange(-1, 1, 0.2, {dtype = accel.float64}):tolist(), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}))
  end)

  -- torch's CPU arange makes the first values (a multiple of 64 bytes) as 32-byte vectors, each its first value
  -- rounded to the dtype plus k step; float16 / bfloat16 accumulate in float (values: torch 2.15)
  it("float arange gives PyTorch's CPU values bit for bit, in every float dtype", function()
    local function bits(t, idx)
      local list, out = t:double():tolist(), {}
      for k, i in ipairs(idx) do out[k] = ("%.17g"):format(list[i]) end
      return out
    end
    -- torch.arange(4.9065946, -13.0, -0.9) at 1-based positions 3, 6, 7, 15
    assert.same({"3.1065948009490967", "0.40659475326538086", "-0.49340525269508362", "-7.6934051513671875"},
      bits(accel.arange(4.9065946, -13.0, -0.9), {3, 6, 7, 15}))
    -- torch.arange(-38.1, 42.965532, 1.29, dtype=torch.bfloat16) at 5, 30, 31, 63
    assert.same({"-32.75", "-0.73046875", "0.55859375", "42"},
      bits(accel.arange(-38.1, 42.965532, 1.29, {dtype = accel.bfloat16}), {5, 30, 31, 63}))
    -- torch.arange(0.1, 20, 0.3, dtype=...) (67 values: 64 from vectors, 3 after) at 20, 35, 66, 67 (float16),
    -- 18, 36, 65, 66, 67 (float32), 6, 14, 19, 67 (float64)
    assert.same({"5.796875", "10.3046875", "19.59375", "19.90625"},
      bits(accel.arange(0.1, 20, 0.3, {dtype = accel.float16}), {20, 35, 66, 67}))
    assert.same({"5.2000002861022949", "10.59999942779541", "19.299999237060547", "19.600000381469727",
      "19.899999618530273"}, bits(accel.arange(0.1, 20, 0.3), {18, 36, 65, 66, 67}))
    assert.same({"1.6000000000000001", "3.9999999999999996", "5.4999999999999991", "19.899999999999999"},
      bits(accel.arange(0.1, 20, 0.3, {dtype = accel.float64}), {6, 14, 19, 67}))
  end)
end)
