-- ctc_loss_spec.lua: F.ctc_loss / nn.CTCLoss against PyTorch 2.15
-- (tests/fixtures/ctc_loss.safetensors, written by
-- scripts/fixtures/make_ctc_fixtures.py, whose lengths are repeated here):
-- losses and log-probability (or logit) gradients for padded and
-- concatenated targets, repeated labels, an empty target, shorter inputs,
-- another blank, every reduction, unbatched input, zero_infinity, float32;
-- an impossible alignment is inf; bad lengths are refused.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local torch_cases = dofile("tests/lua/torch_cases.lua")
local expect_error = support.expect_error
local F, nn = accel.nn.functional, accel.nn

local ref = accel.load("tests/fixtures/ctc_loss.safetensors")
local IN_LENS, TGT_LENS = {7, 5, 3}, {4, 2, 0}

local function ctc(reduction)
  return function(lp, tg) return F.ctc_loss(lp, tg, IN_LENS, TGT_LENS, {reduction = reduction}) end
end

-- Must match CASES in the fixture script.
torch_cases.describe(describe, it, "ctc_loss matches PyTorch 2.15", ref, {
  none = ctc("none"),
  sum = ctc("sum"),
  mean = function(lp, tg) return nn.CTCLoss()(lp, tg, accel.tensor(IN_LENS), accel.tensor(TGT_LENS)) end,
  concatenated = ctc("none"),
  blank_last = function(lp, tg) return F.ctc_loss(lp, tg, {7, 6, 4}, {3, 2, 1}, 4, "none") end,
  unbatched = function(lp, tg) return F.ctc_loss(lp, tg, {6}, {3}, {reduction = "none"}) end,
  zero_infinity = function(lp, tg)
    return nn.CTCLoss({reduction = "none", zero_infinity = true})(lp, tg, {3, 7, 7}, {3, 2, 1})
  end,
  from_logits = function(x, tg) return F.ctc_loss(x:log_softmax(3), tg, IN_LENS, TGT_LENS) end,
}, 1e-12)
torch_cases.describe(describe, it, "ctc_loss matches PyTorch 2.15 in float32", ref, {float32 = ctc("mean")}, 1e-5)

describe("ctc_loss", function()
  local lp = ref["none.in1"]
  it("is inf for an alignment that cannot fit, with a NaN gradient for that entry (PyTorch's) unless zero_infinity", function()
    -- three equal labels need 5 steps (a blank between repeats); 3 are given
    local tg, in_lens, tgt_lens = accel.tensor({{1, 1, 1}, {2, 3, 0}, {1, 0, 0}}), {3, 7, 7}, {3, 2, 1}
    -- torch 2.15 on this fixture: the losses are [inf, 7.0145995430145724, 8.818168093357716]; entry 1's
    -- log_probs gradient is NaN at steps 1-3 (inside its input length) and 0 after, for every reduction and also
    -- when only the other entries are summed; the others' gradients are finite, their absolute values summing to
    -- 15.86284909246356 (none, sum) and 4.165799225391131 (mean), step 1 of entry 2 being
    -- [-0.45066604459797005, 0.23815703743933903, -0.2213416818855696, 0.07933478267647312, 0.35451590636772684]
    for _, case in ipairs({{"none", 15.86284909246356}, {"sum", 15.86284909246356}, {"mean", 4.165799225391131}}) do
      local x = lp:clone():requires_grad_(true)
      local loss = F.ctc_loss(x, tg, in_lens, tgt_lens, {reduction = case[1]})
      assert.are.equal(math.huge, (case[1] == "none" and loss[1] or loss):item())
      if case[1] == "none" then
        support.assert_close(loss:narrow(1, 2, 2), accel.tensor({7.0145995430145724, 8.818168093357716}, {dtype = accel.float64}), 1e-12)
        loss = loss:narrow(1, 2, 2):sum()
      end
      loss:backward()
      local g1, rest = x.grad:select(2, 1), x.grad:narrow(2, 2, 2)
      assert.is_true(g1:narrow(1, 1, 3):isnan():all():item())
      assert.are.equal(0, g1:narrow(1, 4, 4):abs():sum():item())
      assert.is_false(rest:isnan():any():item())
      assert.is_true(math.abs(rest:abs():sum():item() - case[2]) < 1e-12)
    end
    local x = lp:clone():requires_grad_(true)
    F.ctc_loss(x, tg, in_lens, tgt_lens, {reduction = "none"}):sum():backward()
    support.assert_close(x.grad[1][2], accel.tensor({-0.45066604459797005, 0.23815703743933903, -0.2213416818855696,
      0.07933478267647312, 0.35451590636772684}, {dtype = accel.float64}), 1e-12)
    -- zero_infinity: that entry's loss and gradient are 0, the others' unchanged
    local z = lp:clone():requires_grad_(true)
    F.ctc_loss(z, tg, in_lens, tgt_lens, {reduction = "none", zero_infinity = true}):sum():backward()
    assert.are.equal(0, z.grad:select(2, 1):abs():sum():item())
    support.assert_close(z.grad:narrow(2, 2, 2), x.grad:narrow(2, 2, 2), 0)
  end)

  it("refuses lengths that do not fit, naming them", function()
    local tg = ref["none.in2"]
    expect_error(function() F.ctc_loss(lp, tg, {8, 5, 3}, TGT_LENS) end,
      "ctc_loss: expected input_lengths to have value at most 7, but got value 8")
    expect_error(function() F.ctc_loss(lp, tg, {7, 5}, TGT_LENS) end, "ctc_loss: input_lengths must have one length per batch entry (3)")
    expect_error(function() F.ctc_loss(lp, tg, IN_LENS, {5, 2, 0}) end,
      "ctc_loss: target length 5 of batch entry 1 is longer than the padded targets (4)")
    expect_error(function() F.ctc_loss(lp, tg, IN_LENS, TGT_LENS, {blank = 5}) end, "ctc_loss: blank must be in label range [0, 5)")
    expect_error(function() F.ctc_loss(lp, tg:double(), IN_LENS, TGT_LENS) end, "ctc_loss: targets must be an integer tensor")
    expect_error(function() nn.CTCLoss({reduction = "avg"}) end, 'CTCLoss: reduction must be "mean", "sum" or "none"')
  end)
end)
