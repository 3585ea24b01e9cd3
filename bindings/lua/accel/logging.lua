-- accel.logging: Accelerate's accelerate.logging.get_logger, a logger for
-- several processes.
--
--   local logger = accel.logging.get_logger("train")       -- level: ACCELERATE_LOG_LEVEL, else WARNING
--   logger:info("epoch " .. epoch)                          -- main process only
--   logger:warning("on every process", {main_process_only = false})
--   logger:info("one per rank, in rank order", {in_order = true})
--
-- As Accelerate's MultiProcessAdapter over Python's logging:
-- * get_logger(name, [log_level]) reads ACCELERATE_LOG_LEVEL when no level
--   is given; a level given either way is set on this logger and on the
--   root level (so, as in Python, it also shows another logger's messages
--   when that one has no level of its own). Loggers are per name: the same
--   name is the same logger. The root level starts at WARNING.
-- * Levels: DEBUG 10, INFO 20, WARNING 30, ERROR 40, CRITICAL 50 (names in
--   any case, or numbers); a message below the logger's effective level
--   (its own level, else the root level) is dropped on every process.
-- * Options of each call: main_process_only (default true: only the main
--   process writes), in_order (every process writes, one after another in
--   rank order, with a barrier after each turn: every process must make the
--   call; main_process_only is then ignored, as in Accelerate).
-- * Each message is "[RANK i] " and the text; it is written to stderr as
--   Python's logging.basicConfig() default format shows it:
--   "INFO:train:[RANK 0] epoch 1". (Python without basicConfig prints only
--   WARNING and above, bare; here every enabled message is written.)
-- * Logging before a process state exists (accel.PartialState() or
--   accel.Accelerator{}) raises, as Accelerate does.
local state = require("accel.state")
local plugins = require("accel.plugins")
local util = require("accel.util")
local raise = util.raise

local M = {}

local LEVELS = {NOTSET = 0, DEBUG = 10, INFO = 20, WARN = 30, WARNING = 30, ERROR = 40, FATAL = 50, CRITICAL = 50}
local NAMES = {[10] = "DEBUG", [20] = "INFO", [30] = "WARNING", [40] = "ERROR", [50] = "CRITICAL"}
local CALL_OPTIONS = {main_process_only = "boolean", in_order = "boolean"}

local root_level = LEVELS.WARNING
local loggers = {}

-- A level name or number as a number (Python's logging._checkLevel).
local function level_of(what, level)
  if type(level) == "number" and level == math.floor(level) then return level end
  if type(level) ~= "string" then raise("%s: expected a level name or number, got %s", what, type(level)) end
  local n = LEVELS[level:upper()]
  if not n then raise("%s: unknown level '%s' (DEBUG, INFO, WARNING, ERROR, CRITICAL)", what, level:upper()) end
  return n
end

local Logger = {}
Logger.__index = Logger
Logger.__name = "accel.logging.Logger"

-- get_logger(name, [log_level]): the logger of that name.
function M.get_logger(name, log_level)
  if type(name) ~= "string" then raise("get_logger: expected a logger name, got %s", type(name)) end
  if log_level == nil then log_level = os.getenv("ACCELERATE_LOG_LEVEL") end
  local logger = loggers[name] or setmetatable({name = name, level = LEVELS.NOTSET, warned = {}}, Logger)
  loggers[name] = logger
  if log_level ~= nil then
    logger.level = level_of("get_logger", log_level)
    root_level = logger.level
  end
  return logger
end

function Logger:setLevel(level) self.level = level_of("Logger.setLevel", level) end

function Logger:getEffectiveLevel()
  return self.level ~= LEVELS.NOTSET and self.level or root_level
end

function Logger:isEnabledFor(level) return level_of("Logger.isEnabledFor", level) >= self:getEffectiveLevel() end

local function write(self, level, msg, rank)
  local name = NAMES[level] or ("Level " .. level)
  io.stderr:write(name .. ":" .. self.name .. ":[RANK " .. rank .. "] " .. tostring(msg) .. "\n") -- one write
  io.stderr:flush()
end

-- Writes msg at level (a number) as the call `what` asked (opts checked here).
local function emit(self, what, level, msg, opts)
  opts = plugins.check_options(what, opts, CALL_OPTIONS)
  local s = state.current()
  if not s then
    raise("%s: create the process state first (accel.PartialState() or accel.Accelerator{}), as Accelerate "
      .. "requires before using the logging utility", what)
  end
  if level < self:getEffectiveLevel() then return end
  if opts.in_order then
    for i = 0, s.num_processes - 1 do
      if i == s.process_index then write(self, level, msg, i) end
      s:wait_for_everyone()
    end
  elseif opts.main_process_only == false or s.is_main_process then
    write(self, level, msg, s.process_index)
  end
end

-- log(level, msg, [{main_process_only = true, in_order = false}])
function Logger:log(level, msg, opts) emit(self, "Logger.log", level_of("Logger.log", level), msg, opts) end

for method, level in pairs({debug = 10, info = 20, warning = 30, error = 40, critical = 50}) do
  Logger[method] = function(self, msg, opts) emit(self, "Logger." .. method, level, msg, opts) end
end

-- warning_once(msg, [opts]): a warning, once per logger and message text.
function Logger:warning_once(msg, opts)
  local key = tostring(msg)
  if self.warned[key] then return end
  self:warning(msg, opts) -- may raise (no process state yet): then it is not marked as warned
  self.warned[key] = true
end

-- logger.info(...): "Logger.info: call it as obj:info(...)"
util.check_methods(Logger, "Logger")

return M
