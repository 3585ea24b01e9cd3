-- nn layers, losses and nn.init: each forward against a float64 reference
-- computed here in plain Lua from the layer's own parameters, gradients with
-- gradcheck (central finite differences in float64), default initialisation
-- statistics, and MultiheadAttention against PyTorch's outputs
-- (tests/fixtures/nn_mha.safetensors, scripts/fixtures/make_nn_fixtures.py).
local accel = require("accel")
local gc = dofile("tests/lua/gradcheck.lua")
local support = dofile("tests/lua/support.lua")
local nn = accel.nn
local F = nn.functional

local f64 = accel.float64
local check_grad, shape_of, max_abs_diff = gc.check, support.shape_of, support.max_abs_diff
local ref_norm_rows = support.ref_norm_rows

local function T(data) return accel.tensor(data, {dtype = f64}) end
local function close(a, b, tol) assert.is_true(max_abs_diff(a, b) <= (tol or 1e-12), "max diff " .. max_abs_diff(a, b)) end

-- ---- plain-Lua math (independent of the library) ----

local function tanh(u)
  if u > 20 then return 1 elseif u < -20 then return -1 end
  local e = math.exp(2 * u)
  return (e - 1) / (e + 1)
end

-- erf by its Taylor series (|x| <= 4 keeps the cancellation below 1e-12)
local function erf(x)
  local sum, term, n = 0, x, 0
  while math.abs(term) > 1e-17 * math.max(1, math.abs(sum)) or n < 3 do
    sum = sum + term / (2 * n + 1)
    n = n + 1
    term = -term * x * x / n
  end
  return 2 / math.sqrt(math.pi) * sum
end

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end

-- apply f to every number of a nested table
local function map(t, f)
  if type(t) == "number" then return f(t) end
  local out = {}
  for i, v in ipairs(t) do out[i] = map(v, f) end
  return out
end

local function ref_linear(x, w, b)
  local out = {}
  for i, row in ipairs(x) do
    out[i] = {}
    for o, wrow in ipairs(w) do
      local s = b and b[o] or 0
      for k, v in ipairs(row) do s = s + v * wrow[k] end
      out[i][o] = s
    end
  end
  return out
end

-- sample statistics of a tensor
local function stats(t)
  local x = t:double()
  return x:mean():item(), x:std():item(), x:min():item(), x:max():item()
end

-- PyTorch: relu(): argument 'input' (position 1) must be Tensor, not int (a TypeError at the caller's line)
describe("nn.functional's argument checks", function()
  it("a non-tensor input or target is named with the function and the argument, at the caller's line", function()
    local x = accel.randn(2, 3)
    for _, c in ipairs({
      {"relu: argument 'input' must be a tensor, got number", function() return F.relu(1) end},
      {"gelu: argument 'input' must be a tensor, got nil", function() return F.gelu(nil) end},
      {"silu: argument 'input' must be a tensor, got number", function() return F.silu(1) end},
      {"sigmoid: argument 'input' must be a tensor, got number", function() return F.sigmoid(1) end},
      {"tanh: argument 'input' must be a tensor, got nil", function() return F.tanh(nil) end},
      {"leaky_relu: argument 'input' must be a tensor, got number", function() return F.leaky_relu(1) end},
      {"softmax: argument 'input' must be a tensor, got number", function() return F.softmax(1, -1) end},
      {"log_softmax: dim must be given (e.g. F.log_softmax(x, -1))", function() return F.log_softmax(x) end},
      {"normalize: argument 'input' must be a tensor, got number", function() return F.normalize(1) end},
      {"mse_loss: argument 'target' must be a tensor, got number", function() return F.mse_loss(x, 1) end},
      {"l1_loss: argument 'input' must be a tensor, got boolean", function() return F.l1_loss(true, x) end},
      {"binary_cross_entropy_with_logits: argument 'input' must be a tensor, got boolean",
        function() return F.binary_cross_entropy_with_logits(true, x) end},
      {"nll_loss: argument 'input' must be a tensor, got nil", function() return F.nll_loss(nil, x) end},
      {"cross_entropy: argument 'target' must be a tensor, got string", function() return F.cross_entropy(x, "a") end},
      {"rms_norm: normalized_shape must be an integer or a list of integers, got nil", function() return F.rms_norm(x) end},
      {"layer_norm: normalized_shape[1] must be an integer, got table", function() return F.layer_norm(x, {{1}}) end},
      {"scaled_dot_product_attention: argument 'query' must be a tensor, got number",
        function() return F.scaled_dot_product_attention(1, x, x) end},
    }) do
      local ok, err = pcall(function() local r = c[2]() return r end)
      assert.is_false(ok, c[1])
      assert.is_truthy(err:find("nn_layers_spec.lua:%d+: ") and err:find(c[1], 1, true), err)
    end
  end)
end)

describe("nn.Linear", function()
  before_each(function() accel.set_seed(1) end)

  it("computes x W^T + b", function()
    local l = nn.Linear(5, 3):double()
    local x = accel.randn(4, 5, {dtype = f64})
    close(l(x), T(ref_linear(x:tolist(), l.weight:tolist(), l.bias:tolist())))
    local nb = nn.Linear(5, 3, {bias = false}):double()
    close(nb(x), T(ref_linear(x:tolist(), nb.weight:tolist(), nil)))
    assert.same({2, 7, 3}, shape_of(nb(accel.randn(2, 7, 5, {dtype = f64}))))
  end)

  it("has correct gradients for input, weight and bias", function()
    local l = nn.Linear(4, 3):double()
    local x = gc.randn(2, 4)
    check_grad(function(xx) return l(xx) end, {x, l.weight, l.bias})
  end)

  it("initialises weight and bias in U(-1/sqrt(in), 1/sqrt(in))", function()
    local l = nn.Linear(256, 512)
    local bound = 1 / 16
    local mean, std, lo, hi = stats(l.weight)
    assert.is_true(lo >= -bound and hi <= bound)
    assert.is_true(math.abs(std / (bound / math.sqrt(3)) - 1) < 0.02, "std " .. std)
    assert.is_true(math.abs(mean) < 0.002)
    assert.is_true(hi > 0.99 * bound and lo < -0.99 * bound)
    mean, std, lo, hi = stats(l.bias)
    assert.is_true(lo >= -bound and hi <= bound)
    assert.is_true(math.abs(std / (bound / math.sqrt(3)) - 1) < 0.15, "bias std " .. std)
  end)

  it("rejects bad sizes and shapes clearly", function()
    local ok, err = pcall(function() nn.Linear(-1, 2) end)
    assert.is_false(ok)
    assert.matches("Linear: in_features must be a non%-negative integer", err)
    ok, err = pcall(function() nn.Linear(3, 2)(accel.randn(2, 4)) end)
    assert.is_false(ok)
    assert.matches("nn_layers_spec.lua", err)
  end)

  it("F.linear with a 1-D weight is x @ w, as PyTorch's (which takes no bias with it)", function()
    local x = T({{1, 2, 3}, {4, 5, 6}, {0, -1, 2}, {1, 1, 1}})
    local w = T({0.5, -1, 2})
    close(F.linear(x, w), T({4.5, 9, 5, 1.5})) -- torch.nn.functional.linear: shape (4)
    close(F.linear(x[1], w), T(4.5)) -- 0-dim
    support.expect_error(function() local _ = F.linear(x, w, T({0.25})) end, "linear: a 1-D weight takes no bias")
  end)
end)

describe("nn.Embedding", function()
  before_each(function() accel.set_seed(2) end)

  it("looks up rows by 0-based id", function()
    local e = nn.Embedding(6, 3):double()
    local ids = accel.tensor({{0, 5}, {2, 2}})
    local w = e.weight:tolist()
    close(e(ids), T({{w[1], w[6]}, {w[3], w[3]}}))
  end)

  it("zeros the padding row and never updates it", function()
    local e = nn.Embedding(5, 4, {padding_idx = 1}):double()
    assert.equals(0, e.weight[2]:abs():max():item())
    assert.is_true(e.weight[1]:abs():max():item() > 0)
    local ids = accel.tensor({1, 3, 1, 0})
    local out = e(ids)
    close(out[1], e.weight[2])
    out:sum():backward()
    assert.equals(0, e.weight.grad[2]:abs():max():item())
    close(e.weight.grad[4], accel.ones(4, {dtype = f64}))
    close(e.weight.grad[1], accel.ones(4, {dtype = f64}))
    -- a non-zero padding row is returned as it is, still without gradient
    accel.no_grad(function() e.weight[2]:fill_(7) end)
    e.weight.grad = nil
    local y = e(ids)
    assert.equals(7, y[1][1]:item())
    -- the other rows' gradients (the padding row's is zero by definition, not by calculus)
    check_grad(function(w) return F.embedding(accel.tensor({3, 0, 3}), w, {padding_idx = 1}) end, {e.weight})
    assert.equals(4, nn.Embedding(5, 2, {padding_idx = -1}).padding_idx)
  end)

  it("F.embedding checks padding_idx against the rows, as nn.Embedding (PyTorch: within num_embeddings)", function()
    local w, ids = accel.randn(6, 4, {requires_grad = true}), accel.tensor({0, 5})
    for _, pad in ipairs({-10, 9, 6, -7}) do
      support.expect_error(function() local _ = F.embedding(ids, w, pad) end,
        "embedding: padding_idx must be within num_embeddings", "got " .. pad)
    end
    support.expect_error(function() local _ = F.embedding(ids, w:detach(), {padding_idx = 6}) end,
      "embedding: padding_idx must be within num_embeddings")
    support.expect_error(function() local _ = nn.Embedding(6, 4, {padding_idx = -10}) end,
      "Embedding: padding_idx must be within num_embeddings")
    local y = F.embedding(ids, w, -1) -- row 5 is the padding row: no gradient
    y:sum():backward()
    assert.equals(0, w.grad[6]:abs():max():item())
    assert.equals(4, w.grad[1]:sum():item())
  end)

  it("an id out of range is an error naming embedding", function()
    local ok, err = pcall(nn.Embedding(5, 2), accel.tensor({1, 6}))
    assert.is_false(ok)
    assert.matches("embedding: index 6 is out of range for a dimension of size 5", err)
  end)

  it("has gradients that sum over repeated ids", function()
    local e = nn.Embedding(4, 3):double()
    check_grad(function() return e(accel.tensor({{1, 1}, {3, 0}})) end, {e.weight})
  end)

  it("initialises N(0, 1)", function()
    local mean, std = stats(nn.Embedding(1000, 64).weight)
    assert.is_true(math.abs(mean) < 0.02)
    assert.is_true(math.abs(std - 1) < 0.02)
  end)

  it("from_pretrained freezes by default", function()
    local w = accel.randn(3, 2)
    local e = nn.Embedding.from_pretrained(w)
    assert.is_false(e.weight.requires_grad)
    close(e(accel.tensor({2})), w[3]:unsqueeze(1))
    assert.is_true(nn.Embedding.from_pretrained(w, {freeze = false}).weight.requires_grad)
  end)
end)

describe("nn.LayerNorm and nn.RMSNorm", function()
  before_each(function() accel.set_seed(3) end)

  it("layer_norm / rms_norm refuse a weight or bias not of normalized_shape (torch 2.15's message)", function()
    local x = accel.randn(2, 3, 4)
    for _, c in ipairs({{{4}, {1}}, {{3, 4}, {3, 1}}, {{3, 4}, {2, 3, 4}}, {{3, 4}, {12}}}) do
      local shape, w = c[1], accel.ones(c[2])
      local want = ("Expected weight to be of same shape as normalized_shape, but got weight of shape [%s] and " ..
        "normalized_shape = [%s]"):format(table.concat(c[2], ", "), table.concat(shape, ", "))
      support.expect_error(function() local _ = F.rms_norm(x, shape, w) end, "rms_norm: " .. want)
      support.expect_error(function() local _ = F.layer_norm(x, shape, w) end, "layer_norm: " .. want)
    end
    support.expect_error(function() local _ = F.layer_norm(x, {4}, accel.ones(4), accel.ones(2)) end,
      "layer_norm: Expected bias to be of same shape as normalized_shape, but got bias of shape [2] and normalized_shape = [4]")
  end)

  it("LayerNorm normalises the last dims and applies weight and bias", function()
    local ln = nn.LayerNorm(6):double()
    assert.equals(1, ln.weight:min():item())
    assert.equals(0, ln.bias:abs():max():item())
    nn.init.normal_(ln.weight)
    nn.init.normal_(ln.bias)
    local x = accel.randn(3, 6, {dtype = f64}) * 3 + 1
    close(ln(x), T(ref_norm_rows(x:tolist(), ln.weight:tolist(), ln.bias:tolist(), 1e-5)), 1e-10)
    -- two normalised dims are one flattened row
    local ln2 = nn.LayerNorm({2, 3}, {eps = 1e-3}):double()
    nn.init.normal_(ln2.weight)
    local x2 = accel.randn(4, 2, 3, {dtype = f64})
    local ref = ref_norm_rows(x2:reshape(4, 6):tolist(), ln2.weight:reshape(6):tolist(), nil, 1e-3)
    close(ln2(x2):reshape(4, 6), T(ref), 1e-10)
    local plain = nn.LayerNorm(6, {elementwise_affine = false}):double()
    assert.equals(0, #plain:parameters())
    close(plain(x), T(ref_norm_rows(x:tolist(), nil, nil, 1e-5)), 1e-10)
  end)

  it("LayerNorm gradients", function()
    local ln = nn.LayerNorm(5):double()
    nn.init.normal_(ln.weight)
    nn.init.normal_(ln.bias)
    check_grad(function(x) return ln(x) end, {gc.randn(3, 5), ln.weight, ln.bias})
  end)

  it("RMSNorm divides by the root mean square (default eps: the dtype's epsilon)", function()
    local rn = nn.RMSNorm(4):double()
    nn.init.normal_(rn.weight)
    local x = accel.randn(5, 4, {dtype = f64})
    close(rn(x), T(ref_norm_rows(x:tolist(), rn.weight:tolist(), nil, 2.220446049250313e-16, true)), 1e-10)
    local rn2 = nn.RMSNorm(4, {eps = 0.5, elementwise_affine = false}):double()
    close(rn2(x), T(ref_norm_rows(x:tolist(), nil, nil, 0.5, true)), 1e-10)
    check_grad(function(xx) return rn(xx) end, {gc.randn(2, 4), rn.weight})
    assert.are.equal(accel.bfloat16, nn.RMSNorm(4)(accel.randn(2, 4):bfloat16()).dtype) -- float32 weight: bf16 out (torch)
  end)

  it("RMSNorm of a bf16 / fp16 input computes in float32 (eps=nil: float32's epsilon), rounded once", function()
    local x = accel.tensor({{0.01, 0.02, -0.01, 0.03}})
    -- torch 2.15: F.rms_norm(x.to(dtype), [4]) and nn.RMSNorm(4).to(dtype)(x.to(dtype))
    local want = {bfloat16 = {0.515625, 1.03125, -0.515625, 1.546875},
                  float16 = {0.5166015625, 1.033203125, -0.5166015625, 1.548828125}}
    for name, values in pairs(want) do
      local dt = accel[name]
      local y = F.rms_norm(x:to(dt), {4})
      assert.are.equal(dt, y.dtype)
      assert.are.same({values}, y:double():tolist())
      assert.are.same({values}, nn.RMSNorm(4):to(dt)(x:to(dt)):double():tolist())
    end
    -- the weight multiplies in float32 before the one rounding (torch: -1.7734375, not -1.78125)
    local xb = accel.tensor({{-1.625, -1.875, -0.75, -2.25}}):bfloat16()
    local wb = accel.tensor({0.375, 1.625, -1.0, -2.0}):bfloat16()
    assert.are.same({{-0.35546875, -1.7734375, 0.4375, 2.625}}, F.rms_norm(xb, {4}, wb):double():tolist())
    assert.are.same({{-0.35546875, -1.7734375, 0.4375, 2.625}}, F.rms_norm(xb, {4}, wb:float()):double():tolist())
  end)

  it("layer_norm, rms_norm, dropout and normalize take PyTorch's arguments positionally or by name", function()
    local f32 = {dtype = accel.float32} -- (LuaJIT reads 1.0 as an integer)
    local x = accel.tensor({{1, 2, 4, 9}}, f32)
    local w, b = accel.tensor({1, 2, 3, 4}, f32), accel.tensor({0.5, 0.5, 0.5, 0.5})
    -- closed form: (x - mean) / sqrt(var + eps) * w + b, var biased; mean 4, var 9.5, eps 10
    local want = {}
    for i, v in ipairs({1, 2, 4, 9}) do want[i] = (v - 4) / math.sqrt(9.5 + 10) * i + 0.5 end
    for _, y in ipairs({F.layer_norm(x, {4}, w, b, 10), F.layer_norm(x, {4}, w, b, {eps = 10}),
                        F.layer_norm(x, {4}, {weight = w, bias = b, eps = 10})}) do
      close(y, T({want}), 1e-6)
    end
    -- rms_norm: x / sqrt(mean(x^2) + eps); mean(x^2) = 25.5
    local rms = {}
    for i, v in ipairs({1, 2, 4, 9}) do rms[i] = v / math.sqrt(25.5 + 6.5) end
    close(F.rms_norm(x, {4}, nil, {eps = 6.5}), T({rms}), 1e-6)
    close(F.rms_norm(x, {4}, nil, 6.5), T({rms}), 1e-6)
    assert.are.equal(x, F.dropout(x, 0.3, false))
    assert.are.equal(x, F.dropout(x, {p = 0.3, training = false}))
    local y = x:clone()
    assert.are.equal(y, F.dropout(y, 0.5, true, true)) -- inplace: the result is written into y
    close(F.normalize(x, 1, 2), T({{1 / 16, 2 / 16, 4 / 16, 9 / 16}}), 1e-6)
    support.expect_error(function() local _ = F.layer_norm(x, {4}, w, b, 1e-3, 5) end,
      "layer_norm: 4 arguments given where at most 3 are taken")
    support.expect_error(function() local _ = F.layer_norm(x, {4}, w, {weight = w}) end,
      "layer_norm: got multiple values for argument 'weight'")
    support.expect_error(function() local _ = F.layer_norm(x, {4}, w, b, "a") end, 'layer_norm: eps must be a number, got "a"')
    support.expect_error(function() local _ = F.dropout(x, 0.3, 1) end, "dropout: argument 'training' must be a boolean, got number")
    support.expect_error(function() local _ = F.normalize(x, 1, {p = 2}) end, "normalize: got multiple values for argument 'p'")
  end)

  it("layer_norm and rms_norm check normalized_shape against the input's last dims (PyTorch's message)", function()
    local x = accel.randn(3, 5)
    support.expect_error(function() local _ = nn.RMSNorm(4, {elementwise_affine = false})(x) end,
      "rms_norm: Given normalized_shape=[4], expected input with shape [*, 4], but got input of size[3, 5]")
    support.expect_error(function() local _ = F.rms_norm(x, {2, 5}) end,
      "rms_norm: Given normalized_shape=[2, 5], expected input with shape [*, 2, 5], but got input of size[3, 5]")
    support.expect_error(function() local _ = nn.RMSNorm(1)(x) end, "rms_norm: Given normalized_shape=[1]")
    support.expect_error(function() local _ = F.rms_norm(x, {1, 3, 5}) end, "rms_norm: Given normalized_shape=[1, 3, 5]")
    support.expect_error(function() local _ = F.layer_norm(x, {4}) end,
      "layer_norm: Given normalized_shape=[4], expected input with shape [*, 4], but got input of size[3, 5]")
    assert.are.same({3, 5}, shape_of(F.rms_norm(x, {3, 5})))
  end)

  it("LayerNorm prints bias= as PyTorch 2.15", function()
    assert.are.equal("LayerNorm((4, 5), eps=1e-05, elementwise_affine=True, bias=False)",
      tostring(nn.LayerNorm({4, 5}, {bias = false})))
    assert.are.equal("LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)", tostring(nn.LayerNorm(4)))
    assert.are.equal("LayerNorm((4,), eps=1e-05, elementwise_affine=False, bias=False)",
      tostring(nn.LayerNorm(4, {elementwise_affine = false})))
  end)
end)

describe("nn.Dropout", function()
  before_each(function() accel.set_seed(4) end)

  it("zeros about p of the values and scales the rest by 1/(1-p) in training", function()
    local d = nn.Dropout(0.25)
    local y = d(accel.ones(20000))
    local zeros = y:eq(0):sum():item()
    assert.is_true(math.abs(zeros / 20000 - 0.25) < 0.02, zeros)
    local kept = y:masked_fill(y:eq(0), 4 / 3)
    close(kept, accel.full({20000}, 4 / 3), 1e-6)
  end)

  it("is the identity in eval mode and for p = 0", function()
    local x = accel.randn(100)
    assert.is_true(rawequal(nn.Dropout(0.5):eval()(x), x) or max_abs_diff(nn.Dropout(0.5):eval()(x), x) == 0)
    assert.equals(0, max_abs_diff(nn.Dropout(0)(x), x))
    local ok, err = pcall(function() nn.Dropout(1.5) end)
    assert.is_false(ok)
    assert.matches("between 0 and 1", err)
  end)

  it("F.dropout checks p even when not training (torch 2.15: between 0 and 1, but got 2)", function()
    local x = accel.randn(4)
    for _, p in ipairs({2, -0.1, 1.5}) do
      support.expect_error(function() local _ = F.dropout(x, p, {training = false}) end,
        "dropout: dropout probability has to be between 0 and 1, but got " .. tostring(p))
    end
    support.expect_error(function() local _ = F.dropout(x, {p = 2, training = false}) end, "but got 2")
    support.expect_error(function() local _ = F.dropout(x, "0.5") end, "dropout: dropout probability has to be between 0 and 1")
    assert.is_true(rawequal(F.dropout(x, 1, {training = false}), x))
  end)

  it("passes gradient through the kept values", function()
    local x = accel.ones(1000, {requires_grad = true})
    local y = nn.Dropout(0.5)(x)
    y:sum():backward()
    close(x.grad, y:detach(), 1e-6) -- d y_i / d x_i = mask_i / (1 - p) = y_i here
  end)

  it("inplace = true writes into the input (Dropout, ReLU, SiLU, LeakyReLU), with gradients", function()
    local z = accel.ones(1000)
    local y = nn.Dropout(0.5, {inplace = true})(z)
    assert.is_true(rawequal(y, z))
    assert.is_true(z:eq(0):sum():item() > 300)
    local x = accel.tensor({-1.0, 2.0}, {dtype = accel.float64, requires_grad = true})
    local want = {
      {nn.ReLU(true), {0, 2}, {0, 1}},
      {nn.LeakyReLU(0.1, {inplace = true}), {-0.1, 2}, {0.1, 1}},
      {nn.SiLU({inplace = true}), {-1 / (1 + math.exp(1)), 2 / (1 + math.exp(-2))}, nil},
    }
    for _, w in ipairs(want) do
      x.grad = nil
      local h = x * 1
      local out = w[1](h)
      assert.is_true(rawequal(out, h), w[1]:_get_name())
      close(h:detach(), accel.tensor(w[2], {dtype = accel.float64}), 1e-12)
      out:sum():backward()
      if w[3] then close(x.grad, accel.tensor(w[3], {dtype = accel.float64}), 1e-12) end
    end
  end)
end)

-- ---- Conv2d / MaxPool2d (F.conv2d / F.max_pool2d come from the conv slice) ----

local has_conv = F.conv2d ~= nil
local has_pool = F.max_pool2d ~= nil
local conv_it = has_conv and it or pending
local pool_it = has_pool and it or pending

-- x {N, C, H, W}, w {O, C/g, kh, kw}
local function ref_conv2d(x, w, b, stride, pad, dil, groups)
  local N, C, H, W = #x, #x[1], #x[1][1], #x[1][1][1]
  local O, Cg, KH, KW = #w, #w[1], #w[1][1], #w[1][1][1]
  local OH = math.floor((H + 2 * pad - dil * (KH - 1) - 1) / stride) + 1
  local OW = math.floor((W + 2 * pad - dil * (KW - 1) - 1) / stride) + 1
  local per_group = O / groups
  local out = {}
  for n = 1, N do
    out[n] = {}
    for o = 1, O do
      local g = math.floor((o - 1) / per_group)
      out[n][o] = {}
      for oh = 1, OH do
        out[n][o][oh] = {}
        for ow = 1, OW do
          local s = b and b[o] or 0
          for c = 1, Cg do
            for kh = 1, KH do
              for kw = 1, KW do
                local ih = (oh - 1) * stride - pad + (kh - 1) * dil + 1
                local iw = (ow - 1) * stride - pad + (kw - 1) * dil + 1
                if ih >= 1 and ih <= H and iw >= 1 and iw <= W then
                  s = s + x[n][g * Cg + c][ih][iw] * w[o][c][kh][kw]
                end
              end
            end
          end
          out[n][o][oh][ow] = s
        end
      end
    end
  end
  return out
end

describe("nn.Conv2d", function()
  before_each(function() accel.set_seed(5) end)

  conv_it("matches a direct convolution (stride, padding, groups)", function()
    local x = accel.randn(2, 4, 7, 6, {dtype = f64})
    for _, cfg in ipairs({{1, 0, 1, 1}, {2, 1, 1, 1}, {1, 2, 2, 1}, {1, 1, 1, 2}}) do
      local stride, pad, dil, groups = cfg[1], cfg[2], cfg[3], cfg[4]
      local conv = nn.Conv2d(4, 6, 3, {stride = stride, padding = pad, dilation = dil, groups = groups}):double()
      local ref = ref_conv2d(x:tolist(), conv.weight:tolist(), conv.bias:tolist(), stride, pad, dil, groups)
      close(conv(x), T(ref), 1e-10)
    end
    local same = nn.Conv2d(4, 6, 3, {padding = "same"}):double()
    close(same(x), T(ref_conv2d(x:tolist(), same.weight:tolist(), same.bias:tolist(), 1, 1, 1, 1)), 1e-10)
    local nb = nn.Conv2d(4, 2, {3, 2}, {bias = false}):double()
    close(nb(x), T(ref_conv2d(x:tolist(), nb.weight:tolist(), nil, 1, 0, 1, 1)), 1e-10)
  end)

  conv_it("has correct gradients", function()
    local conv = nn.Conv2d(2, 3, 3, {padding = 1, stride = 2}):double()
    check_grad(function(x) return conv(x) end, {gc.randn(2, 2, 5, 4), conv.weight, conv.bias})
  end)

  it("a non-integral kernel_size / stride / padding / dilation is an error naming the layer and the argument", function()
    support.expect_error(function() local _ = nn.Conv2d(2, 2, 1.5) end,
      "Conv2d: kernel_size must be an integer or a pair {h, w} of integers, got 1.5")
    support.expect_error(function() local _ = nn.Conv2d(2, 2, {1, 2.5}) end, "Conv2d: kernel_size", "got (1, 2.5)")
    support.expect_error(function() local _ = nn.Conv2d(2, 2, 3, {stride = 1.5}) end, "Conv2d: stride must be an integer")
    support.expect_error(function() local _ = nn.MaxPool2d(2, {padding = 0.5}) end, "MaxPool2d: padding must be an integer")
  end)

  it("initialises weight and bias in U(-1/sqrt(fan_in), 1/sqrt(fan_in))", function()
    local conv = nn.Conv2d(16, 64, 3)
    assert.same({64, 16, 3, 3}, shape_of(conv.weight))
    local bound = 1 / 12 -- fan_in = 16 * 3 * 3
    local _, std, lo, hi = stats(conv.weight)
    assert.is_true(lo >= -bound and hi <= bound)
    assert.is_true(math.abs(std / (bound / math.sqrt(3)) - 1) < 0.03, std)
    _, _, lo, hi = stats(conv.bias)
    assert.is_true(lo >= -bound and hi <= bound)
    assert.same({4, 2, 3, 3}, shape_of(nn.Conv2d(4, 4, 3, {groups = 2}).weight))
    local ok, err = pcall(function() nn.Conv2d(3, 4, 3, {groups = 2}) end)
    assert.is_false(ok)
    assert.matches("in_channels %(3%) must be divisible by groups %(2%)", err)
  end)
end)

local function ref_max_pool2d(x, k, stride, pad, dil, ceil)
  dil = dil or 1
  local out = {}
  for n, img in ipairs(x) do
    out[n] = {}
    for c, plane in ipairs(img) do
      local H, W = #plane, #plane[1]
      local OH = support.pool_output_size(H, k, stride, pad, dil, ceil)
      local OW = support.pool_output_size(W, k, stride, pad, dil, ceil)
      out[n][c] = {}
      for oh = 1, OH do
        out[n][c][oh] = {}
        for ow = 1, OW do
          local m = -math.huge
          for i = 1, k do
            for j = 1, k do
              local ih, iw = (oh - 1) * stride - pad + (i - 1) * dil + 1, (ow - 1) * stride - pad + (j - 1) * dil + 1
              if ih >= 1 and ih <= H and iw >= 1 and iw <= W then m = math.max(m, plane[ih][iw]) end
            end
          end
          out[n][c][oh][ow] = m
        end
      end
    end
  end
  return out
end

describe("nn.MaxPool2d", function()
  before_each(function() accel.set_seed(6) end)

  pool_it("takes the maximum of each window (stride, padding, dilation, ceil_mode)", function()
    local x = accel.randn(2, 3, 6, 7, {dtype = f64})
    local lx = x:tolist()
    close(nn.MaxPool2d(2)(x), T(ref_max_pool2d(lx, 2, 2, 0)))
    close(nn.MaxPool2d(3, {stride = 2, padding = 1})(x), T(ref_max_pool2d(lx, 3, 2, 1)))
    close(nn.MaxPool2d(2, {stride = 1, dilation = 2})(x), T(ref_max_pool2d(lx, 2, 1, 0, 2)))
    close(nn.MaxPool2d(2, {ceil_mode = true})(x), T(ref_max_pool2d(lx, 2, 2, 0, 1, true)))
  end)

  pool_it("returns the positions of the maxima with return_indices", function()
    local x = accel.randn(1, 2, 4, 6, {dtype = f64})
    local values, indices = nn.MaxPool2d(2, {return_indices = true})(x)
    assert.equals(accel.int64, indices.dtype)
    local flat = x:reshape(1, 2, 24)
    close(flat:gather(3, indices:reshape(1, 2, 6)):reshape(1, 2, 2, 3), values, 0)
  end)

  pool_it("routes the gradient to the maxima", function()
    check_grad(function(x) return nn.MaxPool2d(2)(x) end, {gc.randn(1, 2, 4, 4)})
  end)
end)

describe("shape modules", function()
  it("Flatten keeps dim 1 by default (PyTorch's flatten(1))", function()
    local x = accel.randn(2, 3, 4, 5)
    local y = nn.Flatten()(x)
    assert.same({2, 60}, shape_of(y))
    close(y, x:reshape(2, 60), 0)
    local z = nn.Flatten(2, 3)(x)
    assert.same({2, 12, 5}, shape_of(z))
    local u = nn.Unflatten(2, {3, 20})(y)
    assert.same({2, 3, 20}, shape_of(u))
    close(u, x:reshape(2, 3, 20), 0)
    assert.is_true(rawequal(nn.Identity(1, 2)(x), x))
  end)

  it("Unflatten infers one -1 size and names the sizes that do not fit the dim", function()
    local y = accel.randn(2, 60)
    assert.same({2, 3, 20}, shape_of(nn.Unflatten(2, {3, -1})(y)))
    assert.same({2, 4, 15}, shape_of(nn.Unflatten(-1, {-1, 15})(y)))
    support.expect_error(function() nn.Unflatten(2, {3, 21})(y) end,
      "Unflatten: sizes (3, 21) don't multiply up to the size of dim 2 (60) of the input, shape accel.Size({2, 60})")
    support.expect_error(function() nn.Unflatten(2, {7, -1})(y) end, "Unflatten: sizes (7, -1) don't multiply up")
    support.expect_error(function() nn.Unflatten(2, {-1, -1}) end, "Unflatten: only one size can be -1, got (-1, -1)")
    support.expect_error(function() nn.Unflatten(2, {3, 2.5}) end,
      "Unflatten: unflattened_size must hold non-negative integers (one may be -1), got (3, 2.5)")
  end)
end)

describe("activations", function()
  local xs = {-3.5, -2, -1.25, -0.5, -0.1, 0.2, 0.7, 1, 1.9, 3.2}
  local x = T(xs)

  local cases = {
    {"ReLU", nn.ReLU(), function(v) return math.max(v, 0) end},
    {"GELU", nn.GELU(), function(v) return 0.5 * v * (1 + erf(v / math.sqrt(2))) end},
    {"GELU tanh", nn.GELU({approximate = "tanh"}),
      function(v) return 0.5 * v * (1 + tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3))) end},
    {"SiLU", nn.SiLU(), function(v) return v * sigmoid(v) end},
    {"Tanh", nn.Tanh(), tanh},
    {"Sigmoid", nn.Sigmoid(), sigmoid},
    {"LeakyReLU", nn.LeakyReLU(), function(v) return v > 0 and v or 0.01 * v end},
    {"LeakyReLU(0.2)", nn.LeakyReLU(0.2), function(v) return v > 0 and v or 0.2 * v end},
    {"Identity", nn.Identity(), function(v) return v end},
  }
  for _, c in ipairs(cases) do
    it(c[1] .. " matches its formula and has correct gradients", function()
      close(c[2](x), T(map(xs, c[3])), 1e-12)
      check_grad(function(t) return c[2](t) end, {gc.leaf(x)})
    end)
  end

  it("F.relu / F.silu / F.leaky_relu honour inplace (positional or an option), as PyTorch's", function()
    local forms = {
      {"relu", function(t, flag) return F.relu(t, flag) end, function(v) return math.max(v, 0) end},
      {"silu", function(t, flag) return F.silu(t, {inplace = flag}) end, function(v) return v * sigmoid(v) end},
      {"leaky_relu", function(t, flag) return F.leaky_relu(t, 0.2, flag) end, function(v) return v > 0 and v or 0.2 * v end},
      {"leaky_relu {}", function(t, flag) return F.leaky_relu(t, {negative_slope = 0.2, inplace = flag}) end,
        function(v) return v > 0 and v or 0.2 * v end},
    }
    for _, f in ipairs(forms) do
      local t = T(xs)
      local y = f[2](t, true)
      assert.is_true(rawequal(t, y), f[1])
      close(t, T(map(xs, f[3])))
      t = T(xs)
      close(f[2](t, false), T(map(xs, f[3])))
      close(t, x) -- not inplace: the input is unchanged
    end
    -- autograd as PyTorch's: through a non-leaf, refused on a leaf that requires grad
    local leaf = gc.leaf(x)
    local h = leaf * 1
    F.relu(h, true):sum():backward()
    close(leaf.grad, T(map(xs, function(v) return v > 0 and 1 or 0 end)))
    local ok, err = pcall(function() F.relu(leaf, {inplace = true}) end)
    assert.is_false(ok)
    assert.matches("relu_: a leaf tensor that requires grad", err)
  end)

  it("Softmax and LogSoftmax along a 1-based dim", function()
    local rows = {{1, 2, 3}, {-1, 0.5, 4}}
    local t = T(rows)
    local function softmax_rows(r)
      local out = {}
      for i, row in ipairs(r) do
        local m, s = math.max(table.unpack(row)), 0
        for _, v in ipairs(row) do s = s + math.exp(v - m) end
        out[i] = {}
        for j, v in ipairs(row) do out[i][j] = math.exp(v - m) / s end
      end
      return out
    end
    close(nn.Softmax(2)(t), T(softmax_rows(rows)))
    close(nn.Softmax(-1)(t), T(softmax_rows(rows)))
    close(nn.LogSoftmax(2)(t), T(map(softmax_rows(rows), math.log)))
    close(nn.Softmax(1)(t):t(), T(softmax_rows(t:t():tolist())))
    check_grad(function(a) return nn.LogSoftmax(1)(a) end, {gc.randn(3, 4)})
    check_grad(function(a) return nn.Softmax(2)(a) end, {gc.randn(3, 4)})
    local ok, err = pcall(function() nn.Softmax() end)
    assert.is_false(ok)
    assert.matches("dim must be given", err)
  end)
end)

-- ---- losses ----

local function ref_cross_entropy(logits, target, ignore, eps, reduction)
  local losses, total, count = {}, 0, 0
  for i, row in ipairs(logits) do
    local m, s = math.max(table.unpack(row)), 0
    for _, v in ipairs(row) do s = s + math.exp(v - m) end
    local lse = m + math.log(s)
    local y = target[i]
    local l = 0
    if y ~= ignore then
      local smooth = 0
      for _, v in ipairs(row) do smooth = smooth + (lse - v) end
      l = (1 - eps) * (lse - row[y + 1]) + eps / #row * smooth
      total, count = total + l, count + 1
    end
    losses[i] = l
  end
  if reduction == "none" then return losses end
  if reduction == "sum" then return total end
  return total / count
end

describe("losses", function()
  before_each(function() accel.set_seed(7) end)

  it("CrossEntropyLoss with ignore_index and label_smoothing", function()
    local logits = accel.randn(6, 4, {dtype = f64})
    local target = accel.tensor({0, 3, -100, 2, 1, 3})
    local lt, tt = logits:tolist(), target:tolist()
    for _, o in ipairs({{}, {label_smoothing = 0.1}, {reduction = "sum", label_smoothing = 0.3}, {reduction = "none"}}) do
      local crit = nn.CrossEntropyLoss(o)
      local ref = ref_cross_entropy(lt, tt, -100, o.label_smoothing or 0, o.reduction or "mean")
      close(crit(logits, target), T(ref), 1e-12)
    end
    local t2 = accel.tensor({0, 3, 1, 2, 1, 3})
    close(nn.CrossEntropyLoss({ignore_index = 1})(logits, t2), T(ref_cross_entropy(lt, t2:tolist(), 1, 0, "mean")), 1e-12)
    check_grad(function(z) return nn.CrossEntropyLoss({label_smoothing = 0.2})(z, target) end, {gc.leaf(logits)})
    -- a per-class weight of ones is the unweighted loss (weighted values: nn_class_weight_spec.lua)
    close(nn.CrossEntropyLoss({weight = accel.ones({4}, {dtype = f64}), label_smoothing = 0.1})(logits, target),
      nn.CrossEntropyLoss({label_smoothing = 0.1})(logits, target), 1e-12)
    local ok, err = pcall(function() nn.CrossEntropyLoss({weight = accel.ones({3}, {dtype = f64})})(logits, target) end)
    assert.is_false(ok)
    assert.matches("weight tensor should be defined either for all 4 classes", err)
    ok, err = pcall(function() nn.CrossEntropyLoss({reduction = "avg"}) end)
    assert.is_false(ok)
    assert.matches('reduction must be "mean", "sum" or "none"', err)
  end)

  it("NLLLoss picks -input[target] and skips ignore_index", function()
    local logp = F.log_softmax(accel.randn(5, 3, {dtype = f64}), 2)
    local target = accel.tensor({2, 0, 1, 1, 2})
    local lp, tt = logp:tolist(), target:tolist()
    local s = 0
    for i = 1, 5 do s = s - lp[i][tt[i] + 1] end
    close(nn.NLLLoss()(logp, target), T(s / 5), 1e-12)
    local s2 = 0
    for i = 1, 5 do if tt[i] ~= 1 then s2 = s2 - lp[i][tt[i] + 1] end end
    close(nn.NLLLoss({ignore_index = 1})(logp, target), T(s2 / 3), 1e-12)
    close(nn.NLLLoss({reduction = "sum"})(logp, target), T(s), 1e-12)
    check_grad(function(z) return nn.NLLLoss()(z, target) end, {gc.randn(5, 3)})
  end)

  it("nll_loss checks the target's shape, dtype and class ids (PyTorch's messages)", function()
    local logp = F.log_softmax(accel.randn(2, 3, 5), 3) -- (N, T, C): not transposed to (N, C, T)
    support.expect_error(function() local _ = F.nll_loss(logp, accel.tensor({{0, 2, 1}, {1, 1, 0}})) end,
      "nll_loss: Expected target size [2, 5], got [2, 3]")
    support.expect_error(function() local _ = nn.NLLLoss()(accel.randn(4, 5), accel.tensor({0, 1, 2})) end,
      "nll_loss: Expected input batch_size (4) to match target batch_size (3).")
    support.expect_error(function() local _ = F.nll_loss(accel.randn(3, 5), accel.tensor({0, 7, 2})) end,
      "nll_loss: Target 7 is out of bounds.")
    support.expect_error(function() local _ = F.nll_loss(accel.randn(3, 5), accel.tensor({0, -1, 2})) end,
      "nll_loss: Target -1 is out of bounds.")
    support.expect_error(function() local _ = F.nll_loss(accel.randn(2, 5), accel.tensor({{0}, {1}})) end,
      "nll_loss: 0D or 1D target tensor expected, multi-target not supported")
    support.expect_error(function() local _ = F.nll_loss(accel.randn(5), accel.tensor({0, 1})) end,
      "nll_loss: For 1D input, 1D target must have size 1, but got target size: 2")
    support.expect_error(function() local _ = F.nll_loss(accel.tensor(1.0), accel.tensor(0)) end,
      "nll_loss: Expected 1 or more dimensions (got 0)")
    support.expect_error(function() local _ = F.nll_loss(accel.randn(2, 5), accel.tensor({0, 1}, {dtype = accel.int32})) end,
      "nll_loss: expected target dtype to be Long or Byte", "but got Int")
    -- an ignored target may be out of range; (N, C, d) takes (N, d); (C) gives a 0-dim loss
    local x = T({{-1, -2, -3}, {-4, -5, -6}})
    close(F.nll_loss(x, accel.tensor({2, 9}), {ignore_index = 9}), T(3))
    close(F.nll_loss(x:unsqueeze(3), accel.tensor({{2}, {0}}), {reduction = "none"}), T({{3}, {4}}))
    assert.are.same({}, shape_of(F.nll_loss(T({-1, -2, -3}), accel.tensor({1}), {reduction = "none"})))
    close(F.nll_loss(x, accel.tensor({1, 2}, {dtype = accel.uint8})), T(4))
  end)

  -- torch 2.15: F.mse_loss(torch.zeros(4, 1), torch.zeros(4)) warns "Using a target size (torch.Size([4])) that
  -- is different to the input size (torch.Size([4, 1])). This will likely lead to incorrect results due to
  -- broadcasting. Please ensure they have the same size." (and computes over the broadcast (4, 4))
  it("mse_loss / l1_loss warn once when the target's shape differs from the input's", function()
    local q = support.shell_quote
    local code = "local F = accel.nn.functional local x, t = accel.zeros(4, 1), accel.ones(4) "
      .. "for _ = 1, 2 do F.mse_loss(x, t) F.l1_loss(x, t) end F.mse_loss(t, t) io.write(F.mse_loss(x, t):item())"
    local out = support.command_output(("%s -e %s 2>&1"):format(q(support.ACCEL_LUA), q(code)))
    local tail = ": Using a target size ([4]) that is different to the input size ([4, 1]). This will likely lead to "
      .. "incorrect results due to broadcasting. Please ensure they have the same size.\n"
    assert.are.equal("accel-lua: warning: mse_loss" .. tail .. "accel-lua: warning: l1_loss" .. tail .. "1", out)
  end)

  it("a bad reduction is an error naming the loss, at the caller's line", function()
    local x = accel.randn(3, 5)
    support.expect_error(function() local _ = F.mse_loss(x, x, {reduction = "avg"}) end,
      'mse_loss: reduction must be "mean", "sum" or "none", got "avg"')
    support.expect_error(function() local _ = F.l1_loss(x, x, {reduction = "avg"}) end, "l1_loss: reduction must be")
    support.expect_error(function() local _ = F.nll_loss(x, accel.tensor({0, 1, 1}), {reduction = "avg"}) end,
      "nll_loss: reduction must be")
    support.expect_error(function() local _ = F.binary_cross_entropy_with_logits(x, x, {reduction = "avg"}) end,
      "binary_cross_entropy_with_logits: reduction must be")
    support.expect_error(function() local _ = nn.MSELoss({reduction = "avg"}) end, "MSELoss: reduction must be")
  end)

  -- torch 2.15: "argument 'ignore_index' (position 5) must be int, not float", "True is not a valid value for
  -- reduction", "argument 'label_smoothing' (position 6) must be float, not str"
  it("class-target losses check ignore_index, label_smoothing and reduction as PyTorch's parser does", function()
    local x, t = accel.randn(2, 3), accel.tensor({0, 1})
    support.expect_error(function() local _ = F.cross_entropy(x, t, {ignore_index = 0.5}) end,
      "cross_entropy: ignore_index must be an integer, got 0.5")
    support.expect_error(function() local _ = F.nll_loss(x, t, {ignore_index = "a"}) end,
      'nll_loss: ignore_index must be an integer, got "a"')
    support.expect_error(function() local _ = F.cross_entropy(x, t, {reduction = true}) end,
      'cross_entropy: reduction must be "mean", "sum" or "none", got true')
    support.expect_error(function() local _ = F.cross_entropy(x, t, {label_smoothing = "a"}) end,
      'cross_entropy: label_smoothing must be a number, got "a"')
    support.expect_error(function() local _ = F.cross_entropy(x, t, {label_smoothing = 1.5}) end,
      "cross_entropy: label_smoothing must be between 0.0 and 1.0, got 1.5")
    support.expect_error(function() local _ = nn.CrossEntropyLoss({ignore_index = 0.5}) end,
      "CrossEntropyLoss: ignore_index must be an integer")
    support.expect_error(function() local _ = nn.NLLLoss({ignore_index = true}) end, "NLLLoss: ignore_index must be an integer")
    close(F.cross_entropy(x, t, {ignore_index = 1.0}), F.cross_entropy(x:narrow(1, 1, 1), t:narrow(1, 1, 1)), 1e-6)
  end)

  it("cross_entropy refuses ignore_index with probability targets and non-int64/uint8 class ids (PyTorch)", function()
    local x = accel.randn(3, 5)
    local probs = F.softmax(accel.randn(3, 5), 2)
    support.expect_error(function() local _ = F.cross_entropy(x, probs, {ignore_index = 1}) end,
      "cross_entropy: ignore_index is not supported for floating point target")
    support.expect_error(function() local _ = nn.CrossEntropyLoss({ignore_index = 0})(x, probs) end,
      "cross_entropy: ignore_index is not supported for floating point target")
    support.expect_error(function() local _ = F.cross_entropy(x, accel.tensor({true, false, true})) end,
      "cross_entropy: expected target dtype to be Long or Byte", "but got Bool")
    support.expect_error(function() local _ = F.cross_entropy(x, accel.tensor({0, 1, 1}, {dtype = accel.int32})) end,
      "cross_entropy: expected target dtype to be Long or Byte", "but got Int")
    -- a negative ignore_index with probabilities is accepted (PyTorch too); uint8 ids are class ids
    close(F.cross_entropy(x, probs, {ignore_index = -5}), F.cross_entropy(x, probs), 0)
    close(F.cross_entropy(x, accel.tensor({0, 1, 2}, {dtype = accel.uint8})), F.cross_entropy(x, accel.tensor({0, 1, 2})), 0)
  end)

  it("MSELoss and L1Loss", function()
    local a, b = accel.randn(3, 4, {dtype = f64}), accel.randn(3, 4, {dtype = f64})
    local la, lb = a:reshape(12):tolist(), b:reshape(12):tolist()
    local sq, ab = 0, 0
    for i = 1, 12 do
      sq = sq + (la[i] - lb[i]) ^ 2
      ab = ab + math.abs(la[i] - lb[i])
    end
    close(nn.MSELoss()(a, b), T(sq / 12), 1e-12)
    close(nn.MSELoss({reduction = "sum"})(a, b), T(sq), 1e-12)
    close(nn.L1Loss()(a, b), T(ab / 12), 1e-12)
    assert.same({3, 4}, shape_of(nn.L1Loss({reduction = "none"})(a, b)))
    check_grad(function(x, y) return nn.MSELoss()(x, y) end, {gc.leaf(a), gc.leaf(b)})
    check_grad(function(x) return nn.L1Loss()(x, b) end, {gc.leaf(a)})
  end)

  it("BCEWithLogitsLoss, with pos_weight", function()
    local x = accel.randn(4, 3, {dtype = f64}) * 3
    local y = accel.rand(4, 3, {dtype = f64}):gt(0.5):double()
    local pw = T({1, 2, 0.5})
    local lx, ly, lpw = x:tolist(), y:tolist(), pw:tolist()
    local s, spw = 0, 0
    for i = 1, 4 do
      for j = 1, 3 do
        local p = sigmoid(lx[i][j])
        s = s - (ly[i][j] * math.log(p) + (1 - ly[i][j]) * math.log(1 - p))
        spw = spw - (lpw[j] * ly[i][j] * math.log(p) + (1 - ly[i][j]) * math.log(1 - p))
      end
    end
    close(nn.BCEWithLogitsLoss()(x, y), T(s / 12), 1e-12)
    local crit = nn.BCEWithLogitsLoss({pos_weight = pw})
    close(crit(x, y), T(spw / 12), 1e-12)
    assert.same({"pos_weight"}, crit:state_dict_keys())
    check_grad(function(z) return crit(z, y) end, {gc.leaf(x)})
  end)

  it("BCE with logits: weight / pos_weight must broadcast to the input's shape (torch 2.15 refuses [4, 2, 3] for [2, 3])", function()
    local x, y = accel.randn(2, 3), accel.rand(2, 3)
    local f = F.binary_cross_entropy_with_logits
    for _, what in ipairs({"weight", "pos_weight"}) do
      local ok, err = pcall(f, x, y, {[what] = accel.ones(4, 2, 3)})
      assert.is_false(ok)
      assert.matches("nn_layers_spec.lua:%d+: binary_cross_entropy_with_logits: " .. what ..
        " of shape %[4, 2, 3%] does not broadcast to the input's shape %[2, 3%]", err)
      assert.is_false((pcall(f, x, y, {[what] = accel.ones(5)})))
      -- torch 2.15: shapes [3] and [2, 1] broadcast
      assert.same({2, 3}, shape_of(f(x, y, {[what] = accel.ones(3), reduction = "none"})))
      assert.same({2, 3}, shape_of(f(x, y, {[what] = accel.ones(2, 1), reduction = "none"})))
    end
  end)
end)

-- ---- MultiheadAttention ----

describe("attention masks", function()
  it("an integer mask is refused (bool or floating point only), as PyTorch", function()
    local q = accel.randn(1, 1, 2, 4)
    local ok, err = pcall(F.scaled_dot_product_attention, q, q, q, {attn_mask = accel.tensor({{1, 0}, {1, 1}})})
    assert.is_false(ok)
    assert.matches("scaled_dot_product_attention: attn_mask is accel.int64; only bool and floating%-point masks", err)
    local m, x = nn.MultiheadAttention(4, 2), accel.randn(3, 2, 4)
    ok, err = pcall(m, x, x, x, {key_padding_mask = accel.ones(2, 3, {dtype = accel.uint8})})
    assert.is_false(ok)
    assert.matches("MultiheadAttention: key_padding_mask is accel.uint8", err)
    ok, err = pcall(F.scaled_dot_product_attention, q, q, q,
      {attn_mask = accel.ones(2, 2, {dtype = accel.bool}), is_causal = true})
    assert.is_false(ok)
    assert.matches("Explicit attn_mask should not be set when is_causal=True", err)
  end)

  it("an unbatched MultiheadAttention takes a key_padding_mask of shape (S)", function()
    local m = nn.MultiheadAttention(8, 2)
    local q, k = accel.randn(3, 8), accel.randn(5, 8)
    local pad = accel.tensor({false, false, true, false, true})
    local out, w = m(q, k, k, {key_padding_mask = pad})
    local out2, w2 = m(q, k, k, {key_padding_mask = pad:unsqueeze(1)})
    assert.same({3, 8}, {out:size(1), out:size(2)})
    assert.equals(0, max_abs_diff(out, out2))
    assert.equals(0, w:select(2, 3):abs():max():item())
    assert.equals(0, max_abs_diff(w, w2))
  end)
end)

describe("nn.MultiheadAttention", function()
  local fx = accel.load("tests/fixtures/nn_mha.safetensors", {device = accel.get_default_device()}) -- where the suite runs
  local function loaded(o)
    local mha = nn.MultiheadAttention(8, 2, o):eval()
    mha:load_state_dict({in_proj_weight = fx.in_proj_weight, in_proj_bias = fx.in_proj_bias,
                         ["out_proj.weight"] = fx["out_proj.weight"], ["out_proj.bias"] = fx["out_proj.bias"]})
    return mha
  end

  it("has PyTorch's parameters and initialisation", function()
    accel.set_seed(8)
    local mha = nn.MultiheadAttention(64, 4)
    assert.same({"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}, mha:state_dict_keys())
    local bound = math.sqrt(6 / (64 + 3 * 64))
    local _, std, lo, hi = stats(mha.in_proj_weight)
    assert.is_true(lo >= -bound and hi <= bound)
    assert.is_true(math.abs(std / (bound / math.sqrt(3)) - 1) < 0.03)
    assert.equals(0, mha.in_proj_bias:abs():max():item())
    assert.equals(0, mha.out_proj.bias:abs():max():item())
    _, _, lo, hi = stats(mha.out_proj.weight)
    assert.is_true(lo >= -1 / 8 and hi <= 1 / 8)
    local ok, err = pcall(function() nn.MultiheadAttention(10, 3) end)
    assert.is_false(ok)
    assert.matches("embed_dim %(10%) must be divisible by num_heads %(3%)", err)
  end)

  it("matches PyTorch: self-attention, causal masks, cross-attention, key padding, per-head weights", function()
    local mha = loaded()
    local x, q, k, v = fx.x, fx.q, fx.k, fx.v
    local out, w = mha(x, x, x)
    close(out, fx.out_self, 1e-5)
    close(w, fx.w_self, 1e-5)
    local causal = accel.full({4, 4}, -math.huge):triu(1)
    out, w = mha(x, x, x, {attn_mask = causal})
    close(out, fx.out_causal, 1e-5)
    close(w, fx.w_causal, 1e-5)
    out, w = mha(x, x, x, {attn_mask = accel.ones(4, 4, {dtype = accel.bool}):triu(1)})
    close(out, fx.out_causal, 1e-5)
    out, w = mha(x, x, x, {is_causal = true})
    close(out, fx.out_causal, 1e-5)
    close(w, fx.w_causal, 1e-5)
    out, w = mha(q, k, v)
    close(out, fx.out_cross, 1e-5)
    close(w, fx.w_cross, 1e-5)
    out, w = mha(q, k, v, {key_padding_mask = fx.kpm})
    close(out, fx.out_kpm, 1e-5)
    close(w, fx.w_kpm, 1e-5)
    local _, wh = mha(q, k, v, {average_attn_weights = false})
    close(wh, fx.w_heads, 1e-5)
    out, w = mha(q, k, v, {need_weights = false})
    close(out, fx.out_cross, 1e-5)
    assert.is_nil(w)
  end)

  it("batch_first and unbatched inputs give the same numbers", function()
    local bf = loaded({batch_first = true})
    local out, w = bf(fx.q:transpose(1, 2), fx.k:transpose(1, 2), fx.v:transpose(1, 2))
    close(out:transpose(1, 2), fx.out_cross, 1e-5)
    close(w, fx.w_cross, 1e-5)
    local mha = loaded()
    local o1, w1 = mha(fx.q:select(2, 2), fx.k:select(2, 2), fx.v:select(2, 2))
    close(o1, fx.out_cross:select(2, 2), 1e-5)
    close(w1, fx.w_cross[2], 1e-5)
  end)

  it("has correct gradients for inputs and every parameter", function()
    accel.set_seed(9)
    local mha = nn.MultiheadAttention(4, 2):double()
    nn.init.normal_(mha.in_proj_bias)
    nn.init.normal_(mha.out_proj.bias)
    local x = gc.randn(3, 2, 4)
    check_grad(function(a) return (mha(a, a, a, {is_causal = true})) end,
      {x, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias})
    local q, kv = gc.randn(2, 1, 4), gc.randn(3, 1, 4)
    check_grad(function(a, b) local _, w = mha(a, b, b); return w end, {q, kv, mha.in_proj_weight})
  end)

  it("rejects mis-shaped inputs and masks", function()
    local mha = loaded()
    local ok, err = pcall(function() mha(accel.randn(4, 2, 6), fx.k, fx.v) end)
    assert.is_false(ok)
    assert.matches("query must be 3%-D with last dim embed_dim=8", err)
    ok, err = pcall(function() mha(fx.x, fx.x, fx.x, {attn_mask = accel.zeros(3, 4)}) end)
    assert.is_false(ok)
    assert.matches("attn_mask of shape", err)
  end)

  it("need_weights = false: a query whose keys are all masked gets 0 before out_proj (PyTorch's SDPA path)", function()
    accel.set_seed(4)
    local m = nn.MultiheadAttention(4, 2):double()
    accel.no_grad(function() m.out_proj.bias:copy_(T({0.1, -0.2, 0.3, 0.4})) end)
    local x = accel.randn(3, 2, 4, {dtype = f64, requires_grad = true})
    local kpm = accel.tensor({{true, true, true}, {false, true, false}})
    local out, w = m(x, x, x, {key_padding_mask = kpm, need_weights = false})
    assert.is_nil(w)
    -- batch 1: every key masked -> out_proj(0) = its bias (torch 2.15: 0.1, -0.2, 0.3, 0.4 per query)
    close(out:select(2, 1), T({0.1, -0.2, 0.3, 0.4}):expand(3, 4))
    -- batch 2: the same numbers as with weights
    local out_w = m(x, x, x, {key_padding_mask = kpm})
    close(out:select(2, 2), out_w:select(2, 2), 1e-12)
    out:sum():backward()
    assert.equals(0, x.grad:select(2, 1):abs():max():item()) -- torch: zero, finite
    -- with weights the fully masked row stays NaN, as PyTorch's
    assert.is_true(out_w:select(2, 1):ne(out_w:select(2, 1)):all():item())
    -- masks, causal and float, agree between the two paths
    local am = accel.zeros(3, 3, {dtype = f64}):masked_fill(accel.tensor({{false, true, false}, {false, false, true}, {true, false, false}}), -math.huge)
    close(m(x, x, x, {attn_mask = am, need_weights = false}), (m(x, x, x, {attn_mask = am})), 1e-12)
    close(m(x, x, x, {is_causal = true, need_weights = false}), (m(x, x, x, {is_causal = true})), 1e-12)
  end)

  it("float16: q k^T beyond the half range stays finite, q being scaled first (torch 2.15: sum 5120, weights 0.5)", function()
    local m = nn.MultiheadAttention(64, 1, {bias = false}):half()
    accel.no_grad(function()
      local eye = nn.init.eye_(accel.empty(64, 64))
      m.in_proj_weight:copy_(accel.cat({eye, eye, eye}, 1))
      m.out_proj.weight:copy_(eye)
    end)
    local x = accel.full({2, 1, 64}, 40, {dtype = accel.float16}) -- q . k = 102400 > 65504
    local y, w = m(x, x, x)
    assert.equals(5120, y:float():sum():item())
    assert.same({{{0.5, 0.5}, {0.5, 0.5}}}, w:float():tolist())
    assert.equals(5120, m(x, x, x, {need_weights = false}):float():sum():item())
  end)
end)

-- ---- nn.init ----

describe("nn.init", function()
  local init = nn.init
  before_each(function() accel.set_seed(10) end)

  it("uniform_ / normal_ / constant_ / zeros_ / ones_ / eye_", function()
    local t = accel.empty(200, 100)
    assert.is_true(rawequal(init.uniform_(t, -2, 3), t))
    local mean, std, lo, hi = stats(t)
    assert.is_true(lo >= -2 and hi <= 3 and math.abs(mean - 0.5) < 0.05)
    assert.is_true(math.abs(std - 5 / math.sqrt(12)) < 0.03)
    init.uniform_(t)
    _, _, lo, hi = stats(t)
    assert.is_true(lo >= 0 and hi <= 1)
    init.normal_(t, 1, 0.5)
    mean, std = stats(t)
    assert.is_true(math.abs(mean - 1) < 0.02 and math.abs(std - 0.5) < 0.01)
    init.normal_(t, {std = 0.02})
    mean, std = stats(t)
    assert.is_true(math.abs(mean) < 0.001 and math.abs(std - 0.02) < 0.001)
    init.constant_(t, 0.25)
    assert.is_true(t:min():item() == 0.25 and t:max():item() == 0.25)
    init.zeros_(t)
    assert.equals(0, t:abs():max():item())
    init.ones_(t)
    assert.equals(1, t:min():item())
    close(init.eye_(accel.empty(2, 3, {dtype = f64})), T({{1, 0, 0}, {0, 1, 0}}), 0)
  end)

  it("xavier_uniform_ / xavier_normal_ use fan_in + fan_out", function()
    local t = accel.empty(300, 200)
    init.xavier_uniform_(t)
    local bound = math.sqrt(6 / 500)
    local _, std, lo, hi = stats(t)
    assert.is_true(lo >= -bound and hi <= bound)
    assert.is_true(math.abs(std / (bound / math.sqrt(3)) - 1) < 0.02)
    init.xavier_uniform_(t, {gain = 2})
    _, _, lo, hi = stats(t)
    assert.is_true(hi > bound and hi <= 2 * bound)
    init.xavier_normal_(t, 3)
    _, std = stats(t)
    assert.is_true(math.abs(std / (3 * math.sqrt(2 / 500)) - 1) < 0.02)
  end)

  it("kaiming_uniform_ / kaiming_normal_ with a, mode and nonlinearity", function()
    local t = accel.empty(64, 32, 3, 3) -- fan_in 288, fan_out 576
    init.kaiming_uniform_(t)            -- leaky_relu, a = 0: gain sqrt(2)
    local bound = math.sqrt(2) * math.sqrt(3 / 288)
    local _, std, lo, hi = stats(t)
    assert.is_true(lo >= -bound and hi <= bound and hi > 0.99 * bound)
    init.kaiming_uniform_(t, math.sqrt(5))
    bound = 1 / math.sqrt(288)
    _, std, lo, hi = stats(t)
    assert.is_true(lo >= -bound and hi <= bound and hi > 0.99 * bound)
    init.kaiming_normal_(t, {mode = "fan_out", nonlinearity = "relu"})
    _, std = stats(t)
    assert.is_true(math.abs(std / math.sqrt(2 / 576) - 1) < 0.02)
    init.kaiming_normal_(t, 0, "fan_in", "linear")
    _, std = stats(t)
    assert.is_true(math.abs(std / math.sqrt(1 / 288) - 1) < 0.02)
    local ok, err = pcall(function() init.kaiming_uniform_(accel.empty(5)) end)
    assert.is_false(ok)
    assert.matches("fewer than 2 dimensions", err)
    ok, err = pcall(function() init.kaiming_normal_(t, {mode = "fan_mid"}) end)
    assert.is_false(ok)
    assert.matches("mode fan_mid not supported", err)
  end)

  it("trunc_normal_ stays in [a, b] with the truncated normal's spread", function()
    local t = accel.empty(100000, {dtype = f64})
    init.trunc_normal_(t)
    local mean, std, lo, hi = stats(t)
    assert.is_true(lo >= -2 and hi <= 2)
    -- N(0,1) truncated to [-2, 2]: variance 1 - 2*2*phi(2) / (Phi(2) - Phi(-2))
    local phi2 = math.exp(-2) / math.sqrt(2 * math.pi)
    local mass = erf(2 / math.sqrt(2))
    assert.is_true(math.abs(std - math.sqrt(1 - 4 * phi2 / mass)) < 0.01, std)
    assert.is_true(math.abs(mean) < 0.01)
    init.trunc_normal_(t, {std = 0.02, a = -0.04, b = 0.04})
    _, _, lo, hi = stats(t)
    assert.is_true(lo >= -0.04 and hi <= 0.04)
  end)

  it("trunc_normal_ samples an interval far from the mean (torch 2.15 returns values in [5, 6])", function()
    local t = accel.empty(100000, {dtype = f64})
    init.trunc_normal_(t, {a = 5, b = 6})
    local mean, _, lo, hi = stats(t)
    assert.is_true(lo >= 5 and hi <= 6)
    -- E[X | 5 <= X <= 6] = (phi(5) - phi(6)) / (Q(5) - Q(6)) = 5.183147090477162 (Python math.erfc)
    assert.is_true(math.abs(mean - 5.183147090477162) < 0.005, mean)
    init.trunc_normal_(t, {mean = 1, std = 2, a = -11, b = -9}) -- the mirror image, scaled
    mean, _, lo, hi = stats(t)
    assert.is_true(lo >= -11 and hi <= -9)
    assert.is_true(math.abs(mean - (1 - 2 * 5.183147090477162)) < 0.01, mean)
    local f32 = init.trunc_normal_(accel.empty(1000), {a = 5, b = 6})
    assert.is_true(f32:min():item() >= 5 and f32:max():item() <= 6)
  end)

  it("constant_ / zeros_ / ones_ / eye_ fill integer and bool tensors, as PyTorch's", function()
    local i64 = accel.empty(2, 3, {dtype = accel.int64})
    assert.same({{3, 3, 3}, {3, 3, 3}}, init.constant_(i64, 3):tolist())
    assert.same({{0, 0, 0}, {0, 0, 0}}, init.zeros_(i64):tolist())
    assert.same({{1, 1, 1}, {1, 1, 1}}, init.ones_(accel.empty(2, 3, {dtype = accel.int32})):tolist())
    assert.same({{1, 0, 0}, {0, 1, 0}}, init.eye_(accel.empty(2, 3, {dtype = accel.uint8})):tolist())
    assert.same({{true, false, false}, {false, true, false}}, init.eye_(accel.empty(2, 3, {dtype = accel.bool})):tolist())
    assert.same({true, true}, init.constant_(accel.empty(2, {dtype = accel.bool}), true):tolist())
    support.expect_error(function() init.constant_(i64, "3") end, "nn.init.constant_: expected a number or a boolean, got string")
  end)

  it("uniform_ / normal_ / xavier_* refuse the bounds PyTorch refuses, and non-numbers", function()
    local w = accel.zeros(3, 4)
    support.expect_error(function() init.uniform_(w, 1, 0) end,
      "nn.init.uniform_: expects a [from, to) range, but found from=1 > to=0")
    support.expect_error(function() init.uniform_(w, 0 / 0, 1) end, "nn.init.uniform_: expects a [from, to) range")
    support.expect_error(function() init.uniform_(w, {b = "x"}) end, "nn.init.uniform_: b must be a number, got string")
    support.expect_error(function() init.normal_(w, 0, -1) end, "nn.init.normal_: expects std >= 0, but found std -1")
    support.expect_error(function() init.normal_(w, {std = 0 / 0}) end, "nn.init.normal_: expects std >= 0")
    support.expect_error(function() init.normal_(w, "0") end, "nn.init.normal_: mean must be a number, got string")
    support.expect_error(function() init.xavier_uniform_(w, -1) end, "nn.init.xavier_uniform_: expects a [from, to) range")
    support.expect_error(function() init.xavier_normal_(w, {gain = -2}) end, "nn.init.xavier_normal_: expects std >= 0")
    support.expect_error(function() init.orthogonal_(w, true) end, "nn.init.orthogonal_: gain must be a number, got boolean")
    support.expect_error(function() init.trunc_normal_(w, {a = "lo"}) end, "nn.init.trunc_normal_: a must be a number, got string")
    assert.same({{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}}, w:tolist()) -- nothing was written
    assert.same({{2, 2}}, init.uniform_(accel.zeros(1, 2), 2, 2):tolist()) -- an empty range is allowed, as PyTorch's
    assert.same({{5, 5}}, init.normal_(accel.zeros(1, 2), 5, 0):tolist())
  end)

  it("orthogonal_ leaves a zero-element tensor alone, as PyTorch's", function()
    local e = accel.empty(0, 3)
    assert.is_true(rawequal(init.orthogonal_(e), e))
    assert.same({3, 0}, shape_of(init.orthogonal_(accel.empty(3, 0))))
  end)

  it("orthogonal_ gives orthonormal rows or columns", function()
    local tall = init.orthogonal_(accel.empty(6, 4, {dtype = f64}))
    close(tall:t():matmul(tall), accel.zeros(4, 4, {dtype = f64}) + T({{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}), 1e-12)
    local wide = init.orthogonal_(accel.empty(3, 5, {dtype = f64}), 2)
    close(wide:matmul(wide:t()), T({{4, 0, 0}, {0, 4, 0}, {0, 0, 4}}), 1e-12)
  end)

  it("calculate_gain follows PyTorch's table", function()
    assert.equals(1, init.calculate_gain("linear"))
    assert.equals(1, init.calculate_gain("conv2d"))
    assert.equals(1, init.calculate_gain("sigmoid"))
    assert.equals(5 / 3, init.calculate_gain("tanh"))
    assert.equals(math.sqrt(2), init.calculate_gain("relu"))
    assert.equals(math.sqrt(2 / (1 + 0.01 ^ 2)), init.calculate_gain("leaky_relu"))
    assert.equals(math.sqrt(2 / (1 + 0.2 ^ 2)), init.calculate_gain("leaky_relu", 0.2))
    assert.equals(0.75, init.calculate_gain("selu"))
    local ok, err = pcall(function() init.calculate_gain("swish") end)
    assert.is_false(ok)
    assert.matches("unsupported nonlinearity swish", err)
  end)

  it("works on parameters without recording autograd, reproducibly after set_seed", function()
    local p = nn.Parameter(accel.empty(4, 4))
    init.xavier_uniform_(p)
    assert.is_true(p.is_leaf and p.requires_grad)
    assert.is_nil(p.grad_fn)
    accel.set_seed(123)
    local a = init.normal_(accel.empty(10)):clone()
    local l1 = nn.Linear(3, 3)
    accel.set_seed(123)
    local b = init.normal_(accel.empty(10))
    local l2 = nn.Linear(3, 3)
    assert.equals(0, max_abs_diff(a, b))
    assert.equals(0, max_abs_diff(l1.weight, l2.weight))
    -- float64 tensors get float64 draws (not rounded float32 values)
    local d = init.uniform_(accel.empty(1000, {dtype = f64}))
    assert.is_true(max_abs_diff(d, d:float()) > 0)
  end)
end)
