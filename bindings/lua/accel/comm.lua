-- accel.comm: the communicator the Accelerator talks to, and its
-- single-process implementation. Every collective the Accelerator needs
-- goes through this interface, so the multi-process backends (MPI on CPU,
-- NCCL on GPU; issue 4) plug in by returning another object from
-- comm.create() with the same fields and methods:
--
--   c.rank, c.world_size              this process, 0-based, and the process count
--   c.local_rank, c.local_world_size  the same within this machine
--   c.backend                         "none" | "mpi" | "nccl"
--   c:all_gather(t)           -> list of world_size tensors (rank order; the first dim may differ)
--   c:all_reduce(t, op)       -> new tensor, op "sum" | "max" | "min"
--   c:broadcast(t, src)       -> t, overwritten in place with rank src's values on the others
--   c:barrier()
--   c:all_gather_bytes(s, op) -> list of world_size strings (rank order), for the operation op
--   c:all_gather_object(v, [op = "gather_object"]) -> list of world_size plain Lua values (rank order)
--   c:broadcast_object(v, src)-> rank src's v
-- comm._payload(v) / comm._unpayload(op, s, rank): a value as the text these
-- send (JSON, or "\0" and why it cannot be sent) and back.
local comm = {}

local function accel_C_dist_info()
  local C = require("accel")._C
  return C.dist_info and C.dist_info()
end

local Single = {}
Single.__index = Single

function Single:all_gather(t) return {t} end
function Single:all_reduce(t, op)
  if op ~= "sum" and op ~= "max" and op ~= "min" then
    error(("all_reduce: op must be \"sum\", \"max\" or \"min\", got %s"):format(tostring(op)), 2)
  end
  return t:clone()
end
function Single:broadcast(t, src)
  if src ~= 0 then error(("broadcast: from_process %s does not exist (1 process)"):format(tostring(src)), 2) end
  return t
end
function Single:barrier() end

-- Objects travel as JSON (accel.json); a tensor inside one (as Accelerate
-- pickles it) as {__accel_tensor__ = {dtype, shape, device, values}}: its
-- values flattened, a float that is not finite as "nan", "inf" or "-inf".
-- A rank whose value cannot be encoded sends "\0" and the reason instead
-- (no JSON text starts with a NUL), so the one collective still completes on
-- every rank and every rank raises the same error, naming the rank; one
-- process encodes and decodes too, so a value is refused (or copied) the same
-- on every process count.
local TENSOR_TAG = "__accel_tensor__"
local NON_FINITE = {nan = 0 / 0, inf = math.huge, ["-inf"] = -math.huge}

local function tensor_entry(t)
  local values = t:detach():to("cpu"):flatten():tolist()
  if t.dtype.is_floating_point then
    for i, x in ipairs(values) do
      if x ~= x then values[i] = "nan" elseif x == math.huge then values[i] = "inf"
      elseif x == -math.huge then values[i] = "-inf" end
    end
  end
  local shape = {}
  for i = 1, t:dim() do shape[i] = t:size(i) end
  return {[TENSOR_TAG] = {dtype = t.dtype.name, shape = shape, device = tostring(t.device), values = values}}
end

-- v with every tensor (also inside plain tables) as its entry; a table met
-- again inside itself is its copy again, so json.encode names the cycle
-- where it is in v; past json's depth limit the rest stays as it is, for
-- json.encode to refuse
local PACK_DEPTH = 300
local function pack_tensors(v, copies, depth)
  local accel = require("accel")
  if accel.is_tensor(v) then return tensor_entry(v) end
  if type(v) ~= "table" or getmetatable(v) ~= nil then return v end
  copies, depth = copies or {}, depth or 0
  if copies[v] then return copies[v] end
  if depth > PACK_DEPTH then return v end
  local out = {}
  copies[v] = out
  for k, x in pairs(v) do out[k] = pack_tensors(x, copies, depth + 1) end
  copies[v] = nil
  return out
end

local function tensor_of(e)
  local accel = require("accel")
  local values = e.values
  for i, x in ipairs(values) do values[i] = NON_FINITE[x] or x end
  local t = accel.tensor(values, {dtype = accel[e.dtype]}):reshape(e.shape)
  local ok, moved = pcall(t.to, t, e.device) -- a device this process does not have: the CPU copy
  return ok and moved or t
end

-- a decoded value with every tensor entry as a tensor again
local function unpack_tensors(v)
  if type(v) ~= "table" or getmetatable(v) ~= nil then return v end
  local e = v[TENSOR_TAG]
  if type(e) == "table" and next(v, next(v)) == nil then return tensor_of(e) end
  for k, x in pairs(v) do v[k] = unpack_tensors(x) end
  return v
end

local function payload(v)
  local text, err = require("accel.json").try_encode(pack_tensors(v))
  return text or "\0" .. err
end

-- The value a payload from 0-based `rank` stands for, or the error, raised
-- at the user's file:line.
local function unpayload(op, s, rank)
  local raise = require("accel.util").raise
  if s:sub(1, 1) == "\0" then raise("%s: rank %d's value cannot be sent: %s", op, rank, s:sub(2)) end
  local v, err = require("accel.json").try_decode(s)
  if err then raise("%s: rank %d's value arrived damaged: %s", op, rank, err) end
  return unpack_tensors(v)
end

-- Every payload checked before any is decoded: one failing rank fails all.
local function unpayload_all(op, payloads)
  for r, s in ipairs(payloads) do
    if s:sub(1, 1) == "\0" then unpayload(op, s, r - 1) end
  end
  local out = {}
  for r, s in ipairs(payloads) do out[r] = unpayload(op, s, r - 1) end
  return out
end

comm._payload, comm._unpayload = payload, unpayload

-- all_gather_bytes for the operation op (a name), over gather (the
-- backend's all_gather of strings): op's name travels with s, so that two
-- operations built on it cannot pair (gather_object on one process,
-- broadcast_object_list on another): that is one error on every process.
local function gather_named(gather, op, s)
  local parts, names = gather(op .. "\n" .. s), {}
  for r, p in ipairs(parts) do names[r], parts[r] = p:match("^([^\n]*)\n(.*)$") end
  for r = 2, #names do
    if names[r] ~= names[1] then
      require("accel.util").raise("collective mismatch: rank 0 called %s, rank %d called %s (every process must call "
        .. "the same operations in the same order)", names[1], r - 1, names[r])
    end
  end
  return parts
end

local function all_gather_object(self, v, op)
  op = op or "gather_object"
  return unpayload_all(op, self:all_gather_bytes(payload(v), op))
end

local function single_gather(s) return {s} end

function Single:all_gather_bytes(s, op) return gather_named(single_gather, op, s) end
Single.all_gather_object = all_gather_object
function Single:broadcast_object(v) return unpayload("broadcast_object", payload(v), 0) end

-- Several processes: the same interface over accel.dist (MPI on CPU).
local Multi = {}
Multi.__index = Multi

local function dist() return require("accel.dist") end

-- First dims may differ between ranks (all_gather_v), e.g. the last
-- batches of a loader prepared with even_batches = false.
function Multi:all_gather(t)
  local x = t:dim() == 0 and t:reshape(1) or t:contiguous()
  local all, counts = dist().all_gather_v(x)
  local parts, at = {}, 1
  for i, n in ipairs(counts) do
    parts[i] = all:narrow(1, at, n)
    at = at + n
  end
  return parts
end
function Multi:all_reduce(t, op)
  if op ~= "sum" and op ~= "max" and op ~= "min" then
    error(("all_reduce: op must be \"sum\", \"max\" or \"min\", got %s"):format(tostring(op)), 2)
  end
  local c = t:contiguous():clone()
  dist().all_reduce(c, op)
  return c
end
function Multi:broadcast(t, src)
  if src < 0 or src >= self.world_size then
    error(("broadcast: from_process %s does not exist (%d processes)"):format(tostring(src), self.world_size), 2)
  end
  if t:is_contiguous() then
    dist().broadcast(t, src)
    return t
  end
  local c = dist().broadcast(t:contiguous(), src)
  require("accel").no_grad(function() t:copy_(c) end)
  return t
end
function Multi:barrier() dist().barrier() end
function Multi:all_gather_bytes(s, op) return gather_named(dist().all_gather_bytes, op, s) end
Multi.all_gather_object = all_gather_object
function Multi:broadcast_object(v, src)
  src = src or 0
  return unpayload("broadcast_object", dist().broadcast_bytes(self.rank == src and payload(v) or "", src), src)
end

-- The communicator for this process: accel.dist's world when the script was
-- started on several ranks (mpirun, srun, accel-lua launch), else one process.
function comm.create()
  local info = accel_C_dist_info()
  if info and info.world_size > 1 then
    return setmetatable({rank = info.rank, world_size = info.world_size, local_rank = info.local_rank,
      local_world_size = info.local_world_size, backend = info.backend}, Multi)
  end
  return setmetatable({rank = 0, world_size = 1, local_rank = 0, local_world_size = 1, backend = "none"}, Single)
end

return comm
