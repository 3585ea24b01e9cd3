-- accel.dist: collectives between the processes of one job, named after
-- torch.distributed, over the C communicator (core/dist/dist.h, accel._C.dist_*).
--
--   local dist = accel.dist
--   dist.get_rank(), dist.get_world_size(), dist.get_local_rank(),
--   dist.get_local_world_size(), dist.get_backend()   -- "single" | "mpi"
--   dist.all_reduce(t, "sum"|"avg"|"mean"|"max"|"min", {async_op=})   -> t (in place)
--   dist.reduce_scatter(input, op, {out=, async_op=})                  -> [d0 / world, ...]
--   dist.all_gather(t, {out=, async_op=})                              -> [world * d0, ...]
--   dist.all_gather_v(t, {async_op=})                                  -> out, counts
--   dist.broadcast(t, src, {async_op=})                                -> t (in place)
--   dist.barrier({async_op=})
--   dist.all_gather_bytes(s) -> list of every rank's string; dist.broadcast_bytes(s, src) -> string
--   dist.counters([group]) -> calls, bytes (tables by kind, plus .total); dist.reset_counters()
--   dist.node_group(), dist.cross_node_group(), dist.split_group(color, key, {group=})
--     -> accel.dist.Group; every collective takes {group = g} (its ranks are g's)
--   dist.set_timeout(seconds >= 0, 0 = off), dist.get_timeout(); dist.progress(); dist.abort([code])
--
-- Ranks are 0-based values (src too), as in PyTorch and Accelerate. The
-- process group is initialised on first use: the "mpi" backend when the
-- process was started by mpirun / srun with more than one process, else
-- "single" (every collective is the identity). With async_op = true a
-- collective returns a handle: h:wait() returns its results, h:test() (or
-- h:is_completed()) says whether it finished. Tensors may be on any device
-- (one call's on one device; a device the host cannot address is staged
-- through host buffers, docs/distributed-devices.md); in-place ones
-- (all_reduce, broadcast) must be contiguous. Before its data
-- moves, every collective checks that all ranks called it with the same
-- dtype, shape, op and source (one small header exchange, core/dist/dist.c): a
-- difference is one error on every rank naming both ranks' values
-- (docs/collectives.md).
local accel = require("accel")
local raise = require("accel.util").raise
local C = accel._C

local dist = {}

dist.ReduceOp = {SUM = "sum", AVG = "avg", MAX = "max", MIN = "min"}

-- The options table o (or {}), with every key checked against `allowed`.
local function options(o, allowed, name)
  if o == nil then return {} end
  if type(o) ~= "table" then
    raise("%s: options table expected, got %s", name, type(o))
  end
  for k in pairs(o) do
    if not allowed[k] then
      raise("%s: unknown option '%s'", name, tostring(k))
    end
  end
  return o
end

local ASYNC = {async_op = true, group = true}
local ASYNC_OUT = {async_op = true, out = true, group = true}

-- C function fn on o.group (a sub-communicator, passed first) or the world.
local function on(fn, o, ...)
  if o.group ~= nil then return fn(o.group, ...) end
  return fn(...)
end

-- Positional op or src that may be left out in favour of the options table.
local function split(v, o)
  if type(v) == "table" and o == nil then return nil, v end
  return v, o
end

function dist.init() return C.dist_init() end
function dist.is_initialized() return C.dist_is_initialized() end
function dist.info() return C.dist_info() end
function dist.get_backend() return C.dist_info().backend end
-- get_rank(group) / get_world_size(group): in the group when one is given.
function dist.get_rank(group) return group and group:info().rank or C.dist_info().rank end
function dist.get_world_size(group) return group and group:info().size or C.dist_info().world_size end
function dist.get_local_rank() return C.dist_info().local_rank end
function dist.get_local_world_size() return C.dist_info().local_world_size end

function dist.all_reduce(t, op, o)
  op, o = split(op, o)
  o = options(o, {async_op = true, op = true, group = true}, "all_reduce")
  return on(C.dist_all_reduce, o, t, op or o.op or "sum", o.async_op)
end

function dist.reduce_scatter(input, op, o)
  op, o = split(op, o)
  o = options(o, {async_op = true, out = true, op = true, group = true}, "reduce_scatter")
  return on(C.dist_reduce_scatter, o, input, op or o.op or "sum", o.out, o.async_op)
end

function dist.all_gather(t, o)
  o = options(o, ASYNC_OUT, "all_gather")
  return on(C.dist_all_gather, o, t, o.out, o.async_op)
end

function dist.all_gather_v(t, o)
  o = options(o, ASYNC, "all_gather_v")
  return on(C.dist_all_gather_v, o, t, o.async_op)
end

function dist.broadcast(t, src, o)
  src, o = split(src, o)
  o = options(o, {async_op = true, src = true, group = true}, "broadcast")
  src = src or o.src or 0
  if type(src) ~= "number" or src ~= math.floor(src) then
    raise("broadcast: src must be a rank number (0-based), got %s", tostring(src))
  end
  return on(C.dist_broadcast, o, t, src, o.async_op)
end

function dist.barrier(o)
  o = options(o, ASYNC, "barrier")
  return on(C.dist_barrier, o, o.async_op)
end

function dist.all_gather_bytes(s)
  if type(s) ~= "string" then
    raise("all_gather_bytes: string expected, got %s", type(s))
  end
  return C.dist_all_gather_bytes(s)
end

function dist.broadcast_bytes(s, src) return C.dist_broadcast_bytes(s, src or 0) end

-- counters(group): that group's calls only; without one, every call of this process.
function dist.counters(group)
  if group then return C.dist_counters(group) end
  return C.dist_counters()
end

-- Groups (sub-communicators, core/dist/dist.h): node_group() the processes on
-- this machine, cross_node_group() those with this one's node rank on
-- every machine (both made once, collectively, and kept);
-- split_group(color, key, {group=}) a new group of the members (of the
-- world or of group) with the same color, ranked by key (default: rank),
-- freed by g:free() or when collected. g:info() -> {rank, size, label,
-- world_ranks}. Pass {group = g} to a collective to run it in g.
function dist.node_group() return C.dist_group("node") end
function dist.cross_node_group() return C.dist_group("cross_node") end
function dist.split_group(color, key, o)
  o = options(o, {group = true}, "split_group")
  if type(color) ~= "number" or color ~= math.floor(color) or color < 0 then
    raise("split_group: color must be an integer >= 0, got %s", tostring(color))
  end
  return on(C.dist_split, o, color, key)
end
function dist.reset_counters() C.dist_reset_counters() end

function dist.set_timeout(seconds)
  if type(seconds) ~= "number" then
    raise("set_timeout: seconds expected, got %s", type(seconds))
  end
  if seconds ~= seconds or seconds < 0 then
    raise("set_timeout: seconds must be >= 0 (0 turns the watchdog off), got %s", tostring(seconds))
  end
  C.dist_set_timeout(seconds)
end
function dist.get_timeout() return C.dist_get_timeout() end
function dist.progress() C.dist_progress() end
function dist.abort(code) C.dist_abort(code) end

return dist
