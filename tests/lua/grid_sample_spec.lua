-- grid_sample_spec.lua: F.affine_grid and F.grid_sample against PyTorch
-- 2.15 (tests/fixtures/grid_sample.safetensors, written by
-- scripts/fixtures/make_grid_sample_fixtures.py): every mode x padding_mode
-- x align_corners of the 2-D and 3-D samplers on grids reaching past the
-- image, with the input's and the grid's gradients; affine_grid (4-D and
-- 5-D sizes) with theta's gradient; PyTorch's argument errors; bicubic says
-- it is not provided.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local torch_cases = dofile("tests/lua/torch_cases.lua")
local expect_error = support.expect_error
local F = accel.nn.functional

local ref = accel.load("tests/fixtures/grid_sample.safetensors")

-- Must match CASES in the fixture script.
local CASES = {
  affine_grid = function(t) return F.affine_grid(t, {2, 3, 4, 5}, false) end,
  affine_grid_aligned = function(t) return F.affine_grid(t, {2, 3, 4, 5}, {align_corners = true}) end,
  affine_grid_unit = function(t) return F.affine_grid(t, accel.zeros(2, 3, 1, 5).shape, false) end,
  affine_then_sample = function(x, t) return F.grid_sample(x, F.affine_grid(t, {2, 2, 3, 3}, false), {align_corners = false}) end,
  affine_grid_3d = function(t) return F.affine_grid(t, {2, 1, 3, 4, 5}, false) end,
  affine_grid_3d_aligned = function(t) return F.affine_grid(t, {2, 1, 2, 1, 3}, true) end,
  affine_then_sample_3d = function(x, t) return F.grid_sample(x, F.affine_grid(t, {2, 2, 2, 3, 3}, true), {align_corners = true}) end,
}
for _, mode in ipairs({"bilinear", "nearest"}) do
  for _, padding_mode in ipairs({"zeros", "border", "reflection"}) do
    for _, align_corners in ipairs({false, true}) do
      local name = ("%s_%s_%s"):format(mode, padding_mode, align_corners and "aligned" or "unaligned")
      CASES[name] = function(x, g) return F.grid_sample(x, g, mode, padding_mode, align_corners) end
      CASES["volume_" .. name] = CASES[name]
    end
  end
end
torch_cases.describe(describe, it, "affine_grid and grid_sample match PyTorch 2.15", ref, CASES, 1e-12)
torch_cases.describe(describe, it, "grid_sample matches PyTorch 2.15 in float32", ref, {
  sample_f32 = function(x, g) return F.grid_sample(x, g, {align_corners = false}) end,
}, 1e-5)

describe("grid_sample and affine_grid arguments", function()
  local x, g = accel.zeros(1, 1, 3, 3), accel.zeros(1, 2, 2, 2)
  it("refuse what PyTorch refuses, naming it", function()
    expect_error(function() F.grid_sample(x, g, "area", "zeros", false) end,
      "grid_sample: expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: 'area'")
    expect_error(function() F.grid_sample(x, g, "bilinear", "wrap", false) end,
      "grid_sample: expected padding_mode to be 'zeros', 'border', or 'reflection', but got: 'wrap'")
    expect_error(function() F.grid_sample(x, accel.zeros(2, 2, 2, 2), {align_corners = false}) end,
      "expected input and grid to have same batch size")
    expect_error(function() F.grid_sample(x, accel.zeros(1, 2, 2, 3), {align_corners = false}) end,
      "expected grid to have size 2 in last dimension")
    expect_error(function() F.grid_sample(x, g:double(), {align_corners = false}) end,
      "expected input and grid to have the same floating point dtype")
    expect_error(function() F.affine_grid(accel.zeros(1, 3, 3), {1, 1, 2, 2}, false) end,
      "affine_grid: expected a batch of 2D affine matrices of shape Nx2x3 for size [1, 1, 2, 2], got [1, 3, 3]")
    expect_error(function() F.affine_grid(accel.zeros({1, 2, 3}, {dtype = accel.int64}), {1, 1, 2, 2}, false) end,
      "affine_grid: expected theta to have floating point type")
  end)

  it("say that bicubic is not provided", function()
    expect_error(function() F.grid_sample(x, g, "bicubic", "zeros", false) end, "grid_sample: mode 'bicubic' is not provided")
  end)

  it("refuse a 3-D grid of the wrong width and a theta that does not match the size", function()
    -- torch 2.15: "expected grid to have size 3 in last dimension"; "Expected a batch of 3D affine matrices of
    -- shape Nx3x4 for size [1, 1, 2, 2, 2]. Got [1, 2, 3]."
    expect_error(function() F.grid_sample(accel.zeros(1, 1, 2, 2, 2), accel.zeros(1, 1, 1, 1, 2), {align_corners = false}) end,
      "expected grid to have size 3 in last dimension")
    expect_error(function() F.grid_sample(accel.zeros(1, 1, 2, 2, 2), g, {align_corners = false}) end,
      "expected 4D or 5D input and grid with same number of dimensions")
    expect_error(function() F.affine_grid(accel.zeros(1, 2, 3), {1, 1, 2, 2, 2}, false) end,
      "affine_grid: expected a batch of 3D affine matrices of shape Nx3x4 for size [1, 1, 2, 2, 2], got [1, 2, 3]")
  end)
end)
