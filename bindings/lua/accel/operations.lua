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
local accel = require("accel")
local raise = require("accel.nn.module").raise
local is_container = require("accel.util").is_container

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
  return "[" .. (type(k) == "string" and ("%q"):format(k) or tostring(k)) .. "]"
end

local function type_text(v)
  local mt = type(v) == "table" and getmetatable(v)
  if mt then return "table with a metatable (" .. tostring(mt.__name or "an object") .. ")" end
  return type(v) == "table" and "a table of named fields" or type(v)
end

-- The first leaf of data that is not a tensor: its description and path.
local function first_other(data, path)
  if accel.is_tensor(data) then return nil end
  if not is_container(data) then return type_text(data), path end
  for _, k in ipairs(sorted_keys(data)) do
    local what, where = first_other(data[k], path .. key_text(k))
    if what then return what, where end
  end
  return nil
end

-- map_tensors, after checking that every leaf is a tensor (else an error
-- naming op, the type, where it is and hint).
local function map_only_tensors(op, hint, data, fn)
  local what, where = first_other(data, "data")
  if what then
    raise("%s: unsupported type %s%s; only tensors and nested tables of tensors can be passed%s", op, what,
      where == "data" and "" or " at " .. where, hint)
  end
  return map_tensors(data, fn)
end

-- gather: every process's tensor concatenated along dim 1, in rank order
-- (0-dim tensors become 1-D first, as in Accelerate; on one process the
-- tensor comes back as it is, as Accelerate's).
function ops.gather(comm, data)
  return map_only_tensors("gather", " (use gather_object for other Lua values)", data, function(t)
    local parts = comm:all_gather((t:dim() == 0 and t:reshape(1) or t):contiguous())
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

local reductions = {sum = "sum", mean = "sum", max = "max", min = "min"}

-- reduce: sum / mean / max / min of a tensor over processes (then * scale);
-- "none" returns it unchanged.
function ops.reduce(comm, data, reduction, scale)
  reduction = reduction or "sum"
  local op = reductions[reduction]
  if not op and reduction ~= "none" then
    raise('reduce: reduction must be "sum", "mean", "max", "min" or "none", got %s', tostring(reduction))
  end
  if reduction == "none" then return map_only_tensors("reduce", "", data, function(t) return t end) end
  return map_only_tensors("reduce", "", data, function(t)
    local r = comm:all_reduce(t, op)
    if reduction == "mean" then r = r / comm.world_size end
    if scale and scale ~= 1 then r = r * scale end
    return r
  end)
end

-- from_process must name a process: an integer in 0..world_size - 1.
local function check_source(op, comm, src)
  if type(src) ~= "number" or src ~= math.floor(src) or src < 0 or src >= comm.world_size then
    raise("%s: from_process must be a process index in 0..%d, got %s", op, comm.world_size - 1, tostring(src))
  end
end

function ops.broadcast(comm, data, src)
  check_source("broadcast", comm, src or 0)
  return map_only_tensors("broadcast", " (use broadcast_object_list for other Lua values)", data,
    function(t) return comm:broadcast(t, src or 0) end)
end

-- broadcast_object_list: the items of list replaced in place, on every
-- process but src, by src's items (as JSON values); returns list.
function ops.broadcast_object_list(comm, list, src)
  if type(list) ~= "table" or getmetatable(list) ~= nil or (#list == 0 and next(list) ~= nil) then
    raise("broadcast_object_list: expected a list, got %s", type_text(list))
  end
  check_source("broadcast_object_list", comm, src)
  if comm.world_size == 1 then return list end
  local got = comm:broadcast_object(comm.rank == src and list or {}, src) -- only src's value is sent
  if comm.rank ~= src then
    local n = #list
    for i = 1, #got do list[i] = got[i] end
    for i = #got + 1, n do list[i] = nil end
  end
  return list
end

-- pad_across_processes: pads dim `dim` of each tensor to the largest size
-- any process has, with pad_index, after the data (or before with pad_first);
-- a tensor without that dim (0-dim, or fewer dims) comes back unchanged.
function ops.pad_across_processes(comm, data, dim, pad_index, pad_first)
  return map_only_tensors("pad_across_processes", "", data, function(t)
    if t:dim() == 0 then return t end
    local d = dim < 0 and t:dim() + dim + 1 or dim
    if d < 1 or d > t:dim() then return t end -- as Accelerate: a tensor without that dim is left as it is
    local sizes = comm:all_gather(accel.tensor({t:size(d)}, {device = "cpu"})) -- a control value: on the host
    local max = t:size(d)
    for _, s in ipairs(sizes) do max = math.max(max, s:item()) end
    if max == t:size(d) then return t end
    local shape = {}
    for i = 1, t:dim() do shape[i] = t:size(i) end
    shape[d] = max
    local out = accel.full(shape, pad_index or 0, {dtype = t.dtype, device = t.device})
    local start = pad_first and max - t:size(d) + 1 or 1
    accel.no_grad(function() out:narrow(d, start, t:size(d)):copy_(t) end)
    return out
  end)
end

-- gather_object: a list from every process, concatenated in rank order;
-- any other value comes back as the list of every process's value.
function ops.gather_object(comm, obj)
  local all = comm:all_gather_object(obj)
  if type(obj) ~= "table" or getmetatable(obj) ~= nil or #obj == 0 and next(obj) ~= nil then return all end
  local out = {}
  for _, part in ipairs(all) do
    for _, v in ipairs(part) do out[#out + 1] = v end
  end
  return out
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
  local keys = {}
  for k in pairs(x) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
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
