-- accel.progress: a tqdm-like progress bar for training loops.
--
--   local progress = require("accel.progress")      -- or accel.progress
--   for xb, yb in progress.wrap(loader:iter(), #loader, {desc = "epoch 1"}) do ... end
--   for xb, yb in progress.wrap(loader) do ... end   -- same: uses loader:iter() and #loader
--
--   local bar = progress.bar(100, {desc = "eval"})
--   bar:update(1); bar:set_postfix({loss = 0.25}); bar:close()
--
-- Options: desc, file (default io.stderr), disable, quiet, mininterval
-- (seconds between terminal redraws, default 0.1), ascii (bar drawn with '#'),
-- tty (true / false: force terminal or plain mode; default isatty(file), and
-- under `accel-lua launch` for io.stdout / io.stderr whether launch's own
-- stdout / stderr is a terminal, on the main process only), ncols (line
-- width on a terminal; default the terminal's width, else 80; 0: no bar),
-- unit (default "it": "5it", "2.00it/s"). Any other key, a value of the
-- wrong type and tqdm's options not offered here (leave, unit_scale, ...)
-- are errors naming the option; a total of math.huge is an unknown total
-- (as tqdm).
--
-- On a terminal one line is redrawn in place, at most every mininterval:
--   epoch 1:  45%|█████████▎           | 45/100 [00:02<00:03, 20.51it/s, loss=0.123]
-- Otherwise (a log file, a pipe) plain lines are printed each time the count
-- crosses another 10% of the total, and once at close:
--   epoch 1: 50% 50/100 [00:02<00:02, 20.51it/s, loss=0.123]
-- (with an unknown total, at most one line every 30 s and one at close);
-- {quiet = true} prints nothing in plain mode. As tqdm's format_meter, the
-- percentage is n / total * 100 rounded ("%3.0f": 2/3 is 67%, 1/8 is 12%),
-- and a total of 0 or a count past the total (by half an item or more)
-- shows the count alone, as an unknown total does ("5it [00:01, ...]").
--
-- Decisions: `disable` defaults to true on a process whose local rank
-- (LOCAL_RANK or OMPI_COMM_WORLD_LOCAL_RANK) is not 0, so only the local
-- main process draws (Accelerate's tqdm(main_process_only=True) rule, so on
-- several machines each machine's local main process reports); under
-- `accel-lua launch` every rank writes into what mpirun gives it, and launch
-- tells the ranks (ACCEL_LUA_STDOUT_TTY / ACCEL_LUA_STDERR_TTY /
-- ACCEL_LUA_COLUMNS) whether that ends on its terminal: only the main
-- process (rank 0) then redraws in place, a local main process of another
-- machine prints plain lines; each redraw is flushed at once (no newline
-- ends it); the rate is the average since the bar started; the count is
-- what has been consumed, so wrap() adds one when the loop asks for the
-- next item (as tqdm does); set_postfix values (numbers, one-element
-- tensors, strings) are formatted only when a line is drawn, keys sorted.
-- wrap() returns the bar as the generic-for's closing value, so in Lua 5.4 a
-- `break` out of the loop (or an error) closes the bar too.
local accel = require("accel")
local plugins = require("accel.plugins")
local util = require("accel.util")
local raise = util.raise
local C = accel._C

local progress = {}

local PLAIN_STEP = 10     -- percent between plain lines
local PLAIN_INTERVAL = 30 -- seconds between plain lines when the total is unknown
local PARTIAL = {"▏", "▎", "▍", "▌", "▋", "▊", "▉"}

-- The options and their types (checked by plugins.check_options); tqdm's
-- options that are not offered, with the reason.
local OPTIONS = {desc = "string", file = "any", disable = "boolean", quiet = "boolean", mininterval = "number",
                 ascii = "boolean", tty = "boolean", ncols = "number", unit = "string"}
local NOT_OFFERED = {
  leave = "the bar's last line always stays",
  position = "no nested bars",
  unit_scale = "counts are printed as they are",
  unit_divisor = "counts are printed as they are",
  total = "pass the total as the first argument",
}

local Bar = {}
Bar.__index = Bar
Bar.__close = function(self) self:close() end

-- Whether the first of these variables that is set says 0 (or none is set).
local function rank_is_zero(names)
  for _, name in ipairs(names) do
    local rank = os.getenv(name)
    if rank ~= nil and rank ~= "" then return tonumber(rank) == 0 end
  end
  return true
end

local function is_main_local_process()
  return rank_is_zero({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"})
end

local function is_main_process()
  return rank_is_zero({"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
end

local function is_lua_file(f)
  return io.type(f) == "file"
end

-- Under `accel-lua launch` the ranks write into what mpirun gives them (a
-- pipe for stderr; for stdout a pseudo-terminal of Open MPI's, even when
-- mpirun's own output goes to a file), so isatty there says nothing about
-- where the output ends. launch says it instead: ACCEL_LUA_STDOUT_TTY /
-- ACCEL_LUA_STDERR_TTY are 1 when its own stdout / stderr is a terminal,
-- else 0, and ACCEL_LUA_COLUMNS is its width. Only the main process takes a
-- 1 as a terminal: every rank's output reaches the same one, and two bars
-- redrawn there would overwrite each other. Returns true / false when launch
-- said, nil when it did not (not under launch, or another file).
local function launcher_terminal(file)
  local var = (file == io.stdout and "ACCEL_LUA_STDOUT_TTY") or (file == io.stderr and "ACCEL_LUA_STDERR_TTY")
  local said = var and os.getenv(var)
  if said ~= "1" and said ~= "0" then return nil end
  return said == "1" and is_main_process()
end

-- Terminal mode or not, and the width when known, for a bar writing to file.
local function terminal_of(file)
  if not is_lua_file(file) then return false, nil end
  local own = C.isatty(file)
  local width = own and C.terminal_width(file) or nil
  local said = launcher_terminal(file)
  if said == nil then return own, width end
  return said, said and (width or tonumber(os.getenv("ACCEL_LUA_COLUMNS"))) or nil
end

-- "mm:ss" or "h:mm:ss"
local function fmt_time(s)
  s = math.floor(s)
  local h, m = math.floor(s / 3600), math.floor(s % 3600 / 60)
  if h > 0 then return string.format("%d:%02d:%02d", h, m, s % 60) end
  return string.format("%02d:%02d", m, s % 60)
end

local function fmt_rate(rate, unit)
  if rate == nil then return "?" .. unit .. "/s" end
  if rate > 0 and rate < 1 then return string.format("%5.2fs/", 1 / rate) .. unit end -- (tqdm's {:5.2f})
  return string.format("%5.2f", rate) .. unit .. "/s"
end

-- counts: integers as such, fractional counts (update(0.5)) with %g
local function fmt_count(x)
  if x == math.floor(x) and math.abs(x) < 1e15 then return string.format("%d", x) end
  return string.format("%g", x)
end

local function fmt_value(v)
  if accel.is_tensor(v) then v = v:numel() == 1 and v:item() or tostring(v) end
  if type(v) ~= "number" then return tostring(v) end
  if v == math.floor(v) then return fmt_count(v) end
  -- tqdm's format_num: {:.3g} without the exponent's leading zero, unless the plain number is shorter
  local short = string.format("%.3g", v):gsub("e%+0", "e+"):gsub("e%-0", "e-")
  local plain = tostring(v)
  return #short < #plain and short or plain
end

-- Checks what(total, opts) (what: "progress.bar" or "progress.wrap");
-- returns the total (math.huge: nil, unknown, as tqdm) and the options.
local function check_args(what, total, opts)
  if opts ~= nil and type(opts) ~= "table" then raise("%s: options must be a table, got %s", what, type(opts)) end
  for k in pairs(opts or {}) do
    if NOT_OFFERED[k] then raise("%s: tqdm's option %s is not supported: %s", what, tostring(k), NOT_OFFERED[k]) end
  end
  opts = plugins.check_options(what, opts, OPTIONS)
  if total ~= nil and (type(total) ~= "number" or not (total >= 0)) then
    raise("%s: total must be a non-negative number or nil, got %s", what, tostring(total))
  end
  if opts.mininterval ~= nil and not (opts.mininterval >= 0) then
    raise("%s: option mininterval must be a non-negative number of seconds, got %s", what, tostring(opts.mininterval))
  end
  local ncols = opts.ncols
  if ncols ~= nil and not (ncols >= 0 and ncols < math.huge and ncols == math.floor(ncols)) then
    raise("%s: option ncols must be a non-negative integer, got %s", what, tostring(ncols))
  end
  local file = opts.file or io.stderr
  if type(file) ~= "userdata" and type(file) ~= "table" or not file.write then
    raise("%s: file must be a Lua file (or have a write method), got %s", what, type(file))
  end
  if total == math.huge then total = nil end
  return total, opts
end

local function new_bar(what, total, opts)
  total, opts = check_args(what, total, opts)
  local file = opts.file or io.stderr
  local disable = opts.disable
  if disable == nil then disable = not is_main_local_process() end
  local tty = opts.tty
  local found_tty, width = terminal_of(file)
  if tty == nil then tty = found_tty end
  local self = setmetatable({
    n = 0, total = total, desc = opts.desc, file = file, disabled = disable, tty = tty,
    quiet = opts.quiet, ascii = opts.ascii, mininterval = opts.mininterval or 0.1,
    ncols = opts.ncols or (tty and width) or 80, unit = opts.unit or "it",
    next_pct = PLAIN_STEP, printed_n = -1,
  }, Bar)
  self.start = accel.clock()
  self.last_draw = self.start
  if tty and not disable then self:refresh() end
  return self
end

-- progress.bar(total, opts): total may be nil (unknown).
function progress.bar(total, opts)
  return new_bar("progress.bar", total, opts)
end

-- The total the line shows: nil (the count alone, as for an unknown total)
-- when there is none, it is 0, or the count passed it by half an item or
-- more (tqdm's format_meter).
function Bar:shown_total()
  local total = self.total
  if total and total > 0 and self.n < total + 0.5 then return total end
  return nil
end

-- The "[elapsed<remaining, rate, k=v]" part and the counter.
function Bar:stats(now)
  now = now or accel.clock()
  local elapsed = now - self.start
  local rate = elapsed > 0 and self.n > 0 and self.n / elapsed or nil
  local post = ""
  if self.postfix then
    local parts = {}
    for _, k in ipairs(util.sorted_keys(self.postfix)) do parts[#parts + 1] = tostring(k) .. "=" .. fmt_value(self.postfix[k]) end
    if #parts > 0 then post = ", " .. table.concat(parts, ", ") end
  end
  local total = self:shown_total()
  if not total then
    return string.format("%s%s [%s, %s%s]", fmt_count(self.n), self.unit, fmt_time(elapsed), fmt_rate(rate, self.unit),
      post)
  end
  local eta = rate and fmt_time(math.max(0, total - self.n) / rate) or "?"
  return string.format("%s/%s [%s<%s, %s%s]", fmt_count(self.n), fmt_count(total), fmt_time(elapsed), eta,
    fmt_rate(rate, self.unit), post)
end

function Bar:fraction()
  if not self.total then return nil end
  if self.total == 0 then return 1 end
  return math.max(0, math.min(1, self.n / self.total))
end

-- x rounded to a whole number, halves to even, as C's and Python's "%.0f"
-- round a double (LuaJIT's own "%.0f" rounds halves away from zero).
local function round_half_even(x)
  local whole = math.floor(x)
  local frac = x - whole -- exact
  if frac > 0.5 or (frac == 0.5 and whole % 2 == 1) then return whole + 1 end
  return whole
end

-- Whole percent done as tqdm shows it ("%3.0f" of n / total * 100: 2/3 is
-- 67, 1/8 is 12); nil when the line shows no percentage (see shown_total).
function Bar:percent()
  local total = self:shown_total()
  if not total then return nil end
  return round_half_even(self.n / total * 100)
end

function Bar:prefix()
  return self.desc and (self.desc .. ": ") or ""
end

-- width cells of bar for fraction f
function Bar:draw_bar(f, width)
  if self.ascii then
    local full = math.floor(f * width)
    return string.rep("#", full) .. string.rep(" ", width - full)
  end
  local eighths = math.floor(f * width * 8)
  local full, part = math.floor(eighths / 8), eighths % 8
  local s = string.rep("█", full)
  if full < width then s = s .. (part > 0 and PARTIAL[part] or " ") .. string.rep(" ", width - full - 1) end
  return s
end

-- The one-line terminal form.
function Bar:terminal_line(now)
  local stats = self:stats(now)
  if not self:shown_total() then return self:prefix() .. stats end
  local head = self:prefix() .. string.format("%3d%%", self:percent())
  local width = self.ncols - #head - #stats - 3
  if width < 1 then return head .. " " .. stats end -- no room (ncols = 0): no bar, as tqdm
  return head .. "|" .. self:draw_bar(self:fraction(), width) .. "| " .. stats
end

function Bar:plain_line(now)
  if not self:shown_total() then return self:prefix() .. self:stats(now) end
  return self:prefix() .. string.format("%d%% ", self:percent()) .. self:stats(now)
end

function Bar:emit(s)
  self.file:write(s)
  if self.file.flush then self.file:flush() end
end

-- Draws now (terminal: redraws the line; plain: prints one line).
function Bar:refresh()
  if self.disabled then return end
  local now = accel.clock()
  self.last_draw = now
  if self.tty then
    self:emit("\r" .. self:terminal_line(now) .. "\27[K")
  elseif not self.quiet then
    self:emit(self:plain_line(now) .. "\n")
    self.printed_n = self.n
  end
end

-- Plain mode: is a line due (another 10% crossed, or 30 s with no total)?
function Bar:plain_due()
  if self.total and self.total > 0 then
    local pct = self.n * 100 / self.total
    if pct < self.next_pct or self.n >= self.total then return false end
    self.next_pct = (math.floor(pct / PLAIN_STEP) + 1) * PLAIN_STEP
    return true
  end
  return not self.total and accel.clock() - self.last_draw >= PLAIN_INTERVAL
end

-- n as a count: a one-element tensor's value; anything else raises.
local function count_of(n)
  if accel.is_tensor(n) and n:numel() == 1 then n = n:item() end
  if type(n) ~= "number" or n - n ~= 0 then -- n - n: NaN for NaN and the infinities
    raise("update: expected a finite number or a one-element tensor, got %s",
      type(n) == "number" and tostring(n) or accel.is_tensor(n) and n:numel() .. "-element tensor" or type(n))
  end
  return n
end

function Bar:update(n)
  if n == nil then n = 1 elseif type(n) ~= "number" or n - n ~= 0 then n = count_of(n) end
  self.n = self.n + n
  if self.disabled or self.closed then return end
  if self.tty then
    if accel.clock() - self.last_draw >= self.mininterval then self:refresh() end
  elseif not self.quiet and self:plain_due() then
    self:refresh()
  end
end

-- postfix: table name -> number | one-element tensor | string (kept, formatted when drawn)
function Bar:set_postfix(postfix)
  if postfix ~= nil and type(postfix) ~= "table" then
    raise("set_postfix: expected a table of name -> value, got %s", type(postfix))
  end
  self.postfix = postfix
end

function Bar:set_description(desc)
  if desc ~= nil and type(desc) ~= "string" then raise("set_description: expected a string or nil, got %s", type(desc)) end
  self.desc = desc
end

-- Draws the final state (terminal: and ends the line). Closing twice is a no-op.
function Bar:close()
  if self.closed then return end
  self.closed = true
  if self.disabled then return end
  if self.tty then
    self:refresh()
    self:emit("\n")
  elseif not self.quiet and self.printed_n ~= self.n then
    self:refresh()
  end
end

-- Turns what wrap() was given into an iterator triple and a default total.
local function iterator_of(it)
  if type(it) == "function" then return it, nil, nil, nil end
  local ok, iter = pcall(function() return it.iter end)
  if ok and type(iter) == "function" then
    local f, s, c = it:iter()
    return f, s, c, #it
  end
  if type(it) == "table" then
    local i = 0
    return function()
      i = i + 1
      return it[i]
    end, nil, nil, #it
  end
  raise("progress.wrap: expected an iterator function, a loader (with :iter()) or a list, got %s", type(it))
end

-- progress.wrap(iterator_fn | loader | list, total, opts): a generic-for
-- iterator yielding exactly what the wrapped one yields, counting each item.
function progress.wrap(it, total, opts)
  local f, s, ctrl, default_total = iterator_of(it)
  local bar = new_bar("progress.wrap", total or default_total, opts)
  local started = false
  local function pass(...)
    if (...) == nil then
      bar:close()
      return nil
    end
    ctrl = (...)
    return ...
  end
  return function()
    if started then bar:update(1) else started = true end
    return pass(f(s, ctrl))
  end, nil, nil, bar
end

-- bar.update(1): "ProgressBar.update: call it as obj:update(...)"
require("accel.util").check_methods(Bar, "ProgressBar")

return progress
