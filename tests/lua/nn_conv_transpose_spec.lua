-- nn_conv_transpose_spec.lua: F.conv_transpose1d / 2d / 3d and
-- nn.ConvTranspose1d / 2d / 3d against PyTorch 2.15: outputs and the
-- gradients of input, weight and bias from
-- tests/fixtures/conv_transpose.safetensors
-- (scripts/fixtures/make_conv_transpose_fixtures.py), the modules' printed
-- forms, output_size and PyTorch's messages quoted beside them.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local nn, F = accel.nn, accel.nn.functional
local close, expect_error = support.assert_close, support.expect_error

local ref = accel.load("tests/fixtures/conv_transpose.safetensors")

-- Must match CASES in the fixture script (PyTorch's keyword arguments, as the options table).
local CASES = {
  plain = {},
  stride2 = {stride = 2},
  stride_pad_outpad = {stride = {2, 3}, padding = {1, 2}, output_padding = {1, 2}},
  groups = {stride = 2, groups = 2},
  dilation = {dilation = 2, padding = 1},
  big_padding = {padding = 2, stride = 1},
  unbatched = {stride = 2},
  conv1d = {stride = 3, padding = 1, output_padding = 2},
  conv1d_groups = {groups = 2, dilation = 2},
  conv3d = {stride = {2, 1, 2}, padding = {0, 1, 1}, output_padding = {1, 0, 1}},
  conv3d_groups = {groups = 2, dilation = 2, stride = 2},
  conv3d_unbatched = {},
}

describe("conv_transpose matches PyTorch", function()
  local names = {}
  for name in pairs(CASES) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    it(name .. ": output and the gradients of input, weight and bias", function()
      local x = ref[name .. ".x"]:clone():requires_grad_(true)
      local w = ref[name .. ".w"]:clone():requires_grad_(true)
      local b = ref[name .. ".b"]:clone():requires_grad_(true)
      local o = {bias = b}
      for k, v in pairs(CASES[name]) do o[k] = v end
      local fn = ({F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d})[w:dim() - 2]
      local y = fn(x, w, o)
      close(y, ref[name .. ".y"], 1e-12)
      local n = y:numel()
      local ws = {}
      for i = 0, n - 1 do ws[i + 1] = math.cos(0.3 * i) end
      local _ = (y * accel.tensor(ws, {dtype = accel.float64, device = y.device}):view(y.shape)):sum():backward()
      close(x.grad, ref[name .. ".gx"], 1e-12)
      close(w.grad, ref[name .. ".gw"], 1e-12)
      close(b.grad, ref[name .. ".gb"], 1e-12)
    end)
  end

  it("takes PyTorch's positional arguments (bias, stride, padding, output_padding, groups, dilation)", function()
    local x, w, b = ref["stride_pad_outpad.x"], ref["stride_pad_outpad.w"], ref["stride_pad_outpad.b"]
    close(F.conv_transpose2d(x, w, b, {2, 3}, {1, 2}, {1, 2}), ref["stride_pad_outpad.y"], 1e-12)
  end)
end)

describe("ConvTranspose modules", function()
  it("print as PyTorch's", function()
    -- torch 2.15's str() of the same modules
    assert.are.equal("ConvTranspose2d(16, 33, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1), "
      .. "bias=False)", tostring(nn.ConvTranspose2d(16, 33, 3, {stride = 2, padding = 1, output_padding = 1, bias = false})))
    assert.are.equal("ConvTranspose1d(4, 6, kernel_size=(3,), stride=(1,), dilation=(2,), groups=2)",
      tostring(nn.ConvTranspose1d(4, 6, 3, {groups = 2, dilation = 2})))
    assert.are.equal("ConvTranspose2d(2, 3, kernel_size=(3, 5), stride=(2, 1))", tostring(nn.ConvTranspose2d(2, 3, {3, 5}, {2, 1})))
    assert.are.equal("ConvTranspose3d(4, 6, kernel_size=(3, 3, 3), stride=(2, 1, 1), groups=2, bias=False)",
      tostring(nn.ConvTranspose3d(4, 6, 3, {stride = {2, 1, 1}, groups = 2, bias = false})))
  end)

  -- torch 2.15: ConvTranspose3d(2, 3, 3, stride=2)(ones(1, 2, 2, 3, 4), output_size=[6, 8, 10]).shape
  -- == [1, 3, 6, 8, 10]
  it("ConvTranspose3d forwards as the function, with output_size", function()
    local m = nn.ConvTranspose3d(2, 3, 3, {stride = 2})
    local x = accel.randn(1, 2, 2, 3, 4)
    close(m(x), F.conv_transpose3d(x, m.weight, m.bias, {stride = 2}), 0)
    assert.are.same({1, 3, 6, 8, 10}, support.shape_of(m(x, {6, 8, 10})))
  end)

  it("has PyTorch's weight layout and initialisation bounds, and forwards as the function", function()
    accel.set_seed(3)
    local m = nn.ConvTranspose2d(4, 6, 3, {groups = 2, stride = 2})
    assert.are.same({4, 3, 3, 3}, {m.weight:size(1), m.weight:size(2), m.weight:size(3), m.weight:size(4)})
    -- kaiming_uniform_(a = sqrt(5)) over fan_in = weight:size(2) * 3 * 3 = 27: bound 1 / sqrt(27), as the bias's
    local bound = 1 / math.sqrt(27)
    assert.is_true(m.weight:abs():max():item() <= bound and m.bias:abs():max():item() <= bound)
    local x = accel.randn(1, 4, 5, 5)
    close(m(x), F.conv_transpose2d(x, m.weight, m.bias, {stride = 2, groups = 2}), 0)
  end)

  -- torch 2.15: ConvTranspose2d(2, 3, 3, stride=2)(ones(1, 2, 4, 4), output_size=[10, 10]).shape == [1, 3, 10, 10];
  -- output_size=[12, 12]: "requested an output size of [12, 12], but valid sizes range from [9, 9] to [10, 10]"
  it("forward(input, output_size) picks the output padding", function()
    local m = nn.ConvTranspose2d(2, 3, 3, {stride = 2})
    local y = m(accel.ones(1, 2, 4, 4), {10, 10})
    assert.are.same({1, 3, 10, 10}, {y:size(1), y:size(2), y:size(3), y:size(4)})
    assert.are.equal(10, m(accel.ones(1, 2, 4, 4), {1, 3, 10, 10}):size(4))
    expect_error(function() local _ = m(accel.ones(1, 2, 4, 4), {12, 12}) end,
      "requested an output size of (12, 12), but valid sizes range from 9 to 10")
  end)

  it("bad input is named, as PyTorch's", function()
    -- torch: "Given transposed=1, weight of size [3, 2, 3, 3], expected input[1, 2, 4, 4] to have 3 channels, but got 2"
    expect_error(function() local _ = F.conv_transpose2d(accel.ones(1, 2, 4, 4), accel.ones(3, 2, 3, 3)) end,
      "conv_transpose2d: weight", "expects an input with 3 channels")
    -- torch: "output padding must be smaller than either stride or dilation"
    expect_error(function() local _ = F.conv_transpose2d(accel.ones(1, 2, 4, 4), accel.ones(2, 2, 3, 3), nil, 2, 0, 2) end,
      "output_padding (2) must be smaller than either stride (2) or dilation (1)")
    expect_error(function() local _ = nn.ConvTranspose2d(3, 4, 3, {groups = 2}) end, "in_channels (3) must be divisible by groups (2)")
    expect_error(function() local _ = nn.ConvTranspose2d(2, 4, 3, {padding_mode = "reflect"}) end,
      'Only "zeros" padding mode is supported')
  end)
end)
