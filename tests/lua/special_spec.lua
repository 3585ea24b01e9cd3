-- special_spec.lua: erfc, lgamma and digamma against PyTorch 2.15
-- (tests/fixtures/special.safetensors, written by
-- scripts/fixtures/make_special_fixtures.py): values and input gradients on
-- float64 and float32, integers promoted; the poles as PyTorch gives them.
-- digamma's gradient (trigamma) is compared more loosely in float64:
-- PyTorch's trigamma stops its series early and is up to 3e-10 relative off
-- the true value (pi^2 / 2 at 0.5); ours is checked to 1e-15 against closed
-- forms below and by differences in tests/c/test_kernels.c.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local torch_cases = dofile("tests/lua/torch_cases.lua")

local ref = accel.load("tests/fixtures/special.safetensors")

-- Must match CASES in the fixture script.
torch_cases.describe(describe, it, "erfc and lgamma match PyTorch 2.15 in float64", ref, {
  erfc_f64 = function(x) return x:erfc() end,
  lgamma_f64 = function(x) return accel.lgamma(x) end,
  lgamma_int = function(x) return x:lgamma() end,
}, 1e-12)
torch_cases.describe(describe, it, "digamma matches PyTorch 2.15 in float64", ref, {
  digamma_f64 = function(x) return x:digamma() end,
}, 5e-9)
torch_cases.describe(describe, it, "erfc, lgamma and digamma match PyTorch 2.15 in float32", ref, {
  erfc_f32 = function(x) return accel.erfc(x) end,
  lgamma_f32 = function(x) return x:lgamma() end,
  digamma_f32 = function(x) return accel.digamma(x) end,
}, 1e-4)

describe("digamma and its gradient", function()
  it("equal their closed forms at 1/2 and 1", function()
    local euler_gamma, pi = 0.57721566490153286, math.pi
    local x = accel.tensor({0.5, 1}, {dtype = accel.float64, requires_grad = true})
    local y = x:digamma()
    support.assert_close(y, accel.tensor({-euler_gamma - 2 * math.log(2), -euler_gamma}, {dtype = accel.float64}), 1e-15)
    y:sum():backward()
    support.assert_close(x.grad, accel.tensor({pi * pi / 2, pi * pi / 6}, {dtype = accel.float64}), 2e-15)
  end)
end)

describe("lgamma and digamma at their poles", function()
  -- PyTorch 2.15: torch.tensor([0., -0., -1., -2.]).lgamma() -> [inf, inf, inf, inf];
  -- .digamma() -> [-inf, inf, nan, nan]
  it("give PyTorch's infinities and NaNs", function()
    local poles = accel.tensor({0, -0.0, -1, -2}, {dtype = accel.float64})
    local inf = math.huge
    assert.same({inf, inf, inf, inf}, poles:lgamma():tolist())
    local d = poles:digamma():tolist()
    assert.same({-inf, inf}, {d[1], d[2]})
    assert.is_true(d[3] ~= d[3] and d[4] ~= d[4])
    local f = poles:float():digamma():tolist()
    assert.same({-inf, inf}, {f[1], f[2]})
  end)
end)
