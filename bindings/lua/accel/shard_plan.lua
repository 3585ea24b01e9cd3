-- accel.shard_plan: how the Accelerator's sharding plugins (accel.plugins'
-- DeepSpeedPlugin and FullyShardedDataParallelPlugin) map onto one
-- accel.shard.Engine, and the checks that need the Accelerator (machines,
-- batch sizes, "auto" values). User guide: docs/sharding-accelerator.md.
--
--   local plan = shard_plan.plan(ds, fsdp, state)  -- nil: no engine (stage 0 / NO_SHARD: DDP)
--   plan.kind          "DEEPSPEED" | "FSDP"
--   plan.stage         1, 2 or 3
--   plan.engine        the options of accel.shard.Engine (stage, wrap, offload_optimizer,
--                      bucket_cap_mb, backward_prefetch, broadcast = false: the
--                      Accelerator broadcasts parameters and buffers itself)
--   plan.sync          rank 0's parameters and buffers copied to every rank first
--   plan.activation_checkpointing  each wrap unit's module under accel.utils.checkpoint_module
--   shard_plan.build(plan, model, optimizer) -> the engine
--
-- Decisions (where DeepSpeed / FSDP have no counterpart here):
--  * DeepSpeed stages 1-2 use the engine's default units (consecutive
--    parameters in chunks of bucket_cap_mb; reduce_bucket_size sets it);
--    stage 3 wraps each child of every nn.ModuleList (DeepSpeed gathers
--    per submodule; the blocks of a transformer are the natural units).
--  * FSDP's transformer_based_wrap without class names wraps each child of
--    every nn.ModuleList (Accelerate reads _no_split_modules, which Lua
--    models do not have); size_based_wrap's min_num_params defaults to
--    PyTorch's 1e8.
--  * Stage 3 prefetch (the next unit's all-gather started while the
--    current one computes, core/dist/shard.h "Prefetch"): FSDP's
--    backward_prefetch BACKWARD_PRE / BACKWARD_POST or not given (PyTorch's
--    default, BACKWARD_PRE) turns it on in backward, NO_PREFETCH off (both
--    values start the gather when the current unit's backward starts);
--    forward_prefetch = true turns it on in forward (default false, as
--    PyTorch). DeepSpeed's stage3_prefetch_bucket_size (default 5e7, or
--    "auto") turns both on, 0 both off; the size itself is not used: the
--    engine prefetches exactly one unit.
--  * HYBRID_SHARD / HYBRID_SHARD_ZERO2 run the engine with hybrid = true
--    (stage 3 / 2 inside each machine, gradient shards averaged across
--    machines over communicators split from the world); on one machine they
--    are refused, saying they need several.
local raise = require("accel.util").raise
local plugins = require("accel.plugins")

local M = {}

local DEFAULT_MIN_NUM_PARAMS = 1e8 -- PyTorch's size_based_auto_wrap_policy default

-- Elements of float32 -> MiB (DeepSpeed's bucket sizes count elements).
local function elements_to_mb(n) return n * 4 / 1048576 end

local function ds_plan(ds)
  local stage = ds.zero_stage
  if stage == 0 then return nil end
  local size = ds.reduce_bucket_size
  if type(size) ~= "number" then size = ds.allgather_bucket_size end
  local prefetch = ds.stage3_prefetch_bucket_size ~= 0 -- nil: DeepSpeed's default 5e7; "auto": on
  return {kind = "DEEPSPEED", stage = stage, sync = true, activation_checkpointing = false,
    engine = {stage = stage, wrap = stage == 3 and "module_list" or nil,
      offload_optimizer = ds.offload_optimizer_device == "cpu",
      bucket_cap_mb = type(size) == "number" and elements_to_mb(size) or nil,
      backward_prefetch = stage == 3 and prefetch, forward_prefetch = stage == 3 and prefetch, broadcast = false}}
end

local function fsdp_wrap(f)
  local policy = f.auto_wrap_policy
  if type(policy) == "function" then return policy end
  if policy == "transformer_based_wrap" then
    local names = f.transformer_cls_names_to_wrap
    if names and #names > 0 then return {transformer_cls_names = names} end
    return "module_list"
  end
  if policy == "size_based_wrap" then return {min_num_params = f.min_num_params or DEFAULT_MIN_NUM_PARAMS} end
  return "no_wrap"
end

-- true for HYBRID_SHARD / HYBRID_SHARD_ZERO2 (the engine's hybrid = true:
-- sharded over each machine's ranks, averaged across machines); on one
-- machine (unless the testing knob ACCEL_LUA_TEST_RANKS_PER_NODE fakes
-- several) a clear error.
local function check_hybrid(f, state, what)
  local s = f.sharding_strategy
  if s ~= "HYBRID_SHARD" and s ~= "HYBRID_SHARD_ZERO2" then return false end
  local faked = (os.getenv("ACCEL_LUA_TEST_RANKS_PER_NODE") or "") ~= ""
  if state.num_local_processes == state.num_processes and not faked then
    raise('%s: sharding_strategy = "%s" shards inside each machine and replicates '
      .. "across machines, so it needs several machines; this job runs on one (%d process(es)): use \"%s\"", what, s,
      state.num_processes, s == "HYBRID_SHARD" and "FULL_SHARD" or "SHARD_GRAD_OP")
  end
  return true
end

local function fsdp_plan(f, state, what)
  local hybrid = check_hybrid(f, state, what)
  local stage = f.zero_stage
  if stage == 0 then
    if f.activation_checkpointing then
      raise("%s: activation_checkpointing = true checkpoints the sharded wrap units, and NO_SHARD has none; call "
        .. "accel.utils.apply_activation_checkpointing(model, {check_fn = ...}) before prepare", what)
    end
    return nil
  end
  local wrap = fsdp_wrap(f)
  if f.activation_checkpointing and wrap == "no_wrap" then
    raise('%s: activation_checkpointing = true runs each wrap unit under checkpoint, and '
      .. 'auto_wrap_policy = "no_wrap" makes none below the model; give auto_wrap_policy = '
      .. '"transformer_based_wrap" or "size_based_wrap"', what)
  end
  local prefetch = f.backward_prefetch ~= "NO_PREFETCH"
  return {kind = "FSDP", stage = stage, sync = f.sync_module_states ~= false,
    activation_checkpointing = f.activation_checkpointing == true,
    engine = {stage = stage, wrap = wrap, offload_optimizer = f.cpu_offload == true,
      backward_prefetch = stage == 3 and prefetch, forward_prefetch = stage == 3 and f.forward_prefetch == true,
      broadcast = false, hybrid = hybrid or nil}}
end

-- The plan for the plugins (at most one is given), or nil when nothing is
-- sharded. state: the PartialState (machines and processes); what: the
-- name the FSDP plugin's errors use.
function M.plan(ds, fsdp, state, what)
  if ds then return ds_plan(ds) end
  if fsdp then return fsdp_plan(fsdp, state, what or "FullyShardedDataParallelPlugin") end
  return nil
end

-- A readable summary for accelerator.state and errors.
function M.describe(plan, ds, fsdp)
  if ds then
    local s = ("ZeRO stage %d"):format(ds.zero_stage)
    if ds.zero_stage == 0 then s = s .. " (plain data parallel)" end
    if ds.offload_optimizer_device ~= "none" then s = s .. ", optimizer offload " .. ds.offload_optimizer_device end
    if ds.offload_param_device ~= "none" then s = s .. ", parameter offload " .. ds.offload_param_device end
    return s
  end
  if fsdp then
    local s = ("FSDP %s (ZeRO stage %d)"):format(fsdp.sharding_strategy, fsdp.zero_stage)
    if plan then
      local w = plan.engine.wrap
      local policy = fsdp.auto_wrap_policy
      s = s .. ", wrap " .. (type(w) == "string" and w or type(policy) == "function" and "custom policy" or policy)
      if plan.engine.offload_optimizer then s = s .. ", cpu_offload" end
      if plan.activation_checkpointing then s = s .. ", activation checkpointing" end
    else
      s = s .. " (plain data parallel)"
    end
    return s
  end
  return nil
end

-- The engine for model + optimizer; with activation checkpointing each wrap
-- unit's module runs under accel.utils.checkpoint_module (under stage 3 the
-- recompute in backward finds the unit's parameters gathered: the engine
-- gathers them before the unit's backward starts).
function M.build(plan, model, optimizer)
  local eng = require("accel.shard").Engine(model, optimizer, plan.engine)
  if plan.activation_checkpointing then
    local utils, wrapped = require("accel.utils"), 0
    for _, unit in ipairs(eng._units) do
      if unit.module and unit.module ~= model then
        utils.checkpoint_module(unit.module)
        wrapped = wrapped + 1
      end
    end
    if wrapped == 0 then
      eng:close()
      raise("FullyShardedDataParallelPlugin: activation_checkpointing = true, but the wrap policy found no unit below "
        .. "the model to checkpoint (check auto_wrap_policy / transformer_cls_names_to_wrap / min_num_params)")
    end
  end
  return eng
end

-- The per-process batch size of a loader with batch size bs.
local function micro_batch(bs, split, world) return split and bs / world or bs end

-- true when the config's field holds "auto" or the value check_batch put there.
local function batch_auto(ds, field)
  local v = ds.deepspeed_config[field]
  return v == "auto" or (v ~= nil and v == (ds._filled or {})[field])
end

-- DeepSpeed's batch rule when loaders are prepared (sizes: their batch
-- sizes): an "auto" train_micro_batch_size_per_gpu becomes the smallest
-- batch per process of the loaders prepared so far (the largest with
-- is_train_batch_min = false, as Accelerate's), and train_batch_size = micro batch *
-- gradient_accumulation_steps * processes (filled when "auto", else it must
-- be equal). A numeric micro batch is DeepSpeed's own: loaders of any batch
-- size are accepted, as in Accelerate.
function M.check_batch(ds, sizes, o)
  if not ds or not batch_auto(ds, "train_micro_batch_size_per_gpu") then return end
  local filled = ds._filled or {}
  local micro = filled.train_micro_batch_size_per_gpu
  for _, bs in ipairs(sizes) do
    local m = micro_batch(bs, o.split_batches, o.num_processes)
    if micro == nil or (ds.is_train_batch_min == false and m > micro or ds.is_train_batch_min ~= false and m < micro) then
      micro = m
    end
  end
  if micro == nil then return end
  local total = micro * o.accumulation * o.num_processes
  local want = ds.deepspeed_config.train_batch_size
  if type(want) == "number" and not batch_auto(ds, "train_batch_size") and want ~= total then
    raise("prepare: the DeepSpeed config's train_batch_size = %s, but the loaders' %s batch per process %s x "
      .. "gradient_accumulation_steps %d x %d process(es) = %s (DeepSpeed requires them equal)",
      tostring(want), ds.is_train_batch_min == false and "largest" or "smallest", tostring(micro), o.accumulation, o.num_processes, tostring(total))
  end
  ds._filled = {train_micro_batch_size_per_gpu = micro,
    train_batch_size = batch_auto(ds, "train_batch_size") and total or nil}
  for field, v in pairs(ds._filled) do ds.deepspeed_config[field] = v end
end

-- The values construction can check: train_batch_size against the other two
-- when all three are numbers.
function M.check_config_batch(ds, accumulation, world)
  local micro, total = ds.train_micro_batch_size_per_gpu, ds.train_batch_size
  if type(micro) == "number" and type(total) == "number" and micro * accumulation * world ~= total then
    raise("DeepSpeedPlugin: train_batch_size = %s is not train_micro_batch_size_per_gpu %s x "
      .. "gradient_accumulation_steps %d x %d process(es) (DeepSpeed requires them equal)", tostring(total),
      tostring(micro), accumulation, world)
  end
end

-- Fields filled where the config gives nothing too (Accelerate writes
-- the accumulation and both precision sections).
local FILL_ABSENT = {gradient_accumulation_steps = true, bf16 = true, fp16 = true}

-- Writes values ({field = value}) into ds.deepspeed_config where the
-- config said "auto" (ds.auto) or, for FILL_ABSENT, gives nothing.
function M.fill_auto(ds, values)
  for field, v in pairs(values) do
    local path = plugins.DS_CONFIG_PATHS[field]
    if ds.auto[field] or (FILL_ABSENT[field] and plugins.get_path(ds.deepspeed_config, path) == nil) then
      plugins.set_path(ds.deepspeed_config, path, v)
    end
  end
end

return M
