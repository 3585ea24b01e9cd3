-- tracking_spec.lua: accel.tracking (jsonl, csv, tensorboard trackers) and
-- the CRC-32C behind TFRecord framing. The event files are checked three
-- ways: framing and protobuf decoded here (with an independent decoder),
-- and read back by TensorBoard's own EventAccumulator (PyPI tensorboard in
-- build/pyenv, made by scripts/setup-test-python.sh).
local accel = require("accel")
local tracking = require("accel.tracking")
local C = accel._C
local support = dofile("tests/lua/support.lua")
local shell_quote, tmpdir, rmtree = support.shell_quote, support.tmpdir, support.remove_tree
local read_file, f32 = support.read_file, support.f32

-- The newline-terminated lines of the file at path.
local function lines(path) return support.lines_of(read_file(path)) end

-- The repository root: two folders above this spec.
local ROOT = (function()
  local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
  local p = io.popen("cd " .. shell_quote(here .. "/../..") .. " && pwd")
  local root = p:read("l")
  p:close()
  return root
end)()
local SPEC = "tracking_spec.lua"

-- The accel-lua program running this spec (the parent of a popen'd shell).
local function accel_lua()
  local p = io.popen("readlink /proc/$PPID/exe")
  local exe = p:read("l")
  p:close()
  return exe
end

-- A small JSON decoder (independent of the tracker's encoder): objects,
-- arrays, strings with escapes, numbers, true/false/null, and Python's
-- NaN / Infinity / -Infinity.
local function json_decode(s)
  local pos = 1
  local value
  local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
  local function str()
    local out = {}
    pos = pos + 1
    while true do
      local c = s:sub(pos, pos)
      if c == '"' then pos = pos + 1; return table.concat(out) end
      if c == "\\" then
        local e = s:sub(pos + 1, pos + 1)
        if e == "u" then
          out[#out + 1] = utf8.char(tonumber(s:sub(pos + 2, pos + 5), 16))
          pos = pos + 6
        else
          out[#out + 1] = ({n = "\n", t = "\t", r = "\r", b = "\b", f = "\f"})[e] or e
          pos = pos + 2
        end
      else
        assert(c ~= "", "unterminated string")
        out[#out + 1] = c
        pos = pos + 1
      end
    end
  end
  function value()
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      local obj, keys = {}, {}
      pos = pos + 1
      ws()
      if s:sub(pos, pos) == "}" then pos = pos + 1; return obj, keys end
      while true do
        ws()
        local k = str()
        ws()
        assert(s:sub(pos, pos) == ":", "expected : at " .. pos)
        pos = pos + 1
        obj[k] = value()
        keys[#keys + 1] = k
        ws()
        local d = s:sub(pos, pos)
        pos = pos + 1
        if d == "}" then return obj, keys end
        assert(d == ",", "expected , or } at " .. pos)
      end
    elseif c == "[" then
      local arr = {}
      pos = pos + 1
      ws()
      if s:sub(pos, pos) == "]" then pos = pos + 1; return arr end
      while true do
        arr[#arr + 1] = value()
        ws()
        local d = s:sub(pos, pos)
        pos = pos + 1
        if d == "]" then return arr end
        assert(d == ",", "expected , or ]")
      end
    elseif c == '"' then
      return str()
    end
    for word, v in pairs({["true"] = true, ["false"] = false, ["null"] = "null", ["NaN"] = 0 / 0,
                          ["Infinity"] = math.huge, ["-Infinity"] = -math.huge}) do
      if s:sub(pos, pos + #word - 1) == word then
        pos = pos + #word
        return v
      end
    end
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
    assert(num and #num > 0, "bad JSON at " .. pos .. ": " .. s)
    pos = pos + #num
    return math.tointeger(tonumber(num)) or tonumber(num)
  end
  local v, keys = value()
  ws()
  assert(pos == #s + 1, "trailing characters in JSON: " .. s)
  return v, keys
end

-- CSV rows as lists of cells (RFC 4180: quoted cells may hold , "" and newlines).
local function csv_rows(path)
  local text, rows, row, pos = read_file(path), {}, {}, 1
  while pos <= #text do
    local cell
    if text:sub(pos, pos) == '"' then
      local buf = {}
      pos = pos + 1
      while true do
        local e = assert(text:find('"', pos, true), "unterminated quoted cell")
        buf[#buf + 1] = text:sub(pos, e - 1)
        pos = e + 1
        if text:sub(pos, pos) ~= '"' then break end
        buf[#buf + 1] = '"'
        pos = pos + 1
      end
      cell = table.concat(buf)
    else
      local e = text:find("[,\n]", pos) or #text + 1
      cell = text:sub(pos, e - 1)
      pos = e
    end
    row[#row + 1] = cell
    local sep = text:sub(pos, pos)
    pos = pos + 1
    if sep == "\n" or sep == "" then
      rows[#rows + 1] = row
      row = {}
    else
      assert(sep == ",", "expected , or newline after a cell")
    end
  end
  return rows
end

-- TFRecord framing and protobuf, decoded with Lua 5.4's integers and bit
-- operators (independent of the library's encoder).
local function mask(crc) return (((crc >> 15) | (crc << 17)) + 0xa282ead8) & 0xffffffff end

local function read_records(path)
  local s, pos, records = read_file(path), 1, {}
  while pos <= #s do
    assert(#s - pos + 1 >= 12, "truncated record header")
    local len_bytes = s:sub(pos, pos + 7)
    local len, crc_len = string.unpack("<I8", len_bytes), string.unpack("<I4", s, pos + 8)
    assert.are.equal(mask(C.crc32c(len_bytes)), crc_len)
    local data = s:sub(pos + 12, pos + 11 + len)
    assert.are.equal(len, #data)
    local crc_data = string.unpack("<I4", s, pos + 12 + len)
    assert.are.equal(mask(C.crc32c(data)), crc_data)
    records[#records + 1] = data
    pos = pos + 16 + len
  end
  assert.are.equal(#s + 1, pos)
  return records
end

-- protobuf message -> {[field] = {values...}}; varints as integers, fixed64
-- and fixed32 as raw 8 / 4 byte strings, length-delimited as strings.
local function pb_decode(s)
  local fields, pos = {}, 1
  local function varint()
    local n, shift = 0, 0
    while true do
      local b = s:byte(pos)
      pos = pos + 1
      n = n | ((b & 0x7f) << shift)
      if b < 0x80 then return n end
      shift = shift + 7
    end
  end
  while pos <= #s do
    local key = varint()
    local field, wire = key >> 3, key & 7
    local v
    if wire == 0 then v = varint()
    elseif wire == 1 then v = s:sub(pos, pos + 7); pos = pos + 8
    elseif wire == 5 then v = s:sub(pos, pos + 3); pos = pos + 4
    elseif wire == 2 then local n = varint(); v = s:sub(pos, pos + n - 1); pos = pos + n
    else error("unexpected wire type " .. wire) end
    fields[field] = fields[field] or {}
    table.insert(fields[field], v)
  end
  return fields
end

-- Event record -> {wall_time=, step=, file_version=, values={{tag, simple_value|text, plugin}}}
local function decode_event(data)
  local f = pb_decode(data)
  local ev = {wall_time = f[1] and string.unpack("<d", f[1][1]), step = f[2] and f[2][1],
              file_version = f[3] and f[3][1], values = {}}
  if f[5] then
    for _, v in ipairs(pb_decode(f[5][1])[1] or {}) do
      local vf = pb_decode(v)
      local item = {tag = vf[1][1]}
      if vf[2] then item.simple_value = string.unpack("<f", vf[2][1]) end
      if vf[9] then item.plugin = pb_decode(pb_decode(vf[9][1])[1][1])[1][1] end
      if vf[8] then
        local t = pb_decode(vf[8][1])
        item.dtype = t[1][1]
        item.text = t[8][1]
        item.shape = {} -- TensorShapeProto: dim 2 (repeated), Dim.size 1
        for _, dim in ipairs(t[2] and pb_decode(t[2][1])[2] or {}) do item.shape[#item.shape + 1] = pb_decode(dim)[1][1] end
      end
      ev.values[#ev.values + 1] = item
    end
  end
  return ev
end

local function event_file(dir)
  local p = io.popen("ls " .. shell_quote(dir))
  local found = {}
  for name in p:lines() do
    if name:find("^events%.out%.tfevents%.") then found[#found + 1] = dir .. "/" .. name end
  end
  p:close()
  return found
end

describe("crc32c", function()
  it("matches the published CRC-32C check values", function()
    assert.are.equal(0xE3069283, C.crc32c("123456789"))
    assert.are.equal(0, C.crc32c(""))
    -- RFC 3720 (iSCSI) B.4 test vectors
    assert.are.equal(0x8A9136AA, C.crc32c(string.rep("\0", 32)))
    assert.are.equal(0x62A8AB43, C.crc32c(string.rep("\255", 32)))
    local inc, dec = {}, {}
    for i = 0, 31 do inc[#inc + 1] = string.char(i); dec[#dec + 1] = string.char(31 - i) end
    assert.are.equal(0x46DD794E, C.crc32c(table.concat(inc)))
    assert.are.equal(0x113FDB5C, C.crc32c(table.concat(dec)))
  end)

  it("continues from a previous crc and masks as TFRecord does", function()
    local a, b = "hello, ", "tensorboard"
    assert.are.equal(C.crc32c(a .. b), C.crc32c(b, C.crc32c(a)))
    for _, s in ipairs({"", "a", "123456789", string.rep("x", 1000)}) do
      assert.are.equal(mask(C.crc32c(s)), C.masked_crc32c(s))
    end
  end)
end)

describe("tracking's C helpers", function()
  it("mkdirs creates parents, accepts existing folders and refuses files", function()
    local d = tmpdir()
    finally(function() rmtree(d) end)
    C.mkdirs(d .. "/a/b//c/")
    C.mkdirs(d .. "/a/b") -- exists: fine
    assert.truthy(io.open(d .. "/a/b/c"))
    local f = assert(io.open(d .. "/file", "w"))
    f:close()
    local ok, err = pcall(C.mkdirs, d .. "/file/sub")
    assert.is_false(ok)
    assert.matches("mkdirs: cannot create directory '" .. d:gsub("%p", "%%%0") .. "/file': a file of that name exists",
      err)
    ok, err = pcall(tracking.create, "jsonl", {project_dir = d .. "/file"})
    assert.is_false(ok)
    assert.matches("a file of that name exists", err, 1, true)
  end)

  it("fsync, isatty, terminal_width, wall_time and hostname", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write("x")
    C.fsync(f)
    assert.is_false(C.isatty(f))
    assert.is_nil(C.terminal_width(f))
    f:close()
    local ok, err = pcall(C.fsync, f)
    assert.is_false(ok)
    assert.matches("fsync: the file is closed", err, 1, true)
    ok, err = pcall(C.isatty, "stderr")
    assert.matches("isatty: expected an open Lua file, got string", err, 1, true)
    os.remove(path)
    assert.are.equal("boolean", type(C.isatty(io.stderr)))
    assert.is_true(math.abs(C.wall_time() - os.time()) <= 2)
    assert.is_true(#C.hostname() > 0)
  end)
end)

describe("tracking.create", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() rmtree(dir) end)

  it("rejects unknown tracker names, listing the valid ones, at the caller's line", function()
    local ok, err = pcall(tracking.create, "wandb", {project_dir = dir})
    assert.is_false(ok)
    assert.matches('tracker "wandb" is not available in accel-lua', err, 1, true)
    assert.matches('"jsonl", "csv", "tensorboard", "mlflow", "all"', err, 1, true)
    ok, err = pcall(function() tracking.create({"jsonl", "bogus"}, {project_dir = dir}) end)
    assert.is_false(ok)
    assert.matches(SPEC .. ":%d+: tracking: unknown tracker \"bogus\"", err)
  end)

  it("puts files in project_dir/run_name, creating folders; 'all' makes the three", function()
    local tr = tracking.create("all", {project_dir = dir .. "/a/b", run_name = "run1"})
    assert.are.equal(dir .. "/a/b/run1", tr.run_dir)
    assert.are.equal(3, #tr.trackers)
    tr:log({x = 1}, 0)
    tr:finish()
    assert.truthy(io.open(dir .. "/a/b/run1/metrics.jsonl"))
    assert.truthy(io.open(dir .. "/a/b/run1/metrics.csv"))
    assert.are.equal(1, #event_file(dir .. "/a/b/run1"))
  end)

  it("gives clear errors for bad values, steps and use after finish", function()
    local tr = tracking.create("jsonl", {project_dir = dir})
    local err_of = support.errmsg
    assert.matches(SPEC .. ':%d+: log: value of "loss" must be a number, a string or a one%-element tensor, got table',
      err_of(function() tr:log({loss = {}}) end))
    assert.matches('value of "w" must be a one%-element tensor, got 4 elements',
      err_of(function() tr:log({w = accel.zeros(4)}) end))
    assert.matches("step must be a non%-negative integer, got %-1",
      err_of(function() tr:log({a = 1}, -1) end))
    assert.matches("step must be a non%-negative integer, got 1.5",
      err_of(function() tr:log({a = 1}, 1.5) end))
    assert.matches('"_time" is a reserved name', err_of(function() tr:log({_time = 1}) end))
    -- Accelerate's trackers take a "step" metric (its examples log {..., step = completed_steps}): here it is the
    -- jsonl / csv step column, so it must agree with the step
    tr:log({loss = 0.5, step = 7})
    tr:log({loss = 0.25, step = 8}, 8)
    local rows = support.lines_of(support.read_file(tr.run_dir .. "/metrics.jsonl"))
    assert.matches('^{"step": 7, "loss": 0.5', rows[#rows - 1])
    assert.matches('^{"step": 8, "loss": 0.25', rows[#rows])
    assert.matches('the metric "step" %(9%) differs from the step %(10%)', err_of(function() tr:log({step = 9}, 10) end))
    assert.matches('the metric "step" is the step column', err_of(function() tr:log({step = 1.5}) end))
    -- torch's SummaryWriter.add_scalar(True), as Accelerate logs a bool: 1.0
    tr:log({flag = true, off = false}, 5)
    local last = support.lines_of(support.read_file(tr.run_dir .. "/metrics.jsonl"))
    assert.matches('"flag": 1', last[#last])
    assert.matches('"off": 0', last[#last])
    assert.matches("metric names must be strings", err_of(function() tr:log({1, 2}) end))
    assert.matches(SPEC .. ':%d+: log: the value of "name" is not valid UTF%-8 %(byte 4%)',
      err_of(function() tr:log({name = "caf\233"}) end))
    assert.matches('log: the name of "x\255" is not valid UTF%-8', err_of(function() tr:log({["x\255"] = 1}) end))
    tr:finish()
    tr:finish() -- twice is fine
    assert.matches("the tracker has finished", err_of(function() tr:log({a = 1}) end))
  end)
end)

describe("tracking through the Accelerator", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() rmtree(dir) end)

  it("a value no tracker can write is refused before any tracker writes", function()
    local a = accel.Accelerator{log_with = {"csv", "tensorboard", "jsonl"}, project_dir = dir}
    a:init_trackers("r")
    assert.matches(SPEC .. ':%d+: log: the value of "name" is not valid UTF%-8',
      support.errmsg(function() a:log({loss = 1.0, name = "caf\233"}, 0) end))
    a:end_training()
    assert.are.equal("", read_file(dir .. "/r/metrics.jsonl"))
    assert.are.equal(1, #csv_rows(dir .. "/r/metrics.csv")) -- the header only
    assert.are.equal(1, #read_records(event_file(dir .. "/r")[1])) -- file_version only
  end)

  it("config: NaN and infinities as the metrics spell them; a table holding itself is an error", function()
    local a = accel.Accelerator{log_with = {"jsonl", "tensorboard"}, project_dir = dir}
    a:init_trackers("r", {nan = 0 / 0, inf = math.huge, ninf = -math.huge})
    a:end_training()
    local text = read_file(dir .. "/r/config.json")
    assert.is_nil(text:find("-nan", 1, true))
    assert.are.same({nan = "NaN", inf = "Infinity", ninf = "-Infinity"}, json_decode(text))
    local tb = decode_event(read_records(event_file(dir .. "/r")[1])[2]).values[1].text
    assert.are.same({nan = "NaN", inf = "Infinity", ninf = "-Infinity"}, json_decode(tb))
    local cyclic = {lr = 1, sub = {}}
    cyclic.sub.back = cyclic
    local b = accel.Accelerator{log_with = "jsonl", project_dir = dir}
    -- Python's json.dumps: "ValueError: Circular reference detected"
    assert.matches(SPEC .. ":%d+: store_init_configuration: circular reference detected: config.sub.back is config itself",
      support.errmsg(function() b:init_trackers("c", cyclic) end))
  end)
end)

describe("jsonl tracker", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() rmtree(dir) end)

  it("writes one JSON object per log call: step, sorted metrics, _time", function()
    local t0 = os.time()
    local tr = tracking.create("jsonl", {project_dir = dir, run_name = "r"})
    local acc = accel.tensor(0.1) -- float32
    tr:log({loss = 0.25, acc = acc, lr = 1e-3}, 10)
    tr:log({loss = 1 / 3, note = 'say "hi"\n'}, 20)
    tr:log({loss = 0 / 0, big = math.huge, small = -math.huge})
    tr:finish()
    local ls = lines(dir .. "/r/metrics.jsonl")
    assert.are.equal(3, #ls)
    local o, keys = json_decode(ls[1])
    assert.are.same({"step", "acc", "loss", "lr", "_time"}, keys)
    assert.are.equal(10, o.step)
    assert.are.equal(0.25, o.loss)
    assert.are.equal(acc:item(), o.acc)
    assert.are.equal(f32(0.1), o.acc)
    assert.are.equal(1e-3, o.lr)
    assert.is_true(math.abs(o._time - t0) <= 5)
    o = json_decode(ls[2])
    assert.are.equal(20, o.step)
    assert.are.equal(1 / 3, o.loss) -- round-trips exactly
    assert.are.equal('say "hi"\n', o.note)
    o = json_decode(ls[3])
    assert.are.equal(21, o.step) -- previous step + 1
    assert.is_true(o.loss ~= o.loss)
    assert.are.equal(math.huge, o.big)
    assert.are.equal(-math.huge, o.small)
  end)

  it("numbers steps from 0 when none are given", function()
    local tr = tracking.create("jsonl", {project_dir = dir})
    for i = 1, 3 do tr:log({i = i}) end
    tr:finish()
    for i, line in ipairs(lines(dir .. "/metrics.jsonl")) do
      local o = json_decode(line)
      assert.are.equal(i - 1, o.step)
      assert.are.equal(i, o.i)
    end
  end)

  it("writes the configuration to config.json", function()
    tracking.create("jsonl", {project_dir = dir, run_name = "r",
      config = {lr = 3e-4, layers = {784, 256, 10}, name = "mlp", amp = false, sched = {T_max = 5}}}):finish()
    local cfg = json_decode(read_file(dir .. "/r/config.json"))
    assert.are.same({lr = 3e-4, layers = {784, 256, 10}, name = "mlp", amp = false, sched = {T_max = 5}}, cfg)
  end)

  it("flushes every log call, so a SIGKILLed process loses nothing logged", function()
    local script = dir .. "/crash.lua"
    local f = assert(io.open(script, "w"))
    f:write(([[
      local tr = require("accel.tracking").create("all", {project_dir = %q})
      for s = 1, 3 do tr:log({loss = s / 4}, s) end
      os.execute("kill -KILL $PPID")   -- the shell's parent: this accel-lua
      os.exit(3)
    ]]):format(dir))
    f:close()
    local ok, how, code = os.execute(shell_quote(accel_lua()) .. " " .. shell_quote(script) .. " 2>/dev/null")
    assert.is_falsy(ok)
    assert.is_true((how == "signal" and code == 9) or (how == "exit" and code == 128 + 9), how .. " " .. code)
    local ls = lines(dir .. "/metrics.jsonl")
    assert.are.equal(3, #ls)
    assert.are.equal(0.75, json_decode(ls[3]).loss)
    assert.are.equal(4, #csv_rows(dir .. "/metrics.csv"))
    local records = read_records(event_file(dir)[1])
    assert.are.equal(4, #records)
    assert.are.equal(f32(0.75), decode_event(records[4]).values[1].simple_value)
  end)
end)

describe("csv tracker", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() rmtree(dir) end)

  it("writes a header of the keys and one row per log call", function()
    local tr = tracking.create("csv", {project_dir = dir, run_name = "r", config = {bs = 32}})
    tr:log({loss = 0.5, acc = accel.tensor(0.75)}, 1)
    tr:log({loss = 0.25}, 2) -- acc missing: empty cell
    tr:log({loss = 0.125, acc = 1, note = 'a,b "c"'}, 3)
    tr:finish()
    local rows = csv_rows(dir .. "/r/metrics.csv")
    assert.are.same({"step", "_time", "acc", "loss", "note"}, rows[1])
    assert.are.equal(4, #rows)
    assert.are.same({"1", "0.75", "0.5", ""}, {rows[2][1], rows[2][3], rows[2][4], rows[2][5]})
    assert.are.same({"2", "", "0.25", ""}, {rows[3][1], rows[3][3], rows[3][4], rows[3][5]})
    assert.are.same({"3", "1", "0.125", 'a,b "c"'}, {rows[4][1], rows[4][3], rows[4][4], rows[4][5]})
    for i = 2, 4 do
      assert.are.equal(5, #rows[i])
      assert.is_true(math.abs(tonumber(rows[i][2]) - os.time()) <= 5)
    end
    assert.are.same({bs = 32}, json_decode(read_file(dir .. "/r/config.json")))
  end)

  it("adds a column for a key first seen later, padding the earlier rows", function()
    local tr = tracking.create("csv", {project_dir = dir})
    tr:log({loss = 1.5, note = 'two\n"lines", here'}, 0)
    tr:log({loss = 1.25}, 1)
    tr:log({loss = 1, val_loss = 2, lr = 0.1}, 2)
    tr:log({loss = 0.5}, 3)
    tr:finish()
    local rows = csv_rows(dir .. "/metrics.csv")
    assert.are.same({"step", "_time", "loss", "note", "lr", "val_loss"}, rows[1])
    assert.are.equal(5, #rows)
    for i = 2, 5 do assert.are.equal(6, #rows[i]) end
    assert.are.same({"0", "1.5", 'two\n"lines", here', "", ""}, {rows[2][1], rows[2][3], rows[2][4], rows[2][5], rows[2][6]})
    assert.are.same({"2", "1", "", "0.1", "2"}, {rows[4][1], rows[4][3], rows[4][4], rows[4][5], rows[4][6]})
    assert.are.same({"3", "0.5", "", "", ""}, {rows[5][1], rows[5][3], rows[5][4], rows[5][5], rows[5][6]})
  end)

  it("continues an existing file (a resumed run), keeping its columns", function()
    local tr = tracking.create("csv", {project_dir = dir})
    tr:log({b = 1, a = 2}, 0)
    tr:finish()
    tr = tracking.create("csv", {project_dir = dir})
    tr:log({a = 3, c = 4}, 1)
    tr:finish()
    local rows = csv_rows(dir .. "/metrics.csv")
    assert.are.same({"step", "_time", "a", "b", "c"}, rows[1])
    assert.are.same({"0", "2", "1", ""}, {rows[2][1], rows[2][3], rows[2][4], rows[2][5]})
    assert.are.same({"1", "3", "", "4"}, {rows[3][1], rows[3][3], rows[3][4], rows[3][5]})
    C.mkdirs(dir .. "/sub")
    local f = assert(io.open(dir .. "/sub/metrics.csv", "w"))
    f:write("x,y\n1,2\n")
    f:close()
    local ok, err = pcall(tracking.create, "csv", {project_dir = dir, run_name = "sub"})
    assert.is_false(ok)
    assert.matches("was not written by the csv tracker", err, 1, true)
  end)

  it("reopens a file whose header has quoted names holding newlines, commas and quotes", function()
    local names = {"new\ncol", "a,b", 'say "x"', "cr\r\nlf"}
    local tr = tracking.create("csv", {project_dir = dir})
    tr:log({[names[1]] = 1, [names[2]] = 2, [names[3]] = 3, [names[4]] = 4}, 0)
    tr:finish()
    tr = tracking.create("csv", {project_dir = dir})
    tr:log({[names[1]] = 5, [names[3]] = 6, later = 7}, 1)
    tr:finish()
    local rows = csv_rows(dir .. "/metrics.csv") -- an RFC 4180 reader (above)
    assert.are.same({"step", "_time", "a,b", "cr\r\nlf", "new\ncol", 'say "x"', "later"}, rows[1])
    assert.are.equal(3, #rows)
    assert.are.same({"0", "2", "4", "1", "3", ""}, {rows[2][1], rows[2][3], rows[2][4], rows[2][5], rows[2][6], rows[2][7]})
    assert.are.same({"1", "", "", "5", "6", "7"}, {rows[3][1], rows[3][3], rows[3][4], rows[3][5], rows[3][6], rows[3][7]})
    C.mkdirs(dir .. "/open")
    local f = assert(io.open(dir .. "/open/metrics.csv", "w"))
    f:write('step,_time,"unclosed\n1,2\n')
    f:close()
    local ok, err = pcall(tracking.create, "csv", {project_dir = dir, run_name = "open"})
    assert.is_false(ok)
    assert.matches('was not written by the csv tracker (header: step,_time,"unclosed)', err, 1, true)
  end)
end)

describe("tensorboard tracker", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() rmtree(dir) end)

  it("writes TFRecord-framed Events: file_version first, then one Event per log", function()
    local t0 = os.time()
    local tr = tracking.create("tensorboard", {project_dir = dir, run_name = "tb", config = {lr = 0.5}})
    tr:log({loss = 0.1, acc = accel.tensor(0.9, {dtype = accel.float64})}, 7)
    tr:log({loss = 1e-30, note = "text"}, 2 ^ 40)
    tr:finish()
    local files = event_file(dir .. "/tb")
    assert.are.equal(1, #files)
    local stamp, host = files[1]:match("events%.out%.tfevents%.(%d+)%.(.+)$")
    assert.is_true(math.abs(tonumber(stamp) - t0) <= 5)
    assert.are.equal(C.hostname(), host)

    local records = read_records(files[1])
    assert.are.equal(4, #records)
    local first = decode_event(records[1])
    assert.are.equal("brain.Event:2", first.file_version)
    assert.is_nil(first.step)
    assert.is_true(math.abs(first.wall_time - t0) <= 5)

    local cfg = decode_event(records[2])
    assert.are.equal(0, cfg.step)
    assert.are.same({tag = "config", plugin = "text", dtype = 7, shape = {1}}, {tag = cfg.values[1].tag,
      plugin = cfg.values[1].plugin, dtype = cfg.values[1].dtype, shape = cfg.values[1].shape})
    assert.are.same({lr = 0.5}, json_decode(cfg.values[1].text))

    local e1 = decode_event(records[3])
    assert.are.equal(7, e1.step)
    assert.is_true(math.abs(e1.wall_time - t0) <= 5)
    assert.are.same({{tag = "acc", simple_value = f32(0.9)}, {tag = "loss", simple_value = f32(0.1)}}, e1.values)
    local e2 = decode_event(records[4])
    assert.are.equal(2 ^ 40, e2.step)
    assert.are.same({tag = "loss", simple_value = f32(1e-30)}, e2.values[1])
    -- as SummaryWriter.add_text("note", "text", step) (torch.utils.tensorboard.summary.text): tag
    -- "note/text_summary", a DT_STRING tensor of shape [1], plugin "text"
    assert.are.same({tag = "note/text_summary", plugin = "text", dtype = 7, text = "text", shape = {1}}, e2.values[2])
  end)

  it("does not overwrite an event file of the same second", function()
    local a = tracking.create("tensorboard", {project_dir = dir})
    local b = tracking.create("tensorboard", {project_dir = dir})
    assert.are_not.equal(a.trackers[1].path, b.trackers[1].path)
    a:finish()
    b:finish()
    assert.are.equal(2, #event_file(dir))
  end)
end)

describe("TensorBoard's own event reader", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() rmtree(dir) end)

  it("reads the scalars back (PyPI tensorboard's event readers)", function()
    local setup = shell_quote(ROOT .. "/scripts/setup-test-python.sh") .. " tensorboard"
    assert.is_true(os.execute(setup .. " >&2"), "scripts/setup-test-python.sh failed")
    local python = (os.getenv("ACCEL_PYENV") or ROOT .. "/build/pyenv") .. "/bin/python"

    local tr = tracking.create("all", {project_dir = dir, run_name = "mlp", config = {lr = 1e-3, opt = "AdamW"}})
    local expected = {}
    for step = 0, 49 do
      local loss = 2.5 * math.exp(-step / 10) + 0.01 * math.sin(step)
      local lr = 1e-3 * 0.5 * (1 + math.cos(math.pi * step / 50))
      tr:log({loss = accel.tensor(loss), lr = lr, ["eval/acc"] = step / 49}, step * 10)
      expected[#expected + 1] = {"loss", step * 10, f32(accel.tensor(loss):item())}
      expected[#expected + 1] = {"lr", step * 10, f32(lr)}
      expected[#expected + 1] = {"eval/acc", step * 10, f32(step / 49)}
    end
    tr:finish()

    local p = io.popen(shell_quote(python) .. " " .. shell_quote(ROOT .. "/scripts/read-tb-events.py") .. " " ..
      shell_quote(dir .. "/mlp") .. " 2>&1")
    local out = p:read("a")
    p:close()
    local got, served, texts, classic_texts, version = {}, {}, {}, {}, nil
    for line in out:gmatch("[^\n]+") do
      local f = {}
      for field in (line .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = field end
      if f[1] == "scalar" then got[f[2] .. "@" .. f[3]] = tonumber(f[4])
      elseif f[1] == "served" and f[2] == "scalars" then served[f[3] .. "@" .. f[4]] = tonumber(f[5])
      elseif f[1] == "served" and f[2] == "text" then texts[f[3] .. "@" .. f[4]] = f[5]
      elseif f[1] == "text" then classic_texts[f[2] .. "@" .. f[3]] = f[4]
      elseif f[1] == "file_version" then version = f[2] end
    end
    assert.are.equal("2.0", version, out)
    local function count(t)
      local n = 0
      for _ in pairs(t) do n = n + 1 end
      return n
    end
    assert.are.equal(#expected, count(got), out)
    assert.are.equal(#expected, count(served), out)
    for _, e in ipairs(expected) do
      assert.are.equal(e[3], got[e[1] .. "@" .. e[2]], e[1] .. " at step " .. e[2])
      assert.are.equal(e[3], served[e[1] .. "@" .. e[2]], "served " .. e[1] .. " at step " .. e[2])
    end
    assert.are.equal(1, count(texts), out)
    assert.are.same({lr = 1e-3, opt = "AdamW"}, json_decode(texts["config@0"]))
    assert.are.same(texts, classic_texts)
  end)
end)
