-- The fused scaled_dot_product_attention (kernels/cpu/attention.c through
-- accel._C.scaled_dot_product_attention, and F.scaled_dot_product_attention
-- routing to it): gradients against central finite differences in float64,
-- values against a float64 reference written out here with plain tensor ops
-- (q k^T, mask, exp, normalise, @ v), shapes that cross the kernel's query
-- blocks (64 rows) and key chunks (256 keys), strided q/k/v views of one
-- packed projection, the composite fallbacks and the errors.
local accel = require("accel")
local gc = dofile("tests/lua/gradcheck.lua")
local support = dofile("tests/lua/support.lua")
local F = accel.nn.functional
local C = accel._C

local f64 = accel.float64
local check, max_abs_diff = gc.check, support.max_abs_diff

-- softmax(scale q k^T [masked above the diagonal]) v in float64, no fused code
local function reference(q, k, v, causal, scale)
  q, k, v = q:detach():double(), k:detach():double(), v:detach():double()
  local L, S = q:size(-2), k:size(-2)
  scale = scale or 1 / math.sqrt(q:size(-1))
  local s = q:matmul(k:transpose(-2, -1)) * scale
  if causal then
    s = s:masked_fill(accel.ones(L, S, {dtype = accel.bool}):triu(1), -math.huge)
  end
  local e = (s - s:amax(-1, {keepdim = true})):exp()
  return (e / e:sum(-1, {keepdim = true})):matmul(v)
end

local function fused(causal, scale)
  return function(q, k, v) return C.scaled_dot_product_attention(q, k, v, scale, causal) end
end

describe("fused attention: gradients (float64 finite differences)", function()
  before_each(function() accel.set_seed(3) end)

  it("causal, 4-D, square", function()
    check(fused(true, 0.4), {gc.randn(2, 2, 5, 3), gc.randn(2, 2, 5, 3), gc.randn(2, 2, 5, 4)})
  end)

  it("not causal, L ~= S, 3-D", function()
    check(fused(false, 0.7), {gc.randn(2, 3, 4), gc.randn(2, 6, 4), gc.randn(2, 6, 2)})
  end)

  it("causal with more queries than keys and with fewer", function()
    check(fused(true, 0.5), {gc.randn(1, 2, 7, 3), gc.randn(1, 2, 4, 3), gc.randn(1, 2, 4, 2)})
    check(fused(true, 0.5), {gc.randn(1, 2, 3, 3), gc.randn(1, 2, 6, 3), gc.randn(1, 2, 6, 2)})
  end)

  it("across query blocks and key chunks (L = 70, S = 300)", function()
    check(fused(true, 0.3), {gc.randn(1, 1, 70, 2), gc.randn(1, 1, 300, 2), gc.randn(1, 1, 300, 1)})
  end)

  it("expanded (stride-0) key, value and query rows, causal or not", function()
    -- once refused as "out of memory or GEMM failure": a stride-0 row is no GEMM leading dimension
    for _, causal in ipairs({false, true}) do
      check(function(q, k, v) return fused(causal, 0.6)(q, k:expand(1, 2, 4, 3), v:expand(1, 2, 4, 2)) end,
        {gc.randn(1, 2, 3, 3), gc.randn(1, 1, 1, 3), gc.randn(1, 2, 1, 2)})
      check(function(q, k, v) return fused(causal, 0.6)(q:expand(2, 3, 2), k, v) end,
        {gc.randn(2, 1, 2), gc.randn(2, 5, 2), gc.randn(2, 5, 1)})
    end
  end)

  it("q, k, v as strided views of one packed projection, through F", function()
    local B, T, H, D = 2, 5, 2, 3
    local function attn(qkv)
      local parts = qkv:split(H * D, 3)
      local function heads(t) return t:view(B, T, H, D):transpose(2, 3) end
      local y = F.scaled_dot_product_attention(heads(parts[1]), heads(parts[2]), heads(parts[3]), {is_causal = true})
      if y.requires_grad then assert.equal("scaled_dot_product_attention", y.grad_fn) end
      return y:transpose(2, 3):contiguous():view(B, T, H * D)
    end
    check(attn, {gc.randn(B, T, 3 * H * D)})
  end)
end)

describe("fused attention: values", function()
  before_each(function() accel.set_seed(4) end)

  for _, causal in ipairs({true, false}) do
    it(("float32 matches the float64 reference (causal = %s)"):format(tostring(causal)), function()
      local q, k, v = accel.randn(2, 3, 130, 16), accel.randn(2, 3, 300, 16), accel.randn(2, 3, 300, 8)
      local y = F.scaled_dot_product_attention(q, k, v, {is_causal = causal})
      assert.same({2, 3, 130, 8}, {y:size(1), y:size(2), y:size(3), y:size(4)})
      assert.is_true(max_abs_diff(y, reference(q, k, v, causal)) < 2e-6)
    end)
  end

  it("float32 gradients match float64 ones", function()
    local q64, k64, v64 = gc.randn(1, 2, 80, 8), gc.randn(1, 2, 80, 8), gc.randn(1, 2, 80, 8)
    local g = accel.randn(1, 2, 80, 8, {dtype = f64})
    F.scaled_dot_product_attention(q64, k64, v64, {is_causal = true}):backward(g)
    local q, k, v = q64:detach():float(), k64:detach():float(), v64:detach():float()
    for _, t in ipairs({q, k, v}) do t:requires_grad_(true) end
    F.scaled_dot_product_attention(q, k, v, {is_causal = true}):backward(g:float())
    assert.is_true(max_abs_diff(q.grad, q64.grad) < 1e-5)
    assert.is_true(max_abs_diff(k.grad, k64.grad) < 1e-5)
    assert.is_true(max_abs_diff(v.grad, v64.grad) < 1e-5)
  end)

  it("expanded key / value give the contiguous ones' values, float32 and float64", function()
    for _, dt in ipairs({accel.float32, f64}) do
      local q, k, v = accel.randn(1, 2, 3, 2, {dtype = dt}), accel.randn(1, 1, 1, 2, {dtype = dt}), accel.randn(1, 2, 3, 2, {dtype = dt})
      local ke, ve = k:expand(1, 2, 3, 2), v:narrow(3, 1, 1):expand(1, 2, 3, 2)
      for _, causal in ipairs({false, true}) do
        local y = F.scaled_dot_product_attention(q, ke, ve, {is_causal = causal})
        assert.is_true(max_abs_diff(y, reference(q, ke, ve, causal)) < 1e-6)
      end
    end
  end)

  it("a one-column value's gradient through sum() (a stride-0 output gradient)", function()
    local q, k, v = gc.randn(1, 2, 3, 2), gc.randn(1, 2, 3, 2), gc.randn(1, 2, 3, 1)
    F.scaled_dot_product_attention(q, k, v):sum():backward()
    local q2, k2, v2 = q:detach():requires_grad_(), k:detach():requires_grad_(), v:detach():requires_grad_()
    local s = q2:matmul(k2:transpose(-2, -1)) / math.sqrt(2) -- the same through plain differentiable ops
    s:softmax(-1):matmul(v2):sum():backward()
    assert.is_true(max_abs_diff(q.grad, q2.grad) < 1e-12)
    assert.is_true(max_abs_diff(k.grad, k2.grad) < 1e-12)
    assert.is_true(max_abs_diff(v.grad, v2.grad) < 1e-12)
  end)

  it("a 4-D output is stored heads-last, so transpose(2, 3) is contiguous", function()
    local y = F.scaled_dot_product_attention(accel.randn(2, 4, 6, 8), accel.randn(2, 4, 6, 8), accel.randn(2, 4, 6, 8))
    assert.is_false(y:is_contiguous())
    assert.is_true(y:transpose(2, 3):is_contiguous())
    assert.is_true(max_abs_diff(y:contiguous(), y) == 0)
  end)

  it("scale is honoured and defaults to 1 / sqrt(D)", function()
    local q, k, v = accel.randn(1, 1, 9, 5), accel.randn(1, 1, 9, 5), accel.randn(1, 1, 9, 5)
    assert.is_true(max_abs_diff(F.scaled_dot_product_attention(q, k, v), reference(q, k, v, false)) < 2e-6)
    assert.is_true(max_abs_diff(F.scaled_dot_product_attention(q, k, v, {scale = 2.5}), reference(q, k, v, false, 2.5)) < 1e-5)
  end)

  it("bfloat16 inputs compute in float32 and return bfloat16 (heads-last), with gradients", function()
    local q, k, v = accel.randn(1, 2, 7, 4), accel.randn(1, 2, 7, 4), accel.randn(1, 2, 7, 4)
    for _, t in ipairs({q, k, v}) do t:requires_grad_(true) end
    local y = F.scaled_dot_product_attention(q:bfloat16(), k:bfloat16(), v:bfloat16(), {is_causal = true})
    assert.equal(accel.bfloat16, y.dtype)
    assert.is_true(y:transpose(2, 3):is_contiguous())
    assert.is_true(max_abs_diff(y, reference(q:bfloat16(), k:bfloat16(), v:bfloat16(), true)) < 2e-2)
    local g = accel.randn(1, 2, 7, 4)
    y:float():backward(g)
    local q2, k2, v2 = q:detach():bfloat16():float(), k:detach():bfloat16():float(), v:detach():bfloat16():float()
    for _, t in ipairs({q2, k2, v2}) do t:requires_grad_(true) end
    F.scaled_dot_product_attention(q2, k2, v2, {is_causal = true}):backward(g)
    assert.is_true(max_abs_diff(q.grad, q2.grad) < 3e-2)
    assert.is_true(max_abs_diff(k.grad, k2.grad) < 3e-2)
    assert.is_true(max_abs_diff(v.grad, v2.grad) < 3e-2)
  end)
end)

describe("F.scaled_dot_product_attention: composite fallbacks and errors", function()
  before_each(function() accel.set_seed(5) end)

  -- torch 2.15: enable_gqa with 3 key heads for 4 query heads raises "Number of heads in key and value must divide
  -- the number of heads in query"; without enable_gqa 2 key heads do not broadcast to 4 (values: nn_more_layers_spec)
  it("enable_gqa needs key / value heads that divide the query's", function()
    local q = accel.randn(1, 4, 3, 8)
    local ok, err = pcall(F.scaled_dot_product_attention, q, accel.randn(1, 3, 5, 8), accel.randn(1, 3, 5, 8),
      {enable_gqa = true})
    assert.is_false(ok)
    assert.truthy(tostring(err):find("Number of heads in key and value must divide the number of heads in query", 1,
      true), err)
    assert.is_false(pcall(F.scaled_dot_product_attention, q, accel.randn(1, 2, 5, 8), accel.randn(1, 2, 5, 8)))
  end)

  it("an attn_mask uses the composite (same values as the fused causal path)", function()
    local q, k, v = accel.randn(2, 2, 6, 4), accel.randn(2, 2, 6, 4), accel.randn(2, 2, 6, 4)
    local allowed = accel.ones(6, 6, {dtype = accel.bool}):tril()
    local y = F.scaled_dot_product_attention(q, k, v, {attn_mask = allowed})
    assert.is_nil(y.grad_fn) -- no input requires grad
    assert.is_true(max_abs_diff(y, F.scaled_dot_product_attention(q, k, v, {is_causal = true})) < 1e-6)
    assert.is_true(max_abs_diff(y, reference(q, k, v, true)) < 2e-6)
  end)

  it("a query row whose keys are all masked out gives 0 and finite gradients (PyTorch 2.x), the others as unmasked", function()
    local q = accel.randn(1, 3, 4, {dtype = f64, requires_grad = true})
    local k, v = accel.randn(1, 5, 4, {dtype = f64}), accel.randn(1, 5, 4, {dtype = f64})
    local m = accel.ones(3, 5, {dtype = accel.bool})
    m[2]:fill_(false) -- query 2 sees no key
    local y = F.scaled_dot_product_attention(q, k, v, {attn_mask = m})
    assert.are.same({0, 0, 0, 0}, y[1][2]:tolist())
    local alone = F.scaled_dot_product_attention(q:narrow(2, 1, 1), k, v)
    assert.is_true(max_abs_diff(y:narrow(2, 1, 1), alone) < 1e-12)
    local float_mask = accel.zeros(3, 5, {dtype = f64}):masked_fill(m:logical_not(), -math.huge)
    assert.is_true(max_abs_diff(y, F.scaled_dot_product_attention(q, k, v, {attn_mask = float_mask})) < 1e-12)
    check(function(x) return F.scaled_dot_product_attention(x, k, v, {attn_mask = m}) end, {q})
  end)

  it("float16: q k^T beyond the half range stays finite, q and k being scaled first (torch 2.15 as the fused path)", function()
    local q = accel.full({1, 2, 64}, 40, {dtype = accel.float16}) -- q . q = 102400 > 65504
    local v = (accel.arange(128):reshape(1, 2, 64) / 64 - 1):half()
    -- equal scores: each query averages the two values, j / 64 - 0.5 (exact in float16)
    local want = (accel.arange(64) / 64 - 0.5):reshape(1, 1, 64):expand(1, 2, 64)
    for _, o in ipairs({{attn_mask = accel.ones(2, 2, {dtype = accel.bool})}, {attn_mask = accel.zeros(2, 2):half()},
        {attn_mask = accel.zeros(2, 2):half(), scale = -0.125}, {dropout_p = 1e-9}}) do
      assert.equals(0, max_abs_diff(F.scaled_dot_product_attention(q, q, v, o), want))
    end
  end)

  it("a negative scale in the composite as softmax(scale q k^T) v", function()
    local q, k, v = accel.randn(1, 3, 4, {dtype = f64}), accel.randn(1, 5, 4, {dtype = f64}), accel.randn(1, 5, 4, {dtype = f64})
    local y = F.scaled_dot_product_attention(q, k, v, {attn_mask = accel.zeros(3, 5, {dtype = f64}), scale = -0.7})
    assert.is_true(max_abs_diff(y, reference(q, k, v, false, -0.7)) < 1e-12)
  end)

  it("an attn_mask that does not broadcast to the scores is an error naming the op and attn_mask", function()
    local q, k = accel.randn(1, 3, 4), accel.randn(1, 5, 4)
    for _, m in ipairs({accel.ones(3, 4, {dtype = accel.bool}), accel.ones(7, 3, 5, {dtype = accel.bool}), accel.ones(7, 3, 5)}) do
      local shape = "[" .. table.concat(support.shape_of(m), ", ") .. "]"
      support.expect_error(function() local _ = F.scaled_dot_product_attention(q, k, k, {attn_mask = m}) end,
        "scaled_dot_product_attention: attn_mask of shape " .. shape ..
        " does not broadcast to the attention scores' shape [1, 3, 5]")
    end
    assert.same({1, 3, 4}, support.shape_of(F.scaled_dot_product_attention(q, k, k, {attn_mask = accel.zeros(3, 1)})))
  end)

  it("broadcast batch dims use the composite", function()
    local q, k, v = accel.randn(2, 3, 5, 4), accel.randn(1, 3, 5, 4), accel.randn(1, 3, 5, 4)
    local y = F.scaled_dot_product_attention(q, k, v)
    assert.is_true(max_abs_diff(y, reference(q, k:expand(2, 3, 5, 4), v:expand(2, 3, 5, 4), false)) < 2e-6)
  end)

  -- PyTorch's order: sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale) and
  -- MultiheadAttention.forward(query, key, value, key_padding_mask, need_weights, attn_mask, ...), a nil in between
  it("takes PyTorch's positional arguments, nil ones in between included", function()
    local q = accel.randn(1, 4, 3)
    local by_name = F.scaled_dot_product_attention(q, q, q, {is_causal = true, scale = 0.3})
    assert.is_true(max_abs_diff(F.scaled_dot_product_attention(q, q, q, nil, 0.0, true, 0.3), by_name) == 0)
    assert.is_true(max_abs_diff(F.scaled_dot_product_attention(q, q, q), by_name) > 1e-3)
    local m = accel.nn.MultiheadAttention(6, 2)
    local y = accel.randn(4, 1, 6)
    local mask = accel.ones(4, 4, {dtype = accel.bool}):triu(1)
    local named = m(y, y, y, {need_weights = true, attn_mask = mask})
    assert.is_true(max_abs_diff(m(y, y, y, nil, true, mask), named) == 0)
    assert.is_true(max_abs_diff(m(y, y, y), named) > 1e-3)
  end)

  it("bad inputs to the fused op are clear errors", function()
    assert.has_error(function() C.scaled_dot_product_attention(accel.randn(1, 2, 3), accel.randn(1, 2, 4), accel.randn(1, 2, 3), 1, false) end,
      "scaled_dot_product_attention: expected q (B, H, L, D) or (N, L, D), k (.., S, D) and v (.., S, Dv) with equal batch dims, got [1, 2, 3], [1, 2, 4] and [1, 2, 3]")
    assert.has_error(function() C.scaled_dot_product_attention(accel.randn(1, 2, 3), accel.randn(1, 2, 3, {dtype = f64}), accel.randn(1, 2, 3), 1, false) end)
    assert.has_error(function() C.scaled_dot_product_attention(accel.randn(1, 2, 3), accel.randn(1, 0, 3), accel.randn(1, 0, 3), 1, true) end)
  end)
end)
