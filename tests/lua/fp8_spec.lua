-- fp8_spec.lua: the fp8 formats and the emulated fp8 recipe.
--  * casts float32 <-> float8_e4m3fn / float8_e5m2 against PyTorch 2.x bit
--    for bit (tests/fixtures/fp8_casts.safetensors, made by
--    scripts/fixtures/make_fp8_fixtures.py): the plain tensor cast
--    t:to(dtype) against x.to(dtype), the recipe's saturating cast against
--    x.clamp(-max, max).to(dtype);
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

local fixture = accel.load(FIXTURE)

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
end)

