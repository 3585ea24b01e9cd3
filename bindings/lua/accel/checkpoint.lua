-- accel.checkpoint: the files behind Accelerator:save_model / save / load /
-- save_state / load_state. Only safetensors and JSON are written.
--
-- A save_state folder is written by a Writer into a temporary sibling
-- "<dir>.tmp-<pid>": every file is fsynced as it is written, then
-- checkpoint_index.json lists every file with its size and crc32 (files in
-- sub-folders, e.g. one a save_state pre-hook wrote with save_model, under
-- their relative path "unet/model.safetensors"), the format tag and the
-- model fingerprints; the folder is fsynced and only
-- then renamed to <dir> (atomically exchanged with an older <dir>, which is
-- removed afterwards), and the parent directory is fsynced. A crash at any
-- point leaves either the old folder or the new complete one at <dir>, plus
-- possibly a ".tmp-" folder that nothing loads (the next save of <dir>
-- removes it). Files in an existing <dir> that are not its checkpoint's
-- (save_model's output, logs) are hard-linked into the new folder before the
-- swap, so they stay. A save that raises (on any process: see save_step in
-- accelerator.lua) removes its temporary folder with Writer:abort(), so only
-- a killed process leaves one. open() verifies the index, every size and
-- checksum before anything is read, and names the file and the fault when
-- it refuses.
--
-- State that mixes tensors and plain Lua values (optimizer, scheduler,
-- registered objects) is split by pack(): tensors go to NAME.safetensors
-- under their path in the table ("state.3.exp_avg"), the rest to NAME.json,
-- where a tensor is {"__tensor__": path}, a non-finite float
-- {"__float__": "inf"}, and a table whose keys are neither all strings nor
-- 1..n (e.g. optimizer state keyed by parameter position) is
-- {"__map__": [[key, value], ...]}, so the round trip is exact.
local accel = require("accel")
local json = require("accel.json")
local raise = require("accel.nn.module").raise
local read_file = require("accel.util").read_file
local C = accel._C

local M = {}

M.FORMAT = "accel-lua-checkpoint"
M.VERSION = 1
M.INDEX = "checkpoint_index.json"

local function join(a, b) return a:gsub("/+$", "") .. "/" .. b end
M.join = join

local function is_integer(v)
  if math.type then return math.type(v) == "integer" end
  return v == math.floor(v)
end

-- ---------------------------------------------------------------- sizes

local units = {b = 1, kb = 1e3, mb = 1e6, gb = 1e9, tb = 1e12, kib = 1024, mib = 1024 ^ 2, gib = 1024 ^ 3, tib = 1024 ^ 4}

-- "10GB" (10^9 bytes each, as Hugging Face counts), "500MiB", "1.5 GB" or a
-- number of bytes -> bytes. 0 is a size too (as Accelerate: every tensor
-- is over it, so each gets a file of its own). The unit's case does not
-- matter ("5gb" is 5e9 bytes): Accelerate's save_model and transformers'
-- save_pretrained split with huggingface_hub, whose parse_size_to_int
-- upper-cases it (only accelerate.utils.convert_file_size_to_int, which
-- they do not use, reads a lowercase b as bits).
function M.parse_size(s, what)
  if type(s) == "number" and s >= 0 then return s end
  if type(s) == "string" then
    local num, unit = s:match("^%s*([%d%.]+)%s*(%a*)%s*$")
    local n, key = tonumber(num), unit and (unit ~= "" and unit:lower() or "b")
    if n and n >= 0 and units[key] then return math.floor(n * units[key]) end
  end
  raise('%s: expected a size such as "10GB", "500MB" or a number of bytes, got %s', what, tostring(s))
end

-- ---------------------------------------------------------------- pack / unpack

local TAGS = {__tensor__ = true, __float__ = true, __map__ = true}

local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta < tb end
  if ta == "boolean" then return (not a) and b end
  return a < b
end

local pack_value

local function pack_entries(t, tensors, path, depth)
  local n, count, all_strings, tagged = #t, 0, true, false
  for k in pairs(t) do
    count = count + 1
    if type(k) ~= "string" then all_strings = false elseif TAGS[k] then tagged = true end
  end
  if count == 0 then return {} end
  if all_strings and not tagged then
    local out = {}
    for k, v in pairs(t) do out[k] = pack_value(v, tensors, path .. "." .. k, depth) end
    return out
  end
  if n == count then
    local out = json.array()
    for i = 1, n do out[i] = pack_value(t[i], tensors, path .. "." .. i, depth) end
    return out
  end
  local keys = {}
  for k in pairs(t) do
    local tk = type(k)
    if tk ~= "string" and tk ~= "number" and tk ~= "boolean" then
      raise("checkpoint: %s has a %s key; only strings, numbers and booleans can be saved", path, tk)
    end
    keys[#keys + 1] = k
  end
  table.sort(keys, key_order)
  local pairs_out = json.array()
  for i, k in ipairs(keys) do
    pairs_out[i] = json.array({pack_value(k, tensors, path, depth), pack_value(t[k], tensors, path .. "." .. tostring(k), depth)})
  end
  return {__map__ = pairs_out}
end

-- pack_entries with the walk bounded: a cycle or a nesting deeper than JSON
-- holds is one error naming the path, never a stack overflow. depth: the
-- tables above t; on_path: those tables (M.pack resets it: an error leaves it).
local on_path = {}

local function pack_table(t, tensors, path, depth)
  local where = path == "" and "the value" or path:gsub("^%.", "")
  if on_path[t] then raise("checkpoint: %s contains itself (a cycle); saved state must be a tree", where) end
  if depth >= json.MAX_DEPTH then
    raise("checkpoint: %s nests tables deeper than %d levels (json.MAX_DEPTH)", where:sub(1, 60), json.MAX_DEPTH)
  end
  on_path[t] = true
  local v = pack_entries(t, tensors, path, depth + 1)
  on_path[t] = nil
  return v
end

pack_value = function(v, tensors, path, depth)
  local tv = type(v)
  if accel.is_tensor(v) then
    local name = path:gsub("^%.", "")
    if name == "" then name = "tensor" end
    local unique, i = name, 1
    while tensors[unique] do
      i = i + 1
      unique = name .. "#" .. i
    end
    tensors[unique] = v
    return {__tensor__ = unique}
  end
  if tv == "number" then
    if v ~= v then return {__float__ = "nan"} end
    if v == math.huge then return {__float__ = "inf"} end
    if v == -math.huge then return {__float__ = "-inf"} end
    return v
  end
  if tv == "string" or tv == "boolean" then return v end
  if tv == "table" then return pack_table(v, tensors, path, depth) end
  raise("checkpoint: %s is a %s; saved state may hold only tensors, numbers, strings, booleans and tables",
    path == "" and "the value" or path:gsub("^%.", ""), tv)
end

-- value -> json-ready value, {name -> tensor}
function M.pack(value)
  local tensors = {}
  on_path = {}
  return pack_value(value, tensors, "", 0), tensors
end

local floats = {nan = 0 / 0, inf = math.huge, ["-inf"] = -math.huge}

local function unpack_value(v, tensors, where)
  if type(v) ~= "table" then
    if v == json.null then return nil end
    return v
  end
  if v.__tensor__ ~= nil then
    local t = tensors[v.__tensor__]
    if t == nil then error(("%s refers to tensor %q, which is not in the tensor file"):format(where, tostring(v.__tensor__)), 0) end
    return t
  end
  if v.__float__ ~= nil then return floats[v.__float__] end
  local out = {}
  if v.__map__ ~= nil then
    for _, kv in ipairs(v.__map__) do out[unpack_value(kv[1], tensors, where)] = unpack_value(kv[2], tensors, where) end
    return out
  end
  for k, x in pairs(v) do out[k] = unpack_value(x, tensors, where) end
  return out
end

function M.unpack(value, tensors, where) return unpack_value(value, tensors or {}, where or "state") end

-- ---------------------------------------------------------------- plain files

M.read_file = read_file

-- Does path hold a safetensors file (u64 header length, then '{')?
local function looks_like_safetensors(path)
  local f = io.open(path, "rb")
  if not f then return false end
  local head = f:read(9)
  local size = f:seek("end")
  f:close()
  if not head or #head < 9 or head:sub(9, 9) ~= "{" then return false end
  local n = 0
  for i = 8, 1, -1 do n = n * 256 + head:byte(i) end
  return n + 8 <= size
end

local function all_tensors(t)
  if type(t) ~= "table" or next(t) == nil then return false end
  for k, v in pairs(t) do
    if type(k) ~= "string" or not accel.is_tensor(v) then return false end
  end
  return true
end

-- A key of t that is not a string, or nil.
local function non_string_key(t)
  for k in pairs(t) do
    if type(k) ~= "string" then return k end
  end
  return nil
end

-- (Tables nested beyond json.MAX_DEPTH are not searched: encoding refuses them.)
local function has_tensor(v, seen, depth)
  if accel.is_tensor(v) then return true end
  depth = depth or 0
  if type(v) ~= "table" or seen[v] or depth > json.MAX_DEPTH then return false end
  seen[v] = true
  for _, x in pairs(v) do
    if has_tensor(x, seen, depth + 1) then return true end
  end
  return false
end

-- save(obj, path): a table of name -> tensor as safetensors (one tensor
-- too: loaded back as itself; an empty table too when path ends in
-- .safetensors), plain Lua values as JSON; written atomically.
function M.save_object(obj, path)
  if type(path) ~= "string" then raise("save: expected a file path, got %s", type(path)) end
  if accel.is_tensor(obj) then -- one tensor, as torch.save(t): load gives it back
    accel.save({tensor = obj}, path, {format = "pt", accel_lua_object = "tensor"})
    return
  end
  if all_tensors(obj) or (type(obj) == "table" and next(obj) == nil and path:match("%.safetensors$")) then
    accel.save(obj, path, {format = "pt"})
    return
  end
  if has_tensor(obj, {}) then
    local k = non_string_key(obj) -- obj is a table holding a tensor
    if k ~= nil then
      raise("save: %s: the key %s is not a string; a table of tensors is saved as safetensors, which names each "
        .. "tensor by a string (use {name = tensor, ...})", path, tostring(k))
    end
    raise("save: %s mixes tensors with other values; save a table of name -> tensor (safetensors) or plain "
      .. "values (JSON), or use register_for_checkpointing + save_state", path)
  end
  local text, err = json.try_encode(obj, {indent = 2})
  if not text then raise("save: %s: %s", path, err) end
  C.fs_write(path, text .. "\n")
end

-- load(path): what save wrote (a safetensors file gives tensors, metadata).
function M.load_object(path)
  if type(path) ~= "string" then raise("load: expected a file path, got %s", type(path)) end
  if looks_like_safetensors(path) then
    local tensors, meta = accel.load(path)
    if meta and meta.accel_lua_object == "tensor" and tensors.tensor then return tensors.tensor end
    return tensors, meta
  end
  if C.fs_stat(path) == "dir" then raise("load: %s is a folder, not a file (load_state reads checkpoint folders)", path) end
  local text, err = read_file(path)
  if not text then raise("load: %s", tostring(err or path .. ": cannot be read")) end
  local v, jerr = json.try_decode(text)
  if jerr then raise("load: %s is neither a safetensors file nor valid JSON (%s)", path, jerr) end
  return v
end

-- ---------------------------------------------------------------- save_model

-- The files of a save_model, as huggingface_hub's
-- split_torch_state_dict_into_shards: names (in `order`) fill a shard
-- until the next one would take it over max_bytes; a tensor larger than
-- max_bytes gets a file of its own at once, and the shard being filled
-- stays open. bytes_of(name) gives a tensor's size. -> {{names...}, ...},
-- total bytes.
function M.plan_model_files(order, bytes_of, max_bytes)
  local shards, current, current_size, total = {}, {}, 0, 0
  for _, name in ipairs(order) do
    local bytes = bytes_of(name)
    total = total + bytes
    if bytes > max_bytes then
      shards[#shards + 1] = {name}
    else
      if current_size + bytes > max_bytes then
        shards[#shards + 1] = current
        current, current_size = {}, 0
      end
      current[#current + 1] = name
      current_size = current_size + bytes
    end
  end
  if #current > 0 or #shards == 0 then shards[#shards + 1] = current end
  return shards, total
end

-- Accelerate's clean_state_dict_for_safetensors: of the names in order
-- whose tensors are one object (tied weights; objects from
-- state_dict({keep_vars = true})), only the first is written. -> the names
-- kept, in order, and the names left out.
function M.untied_order(order, objects)
  local seen, kept, removed = {}, {}, {}
  for _, name in ipairs(order) do
    local t = objects[name]
    if t ~= nil and seen[t] then
      removed[#removed + 1] = name
    else
      if t ~= nil then seen[t] = true end
      kept[#kept + 1] = name
    end
  end
  return kept, removed
end

-- Accelerate's warning for the names untied_order left out (nil: none)
function M.removed_shared_message(removed)
  if #removed == 0 then return nil end
  local names = {}
  for i, name in ipairs(removed) do names[i] = "'" .. name .. "'" end
  table.sort(names)
  return ("Removed shared tensor {%s} while saving. This should be OK, but check by verifying that you don't "
    .. "receive any warning while reloading"):format(table.concat(names, ", "))
end

-- ... logged on the main process as Accelerate logs it
function M.warn_removed_shared(removed)
  local message = M.removed_shared_message(removed)
  if message then require("accel.logging").get_logger("accelerate.utils.other"):warning(message) end
end

-- The file name of shard i of n.
function M.model_file(i, n)
  if n == 1 then return "model.safetensors" end
  return ("model-%05d-of-%05d.safetensors"):format(i, n)
end

-- After the weight files of a save_model are written: the index (more than
-- one file), and stale weight files of an earlier save_model in dir removed.
function M.finish_model_dir(dir, shards, total)
  local keep = {}
  if #shards == 1 then
    keep["model.safetensors"] = true
  else
    local weight_map = {}
    for i, names in ipairs(shards) do
      local file = M.model_file(i, #shards)
      keep[file] = true
      for _, name in ipairs(names) do weight_map[name] = file end
    end
    keep["model.safetensors.index.json"] = true
    C.fs_write(join(dir, "model.safetensors.index.json"),
      json.encode({metadata = {total_size = total}, weight_map = weight_map}, {indent = 2}) .. "\n")
  end
  for _, f in ipairs(C.fs_listdir(dir) or {}) do
    local stale = f == "model.safetensors" or f == "model.safetensors.index.json"
      or f:find("^model%-%d+%-of%-%d+%.safetensors$")
    if stale and not keep[f] then os.remove(join(dir, f)) end
  end
end

-- The weight files of a model checkpoint, as Accelerate's
-- load_checkpoint_in_model finds them: path is a safetensors file, an
-- index (*.json: its weight_map's files, beside it), or a folder holding
-- model.safetensors or exactly one *.index.json. what: the caller's name.
function M.model_files(path, what)
  local kind = C.fs_stat(path)
  if kind == "file" and not path:find("%.json$") then return {path} end
  local index = kind == "file" and path or nil
  if kind == "dir" then
    local indexes = {}
    for _, f in ipairs(C.fs_listdir(path) or {}) do
      if f == "model.safetensors" then return {join(path, f)} end
      if f == "pytorch_model.bin" then
        raise("%s: %s holds pytorch_model.bin, a pickle; accel-lua reads safetensors only (save it with "
          .. "safetensors.torch.save_file or save_pretrained(safe_serialization=True))", what, path)
      end
      if f:find("%.index%.json$") then indexes[#indexes + 1] = f end
    end
    if #indexes ~= 1 then
      raise("%s: %s %s", what, path, #indexes == 0 and "is not a folder containing a `.index.json` file or a "
        .. "model.safetensors file" or "contains more than one `.index.json` file, delete the irrelevant ones")
    end
    index = join(path, indexes[1])
  end
  if index == nil then
    raise("%s: checkpoint should be the path to a file containing a whole state dict, or the index of a sharded "
      .. "checkpoint, or a folder containing a sharded checkpoint or the whole state dict, but got %s", what, path)
  end
  local text, err = read_file(index)
  if not text then raise("%s: cannot read %s: %s", what, index, err) end
  local ok, map = pcall(json.decode, text)
  if ok and type(map) == "table" and map.weight_map ~= nil then map = map.weight_map end
  if not ok or type(map) ~= "table" then raise("%s: %s is not a checkpoint index (JSON with a weight_map)", what, index) end
  local files, seen = {}, {}
  for _, f in pairs(map) do
    if type(f) ~= "string" then raise("%s: %s: a weight_map value is %s, not a file name", what, index, type(f)) end
    if not seen[f] then
      seen[f] = true
      files[#files + 1] = f
    end
  end
  table.sort(files)
  local dir = index:match("^(.*)/[^/]*$") or "."
  for i, f in ipairs(files) do files[i] = join(dir, f) end
  return files
end

-- The reason in an error of C.mkdirs.
local function mkdirs_reason(err) return (tostring(err):gsub("^.-mkdirs: ", "")) end

-- Writes state (name -> tensor; names in `order`) as dir/model.safetensors,
-- or as model-0000i-of-0000N.safetensors shards of at most max_bytes each
-- plus model.safetensors.index.json when it does not fit in one (see
-- plan_model_files). Stale weight files of an earlier save_model in dir are
-- removed.
function M.save_model(state, order, dir, max_bytes)
  local ok, err = pcall(C.mkdirs, dir)
  if not ok then raise("save_model: cannot write %s: %s", dir, mkdirs_reason(err)) end
  local shards, total = M.plan_model_files(order, function(name)
    local t = state[name]
    return t:numel() * t:element_size()
  end, max_bytes)
  for i, names in ipairs(shards) do
    local part = {}
    for _, name in ipairs(names) do part[name] = state[name] end
    accel.save(part, join(dir, M.model_file(i, #shards)), {format = "pt"})
  end
  M.finish_model_dir(dir, shards, total)
  return #shards
end

-- ---------------------------------------------------------------- writer

local Writer = {}
Writer.__index = Writer

-- Start a checkpoint that will replace `target` on commit. tmp_suffix makes
-- the temporary folder name (the same on every process); create: make it now
-- (else call w:create() on the one process that writes the folder).
function M.writer(target, tmp_suffix, create)
  target = target:gsub("/+$", "")
  local last = target:match("[^/]*$")
  if last == "" or last == "." or last == ".." then
    raise("save_state: name the checkpoint folder itself (got %q): the folder is replaced as a whole", target)
  end
  target = C.fs_link_target(target) or target -- a link to a folder: written where it points, as Accelerate does
  local self = setmetatable({target = target, tmp = target .. ".tmp-" .. tmp_suffix,
    pause_ms = tonumber(os.getenv("ACCEL_TEST_SAVE_PAUSE_MS") or "")}, Writer)
  if create then self:create() end
  return self
end

-- The entries of an existing folder dir that are not part of the checkpoint
-- it holds (all of them when it holds no checkpoint index).
local function stray_entries(dir)
  local index = json.try_decode(read_file(join(dir, M.INDEX)) or "")
  local known = type(index) == "table" and type(index.files) == "table" and index.files or {}
  local stray = {}
  local folders = {} -- the top folders of the files in sub-folders
  for f in pairs(known) do
    local top = type(f) == "string" and f:match("^([^/]+)/")
    if top then folders[top] = true end
  end
  for _, f in ipairs(C.fs_listdir(dir) or {}) do
    if f ~= M.INDEX and known[f] == nil and not folders[f] then stray[#stray + 1] = f end
  end
  return stray
end

-- src's tree again under dst, every file a hard link (no data copied; a
-- symbolic link is linked itself).
local function link_tree(src, dst)
  if C.fs_stat(src, true) ~= "dir" then return C.fs_link(src, dst) end
  C.mkdirs(dst)
  for _, f in ipairs(C.fs_listdir(src) or {}) do link_tree(join(src, f), join(dst, f)) end
end

-- The files of target that are not the checkpoint's (save_model's output,
-- logs, ...) and whose names the new checkpoint does not use, linked into
-- the new folder before it is swapped in: they stay, as Accelerate writes
-- into an existing folder, and the swap stays one atomic step.
function Writer:keep_other_files()
  if C.fs_stat(self.target) ~= "dir" then return end
  for _, f in ipairs(stray_entries(self.target)) do
    if C.fs_stat(self:path(f), true) == nil then link_tree(join(self.target, f), self:path(f)) end
  end
end


-- The parent folder, stale temporary folders of crashed saves removed, and
-- the empty temporary folder.
function Writer:create()
  local target = self.target
  local kind = C.fs_stat(target)
  if kind ~= nil and kind ~= "dir" then raise("save_state: %s exists and is not a folder", target) end
  if kind == nil and C.fs_stat(target, true) then
    raise("save_state: %s is a dangling symbolic link (what it points to does not exist)", target)
  end
  local parent, base = target:match("^(.*)/([^/]*)$")
  if parent == nil then parent, base = ".", target end
  local ok, err = pcall(C.mkdirs, parent ~= "" and parent or "/")
  if not ok then raise("save_state: cannot write %s: %s", target, mkdirs_reason(err)) end
  for _, f in ipairs(C.fs_listdir(parent ~= "" and parent or "/") or {}) do
    local tag, pid = f:sub(#base + 1, #base + 5), f:sub(#base + 6)
    if f:sub(1, #base) == base and (tag == ".tmp-" or tag == ".old-") and pid:find("^%d+$") then
      C.fs_remove_tree(join(parent, f)) -- left by a save that crashed
    end
  end
  ok, err = pcall(C.mkdirs, self.tmp)
  if not ok then
    raise("save_state: cannot create the temporary folder %s next to %s (a checkpoint is written there, then renamed "
      .. "into place, so the parent folder must be writable): %s", self.tmp, target, mkdirs_reason(err))
  end
end

-- A save that failed: remove the temporary folder (the target is untouched
-- until commit). Never raises, so the save's own error is the one reported.
function Writer:abort()
  if C.fs_stat(self.tmp) then pcall(C.fs_remove_tree, self.tmp) end
end

function Writer:path(name) return join(self.tmp, name) end

-- Test hook: ACCEL_TEST_SAVE_PAUSE_MS pauses after every file, so a test
-- can kill the process in the middle of save_state.
function Writer:wrote()
  if self.pause_ms then C.sleep_ms(self.pause_ms) end
end

function Writer:tensors(name, tensors, metadata)
  accel.save(tensors, self:path(name), metadata or {format = "pt"})
  self:wrote()
end

function Writer:json(name, value)
  local text, err = json.try_encode(value, {indent = 1})
  if not text then raise("save_state: %s: %s", name, err) end
  C.fs_write(self:path(name), text .. "\n")
  self:wrote()
end

-- NAME.json (+ NAME.safetensors when value holds tensors).
function Writer:packed(name, value)
  local packed, tensors = M.pack(value)
  if next(tensors) ~= nil then self:tensors(name .. ".safetensors", tensors) end
  self:json(name .. ".json", {has_tensors = next(tensors) ~= nil, value = packed})
end

-- Index every file, fsync, and move the folder into place.
-- {relative path = {size, crc32}} of every file under folder sub of root
-- (sub-folders walked; the index and unfinished temporaries left out).
local function checksums(root, sub, files)
  for _, f in ipairs(C.fs_listdir(sub and join(root, sub) or root) or {}) do
    local rel = sub and join(sub, f) or f
    if C.fs_stat(join(root, rel)) == "dir" then
      checksums(root, rel, files)
    elseif rel ~= M.INDEX and not f:find("%.tmp%.%d+$") then
      local crc, size = C.fs_crc32(join(root, rel))
      files[rel] = {size = size, crc32 = crc}
    end
  end
  return files
end

function Writer:commit(index)
  index.format, index.version, index.files = M.FORMAT, M.VERSION, checksums(self.tmp, nil, {})
  C.fs_write(self:path(M.INDEX), json.encode(index, {indent = 1}) .. "\n")
  self:keep_other_files()
  C.fs_fsync(self.tmp)
  if C.fs_stat(self.target) then
    if C.fs_exchange(self.tmp, self.target) then
      C.fs_remove_tree(self.tmp) -- now the old checkpoint
    else
      local old = self.target .. ".old-" .. C.getpid()
      C.fs_rename(self.target, old)
      C.fs_rename(self.tmp, self.target)
      C.fs_remove_tree(old)
    end
  else
    C.fs_rename(self.tmp, self.target)
  end
  C.fs_fsync(self.target:match("^(.*)/[^/]*$") or ".")
end

-- ---------------------------------------------------------------- reader

local Reader = {}
Reader.__index = Reader

local function refuse(dir, fmt, ...)
  error(("load_state: refusing %s: " .. fmt):format(dir, ...), 0)
end

-- Open a checkpoint folder after verifying its index, sizes and checksums.
-- Errors (plain messages, level 0) say which file and what is wrong.
function M.open(dir)
  dir = dir:gsub("/+$", "")
  local kind = C.fs_stat(dir)
  if kind == nil then error(("load_state: no checkpoint at %s (no such directory)"):format(dir), 0) end
  if kind ~= "dir" then error(("load_state: %s is not a checkpoint directory"):format(dir), 0) end
  local text = read_file(join(dir, M.INDEX))
  if not text then
    refuse(dir, "%s is missing, so the folder is incomplete (an interrupted save_state) or not an accel-lua checkpoint",
      M.INDEX)
  end
  local index, jerr = json.try_decode(text)
  if type(index) ~= "table" then refuse(dir, "%s is corrupted (%s)", M.INDEX, jerr or "not an object") end
  if index.format ~= M.FORMAT then refuse(dir, "%s has format %s, expected %q", M.INDEX, tostring(index.format), M.FORMAT) end
  if index.version ~= M.VERSION then
    refuse(dir, "%s has version %s; this accel-lua reads version %d", M.INDEX, tostring(index.version), M.VERSION)
  end
  if type(index.files) ~= "table" then refuse(dir, "%s is corrupted (no file list)", M.INDEX) end
  local names = {}
  for f in pairs(index.files) do names[#names + 1] = f end
  table.sort(names)
  for _, f in ipairs(names) do
    local e = index.files[f]
    if type(e) ~= "table" or not is_integer(e.size) or not is_integer(e.crc32) then
      refuse(dir, "%s is corrupted (bad entry for %s)", M.INDEX, f)
    end
    local path = join(dir, f)
    local k, size = C.fs_stat(path)
    if k == nil then refuse(dir, "%s is missing (listed in %s)", f, M.INDEX) end
    if size ~= e.size then
      refuse(dir, "%s is truncated or altered: %d bytes, the index says %d", f, size, e.size)
    end
    local crc = C.fs_crc32(path)
    if crc ~= e.crc32 then
      refuse(dir, "%s is corrupted: crc32 %08x, the index says %08x", f, crc, e.crc32)
    end
  end
  return setmetatable({dir = dir, index = index}, Reader)
end

function Reader:has(name) return self.index.files[name] ~= nil end

function Reader:require(name)
  if not self:has(name) then refuse(self.dir, "%s is not in the checkpoint", name) end
  return join(self.dir, name)
end

function Reader:tensors(name)
  local path = self:require(name)
  local ok, t = pcall(accel.load, path)
  if not ok then refuse(self.dir, "%s cannot be read: %s", name, tostring(t)) end
  return t
end

function Reader:json(name)
  local path = self:require(name)
  local v, err = json.try_decode(read_file(path))
  if err then refuse(self.dir, "%s is not valid JSON: %s", name, err) end
  return v
end

-- What Writer:packed(name, value) wrote.
function Reader:packed(name)
  local doc = self:json(name .. ".json")
  if type(doc) ~= "table" then refuse(self.dir, "%s.json is malformed", name) end
  local tensors = doc.has_tensors and self:tensors(name .. ".safetensors") or {}
  local ok, v = pcall(M.unpack, doc.value, tensors, name .. ".json")
  if not ok then refuse(self.dir, "%s", tostring(v)) end
  return v
end

-- ---------------------------------------------------------------- fingerprints

local function shape_str(t) -- (.shape stays readable on a parameter a sharding engine released)
  return "[" .. table.concat(t.shape, ",") .. "]"
end

-- A model's identity for load_state: "name dtype [shape]" of every state
-- entry, sorted by name.
function M.fingerprint(state)
  local names = {}
  for k in pairs(state) do names[#names + 1] = k end
  table.sort(names)
  local out = json.array()
  for i, k in ipairs(names) do
    local t = state[k]
    out[i] = ("%s %s %s"):format(k, tostring(t.dtype):gsub("^accel%.", ""), shape_str(t))
  end
  return out
end

-- nil when equal, else a sentence on the first difference. strict = false:
-- only the entries both hold are compared (names one of them lacks are
-- allowed, as load_state_dict(sd, {strict = false})).
function M.compare_fingerprints(saved, current, strict)
  local cur_by_name, saved_by_name = {}, {}
  for _, e in ipairs(current) do cur_by_name[e:match("^(%S+)")] = e end
  for _, e in ipairs(saved) do saved_by_name[e:match("^(%S+)")] = e end
  for _, e in ipairs(saved) do
    local name = e:match("^(%S+)")
    if not cur_by_name[name] then
      if strict ~= false then return ("the checkpoint has %q, which the model lacks"):format(e) end
    elseif cur_by_name[name] ~= e then
      return ("the checkpoint has %q where the model has %q"):format(e, cur_by_name[name])
    end
  end
  for _, e in ipairs(current) do
    if strict ~= false and not saved_by_name[e:match("^(%S+)")] then
      return ("the model has %q, which the checkpoint lacks"):format(e)
    end
  end
  return nil
end

return M
