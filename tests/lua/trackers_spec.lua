-- trackers_spec.lua: the Accelerator's trackers: init_trackers' argument
-- forms (Accelerate's positional config / init_kwargs and our options
-- table), Accelerate tracker names we refuse, custom GeneralTracker tables,
-- get_tracker; and the MLflow tracker against a real `mlflow server` (PyPI
-- mlflow in the test venv, scripts/setup-test-python.sh) started here on
-- loopback with a temporary SQLite store, the run read back through
-- MLflow's own Python client (scripts/read-mlflow-run.py). Without the venv
-- (no PyPI) the server tests are pending, never passed.
local accel = require("accel")
local tracking = require("accel.tracking")
local C = accel._C
local support = dofile("tests/lua/support.lua")
local shell_quote, tmpdir, rmtree = support.shell_quote, support.tmpdir, support.remove_tree
local read_file, read_if_exists, write_file = support.read_file, support.read_if_exists, support.write_file
local errmsg = support.errmsg
it = support.lua54_only(it, pending, {
  ["each tracker gets log_kwargs[its name], as Accelerate's log(values, step, log_kwargs)"] = support.NO_STRING_PACK,
})

local SPEC = "trackers_spec.lua"
local PYENV = os.getenv("ACCEL_PYENV") or "build/pyenv"
local SYSTEM_PYTHON = "/usr/bin/python3"

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return out, ok
end

local function sleep(s) os.execute("sleep " .. s) end

-- A loopback TCP port nothing listens on (bound by the OS, then released).
local function free_port()
  local out = sh(SYSTEM_PYTHON .. [[ -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])']])
  return assert(tonumber(out:match("%d+")), "no free port: " .. out)
end

-- Starts cmd in the background in its own process group, bounded by
-- `timeout` so nothing outlives a crashed spec; returns the group's id.
local function spawn(cmd, log, limit)
  local out = sh("setsid timeout -s TERM " .. limit .. " " .. cmd .. " >" .. shell_quote(log) .. " 2>&1 & echo $!")
  return assert(tonumber(out:match("%d+")), "spawn failed: " .. out)
end

-- Whether the group's leader (the spawned process) still runs.
local function alive(pgid) return support.execute("kill -0 " .. pgid .. " 2>/dev/null") == true end
local function group_alive(pgid) return support.execute("kill -0 -" .. pgid .. " 2>/dev/null") == true end

-- SIGTERM to the group, SIGKILL if it is still there after 10 s.
local function stop(pgid)
  if not pgid then return end
  os.execute("kill -TERM -" .. pgid .. " 2>/dev/null")
  for _ = 1, 40 do
    if not group_alive(pgid) then return end
    sleep(0.25)
  end
  os.execute("kill -KILL -" .. pgid .. " 2>/dev/null")
end

-- Runs fn(port) while cmd (a loopback server printing its port as its
-- first line) runs in the background; stops it whatever fn does.
local function with_listener(cmd, fn)
  local log = os.tmpname()
  local pgid = spawn(cmd, log, 120)
  local ok, err = pcall(function()
    local port
    for _ = 1, 100 do
      port = tonumber(read_if_exists(log):match("^(%d+)\n"))
      if port then break end
      sleep(0.1)
    end
    assert(port, "the helper server did not start: " .. read_if_exists(log))
    fn(port)
  end)
  stop(pgid)
  os.remove(log)
  assert(ok, err)
end

local function json_of(dir) return require("accel.json").decode(read_file(dir .. "/config.json")) end

-- A custom tracker (Accelerate's GeneralTracker surface) recording its calls.
local function recorder(name)
  local t = {name = name, requires_logging_directory = false, calls = {}}
  t.tracker = {handle = name}
  function t:start() self.calls[#self.calls + 1] = {"start"} end
  function t:store_init_configuration(c) self.calls[#self.calls + 1] = {"config", c} end
  function t:log(v, step) self.calls[#self.calls + 1] = {"log", v, step} end
  function t:finish() self.calls[#self.calls + 1] = {"finish"} end
  return t
end

-- A fresh folder per test (the describes below use it).
local dir
before_each(function() dir = tmpdir() end)
after_each(function() rmtree(dir) end)

describe("init_trackers arguments", function()
  it("takes the config positionally, as Accelerate's init_trackers(project_name, config)", function()
    local a = accel.Accelerator{log_with = "jsonl", project_dir = dir}
    a:init_trackers("run1", {lr = 0.1, batch_size = 32})
    a:end_training()
    assert.are.same({lr = 0.1, batch_size = 32}, json_of(dir .. "/run1"))
  end)

  it("takes init_kwargs as the third positional argument", function()
    local a = accel.Accelerator{log_with = "jsonl", project_dir = dir}
    a:init_trackers("run1", {lr = 0.5}, {jsonl = {run_name = "renamed"}})
    a:log({loss = 1}, 0)
    a:end_training()
    assert.are.same({lr = 0.5}, json_of(dir .. "/renamed"))
    assert.is_true(exists(dir .. "/renamed/metrics.jsonl"))
    assert.is_false(exists(dir .. "/run1"))
  end)

  it("takes the options table {config =, init_kwargs =}; a table with only those keys is options", function()
    local a = accel.Accelerator{log_with = "csv", project_dir = dir}
    a:init_trackers("run1", {config = {lr = 0.25}, init_kwargs = {csv = {run_name = "r"}}})
    a:end_training()
    assert.are.same({lr = 0.25}, json_of(dir .. "/r"))
    -- a config with another key besides "config" is a config
    local b = accel.Accelerator{log_with = "csv", project_dir = dir}
    b:init_trackers("run2", {config = "small", lr = 1})
    b:end_training()
    assert.are.same({config = "small", lr = 1}, json_of(dir .. "/run2"))
  end)

  it("refuses a config or init_kwargs that is not a table, and init_kwargs for no started tracker", function()
    local a = accel.Accelerator{log_with = "jsonl", project_dir = dir}
    assert.matches(SPEC .. ":%d+: init_trackers: config must be a table, got string",
      errmsg(function() a:init_trackers("r", "lr=1", {}) end))
    assert.matches("init_trackers: init_kwargs must be a table",
      errmsg(function() a:init_trackers("r", {}, 3) end))
    assert.matches(SPEC .. ":%d+: init_trackers: init_kwargs.wandb names no built%-in tracker started from log_with",
      errmsg(function() a:init_trackers("r", nil, {wandb = {tags = {"a"}}}) end))
    assert.are.equal(0, #a.trackers)
  end)

  it("refuses an init_kwargs option the tracker does not read (none is ignored)", function()
    local a = accel.Accelerator{log_with = "tensorboard", project_dir = dir}
    local err = errmsg(function() a:init_trackers("r", nil, {tensorboard = {flush_secs = 5}}) end)
    assert.matches("option flush_secs is not read by tracker%(s%) tensorboard", err)
  end)
end)

describe("tracker names", function()
  it("refuses Accelerate's trackers we do not have, naming the supported ones, in the constructor", function()
    for _, name in ipairs({"wandb", "comet_ml", "aim", "clearml", "dvclive", "swanlab", "trackio"}) do
      local err = errmsg(function() accel.Accelerator{log_with = {"csv", name}, project_dir = dir} end)
      assert.matches(SPEC .. ":%d+: tracking: tracker \"" .. name .. "\" is not available in accel%-lua", err)
      assert.matches('"jsonl", "csv", "tensorboard", "mlflow", "all"', err, 1, true)
    end
    assert.matches('unknown tracker "nope"', errmsg(function() tracking.create("nope", {project_dir = dir}) end))
  end)

  -- Accelerate's constructor (filter_trackers) raises ValueError "Unsupported
  -- logging capability" for an unknown name, on every process; so does ours,
  -- not only init_trackers on the main process.
  it("checks log_with's names and types in the Accelerator constructor", function()
    assert.matches(SPEC .. ':%d+: tracking: unknown tracker "tensorbord"; valid trackers are "jsonl", "csv", '
      .. '"tensorboard", "mlflow", "all"', errmsg(function() accel.Accelerator{log_with = "tensorbord", project_dir = dir} end))
    assert.matches(SPEC .. ":%d+: log_with: expected a tracker name, a tracker or a list of them, got boolean",
      errmsg(function() accel.Accelerator{log_with = true} end))
    assert.matches(SPEC .. ':%d+: tracking: unknown tracker 5',
      errmsg(function() accel.Accelerator{log_with = {"jsonl", 5}, project_dir = dir} end))
    assert.matches(SPEC .. ':%d+: log_with: custom tracker "mine" has no log method',
      errmsg(function() accel.Accelerator{log_with = {"jsonl", {name = "mine", requires_logging_directory = false}}} end))
    local a = accel.Accelerator{log_with = {}} -- an empty list: no trackers
    a:init_trackers("p")
    assert.are.equal(0, #a.trackers)
  end)

  it('"all" is the file trackers (and mlflow only with MLFLOW_TRACKING_URI), one tracker each', function()
    if os.getenv("MLFLOW_TRACKING_URI") then
      pending("MLFLOW_TRACKING_URI is set here, so \"all\" includes mlflow (checked in the MLflow tests)")
      return
    end
    assert.are.same({"jsonl", "csv", "tensorboard"}, tracking.expand_names("all"))
    local a = accel.Accelerator{log_with = "all", project_dir = dir}
    a:init_trackers("p", {lr = 1})
    assert.are.equal(3, #a.trackers)
    assert.are.equal("csv", a:get_tracker("csv").name)
    a:log({loss = 2}, 1)
    a:end_training()
    assert.is_true(exists(dir .. "/p/metrics.csv"))
    assert.are.equal(1, #support.lines_of(read_file(dir .. "/p/metrics.jsonl")))
    -- a name given twice (here through "all") is one tracker
    local b = accel.Accelerator{log_with = {"all", "jsonl"}, project_dir = dir}
    b:init_trackers("q")
    assert.are.equal(3, #b.trackers)
    b:log({loss = 3}, 1)
    b:end_training()
    assert.are.equal(1, #support.lines_of(read_file(dir .. "/q/metrics.jsonl")))
    -- an empty MLFLOW_TRACKING_URI counts as unset
    local out, ok = sh("MLFLOW_TRACKING_URI= " .. support.shell_quote(support.ACCEL_LUA) .. " -e " ..
      support.shell_quote("print(table.concat(require('accel.tracking').expand_names('all'), ' '))"))
    assert.is_true(ok, out)
    assert.are.equal("jsonl csv tensorboard\n", out)
  end)
end)

describe("tracker methods for media and files", function()
  it("log_images, log_table, log_figure, log_artifact(s) are clear errors", function()
    local a = accel.Accelerator{log_with = "jsonl", project_dir = dir}
    a:init_trackers("p")
    for _, m in ipairs({"log_images", "log_table", "log_figure", "log_artifact", "log_artifacts"}) do
      local t = a:get_tracker("jsonl")
      assert.matches(SPEC .. ":%d+: " .. m .. ": not supported by accel%-lua's jsonl tracker",
        errmsg(function() t[m](t, {}) end))
    end
    a:end_training()
  end)
end)

describe("custom trackers", function()
  it("a table with GeneralTracker's methods, alone: start, config, log, finish", function()
    local t = recorder("mine")
    local a = accel.Accelerator{log_with = t}
    a:init_trackers("p", {lr = 3})
    a:log({loss = 0.5}, {step = 4})
    assert.are.equal(t, a:get_tracker("mine"))
    assert.are.same({handle = "mine"}, a:get_tracker("mine", true))
    a:end_training()
    assert.are.same({{"start"}, {"config", {lr = 3}}, {"log", {loss = 0.5}, 4}, {"finish"}}, t.calls)
  end)

  it("in a list with tracker names; GeneralTracker:extend gives the defaults", function()
    local seen = {}
    local Mine = tracking.GeneralTracker:extend{name = "mine"}
    function Mine:log(values, step) seen[#seen + 1] = {values.loss, step} end
    local a = accel.Accelerator{log_with = {Mine:new{}, "jsonl"}, project_dir = dir}
    a:init_trackers("p", {lr = 1})
    a:log({loss = 7}, 2)
    a:end_training()
    assert.are.same({{7, 2}}, seen)
    assert.are.same({lr = 1}, json_of(dir .. "/p"))
  end)

  it("an instance whose fields all come from its class (Mine:new{}) alone in log_with is that tracker", function()
    local seen = {}
    local Mine = tracking.GeneralTracker:extend{name = "mine"}
    function Mine:log(values, step) seen[#seen + 1] = {values.loss, step} end
    local a = accel.Accelerator{log_with = Mine:new{}}
    a:init_trackers("p")
    a:log({loss = 3}, 1)
    a:end_training()
    assert.are.same({{3, 1}}, seen)
  end)

  it("a table missing a required field or method is refused, naming it", function()
    local function without(key)
      local t = recorder("mine")
      t[key] = nil
      return t
    end
    for key, pattern in pairs({log = 'custom tracker "mine" has no log method',
                               finish = 'custom tracker "mine" has no finish method',
                               store_init_configuration = 'custom tracker "mine" has no store_init_configuration method',
                               name = "custom tracker has no name",
                               requires_logging_directory = 'custom tracker "mine" has no requires_logging_directory'}) do
      local err = errmsg(function() accel.Accelerator{log_with = without(key)} end)
      assert.matches(SPEC .. ":%d+: log_with: ", err)
      assert.matches(pattern, err, 1, true)
      err = errmsg(function() accel.Accelerator{log_with = {"jsonl", without(key)}, project_dir = dir} end)
      assert.matches(pattern, err, 1, true)
      -- a tracker changed after the constructor is checked again by init_trackers
      local t = recorder("mine")
      local a = accel.Accelerator{log_with = t}
      t[key] = nil
      assert.matches(pattern, errmsg(function() a:init_trackers("p") end), 1, true)
    end
  end)

  it("end_training finishes every tracker even when one fails, then raises that failure", function()
    local bad, good = recorder("bad"), recorder("good")
    function bad.finish() error("bad tracker: cannot close", 0) end
    local a = accel.Accelerator{log_with = {bad, good}}
    a:init_trackers("p")
    assert.are.equal("bad tracker: cannot close", errmsg(function() a:end_training() end))
    assert.are.same({"finish"}, good.calls[#good.calls])
    assert.are.equal(0, #a.trackers)
  end)

  it("one that requires a logging directory needs a project_dir (checked by the constructor, as Accelerate)", function()
    local t = recorder("mine")
    t.requires_logging_directory = true
    assert.matches('tracker "mine" requires a logging directory', errmsg(function() accel.Accelerator{log_with = t} end))
    assert.matches('tracker "csv" requires a logging directory', errmsg(function() accel.Accelerator{log_with = "csv"} end))
    assert.is_truthy(accel.Accelerator{log_with = t, project_dir = dir})
  end)
end)

describe("log_kwargs", function()
  it("each tracker gets log_kwargs[its name], as Accelerate's log(values, step, log_kwargs)", function()
    local got = {}
    local Mine = tracking.GeneralTracker:extend{name = "mine"}
    function Mine:log(values, step, kwargs) got[#got + 1] = {values.loss, step, kwargs} end
    local a = accel.Accelerator{log_with = {Mine:new{}, "jsonl", "tensorboard"}, project_dir = dir}
    a:init_trackers("p")
    a:log({loss = 1}, 3, {mine = {commit = false}, tensorboard = {walltime = 1234.5}, jsonl = {walltime = 99}})
    a:log({loss = 2}, {step = 4, log_kwargs = {mine = {tags = {"a"}}}})
    a:log({loss = 3}, 5)
    assert.are.same({{1, 3, {commit = false}}, {2, 4, {tags = {"a"}}}, {3, 5}}, got)
    local first = require("accel.json").decode(read_file(dir .. "/p/metrics.jsonl"):match("^[^\n]+"))
    assert.are.equal(99, first._time)
    -- the event of the first log: wall_time (field 1, a double) = walltime, as add_scalar(..., walltime=)
    local f = io.popen("ls " .. shell_quote(dir .. "/p") .. " | grep tfevents")
    local events = read_file(dir .. "/p/" .. f:read("l"))
    f:close()
    assert.is_truthy(events:find("\9" .. string.pack("<d", 1234.5), 1, true))
    local function refused(pattern, ...)
      local args = table.pack(...)
      assert.matches(SPEC .. ":%d+: " .. pattern, errmsg(function() a:log({loss = 9}, 6, table.unpack(args, 1, args.n)) end))
    end
    refused("log: the tensorboard tracker takes no keyword argument new_style %(it takes walltime%)",
      {tensorboard = {new_style = true}})
    refused('log: walltime must be a non%-negative number, got "x"', {jsonl = {walltime = "x"}})
    refused("log: walltime must be a non%-negative number, got nan", {jsonl = {walltime = 0 / 0}})
    refused("log: log_kwargs.wandb names no tracker started by init_trackers", {wandb = {}})
    refused("log: log_kwargs must be a table of tracker name %-> keyword arguments, got string", "x")
    a:end_training()
    assert.are.equal(3, #got) -- nothing logged by the refused calls
    local lines = 0
    for _ in read_file(dir .. "/p/metrics.jsonl"):gmatch("\n") do lines = lines + 1 end
    assert.are.equal(3, lines)
  end)
end)

describe("get_tracker", function()
  it("names the trackers it has when asked for another; a do-nothing tracker when there are none", function()
    local a = accel.Accelerator{log_with = recorder("mine")}
    local blank = a:get_tracker("mine")
    assert.are.equal("blank", blank.name)
    blank:log({x = 1}, 1) -- does nothing (what the other processes get)
    blank:finish()
    a:init_trackers("p")
    assert.matches(SPEC .. ':%d+: get_tracker: "wandb" is not an available tracker stored inside the Accelerator %(trackers: "mine"%)',
      errmsg(function() a:get_tracker("wandb") end))
    a:end_training()
  end)
end)

------------------------------------------------------------------------------
-- MLflow
------------------------------------------------------------------------------

describe("_C.http_request (libcurl)", function()
  it("refuses bad arguments at the caller's line and other protocols; answers nil, reason without a server", function()
    assert.matches(SPEC .. ':%d+: http_request: header 1 must be a string "Name: value"',
      errmsg(function() C.http_request("GET", "http://127.0.0.1:1/", nil, {1}, 1) end))
    assert.matches("http_request: timeout must be in %(0, 86400%] seconds, got 0",
      errmsg(function() C.http_request("GET", "http://127.0.0.1:1/", nil, nil, 0) end))
    local status, why = C.http_request("GET", "ftp://127.0.0.1/x", nil, nil, 1)
    assert.is_nil(status)
    assert.matches('GET ftp://127.0.0.1/x: Unsupported protocol', why, 1, true)
    status, why = C.http_request("POST", "http://127.0.0.1:" .. free_port() .. "/x", "{}", {"Content-Type: application/json"}, 1)
    assert.is_nil(status)
    assert.matches("Couldn't connect to server", why, 1, true)
  end)
end)

describe("the MLflow tracker without a server", function()
  it("needs an http(s) tracking URI", function()
    assert.matches(SPEC .. ":%d+: mlflow tracker: no tracking server; set MLFLOW_TRACKING_URI",
      errmsg(function() tracking.create("mlflow", {tracking_uri = ""}) end))
    assert.matches("tracking URI file:./mlruns is not an http:// or https:// tracking server",
      errmsg(function() tracking.create("mlflow", {tracking_uri = "file:./mlruns"}) end), 1, true)
    assert.matches("option run_id %(resuming / nesting runs%) is not supported",
      errmsg(function() tracking.create("mlflow", {tracking_uri = "http://127.0.0.1:1", run_id = "x"}) end))
    assert.matches("mlflow tracker: timeout must be a positive number",
      errmsg(function() tracking.create("mlflow", {tracking_uri = "http://127.0.0.1:1", timeout = 0}) end))
  end)

  it("init_trackers checks every tracker before starting any: no events file when mlflow is refused", function()
    local a = accel.Accelerator{log_with = {"tensorboard", "jsonl", "mlflow"}, project_dir = dir}
    assert.matches(SPEC .. ":%d+: mlflow tracker: no tracking server; set MLFLOW_TRACKING_URI",
      errmsg(function() a:init_trackers("p", {lr = 1}, {mlflow = {tracking_uri = ""}}) end))
    assert.matches(SPEC .. ":%d+: mlflow tracker: timeout must be a positive number",
      errmsg(function() a:init_trackers("p", nil, {mlflow = {tracking_uri = "http://127.0.0.1:1", timeout = 0}}) end))
    assert.is_false(exists(dir .. "/p"), "the run folder of the file trackers was made")
    assert.are.equal(0, #a.trackers)
  end)

  it("a server that is down: an error naming the URL and curl's reason, at once", function()
    local uri = "http://127.0.0.1:" .. free_port()
    local a = accel.Accelerator{log_with = "mlflow"}
    local t0 = accel.clock()
    local err = errmsg(function() a:init_trackers("p", nil, {mlflow = {tracking_uri = uri, timeout = 5}}) end)
    assert.is_true(accel.clock() - t0 < 5, "took " .. (accel.clock() - t0) .. " s")
    assert.matches(SPEC .. ":%d+: mlflow tracker: GET " .. uri:gsub("%p", "%%%0") ..
      "/api/2.0/mlflow/experiments/get%-by%-name%?experiment_name=p: Couldn't connect to server", err)
    assert.matches("is the MLflow tracking server running?", err, 1, true)
  end)

  it("a server that never answers: an error once the timeout has passed", function()
    with_listener(SYSTEM_PYTHON .. [[ -c 'import socket, time; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8); print(s.getsockname()[1], flush=True); time.sleep(60)']], function(port)
      local t0 = accel.clock()
      local e = errmsg(function() tracking.create("mlflow", {tracking_uri = "http://127.0.0.1:" .. port, timeout = 1}) end)
      local took = accel.clock() - t0
      assert.is_true(took >= 0.9 and took < 5, "took " .. took .. " s")
      assert.matches("experiments/get%-by%-name%?experiment_name=Default: no answer within 1", e)
    end)
  end)
end)

describe("the MLflow tracker's requests (a stub server)", function()
  it("sends the REST calls Accelerate's MLflowTracker makes, with the token, JSON bodies and an encoded name", function()
    local requests = dir .. "/requests.jsonl"
    with_listener(SYSTEM_PYTHON .. " scripts/mlflow-stub-server.py " .. shell_quote(requests), function(port)
      write_file(dir .. "/train.lua", [[
        local accel = require("accel")
        local a = accel.Accelerator{log_with = "mlflow"}
        a:init_trackers("stub exp/1", {lr = 0.5}, {mlflow = {run_name = "n1", tags = {a = "b"}}})
        a:log({loss = 0.25, acc = 1}, 5)
        a:log({loss = 0 / 0}, 6)
        a:end_training()
      ]])
      local t0 = math.floor(C.wall_time() * 1000)
      local out, done = sh("MLFLOW_TRACKING_TOKEN=secret MLFLOW_TRACKING_URI=http://127.0.0.1:" .. port .. "/ " ..
        "env -u MLFLOW_EXPERIMENT_NAME -u MLFLOW_RUN_ID " .. shell_quote(support.ACCEL_LUA) .. " " .. shell_quote(dir .. "/train.lua"))
      assert(done, out)
      local t1 = math.floor(C.wall_time() * 1000)
      local json = require("accel.json")
      local got = {}
      for _, line in ipairs(support.lines_of(read_file(requests))) do got[#got + 1] = json.decode(line) end
      local api = "/api/2.0/mlflow/"
      assert.are.same({{"GET", api .. "experiments/get-by-name?experiment_name=stub%20exp%2F1"},
                       {"POST", api .. "runs/create"}, {"POST", api .. "runs/log-batch"},
                       {"POST", api .. "runs/log-batch"}, {"POST", api .. "runs/log-batch"},
                       {"POST", api .. "runs/update"}},
        (function()
          local t = {}
          for i, r in ipairs(got) do t[i] = {r.method, r.path} end
          return t
        end)())
      for _, r in ipairs(got) do
        assert.are.equal("Bearer secret", r.authorization)
        assert.are.equal("application/json", r.content_type)
      end
      local create = json.decode(got[2].body)
      assert.is_true(create.start_time >= t0 and create.start_time <= t1)
      create.start_time = nil
      assert.are.same({experiment_id = "7", run_name = "n1", tags = {{key = "a", value = "b"}}}, create)
      assert.are.same({run_id = "stub-run", params = {{key = "lr", value = "0.5"}}}, json.decode(got[3].body))
      local m = json.decode(got[4].body)
      assert.are.equal("stub-run", m.run_id)
      for _, e in ipairs(m.metrics) do
        assert.is_true(e.timestamp >= t0 and e.timestamp <= t1)
        e.timestamp = nil
      end
      assert.are.same({{key = "acc", value = 1, step = 5}, {key = "loss", value = 0.25, step = 5}}, m.metrics)
      assert.matches('"value": "NaN"', got[5].body, 1, true)
      local update = json.decode(got[6].body)
      assert.is_true(update.end_time >= t0 and update.end_time <= t1)
      assert.are.same({run_id = "stub-run", status = "FINISHED"}, {run_id = update.run_id, status = update.status})
    end)
  end)
end)

describe("the MLflow tracker against `mlflow server`", function()
  local server = {} -- uri, pgid, dir; skip: why the tests are pending

  -- The venv's mlflow, a server on a free loopback port, its /health answering.
  setup(function()
    if not os.execute(shell_quote("scripts/setup-test-python.sh") .. " mlflow >&2") then
      server.skip = "scripts/setup-test-python.sh mlflow failed (PyPI unreachable?): MLflow server tests not run"
      return
    end
    server.dir = tmpdir()
    local port = free_port()
    server.uri = "http://127.0.0.1:" .. port
    server.log = server.dir .. "/server.log"
    -- (no background job runner: nothing of it is used, and it is a dozen more processes to stop)
    server.pgid = spawn(table.concat({"env MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false", shell_quote(PYENV .. "/bin/mlflow"), "server",
      "--backend-store-uri", "sqlite:///" .. server.dir .. "/mlflow.db",
      "--default-artifact-root", server.dir .. "/artifacts",
      "--host 127.0.0.1 --port", port, "--workers 1"}, " "), server.log, 900)
    local t0 = accel.clock()
    while accel.clock() - t0 < 120 do
      local status = C.http_request("GET", server.uri .. "/health", nil, nil, 2)
      if status == 200 then return end
      if not alive(server.pgid) then break end
      sleep(0.25)
    end
    server.failed = "mlflow server did not come up on " .. server.uri .. ":\n" .. read_if_exists(server.log)
  end)

  teardown(function()
    stop(server.pgid)
    if server.dir then rmtree(server.dir) end
  end)

  local function need_server()
    if server.skip then
      pending(server.skip)
      return false
    end
    assert(not server.failed, server.failed)
    return true
  end

  -- A number as Python's repr wrote it.
  local function py_number(s) return s == "nan" and 0 / 0 or s == "inf" and math.huge or s == "-inf" and -math.huge or tonumber(s) end

  -- The runs of an experiment as MLflow's client reads them.
  local function read_back(experiment, latest)
    local out, ok = sh(shell_quote(PYENV .. "/bin/python") .. " scripts/read-mlflow-run.py " .. shell_quote(server.uri)
      .. " " .. shell_quote(experiment) .. (latest and " --latest" or ""))
    assert(ok, out)
    local r = {runs = {}, out = out}
    for line in out:gmatch("[^\n]+") do
      local f = {}
      for field in (line .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = field end
      if f[1] == "experiment" then r.experiment_id = f[2]
      elseif f[1] == "run" then
        local run = {id = f[2], name = f[3], status = f[4], start = tonumber(f[5]), finish = tonumber(f[6]),
                     params = {}, tags = {}, metrics = {}, latest = {}}
        r.runs[#r.runs + 1] = run
        r.runs[f[2]] = run
      elseif f[1] == "param" then r.runs[f[2]].params[f[3]] = f[4]
      elseif f[1] == "tag" then r.runs[f[2]].tags[f[3]] = f[4]
      elseif f[1] == "latest" then r.runs[f[2]].latest[f[3]] = py_number(f[4])
      elseif f[1] == "metric" then
        local m = r.runs[f[2]].metrics
        m[f[3]] = m[f[3]] or {}
        table.insert(m[f[3]], {step = tonumber(f[4]), value = py_number(f[5]), timestamp = tonumber(f[6])})
      end
    end
    return r
  end

  it("logs the config as params and the metrics with their steps; MLflow's client reads them back", function()
    if not need_server() then return end
    local config = {lr = 1e-3, optimizer = "AdamW", hidden = {64, 32}, use_bias = true, epochs = 3,
                    long = string.rep("y", 6000), too_long = string.rep("x", 6001)}
    local a = accel.Accelerator{log_with = "mlflow"}
    local t0 = math.floor(C.wall_time() * 1000)
    a:init_trackers("proj-a", config, {mlflow = {tracking_uri = server.uri, run_name = "run-a", tags = {team = "lua"},
                                                 description = "a test run"}})
    local expected = {}
    for step = 0, 24 do
      local loss = 2.5 * math.exp(-step / 10) + 0.01 * math.sin(step)
      a:log({loss = accel.tensor(loss, {dtype = accel.float64}), acc = step / 24, note = "text"}, step * 10)
      expected[#expected + 1] = {step * 10, loss, step / 24}
    end
    a:log({loss = 0 / 0}, 250)
    local info = a:get_tracker("mlflow", true)
    a:end_training()
    local t1 = math.floor(C.wall_time() * 1000)

    local r = read_back("proj-a")
    assert.are.equal(1, #r.runs, r.out)
    local run = r.runs[1]
    assert.are.same({run_id = run.id, experiment_id = r.experiment_id, run_name = "run-a",
                     experiment_name = "proj-a", tracking_uri = server.uri}, info)
    assert.are.equal("run-a", run.name)
    assert.are.equal("FINISHED", run.status)
    assert.is_true(run.start >= t0 and run.finish >= run.start and run.finish <= t1, r.out)
    assert.are.same({lr = "0.001", optimizer = "AdamW", hidden = "[64,32]", use_bias = "true", epochs = "3",
                     long = string.rep("y", 6000)}, run.params)
    assert.are.equal("lua", run.tags.team)
    assert.are.equal("a test run", run.tags["mlflow.note.content"])
    assert.are.equal(26, #run.metrics.loss)
    assert.are.equal(25, #run.metrics.acc)
    assert.is_nil(run.metrics.note)
    for i, e in ipairs(expected) do
      assert.are.same({step = e[1], value = e[2]}, {step = run.metrics.loss[i].step, value = run.metrics.loss[i].value})
      assert.are.same({step = e[1], value = e[3]}, {step = run.metrics.acc[i].step, value = run.metrics.acc[i].value})
      assert.is_true(run.metrics.loss[i].timestamp >= t0 and run.metrics.loss[i].timestamp <= t1)
    end
    local last = run.metrics.loss[26]
    assert.are.equal(250, last.step)
    assert.is_true(last.value ~= last.value, "NaN comes back as NaN")
  end)

  it("reuses the experiment, sends params and metrics in MLflow's batch sizes", function()
    if not need_server() then return end
    local config, values = {}, {}
    for i = 1, 150 do config[string.format("p%03d", i)] = i end
    for i = 1, 1001 do values[string.format("m%04d", i)] = i / 8 end
    for round = 1, 2 do
      local a = accel.Accelerator{log_with = "mlflow"}
      a:init_trackers("proj-b", {config = config, init_kwargs = {mlflow = {tracking_uri = server.uri}}})
      a:log(values, round)
      a:end_training()
    end
    local r = read_back("proj-b", true)
    assert.are.equal(2, #r.runs, r.out)
    for _, run in ipairs(r.runs) do
      assert.are.equal("FINISHED", run.status)
      assert.is_true(#run.name > 0, "the server names a run given no run_name")
      local n = 0
      for k, v in pairs(run.params) do
        n = n + 1
        assert.are.equal(tostring(tonumber(k:sub(2))), v)
      end
      assert.are.equal(150, n)
      n = 0
      for k, v in pairs(run.latest) do
        n = n + 1
        assert.are.equal(tonumber(k:sub(2)) / 8, v)
      end
      assert.are.equal(1001, n)
    end
  end)

  it("an HTTP error from the server names the endpoint and MLflow's error; no run is left running", function()
    if not need_server() then return end
    local a = accel.Accelerator{log_with = "mlflow"}
    local err = errmsg(function()
      a:init_trackers("proj-c", {["bad key!"] = 1}, {mlflow = {tracking_uri = server.uri, run_name = "bad"}})
    end)
    assert.matches(SPEC .. ":%d+: mlflow tracker: POST " .. server.uri:gsub("%p", "%%%0") ..
      "/api/2.0/mlflow/runs/log%-batch: HTTP 400 INVALID_PARAMETER_VALUE: ", err)
    assert.matches("bad key!", err, 1, true)
    assert.are.equal(0, #a.trackers)
    local r = read_back("proj-c")
    assert.are.equal(1, #r.runs, r.out)
    assert.are.equal("FINISHED", r.runs[1].status)
  end)

  it('takes MLFLOW_TRACKING_URI and MLFLOW_EXPERIMENT_NAME from the environment; "all" includes it', function()
    if not need_server() then return end
    write_file(dir .. "/train.lua", [[
      local accel = require("accel")
      local a = accel.Accelerator{log_with = "all", project_dir = ]] .. string.format("%q", dir) .. [[}
      a:init_trackers("files", {lr = 2})
      assert(#a.trackers == 4, #a.trackers)
      a:log({loss = 0.125}, 3)
      a:end_training()
      print("done")
    ]])
    local out, ok = sh("MLFLOW_TRACKING_URI=" .. shell_quote(server.uri) .. " MLFLOW_EXPERIMENT_NAME=from-env " ..
      shell_quote(support.ACCEL_LUA) .. " " .. shell_quote(dir .. "/train.lua"))
    assert(ok and out:find("done"), out)
    local r = read_back("from-env")
    assert.are.equal(1, #r.runs, r.out)
    assert.are.same({lr = "2"}, r.runs[1].params)
    assert.are.same({{step = 3, value = 0.125}}, {{step = r.runs[1].metrics.loss[1].step, value = r.runs[1].metrics.loss[1].value}})
    assert.is_true(exists(dir .. "/files/metrics.csv"))
  end)
end)
