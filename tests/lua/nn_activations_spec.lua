-- nn_activations_spec.lua: the less common activations (accel.nn.activations)
-- against PyTorch 2.15: outputs and input gradients from
-- tests/fixtures/activations.safetensors (scripts/fixtures/
-- make_activation_fixtures.py; x hits every kink exactly, so the
-- gradient PyTorch's backward gives at a kink is checked too), the modules'
-- printed forms and PyTorch's messages quoted beside them.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
it = support.lua54_only(it, pending, {
  ["the modules print as PyTorch's and forward as the functions"] = support.NO_FLOAT_SUBTYPE,
})
local nn, F = accel.nn, accel.nn.functional
local close, expect_error = support.assert_close, support.expect_error
local f64 = {dtype = accel.float64}

local ref = accel.load("tests/fixtures/activations.safetensors")

local function inputs()
  local xs, ws = {}, {}
  for i = 0, 41 do xs[i + 1], ws[i + 1] = -5 + 0.25 * i, math.cos(i + 1) end
  return accel.tensor(xs, f64):view(2, 3, 7):requires_grad_(true), accel.tensor(ws, f64):view(2, 3, 7)
end

-- Must match CASES in the fixture script (dims 1-based here).
local CASES = {
  relu6 = function(x) return F.relu6(x) end,
  hardtanh = function(x) return F.hardtanh(x) end,
  hardtanh_range = function(x) return F.hardtanh(x, -2.0, 0.5) end,
  hardsigmoid = function(x) return F.hardsigmoid(x) end,
  hardswish = function(x) return F.hardswish(x) end,
  mish = function(x) return F.mish(x) end,
  selu = function(x) return F.selu(x) end,
  celu = function(x) return F.celu(x) end,
  celu_alpha = function(x) return F.celu(x, {alpha = 2.0}) end,
  softsign = function(x) return F.softsign(x) end,
  tanhshrink = function(x) return F.tanhshrink(x) end,
  glu = function(x) return F.glu(x, 1) end,
  threshold = function(x) return F.threshold(x, 0.5, -1.0) end,
  softmin = function(x) return F.softmin(x, 3) end,
  hardshrink = function(x) return F.hardshrink(x) end,
  softshrink = function(x) return F.softshrink(x, 1.0) end,
}

describe("activations match PyTorch", function()
  local names = {}
  for name in pairs(CASES) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    it(name .. ": output and input gradient, kinks included", function()
      local x, w = inputs()
      local y = CASES[name](x)
      close(y, ref[name .. ".y"], 1e-12, name .. " output")
      local _ = (y * w:narrow(1, 1, y:size(1))):sum():backward()
      -- PyTorch's hardsigmoid backward scales by 1/6 rounded to float32 (0.16666667163) even in float64
      close(x.grad, ref[name .. ".gx"], name == "hardsigmoid" and 1e-8 or 1e-12, name .. " gradient")
    end)
  end

  it("hardswish(-inf) is NaN, as torch's (-inf * relu6(-inf)); its gradient there 0", function()
    -- torch 2.15: hardswish([-inf, inf, -4]) = [nan, inf, -0.], gradient [0, 1, 0]
    local x = accel.tensor({-math.huge, math.huge, -4}, {dtype = accel.float64, requires_grad = true})
    local y = F.hardswish(x)
    y:sum():backward()
    local v = y:tolist()
    assert.is_true(v[1] ~= v[1])
    assert.are.same({math.huge, 0}, {v[2], v[3]})
    assert.are.same({0, 1, 0}, x.grad:tolist())
  end)

  it("NaN stays NaN in hardshrink, softshrink, threshold, hardsigmoid and hardswish, with torch's gradient", function()
    local nan, inf = 0 / 0, math.huge
    -- torch 2.15 at x = [nan, 0.2, -3, inf, -0.5]: outputs and the gradients of their sums
    local want = {
      hardshrink = {function(x) return F.hardshrink(x, 0.5) end, {nan, 0, -3, inf, 0}, {1, 0, 1, 1, 0}},
      softshrink = {function(x) return F.softshrink(x, 0.5) end, {nan, 0, -2.5, inf, 0}, {1, 0, 1, 1, 0}},
      threshold = {function(x) return F.threshold(x, 0.5, -2.0) end, {nan, -2, -2, inf, -2}, {1, 0, 0, 1, 0}},
      -- (torch's hardsigmoid gradient is 1/6 rounded to float32, 0.1666666716337204: 1e-8 below)
      hardsigmoid = {F.hardsigmoid, {nan, 0.5333333333333333, 0, 1, 0.4166666666666667}, {0, 1 / 6, 0, 0, 1 / 6}, 1e-8},
      hardswish = {F.hardswish, {nan, 0.10666666666666669, 0, inf, -0.20833333333333334},
                   {1, 0.5666666666666667, 0, 1, 0.33333333333333337}},
    }
    for name, c in pairs(want) do
      local x = accel.tensor({nan, 0.2, -3, inf, -0.5}, {dtype = accel.float64, requires_grad = true})
      local y = c[1](x)
      y:sum():backward()
      support.assert_values(c[2], y, 1e-15, name)
      support.assert_values(c[3], x.grad, c[4] or 1e-15, name .. " gradient")
    end
  end)

  it("prelu: per-channel weight, gradients of input and weight", function()
    local x, w = inputs()
    local weight = accel.tensor({0.1, 0.3, 0.5}, f64):requires_grad_(true)
    local y = F.prelu(x, weight)
    close(y, ref["prelu.y"], 1e-12)
    local _ = (y * w):sum():backward()
    close(x.grad, ref["prelu.gx"], 1e-12)
    close(weight.grad, ref["prelu.gw"], 1e-12)
  end)
end)

describe("activation modules", function()
  it("the modules print as PyTorch's and forward as the functions", function()
    -- torch 2.15's str() of the same modules
    local want = {
      {nn.ReLU6(), "ReLU6()"}, {nn.ReLU6(true), "ReLU6(inplace=True)"},
      {nn.Hardtanh(), "Hardtanh(min_val=-1.0, max_val=1.0)"},
      {nn.Hardtanh(-2.0, 0.5, true), "Hardtanh(min_val=-2.0, max_val=0.5, inplace=True)"},
      {nn.Hardsigmoid(), "Hardsigmoid()"}, {nn.Hardswish(), "Hardswish()"}, {nn.Mish(), "Mish()"},
      {nn.SELU(), "SELU()"}, {nn.SELU(true), "SELU(inplace=True)"}, {nn.CELU(), "CELU(alpha=1.0)"},
      {nn.CELU(2.0, true), "CELU(alpha=2.0, inplace=True)"}, {nn.PReLU(), "PReLU(num_parameters=1)"},
      {nn.PReLU(3), "PReLU(num_parameters=3)"}, {nn.Softsign(), "Softsign()"}, {nn.Tanhshrink(), "Tanhshrink()"},
      {nn.GLU(), "GLU(dim=-1)"}, {nn.Threshold(0.1, 20), "Threshold(threshold=0.1, value=20)"},
      {nn.Threshold(0.1, 20.0, true), "Threshold(threshold=0.1, value=20.0, inplace=True)"},
      {nn.Hardshrink(), "Hardshrink(0.5)"}, {nn.Softshrink(1.0), "Softshrink(1.0)"},
    }
    for _, case in ipairs(want) do assert.are.equal(case[2], tostring(case[1])) end
    local x = inputs():detach()
    close(nn.Hardtanh(-2.0, 0.5)(x), ref["hardtanh_range.y"], 1e-12)
    close(nn.CELU({alpha = 2.0})(x), ref["celu_alpha.y"], 1e-12)
    close(nn.GLU(1)(x), ref["glu.y"], 1e-12)
    close(nn.Softmin(3)(x), ref["softmin.y"], 1e-12)
    close(nn.Softshrink(1.0)(x), ref["softshrink.y"], 1e-12)
  end)

  it("PReLU learns one slope (or one per channel), 0.25 at first, under its state_dict key", function()
    local m = nn.PReLU(3, {dtype = accel.float64})
    close(m.weight, accel.full({3}, 0.25, f64), 0)
    assert.is_not_nil(m:state_dict().weight)
    local x = inputs():detach()
    accel.no_grad(function() m.weight:copy_(accel.tensor({0.1, 0.3, 0.5}, f64)) end)
    close(m(x), ref["prelu.y"], 1e-12)
    assert.are.equal(1, #nn.PReLU():parameters())
  end)

  it("inplace writes the input", function()
    local x = accel.tensor({-5.0, 0.2, 7.0}, f64)
    local y = F.relu6(x, true)
    assert.are.same({0, 0.2, 6}, x:tolist())
    assert.are.equal(x, y)
  end)

  it("refuse what PyTorch refuses", function()
    -- torch 2.15's messages: "Halving dimension must be even, but dimension 0 is size 3", "min_val cannot be
    -- greater than max_val", "Mismatch of parameter numbers and input channel size. Found parameter numbers = 2
    -- and channel size = 3."
    expect_error(function() local _ = F.glu(accel.zeros(3)) end, "glu: Halving dimension must be even, but dimension -1 is size 3")
    expect_error(function() local _ = F.hardtanh(accel.zeros(2), 2.0, 1.0) end, "hardtanh: min_val cannot be greater than max_val")
    expect_error(function() local _ = F.prelu(accel.zeros(2, 3), accel.zeros(2)) end,
      "prelu: Mismatch of parameter numbers and input channel size. Found parameter numbers = 2 and channel size = 3.")
    expect_error(function() local _ = F.softshrink(accel.zeros(2), -1.0) end, "softshrink: lambda must be greater or equal to 0")
    expect_error(function() local _ = nn.Threshold(0.1) end, "Threshold: threshold and value must be given")
    expect_error(function() local _ = F.selu(accel.zeros(2), 1) end, "selu: argument 'inplace' must be a boolean, got number")
    expect_error(function() local _ = F.mish(3) end, "mish: input must be a Tensor, got number")
  end)
end)
