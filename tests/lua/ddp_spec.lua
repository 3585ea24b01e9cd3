-- accel.ddp on one process: the bucket layout, what a synchronising step
-- does with the buckets (the "single" communicator makes the average the
-- identity, so results are exact), sync off, missing gradients, options and
-- errors. The multi-process behaviour is tests/lua/ddp_test.lua.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["sync off: nothing copied, nothing communicated; the next sync step carries the accumulated gradient"] = support.NO_FLOAT_SUBTYPE,
})
local nn, dist = accel.nn, accel.dist
local errmsg = support.errmsg

local function params(n, sizes, dtype)
  local out = {}
  for i = 1, n do out[i] = accel.randn(sizes[i], {dtype = dtype}):requires_grad_(true) end
  return out
end

describe("bucket layout", function()
  it("reverse registration order, split at bucket_cap_mb, explicit offsets", function()
    local ps = params(4, {10, 20, 30, 40})
    local cap = 60 * 4 / (1024 * 1024) -- 60 float32
    local r = accel.ddp.Reducer(ps, {bucket_cap_mb = cap})
    local b = r:buckets()
    assert.equal(2, #b)
    assert.same({4}, b[1].params) -- 40 + 30 would pass 60 elements
    assert.same({3, 2, 1}, b[2].params) -- 30 + 20 + 10 = 60 fits exactly
    assert.same({0, 30, 50}, b[2].offsets)
    assert.equal(60, b[2].numel)
    assert.equal(accel.float32, b[1].dtype)
    r:close()
  end)

  it("a parameter larger than the cap gets a bucket of its own; the default cap holds a small model", function()
    local ps = params(3, {5, 100, 5})
    local r = accel.ddp.Reducer(ps, {bucket_cap_mb = 50 * 4 / (1024 * 1024)})
    local b = r:buckets()
    assert.same({{3}, {2}, {1}}, {b[1].params, b[2].params, b[3].params})
    r:close()
    local m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    local r2 = accel.ddp.Reducer(m)
    assert.equal(1, #r2:buckets())
    assert.same({4, 3, 2, 1}, r2:buckets()[1].params)
    r2:close()
  end)

  it("the first bucket (the last parameters) holds at most 1 MiB, as PyTorch's DDP; the others use the cap", function()
    -- 5 parameters of 0.4 MiB (float32): first bucket 2 of them (0.8 MiB),
    -- then the 25 MiB default takes the other 3
    local ps = params(5, {104858, 104858, 104858, 104858, 104858})
    local r = accel.ddp.Reducer(ps)
    local b = r:buckets()
    assert.equal(2, #b)
    assert.same({5, 4}, b[1].params)
    assert.same({3, 2, 1}, b[2].params)
    r:close()
    -- a cap below 1 MiB applies to the first bucket as well
    local r2 = accel.ddp.Reducer(ps, {bucket_cap_mb = 0.5})
    assert.equal(5, #r2:buckets())
    r2:close()
  end)

  it("one dtype per bucket; align pads every buffer to a multiple (for reduce_scatter)", function()
    local ps = {accel.randn(3):requires_grad_(true), accel.randn(5, {dtype = accel.float64}):requires_grad_(true),
      accel.randn(4):requires_grad_(true)}
    local r = accel.ddp.Reducer(ps, {align = 4})
    local b = r:buckets()
    assert.equal(2, #b)
    assert.equal(accel.float32, b[1].dtype)
    assert.same({3, 1}, b[1].params)
    assert.same({0, 4}, b[1].offsets)
    assert.equal(7, b[1].numel)
    assert.equal(8, b[1].padded)
    assert.equal(accel.float64, b[2].dtype)
    assert.equal(8, b[2].padded)
    assert.equal(1, r:bucket(2):dim())
    assert.equal(8, r:bucket(2):size(1))
    assert.equal(0, r:bucket(1):narrow(1, 8, 1):item()) -- the padding stays zero
    r:close()
  end)

  it("each slice is a view of its bucket shaped like the parameter", function()
    local w = accel.randn(2, 3):requires_grad_(true)
    local r = accel.ddp.Reducer({w})
    assert.same({2, 3}, {r:slice(1):size(1), r:slice(1):size(2)})
    r:slice(1):fill_(7)
    assert.equal(42, r:bucket(1):sum():item())
    r:close()
  end)
end)

describe("a synchronising step on one process", function()
  it("copies complete gradients in, the average back, and communicates one all_reduce per bucket", function()
    accel.set_seed(1)
    local m = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    local r = accel.ddp.Reducer(m, {bucket_cap_mb = 20 * 4 / (1024 * 1024)})
    local nb = #r:buckets()
    local x = accel.randn(5, 4)
    dist.reset_counters()
    m(x):pow(2):sum():backward()
    assert.is_true(r:active())
    local want = {}
    for i, p in ipairs(m:parameters()) do want[i] = p.grad:clone() end
    r:finalize()
    assert.is_false(r:active())
    for i, p in ipairs(m:parameters()) do assert.is_true(p.grad:equal(want[i])) end
    local calls = dist.counters()
    assert.equal(nb, calls.all_reduce)
    assert.equal(nb, calls.total)
    local st = r:stats()
    assert.equal(nb, st.early_launches)
    assert.equal(0, st.late_launches)
    assert.equal(4, st.hook_calls)
    r:finalize() -- nothing in progress: a no-op
    assert.equal(nb, dist.counters().total)
    r:close()
  end)

  it("sync off: nothing copied, nothing communicated; the next sync step carries the accumulated gradient", function()
    local w = accel.tensor({1.0, 2.0}):requires_grad_(true)
    local r = accel.ddp.Reducer({w})
    dist.reset_counters()
    r:set_sync(false)
    assert.is_false(r:sync())
    ;(w * 3):sum():backward()
    assert.is_false(r:active())
    r:finalize()
    assert.equal(0, dist.counters().total)
    r:set_sync(true)
    ;(w * 2):sum():backward()
    assert.same({5, 5}, r:slice(1):tolist())
    r:finalize()
    assert.same({5, 5}, w.grad:tolist())
    assert.equal(1, dist.counters().total)
    r:close()
  end)

  it("a parameter without a gradient: zeros by default, nil with find_unused_parameters", function()
    for _, find in ipairs({false, true}) do
      local a, b = accel.ones(2):requires_grad_(true), accel.ones(3):requires_grad_(true)
      local r = accel.ddp.Reducer({a, b}, {find_unused_parameters = find})
      dist.reset_counters()
      a:sum():backward()
      r:finalize()
      assert.equal(1, r:stats().missing)
      if find then
        assert.is_nil(b.grad)
        assert.equal(2, dist.counters().all_reduce) -- the bucket, then the "used" flags
      else
        assert.same({0, 0, 0}, b.grad:tolist())
      end
      r:close()
    end
  end)

  it("close removes the hooks, so another reducer can take the parameters", function()
    local w = accel.ones(2):requires_grad_(true)
    local r = accel.ddp.Reducer({w})
    assert.matches("already has a reducer", errmsg(accel.ddp.Reducer, {w}))
    r:close()
    assert.matches("closed", errmsg(function() r:finalize() end))
    local r2 = accel.ddp.Reducer({w})
    w:sum():backward()
    assert.is_true(r2:active())
    r2:finalize()
    r2:close()
    assert.matches("Reducer%(closed%)", tostring(r2))
  end)
end)

describe("options and errors", function()
  it("Reducer checks its arguments", function()
    local w = accel.ones(2):requires_grad_(true)
    assert.matches("unknown option", errmsg(accel.ddp.Reducer, {w}, {bucket_size = 3}))
    assert.matches("bucket_cap_mb must be a positive number", errmsg(accel.ddp.Reducer, {w}, {bucket_cap_mb = 0}))
    assert.matches("align must be a positive integer", errmsg(accel.ddp.Reducer, {w}, {align = 1.5}))
    assert.matches("no parameters that require grad", errmsg(accel.ddp.Reducer, {accel.ones(2)}))
    assert.matches("parameter 1 must be a tensor", errmsg(accel.ddp.Reducer, {"w"}))
    assert.matches("not a leaf", errmsg(accel._C.ddp_reducer, {w * 2}))
  end)

  it("DistributedDataParallelKwargs: Accelerate's keys, checked", function()
    local kw = accel.DistributedDataParallelKwargs{bucket_cap_mb = 10, find_unused_parameters = true, static_graph = true}
    assert.equal(10, kw.bucket_cap_mb)
    assert.is_true(kw.find_unused_parameters)
    assert.equal(25, accel.DistributedDataParallelKwargs().bucket_cap_mb)
    assert.matches("unknown option bucket_mb", errmsg(accel.DistributedDataParallelKwargs, {bucket_mb = 1}))
    assert.matches("bucket_cap_mb must be a positive number", errmsg(accel.DistributedDataParallelKwargs, {bucket_cap_mb = -1}))
    assert.matches("comm_hook", errmsg(accel.DistributedDataParallelKwargs, {comm_hook = function() end}))
    local acc = accel.Accelerator{kwargs_handlers = {kw}}
    assert.equal(10, acc.ddp_kwargs.bucket_cap_mb)
    assert.matches("kwargs_handlers%[1%]", errmsg(accel.Accelerator, {kwargs_handlers = {{bucket_cap_mb = 1}}}))
  end)

  it("on one process the Accelerator builds no reducer and communicates nothing in backward", function()
    local acc = accel.Accelerator()
    local m = acc:prepare(nn.Linear(3, 2))
    assert.equal(0, #acc._reducers)
    dist.reset_counters()
    acc:backward(m(accel.ones(4, 3)):sum())
    assert.equal(0, dist.counters().total)
  end)
end)
