-- accel.operations: the Accelerator's cross-process operations on tensors
-- and nested tables of tensors (Accelerate's utils.operations), written
-- against the communicator interface of accel.comm so that they are the same
-- code for one process and for N. A nested table is walked recursively and
-- rebuilt with the same keys.
--
-- Values that are not tensors: gather, reduce, broadcast and
-- pad_across_processes raise an error naming the value's type, where it
-- sits in the data and the op (Accelerate raises its TypeError "Unsupported
-- types (...) passed to ..."), on every process count (Accelerate checks
-- gather / broadcast / pad only when distributed; a script should not work
-- on one process and fail on two). Lua values travel with gather_object and
-- broadcast_object_list (JSON). map_tensors (used for batches) passes other
-- leaves through.
--
-- Agreement: a process that passes one tensor and valid arguments to
-- gather, broadcast or pad_across_processes (or runs alone) goes straight
-- to its collective, whose header check (core/dist/dist.c) compares kind,
-- dtype, shape, op and source across the processes. Any other call (also
-- every reduce on several processes: its header does not carry reduction
-- and scale; a nested table, a value that is not a tensor, an invalid
-- argument) first sends every process a short description of its data and
-- arguments (one all_gather of strings): processes that pass differently
-- structured data or different arguments, or a value refused on one
-- process only, then fail with the same error on every process instead of
-- pairing unrelated collectives or waiting forever. A process with one
-- tensor meeting one that does something else fails in that collective's
-- header check. Errors of the collective layer are raised under the op's
-- name.
local accel = require("accel")
local util = require("accel.util")
local compat = require("accel.compat")
local comm_mod = require("accel.comm")
local json = require("accel.json")
local raise = util.raise
local is_container = util.is_container

local ops = {}

-- Keys of a table in one order every process agrees on (pairs() order
-- depends on each process's string hash seed, and collectives must be
-- issued in the same order on every rank).
local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta < tb end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, key_less)
  return keys
end

-- fn applied to every tensor in data (a tensor or nested tables of them),
-- in sorted key order.
local function map_tensors(data, fn)
  if accel.is_tensor(data) then return fn(data) end
  if is_container(data) then
    local out = {}
    for _, k in ipairs(sorted_keys(data)) do out[k] = map_tensors(data[k], fn) end
    return out
  end
  return data
end
ops.map_tensors = map_tensors

local function key_text(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return "." .. k end
  return "[" .. (type(k) == "string" and ("%q"):format(k):gsub("\\\n", "\\n") or tostring(k)) .. "]"
end

local function type_text(v)
  local mt = type(v) == "table" and getmetatable(v)
  if mt then return "table with a metatable (" .. tostring(mt.__name or "an object") .. ")" end
  return type(v) == "table" and "a table of named fields" or type(v)
end

-- An argument as the agreement step compares it (1 and 1.0 alike).
local function arg_text(v) return type(v) == "number" and ("%.17g"):format(v) or util.show(v) end

-- The first refusal (a text starting with mark, which is dropped) among
-- every process's texts, after "rank R: " unless every process sent the same.
local function refusal(texts, mark)
  local first, same = nil, true
  for r, s in ipairs(texts) do
    if first == nil and s:sub(1, 1) == mark then first = r end
    same = same and s == texts[1]
  end
  if first == nil then return nil end
  return (same and "" or ("rank %d: "):format(first - 1)) .. texts[first]:sub(2)
end

-- comm:method(...), a failure of the collective layer (a mismatch found
-- by its header check, a process that left) raised as op's.
local function call(op, comm, method, ...)
  local res = compat.pack(pcall(comm[method], comm, ...))
  if res[1] then return compat.unpack(res, 2, res.n) end
  local msg, where = tostring(res[2]), util.where()
  if msg:sub(1, #where) == where then msg = msg:sub(#where + 1) end
  if msg:sub(1, #op + 2) == op .. ": " then msg = msg:sub(#op + 3) end
  raise("%s: %s", op, msg)
end

-- ---------------------------------------------------------------- agreement

-- Appends to lines one line per table and tensor of data ("data.a tensor"),
-- in sorted key order; returns the refusal of the first value that is not
-- a tensor (hint: what to use instead).
local function describe(data, path, lines, hint)
  if accel.is_tensor(data) then
    lines[#lines + 1] = path .. " tensor"
    return nil
  end
  if not is_container(data) then
    return ("unsupported type %s%s; only tensors and nested tables of tensors can be passed%s"):format(
      type_text(data), path == "data" and "" or " at " .. path, hint)
  end
  lines[#lines + 1] = path .. " table"
  for _, k in ipairs(sorted_keys(data)) do
    local err = describe(data[k], path .. key_text(k), lines, hint)
    if err then return err end
  end
  return nil
end

local function split_lines(s)
  local out = {}
  for line in (s .. "\n"):gmatch("(.-)\n") do out[#out + 1] = line end
  return out
end

-- "a tensor at data.a" for a line of describe, "nothing more" past the end.
local function item_text(line)
  if line == nil then return "nothing more" end
  local path, kind = line:match("^(.*) (%a+)$")
  return ("a %s at %s"):format(kind, path)
end

-- How rank r's description (b) differs from rank 0's (a); the first line
-- holds the arguments.
local function difference(a, b, r)
  local la, lb = split_lines(a), split_lines(b)
  if la[1] ~= lb[1] then return ("rank 0 passes %s, rank %d %s"):format(la[1], r, lb[1]) end
  local i = 2
  while la[i] == lb[i] do i = i + 1 end
  return ("the processes pass differently structured data: rank 0 has %s, rank %d %s (every process must pass "
    .. "tensors under the same keys)"):format(item_text(la[i]), r, item_text(lb[i]))
end

-- The agreement step (see the top): raises the same error on every process
-- when one's data or arguments are refused (err, or a value that is not a
-- tensor) or two describe theirs differently. args: the arguments as text.
local function agree(comm, how, data, args, err)
  local lines = {args}
  err = err or describe(data, "data", lines, how.hint)
  local all = call(how.name, comm, "all_gather_bytes", err and "\0" .. err or table.concat(lines, "\n"), how.name)
  local refused = refusal(all, "\0")
  if refused then raise("%s: %s", how.name, refused) end
  for r = 2, #all do
    if all[r] ~= all[1] then raise("%s: %s", how.name, difference(all[1], all[r], r - 1)) end
  end
end

-- fn on every tensor of data: one tensor (valid arguments: err nil) at once
-- when the collective's header covers the arguments (how.in_header) or
-- there is one process, anything else after the agreement step.
local function run(comm, how, data, args, err, fn)
  if err == nil and accel.is_tensor(data) and (how.in_header or comm.world_size == 1) then return fn(data) end
  agree(comm, how, data, args, err)
  return map_tensors(data, fn)
end

-- ---------------------------------------------------------------- tensors

-- reduce's arguments (reduction, scale) are not in its all_reduce's header:
-- it agrees on them also for one tensor.
local GATHER = {name = "gather", hint = " (use gather_object for other Lua values)", in_header = true}
local REDUCE = {name = "reduce", hint = ""}
local BROADCAST = {name = "broadcast", hint = " (use broadcast_object_list for other Lua values)", in_header = true}
local PAD = {name = "pad_across_processes", hint = "", in_header = true}

-- gather: every process's tensor concatenated along dim 1, in rank order
-- (0-dim tensors become 1-D first, as in Accelerate; on one process the
-- tensor comes back as it is, as Accelerate's).
function ops.gather(comm, data)
  return run(comm, GATHER, data, "{}", nil, function(t)
    local parts = call("gather", comm, "all_gather", (t:dim() == 0 and t:reshape(1) or t):contiguous())
    if #parts == 1 then return t end
    return accel.cat(parts, 1)
  end)
end

-- The first n rows of every tensor in data.
function ops.truncate(data, n)
  return map_tensors(data, function(t)
    if t:dim() == 0 or t:size(1) <= n then return t end
    return t:narrow(1, 1, n)
  end)
end

-- The all_reduce op of each reduction ("none" sums, as Accelerate's).
local reductions = {sum = "sum", mean = "sum", max = "max", min = "min", none = "sum"}

local function reduce_error(reduction, scale)
  if not reductions[reduction] then
    return ('reduction must be "sum", "mean", "max", "min" or "none", got %s'):format(util.show(reduction))
  end
  if scale ~= nil and type(scale) ~= "number" then
    return ("scale must be a number, got %s"):format(util.show(scale))
  end
  return nil
end

-- As Accelerate's in-place division by the number of processes: the mean
-- of an integer tensor over several processes is refused (on one there
-- is nothing to divide, and the tensor keeps its dtype).
local function check_mean(comm, t)
  if comm.world_size == 1 or t.dtype.is_floating_point then return end
  raise('reduce: reduction "mean" of an %s tensor over %d processes: the mean is not a whole number in general (as '
    .. "Accelerate's: result type Float can't be cast to the desired output type); convert it with :float() first",
    tostring(t.dtype), comm.world_size)
end

-- Accelerate applies reduce's scale on XLA devices only: elsewhere it is
-- ignored there, and here, with this warning once (on rank 0).
local warned_scale = false
local function warn_scale(comm, scale)
  if warned_scale or scale == nil or scale == 1 then return end
  warned_scale = true
  if comm.rank ~= 0 then return end
  io.stderr:write(("accel-lua: warning: reduce: scale = %s is not applied: Accelerate applies it on XLA (TPU) "
    .. "devices only, so on CPUs and GPUs the result is not scaled (multiply the result yourself)\n"):format(
    util.show(scale)))
end

-- reduce: sum / mean / max / min of a tensor over processes; "none" is the
-- sum, as Accelerate's (which all-reduces with SUM for every reduction but
-- "max"); "min" is accel-lua's. scale: see warn_scale.
function ops.reduce(comm, data, reduction, scale)
  reduction = reduction or "sum"
  local err = reduce_error(reduction, scale)
  local args = ("{reduction = %s, scale = %s}"):format(arg_text(reduction), arg_text(scale or 1))
  if not err then warn_scale(comm, scale) end
  return run(comm, REDUCE, data, args, err, function(t)
    if reduction == "mean" then check_mean(comm, t) end
    local r = call("reduce", comm, "all_reduce", t, reductions[reduction])
    if reduction == "mean" and comm.world_size > 1 then r = r / comm.world_size end
    return r
  end)
end

-- Why src is not a process index (an integer in 0..world_size - 1), or nil.
local function source_error(comm, src)
  if type(src) ~= "number" or src ~= math.floor(src) or src < 0 or src >= comm.world_size then
    return ("from_process must be a process index in 0..%d, got %s"):format(comm.world_size - 1, util.show(src))
  end
  return nil
end

function ops.broadcast(comm, data, src)
  return run(comm, BROADCAST, data, ("{from_process = %s}"):format(arg_text(src)), source_error(comm, src),
    function(t) return call("broadcast", comm, "broadcast", t, src) end)
end

-- Why dim cannot be pad_across_processes' dim (a non-zero integer), or nil.
local function dim_error(dim)
  if type(dim) ~= "number" or dim ~= math.floor(dim) or math.abs(dim) > 2 ^ 31 then
    return ("dim must be an integer, got %s"):format(util.show(dim))
  end
  if dim == 0 then return "dimension 0 is invalid: dimensions are 1-based (Accelerate's dim=0 is dim = 1)" end
  return nil
end

-- t's size along dim (negative: from the end) and that dim, or -1 when t
-- has no such dim.
local function size_along(t, dim)
  local d = dim < 0 and t:dim() + dim + 1 or dim
  if d < 1 or d > t:dim() then return -1 end
  return t:size(d), d
end

-- Every process's {dim, size along it} (-1: no such dim), checked to agree.
local function padded_size(comm, dim, n)
  local all = call(PAD.name, comm, "all_gather", accel.tensor({dim, n}, {dtype = accel.int64, device = "cpu"}))
  local first = all[1]:tolist()
  local max = math.max(n, first[2])
  for r = 2, #all do
    local v = all[r]:tolist()
    if v[1] ~= first[1] then raise("%s: rank 0 pads dim %d, rank %d dim %d", PAD.name, first[1], r - 1, v[1]) end
    if (v[2] < 0) ~= (first[2] < 0) then
      raise("%s: rank 0's tensor has %s dim %d, rank %d's %s (every process's tensor must have that dim, or none)",
        PAD.name, first[2] < 0 and "no" or "a", dim, r - 1, v[2] < 0 and "has none" or "has one")
    end
    max = math.max(max, v[2])
  end
  return max
end

-- pad_across_processes: pads dim `dim` of each tensor to the largest size
-- any process has, with pad_index, after the data (or before with pad_first);
-- a tensor without that dim (0-dim, or fewer dims) comes back unchanged
-- when every process's lacks it (as Accelerate; a mix is an error).
function ops.pad_across_processes(comm, data, dim, pad_index, pad_first)
  return run(comm, PAD, data, ("{dim = %s}"):format(arg_text(dim)), dim_error(dim), function(t)
    local n, d = size_along(t, dim)
    local max = padded_size(comm, dim, n)
    if n < 0 or max == n then return t end
    local shape = {}
    for i = 1, t:dim() do shape[i] = t:size(i) end
    shape[d] = max
    -- as Accelerate's new_zeros(size) + pad_index: a fractional pad_index makes an integer tensor's result float
    local fractional = pad_index ~= nil and pad_index ~= math.floor(pad_index)
    local dtype = (fractional and not t.dtype.is_floating_point) and accel.get_default_dtype() or t.dtype
    local out = accel.full(shape, pad_index or 0, {dtype = dtype, device = t.device})
    local start = pad_first and max - n + 1 or 1
    accel.no_grad(function() out:narrow(d, start, n):copy_(t) end)
    return out
  end)
end

-- ---------------------------------------------------------------- Lua values

-- Why list cannot be broadcast_object_list's list, or nil.
local function list_error(list)
  if type(list) ~= "table" or getmetatable(list) ~= nil or (#list == 0 and next(list) ~= nil) then
    return "expected a list, got " .. type_text(list)
  end
  return nil
end

-- What a process sends for broadcast_object_list: its from_process, a
-- newline, then "\1" and why its arguments are refused, or (the source)
-- its list as a payload, or nothing.
local function object_list_part(comm, list, src)
  local err = list_error(list) or source_error(comm, src)
  if err then return "\n\1" .. err end
  return ("%d\n"):format(src) .. (comm.rank == src and comm_mod._payload(list) or "")
end

-- broadcast_object_list: the items of list replaced in place, on every
-- process but src, by src's items (as JSON values); returns list. One
-- all_gather, so that a list or source refused on any process, or
-- processes naming different sources, fail on every process (and one
-- process encodes the list too).
function ops.broadcast_object_list(comm, list, src)
  local op = "broadcast_object_list"
  local parts = call(op, comm, "all_gather_bytes", object_list_part(comm, list, src), op)
  local srcs, bodies = {}, {}
  for r, part in ipairs(parts) do srcs[r], bodies[r] = part:match("^(.-)\n(.*)$") end
  local refused = refusal(bodies, "\1")
  if refused then raise("%s: %s", op, refused) end
  for r, body in ipairs(bodies) do
    if body:sub(1, 1) == "\0" then comm_mod._unpayload(op, body, r - 1) end
  end
  for r = 2, #srcs do
    if srcs[r] ~= srcs[1] then
      raise("%s: rank 0 broadcasts from process %s, rank %d from process %s", op, srcs[1], r - 1, srcs[r])
    end
  end
  local got = comm_mod._unpayload(op, bodies[src + 1], src)
  if comm.rank ~= src then
    local n = #list
    for i = 1, #got do list[i] = got[i] end
    for i = #got + 1, n do list[i] = nil end
  end
  return list
end

-- How gather_object treats a gathered value: "list" (a non-empty
-- sequence: its items are concatenated), "empty" (an empty table: either
-- way) or "value" (collected as one item).
local function object_kind(v)
  if type(v) ~= "table" or v == json.null then return "value" end
  if next(v) == nil then return "empty" end
  return v[1] ~= nil and "list" or "value"
end

-- A gathered value in gather_object's error.
local function value_text(v)
  if v == json.null then return "nil" end
  return type(v) == "table" and "a table of named fields" or "a " .. type(v)
end

-- gather_object: lists from every process concatenated in rank order; any
-- other values collected in a list of every process's value (on one
-- process: that value, as Accelerate returns it). Decided from every
-- process's value after the gather, so every process agrees.
function ops.gather_object(comm, obj)
  local all = call("gather_object", comm, "all_gather_object", obj)
  local first = {}
  for r, v in ipairs(all) do
    local kind = object_kind(v)
    first[kind] = first[kind] or r
  end
  if first.list and first.value then
    raise("gather_object: rank %d passes a list and rank %d %s; every process must pass a list (the lists are "
      .. "concatenated) or every process another value (the values are collected)", first.list - 1, first.value - 1,
      value_text(all[first.value]))
  end
  if first.value then return #all == 1 and all[1] or all end -- one process: the value (as Accelerate's)
  local out = {}
  for _, part in ipairs(all) do
    for _, v in ipairs(part) do out[#out + 1] = v end
  end
  return out
end

-- ---------------------------------------------------------------- nested data

-- An object (a table with a metatable) whose class has a to method, as
-- Accelerate's hasattr(obj, "to").
local function has_to(x)
  return type(x) == "table" and getmetatable(x) ~= nil and rawget(x, "to") == nil and util.callable(x.to)
end

-- send_to_device: every tensor of data (nested tables too) moved to device,
-- and every object with a to method sent there by it (data:to(device, {non_blocking
-- = true}) when non_blocking); the values under the keys of skip (a set) and
-- other values stay as they are.
function ops.send_to_device(data, device, skip, non_blocking)
  if accel.is_tensor(data) then return data:to(device) end
  if has_to(data) then
    if non_blocking then return data:to(device, {non_blocking = true}) end
    return data:to(device)
  end
  if not is_container(data) then return data end
  local out = {}
  for k, v in pairs(data) do
    if skip[k] then out[k] = v else out[k] = ops.send_to_device(v, device, skip, non_blocking) end
  end
  return out
end

-- find_batch_size: the first dim of the first tensor of data (a list's
-- first item, a table's first key in sorted order, nested).
function ops.find_batch_size(data)
  if accel.is_tensor(data) then
    if data:dim() == 0 then raise("find_batch_size: a 0-dim tensor has no batch dimension") end
    return data:size(1)
  end
  if not is_container(data) then
    raise("find_batch_size: can only find the batch size of tensors, got %s", type_text(data))
  end
  local k = sorted_keys(data)[1]
  if k == nil then raise("find_batch_size: cannot find the batch size of an empty table") end
  return ops.find_batch_size(data[k])
end

-- ---------------------------------------------------------------- split

local function splittable(x) return accel.is_tensor(x) or (type(x) == "table" and getmetatable(x) == nil) end

local function is_list(x) return accel.is_tensor(x) or #x > 0 or next(x) == nil end

local function length_of(x)
  if accel.is_tensor(x) then
    if x:dim() == 0 then raise("split_between_processes: a 0-dim tensor has no length to split") end
    return x:size(1)
  end
  return #x
end

-- x's items first .. first + count - 1, then (apply_padding) copies of x's
-- last item up to pad_to: Accelerate pads with inputs[-1], the input's
-- last item, so a process whose part is empty still gets pad_to items.
local function slice(x, first, count, pad_to)
  local n = length_of(x)
  if accel.is_tensor(x) then
    local parts = {}
    if count > 0 then parts[1] = x:narrow(1, first, count) end
    for _ = count + 1, pad_to do parts[#parts + 1] = x:narrow(1, n, 1) end
    if #parts == 0 then return x:narrow(1, 1, 0) end
    return #parts == 1 and parts[1] or accel.cat(parts, 1)
  end
  local out = {}
  for i = 1, count do out[i] = x[first + i - 1] end
  for i = count + 1, pad_to do out[i] = x[n] end
  return out
end

-- Accelerate's split of n items: rank r gets items [start, start + count)
-- with the first n % world ranks one item longer; apply_padding makes
-- every part n // world (+1 when n % world > 0) long.
function ops.split_range(n, rank, world, apply_padding)
  local per, extra = math.floor(n / world), n % world
  local first = rank * per + math.min(rank, extra) + 1
  local count = per + (rank < extra and 1 or 0)
  local pad_to = (apply_padding and n > 0) and per + (extra > 0 and 1 or 0) or count
  return first, count, pad_to
end

-- The common length of the lists / tensors in x (a table of them, nested
-- tables too), or nil when it holds none; name: x's path, for errors.
local function common_length(x, name, n)
  if is_list(x) then
    local len = length_of(x)
    if n and len ~= n then
      raise("split_between_processes: all values of the table must have the same length (%s has %d, another %d)",
        name, len, n)
    end
    return len
  end
  for _, k in ipairs(util.sorted_keys(x)) do
    local path = name and name .. "." .. tostring(k) or tostring(k)
    if not splittable(x[k]) then
      raise("split_between_processes: value %s is a %s, expected a list or a tensor", path, type(x[k]))
    end
    n = common_length(x[k], path, n)
  end
  return n
end

-- This rank's contiguous part of inputs (see PartialState:split_between_processes):
-- a list, a tensor (along dim 1), or a table of them (nested tables too),
-- whose values must all have the first one's length (Accelerate's rule for
-- a dict). On one process inputs come back unchanged, as in Accelerate.
function ops.split(inputs, rank, world, apply_padding)
  if not splittable(inputs) then
    raise("split_between_processes: expected a list, a tensor or a table of them, got %s", type(inputs))
  end
  if world == 1 then return inputs end
  local n = common_length(inputs, nil, nil)
  local first, count, pad_to = ops.split_range(n or 0, rank, world, apply_padding)
  local function split_value(x)
    if is_list(x) then return slice(x, first, count, pad_to) end
    local out = {}
    for k, v in pairs(x) do out[k] = split_value(v) end
    return out
  end
  return split_value(inputs)
end

return ops
