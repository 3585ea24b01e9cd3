-- dist_single_spec.lua: accel.dist in one process (the "single" backend):
-- every collective is the identity or a copy with the shapes the
-- multi-process backends give (world size 1), the same argument checks,
-- non-blocking handles, byte strings, counters and the timeout setting.
-- Multi-process behaviour is tested by dist_mpi_test.lua.
local accel = require("accel")
local dist = accel.dist

local function values(t) return t:reshape(-1):double():tolist() end

describe("accel.dist, one process", function()
  it("is the single backend, rank 0 of 1", function()
    assert.are.equal("single", dist.get_backend())
    assert.is_true(dist.is_initialized())
    assert.are.equal(0, dist.get_rank())
    assert.are.equal(1, dist.get_world_size())
    assert.are.equal(0, dist.get_local_rank())
    assert.are.equal(1, dist.get_local_world_size())
    assert.are.same({backend = "single", rank = 0, world_size = 1, local_rank = 0, local_world_size = 1}, dist.info())
    assert.are.equal("single", dist.init())
  end)

  it("all_reduce leaves every dtype's values in place for every op", function()
    local dts = {accel.float32, accel.float64, accel.bfloat16, accel.float16, accel.int64, accel.int32, accel.uint8}
    for _, dt in ipairs(dts) do
      for _, op in ipairs({"sum", "max", "min", "avg", "mean"}) do
        if (op ~= "avg" and op ~= "mean") or dt == accel.float32 or dt == accel.float64 or dt == accel.bfloat16
            or dt == accel.float16 then
          local t = accel.tensor({{1, 2, 3}, {4, 5, 250}}, {dtype = dt})
          assert.are.equal(t, dist.all_reduce(t, op))
          assert.are.same({1, 2, 3, 4, 5, 250}, values(t))
          assert.are.equal(dt, t.dtype)
        end
      end
    end
    local b = accel.tensor({true, false})
    dist.all_reduce(b, "sum")
    assert.are.same({1, 0}, values(b))
    local ref = accel.tensor({1.5, -2})
    dist.all_reduce(ref, {op = "max"})
    assert.are.same({1.5, -2}, values(ref))
  end)

  it("all_reduce refuses what it cannot do, naming the cause", function()
    assert.has_error(function() dist.all_reduce(accel.tensor({1, 2}), "avg") end,
      "all_reduce: avg needs a floating point tensor, got int64 (use sum)")
    assert.has_error(function() dist.all_reduce(accel.ones(2):to(accel.float8_e4m3), "sum") end)
    local ok, err = pcall(dist.all_reduce, accel.ones(2):to(accel.float8_e5m2))
    assert.is_false(ok)
    assert.truthy(err:find("float8_e5m2 tensors cannot be reduced", 1, true))
    ok, err = pcall(dist.all_reduce, accel.ones(2, 3):t(), "sum")
    assert.truthy(err:find("all_reduce: tensor of shape [3, 2] must be contiguous", 1, true))
    ok, err = pcall(dist.all_reduce, accel.ones(2), "prod")
    assert.truthy(err:find("unknown reduction 'prod'", 1, true))
    ok, err = pcall(dist.all_reduce, accel.ones(2), "sum", {async = true})
    assert.truthy(err:find("all_reduce: unknown option 'async'", 1, true))
    ok, err = pcall(dist.all_reduce, "x")
    assert.is_false(ok)
  end)

  it("argument errors point at the caller's line, also through a tail call", function()
    local expect_error = dofile("tests/lua/support.lua").expect_error
    expect_error(function() dist.all_reduce(accel.ones(1), "sum", {asyn = true}) end, "all_reduce: unknown option 'asyn'")
    expect_error(function() dist.barrier(5) end, "barrier: options table expected, got number")
    expect_error(function() dist.broadcast(accel.ones(1), 0.5) end, "broadcast: src must be a rank number")
    expect_error(function() dist.set_timeout(-1) end, "set_timeout: seconds must be >= 0")
    local line = debug.getinfo(1, "l").currentline + 1
    local _, err = pcall(function() return dist.all_gather(accel.ones(1), {x = 1}) end)
    assert.truthy(err:find("dist_single_spec.lua:" .. line .. ": all_gather: unknown option 'x'", 1, true), err)
  end)

  it("all_gather returns a new tensor of shape [world * d0, ...]", function()
    local x = accel.tensor({{1, 2}, {3, 4}}, {dtype = accel.float16})
    local g = dist.all_gather(x)
    assert.are_not.equal(x, g)
    assert.are.same({2, 2}, {g:size(1), g:size(2)})
    assert.are.equal(accel.float16, g.dtype)
    assert.are.same({1, 2, 3, 4}, values(g))
    x:fill_(9)
    assert.are.same({1, 2, 3, 4}, values(g)) -- a copy, not a view
    local s = dist.all_gather(accel.tensor(2.5))
    assert.are.same({1, 1}, {s:dim(), s:size(1)})
    assert.are.same({2.5}, values(s))
    -- a non-contiguous input is gathered in its logical order
    assert.are.same({1, 3, 2, 4}, values(dist.all_gather(accel.tensor({{1, 2}, {3, 4}}):t())))
  end)

  it("all_gather writes into out= and checks it", function()
    local out = accel.zeros(3, {dtype = accel.int64})
    assert.are.equal(out, dist.all_gather(accel.tensor({7, 8, 9}), {out = out}))
    assert.are.same({7, 8, 9}, values(out))
    local ok, err = pcall(dist.all_gather, accel.tensor({7, 8, 9}), {out = accel.zeros(4, {dtype = accel.int64})})
    assert.truthy(err:find("all_gather: output of shape [3] expected, got [4]", 1, true))
    ok, err = pcall(dist.all_gather, accel.tensor({7, 8, 9}), {out = accel.zeros(3)})
    assert.truthy(err:find("output dtype float32 differs from the input's int64", 1, true))
    local buf = accel.zeros(6)
    ok, err = pcall(dist.all_gather, buf:narrow(1, 1, 3), {out = buf:narrow(1, 4, 3)})
    assert.truthy(err:find("must not share memory with the input", 1, true))
    assert.is_false(ok)
  end)

  it("keeps results on the input's device (any device) and refuses an out= on another one", function()
    local here = accel.get_default_device().type
    local other = here == "sim" and "cpu" or "sim"
    local x = accel.tensor({1, 2, 3}, {dtype = accel.float32})
    assert.are.equal(here, dist.all_gather(x).device.type)
    -- the other device: staged through the host on sim, direct on the cpu
    local y = accel.tensor({1, 2, 3}, {device = other, dtype = accel.float32})
    assert.are.equal(other, dist.all_gather(y).device.type)
    assert.are.equal(other, dist.reduce_scatter(y).device.type)
    assert.are.equal(y, dist.all_reduce(y, "avg"))
    assert.are.same({1, 2, 3}, values(y))
    local h = dist.broadcast(y, 0, {async_op = true})
    assert.are.same({1, 2, 3}, values(h:wait()))
    local ok, err = pcall(dist.all_gather, x, {out = accel.zeros(3, {device = other})})
    assert.is_false(ok)
    assert.truthy(err:find(("dist_single_spec.lua:%%d+: all_gather: tensors are on different devices %%(%s and %s%%)")
      :format(tostring(accel.get_default_device()), other)), err) -- "cuda:0" names its index
  end)

  it("all_gather_v returns the rows and every rank's count", function()
    local v, counts = dist.all_gather_v(accel.arange(6):view(3, 2))
    assert.are.same({3}, counts)
    assert.are.same({3, 2}, {v:size(1), v:size(2)})
    assert.are.same({0, 1, 2, 3, 4, 5}, values(v))
    local e, c0 = dist.all_gather_v(accel.zeros(0, 4))
    assert.are.same({0}, c0)
    assert.are.same({0, 4}, {e:size(1), e:size(2)})
    assert.has_error(function() dist.all_gather_v(accel.tensor(1.0)) end,
      "all_gather_v: input must have at least one dim (got a 0-dim tensor; use all_gather)")
  end)

  it("reduce_scatter returns this rank's [d0 / world, ...] part", function()
    local r = dist.reduce_scatter(accel.tensor({{1, 2}, {3, 4}}), "sum")
    assert.are.same({1, 2, 3, 4}, values(r))
    local out = accel.zeros(2, 2)
    assert.are.equal(out, dist.reduce_scatter(accel.ones(2, 2) * 3, "avg", {out = out}))
    assert.are.same({3, 3, 3, 3}, values(out))
    assert.has_error(function() dist.reduce_scatter(accel.tensor(1.0)) end)
    assert.has_error(function() dist.reduce_scatter(accel.tensor({1, 2}), "avg") end,
      "reduce_scatter: avg needs a floating point tensor, got int64 (use sum)")
  end)

  it("broadcast from rank 0 keeps the tensor; other sources do not exist", function()
    local t = accel.tensor({1, 2, 3})
    assert.are.equal(t, dist.broadcast(t, 0))
    assert.are.equal(t, dist.broadcast(t))
    assert.are.equal(t, dist.broadcast(t, {src = 0}))
    assert.are.same({1, 2, 3}, values(t))
    assert.has_error(function() dist.broadcast(t, 1) end, "broadcast: source rank 1 does not exist (ranks 0..0)")
    assert.has_error(function() dist.broadcast(t, 0.5) end, "broadcast: src must be a rank number (0-based), got 0.5")
    assert.has_error(function() dist.broadcast(accel.ones(2, 2):t(), 0) end)
  end)

  it("barrier returns nothing", function()
    assert.are.equal(0, select("#", dist.barrier()))
  end)

  it("non-blocking forms return handles that wait for their results", function()
    local t = accel.tensor({1.0, 2.0})
    local h = dist.all_reduce(t, "sum", {async_op = true})
    assert.truthy(tostring(h):find("accel.dist.Work", 1, true))
    assert.is_true(h:test())
    assert.is_true(h:is_completed())
    assert.are.equal(t, h:wait())
    assert.are.equal(t, h:wait()) -- waiting again returns the same
    local g = dist.all_gather(accel.tensor({5, 6}), {async_op = true}):wait()
    assert.are.same({5, 6}, values(g))
    local v, counts = dist.all_gather_v(accel.ones(2, 3), {async_op = true}):wait()
    assert.are.same({2}, counts)
    assert.are.same({2, 3}, {v:size(1), v:size(2)})
    assert.are.same({4, 4}, values(dist.reduce_scatter(accel.tensor({4, 4}), {async_op = true}):wait()))
    local b = accel.tensor({3})
    assert.are.equal(b, dist.broadcast(b, 0, {async_op = true}):wait())
    assert.are.equal(0, select("#", dist.barrier({async_op = true}):wait()))
    do local _ = dist.all_reduce(accel.ones(3), "sum", {async_op = true}) end
    collectgarbage()
    dist.progress()
  end)

  it("gathers and broadcasts byte strings", function()
    assert.are.same({"a\0b"}, dist.all_gather_bytes("a\0b"))
    assert.are.same({""}, dist.all_gather_bytes(""))
    assert.are.equal("from root", dist.broadcast_bytes("from root", 0))
    assert.has_error(function() dist.all_gather_bytes(42) end, "all_gather_bytes: string expected, got number")
    assert.has_error(function() dist.broadcast_bytes("x", 2) end)
  end)

  it("counts calls and bytes per collective kind, blocking and not", function()
    dist.reset_counters()
    local calls, bytes = dist.counters()
    assert.are.equal(0, calls.total)
    assert.are.equal(0, bytes.total)
    dist.all_reduce(accel.ones(3))
    dist.all_reduce(accel.ones(5, {dtype = accel.float64}), "max", {async_op = true}):wait()
    dist.all_gather(accel.ones(2, {dtype = accel.int32}))
    dist.all_gather_v(accel.ones(4, {dtype = accel.bfloat16}))
    dist.reduce_scatter(accel.ones(2))
    dist.broadcast(accel.ones(1, {dtype = accel.uint8}), 0)
    dist.barrier()
    dist.barrier({async_op = true})
    dist.all_gather_bytes("abc")
    dist.broadcast_bytes("hello", 0)
    calls, bytes = dist.counters()
    assert.are.same({all_reduce = 2, reduce_scatter = 1, all_gather = 1, all_gather_v = 1, broadcast = 1, barrier = 2,
      all_gather_bytes = 1, broadcast_bytes = 1, total = 10}, calls)
    assert.are.same({all_reduce = 3 * 4 + 5 * 8, reduce_scatter = 8, all_gather = 8, all_gather_v = 8, broadcast = 1,
      barrier = 0, all_gather_bytes = 3, broadcast_bytes = 5, total = 85}, bytes)
    -- steps without collectives count nothing
    local x = accel.randn(8, 8)
    for _ = 1, 3 do x = accel.matmul(x, x):tanh() end
    assert.are.equal(10, (dist.counters()).total)
    dist.reset_counters()
    assert.are.equal(0, (dist.counters()).total)
  end)

  it("sets and reads the collective timeout", function()
    local before = dist.get_timeout()
    assert.are.equal("number", type(before))
    if not os.getenv("ACCEL_LUA_COLLECTIVE_TIMEOUT") then assert.are.equal(300, before) end
    dist.set_timeout(12.5)
    assert.are.equal(12.5, dist.get_timeout())
    dist.set_timeout(0) -- off
    assert.are.equal(0, dist.get_timeout())
    dist.set_timeout(before)
    assert.has_error(function() dist.set_timeout("soon") end, "set_timeout: seconds expected, got string")
    assert.has_error(function() dist.set_timeout(-1) end,
      "set_timeout: seconds must be >= 0 (0 turns the watchdog off), got -1")
    assert.has_error(function() dist.set_timeout(0 / 0) end)
    assert.are.equal(before, dist.get_timeout())
  end)
end)
