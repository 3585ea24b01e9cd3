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

-- ---- key_averages: the events summed by name, as torch.profiler's ----

-- Each event's self time: its duration less that of the events directly
-- inside it (same thread; events sorted by start, enclosing ones first).
local function self_times(events)
  local self, open = {}, {} -- open[tid]: the stack of events enclosing the current one
  for i, e in ipairs(events) do
    self[i] = e.dur
    local stack = open[e.tid] or {}
    open[e.tid] = stack
    while #stack > 0 and events[stack[#stack]].ts + events[stack[#stack]].dur <= e.ts do stack[#stack] = nil end
    if #stack > 0 then self[stack[#stack]] = self[stack[#stack]] - e.dur end
    stack[#stack + 1] = i
  end
  return self
end

local function format_time(us)
  if us >= 1e6 then return ("%.3fs"):format(us / 1e6) end
  if us >= 1e3 then return ("%.3fms"):format(us / 1e3) end
  return ("%.3fus"):format(us)
end

local function format_share(us, total)
  if total == 0 then return "NaN" end
  return ("%.2f%%"):format(us * 100 / total)
end

local Averages = {}
Averages.__index = Averages
local SORT_KEYS = {cpu_time_total = true, self_cpu_time_total = true, cpu_time = true, count = true}

-- averages:table([{sort_by =, row_limit = 100}]): torch's EventList.table
-- layout (Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg,
-- # of Calls, then "Self CPU time total"); sort_by one of cpu_time_total,
-- self_cpu_time_total, cpu_time, count (descending), else first-seen order.
function Averages:table(o)
  o = o or {}
  for k in pairs(o) do
    if k ~= "sort_by" and k ~= "row_limit" then raise("key_averages():table: unknown option %s (sort_by, row_limit)", tostring(k)) end
  end
  local rows = {}
  for i, r in ipairs(self) do rows[i] = r end
  if o.sort_by ~= nil then
    if not SORT_KEYS[o.sort_by] then
      raise("key_averages():table: sort_by must be cpu_time_total, self_cpu_time_total, cpu_time or count, got %s",
        tostring(o.sort_by))
    end
    table.sort(rows, function(a, b) return a[o.sort_by] > b[o.sort_by] end)
  end
  if #rows == 0 then return "" end
  local width, total = 0, 0
  for _, r in ipairs(rows) do
    width = math.max(width, #r.key + 4)
    total = total + r.self_cpu_time_total
  end
  width = math.min(width, 55)
  local widths = {width, 12, 12, 12, 12, 12, 12}
  local function line(cells)
    local parts = {}
    for i, c in ipairs(cells) do parts[i] = (" "):rep(widths[i] - #c) .. c .. "  " end
    return table.concat(parts)
  end
  local sep = {}
  for i, w in ipairs(widths) do sep[i] = ("-"):rep(w) .. "  " end
  sep = table.concat(sep)
  local out = {sep, line({"Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"}), sep}
  for i, r in ipairs(rows) do
    if i > (o.row_limit or 100) then break end
    local name = #r.key >= width - 3 and r.key:sub(1, width - 3) .. "..." or r.key
    out[#out + 1] = line({name, format_share(r.self_cpu_time_total, total), format_time(r.self_cpu_time_total),
      format_share(r.cpu_time_total, total), format_time(r.cpu_time_total), format_time(r.cpu_time), tostring(r.count)})
  end
  out[#out + 1] = sep
  out[#out + 1] = "Self CPU time total: " .. format_time(total)
  return table.concat(out, "\n") .. "\n"
end

-- The trace's events summed by name, in first-seen order: a list of {key,
-- count, cpu_time_total, self_cpu_time_total, cpu_time (the average)},
-- times in microseconds; :table(...) prints it as torch's.
local function key_averages(trace)
  local events = trace.traceEvents
  local self = self_times(events)
  local by, list = {}, setmetatable({}, Averages)
  for i, e in ipairs(events) do
    local r = by[e.name]
    if not r then
      r = {key = e.name, count = 0, cpu_time_total = 0, self_cpu_time_total = 0}
      by[e.name] = r
      list[#list + 1] = r
    end
    r.count = r.count + 1
    r.cpu_time_total = r.cpu_time_total + e.dur
    r.self_cpu_time_total = r.self_cpu_time_total + self[i]
  end
  for _, r in ipairs(list) do r.cpu_time = r.cpu_time_total / r.count end
  return list
end
M.key_averages = key_averages

-- The handle of a profile run without a function: h:close() (or <close>)
-- stops it, then h:key_averages() sums what it recorded.
local function profile_handle(finish)
  local h
  h = require("accel.state").handle(function() h.trace = finish(false) end)
  local base = getmetatable(h)
  return setmetatable(h, {__close = base.__close, __index = function(_, k)
    if k == "key_averages" then
      return function(self)
        if rawget(self, "trace") == nil then
          raise("profile: key_averages() is available once the profiler has stopped (close the handle first)")
        end
        return key_averages(self.trace)
      end
    end
    return base.__index[k]
  end})
end

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
    return trace
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
  if fn == nil then return profile_handle(finish) end
  local res = pack(pcall(fn))
  finish(not res[1])
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end

return M
