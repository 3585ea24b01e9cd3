-- F.conv2d, F.max_pool2d, F.avg_pool2d (core/ops_conv.c, kernels/cpu/conv*.c,
-- pool.c). References: naive float64 loops written here in plain Lua, straight
-- from the definitions (each output is a sum / max over its window); central
-- finite differences (tests/lua/gradcheck.lua) for every gradient; and a
-- PyTorch fixture (tests/fixtures/conv.safetensors, written by
-- scripts/fixtures/make_conv_fixtures.py) for PyTorch's exact conventions
-- ("same" padding, ceil_mode windows, return_indices, avg_pool2d divisors).
local accel = require("accel")
local gc = dofile("tests/lua/gradcheck.lua")
local support = dofile("tests/lua/support.lua")
local F = accel.nn.functional

local f64 = accel.float64

local function flat(t) return t:double():contiguous():reshape(-1):tolist() end
local shape_of = support.shape_of

-- the largest |a - b| over two equal-length lists
local function max_diff(a, b)
  assert.are.equal(#a, #b)
  local m = 0
  for i = 1, #a do m = math.max(m, math.abs(a[i] - b[i])) end
  return m
end

local function assert_close(got, want, tol, what)
  local g = accel.is_tensor(got) and flat(got) or got
  local w = accel.is_tensor(want) and flat(want) or want
  local d = max_diff(g, w)
  assert(d <= tol, ("%s: max |diff| %.3g > %.3g"):format(what or "values", d, tol))
end

local function pair(v) if type(v) == "table" then return v end return {v, v} end

-- ---------------- naive references ----------------

-- conv2d of x (N, C, H, W) by w (O, C/g, KH, KW) with bias b (list or nil);
-- pad = {top, bottom, left, right}. Returns the flat output and its shape.
local function ref_conv(x, w, b, stride, pad, dil, groups)
  local xs, ws, xv, wv = shape_of(x), shape_of(w), flat(x), flat(w)
  local N, C, H, W = xs[1], xs[2], xs[3], xs[4]
  local O, Cg, KH, KW = ws[1], ws[2], ws[3], ws[4]
  local sh, sw, dh, dw = stride[1], stride[2], dil[1], dil[2]
  local OH = math.floor((H + pad[1] + pad[2] - dh * (KH - 1) - 1) / sh) + 1
  local OW = math.floor((W + pad[3] + pad[4] - dw * (KW - 1) - 1) / sw) + 1
  local Og = O / groups
  local out = {}
  for n = 0, N - 1 do
    for o = 0, O - 1 do
      local g = math.floor(o / Og)
      for oh = 0, OH - 1 do
        for ow = 0, OW - 1 do
          local s = b and b[o + 1] or 0
          for cl = 0, Cg - 1 do
            local c = g * Cg + cl
            for kh = 0, KH - 1 do
              for kw = 0, KW - 1 do
                local ih, iw = oh * sh - pad[1] + kh * dh, ow * sw - pad[3] + kw * dw
                if ih >= 0 and ih < H and iw >= 0 and iw < W then
                  s = s + xv[((n * C + c) * H + ih) * W + iw + 1] * wv[((o * Cg + cl) * KH + kh) * KW + kw + 1]
                end
              end
            end
          end
          out[#out + 1] = s
        end
      end
    end
  end
  return out, {N, O, OH, OW}
end

-- max_pool2d of x (N, C, H, W): flat values, flat 0-based indices, shape.
local function ref_max_pool(x, k, s, p, d, ceil_mode)
  local xs, xv = shape_of(x), flat(x)
  local NC, H, W = xs[1] * xs[2], xs[3], xs[4]
  local OH = support.pool_output_size(H, k[1], s[1], p[1], d[1], ceil_mode)
  local OW = support.pool_output_size(W, k[2], s[2], p[2], d[2], ceil_mode)
  local vals, idx = {}, {}
  for pl = 0, NC - 1 do
    for oh = 0, OH - 1 do
      for ow = 0, OW - 1 do
        local best, at = -math.huge, nil
        for kh = 0, k[1] - 1 do
          for kw = 0, k[2] - 1 do
            local ih, iw = oh * s[1] - p[1] + kh * d[1], ow * s[2] - p[2] + kw * d[2]
            if ih >= 0 and ih < H and iw >= 0 and iw < W then
              local v = xv[pl * H * W + ih * W + iw + 1]
              if at == nil or v > best then best, at = v, ih * W + iw end
            end
          end
        end
        vals[#vals + 1], idx[#idx + 1] = best, at
      end
    end
  end
  return vals, idx, {xs[1], xs[2], OH, OW}
end

-- ---------------- conv2d forward ----------------

describe("F.conv2d forward", function()
  before_each(function() accel.set_seed(7) end)

  -- {x shape, w shape, options, bias?}
  local cases = {
    {{2, 3, 6, 5}, {4, 3, 3, 3}, {}, true},
    {{2, 3, 7, 6}, {4, 3, 3, 2}, {stride = {2, 1}, padding = {1, 0}}, true},
    {{1, 2, 9, 8}, {3, 2, 3, 3}, {stride = {2, 3}, padding = 2, dilation = {2, 1}}, false},
    {{2, 4, 6, 6}, {6, 2, 3, 3}, {padding = 1, groups = 2}, true},
    {{2, 4, 5, 5}, {8, 1, 3, 3}, {padding = 1, groups = 4}, true},        -- depthwise, multiplier 2
    {{2, 4, 5, 7}, {6, 2, 1, 1}, {groups = 2}, true},                    -- 1x1
    {{2, 3, 5, 7}, {2, 3, 1, 1}, {stride = 2}, false},                   -- 1x1 strided
    {{1, 2, 4, 4}, {2, 2, 2, 2}, {padding = 3, dilation = 3}, true},     -- padding beyond the kernel's reach
    {{2, 1, 5, 5}, {3, 1, 5, 5}, {}, true},                              -- kernel = input
    {{2, 2, 6, 5}, {3, 2, 3, 2}, {padding = {1, 2, 0, 1}}, true},        -- {top, bottom, left, right}
    {{2, 2, 5, 6}, {2, 2, 2, 4}, {padding = "same", dilation = {3, 1}}, true}, -- "same", odd totals
    {{2, 2, 5, 6}, {2, 2, 3, 3}, {padding = "valid", stride = 1}, true},
  }
  for i, c in ipairs(cases) do
    it(("matches the naive reference, case %d"):format(i), function()
      local x = accel.randn(c[1], {dtype = f64})
      local w = accel.randn(c[2], {dtype = f64})
      local b = c[4] and accel.randn(c[2][1], {dtype = f64}) or nil
      local o = c[3]
      local st, dil = pair(o.stride or 1), pair(o.dilation or 1)
      local p = o.padding or 0
      local pad
      if p == "valid" then pad = {0, 0, 0, 0}
      elseif p == "same" then
        pad = {}
        for d = 1, 2 do
          local total = dil[d] * (c[2][2 + d] - 1)
          pad[2 * d - 1], pad[2 * d] = math.floor(total / 2), total - math.floor(total / 2)
        end
      elseif type(p) == "table" and #p == 4 then pad = p
      else p = pair(p); pad = {p[1], p[1], p[2], p[2]} end
      local want, shape = ref_conv(x, w, b and flat(b), st, pad, dil, o.groups or 1)
      local y = F.conv2d(x, w, b, o)
      assert.are.same(shape, shape_of(y))
      assert.are.equal(f64, y.dtype)
      assert_close(y, want, 1e-12)
      -- float32: oneDNN's primitives or im2col + sgemm, against the same reference
      local y32 = F.conv2d(x:float(), w:float(), b and b:float(), o)
      assert.are.equal(accel.float32, y32.dtype)
      assert_close(y32, want, 1e-4, "float32")
    end)
  end

  it("takes the float32 fast path on wider layers and agrees with float64", function()
    for _, c in ipairs({{{3, 16, 9, 9}, {24, 16, 3, 3}, {padding = 1}},
                        {{2, 16, 10, 9}, {16, 8, 3, 3}, {stride = 2, padding = {1, 0}, groups = 2, dilation = {1, 2}}},
                        {{2, 16, 8, 8}, {16, 1, 3, 3}, {padding = 1, groups = 16}}}) do
      local x, w, b = accel.randn(c[1]), accel.randn(c[2]), accel.randn(c[2][1])
      local y32 = F.conv2d(x, w, b, c[3])
      local y64 = F.conv2d(x:double(), w:double(), b:double(), c[3])
      assert_close(y32, y64, 1e-4)
    end
  end)

  it("accepts unbatched (C, H, W) input and a bias given in the options table", function()
    local x, w, b = accel.randn(3, 6, 6, {dtype = f64}), accel.randn(2, 3, 3, 3, {dtype = f64}), accel.randn(2, {dtype = f64})
    local y = F.conv2d(x, w, {bias = b, padding = 1})
    assert.are.same({2, 6, 6}, shape_of(y))
    assert_close(y, F.conv2d(x:unsqueeze(1), w, b, {padding = 1})[1], 0)
  end)

  it("works for an empty batch", function()
    local y = F.conv2d(accel.zeros(0, 2, 5, 5), accel.randn(3, 2, 3, 3), accel.randn(3))
    assert.are.same({0, 3, 3, 3}, shape_of(y))
  end)
end)

-- ---------------- gradients ----------------

describe("F.conv2d gradients (float64 finite differences)", function()
  before_each(function() accel.set_seed(11) end)

  local configs = {
    {{2, 3, 5, 5}, {4, 3, 3, 3}, {padding = 1}},
    {{1, 4, 7, 6}, {4, 2, 3, 2}, {stride = {2, 1}, padding = {1, 0}, dilation = {1, 2}, groups = 2}},
    {{2, 2, 4, 5}, {3, 2, 1, 1}, {}},
    {{1, 2, 5, 4}, {2, 2, 2, 3}, {padding = "same"}},
    {{1, 3, 6, 6}, {6, 1, 3, 3}, {stride = 2, padding = 1, groups = 3}},
  }
  for i, c in ipairs(configs) do
    it(("input, weight and bias, config %d"):format(i), function()
      local x, w, b = gc.randn(c[1]), gc.randn(c[2]), gc.randn(c[2][1])
      local ok, msg = gc.gradcheck(function(xx, ww, bb) return F.conv2d(xx, ww, bb, c[3]) end, {x, w, b})
      assert(ok, msg)
    end)
  end

  it("without a bias, and only for the inputs that require grad", function()
    local x, w = gc.randn(1, 2, 5, 5), accel.randn(3, 2, 3, 3, {dtype = f64})
    local ok, msg = gc.gradcheck(function(xx) return F.conv2d(xx, w, nil, {padding = 1}) end, {x})
    assert(ok, msg)
    local x2 = accel.randn(1, 2, 5, 5, {dtype = f64})
    local w2 = gc.randn(3, 2, 3, 3)
    F.conv2d(x2, w2):sum():backward()
    assert.is_nil(x2.grad)
    assert.are.same({3, 2, 3, 3}, shape_of(w2.grad))
  end)

  it("float32 gradients agree with float64 ones (oneDNN and im2col paths)", function()
    for _, c in ipairs({{{2, 16, 7, 7}, {8, 16, 3, 3}, {padding = 1}}, {{2, 1, 8, 8}, {4, 1, 3, 3}, {padding = 1}}}) do
      local x64, w64, b64 = gc.randn(c[1]), gc.randn(c[2]), gc.randn(c[2][1])
      local x32, w32, b32 = x64:detach():float(), w64:detach():float(), b64:detach():float()
      x32:requires_grad_(true); w32:requires_grad_(true); b32:requires_grad_(true)
      local r = accel.randn(2, c[2][1], c[1][3], c[1][4], {dtype = f64})
      local l64 = (F.conv2d(x64, w64, b64, c[3]) * r):sum()
      local l32 = (F.conv2d(x32, w32, b32, c[3]) * r:float()):sum()
      l64:backward()
      l32:backward()
      assert_close(x32.grad, x64.grad, 1e-4, "input grad")
      assert_close(w32.grad, w64.grad, 1e-3, "weight grad")
      assert_close(b32.grad, b64.grad, 1e-3, "bias grad")
    end
  end)
end)

-- ---------------- pooling ----------------

describe("F.max_pool2d", function()
  before_each(function() accel.set_seed(5) end)

  local cases = {
    {{2, 3, 8, 8}, 2, {}},
    {{1, 2, 5, 37}, 2, {}},                                             -- wide rows: the vectorised 2x2 path
    {{2, 2, 7, 9}, {3, 2}, {stride = {2, 1}, padding = 1}},
    {{1, 2, 7, 7}, 3, {stride = 2, padding = 1, ceil_mode = true}},
    {{1, 2, 8, 6}, {2, 3}, {stride = {3, 2}, padding = {0, 1}, dilation = 2, ceil_mode = true}},
    {{1, 1, 5, 5}, 5, {stride = 1, padding = 2}},
  }
  for i, c in ipairs(cases) do
    it(("values and indices match the naive reference, case %d"):format(i), function()
      local x = accel.randn(c[1], {dtype = f64})
      local o = c[3]
      local want, want_idx, shape = ref_max_pool(x, pair(c[2]), pair(o.stride or c[2]), pair(o.padding or 0),
        pair(o.dilation or 1), o.ceil_mode)
      local ret = {}
      for k, v in pairs(o) do ret[k] = v end
      ret.return_indices = true
      local v, idx = F.max_pool2d(x, c[2], ret)
      assert.are.same(shape, shape_of(v))
      assert.are.equal(accel.int64, idx.dtype)
      assert_close(v, want, 0)
      assert.are.same(want_idx, idx:reshape(-1):tolist())
      assert_close(F.max_pool2d(x:float(), c[2], o), want, 1e-6, "float32")
    end)

    it(("gradient, case %d"):format(i), function()
      local x = gc.randn(c[1])
      local ok, msg = gc.gradcheck(function(xx) return F.max_pool2d(xx, c[2], c[3]) end, {x})
      assert(ok, msg)
    end)
  end

  it("propagates NaN, and returns one value without return_indices", function()
    local x = accel.tensor({{{{1, 2}, {0 / 0, 3}}}})
    local r = {F.max_pool2d(x, 2)}
    assert.are.equal(1, #r)
    local v = r[1]:item()
    assert.is_true(v ~= v)
    -- in the vectorised path too: one NaN per window position, 16 windows
    local row0, row1 = {}, {}
    for i = 1, 32 do row0[i], row1[i] = i, -i end
    for w = 0, 15 do local k = w % 4; if k < 2 then row0[2 * w + k + 1] = 0 / 0 else row1[2 * w + k - 1] = 0 / 0 end end
    local v2, idx = F.max_pool2d(accel.tensor({{{row0, row1}}}), 2, {return_indices = true})
    for w = 0, 15 do
      local val = v2[1][1][1][w + 1]:item()
      assert.is_true(val ~= val)
      local k = w % 4
      assert.are.equal((k >= 2 and 32 or 0) + 2 * w + k % 2, idx[1][1][1][w + 1]:item())
    end
  end)

  it("gradient through flat indices for windows of more than 256 elements", function()
    local x = gc.randn(1, 1, 17, 18)
    local ok, msg = gc.gradcheck(function(xx) return F.max_pool2d(xx, 17, {stride = 1}) end, {x})
    assert(ok, msg)
  end)

  -- PyTorch 2.15: F.max_pool2d(torch.arange(16).view(1, 1, 4, 4).to(dt), 2) is [5, 7, 13, 15] in dt
  it("pools integer input in its dtype, as PyTorch's", function()
    for _, dt in ipairs({accel.int64, accel.int32, accel.uint8}) do
      local v, idx = F.max_pool2d(accel.arange(16):view(1, 1, 4, 4):to(dt), 2, {return_indices = true})
      assert.are.equal(dt, v.dtype)
      assert.are.same({5, 7, 13, 15}, flat(v))
      assert.are.same({5, 7, 13, 15}, flat(idx))
    end
    local big = 2 ^ 53 - 1
    assert.are.same({-big}, flat(F.max_pool2d(accel.tensor({{{{-big, -big}}}}, {dtype = accel.int64}), {1, 2})))
  end)

  it("accepts unbatched (C, H, W) input", function()
    local x = accel.randn(3, 6, 6)
    assert.are.same({3, 3, 3}, shape_of(F.max_pool2d(x, 2)))
    assert_close(F.max_pool2d(x, 2), F.max_pool2d(x:unsqueeze(1), 2)[1], 0)
  end)
end)

describe("F.avg_pool2d", function()
  before_each(function() accel.set_seed(9) end)

  it("matches window means, and its gradient checks", function()
    local x = accel.randn(2, 3, 6, 6, {dtype = f64})
    local y = F.avg_pool2d(x, 2)
    local xv, yv = flat(x), flat(y)
    for pl = 0, 5 do
      for oh = 0, 2 do
        for ow = 0, 2 do
          local s = 0
          for kh = 0, 1 do for kw = 0, 1 do s = s + xv[pl * 36 + (2 * oh + kh) * 6 + 2 * ow + kw + 1] end end
          assert(math.abs(yv[pl * 9 + oh * 3 + ow + 1] - s / 4) < 1e-12)
        end
      end
    end
    local ok, msg = gc.gradcheck(function(xx) return F.avg_pool2d(xx, 3, {stride = 2, padding = 1, ceil_mode = true,
      count_include_pad = false}) end, {gc.randn(1, 2, 6, 7)})
    assert(ok, msg)
  end)

  it("sums half windows in float32, rounding once (torch 2.15: 64 and 60000, not inf)", function()
    local h = accel.float16
    local y = F.avg_pool2d(accel.full({1, 1, 32, 32}, 64, {dtype = h}), 32) -- window sum 65536 > 65504
    assert.are.equal(h, y.dtype)
    assert.are.same({64}, flat(y))
    assert.are.same({60000, 60000, 60000, 60000}, flat(F.avg_pool2d(accel.full({1, 1, 4, 4}, 60000, {dtype = h}), 2)))
  end)

  it("averages int64 input truncated toward zero, as PyTorch's (torch 2.15 values)", function()
    local x = accel.tensor({{{{7, -3, 5}, {2, -9, 4}, {1, 1, -8}}}}, {dtype = accel.int64})
    local y = F.avg_pool2d(x, 2, {stride = 1, padding = 1, count_include_pad = false})
    assert.are.equal(accel.int64, y.dtype)
    assert.are.same({{{{7, 2, 1, 5}, {4, 0, 0, 4}, {1, -1, -3, -2}, {1, 1, -3, -8}}}}, y:tolist())
    assert.are.same({{{{1, 1, 0, 1}, {2, 0, 0, 2}, {0, -1, -3, -1}, {0, 0, -1, -2}}}},
      F.avg_pool2d(x, 2, {stride = 1, padding = 1}):tolist())
    assert.are.same({{{{0, 4}, {1, -8}}}}, F.avg_pool2d(x, 2, {stride = 2, ceil_mode = true}):tolist())
  end)
end)

-- ---------------- PyTorch parity ----------------

describe("PyTorch parity (tests/fixtures/conv.safetensors)", function()
  local t = accel.load("tests/fixtures/conv.safetensors", {device = accel.get_default_device()}) -- where the suite runs

  it("conv2d (stride, padding, dilation, groups) + max_pool2d with indices, forward and backward", function()
    local x, w, b = gc.leaf(t["a.x"]), gc.leaf(t["a.w"]), gc.leaf(t["a.b"])
    local y = F.conv2d(x, w, b, {stride = {2, 1}, padding = {1, 0}, dilation = {1, 2}, groups = 2})
    assert_close(y, t["a.y"], 1e-12, "conv2d")
    local p, idx = F.max_pool2d(y, 2, {stride = 1, padding = 1, return_indices = true})
    assert_close(p, t["a.p"], 1e-12, "max_pool2d")
    assert.are.same(t["a.idx"]:reshape(-1):tolist(), idx:reshape(-1):tolist())
    local loss = (p * t["a.r"]):sum()
    loss:backward()
    assert_close(x.grad, t["a.gx"], 1e-12, "input grad")
    assert_close(w.grad, t["a.gw"], 1e-12, "weight grad")
    assert_close(b.grad, t["a.gb"], 1e-12, "bias grad")
  end)

  it("padding=\"same\" with an even kernel pads bottom/right", function()
    assert_close(F.conv2d(t["same.x"], t["same.w"], nil, {padding = "same", dilation = {1, 2}}), t["same.y"], 1e-12)
  end)

  it("max_pool2d with ceil_mode and padding: values, indices, gradient", function()
    local x = gc.leaf(t["pool.x"])
    local v, idx = F.max_pool2d(x, 3, {stride = 2, padding = 1, ceil_mode = true, return_indices = true})
    assert_close(v, t["pool.v"], 0)
    assert.are.same(t["pool.idx"]:reshape(-1):tolist(), idx:reshape(-1):tolist())
    local loss = (v * t["pool.r"]):sum()
    loss:backward()
    assert_close(x.grad, t["pool.gx"], 1e-12)
  end)

  it("avg_pool2d divisors: ceil_mode, count_include_pad, divisor_override", function()
    local x = t["pool.x"]
    assert_close(F.avg_pool2d(x, 3, {stride = 2, padding = 1, ceil_mode = true, count_include_pad = false}), t["avg.y1"], 1e-12)
    assert_close(F.avg_pool2d(x, 3, {stride = 2, padding = 1, ceil_mode = true}), t["avg.y2"], 1e-12)
    assert_close(F.avg_pool2d(x, 2, {divisor_override = 3}), t["avg.y3"], 1e-12)
  end)
end)

-- ---------------- autocast ----------------

describe("conv2d under autocast", function()
  it("runs in bfloat16 with float32 accumulation, returns bfloat16, and reaches float32 masters", function()
    accel.set_seed(3)
    local x, w, b = accel.randn(2, 8, 6, 6), accel.randn(8, 8, 3, 3, {requires_grad = true}), accel.randn(8, {requires_grad = true})
    local ref = F.conv2d(x, w, b, {padding = 1})
    local prev = accel._C.set_autocast(accel.bfloat16)
    local ok, y = pcall(F.conv2d, x, w, b, {padding = 1})
    accel._C.set_autocast(prev)
    assert(ok, y)
    assert.are.equal(accel.bfloat16, y.dtype)
    local err = (y:float() - ref):abs():max():item() / ref:abs():max():item()
    assert(err < 2e-2, ("relative error %g"):format(err))
    y:float():sum():backward()
    assert.are.equal(accel.float32, w.grad.dtype)
    assert.are.equal(accel.float32, b.grad.dtype)
    assert_close(b.grad, accel.full({8}, 2 * 36), 0)
  end)

  it("under float16 returns float16 (computed in float32 from float16-rounded inputs)", function()
    accel.set_seed(4)
    local x, w = accel.randn(1, 3, 5, 5), accel.randn(2, 3, 3, 3)
    local prev = accel._C.set_autocast(accel.float16)
    local ok, y = pcall(F.conv2d, x, w)
    accel._C.set_autocast(prev)
    assert(ok, y)
    assert.are.equal(accel.float16, y.dtype)
    assert_close(y:float(), F.conv2d(x:half():float(), w:half():float()):half():float(), 0)
  end)
end)

-- ---------------- errors ----------------

describe("conv2d / pooling errors", function()
  local function err(fn, ...)
    local ok, msg = pcall(function(...) return (fn(...)) end, ...) -- not a tail call: keeps this file's frame
    assert.is_false(ok)
    assert.matches("conv_spec.lua:%d+:", msg) -- points at the caller's line
    return msg
  end
  local x = accel.randn(2, 3, 5, 5)

  it("channel mismatch", function()
    assert.matches("weight %[4, 2, 3, 3%] with groups=1 expects input with 2 channels, but input %[2, 3, 5, 5%] has 3",
      err(F.conv2d, x, accel.randn(4, 2, 3, 3)))
  end)

  it("kernel larger than the padded input", function()
    assert.matches("kernel %(7 x 7, dilation %(1, 1%)%) is larger than the padded input %(5 x 5%)",
      err(F.conv2d, x, accel.randn(4, 3, 7, 7)))
    assert.matches("larger than the padded input %(5 x 5%)", err(F.conv2d, x, accel.randn(4, 3, 3, 3), nil, {dilation = 3}))
  end)

  it("groups not dividing the channels", function()
    assert.matches("input channels %(3, input %[2, 3, 5, 5%]%) are not divisible by groups %(2%)",
      err(F.conv2d, x, accel.randn(4, 3, 3, 3), nil, {groups = 2}))
    assert.matches("out_channels %(3, weight %[3, 2, 3, 3%]%) are not divisible by groups %(2%)",
      err(F.conv2d, accel.randn(1, 4, 5, 5), accel.randn(3, 2, 3, 3), nil, {groups = 2}))
    assert.matches("groups must be a positive integer, got 0", err(F.conv2d, x, accel.randn(4, 3, 3, 3), nil, {groups = 0}))
  end)

  it("bad shapes, parameters and dtypes", function()
    local w = accel.randn(4, 3, 3, 3)
    assert.matches("expected input of shape %(N, C, H, W%) or %(C, H, W%), got %[3, 5%]", err(F.conv2d, accel.randn(3, 5), w))
    assert.matches("weight must have shape", err(F.conv2d, x, accel.randn(4, 3, 3)))
    assert.matches("bias must have shape %[4%]", err(F.conv2d, x, w, accel.randn(3)))
    assert.matches("stride must be positive, got %(0, 1%)", err(F.conv2d, x, w, nil, {stride = {0, 1}}))
    assert.matches("padding must be non%-negative", err(F.conv2d, x, w, nil, {padding = -1}))
    assert.matches("dilation must be positive", err(F.conv2d, x, w, nil, {dilation = 0}))
    assert.matches("padding=\"same\" is not supported for strided convolutions", err(F.conv2d, x, w, nil, {padding = "same", stride = 2}))
    assert.matches("padding must be \"valid\", \"same\" or integers", err(F.conv2d, x, w, nil, {padding = "full"}))
    assert.matches("stride must be an integer or a pair", err(F.conv2d, x, w, nil, {stride = {1, 2, 3}}))
    assert.matches("must have the same dtype", err(F.conv2d, x:double(), w))
    assert.matches("must be floating point", err(F.conv2d, x:to(accel.int64), w:to(accel.int64)))
    assert.matches("bias %(float64%) must have the input's dtype %(float32%)", err(F.conv2d, x, w, accel.randn(4, {dtype = f64})))
  end)

  it("max_pool2d", function()
    assert.matches("padding %(2, 2%) must be non%-negative and at most half the kernel size %(3, 3%)",
      err(F.max_pool2d, x, 3, {padding = 2}))
    assert.matches("kernel_size must be positive", err(F.max_pool2d, x, 0))
    assert.matches("is too small for kernel %(7, 7%)", err(F.max_pool2d, x, 7))
    assert.matches("expected input of shape", err(F.max_pool2d, accel.randn(5, 5), 2))
    assert.matches("input must be a number dtype, got bool", err(F.max_pool2d, x:gt(0), 2))
    assert.matches("int64 input holds values beyond %+%-2%^53",
      err(F.max_pool2d, accel.tensor({{{{2 ^ 60, 1}}}}, {dtype = accel.int64}), {1, 2}))
    -- 2^53 + 1 (a float64 reads it as 2^53): refused, not pooled as 2^53
    assert.matches("int64 input holds values beyond %+%-2%^53",
      err(F.max_pool2d, accel.tensor({{{{2 ^ 53, 0}}}}, {dtype = accel.int64}) + 1, {1, 2}))
    assert.matches("kernel_size is required", err(F.max_pool2d, x))
  end)

  -- torch 2.15: F.max_pool2d(x, []) -> "max_pool2d: kernel_size must either be a single int, or a tuple of two
  -- ints"; {} and {kernel_size = 2} have no list entries: an error here, not a kernel read from unset memory
  it("max_pool2d / conv2d refuse a table with no list entries as a window parameter", function()
    for _, bad in ipairs({{}, {kernel_size = 2}}) do
      assert.matches("max_pool2d: kernel_size must be an integer or a pair {h, w}, got a table with no list entries",
        err(F.max_pool2d, x, bad), 1, true)
      for _, key in ipairs({"padding", "dilation"}) do
        assert.matches("max_pool2d: " .. key .. " must be an integer or a pair {h, w}, got a table with no list entries",
          err(F.max_pool2d, x, 2, {[key] = bad}), 1, true)
      end
      assert.matches("conv2d: stride must be an integer or a pair {h, w}, got a table with no list entries",
        err(F.conv2d, x, accel.randn(4, 3, 3, 3), nil, {stride = bad}), 1, true)
      assert.matches("conv2d: padding must be an integer or a list of 2 or 4 integers, got a table with no list entries",
        err(F.conv2d, x, accel.randn(4, 3, 3, 3), nil, {padding = bad}), 1, true)
      assert.matches("lp_pool2d: stride must be an integer >= 1 or a list of 2 of them",
        err(F.lp_pool2d, x, 2, 2, {stride = {2, 2, 2}}), 1, true)
    end
    -- an empty stride is the kernel size, as torch's stride=[]
    assert.same({2, 3, 2, 2}, shape_of(F.max_pool2d(x, 2, {stride = {}})))
  end)

  it("avg_pool2d", function()
    assert.matches("padding <= kernel_size / 2", err(F.avg_pool2d, x, 2, {padding = 2}))
    assert.matches("is too small", err(F.avg_pool2d, x, 6))
    assert.matches("avg_pool2d: input dtype int32 is not supported %(floating point or int64",
      err(F.avg_pool2d, x:to(accel.int32), 2))
    assert.matches("avg_pool2d: input dtype bool is not supported", err(F.avg_pool2d, x:gt(0), 2))
    assert.matches("divisor_override must be a nonzero number, got 0", err(F.avg_pool2d, x, 2, {divisor_override = 0}))
    assert.matches("kernel_size must be an integer or a pair", err(F.avg_pool2d, x, "x"))
    -- called as a tail call (no frame of the caller left): still the caller's file:line
    local ok, msg = pcall(function() return F.avg_pool2d(accel.zeros(2, 2), 2) end)
    assert.is_false(ok)
    assert.matches("^[^:]*conv_spec.lua:%d+: avg_pool2d: expected input of shape", msg)
  end)
end)
