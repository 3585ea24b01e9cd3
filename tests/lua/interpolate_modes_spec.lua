-- interpolate_modes_spec.lua: F.interpolate's "bicubic", "nearest-exact"
-- and "area" modes against PyTorch 2.15 (tests/fixtures/interpolate.safetensors,
-- written by scripts/fixtures/make_interpolate_fixtures.py), values and the
-- input's gradient; nn.Upsample passes the modes on.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local torch_cases = dofile("tests/lua/torch_cases.lua")
local F = accel.nn.functional

local ref = accel.load("tests/fixtures/interpolate.safetensors")

local function interp(o) return function(x) return F.interpolate(x, o) end end

-- Must match CASES in the fixture script.
local CASES = {
  bicubic_up = interp({size = {7, 9}, mode = "bicubic", align_corners = false}),
  bicubic_up_aligned = interp({size = {7, 9}, mode = "bicubic", align_corners = true}),
  bicubic_down = interp({size = {3, 2}, mode = "bicubic", align_corners = false}),
  bicubic_scale = interp({scale_factor = 1.7, mode = "bicubic", align_corners = false}),
  bicubic_one_dim = interp({size = {4, 8}, mode = "bicubic", align_corners = false}),
  exact_1d = interp({size = 8, mode = "nearest-exact"}),
  exact_2d = interp({size = {7, 3}, mode = "nearest-exact"}),
  exact_2d_scale = interp({scale_factor = 2.0, mode = "nearest-exact"}),
  exact_3d = interp({size = {5, 6, 3}, mode = "nearest-exact"}),
  area_1d = interp({size = 3, mode = "area"}),
  area_2d = interp({size = {3, 2}, mode = "area"}),
  area_2d_up = interp({size = {6, 7}, mode = "area"}),
  area_2d_scale = interp({scale_factor = 0.5, mode = "area"}),
  area_3d = interp({size = {2, 3, 2}, mode = "area"}),
}
torch_cases.describe(describe, it, "interpolate's bicubic, nearest-exact and area match PyTorch 2.15", ref, CASES, 1e-12)

describe("interpolate modes' arguments", function()
  it("refuse what PyTorch refuses, naming it", function()
    support.expect_error(function() local _ = F.interpolate(accel.zeros(1, 1, 4), {size = 8, mode = "bicubic"}) end,
      "interpolate: mode 'bicubic' expects a 4D input, got 3D")
    support.expect_error(function() local _ = F.interpolate(accel.zeros(1, 1, 4), {size = 8, mode = "area", align_corners = true}) end,
      "interpolate: align_corners option can only be set with the interpolating modes")
  end)

  it("nn.Upsample passes the mode on", function()
    local x = accel.arange(20, {dtype = accel.float64}):reshape({1, 1, 4, 5})
    local up = accel.nn.Upsample({size = {7, 9}, mode = "bicubic", align_corners = true})
    assert.is_true(up(x):equal(F.interpolate(x, {size = {7, 9}, mode = "bicubic", align_corners = true})))
  end)
end)
