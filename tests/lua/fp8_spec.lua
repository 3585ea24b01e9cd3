-- fp8_spec.lua: the fp8 formats and the emulated fp8 recipe.
--  * casts float32 <-> float8_e4m3fn / float8_e5m2 against PyTorch 2.x bit
--    for bit (tests/fixtures/fp8_casts.safetensors, made by
--    scripts/fixtures/make_fp8_fixtures.py): the plain tensor cast
--    t:to(dtype) against x.to(dtype), the recipe's saturating cast against
--    x.clamp(-max, max).to(dtype), the scaled decode (fp8_dequantize)
--    against the fixture's decoded codes times the scale;
--  * the scaled matmul against a float64 product of the same codes;
--  * delayed scaling's scales against a closed-form recomputation from the
--    recorded amaxes;
--  * an fp8 training run of the seed MLP against the bf16 run's losses;
--  * bad recipe options.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local C = accel._C

local FIXTURE = "tests/fixtures/fp8_casts.safetensors"
local FORMATS = {e4m3fn = accel.float8_e4m3fn, e5m2 = accel.float8_e5m2}

-- float32 bit pattern of a Lua number (through string.pack, Lua 5.4).
local function f32_bits(v) return string.unpack("<I4", string.pack("<f", v)) end
local function fround(v) return string.unpack("<f", string.pack("<f", v)) end

-- Same float32 value: equal bits, or both NaN with the same sign.
local function same_f32(a, b)
  local ba, bb = f32_bits(a), f32_bits(b)
  if a ~= a and b ~= b then return (ba >> 31) == (bb >> 31) end
  return ba == bb
end

-- The positions where two lists differ, at most 5 of them, as text.
local function mismatches(got, want, inputs, same)
  local bad, n = {}, 0
  for i = 1, #want do
    if not same(got[i], want[i]) then
      n = n + 1
      if #bad < 5 then
        bad[#bad + 1] = ("[%d] input %s: got %s, want %s"):format(i, inputs and ("%.9g"):format(inputs[i]) or "?",
          tostring(got[i]), tostring(want[i]))
      end
    end
  end
  return n, table.concat(bad, "; ")
end

local fixture = accel.load(FIXTURE, {device = accel.get_default_device()}) -- where the suite runs

local function codes_of(t) return C.fp8_bits(t, accel.uint8):tolist() end

describe("fp8 casts against PyTorch 2.x", function()
  for name, dt in pairs(FORMATS) do
    it(name .. ": every one of the 256 codes decodes as PyTorch decodes it", function()
      local codes = C.fp8_bits(accel.arange(0, 256, 1, {dtype = accel.uint8}), dt)
      local want = fixture[name .. ".decode"]:tolist()
      assert.are.equal(256, #want)
      local n, where = mismatches(codes:float():tolist(), want, nil, same_f32)
      assert.are.equal(0, n, where)
    end)

    it(name .. ": fp8_dequantize(codes, s) gives each code's PyTorch value times s, in float32", function()
      local codes = C.fp8_bits(accel.arange(0, 256, 1, {dtype = accel.uint8}), dt)
      local want = fixture[name .. ".decode"]:tolist()
      for _, s in ipairs({1.0, 0.25, fround(0.37), 2.0 ^ 20}) do
        local w = {}
        for i, v in ipairs(want) do w[i] = fround(v * s) end -- the double product is exact: one rounding
        local got = C.fp8_dequantize(codes, s)
        assert.are.equal(accel.float32, got.dtype)
        local n, where = mismatches(got:tolist(), w, nil, same_f32)
        assert.are.equal(0, n, where)
      end
      local t = codes:reshape({16, 16}):t() -- strided codes
      local d = C.fp8_dequantize(t, 1.0)
      assert.are.same({16, 16}, {d:size(1), d:size(2)})
      local n, where = mismatches(d:reshape({256}):tolist(), t:contiguous():float():reshape({256}):tolist(), nil, same_f32)
      assert.are.equal(0, n, where)
    end)

    it(name .. ": t:to(" .. name .. ") encodes as x.to(torch.float8_" .. name .. ")", function()
      local x = fixture[name .. ".inputs"]
      local want = fixture[name .. ".plain"]:tolist()
      assert.is_true(#want > 8000)
      local n, where = mismatches(codes_of(x:to(dt)), want, x:tolist(), rawequal)
      assert.are.equal(0, n, where)
    end)

    it(name .. ": the recipe's cast (scale 1) encodes as x.clamp(-max, max).to(...)", function()
      local x = fixture[name .. ".inputs"]
      local q = C.fp8_quantize(x, 1.0, dt)
      local n, where = mismatches(codes_of(q), fixture[name .. ".saturated"]:tolist(), x:tolist(), rawequal)
      assert.are.equal(0, n, where)
    end)
  end

  it("e4m3fn saturates to +-448 (inf too); e5m2 keeps inf, its recipe cast saturates to +-57344", function()
    local x = accel.tensor({470, -1e10, math.huge, -math.huge, 0 / 0})
    local e4 = x:to(accel.float8_e4m3fn):float():tolist()
    assert.are.same({448, -448, 448, -448}, {e4[1], e4[2], e4[3], e4[4]})
    assert.is_true(e4[5] ~= e4[5])
    local e5 = x:to(accel.float8_e5m2):float():tolist()
    assert.are.same({448, -math.huge, math.huge, -math.huge}, {e5[1], e5[2], e5[3], e5[4]})
    local s5 = C.fp8_quantize(x, 1.0, accel.float8_e5m2):float():tolist()
    assert.are.same({448, -57344, 57344, -57344}, {s5[1], s5[2], s5[3], s5[4]})
  end)

  -- torch 2.15: torch.full((2,), 500., dtype=torch.float8_e4m3fn), .fill_(500.), full(inf) for e4m3fn and
  -- fill_(1e6) for e5m2 raise "value cannot be converted to type c10::Float8_e4m3fn without overflow";
  -- torch.tensor([500.], dtype=torch.float8_e4m3fn) and where(c, x, 500.) give 448
  it("a fill value beyond the format's range is an error, as torch's; the constructor saturates", function()
    local e4, e5 = accel.float8_e4m3fn, accel.float8_e5m2
    for _, f in ipairs({function() return accel.full({2}, 500, {dtype = e4}) end,
      function() return accel.zeros(2, {dtype = e4}):fill_(-448.5) end,
      function() return accel.full({2}, math.huge, {dtype = e4}) end,
      function() return accel.zeros(2, {dtype = e5}):fill_(1e6) end,
      function() local t = accel.zeros(2, {dtype = e4}); t[1] = 460; return t end}) do
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("cannot be converted to type float8_e", 1, true), err)
    end
    assert.are.same({448, 448}, accel.full({2}, 448, {dtype = e4}):float():tolist())
    assert.are.same({math.huge}, accel.full({1}, math.huge, {dtype = e5}):float():tolist())
    assert.are.same({448}, accel.tensor({500}, {dtype = e4}):float():tolist())
    assert.are.same({0, 448}, accel.where(accel.tensor({true, false}), accel.zeros(2, {dtype = e4}), 500):float()
      :tolist())
  end)

  it("the edges of docs/fp8.md: the ties 432 (e4m3fn) and 61440 (e5m2) round to the even neighbour", function()
    -- PyTorch 2.15: tensor([431.99, 432., -432.]).to(float8_e4m3fn) -> [416., 448., -448.];
    -- tensor([61439., 61440., -61440.]).to(float8_e5m2) -> [57344., inf, -inf]
    assert.are.same({416, 448, -448}, accel.tensor({431.99, 432, -432}):to(accel.float8_e4m3fn):float():tolist())
    assert.are.same({57344, math.huge, -math.huge},
      accel.tensor({61439, 61440, -61440}):to(accel.float8_e5m2):float():tolist())
  end)
end)


-- ---------------------------------------------------------------- the scaled matmul

-- A {rows, cols} fp8 tensor of random finite codes (uniform over the codes,
-- so over every magnitude; NaN / inf codes replaced by code 0x30).
local function random_codes(rows, cols, dt)
  local bits = accel.randint(0, 256, {rows, cols}):to(accel.uint8)
  local t = C.fp8_bits(bits, dt)
  local v = t:float()
  local bad = v:ne(v):logical_or(v:abs():eq(math.huge))
  local fill = C.fp8_bits(accel.full({rows, cols}, 0x30, {dtype = accel.uint8}), dt)
  return accel.where(bad, fill, t)
end

-- The float64 product of the decoded codes times sa * sb, and the sum of
-- |a| |b| per entry (for the float32 accumulation bound).
local function reference_mm(a, sa, b, sb)
  local A, B = a:float():tolist(), b:float():tolist()
  local M, K, N = #A, #B, #B[1]
  local ref, mag = {}, {}
  for i = 1, M do
    ref[i], mag[i] = {}, {}
    for j = 1, N do
      local s, m = 0.0, 0.0
      for k = 1, K do
        local p = A[i][k] * B[k][j]
        s, m = s + p, m + math.abs(p)
      end
      ref[i][j], mag[i][j] = s * sa * sb, m * math.abs(sa * sb)
    end
  end
  return ref, mag
end

local U = 2.0 ^ -24 -- float32's unit roundoff

-- Worst |C - ref| / bound over C's entries, where bound is the float32
-- accumulation bound (K + 1) u sum|a||b| |sa sb| + 2 u |ref| + the smallest subnormal.
local function worst_ratio(c, ref, mag, K)
  local C_ = c:tolist()
  local worst = 0
  for i = 1, #ref do
    for j = 1, #ref[1] do
      local bound = (K + 1) * U * mag[i][j] + 2 * U * math.abs(ref[i][j]) + 2.0 ^ -149
      local r = math.abs(C_[i][j] - ref[i][j]) / bound
      if r > worst then worst = r end
    end
  end
  return worst
end

describe("fp8 scaled matmul", function()
  local cases = {{"e4m3fn x e4m3fn", accel.float8_e4m3fn, accel.float8_e4m3fn},
                 {"e5m2 x e4m3fn", accel.float8_e5m2, accel.float8_e4m3fn},
                 {"e5m2 x e5m2", accel.float8_e5m2, accel.float8_e5m2}}
  for _, case in ipairs(cases) do
    it(case[1] .. " equals the float64 product of the same codes to float32 accumulation", function()
      accel.manual_seed(7)
      local M, K, N = 37, 53, 29
      local a, b = random_codes(M, K, case[2]), random_codes(N, K, case[3]):t() -- b a transposed view
      local sa, sb = fround(1 / 3.7), fround(0.0123)
      local c = C.fp8_scaled_mm(a, sa, b, sb)
      assert.are.same({M, N}, {c:size(1), c:size(2)})
      assert.are.equal(accel.float32, c.dtype)
      local ref, mag = reference_mm(a, sa, b, sb)
      local w = worst_ratio(c, ref, mag, K)
      if os.getenv("FP8_SPEC_VERBOSE") then print(case[1], "worst error / bound", w) end
      assert.is_true(w <= 1.0, "worst error / bound = " .. w)
    end)
  end

  it("is exact where float32 holds every partial sum (small integer codes, power-of-two scales)", function()
    accel.manual_seed(3)
    local a = accel.randint(-16, 17, {9, 40}):float():to(accel.float8_e4m3fn)
    local b = accel.randint(-16, 17, {40, 11}):float():to(accel.float8_e5m2)
    local c = C.fp8_scaled_mm(a, 0.25, b, 8.0):tolist()
    local ref = reference_mm(a, 0.25, b, 8.0)
    assert.are.same(ref, c)
  end)

  it("applies both scales (a wrong scale is caught)", function()
    local a = accel.tensor({{1, 2}}):to(accel.float8_e4m3fn)
    local b = accel.tensor({{3}, {4}}):to(accel.float8_e4m3fn)
    assert.are.same({{11 * 0.5 * 3}}, C.fp8_scaled_mm(a, 0.5, b, 3):tolist())
  end)
end)

-- ---------------------------------------------------------------- on another device

-- The emulation runs on any device: on "sim" (memory the host cannot read)
-- the casts must stage through the host and the product go through the
-- backend; the expected codes are the PyTorch fixture's, as on the CPU.
describe("fp8 kernels on the sim device", function()
  it("the recipe's cast, amax and fp8_bits give the fixture's codes, on sim", function()
    for name, dt in pairs(FORMATS) do
      local x = fixture[name .. ".inputs"]:to("sim")
      local q, amax = C.fp8_quantize(x, 1.0, dt)
      assert.are.equal("sim", q.device.type)
      local n, where = mismatches(codes_of(q), fixture[name .. ".saturated"]:tolist(), nil, rawequal)
      assert.are.equal(0, n, where)
      assert.is_true(amax ~= amax) -- the inputs hold a NaN: so does their amax
    end
    local x = accel.tensor({1.5, -470.25, 3}, {device = "sim"})
    assert.are.equal(470.25, C.fp8_amax(x))
    assert.are.equal(470.25, select(2, C.fp8_quantize(x, 2.0, accel.float8_e4m3fn)))
  end)

  it("the scaled matmul on sim is exact where float32 holds every partial sum", function()
    accel.manual_seed(3)
    local a = accel.randint(-16, 17, {9, 40}, {device = "cpu"}):float():to(accel.float8_e4m3fn)
    local b = accel.randint(-16, 17, {40, 11}, {device = "cpu"}):float():to(accel.float8_e5m2)
    local c = C.fp8_scaled_mm(a:to("sim"), 0.25, b:to("sim"):t():contiguous():t(), 8.0)
    assert.are.equal("sim", c.device.type)
    assert.are.same(reference_mm(a, 0.25, b, 8.0), c:tolist())
    support.error_matching("fp8 scaled_mm: tensors are on different devices %(sim and cpu%)", function()
      C.fp8_scaled_mm(a:to("sim"), 1, b:to("cpu"), 1)
    end)
  end)

  -- sim stands in for a backend with a native fp8 GEMM (CUDA's cuBLASLt):
  -- it takes K % 16 == 0 and N % 4 == 0 with at most one e5m2 operand and
  -- declines the rest, which the core then emulates.
  it("products the native fp8 GEMM takes run there and equal the CPU's emulation bit for bit", function()
    accel.manual_seed(5)
    local cases = { -- M, K, N, format of a, of b, whether b is given as a transposed view, native expected
      {33, 64, 24, accel.float8_e4m3fn, accel.float8_e4m3fn, true, true},
      {8, 32, 20, accel.float8_e5m2, accel.float8_e4m3fn, false, true},
      {5, 53, 8, accel.float8_e4m3fn, accel.float8_e4m3fn, true, false},
      {5, 32, 6, accel.float8_e4m3fn, accel.float8_e5m2, false, false},
      {5, 32, 8, accel.float8_e5m2, accel.float8_e5m2, true, false},
    }
    for _, k in ipairs(cases) do
      local M, K, N = k[1], k[2], k[3]
      local a = random_codes(M, K, k[4])
      local b = k[6] and random_codes(N, K, k[5]):t() or random_codes(K, N, k[5])
      local sa, sb = fround(1 / 3.7), fround(0.0123)
      local on_cpu, cpu_native = C.fp8_scaled_mm(a:to("cpu"), sa, b:to("cpu"), sb)
      local on_sim, sim_native = C.fp8_scaled_mm(a:to("sim"), sa, b:to("sim"), sb)
      local what = ("M %d K %d N %d"):format(M, K, N)
      assert.is_false(cpu_native, what)
      assert.are.equal(k[7], sim_native, what)
      assert.are.same(on_cpu:tolist(), on_sim:tolist(), what)
    end
  end)
end)

-- ---------------------------------------------------------------- delayed scaling

-- The scales delayed scaling must produce after each step, from the amaxes
-- recorded at each step (closed form: TE's DelayedScaling).
local function expected_scales(amaxes, fmax, o)
  local scales, scale = {}, 1.0
  for k = 1, #amaxes do
    if k % o.interval == 0 then -- the scale changes only every interval steps
      local amax = 0
      if o.algo == "most_recent" then
        amax = amaxes[k]
      else
        for j = math.max(1, k - o.len + 1), k do amax = math.max(amax, amaxes[j]) end
      end
      if amax > 0 and amax < math.huge then scale = fround(fmax / amax) * 2.0 ^ -o.margin end
    end
    scales[k] = scale
  end
  return scales
end

local function amax_of(t) return t:abs():max():item() end

-- Runs steps of an fp8 Linear prepared by an Accelerator with recipe kw;
-- at step k the input is x * fx[k] and the output gradient g * fg[k].
-- Returns the recorded amaxes and the scales after each step, and checks
-- that each step quantised with the scales of the step before.
local function run_steps(kw, fx, fg)
  accel.manual_seed(11)
  local acc = accel.Accelerator{mixed_precision = "fp8", kwargs_handlers = {accel.FP8RecipeKwargs(kw)}}
  local lin = acc:prepare(accel.nn.Linear(6, 5))
  local opt = accel.optim.SGD(lin:parameters(), {lr = 0.1})
  local x0, g0 = accel.randn(7, 6), accel.randn(7, 5)
  local meta = lin.fp8_meta
  local rec = {amax = {x = {}, w = {}, g = {}}, scale = {x = {}, w = {}, g = {}}}
  local bwd = kw.fp8_format == "E4M3" and accel.float8_e4m3fn or accel.float8_e5m2
  for k = 1, #fx do
    local x, g, w = x0 * fx[k], g0 * fg[k], lin.weight:detach():clone()
    local sx, sw, sg = meta.input.scale, meta.weight.scale, meta.grad_output.scale
    local y = lin(x)
    local qx = C.fp8_quantize(x, sx, accel.float8_e4m3fn)
    local qw = C.fp8_quantize(w, sw, accel.float8_e4m3fn)
    local want_y = C.fp8_scaled_mm(qx, fround(1 / sx), qw:t(), fround(1 / sw)) + lin.bias:detach()
    assert.are.same(want_y:tolist(), y:tolist())
    opt:zero_grad()
    acc:backward((y * g):sum())
    local qg = C.fp8_quantize(g, sg, bwd)
    local want_dw = C.fp8_scaled_mm(qg:t(), fround(1 / sg), qx, fround(1 / sx))
    assert.are.same(want_dw:tolist(), lin.weight.grad:tolist())
    opt:step()
    rec.amax.x[k], rec.amax.w[k], rec.amax.g[k] = amax_of(x), amax_of(w), amax_of(g)
    rec.scale.x[k], rec.scale.w[k], rec.scale.g[k] = meta.input.scale, meta.weight.scale, meta.grad_output.scale
  end
  return rec
end

describe("fp8 delayed scaling", function()
  it("HYBRID, max over a 3-step history, margin 1: the scales follow the closed form", function()
    local kw = {fp8_format = "HYBRID", amax_history_len = 3, amax_compute_algo = "max", margin = 1}
    local rec = run_steps(kw, {1, 4, 0.5, 0.25, 0.125, 2, 0.01}, {1, 0.5, 8, 0.25, 0.25, 0.1, 1})
    local o = {algo = "max", len = 3, margin = 1, interval = 1}
    assert.are.same(expected_scales(rec.amax.x, 448, o), rec.scale.x)
    assert.are.same(expected_scales(rec.amax.w, 448, o), rec.scale.w)
    assert.are.same(expected_scales(rec.amax.g, 57344, o), rec.scale.g)
    assert.are_not.equal(rec.scale.x[4], rec.scale.x[5]) -- the window moved on
  end)

  it("E4M3, most_recent, interval 2: an all-zero step keeps the scale", function()
    local kw = {fp8_format = "E4M3", amax_compute_algo = "most_recent", interval = 2}
    local rec = run_steps(kw, {1, 3, 0.5, 0, 2, 0.25}, {2, 1, 0, 0, 4, 0.5})
    local o = {algo = "most_recent", len = 1024, margin = 0, interval = 2}
    assert.are.same(expected_scales(rec.amax.x, 448, o), rec.scale.x)
    assert.are.same(expected_scales(rec.amax.w, 448, o), rec.scale.w)
    assert.are.same(expected_scales(rec.amax.g, 448, o), rec.scale.g)
    assert.are.equal(rec.scale.g[2], rec.scale.g[4]) -- step 4's gradient was all zero
  end)
end)

-- ---------------------------------------------------------------- training

-- The seed MLP (examples/mlp.lua's shapes: 2000 x 20 inputs, 3 classes,
-- Linear(20,128)-ReLU-Linear(128,64)-ReLU-Linear(64,3), AdamW lr 1e-3,
-- weight decay 0.01, batches of 32) trained under mixed_precision mp;
-- returns each epoch's mean loss and the prepared model.
local function train_mlp(mp, epochs)
  local nn, data = accel.nn, accel.data
  accel.set_seed(42)
  local x, y = accel.randn(2000, 20), accel.randint(0, 3, {2000})
  local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = 32, shuffle = true})
  local model = nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 3))
  local optimizer = accel.optim.AdamW(model:parameters(), {lr = 1e-3, weight_decay = 0.01})
  local criterion = nn.CrossEntropyLoss()
  local acc = accel.Accelerator{mixed_precision = mp}
  model, optimizer, loader = acc:prepare(model, optimizer, loader)
  local losses = {}
  for epoch = 1, epochs do
    local sum, n = 0, 0
    for xb, yb in loader:iter() do
      local loss = criterion(model(xb), yb)
      acc:backward(loss)
      optimizer:step()
      optimizer:zero_grad()
      sum, n = sum + loss:item(), n + 1
    end
    losses[epoch] = sum / n
  end
  return losses, model, acc
end

describe("fp8 and checkpoints", function()
  -- save_state does not hold the scaling state, so load_state starts it again: a run resumed in
  -- the process that saved equals one resumed in a fresh process (a new Accelerator and model).
  local nn = accel.nn
  local function setup()
    accel.set_seed(5)
    local model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    local opt = accel.optim.SGD(model:parameters(), {lr = 0.1})
    local acc = accel.Accelerator{mixed_precision = "fp8"}
    model, opt = acc:prepare(model, opt)
    return acc, model, opt
  end
  local function steps(acc, model, opt, seed, n)
    accel.set_seed(seed)
    for _ = 1, n do
      acc:backward(nn.functional.cross_entropy(model(accel.randn(4, 8) * 30), accel.randint(0, 3, {4})))
      opt:step()
      opt:zero_grad()
    end
  end

  it("load_state starts the scales again at 1.0, in the same process as in a new one", function()
    local dir = support.tmpdir()
    local acc, model, opt = setup()
    steps(acc, model, opt, 1, 3)
    assert.is_true(model[1].fp8_meta.input.scale ~= 1.0, "the scales moved in training")
    acc:save_state(dir)
    steps(acc, model, opt, 2, 2) -- more training after the save moves the scales on
    acc:load_state(dir)
    for _, m in ipairs({model[1], model[3]}) do
      for role, meta in pairs(m.fp8_meta) do
        assert.are.same({1.0, 1.0, 0, 0}, {meta.scale, meta.scale_inv, meta.steps, #meta.history}, role)
      end
    end
    steps(acc, model, opt, 3, 3)
    local acc2, model2, opt2 = setup() -- what a new process does
    acc2:load_state(dir)
    steps(acc2, model2, opt2, 3, 3)
    for i, p in ipairs(model:parameters()) do
      assert.are.equal(0, (p - model2:parameters()[i]):abs():max():item(), "parameter " .. i)
    end
    support.remove_tree(dir)
  end)
end)

describe("fp8 training of the seed MLP", function()
  -- Measured (10 epochs): largest per-epoch relative difference to bf16
  -- 0.103 %, in the final epoch; the tolerances leave about 10x that margin.
  local EPOCH_TOL, FINAL_TOL = 0.02, 0.01
  it("stays within 2 % of the bf16 run's loss every epoch, 1 % at the end", function()
    local bf16 = train_mlp("bf16", 10)
    local f8, model, acc = train_mlp("fp8", 10)
    -- the suite's device decides: cuBLASLt's fp8 GEMM on a GPU (ACCEL_LUA_DEVICE=cuda), else the emulation
    assert.are.equal(acc.device.type == "cuda" and "CUBLASLT" or "CPU_EMULATION", acc.fp8_backend)
    local steps = 10 * 63 -- 2000 / 32 rounded up, per epoch
    for _, i in ipairs({1, 3, 5}) do
      assert.are.equal(steps, model[i].fp8_meta.input.steps)
      assert.are.equal(steps, model[i].fp8_meta.grad_output.steps)
    end
    local differs = false
    for e = 1, 10 do
      local rel = math.abs(f8[e] - bf16[e]) / bf16[e]
      assert.is_true(rel <= EPOCH_TOL, ("epoch %d: fp8 %.6f, bf16 %.6f (%.3f %%)"):format(e, f8[e], bf16[e], rel * 100))
      differs = differs or f8[e] ~= bf16[e]
    end
    assert.is_true(math.abs(f8[10] - bf16[10]) / bf16[10] <= FINAL_TOL)
    assert.is_true(differs, "the fp8 run gave the bf16 run's losses exactly: fp8 did not run")
    assert.is_true(f8[10] < f8[1] * 0.95, "the fp8 run did not learn")
  end)

  it("in eval mode the prepared forward runs the plain Linears under bf16 autocast", function()
    local _, model = train_mlp("fp8", 1)
    local steps = model[1].fp8_meta.input.steps
    model:eval()
    local x = accel.randn(5, 20)
    local y = model(x)
    assert.are.equal(steps, model[1].fp8_meta.input.steps) -- no fp8 cast ran
    local F = accel.nn.functional
    local want
    local prev = C.set_autocast(accel.bfloat16)
    local h = F.linear(F.linear(x, model[1].weight, model[1].bias):relu(), model[3].weight, model[3].bias):relu()
    want = F.linear(h, model[5].weight, model[5].bias)
    C.set_autocast(prev)
    assert.are.same(want:float():tolist(), y:tolist())
    model:train()
    model(x)
    assert.are.equal(steps + 1, model[1].fp8_meta.input.steps)
  end)

  it("a Linear given an input of the wrong width is one error naming the shapes", function()
    local _, model = train_mlp("fp8", 1)
    local x = accel.randn(4, 10)
    support.expect_error(function() model(x) end, "in_features = 20", "4x10")
  end)

  it("unwrap_model(keep_fp32_wrapper = false) gives the plain float32 Linears back", function()
    local _, model, acc = train_mlp("fp8", 1)
    acc:unwrap_model(model, {keep_fp32_wrapper = false})
    assert.is_nil(model[1].fp8_meta)
    local x = accel.randn(4, 20)
    assert.are.same(accel.nn.functional.linear(x, model[1].weight, model[1].bias):tolist(), model[1](x):tolist())
  end)
end)

describe("fp8 in the built-in GPT-2", function()
  -- HF's GPT2LMHeadModel calls self.lm_head(h), so Accelerate's conversion
  -- reaches an untied head: one forward is one input and weight cast of it,
  -- one backward one grad_output cast.
  it("an untied lm_head runs in fp8", function()
    local gpt2 = accel.models.gpt2
    local acc = accel.Accelerator{mixed_precision = "fp8"}
    local model = acc:prepare(gpt2.GPT2LMHeadModel(gpt2.GPT2Config{vocab_size = 64, n_positions = 16, n_embd = 32,
      n_layer = 1, n_head = 2, dropout = 0, tie_word_embeddings = false}))
    local ids = accel.randint(0, 64, {2, 8})
    local _, loss = model(ids, {labels = ids})
    acc:backward(loss)
    local meta = model.lm_head.fp8_meta
    assert.are.same({1, 1, 1}, {meta.input.steps, meta.weight.steps, meta.grad_output.steps})
  end)
end)

describe("fp8 under activation checkpointing", function()
  -- One run of 3 SGD steps of an fp8 MLP with dropout: every step's
  -- first-layer weight gradient (as a list) and, after the run, each
  -- Linear's scaling state. how: "plain", "fn" (checkpoint of the prepared
  -- model), "module" (checkpoint_module on two Linears after prepare),
  -- "before" (the same before prepare), "nested" (a checkpointed function
  -- that checkpoints a Linear).
  local function run(how)
    accel.manual_seed(3)
    local nn = accel.nn
    local model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 8), nn.Linear(8, 3))
    local ck = accel.utils
    if how == "before" then ck.checkpoint_module(model[1]); ck.checkpoint_module(model[4]) end
    local acc = accel.Accelerator{mixed_precision = "fp8"}
    local pm, opt = acc:prepare(model, accel.optim.SGD(model:parameters(), {lr = 0.1}))
    if how == "module" then ck.checkpoint_module(model[1]); ck.checkpoint_module(model[4]) end
    local grads = {}
    for step = 1, 3 do
      accel.manual_seed(100 + step)
      local x = accel.randn(16, 8) * step
      local y
      if how == "fn" then
        y = ck.checkpoint(pm, x)
      elseif how == "nested" then
        y = ck.checkpoint(function(v) return pm(ck.checkpoint(function(u) return u * 2 end, v)) end, x * 0.5)
      else
        y = pm(x)
      end
      acc:backward(accel.nn.functional.cross_entropy(y, accel.arange(16) % 3))
      grads[step] = model[1].weight.grad:tolist()
      opt:step()
      opt:zero_grad()
    end
    local metas = {}
    for _, i in ipairs({1, 4, 5}) do
      local m = model[i].fp8_meta
      for _, role in ipairs({"input", "weight", "grad_output"}) do
        metas[#metas + 1] = {m[role].steps, m[role].scale, m[role].history}
      end
    end
    return grads, metas
  end

  it("gives the plain run's gradients and scaling state bit for bit, however the checkpoint is applied", function()
    local grads, metas = run("plain")
    assert.are.equal(3, metas[1][1]) -- each Linear's input cast once per step
    for _, how in ipairs({"fn", "module", "before", "nested"}) do
      local g, m = run(how)
      assert.are.same(grads, g, how .. ": gradients differ from the plain run")
      assert.are.same(metas, m, how .. ": the scaling state differs from the plain run (amax recorded twice?)")
    end
  end)

  it("a recompute that runs other Linears than the forward did is one error saying so", function()
    local nn = accel.nn
    local model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    local acc = accel.Accelerator{mixed_precision = "fp8"}
    model = acc:prepare(model)
    local calls = 0
    local y = accel.utils.checkpoint(function(x)
      calls = calls + 1
      if calls == 1 then return model(x) end
      return model[1](x)
    end, accel.randn(2, 4, {requires_grad = true}))
    support.expect_error(function() y:sum():backward() end, "checkpoint", "fp8 casts")
  end)
end)

-- ---------------------------------------------------------------- bad input

describe("fp8 recipe options", function()
  -- an Accelerator with FP8RecipeKwargs(kw), built on the caller's line
  local K = accel.FP8RecipeKwargs
  local function fp8_acc(kw) return accel.Accelerator{mixed_precision = "fp8", kwargs_handlers = {kw}} end

  it("defaults are Accelerate's: HYBRID, history 1024, most_recent, margin 0, interval 1", function()
    local acc = accel.Accelerator{mixed_precision = "fp8"}
    local r = acc.fp8_recipe
    assert.are.same({"HYBRID", 1024, "most_recent", 0, 1}, {r.fp8_format, r.amax_history_len, r.amax_compute_algo,
      r.margin, r.interval})
    assert.are.equal(accel.float8_e4m3fn, r.fwd_dtype)
    assert.are.equal(accel.float8_e5m2, r.bwd_dtype)
    assert.are.equal(accel.bfloat16, acc.autocast_dtype) -- other GEMMs: bf16, as Accelerate's fp8
  end)

  it("an unknown fp8_format is one error naming it", function()
    support.expect_error(function() fp8_acc(K{fp8_format = "E3M4"}) end, "fp8_format", '"E3M4"')
  end)

  it("E5M2 is refused as a training recipe", function()
    support.expect_error(function() fp8_acc(K{fp8_format = "E5M2"}) end, "E5M2", "HYBRID")
  end)

  it("amax_history_len 0 and a margin outside 0..64 (inf too) are refused when the handler is made", function()
    support.expect_error(function() fp8_acc(K{amax_history_len = 0}) end, "amax_history_len = 0", "positive integer")
    support.expect_error(function() K{margin = -1} end, "margin = -1")
    support.expect_error(function() K{margin = 65} end, "margin = 65", "from 0 to 64")
    support.expect_error(function() K{margin = math.huge} end, "margin = inf", "from 0 to 64")
    assert.are.equal(64, K{margin = 64}.margin)
  end)

  it("options of the wrong type are refused, naming the option", function()
    support.expect_error(function() fp8_acc(K{margin = "1"}) end, "margin must be a number, got string")
    support.expect_error(function() fp8_acc(K{amax_history_len = true}) end, "amax_history_len must be a number")
    support.expect_error(function() fp8_acc(K{amax_compute_algo = 3}) end, "amax_compute_algo must be a string")
    support.expect_error(function() fp8_acc(K{amax_compute_algo = "mean"}) end, '"max" or "most_recent"')
  end)

  it("a plain table instead of FP8RecipeKwargs is refused", function()
    local plain = {fp8_format = "E4M3"}
    support.expect_error(function() accel.Accelerator{mixed_precision = "fp8", kwargs_handlers = {plain}} end,
      "kwargs_handlers[1]", "accel.FP8RecipeKwargs")
  end)

  it("reads the ACCELERATE_FP8_* settings accelerate launch sets; a true flag it cannot honour is refused by name",
    function()
    local function run(env)
      return (support.command_output(env .. " " .. support.shell_quote(support.ACCEL_LUA) .. " -e "
        .. support.shell_quote('local ok, a = pcall(accel.Accelerator, {mixed_precision = "fp8"}) '
        .. 'io.write(ok and (a.fp8_recipe.fp8_format .. " " .. a.fp8_recipe.margin) or a)') .. " 2>&1"))
    end
    -- the environment of `accelerate launch --mixed_precision fp8 --fp8_format E4M3 --fp8_margin 2` (accelerate
    -- 1.16's setup_fp8_env) plus OPT_LEVEL, which older releases set for MS-AMP; PAD_INNER_DIM and
    -- ENABLE_FSDP_FLOAT8_ALL_GATHER are torchao's (1.16 sets both to 1): none of the three is read here
    local LAUNCH = "ACCELERATE_FP8_AMAX_COMPUTE_ALGO=most_recent ACCELERATE_FP8_AMAX_HISTORY_LEN=1024 "
      .. "ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER=1 ACCELERATE_FP8_FORMAT=E4M3 ACCELERATE_FP8_INTERVAL=1 "
      .. "ACCELERATE_FP8_MARGIN=2 ACCELERATE_FP8_OPT_LEVEL=O2 ACCELERATE_FP8_OVERRIDE_DGRAD=False "
      .. "ACCELERATE_FP8_OVERRIDE_FPROP=False ACCELERATE_FP8_OVERRIDE_WGRAD=False ACCELERATE_FP8_PAD_INNER_DIM=1 "
      .. "ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL=False"
    assert.are.equal("E4M3 2", run(LAUNCH))
    -- --fp8_override_linear_precision false,true,false sets the flags as 0 / 1
    assert.matches("ACCELERATE_FP8_OVERRIDE_DGRAD=1 is not supported: every product of the recipe is fp8",
      run(LAUNCH .. " ACCELERATE_FP8_OVERRIDE_FPROP=0 ACCELERATE_FP8_OVERRIDE_DGRAD=1"))
    assert.matches("ACCELERATE_FP8_OVERRIDE_WGRAD=true is not supported", run("ACCELERATE_FP8_OVERRIDE_WGRAD=true"))
    assert.matches("ACCELERATE_FP8_USE_MXFP8_BLOCK_SCALING=yes is not supported: only per%-tensor delayed scaling",
      run("ACCELERATE_FP8_USE_MXFP8_BLOCK_SCALING=yes"))
    assert.matches("ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL=True is not supported: in eval mode",
      run("ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL=True"))
    assert.matches("ACCELERATE_FP8_OVERRIDE_FPROP=maybe is not a boolean", run("ACCELERATE_FP8_OVERRIDE_FPROP=maybe"))
    assert.are.equal("HYBRID 0", run("ACCELERATE_FP8_USE_MXFP8_BLOCK_SCALING=off"))
  end)

  it("the kernels refuse non-fp8 formats and mismatched shapes", function()
    support.expect_error(function() C.fp8_quantize(accel.ones(2), 1.0, accel.bfloat16) end, "float8_e4m3fn", "bfloat16")
    support.expect_error(function() C.fp8_dequantize(accel.ones(2), 1.0) end, "fp8 dequantize", "float32")
    local a = accel.ones(2, 3):to(accel.float8_e4m3fn)
    support.expect_error(function() C.fp8_scaled_mm(a, 1, a, 1) end, "scaled_mm", "[2, 3]", "3 != 2")
    support.expect_error(function() C.fp8_scaled_mm(accel.ones(2, 3), 1, a:t(), 1) end, "scaled_mm", "float32")
    support.expect_error(function() C.fp8_quantize(accel.ones(2, {dtype = accel.int64}), 1.0, accel.float8_e5m2) end,
      "float tensor", "int64")
  end)
end)
