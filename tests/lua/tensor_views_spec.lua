-- tensor_views_spec.lua: view semantics: view/reshape/transpose/permute/
-- narrow/select/unsqueeze/squeeze/expand/flatten/contiguous, repeat / tile /
-- repeat_interleave (torch's values), shape / stride /
-- is_contiguous, storage sharing (in-place ops through a view change the
-- base), in-place ops on non-contiguous views, t[i] reads and writes with
-- 1-based rows, copy_ with broadcasting, #t, item, tolist.
-- Expected values are written out by hand or computed in plain Lua.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["item returns a Lua number of the right kind"] = support.NO_MATH_TYPE,
})
local shape_of = support.shape_of

-- 0..n-1 as float32, reshaped
local function seq(...)
  local n = 1
  for _, d in ipairs{...} do n = n * d end
  return accel.arange(n, {dtype = accel.float32}):view(...)
end

-- nested Lua list for seq(r, c)
local function seq_list(r, c)
  local l = {}
  for i = 1, r do
    l[i] = {}
    for j = 1, c do l[i][j] = (i - 1) * c + (j - 1) end
  end
  return l
end

describe("shape, size, stride, dim, numel", function()
  local t = seq(2, 3, 4)

  it("shape is a 1-based list of sizes", function()
    local s = t.shape
    assert.are.equal(3, #s)
    assert.are.equal(2, s[1])
    assert.are.equal(3, s[2])
    assert.are.equal(4, s[3])
    assert.are.equal("accel.Size({2, 3, 4})", tostring(s))
    assert.are.same({2, 3, 4}, {table.unpack(t:size())})
  end)

  it("size(d) takes 1-based and negative dims", function()
    assert.are.equal(2, t:size(1))
    assert.are.equal(4, t:size(3))
    assert.are.equal(4, t:size(-1))
    assert.are.equal(2, t:size(-3))
    -- a 0-dim tensor has no dimensions to ask about (torch's IndexError)
    local s = accel.tensor(3.0)
    for _, f in ipairs({function() return s:size(1) end, function() return s:stride(-1) end}) do
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches("the tensor is 0%-dim", err)
    end
    assert.same({}, {table.unpack(s:size())})
  end)

  it("stride is row-major for contiguous tensors", function()
    assert.are.same({12, 4, 1}, t:stride())
    assert.are.equal(12, t:stride(1))
    assert.are.equal(1, t:stride(-1))
  end)

  it("dim / ndim / numel / nelement", function()
    assert.are.equal(3, t:dim())
    assert.are.equal(3, t.ndim)
    assert.are.equal(24, t:numel())
    assert.are.equal(24, t:nelement())
    assert.are.equal(0, accel.tensor(1.0):dim())
    assert.are.equal(1, accel.tensor(1.0):numel())
  end)

  it("#t is the size of the first dim", function()
    assert.are.equal(2, #t)
    assert.are.equal(5, #accel.zeros(5))
    assert.are.equal(0, #accel.zeros(0, 3))
  end)
end)

describe("view / reshape", function()
  it("view shares storage and keeps row-major order", function()
    local a = seq(2, 6)
    local v = a:view(3, 4)
    assert.are.same({3, 4}, shape_of(v))
    assert.are.same(seq_list(3, 4), v:tolist())
    v:fill_(1)
    assert.are.same({{1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1}}, a:tolist())
  end)

  it("view accepts a table and one -1", function()
    local a = seq(2, 6)
    assert.are.same({4, 3}, shape_of(a:view({4, 3})))
    assert.are.same({3, 4}, shape_of(a:view(-1, 4)))
    assert.are.same({2, 2, 3}, shape_of(a:view(2, -1, 3)))
    assert.are.same({12}, shape_of(a:view(-1)))
    assert.are.same({1, 12, 1}, shape_of(a:view(1, 12, 1)))
  end)

  it("view of a 1-element tensor to 0-d and back", function()
    local a = accel.tensor{5.0}
    local s = a:view({})
    assert.are.equal(0, s:dim())
    assert.are.equal(5, s:item())
    assert.are.same({1, 1}, shape_of(s:view(1, 1)))
  end)

  it("reshape of a contiguous tensor is a view", function()
    local a = seq(3, 4)
    local r = a:reshape(2, 6)
    r:mul_(2)
    assert.are.equal(22, a:tolist()[3][4])
  end)

  it("reshape of a non-contiguous tensor copies with the right values", function()
    local a = seq(3, 4)
    local t = a:t()
    assert.is_false(t:is_contiguous())
    local r = t:reshape(12)
    assert.are.same({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, r:tolist())
    assert.are.same({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, t:reshape(-1):tolist())
  end)

  it("view_as / reshape_as", function()
    local a = seq(2, 6)
    local b = accel.zeros(4, 3)
    assert.are.same({4, 3}, shape_of(a:view_as(b)))
    assert.are.same({4, 3}, shape_of(a:reshape_as(b)))
  end)

  it("view of a narrowed (still viewable) tensor", function()
    local a = seq(4, 6)
    local n = a:narrow(1, 2, 2) -- rows 2..3: contiguous block
    local v = n:view(3, 4)
    assert.are.same({{6, 7, 8, 9}, {10, 11, 12, 13}, {14, 15, 16, 17}}, v:tolist())
  end)
end)

describe("transpose / t / permute / T", function()
  it("transpose swaps two dims and strides", function()
    local a = seq(2, 3, 4)
    local t = a:transpose(1, 3)
    assert.are.same({4, 3, 2}, shape_of(t))
    assert.are.same({1, 4, 12}, t:stride())
    assert.is_false(t:is_contiguous())
    local l, al = t:tolist(), a:tolist()
    for i = 1, 4 do
      for j = 1, 3 do
        for k = 1, 2 do assert.are.equal(al[k][j][i], l[i][j][k]) end
      end
    end
    assert.are.same(shape_of(a:transpose(-1, -2)), {2, 4, 3})
  end)

  it("t() on a matrix and on a vector", function()
    local a = seq(2, 3)
    assert.are.same({{0, 3}, {1, 4}, {2, 5}}, a:t():tolist())
    local v = accel.tensor{1.0, 2.0}
    assert.are.same({1, 2}, v:t():tolist())
  end)

  it("permute with varargs and with a table", function()
    local a = seq(2, 3, 4)
    local p = a:permute(3, 1, 2)
    assert.are.same({4, 2, 3}, shape_of(p))
    assert.are.same({1, 12, 4}, p:stride())
    local l, al = p:tolist(), a:tolist()
    for i = 1, 4 do
      for j = 1, 2 do
        for k = 1, 3 do assert.are.equal(al[j][k][i], l[i][j][k]) end
      end
    end
    assert.are.same({4, 2, 3}, shape_of(a:permute({3, 1, 2})))
    assert.are.same({4, 3, 2}, shape_of(a:permute(-1, -2, -3)))
  end)

  it("T reverses all dims", function()
    local a = seq(2, 3, 4)
    assert.are.same({4, 3, 2}, shape_of(a.T))
    assert.are.same({{0, 3}, {1, 4}, {2, 5}}, seq(2, 3).T:tolist())
  end)
end)

describe("narrow / select", function()
  it("narrow(dim, start, length) with a 1-based start", function()
    local a = seq(4, 3)
    local n = a:narrow(1, 2, 2)
    assert.are.same({{3, 4, 5}, {6, 7, 8}}, n:tolist())
    local c = a:narrow(2, 3, 1)
    assert.are.same({{2}, {5}, {8}, {11}}, c:tolist())
    assert.are.same({{9, 10, 11}}, a:narrow(1, -1, 1):tolist())
    assert.are.same({{1, 2}, {4, 5}, {7, 8}, {10, 11}}, a:narrow(-1, 2, 2):tolist())
  end)

  it("select(dim, index) drops the dim; 1-based and negative indices", function()
    local a = seq(3, 4)
    assert.are.same({4, 5, 6, 7}, a:select(1, 2):tolist())
    assert.are.same({1, 5, 9}, a:select(2, 2):tolist())
    assert.are.same({8, 9, 10, 11}, a:select(1, -1):tolist())
    assert.are.same({3, 7, 11}, a:select(-1, -1):tolist())
    local s = a:select(1, 1):select(1, 3)
    assert.are.equal(0, s:dim())
    assert.are.equal(2, s:item())
  end)
end)

describe("unsqueeze / squeeze / expand / flatten", function()
  it("unsqueeze inserts a size-1 dim at a 1-based position", function()
    local a = seq(2, 3)
    assert.are.same({1, 2, 3}, shape_of(a:unsqueeze(1)))
    assert.are.same({2, 1, 3}, shape_of(a:unsqueeze(2)))
    assert.are.same({2, 3, 1}, shape_of(a:unsqueeze(3)))
    assert.are.same({2, 3, 1}, shape_of(a:unsqueeze(-1)))
    assert.are.same({2, 1, 3}, shape_of(a:unsqueeze(-2)))
    assert.are.same({{{0, 1, 2}}, {{3, 4, 5}}}, a:unsqueeze(2):tolist())
  end)

  it("squeeze removes size-1 dims (all, or one)", function()
    local a = accel.zeros(1, 3, 1, 2)
    assert.are.same({3, 2}, shape_of(a:squeeze()))
    assert.are.same({3, 1, 2}, shape_of(a:squeeze(1)))
    assert.are.same({1, 3, 2}, shape_of(a:squeeze(3)))
    assert.are.same({1, 3, 1, 2}, shape_of(a:squeeze(2))) -- size 3: unchanged
    assert.are.same({1, 3, 2}, shape_of(a:squeeze(-2)))
  end)

  it("expand broadcasts size-1 dims with stride 0 and shares storage", function()
    local a = accel.tensor{{1.0}, {2.0}, {3.0}}
    local e = a:expand(3, 4)
    assert.are.same({3, 4}, shape_of(e))
    assert.are.same({1, 0}, e:stride())
    assert.are.same({{1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}}, e:tolist())
    assert.are.same({3, 4}, shape_of(a:expand(-1, 4)))
    assert.are.same({2, 3, 4}, shape_of(a:expand(2, 3, 4)))
    assert.are.same({3, 4}, shape_of(a:expand({3, 4})))
    a:mul_(10)
    assert.are.same({10, 10, 10, 10}, e:tolist()[1])
    assert.are.same({3, 4}, shape_of(a:expand_as(accel.zeros(3, 4))))
  end)

  it("flatten", function()
    local a = seq(2, 3, 4)
    assert.are.same({24}, shape_of(a:flatten()))
    assert.are.same({6, 4}, shape_of(a:flatten(1, 2)))
    assert.are.same({2, 12}, shape_of(a:flatten(2)))
    assert.are.same({2, 12}, shape_of(a:flatten(2, -1)))
    local f = a:flatten()
    local l = f:tolist()
    for i = 1, 24 do assert.are.equal(i - 1, l[i]) end
    -- a non-contiguous tensor flattens in logical order
    assert.are.same({0, 3, 1, 4, 2, 5}, seq(2, 3):t():flatten():tolist())
  end)
end)

describe("contiguous / clone / detach", function()
  it("contiguous of a transposed tensor is a row-major copy", function()
    local a = seq(2, 3)
    local t = a:t()
    local c = t:contiguous()
    assert.is_true(c:is_contiguous())
    assert.are.same({2, 1}, c:stride())
    assert.are.same({{0, 3}, {1, 4}, {2, 5}}, c:tolist())
    c:fill_(-1)
    assert.are.same(seq_list(2, 3), a:tolist())
  end)

  it("contiguous of a contiguous tensor shares storage", function()
    local a = seq(2, 3)
    local c = a:contiguous()
    c:add_(1)
    assert.are.equal(1, a:tolist()[1][1])
  end)

  it("clone copies, detach shares", function()
    local a = seq(2, 3)
    local c = a:clone()
    c:zero_()
    assert.are.same(seq_list(2, 3), a:tolist())
    local d = a:detach()
    d:zero_()
    assert.are.same({{0, 0, 0}, {0, 0, 0}}, a:tolist())
  end)

  it("is_contiguous for narrow / select / expand", function()
    local a = seq(4, 5)
    assert.is_true(a:narrow(1, 2, 2):is_contiguous())
    assert.is_false(a:narrow(2, 2, 2):is_contiguous())
    assert.is_false(a:select(2, 1):is_contiguous())
    assert.is_true(a:select(1, 3):is_contiguous())
    assert.is_false(accel.zeros(3, 1):expand(3, 4):is_contiguous())
  end)

  -- PyTorch 2.15: True for every one of these (strides (1,), (2, 1), (1, 1), (2, 2, 1), (1, 1));
  -- a tensor without elements is contiguous whatever its strides, and size-1 dims' strides do not count
  it("a tensor with no elements is contiguous, also transposed", function()
    for _, s in ipairs({{0}, {0, 2}, {2, 0}, {3, 0, 2}, {1, 0}}) do
      assert.is_true(accel.zeros(table.unpack(s)):is_contiguous(), table.concat(s, "x"))
    end
    assert.is_true(accel.zeros(2, 0):t():is_contiguous())
    assert.is_true(accel.zeros(4, 1):t():is_contiguous())
  end)
end)

describe("views share storage with their base", function()
  it("narrow then mul_ changes the base", function()
    local a = seq(4, 3)
    local b = a:narrow(1, 2, 2)
    b:mul_(10)
    assert.are.same({{0, 1, 2}, {30, 40, 50}, {60, 70, 80}, {9, 10, 11}}, a:tolist())
  end)

  it("a:t():add_(1) changes a", function()
    local a = seq(2, 3)
    a:t():add_(1)
    assert.are.same({{1, 2, 3}, {4, 5, 6}}, a:tolist())
  end)

  it("a:select(2, 1):fill_(0) zeroes the first column", function()
    local a = seq(3, 3):add(1)
    a:select(2, 1):fill_(0)
    assert.are.same({{0, 2, 3}, {0, 5, 6}, {0, 8, 9}}, a:tolist())
  end)

  it("in-place ops on a non-contiguous column view", function()
    local a = seq(3, 4)
    local col = a:narrow(2, 2, 2) -- columns 2..3
    assert.is_false(col:is_contiguous())
    col:add_(accel.tensor{100.0, 200.0}) -- broadcast over rows
    assert.are.same({{0, 101, 202, 3}, {4, 105, 206, 7}, {8, 109, 210, 11}}, a:tolist())
    col:neg_()
    assert.are.same({{0, -101, -202, 3}, {4, -105, -206, 7}, {8, -109, -210, 11}}, a:tolist())
    col:clamp_(-205, -102)
    assert.are.same({{0, -102, -202, 3}, {4, -105, -205, 7}, {8, -109, -205, 11}}, a:tolist())
    col:zero_()
    assert.are.same({{0, 0, 0, 3}, {4, 0, 0, 7}, {8, 0, 0, 11}}, a:tolist())
  end)

  it("in-place ops on a transposed view of a float64 tensor", function()
    local a = accel.tensor({{1, 2}, {3, 4}}, {dtype = accel.float64})
    local t = a:t()
    t:mul_(accel.tensor({10, 100}, {dtype = accel.float64})) -- t[i][j] *= m[j] -> a[j][i] *= m[j]
    assert.are.same({{10, 20}, {300, 400}}, a:tolist())
    t:sqrt_()
    local l = a:tolist()
    assert.are.equal(math.sqrt(10), l[1][1])
    assert.are.equal(math.sqrt(400), l[2][2])
  end)

  it("views of views: permute + select + narrow write through", function()
    local a = seq(2, 3, 4)
    local v = a:permute(3, 1, 2):select(1, 4):narrow(2, 2, 2) -- a[:, 2:3, 4]
    v:fill_(-1)
    local l = a:tolist()
    for i = 1, 2 do
      assert.are.equal(-1, l[i][2][4])
      assert.are.equal(-1, l[i][3][4])
      assert.are.equal((i - 1) * 12 + 3, l[i][1][4])
      assert.are.equal((i - 1) * 12 + 6, l[i][2][3])
    end
  end)

  it("unsqueeze / view / flatten views write through", function()
    local a = seq(2, 3)
    a:unsqueeze(1):select(1, 1):select(1, 2):fill_(7)
    assert.are.same({7, 7, 7}, a:tolist()[2])
    a:view(6):narrow(1, 1, 1):fill_(-5)
    assert.are.equal(-5, a:tolist()[1][1])
    a:flatten():narrow(1, 6, 1):fill_(9)
    assert.are.equal(9, a:tolist()[2][3])
  end)

  it("masked_fill_ through a view", function()
    local a = seq(2, 4)
    local v = a:narrow(2, 3, 2)
    v:masked_fill_(accel.tensor{true, false}, 0)
    assert.are.same({{0, 1, 0, 3}, {4, 5, 0, 7}}, a:tolist())
  end)
end)

describe("t[i] indexing with 1-based rows", function()
  it("reads rows as views", function()
    local a = seq(3, 4)
    assert.are.same({0, 1, 2, 3}, a[1]:tolist())
    assert.are.same({8, 9, 10, 11}, a[3]:tolist())
    assert.are.same({8, 9, 10, 11}, a[-1]:tolist())
    assert.are.equal(6, a[2][3]:item())
    a[2]:fill_(0)
    assert.are.same({0, 0, 0, 0}, a:tolist()[2])
  end)

  it("reads elements of a vector as 0-d tensors", function()
    local v = accel.tensor{10, 20, 30}
    assert.are.equal(0, v[2]:dim())
    assert.are.equal(20, v[2]:item())
    assert.are.equal(30, v[-1]:item())
  end)

  it("assigns a scalar, a tensor, or a broadcast row", function()
    local a = accel.zeros(3, 2)
    a[1] = 5
    a[2] = accel.tensor{1.0, 2.0}
    a[-1] = accel.tensor{7.0}
    assert.are.same({{5, 5}, {1, 2}, {7, 7}}, a:tolist())
    local v = accel.tensor{1, 2, 3}
    v[2] = 20
    assert.are.same({1, 20, 3}, v:tolist())
    a[1][2] = -1
    assert.are.same({5, -1}, a:tolist()[1])
  end)

  it("assignment through a transposed view writes a column of the base", function()
    local a = accel.zeros(2, 3)
    a:t()[2] = accel.tensor{4.0, 5.0}
    assert.are.same({{0, 4, 0}, {0, 5, 0}}, a:tolist())
  end)

  it("methods and properties still resolve", function()
    local a = seq(2, 2)
    assert.are.equal("function", type(a.sum))
    assert.are.equal(accel.float32, a.dtype)
    assert.is_false(a.requires_grad)
    assert.is_nil(a.grad)
  end)
end)

describe("copy_", function()
  it("copies values with a dtype cast", function()
    local a = accel.zeros(2, 2)
    a:copy_(accel.tensor{{1, 2}, {3, 4}})
    assert.are.equal(accel.float32, a.dtype)
    assert.are.same({{1, 2}, {3, 4}}, a:tolist())
    local i = accel.zeros(2, {dtype = accel.int64})
    i:copy_(accel.tensor{2.7, -2.7})
    assert.are.same({2, -2}, i:tolist())
  end)

  it("broadcasts the source", function()
    local a = accel.zeros(3, 2)
    a:copy_(accel.tensor{1.0, 2.0})
    assert.are.same({{1, 2}, {1, 2}, {1, 2}}, a:tolist())
    a:copy_(accel.tensor{{1.0}, {2.0}, {3.0}})
    assert.are.same({{1, 1}, {2, 2}, {3, 3}}, a:tolist())
    a:copy_(accel.tensor(9.0))
    assert.are.same({{9, 9}, {9, 9}, {9, 9}}, a:tolist())
  end)

  it("into a non-contiguous view, from a non-contiguous source", function()
    local a = accel.zeros(3, 3)
    local src = seq(3, 3):t() -- src[i][j] = (j-1)*3 + (i-1)
    a:narrow(2, 2, 2):copy_(src:narrow(2, 1, 2))
    assert.are.same({{0, 0, 3}, {0, 1, 4}, {0, 2, 5}}, a:tolist())
  end)

  it("returns self", function()
    local a = accel.zeros(2)
    assert.are.equal(a, a:copy_(accel.ones(2)))
    assert.are.equal(a, a:add_(1))
    assert.are.equal(a, a:fill_(3))
  end)
end)

describe("item / tolist", function()
  it("item returns a Lua number of the right kind", function()
    assert.are.equal("float", math.type(accel.tensor{2.5}:item()))
    assert.are.equal(2.5, accel.tensor{{2.5}}:item())
    assert.are.equal("integer", math.type(accel.tensor{7}:item()))
    assert.are.equal(7, accel.tensor(7):item())
    assert.are.equal(true, accel.tensor{true}:item())
    assert.are.equal(-3, accel.tensor({-3}, {dtype = accel.int32}):item())
    assert.are.equal(1.5, accel.tensor({1.5}, {dtype = accel.bfloat16}):item())
  end)

  it("tolist of a 0-d tensor is a number", function()
    assert.are.equal(4.0, accel.tensor(4.0):tolist())
  end)

  it("tolist nests by dims, in logical order for views", function()
    assert.are.same({{{0, 1}, {2, 3}}, {{4, 5}, {6, 7}}}, seq(2, 2, 2):tolist())
    assert.are.same({{0, 2}, {1, 3}}, seq(2, 2):t():tolist())
    assert.are.same({}, accel.zeros(0):tolist())
    assert.are.same({{}, {}}, accel.zeros(2, 0):tolist())
  end)

  it("item of a one-element view", function()
    local a = seq(3, 4)
    assert.are.equal(9, a:narrow(1, 3, 1):narrow(2, 2, 1):item())
  end)

  -- torch 2.15 gives x.grad = 6 everywhere for the first case (it rebuilds the view's history);
  -- here that backward is refused rather than silently giving 2 (the view's old history)
  it("a view whose base was modified in place afterwards refuses its backward", function()
    for _, make in ipairs({
      function(y) return y:view(4) end, function(y) return y:t() end, function(y) return y:narrow(1, 1, 1) end,
      function(y) return y:select(1, 2) end, function(y) return y:permute(2, 1) end,
    }) do
      local x = accel.tensor({{1, 2}, {3, 4}}, {dtype = accel.float64, requires_grad = true})
      local y = x * 2
      local v = make(y)
      y:mul_(3)
      local ok, err = pcall(function() v:sum():backward() end)
      assert.is_false(ok)
      assert.matches("this view was used after the tensor it views was modified by an in%-place operation", err)
    end
    -- the view taken after the in-place op, or the base alone, back-propagate as before
    local x = accel.tensor({{1, 2}, {3, 4}}, {dtype = accel.float64, requires_grad = true})
    local y = x * 2
    y:mul_(3)
    y:view(4):sum():backward()
    assert.same({{6, 6}, {6, 6}}, x.grad:tolist())
    x.grad = nil
    local z = x * 2
    local _ = z:t()
    z:add_(1)
    z:sum():backward()
    assert.same({{2, 2}, {2, 2}}, x.grad:tolist())
    -- a view used before the in-place op back-propagates (torch: 2 everywhere), also as the op's operand
    x.grad = nil
    local w = x * 1
    local u = w:t() * 2
    w:add_(1)
    u:sum():backward()
    assert.same({{2, 2}, {2, 2}}, x.grad:tolist())
    x.grad = nil
    local q = x * 1
    q:add_(q:t())
    q:sum():backward()
    assert.same({{2, 2}, {2, 2}}, x.grad:tolist())
    -- t[i] = v on a tensor with history keeps nothing alive once its result is dropped
    collectgarbage()
    local before = accel.memory_stats()
    for _ = 1, 20 do
      local r = x * 1
      r[1] = 0
    end
    collectgarbage()
    assert.are.equal(before, accel.memory_stats())
  end)

  it("unsqueeze past the 8-dim limit is an error (it wrote past its shape arrays)", function()
    local ok, err = pcall(function() return accel.zeros(1, 1, 1, 1, 1, 1, 1, 1):unsqueeze(1) end)
    assert.is_false(ok)
    assert.matches("unsqueeze: a 8%-dim tensor of shape %[1, 1, 1, 1, 1, 1, 1, 1%] cannot get another dim", err)
  end)
end)

describe("keyword forms and edge cases (PyTorch 2.15)", function()
  it("flatten takes {start_dim =, end_dim =}, also after positional dims and as accel.flatten", function()
    local a = accel.zeros(2, 3, 4)
    -- torch: flatten(start_dim=1) [2, 12]; flatten(start_dim=0, end_dim=1) [6, 4]
    assert.same({2, 12}, shape_of(a:flatten({start_dim = 2})))
    assert.same({6, 4}, shape_of(a:flatten({start_dim = 1, end_dim = 2})))
    assert.same({2, 12}, shape_of(a:flatten(2, {end_dim = 3})))
    assert.same({2, 12}, shape_of(accel.flatten(a, {start_dim = 2})))
    assert.same({24}, shape_of(a:flatten({})))
  end)

  it("contiguous / is_contiguous take memory_format = \"contiguous_format\"", function()
    local a = seq(2, 3)
    assert.same({3, 1}, a:contiguous({memory_format = "contiguous_format"}):stride())
    assert.is_true(a:is_contiguous({memory_format = "contiguous_format"})) -- torch: True
    assert.is_false(a:t():is_contiguous({memory_format = "contiguous_format"}))
  end)

  it("index_select of a 0-dim tensor with one 0 index is its value (torch: tensor(3.))", function()
    local r = accel.tensor(3.):index_select(1, accel.tensor({0}))
    assert.same({}, shape_of(r))
    assert.are.equal(3, r:item())
    assert.are.equal(3, accel.tensor(3.):index_select(-1, accel.tensor(0)):item())
  end)

  it("split(0) of an empty dimension is one empty piece (torch: (tensor([]),))", function()
    local parts = accel.zeros(0):split(0)
    assert.are.equal(1, #parts)
    assert.same({0}, shape_of(parts[1]))
  end)

  -- torch 2.15: x = zeros(1, 3).expand(2, 3); x.fill_(1) -> [[1., 1., 1.], [1., 1., 1.]], x.zero_() -> zeros, and
  -- the base's one row holds the value (add_ / copy_ into it are refused: "unsupported operation")
  it("fill_ / zero_ of an expanded view write the shared elements, as torch", function()
    local base = accel.zeros(1, 3)
    local e = base:expand(2, 3)
    e:fill_(1)
    assert.same({{1, 1, 1}, {1, 1, 1}}, e:tolist())
    assert.same({{1, 1, 1}}, base:tolist())
    e:zero_()
    assert.same({{0, 0, 0}}, base:tolist())
    local s = accel.full({1}, 2.0, {device = "sim"}):expand(4)
    s:fill_(7)
    assert.same({7, 7, 7, 7}, s:tolist())
  end)

  -- torch 2.15 (with its deprecation warning): b = tensor([[1, 2, 3]]); b.expand(2, 3).index_fill_(1, [0, 2], -1)
  -- -> b = [[-1, 2, -1]]; b = tensor([[1.], [2.]]); b.expand(2, 3).index_fill_(0, [1], 7.) -> [[1.], [7.]],
  -- .index_fill_(1, [2], 7.) -> [[7.], [7.]]; b = tensor([5., 6.]); b.expand(3, 2).masked_fill_([[F, F], [F, T],
  -- [F, F]], 0.) -> [5., 0.]; b = tensor([[1., 2., 3.]]); b.expand(2, 3).masked_fill_([T, F, F], 7.) -> [[7., 2., 3.]]
  it("index_fill_ / masked_fill_ of an expanded view write the shared elements any selected one refers to, as torch",
    function()
      local b = accel.tensor({{1, 2, 3}}, {dtype = accel.int64})
      b:expand(2, 3):index_fill_(2, accel.tensor({0, 2}, {dtype = accel.int64}), -1)
      assert.same({{-1, 2, -1}}, b:tolist())
      local c = accel.tensor({{1.0}, {2.0}}, {dtype = accel.float32})
      c:expand(2, 3):index_fill_(1, accel.tensor({1}, {dtype = accel.int64}), 7)
      assert.same({{1}, {7}}, c:tolist())
      c:expand(2, 3):index_fill_(2, accel.tensor({2}, {dtype = accel.int64}), 7)
      assert.same({{7}, {7}}, c:tolist())
      local d = accel.tensor({5.0, 6.0}, {dtype = accel.float32})
      d:expand(3, 2):masked_fill_(accel.tensor({{false, false}, {false, true}, {false, false}}), 0)
      assert.same({5, 0}, d:tolist())
      local e = accel.tensor({{1.0, 2.0, 3.0}}, {dtype = accel.float32, device = "sim"})
      e:expand(2, 3):masked_fill_(accel.tensor({true, false, false}, {device = "sim"}), 7)
      assert.same({{7, 2, 3}}, e:tolist())
      -- with gradients recorded, refused as in-place writes into any view (naming the op)
      local g = accel.tensor({{1.0, 2.0, 3.0}}, {dtype = accel.float32, requires_grad = true}) * 1
      support.expect_error(function() g:expand(2, 3):index_fill_(2, accel.tensor({0}, {dtype = accel.int64}), 7) end,
        "index_fill_: in-place modification of a view")
    end)

  it("fill_ of an expanded view with no elements succeeds (torch: tensor([], size=(3, 0)))", function()
    local e = accel.zeros(1, 0):expand(3, 0)
    assert.are.equal(e, e:fill_(1))
    assert.same({3, 0}, shape_of(e))
  end)
end)

-- Values, gradients and messages below are PyTorch 2.15's: x = [[1, 2, 3],
-- [4, 5, 6]] (float32, requires grad), y = x.repeat(...) etc.,
-- (y * arange(1, numel + 1).reshape(y.shape)).sum().backward().
describe("repeat / tile / repeat_interleave (torch's values and gradients)", function()
  local expect_error = support.expect_error
  local function x() return accel.tensor({{1, 2, 3}, {4, 5, 6}}, {dtype = accel.float32, requires_grad = true}) end
  -- y's values and the gradient x gets from sum(y * (1..numel))
  local function check(y, x0, values, grad)
    assert.same(values, y:tolist())
    ;(y * accel.arange(1, y:numel() + 1, {dtype = accel.float32}):reshape(y.shape)):sum():backward()
    assert.same(grad, x0.grad:tolist())
  end

  it("repeat tiles the whole tensor (sizes >= dims, leading dims added); t[\"repeat\"] and accel[\"repeat\"]", function()
    local a = x()
    local y = a["repeat"](a, 2, 1, 2)
    assert.same({2, 2, 6}, shape_of(y))
    check(y, a, {{{1, 2, 3, 1, 2, 3}, {4, 5, 6, 4, 5, 6}}, {{1, 2, 3, 1, 2, 3}, {4, 5, 6, 4, 5, 6}}},
      {{34, 38, 42}, {58, 62, 66}})
    assert.same({0, 6}, shape_of(accel["repeat"](a, {0, 2})))
    local s = accel.tensor(3.5)
    assert.same({3.5, 3.5}, s["repeat"](s, 2):tolist())
    assert.same({}, shape_of(s["repeat"](s)))
  end)

  it("tile pads the sizes with leading 1s", function()
    local a = x()
    check(a:tile(2), a, {{1, 2, 3, 1, 2, 3}, {4, 5, 6, 4, 5, 6}}, {{5, 7, 9}, {17, 19, 21}})
    local b = x()
    local y = accel.tile(b, {2, 1, 1})
    assert.same({2, 2, 3}, shape_of(y))
    check(y, b, {{{1, 2, 3}, {4, 5, 6}}, {{1, 2, 3}, {4, 5, 6}}}, {{8, 10, 12}, {14, 16, 18}})
  end)

  it("repeat_interleave with a number: flattened without dim, per slice with dim", function()
    local a = x()
    check(a:repeat_interleave(2), a, {1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6}, {{3, 7, 11}, {15, 19, 23}})
    local b = x()
    check(b:repeat_interleave(2, {dim = 2}), b, {{1, 1, 2, 2, 3, 3}, {4, 4, 5, 5, 6, 6}}, {{3, 7, 11}, {15, 19, 23}})
    assert.same({0}, shape_of(b:repeat_interleave(0)))
    assert.same({3.5, 3.5}, accel.tensor(3.5):repeat_interleave(2):tolist())
  end)

  it("repeat_interleave with a tensor of repeats (one per slice, or one for all)", function()
    local a = x()
    check(a:repeat_interleave(accel.tensor({1, 2}), 1), a, {{1, 2, 3}, {4, 5, 6}, {4, 5, 6}},
      {{1, 2, 3}, {11, 13, 15}})
    local b = x()
    check(accel.repeat_interleave(b, accel.tensor({0, 3, 1}), {dim = -1}), b, {{2, 2, 2, 3}, {5, 5, 5, 6}},
      {{0, 6, 4}, {0, 18, 8}})
    assert.same({4, 3}, shape_of(b:repeat_interleave(accel.tensor({2}), 1)))
    assert.same({1, 2, 2, 3, 3, 3, 6}, b:repeat_interleave(accel.tensor({1, 2, 3, 0, 0, 1})):tolist())
    assert.same({0, 1, 1, 2, 2, 2, 5}, accel.tensor({1, 2, 3, 0, 0, 1}):repeat_interleave():tolist())
  end)

  it("the result is new memory, not a view of the input", function()
    local v = accel.ones(1)
    v["repeat"](v, 3):fill_(2)
    v:repeat_interleave(1):fill_(2)
    v:tile(1):fill_(2)
    assert.are.equal(1, v:item())
  end)

  it("errors are torch's", function()
    local a = x()
    expect_error(function() local _ = a["repeat"](a, 2) end, "repeat: Number of dimensions of repeat dims can not "
      .. "be smaller than number of dimensions of tensor")
    expect_error(function() local _ = a["repeat"](a, -1, 2) end,
      "repeat: Trying to create tensor with negative dimension -2: [-2, 6]")
    expect_error(function() local _ = a:tile(-1) end, "tile: Trying to create tensor with negative dimension -3: [2, -3]")
    expect_error(function() local _ = a:repeat_interleave(-1) end, "repeat_interleave: Repeats must be non-negative")
    expect_error(function() local _ = a:repeat_interleave(accel.tensor({1, 2, 3}), 1) end,
      "repeats must have the same size as input along dim, but got repeats.size(0) = 3 and input.size(0) = 2")
    expect_error(function() local _ = a:repeat_interleave(accel.tensor({{1, 2}}), 1) end,
      "repeats must be 0-dim or 1-dim tensor")
    expect_error(function() local _ = a:repeat_interleave(accel.tensor({1, -2}), 1) end, "repeats can not be negative")
    expect_error(function() local _ = a:repeat_interleave(accel.tensor({1.5, 2}), 1) end,
      "repeats must be an integer tensor, got float32")
    expect_error(function() local _ = a:repeat_interleave(2, 3) end, "repeat_interleave: dimension 3 out of range")
    expect_error(function() local _ = a:repeat_interleave(2, {dim = 1, output_size = 4}) end,
      "repeat_interleave: unknown option 'output_size'")
  end)
end)

-- PyTorch 2.15: v = arange(6).view(2, 3); b = v.view(6); v.t_() -> v is
-- (3, 2) with strides (1, 3), b keeps (6,); writes through v reach b.
describe("in-place view changes (t_, squeeze_, unsqueeze_, transpose_, swapaxes_, swapdims_)", function()
  local expect_error = support.expect_error

  it("change the tensor itself; views taken before keep their shape", function()
    local v = seq(2, 3)
    local b = v:view(6)
    assert.are.equal(v, v:t_()) -- returns the tensor itself
    assert.are.same({3, 2}, shape_of(v))
    assert.are.same({1, 3}, {v:stride(1), v:stride(2)})
    assert.is_false(v:is_contiguous())
    assert.are.same({{0, 3}, {1, 4}, {2, 5}}, v:tolist())
    assert.are.same({6}, shape_of(b))
    v:add_(10) -- the same storage
    assert.are.same({10, 11, 12, 13, 14, 15}, b:tolist())
    local z = accel.zeros(1, 2, 1)
    z:squeeze_(3)
    assert.are.same({1, 2}, shape_of(z))
    z:squeeze_()
    assert.are.same({2}, shape_of(z))
    z:unsqueeze_(1)
    assert.are.same({1, 2}, shape_of(z))
    for _, name in ipairs({"transpose_", "swapaxes_", "swapdims_"}) do
      local t = seq(2, 3, 4)
      t[name](t, 1, 3)
      assert.are.same({4, 3, 2}, shape_of(t), name)
      assert.is_true(t:equal(seq(2, 3, 4):permute(3, 2, 1)), name)
    end
  end)

  it("record their backward on a non-leaf; a leaf that requires grad is refused, as PyTorch", function()
    local w = accel.ones(2, 3, {requires_grad = true})
    local y = w * 2
    y:unsqueeze_(1)
    assert.are.same({1, 2, 3}, shape_of(y))
    assert.are.equal("UnsqueezeBackward", y.grad_fn)
    local loss = (y * seq(1, 2, 3)):sum()
    loss:backward()
    assert.are.same({{0, 2, 4}, {6, 8, 10}}, w.grad:tolist())
    -- torch: "a leaf Variable that requires grad is being used in an in-place operation."
    expect_error(function() w:t_() end, "t_: a leaf tensor that requires grad cannot be changed in place")
    accel.no_grad(function() w:t_() end)
    assert.are.same({3, 2}, shape_of(w))
    expect_error(function() accel.zeros(2, 3, 4):t_() end, "t: expects a tensor with <= 2 dims, got shape [2, 3, 4]")
  end)
end)
