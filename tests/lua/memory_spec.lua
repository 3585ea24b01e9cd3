-- Memory behaviour of tensors and autograd graphs: a long training-like loop
-- without collectgarbage() stays flat, t:free() and <close> release at once.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")

local function rss_kb()
  for line in io.lines("/proc/self/status") do
    local v = line:match("^VmRSS:%s+(%d+)")
    if v then return tonumber(v) end
  end
  error("VmRSS not found in /proc/self/status")
end

local function live() return (accel.memory_stats()) end

local errmsg = support.errmsg

-- ASan keeps freed memory in a quarantine, so RSS says nothing under it.
local function sanitized()
  for line in io.lines("/proc/self/maps") do
    if line:find("libasan", 1, true) or line:find("libtsan", 1, true) then return true end
  end
  return false
end

describe("memory", function()
  local loop -- results of the 100000-iteration loop, checked by the next two tests

  it("a 100000-iteration autograd loop keeps live bytes flat (no collectgarbage)", function()
    collectgarbage("restart")
    local w = accel.randn(16, {requires_grad = true})
    local function step()
      local a = accel.randn(16, {requires_grad = true})
      local b = accel.randn(16)
      local loss = ((a + b) * w):tanh():sum()
      loss:backward()
      return a.grad
    end
    for _ = 1, 2000 do step() end
    local rss0, live0 = rss_kb(), live()
    local max_live = live0
    local t0 = accel.clock()
    for i = 1, 100000 do
      step()
      if i % 500 == 0 then
        local l = live()
        if l > max_live then max_live = l end
      end
    end
    local elapsed = accel.clock() - t0
    local rss1, live1 = rss_kb(), live()
    print(("\n  memory loop: %.2f us/iteration; RSS %d kB -> %d kB (%+d kB); live bytes %d -> %d (max %d); Lua heap %.0f kB")
      :format(elapsed / 100000 * 1e6, rss0, rss1, rss1 - rss0, live0, live1, max_live, collectgarbage("count")))
    loop = {rss0 = rss0, rss1 = rss1}
    -- every iteration makes ~10 tensors of 64 bytes; garbage waiting for the GC must stay small
    assert.is_true(max_live < 4 * 1024 * 1024, ("live bytes reached %d"):format(max_live))
    assert.is_true(live1 < 4 * 1024 * 1024, ("live bytes ended at %d"):format(live1))
  end)

  it("... and keeps RSS flat: growth < 20 MB", function()
    assert.is_not_nil(loop, "the loop test did not run")
    if sanitized() then
      pending("sanitizer build: RSS includes the allocator's quarantine")
      return
    end
    assert.is_true(loop.rss1 - loop.rss0 < 20 * 1024, ("RSS grew by %d kB"):format(loop.rss1 - loop.rss0))
  end)

  it("large temporaries in a loop are collected by the GC accounting", function()
    local before = live()
    local x = accel.randn(100000, {requires_grad = true}) -- 400 kB
    local max_live = 0
    for _ = 1, 400 do
      local y = (x * 2):exp():sum()
      y:backward()
      local l = live()
      if l > max_live then max_live = l end
    end
    -- 400 iterations push ~320 MB of tensors in total; what is alive at once stays small
    assert.is_true(max_live - before < 128 * 1024 * 1024, ("live bytes reached %d"):format(max_live - before))
  end)

  it("memory_stats returns live and cached bytes", function()
    local l, c = accel.memory_stats()
    assert.equal("number", math.type(l) and "number" or type(l))
    assert.is_true(l >= 0)
    assert.is_true(c >= 0)
  end)

  it("the peak of live bytes follows a tensor made and freed, and resets to what is live", function()
    collectgarbage()
    accel.reset_peak_memory_stats()
    local before, _, peak0 = accel.memory_stats()
    assert.equal(before, peak0)
    local t = accel.zeros(3000000)
    t:free()
    local now, _, peak = accel.memory_stats()
    assert.equal(before, now)
    assert.equal(before + 12000000, peak)
    accel.reset_peak_memory_stats()
    assert.equal(now, select(3, accel.memory_stats()))
  end)

  it("the host's memory functions refuse a device or any other argument (a GPU's are accel.cuda's)", function()
    for name, arg in pairs({memory_stats = "cuda:0", reset_peak_memory_stats = "x", empty_cache = 5}) do
      local msg = errmsg(accel[name], arg)
      assert.is_truthy(msg:find("accel." .. name .. "() takes no arguments", 1, true), msg)
      assert.is_truthy(msg:find("accel.cuda." .. name, 1, true), msg)
    end
  end)

  it("t:free() releases at once and later use errors with 'freed'", function()
    collectgarbage()
    collectgarbage()
    local before = live()
    local t = accel.zeros(1000000)
    assert.equal(before + 4000000, live())
    t:free()
    assert.equal(before, live())
    assert.matches("freed", errmsg(function() return t + 1 end))
    assert.matches("freed", errmsg(function() return t:sum() end))
    assert.matches("freed", errmsg(function() return t:size() end))
    assert.matches("freed", errmsg(function() return accel.cat({t, t}) end))
    -- freeing twice is harmless; the GC later is harmless too
    t:free()
    t = nil
    collectgarbage()
    assert.equal(before, live())
  end)

  it("t:free() on a tensor that requires grad also drops its graph", function()
    collectgarbage()
    collectgarbage()
    local before = live()
    local x = accel.randn(100000, {dtype = accel.float64, requires_grad = true})
    local y = x:exp()
    x:free()
    -- x's storage stays alive while y's graph still refers to it
    y:free()
    collectgarbage()
    collectgarbage()
    assert.equal(before, live())
  end)

  it("a view keeps the storage alive after the base is freed", function()
    collectgarbage()
    collectgarbage()
    local before = live()
    local t = accel.arange(0, 1000, {dtype = accel.float64})
    local v = t:narrow(1, 11, 5)
    t:free()
    assert.equal(before + 8000, live())
    assert.same({10, 11, 12, 13, 14}, v:tolist())
    v:free()
    assert.equal(before, live())
  end)

  it("<close> releases at scope end", function()
    collectgarbage()
    collectgarbage()
    local before = live()
    local escaped
    do
      local t <close> = accel.zeros(1000000)
      assert.equal(before + 4000000, live())
      escaped = t
    end
    assert.equal(before, live())
    assert.matches("freed", errmsg(function() return escaped:sum() end))
  end)

  it("<close> releases when the scope is left by an error", function()
    collectgarbage()
    collectgarbage()
    local before = live()
    local ok = pcall(function()
      local t <close> = accel.zeros(1000000)
      error("leave early")
    end)
    assert.is_false(ok)
    assert.equal(before, live())
  end)

  it("cross_entropy's backward writes the gradient over logits nothing else holds, same values", function()
    accel.set_seed(3)
    local N, C = 1000, 5000 -- logits: 20 MB
    local x, t = accel.randn(N, 64), accel.randint(0, C, {N})
    local W = (accel.randn(64, C) * 0.1):requires_grad_(true)
    -- logits kept by a Lua local: the gradient needs a buffer of its own
    local logits = x:matmul(W)
    local loss = accel.nn.functional.cross_entropy(logits, t)
    collectgarbage()
    accel.reset_peak_memory_stats()
    local base = live()
    loss:backward()
    local kept_extra = select(3, accel.memory_stats()) - base
    local g_kept = W.grad:clone()
    logits, loss, W.grad = nil, nil, nil
    -- logits held by the graph only: written over
    loss = accel.nn.functional.cross_entropy(x:matmul(W), t)
    collectgarbage()
    accel.reset_peak_memory_stats()
    base = live()
    loss:backward()
    local reused_extra = select(3, accel.memory_stats()) - base
    assert.is_true(W.grad:equal(g_kept))
    assert.is_true(kept_extra - reused_extra >= N * C * 4, ("extra bytes in backward: %d kept, %d reused"):format(kept_extra, reused_extra))
  end)

  it("zero_grad() frees the gradients at once after step() and clip_grad_norm_ (no Lua handles left)", function()
    local m = accel.nn.Linear(1000, 1000)
    local opt = accel.optim.AdamW(m:parameters(), {lr = 1e-3})
    local grad_bytes = (1000 * 1000 + 1000) * 4
    for _ = 1, 2 do
      m(accel.randn(8, 1000)):sum():backward()
      accel.nn.utils.clip_grad_norm_(m:parameters(), 0.5)
      opt:step()
      local before = live() -- a Lua handle made for a gradient above would keep it alive here
      opt:zero_grad()
      assert.equal(before - grad_bytes, live())
    end
  end)

  it("a step's activations are freed during its own backward, with no collectgarbage() in the loop", function()
    -- ~25 MB of tensors a step: below the 64 MiB rule, above 16x the Lua heap
    local m = accel.nn.Sequential(accel.nn.Linear(512, 512), accel.nn.GELU(), accel.nn.Linear(512, 512))
    local x = accel.randn(4096, 512)
    m(x):pow(2):mean():backward()
    collectgarbage()
    local base = live() -- x, parameters, gradients
    for _ = 1, 4 do
      m(x):pow(2):mean():backward()
      local extra = live() - base
      assert.is_true(extra < 1024 * 1024, ("%d bytes of the step still alive after backward"):format(extra))
    end
  end)
end)
