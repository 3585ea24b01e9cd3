-- progress_spec.lua: accel.progress, the tqdm-like bar. Output goes to
-- temporary files (not terminals), so plain mode is the default there;
-- {tty = true} forces the terminal form to check the redraw limit.
local accel = require("accel")
local progress = require("accel.progress")
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["redraws in place on the main process when launch's stderr is a terminal"] = "the spec uses Lua 5.3's utf8 library",
  ["draws partial blocks and fits the width"] = "the spec uses Lua 5.3's utf8 library",
  ["takes a list or a loader-like object, using # as the total"] = support.NO_LEN,
  ["closes the bar when the loop breaks (Lua 5.4 closing value)"] = "<close> (Lua 5.4)",
})

local function tmpfile()
  local path = os.tmpname()
  return path, assert(io.open(path, "w+b"))
end

-- What has been written to f, the open file at path.
local function contents(path, f)
  f:flush()
  return support.read_file(path)
end

local lines_of = support.lines_of

local function busy_wait(seconds)
  local t = accel.clock()
  while accel.clock() - t < seconds do end
end

local PLAIN = "^(.-): (%d+)%% (%d+)/(%d+) %[(%d%d:%d%d)<([%d:?]+), +([%d.]+)it/s(.*)%]$"

describe("progress.bar in plain mode (not a terminal)", function()
  local path, f
  before_each(function() path, f = tmpfile() end)
  after_each(function() f:close(); os.remove(path) end)

  it("prints a line each time another 10% is crossed, and one at close", function()
    local bar = progress.bar(200, {desc = "epoch 1", file = f})
    assert.is_false(bar.tty)
    for _ = 1, 200 do bar:update() end
    bar:close()
    bar:close() -- no second final line
    local ls = lines_of(contents(path, f))
    assert.are.equal(10, #ls)
    for i, line in ipairs(ls) do
      local desc, pct, n, total, elapsed, eta, rate, post = line:match(PLAIN)
      assert.truthy(desc, "bad line: " .. line)
      assert.are.equal("epoch 1", desc)
      assert.are.equal(i * 10, tonumber(pct))
      assert.are.equal(i * 20, tonumber(n))
      assert.are.equal("200", total)
      assert.are.equal("00:00", elapsed)
      assert.truthy(eta == "00:00" or eta == "?")
      assert.is_true(tonumber(rate) > 0)
      assert.are.equal("", post)
    end
  end)

  it("prints at most one line per 10% for large updates and many small ones", function()
    local bar = progress.bar(100000, {file = f})
    for _ = 1, 100000 do bar:update(1) end
    bar:close()
    local ls = lines_of(contents(path, f))
    assert.are.equal(10, #ls)
    assert.matches("^100%% 100000/100000 %[", ls[10])
    -- one update jumping over several 10% marks prints one line
    local path2, f2 = tmpfile()
    bar = progress.bar(10, {file = f2})
    bar:update(7)
    bar:update(1)
    bar:update(2)
    bar:close()
    ls = lines_of(contents(path2, f2))
    f2:close()
    os.remove(path2)
    assert.are.equal(3, #ls)
    assert.are.same({"70% 7/10", "80% 8/10", "100% 10/10"},
      {ls[1]:match("^%d+%% %d+/%d+"), ls[2]:match("^%d+%% %d+/%d+"), ls[3]:match("^%d+%% %d+/%d+")})
  end)

  it("shows the postfix, sorted, formatted when drawn", function()
    local bar = progress.bar(4, {desc = "train", file = f})
    bar:set_postfix({loss = accel.tensor(0.5), lr = 1e-3, tag = "x"})
    bar:update(2)
    bar:set_postfix({loss = 0.123456})
    bar:update(2)
    bar:close()
    local ls = lines_of(contents(path, f))
    assert.are.equal(2, #ls)
    assert.matches("^train: 50%% 2/4 %[.*it/s, loss=0.5, lr=0.001, tag=x%]$", ls[1])
    assert.matches("^train: 100%% 4/4 %[.*it/s, loss=0.123%]$", ls[2]) -- tqdm's format_num(0.123456): '0.123'
  end)

  it("formats fractional counts, overshoot and special postfix values", function()
    local bar = progress.bar(2.5, {file = f})
    bar:update(0.5)
    bar:close()
    bar = progress.bar(4, {file = f})
    bar:set_postfix({loss = 0 / 0, big = math.huge})
    bar:update(6)
    bar:close()
    local ls = lines_of(contents(path, f))
    assert.matches("^20%% 0.5/2.5 %[00:00<00:00, ", ls[1])
    -- past the total, the count alone (tqdm: format_meter(6, 4, ...) is "6it [00:01,  6.00it/s]")
    assert.matches("^6it %[00:00, +[%d.]+it/s, big=inf, loss=%-?nan%]$", ls[2])
    assert.are.equal(2, #ls)
  end)

  -- Expected texts from tqdm 4.70.1's tqdm.format_meter(n, total, elapsed):
  -- (2, 3) " 67% 2/3", (1, 8) " 12% 1/8", (3, 8) " 38% 3/8", (1, 40) "  2% 1/40",
  -- (29, 100) " 29% 29/100", (199, 200) "100% 199/200", (5, 3) "5it [", (0, 0) "0it [00:01, ?it/s]",
  -- (3, 0) "3it [".
  it("rounds the percentage as tqdm; a zero total or a count past it shows the count alone", function()
    local function final_line(total, n)
      local p, g = tmpfile()
      local bar = progress.bar(total, {file = g})
      if n > 0 then bar:update(n) end
      bar:close()
      local ls = lines_of(contents(p, g))
      g:close()
      os.remove(p)
      return ls[#ls], bar
    end
    for _, c in ipairs({{3, 2, "67%% 2/3 "}, {8, 1, "12%% 1/8 "}, {8, 3, "38%% 3/8 "}, {40, 1, "2%% 1/40 "},
                        {100, 29, "29%% 29/100 "}, {200, 199, "100%% 199/200 "}, {3, 5, "5it %[00:00, "}, {0, 0, "0it %[00:00, %?it/s%]$"},
                        {0, 3, "3it %[00:00, "}}) do
      local line, bar = final_line(c[1], c[2])
      assert.matches("^" .. c[3], line)
      assert.are.equal(tonumber(c[3]:match("^(%d+)%%")), bar:percent())
    end
  end)

  it("honours unit, and takes a total of math.huge as unknown (as tqdm)", function()
    -- tqdm: format_meter(5, None, 1, unit="tok") is "5tok [00:01,  5.00tok/s]"
    local bar = progress.bar(math.huge, {file = f, unit = "tok"})
    assert.is_nil(bar.total)
    bar:update(accel.tensor(5)) -- a one-element tensor counts as its value
    bar:close()
    assert.matches("^5tok %[00:00, [%d.]+tok/s%]$", lines_of(contents(path, f))[1])
  end)

  it("prints only a final line for an unknown total", function()
    local bar = progress.bar(nil, {file = f})
    for _ = 1, 50 do bar:update() end
    bar:close()
    local ls = lines_of(contents(path, f))
    assert.are.equal(1, #ls)
    assert.matches("^50it %[00:00, +[%d.]+it/s%]$", ls[1])
  end)

  it("prints nothing when quiet or disabled", function()
    for _, opts in ipairs({{quiet = true, file = f}, {disable = true, file = f},
                           {disable = true, tty = true, file = f}}) do
      local bar = progress.bar(10, opts)
      for _ = 1, 10 do bar:update() end
      bar:close()
    end
    assert.are.equal("", contents(path, f))
  end)

  it("is disabled by default on a process whose local rank is not 0", function()
    local p = io.popen("readlink /proc/$PPID/exe")
    local exe = p:read("l")
    p:close()
    local script = [[local b = require('accel.progress').bar(3, {tty = true}); b:update(3); b:close()]]
    for rank, expect_output in pairs({["0"] = true, ["1"] = false}) do
      p = io.popen("LOCAL_RANK=" .. rank .. " '" .. exe .. "' -e \"" .. script .. "\" 2>&1")
      local out = p:read("a")
      p:close()
      assert.are.equal(expect_output, out:find("3/3", 1, true) ~= nil, "LOCAL_RANK=" .. rank .. ": " .. out)
    end
  end)

  -- Under `accel-lua launch` the ranks write into pipes; launch says whether
  -- its own stderr is a terminal (ACCEL_LUA_STDERR_TTY) and its width.
  it("redraws in place on the main process when launch's stderr is a terminal", function()
    local p = io.popen("readlink /proc/$PPID/exe")
    local exe = p:read("l")
    p:close()
    local script = [[local b = require('accel.progress').bar(3, {desc = 'x'}); b:update(3); b:close()]]
    local function run(vars)
      p = io.popen(vars .. " '" .. exe .. "' -e \"" .. script .. "\" 2>&1")
      local out = p:read("a")
      p:close()
      return out
    end
    local tty = "ACCEL_LUA_STDERR_TTY=1 ACCEL_LUA_COLUMNS=50 "
    local out = run(tty .. "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0")
    assert.truthy(out:find("\r", 1, true), out)
    local last = out:match("\r([^\r]*)\27%[K\n$")
    assert.truthy(last, out)
    assert.are.equal(50, utf8.len(last))           -- the launcher terminal's width
    assert.matches("^x: 100%%|", last)
    -- a local main process of another machine (rank 2): plain lines
    out = run(tty .. "OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_LOCAL_RANK=0")
    assert.is_nil(out:find("\r", 1, true), out)
    assert.matches("^x: 100%% 3/3 %[", out)
    -- not on a terminal, or another rank of machine 0: as before
    out = run("ACCEL_LUA_STDERR_TTY=0 ACCEL_LUA_COLUMNS=50 OMPI_COMM_WORLD_RANK=0")
    assert.matches("^x: 100%% 3/3 %[", out)
    assert.are.equal("", run(tty .. "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_RANK=1"))
    -- the variable names the stream: stdout's does not make stderr a terminal
    out = run("ACCEL_LUA_STDOUT_TTY=1 OMPI_COMM_WORLD_RANK=0")
    assert.is_nil(out:find("\r", 1, true), out)
  end)

  it("rejects bad arguments with clear errors at the caller's line", function()
    local ok, err = pcall(function() progress.bar(-1) end)
    assert.is_false(ok)
    assert.matches("progress_spec.lua:%d+: progress.bar: total must be a non%-negative number or nil, got %-1", err)
    ok, err = pcall(function() progress.bar(3, {file = 42}) end)
    assert.matches("progress.bar: file must be a Lua file", err, 1, true)
    ok, err = pcall(function() progress.wrap(42) end)
    assert.matches("progress.wrap: expected an iterator function, a loader", err, 1, true)
  end)

  it("refuses unknown options, tqdm's options it lacks and values of the wrong type, naming them", function()
    local function err_of(fn)
      local ok, err = pcall(fn)
      assert.is_false(ok)
      return err
    end
    local at = "progress_spec.lua:%d+: "
    assert.matches(at .. "progress.bar: unknown option descr %(known: ascii, desc, disable, file, mininterval, ncols, "
      .. "quiet, tty, unit%)", err_of(function() progress.bar(3, {descr = "x"}) end))
    assert.matches(at .. "progress.bar: tqdm's option leave is not supported",
      err_of(function() progress.bar(3, {leave = false}) end))
    assert.matches(at .. "progress.wrap: tqdm's option unit_scale is not supported",
      err_of(function() progress.wrap({1}, nil, {unit_scale = true}) end))
    assert.matches(at .. "progress.bar: option desc must be a string, got table",
      err_of(function() progress.bar(3, {desc = {}}) end))
    assert.matches(at .. "progress.bar: option mininterval must be a number, got string",
      err_of(function() progress.bar(3, {mininterval = "x"}) end))
    assert.matches(at .. "progress.bar: option mininterval must be a non%-negative number",
      err_of(function() progress.bar(3, {mininterval = -1}) end))
    assert.matches(at .. "progress.bar: option ncols must be a number, got string",
      err_of(function() progress.bar(3, {ncols = "x", tty = true}) end))
    assert.matches(at .. "progress.bar: option ncols must be a non%-negative integer, got 2.5",
      err_of(function() progress.bar(3, {ncols = 2.5}) end))
    assert.matches(at .. "progress.bar: total must be a non%-negative number or nil, got %-?nan",
      err_of(function() progress.bar(0 / 0) end))
    local bar = progress.bar(3, {quiet = true})
    assert.matches(at .. 'update: expected a finite number or a one%-element tensor, got string',
      err_of(function() bar:update("x") end))
    assert.matches(at .. 'update: expected a finite number or a one%-element tensor, got %-?nan',
      err_of(function() bar:update(0 / 0) end))
    assert.matches(at .. 'update: expected a finite number or a one%-element tensor, got 2%-element tensor',
      err_of(function() bar:update(accel.tensor({1, 2})) end))
    assert.matches(at .. "set_description: expected a string or nil, got number",
      err_of(function() bar:set_description(5) end))
    assert.are.equal(0, bar.n)
  end)
end)

describe("progress.bar in terminal mode", function()
  local path, f
  before_each(function() path, f = tmpfile() end)
  after_each(function() f:close(); os.remove(path) end)

  it("redraws one line in place, at most every mininterval", function()
    local bar = progress.bar(20000, {desc = "fit", file = f, tty = true, ncols = 100})
    local t0 = accel.clock()
    for i = 1, 20000 do
      bar:update()
      if i % 2000 == 0 then busy_wait(0.02) end
    end
    local elapsed = accel.clock() - t0
    bar:close()
    local s = contents(path, f)
    local _, redraws = s:gsub("\r", "")
    assert.is_true(redraws >= 2)
    assert.is_true(redraws <= math.floor(elapsed / 0.1) + 3, redraws .. " redraws in " .. elapsed .. " s")
    assert.are.equal(1, select(2, s:gsub("\n", ""))) -- one line, ended at close
    local last = s:match("\r([^\r]*)\n$")
    assert.matches("^fit: 100%%|[^|]+| 20000/20000 %[%d%d:%d%d<00:00, +[%d.]+it/s%]\27%[K$", last)
    assert.is_nil(last:match("|([^|]+)|"):find(" ", 1, true)) -- a full bar
    local first = s:match("^\r([^\r]*)")
    assert.matches("^fit:   0%%| +| 0/20000 %[00:00<%?, %?it/s%]\27%[K$", first)
  end)

  it("draws partial blocks and fits the width", function()
    local bar = progress.bar(16, {file = f, tty = true, ncols = 60, mininterval = 0})
    bar:update(5)
    bar:close()
    local s = contents(path, f)
    for line in s:gmatch("\r([^\r\n]*)") do
      local visible = line:gsub("\27%[K$", "")
      assert.is_true(utf8.len(visible) <= 60, visible)
    end
    -- 5/16 of the bar: full blocks, one partial block (eighths), then spaces
    local bar_text = s:match(" 31%%|([^|]+)| 5/16 ")
    local width = utf8.len(bar_text)
    local full = select(2, bar_text:gsub("█", ""))
    assert.are.equal(math.floor(5 / 16 * width), full)
    local eighths = math.floor(5 / 16 * width * 8) % 8
    local partial = ({"▏", "▎", "▍", "▌", "▋", "▊", "▉"})[eighths]
    assert.are.equal(string.rep("█", full) .. (partial or " ") .. string.rep(" ", width - full - 1), bar_text)
    local path2, f2 = tmpfile()
    bar = progress.bar(4, {file = f2, tty = true, ascii = true, ncols = 50, mininterval = 0})
    bar:update(2)
    bar:close()
    local s2 = contents(path2, f2)
    f2:close()
    os.remove(path2)
    assert.matches(" 50%%|#+ +| 2/4 ", s2)
  end)

  it("draws no bar with ncols = 0 (tqdm: \"  0% 0/10 [00:00<?, ?it/s]\")", function()
    local bar = progress.bar(10, {file = f, tty = true, ncols = 0})
    bar:close()
    assert.matches("\r  0%% 0/10 %[00:00<%?, %?it/s%]\27%[K\n$", contents(path, f))
  end)

  it("costs little per update", function()
    local bar = progress.bar(1000000, {file = f, tty = true})
    local t0 = accel.clock()
    for _ = 1, 200000 do bar:update() end
    local per = (accel.clock() - t0) / 200000
    bar:close()
    assert.is_true(per < 5e-6, per * 1e6 .. " us per update")
  end)
end)

describe("progress.wrap", function()
  local path, f
  before_each(function() path, f = tmpfile() end)
  after_each(function() f:close(); os.remove(path) end)

  -- a stateful iterator yielding (i, nil, i * i) for i = 1..n
  local function triples(n)
    local i = 0
    return function()
      i = i + 1
      if i <= n then return i, nil, i * i end
    end
  end

  it("yields exactly what the wrapped iterator yields and counts the items", function()
    local got = {}
    for a, b, c in progress.wrap(triples(25), 25, {file = f, desc = "w"}) do
      got[#got + 1] = {a, b, c}
    end
    assert.are.equal(25, #got)
    for i = 1, 25 do assert.are.same({i, nil, i * i}, got[i]) end
    local ls = lines_of(contents(path, f))
    assert.matches("^w: 100%% 25/25 %[", ls[#ls])
  end)

  it("passes the control variable like a generic for (stateless iterators)", function()
    local keys = {}
    local t = {10, 20, 30}
    local inext = ipairs(t) -- ipairs' step function, called with (nil, control) as a for loop would
    local function step(_, i) return inext(t, i or 0) end
    for i, v in progress.wrap(step, 3, {file = f}) do keys[#keys + 1] = i .. "=" .. v end
    assert.are.same({"1=10", "2=20", "3=30"}, keys)
  end)

  it("takes a list or a loader-like object, using # as the total", function()
    local got = {}
    for v in progress.wrap({"a", "b", "c"}, nil, {file = f}) do got[#got + 1] = v end
    assert.are.same({"a", "b", "c"}, got)
    local loader = setmetatable({}, {__len = function() return 4 end})
    function loader:iter() return triples(4) end
    local sum = 0
    for a, _, c in progress.wrap(loader, nil, {file = f}) do sum = sum + a + c end
    assert.are.equal(1 + 2 + 3 + 4 + 1 + 4 + 9 + 16, sum)
    local ls = lines_of(contents(path, f))
    assert.are.equal(3 + 4, #ls) -- 33%, 67%, 100% 3/3, then 25%, 50%, 75%, 100% 4/4
    assert.matches("^100%% 3/3 %[", ls[3])
    assert.matches("^100%% 4/4 %[", ls[7])
  end)

  it("closes the bar when the loop breaks (Lua 5.4 closing value)", function()
    local it, _, _, bar = progress.wrap(triples(100), 100, {file = f, tty = true})
    for a in it do
      if a == 30 then break end
    end
    assert.is_nil(bar.closed) -- `it` alone is not a closing for-loop
    for a in progress.wrap(triples(100), 100, {file = f, tty = true, desc = "b"}) do
      if a == 30 then break end
    end
    local s = contents(path, f)
    assert.matches("\rb:  29%%|[^\r]*| 29/100 [^\r]*\27%[K\n$", s)
    bar:close()
  end)
end)
