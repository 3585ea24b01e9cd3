-- logging_spec.lua: accel.logging.get_logger against Accelerate's
-- accelerate.logging (1.15) over Python's logging with basicConfig():
-- each script runs in a child accel-lua (a fresh process state, its own
-- environment, stderr captured). The expected lines are what the same
-- calls print in Python (noted at each check); the several-process
-- behaviour (main_process_only, in_order) is a barrier loop over ranks,
-- checked here on one process.
local support = dofile("tests/lua/support.lua")
local shell_quote = support.shell_quote

-- Runs the Lua script text in a child accel-lua (env: "VAR=value " prefix);
-- returns its stderr and stdout (the script starts on line 2).
local function run(script, env)
  local path = support.tmpname(".lua")
  support.write_file(path, "local accel = require('accel')\n" .. script)
  local err = path .. ".err"
  local p = io.popen((env or "") .. shell_quote(support.ACCEL_LUA) .. " " .. shell_quote(path) .. " 2>" ..
    shell_quote(err))
  local out = p:read("a")
  p:close()
  local stderr = support.read_if_exists(err)
  os.remove(path)
  os.remove(err)
  return stderr, out
end

describe("accel.logging.get_logger", function()
  -- Python: logging.basicConfig(); log = get_logger("train"); PartialState(); then the same calls.
  it("writes enabled messages as Python's basicConfig format, main process only by default", function()
    local err = run([[
      local log = accel.logging.get_logger("train")
      accel.PartialState()
      log:info("hidden info")
      log:warning("shown warning")
      log:error("an error", {main_process_only = false})
      log:critical("critical", {in_order = true})
      log:warning_once("once")
      log:warning_once("once")
      local log2 = accel.logging.get_logger("dbg", "debug")
      log2:debug("debug shown")
      log:info("info now shown: root level is DEBUG")
      log:setLevel("ERROR")
      log:warning("hidden by ERROR")
      io.stderr:write("effective ", log:getEffectiveLevel(), " ", log2:getEffectiveLevel(), " ",
        tostring(log:isEnabledFor(40)), "\n")
    ]])
    assert.are.equal(table.concat({
      "WARNING:train:[RANK 0] shown warning",
      "ERROR:train:[RANK 0] an error",
      "CRITICAL:train:[RANK 0] critical",
      "WARNING:train:[RANK 0] once",
      "DEBUG:dbg:[RANK 0] debug shown",
      "INFO:train:[RANK 0] info now shown: root level is DEBUG",
      "effective 40 10 true", ""}, "\n"), err)
  end)

  -- Python: ACCELERATE_LOG_LEVEL=info; get_logger("env"); info printed, debug not.
  it("reads ACCELERATE_LOG_LEVEL when no level is given", function()
    local script = [[
      accel.PartialState()
      local l = accel.logging.get_logger("env")
      l:info("info via env")
      l:debug("no debug")
    ]]
    assert.are.equal("INFO:env:[RANK 0] info via env\n", run(script, "ACCELERATE_LOG_LEVEL=info "))
    assert.are.equal("", run(script, "ACCELERATE_LOG_LEVEL=warning "))
  end)

  -- Python (logging.basicConfig()): get_logger("pkg").setLevel("ERROR") hides get_logger("pkg.mod")'s warning
  -- (its parent's level); logger.warning("x=%d %s", 5, "y") prints "x=5 y"; exception() logs at ERROR;
  -- accelerate.logging.set_verbosity_info() makes get_verbosity() 20 and shows "accelerate.sub"'s info
  it("follows the logger hierarchy, formats %-arguments, and sets the accelerate verbosity", function()
    local err, out = run([[
      accel.PartialState()
      local L = accel.logging
      L.get_logger("pkg"):setLevel("ERROR")
      L.get_logger("pkg.mod"):warning("hidden by pkg's ERROR")
      L.get_logger("pkg.mod"):error("x=%d %s", 5, "y")
      L.get_logger("other"):warning("x=%d", 7, {main_process_only = true})
      L.get_logger("other"):exception("failed")
      io.stderr:write(L.get_verbosity(), "\n")
      L.set_verbosity_info()
      io.stderr:write(L.get_verbosity(), "\n")
      L.get_logger("accelerate.sub"):info("shown at INFO")
      L.get_logger("outside"):info("hidden: the root stays at WARNING")
      print(select(2, pcall(function() L.get_logger("other"):warning("%d", "z") end)))
    ]])
    assert.are.equal(table.concat({"ERROR:pkg.mod:[RANK 0] x=5 y", "WARNING:other:[RANK 0] x=7",
      "ERROR:other:[RANK 0] failed", "30", "20", "INFO:accelerate.sub:[RANK 0] shown at INFO", ""}, "\n"), err)
    assert.matches('Logger%.warning: the message "%%d" does not take its 1 argument%(s%)', out)
  end)

  -- Python: RuntimeError "You must initialize the accelerate state ..."; ValueError "Unknown level: 'LOUD'".
  it("refuses logging before a process state, unknown levels and options, at the caller's line", function()
    local _, out = run([[
      local log = accel.logging.get_logger("train")
      print(select(2, pcall(function() log:warning("early") end)))
      accel.PartialState()
      print(select(2, pcall(function() accel.logging.get_logger("x", "loud") end)))
      print(select(2, pcall(function() log:info("x", {main_proces_only = false}) end)))
      print(select(2, pcall(function() log:log({}, "x") end)))
    ]])
    local lines = support.lines_of(out)
    assert.matches("%.lua:3: Logger%.warning: create the process state first %(accel%.PartialState%(%) or "
      .. "accel%.Accelerator{}%)", lines[1])
    assert.matches("%.lua:5: get_logger: unknown level 'LOUD' %(DEBUG, INFO, WARNING, ERROR, CRITICAL%)", lines[2])
    assert.matches("%.lua:6: Logger%.info: unknown option main_proces_only %(known: in_order, main_process_only%)",
      lines[3])
    assert.matches("%.lua:7: Logger%.log: expected a level name or number, got table", lines[4])
  end)
end)
