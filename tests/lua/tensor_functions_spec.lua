-- tensor_functions_spec.lua: the tensor products (accel.tensor_products),
-- the aliases (accel.tensor_aliases), torch's non-method functions
-- (accel.tensor_functions) and accel.linalg against PyTorch 2.15: outputs and
-- input gradients from tests/fixtures/tensor_functions.safetensors
-- (scripts/fixtures/make_tensor_functions_fixtures.py), bad inputs with
-- PyTorch's messages quoted beside them, and the names that are refused.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local close, expect_error = support.assert_close, support.expect_error
local linalg = accel.linalg
local unpack = table.unpack or unpack -- (LuaJIT)

local ref = accel.load("tests/fixtures/tensor_functions.safetensors")
local INF = math.huge

-- Must match CASES in the fixture script (dims 1-based here).
local CASES = {
  dot = function(a, b) return accel.dot(a, b) end,
  vdot = function(a, b) return a:vdot(b) end,
  inner_1d = function(a, b) return accel.inner(a, b) end,
  inner_nd = function(a, b) return a:inner(b) end,
  mv = function(m, v) return m:mv(v) end,
  addmv = function(t, m, v) return accel.addmv(t, m, v, {beta = 0.5, alpha = 2.0}) end,
  kron_2d = function(a, b) return accel.kron(a, b) end,
  kron_mixed = function(a, b) return a:kron(b) end,
  tensordot_count = function(a, b) return accel.tensordot(a, b, 2) end,
  tensordot_lists = function(a, b) return accel.tensordot(a, b, {dims = {{2, 3}, {2, 1}}}) end,
  tensordot_zero = function(a, b) return accel.tensordot(a, b, 0) end,
  unflatten = function(a) return a:unflatten(2, {2, -1}) end,
  var_mean = function(a) return accel.var_mean(a, 2, {keepdim = true}) end,
  std_mean = function(a) return accel.std_mean(a, {dim = 1, correction = 0}) end,
  var_mean_all = function(a) return accel.var_mean(a) end,
  nansum = function(a) return a:nansum(2) end,
  nanmean = function(a) return a:nanmean(2) end,
  nanmean_all = function(a) return accel.nanmean(a) end,
  float_power = function(a) return a:float_power(3) end,
  heaviside = function(a, v) return a:heaviside(v) end,
  signbit = function(a) return a:signbit() end,
  msort = function(a) return a:msort() end,
  cdist = function(a, b) return accel.cdist(a, b) end,
  cdist_p1 = function(a, b) return accel.cdist(a, b, 1.0) end,
  cdist_inf = function(a, b) return accel.cdist(a, b, {p = INF}) end,
  block_diag = function(a, b, c) return accel.block_diag(a, b, c) end,
  cartesian_prod = function(a, b, c) return accel.cartesian_prod(a, b, c) end,
  meshgrid_ij = function(a, b) return accel.meshgrid(a, b, {indexing = "ij"}) end,
  meshgrid_xy = function(a, b, c) return accel.meshgrid({a, b, c}, {indexing = "xy"}) end,
  hstack = function(a, b) return accel.hstack({a, b}) end,
  hstack_1d = function(a, b) return accel.hstack({a, b}) end,
  vstack = function(a, b) return accel.vstack({a, b}) end,
  dstack = function(a, b) return accel.dstack({a, b}) end,
  column_stack = function(a, b) return accel.column_stack({a, b}) end,
  tril_indices = function() return accel.tril_indices(4, 3, 1) end,
  triu_indices = function() return accel.triu_indices(3, 5, -1) end,
  logspace = function() return accel.logspace(-2, 3, 6, 2.0, {dtype = accel.float64}) end,
  bucketize = function(v, b) return accel.bucketize(v, b) end,
  bucketize_right = function(v, b) return accel.bucketize(v, b, {right = true}) end,
  isin = function(e, t) return accel.isin(e, t) end,
  isin_invert = function(e, t) return accel.isin(e, t, {invert = true}) end,
  vector_norm = function(a) return linalg.vector_norm(a) end,
  vector_norm_3 = function(a) return linalg.vector_norm(a, 3, 2) end,
  vector_norm_inf = function(a) return linalg.vector_norm(a, INF, {1, 2}, true) end,
  vector_norm_0 = function(a) return linalg.vector_norm(a, 0) end,
  matrix_norm = function(a) return linalg.matrix_norm(a) end,
  matrix_norm_1 = function(a) return linalg.matrix_norm(a, 1) end,
  matrix_norm_ninf = function(a) return linalg.matrix_norm(a, -INF, {keepdim = true}) end,
  matrix_norm_dims = function(a) return linalg.matrix_norm(a, "inf", {1, 3}) end,
  norm_flat = function(a) return linalg.norm(a) end,
  norm_matrix_ord = function(a) return linalg.norm(a, -1) end,
  norm_vector_dim = function(a) return linalg.norm(a, 1, {dim = -1}) end,
  multi_dot = function(a, b, c) return linalg.multi_dot({a, b, c}) end,
  vecdot = function(a, b) return linalg.vecdot(a, b, {dim = 1}) end,
}

local function dims(t)
  local d = {}
  for i = 1, t:dim() do d[i] = t:size(i) end
  return d
end

dofile("tests/lua/torch_cases.lua").describe(describe, it, "tensor functions match PyTorch", ref, CASES, 1e-12)

describe("tensor functions: details", function()
  it("bucketize puts NaN past the last boundary, as torch's", function()
    local b = accel.tensor({1, 3, 3, 5, 7}, {dtype = accel.float64})
    local v = accel.tensor({4, 8, 0 / 0}, {dtype = accel.float64})
    assert.are.same({3, 5, 5}, accel.bucketize(v, b):tolist()) -- torch 2.15: [3, 5, 5]
    assert.are.same({3, 5, 5}, accel.bucketize(v, b, {right = true}):tolist()) -- torch 2.15: [3, 5, 5]
    assert.are.same(5, accel.bucketize(0 / 0, b):item()) -- torch 2.15: 5
    -- torch 2.15: tensor([0, 3, 2], dtype=torch.int32)
    local r = accel.bucketize(accel.tensor({0.5, 0 / 0, 2.5}, {dtype = accel.float32}), accel.tensor({1, 2, 3}, {dtype = accel.float32}),
      {right = true, out_int32 = true})
    assert.are.equal(accel.int32, r.dtype)
    assert.are.same({0, 3, 2}, r:tolist())
  end)

  it("meshgrid returns expanded views, and ij by default", function()
    local x, y = accel.tensor({1, 2, 3}), accel.tensor({4, 5})
    local g = accel.meshgrid(x, y)
    assert.are.same({{1, 1}, {2, 2}, {3, 3}}, g[1]:tolist())
    assert.are.same({{4, 5}, {4, 5}, {4, 5}}, g[2]:tolist())
    assert.are.same({1, 0}, g[1]:stride()) -- a view of x
  end)

  it("atleast_1d / 2d / 3d: one tensor gives a tensor, several a list", function()
    local s = accel.tensor(5.0)
    assert.are.same({1}, dims(accel.atleast_1d(s)))
    assert.are.same({1, 3}, dims(accel.atleast_2d(accel.ones(3))))
    assert.are.same({1, 3, 1}, dims(accel.atleast_3d(accel.ones(3))))
    assert.are.same({2, 3, 1}, dims(accel.atleast_3d(accel.ones(2, 3))))
    local l = accel.atleast_2d(s, accel.ones(2))
    assert.are.equal(2, #l)
    assert.are.same({1, 1}, dims(l[1]))
  end)

  it("broadcast_tensors and broadcast_shapes", function()
    local a, b = unpack(accel.broadcast_tensors(accel.ones(3, 1), accel.zeros(4)))
    assert.are.same({3, 4}, dims(a))
    assert.are.same({3, 4}, dims(b))
    assert.are.same({2, 3, 4}, accel.broadcast_shapes({3, 1}, {2, 1, 4}))
    -- torch: "shape mismatch: objects cannot be broadcast to a single shape"
    expect_error(function() local _ = accel.broadcast_tensors(accel.ones(3), accel.ones(4)) end,
      "broadcast_tensors: shapes cannot be broadcast together")
  end)

  it("type_as, ravel, mT / mH / H, sgn, exp2, absolute, conj, is_complex, is_signed, ger, concatenate, diagflat",
    function()
    local t = accel.tensor({1, 2})
    local f = t:type_as(accel.tensor({1.5}, {dtype = accel.float64}))
    assert.are.equal(accel.float64, f.dtype)
    assert.are.same({1, 2, 3, 4}, accel.tensor({{1, 2}, {3, 4}}):ravel():tolist())
    local m = accel.arange(6):reshape({1, 2, 3})
    assert.are.same({1, 3, 2}, dims(m.mT))
    assert.are.same({1, 3, 2}, dims(m.mH))
    assert.are.same({{1, 3}, {2, 4}}, accel.tensor({{1, 2}, {3, 4}}).H:tolist())
    assert.are.same({-1, 0, 1}, accel.tensor({-2.5, 0, 3}):sgn():tolist())
    assert.are.same({2, 4, 8}, accel.tensor({1, 2, 3}):exp2():tolist()) -- torch: float32 tensor([2., 4., 8.])
    assert.are.equal(accel.float32, accel.tensor({1, 2, 3}):exp2().dtype)
    assert.are.same({2, 0}, accel.tensor({-2, 0}):absolute():tolist())
    assert.are.equal(t, t:conj())
    assert.is_false(t:is_complex())
    assert.is_true(t:is_signed())
    assert.is_false(accel.tensor({1}, {dtype = accel.uint8}):is_signed())
    assert.are.same({{3, 4}, {6, 8}}, accel.tensor({1, 2}):ger(accel.tensor({3, 4})):tolist())
    assert.are.same({1, 2, 3}, accel.concatenate({accel.tensor({1}), accel.tensor({2, 3})}):tolist())
    assert.are.same({{1, 0}, {0, 2}}, accel.diagflat(accel.tensor({{1, 2}})):tolist())
    -- torch: "tensor.mT is only supported on matrices or batches of matrices. Got 1-D tensor."
    expect_error(function() local _ = t.mT end, "tensor.mT is only supported on matrices or batches of matrices")
    -- torch: "tensor.H is only supported on matrices (2-D tensors). Got 3-D tensor. For batches of matrices, consider using tensor.mH"
    expect_error(function() local _ = m.H end, "tensor.H is only supported on matrices (2-D tensors)", "tensor.mH")
  end)

  -- torch 2.15: isin(tensor([1.0, 2.5, nan]), tensor([2.5, 1])) = [True, True, False]; isin(3, tensor([1, 3])) =
  -- tensor(True); isin(tensor([1, 2]), 2) = [False, True]; an empty test tensor finds nothing
  -- PyTorch 2.15: logspace(0.5, 2.5, 5, dtype=int64) -> [1, 3, 10, 31, 100]; logspace(-3.7, 1, 5, base=0.5,
  -- dtype=int64) -> [8, 4, 2, 1, 0]; logspace(0.5, 2, 5, base=2, dtype=int64) -> [1, 1, 2, 2, 4];
  -- logspace(0.5, 2, 1, dtype=int64) -> [3] (one step: start is not truncated); logspace(-0.5, 2, 3, base=2,
  -- dtype=uint8) raises "value cannot be converted to type uint8_t without overflow"
  it("logspace with an integer dtype truncates start and end first, as torch", function()
    local i64 = {dtype = accel.int64}
    assert.same({1, 3, 10, 31, 100}, accel.logspace(0.5, 2.5, 5, 10, i64):tolist())
    assert.same({8, 4, 2, 1, 0}, accel.logspace(-3.7, 1, 5, 0.5, i64):tolist())
    assert.same({1, 1, 2, 2, 4}, accel.logspace(0.5, 2, 5, 2, i64):tolist())
    assert.same({3}, accel.logspace(0.5, 2, 1, 10, i64):tolist())
    assert.same({1, 2, 4, 8}, accel.logspace(0.9, 3.9, 4, 2, {dtype = accel.int32}):tolist())
    support.expect_error(function() local _ = accel.logspace(-0.5, 2, 3, 2, {dtype = accel.uint8}) end,
      "logspace: value cannot be converted to type uint8 without overflow (start -0.5)")
    -- float dtypes keep the fractional ends: 2^0.9 (closed form)
    assert.is_true(math.abs(accel.logspace(0.9, 3.9, 4, 2, {dtype = accel.float64}):tolist()[1] - 2 ^ 0.9) < 1e-15)
  end)

  it("cdist with p = inf gives every coordinate at the maximum the whole gradient, as torch", function()
    -- torch 2.15: cdist([[0., 0.]], [[1., -1.]], inf).sum().backward(): a.grad [[-1., 1.]], b.grad [[1., -1.]]
    local a = accel.tensor({{0, 0}}, {dtype = accel.float64, requires_grad = true})
    local b = accel.tensor({{1, -1}}, {dtype = accel.float64, requires_grad = true})
    accel.cdist(a, b, INF):sum():backward()
    assert.are.same({{-1, 1}}, a.grad:tolist())
    assert.are.same({{1, -1}}, b.grad:tolist())
    -- torch 2.15, batched and broadcast (float32): x (2, 2, 2), y (1, 3, 2); cdist(x, y, inf).sum().backward()
    -- gives x.grad [[[0, -2], [2, 1]], [[3, -1], [0, 3]]] and y.grad [[[1, 1], [-4, 0], [-2, -2]]]
    local x = accel.tensor({{{0, 0}, {1, 1}}, {{2, 0}, {0, 2}}}, {dtype = accel.float32, requires_grad = true})
    local y = accel.tensor({{{1, 1}, {-1, 1}, {0, 0}}}, {dtype = accel.float32, requires_grad = true})
    accel.cdist(x, y, INF):sum():backward()
    assert.are.same({{{0, -2}, {2, 1}}, {{3, -1}, {0, 3}}}, x.grad:tolist())
    assert.are.same({{{1, 1}, {-4, 0}, {-2, -2}}}, y.grad:tolist())
  end)

  it("isin: NaN is never found, a number on either side, an empty test set", function()
    local nan = 0 / 0
    assert.are.same({true, true, false}, accel.isin(accel.tensor({1.0, 2.5, nan}), accel.tensor({2.5, 1})):tolist())
    assert.is_true(accel.isin(3, accel.tensor({1, 3})):item())
    assert.are.same({false, true}, accel.isin(accel.tensor({1, 2}), 2):tolist())
    assert.are.same({false, false}, accel.isin(accel.tensor({1, 2}), accel.tensor({}, {dtype = accel.int64})):tolist())
  end)

  it("as_tensor keeps a tensor that already has the dtype, randint_like takes the shape", function()
    local t = accel.tensor({1.0, 2.0})
    assert.are.equal(t, accel.as_tensor(t))
    assert.are.equal(accel.float64, accel.as_tensor(t, {dtype = accel.float64}).dtype)
    assert.are.same({3, 4}, accel.as_tensor({3, 4}):tolist())
    accel.set_seed(1)
    local r = accel.randint_like(accel.zeros(50, {dtype = accel.int64}), 2, 5)
    assert.are.equal(accel.int64, r.dtype)
    assert.is_true(r:ge(2):all():item() and r:lt(5):all():item())
  end)

  it("finfo and iinfo hold torch's values", function()
    for _, name in ipairs({"float32", "float64", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"}) do
      local f, want = accel.finfo(accel[name]), ref["finfo." .. name]:tolist()
      local got = {f.bits, f.eps, f.max, f.min, f.tiny, f.smallest_normal, f.resolution}
      for i = 1, 7 do assert.are.equal(want[i], got[i], name .. " field " .. i) end
      assert.are.equal(name, f.dtype)
    end
    assert.are.equal(accel.finfo(accel.float32).eps, accel.finfo().eps)
    for _, name in ipairs({"int32", "uint8"}) do
      local f, want = accel.iinfo(accel[name]), ref["iinfo." .. name]:tolist()
      assert.are.same(want, {f.bits, f.min, f.max})
    end
    assert.are.equal(64, accel.iinfo(accel.int64).bits)
    assert.are.equal(accel.float32, accel.get_default_dtype())
    -- torch: "torch.finfo() requires a floating point input type."
    expect_error(function() local _ = accel.finfo(accel.int64) end, "finfo: int64 is not a floating point dtype")
    expect_error(function() local _ = accel.iinfo(accel.float32) end, "iinfo: float32 is not an integer dtype")
  end)

  it("vector and matrix products refuse what torch refuses", function()
    local v3, v4 = accel.ones(3), accel.ones(4)
    -- torch: "1D tensors expected, but got 2D and 1D tensors"
    expect_error(function() local _ = accel.dot(accel.ones(2, 2), accel.ones(2)) end, "dot: 1-D tensors expected, got 2-D and 1-D")
    -- torch: "inconsistent tensor size, expected tensor [3] and src [4] to have the same number of elements ..."
    expect_error(function() local _ = v3:dot(v4) end, "dot: inconsistent tensor sizes", "got 3 and 4")
    -- torch: "dot : expected both vectors to have same dtype, but found Float and Double"
    expect_error(function() local _ = v3:dot(v3:double()) end, "same dtype, got float32 and float64")
    -- torch: "size mismatch, got input (2), mat (2x3), vec (4)"
    expect_error(function() local _ = accel.ones(2, 3):mv(v4) end, "mv: size mismatch, matrix (2x3) and vector (4)")
    -- torch: "inner() the last dimension must match on both input tensors but got shapes [2, 3] and [4, 2]"
    expect_error(function() local _ = accel.ones(2, 3):inner(accel.ones(4, 2)) end, "inner: the last dims must match", "[2, 3] and [4, 2]")
    -- torch: "contracted dimensions need to match, but first has size 3 in dim -1 and second has size 4 in dim 0"
    expect_error(function() local _ = accel.tensordot(accel.ones(2, 3), accel.ones(4, 5), 1) end,
      "tensordot: contracted dims must match")
    expect_error(function() local _ = accel.tensordot(accel.ones(2, 3), accel.ones(3, 5), {{2}, {1, 2}}) end,
      "tensordot: both dim lists must have the same length")
    -- torch: "unflatten: Provided sizes [4, -1] don't multiply up to the size of dim 1 (6) in the input tensor"
    expect_error(function() local _ = accel.ones(2, 6):unflatten(2, {4, -1}) end, "unflatten: sizes", "size of dim 2 (6)")
    expect_error(function() local _ = accel.ones(2, 6):unflatten(2, {-1, -1}) end, "unflatten: only one size can be -1")
  end)

  it("linalg refuses what needs a decomposition, by name", function()
    expect_error(function() local _ = linalg.inv end, "accel.linalg.inv is not provided")
    expect_error(function() local _ = linalg.svd end, "accel.linalg.svd is not provided")
    expect_error(function() local _ = linalg.matrix_norm(accel.ones(2, 2), "nuc") end, "needs the singular values")
    -- torch: "linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got 3D."
    expect_error(function() local _ = linalg.norm(accel.ones(2, 3, 4), 1) end, "linalg.norm: with ord and without dim the input must be 1-D or 2-D, got 3-D")
    -- torch: "linalg.matrix_norm: The input tensor A must have at least 2 dimensions."
    expect_error(function() local _ = linalg.matrix_norm(accel.ones(3), 1) end, "linalg.matrix_norm: the input must have at least 2 dims")
  end)

  -- torch 2.15, e = zeros(1, 0, requires_grad=True): linalg.matrix_norm(e, 1) = 0 without a gradient (no
  -- column sums: their largest is 0), with keepdim [[0]]; of zeros(2, 0, 3): [0, 0]; inf and -inf take the
  -- amax / amin of one empty row sum: 0 with a gradient; -1 raises "amin(): Expected reduction dim 0 to have
  -- non-zero size."
  it("linalg.matrix_norm with ord 1 / inf over an empty dim is 0, as torch; -1 there is amin's error", function()
    local e = accel.zeros(1, 0, {requires_grad = true})
    for _, c in ipairs{{1, false}, {INF, true}, {-INF, true}} do
      local r = linalg.matrix_norm(e, c[1])
      assert.are.same({0, 0, c[2]}, {r:dim(), r:item(), r.requires_grad}, tostring(c[1]))
    end
    assert.are.same({{0}}, linalg.matrix_norm(e, 1, {keepdim = true}):tolist())
    assert.are.same({0, 0}, linalg.matrix_norm(accel.zeros(2, 0, 3), 1):tolist())
    expect_error(function() local _ = linalg.matrix_norm(e, -1) end, "amin: cannot reduce over a zero-size dimension")
  end)

  -- torch 2.15: y = [1, -1, 0, 2, -0.5], x = [1, -2, -1, 0, 3] (float64), w = [1, 2, 3, 4, 5]:
  -- atan2(y, x) = [0.7853981633974483, -2.677945044588987, 3.141592653589793, 1.5707963267948966,
  -- -0.16514867741462683], y.grad [0.5, -0.8, -3.0, 0.0, 1.6216216216216217], x.grad [-0.5, 0.4, -0.0, -2.0,
  -- 0.2702702702702703]; torch.tensor([1, 2]).atan2(torch.tensor([3, 4])) float32 [0.3218, 0.4636]
  it("atan2 (arctan2): values, both gradients, integers give float32", function()
    local f64 = {dtype = accel.float64}
    local y = accel.tensor({1, -1, 0, 2, -0.5}, f64):requires_grad_(true)
    local x = accel.tensor({1, -2, -1, 0, 3}, f64):requires_grad_(true)
    local r = accel.atan2(y, x)
    close(r, accel.tensor({0.7853981633974483, -2.677945044588987, 3.141592653589793, 1.5707963267948966,
      -0.16514867741462683}, f64), 1e-15)
    local _ = (r * accel.tensor({1, 2, 3, 4, 5}, f64)):sum():backward()
    close(y.grad, accel.tensor({0.5, -0.8, -3.0, 0.0, 1.6216216216216217}, f64), 1e-15)
    close(x.grad, accel.tensor({-0.5, 0.4, 0, -2.0, 0.2702702702702703}, f64), 1e-15)
    local i = accel.tensor({1, 2}):arctan2(accel.tensor({3, 4}))
    assert.are.equal(accel.float32, i.dtype)
    close(i, accel.tensor({math.atan(1 / 3), math.atan(2 / 4)}), 1e-7)
    local z = accel.tensor({1.0, 2.0}, f64)
    z:atan2_(accel.tensor({1.0, 0.0}, f64))
    close(z, accel.tensor({math.pi / 4, math.pi / 2}, f64), 1e-15)
  end)

  -- torch 2.15: y = [0, 1, 1e-200, 0, 3], x = [0, 0, 0, -0.0, 4] (float64), atan2(y, x).backward([1, 1, 1, 2, 5]):
  -- y.grad [0, 0, 0, -0, 0.8], x.grad [-0, -1, -0, -0, -0.6] (1 / (y^2 + x^2) is set to 0 where it is inf)
  it("atan2's gradients are 0 at the origin and where y^2 + x^2 underflows, not NaN", function()
    local f64 = {dtype = accel.float64}
    local y = accel.tensor({0, 1, 1e-200, 0, 3}, f64):requires_grad_(true)
    local x = accel.tensor({0, 0, 0, -0.0, 4}, f64):requires_grad_(true)
    accel.atan2(y, x):backward(accel.tensor({1, 1, 1, 2, 5}, f64))
    assert.are.same({0, 0, 0, 0, 0.8}, y.grad:tolist())
    assert.are.same({0, -1, 0, 0, -0.6}, x.grad:tolist())
    assert.are.equal(-INF, 1 / y.grad[4]:item())
    assert.are.equal(-INF, 1 / x.grad[1]:item())
  end)

  it("torch names accel-lua does not have are errors naming them", function()
    expect_error(function() local _ = accel.fft end, "accel.fft is not provided by accel-lua")
    expect_error(function() local _ = accel.set_default_dtype end, "accel.set_default_dtype is not provided")
    expect_error(function() local _ = accel.ones(2, 2):inverse() end, "Tensor.inverse is not provided")
    expect_error(function() local _ = accel.ones(2, 2).resize_ end, "Tensor.resize_ is not provided")
    assert.is_nil(accel.no_such_name_anywhere)
  end)
end)
