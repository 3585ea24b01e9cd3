-- accel.tracking: experiment trackers, the local ones of Accelerate's
-- `log_with` (the Accelerator calls them from init_trackers / log /
-- end_training, on the main process only).
--
--   local tracking = require("accel.tracking")
--   local tr = tracking.create("all", {project_dir = "runs", run_name = "mlp", config = {lr = 1e-3}})
--   tr:log({loss = loss, lr = scheduler:get_last_lr()[1]}, step)   -- numbers or one-element tensors
--   tr:finish()
--
-- Custom trackers (tables with Accelerate's GeneralTracker surface: name,
-- requires_logging_directory, log, store_init_configuration, finish, and
-- optionally start and tracker) are checked by tracking.check_tracker;
-- tracking.GeneralTracker is a base class giving the optional ones.
--
-- Names: "jsonl", "csv", "tensorboard", "mlflow", "all", or a list of them.
-- "all" is every available tracker, as in Accelerate: the three file
-- trackers, plus "mlflow" when MLFLOW_TRACKING_URI is set. Accelerate's
-- other trackers ("wandb", "comet_ml", "aim", "clearml", "dvclive",
-- "swanlab", "trackio") need their Python packages: they are refused with
-- an error naming the supported ones. Options other than the ones listed
-- here (and for mlflow below) are refused by name, never ignored.
-- Every file goes in project_dir/run_name (run_name optional; project_dir
-- defaults to "."):
--   jsonl        metrics.jsonl, one JSON object per log call:
--                {"step": 3, "loss": 0.25, "lr": 0.001, "_time": 1712345678.123}
--                (metric keys sorted; NaN / Infinity written as Python's json does)
--   csv          metrics.csv, columns step,_time, then the metric keys in the
--                order first seen (sorted within one call); a row per log call,
--                empty cells for keys a call did not log. A key that first
--                appears later adds a column at the end: the file is rewritten
--                once (to a temporary name, then renamed) with the longer
--                header and the earlier rows padded with empty cells.
--   tensorboard  events.out.tfevents.<unix time>.<hostname> (".N" appended if
--                that name exists): TFRecord framing, a first Event carrying
--                file_version "brain.Event:2", then one Event per log call
--                with a simple_value (float32) per number. Strings are written
--                as text summaries tagged "<key>/text_summary", as
--                Accelerate's SummaryWriter.add_text writes them.
-- Hyper-parameters (`config` option or store_init_configuration): jsonl and
-- csv write config.json (sorted keys) in the run folder; tensorboard writes
-- the same JSON as a text summary tagged "config" at step 0 (TensorBoard's
-- HPARAMS plugin format is not written).
--
-- Decisions where Accelerate is silent or differs:
-- * step defaults to the previous step + 1 (0 for the first call); steps are
--   non-negative integers. "_time" is a reserved metric name; a metric
--   "step" is the step (see step_metric).
-- * Values: numbers, one-element tensors (read with :item()) and strings
--   (jsonl / csv cells, tensorboard text); anything else, and a name or
--   string that is not UTF-8, is an error naming the key.
-- * log(values, step, kwargs): kwargs is Accelerate's log_kwargs entry for
--   the tracker: walltime (seconds) for the file trackers, timestamp (ms)
--   for mlflow (LOG_KWARGS); other keys are refused.
-- * Every log call is flushed to the kernel, so a crashed (even SIGKILLed)
--   process loses nothing already logged; files are also fsynced at most
--   once a second while logging and always by finish().
-- * Existing files are appended to (a resumed run continues its metrics.jsonl
--   and metrics.csv; the csv header already there, read back as CSV, so a
--   quoted name may hold newlines, is kept and extended).
--
-- mlflow: a run on an MLflow tracking server through its REST API
-- (/api/2.0/mlflow/..., HTTP through libcurl: _C.http_request), the calls
-- Accelerate's MLflowTracker makes through the mlflow package:
--   tracking.create("mlflow", {experiment_name = "proj", run_name = "r1",
--     tracking_uri = "http://127.0.0.1:5000", tags = {k = "v"}, description = "...",
--     timeout = 30, config = {...}})
-- * tracking_uri: the option, else MLFLOW_TRACKING_URI; http:// or https://
--   only (file:, sqlite:, databricks: stores are refused: they need the
--   mlflow package). MLFLOW_TRACKING_TOKEN, when set, is sent as a Bearer
--   token; MLFLOW_TRACKING_USERNAME / PASSWORD are refused (not implemented).
-- * The experiment: MLFLOW_EXPERIMENT_NAME, else experiment_name, else
--   "Default"; looked up with experiments/get-by-name and created with
--   experiments/create when missing. A run is started with runs/create
--   (start_time, run_name: the server picks a name when none is given; tags;
--   description as the mlflow.note.content tag). run_id / nested_run (run
--   resumption) are refused.
-- * store_init_configuration(config): each top-level key a param
--   (runs/log-batch, at most 100 per request). Values as text: strings as
--   they are, numbers / booleans / tables as JSON (tensors as numbers or
--   lists). A value longer than MLflow's 6000 characters is dropped with a
--   warning on stderr (as Accelerate does); the server refuses the rest of
--   what it does not accept (keys over 250 characters, bad characters,
--   changing a logged param), and that is an error.
-- * log(values, step): numbers (and one-element tensors) as metrics with the
--   step and the time in milliseconds (runs/log-batch, at most 1000 per
--   request; NaN / infinities as MLflow's JSON spells them); strings are not
--   MLflow metrics: dropped with one warning per key (as Accelerate does).
-- * finish(): runs/update status FINISHED with end_time.
-- * Each request waits at most `timeout` seconds (default 30, or
--   MLFLOW_HTTP_REQUEST_TIMEOUT); no retries. A server that cannot be
--   reached, or answers HTTP 4xx / 5xx, is an error naming the endpoint and
--   MLflow's error_code and message.
local accel = require("accel")
local compat = require("accel.compat")
local json = require("accel.json")
local util = require("accel.util")
local read_file = util.read_file
local C = accel._C

local tracking = {}

-- Raises msg at the first frame outside the embedded library (the user's
-- file:line), as the C bindings' errors do.
local fail = C.raise

local FILE_TRACKERS = {"jsonl", "csv", "tensorboard"}
local VALID = {"jsonl", "csv", "tensorboard", "mlflow", "all"}
-- Accelerate's LoggerType names we do not have (they need Python packages).
local REFUSED = {wandb = true, comet_ml = true, aim = true, clearml = true, dvclive = true, swanlab = true,
                 trackio = true}
local FSYNC_INTERVAL = 1.0 -- seconds between fsyncs while logging

------------------------------------------------------------------------------
-- Values as JSON / CSV text
------------------------------------------------------------------------------

local function is_integral(x)
  return x == math.floor(x) and math.abs(x) < 2 ^ 53
end

-- A metric as JSON (accel.json's shortest round-trip numbers; NaN and the
-- infinities as Python's json writes them, since losses do go NaN).
local function json_metric(v)
  if v ~= v then return "NaN" end
  if v == math.huge then return "Infinity" end
  if v == -math.huge then return "-Infinity" end
  return json.encode(v)
end

-- Config values JSON can hold: tensors become numbers / nested lists,
-- NaN / infinities the text metrics use ("NaN", "Infinity", "-Infinity"),
-- functions, userdata, ... their tostring text. A table holding itself
-- (path: where v is, open: the tables being copied) is an error, as
-- Python's json "Circular reference detected".
local function plain(v, path, open)
  if accel.is_tensor(v) then return v:dim() == 0 and v:item() or v:tolist() end
  if type(v) == "number" and (v ~= v or v == math.huge or v == -math.huge) then return json_metric(v) end
  if type(v) == "table" and v ~= json.null then
    path, open = path or "config", open or {}
    if open[v] then
      fail("store_init_configuration: circular reference detected: " .. path .. " is " .. open[v] .. " itself")
    end
    open[v] = path
    local out = {}
    for k, x in pairs(v) do out[k] = plain(x, path .. "." .. tostring(k), open) end
    open[v] = nil
    return out
  end
  if type(v) == "function" or type(v) == "userdata" or type(v) == "thread" then return tostring(v) end
  return v
end

local function config_json(config, opts)
  local ok, text = pcall(json.encode, plain(config), opts)
  if not ok then fail("store_init_configuration: " .. tostring(text)) end
  return text
end

local sorted_keys = util.sorted_keys

------------------------------------------------------------------------------
-- Files
------------------------------------------------------------------------------

local function open_file(path, mode)
  local f, err = io.open(path, mode)
  if not f then fail("tracking: cannot open " .. path .. ": " .. tostring(err)) end
  return f
end

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- A file opened for appending, flushed after each record and fsynced at
-- most every FSYNC_INTERVAL seconds (and on close).
local Appender = {}
Appender.__index = Appender

local function appender(path)
  return setmetatable({path = path, f = open_file(path, "ab"), synced = accel.clock()}, Appender)
end

function Appender:write(s)
  self.f:write(s)
  self.f:flush()
  local now = accel.clock()
  if now - self.synced >= FSYNC_INTERVAL then
    C.fsync(self.f)
    self.synced = now
  end
end

function Appender:close()
  if self.f then
    C.fsync(self.f)
    self.f:close()
    self.f = nil
  end
end

local function write_config_json(dir, config)
  C.fs_write(dir .. "/config.json", config_json(config, {indent = 2}) .. "\n") -- temp name, fsync, rename
end

------------------------------------------------------------------------------
-- jsonl
------------------------------------------------------------------------------

local Jsonl = {}
Jsonl.__index = Jsonl

function Jsonl.new(dir, _)
  local path = dir .. "/metrics.jsonl"
  return setmetatable({name = "jsonl", dir = dir, path = path, out = appender(path)}, Jsonl)
end

-- items: list of {key, value} sorted by key
function Jsonl:write(step, items, wall)
  local parts = {'"step": ' .. json.encode(step)}
  for _, kv in ipairs(items) do
    local v = kv[2]
    parts[#parts + 1] = json.encode(kv[1]) .. ": " .. (type(v) == "number" and json_metric(v) or json.encode(v))
  end
  parts[#parts + 1] = '"_time": ' .. string.format("%.6f", wall)
  self.out:write("{" .. table.concat(parts, ", ") .. "}\n")
end

function Jsonl:store_config(config) write_config_json(self.dir, config) end
function Jsonl:close() self.out:close() end

------------------------------------------------------------------------------
-- csv
------------------------------------------------------------------------------

local Csv = {}
Csv.__index = Csv

local CSV_SPECIAL = {["NaN"] = "nan", ["Infinity"] = "inf", ["-Infinity"] = "-inf"}

local function csv_cell(v)
  if v == nil then return "" end
  if type(v) == "number" then
    local s = json_metric(v)
    return CSV_SPECIAL[s] or s
  end
  if v:find('[,"\r\n]') then return '"' .. v:gsub('"', '""') .. '"' end
  return v
end

-- The quoted cell starting at text[pos] ('"'): its value and the position
-- after its closing quote ("" is a quote; commas and newlines are text).
local function quoted_cell(text, pos)
  local parts = {}
  pos = pos + 1
  while true do
    local q = text:find('"', pos, true)
    if not q then return nil end
    parts[#parts + 1] = text:sub(pos, q - 1)
    if text:sub(q + 1, q + 1) ~= '"' then return table.concat(parts), q + 1 end
    parts[#parts + 1] = '"'
    pos = q + 2
  end
end

-- The columns of the header of an existing file's text (its first record,
-- RFC 4180 as csv_cell writes it: a quoted cell may hold newlines) and the
-- header's text; nil and the first line when it is not such a record.
local function parse_header(text)
  local cols, pos = {}, 1
  while true do
    local cell, after
    if text:sub(pos, pos) == '"' then
      cell, after = quoted_cell(text, pos)
      if not cell then return nil, text:match("^[^\n]*") end
    else
      after = text:find("[,\r\n]", pos) or #text + 1
      cell = text:sub(pos, after - 1)
    end
    cols[#cols + 1] = cell
    local sep = text:sub(after, after)
    if sep == "\r" and text:sub(after + 1, after + 1) == "\n" then sep = "" end
    if sep ~= "," then
      if sep ~= "\n" and sep ~= "" then return nil, text:match("^[^\n]*") end
      return cols, text:sub(1, after - 1)
    end
    pos = after + 1
  end
end

function Csv.new(dir, _)
  local path = dir .. "/metrics.csv"
  local self = setmetatable({name = "csv", dir = dir, path = path, columns = {}, index = {}}, Csv)
  local text = read_file(path)
  if text and #text > 0 then
    local cols, header = parse_header(text)
    if not cols or cols[1] ~= "step" or cols[2] ~= "_time" then
      fail("tracking: " .. path .. " exists but was not written by the csv tracker (header: " .. header .. ")")
    end
    for _, col in ipairs(cols) do self:add_column(col) end
    self.out = appender(path)
  else
    self:add_column("step")
    self:add_column("_time")
    self.out = appender(path)
    self.out:write(self:header())
  end
  return self
end

function Csv:add_column(name)
  self.columns[#self.columns + 1] = name
  self.index[name] = #self.columns
end

function Csv:header()
  local cells = {}
  for i, c in ipairs(self.columns) do cells[i] = csv_cell(c) end
  return table.concat(cells, ",") .. "\n"
end

-- New columns at the end: rewrite the file once with the longer header and
-- every earlier row padded with empty cells.
function Csv:extend(new)
  self.out:close()
  for _, name in ipairs(new) do self:add_column(name) end
  local text = read_file(self.path) or ""
  local pad = string.rep(",", #new)
  local out, record, quotes, first = {self:header()}, {}, 0, true
  for line in text:gmatch("([^\n]*)\n") do
    record[#record + 1] = line
    quotes = quotes + select(2, line:gsub('"', ""))
    if quotes % 2 == 0 then -- the row ends here (not inside a quoted cell)
      if not first then out[#out + 1] = table.concat(record, "\n") .. pad .. "\n" end
      record, quotes, first = {}, 0, false
    end
  end
  C.fs_write(self.path, table.concat(out)) -- temp name, fsync, rename
  self.out = appender(self.path)
end

function Csv:write(step, items, wall)
  local new = {}
  for _, kv in ipairs(items) do
    if not self.index[kv[1]] then new[#new + 1] = kv[1] end
  end
  if #new > 0 then self:extend(new) end
  local cells = {}
  for i = 1, #self.columns do cells[i] = "" end
  cells[1] = json.encode(step)
  cells[2] = string.format("%.6f", wall)
  for _, kv in ipairs(items) do cells[self.index[kv[1]]] = csv_cell(kv[2]) end
  self.out:write(table.concat(cells, ",") .. "\n")
end

function Csv:store_config(config) write_config_json(self.dir, config) end
function Csv:close() self.out:close() end

------------------------------------------------------------------------------
-- tensorboard: TFRecord framing around hand-encoded tensorflow.Event protos
------------------------------------------------------------------------------

-- Protobuf wire format (integers below 2^53, so no bit operations needed).
local function varint(n)
  local bytes = {}
  while n >= 128 do
    bytes[#bytes + 1] = string.char(n % 128 + 128)
    n = math.floor(n / 128)
  end
  bytes[#bytes + 1] = string.char(n)
  return table.concat(bytes)
end

local function pb_key(field, wire) return varint(field * 8 + wire) end
local function pb_varint(field, n) return pb_key(field, 0) .. varint(n) end
local function pb_double(field, x) return pb_key(field, 1) .. compat.string_pack("<d", x) end
local function pb_float(field, x) return pb_key(field, 5) .. compat.string_pack("<f", x) end
local function pb_bytes(field, s) return pb_key(field, 2) .. varint(#s) .. s end
tracking._pb = {varint = varint, key = pb_key}

-- Event fields: wall_time 1 (double), step 2 (int64), file_version 3,
-- summary 5. Summary: value 1 (repeated). Summary.Value: tag 1,
-- simple_value 2 (float), tensor 8, metadata 9.
local function scalar_value(tag, x)
  return pb_bytes(1, pb_bytes(1, tag) .. pb_float(2, x))
end

-- A text summary as tensorboard's summary.text (SummaryWriter.add_text)
-- builds it: metadata.plugin_data.plugin_name = "text" (TextPluginData
-- version 0: empty content), tensor = TensorProto{dtype 1 = DT_STRING (7),
-- tensor_shape 2 = {dim 2 = {size 1 = 1}}, string_val 8}. add_text tags it
-- "<tag>/text_summary".
local function text_value(tag, text)
  local metadata = pb_bytes(1, pb_bytes(1, "text"))
  local tensor = pb_varint(1, 7) .. pb_bytes(2, pb_bytes(2, pb_varint(1, 1))) .. pb_bytes(8, text)
  return pb_bytes(1, pb_bytes(1, tag) .. pb_bytes(8, tensor) .. pb_bytes(9, metadata))
end

local function event(wall, step, rest)
  return pb_double(1, wall) .. (step and pb_varint(2, step) or "") .. rest
end

-- One TFRecord: uint64 length, masked crc32c(length), data, masked crc32c(data).
local function tfrecord(data)
  local len = compat.string_pack("<I8", #data)
  return len .. compat.string_pack("<I4", C.masked_crc32c(len)) .. data .. compat.string_pack("<I4", C.masked_crc32c(data))
end
tracking._tfrecord = tfrecord

local Tensorboard = {}
Tensorboard.__index = Tensorboard

local function event_file_name(dir)
  local base = dir .. "/events.out.tfevents." .. os.time() .. "." .. C.hostname()
  local path, n = base, 0
  while file_exists(path) do
    n = n + 1
    path = base .. "." .. n
  end
  return path
end

function Tensorboard.new(dir, _)
  local path = event_file_name(dir)
  local self = setmetatable({name = "tensorboard", dir = dir, path = path, out = appender(path)}, Tensorboard)
  self.out:write(tfrecord(event(C.wall_time(), nil, pb_bytes(3, "brain.Event:2"))))
  return self
end

function Tensorboard:write(step, items, wall)
  local values = {}
  for _, kv in ipairs(items) do
    local v = kv[2]
    values[#values + 1] = type(v) == "number" and scalar_value(kv[1], v) or text_value(kv[1] .. "/text_summary", v)
  end
  self.out:write(tfrecord(event(wall, step, pb_bytes(5, table.concat(values)))))
end

function Tensorboard:store_config(config)
  self.out:write(tfrecord(event(C.wall_time(), 0, pb_bytes(5, text_value("config", config_json(config))))))
end

function Tensorboard:close() self.out:close() end

------------------------------------------------------------------------------
-- mlflow: REST calls to a tracking server
------------------------------------------------------------------------------

local MLFLOW_PARAM_VALUE_MAX = 6000 -- mlflow.utils.validation.MAX_PARAM_VAL_LENGTH
local MLFLOW_PARAMS_PER_BATCH = 100 -- MAX_PARAMS_TAGS_PER_BATCH
local MLFLOW_METRICS_PER_BATCH = 1000 -- MAX_METRICS_PER_BATCH
local MLFLOW_DEFAULT_TIMEOUT = 30 -- seconds per request

local Mlflow = {}
Mlflow.__index = Mlflow

local function now_ms() return math.floor(C.wall_time() * 1000) end

local function url_encode(s)
  return (s:gsub("[^%w%-_%.~]", function(c) return string.format("%%%02X", c:byte()) end))
end

local function warn(msg) io.stderr:write("accel.tracking: warning: " .. msg .. "\n") end

-- The server's base URL: the option, else MLFLOW_TRACKING_URI.
local function mlflow_uri(opts)
  local uri = opts.tracking_uri or os.getenv("MLFLOW_TRACKING_URI")
  if uri == nil or uri == "" then
    fail("mlflow tracker: no tracking server; set MLFLOW_TRACKING_URI=http://host:port (or the tracking_uri "
      .. "option: init_kwargs = {mlflow = {tracking_uri = ...}})")
  end
  if type(uri) ~= "string" or not uri:find("^https?://[^/]") then
    fail("mlflow tracker: tracking URI " .. tostring(uri) .. " is not an http:// or https:// tracking server "
      .. "(local file / database stores need the mlflow package; run `mlflow server` and point at it)")
  end
  return (uri:gsub("/+$", ""))
end

local function mlflow_timeout(opts)
  local t = opts.timeout
  if t == nil then
    local env = os.getenv("MLFLOW_HTTP_REQUEST_TIMEOUT")
    t = env and tonumber(env)
    if env and not t then fail("mlflow tracker: MLFLOW_HTTP_REQUEST_TIMEOUT must be a number of seconds, got " .. env) end
  end
  t = t or MLFLOW_DEFAULT_TIMEOUT
  if type(t) ~= "number" or not (t > 0) then fail("mlflow tracker: timeout must be a positive number of seconds, got " .. tostring(t)) end
  return t
end

local function mlflow_headers()
  if os.getenv("MLFLOW_TRACKING_USERNAME") or os.getenv("MLFLOW_TRACKING_PASSWORD") then
    fail("mlflow tracker: MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (basic auth) are not supported; "
      .. "use MLFLOW_TRACKING_TOKEN")
  end
  local headers = {"Content-Type: application/json", "Accept: application/json"}
  local token = os.getenv("MLFLOW_TRACKING_TOKEN")
  if token and token ~= "" then headers[#headers + 1] = "Authorization: Bearer " .. token end
  return headers
end

-- One REST call (body: JSON text or nil). Returns the decoded answer, or
-- nil when the server answered with the error_code `tolerate`; anything
-- else that is not a 2xx answer raises naming the endpoint.
function Mlflow:call(method, endpoint, body, tolerate)
  local url = self.uri .. "/api/2.0/mlflow/" .. endpoint
  local status, answer = C.http_request(method, url, body, self.headers, self.timeout)
  if not status then fail("mlflow tracker: " .. answer .. " (is the MLflow tracking server running?)") end
  local ok, decoded = pcall(json.decode, answer)
  if not ok or type(decoded) ~= "table" then decoded = nil end
  if status >= 200 and status < 300 then
    if not decoded then fail("mlflow tracker: " .. method .. " " .. url .. ": the answer is not a JSON object: " .. answer:sub(1, 200)) end
    return decoded
  end
  local code = decoded and decoded.error_code
  if tolerate and code == tolerate then return nil end
  local why = code and (tostring(code) .. ": " .. tostring(decoded.message)) or answer:sub(1, 300)
  fail(string.format("mlflow tracker: %s %s: HTTP %d %s", method, url, status, why))
end

-- The experiment's id (created when missing).
function Mlflow:experiment_id(name)
  local found = self:call("GET", "experiments/get-by-name?experiment_name=" .. url_encode(name), nil,
    "RESOURCE_DOES_NOT_EXIST")
  if found then return found.experiment.experiment_id end
  local made = self:call("POST", "experiments/create", json.encode({name = name}), "RESOURCE_ALREADY_EXISTS")
  if made then return made.experiment_id end
  return self:call("GET", "experiments/get-by-name?experiment_name=" .. url_encode(name)).experiment.experiment_id
end

local function string_map(t, what)
  if t == nil then return {} end
  if type(t) ~= "table" then fail("mlflow tracker: " .. what .. " must be a table of name -> string, got " .. type(t)) end
  local out = {}
  for _, k in ipairs(sorted_keys(t)) do
    if type(k) ~= "string" then fail("mlflow tracker: " .. what .. " keys must be strings, got " .. type(k)) end
    out[#out + 1] = {key = k, value = tostring(t[k])}
  end
  return out
end

-- The run's settings from opts and the environment, checked without
-- contacting the server: {uri, timeout, headers, experiment, tags}.
function Mlflow.check(opts)
  for _, k in ipairs({"run_id", "nested_run"}) do
    if opts[k] ~= nil then fail("mlflow tracker: option " .. k .. " (resuming / nesting runs) is not supported") end
  end
  if (os.getenv("MLFLOW_RUN_ID") or "") ~= "" then fail("mlflow tracker: MLFLOW_RUN_ID (resuming a run) is not supported; unset it") end
  local s = {uri = mlflow_uri(opts), timeout = mlflow_timeout(opts), headers = mlflow_headers()}
  local env_experiment = os.getenv("MLFLOW_EXPERIMENT_NAME")
  s.experiment = (env_experiment ~= "" and env_experiment) or opts.experiment_name or "Default"
  if type(s.experiment) ~= "string" or s.experiment == "" then fail("mlflow tracker: experiment_name must be a non-empty string") end
  if opts.run_name ~= nil and type(opts.run_name) ~= "string" then fail("mlflow tracker: run_name must be a string") end
  s.tags = string_map(opts.tags, "tags")
  if opts.description ~= nil then s.tags[#s.tags + 1] = {key = "mlflow.note.content", value = tostring(opts.description)} end
  return s
end

function Mlflow.new(_, opts)
  local s = Mlflow.check(opts)
  local self = setmetatable({name = "mlflow", uri = s.uri, timeout = s.timeout, headers = s.headers, warned = {}}, Mlflow)
  local experiment = s.experiment
  local run = self:call("POST", "runs/create", json.encode({experiment_id = self:experiment_id(experiment),
    start_time = now_ms(), run_name = opts.run_name, tags = json.array(s.tags)})).run.info
  self.run_id = run.run_id
  self.tracker = {run_id = run.run_id, experiment_id = run.experiment_id, run_name = run.run_name,
                  experiment_name = experiment, tracking_uri = self.uri}
  return self
end

function Mlflow:log_batch(field, entries, per_request)
  for first = 1, #entries, per_request do
    local part = {}
    for i = first, math.min(#entries, first + per_request - 1) do part[#part + 1] = entries[i] end
    self:call("POST", "runs/log-batch", '{"run_id": ' .. json.encode(self.run_id) .. ', "' .. field .. '": [' ..
      table.concat(part, ", ") .. "]}")
  end
end

-- A param value as MLflow's text.
local function param_text(v)
  if type(v) == "string" then return v end
  v = plain(v)
  if type(v) == "string" then return v end
  local ok, text = pcall(json.encode, v)
  if not ok then fail("store_init_configuration: " .. tostring(text)) end
  return text
end

function Mlflow:store_config(config)
  local entries = {}
  for _, k in ipairs(sorted_keys(config)) do
    if type(k) ~= "string" then fail("store_init_configuration: mlflow param names must be strings, got " .. type(k) .. " " .. tostring(k)) end
    local text = param_text(config[k])
    if #text > MLFLOW_PARAM_VALUE_MAX then
      warn(string.format('mlflow: param "%s" dropped: its value has %d characters, MLflow accepts at most %d',
        k, #text, MLFLOW_PARAM_VALUE_MAX))
    else
      entries[#entries + 1] = json.encode({key = k, value = text})
    end
  end
  self:log_batch("params", entries, MLFLOW_PARAMS_PER_BATCH)
end

-- A metric value as MLflow's JSON (protobuf's spellings for NaN and the infinities).
local function mlflow_number(v)
  local text = json_metric(v)
  if v ~= v or v == math.huge or v == -math.huge then return '"' .. text .. '"' end
  return text
end

function Mlflow:write(step, items, wall)
  local entries, ms = {}, math.floor(wall * 1000 + 0.5)
  for _, kv in ipairs(items) do
    local k, v = kv[1], kv[2]
    if type(v) == "number" then
      entries[#entries + 1] = '{"key": ' .. json.encode(k) .. ', "value": ' .. mlflow_number(v) ..
        ', "timestamp": ' .. string.format("%d", ms) .. ', "step": ' .. string.format("%d", step) .. "}"
    elseif not self.warned[k] then
      self.warned[k] = true
      warn('mlflow: "' .. k .. '" is a ' .. type(v) .. ", not a number; MLflow metrics are numbers, so it is not "
        .. "sent to MLflow (other trackers still get it)")
    end
  end
  self:log_batch("metrics", entries, MLFLOW_METRICS_PER_BATCH)
end

function Mlflow:close()
  if not self.run_id then return end
  local run_id = self.run_id
  self.run_id = nil
  self:call("POST", "runs/update", json.encode({run_id = run_id, status = "FINISHED", end_time = now_ms()}))
end

------------------------------------------------------------------------------
-- The tracker object
------------------------------------------------------------------------------

local BACKENDS = {jsonl = Jsonl, csv = Csv, tensorboard = Tensorboard, mlflow = Mlflow}

-- The options tracking.create reads, per tracker (anything else is refused).
local FILE_OPTIONS = {project_dir = true, run_name = true, config = true}
local MLFLOW_OPTIONS = {run_name = true, config = true, tracking_uri = true, experiment_name = true, tags = true,
                       description = true, timeout = true, run_id = true, nested_run = true}

local Tracker = {}
Tracker.__index = Tracker

local function valid_names()
  return '"' .. table.concat(VALID, '", "') .. '"'
end

local function quoted(n) return type(n) == "string" and '"' .. n .. '"' or tostring(n) end

-- What "all" means now: the file trackers, and mlflow when a server is named.
local function all_names()
  local out = {}
  for i, n in ipairs(FILE_TRACKERS) do out[i] = n end
  if (os.getenv("MLFLOW_TRACKING_URI") or "") ~= "" then out[#out + 1] = "mlflow" end -- empty counts as unset
  return out
end

-- "all", one name or a list of names -> list of backend names, deduplicated.
local function expand_names(name)
  local list = type(name) == "table" and name or {name}
  local out, seen = {}, {}
  for _, n in ipairs(list) do
    if REFUSED[n] then
      fail("tracking: tracker " .. quoted(n) .. " is not available in accel-lua (Accelerate's " .. n ..
        " tracker needs its Python package); supported trackers are " .. valid_names() ..
        ", or a custom tracker table (accel.tracking.GeneralTracker)")
    end
    if type(n) ~= "string" or not (BACKENDS[n] or n == "all") then
      fail("tracking: unknown tracker " .. quoted(n) .. "; valid trackers are " .. valid_names() ..
        ", or a custom tracker table (accel.tracking.GeneralTracker)")
    end
    for _, b in ipairs(n == "all" and all_names() or {n}) do
      if not seen[b] then
        seen[b] = true
        out[#out + 1] = b
      end
    end
  end
  if #out == 0 then fail("tracking.create: no tracker named; valid trackers are " .. valid_names()) end
  return out
end
tracking.expand_names = expand_names

-- Refuses an option none of the named trackers reads.
local function check_options(names, opts)
  for k in pairs(opts) do
    local used = false
    for _, n in ipairs(names) do used = used or (n == "mlflow" and MLFLOW_OPTIONS or FILE_OPTIONS)[k] == true end
    if not used then
      fail("tracking.create: option " .. tostring(k) .. " is not read by tracker(s) " .. table.concat(names, ", ") ..
        " (file trackers: project_dir, run_name, config; mlflow: tracking_uri, experiment_name, run_name, tags, "
        .. "description, timeout, config)")
    end
  end
end

-- The run folder of the file trackers (created), or nil when none is named.
local function run_dir(names, opts)
  local files = false
  for _, n in ipairs(names) do files = files or n ~= "mlflow" end
  if not files then return nil end
  local dir = opts.project_dir or "."
  if type(dir) ~= "string" then fail("tracking.create: project_dir must be a string") end
  if opts.run_name ~= nil then dir = dir .. "/" .. tostring(opts.run_name) end
  C.mkdirs(dir)
  return dir
end

-- The backend names of tracking.create(name, opts), its options checked
-- (and the MLflow settings: server URI, ...) without starting anything.
function tracking.check(name, opts)
  if type(opts) ~= "table" then fail("tracking.create: options must be a table") end
  local names = expand_names(name)
  check_options(names, opts)
  for _, n in ipairs(names) do
    if BACKENDS[n].check then BACKENDS[n].check(opts) end
  end
  return names
end

-- tracking.create(name, {project_dir = ".", run_name = nil, config = nil, <mlflow options>})
function tracking.create(name, opts)
  opts = opts or {}
  local names = tracking.check(name, opts)
  local dir = run_dir(names, opts)
  local self = setmetatable({name = type(name) == "string" and name or table.concat(names, ","),
                             run_dir = dir, trackers = {}, last_step = nil,
                             requires_logging_directory = dir ~= nil}, Tracker)
  for _, n in ipairs(names) do
    local ok, backend = pcall(BACKENDS[n].new, dir, opts)
    if not ok then
      self:finish() -- the ones already started
      error(backend, 0)
    end
    self.trackers[#self.trackers + 1] = backend
    self.trackers[n] = backend
  end
  -- Accelerate's `tracker` property: the MLflow run (ids, URI) for mlflow alone, else this object.
  self.tracker = #names == 1 and self.trackers[1].tracker or self
  if opts.config ~= nil then self:store_init_configuration(opts.config) end
  return self
end

function tracking.valid_trackers() return {"jsonl", "csv", "tensorboard", "mlflow", "all"} end

------------------------------------------------------------------------------
-- Custom trackers (Accelerate's GeneralTracker)
------------------------------------------------------------------------------

-- A base class: defaults for everything but name and log.
--   local My = tracking.GeneralTracker:extend{name = "my"}
--   function My:log(values, step) ... end
--   local t = My:new{...}          -- then Accelerator{log_with = {t, "csv"}}
local GeneralTracker = {requires_logging_directory = false}
GeneralTracker.__index = GeneralTracker
tracking.GeneralTracker = GeneralTracker

function GeneralTracker:extend(fields)
  local class = setmetatable(fields or {}, self)
  class.__index = class
  return class
end

function GeneralTracker:new(fields) return setmetatable(fields or {}, self) end
function GeneralTracker:start() end
function GeneralTracker:store_init_configuration(_) end
function GeneralTracker:finish() end

-- The tracker returned by Accelerator:get_tracker when there are none (the
-- processes other than the main one): every method does nothing.
function tracking.blank_tracker()
  local t = GeneralTracker:new{name = "blank"}
  function t.log() end
  t.tracker = t
  return t
end

-- Checks that t has what the Accelerator calls; the error names what is missing.
function tracking.check_tracker(t)
  local what = type(t.name) == "string" and 'custom tracker "' .. t.name .. '"' or "custom tracker"
  if type(t.name) ~= "string" or t.name == "" then
    fail("log_with: " .. what .. " has no name (a string field, as Accelerate's GeneralTracker.name)")
  end
  if type(t.requires_logging_directory) ~= "boolean" then
    fail("log_with: " .. what .. " has no requires_logging_directory (a boolean field)")
  end
  for _, m in ipairs({"log", "store_init_configuration", "finish"}) do
    if type(t[m]) ~= "function" then
      fail("log_with: " .. what .. " has no " .. m .. " method (extend accel.tracking.GeneralTracker for defaults "
        .. "of store_init_configuration and finish)")
    end
  end
  if t.start ~= nil and type(t.start) ~= "function" then fail("log_with: " .. what .. ": start must be a method") end
  return t
end

-- The Accelerator's log_with -> its list of entries (tracker names and
-- custom tracker tables), each checked as tracking.create and
-- check_tracker do; the Accelerator calls it in its constructor, on every
-- process (as Accelerate refuses an unsupported name there), and again in
-- init_trackers. A table with a metatable (an instance, whose methods may
-- all come from its class) or with fields but no list items is one custom
-- tracker; any other table is a list.
function tracking.log_with_entries(log_with)
  if log_with == nil then return {} end
  local entries = log_with
  if type(log_with) == "string" then
    entries = {log_with}
  elseif type(log_with) ~= "table" then
    fail("log_with: expected a tracker name, a tracker or a list of them, got " .. type(log_with))
  elseif getmetatable(log_with) ~= nil or (log_with[1] == nil and next(log_with) ~= nil) then
    entries = {log_with}
  end
  for _, entry in ipairs(entries) do
    if type(entry) == "table" then tracking.check_tracker(entry) else expand_names(entry) end
  end
  return entries
end

-- values -> list of {key, value} sorted by key, numbers and strings only
-- (a boolean is the number 1 or 0, as TensorBoard's add_scalar takes it).
local function normalize(values)
  if type(values) ~= "table" or accel.is_tensor(values) then
    fail("log: values must be a table of name -> number, got " .. type(values))
  end
  local items = {}
  for _, k in ipairs(sorted_keys(values)) do
    local v = values[k]
    if type(k) ~= "string" then fail("log: metric names must be strings, got " .. type(k) .. " " .. tostring(k)) end
    if k == "_time" then fail('log: "_time" is a reserved name; pick another metric name') end
    if accel.is_tensor(v) then
      if v:numel() ~= 1 then
        fail("log: value of \"" .. k .. "\" must be a one-element tensor, got " .. v:numel() .. " elements")
      end
      v = v:item()
    end
    if type(v) == "boolean" then v = v and 1 or 0 end -- (Accelerate's add_scalar of a bool: 1.0 / 0.0)
    if type(v) ~= "number" and type(v) ~= "string" then
      fail("log: value of \"" .. k .. "\" must be a number, a string or a one-element tensor, got " .. type(v))
    end
    local bad_key, bad_value = json.utf8_error(k), type(v) == "string" and json.utf8_error(v)
    if bad_key or bad_value then
      fail(("log: %s of %q is not valid UTF-8 (byte %d); metric names and text must be UTF-8"):format(
        bad_key and "the name" or "the value", k, bad_key or bad_value))
    end
    items[#items + 1] = {k, v}
  end
  return items
end

-- The keyword arguments each backend's log takes (Accelerate's log_kwargs
-- entry for the tracker): walltime (seconds since the epoch, as
-- SummaryWriter.add_scalar / add_text's) for the file trackers, timestamp
-- (milliseconds, as mlflow.log_metrics') for mlflow. -> the wall time to log.
local LOG_KWARGS = {jsonl = "walltime", csv = "walltime", tensorboard = "walltime", mlflow = "timestamp"}

local function log_wall_time(trackers, kwargs)
  if kwargs == nil then return C.wall_time() end
  if type(kwargs) ~= "table" then fail("log: log_kwargs for a tracker must be a table, got " .. type(kwargs)) end
  local wall
  for k, v in pairs(kwargs) do
    for _, t in ipairs(trackers) do
      if LOG_KWARGS[t.name] ~= k then
        fail("log: the " .. t.name .. " tracker takes no keyword argument " .. tostring(k) .. " (it takes "
          .. LOG_KWARGS[t.name] .. ")")
      end
    end
    if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
      fail("log: " .. tostring(k) .. " must be a non-negative number, got " .. require("accel.util").show(v))
    end
    wall = k == "timestamp" and v / 1000 or v
  end
  return wall or C.wall_time()
end

-- The Accelerator's log, before any tracker writes: values and each
-- built-in tracker's log_kwargs entry checked as its log will (custom
-- trackers get theirs as they are).
function tracking.check_log(values, trackers, log_kwargs)
  for _, t in ipairs(trackers) do
    if getmetatable(t) == Tracker then
      normalize(values)
      log_wall_time(t.trackers, log_kwargs and log_kwargs[t.name])
    end
  end
end

-- log(values, [step], [kwargs]): kwargs as LOG_KWARGS.
-- A metric named "step" (Accelerate's trackers take it as any metric; Accelerate's examples log
-- {..., step = completed_steps} with step = completed_steps): the jsonl and csv files hold it as their step
-- column, so it must be the step (it gives the step when none is given); TensorBoard and MLflow also log it
-- as a metric.
local STEP_AS_METRIC = {tensorboard = true, mlflow = true}

local function step_metric(values, step)
  local v = type(values) == "table" and not accel.is_tensor(values) and values.step or nil
  if v == nil then return step, nil end
  if accel.is_tensor(v) and v:numel() == 1 then v = v:item() end
  if type(v) ~= "number" or v < 0 or not is_integral(v) then
    fail('log: the metric "step" is the step column of the jsonl / csv files: it must be a non-negative integer, got '
      .. tostring(v))
  end
  if step ~= nil and step ~= v then
    fail(('log: the metric "step" (%s) differs from the step (%s); the jsonl / csv files keep one step column')
      :format(tostring(v), tostring(step)))
  end
  return step == nil and v or step, v
end

function Tracker:log(values, step, kwargs)
  if self.finished then fail("log: the tracker has finished (finish() was called)") end
  local as_metric
  step, as_metric = step_metric(values, step)
  if step == nil then
    step = self.last_step and self.last_step + 1 or 0
  elseif type(step) ~= "number" or step < 0 or not is_integral(step) then
    fail("log: step must be a non-negative integer, got " .. tostring(step))
  else
    step = math.floor(step) -- an integer in Lua 5.4 (2.0 -> 2)
  end
  local with_step = normalize(values) -- (a "step" metric among them, sorted with the others)
  local items = with_step
  if as_metric ~= nil then -- the jsonl / csv files hold it as their step column
    items = {}
    for _, it in ipairs(with_step) do if it[1] ~= "step" then items[#items + 1] = it end end
  end
  local wall = log_wall_time(self.trackers, kwargs)
  for _, t in ipairs(self.trackers) do t:write(step, STEP_AS_METRIC[t.name] and with_step or items, wall) end
  self.last_step = step
end

function Tracker:store_init_configuration(config)
  if self.finished then fail("store_init_configuration: the tracker has finished") end
  if type(config) ~= "table" then fail("store_init_configuration: config must be a table, got " .. type(config)) end
  for _, t in ipairs(self.trackers) do t:store_config(config) end
end

-- Accelerate's tracker methods for media and files: not written by these
-- trackers, so a clear error rather than "attempt to call a nil value".
for _, m in ipairs({"log_images", "log_table", "log_figure", "log_artifact", "log_artifacts"}) do
  Tracker[m] = function(self)
    fail(m .. ": not supported by accel-lua's " .. tostring(self.name) .. " tracker (numbers and strings go through log)")
  end
end

-- Closes every backend, even when one fails (the first failure is raised).
function Tracker:finish()
  if self.finished then return end
  self.finished = true
  local first_err
  for _, t in ipairs(self.trackers) do
    local ok, err = pcall(t.close, t)
    first_err = first_err or (not ok and err) or nil
  end
  if first_err then error(first_err, 0) end
end

-- tracker.log(...): "Tracker.log: call it as obj:log(...)"
require("accel.util").check_methods(Tracker, "Tracker")
require("accel.util").check_methods(GeneralTracker, "GeneralTracker")

return tracking
