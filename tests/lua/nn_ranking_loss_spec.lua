-- nn_ranking_loss_spec.lua: the margin and embedding losses
-- (accel.nn.ranking_loss) against PyTorch 2.15: outputs and input gradients
-- from tests/fixtures/ranking_losses.safetensors
-- (scripts/fixtures/make_ranking_loss_fixtures.py), the modules' printed
-- forms and PyTorch's messages quoted beside them.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local nn, F = accel.nn, accel.nn.functional
local expect_error = support.expect_error

local ref = accel.load("tests/fixtures/ranking_losses.safetensors")

-- Must match CASES in the fixture script.
local CASES = {
  margin_ranking = function(a, b, y) return F.margin_ranking_loss(a, b, y, 0.3) end,
  margin_ranking_none = function(a, b, y) return nn.MarginRankingLoss({reduction = "none"})(a, b, y) end,
  hinge_embedding = function(x, y) return F.hinge_embedding_loss(x, y, {margin = 0.5}) end,
  hinge_embedding_sum = function(x, y) return nn.HingeEmbeddingLoss({reduction = "sum"})(x, y) end,
  soft_margin = function(x, y) return nn.SoftMarginLoss()(x, y) end,
  cosine_embedding = function(a, b, y) return F.cosine_embedding_loss(a, b, y, -0.2, {reduction = "none"}) end,
  cosine_embedding_1d = function(a, b, y) return nn.CosineEmbeddingLoss()(a, b, y) end,
  triplet_margin = function(a, p, n) return nn.TripletMarginLoss()(a, p, n) end,
  triplet_margin_swap = function(a, p, n) return F.triplet_margin_loss(a, p, n, 1.0, 1.0, {swap = true, reduction = "none"}) end,
  multilabel_soft_margin = function(x, y) return F.multilabel_soft_margin_loss(x, y) end,
  multilabel_soft_margin_weight = function(x, y, w) return nn.MultiLabelSoftMarginLoss(w, {reduction = "none"})(x, y) end,
}

dofile("tests/lua/torch_cases.lua").describe(describe, it, "margin and embedding losses match PyTorch", ref, CASES, 1e-12)

describe("margin and embedding loss modules", function()
  it("print as PyTorch's and refuse what PyTorch refuses", function()
    -- torch 2.15: MarginRankingLoss() TripletMarginLoss() CosineEmbeddingLoss() HingeEmbeddingLoss() SoftMarginLoss()
    -- MultiLabelSoftMarginLoss()
    for _, name in ipairs({"MarginRankingLoss", "TripletMarginLoss", "CosineEmbeddingLoss", "HingeEmbeddingLoss",
                           "SoftMarginLoss", "MultiLabelSoftMarginLoss"}) do
      assert.are.equal(name .. "()", tostring(nn[name]()))
    end
    -- torch: "margin_ranking_loss : All input tensors should have same dimension but got sizes: input1: [3],
    -- input2: [3], target: [1, 3]"
    expect_error(function() local _ = F.margin_ranking_loss(accel.ones(3), accel.ones(3), accel.ones(1, 3)) end,
      "All input tensors should have same dimension")
    expect_error(function() local _ = nn.TripletMarginLoss({reduction = "avg"}) end, 'reduction must be "mean", "sum" or "none"')
    expect_error(function() local _ = nn.SoftMarginLoss()(accel.ones(2)) end, "SoftMarginLoss: takes 2 inputs, got 1")
  end)
end)
