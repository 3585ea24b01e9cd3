-- tensor_errors_spec.lua: bad input gives exactly one Lua error (pcall
-- returns false, never a crash) whose message names the op, the shapes or
-- dtypes involved, and the caller's file:line in this spec.
local accel = require("accel")
local F = accel.nn.functional
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["backward twice through the same graph"] = support.NO_FLOAT_SUBTYPE,
  ["a saved tensor modified in place before backward"] = support.NO_FLOAT_SUBTYPE,
  ["accel.load of a truncated file names the file and the problem"] = "the spec uses string.pack (Lua 5.3+)",
})

-- expect_error(fn, needle...): fn (written on the same line as the call) must
-- raise one error naming this file and the line of the call, once, and
-- containing each needle. (Calls into accel.nn.functional, which is Lua, are
-- not tail calls in fn: a Lua tail call replaces fn's frame.)
local expect_error = support.expect_error
local read_file, write_file = support.read_file, support.write_file

-- A fresh temporary path for a .safetensors file.
local function tmpname() return support.tmpname(".safetensors") end

describe("shape errors", function()
  local a23, b4 = accel.zeros(2, 3), accel.zeros(4)

  it("broadcasting mismatch names the op and both shapes", function()
    expect_error(function() local _ = a23 + b4 end, "add", "[2, 3]", "[4]")
    expect_error(function() local _ = a23:mul(accel.zeros(3, 3)) end, "mul", "[2, 3]", "[3, 3]")
    expect_error(function() local _ = a23:sub_(accel.zeros(2, 2)) end, "sub", "[2, 3]", "[2, 2]")
    expect_error(function() local _ = accel.where(accel.zeros(5, {dtype = accel.bool}), a23, 0.0) end, "where", "[5]")
  end)

  it("in-place op whose broadcast result is larger than self", function()
    expect_error(function() local _ = accel.zeros(3):add_(accel.zeros(2, 3)) end, "add_", "[3]", "[2, 3]")
  end)

  it("matmul shape mismatch", function()
    expect_error(function() local _ = a23:matmul(accel.zeros(4, 5)) end, "matmul", "[2, 3]", "[4, 5]")
    expect_error(function() local _ = accel.matmul(accel.zeros(3), accel.zeros(4)) end, "matmul", "[3]", "[4]")
    expect_error(function() local _ = accel.zeros(2, 2, 3):matmul(accel.zeros(3, 2, 4)) end, "matmul", "[2, 2, 3]", "[3, 2, 4]")
    expect_error(function() local _ = accel.zeros(0 + 2, 3):matmul(accel.tensor(1.0)) end, "matmul")
  end)

  it("view of an incompatible size", function()
    expect_error(function() local _ = a23:view(4) end, "view", "[4]", "[2, 3]")
    expect_error(function() local _ = a23:view(-1, 4) end, "view", "[2, 3]")
    expect_error(function() local _ = a23:reshape(7) end, "reshape", "[7]", "[2, 3]")
    expect_error(function() local _ = a23:view(-1, -1) end, "view", "-1")
  end)

  it("view of a non-contiguous tensor that cannot be viewed", function()
    expect_error(function() local _ = a23:t():view(6) end, "view", "[3, 2]", "reshape")
  end)

  it("expand of a non-singleton dim", function()
    expect_error(function() local _ = a23:expand(4, 3) end, "expand", "[2, 3]", "[4, 3]")
  end)

  it("cat / stack of mismatched shapes", function()
    expect_error(function() local _ = accel.cat({a23, accel.zeros(2, 4)}) end, "cat", "[2, 3]", "[2, 4]")
    expect_error(function() local _ = accel.cat({a23, accel.zeros(3)}) end, "cat", "[2, 3]", "[3]")
    expect_error(function() local _ = accel.stack({a23, accel.zeros(3, 2)}) end, "stack", "[2, 3]", "[3, 2]")
    expect_error(function() local _ = accel.cat({}) end, "cat")
    expect_error(function() local _ = accel.cat({a23, 5}) end, "cat", "number")
  end)

  it("split sizes that do not add up", function()
    expect_error(function() local _ = accel.zeros(5):split({2, 2}) end, "split", "4", "5")
  end)
end)

describe("dimension errors", function()
  local a = accel.zeros(2, 3)

  it("dim out of range names the op, the dim and the shape", function()
    expect_error(function() local _ = a:sum(3) end, "sum", "3", "[2, 3]")
    expect_error(function() local _ = a:sum(-3) end, "sum", "-3", "[2, 3]")
    expect_error(function() local _ = a:softmax(5) end, "softmax", "5", "[2, 3]")
    expect_error(function() local _ = a:transpose(1, 3) end, "transpose", "3", "[2, 3]")
    expect_error(function() local _ = a:size(4) end, "size", "4", "[2, 3]")
    expect_error(function() local _ = a:max(3) end, "max", "3", "[2, 3]")
    expect_error(function() local _ = a:argmax(3) end, "argmax", "3", "[2, 3]")
    expect_error(function() local _ = a:unsqueeze(5) end, "unsqueeze", "5")
    expect_error(function() local _ = a:select(3, 1) end, "select", "3", "[2, 3]")
    expect_error(function() local _ = accel.cat({a, a}, 3) end, "cat", "3")
  end)

  it("dim 0 is invalid: dims are 1-based", function()
    expect_error(function() local _ = a:sum(0) end, "sum", "dimension 0", "1-based")
    expect_error(function() local _ = a:size(0) end, "size", "dimension 0", "1-based")
    expect_error(function() local _ = a:softmax(0) end, "softmax", "dimension 0", "1-based")
    expect_error(function() local _ = a:transpose(0, 1) end, "transpose", "dimension 0", "1-based")
    expect_error(function() local _ = a:narrow(0, 1, 1) end, "narrow", "dimension 0", "1-based")
    expect_error(function() local _ = a:mean({1, 0}) end, "mean", "dimension 0", "1-based")
    expect_error(function() local _ = a:permute(0, 1) end, "permute", "dimension 0", "1-based")
    expect_error(function() local _ = accel.cat({a}, 0) end, "cat", "dimension 0", "1-based")
  end)

  it("permute with a repeated dim or the wrong count", function()
    expect_error(function() local _ = a:permute(1, 1) end, "permute")
    expect_error(function() local _ = a:permute(1) end, "permute")
  end)

  it("a repeated dim in a reduction", function()
    expect_error(function() local _ = a:sum({1, 1}) end, "sum", "more than once")
  end)
end)

describe("position errors", function()
  local a = accel.zeros(4, 3)

  it("narrow out of range", function()
    expect_error(function() local _ = a:narrow(1, 3, 5) end, "narrow", "[4, 3]")
    expect_error(function() local _ = a:narrow(2, 4, 1) end, "narrow", "[4, 3]")
    expect_error(function() local _ = a:narrow(1, 0, 1) end, "narrow", "1-based")
  end)

  it("select / t[i] out of range, and t[0]", function()
    expect_error(function() local _ = a:select(1, 5) end, "select", "5", "[4, 3]")
    expect_error(function() local _ = a[5] end, "5", "[4, 3]")
    expect_error(function() local _ = a[-5] end, "-5", "[4, 3]")
    expect_error(function() local _ = a[0] end, "index 0", "1-based")
    expect_error(function() a[7] = 1 end, "7", "[4, 3]")
  end)

  it("gather index values out of range (0-based values)", function()
    local src = accel.zeros(2, 3)
    expect_error(function() local _ = src:gather(2, accel.tensor{{3}, {0}}) end, "gather", "3")
    expect_error(function() local _ = src:gather(2, accel.tensor{{-1}, {0}}) end, "gather", "-1")
    expect_error(function() local _ = src:gather(2, accel.tensor{{0.5}, {0.5}}) end, "gather", "float32")
  end)

  it("index_select index values out of range", function()
    local src = accel.zeros(2, 3)
    expect_error(function() local _ = src:index_select(1, accel.tensor{0, 2}) end, "index_select", "2")
    expect_error(function() local _ = src:index_select(2, accel.tensor{5}) end, "index_select", "5")
  end)

  it("cross_entropy target out of range", function()
    local logits = accel.zeros(2, 3)
    expect_error(function() local r = F.cross_entropy(logits, accel.tensor{0, 5}); return r end, "cross_entropy", "5", "3 classes")
    expect_error(function() local r = F.cross_entropy(logits, accel.tensor{-1, 0}); return r end, "cross_entropy", "-1")
    expect_error(function() local r = F.cross_entropy(logits, accel.tensor{0, 1, 2}); return r end, "cross_entropy", "[2, 3]", "[3]")
  end)
end)

describe("type errors", function()
  local a = accel.zeros(2, 3)

  it("a string where a tensor or number is expected", function()
    expect_error(function() local _ = a:add("x") end, "add", "string")
    expect_error(function() local _ = a + "x" end, "add", "string")
    expect_error(function() local _ = a * {} end, "mul", "table")
    expect_error(function() local _ = a:matmul("x") end, "matmul", "string")
    expect_error(function() local _ = a:masked_fill("x", 1) end, "masked_fill", "string")
  end)

  it("item on a multi-element tensor", function()
    expect_error(function() local _ = a:item() end, "item", "6 elements", "[2, 3]")
  end)

  it("unknown dtype name", function()
    expect_error(function() local _ = accel.zeros(2, {dtype = "float33"}) end, "float33")
    expect_error(function() local _ = a:to("float33") end, "float33")
    expect_error(function() local _ = accel.tensor({1}, {dtype = 3}) end, "dtype")
  end)

  it("unknown device", function()
    expect_error(function() local _ = accel.zeros(2, {device = "tpu"}) end, "tpu")
  end)

  it("t[key] with a key that is not a 1-based position or a name is one error naming index_select", function()
    local t = accel.randn(3)
    expect_error(function() local _ = t[accel.tensor({0}, {dtype = accel.int64})] end, "t[tensor]", "index_select")
    expect_error(function() local _ = t[1.5] end, "t[number]", "1-based integer position")
    -- Torch7's t[{{}, 2}] (PyTorch's t[:, 1]) points at select / narrow
    expect_error(function() local _ = t[{{}, 2}] end, "multi-dimensional indexing is not provided", "t:select(2, k + 1)",
      "t:narrow(2, a + 1, b - a)")
    assert.is_nil(t.no_such_method) -- a name that is not a method stays nil, as for any Lua object
  end)

  it("a bad device index", function()
    expect_error(function() local _ = accel.device("sim", 5) end, "sim", "one device, index 0")
    expect_error(function() local _ = accel.device("cpu", 2) end, "cpu", "one device, index 0")
    expect_error(function() local _ = accel.zeros(2, {device = "sim:3"}) end, "sim:3", "one device, index 0")
    expect_error(function() local _ = accel.device("cuda", -1) end, "index must be an integer >= 0", "-1")
    expect_error(function() local _ = accel.device("cuda", 0.5) end, "index must be an integer >= 0", "0.5")
    expect_error(function() local _ = accel.device("cuda", "1") end, "index must be an integer >= 0", "string")
    expect_error(function() local _ = accel.device("cuda:0", 1) end, "without an index", "cuda:0")
    if accel.device_count("cuda") < 2 then -- the error names the GPU asked for
      expect_error(function() local _ = accel.device("cuda", 1) end, "cuda:1")
    end
  end)

  it("equal and allclose of tensors on different devices", function()
    local c, s = accel.ones(3, {device = "cpu"}), accel.ones(3, {device = "sim"})
    expect_error(function() local _ = c:equal(s) end, "equal", "different devices", "cpu", "sim")
    expect_error(function() local _ = c:allclose(s) end, "allclose", "different devices", "cpu", "sim")
    expect_error(function() local _ = s:allclose(c, 1e-3, 1e-3) end, "allclose", "different devices", "sim and cpu")
  end)

  it("requires_grad on an int tensor", function()
    expect_error(function() local _ = accel.tensor({1, 2}, {requires_grad = true}) end, "int64", "floating point")
    expect_error(function() local _ = accel.zeros(2, {dtype = accel.int32, requires_grad = true}) end, "int32", "floating point")
    expect_error(function() local _ = accel.tensor{1, 2}:requires_grad_() end, "int64", "floating point")
    expect_error(function() accel.tensor{1, 2}.requires_grad = true end, "int64", "floating point")
  end)

  -- torch: requires_grad_(): argument 'requires_grad' (position 1) must be bool, not int
  it("requires_grad_ takes a boolean, not 0 or \"false\"", function()
    local t = accel.zeros(2)
    expect_error(function() t:requires_grad_(0) end, "requires_grad_", "must be a boolean, not number")
    expect_error(function() t:requires_grad_("false") end, "must be a boolean, not string")
    assert.is_false(t.requires_grad)
  end)

  it("bool-only arguments", function()
    expect_error(function() local _ = a:masked_fill(accel.zeros(2, 3), 1) end, "masked_fill", "bool", "float32")
    expect_error(function() local _ = accel.where(accel.zeros(2, 3), a, a) end, "where", "bool", "float32")
  end)

  it("float-only ops on integer tensors", function()
    expect_error(function() local _ = accel.tensor{1, 2}:softmax(1) end, "softmax", "int64")
    expect_error(function() local r = F.cross_entropy(accel.tensor{{1, 2}}, accel.tensor{0}); return r end, "cross_entropy", "int64")
    expect_error(function() local _ = accel.tensor{1, 2}:exp_() end, "exp_", "int64")
  end)

  it("bad data in accel.tensor{}", function()
    expect_error(function() local _ = accel.tensor{{1, 2}, {3}} end, "tensor", "ragged")
    expect_error(function() local _ = accel.tensor{1, "x"} end, "tensor", "string")
    -- torch.tensor({"a": 1}): "Could not infer dtype of dict"; key 0 of a 0-based loop, a hole
    expect_error(function() local _ = accel.tensor{a = 1} end, "tensor: data has key \"a\"", "indexed 1..n")
    expect_error(function() local _ = accel.tensor{{1}, {[0] = 2, 3}} end, "tensor: data[2] has key 0")
    expect_error(function() local _ = accel.tensor{1, nil, 3} end, "tensor: data has ", "with no holes")
  end)

  it("bool operands torch refuses and dtypes that cannot hold a range", function()
    local b = accel.tensor{true, false}
    expect_error(function() local _ = b - true end, "sub", "two bool tensors")
    expect_error(function() local _ = b:floor_divide(b) end, "floor_divide", "not implemented for 'Bool'")
    expect_error(function() local _ = accel.arange(3, {dtype = "bool"}) end, "arange", "bool")
    expect_error(function() local _ = accel.randperm(300, {dtype = "uint8"}) end, "randperm", "n = 300", "uint8")
    expect_error(function() local _ = accel.randint(0, 300, {4}, {dtype = "bfloat16"}) end, "randint", "high - 1 = 299", "[-256, 256]")
  end)

  it("non-integer sizes", function()
    expect_error(function() local _ = accel.zeros(2.5) end, "size", "integer")
    expect_error(function() local _ = accel.zeros(-1) end, "-1")
  end)
end)

describe("random constructor errors", function()
  it("randint with low >= high", function()
    expect_error(function() local _ = accel.randint(5, 5, {3}) end, "randint", "5")
    expect_error(function() local _ = accel.randint(5, 2, {3}) end, "randint", "5", "2")
    expect_error(function() local _ = accel.randint(0, {3}) end, "randint", "0")
  end)

  it("rand with an int dtype, randperm of a negative count", function()
    expect_error(function() local _ = accel.rand(2, {dtype = accel.int64}) end, "rand", "int64")
    expect_error(function() local _ = accel.randperm(-1) end, "randperm", "-1")
  end)
end)

describe("autograd errors", function()
  it("backward on a non-scalar without a gradient", function()
    local x = accel.zeros(2, 3, {requires_grad = true})
    local y = x * 2
    expect_error(function() y:backward() end, "backward", "scalar", "[2, 3]")
  end)

  it("backward with a gradient of the wrong shape", function()
    local x = accel.zeros(2, 3, {requires_grad = true})
    local y = x * 2
    expect_error(function() y:backward(accel.ones(3, 2)) end, "backward", "[3, 2]", "[2, 3]")
  end)

  it("backward on a tensor that does not require grad", function()
    expect_error(function() accel.zeros(1):sum():backward() end, "backward", "does not require grad")
  end)

  it("backward twice through the same graph", function()
    local x = accel.tensor({1.0, 2.0}, {requires_grad = true})
    local y = (x * x):sum()
    y:backward()
    expect_error(function() y:backward() end, "backward", "second time")
  end)

  it("in-place op on a leaf that requires grad", function()
    local x = accel.zeros(2, {requires_grad = true})
    expect_error(function() x:add_(1) end, "add_", "leaf", "[2]")
    expect_error(function() x:mul_(accel.ones(2)) end, "mul_", "leaf", "[2]")
    expect_error(function() x:exp_() end, "exp_", "leaf", "[2]")
    expect_error(function() x:fill_(3) end, "fill_", "leaf", "[2]")
    expect_error(function() x:zero_() end, "zero_", "leaf", "[2]")
    expect_error(function() x:copy_(accel.ones(2)) end, "copy_", "leaf", "[2]")
    expect_error(function() x:masked_fill_(accel.tensor{true, false}, 0) end, "masked_fill", "leaf", "[2]")
    expect_error(function() x[1] = 5 end, "leaf", "[2]")
    -- allowed under no_grad
    accel.no_grad(function() x:add_(1) end)
    assert.are.same({1, 1}, x:tolist())
  end)

  it("a saved tensor modified in place before backward", function()
    local x = accel.tensor({1.0, 2.0}, {requires_grad = true})
    local h = x * 1
    local y = (h * h):sum()
    h:add_(1)
    expect_error(function() y:backward() end, "backward", "in-place")
  end)
end)

describe("freed tensors", function()
  it("any use after t:free() is an error", function()
    local t = accel.ones(2, 2)
    t:free()
    expect_error(function() local _ = t + 1 end, "freed")
    expect_error(function() local _ = t:sum() end, "freed")
    expect_error(function() local _ = tostring(t) end, "freed")
    expect_error(function() local _ = t.shape end, "freed")
    expect_error(function() local _ = accel.ones(2, 2) + t end, "freed")
    expect_error(function() local _ = accel.cat({t}) end, "freed")
  end)

  it("freeing twice is harmless", function()
    local t = accel.ones(2)
    t:free()
    assert.has_no.errors(function() t:free() end)
  end)
end)

describe("file errors", function()
  it("accel.load of a missing file names the file", function()
    local path = tmpname()
    expect_error(function() local _ = accel.load(path) end, path)
  end)

  it("accel.load of a truncated file names the file and the problem", function()
    local path = tmpname()
    accel.save({w = accel.randn(16, 16), b = accel.zeros(16)}, path)
    local bytes = read_file(path)
    assert.is_true(#bytes > 1000)
    -- cut in the data section
    local cut = tmpname()
    write_file(cut, bytes:sub(1, #bytes - 100))
    local err = expect_error(function() local _ = accel.load(cut) end, cut)
    assert.is_truthy(err:lower():find("trunc", 1, true) or err:find("bytes", 1, true), err)
    -- cut in the JSON header
    write_file(cut, bytes:sub(1, 20))
    expect_error(function() local _ = accel.load(cut) end, cut)
    -- cut inside the 8-byte length prefix
    write_file(cut, bytes:sub(1, 5))
    expect_error(function() local _ = accel.load(cut) end, cut)
    -- an empty file
    write_file(cut, "")
    expect_error(function() local _ = accel.load(cut) end, cut)
    -- truncated in place with io.open(..., "r+"): overwrite the header length with garbage
    local f = assert(io.open(path, "r+b"))
    f:write(string.pack("<I8", #bytes * 4))
    f:close()
    expect_error(function() local _ = accel.load(path) end, path)
    os.remove(path)
    os.remove(cut)
  end)

  it("the intact file still loads", function()
    local path = tmpname()
    local w = accel.randn(3, 4)
    accel.save({w = w}, path)
    local t = accel.load(path)
    assert.are.same(w:tolist(), t.w:tolist())
    os.remove(path)
  end)

  it("accel.save to an unwritable path names the path", function()
    local path = "/nonexistent-dir-for-accel-spec/x.safetensors"
    expect_error(function() accel.save({w = accel.zeros(1)}, path) end, path)
  end)
end)

describe("arguments and options a method does not take", function()
  local a, m = accel.zeros(2, 3), accel.tensor({true, false, true})
  local idx, c = accel.tensor({0}), accel.tensor({true, false})

  it("an extra argument or an options table with a key is an error naming the op", function()
    expect_error(function() local _ = accel.zeros(2):copy_(accel.ones(2), {foo = 1}) end, "copy_", "unknown option 'foo'")
    expect_error(function() local _ = accel.zeros(2):fill_(1, {foo = 1}) end, "fill_", "unknown option 'foo'")
    expect_error(function() local _ = accel.zeros(2):zero_({foo = 1}) end, "zero_", "unknown option 'foo'")
    expect_error(function() local _ = a:masked_fill(m, 1, {foo = 1}) end, "masked_fill", "unknown option 'foo'")
    expect_error(function() local _ = a:masked_fill_(m, 0, 5) end, "masked_fill_", "unexpected argument #3")
    expect_error(function() local _ = a:index_select(1, idx, {foo = 1}) end, "index_select", "unknown option 'foo'")
    expect_error(function() local _ = a:gather(1, accel.zeros(1, 3):long(), 9) end, "gather", "unexpected argument #3")
    expect_error(function() local _ = a:narrow(1, 1, 1, {foo = 1}) end, "narrow", "unknown option 'foo'")
    expect_error(function() local _ = a:select(1, 1, {foo = 1}) end, "select", "unknown option 'foo'")
    expect_error(function() local _ = a:transpose(1, 2, {foo = 1}) end, "transpose", "unknown option 'foo'")
    expect_error(function() local _ = a:transpose(1, 2, 3) end, "transpose", "unexpected argument #3")
    expect_error(function() local _ = a:flatten(1, 2, 3) end, "flatten", "unexpected argument #3")
    expect_error(function() local _ = a:chunk(2, 1, 5) end, "chunk", "unexpected argument #3")
    expect_error(function() local _ = a:split(1, 1, 7) end, "split", "unexpected argument #3")
    expect_error(function() local _ = a:split({1.5, 0.5}) end, "split: size 1 must be an integer, got 1.5")
    expect_error(function() local _ = a:split({dim = 2}) end, "split: split_size must be given")
    expect_error(function() local _ = a:split({split_size = 1, dim = 2}, 1) end, "split", "unexpected argument #2")
    assert.are.equal(3, #a:split({split_size = 1, dim = 2})) -- torch's keywords: a.split(split_size=1, dim=1)
    expect_error(function() local _ = a:t(1) end, "t: unexpected argument #1")
    expect_error(function() local _ = a:tril(0, 5) end, "tril", "unexpected argument #2")
    expect_error(function() local _ = a:expand_as(a, 3) end, "expand_as", "unexpected argument #2")
    expect_error(function() local _ = a:view_as(a, 5) end, "view_as", "unexpected argument #2")
    expect_error(function() local _ = a:where(accel.ones(2, 3):bool(), 1, {foo = 1}) end, "where", "unknown option 'foo'")
    expect_error(function() local _ = accel.where(c, 1, 2, {foo = 1}) end, "where", "unknown option 'foo'")
    expect_error(function() local _ = accel.where(c, 1, 2, 3) end, "where", "unexpected argument #4")
    expect_error(function() local _ = a:detach(1) end, "detach", "unexpected argument #1")
    expect_error(function() local _ = a:contiguous({foo = 1}) end, "contiguous", "unknown option 'foo'")
    expect_error(function() local _ = a:is_contiguous({foo = 1}) end, "is_contiguous", "unknown option 'foo'")
    -- torch: a TypeError for each (x.dim(1), x.float(5), x.clone("a"), x.isnan(x), ...)
    for _, name in ipairs({"dim", "ndimension", "numel", "nelement", "is_floating_point", "element_size", "isnan",
      "isinf", "isfinite", "tostring", "float", "double", "half", "bfloat16", "long", "int", "bool", "byte", "clone",
      "cpu", "free"}) do
      local x = accel.zeros(2)
      for _, case in ipairs({{5, name .. ": unexpected argument #1 (number)"}, {{foo = 1}, "unknown option 'foo'"}}) do
        local ok, err = pcall(assert(load("local x, a = ...; local r = x:" .. name .. "(a); return r")), x, case[1])
        assert.is_false(ok, name)
        assert.truthy(tostring(err):find(case[2], 1, true), err)
      end
    end
  end)

  it("an option error names the op however it was called (pcall, a local, a field, a tail call)", function()
    local zeros, t = accel.zeros, {f = accel.randn}
    local function tail() return accel.zeros(2, {dtyp = 1}) end
    for _, case in ipairs({
      {function() return pcall(accel.zeros, 2, 3, {dtyp = 1}) end, "zeros: unknown option 'dtyp'"},
      {function() return pcall(function() local r = zeros(2, {dtyp = 1}); return r end) end, "zeros: unknown option"},
      {function() return pcall(function() local r = t.f(2, {dtyp = 1}); return r end) end, "randn: unknown option"},
      {function() return pcall(function() local r = accel["ones"](2, {dtyp = 1}); return r end) end, "ones: unknown option"},
      {function() return pcall(tail) end, "zeros: unknown option"},
      {function() return pcall(accel.arange, 3, {dtyp = 1}) end, "arange: unknown option"},
    }) do
      local ok, err = case[1]()
      assert.is_false(ok)
      assert.truthy(tostring(err):find(case[2], 1, true), err)
    end
  end)

  it("reductions refuse what torch refuses past dims and keepdim instead of dropping it", function()
    local x = accel.ones(2, 3, 4)
    -- torch: "argument 'keepdim' (position 2) must be bool, not int" (x.sum(0, 1), x.amax(0, 1))
    expect_error(function() local _ = x:sum(1, 2) end, "sum: argument #2", "boolean keepdim", "{1, 2}")
    expect_error(function() local _ = x:amax(1, 2) end, "amax: argument #2", "boolean keepdim")
    expect_error(function() local _ = x:any(1, 2) end, "any: argument #2", "boolean keepdim")
    expect_error(function() local _ = accel.sum(x, 1, 2) end, "sum: argument #3", "boolean keepdim")
    -- torch: x.sum("1") has no matching signature
    expect_error(function() local _ = x:sum("1") end, "sum: argument #1", "a dim", "got string")
    -- torch: dtype is keyword-only ("mean() takes from 1 to 2 positional arguments but 3 were given")
    expect_error(function() local _ = x:mean(1, true, accel.float64) end, "mean: argument #3", "{dtype = ...}", "got a dtype")
    expect_error(function() local _ = x:max(1, true, 3) end, "max: argument #3", "options table")
    expect_error(function() local _ = x:argmax(1, true, 3) end, "argmax: argument #3", "options table")
    expect_error(function() local _ = x:std(1, true, true, 2) end, "std: argument #4", "options table")
    expect_error(function() local _ = x:norm(2, 1, true, 5) end, "norm: argument #4", "options table")
    expect_error(function() local _ = x:sum(1, true, {dtype = accel.float64}, 1) end, "sum", "unexpected argument #4")
    -- the forms torch takes still work
    assert.same({1, 3, 4}, support.shape_of(x:sum(1, true)))
    assert.are.equal(accel.float64, x:sum(1, true, {dtype = accel.float64}).dtype)
    assert.same({2, 1, 4}, support.shape_of(x:amax(2, {keepdim = true})))
  end)

  it("binary ops take one operand and their options table only", function()
    -- torch: "add() takes 1 positional argument but 2 were given"
    expect_error(function() local _ = a:add(a, 2) end, "add: argument #2", "{alpha = ...}", "got number")
    expect_error(function() local _ = a:mul(a, 2) end, "mul: argument #2", "one operand")
    expect_error(function() local _ = a:eq(a, 1) end, "eq: argument #2")
    expect_error(function() local _ = a:pow(2, 3) end, "pow", "unexpected argument #2")
    expect_error(function() local _ = a:div(2, "floor") end, "div: argument #2", "rounding_mode")
    expect_error(function() local _ = a:add(2, {alpha = 2}, 3) end, "add", "unexpected argument #3")
    assert.same({{4, 4, 4}, {4, 4, 4}}, a:add(2, {alpha = 2}):tolist())
  end)

  it("clone, the dtype casts and cpu take memory_format = preserve_format or contiguous_format (as torch)", function()
    local x = accel.ones(2, 2)
    for _, f in ipairs({"preserve_format", "contiguous_format"}) do
      assert.same({{1, 1}, {1, 1}}, x:clone({memory_format = f}):tolist())
      assert.are.equal(accel.float64, x:double({memory_format = f}).dtype)
      assert.are.equal(4, x:cpu({memory_format = f}):numel())
    end
    expect_error(function() local _ = x:float({memory_format = "channels_last"}) end, "float: memory_format 'channels_last'",
      "not supported")
  end)

  it("the options they do take still work", function()
    assert.same({1, 1}, accel.zeros(2):copy_(accel.ones(2), {non_blocking = true}):tolist())
    -- torch 2.15: t.to(torch.float32, copy=True) is a new tensor (t.data_ptr() differs), t.to(torch.float32) is t;
    -- the copy passes the gradient back
    local t = accel.ones(2, {requires_grad = true})
    assert.are.equal(t, t:to(accel.float32))
    local c = t:to(accel.float32, {copy = true})
    assert.are_not.equal(t, c)
    c:sum():backward()
    assert.same({1, 1}, t.grad:tolist())
    local d = accel.ones(2)
    local e = d:to({dtype = accel.float32, copy = true})
    e:fill_(5)
    assert.same({1, 1}, d:tolist())
    expect_error(function() local _ = d:to(accel.float32, {copy = 1}) end, "to: option 'copy' must be a boolean")
    -- torch 2.15: tensor([3., 4.], dtype=bfloat16).norm(2, 0, dtype=torch.float64) -> tensor(5., dtype=float64), the
    -- gradient [0.6016, 0.8008] in bfloat16; dtype=torch.int64: "dtype should be floating point or complex"
    local b = accel.tensor({3, 4}, {dtype = accel.bfloat16, requires_grad = true})
    local n = b:norm(2, 1, {dtype = accel.float64})
    assert.are.same({accel.float64, 5}, {n.dtype, n:item()})
    n:backward()
    assert.are.same({accel.bfloat16, 0.6015625, 0.80078125}, {b.grad.dtype, b.grad[1]:item(), b.grad[2]:item()})
    expect_error(function() local _ = b:norm(2, {dtype = accel.int64}) end, "norm: dtype must be a floating point dtype")
    assert.same({{1, 0, 0}, {1, 1, 0}}, accel.ones(2, 3):tril({diagonal = 0}):tolist())
    assert.are.equal(2, #a:split(1, {dim = 1}))
  end)

  it("memory_format other than contiguous_format is refused (channels_last is not provided)", function()
    local x = accel.zeros(2, 3, 4, 5)
    expect_error(function() local _ = x:contiguous({memory_format = "channels_last"}) end, "contiguous", "channels_last",
      "not supported")
    expect_error(function() local _ = x:is_contiguous({memory_format = "channels_last"}) end, "is_contiguous",
      "channels_last")
    expect_error(function() local _ = x:contiguous({memory_format = 5}) end, "contiguous", "memory_format")
  end)

  it("flatten's dims are checked by name and by the user's position", function()
    expect_error(function() local _ = a:flatten({start = 2}) end, "flatten", "unknown option 'start'")
    expect_error(function() local _ = a:flatten({start_dim = 1.5}) end, "flatten", "start_dim", "integer")
    expect_error(function() local _ = a:flatten("x") end, "flatten: bad argument #1")
    expect_error(function() local _ = a:flatten(1, {start_dim = 1}) end, "flatten", "multiple values for start_dim")
  end)

  it("tril / triu diagonal must be an integer (torch: argument 'diagonal' must be int, not float)", function()
    expect_error(function() local _ = accel.ones(3, 3):tril({diagonal = 1.5}) end, "tril", "diagonal", "integer")
    expect_error(function() local _ = accel.ones(3, 3):triu({diagonal = "1"}) end, "triu", "diagonal", "string")
  end)
end)

describe("index dtypes, empty reductions and in-place names (PyTorch 2.15)", function()
  it("gather / index_select / embedding take int64 and int32 indices only", function()
    local u8 = accel.tensor({0}, {dtype = accel.uint8})
    -- torch: gather(): Expected dtype int32/int64 for index
    expect_error(function() local _ = accel.arange(3):gather(1, u8) end, "gather", "int32 or int64", "uint8")
    expect_error(function() local _ = accel.arange(3):index_select(1, u8) end, "index_select", "int32 or int64")
    -- torch: ... 'indices' to have one of the following scalar types: Long, Int
    local W = accel.zeros(3, 2)
    expect_error(function() local r = F.embedding(u8, W); return r end, "embedding", "int32 or int64", "uint8")
    assert.same({2}, accel.arange(3):gather(1, accel.tensor({2}, {dtype = accel.int32})):tolist())
  end)

  it("argmax / argmin of an empty tensor name themselves (torch: argmax(): Expected reduction dim ...)", function()
    expect_error(function() local _ = accel.zeros(0):argmax() end, "argmax: expected reduction dim to be specified")
    expect_error(function() local _ = accel.zeros(0):argmin() end, "argmin: expected reduction dim to be specified")
    -- torch: argmax(): Expected reduction dim 1 to have non-zero size. (0-based 1 = dim 2 here)
    expect_error(function() local _ = accel.zeros(2, 0):argmax(2) end, "argmax", "dim 2 to have non-zero size")
  end)

  it("split size 0 of a non-empty dimension (torch: split_size can only be 0 if dimension size is 0)", function()
    expect_error(function() local _ = accel.zeros(3):split(0) end, "split", "can only be 0 if dimension size is 0", "3")
  end)

  -- torch 2.15: ones(2).half().clamp(0, 1e5) (and clamp_) raise "value cannot be converted to type c10::Half
  -- without overflow", ones(2).clamp(0, 1e39) "... to type float ..."; an int32 tensor takes a min below or a
  -- max above its range
  it("clamp bounds beyond a floating result's range are errors, as torch's", function()
    expect_error(function() local _ = accel.ones(2):half():clamp(0, 1e5) end,
      "clamp: value 100000 cannot be converted to type float16 without overflow")
    expect_error(function() accel.ones(2):half():clamp_(0, 1e5) end, "clamp_: value 100000 cannot be converted")
    expect_error(function() local _ = accel.ones(2):clamp(-1e39) end, "cannot be converted to type float32")
    assert.same({1, 1}, accel.ones(2):half():clamp(0, 6e4):float():tolist())
    assert.same({1, 1}, accel.ones(2, {dtype = accel.int32}):clamp(0, 1099511627776):tolist())
  end)

  -- torch 2.15: uint8 [0, 5, 200].clamp(max=-1) (and clamp_) raise "Clamp max value -1 is outside the
  -- representable range of Byte", .clamp(300, 400) "Clamp min value 300 ...", int32 .clamp(-2**40, -2**33)
  -- "Clamp max value -8.58993e+09 ... of Int"; uint8 .clamp(-5, 3) = [0, 3, 3], .clamp(-1000, 1000) and
  -- int32 .clamp(max=2**40) change nothing, uint8 .clamp(min=255) = [255, 255, 255]
  it("an integer clamp refuses a min above or a max below the dtype's range, as torch", function()
    local u8 = {dtype = accel.uint8}
    local u = accel.tensor({0, 5, 200}, u8)
    expect_error(function() local _ = u:clamp({max = -1}) end,
      "clamp: max value -1 is outside the representable range of uint8 (0 to 255)")
    expect_error(function() u:clone():clamp_({max = -1}) end, "clamp_: max value -1 is outside the representable range")
    expect_error(function() local _ = u:clamp(300, 400) end, "clamp: min value 300 is outside the representable range")
    local i = accel.tensor({0, 5, 200}, {dtype = accel.int32})
    expect_error(function() local _ = i:clamp(math.floor(-2 ^ 40), math.floor(-2 ^ 33)) end,
      "clamp: max value -8589934592 is outside the representable range of int32")
    assert.same({0, 3, 3}, u:clamp(-5, 3):tolist())
    assert.same({0, 5, 200}, u:clamp(-1000, 1000):tolist())
    assert.same({255, 255, 255}, u:clamp({min = 255}):tolist())
    assert.same({0, 5, 200}, i:clamp({max = math.floor(2 ^ 40)}):tolist())
  end)

  -- ops built on others name themselves, not the op inside them
  it("take, scatter and logsumexp errors name the op called", function()
    local x = accel.zeros(2, 3)
    expect_error(function() local _ = x:take(accel.tensor({99})) end, "take: out of range: tried to access index 99")
    expect_error(function() local _ = x:scatter(2, accel.tensor({{9, 0, 0}, {0, 0, 0}}), 1.0) end,
      "scatter: index 9 is out of range")
    expect_error(function() local _ = x:logsumexp(5) end, "logsumexp: dimension 5 out of range")
  end)

  -- (the write is refused, naming the op the user called; masked_fill_ / index_fill_ write through, as
  -- torch's: tensor_views_spec)
  it("in-place writes into an expanded view name the op called", function()
    local e = accel.zeros(1, 3):expand(2, 3)
    expect_error(function() e:tril_() end, "tril_: unsupported")
    expect_error(function() e:copy_(accel.ones(2, 3)) end, "copy_: unsupported")
    expect_error(function() e:add_(1) end, "add_: unsupported")
    expect_error(function() e:exp_() end, "exp_: unsupported")
  end)
end)

-- PyTorch 2.15 raises TypeError for these (fmin(): argument 'other' (position 1) must be Tensor, not float;
-- sum(): argument 'keepdim' must be bool, not str; set_num_threads expects a positive integer; "kernel size
-- should be greater than zero"); the pieces of chunk / tensor_split are bounded instead of exhausting memory
describe("arguments of the Lua-written methods and flags (PyTorch 2.15's TypeErrors)", function()
  local t = accel.zeros(2, 3)

  it("a missing or mistyped argument is named at the caller's line", function()
    expect_error(function() local _ = t:take() end, "take: missing argument 'index' (position 1)")
    expect_error(function() local _ = t:fmin(1.0) end, "fmin: argument 'other' must be a Tensor, got number")
    expect_error(function() local _ = t:outer() end, "outer: missing argument 'vec2' (position 1)")
    expect_error(function() local _ = t:scatter(2, nil, 0) end, "scatter: missing argument 'index' (position 2)")
    expect_error(function() local _ = t:index_fill(1, nil, 0) end, "index_fill: missing argument 'index'")
    -- torch 2.15: "index_fill(): index 7 is out of bounds for dimension 0 with size 5"
    for _, name in ipairs({"index_fill", "index_fill_"}) do
      expect_error(function() local _ = accel.zeros(5)[name](accel.zeros(5), 1, accel.tensor({7}), 1) end,
        name .. ": index 7 is out of range for a dimension of size 5")
    end
    expect_error(function() local _ = t:addmm(t, 5) end, "addmm: argument 'mat2' must be a Tensor, got number")
    expect_error(function() local _ = t:new_tensor(1, "x") end, "new_tensor: argument 'options' must be a table")
    expect_error(function() local _ = t:logit("x") end, "logit: argument 'eps' must be a number, got string")
    expect_error(function() local _ = t:roll(0 / 0) end, "roll: argument 'shifts' must be an integer or a table")
    expect_error(function() local _ = t:cumsum(math.huge) end, "cumsum: dimension inf out of range")
    expect_error(function() local _ = F.scaled_dot_product_attention(nil, t, t) end,
      "scaled_dot_product_attention: argument 'query' must be a tensor, got nil")
  end)

  -- PyTorch 2.15: t.frac(1) is "frac() takes no arguments (1 given)"; t.flip({'bogus': 1}) and
  -- t.max(t, bogus=1) are TypeErrors too; torch.initial_seed(1) "takes 0 positional arguments but 1 was given"
  it("arguments or options a method does not take are refused, not dropped", function()
    expect_error(function() local _ = t:frac({bogus = 1}) end, "frac: takes 0 arguments but 1 were given")
    expect_error(function() local _ = t:clamp_max(1, {bogus = 1}) end, "clamp_max: takes 1 argument but 2 were given")
    expect_error(function() local _ = t:swapaxes(1, 2, 3) end, "swapaxes: takes 2 arguments but 3 were given")
    expect_error(function() local _ = t:flip({bogus = 1}) end, "flip: dims must be an integer or a list of integers")
    expect_error(function() local _ = t:tensor_split({bogus = 1}) end, "tensor_split: indices must be an integer or a list")
    expect_error(function() local _ = t:max(t, {bogus = 1}) end, "unknown option 'bogus'")
    expect_error(function() local _ = t:equal(t, 1) end, "unexpected argument #2 (number)")
    expect_error(function() local _ = accel.initial_seed(1) end, "unexpected argument #1 (number)")
    assert.are.same({3, 2}, {t:swapaxes(1, 2):size(1), t:swapaxes(1, 2):size(2)})
    assert.is_true(t:equal(t))
  end)

  -- PyTorch 2.15: "Boolean inputs not supported for relu"; binary_cross_entropy with an int64 target "Found dtype
  -- Long but expected Float", with logits "result type Float can't be cast to the desired output type Long"
  it("relu of bools and a binary cross-entropy of integer targets are refused", function()
    local mask = accel.tensor({true, false})
    expect_error(function() local _ = mask:relu() end, "relu: Boolean inputs not supported for relu")
    expect_error(function() mask:relu_() end, "relu_: Boolean inputs not supported for relu")
    local ids = accel.tensor({1, 0, 1})
    expect_error(function() local _ = F.binary_cross_entropy(accel.rand(3), ids) end,
      "binary_cross_entropy: Found dtype int64 but expected a floating point target")
    expect_error(function() local _ = F.binary_cross_entropy_with_logits(accel.zeros(3), ids) end,
      "binary_cross_entropy_with_logits: result type float32 can't be cast to the target's dtype int64")
  end)

  it("masked_fill across devices names masked_fill (not the where it runs)", function()
    local x, mask = accel.zeros(2, {device = "sim"}), accel.tensor({true, false}, {device = "cpu"})
    expect_error(function() local _ = x:masked_fill(mask, 1) end, "masked_fill: tensors are on different devices (sim and cpu)")
    expect_error(function() x:masked_fill_(mask, 1) end, "masked_fill_: tensors are on different devices")
  end)

  it("a flag that is not a boolean is refused, not read as true", function()
    expect_error(function() local _ = t:sum(1, {keepdim = "yes"}) end, "sum: argument 'keepdim' must be a boolean, got string")
    expect_error(function() local _ = accel.zeros(2, {requires_grad = 1}) end, "argument 'requires_grad' must be a boolean")
    expect_error(function() accel.num_threads(0) end, "num_threads: expects a positive integer, got 0")
  end)

  it("chunk of an empty dim and tensor_split refuse more pieces than they make; a zero kernel is named", function()
    expect_error(function() local _ = accel.zeros(0, 3):chunk(1e18) end, "chunk: 1000000000000000000 empty pieces",
      "more than the 16777216")
    expect_error(function() local _ = t:tensor_split(1e18) end, "tensor_split: 1e+18 sections are more than the 16777216")
    expect_error(function() local _ = t:tensor_split(math.huge) end, "number of sections must be a positive integer, got inf")
    assert.are.equal(5, #accel.zeros(0, 3):chunk(5))
    expect_error(function() local _ = accel.nn.Conv2d(1, 2, 0)(accel.zeros(1, 1, 5, 5)) end,
      "conv2d: kernel size should be greater than zero")
  end)
end)
