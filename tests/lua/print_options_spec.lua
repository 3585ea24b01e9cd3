-- print_options_spec.lua: accel.set_printoptions against the strings PyTorch
-- 2.15 prints after the same torch.set_printoptions calls (quoted next to
-- each case; dtype suffixes read accel.* where torch prints torch.*):
-- precision, sci_mode forced either way (and reset by the next call),
-- threshold and edgeitems summarizing, linewidth wrapping rows and
-- suffixes, the three profiles; bad options refused. The tensors are on
-- the cpu in every pass (the options do not depend on the device; the
-- device suffix is tensor_print_spec's).
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local expect_error = support.expect_error

accel.set_default_device("cpu")

describe("accel.set_printoptions", function()
  after_each(function() accel.set_printoptions({profile = "default"}) end)

  local x = accel.tensor({1.23456789, 2.5, 1e-5, 100})

  it("sets precision and sci_mode, sci_mode on every call", function()
    accel.set_printoptions({precision = 2})
    assert.are.equal("tensor([1.23e+00, 2.50e+00, 1.00e-05, 1.00e+02])", tostring(x))
    accel.set_printoptions({sci_mode = false})
    assert.are.equal("tensor([  1.23,   2.50,   0.00, 100.00])", tostring(x))
    accel.set_printoptions({sci_mode = true, precision = 3})
    assert.are.equal("tensor([1.500e+00, 2.250e+00])", tostring(accel.tensor({1.5, 2.25})))
    assert.are.equal("tensor([1.000e+00, 2.000e+00])", tostring(accel.tensor({1, 2}, {dtype = accel.float32})))
    assert.are.equal("tensor([1, 2, 3])", tostring(accel.tensor({1, 2, 3})))
    accel.set_printoptions({profile = "default", precision = 0})
    assert.are.equal("tensor([2, 2])", tostring(accel.tensor({1.6, 2.4})))
  end)

  it("summarizes past threshold with edgeitems and wraps at linewidth", function()
    accel.set_printoptions({profile = "default", threshold = 5, edgeitems = 2})
    assert.are.equal("tensor([0, 1,  ..., 8, 9])", tostring(accel.arange(10)))
    assert.are.equal("tensor([[ 0.,  1.,  ...,  4.,  5.],\n        [ 6.,  7.,  ..., 10., 11.],\n        ...,\n" ..
      "        [18., 19.,  ..., 22., 23.],\n        [24., 25.,  ..., 28., 29.]])",
      tostring(accel.arange(30):float():reshape({5, 6})))
    accel.set_printoptions({linewidth = 20})
    assert.are.equal("tensor([0., 1., 2.,\n        3.])", tostring(accel.arange(4):float()))
    assert.are.equal("tensor([0., 1., 2.],\n       dtype=accel.float64,\n       requires_grad=True)",
      tostring(accel.arange(3, {dtype = accel.float64, requires_grad = true})))
  end)

  it("has PyTorch's profiles", function()
    accel.set_printoptions({profile = "full"})
    assert.are.equal(8000, #tostring(accel.arange(1200)))
    local o = accel.get_printoptions()
    assert.same({4, math.huge, 3, 80}, {o.precision, o.threshold, o.edgeitems, o.linewidth})
    accel.set_printoptions({profile = "short"})
    assert.are.equal("tensor([[1.23, 1.23, 1.23],\n        [1.23, 1.23, 1.23],\n        [1.23, 1.23, 1.23]])",
      tostring(accel.full({3, 3}, 1.23456)))
    assert.are.equal("tensor([ 0.00,  1.50,  3.00,  4.50,  6.00,  7.50,  9.00, 10.50, 12.00, 13.50])",
      tostring(accel.arange(10):float() * 1.5))
    accel.set_printoptions({profile = "default"})
    assert.are.equal("tensor([1.2346e+00, 2.5000e+00, 1.0000e-05, 1.0000e+02])", tostring(x))
  end)

  it("refuses bad options, naming them", function()
    expect_error(function() accel.set_printoptions({precision = -1}) end,
      "set_printoptions: precision must be an integer >= 0, got -1")
    expect_error(function() accel.set_printoptions({profile = "long"}) end,
      "set_printoptions: profile must be \"default\", \"short\" or \"full\", got \"long\"")
    expect_error(function() accel.set_printoptions({sci_mode = 1}) end,
      "set_printoptions: sci_mode must be true, false or nil, got number")
    expect_error(function() accel.set_printoptions({edgeitems = 0}) end,
      "set_printoptions: edgeitems must be an integer >= 1, got 0")
    expect_error(function() accel.set_printoptions({linewidth = math.huge}) end,
      "set_printoptions: linewidth must be an integer >= 1")
    expect_error(function() accel.set_printoptions({foo = 1}) end, "set_printoptions: unknown option 'foo'")
    assert.are.equal(4, accel.get_printoptions().precision) -- nothing changed
  end)
end)
