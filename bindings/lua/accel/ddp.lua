-- accel.ddp: DistributedDataParallel's pieces for the Accelerator (the
-- work is C: core/dist/ddp.c, bindings/ddp_lua.c).
--
--   local r = accel.ddp.Reducer(model:parameters(), {bucket_cap_mb = 25, find_unused_parameters = false, align = 1})
--   r:set_sync(false) ... r:set_sync(true)   -- no_sync: nothing copied, nothing sent
--   loss:backward(); r:finalize()             -- .grad now holds the average over the ranks
--   accel.ddp.Reducer(model, {finalize_in_backward = true})  -- loss:backward() alone leaves the average
--   accel.ddp.broadcast_model(model, 0)       -- rank 0's parameters and buffers to every rank
--   accel.DistributedDataParallelKwargs{bucket_cap_mb = 10}  -- Accelerator{kwargs_handlers = {...}}
--
-- How a step works (core/dist/ddp.h has the details): parameters are packed
-- into flat buckets in reverse registration order; during a synchronising
-- backward each parameter's gradient is copied into its bucket once it is
-- complete (the engine reports each parameter once per backward, after its
-- last contribution, so tied weights are fine) and each full bucket's
-- all_reduce (avg) starts at once, in bucket order, overlapping the rest of
-- backward; finalize() starts what is left (parameters that got no
-- gradient contribute their accumulated .grad or zeros), waits, and copies
-- the averages back into .grad. .grad is never a view into a bucket.
--
-- Decisions: as PyTorch's DDP with broadcast_buffers = true (the default),
-- rank 0's buffers are broadcast at prepare and again before every forward
-- run with grad enabled outside no_sync (a custom module may change its buffers in
-- forward; a model without buffers pays nothing); DistributedDataParallelKwargs
-- accepts Accelerate's keys, of which bucket_cap_mb, find_unused_parameters
-- and broadcast_buffers (false: never) mean something here; dim = 0 (the
-- only value: nothing is scattered), check_reduction (a no-op in PyTorch
-- too), gradient_as_bucket_view and static_graph (PyTorch's memory and
-- speed options, which change no result) are accepted and change nothing
-- (gradients are copied, the graph is dynamic).
local accel = require("accel")
local plugins = require("accel.plugins")
local raise = require("accel.nn.module").raise
local C = accel._C

local ddp = {}

local KWARGS = plugins.register("DistributedDataParallelKwargs", {dim = "number", broadcast_buffers = "boolean",
  bucket_cap_mb = "number", find_unused_parameters = "boolean", check_reduction = "boolean",
  gradient_as_bucket_view = "boolean", static_graph = "boolean", comm_hook = "any", comm_wrapper = "any",
  comm_state_option = "any"})

local DDPKwargs = {__name = "DistributedDataParallelKwargs"}
DDPKwargs.__index = DDPKwargs
ddp.DistributedDataParallelKwargs_class = DDPKwargs

-- Accelerate's DistributedDataParallelKwargs (a kwargs handler).
function ddp.DistributedDataParallelKwargs(o)
  if getmetatable(o) == DDPKwargs then return o end
  plugins.check_options("DistributedDataParallelKwargs", o, KWARGS)
  o = o or {}
  if o.comm_hook ~= nil or o.comm_wrapper ~= nil or o.comm_state_option ~= nil then
    raise("DistributedDataParallelKwargs: comm_hook / comm_wrapper / comm_state_option are not supported (gradients "
      .. "are averaged in float precision of the parameters)")
  end
  if o.dim ~= nil and o.dim ~= 0 then
    raise("DistributedDataParallelKwargs: dim = %s is not supported: each process feeds its own batch, nothing is "
      .. "scattered along a dimension (only 0, the default, is accepted)", tostring(o.dim))
  end
  local cap = o.bucket_cap_mb
  if cap ~= nil and not (cap > 0) then
    raise("DistributedDataParallelKwargs: bucket_cap_mb must be a positive number, got %s", tostring(cap))
  end
  return setmetatable({bucket_cap_mb = cap or 25, find_unused_parameters = o.find_unused_parameters == true,
    broadcast_buffers = o.broadcast_buffers ~= false, gradient_as_bucket_view = o.gradient_as_bucket_view == true,
    static_graph = o.static_graph == true}, DDPKwargs)
end

function ddp.is_kwargs(x) return getmetatable(x) == DDPKwargs end

-- The distinct parameters that require grad, in order.
local function trainable(params)
  if type(params) == "table" and type(params.parameters) == "function" then params = params:parameters() end
  local out, seen = {}, {}
  for i, p in ipairs(params) do
    if not accel.is_tensor(p) then raise("ddp: parameter %d must be a tensor, got %s", i, type(p)) end
    if p.requires_grad and not seen[p] then
      seen[p] = true
      out[#out + 1] = p
    end
  end
  return out
end
ddp.trainable = trainable

-- The ranks' layout check (core/dist/ddp.c) names a parameter by its position
-- in list; a module's parameter also gets its name.
local function name_parameter(params, list, msg)
  msg = msg:gsub("^[^\n]-:%d+: (ddp: )", "%1", 1) -- the location is added again by raise
  local i = tonumber(msg:match("^ddp: parameter (%d+) %("))
  if not i or type(params.named_parameters) ~= "function" then return msg end
  for name, p in params:named_parameters() do
    if rawequal(p, list[i]) then return (msg:gsub("^ddp: parameter %d+ %(", ("ddp: parameter %d '%s' ("):format(i, name))) end
  end
  return msg
end

-- Reducer(params, {bucket_cap_mb = 25, find_unused_parameters = false, align = 1,
-- finalize_in_backward = false}): the gradient reducer over the parameters
-- that require grad (a list, or a module). r.params lists them (bucket info
-- refers to positions in it). finalize_in_backward: the step completes when
-- its synchronising backward ends (what the Accelerator asks for, as
-- PyTorch's DDP: a bare loss:backward() leaves averaged gradients); without
-- it the caller calls r:finalize().
function ddp.Reducer(params, o)
  plugins.check_options("ddp.Reducer", o, {bucket_cap_mb = "number", find_unused_parameters = "boolean",
    align = "number", finalize_in_backward = "boolean"})
  o = o or {}
  if type(params) ~= "table" then
    raise("ddp.Reducer: expected a list of parameters or a module, got %s", type(params))
  end
  local cap, align = o.bucket_cap_mb or 25, o.align or 1
  if not (cap > 0) then raise("ddp.Reducer: bucket_cap_mb must be a positive number, got %s", tostring(cap)) end
  if align < 1 or align ~= math.floor(align) then
    raise("ddp.Reducer: align must be a positive integer, got %s", tostring(align))
  end
  local list = trainable(params)
  if #list == 0 then raise("ddp.Reducer: the model has no parameters that require grad") end
  local ok, r = pcall(C.ddp_reducer, list, cap, math.floor(align), o.find_unused_parameters == true,
    o.finalize_in_backward == true)
  if not ok then raise("%s", name_parameter(params, list, tostring(r))) end
  return r, list
end

-- Rank src's tensors copied into every rank's, in place.
local function broadcast_tensors(tensors, src)
  local dist = require("accel.dist")
  accel.no_grad(function()
    for _, t in ipairs(tensors) do
      if t:is_contiguous() then
        dist.broadcast(t, src or 0)
      else
        t:copy_(dist.broadcast(t:contiguous(), src or 0))
      end
    end
  end)
end

local function buffers_of(model)
  return type(model.buffers) == "function" and model:buffers() or {}
end

-- Rank src's parameters (and buffers, unless buffers == false) copied into
-- every rank's model, in place.
function ddp.broadcast_model(model, src, buffers)
  local tensors = {}
  for _, p in ipairs(model:parameters()) do tensors[#tensors + 1] = p end
  if buffers ~= false then
    for _, b in ipairs(buffers_of(model)) do tensors[#tensors + 1] = b end
  end
  broadcast_tensors(tensors, src)
end

-- DDP's broadcast_buffers, as PyTorch decides it: rank 0's buffers are
-- copied into every rank's before a forward when the previous forward ran
-- with grad enabled while syncing() was true (not under no_sync); so also
-- before the first, and before a no_grad evaluation that follows training.
-- Nothing when the model has no buffers.
function ddp.sync_buffers_each_forward(model, syncing)
  if #buffers_of(model) == 0 then return end
  local sync_next = true
  model:register_forward_pre_hook(function(m)
    if sync_next then broadcast_tensors(buffers_of(m), 0) end
  end)
  model:register_forward_hook(function()
    sync_next = accel.is_grad_enabled() and syncing()
  end)
end

return ddp
