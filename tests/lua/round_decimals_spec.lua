-- round_decimals_spec.lua: t:round({decimals = d}) against PyTorch 2.15
-- (tests/fixtures/round_decimals.safetensors, written by
-- scripts/fixtures/make_round_fixtures.py): positive and negative d on
-- float32, float64 and bfloat16 (computed in float32, rounded once), a zero
-- gradient; in place; integer tensors and non-integer d refused.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local torch_cases = dofile("tests/lua/torch_cases.lua")
local expect_error = support.expect_error

local ref = accel.load("tests/fixtures/round_decimals.safetensors")

local function rounded(d) return function(x) return x:round({decimals = d}) end end

-- Must match CASES in the fixture script.
local CASES = {
  f32_d1 = rounded(1),
  f32_d2 = function(x) return accel.round(x, {decimals = 2}) end,
  f32_d3 = rounded(3),
  f32_dm1 = rounded(-1),
  f32_dm2 = rounded(-2),
  f64_d2 = rounded(2),
  f64_dm1 = rounded(-1),
  bf16_d1 = rounded(1),
  bf16_d2 = rounded(2),
  bf16_dm1 = rounded(-1),
}

torch_cases.describe(describe, it, "round with decimals matches PyTorch 2.15", ref, CASES, 0)

describe("round with decimals", function()
  it("rounds in place, and decimals = 0 is plain round", function()
    local x = ref["f32_d2.in1"]:clone()
    assert.are.equal(x, x:round_({decimals = 2}))
    assert.are.equal(0, (x - ref["f32_d2.y"]):abs():max():item())
    local y = ref["f32_d2.in1"]
    assert.are.equal(0, (y:round({decimals = 0}) - y:round()):abs():max():item())
  end)

  -- PyTorch 2.15: torch.round(torch.tensor([1, 2]), decimals=1) -> NotImplementedError "round_cpu" not implemented
  -- for 'Long'; decimals=1.5 -> TypeError
  it("refuses integer tensors, non-integer decimals, unknown options and a leaf in place", function()
    expect_error(function() accel.tensor({1, 2}):round({decimals = 1}) end,
      "round: decimals needs a floating-point tensor, got int64")
    local x = accel.tensor({1.25}, {dtype = accel.float32})
    expect_error(function() x:round({decimals = 1.5}) end, "round: decimals must be an integer")
    expect_error(function() x:round({decimals = "2"}) end, "round: decimals must be an integer")
    expect_error(function() x:round({digits = 2}) end, "round: unknown option 'digits'")
    local leaf = accel.tensor({1.25}, {dtype = accel.float32, requires_grad = true})
    expect_error(function() leaf:round_({decimals = 1}) end,
      "round_: a leaf tensor that requires grad (shape [1]) cannot be modified in place")
  end)
end)
