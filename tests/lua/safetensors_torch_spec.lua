-- safetensors_torch_spec.lua: busted spec, run inside accel-lua
--   build/accel-lua /usr/bin/busted tests/lua/safetensors_torch_spec.lua
-- Checks that accel.load reads tests/fixtures/torch_tensors.safetensors
-- (written by PyTorch 1.13 via scripts/make-fixtures.py) with the right
-- dtypes, shapes, values and metadata, recomputing every value here from the
-- same closed-form formulas as the generator (never from accel's own output),
-- and that accel.save -> accel.load round-trips every dtype.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")

local FIXTURE = "tests/fixtures/torch_tensors.safetensors"
local flatten, shape_of = support.flatten, support.shape_of

-- expected[i] for i = 0..n-1 from formula f
local function gen(n, f)
  local r = {}
  for i = 0, n - 1 do r[i + 1] = f(i) end
  return r
end

-- The fixture's tensors: name -> dtype, shape, row-major values by formula.
-- Must match scripts/make-fixtures.py.
local EXPECTED = {
  f32_2x3 = {dtype = "float32", shape = {2, 3}, values = gen(6, function(i) return i * 0.25 - 1 end)},
  f32_2x3x4 = {dtype = "float32", shape = {2, 3, 4}, values = gen(24, function(i) return i * 0.5 - 6 end)},
  f32_scalar = {dtype = "float32", shape = {}, values = {3.5}},
  f64_5 = {dtype = "float64", shape = {5}, values = gen(5, function(i) return (i - 2) / 3 end)},
  f64_3x4 = {dtype = "float64", shape = {3, 4},
             values = gen(12, function(i) return (i // 4) * 10 + (i % 4) / 4 end)},
  bf16_2x4 = {dtype = "bfloat16", shape = {2, 4}, values = gen(8, function(i) return (i - 3) * 1.5 end)},
  f16_6 = {dtype = "float16", shape = {6}, values = gen(6, function(i) return (i - 2) ^ 3 / 8 end)},
  i64_5 = {dtype = "int64", shape = {5}, values = gen(5, function(i) return (i - 2) * 1000000007000 end)},
  i32_4 = {dtype = "int32", shape = {4}, values = gen(4, function(i) return (i - 2) * 100000 end)},
  u8_6 = {dtype = "uint8", shape = {6}, values = gen(6, function(i) return i * 50 end)},
  bool_7 = {dtype = "bool", shape = {7}, values = gen(7, function(i) return i % 3 == 0 end)},
}

local function values_of(t)
  if t:dim() == 0 then return {t:item()} end
  return flatten(t:tolist())
end

-- Compares one tensor against an expectation; integers must stay integers.
local function check(name, t, e)
  assert.is_true(accel.is_tensor(t), name .. " is not a tensor")
  assert.are.equal(accel[e.dtype], t.dtype, name .. " dtype")
  assert.are.same(e.shape, shape_of(t), name .. " shape")
  local got = values_of(t)
  assert.are.equal(#e.values, #got, name .. " numel")
  for i, want in ipairs(e.values) do
    local g = got[i]
    if e.dtype == "bool" then
      assert.are.equal(want, g, ("%s[%d]"):format(name, i - 1))
    elseif not accel[e.dtype].is_floating_point then
      assert.are.equal("integer", math.type(g), ("%s[%d] is not a Lua integer"):format(name, i - 1))
      assert.are.equal(want, g, ("%s[%d]"):format(name, i - 1))
    else
      assert.are.equal(want, g, ("%s[%d]"):format(name, i - 1))
    end
  end
end

describe("safetensors written by PyTorch", function()
  local t, meta

  setup(function()
    t, meta = accel.load(FIXTURE)
  end)

  it("holds exactly the expected tensor names", function()
    local names, want = {}, {}
    for k in pairs(t) do names[#names + 1] = k end
    for k in pairs(EXPECTED) do want[#want + 1] = k end
    table.sort(names)
    table.sort(want)
    assert.are.same(want, names)
  end)

  for _, name in ipairs({"f32_2x3", "f32_2x3x4", "f32_scalar", "f64_5", "f64_3x4", "bf16_2x4", "f16_6",
                         "i64_5", "i32_4", "u8_6", "bool_7"}) do
    it(name .. " has dtype, shape and values by formula", function()
      check(name, t[name], EXPECTED[name])
    end)
  end

  it("spot-checks with 1-based indexing", function()
    assert.are.equal(1 * 0.25 - 1, t.f32_2x3[1][2]:item()) -- row 0, col 1: i = 1
    assert.are.equal((1 * 12 + 2 * 4 + 3) * 0.5 - 6, t.f32_2x3x4[2][3][4]:item())
    assert.are.equal(2 * 10 + 3 / 4, t.f64_3x4[3][4]:item())
    assert.are.equal(3.5, t.f32_scalar:item())
    assert.are.equal(0, t.f32_scalar:dim())
  end)

  it("exposes __metadata__ as the second result", function()
    assert.are.equal("table", type(meta))
    assert.are.equal("pt", meta.format)
    assert.are.equal("scripts/make-fixtures.py", meta.generator)
    assert.is_nil(t.__metadata__)
  end)

  it("round-trips the PyTorch file through accel.save", function()
    local path = os.tmpname()
    accel.save(t, path, meta)
    local t2, meta2 = accel.load(path)
    os.remove(path)
    for name, e in pairs(EXPECTED) do check(name, t2[name], e) end
    assert.are.same(meta, meta2)
  end)
end)

describe("accel.save / accel.load round trip", function()
  -- Per dtype: Lua values exactly representable in it.
  local CASES = {
    float32 = gen(7, function(i) return (i - 3) * 0.1 end), -- not exact in f32: compare after rounding
    float64 = gen(7, function(i) return (i - 3) / 7 end),
    bfloat16 = gen(7, function(i) return (i - 3) * 0.75 end),
    float16 = gen(7, function(i) return (i - 3) * 0.375 + 100 end),
    float8_e4m3 = gen(7, function(i) return (i - 3) * 0.5 end),
    float8_e5m2 = gen(7, function(i) return (i - 3) * 0.5 end),
    int64 = gen(7, function(i) return (i - 3) * 3000000000000001 end),
    int32 = gen(7, function(i) return (i - 3) * 700000000 end),
    uint8 = gen(7, function(i) return 255 - i * 40 end),
    bool = gen(7, function(i) return i % 2 == 1 end),
  }

  local function roundtrip(tbl, meta)
    local path = os.tmpname()
    accel.save(tbl, path, meta)
    local a, b = accel.load(path)
    os.remove(path)
    return a, b
  end

  for dtname, vals in pairs(CASES) do
    it(dtname .. " keeps dtype, shape and values", function()
      local dt = accel[dtname]
      local x = accel.tensor(vals, {dtype = dt}):reshape(7, 1)
      local before = flatten(x:tolist())
      if dtname ~= "float32" then
        -- exactly representable: the tensor holds the formula's values
        assert.are.same(vals, before)
      end
      local back = roundtrip({x = x}).x
      assert.are.equal(dt, back.dtype)
      assert.are.same({7, 1}, shape_of(back))
      assert.are.same(before, flatten(back:tolist()))
    end)
  end

  it("saves every dtype in one file with metadata", function()
    local tbl = {}
    for dtname, vals in pairs(CASES) do tbl[dtname] = accel.tensor(vals, {dtype = accel[dtname]}) end
    local back, meta = roundtrip(tbl, {format = "pt", note = "round trip"})
    assert.are.equal("pt", meta.format)
    assert.are.equal("round trip", meta.note)
    for dtname in pairs(CASES) do
      assert.are.equal(accel[dtname], back[dtname].dtype)
      assert.are.same(tbl[dtname]:tolist(), back[dtname]:tolist())
    end
  end)

  it("metadata that is not strings to strings is refused naming the entry", function()
    local path = os.tmpname()
    local ok, err = pcall(accel.save, {x = accel.zeros(1)}, path, {step = 3})
    assert.is_false(ok)
    assert.matches("metadata must map strings to strings %(step is a number%)", err)
    ok, err = pcall(accel.save, {x = accel.zeros(1)}, path, {[1.5] = "x"})
    assert.is_false(ok)
    assert.matches("%(a number key%)", err)
    os.remove(path)
  end)

  it("saves a 3-D float32 tensor and a 0-D scalar", function()
    local x = accel.arange(24, {dtype = accel.float32}):reshape(2, 3, 4) * 0.5 - 6
    local back = roundtrip({x = x, s = accel.tensor(3.5)})
    assert.are.same({2, 3, 4}, shape_of(back.x))
    assert.are.same(gen(24, function(i) return i * 0.5 - 6 end), flatten(back.x:tolist()))
    assert.are.same({}, shape_of(back.s))
    assert.are.equal(3.5, back.s:item())
  end)

  it("saves a non-contiguous view as its logical values", function()
    local x = accel.tensor({{1, 2, 3}, {4, 5, 6}}, {dtype = accel.float32}):transpose(1, 2)
    local back = roundtrip({x = x})
    assert.are.same({3, 2}, shape_of(back.x))
    assert.are.same({{1, 4}, {2, 5}, {3, 6}}, back.x:tolist())
  end)
end)

-- A file torch.save wrote is named as one (its first bytes: "PK\3\4", the
-- zip archive of torch's default format, or 0x80 + protocol, a legacy
-- pickle), where reading its first 8 bytes as the header length would give
-- a meaningless size; other garbage keeps the header-length message.
describe("accel.load of a file that is not safetensors", function()
  local function load_error(bytes)
    local path = support.tmpname(".pt")
    local f = assert(io.open(path, "wb"))
    f:write(bytes)
    f:close()
    local ok, err = pcall(accel.load, path)
    os.remove(path)
    assert.is_false(ok)
    return tostring(err), path
  end
  local HINT = "which accel-lua does not read (no pickle): save it with safetensors.torch.save_file"

  for _, c in ipairs({
    {"a zip archive (torch.save's default format)", "PK\3\4\0\0\8\8\0\0" .. ("\0"):rep(20), "a zip archive"},
    {"a legacy pickle (_use_new_zipfile_serialization=False)", "\128\2\138\10l\252\156F\249 j\168P\25", "a pickle"},
    {"only the zip magic (shorter than a header length)", "PK\3\4", "a zip archive"},
  }) do
    it("names " .. c[1], function()
      local err, path = load_error(c[2])
      local want = ("'%s' is not a safetensors file: it looks like a torch.save file (%s), %s"):format(path, c[3], HINT)
      assert.is_truthy(err:find(want, 1, true), err)
    end)
  end

  it("keeps the header-length message for other bytes", function()
    local err = load_error("not a safetensors file at all")
    assert.is_truthy(err:find("is not a safetensors file: header length %d+ exceeds the limit"), err)
    assert.is_falsy(err:find("torch.save", 1, true), err)
  end)

  it("reads a safetensors file whose first bytes are a pickle's (a header of 0x280 bytes)", function()
    local path = support.tmpname(".safetensors")
    local header = '{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    header = header .. (" "):rep(0x280 - #header)
    local f = assert(io.open(path, "wb"))
    f:write("\128\2\0\0\0\0\0\0", header, "\0\0\128\63") -- 1.0f
    f:close()
    local t = accel.load(path)
    os.remove(path)
    assert.are.equal(1, t.x:item())
  end)
end)
