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

-- The logger of that name, made without a level (ACCELERATE_LOG_LEVEL not read)
local function named_logger(name)
  local logger = loggers[name] or setmetatable({name = name, level = LEVELS.NOTSET, warned = {}}, Logger)
  loggers[name] = logger
  return logger
end

-- get_logger(name, [log_level]): the logger of that name.
function M.get_logger(name, log_level)
  if type(name) ~= "string" then raise("get_logger: expected a logger name, got %s", type(name)) end
  if log_level == nil then log_level = os.getenv("ACCELERATE_LOG_LEVEL") end
  local logger = named_logger(name)
  if log_level ~= nil then
    logger.level = level_of("get_logger", log_level)
    root_level = logger.level
  end
  return logger
end

function Logger:setLevel(level) self.level = level_of("Logger.setLevel", level) end

-- Its own level, else its nearest ancestor's ("a.b" is under "a"), else
-- the root level, as Python's logger hierarchy
function Logger:getEffectiveLevel()
  if self.level ~= LEVELS.NOTSET then return self.level end
  local name = self.name
  while true do
    name = name:match("^(.*)%.[^.]*$")
    if not name then return root_level end
    local parent = loggers[name]
    if parent and parent.level ~= LEVELS.NOTSET then return parent.level end
  end
end

function Logger:isEnabledFor(level) return level_of("Logger.isEnabledFor", level) >= self:getEffectiveLevel() end

local function write(self, level, msg, rank)
  local name = NAMES[level] or ("Level " .. level)
  io.stderr:write(name .. ":" .. self.name .. ":[RANK " .. rank .. "] " .. tostring(msg) .. "\n") -- one write
  io.stderr:flush()
end

-- A call's arguments after msg: Python's %-style arguments of msg (written
-- with string.format), then at most one options table of CALL_OPTIONS'
-- keys. -> msg, opts
local function message_of(what, msg, ...)
  local n = select("#", ...)
  local opts = n > 0 and select(n, ...) or nil
  if type(opts) == "table" and getmetatable(opts) == nil then n = n - 1 else opts = nil end
  if n == 0 then return msg, opts end
  local ok, text = pcall(string.format, tostring(msg), ...)
  if not ok then raise("%s: the message %q does not take its %d argument(s): %s", what, tostring(msg), n, text) end
  return text, opts
end

-- Writes msg at level (a number) as the call `what` asked (opts checked here).
local function emit(self, what, level, msg, ...)
  local opts
  msg, opts = message_of(what, msg, ...)
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

-- log(level, msg, [args...], [{main_process_only = true, in_order = false}])
function Logger:log(level, msg, ...) emit(self, "Logger.log", level_of("Logger.log", level), msg, ...) end

-- debug / info / warning / error / critical(msg, [args...], [opts]); exception
-- logs at ERROR (Python adds the traceback of the exception being handled:
-- Lua has none here)
for method, level in pairs({debug = 10, info = 20, warning = 30, error = 40, critical = 50, exception = 40}) do
  Logger[method] = function(self, msg, ...) emit(self, "Logger." .. method, level, msg, ...) end
end

-- warning_once(msg, [opts]): a warning, once per logger and message text.
function Logger:warning_once(msg, opts)
  local key = tostring(msg)
  if self.warned[key] then return end
  self:warning(msg, opts) -- may raise (no process state yet): then it is not marked as warned
  self.warned[key] = true
end

-- Accelerate's get_verbosity / set_verbosity: the level of the "accelerate"
-- logger, which the loggers named "accelerate.*" without a level of their
-- own follow (the root level and other loggers stay as they are)
function M.get_verbosity() return named_logger("accelerate"):getEffectiveLevel() end
function M.set_verbosity(verbosity)
  named_logger("accelerate").level = level_of("set_verbosity", verbosity)
end
for suffix, level in pairs({debug = 10, info = 20, warning = 30, error = 40}) do
  M["set_verbosity_" .. suffix] = function() M.set_verbosity(level) end
end

-- logger.info(...): "Logger.info: call it as obj:info(...)"
util.check_methods(Logger, "Logger")

return M
