-- shard_accelerator_test.lua: sharding switched on by configuration only,
-- through the Accelerator (accel.shard_plan -> accel.shard.Engine). Run by
-- scripts/run-tests.sh as `accel-lua shard_accelerator_test.lua` (exit 0 =
-- pass); it starts `accel-lua launch --cpu --num_processes N` jobs
-- (OpenMPI, oversubscribed) of tests/lua/helpers/shard_accel.lua, one
-- unchanged Accelerate-style loop (prepared loader, AdamW + StepLR,
-- accumulate, backward, clip_grad_norm_, 20 optimizer steps) on a
-- 151-parameter model, and compares each sharded run's parameters with the
-- plain DDP run of the same loop on the same ranks (1e-5 relative):
--   * DeepSpeedPlugin stages 1, 2, 3, with and without offload_optimizer_device = "cpu";
--     FSDP FULL_SHARD, SHARD_GRAD_OP, NO_SHARD; wrap policies transformer_based_wrap
--     and size_based_wrap; on 2 and 3 ranks
--   * clipping 0.1 (DeepSpeed's gradient_clipping, and clip_grad_norm_ under FSDP: the
--     returned norm equal to DDP's), accumulation k = 3, bf16, fp16 with a step whose
--     loss is inf on rank 1 (skipped on every rank: the same skip count on every rank
--     as DDP's, one more than without the inf)
--   * clip_grad_value_ under FSDP2 (FULL_SHARD, SHARD_GRAD_OP, with accumulation): the
--     engine clamps each rank's gradient shard, as DDP clamps the full .grad
--   * FSDP activation_checkpointing under FULL_SHARD (the blocks run twice as often)
--   * the same through launch's flags (--use_deepspeed --zero_stage 3
--     --offload_optimizer_device cpu), accelerate-config YAMLs with an fsdp_config: and a
--     deepspeed_config: section, and a ds_config table with "auto" values
--   * bad configurations on 2 ranks: HYBRID_SHARD on one machine, a
--     train_batch_size that disagrees with the loader's batches
--   * helpers/shard_grad_rules.lua: parameters without a gradient on every
--     rank are not stepped, as under DDP with find_unused_parameters;
--     clip_grad_norm_ of a subset and error_if_nonfinite
-- The accel-lua under test is $ACCEL_LUA_BIN, else the interpreter running this script.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local HELPER = HERE .. "/helpers/shard_accel.lua"
local quote, all_ranks_ok, max_rel = support.shell_quote, support.all_ranks_ok, support.max_rel
local jobs = support.job_checks()
local check = jobs.check

support.require_mpirun()
local DIR = support.tmpdir()
local ENV = support.job_env(DIR) -- the HYBRID case below adds the testing knob

-- launch(n, flags, out, args...) -> run
local function launch(n, flags, out, ...)
  local args = {}
  for i, a in ipairs({...}) do args[i] = quote(a) end
  return jobs.run(("%stimeout -k 5 120 %s launch --cpu --num_processes %d %s %s %s %s"):format(ENV,
    quote(support.ACCEL_LUA), n, flags, quote(HELPER), quote(out), table.concat(args, " ")))
end

-- A value of rank's summary line ("rank R skipped K calls C dt T norm N engine ...").
local function field(run, rank, name)
  local line = run.out:match(("rank %d (skipped [^\n]*)"):format(rank))
  return line and line:match(name .. " (%S+)")
end

local refs, seq = {}, 0
-- The plain DDP run of the variant (extra args) on n ranks.
local function reference(n, extra)
  local key = n .. " " .. table.concat(extra, " ")
  if not refs[key] then
    seq = seq + 1
    local path = ("%s/ref%d.st"):format(DIR, seq)
    local args = {"plugin=none"}
    for _, a in ipairs(extra) do args[#args + 1] = a end
    refs[key] = {path = path, run = launch(n, "", path, table.unpack(args))}
  end
  return refs[key]
end

-- name: what runs; n ranks; cfg: the helper's plugin args; extra: the
-- variant (also given to the reference); o: {flags =, dt =, stage =, more = {{cond, why}}}.
local function equiv(name, n, cfg, extra, o)
  o = o or {}
  local ref = reference(n, extra)
  seq = seq + 1
  local path = ("%s/run%d.st"):format(DIR, seq)
  local args = {}
  for _, a in ipairs(cfg) do args[#args + 1] = a end
  for _, a in ipairs(extra) do args[#args + 1] = a end
  local run = launch(n, o.flags or "", path, table.unpack(args))
  local d, where = max_rel(path, ref.path)
  local why = {{ref.run.code == 0, "the DDP run failed: " .. ref.run.err:sub(-400)}, {run.code == 0, "exit status"},
    {all_ranks_ok(run, n), "not every rank finished"},
    {d <= 1e-5, ("parameters differ from DDP's by %g relative (%s)"):format(d, where)}}
  for r = 0, n - 1 do
    why[#why + 1] = {field(run, r, "dt") == o.dt, ("rank %d: distributed_type %s, expected %s"):format(r,
      tostring(field(run, r, "dt")), o.dt)}
    why[#why + 1] = {field(run, r, "skipped") == field(ref.run, r, "skipped"), ("rank %d skipped %s steps, DDP %s")
      :format(r, tostring(field(run, r, "skipped")), tostring(field(ref.run, r, "skipped")))}
  end
  local engine = (run.out:match("rank 0 (skipped [^\n]*)") or ""):match("engine (%a+ ?%d*)")
  why[#why + 1] = {engine == (o.stage and "stage " .. o.stage or "none"),
    ("the engine is %s, expected stage %s"):format(tostring(engine), tostring(o.stage))}
  for _, c in ipairs(o.more and o.more(run, ref.run) or {}) do why[#why + 1] = c end
  check(("%s on %d ranks == DDP (%s)"):format(name, n, #extra > 0 and table.concat(extra, " ") or "AdamW"), run,
    table.unpack(why))
  return run, ref.run
end

local function ds(stage, offload) return {"plugin=ds", "stage=" .. stage, "offload=" .. (offload or "none")} end
local function fsdp(strategy, wrap, ckpt, version)
  return {"plugin=fsdp", "strategy=" .. strategy, "wrap=" .. (wrap or "transformer"), "ckpt=" .. (ckpt or "0"),
    "version=" .. (version or "1")}
end
local DS, FSDP = {dt = "DEEPSPEED"}, {dt = "FSDP"}
local function with(base, t)
  local out = {}
  for k, v in pairs(base) do out[k] = v end
  for k, v in pairs(t) do out[k] = v end
  return out
end

-- ---- (a) every stage and strategy, 2 and 3 ranks ----
for _, n in ipairs({2, 3}) do
  for stage = 1, 3 do
    equiv(("DeepSpeedPlugin{zero_stage = %d}"):format(stage), n, ds(stage), {}, with(DS, {stage = stage}))
  end
  for stage = 2, 3 do
    equiv(("DeepSpeedPlugin{zero_stage = %d, offload_optimizer_device = cpu}"):format(stage), n, ds(stage, "cpu"), {},
      with(DS, {stage = stage}))
  end
  equiv("FSDP FULL_SHARD, transformer_based_wrap", n, fsdp("FULL_SHARD"), {}, with(FSDP, {stage = 3}))
  equiv("FSDP FULL_SHARD, size_based_wrap", n, fsdp("FULL_SHARD", "size"), {}, with(FSDP, {stage = 3}))
  equiv("FSDP SHARD_GRAD_OP, size_based_wrap", n, fsdp("SHARD_GRAD_OP", "size"), {}, with(FSDP, {stage = 2}))
  equiv("FSDP NO_SHARD (DDP)", n, fsdp("NO_SHARD"), {}, FSDP)
end
equiv("DeepSpeedPlugin{zero_stage = 1, offload_optimizer_device = cpu}", 3, ds(1, "cpu"), {}, with(DS, {stage = 1}))

-- ---- (a2) HYBRID_SHARD: 4 ranks as 2 machines x 2 (ACCEL_LUA_TEST_RANKS_PER_NODE, the testing knob) ----
do
  local saved = ENV
  ENV = saved .. "ACCEL_LUA_TEST_RANKS_PER_NODE=2 "
  equiv('FSDP sharding_strategy = "HYBRID_SHARD" (2 machines x 2)', 4, fsdp("HYBRID_SHARD"), {}, with(FSDP, {stage = 3}))
  equiv('FSDP sharding_strategy = "HYBRID_SHARD_ZERO2" (2 machines x 2)', 4, fsdp("HYBRID_SHARD_ZERO2"), {},
    with(FSDP, {stage = 2}))
  ENV = saved
end

-- ---- (b) clipping, accumulation, bf16, fp16 with an overflowing step ----
local function same_norm(run, ref)
  local a, b = tonumber(field(run, 0, "norm")), tonumber(field(ref, 0, "norm"))
  return {{a and b and b > 0.1 and math.abs(a - b) <= 1e-5 * b, ("clip_grad_norm_ returned %s, DDP %s"):format(
    tostring(a), tostring(b))}}
end
for stage = 1, 3 do
  equiv(("gradient_clipping = 0.1, stage %d"):format(stage), 2, ds(stage), {"clip=0.1"}, with(DS, {stage = stage}))
  equiv(("accumulation k = 3, stage %d"):format(stage), 3, ds(stage), {"accum=3"}, with(DS, {stage = stage}))
  equiv(("fp16, inf loss on rank 1 at step 5, stage %d"):format(stage), 2, ds(stage), {"mp=fp16", "overflow=5"},
    with(DS, {stage = stage}))
end
equiv("clip_grad_norm_(0.1), FSDP FULL_SHARD", 2, fsdp("FULL_SHARD"), {"clip=0.1"},
  with(FSDP, {stage = 3, more = same_norm}))
equiv("accumulation k = 3, FSDP FULL_SHARD + clip_grad_norm_", 3, fsdp("FULL_SHARD", "size"), {"accum=3", "clip=0.1"},
  with(FSDP, {stage = 3, more = same_norm}))
-- clip_grad_value_ under FSDP2: each rank clamps its gradient shard (the clamp must bite: the DDP
-- run with it differs from the one without)
local function clamp_bites()
  local d = max_rel(reference(2, {"clipvalue=0.05"}).path, reference(2, {}).path)
  return {{d > 1e-3 and d < math.huge, ("clip_grad_value_ changed DDP's parameters by %g relative"):format(d)}}
end
for _, strategy in ipairs({"FULL_SHARD", "SHARD_GRAD_OP"}) do
  equiv(("clip_grad_value_(0.05), FSDP2 %s"):format(strategy), 2, fsdp(strategy, "size", "0", "2"), {"clipvalue=0.05"},
    with(FSDP, {stage = strategy == "FULL_SHARD" and 3 or 2, more = clamp_bites}))
end
equiv("clip_grad_value_(0.05) + accumulation k = 3, FSDP2 FULL_SHARD", 3, fsdp("FULL_SHARD", "transformer", "0", "2"),
  {"clipvalue=0.05", "accum=3"}, with(FSDP, {stage = 3}))
equiv("fp16, inf loss on rank 1, FSDP FULL_SHARD", 2, fsdp("FULL_SHARD"), {"mp=fp16", "overflow=5"},
  with(FSDP, {stage = 3}))
for stage = 2, 3 do
  equiv(("bf16, stage %d"):format(stage), 2, ds(stage), {"mp=bf16"}, with(DS, {stage = stage}))
end
equiv("bf16, FSDP SHARD_GRAD_OP", 3, fsdp("SHARD_GRAD_OP"), {"mp=bf16"}, with(FSDP, {stage = 2}))
-- fp8: the Linears run the fp8 recipe under the engine as under DDP (same casts; not bf16's parameters)
local function fp8_ran(run, ref)
  local a, b = tonumber(field(run, 0, "fp8")), tonumber(field(ref, 0, "fp8"))
  return {{a and a > 0 and a == b, ("fp8 casts %s, DDP %s"):format(tostring(a), tostring(b))}}
end
equiv("fp8, stage 3", 2, ds(3), {"mp=fp8"}, with(DS, {stage = 3, more = fp8_ran}))
equiv("fp8, FSDP FULL_SHARD + activation_checkpointing", 3, fsdp("FULL_SHARD", "transformer", "1"), {"mp=fp8"},
  with(FSDP, {stage = 3, more = fp8_ran}))
do -- the injected overflow is one skipped step more than the run without it
  local with_inf, without = reference(2, {"mp=fp16", "overflow=5"}).run, reference(2, {"mp=fp16"}).run
  local a, b = tonumber(field(with_inf, 0, "skipped")), tonumber(field(without, 0, "skipped"))
  check("fp16: the step with an inf loss on rank 1 is skipped (DDP reference)", with_inf,
    {a ~= nil and b ~= nil and a == b + 1, ("skipped %s steps with the inf, %s without"):format(tostring(a),
      tostring(b))})
end

-- ---- (c) activation checkpointing under FULL_SHARD ----
local function recomputed(run, ref)
  local a, b = tonumber(field(run, 0, "calls")), tonumber(field(ref, 0, "calls"))
  return {{a and b and a == 2 * b, ("the blocks ran %s times, %s without checkpointing (expected twice as many)")
    :format(tostring(a), tostring(b))}}
end
for _, n in ipairs({2, 3}) do
  equiv("FSDP FULL_SHARD + activation_checkpointing", n, fsdp("FULL_SHARD", "transformer", "1"), {},
    with(FSDP, {stage = 3, more = recomputed}))
end
equiv("FSDP FULL_SHARD + activation_checkpointing, accumulation 3", 2, fsdp("FULL_SHARD", "transformer", "1"), {"accum=3"},
  with(FSDP, {stage = 3, more = recomputed}))

-- ---- (d) launch flags, a YAML config, a ds_config with "auto" values ----
equiv("launch --use_deepspeed --zero_stage 3 --offload_optimizer_device cpu", 3, {"plugin=launch"}, {},
  with(DS, {stage = 3, flags = "--use_deepspeed --zero_stage 3 --offload_optimizer_device cpu"}))
equiv("launch --use_fsdp --fsdp_sharding_strategy SHARD_GRAD_OP, accumulation 3", 2, {"plugin=launch"}, {"accum=3"},
  with(FSDP, {stage = 2, flags = "--use_fsdp --fsdp_sharding_strategy SHARD_GRAD_OP --gradient_accumulation_steps 3"}))
do
  local yaml = DIR .. "/fsdp.yaml"
  support.write_file(yaml, table.concat({"compute_environment: LOCAL_MACHINE", "distributed_type: FSDP",
    "num_processes: 3", "use_cpu: true", "mixed_precision: 'no'", "fsdp_config:", "  fsdp_version: 1",
    "  fsdp_sharding_strategy: FULL_SHARD", "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP",
    "  fsdp_transformer_layer_cls_to_wrap: Block", "  fsdp_backward_prefetch: BACKWARD_PRE",
    "  fsdp_state_dict_type: SHARDED_STATE_DICT", "  fsdp_offload_params: true", "  fsdp_forward_prefetch: false",
    "  fsdp_use_orig_params: true", "  fsdp_cpu_ram_efficient_loading: true", "  fsdp_sync_module_states: true",
    "  fsdp_activation_checkpointing: true", ""}, "\n"))
  equiv("a YAML fsdp_config (FULL_SHARD, TRANSFORMER_BASED_WRAP Block, offload, activation checkpointing)", 3,
    {"plugin=launch"}, {}, with(FSDP, {stage = 3, flags = "--config_file " .. quote(yaml),
      more = function(run, ref)
        local c = recomputed(run, ref)
        c[#c + 1] = {run.out:find("Sharding: FSDP FULL_SHARD (ZeRO stage 3), wrap transformer_based_wrap, cpu_offload, "
          .. "activation checkpointing", 1, true) ~= nil, "accelerator.state does not print the sharding"}
        return c
      end}))
end
do
  local yaml = DIR .. "/ds.yaml"
  support.write_file(yaml, table.concat({"compute_environment: LOCAL_MACHINE", "distributed_type: DEEPSPEED",
    "num_processes: 2", "use_cpu: true", "mixed_precision: 'no'", "deepspeed_config:", "  zero_stage: 1",
    "  offload_optimizer_device: cpu", "  offload_param_device: none", "  gradient_accumulation_steps: 3",
    "  gradient_clipping: 0.1", "  zero3_init_flag: false", "  zero3_save_16bit_model: false", ""}, "\n"))
  equiv("a YAML deepspeed_config (stage 1, offload cpu, accumulation 3, gradient_clipping 0.1)", 2,
    {"plugin=launch"}, {"accum=3", "clip=0.1"}, with(DS, {stage = 1, flags = "--config_file " .. quote(yaml)}))
end
for stage = 2, 3 do
  equiv(("hf_ds_config with \"auto\" values, reduce_bucket_size, stage %d"):format(stage), 2,
    {"plugin=dsconfig", "stage=" .. stage}, {"accum=3"}, with(DS, {stage = stage,
      more = function(run)
        local _, times = run.err:gsub("ds_config keys with no meaning here were ignored: steps_per_print\n", "")
        return {{times == 1, ("the unknown key steps_per_print was reported %d times, expected once"):format(times)}}
      end}))
end

-- ---- (e) bad configurations on several ranks ----
do
  local run = launch(2, "--use_fsdp --fsdp_sharding_strategy HYBRID_SHARD", DIR .. "/bad.st", "plugin=launch")
  check("HYBRID_SHARD on one machine: one clear error on every rank", run, {run.code ~= 0, "the run succeeded"},
    {run.err:find("HYBRID_SHARD\" shards inside each machine and replicates across machines, so it needs several "
      .. "machines", 1, true) ~= nil, "no error naming the cause"})
  support.write_file(DIR .. "/batch.json", '{"train_micro_batch_size_per_gpu": "auto", "train_batch_size": 8, '
    .. '"zero_optimization": {"stage": 2}}')
  local bad = launch(2, "--use_deepspeed --deepspeed_config_file " .. quote(DIR .. "/batch.json"), DIR .. "/bad.st",
    "plugin=launch")
  check("train_batch_size that disagrees with the loader's batches (6 per process x 2): a clear error", bad,
    {bad.code ~= 0, "the run succeeded"},
    {bad.err:find("train_batch_size = 8, but the loaders' smallest batch per process 6 x gradient_accumulation_steps 1 "
      .. "x 2 process(es) = 12", 1, true) ~= nil, "no error naming the batch sizes"})
end

-- ---- (f) gradient rules as DDP's: parameters without a gradient, clipping a subset ----
do
  local run = jobs.run(("%stimeout -k 5 120 %s launch --cpu --num_processes 2 %s"):format(ENV,
    quote(support.ACCEL_LUA), quote(HERE .. "/helpers/shard_grad_rules.lua")))
  check("parameters no rank gave a gradient are not stepped (stages 1-3, FSDP == DDP); clip_grad_norm_ of a subset "
    .. "and error_if_nonfinite", run, {all_ranks_ok(run, 2), "not every rank passed"})
end

support.remove_tree(DIR)
jobs.finish()
