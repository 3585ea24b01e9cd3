-- accel.utils: torch.utils-style helpers (activation checkpointing) and
-- Accelerate's utilities set_seed, synchronize_rng_states, send_to_device,
-- find_batch_size, find_executable_batch_size and the collectives (at the end). Activation checkpointing:
--
--   local y = accel.utils.checkpoint(block, x)                 -- block(x), recomputed in backward
--   local a, b = accel.utils.checkpoint(fn, x, mask, 3, {use_reentrant = true})
--   accel.utils.checkpoint_module(model.h[1])                  -- every call of the module checkpointed
--   accel.utils.checkpoint_module(model.h[1], {enabled = false})  -- undo
--   accel.utils.apply_activation_checkpointing(model, {check_fn = function(m) return m:_get_name() == "GPT2Block" end})
--
-- checkpoint(fn, ...) runs fn(...) keeping none of its intermediate
-- activations, and returns what fn returns. It keeps the arguments, the
-- random generator's state (accel.get_rng_state) and the autocast dtype; when
-- a gradient reaches its outputs, it recomputes fn on detached copies of the
-- arguments with the same random state and autocast, back-propagates the
-- incoming gradients through the recomputed graph (parameters used inside fn
-- get their .grad as without checkpointing), puts back the generator state
-- that was current before the recompute, and passes the arguments'
-- gradients on. Nested checkpoints work (a checkpointed fn may call
-- checkpoint itself). Under mixed_precision = "fp8" the recompute runs the
-- fp8 Linears as the forward did: on or off alike, every cast with the
-- scale the forward used, no amax recorded twice (accel.fp8's tape).
--
-- Options, as PyTorch's keywords, in one trailing plain table holding at
-- least one of the names below (a trailing table without any of them is an
-- argument of fn; one that has them and an unknown key is an error):
--   use_reentrant (false): false records fn's graph without keeping its
--     tensors (ag_set_keep_saved), so each output requires grad exactly as
--     without checkpointing, and parameters inside fn get gradients even when
--     no argument requires grad. true runs fn under no_grad as PyTorch's
--     reentrant variant: every floating-point output requires grad when some
--     argument does, and when none does, nothing inside gets a gradient (a
--     warning says so once).
--   preserve_rng_state (true): replay the random state in the recompute.
--   determinism_check ("default"): the recompute's results must have the
--     forward's shapes, dtypes and devices, else backward raises (PyTorch
--     compares the saved tensors, which are not kept here); "none": no check.
--   PyTorch's debug and context_fn: only false (what asks for nothing);
--     another value is an error.
-- Decisions where PyTorch has no counterpart: under no_grad (or when grad
-- mode is off) checkpoint just calls fn; fn must return at least one tensor
-- (as a separate return value: tables are not looked into), else an error.
-- Tensors that require grad must reach fn as arguments, or be leaves
-- (parameters): a captured non-leaf makes the recompute's backward reach the
-- outer graph, which the engine refuses with an error. Arguments written in
-- place between forward and backward (t._version changed) are refused.
--
-- How: the checkpoint's outputs get one custom node (_C.attach_custom,
-- several outputs through slot nodes) whose inputs are the tensor
-- arguments, the parameters the recorded forward graph reaches
-- (_C.graph_leaves; given no gradient here, they make a leaf's gradient hook
-- such as DDP's wait for the node) and an anchor leaf (so the node is
-- recorded when only parameters need grads). Its backward recomputes and
-- runs a nested backward (_C.backward_many), which the engine counts as part
-- of the outer pass. The tensors a checkpointed forward or recompute leaves
-- are garbage at once; _C.collect_garbage_tensors frees them.
local accel = require("accel")
local compat = require("accel.compat")
local util = require("accel.util")
local plugins = require("accel.plugins")
local ops = require("accel.operations")
local C = accel._C
local raise = util.raise

local utils = {}

local OPTIONS = {use_reentrant = true, preserve_rng_state = true, determinism_check = true}
-- PyTorch's other keywords: accepted at the value that asks for nothing
local UNSUPPORTED = {debug = false, context_fn = false}

-- Refuse an unknown key, a known one of the wrong kind, or an unsupported
-- one set to something. names: the valid keys, for the message.
local function check_option(where, k, v, names)
  if k == "determinism_check" then
    if v ~= "default" and v ~= "none" then
      raise('%s: determinism_check must be "default" or "none", got %s', where, util.show(v))
    end
    return
  end
  if OPTIONS[k] then
    if type(v) ~= "boolean" then raise("%s: %s must be true or false, got %s", where, k, util.show(v)) end
    return
  end
  if UNSUPPORTED[k] ~= nil then
    if v == UNSUPPORTED[k] then return end
    raise("%s: option '%s' is not supported (only %s = %s)", where, k, k, tostring(UNSUPPORTED[k]))
  end
  raise("%s: unknown option '%s' (options: %s)", where, tostring(k), names or "use_reentrant, preserve_rng_state, determinism_check")
end

-- The trailing options table of args (removed from it), or {}: a plain
-- table with at least one of PyTorch's checkpoint keywords.
local function take_options(args)
  local last = args[args.n]
  if args.n == 0 or type(last) ~= "table" or getmetatable(last) ~= nil then return {} end
  local known = false
  for k in pairs(last) do
    if OPTIONS[k] or UNSUPPORTED[k] ~= nil then known = true end
  end
  if not known then return {} end
  for k, v in pairs(last) do check_option("checkpoint", k, v) end
  args.n = args.n - 1
  return last
end

-- fn(args...) with keep_saved and autocast set, both restored also on error;
-- returns fn's results packed.
local function run_with(fn, args, keep_saved, autocast)
  local prev_keep = C.set_keep_saved(keep_saved)
  local prev_cast = C.set_autocast(autocast)
  local ok, res = pcall(function() return compat.pack(fn(compat.unpack(args, 1, args.n))) end)
  C.set_keep_saved(prev_keep)
  C.set_autocast(prev_cast)
  if not ok then error(res, 0) end
  return res
end

-- A leaf that requires grad, given as an extra input to the checkpoint's
-- node so that it is recorded when only parameters inside fn need grads.
local anchor
local function get_anchor()
  if not anchor then anchor = accel.zeros({}, {requires_grad = true}) end
  return anchor
end

local warned_no_grad_input = false

-- The results' tensors that get the checkpoint's history: positions and
-- tensors. Raises when fn returned no tensor at all.
local function outputs_to_attach(res, reentrant)
  local pos, outs, any = {}, {}, false
  for i = 1, res.n do
    local r = res[i]
    if accel.is_tensor(r) then
      any = true
      if (reentrant and r.dtype.is_floating_point) or (not reentrant and r.requires_grad) then
        pos[#pos + 1], outs[#outs + 1] = i, r
      end
    end
  end
  if not any then
    raise("checkpoint: fn must return at least one tensor (as a separate return value; tables are not looked "
      .. "into), got %s", res.n == 0 and "nothing" or type(res[1]))
  end
  return pos, outs
end

-- The storage versions of the tensor arguments, at the forward.
local function versions_of(args)
  local v = {}
  for i = 1, args.n do
    if accel.is_tensor(args[i]) then v[i] = args[i]._version end
  end
  return v
end

-- The arguments for the recompute: tensors that require grad as fresh
-- leaves over the same storage, the rest as they were. Raises when one was
-- written in place since the forward (the recompute would see other values).
local function detached_args(args, versions)
  local d = {n = args.n}
  for i = 1, args.n do
    local a = args[i]
    if accel.is_tensor(a) and a._version ~= versions[i] then
      local dims = {}
      for k = 1, a:dim() do dims[k] = a:size(k) end
      -- level 0: backward, which reports it, adds the user's file:line
      error(("checkpoint: argument %d (shape [%s]) was modified by an in-place operation after the checkpointed "
        .. "forward, so the recompute in backward would see other values; clone it before modifying it")
        :format(i, table.concat(dims, ", ")), 0)
    end
    if accel.is_tensor(a) and a.requires_grad then d[i] = a:detach():requires_grad_(true) else d[i] = a end
  end
  return d
end

-- The shape, dtype and device of the tensors among fn's results, by position
local function results_metadata(res)
  local m = {n = res.n}
  for i = 1, res.n do
    if accel.is_tensor(res[i]) then m[i] = ("shape %s, %s, %s"):format(util.shape_str(res[i]), res[i].dtype.name,
      tostring(res[i].device)) end
  end
  return m
end

-- determinism_check = "default" (PyTorch's): the recompute's results must
-- have the forward's metadata, else its gradients would belong to another
-- computation
local function check_recompute(st, res)
  if not st.metadata then return end
  local again = results_metadata(res)
  if again.n ~= st.metadata.n then
    error(("checkpoint: the recompute in backward returned %d values, the forward %d: fn must compute the same "
      .. "thing again (or pass determinism_check = \"none\")"):format(again.n, st.metadata.n), 0)
  end
  for i = 1, again.n do
    if again[i] ~= st.metadata[i] then
      error(("checkpoint: the recompute in backward gave result %d with %s, the forward with %s: fn must compute "
        .. "the same thing again (or pass determinism_check = \"none\")"):format(i, again[i] or "no tensor",
        st.metadata[i] or "no tensor"), 0)
    end
  end
end

-- The backward of one checkpoint: recompute, back-propagate, and return
-- the arguments' gradients (one per node input).
local function make_backward(st, pos, n_inputs)
  return function(...)
    local grads = compat.pack(...)
    local args = st.args
    if not args then error("checkpoint: backward through the same checkpoint a second time", 0) end
    if not C.retaining_graph() then st.args = nil end -- the inputs are not needed after this
    local d = detached_args(args, st.versions)
    local rng_now
    if st.rng then
      rng_now = {accel.get_rng_state()}
      accel.set_rng_state(st.rng[1], st.rng[2])
    end
    local ok, res = pcall(function()
      return require("accel.fp8").replay(st.fp8, accel.enable_grad, run_with, st.fn, d, true, st.autocast)
    end)
    if rng_now then accel.set_rng_state(rng_now[1], rng_now[2]) end
    if not ok then error(res, 0) end
    check_recompute(st, res)
    local roots, rgrads = {}, {}
    for k, i in ipairs(pos) do
      local r, g = res[i], grads[k]
      if g ~= nil and accel.is_tensor(r) and r.requires_grad then roots[#roots + 1], rgrads[#rgrads + 1] = r, g end
    end
    -- the arguments' gradients captured (the parameters reached inside fn
    -- go on as the pass around it sends them: .grad, or autograd.grad's capture)
    local leaves, at = {}, {}
    for i = 1, args.n do
      if accel.is_tensor(args[i]) and args[i].requires_grad then leaves[#leaves + 1], at[#leaves + 1] = d[i], i end
    end
    local got = #roots > 0 and C.grad(roots, rgrads, leaves, C.retaining_graph(), true) or {}
    res, roots, rgrads = nil, nil, nil
    C.collect_garbage_tensors() -- the recompute's tensors, now that its graph is done with them
    local gin = {}
    for k, i in ipairs(at) do gin[i] = got[k] end
    return compat.unpack(gin, 1, n_inputs)
  end
end

local function no_grad_input_warning(args)
  if warned_no_grad_input then return end
  for i = 1, args.n do
    if accel.is_tensor(args[i]) and args[i].requires_grad then return end
  end
  warned_no_grad_input = true
  io.stderr:write("accel.utils.checkpoint: use_reentrant = true and no argument requires grad: "
    .. "gradients inside fn will be nil (use use_reentrant = false)\n")
end

-- checkpoint with the arguments packed and the options parsed.
local function checkpoint_packed(fn, args, o)
  if not util.callable(fn) then raise("checkpoint: fn must be a function or a callable table, got %s", type(fn)) end
  if not accel.is_grad_enabled() then return fn(compat.unpack(args, 1, args.n)) end
  local reentrant = o.use_reentrant == true
  local st = {fn = fn, args = args, versions = versions_of(args), autocast = require("accel.amp").current_dtype()}
  if o.preserve_rng_state ~= false then st.rng = {accel.get_rng_state()} end
  local fp8 = require("accel.fp8")
  st.fp8 = fp8.checkpoint_begin() -- the fp8 casts' scales, for the recompute
  if reentrant then no_grad_input_warning(args) end
  local ok, res = pcall(function()
    if reentrant then return accel.no_grad(run_with, fn, args, true, st.autocast) end
    return run_with(fn, args, false, st.autocast)
  end)
  fp8.checkpoint_end(st.fp8)
  if not ok then error(res, 0) end
  C.collect_garbage_tensors() -- fn's intermediate tensors: none is kept for backward
  local pos, outs = outputs_to_attach(res, reentrant)
  if #outs == 0 then return compat.unpack(res, 1, res.n) end
  if o.determinism_check ~= "none" then st.metadata = results_metadata(res) end
  local inputs = {}
  for i = 1, args.n do inputs[i] = accel.is_tensor(args[i]) and args[i] or false end
  if not reentrant then
    -- the parameters the recompute will reach are inputs too (given no
    -- gradient here: the recompute's backward accumulates them), so that a
    -- leaf's gradient hook (DDP) waits for this node before it runs
    for _, leaf in ipairs(C.graph_leaves(outs)) do inputs[#inputs + 1] = leaf end
    inputs[#inputs + 1] = get_anchor()
  end
  local backward = make_backward(st, pos, #inputs)
  if #outs == 1 then
    res[pos[1]] = C.attach_custom(outs[1], inputs, backward, "CheckpointFunction")
  else
    local attached = C.attach_custom(outs, inputs, backward, "CheckpointFunction")
    for k, i in ipairs(pos) do res[i] = attached[k] end
  end
  return compat.unpack(res, 1, res.n)
end

function utils.checkpoint(fn, ...)
  local args = compat.pack(...)
  local o = take_options(args)
  return checkpoint_packed(fn, args, o)
end

-- checkpoint_module(module [, opts]): every later call of the module runs
-- its forward under checkpoint (opts: use_reentrant, preserve_rng_state);
-- {enabled = false} undoes it. Returns the module. The wrapper lives in the
-- instance (module.forward), so the class and other instances are untouched
-- and forward hooks still run around the checkpointed forward.
local wrapped = setmetatable({}, {__mode = "k"})

function utils.checkpoint_module(module, opts)
  if not require("accel.nn.module").is_module(module) then
    raise("checkpoint_module: expected an nn.Module, got %s", type(module))
  end
  opts = opts or {}
  if type(opts) ~= "table" then raise("checkpoint_module: options must be a table, got %s", type(opts)) end
  local o = {}
  for k, v in pairs(opts) do
    if k ~= "enabled" then
      check_option("checkpoint_module", k, v, "enabled, use_reentrant, preserve_rng_state, determinism_check")
      o[k] = v
    end
  end
  local attrs = rawget(module, "_attrs")
  local w = wrapped[module]
  if opts.enabled ~= nil and type(opts.enabled) ~= "boolean" then
    raise("checkpoint_module: enabled must be true or false, got %s", util.show(opts.enabled))
  end
  if opts.enabled == false then
    if w then
      if attrs.forward ~= w.wrapper then
        raise("checkpoint_module: %s.forward was replaced after checkpoint_module wrapped it; undo that first",
          module:_get_name())
      end
      attrs.forward = w.prev
      wrapped[module] = nil
    end
    return module
  end
  if w then
    w.opts = o
    return module
  end
  w = {prev = attrs.forward, opts = o}
  local inner = module.forward -- the forward in effect before wrapping
  w.wrapper = function(self, ...)
    local args = compat.pack(self, ...)
    return checkpoint_packed(inner, args, w.opts)
  end
  attrs.forward = w.wrapper
  wrapped[module] = w
  return module
end

-- apply_activation_checkpointing(model, {check_fn = fn(module) -> bool [,
-- use_reentrant =, preserve_rng_state =]}): checkpoint_module on every
-- module of model (itself included, pre-order) for which check_fn is true
-- (without check_fn: every module, PyTorch's default), as PyTorch's
-- apply_activation_checkpointing (FSDP wrap units use it).
-- Returns the list of the modules wrapped.
function utils.apply_activation_checkpointing(model, opts)
  if not require("accel.nn.module").is_module(model) then
    raise("apply_activation_checkpointing: expected an nn.Module, got %s", type(model))
  end
  opts = opts or {}
  if type(opts) ~= "table" then raise("apply_activation_checkpointing: options must be a table, got %s", type(opts)) end
  local check_fn = opts.check_fn or function() return true end
  if type(check_fn) ~= "function" then
    raise("apply_activation_checkpointing: check_fn must be a function(module) -> boolean, got %s", type(check_fn))
  end
  local o = {}
  for k, v in pairs(opts) do
    if k ~= "check_fn" then
      check_option("apply_activation_checkpointing", k, v, "check_fn, use_reentrant, preserve_rng_state, determinism_check")
      o[k] = v
    end
  end
  local done = {}
  for _, m in ipairs(model:modules()) do
    if check_fn(m) then done[#done + 1] = utils.checkpoint_module(m, o) end
  end
  return done
end

-- Whether checkpoint_module wraps the module now.
function utils.is_checkpointed(module) return wrapped[module] ~= nil end

-- ---------------------------------------------------------------- Accelerate's utilities

local SEED_OPTIONS = plugins.register("set_seed", {device_specific = "boolean", deterministic = "boolean"})

-- set_seed(seed, [device_specific], [deterministic]) or (seed, {device_specific =,
-- deterministic =}): accel.manual_seed(seed), plus the process index with
-- device_specific. deterministic = true (torch.use_deterministic_algorithms)
-- holds already on the CPU, where every op is deterministic; on a GPU it is
-- refused: some CUDA kernels have no deterministic form.
local function on_gpu()
  local st = require("accel.state").current()
  if st then return st.device.type == "cuda" end
  return accel.cuda.is_available()
end

function utils.set_seed(seed, device_specific, deterministic)
  local o = device_specific
  if type(o) ~= "table" then o = {device_specific = device_specific, deterministic = deterministic} end
  plugins.check_options("set_seed", o, SEED_OPTIONS)
  if o.deterministic and on_gpu() then
    raise("set_seed: deterministic = true is not supported on a GPU: the CUDA backward kernels of indexing, "
      .. "convolution, pooling and layer norm add with atomics, which have no deterministic form here (every CPU "
      .. "op is deterministic)")
  end
  if require("accel.data.util").to_int(seed) == nil then -- also inf and whole floats past int64
    raise("set_seed: seed must be an integer, got %s", util.show(seed))
  end
  if seed < 0 or seed > 4294967295 then -- (Accelerate's numpy seeding: "Seed must be between 0 and 2**32 - 1")
    raise("set_seed: seed must be between 0 and 2^32 - 1, got %s", util.show(seed))
  end
  if o.device_specific then seed = seed + require("accel.dist").get_rank() end
  accel.manual_seed(seed)
end

-- synchronize_rng_states([rng_types]): every process continues with rank
-- 0's generator state (one broadcast). accel has one generator for every
-- device, so rng_types may name "torch" and "cuda" (both that one).
function utils.synchronize_rng_states(rng_types, generator)
  if rng_types ~= nil and type(rng_types) ~= "table" then
    raise("synchronize_rng_states: rng_types must be a list, got %s", type(rng_types))
  end
  for _, kind in ipairs(rng_types or {}) do
    if kind ~= "torch" and kind ~= "cuda" then
      raise("synchronize_rng_states: rng type %s is not supported: accel has one generator (\"torch\" or \"cuda\")",
        util.show(kind))
    end
  end
  if generator ~= nil then
    raise("synchronize_rng_states: a generator argument is not supported (accel has one generator)")
  end
  local state = accel.tensor({accel.get_rng_state()}, {dtype = accel.int64, device = "cpu"})
  require("accel.dist").broadcast(state, 0)
  accel.set_rng_state(compat.unpack(state:tolist()))
end

local SEND_OPTIONS = plugins.register("send_to_device", {non_blocking = "boolean", skip_keys = "any"})

-- A set of skip_keys (a string or a list of strings).
local function key_set(keys)
  if type(keys) == "string" then keys = {keys} end
  local set = {}
  for i, k in ipairs(type(keys) == "table" and keys or {}) do
    if type(k) ~= "string" then raise("send_to_device: skip_keys[%d] must be a string, got %s", i, type(k)) end
    set[k] = true
  end
  if keys ~= nil and type(keys) ~= "table" then
    raise("send_to_device: skip_keys must be a string or a list of strings, got %s", type(keys))
  end
  return set
end

-- send_to_device(data, device, [{non_blocking =, skip_keys =}]): every
-- tensor of data (nested tables too) moved to device, except under the keys
-- in skip_keys; an object with a to method (through its metatable) is sent
-- by it, as Accelerate's; other values pass through.
function utils.send_to_device(data, device, o, skip_keys)
  if type(o) == "boolean" or (o == nil and skip_keys ~= nil) then -- Accelerate's positional (non_blocking, skip_keys)
    o = {non_blocking = o, skip_keys = skip_keys}
  elseif skip_keys ~= nil then
    raise("send_to_device: skip_keys given after an options table")
  end
  plugins.check_options("send_to_device", o, SEND_OPTIONS)
  local kind = tostring(device):match("^[^:]+")
  if o and o.non_blocking and kind ~= "cpu" and kind ~= "sim" then
    raise("send_to_device: non_blocking = true is not supported on %s: copies to the device are synchronous here",
      tostring(device))
  end
  return ops.send_to_device(data, accel.device(device), key_set(o and o.skip_keys), o and o.non_blocking)
end

-- find_batch_size(data): the first dim of the first tensor of data (a
-- list's first item, a table's first key in sorted order, nested).
utils.find_batch_size = ops.find_batch_size

-- DistributedType: Accelerate's enum as the strings accelerator.distributed_type
-- takes (NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP here; the others are
-- listed so that a ported comparison reads, and never equal a value here).
utils.DistributedType = setmetatable({}, {
  __index = function(_, k)
    raise("DistributedType.%s does not exist (NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP, ...)", tostring(k))
  end,
  __newindex = function() raise("DistributedType is read-only") end,
})
for _, name in ipairs({"NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED", "FSDP", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA",
  "MULTI_MUSA", "MULTI_XPU", "MULTI_HPU", "MULTI_NEURON", "XLA", "MEGATRON_LM"}) do
  rawset(utils.DistributedType, name, name)
end

-- find_executable_batch_size: accel.find_executable_batch_size, where
-- Accelerate's users import it from (accelerate.utils).
function utils.find_executable_batch_size(fn, o)
  return require("accel.accelerator").find_executable_batch_size(fn, o)
end

-- Accelerate's memory utilities. release_memory(...) returns nil for each
-- argument (`model, opt = accel.utils.release_memory(model, opt)` lets go
-- of the caller's references, Accelerate's idiom), then collects and gives
-- the allocator's cached blocks back.
local function empty_caches()
  accel.empty_cache()
  accel.cuda.empty_cache() -- the GPUs this process used (none: nothing)
end

local function give_back_cache()
  collectgarbage()
  collectgarbage()
  empty_caches()
end

function utils.release_memory(...)
  give_back_cache()
  local n = select("#", ...)
  if n > 0 then return compat.unpack({}, 1, n) end
end

-- clear_device_cache([garbage_collection = false]): the cached blocks
-- back to the system, after a full collection if asked.
function utils.clear_device_cache(garbage_collection)
  if garbage_collection ~= nil and type(garbage_collection) ~= "boolean" then
    raise("clear_device_cache: garbage_collection must be true or false, got %s", type(garbage_collection))
  end
  if garbage_collection then give_back_cache() else empty_caches() end
end

-- should_reduce_batch_size(err): whether err (a caught error) is the
-- allocator's out-of-memory error, the one find_executable_batch_size
-- retries on.
function utils.should_reduce_batch_size(err)
  return require("accel.accelerator").is_out_of_memory_error(err)
end

-- convert_bytes(n): "84.95 MB", as Accelerate's (1024-based units).
function utils.convert_bytes(n)
  if type(n) ~= "number" or n < 0 then raise("convert_bytes: expected a byte count >= 0, got %s", tostring(n)) end
  return require("accel.estimate_memory").convert_bytes(n)
end

-- skip_first_batches(loader, [num_batches = 0]): the loader starting at batch num_batches + 1 of its
-- current pass (Accelerate's accelerate.skip_first_batches; accelerator:skip_first_batches's function)
function utils.skip_first_batches(loader, num_batches)
  return require("accel.accelerator").skip_first_batches(loader, num_batches)
end

-- wait_for_everyone(): every process waits for the others (the process state's barrier)
function utils.wait_for_everyone() require("accel.state").PartialState():wait_for_everyone() end

-- extract_model_from_parallel(model, [keep_fp32_wrapper = true], [keep_torch_compile = true]): the model
-- itself (nothing wraps it here); keep_fp32_wrapper = false removes the mixed-precision forward patch
function utils.extract_model_from_parallel(model, keep_fp32_wrapper, keep_torch_compile)
  for name, v in pairs({keep_fp32_wrapper = keep_fp32_wrapper, keep_torch_compile = keep_torch_compile}) do
    if v ~= nil and type(v) ~= "boolean" then raise("extract_model_from_parallel: %s must be a boolean, got %s", name, type(v)) end
  end
  if keep_fp32_wrapper == false then require("accel.amp").unpatch_forward(model) end
  return model
end

-- save(obj, path, [save_on_each_node = false], [safe_serialization]): as Accelerator:save on the main
-- process (every process's main with save_on_each_node); safetensors / JSON only, never pickle
function utils.save(obj, path, save_on_each_node, safe_serialization)
  if safe_serialization == false then
    raise("save: only safetensors (and JSON) are written, never pickle (safe_serialization = true)")
  end
  local st = require("accel.state").PartialState()
  if (save_on_each_node and st.is_local_main_process) or st.is_main_process then
    require("accel.checkpoint").save_object(obj, path)
  end
end

-- Accelerate's load_checkpoint_in_model(model, checkpoint, {strict = false}):
-- the weights of a safetensors file, an index of shards, or a folder that
-- save_model / save_pretrained wrote, copied into the model (strict: every
-- key must match, over all the shards together); checkpoint names that the
-- model lacks are reported in one warning, as Accelerate's. Its big-model
-- options (device_map, offloading) are refused; dtype is accepted and, as
-- in Accelerate without a device_map, changes nothing.
local LOAD_OPTIONS = plugins.register("load_checkpoint_in_model", {strict = "boolean", dtype = "any",
  device_map = "any", offload_folder = "any", offload_state_dict = "boolean", offload_buffers = "boolean",
  keep_in_fp32_modules = "any", offload_8bit_bnb = "boolean", full_state_dict = "boolean",
  broadcast_from_rank0 = "boolean"})
local DISPATCH = {device_map = false, offload_folder = false, offload_state_dict = true, offload_buffers = true,
  keep_in_fp32_modules = false, offload_8bit_bnb = true, broadcast_from_rank0 = true}

function utils.load_checkpoint_in_model(model, checkpoint, o)
  local what = "load_checkpoint_in_model"
  plugins.check_options(what, o, LOAD_OPTIONS)
  o = o or {}
  for k, flag in pairs(DISPATCH) do
    if o[k] ~= nil and (not flag or o[k] == true) then
      raise("%s: %s = %s is not supported: there is no big-model dispatch (device maps, offloading); the weights "
        .. "are copied into the model where it is", what, k, tostring(o[k]))
    end
  end
  if o.full_state_dict == false then
    raise("%s: full_state_dict = false is not supported: the checkpoint holds full weights", what)
  end
  if type(model) ~= "table" or type(model.load_state_dict) ~= "function" then
    raise("%s: expected a model, got %s", what, type(model))
  end
  if type(checkpoint) ~= "string" then raise("%s: checkpoint must be a path, got %s", what, type(checkpoint)) end
  local sd = {}
  for _, f in ipairs(require("accel.checkpoint").model_files(checkpoint, what)) do
    for k, v in pairs(accel.load(f)) do sd[k] = v end
  end
  local _, unexpected = model:load_state_dict(sd, {strict = o.strict == true})
  if #unexpected > 0 then
    table.sort(unexpected)
    io.stderr:write(("Some weights of the model checkpoint at %s were not used when initializing %s: %s. This may "
      .. "or may not be an issue - make sure that the checkpoint does not have unnecessary parameters, or that the "
      .. "model definition correctly corresponds to the checkpoint.\n"):format(checkpoint, model:_get_name(),
      table.concat(unexpected, ", ")))
  end
end

-- Accelerate's configuration classes, also imported from accelerate.utils
local CLASSES = {"ProjectConfiguration", "DataLoaderConfiguration", "GradientAccumulationPlugin", "DeepSpeedPlugin",
  "FullyShardedDataParallelPlugin", "DistributedDataParallelKwargs", "InitProcessGroupKwargs", "GradScalerKwargs",
  "AutocastKwargs", "FP8RecipeKwargs", "TERecipeKwargs"}

-- accelerate.utils names not provided, and why (an error naming them, not nil)
local NOT_PROVIDED = {
  PrecisionType = "mixed precision is given as the strings \"no\", \"fp16\", \"bf16\", \"fp8\"",
  LoggerType = "trackers are named by strings (\"tensorboard\", \"csv\", ...) or given as tables",
  RNGType = "there is one generator; rng_types name it as \"torch\" or \"cuda\"",
  concatenate = "use accel.cat on the tensors", recursively_apply = "walk the table in Lua",
  convert_outputs_to_fp32 = "a prepared model's outputs are float32 already (mixed_precision)",
  convert_to_fp32 = "use t:float()", patch_environment = "set variables before starting accel-lua",
  clear_environment = "set variables before starting accel-lua", is_torch_version = "there is no torch",
  compare_versions = "there are no Python packages", get_max_memory = "there is no big-model dispatch",
  synchronize_rng_state = "use utils.synchronize_rng_states",
}

-- accelerate.utils's is_X_available checks: what accel-lua itself offers
-- (bf16 and fp8 on every device, the TensorBoard and MLflow trackers, the
-- DeepSpeed plugin's engine, CUDA when a GPU is there); every other package
-- or device Accelerate asks about is absent (false)
local AVAILABLE = {bf16 = true, fp8 = true, tensorboard = true, mlflow = true, deepspeed = true,
  cuda = function() return accel.cuda.is_available() end}

local function availability(k)
  local what = type(k) == "string" and k:match("^is_([%w_]+)_available$")
  if not what then return nil end
  local v = AVAILABLE[what]
  if type(v) == "function" then return v end
  return function() return v == true end
end

-- broadcast, gather, gather_object, broadcast_object_list, reduce,
-- pad_across_processes: Accelerate's accelerate.utils collectives, the
-- Accelerator's methods of the same names on the process state; the
-- configuration classes; the is_X_available checks; NOT_PROVIDED names raise.
setmetatable(utils, {__index = function(_, k)
  local acc = require("accel.accelerator")
  local f = acc._utils_collectives[k]
  if f == nil then
    for _, name in ipairs(CLASSES) do if name == k then f = acc[k] end end
  end
  f = f or availability(k)
  if f then
    rawset(utils, k, f)
    return f
  end
  if NOT_PROVIDED[k] then raise("accel.utils.%s is not provided by accel-lua: %s", k, NOT_PROVIDED[k]) end
  -- Accelerate's names for engines accel-lua lacks (DummyOptim, ProfileKwargs, ...): accel.X raises for them
  -- (bindings/accel.c's list), and so does accel.utils.X, as accelerate.utils exports them too
  local ok, err = pcall(function() return accel[k] end)
  local why = not ok and type(k) == "string" and tostring(err):match("is Accelerate's but not provided by accel%-lua .*$")
  if why then raise("accel.utils.%s %s", k, why) end
end})

return utils
