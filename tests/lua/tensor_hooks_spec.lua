-- Tensor hooks: t:register_hook(fn), t:retain_grad() and
-- t:register_post_accumulate_grad_hook(fn), as PyTorch's. The
-- expected gradients are closed forms of small polynomials (written next to
-- each check); the order and the number of hook calls are PyTorch's
-- documented behaviour (a leaf's hooks see its summed gradient once per
-- pass, retain_grad's copy is taken after the other hooks).
local accel = require("accel")
local support = dofile("tests/lua/support.lua")

local f64 = accel.float64

local function leaf(data) return accel.tensor(data, {dtype = f64, requires_grad = true}) end

local function same(expected, t)
  local got = t:tolist()
  assert.are.equal(#expected, #got)
  for i = 1, #expected do assert.are.equal(expected[i], got[i]) end
end

local function fails(pattern, f, ...) assert.matches(pattern, support.errmsg(f, ...)) end

describe("t:register_hook", function()
  it("sees a non-leaf's gradient and replaces it before it flows on", function()
    local x = leaf({1, 2, 3})
    local y = x * 2
    local seen
    y:register_hook(function(g)
      seen = g:clone()
      return g * 10
    end)
    ;(y * y):sum():backward()
    same({4, 8, 12}, seen)      -- d sum(y^2) / dy = 2y = 4x
    same({80, 160, 240}, x.grad) -- 2 * (10 * 2y) = 80x
  end)

  it("returning nil keeps the gradient", function()
    local x = leaf({1, 2})
    local y = x * 3
    local calls = 0
    y:register_hook(function() calls = calls + 1 end)
    y:sum():backward()
    assert.are.equal(1, calls)
    same({3, 3}, x.grad)
  end)

  it("a leaf used twice: its hooks run once, on the summed gradient, before .grad", function()
    local w = leaf({1, 1})
    local seen = {}
    w:register_hook(function(g)
      seen[#seen + 1] = g:clone()
      return g + 1
    end)
    ;((w * 3):sum() + (w * 5):sum()):backward()
    assert.are.equal(1, #seen)
    same({8, 8}, seen[1]) -- 3 + 5
    same({9, 9}, w.grad)  -- the hook's value
  end)

  it("hooks run in the order they were added, each on the previous one's result", function()
    local x = leaf({1, 2})
    local y = x * 1
    local order = {}
    y:register_hook(function(g)
      order[#order + 1] = "first"
      return g + 1
    end)
    y:register_hook(function(g)
      order[#order + 1] = "second"
      same({2, 2}, g)
      return g * 2
    end)
    y:sum():backward()
    assert.are.same({"first", "second"}, order)
    same({4, 4}, x.grad) -- (1 + 1) * 2
  end)

  it("handle:remove() stops a hook; the others stay", function()
    local x = leaf({1})
    local y = x * 1
    local a, b = 0, 0
    local ha = y:register_hook(function() a = a + 1 end)
    y:register_hook(function() b = b + 1 end)
    local s = y:sum()
    s:backward(nil, true)
    ha:remove()
    ha:remove() -- twice is once
    s:backward()
    assert.are.equal(1, a)
    assert.are.equal(2, b)
    assert.matches("RemovableHandle", tostring(ha))
  end)

  it("a hook added before an in-place op sees the gradient of the value before it", function()
    local x = leaf({1, 2, 3})
    local y = x * 2
    local before, after
    y:register_hook(function(g) before = g:clone() end)
    y:mul_(3)
    y:register_hook(function(g) after = g:clone() end)
    ;(y * y):sum():backward()
    same({12, 24, 36}, after)   -- 2 * (6x)
    same({36, 72, 108}, before) -- 3 * 12x
    same({72, 144, 216}, x.grad)
  end)

  it("bad hooks and bad tensors are errors naming the cause, and the pass stops", function()
    fails("cannot register a hook on a tensor that doesn't require gradient",
      function() accel.ones(2):register_hook(function() end) end)
    local function run(fn)
      local x = leaf({1, 2})
      local y = x * 1
      y:register_hook(fn)
      y:sum():backward()
      return x
    end
    fails("tensor hook has changed the size of value: the gradient has shape %[2%], the hook returned %[%]",
      run, function(g) return g:sum() end)
    fails("tensor hook has changed the type of value %(was float64 got float32%)",
      run, function(g) return g:float() end)
    fails("tensor hook must return a tensor or nil, got number", run, function() return 1 end)
    fails("tensor hook failed: .*boom", run, function() error("boom") end)
    local value = {}
    local ok, err = pcall(run, function() error(value) end)
    assert.is_false(ok)
    assert.are.equal(value, err) -- a non-string error value comes back as it is
    fails("register_hook", function() accel.ones(1, {requires_grad = true}):register_hook(1) end)
  end)

  it("a leaf's hooks run before the DDP reducer's gradient hook, which gets the hooked gradient", function()
    local w = leaf({1, 2})
    local r = accel.ddp.Reducer({w})
    w:register_hook(function(g) return g * 4 end)
    ;(w * w):sum():backward()
    assert.are.equal(1, r:stats().hook_calls)
    same({8, 16}, r:slice(1)) -- 4 * 2w
    same({8, 16}, w.grad)
    r:finalize()
    r:close()
  end)
end)

describe("t:retain_grad", function()
  it("a non-leaf keeps its gradient in .grad, after the hooks; a leaf is unchanged", function()
    local x = leaf({1, 2, 3})
    local y = x * 2
    y:retain_grad()
    y:retain_grad() -- twice is once
    y:register_hook(function(g) return g * 10 end)
    assert.is_true(y.retains_grad)
    assert.is_false(x.retains_grad)
    x:retain_grad()
    ;(y * y):sum():backward()
    same({40, 80, 120}, y.grad) -- 10 * 2y, the hook ran first
    same({80, 160, 240}, x.grad)
    local z = y * 1
    assert.is_nil(z.grad)
  end)

  it("accumulates over passes, as a leaf's .grad", function()
    local x = leaf({1, 2})
    local c = x * 3
    c:retain_grad()
    local s = c:sum()
    s:backward(nil, true)
    s:backward()
    same({2, 2}, c.grad)
  end)

  it("follows the tensor through an in-place op: the gradient of its new value", function()
    local x = leaf({1, 2})
    local y = x * 2
    y:retain_grad()
    y:add_(1)
    assert.is_true(y.retains_grad)
    ;(y * y):sum():backward()
    same({6, 10}, y.grad) -- 2 * (2x + 1)
  end)

  it("needs requires_grad; a tensor and its graph are freed with their hooks", function()
    fails("can't retain_grad on Tensor that has requires_grad=False", function() accel.ones(1):retain_grad() end)
    collectgarbage()
    collectgarbage()
    local live = accel.memory_stats()
    for _ = 1, 200 do
      local p = accel.randn({256}, {requires_grad = true})
      local q = p * 2
      q:retain_grad()
      q:register_hook(function(g) return g end)
      p:register_hook(function(g) return g end)
      q:sum():backward()
    end
    collectgarbage()
    collectgarbage()
    assert.are.equal(live, accel.memory_stats())
  end)
end)

describe("t:register_post_accumulate_grad_hook", function()
  it("runs on a leaf after the pass's gradient reached .grad, once, and may change .grad in place", function()
    local w = leaf({1, 2})
    local seen = {}
    local h = w:register_post_accumulate_grad_hook(function(t)
      same({1, 2}, t) -- the leaf itself
      seen[#seen + 1] = t.grad:clone()
      t.grad:mul_(0)
    end)
    w:register_hook(function(g) return g * 2 end)
    ;((w * 3):sum() + (w * w):sum()):backward()
    assert.are.equal(1, #seen)
    same({10, 14}, seen[1]) -- 2 * (3 + 2w)
    same({0, 0}, w.grad)
    h:remove()
    ;(w * 3):sum():backward()
    assert.are.equal(1, #seen)
    same({6, 6}, w.grad)
  end)

  it("leaves only; an error inside it stops the pass", function()
    local w = leaf({1})
    fails("post accumulate grad hooks cannot be registered on non%-leaf tensors",
      function() (w * 1):register_post_accumulate_grad_hook(function() end) end)
    w:register_post_accumulate_grad_hook(function() error("late") end)
    fails("post accumulate grad hook failed: .*late", function() (w * 2):sum():backward() end)
  end)
end)
