-- nn_more_layers_spec.lua: Bilinear, Softmax2d, PoissonNLLLoss,
-- GaussianNLLLoss and AdaptiveMaxPool2d / 1d (accel.nn.bilinear,
-- accel.nn.activations, accel.nn.likelihood_loss,
-- accel.nn.adaptive_max_pool) against PyTorch 2.15: outputs and input
-- gradients from tests/fixtures/more_layers.safetensors
-- (scripts/fixtures/make_more_layers_fixtures.py), printed forms and
-- PyTorch's messages quoted beside them.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local nn, F = accel.nn, accel.nn.functional
local expect_error = support.expect_error

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
}

dofile("tests/lua/torch_cases.lua").describe(describe, it, "Bilinear, Softmax2d and the likelihood losses match PyTorch",
  ref, CASES, 1e-12)

describe("Bilinear, Softmax2d and the likelihood losses: modules", function()
  it("print as PyTorch's; Bilinear's weight and its initialisation bound", function()
    -- torch 2.15: Bilinear(in1_features=3, in2_features=4, out_features=5, bias=True), PoissonNLLLoss(),
    -- GaussianNLLLoss(), Softmax2d()
    assert.are.equal("Bilinear(in1_features=3, in2_features=4, out_features=5, bias=True)", tostring(nn.Bilinear(3, 4, 5)))
    assert.are.equal("PoissonNLLLoss()", tostring(nn.PoissonNLLLoss()))
    assert.are.equal("GaussianNLLLoss()", tostring(nn.GaussianNLLLoss()))
    assert.are.equal("Softmax2d()", tostring(nn.Softmax2d()))
    -- torch 2.15: AdaptiveMaxPool2d(output_size=(5, 7)), AdaptiveMaxPool1d(output_size=3)
    assert.are.equal("AdaptiveMaxPool2d(output_size=(5, 7))", tostring(nn.AdaptiveMaxPool2d({5, 7})))
    assert.are.equal("AdaptiveMaxPool1d(output_size=3)", tostring(nn.AdaptiveMaxPool1d(3)))
    accel.set_seed(2)
    local m = nn.Bilinear(3, 4, 5, false)
    assert.are.same({5, 3, 4}, {m.weight:size(1), m.weight:size(2), m.weight:size(3)})
    assert.is_nil(m.bias)
    assert.is_true(m.weight:abs():max():item() <= 1 / math.sqrt(3))
  end)

  it("refuse what PyTorch refuses", function()
    -- torch 2.15: gaussian_nll_loss with a negative var: "var has negative entry/entries"
    expect_error(function() local _ = F.gaussian_nll_loss(accel.ones(2), accel.ones(2), accel.tensor({1, -1})) end,
      "var has negative entry/entries")
    expect_error(function() local _ = F.gaussian_nll_loss(accel.ones(3, 4), accel.ones(3, 4), accel.ones(4)) end,
      "var is of incorrect size")
    expect_error(function() local _ = nn.Softmax2d()(accel.ones(4)) end, "Softmax2d: expected an input of 3 or 4 dims")
    expect_error(function() local _ = F.bilinear(accel.ones(2, 3), accel.ones(2, 4), accel.ones(5, 4, 4)) end,
      "bilinear: weight")
  end)
end)
