-- bitwise_spec.lua: bitwise and / or / xor / not and the shifts against
-- PyTorch 2.15 (tests/fixtures/bitwise.safetensors, written by
-- scripts/fixtures/make_bitwise_fixtures.py): integer tensors bit by bit,
-- bool tensors logically (a mask & a mask), mixed kinds promoted, numbers
-- as operands, shifts past the width or negative as PyTorch gives them;
-- Lua 5.4's operators & | ~ << >> and unary ~ as PyTorch's; float operands
-- and shifts of two bools refused as PyTorch refuses them.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local torch_cases = dofile("tests/lua/torch_cases.lua")
local expect_error = support.expect_error

it = support.lua54_only(it, pending, {
  ["Lua 5.4's operators are PyTorch's"] = "& | ~ << >> (Lua 5.3+)",
})

local ref = accel.load("tests/fixtures/bitwise.safetensors")

-- Must match CASES in the fixture script.
local CASES = {
  and_i64 = function(a, b) return accel.bitwise_and(a, b) end,
  or_i64 = function(a, b) return a:bitwise_or(b) end,
  xor_i64 = function(a, b) return accel.bitwise_xor(a, b) end,
  not_i64 = function(a) return a:bitwise_not() end,
  and_broadcast = function(a, b) return a:bitwise_and(b) end,
  and_bool = function(a, b) return a:bitwise_and(b) end,
  or_bool = function(a, b) return accel.bitwise_or(a, b) end,
  xor_bool = function(a, b) return a:bitwise_xor(b) end,
  not_bool = function(a) return accel.bitwise_not(a) end,
  and_bool_i64 = function(a, b) return a:bitwise_and(b) end,
  and_scalar = function(a) return a:bitwise_and(6) end,
  or_scalar_first = function(a) return accel.bitwise_or(a, 9) end,
  xor_bool_scalar = function(a) return a:bitwise_xor(1) end,
  shl_i64 = function(a, b) return a:bitwise_left_shift(b) end,
  shr_i64 = function(a, b) return accel.bitwise_right_shift(a, b) end,
  shl_scalar = function(a) return a:bitwise_left_shift(3) end,
  shr_scalar = function(a) return a:bitwise_right_shift(2) end,
  shl_i32 = function(a, b) return a:bitwise_left_shift(b) end,
  shr_i32 = function(a, b) return a:bitwise_right_shift(b) end,
  shl_u8 = function(a, b) return a:bitwise_left_shift(b) end,
  shr_u8 = function(a, b) return a:bitwise_right_shift(b) end,
  not_u8 = function(a) return a:bitwise_not() end,
  not_i32 = function(a) return accel.bitwise_not(a) end,
  and_i32_u8 = function(a, b) return a:bitwise_and(b) end,
  xor_u8_i64 = function(a, b) return a:bitwise_xor(b) end,
}

torch_cases.describe(describe, it, "bitwise ops match PyTorch 2.15", ref, CASES, 0)

describe("bitwise ops", function()
  local a, c = ref["and_i64.in1"], ref["and_i64.in2"]
  local m1, m2 = ref["and_bool.in1"], ref["and_bool.in2"]

  it("Lua 5.4's operators are PyTorch's", function()
    local ops = {}
    for _, op in ipairs({"&", "|", "~", "<<", ">>"}) do ops[op] = support.lua54_binop(op) end
    local bnot = assert(load("local a = ... return ~a"))
    assert.is_true(ops["&"](a, c):equal(ref["and_i64.y"]))
    assert.is_true(ops["|"](a, c):equal(ref["or_i64.y"]))
    assert.is_true(ops["~"](a, c):equal(ref["xor_i64.y"]))
    assert.is_true(bnot(a):equal(ref["not_i64.y"]))
    assert.is_true(ops["&"](m1, m2):equal(ref["and_bool.y"]))
    assert.is_true(bnot(m1):equal(ref["not_bool.y"]))
    assert.is_true(ops["|"](9, a):equal(ref["or_scalar_first.y"])) -- a number first
    assert.is_true(ops["<<"](ref["shl_i64.in1"], ref["shl_i64.in2"]):equal(ref["shl_i64.y"]))
    assert.is_true(ops[">>"](a, 2):equal(ref["shr_scalar.y"]))
  end)

  it("in place: and, or, xor, shifts and not; a bool mask stays bool", function()
    local x = a:clone()
    x:bitwise_and_(c)
    assert.is_true(x:equal(ref["and_i64.y"]))
    x = a:clone()
    x:bitwise_left_shift_(3)
    assert.is_true(x:equal(ref["shl_scalar.y"]))
    local m = m1:clone()
    m:bitwise_not_()
    assert.is_true(m:equal(ref["not_bool.y"]))
    m = m1:clone()
    m:bitwise_xor_(m2)
    assert.is_true(m:equal(ref["xor_bool.y"]))
    expect_error(function() m1:clone():bitwise_and_(c) end, "bitwise_and_: result type int64 can't be cast")
  end)

  it("refuses float operands and shifts of two bools, as PyTorch", function()
    -- torch: '"bitwise_and_cpu" not implemented for 'Float''
    expect_error(function() local _ = accel.ones(3):bitwise_and(a:narrow(2, 1, 3)) end,
      "bitwise_and: not implemented for float32 (integer and bool tensors only)")
    expect_error(function() local _ = a:bitwise_or(1.5) end, "bitwise_or: not implemented for float32")
    expect_error(function() local _ = accel.ones(2, {dtype = accel.float64}):bitwise_not() end,
      "bitwise_not: not implemented for float64")
    expect_error(function() local _ = m1:bitwise_left_shift(m1) end, "bitwise_left_shift: not implemented for 'Bool'")
  end)
end)
