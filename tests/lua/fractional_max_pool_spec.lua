-- fractional_max_pool_spec.lua: F.fractional_max_pool2d / 3d and
-- nn.FractionalMaxPool2d / 3d against PyTorch 2.15
-- (tests/fixtures/fractional_max_pool.safetensors, written by
-- scripts/fixtures/make_fractional_max_pool_fixtures.py): the windows
-- PyTorch places for given _random_samples, values, indices and the input's
-- gradient; drawn samples stay inside the input; bad sizes are refused.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local torch_cases = dofile("tests/lua/torch_cases.lua")
local expect_error = support.expect_error
local F, nn = accel.nn.functional, accel.nn

local ref = accel.load("tests/fixtures/fractional_max_pool.safetensors")

local function pool(kernel_size, o)
  return function(x, u)
    o._random_samples = u
    return F.fractional_max_pool2d(x, kernel_size, o)
  end
end

-- Must match CASES in the fixture script.
local CASES = {
  output_size = pool({3, 2}, {output_size = {4, 5}}),
  output_ratio = pool(2, {output_ratio = {0.5, 0.7}}),
  one_cell = pool(3, {output_size = 1}),
  unbatched = pool(2, {output_size = 3}),
  indices = function(x, u) return nn.FractionalMaxPool2d({2, 3}, {output_size = {5, 4}, return_indices = true, _random_samples = u})(x) end,
  pool3d_output_size = function(x, u) return F.fractional_max_pool3d(x, {2, 3, 2}, {output_size = {4, 3, 3}, _random_samples = u}) end,
  pool3d_output_ratio_indices = function(x, u)
    return nn.FractionalMaxPool3d(2, {output_ratio = {0.5, 0.6, 0.7}, return_indices = true, _random_samples = u})(x)
  end,
  pool3d_unbatched = function(x, u) return F.fractional_max_pool3d(x, {3, 2, 2}, 2, {_random_samples = u}) end,
}
torch_cases.describe(describe, it, "fractional_max_pool2d / 3d match PyTorch 2.15", ref, CASES, 1e-12)
torch_cases.describe(describe, it, "fractional_max_pool2d matches PyTorch 2.15 in float32", ref,
  {float32 = pool({3, 2}, {output_size = {4, 5}})}, 1e-6)

describe("fractional_max_pool2d", function()
  it("draws its own samples: every value is one of its window's inputs, the shape as asked", function()
    accel.set_seed(4)
    local x = accel.randn(2, 3, 10, 11)
    local m = nn.FractionalMaxPool2d(3, {output_ratio = 0.5, return_indices = true})
    local v, i = m(x)
    assert.are.same({2, 3, 5, 5}, support.shape_of(v))
    local picked = x:reshape({2, 3, 110}):gather(3, i:reshape({2, 3, 25})):reshape({2, 3, 5, 5})
    assert.are.equal(0, (picked - v):abs():max():item())
    assert.are.equal("FractionalMaxPool2d()", tostring(m)) -- (as torch 2.15 prints it)
  end)

  -- torch 2.15: "fractional_max_pool2d requires specifying either an output_size or an output_ratio";
  -- kernel 3, output 6 of a height 7: "fractional_max_pool2d(): pool height 3 too large relative to input height 7"
  it("refuses sizes that do not fit, naming them", function()
    local x = accel.zeros(1, 1, 7, 9)
    expect_error(function() F.fractional_max_pool2d(x, 3) end,
      "fractional_max_pool2d requires specifying either an output_size or an output_ratio")
    expect_error(function() F.fractional_max_pool2d(x, 3, {output_size = 6}) end,
      "fractional_max_pool2d: pool height 3 too large relative to input height 7")
    expect_error(function() F.fractional_max_pool2d(x, 2, {output_ratio = 1.5}) end, "output_ratio must be between 0 and 1")
    expect_error(function() F.fractional_max_pool2d(x, 2, {output_size = 3, _random_samples = accel.rand(1, 2, 2)}) end,
      "_random_samples must have shape (1, 1, 2)")
    -- torch 2.15: "fractional_max_pool3d_out(): pool time 3 too large relative to input time 4"
    local v = accel.zeros(1, 1, 4, 5, 6)
    expect_error(function() F.fractional_max_pool3d(v, 3, {output_size = {3, 2, 2}}) end,
      "fractional_max_pool3d: pool time 3 too large relative to input time 4")
    expect_error(function() F.fractional_max_pool3d(v, 2, {output_size = 2, _random_samples = accel.rand(1, 1, 2)}) end,
      "_random_samples must have shape (1, 1, 3)")
    expect_error(function() F.fractional_max_pool3d(accel.zeros(4, 5, 6), 2, {output_size = 2}) end,
      "fractional_max_pool3d: expected a floating point input of shape (N, C, time, height, width) or (C, ...)")
  end)
end)
