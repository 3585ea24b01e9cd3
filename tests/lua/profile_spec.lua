-- profile_spec.lua: Accelerator:profile(fn, opts) writes a Chrome trace
-- (Trace Event Format) of the core's ops and backward functions with their
-- own times: the forward and backward ops of a small training step are in
-- it by name, timestamps are ordered, durations non-negative, nested events
-- inside their parents, and the top-level events fit in the wall time
-- measured around the call; nothing is recorded while the profiler is off;
-- options follow Accelerate's ProfileKwargs names, the rest is refused;
-- the "cuda" activity waits for the device at each op's end (test_sim.c
-- checks that ordering; here the events of a sim run).
local accel = require("accel")
local json = require("accel.json")
local support = dofile("tests/lua/support.lua")
local expect_error, tmpdir, read = support.expect_error, support.tmpdir, support.read_file
local nn = accel.nn

local function names_of(trace)
  local set = {}
  for _, e in ipairs(trace.traceEvents) do set[e.name] = (set[e.name] or 0) + 1 end
  return set
end

-- A two-layer MLP step: forward, loss, backward.
local function step()
  accel.set_seed(3)
  local model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
  local x, y = accel.randn(8, 6), accel.tensor({0, 1, 2, 0, 1, 2, 0, 1})
  return function()
    local loss = nn.functional.cross_entropy(model(x), y)
    loss:backward()
    return loss:item(), "second result"
  end
end

describe("Accelerator:profile", function()
  local acc = accel.Accelerator()

  it("a backward node already named ...Backward is not named ...BackwardBackward", function()
    local dir = tmpdir()
    acc:profile(function()
      local x = accel.randn(3, {requires_grad = true})
      x:double():sum():backward()
    end, {output_trace_dir = dir})
    local names = names_of(json.decode(read(dir .. "/profile_0.json")))
    for name in pairs(names) do
      assert.is_falsy(name:find("BackwardBackward", 1, true), "event " .. name)
    end
  end)

  it("writes profile_<rank>.json with the forward and backward ops and their times", function()
    local dir = tmpdir()
    local run = step()
    local t0 = accel.clock()
    local loss, second = acc:profile(run, {output_trace_dir = dir .. "/traces", record_shapes = true})
    local wall_us = (accel.clock() - t0) * 1e6
    assert.is_true(loss > 0)
    assert.are.equal("second result", second)
    local trace = json.decode(read(dir .. "/traces/profile_0.json"))
    local names = names_of(trace)
    for _, want in ipairs({"linear", "tanh", "cross_entropy", "linearBackward", "tanhBackward",
      "cross_entropyBackward", "matmul"}) do
      assert.is_truthy(names[want], "no " .. want .. " event; got " .. json.encode(names))
    end
    assert.are.equal(2, names.linear)
    assert.are.equal(2, names.linearBackward)
    local ev = trace.traceEvents
    local prev, top, top_sum = -1, {}, 0
    for _, e in ipairs(ev) do
      assert.are.equal("X", e.ph)
      assert.are.equal(0, e.pid)
      assert.is_true(e.ts >= prev, "timestamps out of order")
      assert.is_true(e.dur >= 0)
      assert.is_true(e.ts >= 0 and e.ts + e.dur <= wall_us, "event outside the profiled call")
      prev = e.ts
      -- an event either starts after the last top-level one ends, or lies inside it
      local last = top[#top]
      if last and e.ts < last.ts + last.dur then
        assert.is_true(e.ts + e.dur <= last.ts + last.dur + 1e-3, e.name .. " overlaps " .. last.name .. " without nesting")
      else
        top[#top + 1] = e
        top_sum = top_sum + e.dur
      end
    end
    assert.is_true(top_sum <= wall_us, ("top-level events sum to %g us, the call took %g us"):format(top_sum, wall_us))
    -- linear's input shapes: x [8, 6] and the weight [5, 6]
    local first_linear
    for _, e in ipairs(ev) do
      if e.name == "linear" then first_linear = first_linear or e end
    end
    assert.are.same({{8, 6}, {5, 6}}, first_linear.args["Input Dims"])
    -- backward runs after the forward
    local last_forward, first_backward = 0, math.huge
    for _, e in ipairs(ev) do
      if e.cat == "backward" then first_backward = math.min(first_backward, e.ts) end
      if e.name == "cross_entropy" then last_forward = e.ts end
    end
    assert.is_true(first_backward > last_forward)
    support.remove_tree(dir)
  end)

  it("records nothing while it is off", function()
    local run = step()
    run() -- ops before
    local trace
    acc:profile(function() end, {on_trace_ready = function(t) trace = t end})
    assert.are.equal(0, #trace.traceEvents)
    assert.is_false(accel._C.profile_active())
    run() -- ops after
    acc:profile(function() accel.ones(2):add(1) end, {on_trace_ready = function(t) trace = t end})
    assert.are.same({add = 1}, names_of(trace))
    assert.are.same({}, trace.traceEvents[1].args) -- no shapes unless record_shapes
  end)

  -- DESIGN: a context manager called without its body returns a handle (Accelerate: `with accelerator.profile()
  -- as prof:`)
  it("without a function, profiles until the returned handle closes", function()
    local trace
    local h = acc:profile({on_trace_ready = function(t) trace = t end})
    assert.is_true(accel._C.profile_active())
    accel.ones(2):neg()
    h:close()
    assert.is_false(accel._C.profile_active())
    assert.are.same({neg = 1}, names_of(trace))
    h:close() -- a second close does nothing
    local h2 = acc:profile(nil, {on_trace_ready = function(t) trace = t end})
    accel.ones(2):exp()
    h2:close()
    assert.are.same({exp = 1}, names_of(trace))
    expect_error(function() acc:profile(5) end, "profile: expected a function to run (or none, for a handle to close)")
  end)

  -- torch.profiler's prof.key_averages().table(sort_by=..., row_limit=...), the Profiler guide's call: events
  -- summed by name, self time = duration less the events directly inside (same thread); the table's layout is
  -- torch 2.15's EventList.table (right-aligned 12-wide columns, 2 spaces, _format_time, "Self CPU time total")
  it("key_averages() sums the events by name, with self times, and prints torch's table", function()
    local ev = {{name = "A", ts = 0, dur = 100, tid = 1}, {name = "B", ts = 10, dur = 30, tid = 1},
      {name = "C", ts = 15, dur = 10, tid = 1}, {name = "B", ts = 50, dur = 20, tid = 1},
      {name = "E", ts = 0, dur = 30, tid = 2}}
    local avg = require("accel.profiler").key_averages({traceEvents = ev})
    local by = {}
    for _, r in ipairs(avg) do by[r.key] = {r.count, r.cpu_time_total, r.self_cpu_time_total, r.cpu_time} end
    assert.are.same({A = {1, 100, 50, 100}, B = {2, 50, 40, 25}, C = {1, 10, 10, 10}, E = {1, 30, 30, 30}}, by)
    local text = avg:table({sort_by = "self_cpu_time_total", row_limit = 2})
    local sep = "-----  ------------  ------------  ------------  ------------  ------------  ------------  "
    assert.are.equal(table.concat({sep,
      " Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls  ", sep,
      "    A        38.46%      50.000us        76.92%     100.000us     100.000us             1  ",
      "    B        30.77%      40.000us        38.46%      50.000us      25.000us             2  ", sep,
      "Self CPU time total: 130.000us"}, "\n") .. "\n", text)
    expect_error(function() local _ = avg:table({sort_by = "flops"}) end, "sort_by must be cpu_time_total")
    -- on a profile handle, once it has closed
    local h = acc:profile()
    accel.ones(2):neg()
    expect_error(function() local _ = h:key_averages() end, "key_averages() is available once the profiler has stopped")
    h:close()
    local a = h:key_averages()
    assert.are.same({"neg", 1}, {a[1].key, a[1].count})
  end)

  it("in-place ops end in _, and nothing is written without output_trace_dir", function()
    local trace
    local dir = tmpdir()
    acc:profile(function() accel.ones(3):mul_(2) end, {on_trace_ready = function(t) trace = t end})
    assert.are.same({mul_ = 1}, names_of(trace))
    assert.are.same({}, accel._C.fs_listdir(dir))
    support.remove_tree(dir)
  end)

  it("an error in fn is raised unchanged and stops the profiler", function()
    local dir = tmpdir()
    local line = debug.getinfo(1, "l").currentline + 1
    local ok, err = pcall(acc.profile, acc, function() error("fn fails on purpose") end, {output_trace_dir = dir})
    assert.is_false(ok)
    assert.are.equal("tests/lua/profile_spec.lua:" .. line .. ": fn fails on purpose", err)
    assert.is_false(accel._C.profile_active())
    assert.are.same({}, accel._C.fs_listdir(dir))
    local trace
    acc:profile(function() accel.ones(2):neg() end, {on_trace_ready = function(t) trace = t end})
    assert.are.same({neg = 1}, names_of(trace)) -- the failed run left nothing behind
    support.remove_tree(dir)
  end)

  it("activities {\"cpu\", \"cuda\"} times each op up to the end of its device work (here the sim device)", function()
    local trace
    local total = acc:profile(function()
      local a = accel.ones(64, 64, {device = "sim"})
      return accel.matmul(a, a):sum():item()
    end, {activities = {"cpu", "cuda"}, on_trace_ready = function(t) trace = t end})
    assert.are.equal(64 * 64 * 64, total)
    local names = names_of(trace)
    assert.are.equal(1, names.matmul)
    assert.are.equal(1, names.sum)
    assert.is_false(accel._C.profile_active())
  end)

  it("refuses what it does not do", function()
    local f = function() end
    expect_error(function() acc:profile(f, {output_dir = "x"}) end, "profile: unknown option output_dir")
    expect_error(function() acc:profile(f, {with_stack = true}) end, "profile: with_stack is not supported")
    expect_error(function() acc:profile(f, {profile_memory = true}) end, "profile: profile_memory is not supported")
    expect_error(function() acc:profile(f, {activities = {"cpu", "xpu"}}) end, "activity xpu is not supported")
    expect_error(function() acc:profile(f, {record_shapes = "yes"}) end, "record_shapes must be a boolean")
    expect_error(function() acc:profile("f") end, "profile: expected a function to run (or none, for a handle to close), got string")
    expect_error(function() acc:profile(function() acc:profile(f) end) end, "profile calls do not nest")
    assert.is_false(accel._C.profile_active())
  end)
end)
