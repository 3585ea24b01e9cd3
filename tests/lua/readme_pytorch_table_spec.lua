-- readme_pytorch_table_spec: every row of README.md's "Coming from PyTorch +
-- Accelerate" table holds. Expected values are PyTorch's documented results
-- written out by hand (sum over a dim, argmax positions, ...), not produced
-- by the code under test.
local accel = require("accel")
local nn, optim, data = accel.nn, accel.optim, accel.data

local function readme_table()
  local f = assert(io.open("README.md", "rb"))
  local text = f:read("a")
  f:close()
  local start = assert(text:find("## Coming from PyTorch + Accelerate", 1, true), "README has no PyTorch table")
  return text:sub(start, (text:find("\n## ", start + 5, true) or #text))
end

local function values(t)
  local out = {}
  for i = 1, t:size(1) do out[i] = t[i]:item() end
  return out
end

describe("README's PyTorch + Accelerate table", function()
  local tbl = readme_table()
  local function row(text) assert.truthy(tbl:find(text, 1, true), "README table lost: " .. text) end

  it("methods take ':'; a '.' call raises at the caller's line", function()
    row("a `.` call raises \"call it as obj:zero_grad(...)\" at your line")
    local opt = optim.SGD(nn.Linear(2, 2):parameters(), {lr = 0.1})
    local ok, err = pcall(function() opt.zero_grad() end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("call it as obj:zero_grad(...)", 1, true), err)
    assert.truthy(tostring(err):find("readme_pytorch_table_spec.lua:%d+"), err)
  end)

  it("keyword arguments go in one trailing table", function()
    row("`accel.zeros(2, 3, {dtype = accel.float64})`")
    assert.are.equal(accel.float64, accel.zeros(2, 3, {dtype = accel.float64}).dtype)
  end)

  it("dimensions and positions are 1-based, -1 the last", function()
    row("`t:sum(2)`, `t:size(1)`, `t[1]`, `t:transpose(1, 2)`")
    local t = accel.tensor{{1, 2, 3}, {4, 5, 6}}
    assert.are.same({6, 15}, values(t:sum(2)))          -- torch: t.sum(dim=1)
    assert.are.same({6, 15}, values(t:sum(-1)))
    assert.are.equal(2, t:size(1))                       -- torch: t.size(0)
    assert.are.same({1, 2, 3}, values(t[1]))             -- torch: t[0]
    assert.are.same({1, 4}, values(t:transpose(1, 2)[1])) -- torch: t.transpose(0, 1)[0]
  end)

  it("class ids and argmax results are 0-based values", function()
    row("**0-based** values")
    assert.are.same({1, 0}, values(accel.tensor{{0.1, 0.9, 0.0}, {0.7, 0.2, 0.1}}:argmax(2)))
    local ids = accel.randint(0, 3, {64})
    assert.is_true(ids:min():item() >= 0 and ids:max():item() <= 2)
    -- cross_entropy reads the targets as 0-based: target 1 picks the second logit
    local loss = nn.functional.cross_entropy(accel.tensor{{0.0, 100.0, 0.0}}, accel.tensor{1})
    assert.is_true(loss:item() < 1e-6)
  end)

  it("for xb, yb in loader do is loader:iter()", function()
    row("`for xb, yb in loader do` (or `loader:iter()`)")
    local x = accel.arange(10):float():reshape(10, 1)
    local loader = data.DataLoader(data.TensorDataset(x, accel.arange(10)), {batch_size = 4})
    local direct, iter = {}, {}
    for xb, yb in loader do direct[#direct + 1] = {xb:size(1), yb[1]:item()} end
    for xb, yb in loader:iter() do iter[#iter + 1] = {xb:size(1), yb[1]:item()} end
    assert.are.same({{4, 0}, {4, 4}, {2, 8}}, direct)
    assert.are.same(direct, iter)
    assert.are.equal(3, #loader)
  end)

  it("tuples become multiple return values", function()
    row("`local values, idx = t:max(2)`")
    row("`local preds, labels = accelerator:gather_for_metrics(p, l)`")
    local values_, idx = accel.tensor{{1, 5, 2}}:max(2)
    assert.are.same({5}, values(values_))
    assert.are.same({1}, values(idx))
    local a = accel.Accelerator{}
    local p, l = a:gather_for_metrics(accel.tensor{1, 2}, accel.tensor{3, 4})
    assert.are.same({1, 2}, values(p))
    assert.are.same({3, 4}, values(l))
  end)

  it("with-blocks become a function or a <close> handle", function()
    row("`local _ <close> = accelerator:accumulate(model)`")
    row("`local g <close> = accel.no_grad()`")
    local a = accel.Accelerator{gradient_accumulation_steps = 2}
    local model = a:prepare(nn.Linear(2, 1))
    local syncs = {}
    for _ = 1, 4 do
      local _ <close> = a:accumulate(model)
      syncs[#syncs + 1] = a.sync_gradients
    end
    assert.are.same({false, true, false, true}, syncs)
    local w = accel.ones(2, {requires_grad = true})
    do
      local g <close> = accel.no_grad()
      assert.is_false((w * 2).requires_grad)
    end
    assert.is_true((w * 2).requires_grad)
    accel.no_grad(function() assert.is_false((w * 2).requires_grad) end)
    do
      local ac <close> = a:autocast()
    end
  end)

  it("decorators become methods that take and return a function", function()
    row("`local f = accelerator:on_main_process(function() ... end)`")
    local f = accel.Accelerator{}:on_main_process(function(v) return v + 1 end)
    assert.are.equal("function", type(f))
    assert.are.equal(3, f(2))
  end)

  it("accel.save writes tensors as safetensors, accelerator:save also plain values as JSON", function()
    row("`accel.save(sd, \"m.safetensors\")`")
    local path = os.tmpname()
    accel.save({w = accel.tensor{1.5, 2.5}}, path)
    local back = accel.load(path)
    assert.are.same({1.5, 2.5}, values(back.w))
    local a = accel.Accelerator{}
    a:save({step = 3, name = "x"}, path)
    local f = assert(io.open(path, "rb"))
    local text = f:read("a")
    f:close()
    assert.truthy(text:find('"step": 3', 1, true), text)
    assert.are.same({step = 3, name = "x"}, a:load(path))
    os.remove(path)
  end)

  it("== compares identity; eq and equal compare values", function()
    row("`t:eq(u)` (`==` compares identity in Lua)")
    local t, u = accel.tensor{1, 2}, accel.tensor{1, 2}
    assert.is_false(t == u)
    assert.is_true(t == t)
    assert.are.same({true, true}, values(t:eq(u)))
    assert.is_true(t:equal(u))
  end)
end)
