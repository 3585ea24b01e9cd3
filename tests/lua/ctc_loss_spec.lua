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
  it("is inf for an alignment that cannot fit, without a NaN gradient", function()
    -- three equal labels need 5 steps (a blank between repeats); 3 are given
    local x = lp:clone():requires_grad_(true)
    local loss = F.ctc_loss(x, accel.tensor({{1, 1, 1}, {2, 3, 0}, {1, 0, 0}}), {3, 7, 7}, {3, 2, 1}, {reduction = "none"})
    assert.are.equal(math.huge, loss[1]:item())
    loss:narrow(1, 2, 2):sum():backward()
    assert.is_false(x.grad:isnan():any():item())
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
