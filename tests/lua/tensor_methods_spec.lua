-- tensor_methods_spec.lua: the tensor methods composed in Lua
-- (accel.tensor_methods: sort / argsort / topk, cumsum, logsumexp, lerp,
-- flip / roll / movedim, nonzero / masked_select, new_*, multinomial, ...)
-- and accel.einsum. References:
-- Lua computations written here in float64 (sorting by table.sort, running
-- sums, closed forms) and PyTorch 2.15 outputs quoted beside each literal.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")

local f32, f64, i64 = {dtype = accel.float32}, {dtype = accel.float64}, {dtype = accel.int64}
local nan = 0 / 0
local expect_error = support.expect_error

local close, values = support.assert_close, support.assert_values

-- the 0-based order sorting list (ties by position), NaN largest
local function ref_order(list, descending)
  local idx = {}
  for i = 1, #list do idx[i] = i end
  local function key_less(a, b)
    if a ~= a then return false end
    if b ~= b then return true end
    return a < b
  end
  table.sort(idx, function(i, j)
    local a, b = list[i], list[j]
    if descending then a, b = b, a end
    if key_less(a, b) then return true end
    if key_less(b, a) then return false end
    return i < j
  end)
  for k = 1, #idx do idx[k] = idx[k] - 1 end
  return idx
end

describe("sort, argsort and topk", function()
  it("order each row as PyTorch's stable sort, NaN largest", function()
    local x = accel.tensor({{3, 1, nan, 1}, {2, 2, -1, 5}}, f32)
    -- torch 2.15: x.sort(1).indices == [[1, 3, 0, 2], [2, 0, 1, 3]], descending [[2, 0, 1, 3], [3, 0, 1, 2]]
    local v, i = x:sort(2)
    assert.same({{1, 3, 0, 2}, {2, 0, 1, 3}}, i:tolist())
    assert.same({{2, 0, 1, 3}, {3, 0, 1, 2}}, x:argsort(2, true):tolist())
    assert.same({-1, 2, 2, 5}, v[2]:tolist())
    assert.same({{1, 0, 1, 0}, {0, 1, 0, 1}}, x:argsort(1):tolist()) -- torch: x.argsort(0)
    local vd = x:sort({dim = 2, descending = true})
    assert.is_true(vd[1][1]:isnan():item())
  end)

  it("agree with a table.sort reference on random rows, along any dim, for floats and integers", function()
    accel.manual_seed(3)
    local x = accel.randint(0, 5, {4, 6, 3}):double() -- many ties
    for _, dim in ipairs({1, 2, 3, -1}) do
      for _, desc in ipairs({false, true}) do
        local idx = x:argsort(dim, desc)
        local moved = x:movedim(dim, -1):contiguous()
        local rows = moved:reshape({-1, moved:size(-1)}):tolist()
        local got = idx:movedim(dim, -1):contiguous():reshape({-1, moved:size(-1)}):tolist()
        for r, row in ipairs(rows) do assert.same(ref_order(row, desc), got[r]) end
      end
    end
    assert.same(ref_order({5, -3, 5, 0}, true), accel.tensor({5, -3, 5, 0}):argsort(1, true):tolist())
  end)

  it("topk gives the k largest (or smallest) with their indices; values carry gradients", function()
    local x = accel.tensor({{0.5, 3, -1, 2}, {4, 4, 1, 0}}, f32):requires_grad_(true)
    local v, i = x:topk(2, 2)
    assert.same({{3, 2}, {4, 4}}, v:tolist())
    assert.same({{1, 3}, {0, 1}}, i:tolist()) -- ties: the lower position first
    local s, si = x:topk(1, 2, false)
    assert.same({{-1}, {0}}, s:tolist())
    assert.same({{2}, {3}}, si:tolist())
    v:sum():backward()
    assert.same({{0, 1, 0, 1}, {1, 1, 0, 0}}, x.grad:tolist())
    local sv = x:detach():sort(2, true)
    assert.same(sv:narrow(2, 1, 3):tolist(), (x:detach():topk(3)):tolist())
  end)

  it("refuse a k outside the dim and a bad dim", function()
    local x = accel.zeros(2, 3)
    expect_error(function() local _ = x:topk(4, 2) end, "topk: selected index k out of range")
    expect_error(function() local _ = x:sort(3) end, "sort: dimension 3 out of range")
    expect_error(function() local _ = x:argsort(1, "yes") end, "argsort: argument 'descending' must be a boolean, got string")
    expect_error(function() local _ = x:sort(1, false, {dim = 2}) end, "sort: got multiple values for argument 'dim'")
  end)
end)

describe("cumsum", function()
  it("matches running sums along a dim, long rows included, and its gradient is the reversed running sum", function()
    accel.manual_seed(5)
    for _, n in ipairs({7, 513, 1300}) do
      local x = accel.randn(2, n, f64):requires_grad_(true)
      local c = x:cumsum(2)
      local xl, cl = x:tolist(), c:tolist()
      local w = accel.randn(2, n, f64)
      local _ = (c * w):sum():backward()
      local wl, gl = w:tolist(), x.grad:tolist()
      for r = 1, 2 do
        local s, g = 0, 0
        for j = 1, n do
          s = s + xl[r][j]
          assert.is_true(math.abs(s - cl[r][j]) < 1e-10)
        end
        for j = n, 1, -1 do
          g = g + wl[r][j]
          assert.is_true(math.abs(g - gl[r][j]) < 1e-10)
        end
      end
    end
  end)

  it("cumprod multiplies along a dim, with the product rule's gradient", function()
    assert.same({1, 2, 6, 24}, accel.tensor({1, 2, 3, 4}):cumprod(1):tolist())
    assert.same({{1.5, 2}, {4.5, 8}}, accel.tensor({{1.5, 2}, {3, 4}}, f64):cumprod(1):tolist())
    local x = accel.tensor({2, 3, 4}, f64):requires_grad_(true)
    x:cumprod(1):sum():backward()
    assert.same({1 + 3 + 12, 2 + 8, 6}, x.grad:tolist()) -- d/dx of x1 + x1 x2 + x1 x2 x3
  end)

  it("integers and bools sum into int64, as torch's; {dtype =} casts first", function()
    local x = accel.tensor({{1, 2, 3}, {4, 5, 6}})
    assert.same({{1, 3, 6}, {4, 9, 15}}, x:cumsum(2):tolist())
    assert.same({{1, 2, 3}, {5, 7, 9}}, x:cumsum(1):tolist())
    local b = accel.tensor({true, false, true}):cumsum(1)
    assert.are.equal(accel.int64, b.dtype)
    assert.same({1, 1, 2}, b:tolist())
    assert.are.equal(accel.int64, accel.tensor({1, 2}, {dtype = accel.int32}):cumsum(1).dtype)
    assert.are.equal(accel.float64, x:cumsum(2, {dtype = accel.float64}).dtype)
    expect_error(function() local _ = x:cumsum() end, "cumsum: dim must be given")
  end)

  -- PyTorch 2.15: [1, 2, 3, inf] -> [1, 3, 6, inf]; [0, -inf, 1] -> [0, -inf, -inf];
  -- [1, nan, 2, 3] -> [1, nan, nan, nan]; along dim 0 of [[1, 2], [inf, 3]] -> [[1, 2], [inf, 5]]
  it("an inf or NaN reaches only the positions after it, as torch's", function()
    local inf, nan = math.huge, 0 / 0
    local function same(want, got)
      for i, v in ipairs(want) do
        local g = got[i]
        assert.is_true((v ~= v and g ~= g) or v == g, ("position %d: %s, want %s"):format(i, tostring(g), tostring(v)))
      end
    end
    same({1, 3, 6, inf}, accel.tensor({1, 2, 3, inf}):cumsum(1):tolist())
    same({0, -inf, -inf}, accel.tensor({0, -inf, 1}):cumsum(1):tolist())
    same({1, nan, nan, nan}, accel.tensor({1, nan, 2, 3}):cumsum(1):tolist())
    local m = accel.tensor({{1, 2}, {inf, 3}}):cumsum(1):tolist()
    same({1, 2}, m[1])
    same({inf, 5}, m[2])
  end)

  -- PyTorch 2.15: [2^62, 1, -2^62, 3] (int64) -> [2^62, 2^62 + 1, 1, 4]
  it("int64 sums are exact beyond 2^53", function()
    local i64 = {dtype = accel.int64}
    local big = 2 ^ 62 -- (a power of two: exact in a double)
    local want = accel.tensor({big, big, 0, 0}, i64) + accel.tensor({0, 1, 1, 4}, i64)
    assert.is_true(accel.tensor({big, 1, -big, 3}, i64):cumsum(1):equal(want))
  end)

  -- PyTorch 2.15 (CPU, accumulating float32 in double): [1e8, 1, -1e8, 1] -> [1e8, 1e8, 1, 2];
  -- [2^24, 1, 1, 1, 1] -> [2^24, 2^24, 2^24 + 2, 2^24 + 4, 2^24 + 4]
  it("float32 sums as torch's double accumulator does, rounded once", function()
    local f32 = {dtype = accel.float32}
    assert.same({1e8, 1e8, 1, 2}, accel.tensor({1e8, 1, -1e8, 1}, f32):cumsum(1):tolist())
    local e = 2 ^ 24
    assert.same({e, e, e + 2, e + 4, e + 4}, accel.tensor({e, 1, 1, 1, 1}, f32):cumsum(1):tolist())
  end)
end)

describe("element-wise compositions", function()
  local x = accel.tensor({{1, -2, 0.5}, {3, 0, -1}}, f64)

  it("logsumexp is log(sum(exp)) along dims, -inf rows stay -inf, and its gradient is softmax", function()
    local xl = x:tolist()
    local want = {}
    for r, row in ipairs(xl) do
      local s = 0
      for _, v in ipairs(row) do s = s + math.exp(v) end
      want[r] = math.log(s)
    end
    close(x:logsumexp(2), accel.tensor(want, f64))
    assert.same({2, 1}, support.shape_of(x:logsumexp(2, true)))
    local inf = math.huge
    assert.same({0, -inf}, accel.tensor({{0, -inf}, {-inf, -inf}}, f32):logsumexp(2):tolist())
    local y = x:clone():requires_grad_(true)
    y:logsumexp(2):sum():backward()
    close(y.grad, x:softmax(2))
    assert.are.equal(accel.float32, accel.tensor({{1, 2, 3}}):logsumexp(2).dtype)
  end)

  it("lerp, addcmul, addcdiv, clamp_min / clamp_max, logaddexp and outer follow their formulas", function()
    local a, b = accel.tensor({1, 2}, f64), accel.tensor({3, 5}, f64)
    close(a:lerp(b, 0.3), accel.tensor({1 + 0.3 * 2, 2 + 0.3 * 3}, f64))
    close(a:lerp(b, 0.7), accel.tensor({3 - 2 * 0.3, 5 - 3 * 0.3}, f64))
    close(a:lerp(b, accel.tensor({0.25, 0.75}, f64)), accel.tensor({1.5, 4.25}, f64))
    close(a:addcmul(a, b, {value = 0.5}), accel.tensor({1 + 0.5 * 3, 2 + 0.5 * 10}, f64))
    close(a:addcdiv(a, b, {value = 2}), accel.tensor({1 + 2 / 3, 2 + 4 / 5}, f64))
    local c = a:clone()
    c:addcmul_(a, b)
    close(c, accel.tensor({4, 12}, f64))
    assert.same({{1, 0, 0.5}, {3, 0, 0}}, x:clamp_min(0):tolist())
    assert.same({{1, -2, 0.5}, {1, 0, -1}}, x:clamp_max(1):tolist())
    close(a:logaddexp(b), accel.tensor({math.log(math.exp(1) + math.exp(3)), math.log(math.exp(2) + math.exp(5))}, f64))
    assert.same({{3, 5}, {6, 10}}, a:outer(b):tolist())
    expect_error(function() local _ = a:lerp(b, "half") end, "lerp: weight must be a number or a tensor, got string")
  end)

  -- torch 2.15 computes addcmul / addcdiv in the three's dtype (bf16 / fp16 in float32, rounded once),
  -- value * t1 first: bf16 [-1.5].addcmul(bf16 [-17.5], bf16 [-18], value=2) = [628] (exact 628.5; addcmul_
  -- too), fp16 [35.125].addcmul([2.16796875], [-8.671875], value=2) = [-2.4765625], float32
  -- [-0.18].addcdiv([0.49], [4.27], value=0.3) = [-0.14557376503944397], int64 [1, 2].addcmul(uint8 [200, 7],
  -- uint8 [200, 7]) = [40001, 51], int64 [1, 2].addcmul([1, 2], [1, 2], value=0.5) = [1, 2] (value
  -- truncated); int64 [1, 2].addcdiv([1, 2], [1, 2]) raises "Integer division with addcdiv is no longer supported"
  it("addcmul / addcdiv compute in the promoted dtype and round once, as torch", function()
    local bf, h = {dtype = accel.bfloat16}, {dtype = accel.float16}
    local s, p, q = accel.tensor({-1.5}, bf), accel.tensor({-17.5}, bf), accel.tensor({-18}, bf)
    assert.same({628}, s:addcmul(p, q, {value = 2}):float():tolist())
    local c = s:clone()
    c:addcmul_(p, q, {value = 2})
    assert.same({628}, c:float():tolist())
    local r = accel.tensor({35.125}, h):addcmul(accel.tensor({2.16796875}, h), accel.tensor({-8.671875}, h), {value = 2})
    assert.are.equal(accel.float16, r.dtype)
    assert.same({-2.4765625}, r:float():tolist())
    local d = accel.tensor({-0.18}, f32):addcdiv(accel.tensor({0.49}, f32), accel.tensor({4.27}, f32), {value = 0.3})
    assert.same({-0.14557376503944397}, d:tolist())
    local i, u = accel.tensor({1, 2}, i64), accel.tensor({200, 7}, {dtype = accel.uint8})
    assert.same({40001, 51}, i:addcmul(u, u):tolist())
    local t = i:addcmul(i, i, {value = 0.5})
    assert.are.equal(accel.int64, t.dtype)
    assert.same({1, 2}, t:tolist())
    expect_error(function() local _ = i:addcdiv(i, i) end, "addcdiv: integer division is not supported")
  end)

  it("isclose / allclose / equal and nan_to_num", function()
    local a = accel.tensor({1, nan, 2}, f64)
    assert.same({true, false, false}, a:isclose(accel.tensor({1 + 1e-9, nan, 2.1}, f64)):tolist())
    assert.same({true, true, false}, a:isclose(accel.tensor({1, nan, 2.1}, f64), {equal_nan = true}):tolist())
    assert.is_false(accel.tensor({1}, f32):allclose(accel.tensor({1.1}, f32)))
    assert.is_true(accel.tensor({1}, f32):allclose(accel.tensor({1.1}, f32), {atol = 0.2}))
    -- torch 2.15 compares integer and bool tensors in float32: uint8 [0, 5] vs [1, 4] with atol 1 is
    -- [True, True] (no 0 - 1 = 255); [0, 200, 0] vs [1, 100, 255] is [True, False, False]
    local u8 = {dtype = accel.uint8}
    assert.same({true, true}, accel.tensor({0, 5}, u8):isclose(accel.tensor({1, 4}, u8), 0, 1):tolist())
    assert.same({true, false, false}, accel.tensor({0, 200, 0}, u8):isclose(accel.tensor({1, 100, 255}, u8), 0, 1):tolist())
    -- torch 2.15: bool [T, F, T, F] vs [T, T, F, F] is [True, False, False, True]; with atol 1 all True
    local p, q = accel.tensor({true, false, true, false}), accel.tensor({true, true, false, false})
    assert.same({true, false, false, true}, p:isclose(q):tolist())
    assert.same({true, true, true, true}, p:isclose(q, 0, 1):tolist())
    -- torch 2.15: [1, inf, -inf] vs [inf, inf, inf] is [False, True, False] (an infinite error is never close)
    local inf = math.huge
    assert.same({false, true, false}, accel.tensor({1, inf, -inf}, f64):isclose(accel.tensor({inf, inf, inf}, f64)):tolist())
    assert.is_true(x:equal(x:clone()))
    assert.is_false(x:equal(x:t()))
    local inf = math.huge
    -- torch 2.15: tensor([1., nan, inf, -inf]).nan_to_num() == [1, 0, 3.4028e+38, -3.4028e+38]
    local r = accel.tensor({1, nan, inf, -inf}, f32):nan_to_num():tolist()
    assert.same({1, 0, 3.4028234663852886e38, -3.4028234663852886e38}, r)
    assert.same({1, 5, 7, -7}, accel.tensor({1, nan, inf, -inf}, f32):nan_to_num({nan = 5, posinf = 7, neginf = -7}):tolist())
  end)
end)

describe("reordering", function()
  local it64 = accel.tensor({{1, 2, 3}, {4, 5, 6}})

  it("flip, roll, movedim, swapaxes and broadcast_to (torch 2.15's results)", function()
    assert.same({{3, 2, 1}, {6, 5, 4}}, it64:flip(2):tolist())
    assert.same({{6, 5, 4}, {3, 2, 1}}, it64:flip({1, 2}):tolist())
    assert.same({{3, 1, 2}, {6, 4, 5}}, it64:roll(1, 2):tolist())
    assert.same({{6, 1, 2}, {3, 4, 5}}, it64:roll(1):tolist())
    assert.same({{5, 6, 4}, {2, 3, 1}}, it64:roll({1, -1}, {1, 2}):tolist())
    assert.same({3, 2}, support.shape_of(it64:movedim(1, 2)))
    assert.same({3, 4, 2}, support.shape_of(accel.zeros(2, 3, 4):movedim({1, 2}, {3, 1})))
    assert.same(it64:t():tolist(), it64:swapaxes(1, 2):tolist())
    assert.same({{1, 2, 3}, {1, 2, 3}}, accel.tensor({1, 2, 3}):broadcast_to({2, 3}):tolist())
  end)

  it("flip and roll pass gradients back to the original positions", function()
    local x = accel.tensor({1, 2, 3, 4}, f64):requires_grad_(true)
    local w = accel.tensor({10, 20, 30, 40}, f64)
    local _ = (x:flip(1) * w):sum():backward()
    assert.same({40, 30, 20, 10}, x.grad:tolist())
    x.grad = nil
    local _ = (x:roll(1, 1) * w):sum():backward()
    assert.same({20, 30, 40, 10}, x.grad:tolist())
  end)
end)

describe("masks and positions", function()
  local it64 = accel.tensor({{1, 2, 3}, {4, 5, 6}})
  local m = accel.tensor({{true, false, true}, {false, true, false}})

  it("nonzero, masked_select and count_nonzero (torch 2.15's results)", function()
    assert.same({{0, 0}, {0, 2}, {1, 1}}, m:nonzero():tolist())
    local rows, cols = m:nonzero({as_tuple = true})
    assert.same({0, 0, 1}, rows:tolist())
    assert.same({0, 2, 1}, cols:tolist())
    assert.same({1, 3, 5}, it64:masked_select(m):tolist())
    assert.same({1, 3, 2}, accel.tensor({1, 2, 3}):masked_select(m):tolist()) -- broadcast
    assert.same({3, 3}, it64:count_nonzero(2):tolist())
    assert.same({0, 2}, support.shape_of(accel.zeros(2, 2):nonzero()))
    expect_error(function() local _ = it64:masked_select(it64) end, "masked_select: mask must be a bool tensor")
  end)

  it("masked_select passes gradients to the selected elements", function()
    local x = accel.tensor({{1, 2, 3}, {4, 5, 6}}, f64):requires_grad_(true)
    x:masked_select(m):sum():backward()
    assert.same({{1, 0, 1}, {0, 1, 0}}, x.grad:tolist())
  end)

  it("new_zeros / new_ones / new_full / new_empty / new_tensor take the tensor's dtype and device", function()
    assert.are.equal(accel.int64, it64:new_zeros(2, 3).dtype)
    assert.same({{0, 0, 0}, {0, 0, 0}}, it64:new_zeros({2, 3}):tolist())
    assert.same({7, 7}, it64:new_full({2}, 7):tolist())
    assert.are.equal(accel.float64, it64:new_ones(2, {dtype = accel.float64}).dtype)
    assert.are.equal(accel.float32, accel.zeros(1):new_tensor({1, 2}).dtype)
    assert.same({2}, support.shape_of(accel.zeros(1):new_empty(2)))
  end)
end)

describe("random fills and multinomial", function()
  it("normal_ / uniform_ draw what nn.init.normal_ / uniform_ draw, and refuse a leaf that requires grad", function()
    accel.manual_seed(7)
    local a = accel.empty(5, f64):normal_(1, 2)
    accel.manual_seed(7)
    assert.same(accel.nn.init.normal_(accel.empty(5, f64), 1, 2):tolist(), a:tolist())
    accel.manual_seed(7)
    local u = accel.empty(5, f64):uniform_({from = -1, to = 3})
    accel.manual_seed(7)
    assert.same(accel.nn.init.uniform_(accel.empty(5, f64), -1, 3):tolist(), u:tolist())
    local w = accel.empty(3):requires_grad_(true)
    expect_error(function() w:normal_() end, "normal_: a leaf tensor that requires grad (shape [3]) cannot be modified in place")
    accel.no_grad(function() w:uniform_() end) -- as torch under no_grad
  end)

  it("bernoulli / bernoulli_ / exponential_ draw with the asked mean (within 5 standard deviations)", function()
    accel.manual_seed(13)
    local n = 20000
    local function within(t, mean, sd)
      local m = t:double():mean():item()
      assert.is_true(math.abs(m - mean) <= 5 * sd / math.sqrt(n), ("mean %g, expected %g"):format(m, mean))
    end
    local b = accel.zeros(n):bernoulli_(0.3)
    within(b, 0.3, math.sqrt(0.3 * 0.7))
    assert.is_true(b:eq(0):logical_or(b:eq(1)):all():item())
    within(accel.full({n}, 0.8, f32):bernoulli(), 0.8, math.sqrt(0.8 * 0.2))
    within(accel.empty(n, f64):exponential_(2), 0.5, 0.5)
    expect_error(function() local _ = accel.zeros(3):bernoulli(2) end, "bernoulli: p must be in [0, 1], got 2")
    local w = accel.zeros(2):requires_grad_(true)
    expect_error(function() w:bernoulli_() end, "bernoulli_: a leaf tensor that requires grad (shape [2])")
  end)

  it("multinomial draws in proportion to the weights, never a zero-weight category", function()
    accel.manual_seed(11)
    local n = 20000
    local w = {0.1, 0, 0.6, 0.3}
    local s = accel.tensor({w, {0, 0, 2, 0}}, f64):multinomial(n, true)
    assert.same({2, n}, support.shape_of(s))
    local counts = {0, 0, 0, 0}
    for _, v in ipairs(s[1]:tolist()) do counts[v + 1] = counts[v + 1] + 1 end
    for c = 1, 4 do -- within 5 standard deviations of n w (a wrong rule is off by hundreds of them)
      local sd = math.sqrt(n * w[c] * (1 - w[c]))
      assert.is_true(math.abs(counts[c] - n * w[c]) <= 5 * sd + 1e-9, ("category %d: %d draws"):format(c - 1, counts[c]))
    end
    assert.same({n}, support.shape_of(s[2]:eq(2):nonzero():select(2, 1)))
  end)

  it("multinomial without replacement draws distinct categories of positive weight", function()
    accel.manual_seed(3)
    for _ = 1, 20 do
      local ids = accel.tensor({0.5, 0, 1, 2, 0.1}, f64):multinomial(4):tolist()
      local seen = {}
      for _, v in ipairs(ids) do
        assert.is_nil(seen[v])
        assert.are_not.equal(1, v)
        seen[v] = true
      end
    end
    local p = accel.tensor({{0.5, 0.5}, {1, 0}}, f64)
    -- torch 2.15's messages
    expect_error(function() local _ = p:multinomial(2) end, "not enough non-negative category to sample")
    expect_error(function() local _ = p:multinomial(3, true, 1) end, "multinomial: 2 arguments given")
    expect_error(function() local _ = p:multinomial(3) end, "cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    expect_error(function() local _ = accel.tensor({-1, 2}, f64):multinomial(1) end, "element < 0")
    expect_error(function() local _ = accel.tensor({0, 0}, f64):multinomial(1) end, "sum of probabilities <= 0")
  end)
end)

describe("scatter_add and index_add", function()
  -- torch 2.15: t = tensor([True, False, False]); t.scatter_(0, tensor([1]), True) -> [True, True, False];
  -- tensor([False, False]).scatter(0, tensor([0]), True) -> [True, False]; tensor([1, 2, 3]).scatter(0,
  -- tensor([2]), True) -> [1, 2, 1]
  it("scatter / scatter_ take a Lua boolean value (the bool scalar)", function()
    local t = accel.tensor({true, false, false})
    t:scatter_(1, accel.tensor({1}), true)
    assert.same({true, true, false}, t:tolist())
    assert.same({true, false}, accel.tensor({false, false}):scatter(1, accel.tensor({0}), true):tolist())
    assert.same({1, 2, 1}, accel.tensor({1, 2, 3}):scatter(1, accel.tensor({2}), true):tolist())
  end)

  it("add src at the indices (torch 2.15's results), out of place and in place, integers exactly", function()
    local x = accel.zeros(3, 4, f64)
    local idx = accel.tensor({{0, 1, 2, 0}, {2, 0, 0, 1}})
    local src = accel.tensor({{1, 2, 3, 4}, {5, 6, 7, 8}}, f64)
    assert.same({{1, 6, 7, 4}, {0, 2, 0, 8}, {5, 0, 3, 0}}, x:scatter_add(1, idx, src):tolist())
    assert.same({{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}}, x:tolist()) -- out of place
    local counts = accel.zeros(5, i64)
    counts:scatter_add_(1, accel.tensor({0, 1, 1, 4, 4, 4}), accel.ones(6, i64))
    assert.same({1, 2, 0, 0, 3}, counts:tolist())
    local rows = accel.ones(3, 2, f64):index_add(1, accel.tensor({0, 2, 0}), accel.tensor({{1, 2}, {3, 4}, {5, 6}}, f64),
      {alpha = 2})
    assert.same({{13, 17}, {1, 1}, {7, 9}}, rows:tolist())
  end)

  it("pass the gradient to self unchanged and to src read back at the indices", function()
    local a = accel.ones(3, 2, f64):requires_grad_(true)
    local s = accel.tensor({{1, 2}, {3, 4}}, f64):requires_grad_(true)
    local w = accel.tensor({{1, 2}, {3, 4}, {5, 6}}, f64)
    local _ = (a:index_add(1, accel.tensor({2, 0}), s) * w):sum():backward()
    assert.same(w:tolist(), a.grad:tolist())
    assert.same({{5, 6}, {1, 2}}, s.grad:tolist())
    local b = accel.zeros(2, 3, f64):requires_grad_(true)
    local src = accel.ones(2, 3, f64):requires_grad_(true)
    local idx = accel.tensor({{2, 0, 1}, {1, 1, 0}})
    local g = accel.tensor({{1, 2, 3}, {4, 5, 6}}, f64)
    local _ = (b:scatter_add(2, idx, src) * g):sum():backward()
    assert.same(g:gather(2, idx):tolist(), src.grad:tolist())
    assert.same(g:tolist(), b.grad:tolist())
  end)

  it("take an index smaller than src and than t outside dim, as torch (its doc example)", function()
    -- torch.zeros(3, 5).scatter_add(0, tensor([[0, 1, 2, 0]]), arange(1, 11).reshape(2, 5))
    local src = accel.arange(1, 11, f64):reshape({2, 5}):requires_grad_()
    local t = accel.zeros({3, 5}, f64):requires_grad_()
    local out = t:scatter_add(1, accel.tensor({{0, 1, 2, 0}}), src)
    assert.same({{1, 0, 0, 4, 0}, {0, 2, 0, 0, 0}, {0, 0, 3, 0, 0}}, out:tolist())
    assert.same({{1, 0, 0, 4, 0}, {0, 2, 0, 0, 0}, {0, 0, 3, 0, 0}},
      accel.zeros({3, 5}, f64):scatter(1, accel.tensor({{0, 1, 2, 0}}), src:detach()):tolist())
    local w = accel.arange(1, 16, f64):reshape({3, 5})
    out:mul(w):sum():backward()
    -- src[1][j] lands at out[index[1][j] + 1][j]: weights 1, 7, 13, 4; the rest of src is unused
    assert.same({{1, 7, 13, 4, 0}, {0, 0, 0, 0, 0}}, src.grad:tolist())
    assert.same(w:tolist(), t.grad:tolist())
  end)

  it("refuse other dtypes, larger indices and out-of-range ids", function()
    local x = accel.zeros(3, 4, f64)
    local idx = accel.tensor({{0, 1, 2, 0}, {2, 0, 0, 1}})
    expect_error(function() local _ = x:scatter_add(1, idx, accel.ones(2, 4)) end,
      "scatter_add: Expected self.dtype to be equal to src.dtype (float64 and float32)")
    expect_error(function() local _ = x:scatter_add(1, idx, accel.ones(2, 2, f64)) end,
      "scatter_add: index (shape [2, 4]) must be no larger than src (shape [2, 2]), and no larger than the input "
      .. "(shape [3, 4]) apart from dim 1")
    expect_error(function() local _ = x:scatter_add(1, idx + 5, accel.ones(2, 4, f64)) end, "scatter_add: index 5 is out of range")
    expect_error(function() local _ = x:index_add(1, accel.tensor({0}), accel.ones(2, 4, f64)) end,
      "index_add: source (shape [2, 4]) must have the input's shape ([3, 4]) with 1 in dim 1")
  end)
end)

describe("order statistics and counting (torch 2.15's results)", function()
  local x = accel.tensor({{3, 1, 2, 5}, {nan, 1, 0, 2}}, f32)

  it("median / nanmedian / kthvalue give the lower median or k-th smallest with its index", function()
    local v, i = x:median(2)
    assert.is_true(v[2]:isnan():item())
    assert.same({2, 0}, i:tolist())
    assert.are.equal(2, v[1]:item())
    v, i = x:nanmedian(2)
    assert.same({2, 1}, v:tolist())
    assert.same({2, 1}, i:tolist())
    assert.is_true(x:median():isnan():item())
    assert.are.equal(2, accel.tensor({1, 4, 2, 3}, f32):median():item())
    v, i = accel.tensor({{3, 1, 2, 5}}, f32):kthvalue(2, 2)
    assert.same({2}, v:tolist())
    assert.same({2}, i:tolist())
    assert.same({2, 1}, support.shape_of(x:median(2, true)))
    expect_error(function() local _ = x:kthvalue(5, 2) end, "kthvalue: k (5) out of range")
  end)

  it("median() / nanmedian() split the gradient among tied elements; median(dim) gives it to the index", function()
    local function grad_of(list, f)
      local t = accel.tensor(list, {dtype = accel.float64, requires_grad = true})
      f(t):backward()
      return t.grad:tolist()
    end
    local third = 1 / 3
    -- torch 2.15: tensor([2., 1, 2, 3, 2]).median() grad [1/3, 0, 1/3, 0, 1/3] (nanmedian too);
    -- [5., 5].median() [0.5, 0.5]; nanmedian([nan, 1, 1, 3]) [0, 0.5, 0.5, 0]; median([nan, 1, 1, 3]) [1, 0, 0, 0];
    -- median([nan, 1, nan]) [0.5, 0, 0.5]
    assert.same({third, 0, third, 0, third}, grad_of({2, 1, 2, 3, 2}, function(t) return t:median() end))
    assert.same({third, 0, third, 0, third}, grad_of({2, 1, 2, 3, 2}, function(t) return t:nanmedian() end))
    assert.same({0.5, 0.5}, grad_of({5, 5}, function(t) return t:median() end))
    assert.same({0, 0.5, 0.5, 0}, grad_of({nan, 1, 1, 3}, function(t) return t:nanmedian() end))
    assert.same({1, 0, 0, 0}, grad_of({nan, 1, 1, 3}, function(t) return t:median() end))
    assert.same({0.5, 0, 0.5}, grad_of({nan, 1, nan}, function(t) return t:median() end))
    -- torch 2.15: tensor([[0., 1], [0, 3]]).median().log() grad [[inf, 0], [inf, 0]] (0, not NaN, off the ties);
    -- tensor([[2., 2, 1], [1, 1, 3]]).median(1).values.sum() grad [[1, 0, 0], [0, 1, 0]]
    assert.same({{math.huge, 0}, {math.huge, 0}}, grad_of({{0, 1}, {0, 3}}, function(t) return t:median():log() end))
    assert.same({{1, 0, 0}, {0, 1, 0}}, grad_of({{2, 2, 1}, {1, 1, 3}}, function(t) return (t:median(2)):sum() end))
  end)

  it("quantile interpolates linearly between sorted neighbours", function()
    close(accel.tensor({{1, 2, 3, 4}}, f64):quantile(0.4, 2), accel.tensor({2.2}, f64), 1e-12) -- position 0.4 * 3
    close(accel.tensor({1, 2, 3, 4}, f64):quantile(accel.tensor({0.25, 0.5}, f64)), accel.tensor({1.75, 2.5}, f64))
    expect_error(function() local _ = accel.tensor({1, 2}, f64):quantile(1.5) end, "quantile: q values must be in the range [0, 1]")
  end)

  it("unique, bincount and searchsorted", function()
    local u, inv, counts = accel.tensor({3, 1, 3, 2, 1}):unique({return_inverse = true, return_counts = true})
    assert.same({1, 2, 3}, u:tolist())
    assert.same({2, 0, 2, 1, 0}, inv:tolist())
    assert.same({2, 1, 2}, counts:tolist())
    assert.same({1, 0, 2, 0, 0, 1}, accel.tensor({0, 2, 2, 5}):bincount():tolist())
    assert.same({0.5, 0, 3}, accel.tensor({0, 2, 2}):bincount({weights = accel.tensor({0.5, 1, 2}, f64)}):tolist())
    assert.same({0, 1, 0, 0}, accel.tensor({1}):bincount({minlength = 4}):tolist())
    assert.same({{1, 3}, {0, 4}}, accel.searchsorted(accel.tensor({1, 3, 5, 7}), accel.tensor({{3, 6}, {0, 9}})):tolist())
    assert.same({2}, accel.searchsorted(accel.tensor({1, 3, 5, 7}), accel.tensor({3}), {right = true}):tolist())
  end)

  it("searchsorted is torch's binary search: a NaN value goes past the end, a NaN element is passed over", function()
    local s = accel.tensor({1, 3, 3, 5, 7}, f64)
    local v = accel.tensor({4, 8, nan}, f64)
    assert.same({3, 5, 5}, s:searchsorted(v):tolist()) -- torch 2.15: [3, 5, 5]
    assert.same({3, 5, 5}, s:searchsorted(v, {right = true}):tolist()) -- torch 2.15: [3, 5, 5]
    -- torch 2.15: [3, 3] and [2, 4, 4] (4 passes the NaN at the end of [1, 3, NaN], but the search
    -- of [1, 3, 5, NaN] stops at 5 before reaching it)
    assert.same({3, 3}, accel.tensor({1, 3, nan}, f64):searchsorted(accel.tensor({4, nan}, f64)):tolist())
    assert.same({2, 4, 4}, accel.tensor({1, 3, 5, nan}, f64):searchsorted(accel.tensor({4, nan, 6}, f64)):tolist())
    -- torch 2.15: [[3, 1], [3, 3]] (rows)
    local rows = accel.tensor({{1, 2, nan}, {0, nan, nan}}, f64)
    assert.same({{3, 1}, {3, 3}}, rows:searchsorted(accel.tensor({{nan, 1.5}, {0, nan}}, f64), {right = true}):tolist())
    -- torch 2.15: [4, 2, 0, 4] for an unsorted sequence (the search's path, not a count)
    assert.same({4, 2, 0, 4}, accel.tensor({5, 1, 3, 2}, f32):searchsorted(accel.tensor({4, 2, 0, 6}, f32)):tolist())
    -- torch 2.15: "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions
    -- of boundaries tensor and input value tensor must match, but we got boundaries tensor [2, 3] and input
    -- value tensor [2]"
    expect_error(function() accel.zeros(2, 3):searchsorted(accel.zeros(2)) end,
      "searchsorted: boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor and input value tensor must match, but we got boundaries tensor [2, 3] and input value tensor [2]")
  end)

  it("bincount's result dtype: float32 weights give float32, any other weights float64", function()
    -- torch 2.15: bincount(tensor([0, 2, 2, 1]), weights=tensor([1, 2, 3, 4], dtype=d), minlength=5) is
    -- [1., 4., 5., 0., 0.] in float32 for d = float32 and in float64 for float64, float16, bfloat16, int64,
    -- int32, uint8 and bool (bool weights [True, False, True, True]: [1., 1., 1.])
    local ids = accel.tensor({0, 2, 2, 1})
    local weight_dtypes = {float32 = accel.float32, float64 = accel.float64, float16 = accel.float64,
      bfloat16 = accel.float64, int64 = accel.float64, int32 = accel.float64, uint8 = accel.float64}
    for name, want in pairs(weight_dtypes) do
      local r = ids:bincount({weights = accel.tensor({1, 2, 3, 4}, {dtype = accel[name]}), minlength = 5})
      assert.are.equal(want, r.dtype, name)
      assert.same({1, 4, 5, 0, 0}, r:tolist(), name)
    end
    local b = ids:bincount({weights = accel.tensor({true, false, true, true})})
    assert.are.equal(accel.float64, b.dtype)
    assert.same({1, 1, 1}, b:tolist())
    -- torch 2.15: float16 weights are summed in float64: [2049 (2048 in float16), 1, 1] at one id gives [2050.]
    local h = accel.tensor({0, 0, 0}):bincount({weights = accel.tensor({2049, 1, 1}, {dtype = accel.float16})})
    assert.same({2050}, h:tolist())
    -- torch 2.15: an empty input gives int64 zeros, weights or not: bincount(tensor([]), weights=..., minlength=3)
    local e = accel.tensor({}, {dtype = accel.int64}):bincount({weights = accel.tensor({}, f64), minlength = 3})
    assert.are.equal(accel.int64, e.dtype)
    assert.same({0, 0, 0}, e:tolist())
  end)
end)

describe("running extremes, runs and histograms (torch 2.15's results)", function()
  it("cummax / cummin give values and the index reached (a tie takes the later one)", function()
    local v, i = accel.tensor({{1, 3, 2, 5, 4}}):cummax(2)
    assert.same({{1, 3, 3, 5, 5}}, v:tolist())
    assert.same({{0, 1, 1, 3, 3}}, i:tolist())
    v, i = accel.tensor({{1, 3, 2, 5, 4}}):cummin(2)
    assert.same({{1, 1, 1, 1, 1}}, v:tolist())
    assert.same({{0, 0, 0, 0, 0}}, i:tolist())
    local _, ties = accel.tensor({1, 1, 2, 2}):cummax(1)
    assert.same({0, 1, 2, 3}, ties:tolist())
  end)

  it("cummax / cummin: each later NaN takes over the index, and the gradient", function()
    -- torch 2.15: tensor([2, nan, 1, 2, nan, 1]).cummax(0) and .cummin(0) indices are both [0, 1, 1, 1, 4, 4]
    local t = accel.tensor({2, nan, 1, 2, nan, 1}, {dtype = accel.float64, requires_grad = true})
    local v, i = t:cummax(1)
    assert.same({0, 1, 1, 1, 4, 4}, i:tolist())
    local _, j = t:cummin(1)
    assert.same({0, 1, 1, 1, 4, 4}, j:tolist())
    -- torch 2.15: (values * [1, ..., 6]).sum().backward() gives t.grad = [1, 9, 0, 0, 11, 0]
    local w = accel.arange(1, 7, {dtype = accel.float64})
    v:mul(w):sum():backward()
    assert.same({1, 9, 0, 0, 11, 0}, t.grad:tolist())
  end)

  it("logcumsumexp is exact for widely spread values", function()
    local xs = {0, 1, -1, 2}
    local want, s = {}, 0
    for k, v in ipairs(xs) do
      s = s + math.exp(v)
      want[k] = math.log(s)
    end
    close(accel.tensor(xs, f64):logcumsumexp(1), accel.tensor(want, f64), 1e-14)
    assert.same({-1000, 0}, accel.tensor({-1000, 0}, f64):logcumsumexp(1):tolist())
  end)

  it("logaddexp and logcumsumexp of equal infinities are that infinity, with torch's gradients", function()
    local inf = math.huge
    local function leaf(v) return accel.tensor(v, {dtype = accel.float64, requires_grad = true}) end
    -- torch 2.15: logaddexp([-inf, -inf, inf, 0, 1], [-inf, 1, inf, -inf, 2]) and its gradients (sum)
    local a, b = leaf({-inf, -inf, inf, 0, 1}), leaf({-inf, 1, inf, -inf, 2})
    local r = a:logaddexp(b)
    r:sum():backward()
    values({-inf, 1, inf, 0, 2.313261687518223}, r, 1e-15, "logaddexp")
    values({nan, 0, nan, 1, 0.2689414213699951}, a.grad, 1e-15, "logaddexp grad a")
    values({nan, 1, nan, 0, 0.7310585786300049}, b.grad, 1e-15, "logaddexp grad b")
    -- torch 2.15: logcumsumexp and the gradient of (r * w):sum()
    local cases = {
      {{-inf, -inf, 0}, {1, 1, 1}, {-inf, -inf, 0}, {nan, nan, 1}},
      {{0, -inf, 1, inf, 1, inf}, {1, 1, 1, 1, 1, 1}, {0, 0, 1.3132616875182228, inf, inf, inf},
       {2.268941421369995, 0, 0.7310585786300049, nan, 0, nan}},
      {{1, 2, 3}, {1, -2, 0.5}, {1, 2.313261687518223, 3.4076059644443806},
       {0.5071324438452001, -1.3397529217326107, 0.33262047788741084}},
    }
    for k, c in ipairs(cases) do
      local x = leaf(c[1])
      local y = x:logcumsumexp(1)
      local _ = (y * accel.tensor(c[2], f64)):sum():backward()
      values(c[3], y, 1e-14, "logcumsumexp " .. k)
      values(c[4], x.grad, 1e-14, "logcumsumexp grad " .. k)
    end
  end)

  it("unique_consecutive, mode and histc", function()
    local u, inv, counts = accel.tensor({1, 1, 2, 2, 2, 3, 1}):unique_consecutive({return_inverse = true, return_counts = true})
    assert.same({1, 2, 3, 1}, u:tolist())
    assert.same({0, 0, 1, 1, 1, 2, 3}, inv:tolist())
    assert.same({2, 3, 1, 1}, counts:tolist())
    local v, i = accel.tensor({{1, 2, 2, 3}, {4, 4, 1, 1}}):mode(2)
    assert.same({2, 1}, v:tolist())
    assert.same({2, 3}, i:tolist())
    assert.same({0, 2, 1, 1}, accel.tensor({1, 2, 1, 4}, f32):histc(4, 0, 4):tolist())
    assert.same({2, 1, 1}, accel.tensor({1, 2, 1, 4}, f32):histc(3):tolist())
    -- torch 2.15: "torch.histc: range of [0, inf] is not finite" (an inf bound); with no bounds, an inf or NaN
    -- in the data makes the data's range not finite
    expect_error(function() accel.tensor({1, 2}, f32):histc(4, 0, math.huge) end, "histc: range of [0, inf] is not finite")
    expect_error(function() accel.tensor({1.5, -math.huge}, f32):histc(4) end, "histc: range of [-inf, 1.5] is not finite")
    expect_error(function() accel.tensor({1, 0 / 0, 2}, f32):histc(4) end, "is not finite")
    assert.same({1, 0, 1}, accel.tensor({1, 0 / 0, 2}, f32):histc(3, 0.5, 2.5):tolist()) -- NaN ignored in a range
  end)

  it("histc finds the bin in the input's dtype, as torch's", function()
    -- torch 2.15: [0, 0, 0, 1, 0, 0, 1, 1, 0, 1] (in float32 0.7 * 10 is 7.0: 0.7 in bin 7, 0.9 in bin 9)
    assert.same({0, 0, 0, 1, 0, 0, 1, 1, 0, 1}, accel.tensor({0.3, 0.6, 0.7, 0.9}, f32):histc(10, 0, 1):tolist())
    local f16, bf16 = {dtype = accel.float16}, {dtype = accel.bfloat16}
    -- torch 2.15: [0, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    assert.same({0, 1, 1, 0, 0, 0, 0, 0, 0, 0}, accel.tensor({0.1, 0.2}, f16):histc(10, 0, 1):tolist())
    -- torch 2.15: [1, 0, 0] (min 0.1 rounded to float16, 0.0999756, holds float16's 0.1)
    assert.same({1, 0, 0}, accel.tensor({0.1}, f16):histc(3, 0.1, 1.3):tolist())
    -- torch 2.15: [0, 0, 0, 0, 0, 0, 0, 1, 0, 1]
    assert.same({0, 0, 0, 0, 0, 0, 0, 1, 0, 1}, accel.tensor({0.7, 0.9}, bf16):histc(10, 0, 1):tolist())
  end)

  it("mode of rows holding NaN and of bools gives torch's values and indices", function()
    local v, i = accel.tensor({nan, nan, 1}, f64):mode()
    assert.is_true(v:item() ~= v:item()) -- torch 2.15: (nan, 0)
    assert.are.equal(0, i:item())
    v, i = accel.tensor({2, nan, 2, 0}, f32):mode()
    assert.same({0, 3}, {v:item(), i:item()}) -- torch 2.15: (0., 3)
    -- torch 2.15: values [1., 2., nan], indices [0, 2, 0]
    v, i = accel.tensor({{1, nan, 1}, {nan, 2, 2}, {nan, nan, 3}}, f32):mode(2)
    local vs = v:tolist()
    assert.same({1, 2}, {vs[1], vs[2]})
    assert.is_true(vs[3] ~= vs[3])
    assert.same({0, 2, 0}, i:tolist())
    -- a row of 20 (torch's std::sort is an introsort past 16): torch 2.15: (3., 0), though 1 is the most frequent
    v, i = accel.tensor({3, nan, 1, 3, nan, 2, 1, nan, 3, nan, 2, 1, nan, nan, 2, 1, nan, 1, nan, 3}, f32):mode()
    assert.same({3, 0}, {v:item(), i:item()})
    v, i = accel.tensor({true, false, true, false}):mode()
    assert.same({false, 3}, {v:item(), i:item()}) -- torch 2.15: (False, 3)
    -- torch 2.15: values [True, False], indices [2, 1]
    v, i = accel.tensor({{true, false}, {false, false}, {true, true}}):mode(1)
    assert.same({true, false}, v:tolist())
    assert.same({2, 1}, i:tolist())
  end)

  it("mode's values carry the gradient to the returned index (torch 2.15's ModeBackward0)", function()
    local x = accel.tensor({{1, 2, 2}, {3, 3, 1}}, {dtype = accel.float32, requires_grad = true})
    local v = x:mode(2)
    assert.is_true(v.requires_grad)
    v:mul(accel.tensor({2, 5}, f32)):sum():backward()
    assert.same({{0, 0, 2}, {0, 5, 0}}, x.grad:tolist()) -- torch 2.15: [[0., 0., 2.], [0., 5., 0.]]
    x.grad = nil
    local vk, ik = x:mode(1, true)
    assert.same({{1, 2, 1}}, vk:tolist()) -- torch 2.15: values [[1., 2., 1.]], indices [[0, 0, 1]]
    assert.same({{0, 0, 1}}, ik:tolist())
    vk:mul(accel.tensor({{1, 2, 3}}, f32)):sum():backward()
    assert.same({{1, 2, 0}, {0, 0, 3}}, x.grad:tolist()) -- torch 2.15: [[1., 2., 0.], [0., 0., 3.]]
  end)

  -- torch 2.15: maximum([-0., 0., -0.], [0., -0., -0.]) -> [-0., 0., -0.], minimum the same: a tie gives the
  -- first operand
  it("maximum and minimum keep the first operand on a tie of signed zeros", function()
    local a, b = accel.tensor({-0.0, 0.0, -0.0}, f32), accel.tensor({0.0, -0.0, -0.0}, f32)
    local function signs(t)
      local out = {}
      for i, v in ipairs(t:tolist()) do out[i] = 1 / v < 0 and "-" or "+" end
      return table.concat(out)
    end
    assert.are.equal("-+-", signs(accel.maximum(a, b)))
    assert.are.equal("-+-", signs(accel.minimum(a, b)))
    assert.are.equal("-+-", signs(a:double():maximum(b:double())))
  end)
end)

describe("windows, scatters by mask, matrix products and erfinv", function()
  it("unfold is a view (torch 2.15's results); its gradient adds the windows back", function()
    local z = accel.zeros(6)
    z:unfold(1, 2, 2):select(2, 1):fill_(1)
    assert.same({1, 0, 1, 0, 1, 0}, z:tolist())
    local w = accel.arange(6, {dtype = accel.float64}):requires_grad_(true)
    local y = w:unfold(1, 3, 1)
    assert.are.equal("UnfoldBackward0", y.grad_fn)
    ;(y * y):sum():backward()
    assert.same({0, 4, 12, 18, 16, 10}, w.grad:tolist()) -- 2 w_i times the windows holding i: 1, 2, 3, 3, 2, 1
    local gc = dofile("tests/lua/gradcheck.lua")
    gc.check(function(v) return v:unfold(2, 3, 2) end, {gc.randn(2, 7, 3)})
    gc.check(function(v) return v:unfold(-1, 2, 3) end, {gc.randn(3, 8)})
  end)

  it("unfold, masked_scatter, put_, addmm (torch 2.15's results)", function()
    assert.same({{0, 1, 2}, {2, 3, 4}, {4, 5, 6}}, accel.arange(7):unfold(1, 3, 2):tolist())
    assert.same({3, 2, 2}, support.shape_of(accel.arange(12):view(3, 4):unfold(2, 2, 2)))
    local m = accel.tensor({{true, false, true}, {false, true, false}})
    assert.same({{1, 0, 2}, {0, 3, 0}}, accel.zeros(2, 3):masked_scatter(m, accel.tensor({1, 2, 3, 4}, f32)):tolist())
    expect_error(function() local _ = accel.zeros(2, 3):masked_scatter(m, accel.ones(2)) end,
      "masked_scatter: source has 2 elements, the mask selects 3")
    -- torch 2.15: tensor([1., 2., 3.]).masked_scatter(tensor([[True, False, True]]), tensor([10., 20., 30.]))
    -- -> [[10., 2., 20.]]: t and mask broadcast together; the in-place form keeps t's shape
    local ms = accel.tensor({{true, false, true}})
    assert.same({{10, 2, 20}}, accel.tensor({1, 2, 3}, f32):masked_scatter(ms, accel.tensor({10, 20, 30}, f32)):tolist())
    -- torch 2.15: tensor([[1.], [2.]]).masked_scatter(tensor([True, False, True]), arange(10.)) -> [[0., 1., 1.], [2., 2., 3.]]
    assert.same({{0, 1, 1}, {2, 2, 3}},
      accel.tensor({{1}, {2}}, f32):masked_scatter(accel.tensor({true, false, true}), accel.arange(10, f32)):tolist())
    expect_error(function() accel.tensor({1, 2, 3}, f32):masked_scatter_(ms, accel.arange(10, f32)) end,
      "masked_scatter_: mask of shape [1, 3] does not broadcast to the tensor's shape [3]")
    local t = accel.tensor({{1, 2}, {3, 4}})
    t:put_(accel.tensor({0, 3}), accel.tensor({9, 8}))
    assert.same({{9, 2}, {3, 8}}, t:tolist())
    -- torch 2.15: zeros(5).put_(tensor([-1, -5]), tensor([1., 2.])) -> [2, 0, 0, 0, 1] (put too);
    -- with accumulate=True and indices [-1, -1]: [0, 0, 0, 0, 3]; index 5 or -6: "out of range: tried to
    -- access index 5 on a tensor of 5 elements"
    local z = accel.zeros(5, f32)
    z:put_(accel.tensor({-1, -5}), accel.tensor({1, 2}, f32))
    assert.same({2, 0, 0, 0, 1}, z:tolist())
    assert.same({2, 0, 0, 0, 1}, accel.zeros(5, f32):put(accel.tensor({-1, -5}), accel.tensor({1, 2}, f32)):tolist())
    z = accel.zeros(5, f32)
    z:put_(accel.tensor({-1, -1}), accel.tensor({1, 2}, f32), true)
    assert.same({0, 0, 0, 0, 3}, z:tolist())
    expect_error(function() accel.zeros(5, f32):put_(accel.tensor({5}), accel.tensor({1}, f32)) end,
      "put_: out of range: tried to access index 5 on a tensor of 5 elements")
    expect_error(function() accel.zeros(5, f32):put_(accel.tensor({-6}), accel.tensor({1}, f32), true) end,
      "put_: out of range: tried to access index -6 on a tensor of 5 elements")
    assert.same({{6.5, 6.5}, {6.5, 6.5}},
      accel.ones(2, 2):addmm(accel.ones(2, 3), accel.ones(3, 2), {beta = 0.5, alpha = 2}):tolist())
    local b = accel.randn(2, 3, 4, f64)
    close(accel.zeros(2, 3, 3, f64):baddbmm(b, b:transpose(2, 3)), b:matmul(b:transpose(2, 3)))
  end)

  it("erfinv inverts erf (float64 to 1e-12), with infinities at +-1 and its gradient", function()
    local ys = {-0.999999, -0.5, -1e-3, 0, 0.3, 0.9, 0.999999}
    local y = accel.tensor(ys, f64)
    close(y:erfinv():erf(), y, 1e-12)
    assert.same({math.huge, -math.huge}, accel.tensor({1, -1}, f64):erfinv():tolist())
    local g = accel.tensor({0.3}, f64):requires_grad_(true)
    g:erfinv():sum():backward()
    local x = accel.tensor({0.3}, f64):erfinv():item()
    close(g.grad, accel.tensor({math.sqrt(math.pi) / 2 * math.exp(x * x)}, f64), 1e-12)
  end)

  it("erfinv is the same with requires_grad (+-inf at +-1, gradient inf) and float64-exact near +-1", function()
    -- torch 2.15: erfinv of float64 [-1, 1, -0.0] with requires_grad -> [-inf, inf, -0.], grad [inf, inf, 0.8862];
    -- float32 [-1, 1, 0.5] -> [-inf, inf, 0.4769], grad [inf, inf, 1.1126]
    for _, dt in ipairs({f64, f32}) do
      local t = accel.tensor({-1, 1, 0.5}, dt):requires_grad_(true)
      local y = t:erfinv()
      assert.same({-math.huge, math.huge}, {y[1]:item(), y[2]:item()})
      y:sum():backward()
      assert.same({math.huge, math.huge}, {t.grad[1]:item(), t.grad[2]:item()})
    end
    assert.are.equal(-math.huge, 1 / accel.tensor({-0.0}, f64):erfinv():item())
    -- torch 2.15 (and mpmath) in float64: erfinv(0.9999999999) = 4.572824958544925,
    -- erfinv(-0.999999) = -3.458910737275499, erfinv(1 - 2^-53) = 5.8635847487551676,
    -- erfinv(1e-300) = 8.86226925452758e-301
    local ys = {0.9999999999, -0.999999, 1 - 2 ^ -53, 1e-300}
    local want = {4.572824958544925, -3.458910737275499, 5.8635847487551676, 8.86226925452758e-301}
    for _, rg in ipairs({false, true}) do
      local got = accel.tensor(ys, {dtype = accel.float64, requires_grad = rg}):erfinv():tolist()
      for i = 1, #ys do assert.is_true(math.abs(got[i] - want[i]) <= 4e-16 * math.abs(want[i]), tostring(got[i])) end
    end
  end)

  it("random_ draws integers in [from, to)", function()
    accel.manual_seed(4)
    local r = accel.zeros(1000, i64):random_(10, 20)
    assert.is_true(r:ge(10):all():item() and r:lt(20):all():item())
    assert.are.equal(10, r:unique():numel())
    local f = accel.empty(1000):random_(3)
    assert.same({0, 1, 2}, f:unique():tolist())
  end)
end)

describe("small compositions (torch 2.15's results)", function()
  it("diff, tensor_split, rot90, cross, take", function()
    assert.same({3, 5, 7}, accel.tensor({1, 4, 9, 16}):diff():tolist())
    local parts = accel.arange(7):tensor_split(3)
    assert.same({{0, 1, 2}, {3, 4}, {5, 6}}, {parts[1]:tolist(), parts[2]:tolist(), parts[3]:tolist()})
    parts = accel.arange(7):tensor_split({1, 5})
    assert.same({{0}, {1, 2, 3, 4}, {5, 6}}, {parts[1]:tolist(), parts[2]:tolist(), parts[3]:tolist()})
    -- indices out of order or below 0 slice as torch's, each piece from its own index: torch 2.15's
    -- arange(12).reshape(3, 4).tensor_split([1, 3, 2], 1) ends with [[2, 3], [6, 7], [10, 11]]
    local idx = {1, 3, 2}
    parts = accel.arange(12):reshape(3, 4):tensor_split(idx, 2)
    assert.same({{{0}, {4}, {8}}, {{1, 2}, {5, 6}, {9, 10}}, {3, 0}, {{2, 3}, {6, 7}, {10, 11}}},
      {parts[1]:tolist(), parts[2]:tolist(), {parts[3]:size(1), parts[3]:size(2)}, parts[4]:tolist()})
    assert.same({1, 3, 2}, idx) -- (the caller's list is left alone)
    -- torch 2.15: arange(5).tensor_split([-1]) is [0..3], [4]; with [3, -10]: [0, 1, 2], [], [0..4]
    parts = accel.arange(5):tensor_split({-1})
    assert.same({{0, 1, 2, 3}, {4}}, {parts[1]:tolist(), parts[2]:tolist()})
    parts = accel.arange(5):tensor_split({3, -10})
    assert.same({{0, 1, 2}, 0, {0, 1, 2, 3, 4}}, {parts[1]:tolist(), parts[2]:numel(), parts[3]:tolist()})
    assert.same({{2, 4}, {1, 3}}, accel.tensor({{1, 2}, {3, 4}}):rot90():tolist())
    -- torch 2.15: arange(6).reshape(2, 3).rot90(1, [0, 0]) (or [-1, 1]) raises "expected rotation dims to be
    -- different"; rot90 of a 1-D tensor "expected total dims >= 2"; dims [0] "expected total rotation dims == 2"
    local m = accel.arange(6):reshape(2, 3)
    expect_error(function() local _ = m:rot90(1, {1, 1}) end, "rot90: expected rotation dims to be different, got 1 and 1")
    expect_error(function() local _ = m:rot90(1, {-1, 2}) end, "rot90: expected rotation dims to be different")
    expect_error(function() local _ = accel.arange(3):rot90() end, "rot90: expected a tensor of at least 2 dims, got 1")
    expect_error(function() local _ = m:rot90(1, {1}) end, "rot90: dims must be a list of 2 dims")
    assert.same({0, 0, 1}, accel.tensor({1, 0, 0}, f64):cross(accel.tensor({0, 1, 0}, f64), 1):tolist())
    assert.same({1, 4}, accel.tensor({{1, 2}, {3, 4}}):take(accel.tensor({0, 3})):tolist())
  end)

  it("take_along_dim broadcasts t and indices in every dim but dim; without dim it is 1-D", function()
    local a = accel.tensor({{10, 20, 30}, {40, 50, 60}})
    -- torch 2.15: take_along_dim(a, tensor([[2, 0]]), 1) is [[30, 10], [60, 40]]
    assert.same({{30, 10}, {60, 40}}, a:take_along_dim(accel.tensor({{2, 0}}), 2):tolist())
    -- torch 2.15: take_along_dim(tensor([[1.], [2.]]), tensor([[0, 0, 0]]), 0) is [[1., 1., 1.]]
    local x = accel.tensor({{1}, {2}}, {dtype = accel.float64, requires_grad = true})
    local y = x:take_along_dim(accel.tensor({{0, 0, 0}}), 1)
    assert.same({{1, 1, 1}}, y:tolist())
    y:sum():backward()
    assert.same({{3}, {0}}, x.grad:tolist()) -- torch 2.15: [[3.], [0.]]
    -- torch 2.15: take_along_dim(zeros(0, 3), tensor([[2, 0]]), 1) has shape [0, 2] (1 broadcasts to 0)
    assert.same({0, 2}, support.shape_of(accel.zeros(0, 3):take_along_dim(accel.tensor({{2, 0}}), 2)))
    -- torch 2.15: take_along_dim(a, tensor([[0, 5]])) is tensor([10, 60]) (1-D)
    assert.same({10, 60}, a:take_along_dim(accel.tensor({{0, 5}})):tolist())
    expect_error(function() local _ = a:take_along_dim(accel.tensor({0, 1}), 2) end,
      "take_along_dim: input and indices should have the same number of dimensions, but got 2 dimensions for input, "
      .. "and 1 dimensions for indices")
    expect_error(function() local _ = a:take_along_dim(accel.tensor({{0}, {1}, {1}}), 2) end,
      "take_along_dim: input of shape [2, 3] and indices of shape [3, 1] do not broadcast (size 2 against 3 in dim 1)")
  end)

  it("scatter, index_fill and index_copy replace the addressed elements", function()
    assert.same({{0, 1, 0, 0}, {0, 0, 0, 1}}, accel.zeros(2, 4):scatter(2, accel.tensor({{1}, {3}}), 1):tolist())
    local z = accel.zeros(2, 3)
    z:scatter_(2, accel.tensor({{2}, {0}}), accel.tensor({{5}, {6}}, f32))
    assert.same({{0, 0, 5}, {6, 0, 0}}, z:tolist())
    assert.same({{7, 7}, {0, 0}, {7, 7}}, accel.zeros(3, 2):index_fill(1, accel.tensor({0, 2}), 7):tolist())
    assert.same({{1, 2}, {0, 0}, {3, 4}},
      accel.zeros(3, 2):index_copy(1, accel.tensor({0, 2}), accel.tensor({{1, 2}, {3, 4}}, f32)):tolist())
    -- PyTorch 2.15: a number value takes the tensor's dtype (2.5 into int64 is 2), out of place as in place
    local i64 = {dtype = accel.int64}
    for _, r in ipairs({accel.zeros(2, i64):scatter(1, accel.tensor({0}), 2.5),
                        accel.zeros(2, i64):index_fill(1, accel.tensor({0}), 2.5)}) do
      assert.are.equal(accel.int64, r.dtype)
      assert.same({2, 0}, r:tolist())
    end
    -- PyTorch 2.15 counts a 0-dim index (and src) as 1-dim against a 1-dim input:
    -- zeros(4).scatter_(0, tensor(2), value=1) is [0, 0, 1, 0]; arange(4.).gather(0, tensor(2)) is tensor(2.)
    assert.same({0, 0, 1, 0}, accel.zeros(4):scatter_(1, accel.tensor(2), 1):tolist())
    assert.same({0, 0, 3, 0}, accel.zeros(4):scatter(1, accel.tensor(2), accel.tensor(3, f32)):tolist())
    assert.same({0, 3, 0, 0}, accel.zeros(4):scatter_add(1, accel.tensor({1}), accel.tensor(3, f32)):tolist())
    local src = accel.tensor(3, {dtype = accel.float32, requires_grad = true})
    accel.zeros(4):scatter_add(1, accel.tensor(2), src):sum():backward()
    assert.are.equal(1, src.grad:item())
    local g = accel.arange(4.0):gather(1, accel.tensor(2))
    assert.are.equal(0, g:dim())
    assert.are.equal(2, g:item())
    expect_error(function() local _ = accel.zeros(2, 3):scatter_(1, accel.tensor(1), 1) end,
      "scatter: index (shape []) must have as many dims as the input (shape [2, 3])")
  end)

  -- PyTorch 2.15: take with a negative index counts from the end; flip of a 0-d tensor is itself, a repeated
  -- dim is "dim 0 appears multiple times in the list of dims"; logsumexp over an empty dim is -inf;
  -- median() of an empty tensor is nan; nancumsum([1, nan, 2]) = [1, 1, 3]
  it("take, flip, logsumexp, median and nancumsum at PyTorch's edge cases; the comparisons' long names", function()
    local m = accel.arange(10):view(2, 5)
    assert.same({0, 5, 9}, m:take(accel.tensor({0, 5, -1})):tolist())
    assert.are.equal(3.5, accel.tensor(3.5):flip(1):item())
    expect_error(function() local _ = m:flip({1, 1}) end, "flip: dim 1 appears multiple times in the list of dims")
    assert.are.equal(-math.huge, accel.zeros(0):logsumexp(1):item())
    assert.same({-math.huge, -math.huge}, accel.zeros(2, 0):logsumexp(2):tolist())
    local med = accel.zeros(0):median():item()
    assert.is_true(med ~= med)
    assert.same({1, 1, 3}, accel.tensor({1, 0 / 0, 2}, f32):nancumsum(1):tolist())
    local x = accel.tensor({1, 2, 3}, f32)
    assert.same({false, true, true}, x:greater(1):tolist())
    assert.same({false, false, true}, accel.greater_equal(x, 3):tolist())
    assert.same({true, false, false}, x:less(2):tolist())
    assert.same({true, true, false}, x:less_equal(2):tolist())
    assert.same({true, false, true}, x:not_equal(2):tolist())
    local inf = accel.tensor({math.huge, -math.huge, 1}, f32)
    assert.same({true, false, false}, inf:isposinf():tolist())
    assert.same({false, true, false}, inf:isneginf():tolist())
  end)

  -- PyTorch 2.15: x = tensor([1., 2., 3.]); x.ge_(2) -> tensor([0., 1., 1.]); tensor([1, 2, 3]).lt_(tensor([2, 2, 2]))
  -- -> tensor([1, 0, 0]); tensor([1., 2., 3.]).ge_(ones(2, 3)) -> RuntimeError "output with shape [3] doesn't match the
  -- broadcast shape [2, 3]"; y = (x * 2).ne_(4); (y * x).sum().backward() -> x.grad tensor([1., 0., 1.])
  it("compares in place, in the tensor's dtype, with a zero gradient", function()
    local x = accel.tensor({1, 2, 3}, f32)
    assert.are.equal(x, x:ge_(2))
    assert.same({0, 1, 1}, x:tolist())
    assert.are.equal(accel.float32, x.dtype)
    local n = accel.tensor({1, 2, 3})
    n:lt_(accel.tensor({2, 2, 2}))
    assert.same({1, 0, 0}, n:tolist())
    assert.are.equal(accel.int64, n.dtype)
    assert.same({1, 1, 0}, accel.tensor({1, 2, 3}, f32):less_equal_(2):tolist())
    assert.same({0, 1, 0}, accel.tensor({1, 2, 3}, f32):eq_(2):tolist())
    assert.same({0, 0, 1}, accel.tensor({1, 2, 3}, f32):greater_(2):tolist())
    local leaf = accel.tensor({1, 2, 3}, {dtype = accel.float32, requires_grad = true})
    local y = (leaf * 2):ne_(4)
    assert.same({1, 0, 1}, y:tolist())
    ;(y * leaf):sum():backward()
    assert.same({1, 0, 1}, leaf.grad:tolist())
    expect_error(function() accel.tensor({1, 2, 3}, f32):ge_(accel.ones(2, 3)) end,
      "ge_: output with shape [3] doesn't match the broadcast shape [2, 3]")
    expect_error(function() leaf:eq_(2) end, "eq_: a leaf tensor that requires grad (shape [3]) cannot be modified in place")
    expect_error(function() x:gt_(1, 2) end, "gt_: takes 1 argument, got more")
  end)

  -- PyTorch 2.15: tensor([True, False]).square() -> tensor([1, 0]) (int64); tensor([True, False, False]).diff()
  -- -> tensor([True, False])
  it("square of bools is int64 and diff of bools their xor, as PyTorch", function()
    local sq = accel.tensor({true, false}):square()
    assert.are.equal(accel.int64, sq.dtype)
    assert.same({1, 0}, sq:tolist())
    assert.same({true, false}, accel.tensor({true, false, false}):diff():tolist())
    assert.are.equal(accel.int32, accel.tensor({2, 3}, {dtype = accel.int32}):square().dtype)
  end)

  it("lerp takes floating-point tensors of one dtype, as PyTorch", function()
    -- torch 2.15: '"lerp_kernel_scalar" not implemented for 'Byte'', 'expected dtype float for `end` but got dtype
    -- c10::BFloat16'
    local u8 = {dtype = accel.uint8}
    expect_error(function() local _ = accel.tensor({1, 2}, u8):lerp(accel.tensor({0, 0}, u8), 0.5) end,
      "lerp: not implemented for uint8 (floating-point tensors only)")
    expect_error(function() local _ = accel.ones(2):lerp(accel.ones(2):bfloat16(), 0.5) end,
      "lerp: expected dtype float32 for `end` but got dtype bfloat16")
    expect_error(function() local _ = accel.ones(2):lerp(accel.ones(2), accel.ones(2, f64)) end,
      "lerp: expected dtype float32 for `weight` but got dtype float64")
  end)

  it("frac, fmax, xlogy, sinc, logit, aminmax", function()
    assert.same({0.5, -0.5}, accel.tensor({1.5, -1.5}, f32):frac():tolist())
    assert.same({1, 2}, accel.tensor({1, nan}, f64):fmax(accel.tensor({nan, 2}, f64)):tolist())
    close(accel.tensor({0, 2}, f64):xlogy(accel.tensor({0, 3}, f64)), accel.tensor({0, 2 * math.log(3)}, f64))
    close(accel.tensor({0, 0.5}, f64):sinc(), accel.tensor({1, math.sin(math.pi / 2) / (math.pi / 2)}, f64))
    close(accel.tensor({0.25}, f64):logit(), accel.tensor({math.log(1 / 3)}, f64))
    local lo, hi = accel.tensor({{1, 2}, {3, 4}}):aminmax()
    assert.same({1, 4}, {lo:item(), hi:item()})
  end)

  -- torch 2.15, float64 x = [0, 1, 0.5, -0.5, 1.5, nan, 0.05, 0.1, 0.9, 0.95, 0, 1],
  -- torch.logit(x, eps).backward([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, -2]); x.grad:
  -- no eps: [inf, inf, 4, nan, nan, nan, 21.05263157894737, 11.111111111111109, 11.111111111111112,
  --   21.05263157894735, nan, -inf]
  -- eps = 0.1: [0, 0, 4, 0, 0, nan, 0, 11.111111111111109, 11.111111111111112, 0, 0, 0]
  -- eps = 0: [inf, inf, 4, 0, 0, nan, 21.05263157894737, ..., 21.05263157894735, nan, -inf]
  -- eps = 0.6 (lo > hi): forward [0.4054651081081642, -0.4054651081081643, 0.4054651081081642, ...], grad all 0 but nan
  -- torch 2.15 (float64): hypot([inf, -inf, nan, 3, inf], [nan, nan, inf, 4, 2]) = [inf, inf, inf, 5, inf];
  -- hypot(t, u).sum() gradients at t = [inf, 3, nan, inf], u = [nan, 4, 1, 2]: t [nan, 0.6, nan, nan],
  -- u [nan, 0.8, nan, 0]
  it("hypot is +inf where either side is infinite, even with a NaN (C99's, torch's)", function()
    local inf = math.huge
    local r = accel.tensor({inf, -inf, nan, 3, inf}, f64):hypot(accel.tensor({nan, nan, inf, 4, 2}, f64))
    assert.same({inf, inf, inf, 5, inf}, r:tolist())
    local t = accel.tensor({inf, 3, nan, inf}, {dtype = accel.float64, requires_grad = true})
    local u = accel.tensor({nan, 4, 1, 2}, {dtype = accel.float64, requires_grad = true})
    t:hypot(u):sum():backward()
    values({nan, 0.6, nan, nan}, t.grad, 1e-15, "hypot grad t")
    values({nan, 0.8, nan, 0}, u.grad, 1e-15, "hypot grad u")
  end)

  it("logit's gradient is g * inf at 0 and 1, 0 outside [eps, 1 - eps], as torch's", function()
    local xs = {0, 1, 0.5, -0.5, 1.5, nan, 0.05, 0.1, 0.9, 0.95, 0, 1}
    local gs = accel.tensor({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, -2}, f64)
    local inf, a, b = math.huge, 21.05263157894737, 21.05263157894735
    local c, d = 11.111111111111109, 11.111111111111112
    local want = {
      {false, {inf, inf, 4, nan, nan, nan, a, c, d, b, nan, -inf}},
      {0.1, {0, 0, 4, 0, 0, nan, 0, c, d, 0, 0, 0}},
      {0, {inf, inf, 4, 0, 0, nan, a, c, d, b, nan, -inf}},
      {0.6, {0, 0, 0, 0, 0, nan, 0, 0, 0, 0, 0, 0}},
    }
    for _, w in ipairs(want) do
      local x = accel.tensor(xs, {dtype = accel.float64, requires_grad = true})
      local y = w[1] and x:logit(w[1]) or x:logit()
      y:backward(gs)
      values(w[2], x.grad, 1e-15, "logit grad, eps " .. tostring(w[1]))
    end
    local lo, hi = 0.4054651081081642, -0.4054651081081643
    values({lo, hi, lo, lo, hi, nan, lo, lo, hi, hi, lo, hi}, accel.tensor(xs, f64):logit(0.6), 1e-15, "logit eps 0.6")
  end)

  it("xlogy's gradient for x is log(y) where x is 0 too, as torch's", function()
    local x = accel.tensor({0, 1, 0, 0, 0, 2, 0}, {dtype = accel.float64, requires_grad = true})
    local y = accel.tensor({2, 2, 0.5, 0, nan, 0, -1}, {dtype = accel.float64, requires_grad = true})
    local r = x:xlogy(y)
    r:sum():backward()
    -- torch 2.15's xlogy(x, y) and its gradients
    local log2 = 0.6931471805599453
    values({0, log2, 0, 0, nan, -math.huge, 0}, r, 1e-15, "xlogy")
    values({log2, log2, -log2, 0, nan, -math.huge, 0}, x.grad, 1e-15, "xlogy grad x")
    values({0, 0.5, 0, nan, nan, math.huge, 0}, y.grad, 1e-15, "xlogy grad y")
    -- a number y; torch 2.15: xlogy([0, 1], 0.0) = [0, -inf], gradient [0, -inf]
    local z = accel.tensor({0, 1}, {dtype = accel.float64, requires_grad = true})
    r = z:xlogy(0.0)
    r:sum():backward()
    values({0, -math.huge}, r, 0, "xlogy number")
    values({0, -math.huge}, z.grad, 0, "xlogy number grad")
    -- a NaN number y; torch 2.15: xlogy([0, 0, 2, 1], nan) = nan, gradient [0, 0, nan, nan]
    local n = accel.tensor({0, 0, 2, 1}, {dtype = accel.float64, requires_grad = true})
    r = n:xlogy(nan)
    r:sum():backward()
    values({nan, nan, nan, nan}, r, 0, "xlogy nan number")
    values({0, 0, nan, nan}, n.grad, 0, "xlogy nan number grad")
    -- a zero incoming gradient stays 0 where y is 0 (torch 2.15: [0, 0.6931])
    local w = accel.tensor({1, 1}, {dtype = accel.float64, requires_grad = true})
    local _ = (w:xlogy(accel.tensor({0, 2}, f64)) * accel.tensor({0, 1}, f64)):sum():backward()
    values({0, log2}, w.grad, 1e-15, "xlogy zero gradient")
  end)
end)

describe("diagonals and accel.eye", function()
  it("diagonal, diag and trace (torch 2.15's results)", function()
    local x = accel.arange(12):view(3, 4)
    assert.same({0, 5, 10}, x:diagonal():tolist())
    assert.same({1, 6, 11}, x:diagonal(1):tolist())
    assert.same({4, 9}, x:diagonal(-1):tolist())
    assert.same({0}, support.shape_of(x:diagonal(5)))
    assert.are.equal(15, x:trace():item())
    local y = accel.arange(24):view(2, 3, 4)
    assert.same({{0, 5, 10}, {12, 17, 22}}, y:diagonal(0, 2, 3):tolist())
    assert.same({{0, 13}, {4, 17}, {8, 21}}, y:diagonal({dim1 = 1, dim2 = 3}):tolist())
    assert.same({{1, 0, 0}, {0, 2, 0}, {0, 0, 3}}, accel.tensor({1, 2, 3}):diag():tolist())
    assert.same({{0, 1, 0}, {0, 0, 2}, {0, 0, 0}}, accel.tensor({1, 2}):diag(1):tolist())
    assert.same({{0, 0, 0}, {1, 0, 0}, {0, 2, 0}}, accel.tensor({1, 2}):diag(-1):tolist())
    assert.same({1, 6, 11}, x:diag(1):tolist())
    expect_error(function() local _ = x:diagonal(0, 2, 2) end, "diagonal: dimensions cannot be identical")
  end)

  it("diagonal is a view: writing into it writes into the tensor (torch 2.15's results); diag is a copy", function()
    local t = accel.zeros(3, 4)
    t:diagonal():fill_(5)
    t:diagonal(1):add_(1)
    t:diagonal(-1):fill_(-2)
    assert.same({{5, 1, 0, 0}, {-2, 5, 1, 0}, {0, -2, 5, 1}}, t:tolist())
    local y = accel.arange(24):reshape(2, 3, 4):float()
    y:diagonal(-1, 3, 2):mul_(0)
    assert.same({{1, 6, 11}, {13, 18, 23}}, accel.arange(24):reshape(2, 3, 4):float():diagonal(-1, 3, 2):tolist())
    assert.same({{0, 0, 0}, {0, 0, 0}}, y:diagonal(-1, 3, 2):tolist())
    local m = accel.ones(2, 2)
    m:diag():fill_(7)
    assert.same({{1, 1}, {1, 1}}, m:tolist())
  end)

  it("diagonal passes gradients to the diagonal only; eye is the identity", function()
    local m = accel.zeros(3, 3, f64):requires_grad_(true)
    m:diagonal():sum():backward()
    assert.same({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, m.grad:tolist())
    assert.same(m.grad:tolist(), accel.eye(3, f64):tolist())
    assert.same({{1, 0, 0}, {0, 1, 0}}, accel.eye(2, 3, i64):tolist())
    assert.are.equal(accel.float32, accel.eye(2).dtype)
    expect_error(function() local _ = accel.eye(-1) end, "eye: n and m must be non-negative integers, got -1")
  end)
end)

describe("accel.einsum", function()
  accel.manual_seed(2)
  local q, k = accel.randn(2, 2, 3, 4, f64), accel.randn(2, 2, 5, 4, f64)

  it("matches loops over the subscripts (attention scores, a chain of three, implicit output)", function()
    local ql, kl = q:tolist(), k:tolist()
    local want = {}
    for b = 1, 2 do
      want[b] = {}
      for h = 1, 2 do
        want[b][h] = {}
        for i = 1, 3 do
          want[b][h][i] = {}
          for j = 1, 5 do
            local s = 0
            for d = 1, 4 do s = s + ql[b][h][i][d] * kl[b][h][j][d] end
            want[b][h][i][j] = s
          end
        end
      end
    end
    close(accel.einsum("bhqd,bhkd->bhqk", q, k), accel.tensor(want, f64))
    close(accel.einsum("...qd,...kd->...qk", q, k), accel.tensor(want, f64))
    local a, b, c = accel.randn(3, 4, f64), accel.randn(4, 5, f64), accel.randn(5, 2, f64)
    close(accel.einsum("ij,jk,kl->il", a, b, c), a:matmul(b):matmul(c))
    close(accel.einsum("ij,jk", {a, b}), a:matmul(b)) -- implicit output: the letters used once, sorted
    close(accel.einsum("ij,jk->", a, b), a:matmul(b):sum())
    close(accel.einsum("ij->ji", a), a:t())
    close(accel.einsum("i,j->ij", a[1], b[1]), a[1]:outer(b[1]))
  end)

  it("broadcasts a size-1 dim against a 0-size one (torch 2.15: shape [0, 4, 4], as matmul)", function()
    local a, b = accel.randn(0, 4, 3), accel.randn(1, 3, 4)
    assert.same({0, 4, 4}, support.shape_of(accel.einsum("...ij,...jk->...ik", a, b)))
    assert.same({0, 4, 4}, support.shape_of(accel.einsum("bij,bjk->bik", a, b)))
    -- torch 2.15: einsum("ij,jk->ik", ones(2, 0), ones(1, 3)) -> zeros(2, 3)
    assert.same({{0, 0, 0}, {0, 0, 0}}, accel.einsum("ij,jk->ik", accel.ones(2, 0), accel.ones(1, 3)):tolist())
  end)

  it("passes gradients to every operand", function()
    local a, b = accel.randn(3, 4, f64):requires_grad_(true), accel.randn(4, 5, f64):requires_grad_(true)
    accel.einsum("ij,jk->ik", a, b):sum():backward()
    close(a.grad, accel.ones(3, 5, f64):matmul(b:detach():t()))
    close(b.grad, a:detach():t():matmul(accel.ones(3, 5, f64)))
  end)

  it("takes a letter repeated in one operand as its diagonal, as torch (torch 2.15's values)", function()
    local a = accel.arange(9, f64):reshape({3, 3})
    local b = accel.arange(18, f64):reshape({2, 3, 3})
    assert.are.equal(12, accel.einsum("ii", a):item())
    assert.same({0, 4, 8}, accel.einsum("ii->i", a):tolist())
    assert.same({{0, 4, 8}, {9, 13, 17}}, accel.einsum("bii->bi", b):tolist())
    assert.same({{0, 4, 8}, {9, 13, 17}}, accel.einsum("...ii->...i", b):tolist())
    assert.same({12, 39}, accel.einsum("bii", b):tolist())
    assert.same({12, 12}, accel.einsum("ij,jj->i", accel.ones(2, 3, f64), a):tolist())
    assert.same({7, 11, 15}, accel.einsum("iji->j", accel.arange(12, f64):reshape({2, 3, 2})):tolist())
    local g = a:clone():requires_grad_(true)
    accel.einsum("ii", g):backward()
    assert.same({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, g.grad:tolist())
  end)

  it("names what it refuses", function()
    local a = accel.zeros(3, 3)
    expect_error(function() local _ = accel.einsum("ii", accel.ones(2, 3)) end,
      "einsum: subscript i is repeated for operand 1 but the sizes don't match, 3 != 2")
    expect_error(function() local _ = accel.einsum("ij,jk", a) end, "einsum: the equation has 2 operands but 1 tensors")
    expect_error(function() local _ = accel.einsum("ijk", a) end, "einsum: operand 1 has 2 dims but its subscripts 'ijk' name 3")
    expect_error(function() local _ = accel.einsum("ij->iz", a) end, "einsum: output subscript 'z' appears in no operand")
    expect_error(function() local _ = accel.einsum("ij,jk", a, accel.zeros(4, 2)) end, "einsum: subscript 'j' has size 3")
  end)
end)

describe("methods PyTorch has and accel-lua does not", function()
  it("name themselves instead of being nil", function()
    local x = accel.zeros(2)
    expect_error(function() local _ = x:index_put_({x:long()}, x) end, "Tensor.index_put_ is not provided by accel-lua")
    expect_error(function() local _ = x:scatter_reduce(1, x:long(), x, "sum") end, "Tensor.scatter_reduce is not provided")
    assert.is_nil(x.no_such_member)
  end)

  it("a mask or index tensor as a key for assignment points at masked_fill_ / where", function()
    local x = accel.zeros(3)
    expect_error(function() x[x:eq(0)] = 1 end, "t[tensor] = ...", "masked_fill_")
  end)
end)

-- luacheck: ignore f32
