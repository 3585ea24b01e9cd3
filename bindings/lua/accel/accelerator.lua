-- accel.accelerator: accel.Accelerator, Hugging Face Accelerate's training
-- loop orchestrator, plus PartialState, DeepSpeedPlugin,
-- FullyShardedDataParallelPlugin and ProjectConfiguration (DESIGN §2).
--
--   local accelerator = accel.Accelerator{mixed_precision = "bf16", gradient_accumulation_steps = 2}
--   model, optimizer, loader, scheduler = accelerator:prepare(model, optimizer, loader, scheduler)
--   for xb, yb in loader:iter() do
--     accelerator:accumulate(model, function()
--       local loss = criterion(model(xb), yb)
--       accelerator:backward(loss)
--       optimizer:step()
--       optimizer:zero_grad()
--     end)
--   end
--
-- The pieces live in: accel.state (PartialState shared by all Accelerators,
-- GradientState per Accelerator, <close> handles), accel.comm (the
-- communicator; one process for now), accel.operations (gather, reduce,
-- ...), accel.prepared (optimizer / scheduler / loader wrappers),
-- accel.amp (autocast and GradScaler), accel.checkpoint (files),
-- accel.plugins (configuration objects).
--
-- Decisions where Accelerate / DESIGN are silent or Lua differs:
--  * Every process-level collective goes through the communicator, also
--    on one process: gather() of a 0-dim tensor gives a 1-element 1-D tensor
--    on any number of processes (Accelerate returns it unchanged when not
--    distributed).
--  * prepare(model) returns the same model object; under bf16/fp16 its
--    forward is patched to run under autocast and return float32 outputs
--    (Accelerate's single-process behaviour). unwrap_model(model) returns it;
--    unwrap_model(model, {keep_fp32_wrapper = false}) also removes the patch.
--  * GradientState (accumulation counter, sync flag, active loader) belongs
--    to one Accelerator (Accelerate shares it per process); PartialState is
--    shared.
--  * A GradScaler step: unscale once, skip on inf/NaN, then update() after
--    every optimizer step, as AcceleratedOptimizer does in Accelerate. The
--    unscale happens only on a synchronising step (the step itself, or a
--    clip / unscale_gradients on that step); whether any process found an
--    inf or NaN is agreed through one all_reduce, so every process skips
--    the same steps. clip_grad_norm_ / clip_grad_value_ on a non-sync
--    micro-step clip the still-scaled gradients against the threshold
--    times the loss scale (the result of clipping the unscaled ones) and
--    return the unscaled norm; unscale_gradients there is a no-op.
--    (Accelerate unscales there, and PyTorch then refuses the second
--    unscale_ of the window.)
--  * Sharding (docs/sharding-accelerator.md): a DeepSpeedPlugin with
--    zero_stage 1-3 (also zero_stage = S, and launch's --use_deepspeed) or
--    an FSDP plugin with a sharded strategy makes prepare(model, optimizer)
--    build one accel.shard.Engine (the mapping: accel.shard_plan); the
--    model and its optimizer must be given to the same prepare call. The
--    engine's optimizer step / zero_grad run behind the prepared optimizer;
--    backward finalizes the engine's reduction, accumulate switches its
--    sync, clip_grad_norm_ and the fp16 GradScaler's unscale go through it
--    (found_inf agreed by every rank), clip_grad_value_ is refused under
--    DeepSpeed and FSDP1 (as Accelerate) and clamps the gradient shards
--    under FSDP2, get_state_dict under stage 3 gathers the full
--    weights; free_memory closes the engines; accelerator.shard_engine /
--    shard_engine_of(model) give the open engine. Stage 0 and NO_SHARD run
--    as DDP. distributed_type is "DEEPSPEED" / "FSDP" whenever such a
--    plugin is given (also at stage 0 / NO_SHARD, as Accelerate), and
--    accelerator.state prints the stage.
--  * kwargs_handlers: DistributedDataParallelKwargs, InitProcessGroupKwargs
--    (timeout in seconds, a number), GradScalerKwargs, AutocastKwargs,
--    FP8RecipeKwargs (the fp8 recipe, with mixed_precision = "fp8"), each
--    at most once.
--  * mixed_precision = "fp8": every nn.Linear of a prepared model runs
--    Transformer Engine's delayed-scaling recipe (accel.fp8, configured by
--    FP8RecipeKwargs; E5M2 is refused as TE refuses it), other GEMMs run
--    under bf16 autocast (as Accelerate). On a CUDA GPU of compute
--    capability 8.9+ the fp8 products run on cuBLASLt (fp8_backend =
--    "CUBLASLT"; an older GPU is refused); elsewhere the recipe is emulated
--    exactly: accelerator.fp8_backend = "CPU_EMULATION" (Accelerate says
--    "TE" / "MSAMP" / "AO").
--    GradScalerKwargs without fp16 warns (Accelerate ignores it silently);
--    FP8RecipeKwargs without fp8 is an error, as in Accelerate.
--  * Save / load pre-hooks get the temporary folder the checkpoint is
--    written into as output_dir (it is renamed into place when complete),
--    so what a hook writes there belongs to the checkpoint.
--  * find_executable_batch_size halves the batch size (DESIGN; Accelerate
--    1.x multiplies it by 0.9; reduce_batch_size_fn chooses either).
--  * Automatic checkpoint naming writes checkpoint_<i> with i one more than
--    the largest existing number (0 for none), so a resumed run continues
--    the numbering; total_limit prunes the oldest only after the new
--    checkpoint is complete.
--  * register_for_checkpointing takes objects whose state_dict /
--    load_state_dict are methods (obj:load_state_dict(s)) or plain
--    functions of the state (obj.load_state_dict(s), told apart by their
--    parameter count).
--  * save_state also records each prepared loader's (epoch, samples of the
--    global order consumed) and load_state puts it back, so a resumed loop needs no
--    skip_first_batches. The RNG saved is accel's generator (Philox state);
--    Lua's math.random state cannot be read in Lua 5.4 and is not saved.
--  * load_state verifies everything (index, sizes, checksums, model
--    fingerprints, counts of prepared objects, what each optimizer's
--    load_state_dict would refuse, loader positions) and reads every file before it
--    changes anything, so a refused load leaves models, optimizers,
--    schedulers and loaders as they were. Gradients accumulated since the
--    last optimizer step are not saved (as in Accelerate): save on sync steps.
--  * Options not given come from accel-lua launch's settings
--    (ACCEL_LUA_MIXED_PRECISION, _GRADIENT_ACCUMULATION_STEPS, _USE_CPU,
--    _USE_DEEPSPEED + _ZERO_STAGE ..., _USE_FSDP + _FSDP_SHARDING_STRATEGY;
--    ACCELERATE_* as a fallback); unknown options are errors.
--  * Several models: the first is model.safetensors, the i-th
--    model_<i-1>.safetensors (Accelerate's names); the same for optimizer,
--    scheduler and dataloader files.
--  * Several processes (DDP, accel.ddp / core/dist/ddp.c): prepare(model)
--    broadcasts rank 0's parameters and buffers and gives the model a
--    gradient reducer (bucket_cap_mb and find_unused_parameters from
--    kwargs_handlers = {accel.DistributedDataParallelKwargs{...}}). The
--    model stays the same object (no wrapper). Gradients are averaged by
--    the time the synchronising backward returns (accelerator:backward or a
--    bare loss:backward(): the reducer completes at the end of the pass,
--    as PyTorch's DDP); on non-sync steps (accumulate, no_sync) nothing is
--    communicated.
--  * save_state on N processes: rank 0 writes every shared file (model,
--    optimizer, scheduler, loaders, registered objects, scaler; every rank
--    calls the registered objects' state_dict, as Accelerate), every rank
--    writes random_states_<rank>.json into the same temporary folder
--    (named after rank 0's pid), then a barrier, rank 0 writes the index and
--    renames the folder into place, and a last barrier lets nobody go on
--    before the checkpoint exists. Automatic names are chosen by rank 0.
--    The processes must share the file system.
--  * load_state with another number of processes works: model and
--    optimizer are replicated; a loader continues its global order from the
--    saved sample (docs/data-positions.md: the cases refused, naming both
--    layouts and the position, and older {epoch, batches} files); a rank without its
--    own random_states_<rank>.json keeps its generator (rank 0 warns once,
--    naming those ranks) and takes the accumulation step from rank 0's file.
local accel = require("accel")
local compat = require("accel.compat")
local state = require("accel.state")
local ops = require("accel.operations")
local prepared = require("accel.prepared")
local amp = require("accel.amp")
local checkpoint = require("accel.checkpoint")
local plugins = require("accel.plugins")
local shard_plan = require("accel.shard_plan")
local json = require("accel.json")
local ddp = require("accel.ddp")
local join = require("accel.join")
local raise = require("accel.nn.module").raise
-- Control values the processes agree on (flags, counts) are host tensors.
local HOST = {device = "cpu"}
local util = require("accel.util")
local optim = require("accel.optim")
local shard_ckpt = require("accel.shard_checkpoint")
local C = accel._C

local M = {}

M.PartialState = state.PartialState
M.ProjectConfiguration = plugins.ProjectConfiguration
M.DeepSpeedPlugin = plugins.DeepSpeedPlugin
M.FullyShardedDataParallelPlugin = plugins.FullyShardedDataParallelPlugin
M.DistributedDataParallelKwargs = ddp.DistributedDataParallelKwargs
for _, name in ipairs({"InitProcessGroupKwargs", "GradScalerKwargs", "AutocastKwargs", "FP8RecipeKwargs",
  "GradientAccumulationPlugin", "DataLoaderConfiguration"}) do
  M[name] = plugins[name]
end
-- Accelerate 1.x's name for the Transformer Engine recipe, which is the one
-- FP8RecipeKwargs configures here
M.TERecipeKwargs = plugins.FP8RecipeKwargs

local Accelerator = {__name = "Accelerator"}
M.Accelerator_class = Accelerator
local props = {}

-- Accelerate's Accelerator members this one does not offer: reading one
-- raises with the reason (instead of Lua's "attempt to call a nil value").
local REFUSED_MEMBERS = {
  lomo_backward = "the LOMO optimizer is not available",
  maybe_context_parallel = "context parallelism is not implemented",
  verify_device_map = "big-model device maps (dispatch_model) are not implemented",
  deepspeed_ulysses_dl_adapter = "DeepSpeed Ulysses sequence parallelism is not implemented",
  torch_device_mesh = "there are no device meshes (no ParallelismConfig)",
  parallelism_config = "ParallelismConfig is not implemented",
  is_composable_parallelism_enabled = "ParallelismConfig is not implemented",
  tensor_parallel_rank = "tensor parallelism is not implemented",
  pipeline_parallel_rank = "pipeline parallelism is not implemented",
  context_parallel_rank = "context parallelism is not implemented",
  data_parallel_rank = "no ParallelismConfig: use process_index",
  data_parallel_shard_rank = "no ParallelismConfig: use process_index",
}
M.REFUSED_MEMBERS = REFUSED_MEMBERS

local read_member = util.property_index(Accelerator, props)
Accelerator.__index = function(self, k)
  local v = read_member(self, k)
  if v == nil and REFUSED_MEMBERS[k] then raise("Accelerator.%s is not supported here: %s", k, REFUSED_MEMBERS[k]) end
  return v
end

Accelerator.__newindex = function(self, k, v)
  if k == "gradient_accumulation_steps" then
    if type(v) ~= "number" or v < 1 or v ~= math.floor(v) then
      raise("gradient_accumulation_steps must be a positive integer, got %s", tostring(v))
    end
    self.gradient_state.num_steps = v
    return
  end
  if k == "even_batches" then -- Accelerate's one setter among the data loader fields: it writes the config
    if type(v) ~= "boolean" then raise("Accelerator.even_batches must be a boolean, got %s", util.show(v)) end
    self.dataloader_config.even_batches = v
    return
  end
  if k == "sync_gradients" then -- Accelerate's setter: writes the GradientState
    if type(v) ~= "boolean" then raise("Accelerator.sync_gradients must be a boolean, got %s", util.show(v)) end
    self.gradient_state.sync_gradients = v
    return
  end
  if k == "step" then -- a plain attribute in Accelerate: the accumulation counter
    if type(v) ~= "number" or v < 0 or v ~= math.floor(v) then
      raise("Accelerator.step must be a non-negative integer, got %s", util.show(v))
    end
    self.gradient_state.step = v
    return
  end
  if props[k] then raise("Accelerator.%s is read-only", tostring(k)) end
  rawset(self, k, v)
end

-- ---------------------------------------------------------------- fields

-- the process fields, read from the PartialState
for _, k in ipairs({"process_index", "local_process_index", "num_processes", "is_main_process",
                    "is_local_main_process", "is_last_process", "use_distributed"}) do
  props[k] = function(a) return a.state[k] end
end
-- Where prepare puts models and batches: the CPU with cpu = true, else the
-- process state's device (accel.state.pick_device).
function props.device(a)
  if a.cpu then return accel.device("cpu") end
  return a.state.device
end
-- "DEEPSPEED" / "FSDP" whenever a sharding plugin is given (also stage 0 /
-- NO_SHARD, which run as DDP: Accelerate's values), else the process state's.
function props.distributed_type(a) return a._distributed_type or a.state:_process_type() end
function props.sync_gradients(a) return a.gradient_state.sync_gradients end
function props.gradient_accumulation_steps(a) return a.gradient_state.num_steps end
function props.step(a) return a.gradient_state.step end
function props.end_of_dataloader(a) return a.gradient_state.end_of_dataloader end
function props.remainder(a) return a.gradient_state.remainder end
function props.project_dir(a) return a.project_configuration.project_dir end
function props.logging_dir(a) return a.project_configuration.logging_dir end
function props.save_iteration(a) return a.project_configuration.iteration end
-- read from dataloader_config each time, as Accelerate's properties (a
-- change to the config is seen by the next prepare)
for _, k in ipairs({"split_batches", "even_batches", "non_blocking", "use_seedable_sampler"}) do
  props[k] = function(a) return a.dataloader_config[k] end
end

-- Accelerate's: true for several accelerator devices (MULTI_GPU), not MULTI_CPU.
function props.multi_device(a) return a.state.distributed_type == "MULTI_GPU" end
function props.should_save_model(a) return a.state.is_local_main_process end
function props.is_fsdp2(a) return a.fsdp_plugin ~= nil and a.fsdp_plugin.fsdp_version == 2 end
-- Accelerate's: true when mixed precision runs through autocast (bf16,
-- fp16, fp8), false with "no" and under DeepSpeed (whose engine casts)
function props.native_amp(a)
  local mp = a.mixed_precision
  if mp == "fp8" then return true end
  return (mp == "bf16" or mp == "fp16") and a.distributed_type ~= "DEEPSPEED"
end

-- The open sharding engine (accel.shard.Engine) of the model prepared last
-- under a sharding plugin, or nil; shard_engine_of(model | optimizer)
-- finds the one of a given model.
function props.shard_engine(a)
  local e = a._engines[#a._engines]
  return e and e.engine or nil
end

function props.optimizer_step_was_skipped(a)
  for _, opt in ipairs(a._optimizers) do
    if opt.step_was_skipped then return true end
  end
  return false
end

-- ---------------------------------------------------------------- construction

local OPTIONS = plugins.register("Accelerator", {mixed_precision = "any", gradient_accumulation_steps = "number",
  cpu = "boolean", device_placement = "boolean", log_with = "any", project_dir = "string", project_config = "table",
  step_scheduler_with_optimizer = "boolean", split_batches = "boolean", even_batches = "boolean",
  deepspeed_plugin = "table", fsdp_plugin = "table", zero_stage = "number", kwargs_handlers = "table",
  gradient_accumulation_plugin = "table", dataloader_config = "table"})

plugins.refuse("Accelerator", {
  torch_tp_plugin = "tensor parallelism is not implemented (use data parallel or sharding plugins)",
  megatron_lm_plugin = "there is no Megatron-LM engine",
  rng_types = "one generator (accel's Philox) is seeded and checkpointed; there are no torch/cuda/xla generators",
  dynamo_backend = {"torch.compile does not exist here (only \"no\" is accepted)",
    neutral = function(v) return type(v) == "string" and v:upper() == "NO" end},
  dynamo_plugin = "torch.compile does not exist here",
  deepspeed_plugins = "one sharding engine serves one model setup; give one deepspeed_plugin",
  parallelism_config = "ParallelismConfig (tensor / context / pipeline parallel meshes) is not implemented"})

-- Environment variables Accelerate's Accelerator reads for engines that do
-- not exist here: set to anything but their neutral value, an error naming
-- them (never silently ignored).
local REFUSED_ENV = {
  {"ACCELERATE_DYNAMO_BACKEND", function(v) return v:upper() == "NO" end, "torch.compile does not exist here"},
  {"ACCELERATE_USE_MEGATRON_LM", function(v) return v:lower() == "false" or v == "0" or v == "" end,
   "there is no Megatron-LM engine"},
}

local function check_refused_env()
  for _, e in ipairs(REFUSED_ENV) do
    local v = os.getenv(e[1])
    if v ~= nil and not e[2](v) then raise("Accelerator: %s=%s is not supported here: %s", e[1], v, e[3]) end
  end
end

local PRECISIONS = {no = true, bf16 = true, fp16 = true, fp8 = true}

-- A launch setting: ACCEL_LUA_<name> (set by accel-lua launch, see
-- host/settings.c), else Accelerate's ACCELERATE_<name>; also the
-- variable's name.
local setting = util.launch_setting

-- The launch settings the sharding plugins read (docs/api/accelerator.md).
M.LAUNCH_SETTINGS = plugins.LAUNCH_SETTINGS

-- The sharding plugin launch asked for (when the script passes none): its
-- key, its options (the constructor fills them from launch's settings)
-- and the launch switch that asked for it (the name its errors use).
local function plugin_from_settings()
  for _, p in ipairs({{"USE_DEEPSPEED", "deepspeed_plugin"}, {"USE_FSDP", "fsdp_plugin"}}) do
    local v, var = setting(p[1])
    if v and util.str_to_bool(v, var) then return p[2], {}, var .. "=" .. v end
  end
  return nil
end

local function resolve_precision(mp)
  if mp == nil then mp = setting("MIXED_PRECISION") or "no" end
  if mp == accel.bfloat16 then mp = "bf16" elseif mp == accel.float16 then mp = "fp16" end
  if type(mp) ~= "string" or not PRECISIONS[mp] then -- (exactly: Accelerate refuses "BF16" too)
    raise('Accelerator: unknown mixed_precision %s; expected "no", "fp16", "bf16" or "fp8"',
      type(mp) == "string" and ('"' .. mp .. '"') or tostring(mp))
  end
  return mp
end

-- mixed_precision under a DeepSpeed config that enables bf16 / fp16
-- (ds_mp): the option, else the config's; launch's setting other than
-- "no" that the config contradicts is an error, as Accelerate's
-- DeepSpeedPlugin.set_mixed_precision.
local function resolve_ds_precision(o, ds_mp)
  if o.mixed_precision ~= nil or not ds_mp then return resolve_precision(o.mixed_precision) end
  local mp = resolve_precision(nil)
  if mp ~= "no" and mp ~= ds_mp then
    local raw, var = setting("MIXED_PRECISION")
    raise("Accelerator: --mixed_precision (%s=%s) cannot be set to %s when %s is set in the DeepSpeed config "
      .. "(%s.enabled = true); leave it \"no\" or make them agree", var, raw, mp, ds_mp, ds_mp)
  end
  return ds_mp
end

-- launch's gradient_accumulation_steps (the flag or a YAML key) other than
-- its default 1 must agree with the DeepSpeed config's value k.
local function check_launch_accumulation(ds, k)
  local raw, var = setting("GRADIENT_ACCUMULATION_STEPS")
  if raw == nil or raw == "1" or tonumber(raw) == k then return end
  if ds.ds_config and ds.ds_config.gradient_accumulation_steps == k then
    raise("Accelerator: %s=%s (launch's --gradient_accumulation_steps) disagrees with the DeepSpeed config's "
      .. "gradient_accumulation_steps = %d; give it in one place", var, raw, k)
  end
end

-- The accumulation without a gradient_accumulation_plugin: the option;
-- without it a DeepSpeed config's value (launch's must then agree with
-- it), else launch's setting, else 1. (Accelerate's launcher exports its
-- --gradient_accumulation_steps only for DeepSpeed, so in plain runs the
-- script's value is what Accelerate uses too.)
local function resolve_accumulation(o, ds)
  local k = o.gradient_accumulation_steps
  if k == nil and ds and type(ds.gradient_accumulation_steps) == "number" then
    k = ds.gradient_accumulation_steps
    check_launch_accumulation(ds, k)
  end
  if k == nil then
    local raw, var = setting("GRADIENT_ACCUMULATION_STEPS")
    k = raw == nil and 1 or tonumber(raw)
    if k == nil or k < 1 or k ~= math.floor(k) then
      raise("Accelerator: %s=%s is not a positive integer (gradient_accumulation_steps)", var, raw)
    end
  end
  if k < 1 or k ~= math.floor(k) then
    raise("Accelerator: gradient_accumulation_steps must be a positive integer, got %s", tostring(k))
  end
  return math.floor(k)
end

-- The ds_config keys with no meaning here, reported by name on the main
-- process once per plugin, however many Accelerators use it.
local function report_ignored(self, ds, keys)
  local seen = rawget(ds, "_reported_keys") or {}
  rawset(ds, "_reported_keys", seen)
  local new = {}
  for _, k in ipairs(keys) do
    if not seen[k] then new[#new + 1], seen[k] = k, true end
  end
  if #new > 0 and self.state.is_main_process then
    io.stderr:write(("DeepSpeedPlugin: ds_config keys with no meaning here were ignored: %s\n"):format(
      table.concat(new, ", ")))
  end
end

-- The ZeRO stage of the options and plugins (they must agree) and the
-- engine plan (accel.shard_plan; nil for stage 0 / NO_SHARD, which run as
-- DDP). zero_stage = S >= 1 without a plugin is DeepSpeedPlugin{zero_stage = S}.
local function resolve_sharding(self, o)
  local ds_what, switch = nil, nil
  if o.deepspeed_plugin == nil and o.fsdp_plugin == nil and o.zero_stage == nil then
    local key, plugin
    key, plugin, switch = plugin_from_settings()
    if key then
      local copy = {}
      for k, v in pairs(o) do copy[k] = v end
      copy[key], o = plugin, copy
    end
  end
  if o.deepspeed_plugin and o.fsdp_plugin then
    raise("Accelerator: give either deepspeed_plugin or fsdp_plugin, not both")
  end
  if o.zero_stage ~= nil then plugins.check_stage("Accelerator", o.zero_stage) end
  if type(o.deepspeed_plugin) == "table" and getmetatable(o.deepspeed_plugin) ~= plugins.DeepSpeedPlugin_class then
    for name, v in pairs(o.deepspeed_plugin) do -- Accelerate's {name = plugin, ...} form
      if type(v) == "table" and getmetatable(v) == plugins.DeepSpeedPlugin_class then
        raise("Accelerator: deepspeed_plugin = {%s = DeepSpeedPlugin, ...} (several named plugins) is not "
          .. "supported: one sharding engine serves one model setup; give one DeepSpeedPlugin", tostring(name))
      end
    end
  end
  local ds_opts = o.deepspeed_plugin
  if ds_opts == nil and o.fsdp_plugin == nil and o.zero_stage ~= nil and o.zero_stage ~= 0 then
    ds_opts, ds_what = {zero_stage = o.zero_stage}, ("Accelerator (zero_stage = %d)"):format(o.zero_stage)
  end
  local ds = ds_opts and plugins.DeepSpeedPlugin(ds_opts, ds_what, switch)
  local fsdp = o.fsdp_plugin and plugins.FullyShardedDataParallelPlugin(o.fsdp_plugin, nil, switch)
  local stage = (ds or fsdp) and (ds or fsdp).zero_stage or 0
  if o.zero_stage ~= nil and o.zero_stage ~= stage then
    raise("Accelerator: zero_stage = %d disagrees with the plugin's stage %d", o.zero_stage, stage)
  end
  local plan = shard_plan.plan(ds, fsdp, self.state, fsdp and plugins.name_of(fsdp))
  rawset(self, "deepspeed_plugin", ds)
  rawset(self, "fsdp_plugin", fsdp)
  rawset(self, "zero_stage", stage)
  rawset(self, "_shard_plan", plan)
  rawset(self, "_distributed_type", ds and "DEEPSPEED" or fsdp and "FSDP" or nil)
  rawset(self, "sharding", shard_plan.describe(plan, ds, fsdp))
  if ds then report_ignored(self, ds, ds.ignored_keys) end
  return ds
end

-- The handlers Accelerator{kwargs_handlers = {...}} takes, by constructor
-- name, and the field each lands in (Accelerate's names).
local HANDLERS = {DistributedDataParallelKwargs = "ddp_handler", InitProcessGroupKwargs = "init_handler",
  GradScalerKwargs = "scaler_handler", AutocastKwargs = "autocast_handler", FP8RecipeKwargs = "fp8_recipe_handler"}
local HANDLER_NAMES = "accel.AutocastKwargs, accel.DistributedDataParallelKwargs, accel.FP8RecipeKwargs, "
  .. "accel.GradScalerKwargs, accel.InitProcessGroupKwargs"

-- kwargs_handlers -> {field = handler}; each kind at most once.
local function resolve_kwargs(handlers)
  local found = {}
  local one = handlers ~= nil and (ddp.is_kwargs(handlers) or plugins.kind_of(handlers))
  if one then -- (ipairs over one handler finds nothing: it would be ignored)
    raise("Accelerator: kwargs_handlers must be a list of handlers ({accel.%s{...}}), got one handler",
      one == true and "DistributedDataParallelKwargs" or one)
  end
  for i, h in ipairs(handlers or {}) do
    local kind = ddp.is_kwargs(h) and "DistributedDataParallelKwargs" or plugins.kind_of(h)
    if kind == "GradientAccumulationPlugin" or kind == "DataLoaderConfiguration" then
      raise("Accelerator: kwargs_handlers[%d] is a %s; pass it as %s = ...", i, kind,
        kind == "GradientAccumulationPlugin" and "gradient_accumulation_plugin" or "dataloader_config")
    end
    local field = kind and HANDLERS[kind]
    if not field then
      raise("Accelerator: kwargs_handlers[%d] is not a handler this Accelerator knows (%s)", i, HANDLER_NAMES)
    end
    if found[field] then raise("Accelerator: kwargs_handlers holds more than one accel.%s (give each kind once)", kind) end
    found[field] = h
  end
  found.ddp_handler = found.ddp_handler or ddp.DistributedDataParallelKwargs()
  return found
end

-- The fp8 recipe (mixed_precision = "fp8"; the handler's options or
-- FP8RecipeKwargs' defaults); a handler without fp8 warns and is unused.
-- The recipe's fields launch / Accelerate set as ACCEL_LUA_FP8_* /
-- ACCELERATE_FP8_* (Accelerate's TERecipeKwargs reads them for every field
-- the handler leaves unset), and its flags this build takes as false only
-- (-> the option that says why true is refused). MS-AMP's and torchao's
-- settings (OPT_LEVEL, PAD_INNER_DIM, ...) are not the TE recipe's: unread,
-- as in Accelerate.
local FP8_SETTINGS = {fp8_format = {"FP8_FORMAT"}, margin = {"FP8_MARGIN", tonumber},
  interval = {"FP8_INTERVAL", tonumber}, amax_history_len = {"FP8_AMAX_HISTORY_LEN", tonumber},
  amax_compute_algo = {"FP8_AMAX_COMPUTE_ALGO"}}
local FP8_FALSE_ONLY_SETTINGS = {{"FP8_USE_AUTOCAST_DURING_EVAL", "use_autocast_during_eval"},
  {"FP8_OVERRIDE_FPROP", "override_linear_precision"}, {"FP8_OVERRIDE_DGRAD", "override_linear_precision"},
  {"FP8_OVERRIDE_WGRAD", "override_linear_precision"}, {"FP8_USE_MXFP8_BLOCK_SCALING", "use_mxfp8_block_scaling"}}
-- The spellings Accelerate's str_to_bool reads (any case).
local TRUTH = {y = true, yes = true, t = true, ["true"] = true, on = true, ["1"] = true,
  n = false, no = false, f = false, ["false"] = false, off = false, ["0"] = false}

local function check_fp8_flags(kw)
  for _, e in ipairs(FP8_FALSE_ONLY_SETTINGS) do
    local raw, var = setting(e[1])
    if raw ~= nil and not (kw and plugins.was_given(kw, e[2])) then
      local v = TRUTH[raw:lower()]
      if v == nil then
        raise("Accelerator: %s=%s is not a boolean (true / false, 1 / 0, yes / no, on / off)", var, raw)
      end
      if v then raise("Accelerator: %s=%s is not supported: %s", var, raw, plugins.FP8_FALSE_ONLY[e[2]]) end
    end
  end
end

local function fp8_kwargs_with_settings(kw)
  local o = {}
  for k, e in pairs(FP8_SETTINGS) do
    local raw, var = setting(e[1])
    if kw and plugins.was_given(kw, k) then
      o[k] = kw[k]
    elseif raw ~= nil then
      local convert = e[2] or function(x) return x end
      o[k] = convert(raw)
      if o[k] == nil then raise("Accelerator: %s=%s is not a number", var, raw) end
    end
  end
  check_fp8_flags(kw)
  local backend, var = setting("FP8_BACKEND")
  if backend ~= nil and backend:upper() ~= "TE" then
    raise("Accelerator: %s=%s is not supported: the fp8 recipe here is Transformer Engine's (TE)", var, backend)
  end
  return plugins.FP8RecipeKwargs(o)
end

local function resolve_fp8(self, kw)
  if self.mixed_precision ~= "fp8" then
    if kw then
      raise("Accelerator: passing in an FP8 configuration (FP8RecipeKwargs) requires mixed_precision = \"fp8\", "
        .. "got \"%s\"", self.mixed_precision)
    end
    return
  end
  local fp8 = require("accel.fp8")
  rawset(self, "fp8_recipe_handler", fp8_kwargs_with_settings(kw))
  rawset(self, "fp8_recipe", fp8.DelayedScaling(self.fp8_recipe_handler))
  rawset(self, "fp8_backend", fp8.backend_for(self.device))
end

-- gradient_accumulation_plugin or gradient_accumulation_steps (not both,
-- as in Accelerate) -> the plugin; a plugin's num_steps is not overridden
-- by launch's setting (as in Accelerate).
local function resolve_accumulation_plugin(o, ds)
  local p = o.gradient_accumulation_plugin
  if p == nil then return plugins.GradientAccumulationPlugin({num_steps = resolve_accumulation(o, ds)}) end
  if o.gradient_accumulation_steps ~= nil and o.gradient_accumulation_steps ~= 1 then
    raise("Accelerator: give either gradient_accumulation_steps or gradient_accumulation_plugin, not both")
  end
  if plugins.kind_of(p) ~= "GradientAccumulationPlugin" then p = plugins.GradientAccumulationPlugin(p) end
  if ds and type(ds.gradient_accumulation_steps) == "number" and ds.gradient_accumulation_steps ~= p.num_steps then
    raise("Accelerator: the DeepSpeedPlugin's gradient_accumulation_steps = %s disagrees with "
      .. "gradient_accumulation_plugin.num_steps = %d", tostring(ds.gradient_accumulation_steps), p.num_steps)
  end
  return p
end

-- log_with's names and trackers, and a directory for those that write files
-- (Accelerate: "Logging with `tensorboard` requires a `logging_dir`").
local function check_tracker_dirs(self)
  for _, entry in ipairs(accel.tracking.log_with_entries(self.log_with)) do
    local needs, name = false, entry
    if type(entry) == "table" then
      local t = accel.tracking.check_tracker(entry)
      needs, name = t.requires_logging_directory, t.name
    else
      for _, n in ipairs(accel.tracking.expand_names(entry)) do needs = needs or n ~= "mlflow" end
    end
    if needs and self.logging_dir == nil then
      raise('Accelerator: tracker "%s" requires a logging directory; give accel.Accelerator{log_with = ..., '
        .. 'project_dir = "runs"}', tostring(name))
    end
  end
end

-- dataloader_config plus the Accelerator's own split_batches / even_batches
-- (Accelerate's older spelling): both may be given only when they agree.
local function resolve_dataloader_config(o)
  local c = o.dataloader_config
  if c ~= nil and plugins.kind_of(c) ~= "DataLoaderConfiguration" then c = plugins.DataLoaderConfiguration(c) end
  c = c or plugins.DataLoaderConfiguration()
  local merged = {}
  for k, v in pairs(c) do merged[k] = v end
  for _, k in ipairs({"split_batches", "even_batches"}) do
    if o[k] ~= nil then
      if plugins.was_given(c, k) and o[k] ~= c[k] then
        raise("Accelerator: %s = %s disagrees with dataloader_config.%s = %s", k, tostring(o[k]), k, tostring(c[k]))
      end
      merged[k] = o[k]
    end
  end
  return plugins.DataLoaderConfiguration(merged)
end

-- The DeepSpeed config's "auto" values, filled from the Accelerator as
-- Accelerate does: gradient_accumulation_steps, gradient_clipping (the
-- plugin's, else 1.0, Accelerate's value), bf16 / fp16 from
-- mixed_precision; then DeepSpeed's batch rule where all three are known.
local function resolve_ds_autos(self, ds, k)
  if ds.auto.gradient_clipping and ds.gradient_clipping == nil then ds.gradient_clipping = 1.0 end
  shard_plan.fill_auto(ds, {gradient_accumulation_steps = k, gradient_clipping = ds.gradient_clipping,
    bf16 = self.mixed_precision == "bf16", fp16 = self.mixed_precision == "fp16"})
  if type(ds.gradient_accumulation_steps) == "number" and ds.gradient_accumulation_steps ~= k then
    raise("Accelerator: the DeepSpeed config's gradient_accumulation_steps = %s disagrees with "
      .. "gradient_accumulation_steps = %d", tostring(ds.gradient_accumulation_steps), k)
  end
  shard_plan.check_config_batch(ds, k, self.num_processes)
  rawset(self, "_ds_created", (plugins.deepspeed_settings(ds, "Accelerator: deepspeed_plugin.deepspeed_config")))
end

-- DeepSpeed's batch rule for loaders of batch sizes `sizes` (accel.shard_plan.check_batch).
local function check_ds_batch(self, sizes)
  shard_plan.check_batch(self.deepspeed_plugin, sizes, {split_batches = self.split_batches,
    num_processes = self.num_processes, accumulation = self.gradient_state.num_steps})
end

-- The settings the Accelerator reads from the DeepSpeed config when it is
-- created, and those prepare reads (again) from it.
local DS_AT_CREATION = {"zero_stage", "gradient_accumulation_steps", "bf16", "fp16", "initial_scale_power",
  "loss_scale_window", "loss_scale"}
local DS_AT_PREPARE = {"gradient_clipping", "offload_optimizer_device", "offload_param_device", "reduce_bucket_size",
  "allgather_bucket_size", "overlap_comm", "stage3_prefetch_bucket_size", "zero3_save_16bit_model"}

-- prepare reads the DeepSpeed settings from deepspeed_plugin.deepspeed_config
-- (Accelerate passes that table to deepspeed.initialize, so edits made to
-- it before prepare count): those prepare uses are taken (an "auto"
-- gradient_clipping is 1.0, as Accelerate fills it) and the sharding plan
-- is made again; one the Accelerator read when it was created must not have changed.
local function read_ds_config(self)
  local ds = self.deepspeed_plugin
  if not ds then return end
  local what = "prepare: deepspeed_plugin.deepspeed_config"
  local now, auto, ignored = plugins.deepspeed_settings(ds, what)
  for _, k in ipairs(DS_AT_CREATION) do
    local was = self._ds_created[k]
    if now[k] ~= was and not auto[k] then
      raise("%s: %s changed from %s to %s after the Accelerator was created, which read it then; set it before "
        .. "creating the Accelerator", what, plugins.DS_CONFIG_PATHS[k], plugins.show(was), plugins.show(now[k]))
    end
  end
  if auto.gradient_clipping then
    now.gradient_clipping = 1.0
    ds.deepspeed_config.gradient_clipping = 1.0
  end
  for _, k in ipairs(DS_AT_PREPARE) do ds[k] = now[k] end
  report_ignored(self, ds, ignored)
  rawset(self, "_shard_plan", shard_plan.plan(ds, nil, self.state))
  rawset(self, "sharding", shard_plan.describe(self._shard_plan, ds))
  local info = rawget(self.state, "accelerator_info")
  if info and info.deepspeed_plugin == ds then info.sharding = self.sharding end
end

-- GradScalerKwargs' fields, with the DeepSpeed config's fp16 loss-scale
-- keys (initial_scale_power -> init_scale = 2^power, loss_scale_window ->
-- growth_interval; a loss_scale > 0 is DeepSpeed's static scale: that
-- init_scale, never grown or backed off, overflowing steps still skipped)
-- where the handler does not give them; both given and different is an error.
local function scaler_fields(kw, ds)
  local f = {init_scale = kw.init_scale, growth_factor = kw.growth_factor, backoff_factor = kw.backoff_factor,
    growth_interval = kw.growth_interval}
  if not ds then return f end
  local window = ds.loss_scale_window
  if window == nil and not plugins.was_given(kw, "growth_interval") then window = 1000 end -- DeepSpeed's default
  local from_ds = {init_scale = ds.initial_scale_power and 2 ^ ds.initial_scale_power, growth_interval = window}
  local ds_key = {init_scale = "fp16.initial_scale_power", growth_interval = "fp16.loss_scale_window"}
  if type(ds.loss_scale) == "number" and ds.loss_scale > 0 then
    from_ds.init_scale, from_ds.growth_factor, from_ds.backoff_factor = ds.loss_scale, 1.0, 1.0
    ds_key.init_scale, ds_key.growth_factor, ds_key.backoff_factor = "fp16.loss_scale", "fp16.loss_scale",
      "fp16.loss_scale"
  end
  for k, v in pairs(from_ds) do
    if plugins.was_given(kw, k) and kw[k] ~= v then
      raise("Accelerator: GradScalerKwargs %s = %s disagrees with the DeepSpeed config's %s (%s)", k, tostring(kw[k]),
        ds_key[k], tostring(v))
    end
    f[k] = v
  end
  return f
end

-- The fp16 GradScaler (GradScalerKwargs and the DeepSpeed config's fp16
-- keys feed it; enabled = false: a disabled one, torch's pass-through, as
-- Accelerate builds on a GPU). nil without fp16.
local function make_scaler(self, kw, ds)
  if self.mixed_precision ~= "fp16" then
    if kw and self.is_main_process then
      io.stderr:write(("Accelerator: GradScalerKwargs has no effect with mixed_precision = \"%s\" (only fp16 scales "
        .. "the loss)\n"):format(self.mixed_precision))
    end
    return nil
  end
  kw = kw or plugins.GradScalerKwargs()
  if not kw.enabled then return amp.GradScaler({enabled = false}) end
  local comm = self.state.comm
  local f = scaler_fields(kw, ds)
  return amp.scaler_from_settings({init_scale = f.init_scale, growth_factor = f.growth_factor,
    backoff_factor = f.backoff_factor, growth_interval = f.growth_interval,
    agree = function(found) return comm:all_reduce(accel.tensor({found and 1 or 0}, HOST), "max"):item() > 0 end})
end

-- cpu = true, or without the option launch's --cpu (USE_CPU, a truth word).
local function use_cpu(o)
  if o.cpu ~= nil then return o.cpu == true end
  local v, var = setting("USE_CPU")
  return v ~= nil and util.str_to_bool(v, var)
end

local function new_accelerator(_, o)
  plugins.check_options("Accelerator", o, OPTIONS)
  check_refused_env()
  o = o or {}
  local self = setmetatable({}, Accelerator)
  -- an existing process state is shared as it is (cpu = true then only
  -- changes where this Accelerator puts things: props.device)
  rawset(self, "cpu", use_cpu(o))
  if self.cpu then accel.set_default_device("cpu") end -- tensors made in forward go where the model is
  rawset(self, "state", state.current() or state.PartialState({cpu = self.cpu}))
  local ds = resolve_sharding(self, o)
  local handlers = resolve_kwargs(o.kwargs_handlers)
  for k, h in pairs(handlers) do rawset(self, k, h) end
  rawset(self, "ddp_kwargs", handlers.ddp_handler)
  local ds_mp = ds and ((ds.bf16 == true and "bf16") or (ds.fp16 == true and "fp16")) or nil
  if o.mixed_precision == false then -- not "off": Accelerate's "Unknown mixed_precision mode: False"
    raise('Accelerator: unknown mixed_precision false; expected "no", "fp16", "bf16" or "fp8"')
  end
  rawset(self, "mixed_precision", resolve_ds_precision(o, ds_mp))
  if ds_mp and self.mixed_precision ~= ds_mp then
    raise('Accelerator: mixed_precision = "%s" disagrees with the DeepSpeed config (%s.enabled = true)',
      self.mixed_precision, ds_mp)
  end
  if ds and ds[self.mixed_precision] == false then
    raise('Accelerator: mixed_precision = "%s" disagrees with the DeepSpeed config (%s.enabled = false)',
      self.mixed_precision, self.mixed_precision)
  end
  resolve_fp8(self, handlers.fp8_recipe_handler)
  local gap = resolve_accumulation_plugin(o, ds)
  rawset(self, "gradient_accumulation_plugin", gap)
  rawset(self, "gradient_state", state.GradientState(gap.num_steps, gap))
  if ds then resolve_ds_autos(self, ds, gap.num_steps) end
  rawset(self, "scaler", make_scaler(self, handlers.scaler_handler, ds))
  -- the scaler that scales the loss (nil when none or disabled): what backward, step and checkpoints use
  rawset(self, "_loss_scaler", self.scaler and self.scaler:is_enabled() and self.scaler or nil)
  local autocast_on = handlers.autocast_handler == nil or handlers.autocast_handler.enabled
  rawset(self, "autocast_dtype", autocast_on and amp.dtype_of(self.mixed_precision) or nil)
  local pc = plugins.ProjectConfiguration(o.project_config)
  if o.project_dir and pc.project_dir == nil then pc:set_directories(o.project_dir) end
  if pc.save_on_each_node and self.state.num_local_processes ~= self.num_processes then
    raise("Accelerator: project_config.save_on_each_node = true is not supported on several machines yet "
      .. "(every checkpoint is written once, by the main process, to a shared file system)")
  end
  rawset(self, "project_configuration", pc)
  local dlc = resolve_dataloader_config(o)
  rawset(self, "dataloader_config", dlc)
  rawset(self, "step_scheduler_with_optimizer", o.step_scheduler_with_optimizer ~= false)
  rawset(self, "device_placement", o.device_placement ~= false)
  rawset(self, "log_with", o.log_with)
  check_tracker_dirs(self) -- names and directories checked on every process, as Accelerate's constructor does
  rawset(self, "trackers", {})
  rawset(self, "_models", {})
  rawset(self, "_moved_params", setmetatable({}, {__mode = "k"})) -- parameter before placement -> after
  rawset(self, "_optimizers", {})
  rawset(self, "_schedulers", {})
  rawset(self, "_dataloaders", {})
  rawset(self, "_custom_objects", {})
  rawset(self, "_save_state_pre_hooks", {})
  rawset(self, "_load_state_pre_hooks", {})
  rawset(self, "_grad_sync", setmetatable({}, {__mode = "k"}))
  rawset(self, "_reducers", {}) -- {model = m, reducer = r}, one per prepared model on N processes
  rawset(self, "_released_reducers", {}) -- {model = m, reducer = r} (weak values): let go of by free_memory
  rawset(self, "_engines", {}) -- {model = m, optimizer = o, engine = e}, one per model prepared under a sharding plan
  rawset(self, "flag", 0)
  self.state:_set_accelerator_info({distributed_type = self._distributed_type, mixed_precision = self.mixed_precision,
    sharding = self.sharding, deepspeed_plugin = self.deepspeed_plugin, fsdp_plugin = self.fsdp_plugin})
  if handlers.init_handler and handlers.init_handler.timeout then -- last: a refused Accelerator changes nothing
    require("accel.dist").set_timeout(handlers.init_handler.timeout)
  end
  return self
end

M.Accelerator = setmetatable({}, {__call = new_accelerator, __index = Accelerator})

-- ---------------------------------------------------------------- find_executable_batch_size

-- true when err is the allocator's out-of-memory error: every allocation
-- failure of the core says "out of memory" (core/tensor.c's storage_new:
-- "out of memory: cannot allocate N bytes on <device>"), as PyTorch's
-- messages carry " out of memory." for Accelerate's check.
function M.is_out_of_memory_error(err)
  return type(err) == "string" and err:find("out of memory", 1, true) ~= nil
end

local FIND_BATCH_OPTIONS = plugins.register("find_executable_batch_size", {starting_batch_size = "number",
  reduce_batch_size_fn = "function"})

-- accel.find_executable_batch_size(fn, {starting_batch_size = 128, reduce_batch_size_fn = nil})
-- -> a function(...) that calls fn(batch_size, ...) and, while that fails
-- with an out-of-memory error, frees the cached memory and retries with
-- the batch size halved (or reduce_batch_size_fn()'s value); other errors
-- pass through, and reaching 0 raises. The batch size that worked is kept
-- for the next call (as Accelerate's decorator keeps it).
function M.find_executable_batch_size(fn, o)
  if not util.callable(fn) then raise("find_executable_batch_size: expected a function, got %s", type(fn)) end
  plugins.check_options("find_executable_batch_size", o, FIND_BATCH_OPTIONS)
  o = o or {}
  local batch_size = o.starting_batch_size or 128
  if batch_size < 1 or batch_size ~= math.floor(batch_size) then
    raise("find_executable_batch_size: starting_batch_size must be a positive integer, got %s", tostring(batch_size))
  end
  local reduce = o.reduce_batch_size_fn or function() return math.floor(batch_size / 2) end
  local info = type(fn) == "function" and debug.getinfo(fn, "u") or nil
  return function(...)
    -- as Accelerate: more arguments than fn takes after the batch size means the caller passed it too
    local given = select("#", ...)
    if info and info.nparams and not info.isvararg and given > 0 and given + 1 > info.nparams then
      raise("find_executable_batch_size: the batch size was passed as the first argument when called; remove it, "
        .. "the wrapper passes it (fn takes %d argument(s), got %d plus the batch size)", info.nparams, given)
    end
    while true do
      if batch_size <= 0 then raise("find_executable_batch_size: no executable batch size found, reached zero") end
      local res = compat.pack(pcall(fn, batch_size, ...))
      if res[1] then return compat.unpack(res, 2, res.n) end
      if not M.is_out_of_memory_error(res[2]) then error(res[2], 0) end
      collectgarbage()
      collectgarbage()
      accel.empty_cache()
      batch_size = reduce()
      if type(batch_size) ~= "number" or batch_size ~= math.floor(batch_size) then
        raise("find_executable_batch_size: reduce_batch_size_fn returned %s, expected a whole number",
          type(batch_size) == "number" and tostring(batch_size) or type(batch_size))
      end
    end
  end
end

-- ---------------------------------------------------------------- prepare

local function is_table(x) return type(x) == "table" end
local function has_fn(x, k) return type(x[k]) == "function" end

local prepare_sharded, wrap_optimizer -- defined below
local shard = function() return require("accel.shard") end

local function kind_of(x)
  if not is_table(x) then return nil end
  if prepared.is_optimizer(x) then return "optimizer" end
  if prepared.is_scheduler(x) then return "scheduler" end
  if prepared.is_loader(x) then return "loader" end
  if is_table(x.param_groups) and has_fn(x, "step") and has_fn(x, "zero_grad") then return "optimizer" end
  if has_fn(x, "get_last_lr") and has_fn(x, "step") then return "scheduler" end
  if has_fn(x, "iter") and (has_fn(x, "shard") or has_fn(x, "set_epoch")) then return "loader" end
  if has_fn(x, "parameters") and has_fn(x, "forward") then return "model" end
  return nil
end

-- prepare_*(x, [options]) take nothing more: n further arguments raise.
local function no_more_args(what, n)
  if n > 0 then raise("%s: takes the object and an options table, got %d more argument(s)", what, n) end
end

local function contains(list, x)
  for _, v in ipairs(list) do
    if rawequal(v, x) then return true end
  end
  return false
end

-- ---- device placement ----
-- Module:to gives the tensors it moves new Parameter objects (a PyTorch
-- .to() keeps them, swapping their data); it switches every optimizer made
-- to the new ones (accel.optim._follow), so any optimizer keeps training, as
-- with PyTorch's in-place move. prepare also moves the state of the
-- optimizers it prepares to the parameters' device (unless prepared with
-- device_placement = false: the state then stays where it is, as
-- Accelerate's AcceleratedOptimizer).

local function state_to(st, device)
  if accel.is_tensor(st) then return st:to(device) end
  if type(st) ~= "table" then return st end
  local out = {}
  for k, v in pairs(st) do out[k] = state_to(v, device) end
  return out
end

-- optimizer (unwrapped): every parameter in map (old -> new) replaced,
-- its state moved to the new parameter's device when move.
local function switch_parameters(optimizer, map, move)
  optim._switch_parameters(optimizer, map)
  local state = optimizer.state
  if not move or type(state) ~= "table" then return end
  for _, new in pairs(map) do
    if state[new] ~= nil then state[new] = state_to(state[new], new.device) end
  end
end

-- Whether prepare_model / prepare_optimizer / prepare_data_loader place on
-- the device: their {device_placement =} when given, else the Accelerator's.
local function placement(self, o)
  if o and o.device_placement ~= nil then return o.device_placement end
  return self.device_placement
end

-- The options of prepare_* for argument i of prepare: {device_placement =
-- its entry of prepare's device_placement list}, or nil without that list.
local function placement_of(places, i)
  return places and {device_placement = places[i]}
end

-- model moved to self.device; the optimizers prepared so far, and the ones
-- prepared later (self._moved_params), see the moved parameters.
local function place_model(self, model)
  local before, device = model:parameters(), self.device
  if type(model.to) ~= "function" then -- a model that is not an nn.Module: it must be there already
    for i, p in ipairs(before) do
      if tostring(p.device) ~= tostring(device) then
        raise("prepare: parameter %d of the model is on %s and the model has no to(device) method to move it to %s "
          .. "(give it one, or pass device_placement = false)", i, tostring(p.device), tostring(device))
      end
    end
    return
  end
  model:to(device)
  local after, map, moved = model:parameters(), {}, false
  for i, p in ipairs(before) do
    local n = after[i]
    if n ~= nil and not rawequal(p, n) then
      map[p], moved = n, true
      self._moved_params[p] = n
    end
  end
  if not moved then return end
  optim._follow(map) -- every optimizer, prepared or not (a model's own to() may not have)
  for _, opt in ipairs(self._optimizers) do switch_parameters(opt.optimizer, map, opt.device_placement ~= false) end
end

-- The model's forward patched for mixed precision: under the autocast
-- dtype, or with autocast off when AutocastKwargs disables it (Accelerate
-- still wraps it in autocast(enabled=False) and converts its outputs).
local function patch_forward(self, model)
  local dtype = self.autocast_dtype or (amp.dtype_of(self.mixed_precision) and accel.float32)
  return amp.patch_forward(model, dtype, self.fp8_recipe)
end

-- The engine of x (a model, an optimizer, prepared or not, or a parameter)
-- among this Accelerator's, or nil.
local function engine_of(self, x)
  if prepared.is_optimizer(x) then x = x.optimizer end
  for _, e in ipairs(self._engines) do
    if rawequal(e.model, x) or rawequal(e.optimizer, x) then return e.engine end
  end
  if accel.is_tensor(x) then
    local eng = shard().engine_of(x)
    for _, e in ipairs(self._engines) do
      if e.engine == eng then return eng end
    end
  end
  return nil
end

function Accelerator:shard_engine_of(x) return engine_of(self, x) end

-- Under a sharding plan: the model and its optimizer of this prepare call
-- become one accel.shard.Engine (both must be given together, as
-- Accelerate requires for DeepSpeed); their prepared forms go into out.
-- A model without trainable parameters (evaluation) is prepared as usual.
prepare_sharded = function(self, args, out, places)
  local models, opts = {}, {}
  for i = 1, args.n do
    local k, x = kind_of(args[i]), args[i]
    if k == "model" and not contains(self._models, x) and #ddp.trainable(x) > 0 then models[#models + 1] = i end
    if k == "optimizer" and not prepared.is_optimizer(x) then opts[#opts + 1] = i end
  end
  if #models == 0 and #opts == 0 then return end
  if #models ~= 1 or #opts ~= 1 then
    raise("prepare: under %s (%s) give the model and its optimizer to the same prepare call, one of each, as "
      .. "Accelerate requires for DeepSpeed: the sharding engine is built from both (got %d model(s) with trainable "
      .. "parameters and %d optimizer(s))", self.distributed_type, self.sharding, #models, #opts)
  end
  local model, opt = args[models[1]], args[opts[1]]
  local opt_placed = placement(self, placement_of(places, opts[1]))
  self._models[#self._models + 1] = model
  if placement(self, placement_of(places, models[1])) then place_model(self, model) end
  switch_parameters(opt, self._moved_params, opt_placed)
  local plan = self._shard_plan
  if plan.sync then ddp.broadcast_model(model, 0, self.ddp_kwargs.broadcast_buffers) end
  local eng = shard_plan.build(plan, model, opt)
  eng:set_sync(self._grad_sync[model] ~= false)
  self._engines[#self._engines + 1] = {model = model, optimizer = opt, engine = eng}
  out[models[1]] = patch_forward(self, model)
  out[opts[1]] = wrap_optimizer(self, opt, opt_placed)
end

-- prepare(..., [{device_placement = {...}}]): every argument wrapped for
-- training, returned in order. As Accelerate, in passes: models (moved to
-- the device) and loaders first, then the optimizers (which then hold the
-- moved parameters), then the schedulers that drive them. Anything else
-- comes back as is. The options table is a last argument that is a plain
-- table (no metatable, so never a model, optimizer, scheduler or loader)
-- with a device_placement key: a list of booleans, one per object, each
-- the device_placement of that object's prepare_* (ignored for schedulers
-- and other objects, as Accelerate's).
local PREPARE_PASSES = {{model = "prepare_model", loader = "prepare_data_loader"},
  {optimizer = "prepare_optimizer"}, {scheduler = "prepare_scheduler"}}
local PREPARE_OPTIONS = plugins.register("prepare", {device_placement = "table"})
local PLACED_KINDS = {model = true, loader = true, optimizer = true}

-- prepare's options (removed from args), or nil when it has none.
local function prepare_options(args)
  local o = args[args.n]
  if type(o) ~= "table" or getmetatable(o) ~= nil or kind_of(o) ~= nil or o.device_placement == nil then return nil end
  args[args.n], args.n = nil, args.n - 1
  return plugins.check_options("prepare", o, PREPARE_OPTIONS)
end

-- The device_placement list of prepare's options, checked as Accelerate
-- checks it (one entry per object; refused under DeepSpeed), or nil.
local function prepare_placements(self, o, n)
  local places = o and o.device_placement
  if places == nil then return nil end
  if self.distributed_type == "DEEPSPEED" then
    raise("prepare: device_placement cannot be customised under DeepSpeed (as Accelerate: \"You can't customize "
      .. "device placements with DeepSpeed or Megatron-LM.\")")
  end
  local count = 0
  for k, v in pairs(places) do
    if type(k) ~= "number" or k < 1 or k ~= math.floor(k) then count = -math.huge end
    if type(v) ~= "boolean" then raise("prepare: device_placement[%s] must be a boolean, got %s", tostring(k), type(v)) end
    count = count + 1
  end
  if count ~= n or #places ~= n then
    raise("prepare: device_placement should be a list with %d elements (the number of objects passed), got %s", n,
      count < 0 and "a table with other keys" or tostring(count))
  end
  return places
end

function Accelerator:prepare(...)
  local args = compat.pack(...)
  local places = prepare_placements(self, prepare_options(args), args.n)
  local out = {}
  read_ds_config(self)
  local sizes = {} -- the loaders' batch sizes: DeepSpeed's "auto" micro batch is the smallest
  for i = 1, args.n do
    local x = args[i]
    if kind_of(x) == "loader" and not prepared.is_loader(x) and type(x.batch_size) == "number" then
      sizes[#sizes + 1] = x.batch_size
    end
  end
  check_ds_batch(self, sizes)
  if self._shard_plan then prepare_sharded(self, args, out, places) end
  for _, pass in ipairs(PREPARE_PASSES) do
    for i = 1, args.n do
      local kind = kind_of(args[i])
      local method = pass[kind]
      if out[i] == nil and method then
        out[i] = self[method](self, args[i], PLACED_KINDS[kind] and placement_of(places, i) or nil)
      end
    end
  end
  for i = 1, args.n do
    if out[i] == nil then out[i] = args[i] end
  end
  return compat.unpack(out, 1, args.n)
end

-- A model's DDP reducer. free_memory lets go of the models, but a model
-- the script still uses keeps averaging its gradients, as Accelerate's DDP
-- wrapper does: the model itself then holds its reducer (a raw field), and
-- the Accelerator only a weak entry, so both go with the model.
local function reducer_of(self, model)
  for _, e in ipairs(self._reducers) do
    if rawequal(e.model, model) then return e.reducer end
  end
  for _, e in ipairs(self._released_reducers) do
    if rawequal(e.model, model) then return e.reducer end
  end
  return nil
end

-- Before each forward with grad enabled, the model's DDP reducer takes the
-- synchronisation asked for then: the backward of that forward averages
-- (or not) whatever scope it runs in.
local function sync_on_forward(self, model)
  model:register_forward_pre_hook(function()
    local r = accel.is_grad_enabled() and reducer_of(self, model)
    if r then r:set_sync(self._grad_sync[model] ~= false) end
  end)
end

-- The model itself: moved to the device, forward under autocast for bf16 /
-- fp16; on several processes rank 0's parameters (and buffers) are
-- broadcast and the model gets its DDP gradient reducer.
local PREPARE_MODEL_OPTIONS = plugins.register("prepare_model", {device_placement = "boolean"})

function Accelerator:prepare_model(model, o, ...)
  no_more_args("prepare_model", select("#", ...))
  if kind_of(model) ~= "model" then raise("prepare_model: expected an nn.Module, got %s", type(model)) end
  plugins.check_options("prepare_model", o, PREPARE_MODEL_OPTIONS)
  if self._shard_plan and not contains(self._models, model) and #ddp.trainable(model) > 0 then
    raise("prepare_model: under %s (%s) the model is prepared together with its optimizer: use "
      .. "accelerator:prepare(model, optimizer)", self.distributed_type, self.sharding)
  end
  if not contains(self._models, model) then self._models[#self._models + 1] = model end
  if placement(self, o) then place_model(self, model) end
  if self.num_processes > 1 and not reducer_of(self, model) then
    local kw = self.ddp_kwargs
    ddp.broadcast_model(model, 0, kw.broadcast_buffers)
    if kw.broadcast_buffers ~= false then
      ddp.sync_buffers_each_forward(model, function()
        local r = reducer_of(self, model)
        return r == nil or r:sync()
      end)
    end
    if #ddp.trainable(model) > 0 then -- a frozen model needs no reducer
      local reducer = ddp.Reducer(model, {bucket_cap_mb = kw.bucket_cap_mb,
        find_unused_parameters = kw.find_unused_parameters, finalize_in_backward = true})
      reducer:set_sync(self._grad_sync[model] ~= false)
      self._reducers[#self._reducers + 1] = {model = model, reducer = reducer}
      sync_on_forward(self, model)
    end
  end
  return patch_forward(self, model)
end

-- Completes the gradient averaging of every model whose synchronising
-- backward has run (a no-op otherwise, and on one process).
function Accelerator:_finish_grad_sync()
  for _, e in ipairs(self._reducers) do e.reducer:finalize() end
  for _, e in ipairs(self._released_reducers) do -- a collected model ran no backward: nothing to finish
    if e.model ~= nil and e.reducer ~= nil then e.reducer:finalize() end
  end
  for _, e in ipairs(self._engines) do e.engine:finalize() end
end

-- The AcceleratedOptimizer of optimizer; before every real step the
-- gradient reduction completes and DeepSpeed's gradient_clipping clips
-- (through the sharding engine when one holds the optimizer).
wrap_optimizer = function(self, optimizer, placed)
  local clip = self.deepspeed_plugin and self.deepspeed_plugin.gradient_clipping
  local wrapped = prepared.wrap_optimizer(optimizer, self.gradient_state, self._loss_scaler, function()
    self:_finish_grad_sync()
    if type(clip) == "number" and clip > 0 then -- DeepSpeed's gradient_clipping (0: none), before every step
      if self._loss_scaler then self._loss_scaler:_unscale_once(optimizer) end
      local eng = engine_of(self, optimizer)
      if eng then
        eng:clip_grad_norm_(clip)
      else
        local params = {}
        for _, g in ipairs(optimizer.param_groups) do
          for _, p in ipairs(g.params) do params[#params + 1] = p end
        end
        accel.nn.utils.clip_grad_norm_(params, clip)
      end
    end
  end)
  rawset(wrapped, "device_placement", placed) -- Accelerate's AcceleratedOptimizer.device_placement
  self._optimizers[#self._optimizers + 1] = wrapped
  return wrapped
end

-- The optimizer switched to the parameters prepare moved, its state moved
-- along unless {device_placement = false} (default: the Accelerator's).
local PREPARE_OPTIMIZER_OPTIONS = plugins.register("prepare_optimizer", {device_placement = "boolean"})

function Accelerator:prepare_optimizer(optimizer, o, ...)
  no_more_args("prepare_optimizer", select("#", ...))
  plugins.check_options("prepare_optimizer", o, PREPARE_OPTIMIZER_OPTIONS)
  if prepared.is_optimizer(optimizer) then return optimizer end
  read_ds_config(self)
  if kind_of(optimizer) ~= "optimizer" then raise("prepare_optimizer: expected an optimizer, got %s", type(optimizer)) end
  if self._shard_plan then
    raise("prepare_optimizer: under %s (%s) the optimizer is prepared together with its model: use "
      .. "accelerator:prepare(model, optimizer)", self.distributed_type, self.sharding)
  end
  local placed = placement(self, o)
  switch_parameters(optimizer, self._moved_params, placed)
  return wrap_optimizer(self, optimizer, placed)
end

-- As Accelerate's prepare_scheduler(scheduler): no options.
local PREPARE_SCHEDULER_OPTIONS = plugins.register("prepare_scheduler", {})

function Accelerator:prepare_scheduler(scheduler, o, ...)
  no_more_args("prepare_scheduler", select("#", ...))
  plugins.check_options("prepare_scheduler", o, PREPARE_SCHEDULER_OPTIONS)
  if prepared.is_scheduler(scheduler) then return scheduler end
  if kind_of(scheduler) ~= "scheduler" then raise("prepare_scheduler: expected a scheduler, got %s", type(scheduler)) end
  local mine = {}
  for _, opt in ipairs(self._optimizers) do
    if rawequal(scheduler.optimizer, opt.optimizer) or rawequal(scheduler.optimizer, opt) then mine[#mine + 1] = opt end
  end
  if #mine == 0 then mine = self._optimizers end
  local wrapped = prepared.wrap_scheduler(scheduler, mine, self.gradient_state, {
    step_with_optimizer = self.step_scheduler_with_optimizer, split_batches = self.split_batches,
    num_processes = self.num_processes})
  self._schedulers[#self._schedulers + 1] = wrapped
  return wrapped
end

local function safe_len(x)
  if x == nil then return nil end
  local ok, n = pcall(function() return #x end)
  return ok and type(n) == "number" and n or nil
end

-- This process's shard of the loader's global order (see DESIGN §2),
-- its batches on accelerator.device unless device_placement is false
-- ({device_placement =} overrides the Accelerator's, as Accelerate's
-- prepare_data_loader(data_loader, device_placement)).
local PREPARE_LOADER_OPTIONS = plugins.register("prepare_data_loader", {device_placement = "boolean"})

function Accelerator:prepare_data_loader(loader, o, ...)
  no_more_args("prepare_data_loader", select("#", ...))
  plugins.check_options("prepare_data_loader", o, PREPARE_LOADER_OPTIONS)
  if prepared.is_loader(loader) then return loader end
  read_ds_config(self)
  if kind_of(loader) ~= "loader" then raise("prepare_data_loader: expected a DataLoader, got %s", type(loader)) end
  if not has_fn(loader, "shard") then raise("prepare_data_loader: the loader has no shard(rank, world_size, opts) method") end
  local base = loader:shard(self.process_index, self.num_processes,
    {even_batches = self.even_batches, split_batches = self.split_batches})
  local data_seed = self.use_seedable_sampler and self.dataloader_config.data_seed or nil
  if loader.shuffle and data_seed ~= nil then
    base.seed = data_seed -- Accelerate's seedable sampler seeded with data_seed, the same on every rank
  elseif self.num_processes > 1 and loader.shuffle then
    -- every rank deals from rank 0's order (Accelerate syncs the sampler's
    -- generator): seeds drawn from generators the ranks used differently,
    -- or given per rank, would make the shards overlap
    base.seed = self.state.comm:broadcast_object(loader.seed, 0)
  end
  local bs = type(loader.batch_size) == "number" and loader.batch_size or nil
  check_ds_batch(self, {bs})
  local device = placement(self, o) and self.device or nil
  -- a copy to sim is queued behind the device's work (the host buffer is
  -- staged), so it does not block; other devices have no such copy yet
  local kind = device ~= nil and tostring(device):match("^[^:]+") or "cpu"
  if self.non_blocking and kind ~= "cpu" and kind ~= "sim" then
    raise("prepare_data_loader: dataloader_config.non_blocking = true is not supported on %s: copies to the device "
      .. "are synchronous here", tostring(device))
  end
  local wrapped = prepared.wrap_loader(base, {gradient_state = self.gradient_state, device = device,
    total_batch_size = bs and (self.split_batches and bs or bs * self.num_processes),
    dataset_length = function() return safe_len(loader.dataset) end, drop_last = loader.drop_last == true,
    even_batches = self.even_batches or self.num_processes == 1})
  self._dataloaders[#self._dataloaders + 1] = wrapped
  return wrapped
end

-- The loader (prepared or not) starting at batch n + 1 of its current pass
-- (also accel.skip_first_batches / accel.utils.skip_first_batches); n also
-- as Accelerate's keyword, {num_batches = n}.
local SKIP_OPTIONS = plugins.register("skip_first_batches", {num_batches = "number"})

function M.skip_first_batches(loader, n)
  if type(n) == "table" and getmetatable(n) == nil then
    plugins.check_options("skip_first_batches", n, SKIP_OPTIONS)
    n = n.num_batches
  end
  if n == nil then n = 0 end -- Accelerate's default num_batches
  if type(n) ~= "number" or n < 0 or n ~= math.floor(n) then
    raise("skip_first_batches: num_batches must be a non-negative integer, got %s", tostring(n))
  end
  if not is_table(loader) or not has_fn(loader, "skip_first_batches") then
    raise("skip_first_batches: expected a DataLoader, got %s", type(loader))
  end
  return loader:skip_first_batches(n)
end

function Accelerator:skip_first_batches(loader, n) return M.skip_first_batches(loader, n) end

-- (keep_torch_compile: there is no torch.compile wrapper here, so either value
-- gives the model itself, as Accelerate's unwrap of a model never compiled)
local UNWRAP_OPTIONS = plugins.register("unwrap_model", {keep_fp32_wrapper = "boolean", keep_torch_compile = "boolean"})

function Accelerator:unwrap_model(model, o)
  if type(o) == "boolean" then o = {keep_fp32_wrapper = o} end -- Accelerate's positional keep_fp32_wrapper
  plugins.check_options("unwrap_model", o, UNWRAP_OPTIONS)
  if o and o.keep_fp32_wrapper == false then amp.unpatch_forward(model) end
  return model
end

-- ---------------------------------------------------------------- training step

-- backward(loss): loss / gradient_accumulation_steps, times the loss scale
-- under fp16, then loss:backward().
local BACKWARD_OPTIONS = plugins.register("backward", {gradient = "any", retain_graph = "boolean"})

function Accelerator:backward(loss, o)
  if not accel.is_tensor(loss) then raise("backward: expected the loss tensor, got %s", type(loss)) end
  plugins.check_options("backward", o, BACKWARD_OPTIONS)
  join.check_uneven(self)
  local k = self.gradient_state.num_steps
  if k > 1 then loss = loss / k end
  if self._loss_scaler then loss = self._loss_scaler:scale_loss(loss) end
  loss:backward(o and o.gradient, o ~= nil and o.retain_graph == true)
  self:_finish_grad_sync()
end

-- The model of no_sync / trigger_sync_in_backward: a module (a table).
local function check_model(what, model)
  if not is_table(model) then raise("%s: expected the model, got %s", what, type(model)) end
end

-- Gradient synchronisation of one model on / off. A sharding engine
-- follows at once (FSDP too decides in backward); a DDP reducer at the
-- model's next forward with grad enabled, as PyTorch's DDP arms the next
-- backward's reduction in forward (sync_on_forward).
function Accelerator:_set_grad_sync(model, on)
  self._grad_sync[model] = on
  local eng = engine_of(self, model)
  if eng then eng:set_sync(on) end
end


-- The body of `what` runs with the models' gradient synchronisation set to
-- setting() (called on entry; nil leaves it alone); each model's previous
-- setting comes back afterwards, so an inner scope never undoes an outer
-- no_sync (as DDP's no_sync restores its previous flag).
local function sync_scope(self, what, models, setting, fn)
  local before, on = {}, nil
  return state.scoped(what, function()
    on = setting()
    if on == nil then return end
    for i, m in ipairs(models) do
      before[i] = self._grad_sync[m] ~= false
      self:_set_grad_sync(m, on)
    end
  end, function()
    if on == nil then return end
    for i, m in ipairs(models) do self:_set_grad_sync(m, before[i]) end
  end, fn)
end

-- accumulate(model..., fn) or `local _ <close> = accelerator:accumulate(model...)`:
-- counts a micro-batch; sync_gradients (and so the optimizer step) is true on
-- every gradient_accumulation_steps-th one and on the loader's last batch.
function Accelerator:accumulate(...)
  local n = select("#", ...)
  local models = {...}
  local fn = nil
  if n > 0 and type(models[n]) == "function" then fn = table.remove(models, n); n = n - 1 end
  for i = 1, n do -- (a body that is not a function, or a nil one, would else make a handle and never run)
    local m = models[i]
    if type(m) ~= "table" or type(m.parameters) ~= "function" then
      raise("accumulate: argument %d must be a model (or, last, the function to run), got %s", i,
        type(m) == "table" and "a table that is not a module" or type(m))
    end
  end
  local gs = self.gradient_state
  return sync_scope(self, "accumulate", models, function()
    gs:do_sync()
    if not gs.sync_gradients and not (gs.sync_each_batch and self.use_distributed) then return false end
  end, fn)
end

-- no_sync(model, fn) / handle: backward without gradient synchronisation.
function Accelerator:no_sync(model, fn)
  check_model("no_sync", model)
  return sync_scope(self, "no_sync", {model}, function() return false end, fn)
end

-- trigger_sync_in_backward(model, fn) / handle: gradients are averaged in
-- the body's backward even inside no_sync / a non-synchronising
-- accumulate step, also of a forward run before (Accelerate's: it arms
-- the DDP reducer itself, prepare_for_backward; a no-op on one process).
function Accelerator:trigger_sync_in_backward(model, fn)
  check_model("trigger_sync_in_backward", model)
  return sync_scope(self, "trigger_sync_in_backward", {model}, function()
    local r = reducer_of(self, model)
    if r then r:set_sync(true) end
    return true
  end, fn)
end

-- autocast([autocast_handler], fn) / handle: the body's GEMMs run in the
-- mixed-precision dtype (none when the handler, or the Accelerator's
-- AutocastKwargs, says enabled = false).
function Accelerator:autocast(handler, fn)
  if type(handler) == "function" then handler, fn = nil, handler end
  local dtype, prev = self.autocast_dtype, nil
  if handler ~= nil then
    if plugins.kind_of(handler) ~= "AutocastKwargs" then handler = plugins.AutocastKwargs(handler) end
    dtype = handler.enabled and amp.dtype_of(self.mixed_precision) or nil
  end
  if amp.dtype_of(self.mixed_precision) == nil then
    return state.scoped("autocast", function() end, function() end, fn)
  end
  return state.scoped("autocast", function() prev = C.set_autocast(dtype) end, function() C.set_autocast(prev) end, fn)
end

-- Divide the fp16-scaled gradients by the loss scale, once per optimizer
-- step and only on a synchronising step: on the other micro-steps the
-- gradients are still being accumulated in the scaled domain, and
-- unscaling them there would mix scaled and unscaled terms (so it is a
-- no-op; the step itself unscales and checks for inf/NaN).
function Accelerator:unscale_gradients(optimizer)
  self:_finish_grad_sync()
  if not self._loss_scaler or not self.gradient_state.sync_gradients then return end
  local opts = optimizer and {optimizer} or self._optimizers
  for _, opt in ipairs(opts) do
    self._loss_scaler:unscale_(prepared.is_optimizer(opt) and opt.optimizer or opt)
  end
end

local sharded_engine -- defined below

local function param_list(parameters, what)
  if accel.is_tensor(parameters) then return {parameters} end
  if is_table(parameters) and has_fn(parameters, "parameters") then return parameters:parameters() end
  if not is_table(parameters) then raise("%s: expected a list of parameters, got %s", what, type(parameters)) end
  util.check_list(parameters, what, "parameters")
  return parameters
end

-- The loss scale that the gradients still carry on this step (1 when
-- none): under fp16 on a non-synchronising micro-step they are scaled.
local function pending_scale(self)
  if self._loss_scaler and not self.gradient_state.sync_gradients then return self._loss_scaler:get_scale() end
  return 1
end

-- Whether params are all of the engine's parameters (in any order).
local function covers_engine(eng, params)
  local set = {}
  for _, p in ipairs(params) do set[p] = true end
  for _, p in ipairs(eng.params) do
    if not set[p] then return false end
  end
  return true
end

-- The engine holding any of params (clipped through it when they are the
-- whole model, as Accelerate clips under FSDP), or nil.
sharded_engine = function(self, params)
  if #self._engines == 0 then return nil end
  for _, p in ipairs(params) do
    local eng = engine_of(self, p)
    if eng then return eng end
  end
  return nil
end

-- clip_grad_norm_(parameters, max_norm, [norm_type | {norm_type=}]) -> total norm (0-dim tensor).
-- Under a sharding engine: the norm of the whole model's gradients, from
-- the shards, on the synchronising step; nil on other micro-steps (the
-- gradient is not complete before it).
-- On a synchronising step the gradients are unscaled first (fp16); on
-- another micro-step they are clipped as they stand, with the threshold
-- scaled by the loss scale they carry, so the result is what clipping the
-- unscaled gradients would give and nothing is marked unscaled.
function Accelerator:clip_grad_norm_(parameters, max_norm, norm_type)
  local params = param_list(parameters, "clip_grad_norm_")
  self:unscale_gradients()
  local o = type(norm_type) == "table" and norm_type or {norm_type = norm_type or 2}
  local eng = sharded_engine(self, params)
  if eng then
    if not self.gradient_state.sync_gradients then return nil end
    accel.nn.module.check_options("clip_grad_norm_", o, {"norm_type", "error_if_nonfinite", "foreach"})
    if covers_engine(eng, params) then return eng:clip_grad_norm_(max_norm, o.norm_type, o.error_if_nonfinite) end
    if eng.stage >= 2 then
      raise("clip_grad_norm_: under %s (%s) the gradients are sharded, so only the whole model's parameters can be "
        .. "clipped together; got %d of its %d", self.distributed_type, self.sharding, #params, #eng.params)
    end
    -- stage 1 (finalized by unscale_gradients above): every rank holds the full reduced .grad; clip the given ones
  end
  local scale = pending_scale(self)
  if type(max_norm) ~= "number" or scale == 1 then return accel.nn.utils.clip_grad_norm_(params, max_norm, o) end
  return accel.nn.utils.clip_grad_norm_(params, max_norm * scale, o) / scale
end

-- clip_grad_value_(parameters, clip_value, [{foreach =}])
-- Refused under DeepSpeed and FSDP version 1, as Accelerate refuses it;
-- under FSDP version 2 the engine clamps its gradient shards on the
-- synchronising step (nothing on other micro-steps, as clip_grad_norm_).
function Accelerator:clip_grad_value_(parameters, clip_value, opts)
  local params = param_list(parameters, "clip_grad_value_")
  if self.distributed_type == "DEEPSPEED" or (self.distributed_type == "FSDP" and not self.is_fsdp2) then
    raise("clip_grad_value_: DeepSpeed and FSDP1 do not support clip_grad_value_ (as in Accelerate); use "
      .. "accelerator:clip_grad_norm_ instead, or FSDP with fsdp_version = 2")
  end
  self:unscale_gradients()
  local eng = sharded_engine(self, params)
  if eng and eng.stage >= 2 then
    accel.nn.module.check_options("clip_grad_value_", opts, {"foreach"})
    if type(clip_value) ~= "number" then raise("clip_grad_value_: clip_value must be a number, got %s", type(clip_value)) end
    if not covers_engine(eng, params) then
      raise("clip_grad_value_: under %s (%s) the gradients are sharded, so only the whole model's parameters can be "
        .. "clipped together; got %d of its %d", self.distributed_type, self.sharding, #params, #eng.params)
    end
    if self.gradient_state.sync_gradients then eng:clip_grad_value_(clip_value) end
    return
  end
  local scale = pending_scale(self)
  if type(clip_value) ~= "number" then return accel.nn.utils.clip_grad_value_(params, clip_value, opts) end
  return accel.nn.utils.clip_grad_value_(params, clip_value * scale, opts)
end

-- ---------------------------------------------------------------- processes

function Accelerator:print(...) self.state:print(...) end
function Accelerator:wait_for_everyone() self.state:wait_for_everyone() end
function Accelerator:main_process_first(fn) return self.state:main_process_first(fn) end
function Accelerator:local_main_process_first(fn) return self.state:local_main_process_first(fn) end
function Accelerator:on_main_process(fn) return self.state:on_main_process(fn) end
function Accelerator:on_local_main_process(fn) return self.state:on_local_main_process(fn) end
function Accelerator:on_last_process(fn) return self.state:on_last_process(fn) end
-- on_process(fn, i | {process_index = i}), on_local_process(fn, i | {local_process_index = i})
local function process_index_arg(what, key, i)
  if type(i) ~= "table" then return i end
  plugins.check_options(what, i, {[key] = "number"})
  return i[key]
end
function Accelerator:on_process(fn, i)
  if type(fn) == "table" and getmetatable(fn) == nil then fn, i = i, fn end
  return self.state:on_process(fn, process_index_arg("on_process", "process_index", i))
end
function Accelerator:on_local_process(fn, i)
  if type(fn) == "table" and getmetatable(fn) == nil then fn, i = i, fn end
  return self.state:on_local_process(fn, process_index_arg("on_local_process", "local_process_index", i))
end
function Accelerator:split_between_processes(inputs, o, fn) return self.state:split_between_processes(inputs, o, fn) end

function Accelerator:gather(data) return ops.gather(self.state.comm, data) end

local function all_tensors(data)
  if accel.is_tensor(data) then return true end
  if not util.is_container(data) or next(data) == nil then return false end
  for _, v in pairs(data) do
    if not all_tensors(v) then return false end
  end
  return true
end

-- One value of gather_for_metrics: gathered (tensors) or gathered as Lua
-- values (use_gather_object, or anything that is not all tensors), minus the
-- samples repeated to even out the last batch of the loader.
local function gather_one_for_metrics(self, data, use_object)
  use_object = use_object or not all_tensors(data)
  local out = use_object and self:gather_object(data) or self:gather(data)
  local gs = self.gradient_state
  if gs.end_of_dataloader then
    local r = gs.remainder
    if r > 0 then
      if use_object and type(out) == "table" and (out[1] ~= nil or next(out) == nil) then
        local cut = {}
        for i = 1, math.min(r, #out) do cut[i] = out[i] end
        out = cut
      elseif not use_object then
        out = ops.truncate(out, r)
      end
    end
  end
  return out
end

-- The options of gather_for_metrics: the last of two or more arguments
-- when it is a boolean (Accelerate's positional use_gather_object) or a
-- non-empty plain table of booleans under string keys (data never looks
-- like that: it holds tensors or values to gather); its keys are then checked.
local METRICS_OPTIONS = {use_gather_object = true}

local function metrics_options(args)
  if args.n < 2 then return nil end
  local o = args[args.n]
  if type(o) == "boolean" then
    args.n = args.n - 1
    return {use_gather_object = o}
  end
  if type(o) ~= "table" or getmetatable(o) ~= nil or next(o) == nil then return nil end
  if rawget(o, "use_gather_object") ~= nil and type(o.use_gather_object) ~= "boolean" then
    raise("gather_for_metrics: use_gather_object must be a boolean, got %s", util.show(o.use_gather_object))
  end
  for k, v in pairs(o) do
    if type(k) ~= "string" or type(v) ~= "boolean" then return nil end
  end
  for k in pairs(o) do
    if not METRICS_OPTIONS[k] then raise("gather_for_metrics: unknown option '%s' (use_gather_object)", k) end
  end
  args.n = args.n - 1
  return o
end

-- gather_for_metrics(data...[, {use_gather_object = false} | use_gather_object]) -> one result
-- per data argument, in order (gather_for_metrics(preds, labels) -> all
-- preds, all labels).
function Accelerator:gather_for_metrics(...)
  local args = compat.pack(...)
  local o = metrics_options(args)
  if args.n == 0 then raise("gather_for_metrics: expected the data to gather") end
  local out = {}
  for i = 1, args.n do
    if args[i] == nil then raise("gather_for_metrics: argument %d is nil", i) end
    out[i] = gather_one_for_metrics(self, args[i], o and o.use_gather_object)
  end
  return compat.unpack(out, 1, args.n)
end

-- Option values are checked by accel.operations, in its agreement step
-- (a value refused on one process fails on every process).
local REDUCE_OPTIONS = plugins.register("reduce", {reduction = "any", scale = "any"})
local PAD_OPTIONS = plugins.register("pad_across_processes", {dim = "any", pad_index = "number",
  pad_first = "boolean"})
local BROADCAST_OPTIONS = plugins.register("broadcast", {from_process = "any"})
local BROADCAST_LIST_OPTIONS = plugins.register("broadcast_object_list", {from_process = "any"})

-- reduce(t, "sum" | "mean" | "max" | "min" | "none" or {reduction=, scale=})
function Accelerator:reduce(data, reduction, scale)
  if type(reduction) == "table" then
    plugins.check_options("reduce", reduction, REDUCE_OPTIONS)
    reduction, scale = reduction.reduction, reduction.scale
  end
  return ops.reduce(self.state.comm, data, reduction, scale)
end

-- pad_across_processes(t, [dim = 1], [pad_index = 0], [pad_first = false]) or
-- (t, {dim =, pad_index =, pad_first =}), as Accelerate's positional form
function Accelerator:pad_across_processes(data, dim, pad_index, pad_first)
  local o = dim
  if type(dim) ~= "table" then o = {dim = dim, pad_index = pad_index, pad_first = pad_first} end
  plugins.check_options("pad_across_processes", o, PAD_OPTIONS)
  local d = o.dim
  if d == nil then d = 1 end
  return ops.pad_across_processes(self.state.comm, data, d, o.pad_index or 0, o.pad_first == true)
end

-- The from_process of broadcast / broadcast_object_list: a number or
-- {from_process =} (default 0).
local function from_process_arg(what, v, spec)
  if type(v) == "table" then
    plugins.check_options(what, v, spec)
    v = v.from_process
  end
  if v == nil then return 0 end
  return v
end

function Accelerator:broadcast(data, from_process)
  return ops.broadcast(self.state.comm, data, from_process_arg("broadcast", from_process, BROADCAST_OPTIONS))
end

function Accelerator:gather_object(obj) return ops.gather_object(self.state.comm, obj) end

-- join_uneven_inputs(models, {even_batches =}, fn) -> fn's results: ranks
-- that run out of batches shadow the others' gradient all-reduces with zeros
-- (accel.join has the semantics: divide_by_initial_world_size = true).
-- Under a sharding engine only even batches are possible (its
-- reduce-scatters and gathers cannot be shadowed by a rank without data).
function Accelerator:join_uneven_inputs(models, o, fn)
  local even = type(o) == "table" and not accel.is_tensor(o) and o.even_batches
  if even == nil then even = self.even_batches end
  if #self._engines > 0 and self.num_processes > 1 and not even then
    raise("join_uneven_inputs: under %s (%s) uneven inputs cannot be joined: the sharding engine's collectives need "
      .. "every process in every step; use even_batches = true", self.distributed_type, self.sharding)
  end
  return join.join_uneven_inputs(self, models, o, fn)
end

-- broadcast_object_list(list, [from_process = 0 | {from_process =}]): list's
-- items replaced in place by process from_process's (JSON values); returns list.
function Accelerator:broadcast_object_list(list, from_process)
  return ops.broadcast_object_list(self.state.comm, list,
    from_process_arg("broadcast_object_list", from_process, BROADCAST_LIST_OPTIONS))
end

-- set_trigger on any process makes check_trigger true on every process (once).
function Accelerator:set_trigger() rawset(self, "flag", 1) end

function Accelerator:check_trigger()
  local total = self.state.comm:all_reduce(accel.tensor({self.flag}, HOST), "sum"):item()
  if total >= 1 then
    rawset(self, "flag", 0)
    return true
  end
  return false
end

-- free_memory(...) / clear(...): drops the references to everything
-- prepared (models, optimizers, schedulers, loaders and their DDP
-- reducers; objects given to register_for_checkpointing stay, as in
-- Accelerate) and returns the cached tensor memory; returns nil for each
-- argument, so `model, optimizer = accelerator:clear(model, optimizer)`
-- releases the caller's references too (Accelerate's idiom).
function Accelerator:free_memory(...)
  local kept = {}
  for _, e in ipairs(self._released_reducers) do
    if e.model ~= nil and e.reducer ~= nil then kept[#kept + 1] = e end
  end
  for _, e in ipairs(self._reducers) do
    rawset(e.model, "_released_ddp_reducer", e.reducer) -- the model keeps it alive, nothing else
    kept[#kept + 1] = setmetatable({model = e.model, reducer = e.reducer}, {__mode = "v"})
  end
  rawset(self, "_released_reducers", kept)
  for _, e in ipairs(self._engines) do e.engine:close() end
  rawset(self, "_reducers", {})
  rawset(self, "_engines", {})
  rawset(self, "_models", {})
  rawset(self, "_optimizers", {})
  rawset(self, "_schedulers", {})
  rawset(self, "_dataloaders", {})
  rawset(self, "_moved_params", setmetatable({}, {__mode = "k"}))
  self.gradient_state.loaders = {}
  self.gradient_state.step = 0
  return require("accel.utils").release_memory(...)
end
Accelerator.clear = Accelerator.free_memory
Accelerator.release_memory = Accelerator.free_memory

-- ---------------------------------------------------------------- trackers

-- init_trackers' second and third arguments -> config, init_kwargs.
-- Accelerate's positional form (project_name, config, init_kwargs) and our
-- options table {config =, init_kwargs =}: a second argument is the options
-- table when no third is given and every key it has is "config" or
-- "init_kwargs" (so {} is an empty options table); otherwise it is the config.
local function init_trackers_args(a, b)
  if b == nil and is_table(a) and not accel.is_tensor(a) then
    local options = true
    for k in pairs(a) do options = options and (k == "config" or k == "init_kwargs") end
    if options then return a.config, a.init_kwargs end
  end
  return a, b
end

-- The options tracking.create gets for the built-in tracker `name`.
local function builtin_tracker_opts(self, name, project_name, extra)
  local opts
  if name == "mlflow" then
    opts = {experiment_name = project_name}
  else -- a logging directory is there: the constructor checked (check_tracker_dirs)
    opts = {project_dir = self.logging_dir, run_name = project_name}
  end
  if extra ~= nil and not is_table(extra) then raise("init_trackers: init_kwargs.%s must be a table, got %s", name, type(extra)) end
  for k, v in pairs(extra or {}) do opts[k] = v end
  return opts
end

-- What init_trackers starts, in log_with's order: {tracker = t} for a custom
-- tracker, {name =, opts =} for a built-in one, whose options (the MLflow
-- server URI, ...) are checked here, before any tracker starts. A built-in
-- name in `used` is skipped ({"all", "csv"} starts one csv tracker).
local function tracker_plan(self, entries, project_name, init_kwargs, used)
  local plan = {}
  for _, entry in ipairs(entries) do
    if is_table(entry) then plan[#plan + 1] = {tracker = accel.tracking.check_tracker(entry)} end
    for _, n in ipairs(is_table(entry) and {} or accel.tracking.expand_names(entry)) do
      if not used[n] then
        used[n] = true
        local opts = builtin_tracker_opts(self, n, project_name, init_kwargs[n])
        accel.tracking.check(n, opts)
        plan[#plan + 1] = {name = n, opts = opts}
      end
    end
  end
  return plan
end

local function start_tracker(p)
  if p.tracker and p.tracker.start then p.tracker:start() end
  return p.tracker or accel.tracking.create(p.name, p.opts)
end

-- init_trackers(project_name, config, init_kwargs), as Accelerate, or
-- init_trackers(project_name, {config =, init_kwargs = {mlflow = {...}}}):
-- starts the log_with trackers (main process only): file trackers under
-- logging_dir/project_name, mlflow's experiment named project_name; then
-- stores config in each. init_kwargs naming no started tracker is an error.
function Accelerator:init_trackers(project_name, a, b)
  if type(project_name) ~= "string" then raise("init_trackers: expected a project name, got %s", type(project_name)) end
  local config, init_kwargs = init_trackers_args(a, b)
  if config ~= nil and not is_table(config) then raise("init_trackers: config must be a table, got %s", type(config)) end
  if init_kwargs ~= nil and not is_table(init_kwargs) then raise("init_trackers: init_kwargs must be a table, got %s", type(init_kwargs)) end
  init_kwargs = init_kwargs or {}
  if not self.is_main_process then return end
  local used = {}
  local plan = tracker_plan(self, accel.tracking.log_with_entries(self.log_with), project_name, init_kwargs, used)
  for k in pairs(init_kwargs) do
    if not used[k] then raise('init_trackers: init_kwargs.%s names no built-in tracker started from log_with', tostring(k)) end
  end
  local started = {}
  local ok, err = pcall(function()
    for _, p in ipairs(plan) do started[#started + 1] = start_tracker(p) end
    if config ~= nil then
      for _, t in ipairs(started) do t:store_init_configuration(config) end
    end
  end)
  if not ok then
    for _, t in ipairs(started) do pcall(t.finish, t) end -- no half-started runs left behind
    error(err, 0)
  end
  for _, t in ipairs(started) do self.trackers[#self.trackers + 1] = t end
end

-- get_tracker(name, unwrap): the tracker of that name (unwrap: its `tracker`
-- field, e.g. the MLflow run's ids); a do-nothing tracker when there are none
-- (the other processes), as Accelerate; an error for an unknown name.
local GET_TRACKER_OPTIONS = plugins.register("get_tracker", {unwrap = "boolean"})

-- get_tracker(name, [unwrap = false | {unwrap = false}])
function Accelerator:get_tracker(name, unwrap)
  if type(name) ~= "string" then raise("get_tracker: expected a tracker name, got %s", type(name)) end
  if type(unwrap) == "table" then
    plugins.check_options("get_tracker", unwrap, GET_TRACKER_OPTIONS)
    unwrap = unwrap.unwrap
  elseif unwrap ~= nil and type(unwrap) ~= "boolean" then
    raise("get_tracker: unwrap must be a boolean or {unwrap =}, got %s", type(unwrap))
  end
  if #self.trackers == 0 then return accel.tracking.blank_tracker() end
  local have = {}
  for _, t in ipairs(self.trackers) do
    if t.name == name then
      if unwrap then return t.tracker end
      return t
    end
    have[#have + 1] = '"' .. tostring(t.name) .. '"'
  end
  raise('get_tracker: "%s" is not an available tracker stored inside the Accelerator (trackers: %s)', name, table.concat(have, ", "))
end

local LOG_OPTIONS = plugins.register("log", {step = "number", log_kwargs = "table"})

-- log_kwargs naming no tracker is an error (the entry would be dropped).
local function check_log_kwargs(trackers, log_kwargs)
  for name in pairs(log_kwargs) do
    local found = false
    for _, t in ipairs(trackers) do found = found or t.name == name end
    if not found then raise("log: log_kwargs.%s names no tracker started by init_trackers", tostring(name)) end
  end
end

-- log(values, step, log_kwargs) as Accelerate, or log(values, {step =,
-- log_kwargs =}): to every tracker (main process); each tracker's log gets
-- log_kwargs[its name] (see accel.tracking's LOG_KWARGS for the built-in ones).
function Accelerator:log(values, o, log_kwargs)
  if type(values) ~= "table" then raise("log: expected a table of name -> value, got %s", type(values)) end
  local step = o
  if type(o) == "table" then
    plugins.check_options("log", o, LOG_OPTIONS)
    if log_kwargs ~= nil then raise("log: log_kwargs given twice (in the options table and as the third argument)") end
    step, log_kwargs = o.step, o.log_kwargs
  elseif o ~= nil and type(o) ~= "number" then
    raise("log: step must be a number or {step =}, got %s", type(o))
  end
  if log_kwargs ~= nil and not is_table(log_kwargs) then
    raise("log: log_kwargs must be a table of tracker name -> keyword arguments, got %s", type(log_kwargs))
  end
  if not self.is_main_process then return end
  check_log_kwargs(self.trackers, log_kwargs or {})
  accel.tracking.check_log(values, self.trackers, log_kwargs)
  for _, t in ipairs(self.trackers) do t:log(values, step, log_kwargs and log_kwargs[t.name]) end
end

-- end_training(): closes the trackers (every one, even when one fails: the
-- first failure is raised after all were tried). No collective, as
-- Accelerate's: a script may call it on the main process only.
function Accelerator:end_training()
  local trackers, first_err = self.trackers, nil
  rawset(self, "trackers", {})
  if self.is_main_process then
    for _, t in ipairs(trackers) do
      local ok, err = pcall(t.finish, t)
      first_err = first_err or (not ok and err) or nil
    end
  end
  if first_err then error(first_err, 0) end
end

-- ---------------------------------------------------------------- files

-- Under ZeRO stage 3 the full weights, gathered one tensor at a time
-- (eng:full_state_dict(); collective: every process calls it).
local function check_model(op, model)
  if type(model) ~= "table" or not has_fn(model, "state_dict") then
    raise("%s: expected a model (an nn.Module, or anything with a state_dict method), got %s", op,
      type(model) == "table" and "a table without state_dict" or type(model))
  end
end

-- The dtype a stage-3 DeepSpeed model's weights are gathered in: with
-- zero3_save_16bit_model under bf16 / fp16, those 16 bits (DeepSpeed's
-- consolidated 16-bit state dict), else nil (the parameters' float32).
local function zero3_save_dtype(self)
  local ds = self.deepspeed_plugin
  if not (ds and ds.zero3_save_16bit_model and ds.zero_stage == 3) then return nil end
  return ({bf16 = accel.bfloat16, fp16 = accel.float16})[self.mixed_precision]
end

local STATE_DICT_OPTIONS = plugins.register("get_state_dict", {unwrap = "boolean"})

-- get_state_dict(model, [{unwrap = true}]): unwrap = false gives the names of
-- the wrapper prepare makes, as Accelerate: "module." in front under DDP on
-- several processes (no wrapper on one)
function Accelerator:get_state_dict(model, o)
  if type(o) == "boolean" then o = {unwrap = o} end -- Accelerate's positional unwrap
  plugins.check_options("get_state_dict", o, STATE_DICT_OPTIONS)
  local wrapped = o and o.unwrap == false
  -- [sharded checkpoints] a model held by a sharding engine: its full weights, gathered one tensor at a time
  if shard_ckpt.engine_of(model) then
    if wrapped then
      raise("get_state_dict: unwrap = false is not supported under DeepSpeed / FSDP (the engine's own names); "
        .. "leave it true")
    end
    return shard_ckpt.full_state_dict(model, zero3_save_dtype(self))
  end
  check_model("get_state_dict", model)
  local sd = self:unwrap_model(model):state_dict()
  if not wrapped or self.num_processes == 1 then return sd end
  local out = {}
  for k, v in pairs(sd) do out["module." .. k] = v end
  return out
end

local SAVE_MODEL_OPTIONS = plugins.register("save_model", {max_shard_size = "any", safe_serialization = "boolean"})

-- save_model(model, dir, {max_shard_size = "10GB", safe_serialization = true})
function Accelerator:save_model(model, dir, o)
  o = o or {}
  plugins.check_options("save_model", o, SAVE_MODEL_OPTIONS)
  if o.safe_serialization == false then raise("save_model: only safetensors is written (safe_serialization = true)") end
  if type(dir) ~= "string" then raise("save_model: expected a directory, got %s", type(dir)) end
  local max_bytes = checkpoint.parse_size(o.max_shard_size or "10GB", "save_model: max_shard_size")
  if not shard_ckpt.engine_of(model) then check_model("save_model", model) end
  -- [sharded checkpoints] each tensor gathered (collective) just before rank 0 writes it
  if shard_ckpt.engine_of(model) then
    return shard_ckpt.save_model(model, dir, max_bytes, self.is_main_process, zero3_save_dtype(self))
  end
  local sd = self:get_state_dict(model)
  local order, removed = {}, {}
  if has_fn(model, "state_dict_keys") then -- state_dict order, a tied weight written once
    order, removed = checkpoint.untied_order(model:state_dict_keys(), model:state_dict({keep_vars = true}))
  else
    for k in pairs(sd) do order[#order + 1] = k end
    table.sort(order)
  end
  if self.is_main_process then
    checkpoint.warn_removed_shared(removed)
    checkpoint.save_model(sd, order, dir, max_bytes)
  end
end

-- safe_serialization = false asks Accelerate for pickle, which is never written here
local SERIALIZATION_OPTIONS = {safe_serialization = "boolean"}
local function check_serialization(what, o)
  plugins.check_options(what, o, SERIALIZATION_OPTIONS)
  if o and o.safe_serialization == false then
    raise("%s: only safetensors (and JSON) are written, never pickle (safe_serialization = true)", what)
  end
end
plugins.register("save", SERIALIZATION_OPTIONS)

-- save(obj, path, [{safe_serialization = true}]): tensors table -> safetensors, plain values -> JSON (main process).
function Accelerator:save(obj, path, o)
  check_serialization("save", o)
  if self.is_main_process then checkpoint.save_object(obj, path) end
end

function Accelerator:load(path) return checkpoint.load_object(path) end

-- obj:name(...) for a method (function(self, ...)), obj.name(...) for a
-- plain function of the arguments (function(state)): registered objects may
-- be written either way.
local function call_either(obj, name, ...)
  local fn = obj[name]
  local info = debug.getinfo(fn, "u")
  if info and info.nparams ~= nil and not info.isvararg and info.nparams == select("#", ...) then return fn(...) end
  return fn(obj, ...)
end

function Accelerator:register_for_checkpointing(...)
  local n = select("#", ...)
  for i = 1, n do
    local obj = select(i, ...)
    if not is_table(obj) or not has_fn(obj, "state_dict") or not has_fn(obj, "load_state_dict") then
      raise("register_for_checkpointing: argument %d (%s) needs state_dict() and load_state_dict() methods", i, type(obj))
    end
  end
  for i = 1, n do self._custom_objects[#self._custom_objects + 1] = (select(i, ...)) end
end

-- ---------------------------------------------------------------- state hooks

-- What register_*_state_pre_hook returns: handle:remove() unregisters.
local HookHandle = {__name = "RemovableHandle"}
HookHandle.__index = HookHandle
function HookHandle:remove()
  for i, h in ipairs(self.list) do
    if h == self.hook then
      table.remove(self.list, i)
      return
    end
  end
end

local function add_hook(list, fn, what)
  if not util.callable(fn) then raise("%s: expected a function, got %s", what, type(fn)) end
  local hook = {fn = fn}
  list[#list + 1] = hook
  return setmetatable({list = list, hook = hook}, HookHandle)
end

local function run_hooks(list, ...)
  local copy = {}
  for i, h in ipairs(list) do copy[i] = h end
  for _, h in ipairs(copy) do h.fn(...) end
end

-- register_save_state_pre_hook(fn): save_state calls fn(models, weights, output_dir)
-- on every process before it writes anything: models is a list of the
-- prepared models, weights their state dicts (same order); a hook that
-- saves a model its own way removes its entry from weights, and
-- save_state then writes only the remaining ones. output_dir is the
-- folder being written (a temporary folder renamed into place when the
-- checkpoint is complete), so files the hook writes there are part of it.
function Accelerator:register_save_state_pre_hook(fn)
  return add_hook(self._save_state_pre_hooks, fn, "register_save_state_pre_hook")
end

-- register_load_state_pre_hook(fn): load_state calls fn(models, input_dir)
-- before it reads the checkpoint; a hook that loads a model itself
-- removes it from models, and load_state restores only the remaining ones.
function Accelerator:register_load_state_pre_hook(fn)
  return add_hook(self._load_state_pre_hooks, fn, "register_load_state_pre_hook")
end

-- ---------------------------------------------------------------- save_state / load_state

local function numbered(base, i, ext) return (i == 1 and base or base .. "_" .. (i - 1)) .. (ext or "") end

local function checkpoints_dir(self)
  local dir = self.project_dir
  if dir == nil then raise("automatic checkpoint naming needs a project_dir (ProjectConfiguration{project_dir = ...})") end
  return checkpoint.join(dir, "checkpoints")
end

-- The complete checkpoint_<i> folders of root as {name, number}, by
-- number ascending (as Accelerate sorts them: checkpoint_007 is number 7).
local function existing_checkpoints(root)
  local found = {}
  for _, f in ipairs(C.fs_listdir(root) or {}) do
    local i = f:match("^checkpoint_(%d+)$")
    if i then found[#found + 1] = {name = f, number = tonumber(i)} end
  end
  table.sort(found, function(a, b) return a.number < b.number or (a.number == b.number and a.name < b.name) end)
  return found
end

local function rng_state()
  local a, b = accel.get_rng_state()
  return {a, b}
end

-- What the index records about the prepared objects.
local function index_of(self, fingerprints)
  local idx = {num_processes = self.num_processes, split_batches = self.split_batches,
    mixed_precision = self.mixed_precision, models = json.array(),
    optimizers = #self._optimizers, schedulers = #self._schedulers, dataloaders = #self._dataloaders,
    custom_objects = #self._custom_objects, scaler = self._loss_scaler ~= nil}
  for i, fp in ipairs(fingerprints) do idx.models[i] = {file = numbered("model", i, ".safetensors"), fingerprint = fp} end
  return idx
end

-- f run on every process, then agreed on in place of a barrier: when it
-- raised on any process, cleanup() runs and every process raises, the
-- failing one its own error (passed to rethrow), the others an error naming
-- that process and saying that <outcome>. Returns f's first two results.
local function agreed_step(comm, op, outcome, f, cleanup, rethrow)
  local ok, a, b = pcall(f)
  local all = comm:all_gather_object(ok and "" or tostring(a):gsub("[\128-\255]", "?"), op)
  for r, e in ipairs(all) do
    if e ~= "" then
      cleanup()
      if not ok then rethrow(a) end
      raise("%s: process %d failed, so %s: %s", op, r - 1, outcome, e)
    end
  end
  return a, b
end

-- One part of save_state: on a failure anywhere the temporary folder is
-- removed (the target is untouched before commit).
local function save_step(comm, w, f)
  agreed_step(comm, "save_state", "nothing was saved", f, function() if comm.rank == 0 then w:abort() end end,
    function(err) error(err, 0) end)
end

-- save_state([dir]): the whole training state as one checkpoint folder
-- (see accel.checkpoint); returns the folder.
plugins.register("save_state", SERIALIZATION_OPTIONS)
local LOAD_STATE_OPTIONS = plugins.register("load_state", {strict = "boolean"})

function Accelerator:save_state(output_dir, o)
  check_serialization("save_state", o)
  local pc = self.project_configuration
  local root
  if output_dir == nil then
    if not pc.automatic_checkpoint_naming then
      raise("save_state: give an output directory, or use project_config = accel.ProjectConfiguration{project_dir = ..., "
        .. "automatic_checkpoint_naming = true}")
    end
    root = checkpoints_dir(self)
    local i = nil
    if self.is_main_process then
      local found = existing_checkpoints(root)
      i = math.max(pc.iteration, (found[#found] and found[#found].number or -1) + 1)
    end
    i = self.state.comm:broadcast_object(i, 0) -- rank 0 names it for everyone
    output_dir = checkpoint.join(root, "checkpoint_" .. i)
    pc.iteration = i + 1
  elseif type(output_dir) ~= "string" then
    raise("save_state: expected a directory, got %s", type(output_dir))
  end
  local comm, main = self.state.comm, self.is_main_process
  local w = checkpoint.writer(output_dir, comm:broadcast_object(main and C.getpid() or nil, 0), false)
  local fingerprints = {}
  save_step(comm, w, function() if main then w:create() end end)
  local models, weights, layouts = {}, {}, {}
  for i, m in ipairs(self._models) do
    -- [sharded checkpoints] a model held by a sharding engine is saved as every rank's shards (below)
    models[i], weights[i] = m, shard_ckpt.engine_of(m) and shard_ckpt.weights_marker(m) or self:get_state_dict(m)
  end
  save_step(comm, w, function() run_hooks(self._save_state_pre_hooks, models, weights, w.tmp) end)
  save_step(comm, w, function()
    layouts = shard_ckpt.save_all(self, w, weights, numbered) -- [sharded checkpoints] every rank's shard files
    if main then
      for i, sd in ipairs(weights) do
        if shard_ckpt.is_marker(sd) then
          fingerprints[i] = shard_ckpt.fingerprint(sd.model) -- [sharded checkpoints]
        else
          fingerprints[i] = checkpoint.fingerprint(sd)
          w:tensors(numbered("model", i, ".safetensors"), sd)
        end
      end
      for i, opt in ipairs(self._optimizers) do w:packed(numbered("optimizer", i), opt:state_dict()) end
      for i, s in ipairs(self._schedulers) do w:packed(numbered("scheduler", i), s:state_dict()) end
      for i, l in ipairs(self._dataloaders) do w:json(numbered("dataloader", i, ".json"), l:state_dict()) end
      if self._loss_scaler then w:json("scaler.json", self._loss_scaler:state_dict()) end
    end
    for i, obj in ipairs(self._custom_objects) do -- state_dict() on every process (it may gather), written by rank 0
      local sd = call_either(obj, "state_dict")
      if main then w:packed("custom_checkpoint_" .. (i - 1), sd) end
    end
    w:json(("random_states_%d.json"):format(self.process_index), {accel = rng_state(), step = self.gradient_state.step})
  end)
  save_step(comm, w, function()
    if main then
      w:commit(shard_ckpt.annotate(index_of(self, fingerprints), layouts)) -- [sharded checkpoints] layouts in the index
      if root and pc.total_limit then
        local found = existing_checkpoints(root)
        local excess = #found - pc.total_limit
        if excess > 0 then -- Accelerate's warning, word for word
          require("accel.logging").get_logger("accelerate.accelerator"):warning(
            ("Deleting %d checkpoints to make room for new checkpoint."):format(excess))
        end
        for j = 1, excess do C.fs_remove_tree(checkpoint.join(root, found[j].name)) end
      end
    end
  end)
  if not root then pc.iteration = pc.iteration + 1 end -- every save counts (save_iteration), as in Accelerate
  return output_dir
end

-- profile(fn, opts): fn() with the core's op profiler on; writes a Chrome
-- trace to opts.output_trace_dir/profile_<process_index>.json (see
-- accel.profiler for the options); returns what fn returns.
function Accelerator:profile(fn, opts)
  return require("accel.profiler").run(fn, opts, self.process_index, function() self:wait_for_everyone() end)
end

-- Why a checkpoint holding saved objects of a kind cannot be loaded into an
-- Accelerator that prepared have of them; nil when it can. With
-- fewer_ok, fewer prepared than saved is fine (Accelerate loads the ones
-- prepared and leaves the other files).
local function count_mismatch(what, saved, have, fewer_ok)
  if saved ~= have and not (fewer_ok and type(saved) == "number" and have < saved) then
    return ("the checkpoint holds %d %s, this Accelerator %s %d"):format(saved or 0,
      saved == 1 and what:gsub("s$", "") or what, what == "registered objects" and "has" or "prepared", have)
  end
end

-- Why the optimizer opt (prepared) cannot load the state_dict saved: what
-- its load_state_dict would refuse, checked without loading, after the
-- optimizer's class; nil when it fits.
local function optimizer_mismatch(saved, opt)
  local raw = prepared.is_optimizer(opt) and opt.optimizer or opt
  local check = type(raw._state_dict_problem) == "function" and raw._state_dict_problem -- (LBFGS: flat vectors)
    or accel.optim.Optimizer._state_dict_problem
  local why = check(raw, saved)
  return why and ("(%s): %s"):format(raw.__name or "optimizer", why)
end

-- A saved loader position for prepared loader l: {epoch, samples} (samples
-- of the global order, any layout) or the older {epoch, batches} (batches
-- of rank 0 in the saving layout idx.num_processes / idx.split_batches),
-- as {epoch, samples}; or nil and why l cannot continue it exactly.
local function convert_position(l, s, idx)
  if type(l.position_problem) ~= "function" then return s end -- a loader class of the user's own: its own state
  local from = {num_processes = tonumber(idx.num_processes) or 1, split_batches = idx.split_batches == true}
  local samples, why = s.samples, nil
  if samples == nil then samples, why = l:position_of_batches(s.batches, from) end
  why = why or l:position_problem(s.epoch, samples, from)
  if why then return nil, why end
  return {epoch = s.epoch, samples = samples}
end

-- Everything load_state applies, read and checked before any change.
-- strict = false: a model may lack entries of the checkpoint or have some
-- it lacks (those keep their values); shared entries must still match.
local function read_checkpoint(self, dir, models, sharded_plans, strict)
  local r = checkpoint.open(dir)
  local idx = r.index
  local function refuse(fmt, ...) error(("load_state: refusing %s: " .. fmt):format(r.dir, ...), 0) end
  local bad = count_mismatch("models", type(idx.models) == "table" and #idx.models or nil, #models)
    or count_mismatch("optimizers", idx.optimizers, #self._optimizers)
    or count_mismatch("schedulers", idx.schedulers, #self._schedulers, true)
    or count_mismatch("data loaders", idx.dataloaders, #self._dataloaders, true)
    or count_mismatch("registered objects", idx.custom_objects, #self._custom_objects, true)
  if bad then refuse("%s", bad) end
  local data = {models = {}, optimizers = {}, schedulers = {}, loaders = {}, custom = {}, sharded = sharded_plans}
  for i, m in ipairs(models) do
    local sharded = shard_ckpt.involved(idx.models[i], m) -- [sharded checkpoints]
    local current = sharded and shard_ckpt.fingerprint(m) or checkpoint.fingerprint(self:get_state_dict(m))
    local entry = idx.models[i]
    if type(entry) ~= "table" or type(entry.fingerprint) ~= "table" then
      refuse("%s is corrupted (no fingerprint for model %d)", checkpoint.INDEX, i)
    end
    local whole = strict or shard_ckpt.engine_of(m) ~= nil -- [sharded checkpoints] a model with an engine: in full
    local diff = checkpoint.compare_fingerprints(entry.fingerprint, current, whole)
    if diff then
      refuse("it is a checkpoint of another model (model %d: %s)%s", i, diff,
        whole ~= strict and "; strict = false covers models that are not sharded only" or "")
    end
    if sharded then -- [sharded checkpoints] files, headers and pieces checked here, read when applied
      data.sharded[i] = shard_ckpt.plan(self, r, entry, m, refuse, i, numbered("model", i, ".safetensors"), strict)
    else
      local sd = r:tensors(numbered("model", i, ".safetensors"))
      diff = checkpoint.compare_fingerprints(checkpoint.fingerprint(sd), current, strict)
      if diff then refuse("%s does not match model %d: %s", numbered("model", i, ".safetensors"), i, diff) end
      data.models[i] = sd
    end
  end
  for i, opt in ipairs(self._optimizers) do
    local s = r:packed(numbered("optimizer", i))
    local diff = optimizer_mismatch(s, opt)
    if diff then refuse("%s.json does not fit optimizer %d %s", numbered("optimizer", i), i, diff) end
    data.optimizers[i] = s
  end
  -- [sharded checkpoints] an engine's optimizer state goes to the engine
  shard_ckpt.take_optimizer_states(self, data, r, refuse)
  for i = 1, #self._schedulers do data.schedulers[i] = r:packed(numbered("scheduler", i)) end
  for i = 1, #self._dataloaders do
    local file = numbered("dataloader", i, ".json")
    local s = r:json(file)
    local function int(v) return type(v) == "number" and v >= 0 and v == math.floor(v) end
    if type(s) ~= "table" or not int(s.epoch) or not (int(s.samples) or (s.samples == nil and int(s.batches))) then
      refuse("%s is malformed (expected {epoch, samples})", file)
    end
    local why
    data.loaders[i], why = convert_position(self._dataloaders[i], s, idx)
    if why then refuse("%s does not fit data loader %d: %s", file, i, why) end
  end
  for i = 1, #self._custom_objects do data.custom[i] = r:packed("custom_checkpoint_" .. (i - 1)) end
  if self._loss_scaler and r:has("scaler.json") then data.scaler = r:json("scaler.json") end
  local rng_file = ("random_states_%d.json"):format(self.process_index)
  if r:has(rng_file) then
    local s = r:json(rng_file)
    local function int(v) return type(v) == "number" and v == math.floor(v) end
    if type(s) ~= "table" or type(s.accel) ~= "table" or not int(s.accel[1]) or not int(s.accel[2])
      or (s.step ~= nil and not int(s.step)) then
      refuse("%s is malformed (expected {accel = {two integers}, step = an integer})", rng_file)
    end
    data.rng = s
  elseif r:has("random_states_0.json") then
    local s = r:json("random_states_0.json")
    data.step = type(s) == "table" and s.step or nil
  end
  if self.is_main_process then
    local missing = {}
    for rank = 0, self.num_processes - 1 do
      if not r:has(("random_states_%d.json"):format(rank)) then missing[#missing + 1] = tostring(rank) end
    end
    if #missing > 0 then
      io.stderr:write(("load_state: %s was saved by %s process(es) and has no random_states_<rank>.json for "
        .. "rank(s) %s; they keep their current random state\n"):format(r.dir, tostring(idx.num_processes),
        table.concat(missing, ", ")))
    end
  end
  return data, r.dir
end

-- load_state([dir], [{strict = false}]): restores what save_state wrote, or
-- refuses (changing nothing) with a message naming the file and the fault.
-- strict = false: see read_checkpoint (Accelerate passes it on to the
-- model's load_state_dict). No dir: the newest checkpoint_<i> under
-- automatic checkpoint naming (as Accelerate; any string, "latest" too, is
-- a folder).
function Accelerator:load_state(input_dir, o)
  plugins.check_options("load_state", o, LOAD_STATE_OPTIONS)
  if input_dir == nil then
    if not self.project_configuration.automatic_checkpoint_naming then
      raise("load_state: give a checkpoint directory, or use project_config = accel.ProjectConfiguration{project_dir = "
        .. "..., automatic_checkpoint_naming = true} to load the newest checkpoint")
    end
    local root = checkpoints_dir(self)
    local found = existing_checkpoints(root)
    if #found == 0 then raise("load_state: no checkpoint_<i> folder in %s", root) end
    input_dir = checkpoint.join(root, found[#found].name)
  elseif type(input_dir) ~= "string" then
    raise("load_state: expected a checkpoint directory, got %s", type(input_dir))
  end
  local models = {}
  for i, m in ipairs(self._models) do models[i] = m end
  run_hooks(self._load_state_pre_hooks, models, input_dir)
  local sharded_plans = {}
  local strict = not (o and o.strict == false)
  -- every process reads and checks its part first; one that refuses stops them all, before any change
  local data, dir = agreed_step(self.state.comm, "load_state", "nothing was loaded",
    function() return read_checkpoint(self, input_dir, models, sharded_plans, strict) end,
    function() shard_ckpt.close_plans(sharded_plans) end, -- [sharded checkpoints] files opened by the checks
    function(err) raise("%s", tostring(err)) end)
  for i, m in ipairs(models) do
    if data.models[i] then self:unwrap_model(m):load_state_dict(data.models[i], {strict = strict}) end
    if self.fp8_recipe then require("accel.fp8").reset_model(self:unwrap_model(m)) end
  end
  for i, opt in ipairs(self._optimizers) do opt:load_state_dict(data.optimizers[i]) end
  shard_ckpt.apply(self, data.sharded) -- [sharded checkpoints] one tensor at a time, after the optimizers' groups
  for i, s in ipairs(self._schedulers) do s:load_state_dict(data.schedulers[i]) end
  for i, l in ipairs(self._dataloaders) do l:load_state_dict(data.loaders[i]) end
  for i, obj in ipairs(self._custom_objects) do call_either(obj, "load_state_dict", data.custom[i]) end
  if data.scaler then self._loss_scaler:load_state_dict(data.scaler) end
  if data.rng then
    accel.set_rng_state(data.rng.accel[1], data.rng.accel[2])
    if type(data.rng.step) == "number" then self.gradient_state.step = data.rng.step end
  elseif type(data.step) == "number" then
    self.gradient_state.step = data.step
  end
  return dir
end


-- Accelerate's accelerate.utils collectives (broadcast(t, [from_process]),
-- gather, gather_object, broadcast_object_list, reduce,
-- pad_across_processes): these methods on the process state
-- (accel.PartialState()), with or without an Accelerator; accel.utils
-- holds them.
M._utils_collectives = {}
for _, name in ipairs({"broadcast", "gather", "gather_object", "broadcast_object_list", "reduce",
  "pad_across_processes"}) do
  local method = Accelerator[name]
  M._utils_collectives[name] = function(...) return method({state = state.PartialState()}, ...) end
end

-- accelerate.utils.reduce's reduction defaults to "mean" (the Accelerator's to "sum").
local on_state_reduce = M._utils_collectives.reduce
function M._utils_collectives.reduce(data, reduction, scale)
  if reduction == nil then
    reduction = "mean"
  elseif type(reduction) == "table" and reduction.reduction == nil then
    local o = {reduction = "mean"}
    for k, v in pairs(reduction) do o[k] = v end
    reduction = o
  end
  return on_state_reduce(data, reduction, scale)
end

-- The most arguments each method takes (after self), as Accelerate's
-- signatures: more is an error naming the method, never silently dropped.
local METHOD_ARITY = {gather = 1, gather_object = 1, wait_for_everyone = 0, set_trigger = 0, check_trigger = 0,
  unwrap_model = 2, get_state_dict = 2, unscale_gradients = 1, clip_grad_norm_ = 3, clip_grad_value_ = 3,
  skip_first_batches = 2, no_sync = 2, trigger_sync_in_backward = 2, main_process_first = 1,
  local_main_process_first = 1, on_main_process = 1, on_local_main_process = 1, on_last_process = 1,
  on_process = 2, on_local_process = 2, split_between_processes = 3, broadcast = 2, reduce = 3,
  pad_across_processes = 4, register_save_state_pre_hook = 1, register_load_state_pre_hook = 1, end_training = 0,
  save = 3, load = 1, save_model = 3, backward = 2, join_uneven_inputs = 3}
for name, most in pairs(METHOD_ARITY) do
  local method = assert(rawget(Accelerator, name), name)
  Accelerator[name] = function(self, ...)
    local n = select("#", ...)
    if n > most then
      raise("Accelerator:%s takes at most %d argument%s, got %d", name, most, most == 1 and "" or "s", n)
    end
    return method(self, ...)
  end
end

-- A method called with "." instead of ":" raises at the caller's line.
util.check_methods(Accelerator, "Accelerator")
util.check_methods(HookHandle, "RemovableHandle")
return M
