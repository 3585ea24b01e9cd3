-- json_spec.lua: accel.json's writer and reader agree on every limit
-- (nesting depth, number range, integer exactness, UTF-8, control
-- characters), refuse what JSON cannot hold with the path inside the value
-- and the script's file:line, and never overflow a stack (a 10^6-deep table
-- and a 10^6-deep "[[[[..." text). Also gather_object / broadcast_object on
-- one process: the same refusals as on several (json_test.lua runs 2 ranks).
local accel = require("accel")
local json = require("accel.json")
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["integers round-trip exactly; integer literals a Lua integer cannot hold are refused"] = support.NO_MATH_TYPE,
  ["floats round-trip bit-exactly and stay floats"] = support.NO_MATH_TYPE,
})
local expect_error = support.expect_error

local function roundtrip(v) return json.decode(json.encode(v)) end

-- A table nested n levels deep: [[[...]]] (n tables).
local function nested(n)
  local top = json.array()
  local t = top
  for _ = 2, n do
    t[1] = json.array()
    t = t[1]
  end
  return top
end

describe("json limits", function()
  it("nesting: MAX_DEPTH levels round-trip, one more is refused by both sides", function()
    assert.are.equal(256, json.MAX_DEPTH)
    local text = string.rep("[", 256) .. string.rep("]", 256)
    assert.are.equal(text, json.encode(nested(256)))
    assert.are.equal(text, json.encode(json.decode(text)))
    expect_error(function() json.encode(nested(257)) end, "nests tables deeper than 256 levels", "value[1][1]")
    expect_error(function() json.decode("[" .. text .. "]") end, "nesting deeper than 256 levels", "at byte 257")
    expect_error(function() json.decode(string.rep('{"a":', 257) .. "1" .. string.rep("}", 257)) end,
      "nesting deeper than 256 levels")
  end)

  it("a 10^6-deep table or text is one error, not a stack overflow", function()
    local deep = nested(1000000)
    local err = expect_error(function() json.encode(deep) end, "nests tables deeper than 256 levels")
    assert.is_nil(err:find("stack overflow", 1, true))
    err = expect_error(function() json.decode(string.rep("[", 1000000)) end, "nesting deeper than 256 levels")
    assert.is_nil(err:find("stack overflow", 1, true))
    err = expect_error(function() json.decode(string.rep("[", 1000000) .. string.rep("]", 1000000)) end, "nesting")
    assert.is_nil(err:find("stack overflow", 1, true))
  end)

  it("numbers beyond a double are refused, not read as inf", function()
    expect_error(function() json.decode("1e400") end, "number out of range", "at byte 1")
    expect_error(function() json.decode("[1, -1e400]") end, "number out of range", "at byte 5")
    expect_error(function() json.decode('{"lr": 1.8e308}') end, "number out of range")
    assert.are.equal(1.7976931348623157e308, json.decode("1.7976931348623157e308"))
    assert.are.equal(0.0, json.decode("1e-400")) -- underflow rounds to 0, as in every reader
    assert.are.equal(5e-324, json.decode("4.9406564584124654e-324"))
  end)

  it("NaN and infinities are refused on write with the key path", function()
    expect_error(function() json.encode({opt = {lr = 0 / 0}}) end, "value.opt.lr is NaN", "cannot represent")
    expect_error(function() json.encode({1, {2, math.huge}}) end, "value[2][2] is inf")
    expect_error(function() json.encode(-math.huge) end, "value is -inf")
  end)

  it("integers round-trip exactly; integer literals a Lua integer cannot hold are refused", function()
    for _, n in ipairs({0, -1, 9007199254740993, -9007199254740993, math.maxinteger, math.mininteger}) do
      local back = roundtrip(n)
      assert.are.equal("integer", math.type(back))
      assert.are.equal(n, back)
    end
    assert.are.equal("9223372036854775807", json.encode(math.maxinteger))
    assert.are.equal(9007199254740993, json.decode("9007199254740993"))
    expect_error(function() json.decode("9223372036854775808") end, "integer out of range", "-2^63 .. 2^63-1")
    expect_error(function() json.decode("[-9223372036854775809]") end, "integer out of range", "at byte 2")
    -- the same magnitude written as a float is a float, rounded as floats are
    assert.are.equal(2.0 ^ 63, json.decode("9223372036854775808.0"))
    assert.are.equal("float", math.type(json.decode("9223372036854775808e0")))
  end)

  it("floats round-trip bit-exactly and stay floats", function()
    for _, x in ipairs({0.1, 1 / 3, -2.5e-300, 2.0 ^ 53 + 2, 1e300, 5e-324, 1.0, -0.0, 123456789012345678.0}) do
      local back = roundtrip(x)
      assert.are.equal("float", math.type(back))
      assert.are.equal(string.pack("<d", x), string.pack("<d", back))
    end
    assert.are.equal("1.0", json.encode(1.0))
    assert.are.equal("-0.0", json.encode(-0.0))
  end)

  it("strings: valid UTF-8 round-trips, invalid UTF-8 is refused on both sides", function()
    local s = "caf\u{e9} \u{20ac} \u{1F600} \u{10FFFF}"
    assert.are.equal(s, roundtrip(s))
    assert.are.equal('"caf\u{e9}"', json.encode("caf\u{e9}")) -- written raw, not escaped
    assert.are.equal("\u{1F600}", json.decode('"\\ud83d\\ude00"'))
    local bad = {
      {"\xff", 1}, {"ok\xc0\xaf", 3}, -- a byte that never starts a character; an overlong '/'
      {"\xed\xa0\x80", 1}, {"\xf4\x90\x80\x80", 1}, -- a surrogate; beyond U+10FFFF
      {"a\xe2\x82", 2}, {"\xe2\x28\xa1", 1}, -- truncated; a bad continuation byte
    }
    for _, case in ipairs(bad) do
      expect_error(function() json.encode({name = case[1]}) end, "value.name is not valid UTF-8",
        ("byte %d of %d"):format(case[2], #case[1]))
      expect_error(function() json.decode('{"name": "' .. case[1] .. '"}') end, "invalid UTF-8 in string",
        ("at byte %d"):format(10 + case[2]))
    end
    expect_error(function() json.encode({["\xff"] = 1}) end, "the key of value.\xff is not valid UTF-8")
    expect_error(function() json.decode('"\\ud800"') end, "unpaired surrogate")
  end)

  it("control characters: escaped on write, refused raw on read (DEL is allowed raw)", function()
    local s = "a\0b\1c\31d\n\t\127e"
    local text = json.encode(s)
    assert.are.equal('"a\\u0000b\\u0001c\\u001fd\\n\\t\\u007fe"', text)
    assert.are.equal(s, json.decode(text))
    expect_error(function() json.decode('"a\0b"') end, "control character in string", "at byte 3")
    expect_error(function() json.decode('"a\31b"') end, "control character in string")
    expect_error(function() json.decode('"tab\there"') end, "control character in string")
    assert.are.equal("a\127b", json.decode('"a\127b"'))
  end)

  it("refuses cycles, functions, userdata and threads with the path", function()
    local cyc = {a = {}}
    cyc.a.b = cyc
    expect_error(function() json.encode(cyc) end, "value.a.b contains itself (a cycle)")
    expect_error(function() json.encode({hooks = {print}}) end, "value.hooks[1] is a function")
    expect_error(function() json.encode({w = accel.zeros(2)}) end, "value.w is a userdata (accel.Tensor)")
    expect_error(function() json.encode({co = coroutine.create(print)}) end, "value.co is a thread")
    expect_error(function() json.encode({1, 2, nil, 4}) end, "is a sparse list")
    -- a table seen twice without a cycle is fine
    local shared = {1}
    assert.are.equal('{"a":[1],"b":[1]}', json.encode({a = shared, b = shared}))
  end)

  it("try_encode / try_decode return the reason without a position", function()
    local text, err = json.try_encode({f = print})
    assert.is_nil(text)
    assert.are.equal("json.encode: value.f is a function, which JSON cannot represent", err)
    local v, derr = json.try_decode("[1,")
    assert.is_nil(v)
    assert.are.equal('json.decode: unexpected end of input at byte 4 (near "")', derr)
    assert.are.same({false, nil}, {json.try_decode("false")})
    -- through pcall the message carries no position either (library callers wrap it)
    local ok, perr = pcall(json.decode, "nul")
    assert.is_false(ok)
    assert.are.equal('json.decode: unexpected character at byte 1 (near "nul")', perr)
  end)
end)

describe("gather_object / broadcast_object on one process", function()
  local acc = accel.Accelerator()

  it("send a JSON copy of the value", function()
    local v = {lr = 0.5, steps = math.maxinteger, name = "r\u{e9}sum\u{e9}"}
    local got = acc:gather_object(v) -- one process: the value itself (a copy), as Accelerate's gather_object
    assert.are.same(v, got)
    assert.are_not.equal(v, got)
    assert.are.same(v, acc.state.comm:broadcast_object(v, 0))
  end)

  it("refuse what JSON cannot hold, at the caller's line, naming the rank", function()
    expect_error(function() acc:gather_object({fn = print}) end,
      "gather_object: rank 0's value cannot be sent: json.encode: value.fn is a function")
    expect_error(function() acc:gather_object({1, 0 / 0}) end, "value[2] is NaN")
    expect_error(function() acc:gather_object(nested(1000000)) end, "nests tables deeper than 256 levels")
    local cyc = {}
    cyc[1] = cyc
    expect_error(function() acc:gather_object(cyc) end, "contains itself (a cycle)")
    expect_error(function() acc.state.comm:broadcast_object({x = "\xff"}, 0) end,
      "broadcast_object: rank 0's value cannot be sent", "value.x is not valid UTF-8")
  end)
end)
