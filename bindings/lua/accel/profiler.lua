-- accel.profiler: Accelerator:profile(fn, opts) -- run fn with the core's
-- op profiler on (core/profile.c) and write what it recorded as a Chrome
-- trace (the Trace Event Format that chrome://tracing and ui.perfetto.dev
-- load): {"traceEvents": [{"name", "cat", "ph": "X", "ts", "dur", "pid",
-- "tid", "args"}], ...}, times in microseconds since the start of fn.
--
-- Recorded: every tensor op of the core (matmul, linear, add, softmax,
-- cross_entropy, ...; in-place ones end in "_", e.g. "add_") and every
-- autograd backward function ("<op>Backward", e.g. "linearBackward"), each
-- with its own start and end from the core's monotonic clock. Ops called
-- inside another op or a backward function are recorded too, nested in it
-- (as in PyTorch's trace). pid is the process index, tid the thread. Views,
-- tensor creation, fused optimizer steps and collectives are not forward
-- events (their backward functions, e.g. of views, are recorded).
--
-- opts (the names of Accelerate's ProfileKwargs; unknown keys are refused):
--   output_trace_dir  folder for profile_<process_index>.json (as Accelerate);
--                     nil: no file is written
--   record_shapes     add the inputs' shapes (args["Input Dims"]); default false
--   on_trace_ready    function(trace) called with the trace table
--   activities        {"cpu"} (the default) or {"cpu", "cuda"}: with "cuda" every
--                     op's end waits for its device's queued work, so the
--                     op's duration covers its device time (cuda, or the sim
--                     device), where otherwise it is only the launch; the
--                     device then runs one op at a time. PyTorch records the
--                     kernels as separate events instead; here they stay
--                     inside their op's event
-- ProfileKwargs' schedule_option, profile_memory, with_stack, with_flops and
-- with_modules are refused when set (not implemented), never ignored.
-- Returns what fn returns. An error in fn stops the profiler and is raised
-- unchanged (no trace is written).
local json = require("accel.json")
local raise = require("accel.util").raise

local M = {}
local unpack = table.unpack or unpack

local KNOWN = {output_trace_dir = "string", record_shapes = "boolean", on_trace_ready = "function", activities = "table"}
local REFUSED = {schedule_option = true, profile_memory = true, with_stack = true, with_flops = true, with_modules = true}

local function check_options(o)
  if o == nil then return {} end
  if type(o) ~= "table" then raise("profile: expected an options table, got %s", type(o)) end
  for k, v in pairs(o) do
    if REFUSED[k] then
      if v then raise("profile: %s is not supported (the profiler records op times only)", tostring(k)) end
    elseif not KNOWN[k] then
      raise("profile: unknown option %s (supported: output_trace_dir, record_shapes, on_trace_ready, activities)",
        tostring(k))
    elseif type(v) ~= KNOWN[k] then
      raise("profile: %s must be a %s, got %s", k, KNOWN[k], type(v))
    end
  end
  for _, a in ipairs(o.activities or {}) do
    if a ~= "cpu" and a ~= "cuda" then
      raise("profile: activity %s is not supported (\"cpu\" and \"cuda\")", tostring(a))
    end
  end
  return o
end

-- The trace table for the recorded events (sorted by start time).
local function trace_of(events, dropped, rank, with_shapes)
  table.sort(events, function(a, b)
    if a.ts ~= b.ts then return a.ts < b.ts end
    return a.dur > b.dur -- an enclosing event before the events inside it
  end)
  local out = json.array()
  for i, e in ipairs(events) do
    local args = {}
    if with_shapes then
      local dims = json.array()
      for k, s in ipairs(e.shapes) do dims[k] = json.array(s) end
      args["Input Dims"] = dims
    end
    out[i] = {name = e.name, cat = e.cat, ph = "X", ts = e.ts, dur = e.dur, pid = rank, tid = e.tid, args = args}
  end
  return {traceEvents = out, displayTimeUnit = "ms", otherData = {process_index = rank, dropped_events = dropped}}
end

local function pack(...) return {n = select("#", ...), ...} end

-- Turns the profiler on; returns finish(failed), which turns it off and,
-- unless failed, hands over the trace: the file under output_trace_dir
-- (then barrier(): every process waits for the others' files, as
-- Accelerate's wait_for_everyone) and on_trace_ready(trace).
local function start(opts, rank, barrier)
  local o = check_options(opts)
  local C = require("accel")._C
  local device_sync = false
  for _, a in ipairs(o.activities or {}) do device_sync = device_sync or a == "cuda" end
  C.profile_start(device_sync)
  return function(failed)
    C.profile_stop()
    local events, dropped = C.profile_events(o.record_shapes)
    if failed then return end
    local trace = trace_of(events, dropped, rank, o.record_shapes)
    if dropped > 0 then
      io.stderr:write(("profile: %d events were dropped (the buffer holds at most 2^21)\n"):format(dropped))
    end
    if o.output_trace_dir then
      C.mkdirs(o.output_trace_dir)
      local path = o.output_trace_dir:gsub("/+$", "") .. ("/profile_%d.json"):format(rank)
      local text, err = json.try_encode(trace)
      if not text then raise("profile: %s", err) end
      C.fs_write(path, text .. "\n")
      barrier()
    end
    if o.on_trace_ready then o.on_trace_ready(trace) end
  end
end

-- run(fn, opts, rank, barrier): fn() with the profiler on, then the trace
-- handed over; returns fn's results. Without fn (run(nil, opts) or
-- run(opts)): the profiler on until the returned handle closes (Lua 5.4's
-- `local _ <close> = accelerator:profile(opts)`, or h:close()).
function M.run(fn, opts, rank, barrier)
  if type(fn) == "table" and getmetatable(fn) == nil and opts == nil then fn, opts = nil, fn end
  if fn ~= nil and type(fn) ~= "function" then
    raise("profile: expected a function to run (or none, for a handle to close), got %s", type(fn))
  end
  local finish = start(opts, rank, barrier)
  if fn == nil then return require("accel.state").handle(function() finish(false) end) end
  local res = pack(pcall(fn))
  finish(not res[1])
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end

return M
