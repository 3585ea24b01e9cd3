-- nn_functional_more_spec.lua: one_hot, pad, cosine_similarity, the
-- softplus / elu / logsigmoid activations, the smooth_l1 / huber / binary
-- cross entropy / kl_div losses and their modules. References: closed
-- forms evaluated here in float64, float64 finite differences, and
-- PyTorch 2.15's printed forms and messages quoted beside them.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local nn, F = accel.nn, accel.nn.functional

local f64 = {dtype = accel.float64}
it = support.lua54_only(it, pending, {
  ["the modules print as PyTorch's and forward as the functions"] =
    "LuaJIT has no float subtype: a default of 1.0 prints as 1, not PyTorch's 1.0",
  ["Upsample prints as PyTorch's"] = "LuaJIT has no float subtype: scale_factor 2 would print as 2, not 2.0",
})
local expect_error = support.expect_error

local close = support.assert_close

-- fn applied to each element of the 1-D list xs
local function map(xs, fn)
  local out = {}
  for i, v in ipairs(xs) do out[i] = fn(v, i) end
  return out
end

local function mean(xs)
  local s = 0
  for _, v in ipairs(xs) do s = s + v end
  return s / #xs
end

-- d/dx sum(fn(x) * w) by central differences, for each element of x (1-D float64)
local function numeric_grad(fn, x, w)
  local xl, g = x:tolist(), {}
  for i = 1, #xl do
    local plus, minus = {}, {}
    for j, v in ipairs(xl) do plus[j], minus[j] = v, v end
    plus[i], minus[i] = xl[i] + 1e-6, xl[i] - 1e-6
    local fp = (fn(accel.tensor(plus, f64)) * w):sum():item()
    local fm = (fn(accel.tensor(minus, f64)) * w):sum():item()
    g[i] = (fp - fm) / 2e-6
  end
  return accel.tensor(g, f64)
end

describe("one_hot and pad", function()
  it("one_hot marks each id, infers num_classes = max + 1, and refuses what torch refuses", function()
    assert.same({{1, 0, 0}, {0, 0, 1}, {0, 1, 0}}, F.one_hot(accel.tensor({0, 2, 1})):tolist())
    local h = F.one_hot(accel.tensor({{0}, {3}}), 5)
    assert.are.equal(accel.int64, h.dtype)
    assert.same({{{1, 0, 0, 0, 0}}, {{0, 0, 0, 1, 0}}}, h:tolist())
    -- torch 2.15's messages
    expect_error(function() local _ = F.one_hot(accel.tensor({0.5}, f64), 3) end, "one_hot: is only applicable to index tensor")
    expect_error(function() local _ = F.one_hot(accel.tensor({-1, 0}), 3) end, "one_hot: Class values must be non-negative.")
    expect_error(function() local _ = F.one_hot(accel.tensor({3}), 3) end, "one_hot: Class values must be smaller than num_classes.")
  end)

  it("pad adds constant borders from the last dim backwards; a negative amount crops", function()
    local x = accel.arange(6):double():view(2, 3)
    -- torch 2.15: F.pad(x, (1, 2)) and F.pad(x, (1, -1, 0, 1), value=9.)
    assert.same({{0, 0, 1, 2, 0, 0}, {0, 3, 4, 5, 0, 0}}, F.pad(x, {1, 2}):tolist())
    assert.same({{9, 0, 1}, {9, 3, 4}, {9, 9, 9}}, F.pad(x, {1, -1, 0, 1}, {value = 9}):tolist())
    assert.same({{9, 0, 1}, {9, 3, 4}, {9, 9, 9}}, F.pad(x, {1, -1, 0, 1}, "constant", 9):tolist())
    local y = x:clone():requires_grad_(true)
    F.pad(y, {2, 1, 1, 0}):sum():backward()
    assert.same({{1, 1, 1}, {1, 1, 1}}, y.grad:tolist())
    expect_error(function() local _ = F.pad(x, {1, 2, 3}) end, "pad: Padding length must be divisible by 2")
    expect_error(function() local _ = F.pad(x, {1, 1}, "symmetric") end, "pad: Unrecognised padding mode symmetric")
  end)

  it("pad reflects, replicates or wraps the last dims, the gradient summed over the copies", function()
    local x = accel.arange(1, 7):double():view(1, 2, 3)
    -- torch 2.15: F.pad(x, (2, 1), 'reflect'), (2, 1) 'replicate', (1, 3) 'circular'
    assert.same({{{3, 2, 1, 2, 3, 2}, {6, 5, 4, 5, 6, 5}}}, F.pad(x, {2, 1}, "reflect"):tolist())
    assert.same({{{1, 1, 1, 2, 3, 3}, {4, 4, 4, 5, 6, 6}}}, F.pad(x, {2, 1}, {mode = "replicate"}):tolist())
    assert.same({{{3, 1, 2, 3, 1, 2, 3}, {6, 4, 5, 6, 4, 5, 6}}}, F.pad(x, {1, 3}, "circular"):tolist())
    -- torch 2.15, x4 = x.view(1, 1, 2, 3): F.pad(x4, (1, 1, 1, 1), 'reflect')
    local x4 = x:view(1, 1, 2, 3)
    assert.same({{{{5, 4, 5, 6, 5}, {2, 1, 2, 3, 2}, {5, 4, 5, 6, 5}, {2, 1, 2, 3, 2}}}},
      F.pad(x4, {1, 1, 1, 1}, "reflect"):tolist())
    -- the gradient of sum(y * arange(y.numel()).view(y.shape)), torch 2.15's values
    local function grad(t, pad, mode)
      local g = t:clone():requires_grad_(true)
      local y = F.pad(g, pad, mode)
      local _ = (y * accel.arange(y:numel()):double():view(y.shape)):sum():backward()
      return g.grad:tolist()
    end
    assert.same({{{{22, 72, 26}, {12, 42, 16}}}}, grad(x4, {1, 1, 1, 1}, "reflect"))
    assert.same({{{3, 3, 22}, {27, 11, 54}}}, grad(x, {2, 3}, "replicate"))
    assert.same({{{9, 12, 7}, {33, 36, 23}}}, grad(x, {3, 2}, "circular"))
    -- torch 2.15's refusals
    expect_error(function() local _ = F.pad(x, {3, 0}, "reflect") end,
      "pad: Padding size should be less than the corresponding input dimension")
    expect_error(function() local _ = F.pad(x, {4, 0}, "circular") end, "pad: Padding value causes wrapping around more than once")
    expect_error(function() local _ = F.pad(accel.zeros(5), {1, 1}, "reflect") end,
      "pad: mode 'reflect' with 1 padded dims expects a 2D or 3D (batched) input, got 1D")
    expect_error(function() local _ = F.pad(x, {1, 1}, "reflect", 2.0) end,
      "pad: Padding mode \"reflect\" doesn't take in value argument")
  end)

  it("the padding modules print as PyTorch's and forward as F.pad", function()
    -- torch 2.15's str() of the same modules
    for _, case in ipairs({{nn.ZeroPad2d(2), "ZeroPad2d((2, 2, 2, 2))"}, {nn.ZeroPad2d({1, 1, 2, 0}), "ZeroPad2d((1, 1, 2, 0))"},
        {nn.ConstantPad1d(2, 3.5), "ConstantPad1d(padding=(2, 2), value=3.5)"},
        {nn.ReflectionPad2d(2), "ReflectionPad2d((2, 2, 2, 2))"}, {nn.ReplicationPad1d({1, 2}), "ReplicationPad1d((1, 2))"},
        {nn.CircularPad2d(1), "CircularPad2d((1, 1, 1, 1))"}}) do
      assert.are.equal(case[2], tostring(case[1]))
    end
    local x = accel.arange(1, 7):double():view(1, 1, 2, 3)
    close(nn.ReflectionPad2d({1, 1, 1, 0})(x), F.pad(x, {1, 1, 1, 0}, "reflect"), 0)
    close(nn.ConstantPad2d(1, -2)(x), F.pad(x, {1, 1, 1, 1}, {value = -2}), 0)
    close(nn.ReplicationPad1d(2)(x[1]), F.pad(x[1], {2, 2}, "replicate"), 0)
    expect_error(function() local _ = nn.ZeroPad2d({1, 2}) end, "ZeroPad2d: padding must be an integer or a list of 4 integers")
    expect_error(function() local _ = nn.ConstantPad1d(2) end, "ConstantPad1d: value must be a number, got nil")
  end)
end)

describe("activations", function()
  local xs = {-30, -2.5, -0.1, 0, 0.7, 4, 25}
  local x = accel.tensor(xs, f64)

  it("softplus, elu and logsigmoid follow their closed forms and differentiate", function()
    close(F.softplus(x), accel.tensor(map(xs, function(v) return v > 20 and v or math.log(1 + math.exp(v)) end), f64), 1e-12)
    close(F.softplus(x, 2, 10), accel.tensor(map(xs, function(v)
      return 2 * v > 10 and v or math.log(1 + math.exp(2 * v)) / 2 end), f64), 1e-12)
    close(F.elu(x, {alpha = 0.5}), accel.tensor(map(xs, function(v) return v > 0 and v or 0.5 * (math.exp(v) - 1) end), f64))
    close(F.logsigmoid(x), accel.tensor(map(xs, function(v) return -math.log(1 + math.exp(-v)) end), f64), 1e-12)
    local w = accel.tensor(map(xs, function(_, i) return i end), f64)
    for _, fn in ipairs({function(t) return F.softplus(t, 1.5) end, function(t) return F.elu(t) end, F.logsigmoid}) do
      local y = x:clone():requires_grad_(true)
      local _ = (fn(y) * w):sum():backward()
      close(y.grad, numeric_grad(fn, x, w), 1e-5)
    end
  end)

  it("softplus of NaN is NaN with a NaN gradient, as torch's", function()
    -- torch 2.15: softplus([nan, -inf, 1]) = [nan, 0, 1.3133], gradient [nan, 0, 0.7311]
    local x = accel.tensor({0 / 0, -math.huge, 1}, {dtype = accel.float64, requires_grad = true})
    local y = F.softplus(x)
    y:sum():backward()
    local v, g = y:tolist(), x.grad:tolist()
    assert.is_true(v[1] ~= v[1] and g[1] ~= g[1], "NaN value and gradient")
    assert.are.same({0, 0}, {v[2], g[2]})
    assert.is_true(math.abs(v[3] - 1.3132616875182228) < 1e-15 and math.abs(g[3] - 0.7310585786300049) < 1e-15)
  end)

  it("softplus of float16 and bfloat16 computes in float32, as torch's (exp(12) overflows float16)", function()
    -- torch 2.15: F.softplus(x, beta, 20) of x = [12, 24.75, 38.5] and the gradient of its sum
    local want = {
      {accel.float16, 0.5, {12.0078125, 24.75, 38.5}, {0.99755859375, 1, 1}},
      {accel.float16, 1, {12, 24.75, 38.5}, {1, 1, 1}},
      {accel.bfloat16, 0.5, {12, 24.75, 38.5}, {0.99609375, 1, 1}},
      {accel.bfloat16, 1, {12, 24.75, 38.5}, {1, 1, 1}},
    }
    for _, c in ipairs(want) do
      local x = accel.tensor({12, 24.75, 38.5}, {dtype = c[1], requires_grad = true})
      local y = F.softplus(x, c[2], 20)
      y:sum():backward()
      local what = c[1].name .. " beta " .. c[2]
      assert.are.equal(c[1], y.dtype, what)
      support.assert_values(c[3], y, 0, what)
      support.assert_values(c[4], x.grad, 0, what .. " gradient")
    end
  end)

  it("the modules print as PyTorch's and forward as the functions", function()
    -- torch 2.15: Softplus(beta=1.0, threshold=20.0) Softplus(beta=2, threshold=10) ELU(alpha=1.0)
    -- ELU(alpha=0.5, inplace=True) LogSigmoid()
    assert.are.equal("Softplus(beta=1.0, threshold=20.0)", tostring(nn.Softplus()))
    assert.are.equal("Softplus(beta=2, threshold=10)", tostring(nn.Softplus(2, 10)))
    assert.are.equal("ELU(alpha=1.0)", tostring(nn.ELU()))
    assert.are.equal("ELU(alpha=0.5, inplace=True)", tostring(nn.ELU({alpha = 0.5, inplace = true})))
    assert.are.equal("LogSigmoid()", tostring(nn.LogSigmoid()))
    close(nn.Softplus(2, 10)(x), F.softplus(x, 2, 10), 0)
    close(nn.ELU(0.5)(x), F.elu(x, 0.5), 0)
  end)

  it("cosine_similarity divides each vector by max(its norm, eps)", function()
    local a = accel.tensor({{1e-5, 0}, {3, 4}}, f64)
    local b = accel.tensor({{1e-5, 1e-5}, {4, 3}}, f64)
    -- row 1: 1e-10 / (max(1e-5, 1e-4) * max(1.41e-5, 1e-4)) = 0.01 (torch 2.15: tensor([0.0100, 0.9600]))
    close(F.cosine_similarity(a, b, 2, 1e-4), accel.tensor({0.01, 24 / 25}, f64), 1e-12)
    -- along dim 1 (columns): (1e-5, 3) . (1e-5, 4) and (0, 4) . (1e-5, 3)
    close(F.cosine_similarity(a, b, {dim = 1}),
      accel.tensor({(1e-10 + 12) / (math.sqrt(1e-10 + 9) * math.sqrt(1e-10 + 16)), 12 / (4 * math.sqrt(1e-10 + 9))}, f64),
      1e-12)
  end)
end)

describe("more losses", function()
  local xs, ts = {0.2, 0.7, 0.9, 0.05}, {0, 1, 1, 0.5}
  local x, t = accel.tensor(xs, f64), accel.tensor(ts, f64)

  it("smooth_l1_loss and huber_loss", function()
    local d = map(xs, function(v, i) return math.abs(v - ts[i]) end)
    local beta, delta = 0.5, 0.3
    local sl1 = map(d, function(v) return v < beta and 0.5 * v * v / beta or v - 0.5 * beta end)
    local hub = map(d, function(v) return v <= delta and 0.5 * v * v or delta * (v - 0.5 * delta) end)
    close(F.smooth_l1_loss(x, t, {beta = beta}), accel.tensor(mean(sl1), f64))
    close(F.smooth_l1_loss(x, t, {beta = 0}), accel.tensor(mean(d), f64))
    close(F.huber_loss(x, t, {delta = delta, reduction = "none"}), accel.tensor(hub, f64))
    close(nn.HuberLoss({delta = delta})(x, t), accel.tensor(mean(hub), f64))
    close(nn.SmoothL1Loss({beta = beta, reduction = "sum"})(x, t), accel.tensor(mean(sl1) * 4, f64))
    expect_error(function() local _ = F.huber_loss(x, t, {delta = -1}) end, "huber_loss: delta must be a non-negative number")
    -- torch 2.15: "huber_loss does not support non-positive values for delta."
    expect_error(function() local _ = F.huber_loss(x, t, {delta = 0}) end, "does not support non-positive values for delta")
  end)

  it("binary_cross_entropy, its weight, the -100 log clamp and the [0, 1] check", function()
    local bce = map(xs, function(v, i) return -(ts[i] * math.log(v) + (1 - ts[i]) * math.log(1 - v)) end)
    close(F.binary_cross_entropy(x, t), accel.tensor(mean(bce), f64))
    local w = accel.tensor({1, 2, 3, 4}, f64)
    close(nn.BCELoss(w)(x, t), accel.tensor(mean(map(bce, function(v, i) return v * i end)), f64))
    -- a 0 or 1 probability: log clamped at -100 (torch 2.15: F.binary_cross_entropy([0, 1, 0.3], [1, 1, 0]) = 33.4522)
    close(F.binary_cross_entropy(accel.tensor({0, 1, 0.3}, f64), accel.tensor({1, 1, 0}, f64)),
      accel.tensor((100 + 0 - math.log(0.7)) / 3, f64))
    expect_error(function() local _ = F.binary_cross_entropy(accel.tensor({1.5}, f64), accel.tensor({1}, f64)) end,
      "binary_cross_entropy: all elements of input should be between 0 and 1")
    assert.same({"weight"}, (function() local k = {} for n in pairs(nn.BCELoss(w):state_dict()) do k[#k + 1] = n end return k end)())
    -- torch 2.15: "Using a target size (torch.Size([4])) that is different to the input size (torch.Size([5, 4]))
    -- is deprecated. Please ensure they have the same size."; a weight larger than the input: "output with
    -- shape [4, 3] doesn't match the broadcast shape [2, 4, 3]"
    expect_error(function() local _ = F.binary_cross_entropy(accel.rand(5, 4), accel.rand(4)) end,
      "Using a target size ([4]) that is different to the input size ([5, 4])")
    expect_error(function() local _ = F.binary_cross_entropy(accel.rand(4, 3), accel.rand(4, 3), {weight = accel.rand(2, 4, 3)}) end,
      "binary_cross_entropy: weight of shape [2, 4, 3] does not broadcast to the input's shape [4, 3]")
  end)

  -- torch 2.15, x = [1, 0, 1, 0, 1e-30, 0.5], t = [1, 0, 0, 1, 1, 0.3] (float64), mean reduction:
  -- loss 44.96178332839688, x.grad [0, 0, 1.6666666733263382e11, -1.6666666733263382e11,
  -- -1.6666666733263382e11, 0.13333333333333333], t.grad [-inf, inf, -inf, inf, 11.512925464970229, -0]
  it("binary_cross_entropy's gradients are PyTorch's at probabilities of 0 and 1 (no NaN)", function()
    local xp = accel.tensor({1, 0, 1, 0, 1e-30, 0.5}, f64):requires_grad_(true)
    local tp = accel.tensor({1, 0, 0, 1, 1, 0.3}, f64):requires_grad_(true)
    local loss = F.binary_cross_entropy(xp, tp)
    loss:backward()
    assert.is_true(math.abs(loss:item() - 44.96178332839688) < 1e-12)
    close(xp.grad, accel.tensor({0, 0, 1.6666666733263382e11, -1.6666666733263382e11, -1.6666666733263382e11,
      0.13333333333333333}, f64), 1e-3)
    assert.are.same({-math.huge, math.huge, -math.huge, math.huge}, {tp.grad[1]:item(), tp.grad[2]:item(),
      tp.grad[3]:item(), tp.grad[4]:item()})
    assert.is_true(math.abs(tp.grad[5]:item() - 11.512925464970229) < 1e-12)
    -- a sigmoid saturated to 1.0 in float32 (torch 2.15: z.grad [2.9187e-15, -0.1667, 0])
    local f32 = {dtype = accel.float32}
    local z = accel.tensor({-30, 0, 30}, f32):requires_grad_(true)
    F.binary_cross_entropy(z:sigmoid(), accel.tensor({0, 1, 1}, f32)):backward()
    assert.is_false(z.grad:isnan():any():item())
    assert.are.equal(0, z.grad[3]:item())
    assert.is_true(math.abs(z.grad[2]:item() + 1 / 6) < 1e-7)
  end)

  -- torch 2.15: BatchNorm1d(3) of a (2, 4) input: "running_mean should contain 4 elements not 3"; GroupNorm(2, 4) of
  -- (1, 6, 1): "Expected weight to be a vector of size equal to the number of channels in input, but got weight of
  -- shape [4] and input of shape [1, 6, 1]"
  it("batch_norm and group_norm name a channel count that does not fit", function()
    expect_error(function() local _ = nn.BatchNorm1d(3)(accel.ones(2, 4)) end, "running_mean should contain 4 elements not 3")
    expect_error(function() local _ = nn.GroupNorm(2, 4)(accel.ones(1, 6, 1)) end,
      "Expected weight to be a vector of size equal to the number of channels in input", "shape [4]", "[1, 6, 1]")
  end)

  it("kl_div of log-probabilities, with batchmean and log_target", function()
    local lp = x:log()
    local terms = map(ts, function(v, i) return v == 0 and 0 or v * (math.log(v) - math.log(xs[i])) end)
    local sum = 0
    for _, v in ipairs(terms) do sum = sum + v end
    close(F.kl_div(lp, t, {reduction = "sum"}), accel.tensor(sum, f64), 1e-12)
    close(F.kl_div(lp:view(2, 2), t:view(2, 2), {reduction = "batchmean"}), accel.tensor(sum / 2, f64), 1e-12)
    close(nn.KLDivLoss({reduction = "batchmean"})(lp:view(2, 2), t:view(2, 2)), accel.tensor(sum / 2, f64), 1e-12)
    local lt = accel.tensor({-1, -2, -0.5, -3}, f64)
    local want = 0
    for i, v in ipairs(lt:tolist()) do want = want + math.exp(v) * (v - math.log(xs[i])) end
    close(F.kl_div(lp, lt, {reduction = "sum", log_target = true}), accel.tensor(want, f64), 1e-12)
    expect_error(function() local _ = F.kl_div(lp, t, {log_target = 1}) end, "kl_div: log_target must be a boolean")
    expect_error(function() local _ = F.kl_div(lp, t, {reduction = "bad"}) end, '"mean", "batchmean", "sum" or "none"')
  end)
end)

-- torch 2.15: x = arange(96.).view(2, 8, 2, 3); pixel_shuffle(x, 2) has shape [2, 2, 4, 6], y[0, 0, 0] =
-- [0, 6, 1, 7, 2, 8], y[0, 0, 1] = [12, 18, 13, 19, 14, 20], y[1, 1, 1] = [84, 90, 85, 91, 86, 92];
-- pixel_unshuffle(y, 2) == x; an unbatched (4, 1, 1) input gives [[[0, 1], [2, 3]]]
describe("pixel_shuffle and pixel_unshuffle", function()
  it("match PyTorch's element order, invert each other and carry gradients", function()
    local x = accel.arange(96):view(2, 8, 2, 3):double():requires_grad_(true)
    local y = F.pixel_shuffle(x, 2)
    assert.are.same({2, 2, 4, 6}, {y:size(1), y:size(2), y:size(3), y:size(4)})
    assert.are.same({{0, 6, 1, 7, 2, 8}, {12, 18, 13, 19, 14, 20}}, {y[1][1][1]:tolist(), y[1][1][2]:tolist()})
    assert.are.same({84, 90, 85, 91, 86, 92}, y[2][2][2]:tolist())
    assert.is_true(F.pixel_unshuffle(y, 2):equal(x))
    assert.are.same({{{0, 1}, {2, 3}}}, nn.PixelShuffle(2)(accel.arange(4):view(4, 1, 1)):tolist())
    local _ = (nn.PixelUnshuffle(2)(y) * x:detach()):sum():backward()
    close(x.grad, x:detach())
    assert.are.equal("PixelShuffle(upscale_factor=3)", tostring(nn.PixelShuffle(3)))
    assert.are.equal("PixelUnshuffle(downscale_factor=2)", tostring(nn.PixelUnshuffle(2)))
    -- torch: "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of upscale_factor,
    -- but input.size(-3)=3 is not divisible by 4"
    expect_error(function() local _ = F.pixel_shuffle(accel.ones(1, 3, 2, 2), 2) end, "input.size(-3)=3 is not divisible by 4")
    expect_error(function() local _ = F.pixel_unshuffle(accel.ones(1, 3, 3, 2), 2) end,
      "expects height to be divisible by downscale_factor, but input.size(-2)=3 is not divisible by 2")
  end)
end)

describe("interpolate and Upsample", function()
  local x = accel.arange(12):double():view(1, 1, 3, 4)

  it("nearest picks floor(i * in / out) (PyTorch 2.15's results)", function()
    assert.same({0, 0, 1, 1, 2, 2, 3, 3}, F.interpolate(x, {scale_factor = 2})[1][1][1]:tolist())
    assert.same({{{{0, 1, 2}, {0, 1, 2}, {4, 5, 6}, {4, 5, 6}, {8, 9, 10}}}}, F.interpolate(x, {size = {5, 3}}):tolist())
  end)

  it("bilinear and linear interpolate between the neighbours of (i + 0.5) * scale - 0.5", function()
    -- closed form of the (rows, columns) source positions, align_corners false and true
    local function expect(align)
      local want = {}
      for i = 0, 4 do
        want[i + 1] = {}
        local r = align and i * 2 / 4 or math.max((i + 0.5) * 3 / 5 - 0.5, 0)
        for j = 0, 5 do
          local c = align and j * 3 / 5 or math.max((j + 0.5) * 4 / 6 - 0.5, 0)
          local function at(rr, cc) return 4 * math.min(rr, 2) + math.min(cc, 3) end
          local r0, c0 = math.floor(r), math.floor(c)
          local wr, wc = r - r0, c - c0
          want[i + 1][j + 1] = (1 - wr) * ((1 - wc) * at(r0, c0) + wc * at(r0, c0 + 1))
            + wr * ((1 - wc) * at(r0 + 1, c0) + wc * at(r0 + 1, c0 + 1))
        end
      end
      return accel.tensor({{want}}, f64)
    end
    close(F.interpolate(x, {size = {5, 6}, mode = "bilinear"}), expect(false), 1e-12)
    close(F.interpolate(x, {size = {5, 6}, mode = "bilinear", align_corners = true}), expect(true), 1e-12)
    -- torch 2.15: F.interpolate(torch.arange(5.).view(1, 1, 5), scale_factor=1.5, mode='linear') (scale 1 / 1.5)
    close(F.interpolate(accel.arange(5):double():view(1, 1, 5), {scale_factor = 1.5, mode = "linear"}),
      accel.tensor({{{0, 0.5, 7 / 6, 11 / 6, 2.5, 19 / 6, 23 / 6}}}, f64), 1e-12)
    local g = x:clone():requires_grad_(true)
    F.interpolate(g, {scale_factor = 2, mode = "bilinear"}):sum():backward()
    close(g.grad:sum(), accel.tensor(48, f64), 1e-12) -- each output spreads weight 1 over its sources
    expect_error(function() local _ = F.interpolate(x, {scale_factor = 2, mode = "cubic"}) end, "interpolate: mode 'cubic' is not supported")
    expect_error(function() local _ = F.interpolate(x, {scale_factor = 2, mode = "linear"}) end, "interpolate: mode 'linear' expects a 3D input")
    expect_error(function() local _ = F.interpolate(x) end, "interpolate: either size or scale_factor should be defined")
  end)

  it("a scale_factor that keeps a dim's size or doubles it follows ATen's rule per mode and dims", function()
    local x3 = accel.arange(3):double():view(1, 1, 3)
    local x5 = accel.arange(5):double():view(1, 1, 5)
    -- torch 2.15: nearest 1-D / 3-D take floor(i / scale_factor) also then: [0, 0, 1] and
    -- [0, 0, 0, 1, 1, 2, 2, 3, 3, 4]; 2-D copies a kept size and takes i // 2 for a doubled one
    assert.same({0, 0, 1}, F.interpolate(x3, {scale_factor = 1.25}):flatten():tolist())
    assert.same({0, 0, 1}, nn.Upsample({scale_factor = 1.25})(x3):flatten():tolist())
    assert.same({0, 0, 1}, F.interpolate(x3:view(1, 1, 1, 1, 3), {scale_factor = 1.25}):flatten():tolist())
    assert.same({0, 0, 0, 1, 1, 2, 2, 3, 3, 4}, F.interpolate(x5, {scale_factor = 2.1}):flatten():tolist())
    assert.same({0, 1, 2}, F.interpolate(x3:view(1, 1, 1, 3), {scale_factor = 1.25}):flatten():tolist())
    assert.same({0, 0, 1, 1, 2, 2, 3, 3, 4, 4}, F.interpolate(x5:view(1, 1, 1, 5), {scale_factor = {1, 2.1}}):flatten():tolist())
    -- torch 2.15: recompute_scale_factor=True resizes by in / out: [0, 1, 2]
    assert.same({0, 1, 2}, F.interpolate(x3, {scale_factor = 1.25, recompute_scale_factor = true}):flatten():tolist())
    expect_error(function() local _ = F.interpolate(x3, {size = 4, recompute_scale_factor = true}) end,
      "interpolate: recompute_scale_factor is not meaningful with an explicit size")
    -- the gradient is the forward's (out = x[0, 0, 1] weighted 1, 2, 3: 3, 3, 0); torch 2.15's
    -- backward of 1-D / 3-D nearest copies instead here ([1, 2, 3]), unlike its forward
    local g = x3:clone():requires_grad_(true)
    local out = F.interpolate(g, {scale_factor = 1.25}) * accel.tensor({1, 2, 3}, f64)
    out:sum():backward()
    assert.same({3, 3, 0}, g.grad:flatten():tolist())
    -- torch 2.15: the linear modes copy a kept dim: linear [0, 1, 2], and with gradient [1, 2, 3]
    local l = x3:clone():requires_grad_(true)
    local y = F.interpolate(l, {scale_factor = 1.25, mode = "linear"})
    close(y, accel.tensor({{{0, 1, 2}}}, f64), 0)
    out = y * accel.tensor({1, 2, 3}, f64)
    out:sum():backward()
    close(l.grad, accel.tensor({{{1, 2, 3}}}, f64), 0)
    -- torch 2.15: bilinear (2.0, 1.25) and trilinear (1.0, 2.0, 1.25) of arange(6) as (2, 3)
    local want = accel.tensor({0, 1, 2, 0.75, 1.75, 2.75, 2.25, 3.25, 4.25, 3, 4, 5}, f64)
    local b = accel.arange(6):double():view(1, 1, 2, 3):requires_grad_(true)
    y = F.interpolate(b, {scale_factor = {2.0, 1.25}, mode = "bilinear", align_corners = false})
    close(y:flatten(), want, 1e-12)
    close(F.interpolate(b:detach():view(1, 1, 1, 2, 3), {scale_factor = {1.0, 2.0, 1.25}, mode = "trilinear"}):flatten(),
      want, 1e-12)
    -- torch 2.15: the gradient of sum(y * (1 .. 12)) is [5.75, 7.75, 9.75, 16.25, 18.25, 20.25]
    out = y * accel.arange(1, 13):double():view(1, 1, 4, 3)
    out:sum():backward()
    close(b.grad:flatten(), accel.tensor({5.75, 7.75, 9.75, 16.25, 18.25, 20.25}, f64), 1e-12)
    -- torch 2.15: linear 1.5 with recompute_scale_factor=True: 7 outputs at step 5 / 7
    close(F.interpolate(x5, {scale_factor = 1.5, mode = "linear", recompute_scale_factor = true}):flatten(),
      accel.tensor({0, 4 / 7, 9 / 7, 2, 19 / 7, 24 / 7, 4}, f64), 1e-12)
  end)

  it("Upsample prints as PyTorch's", function()
    -- torch 2.15: Upsample(scale_factor=2.0, mode='nearest') Upsample(size=(4, 4), mode='bilinear')
    assert.are.equal("Upsample(scale_factor=2.0, mode='nearest')", tostring(nn.Upsample({scale_factor = 2})))
    assert.are.equal("Upsample(size=(4, 4), mode='bilinear')",
      tostring(nn.Upsample({size = {4, 4}, mode = "bilinear", align_corners = true})))
    close(nn.Upsample({scale_factor = 2})(x), F.interpolate(x, {scale_factor = 2}), 0)
    -- torch 2.15: nn.Upsample(None, 2) is Upsample(scale_factor=2.0, mode='nearest') (PyTorch's positional order)
    close(nn.Upsample(nil, 2)(x), F.interpolate(x, {scale_factor = 2}), 0)
    close(nn.Upsample({4, 4}, nil, "bilinear")(x), F.interpolate(x, {size = {4, 4}, mode = "bilinear"}), 0)
  end)
end)

describe("cosine_similarity across ranks", function()
  it("broadcasts first, dim counting in the broadcast shape", function()
    local x = accel.tensor({{{1, 0}, {0, 1}}, {{1, 1}, {1, 0}}}, f64)
    local y = accel.tensor({{1, 0}, {1, 1}}, f64)
    -- torch 2.15: F.cosine_similarity(x, y, dim=1) = [[0.7071, 1.0000], [1.0000, 0.0000]]
    local r = math.sqrt(0.5)
    close(F.cosine_similarity(x, y, {dim = 2}), accel.tensor({{r, 1}, {1, 0}}, f64), 1e-12)
    close(F.cosine_similarity(x, y), accel.tensor({{r, 1}, {1, 0}}, f64), 1e-12)
    close(F.cosine_similarity(y, x, 2), accel.tensor({{r, 1}, {1, 0}}, f64), 1e-12)
  end)
end)

describe("argument kinds", function()
  -- PyTorch's TypeError for an argument of the wrong kind, e.g. torch 2.15:
  -- F.softplus(x, "a") -> "softplus(): argument 'beta' must be Number, not str"
  it("a positional or keyword argument of the wrong kind is refused by name", function()
    local x = accel.randn(2, 3)
    expect_error(function() local _ = F.softplus(x, "a") end, "softplus: argument 'beta' must be a number, got string")
    expect_error(function() local _ = F.elu(x, {inplace = 1}) end, "elu: argument 'inplace' must be a boolean, got number")
    expect_error(function() local _ = F.cosine_similarity(x, x, 1.5) end, "cosine_similarity: argument 'dim' must be an integer")
    expect_error(function() local _ = F.interpolate(x:view(1, 2, 3), {size = 4, mode = "linear", align_corners = 1}) end,
      "interpolate: argument 'align_corners' must be a boolean, got number")
    expect_error(function() local _ = F.group_norm(x, 1, {weight = 1}) end, "group_norm: argument 'weight' must be a Tensor, got number")
    expect_error(function() local _ = x:topk(1, "a") end, "topk: argument 'dim' must be an integer, got string")
    expect_error(function() local _ = nn.GRU(3, 4, {batch_first = 1}) end, "GRU: argument 'batch_first' must be a boolean, got number")
    expect_error(function() local _ = nn.TransformerEncoderLayer(4, 2, {activation = 3}) end,
      "TransformerEncoderLayer: argument 'activation' must be a string or a function, got number")
    -- PyTorch names accel-lua lacks are named errors, not nil
    expect_error(function() local _ = nn.LazyLinear(2) end, "accel.nn.LazyLinear is not provided")
    expect_error(function() local _ = nn.utils.rnn.pack_padded_sequence end,
      "accel.nn.utils.rnn.pack_padded_sequence is not provided")
    expect_error(function() local _ = nn.utils.weight_norm end, "accel.nn.utils.weight_norm is not provided")
    expect_error(function() local _ = nn.init.dirac_ end, "accel.nn.init.dirac_ is not provided")
    assert.is_nil(nn.NoSuchModule)
    -- the right kinds pass, nil meaning "not given"
    assert.are.equal(2, #F.softplus(x, 2, nil).shape)
    assert.are.equal(3, nn.GRU(3, 4, {batch_first = true}).input_size)
  end)
end)
