-- accel.state: the process state every Accelerator shares (PartialState,
-- as in Accelerate: one per process, created on first use) and the
-- per-Accelerator gradient-accumulation state (GradientState).
--
-- PartialState holds the communicator (accel.comm) and the process fields
-- (process_index, num_processes, local_process_index, is_main_process, ...),
-- plus the process-level helpers Accelerate puts there: wait_for_everyone,
-- print, main_process_first, on_main_process, split_between_processes.
local accel = require("accel")
local compat = require("accel.compat")
local comm = require("accel.comm")
local raise = require("accel.nn.module").raise
local util = require("accel.util")
local plugins = require("accel.plugins")

local M = {}

-- ---------------------------------------------------------------- handles

-- A value for Lua 5.4's `local _ <close> = ...`: runs exit once, when the
-- variable goes out of scope (also on error); h:close() runs it explicitly.
local Handle = {}
Handle.__index = Handle
Handle.__close = function(h) h:close() end
function Handle:close()
  local exit = self.exit
  if exit then
    self.exit = nil
    exit()
  end
end

function M.handle(exit) return setmetatable({exit = exit}, Handle) end

-- enter(); fn(); exit() — or, without fn, enter() and a handle that exits.
-- exit runs even when fn raises; fn's results are returned. what: the
-- method, named when fn is neither nil nor callable.
function M.scoped(what, enter, exit, fn)
  if fn ~= nil and not util.callable(fn) then
    raise("%s: expected a function to run (or none, for a handle to close), got %s", what, type(fn))
  end
  enter()
  if fn == nil then return M.handle(exit) end
  local res = compat.pack(pcall(fn))
  exit()
  if not res[1] then error(res[2], 0) end
  return compat.unpack(res, 2, res.n)
end

-- ---------------------------------------------------------------- PartialState

local PartialState = {}
local props = {}

PartialState.__index = util.property_index(PartialState, props)

function props.process_index(s) return s.comm.rank end
function props.num_processes(s) return s.comm.world_size end
function props.local_process_index(s) return s.comm.local_rank end
function props.num_local_processes(s) return s.comm.local_world_size end
function props.is_main_process(s) return s.comm.rank == 0 end
function props.is_local_main_process(s) return s.comm.local_rank == 0 end
function props.is_last_process(s) return s.comm.rank == s.comm.world_size - 1 end
function props.use_distributed(s) return s.comm.world_size > 1 end
-- Accelerate's PartialState.debug: launch --debug (ACCEL_LUA_DEBUG_MODE, else ACCELERATE_DEBUG_MODE)
function props.debug()
  local v, var = util.launch_setting("DEBUG_MODE")
  return v ~= nil and util.str_to_bool(v, var) or false
end
-- What the processes are, without a sharding plugin: NO / MULTI_CPU / MULTI_GPU.
function PartialState:_process_type()
  if self.comm.world_size == 1 then return "NO" end
  return (self.comm.backend == "nccl" or self.device.type == "cuda") and "MULTI_GPU" or "MULTI_CPU"
end

function props.distributed_type(s)
  local info = rawget(s, "accelerator_info")
  if info and info.distributed_type then return info.distributed_type end
  return s:_process_type()
end

-- What the last Accelerator made asked for (Accelerate's AcceleratorState
-- is shared the same way): {distributed_type = "DEEPSPEED" | "FSDP" | nil,
-- mixed_precision = ..., sharding = "ZeRO stage 2, ..." | nil,
-- deepspeed_plugin = ..., fsdp_plugin = ...}.
function PartialState:_set_accelerator_info(info) rawset(self, "accelerator_info", info) end

-- The last Accelerator's sharding plugins (nil before one exists), as
-- Accelerate's AcceleratorState.deepspeed_plugin / fsdp_plugin.
function props.deepspeed_plugin(s)
  local info = rawget(s, "accelerator_info")
  return info and info.deepspeed_plugin
end
function props.fsdp_plugin(s)
  local info = rawget(s, "accelerator_info")
  return info and info.fsdp_plugin
end
-- The last Accelerator's mixed precision ("no", "fp16", "bf16", "fp8"; nil
-- before one exists), as Accelerate's AcceleratorState.mixed_precision
function props.mixed_precision(s)
  local info = rawget(s, "accelerator_info")
  return info and info.mixed_precision
end

-- Accelerate's AcceleratorState print: the environment, the processes,
-- then (once an Accelerator exists) the precision and the sharding stage.
PartialState.__tostring = function(s)
  local backend = s.backend ~= nil and s.backend ~= "none" and ("  Backend: " .. tostring(s.backend)) or ""
  local lines = {("Distributed environment: %s%s"):format(s.distributed_type, backend), -- no backend: Accelerate omits it
    ("Num processes: %d"):format(s.num_processes), ("Process index: %d"):format(s.process_index),
    ("Local process index: %d"):format(s.local_process_index), ("Device: %s"):format(tostring(s.device))}
  local info = rawget(s, "accelerator_info")
  if info then
    lines[#lines + 1] = ""
    lines[#lines + 1] = "Mixed precision type: " .. tostring(info.mixed_precision)
    if info.sharding then lines[#lines + 1] = "Sharding: " .. info.sharding end
  end
  return table.concat(lines, "\n") .. "\n"
end
function props.backend(s) return s.comm.backend end

local shared = nil

-- The device this process computes on, chosen once when the state is made
-- (Accelerate's PartialState device choice): the CPU when asked for
-- (cpu = true); else a default device other than the CPU and CUDA that the
-- user set (accel.set_default_device, ACCEL_LUA_DEVICE; e.g. sim); else the
-- CPU under ACCEL_LUA_USE_CPU=true (`launch --cpu`, the default of a build
-- without CUDA) or in a build without CUDA; else cuda:<local rank> when a
-- GPU answers (a CUDA build without one says so once, on stderr, and runs
-- on the CPU).
local warned_no_gpu = false

local function no_gpu(c)
  if not warned_no_gpu and c.rank == 0 then
    io.stderr:write(("accel-lua: no CUDA GPU is usable (%s); running on the CPU\n"):format(
      accel.cuda.unavailable_reason()))
  end
  warned_no_gpu = true
  return accel.device("cpu")
end

function M.pick_device(cpu, c)
  if cpu then return accel.device("cpu") end
  local d = accel.get_default_device()
  if d.type ~= "cpu" and d.type ~= "cuda" then return d end
  if util.env_flag("ACCEL_LUA_USE_CPU") or not accel.cuda.is_built() then return accel.device("cpu") end
  local n = accel.cuda.device_count()
  if n == 0 then return no_gpu(c) end
  if c.local_rank >= n then
    raise("PartialState: local process %d has no GPU: this machine has %d (cuda:0 to cuda:%d); start at most %d "
      .. "processes per machine (--num_processes, --gpu_ids) or use --cpu", c.local_rank, n, n - 1, n)
  end
  return accel.device("cuda:" .. c.local_rank)
end

-- accel.PartialState([{cpu = false}]): the process state (the same object
-- every time, as Accelerate's shared state); its device is picked by the
-- first call. Asking PartialState for the CPU once the state lives on
-- another device is an error, as in Accelerate (the state cannot change
-- once made); an Accelerator{cpu = true} uses the CPU whatever the state's
-- device.
local PARTIAL_STATE_OPTIONS = plugins.register("PartialState", {cpu = "boolean"})

function M.PartialState(opts)
  plugins.check_options("PartialState", opts, PARTIAL_STATE_OPTIONS)
  local cpu = opts ~= nil and opts.cpu == true
  if shared then
    if cpu and shared.device.type ~= "cpu" then
      raise("PartialState: the process state already runs on %s and cannot change; pass cpu = true to the "
        .. "first Accelerator (or PartialState) of the process", tostring(shared.device))
    end
    return shared
  end
  local c = comm.create()
  shared = setmetatable({comm = c, device = M.pick_device(cpu, c), initialized = true}, PartialState)
  return shared
end

-- Forget the shared state (tests, or a script that wants a fresh one).
function M.reset_state() shared = nil end
-- The process state if one was made, else nil.
function M.current() return shared end
PartialState._reset_state = function() M.reset_state() end

function PartialState:wait_for_everyone() self.comm:barrier() end

-- Once per machine, as Accelerate's (its local main process prints).
-- print(...) on the local main process: Lua's print, or with a trailing
-- table of Python print's keywords (sep, end, file, flush; Accelerate passes
-- them on) Python's: the values joined by sep (" "), then end ("\n")
local PRINT_KEYWORDS = {sep = "string", ["end"] = "string", file = "userdata", flush = "boolean"}

local function print_keywords(n, ...)
  if n == 0 then return nil end
  local last = select(n, ...)
  if type(last) ~= "table" or getmetatable(last) ~= nil or next(last) == nil then return nil end
  for k, v in pairs(last) do
    if PRINT_KEYWORDS[k] == nil then return nil end
    if type(v) ~= PRINT_KEYWORDS[k] then raise("print: %s must be a %s, got %s", k, PRINT_KEYWORDS[k], type(v)) end
  end
  return last
end

function PartialState:print(...)
  if not self.is_local_main_process then return end
  local n = select("#", ...)
  local kw = print_keywords(n, ...)
  if not kw then return print(...) end
  local parts = {}
  for i = 1, n - 1 do parts[i] = tostring((select(i, ...))) end
  local out = kw.file or io.stdout
  out:write(table.concat(parts, kw.sep or " "), kw["end"] or "\n")
  if kw.flush then out:flush() end
end

-- Rank 0 (or the local main) runs the body first, the others after it.
local function goes_first(self, what, is_main, fn)
  return M.scoped(what, function() if not is_main then self:wait_for_everyone() end end,
    function() if is_main then self:wait_for_everyone() end end, fn)
end

function PartialState:main_process_first(fn) return goes_first(self, "main_process_first", self.is_main_process, fn) end
function PartialState:local_main_process_first(fn)
  return goes_first(self, "local_main_process_first", self.is_local_main_process, fn)
end

-- Decorators: a function that runs fn (any callable) only on the chosen process(es); on
-- the others it returns nil (one value, as Accelerate's None).
local function on_process_if(pred, fn, what)
  if not util.callable(fn) then raise("%s: expected a function, got %s", what, type(fn)) end
  return function(...)
    if pred() then return fn(...) end
    return nil
  end
end

function PartialState:on_main_process(fn)
  return on_process_if(function() return self.is_main_process end, fn, "on_main_process")
end
function PartialState:on_local_main_process(fn)
  return on_process_if(function() return self.is_local_main_process end, fn, "on_local_main_process")
end
function PartialState:on_last_process(fn)
  return on_process_if(function() return self.is_last_process end, fn, "on_last_process")
end
-- on_process(fn, i) / on_local_process(fn, i): fn runs only on the process
-- whose (local) index is i (either argument order).
local function index_arg(what, fn, i)
  if type(fn) == "number" then fn, i = i, fn end
  if type(i) ~= "number" or i < 0 or i ~= math.floor(i) then
    raise("%s: expected a process index (a non-negative integer), got %s", what, tostring(i))
  end
  return fn, i
end

function PartialState:on_process(fn, process_index)
  fn, process_index = index_arg("on_process", fn, process_index)
  -- without several processes fn always runs, as Accelerate's `not self.use_distributed`
  return on_process_if(function() return self.num_processes == 1 or self.process_index == process_index end, fn,
    "on_process")
end
function PartialState:on_local_process(fn, local_process_index)
  fn, local_process_index = index_arg("on_local_process", fn, local_process_index)
  return on_process_if(function()
    return self.num_processes == 1 or self.local_process_index == local_process_index
  end, fn, "on_local_process")
end

-- split_between_processes(inputs, [{apply_padding = false}], [fn]): this
-- process's contiguous part of a list, a tensor (along dim 1) or a table of
-- them (each value split at the same positions; all must have the same
-- length); the first len % N processes get one more item. With
-- apply_padding every part is padded with the input's last item (as
-- Accelerate's inputs[-1]) to the longest part's length, also a part that
-- was empty. On one process inputs come back as they are. An empty input
-- gives empty parts (Accelerate fails on it with padding). With fn (a
-- function or callable table): returns fn(part).
local SPLIT_OPTIONS = plugins.register("split_between_processes", {apply_padding = "boolean"})

function PartialState:split_between_processes(inputs, opts, fn)
  if util.callable(opts) then opts, fn = nil, opts end
  plugins.check_options("split_between_processes", opts, SPLIT_OPTIONS)
  if fn ~= nil and not util.callable(fn) then
    raise("split_between_processes: expected a function to call with the part, got %s", type(fn))
  end
  local part = require("accel.operations").split(inputs, self.process_index, self.num_processes,
    opts and opts.apply_padding)
  if fn then return fn(part) end
  return part
end

-- ---------------------------------------------------------------- GradientState

-- Where gradient accumulation stands, for one Accelerator: the number of
-- micro-batches per optimizer step, whether this step synchronises (and
-- steps the optimizer), and the data loader being iterated, whose last
-- batch also ends an accumulation window (unless the
-- GradientAccumulationPlugin says sync_with_dataloader = false).
-- sync_each_batch: on several processes, gradients are averaged on every
-- micro-batch while the optimizer still steps every num_steps.
-- adjust_scheduler is kept for Accelerate's name; Accelerate's
-- GradientState reads it from the plugin's non-default values with a
-- default of false, so it never changes a schedule there, and it does not
-- here either (see accel.prepared's scheduler).
-- active_dataloader, in_dataloader, end_of_dataloader and remainder are
-- read as fields (Accelerate's properties), computed on access.
local GradientState = {}
local gradient_props = {}
GradientState.__index = function(self, k)
  local prop = gradient_props[k]
  if prop then return prop(self) end
  return GradientState[k]
end

function M.GradientState(num_steps, plugin)
  plugin = plugin or {}
  return setmetatable({num_steps = num_steps, sync_gradients = true, step = 0,
    sync_with_dataloader = plugin.sync_with_dataloader ~= false, sync_each_batch = plugin.sync_each_batch == true,
    adjust_scheduler = plugin.adjust_scheduler ~= false, loaders = {}}, GradientState)
end

-- Accelerate's GradientState print (its plugin's fields that differ from
-- the defaults, as GradientAccumulationPlugin.to_kwargs gives them)
GradientState.__tostring = function(gs)
  local py = function(b) return b and "True" or "False" end
  local plugin = {("'num_steps': %d"):format(gs.num_steps)}
  if not gs.sync_with_dataloader then plugin[#plugin + 1] = "'sync_with_dataloader': False" end
  if gs.sync_each_batch then plugin[#plugin + 1] = "'sync_each_batch': True" end
  return ("Sync Gradients: %s\nAt end of current dataloader: %s\nExtra samples added: %s\nGradient accumulation "
    .. "plugin: {%s}\n"):format(py(gs.sync_gradients), py(gs.end_of_dataloader), tostring(gs.remainder),
    table.concat(plugin, ", "))
end

function gradient_props.active_dataloader(gs) return rawget(gs, "loaders")[#rawget(gs, "loaders")] end
function gradient_props.in_dataloader(gs) return #rawget(gs, "loaders") > 0 end

function gradient_props.end_of_dataloader(gs)
  local l = gs.active_dataloader
  return l ~= nil and l.end_of_dataloader == true
end

function gradient_props.remainder(gs)
  local l = gs.active_dataloader
  return l and l.remainder or -1
end

function GradientState:add_dataloader(l)
  self:remove_dataloader(l)
  self.loaders[#self.loaders + 1] = l
end

function GradientState:remove_dataloader(l)
  for i = #self.loaders, 1, -1 do
    if self.loaders[i] == l then table.remove(self.loaders, i) end
  end
end

-- Accelerate's _do_sync: a step synchronises every num_steps micro-batches
-- and at the end of the data loader (which also restarts the count).
function GradientState:do_sync()
  if self.sync_with_dataloader and self.end_of_dataloader then
    self.step = 0
    self.sync_gradients = true
  else
    self.step = self.step + 1
    self.sync_gradients = self.step % self.num_steps == 0
  end
end

-- state.wait_for_everyone(): "PartialState.wait_for_everyone: call it as obj:wait_for_everyone(...)"
require("accel.util").check_methods(PartialState, "PartialState")
require("accel.util").check_methods(GradientState, "GradientState")

return M
