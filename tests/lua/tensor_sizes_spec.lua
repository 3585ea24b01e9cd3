-- tensor_sizes_spec.lua: shapes whose sizes, strides or bytes do not fit in
-- int64 are refused with one error naming the op and the shape; shapes that
-- fit but can never be allocated get the allocator's out-of-memory error;
-- an expanded tensor with a huge element count reduces to the right value.
--
-- Each case runs in its own accel-lua process (a crash there is a failed
-- check here, not the end of busted): the child prints "ERR <message>" or
-- "OK <value>". Expected values are closed forms (2^31 * 2^31 = 2^62, ...).
-- No case allocates more than a few bytes when it works as it should.
local support = dofile("tests/lua/support.lua")

-- Runs `code` (the body of a function; it returns a value to print) in a
-- child accel-lua; returns its output and whether it exited normally.
local function run_child(code)
  local path = support.tmpname(".lua")
  support.write_file(path, ([[
local accel = require("accel")
local ok, v = pcall(function()
%s
end)
if ok then print("OK " .. tostring(v)) else print("ERR " .. tostring(v)) end
]]):format(code))
  local p = io.popen(support.shell_quote(support.ACCEL_LUA) .. " " .. support.shell_quote(path) .. " 2>&1")
  local out = p:read("a")
  local exited = p:close()
  os.remove(path)
  return out, exited
end

-- The child raised one error, located at a line of the code (line 3 on),
-- that contains every needle; nothing crashed.
local function refused(code, ...)
  local out, exited = run_child(code)
  assert.is_true(exited, "the child process crashed or failed:\n" .. out)
  local msg = ("\n" .. out):match("\nERR ([^\n]*)\n") -- (a sanitizer build may warn on stderr first)
  assert.is_truthy(msg, "expected an error, got:\n" .. out)
  local line = tonumber(msg:match("^[^:]*%.lua:(%d+): "))
  assert.is_truthy(line and line >= 3, "the error does not name the line of the code: " .. msg)
  assert.is_falsy(msg:find("-1 bytes", 1, true), msg)
  for _, needle in ipairs{...} do
    assert.is_truthy(msg:find(needle, 1, true), ("error %q does not mention %q"):format(msg, needle))
  end
  return msg
end

-- The child's code returned a value printing as `want`.
local function gives(code, want)
  local out, exited = run_child(code)
  assert.is_true(exited, "the child process crashed or failed:\n" .. out)
  assert.are.equal("OK " .. want, ("\n" .. out):match("\n(OK [^\n]*)\n"), out)
end

describe("sizes that overflow int64", function()
  it("zeros(2^32, 2^32, 4) is refused before any write (was a 0-byte storage)", function()
    refused([[local x = accel.zeros(4294967296, 4294967296, 4); x[1][1]:fill_(7); return x[1000][1]:sum():item()]],
      "zeros: shape [4294967296, 4294967296, 4] has more than 2^63 elements")
  end)

  it("full({3037000500, 3037000500}, 1) is refused (numel was negative)", function()
    refused([[return accel.full({3037000500, 3037000500}, 1):numel()]],
      "full: shape [3037000500, 3037000500] has more than 2^63 elements")
  end)

  it("ones, empty, rand, randn, randint name themselves", function()
    refused([[return accel.ones(2^40, 2^40)]], "ones: shape [1099511627776, 1099511627776] has more than 2^63 elements")
    refused([[return accel.empty(2^40, 2^40)]], "empty: shape [1099511627776, 1099511627776]")
    refused([[return accel.rand(2^40, 2^40)]], "rand: shape [1099511627776, 1099511627776]")
    refused([[return accel.randn({2^40, 2^40})]], "randn: shape [1099511627776, 1099511627776]")
    refused([[return accel.randint(0, 5, {2^40, 2^40})]], "randint: shape [1099511627776, 1099511627776]")
  end)

  it("a zero size beside huge ones is refused: its strides would overflow", function()
    refused([[return accel.zeros(0, 2^40, 2^40):numel()]], "zeros: shape [0, 1099511627776, 1099511627776]",
      "strides would overflow")
  end)

  it("bytes past 2^63 are refused naming the dtype", function()
    refused([[return accel.zeros(2^62)]], "zeros: shape [4611686018427387904] of float32 needs more than 2^63 bytes")
    refused([[return accel.zeros(2^61, {dtype = accel.float64})]], "of float64 needs more than 2^63 bytes")
  end)

  it("sizes that are not int64 integers are refused", function()
    refused([[return accel.zeros(2^63)]], "size 1", "not an integer in int64's range")
    refused([[return accel.zeros(3, 1e30)]], "size 2", "not an integer in int64's range")
    refused([[return accel.zeros(2.5)]], "size 1", "not an integer")
  end)

  it("expand(2^32, 2^32) is refused (its sum was 0)", function()
    refused([[return accel.ones(1, 1):expand(2^32, 2^32):sum():item()]],
      "expand: shape [4294967296, 4294967296] has more than 2^63 elements")
  end)

  it("elementwise results of huge expanded tensors name the op", function()
    local e = "local x = accel.ones(1, 1):expand(2^31, 2^31); "
    refused(e .. "return x * 2", "mul: shape [2147483648, 2147483648] of float32 needs more than 2^63 bytes")
    refused(e .. "return x:exp()", "exp: shape [2147483648, 2147483648] of float32 needs more than 2^63 bytes")
  end)

  it("view and reshape check the requested shape", function()
    refused([[return accel.zeros(4):view(2^40, 2^40, -1)]], "view: shape [1099511627776, 1099511627776, -1] has more than 2^63")
    refused([[return accel.zeros(0):reshape(2^40, 2^40, 0)]], "reshape: shape [1099511627776, 1099511627776, 0]")
  end)

  it("narrow with start + length past 2^63 is refused", function()
    refused([[return accel.zeros(10):narrow(1, 2^62, 2^62):sum():item()]], "narrow: start 4611686018427387904 is out of range")
    refused([[return accel.zeros(10):narrow(1, 2, 2^62):sum():item()]], "narrow:", "exceeds dimension 1 of size 10")
  end)

  it("broadcasting, matmul, cat, stack and index_select check their result's shape", function()
    local e = "local a = accel.ones(1, 1):expand(2^32, 1); local b = accel.ones(1, 1):expand(1, 2^32); "
    refused(e .. "return a + b", "add: shape [4294967296, 4294967296] has more than 2^63 elements")
    refused(e .. "return a:matmul(b)", "matmul: shape [4294967296, 4294967296] has more than 2^63 elements")
    local h = "local e = accel.ones(1):expand(2^62); "
    refused(h .. "return accel.cat({e, e, e})", "cat: the sizes of dim 1 add up to more than 2^63")
    refused(h .. "return accel.stack({e, e, e})", "stack: shape [3, 4611686018427387904] has more than 2^63 elements")
    refused([[return accel.ones(1, 1):expand(1, 2^62):index_select(1, accel.tensor({0, 0, 0}))]],
      "index_select: shape [3, 4611686018427387904] has more than 2^63 elements")
  end)

  it("split and chunk sizes are added and stepped without overflow", function()
    refused([[return accel.arange(10):split({2^62, 2^62, 2^62})]], "split: sizes sum to more than 2^63", "size 10")
    refused([[return accel.arange(10):split({-1, 11})]], "split: size 1 is negative")
    gives([[return #accel.arange(10):chunk(2^62)]], "10")
    gives([[local p = accel.ones(1):expand((1 << 62) + 5):split(1 << 62)
      return #p .. " " .. p[2]:numel()]], "2 5")
  end)

  it("arange and randperm counts are checked", function()
    refused([[return accel.arange(0, 2^70)]], "arange:", "more than 2^63")
    refused([[return accel.arange(0, 0/0)]], "arange:", "number of elements")
    refused([[return accel.randperm(2^62)]], "randperm: shape [4611686018427387904] of int64 needs more than 2^63 bytes")
  end)

  it("conv2d and max_pool2d refuse geometry past 2^63", function()
    refused([[local F = accel.nn.functional
      local y = F.conv2d(accel.ones(1, 1, 2, 2), accel.ones(1, 1, 1, 1), nil, {padding = 2^62})
      return y]],
      "conv2d:", "2^63")
    refused([[local F = accel.nn.functional
      local y = F.max_pool2d(accel.ones(1, 1, 4, 4), 4, {dilation = 2^62})
      return y]],
      "max_pool2d:", "2^63")
  end)
end)

describe("sizes that fit but cannot be allocated", function()
  it("get the allocator's out-of-memory error with the byte count", function()
    refused([[return accel.zeros(2^40)]], "out of memory: cannot allocate 4398046511104 bytes")
    refused([[return accel.arange(0, 1 << 40)]], "out of memory: cannot allocate 8796093022208 bytes") -- int64
    refused([[return accel.ones(1, 1):expand(2^20, 2^20):prod():item()]], "out of memory: cannot allocate 4398046511104 bytes")
  end)
end)

describe("reductions of expanded tensors with more than 2^31 elements", function()
  it("sum, mean, amax and per-dim sums give the closed-form values without copying", function()
    gives([[return accel.ones(1, 1):expand(2^31, 2^31):sum():item()]], tostring(2.0^62))
    gives([[return accel.ones(1, 1, {dtype = accel.int64}):expand(2^31, 2^31):sum():item()]], tostring(1 << 62))
    gives([[return accel.full({1, 1}, 3.5):expand(2^31, 2^31):mean():item()]], "3.5")
    gives([[return accel.full({1, 1}, -2.5):expand(2^31, 2^31):amax():item()]], "-2.5")
    gives([[local s = accel.tensor({{1}, {2}, {3}}):expand(3, 2^40):sum(2)
      return s[1]:item() .. " " .. s[2]:item() .. " " .. s[3]:item()]],
      ("%d %d %d"):format(1 << 40, 2 << 40, 3 << 40)) -- int64 sums
  end)

  it("keep their gradient: d sum(expand(x)) / dx is the number of copies", function()
    gives([[local x = accel.ones(1, 1, {requires_grad = true})
      x:expand(2^20, 2^20):sum():backward()
      return x.grad:item()]], tostring(2.0^40))
  end)
end)

describe("file readers check declared sizes", function()
  it("TokenFile:ids with first + count past 2^63 is out of range, not a read past the file", function()
    local path = support.tmpname(".bin")
    support.write_file(path, string.pack("<i4i4i4", 20240520, 1, 3) .. ("\0"):rep(1024 - 12) .. string.pack("<I2I2I2", 5, 6, 7))
    refused(("local tf = accel.data.TokenFile(%q, {block_size = 1})\n local ids = tf:ids(2, math.maxinteger)\n return ids"):format(path),
      "TokenFile: 9223372036854775807 tokens from token 2 are out of range (the file has 3)")
    gives(("local tf = accel.data.TokenFile(%q, {block_size = 1})\n return tf:ids(2, 2)[2]:item()"):format(path), "7")
    os.remove(path)
  end)

  it("read_idx refuses a zero size beside huge ones and a shape larger than the file", function()
    local path = support.tmpname(".idx")
    support.write_file(path, "\0\0\8\3" .. string.pack(">I4I4I4", 0, 0xFFFFFFFF, 0xFFFFFFFF))
    refused(("local t = accel.data.read_idx(%q)\n return t"):format(path), "read_idx:", "[0, 4294967295, 4294967295] is refused")
    support.write_file(path, "\0\0\8\2" .. string.pack(">I4I4", 65536, 65536) .. "abc")
    refused(("local t = accel.data.read_idx(%q)\n return t"):format(path),
      "is truncated: the header declares 4294967296 uint8 elements, shape [65536, 65536] (4294967296 bytes), but the file has 3 bytes after the header")
    os.remove(path)
  end)
end)
