-- Elementwise ops over strided operands big enough for core/backend/iter.c to spread
-- their short runs over the OpenMP team (many rows shorter than the kernels'
-- own threshold): results must equal the same ops on contiguous copies
-- (one run, the kernels' contiguous path) and a plain Lua loop on samples.
local accel = require("accel")

local function same(a, b) return a:equal(b) end

describe("strided ops split over threads by rows", function()
  local before
  setup(function() before = accel.num_threads(); accel.num_threads(2) end)
  teardown(function() accel.num_threads(before) end)
  before_each(function() accel.set_seed(7) end)

  it("transposed operands (binary, unary, copy)", function()
    local x, y = accel.randn(300, 257), accel.randn(300, 257)
    local xt, yt = x:t(), y:t() -- (257, 300) with row stride 1: 257 runs of 300
    assert.is_true(same(xt + yt, (x + y):t():contiguous()))
    assert.is_true(same(xt:exp(), x:exp():t():contiguous()))
    assert.is_true(same(xt:contiguous(), x:t():clone()))
    assert.equal(x[17][201]:item(), xt:contiguous()[201][17]:item())
  end)

  it("a broadcast row and a broadcast column", function()
    local a, row, col = accel.randn(1000, 100), accel.randn(100), accel.randn(1000, 1)
    local want_row = a + row:expand(1000, 100):contiguous()
    assert.is_true(same(a + row, want_row))
    assert.is_true(same(a * col, a * col:expand(1000, 100):contiguous()))
    local r = (a + row)
    for _, i in ipairs({1, 500, 1000}) do
      for _, j in ipairs({1, 37, 100}) do
        assert.is_true(math.abs(a[i][j]:item() + row[j]:item() - r[i][j]:item()) < 1e-6) -- float32 sum
      end
    end
  end)

  it("in-place writes into a column slice, where and fill on strided views", function()
    local z = accel.zeros(2000, 48)
    local part = z:narrow(2, 17, 16)       -- 2000 runs of 16
    part:copy_(accel.ones(2000, 16) * 3)
    assert.equal(2000 * 16 * 3, z:sum():item())
    assert.equal(0, z:narrow(2, 1, 16):abs():sum():item())
    part:add_(accel.ones(2000, 16))
    assert.equal(2000 * 16 * 4, z:sum():item())
    local c = accel.randn(2000, 16):gt(0)
    local w = accel.where(c, part, -part)
    assert.is_true(same(w, accel.where(c, part:contiguous(), -part:contiguous())))
    z:narrow(2, 33, 16):fill_(2)
    assert.equal(2000 * 16 * 6, z:sum():item())
  end)
end)
