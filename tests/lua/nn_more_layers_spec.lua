-- nn_more_layers_spec.lua: Bilinear, Softmax2d, PoissonNLLLoss,
-- GaussianNLLLoss, AdaptiveMaxPool2d / 1d, Unfold / Fold, LocalResponseNorm
-- and gumbel_softmax (accel.nn.bilinear, accel.nn.activations,
-- accel.nn.likelihood_loss, accel.nn.adaptive_max_pool, accel.nn.fold,
-- accel.nn.normalization) against PyTorch 2.15: outputs and input
-- gradients from tests/fixtures/more_layers.safetensors
-- (scripts/fixtures/make_more_layers_fixtures.py), printed forms and
-- PyTorch's messages quoted beside them.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local nn, F = accel.nn, accel.nn.functional
local expect_error = support.expect_error
it = support.lua54_only(it, pending, {
  ["Unfold, Fold and LocalResponseNorm print as PyTorch's"] = support.NO_FLOAT_SUBTYPE,
})

local ref = accel.load("tests/fixtures/more_layers.safetensors")

-- Must match CASES in the fixture script.
local CASES = {
  bilinear = function(a, b, w, bias) return F.bilinear(a, b, w, bias) end,
  bilinear_nobias_batched = function(a, b, w) return F.bilinear(a, b, w) end,
  softmax2d = function(x) return nn.Softmax2d()(x) end,
  poisson_log = function(x, t) return F.poisson_nll_loss(x, t) end,
  poisson_full_sum = function(x, t) return nn.PoissonNLLLoss({full = true, reduction = "sum"})(x, t) end,
  poisson_rate = function(x, t) return F.poisson_nll_loss(x, t, false, {reduction = "none"}) end,
  gaussian = function(x, t, v) return nn.GaussianNLLLoss()(x, t, v) end,
  gaussian_full_lead = function(x, t, v) return F.gaussian_nll_loss(x, t, v, true, {reduction = "none"}) end,
  gaussian_last_one_eps = function(x, t, v) return F.gaussian_nll_loss(x, t, v, {eps = 0.5, reduction = "sum"}) end,
  adaptive_max2d = function(x) return F.adaptive_max_pool2d(x, {3, 2}, true) end,
  adaptive_max2d_ties = function(x) return nn.AdaptiveMaxPool2d(2, {return_indices = true})(x) end,
  adaptive_max2d_keep_h = function(x) return nn.AdaptiveMaxPool2d({nil, 2})(x) end,
  adaptive_max1d = function(x) return F.adaptive_max_pool1d(x, 4, {return_indices = true}) end,
  adaptive_max3d = function(x) return F.adaptive_max_pool3d(x, {2, 3, 2}, true) end,
  adaptive_max3d_ties = function(x) return nn.AdaptiveMaxPool3d(2, {return_indices = true})(x) end,
  unfold = function(x) return nn.Unfold({2, 3}, {dilation = {1, 2}, padding = 1, stride = {2, 1}})(x) end,
  unfold_unbatched = function(x) return F.unfold(x, 2) end,
  fold = function(x) return F.fold(x, {5, 6}, {2, 3}, {1, 2}, 1, {2, 1}) end,
  fold_uncovered = function(x) return nn.Fold({5, 5}, 2, {stride = 2})(x) end,
  local_response_norm = function(x) return nn.LocalResponseNorm(3, 0.1, 0.75, 1.0)(x) end,
  local_response_norm_4d = function(x) return F.local_response_norm(x, 2) end,
  bag_sum_offsets = function(i, w, o) return F.embedding_bag(i, w, o, {mode = "sum"}) end,
  bag_mean_2d_padding = function(i, w) return F.embedding_bag(i, w, {mode = "mean", padding_idx = 0}) end,
  bag_max_empty = function(i, w, o) return F.embedding_bag(i, w, o, {mode = "max"}) end,
  bag_weighted_last = function(i, w, o, s)
    return F.embedding_bag(i, w, o, {mode = "sum", per_sample_weights = s, include_last_offset = true})
  end,
  pdist = function(x) return F.pdist(x) end,
  pdist_p1 = function(x) return F.pdist(x, 1.0) end,
  lp_pool2d = function(x) return nn.LPPool2d(2, 2)(x) end,
  lp_pool1d = function(x) return F.lp_pool1d(x, 3.0, 3, {stride = 2}) end,
  lp_pool3d = function(x) return nn.LPPool3d(2, {2, 3, 2}, {1, 2, 2})(x) end,
  lp_pool3d_ceil = function(x) return nn.LPPool3d(3.0, 2, {ceil_mode = true})(x) end,
  multi_margin = function(x, y) return nn.MultiMarginLoss()(x, y) end,
  multi_margin_p2_weight = function(x, y, w) return F.multi_margin_loss(x, y, 2, 0.5, w, {reduction = "none"}) end,
  multilabel_margin = function(x, y) return nn.MultiLabelMarginLoss()(x, y) end,
  rrelu_eval = function(x) local m = nn.RReLU(0.1, 0.3); m:eval(); return m(x) end,
  max_unpool2d = function(v, i) return nn.MaxUnpool2d(2)(v, i) end,
  max_unpool2d_size = function(v, i) return F.max_unpool2d(v, i, 3, 2, {output_size = {8, 8}}) end,
  max_unpool1d = function(v, i) return F.max_unpool1d(v, i, 3) end,
  max_unpool3d = function(v, i) return nn.MaxUnpool3d(2)(v, i, {5, 4, 5}) end,
  conv3d = function(x, w, b) return F.conv3d(x, w, b, {2, 1, 1}, 1, {1, 2, 1}) end,
  conv3d_groups_unbatched = function(x, w) return F.conv3d(x, w, {groups = 2}) end,
  max_pool3d = function(x) return nn.MaxPool3d(2, {1, 2, 2}, 1)(x) end,
  max_pool3d_ties = function(x) return F.max_pool3d(x, 2) end,
  avg_pool3d = function(x) return F.avg_pool3d(x, {2, 3, 2}, {padding = {1, 1, 0}}) end,
  adaptive_avg_pool3d = function(x) return nn.AdaptiveAvgPool3d({2, 3, 2})(x) end,
  max_pool3d_dilated_ceil_indices = function(x)
    return F.max_pool3d(x, {2, 3, 2}, {2, 2, 1}, {1, 1, 0}, {dilation = {2, 1, 2}, ceil_mode = true, return_indices = true})
  end,
  max_pool3d_overlap_ties_indices = function(x) return nn.MaxPool3d(2, 1, 1, {return_indices = true})(x) end,
  max_pool3d_unbatched_ceil = function(x) return nn.MaxPool3d(3, 2, {ceil_mode = true})(x) end,
  avg_pool3d_ceil_exclude_pad = function(x)
    return nn.AvgPool3d(3, 2, 1, {ceil_mode = true, count_include_pad = false})(x)
  end,
  avg_pool3d_ceil_include_pad = function(x) return F.avg_pool3d(x, {2, 3, 3}, {2, 2, 2}, {1, 1, 0}, true) end,
  avg_pool3d_divisor = function(x)
    return F.avg_pool3d(x, {2, 2, 3}, {stride = {2, 1, 2}, ceil_mode = true, divisor_override = 5})
  end,
  max_unpool3d_overlap = function(v, i) return F.max_unpool3d(v, i, 2, 1, {output_size = {3, 4, 4}}) end,
  sdpa_gqa = function(q, k, v) return F.scaled_dot_product_attention(q, k, v, {enable_gqa = true}) end,
  sdpa_gqa_causal_one_kv = function(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, {is_causal = true, enable_gqa = true})
  end,
  sdpa_gqa_mask_unbatched = function(q, k, v, m)
    return F.scaled_dot_product_attention(q, k, v, {attn_mask = m, enable_gqa = true})
  end,
}

dofile("tests/lua/torch_cases.lua").describe(describe, it, "more layers and losses match PyTorch",
  ref, CASES, 1e-12)

describe("more layers and losses: modules and details", function()
  it("print as PyTorch's; Bilinear's weight and its initialisation bound", function()
    -- torch 2.15: Bilinear(in1_features=3, in2_features=4, out_features=5, bias=True), PoissonNLLLoss(),
    -- GaussianNLLLoss(), Softmax2d()
    assert.are.equal("Bilinear(in1_features=3, in2_features=4, out_features=5, bias=True)", tostring(nn.Bilinear(3, 4, 5)))
    assert.are.equal("PoissonNLLLoss()", tostring(nn.PoissonNLLLoss()))
    assert.are.equal("GaussianNLLLoss()", tostring(nn.GaussianNLLLoss()))
    assert.are.equal("Softmax2d()", tostring(nn.Softmax2d()))
    -- torch 2.15: AdaptiveMaxPool2d(output_size=(5, 7)), AdaptiveMaxPool1d(output_size=3)
    assert.are.equal("AdaptiveMaxPool2d(output_size=(5, 7))", tostring(nn.AdaptiveMaxPool2d({5, 7})))
    -- torch 2.15: AdaptiveMaxPool3d(output_size=(2, None, 3)), AdaptiveMaxPool2d(output_size=(None, 2))
    assert.are.equal("AdaptiveMaxPool3d(output_size=(2, None, 3))", tostring(nn.AdaptiveMaxPool3d({2, nil, 3})))
    assert.are.equal("AdaptiveMaxPool2d(output_size=(None, 2))", tostring(nn.AdaptiveMaxPool2d({nil, 2})))
    assert.are.equal("AdaptiveMaxPool1d(output_size=3)", tostring(nn.AdaptiveMaxPool1d(3)))
    accel.set_seed(2)
    local m = nn.Bilinear(3, 4, 5, false)
    assert.are.same({5, 3, 4}, {m.weight:size(1), m.weight:size(2), m.weight:size(3)})
    assert.is_nil(m.bias)
    assert.is_true(m.weight:abs():max():item() <= 1 / math.sqrt(3))
  end)

  it("Unfold, Fold and LocalResponseNorm print as PyTorch's", function()
    -- torch 2.15: Unfold(kernel_size=(2, 3), dilation=1, padding=0, stride=1), Fold(output_size=(4, 5),
    -- kernel_size=(2, 2), dilation=1, padding=0, stride=1), LocalResponseNorm(2, alpha=0.0001, beta=0.75, k=1.0)
    assert.are.equal("Unfold(kernel_size=(2, 3), dilation=1, padding=0, stride=1)", tostring(nn.Unfold({2, 3})))
    assert.are.equal("Fold(output_size=(4, 5), kernel_size=(2, 2), dilation=1, padding=0, stride=1)",
      tostring(nn.Fold({4, 5}, {2, 2})))
    assert.are.equal("LocalResponseNorm(2, alpha=0.0001, beta=0.75, k=1.0)", tostring(nn.LocalResponseNorm(2)))
  end)

  it("gumbel_softmax: soft samples sum to 1, hard ones are one-hot with the soft sample's gradient", function()
    accel.set_seed(4)
    local logits = accel.randn(5, 4, {dtype = accel.float64}):requires_grad_(true)
    local soft = F.gumbel_softmax(logits, {tau = 0.5})
    support.assert_close(soft:sum(-1), accel.ones(5, {dtype = accel.float64}), 1e-12)
    local hard = F.gumbel_softmax(logits, {hard = true})
    assert.is_true(hard:eq(0):logical_or(hard:eq(1)):all():item())
    support.assert_close(hard:sum(-1), accel.ones(5, {dtype = accel.float64}), 0)
    local _ = (hard * accel.arange(4):double()):sum():backward()
    assert.is_true(logits.grad:abs():sum():item() > 0)
  end)

  it("EmbeddingBag: printed form, padding row, forward as the function", function()
    -- torch 2.15: EmbeddingBag(10, 3, mode='mean'), EmbeddingBag(10, 3, mode='sum', padding_idx=0)
    assert.are.equal("EmbeddingBag(10, 3, mode='mean')", tostring(nn.EmbeddingBag(10, 3)))
    local m = nn.EmbeddingBag(10, 3, {mode = "sum", padding_idx = 0})
    assert.are.equal("EmbeddingBag(10, 3, mode='sum', padding_idx=0)", tostring(m))
    assert.are.same({0, 0, 0}, m.weight[1]:tolist())
    local ids, offsets = accel.tensor({1, 2, 4, 5}), accel.tensor({0, 2})
    support.assert_close(m(ids, offsets), F.embedding_bag(ids, m.weight, offsets, {mode = "sum"}), 0)
    -- torch: "per_sample_weights was not None. per_sample_weights is only supported for mode='sum' (got mode='mean')"
    expect_error(function() local _ = F.embedding_bag(ids, m.weight, offsets, {per_sample_weights = accel.ones(4)}) end,
      "per_sample_weights is only supported for mode='sum' (got mode='mean')")
    -- torch: "offsets has to be a 1D Tensor but got None"
    expect_error(function() local _ = F.embedding_bag(ids, m.weight) end, "offsets has to be a 1D Tensor but got None")
    expect_error(function() local _ = F.embedding_bag(ids, m.weight, accel.tensor({1})) end, "offsets[0] has to be 0")
  end)

  it("EmbeddingBag max: a call whose bags are all empty still needs a gradient (zero), as PyTorch's", function()
    -- torch 2.15: EmbeddingBag(3, 2, mode='max', padding_idx=2)(tensor([[2, 2]])) is [[0., 0.]] with
    -- requires_grad True, and out.sum().backward() leaves weight.grad all 0; the same for input [] with
    -- offsets [0, 0] ([[0, 0], [0, 0]]) and for offsets [] (shape (0, 2))
    local m = nn.EmbeddingBag(3, 2, {mode = "max", padding_idx = 2})
    local no_ids = accel.tensor({}, {dtype = accel.int64})
    local outs = {m(accel.tensor({{2, 2}})), m(no_ids, accel.tensor({0, 0})), m(no_ids, no_ids)}
    local zeros = {{{0, 0}}, {{0, 0}, {0, 0}}, {}}
    for i, out in ipairs(outs) do
      assert.is_true(out.requires_grad)
      assert.are.same(zeros[i], out:tolist())
      out:sum():backward()
      assert.are.same({{0, 0}, {0, 0}, {0, 0}}, m.weight.grad:tolist())
    end
  end)

  it("rrelu: x = 0 takes the slope (PyTorch's x <= 0), in eval and in training", function()
    -- torch 2.15, x = [-1, 0, 2, -0.0] float64, y:sum():backward(): F.rrelu (eval) y = [-0.22916666666666666,
    -- 0, 2, -0], grad [0.22916666666666666, 0.22916666666666666, 1, 0.22916666666666666]; F.rrelu(x, 0.2,
    -- 0.2, true) grad [0.2, 0.2, 1, 0.2]; nn.RReLU(0.3, 0.3) in training, (y * [1, 2, 3, 4]):sum() grad
    -- [0.3, 0.6, 3, 1.2]
    local function grad_of(f, w)
      local x = accel.tensor({-1, 0, 2, -0.0}, {dtype = accel.float64, requires_grad = true})
      local y = f(x)
      local _ = (w and y * accel.tensor(w, {dtype = accel.float64}) or y):sum():backward()
      return x.grad:tolist(), y
    end
    local s = (1 / 8 + 1 / 3) / 2
    local g, y = grad_of(F.rrelu)
    assert.are.same({s, s, 1, s}, g)
    assert.are.same({-s, 0, 2, 0}, y:tolist())
    assert.are.equal(-math.huge, 1 / y[4]:item()) -- (-0.0 stays -0.0)
    assert.are.same({s, s, 1, s}, (grad_of(function(x) return nn.RReLU():eval()(x) end)))
    assert.are.same({0.2, 0.2, 1, 0.2}, (grad_of(function(x) return F.rrelu(x, 0.2, 0.2, true) end)))
    assert.are.same({0.3, 0.6, 3, 1.2}, (grad_of(nn.RReLU(0.3, 0.3), {1, 2, 3, 4})))
  end)

  it("pdist(x, inf): every element tied for the maximum gets the whole gradient, as PyTorch's", function()
    -- torch 2.15: F.pdist([[0, 0, 0], [1, 2, 2]], inf) = [2], sum():backward() grad [0, -1, -1, 0, 1, 1];
    -- F.pdist([[0, 0, 0], [1, 2, -2], [3, 1, -1], [3, 1, -1]], inf) = [2, 3, 3, 2, 2, 0],
    -- (d * [1, ..., 6]):sum():backward() grad [-5, -1, 1, -9, 1, -1, 6, 0, 0, 8, 0, 0]
    local x = accel.tensor({{0, 0, 0}, {1, 2, 2}}, {dtype = accel.float64, requires_grad = true})
    local d = F.pdist(x, math.huge)
    assert.are.same({2}, d:tolist())
    d:sum():backward()
    assert.are.same({{0, -1, -1}, {0, 1, 1}}, x.grad:tolist())
    local x4 = accel.tensor({{0, 0, 0}, {1, 2, -2}, {3, 1, -1}, {3, 1, -1}}, {dtype = accel.float64, requires_grad = true})
    local d4 = F.pdist(x4, math.huge)
    assert.are.same({2, 3, 3, 2, 2, 0}, d4:tolist())
    local _ = (d4 * accel.arange(1, 7, {dtype = accel.float64})):sum():backward()
    assert.are.same({{-5, -1, 1}, {-9, 1, -1}, {6, 0, 0}, {8, 0, 0}}, x4.grad:tolist())
  end)

  it("RReLU draws its slopes in training; AlphaDropout keeps a standard normal's mean and variance", function()
    accel.set_seed(6)
    local x = -accel.ones(1000, {dtype = accel.float64})
    local y = F.rrelu(x, 0.1, 0.3, true)
    assert.is_true(y:ge(-0.3):all():item() and y:le(-0.1):all():item())
    assert.is_true(y:std():item() > 0.03) -- (uniform on [0.1, 0.3]: std 0.058)
    local z = accel.randn(200000, {dtype = accel.float64})
    local d = F.alpha_dropout(z, 0.2, true)
    assert.is_true(math.abs(d:mean():item()) < 0.01 and math.abs(d:std():item() - 1) < 0.01)
    assert.are.equal(z, nn.AlphaDropout(0.2):eval()(z))
    -- FeatureAlphaDropout: one draw per (sample, channel); kept a (x + alpha p), dropped a alpha (p - 1), with
    -- alpha = 1.7580993408473766 and a = ((1 - p) (1 + p alpha^2))^-1/2 (PyTorch's _dropout_impl)
    local alpha, p = 1.7580993408473766, 0.3
    local scale = ((1 - p) * (1 + p * alpha * alpha)) ^ -0.5
    local v = accel.randn(4, 50, 3, 2, {dtype = accel.float64})
    local fd = F.feature_alpha_dropout(v, p, true)
    local kept = (fd - (v + alpha * p) * scale):abs():lt(1e-12)
    local dropped = (fd - scale * alpha * (p - 1)):abs():lt(1e-12)
    assert.is_true(kept:logical_or(dropped):all():item())
    local per_channel = kept:reshape({4, 50, 6}):sum(3)
    assert.is_true(per_channel:eq(0):logical_or(per_channel:eq(6)):all():item()) -- whole channels
    local share = kept:double():mean():item()
    assert.is_true(share > 0.55 and share < 0.85) -- 1 - p of 200 channels
    assert.are.equal(v, nn.FeatureAlphaDropout(p):eval()(v))
    -- torch 2.15: FeatureAlphaDropout(p=0.2, inplace=False); a 1-D input: "Feature dropout requires at least 2
    -- dimensions in the input"
    assert.are.equal("FeatureAlphaDropout(p=0.2, inplace=False)", tostring(nn.FeatureAlphaDropout(0.2)))
    expect_error(function() F.feature_alpha_dropout(accel.ones(3), 0.2, true) end,
      "feature_alpha_dropout: Feature dropout requires at least 2 dimensions in the input")
    -- torch 2.15: RReLU(lower=0.125, upper=0.3333333333333333), AlphaDropout(p=0.2, inplace=False),
    -- LPPool2d(norm_type=2, kernel_size=3, stride=None, ceil_mode=False), MultiMarginLoss()
    assert.are.equal("RReLU(lower=0.125, upper=0.3333333333333333)", tostring(nn.RReLU()))
    assert.are.equal("AlphaDropout(p=0.2, inplace=False)", tostring(nn.AlphaDropout(0.2)))
    assert.are.equal("LPPool2d(norm_type=2, kernel_size=3, stride=None, ceil_mode=False)", tostring(nn.LPPool2d(2, 3)))
    assert.are.equal("MultiMarginLoss()", tostring(nn.MultiMarginLoss()))
    -- torch 2.15: MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0)), MaxUnpool1d(kernel_size=(3,),
    -- stride=(3,), padding=(0,)); output_size (7, 7) for a 2x2 input: 'invalid output_size "(7, 7)" (dim 0 must be
    -- between 2 and 6)'
    assert.are.equal("MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))", tostring(nn.MaxUnpool2d(2)))
    assert.are.equal("MaxUnpool1d(kernel_size=(3,), stride=(3,), padding=(0,))", tostring(nn.MaxUnpool1d(3)))
    -- torch 2.15: MaxUnpool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 0, 0))
    assert.are.equal("MaxUnpool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 0, 0))", tostring(nn.MaxUnpool3d(2)))
    -- torch 2.15: Conv3d(2, 4, kernel_size=(3, 2, 1), stride=(2, 2, 2), padding=(1, 1, 1), bias=False),
    -- MaxPool3d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False), AvgPool3d(kernel_size=3, stride=2,
    -- padding=0), AdaptiveAvgPool3d(output_size=(1, 2, 3))
    assert.are.equal("Conv3d(2, 4, kernel_size=(3, 2, 1), stride=(2, 2, 2), padding=(1, 1, 1), bias=False)",
      tostring(nn.Conv3d(2, 4, {3, 2, 1}, {stride = 2, padding = 1, bias = false})))
    assert.are.equal("MaxPool3d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)", tostring(nn.MaxPool3d(2)))
    assert.are.equal("AvgPool3d(kernel_size=3, stride=2, padding=0)", tostring(nn.AvgPool3d(3, {stride = 2})))
    assert.are.equal("AdaptiveAvgPool3d(output_size=(1, 2, 3))", tostring(nn.AdaptiveAvgPool3d({1, 2, 3})))
    -- torch 2.15: MaxPool3d(kernel_size=2, stride=2, padding=0, dilation=2, ceil_mode=True) (return_indices not
    -- printed), AvgPool3d(kernel_size=2, stride=2, padding=0) whatever ceil_mode / count_include_pad / divisor_override
    assert.are.equal("MaxPool3d(kernel_size=2, stride=2, padding=0, dilation=2, ceil_mode=True)",
      tostring(nn.MaxPool3d(2, {dilation = 2, return_indices = true, ceil_mode = true})))
    assert.are.equal("AvgPool3d(kernel_size=2, stride=2, padding=0)",
      tostring(nn.AvgPool3d(2, {ceil_mode = true, count_include_pad = false, divisor_override = 3})))
    local v, i = F.max_pool2d(accel.randn(1, 1, 4, 4), 2, {return_indices = true})
    expect_error(function() local _ = F.max_unpool2d(v, i, 2, {output_size = {7, 7}}) end,
      'invalid output_size "(7, 7)" (dim 0 must be between 2 and 6)')
  end)

  it("max_pool3d's indices pick the last NaN of a window, as PyTorch's", function()
    -- torch 2.15: F.max_pool3d([[[[[nan, 1], [2, nan]]]]], (1, 2, 2), return_indices=True) -> (nan, 3)
    local v, i = F.max_pool3d(accel.tensor({{{{{0 / 0, 1}, {2, 0 / 0}}}}}), {1, 2, 2}, {return_indices = true})
    assert.is_true(v:isnan():item())
    assert.are.equal(3, i:item())
    -- an all -inf window takes its first position inside the input: indices (0, 1, 2, 3) with padding 1
    local _, j = F.max_pool3d(accel.full({1, 1, 1, 2, 2}, -math.huge), {1, 2, 2}, {padding = {0, 1, 1}, return_indices = true})
    assert.are.same({0, 1, 2, 3}, j:flatten():tolist())
  end)

  it("refuse what PyTorch refuses", function()
    -- torch 2.15: "Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got
    -- input.size(1)=5 and kernel_size=(2, 2)."
    expect_error(function() local _ = F.fold(accel.ones(1, 5, 12), {4, 5}, 2) end,
      "input.size(1)=5 and kernel_size=(2, 2)")
    expect_error(function() local _ = F.fold(accel.ones(1, 4, 5), {4, 5}, 2) end, "the calculated number of sliding blocks")
    -- torch 2.15: gaussian_nll_loss with a negative var: "var has negative entry/entries"
    expect_error(function() local _ = F.gaussian_nll_loss(accel.ones(2), accel.ones(2), accel.tensor({1, -1})) end,
      "var has negative entry/entries")
    expect_error(function() local _ = F.gaussian_nll_loss(accel.ones(3, 4), accel.ones(3, 4), accel.ones(4)) end,
      "var is of incorrect size")
    expect_error(function() local _ = nn.Softmax2d()(accel.ones(4)) end, "Softmax2d: expected an input of 3 or 4 dims")
    expect_error(function() local _ = F.bilinear(accel.ones(2, 3), accel.ones(2, 4), accel.ones(5, 4, 4)) end,
      "bilinear: weight")
    -- torch 2.15: "pad should be at most half of effective kernel size, but got pad=2, kernel_size=2 and
    -- dilation=1"; "Given input size: (1x4x4x4). Calculated output size: (1x0x0x0). Output size is too small";
    -- "divisor must be not zero"
    local x = accel.ones(1, 1, 4, 4, 4)
    expect_error(function() local _ = F.max_pool3d(x, 2, {padding = 2}) end,
      "max_pool3d: padding (2, 2, 2) must be at most half of the effective kernel size")
    expect_error(function() local _ = F.avg_pool3d(x, 2, {padding = {0, 2, 0}}) end,
      "avg_pool3d: padding (0, 2, 0) must be at most half of the effective kernel size")
    expect_error(function() local _ = F.max_pool3d(x, 5, {return_indices = true}) end,
      "max_pool3d: input of shape [1, 1, 4, 4, 4] gives the output size (0, 0, 0): too small")
    expect_error(function() local _ = F.avg_pool3d(x, 2, {divisor_override = 0}) end,
      "avg_pool3d: divisor_override must not be zero")
    -- (PyTorch returns an index outside the input there)
    expect_error(function() local _ = F.max_pool3d(accel.ones(1, 1, 1, 2, 2), {2, 1, 1}, {padding = {1, 0, 0},
      dilation = {2, 1, 1}, return_indices = true}) end, "max_pool3d: a window of input shape [1, 1, 1, 2, 2] covers padding only")
  end)
end)
