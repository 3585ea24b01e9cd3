-- accelerator_spec.lua: accel.Accelerator on one process: options and
-- fields, prepare, gradient accumulation (k micro-batches == one batch k
-- times larger), schedulers coupled to real optimizer steps, fp16 loss
-- scaling (an overflowing step is skipped and the scale halves), bf16
-- training close to fp32, autocast scopes, the collective operations,
-- clipping and trackers. Checkpoints are in checkpoint_spec.lua.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local tmpdir, max_abs_diff, error_matching = support.tmpdir, support.max_abs_diff, support.error_matching
local nn, optim, data = accel.nn, accel.optim, accel.data

local function mlp(seed, d_in, hidden, d_out)
  accel.set_seed(seed)
  return nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, d_out))
end

local function params_close(m1, m2, tol)
  local p1, p2 = m1:parameters(), m2:parameters()
  assert.are.equal(#p1, #p2)
  local worst = 0
  for i = 1, #p1 do worst = math.max(worst, max_abs_diff(p1[i], p2[i])) end
  assert.is_true(worst <= tol, ("parameters differ by %g (tolerance %g)"):format(worst, tol))
  return worst
end

local function params_equal(m1, m2)
  local p1, p2 = m1:parameters(), m2:parameters()
  for i = 1, #p1 do
    if not p1[i]:equal(p2[i]) then return false end
  end
  return true
end

-- A classification set a small MLP can learn: labels of a fixed teacher.
local function teacher_data(n, d_in, classes, seed)
  accel.set_seed(seed)
  local x = accel.randn(n, d_in)
  local w = accel.randn(d_in, classes)
  local _, y = accel.matmul(x, w):max(2)
  return x, y
end

describe("Accelerator options", function()
  it("exposes the one-process fields", function()
    local a = accel.Accelerator()
    assert.are.equal(0, a.process_index)
    assert.are.equal(0, a.local_process_index)
    assert.are.equal(1, a.num_processes)
    assert.is_true(a.is_main_process)
    assert.is_true(a.is_local_main_process)
    assert.is_true(a.is_last_process)
    local run_device = os.getenv("ACCEL_LUA_DEVICE") -- the suite's device (the CPU without it)
    run_device = (run_device == nil or run_device == "") and "cpu" or run_device
    assert.are.equal(tostring(accel.device(run_device)), tostring(a.device)) -- "cuda" prints as cuda:0
    assert.are.equal("no", a.mixed_precision)
    assert.are.equal(1, a.gradient_accumulation_steps)
    assert.is_true(a.sync_gradients)
    assert.are.equal("NO", a.distributed_type)
  end)

  it("shares one PartialState between Accelerators", function()
    local a, b = accel.Accelerator(), accel.Accelerator{gradient_accumulation_steps = 3}
    assert.are.equal(a.state, b.state)
    assert.are.equal(accel.PartialState(), a.state)
    assert.are.equal(1, a.gradient_accumulation_steps)
    assert.are.equal(3, b.gradient_accumulation_steps)
    b.gradient_accumulation_steps = 4
    assert.are.equal(4, b.gradient_accumulation_steps)
  end)

  -- accelerate 1.16: Accelerator(mixed_precision="bf16").state.mixed_precision == "bf16"; str(gradient_state) with
  -- gradient_accumulation_steps=2: "Sync Gradients: True\nAt end of current dataloader: False\nExtra samples added:
  -- -1\nGradient accumulation plugin: {'num_steps': 2}\n"
  it("state.mixed_precision and the GradientState's print, as Accelerate's", function()
    local a = accel.Accelerator{mixed_precision = "bf16", gradient_accumulation_steps = 2}
    assert.are.equal("bf16", a.state.mixed_precision)
    assert.are.equal("Sync Gradients: True\nAt end of current dataloader: False\nExtra samples added: -1\n"
      .. "Gradient accumulation plugin: {'num_steps': 2}\n", tostring(a.gradient_state))
  end)

  it("names a bad mixed_precision; fp8 runs the CPU emulation of the fp8 recipe", function()
    error_matching('unknown mixed_precision "fp17"', function() accel.Accelerator{mixed_precision = "fp17"} end)
    -- accelerate 1.15: Accelerator(mixed_precision="FP8"): "ValueError: Unknown mixed_precision mode: FP8"
    error_matching('unknown mixed_precision "FP8"', function() accel.Accelerator{mixed_precision = "FP8"} end)
    local f = accel.Accelerator{mixed_precision = "fp8"}
    assert.are.same({"fp8", "CPU_EMULATION"}, {f.mixed_precision, f.fp8_backend})
    assert.is_nil(accel.Accelerator{mixed_precision = "bf16"}.fp8_backend)
    assert.are.equal("bf16", accel.Accelerator{mixed_precision = "bf16"}.mixed_precision)
    assert.are.equal("fp16", accel.Accelerator{mixed_precision = "fp16"}.mixed_precision)
  end)

  it("native_amp is Accelerate's: true under bf16 / fp16 / fp8 autocast, false with no and under DeepSpeed", function()
    -- accelerate 1.16 accelerator.py: bf16 on a CPU and fp16 on a GPU set it, fp8 always, DeepSpeed never
    for mp, want in pairs({no = false, bf16 = true, fp16 = true, fp8 = true}) do
      assert.are.equal(want, accel.Accelerator{mixed_precision = mp}.native_amp, mp)
    end
    local ds = accel.Accelerator{mixed_precision = "bf16", deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 2}}
    assert.is_false(ds.native_amp)
  end)

  it("rejects unknown options and bad values", function()
    error_matching("unknown option mixed_precison", function() accel.Accelerator{mixed_precison = "bf16"} end)
    error_matching("gradient_accumulation_steps must be a positive integer", function()
      accel.Accelerator{gradient_accumulation_steps = 0}
    end)
    error_matching("zero_stage must be 0, 1, 2 or 3", function() accel.Accelerator{zero_stage = 5} end)
    error_matching("sharding_strategy", function()
      accel.FullyShardedDataParallelPlugin{sharding_strategy = "EVERYTHING"}
    end)
    error_matching("either deepspeed_plugin or fsdp_plugin", function()
      accel.Accelerator{deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 0},
        fsdp_plugin = accel.FullyShardedDataParallelPlugin{sharding_strategy = "NO_SHARD"}}
    end)
  end)

  it("runs stage-0 plugins as plain data parallel; distributed_type names the plugin, as Accelerate", function()
    local a = accel.Accelerator{deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 0, gradient_accumulation_steps = 2}}
    assert.are.equal(0, a.zero_stage)
    assert.are.equal(2, a.gradient_accumulation_steps)
    assert.are.equal("DEEPSPEED", a.distributed_type)
    local model = a:prepare(mlp(1, 2, 3, 1)) -- stage 0: a model alone is fine (DDP)
    assert.is_nil(a.shard_engine)
    assert.is_nil(a:shard_engine_of(model))
    local f = accel.Accelerator{fsdp_plugin = {sharding_strategy = "NO_SHARD"}}
    assert.are.equal(0, f.zero_stage)
    assert.are.equal("FSDP", f.distributed_type)
    assert.matches("Sharding: FSDP NO_SHARD %(ZeRO stage 0%) %(plain data parallel%)", tostring(f.state))
    local z = accel.Accelerator{zero_stage = 0}
    assert.are.equal(0, z.zero_stage)
    assert.are.equal("NO", z.distributed_type)
    assert.are.equal("FSDP", f.distributed_type) -- its own, also after another Accelerator was made
    assert.are.equal("NO", z.state.distributed_type) -- the shared state: the last Accelerator's
    local dir = tmpdir()
    local fh = assert(io.open(dir .. "/ds.json", "w"))
    fh:write('{"zero_optimization": {"stage": 0, "overlap_comm": true, "contiguous_gradients": true}, '
      .. '"gradient_accumulation_steps": 4, "bf16": {"enabled": true}}')
    fh:close()
    local ds = accel.DeepSpeedPlugin{hf_ds_config = dir .. "/ds.json"}
    assert.are.equal(0, ds.zero_stage)
    assert.are.same({"zero_optimization.contiguous_gradients"}, ds.ignored_keys)
    local b = accel.Accelerator{deepspeed_plugin = ds}
    assert.are.equal("bf16", b.mixed_precision)
    assert.are.equal(4, b.gradient_accumulation_steps)
    fh = assert(io.open(dir .. "/ds1.json", "w"))
    fh:write('{"zero_optimization": {"stage": 1}}')
    fh:close()
    assert.are.equal(1, accel.DeepSpeedPlugin{hf_ds_config = dir .. "/ds1.json"}.zero_stage)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("builds one sharding engine in prepare(model, optimizer) for stages 1-3 and trains as without it", function()
    local function train(o)
      local a = accel.Accelerator(o)
      local model = mlp(3, 4, 5, 2)
      local opt
      model, opt = a:prepare(model, optim.AdamW(model:parameters(), {lr = 1e-2}))
      accel.set_seed(4)
      for _ = 1, 5 do
        a:backward(model(accel.randn(6, 4)):pow(2):mean())
        opt:step()
        opt:zero_grad()
      end
      return model, a
    end
    local plain = train({})
    for stage = 1, 3 do
      local model, a = train({zero_stage = stage})
      assert.are.equal("DEEPSPEED", a.distributed_type)
      assert.are.equal(stage, a.deepspeed_plugin.zero_stage)
      assert.are.equal(stage, a.shard_engine.stage)
      assert.are.equal(a.shard_engine, a:shard_engine_of(model))
      assert.matches("Sharding: ZeRO stage " .. stage, tostring(a.state))
      assert.are.equal("no", a.state.mixed_precision)
      local sd = a:get_state_dict(model) -- stage 3: gathered full tensors
      local want = plain:state_dict()
      for k, t in pairs(want) do assert.is_true(max_abs_diff(sd[k], t) <= 1e-6, k .. " differs") end
      local unwrapped = a:unwrap_model(model):state_dict() -- stage 3 too: the full weights, not released shards
      for k, t in pairs(want) do assert.is_true(max_abs_diff(unwrapped[k], t) <= 1e-6, "unwrapped " .. k .. " differs") end
      local dir = tmpdir()
      a:save_model(model, dir) -- the full weights, also under stage 3
      local saved = accel.load(dir .. "/model.safetensors")
      for k, t in pairs(want) do assert.is_true(max_abs_diff(saved[k], t) <= 1e-6, "saved " .. k .. " differs") end
      os.execute("rm -rf '" .. dir .. "'")
      a:free_memory() -- closes the engine: the model's parameters are full again
      params_close(model, plain, 1e-6)
    end
    local _, f = train({fsdp_plugin = {sharding_strategy = "SHARD_GRAD_OP"}})
    assert.are.equal("FSDP", f.distributed_type)
    assert.are.equal(2, f.shard_engine.stage)
  end)

  -- torch warns "Detected call of lr_scheduler.step() before optimizer.step()" only when the optimizer did not step;
  -- the sharding engine's optimizer step counts as the optimizer's
  it("a scheduler after the engine's optimizer step does not warn that the step came first", function()
    local code = "local acc = accel.Accelerator{deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 2}} "
      .. "local m = accel.nn.Linear(4, 2) local opt = accel.optim.AdamW(m:parameters(), {lr = 0.1}) "
      .. "local sched = accel.optim.lr_scheduler.LambdaLR(opt, function(e) return 1 / (e + 1) end) "
      .. "m, opt, sched = acc:prepare(m, opt, sched) acc:backward(m(accel.randn(3, 4)):pow(2):sum()) "
      .. "opt:step() sched:step() print('lr', sched:get_last_lr()[1])"
    local out = support.command_output(("%s -e %s 2>&1"):format(support.shell_quote(support.ACCEL_LUA),
      support.shell_quote(code)))
    assert.is_nil(out:find("was called before optimizer:step", 1, true), out)
    assert.truthy(out:find("lr\t0.05", 1, true), out)
  end)

  it("needs the model and its optimizer in one prepare call under sharding", function()
    local a = accel.Accelerator{zero_stage = 2}
    local model = mlp(1, 2, 3, 1)
    local opt = optim.SGD(model:parameters(), {lr = 0.1})
    error_matching("under DEEPSPEED %(ZeRO stage 2%) give the model and its optimizer to the same prepare call.*got 1 "
      .. "model%(s%) with trainable parameters and 0 optimizer", function() a:prepare(model) end)
    error_matching("got 0 model%(s%) with trainable parameters and 1 optimizer", function() a:prepare(opt) end)
    error_matching("prepare_model: under DEEPSPEED .*accelerator:prepare%(model, optimizer%)", function()
      a:prepare_model(model)
    end)
    error_matching("prepare_optimizer: under DEEPSPEED", function() a:prepare_optimizer(opt) end)
    -- Accelerate: "You can't customize device placements with DeepSpeed or Megatron-LM."
    error_matching("prepare: device_placement cannot be customised under DeepSpeed", function()
      a:prepare(model, opt, {device_placement = {true, true}})
    end)
    local frozen = mlp(2, 2, 3, 1)
    for _, p in ipairs(frozen:parameters()) do p.requires_grad = false end
    assert.are.equal(frozen, a:prepare(frozen)) -- nothing to shard: prepared as usual
  end)

  it("save_state / load_state under a sharding engine restore weights and optimizer state", function()
    for stage = 1, 3 do
      local function train(a, model, opt, n)
        for _ = 1, n do
          a:backward(model(accel.randn(6, 3)):pow(2):sum())
          opt:step()
          opt:zero_grad()
        end
      end
      accel.set_seed(3)
      local a = accel.Accelerator{zero_stage = stage}
      local model = mlp(1, 3, 4, 2)
      local opt
      model, opt = a:prepare(model, optim.AdamW(model:parameters(), {lr = 0.05}))
      train(a, model, opt, 2)
      local dir = tmpdir()
      a:save_state(dir .. "/ck")
      accel.set_seed(9)
      train(a, model, opt, 2)
      local want = a:get_state_dict(model)
      a:free_memory()
      -- a fresh run from the checkpoint continues exactly (same data: the generator is restored)
      local b = accel.Accelerator{zero_stage = stage}
      local model2 = mlp(7, 3, 4, 2)
      local opt2
      model2, opt2 = b:prepare(model2, optim.AdamW(model2:parameters(), {lr = 0.05}))
      b:load_state(dir .. "/ck")
      accel.set_seed(9)
      train(b, model2, opt2, 2)
      local got = b:get_state_dict(model2)
      for k, t in pairs(want) do assert.are.equal(0, (got[k] - t):abs():max():item(), k) end
      b:free_memory()
      os.execute("rm -rf '" .. dir .. "'")
    end
  end)

  it("clips through the engine at every stage", function()
    for stage = 1, 3 do
      local a = accel.Accelerator{zero_stage = stage}
      local model = mlp(5, 4, 5, 2)
      local opt
      model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 0.1}))
      a:backward(model(accel.randn(6, 4)):pow(2):sum())
      local norm = a:clip_grad_norm_(model:parameters(), 1e-3)
      assert.is_true(norm:item() > 1e-3)
      opt:step()
      a:free_memory()
    end
  end)

  -- Accelerate: "DeepSpeed and FSDP1 do not support `clip_grad_value_`" (every stage / strategy);
  -- FSDP2 clamps (its DTensor gradients element by element: here the engine's shards)
  it("clip_grad_value_: refused under DeepSpeed and FSDP1, clamps the gradient shards under FSDP2", function()
    local function trained(opts, clip_value)
      accel.set_seed(3)
      local a = accel.Accelerator(opts)
      local model = mlp(5, 4, 5, 2)
      local opt
      model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 0.1}))
      a:backward(model(accel.randn(6, 4)):pow(2):sum())
      if clip_value then a:clip_grad_value_(model:parameters(), clip_value) end
      opt:step()
      local sd = a:get_state_dict(model)
      a:free_memory()
      return sd
    end
    local refused = "clip_grad_value_: DeepSpeed and FSDP1 do not support clip_grad_value_ %(as in Accelerate%)"
    for stage = 0, 3 do
      error_matching(refused, function() trained({deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = stage}}, 1e-4) end)
    end
    for _, strategy in ipairs({"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"}) do
      error_matching(refused, function() trained({fsdp_plugin = {sharding_strategy = strategy}}, 1e-4) end)
    end
    local want, unclipped = trained({}, 1e-3), trained({})
    for _, reshard in ipairs({true, false}) do
      local got = trained({fsdp_plugin = {fsdp_version = 2, reshard_after_forward = reshard}}, 1e-3)
      for k, t in pairs(want) do
        assert.are.equal(0, (got[k] - t):abs():max():item(), k)
        assert.is_true((unclipped[k] - t):abs():max():item() > 1e-3, k .. ": the clamp changed nothing")
      end
    end
  end)

  it("refuses what it cannot honour, naming the option and the reason", function()
    error_matching("Accelerator: zero_stage must be 0, 1, 2 or 3, got 4", function() accel.Accelerator{zero_stage = 4} end)
    error_matching("DeepSpeedPlugin: zero_stage must be 0, 1, 2 or 3, got 4", function()
      accel.DeepSpeedPlugin{zero_stage = 4}
    end)
    error_matching('offload_optimizer_device = "cpu" is not supported: offloading the optimizer needs ZeRO stage 1, 2 '
      .. "or 3", function() accel.DeepSpeedPlugin{zero_stage = 0, offload_optimizer_device = "cpu"} end)
    error_matching('offload_param_device = "cpu" is not supported: offloading parameters is ZeRO stage 3', function()
      accel.DeepSpeedPlugin{zero_stage = 2, offload_param_device = "cpu"}
    end)
    assert.are.equal("cpu", accel.DeepSpeedPlugin{zero_stage = 3, offload_param_device = "cpu"}.offload_param_device)
    error_matching('offload_optimizer_device = "nvme" is not supported: .*NVMe offload', function()
      accel.DeepSpeedPlugin{zero_stage = 2, offload_optimizer_device = "nvme"}
    end)
    error_matching('HYBRID_SHARD" shards inside each machine and replicates across machines, so it needs several '
      .. 'machines; this job runs on one %(1 process%(es%)%): use "FULL_SHARD"', function()
      accel.Accelerator{fsdp_plugin = {sharding_strategy = "HYBRID_SHARD"}}
    end)
    error_matching('HYBRID_SHARD_ZERO2" .*several machines.*use "SHARD_GRAD_OP"', function()
      accel.Accelerator{fsdp_plugin = {sharding_strategy = "HYBRID_SHARD_ZERO2"}}
    end)
    error_matching("cpu_offload = true is not supported: offloading needs a sharded strategy", function()
      accel.FullyShardedDataParallelPlugin{sharding_strategy = "NO_SHARD", cpu_offload = true}
    end)
    error_matching("overlap_comm = false is not supported: the engine always starts the gradient reductions", function()
      accel.DeepSpeedPlugin{hf_ds_config = {zero_optimization = {stage = 2, overlap_comm = false}}}
    end)
    error_matching("allgather_bucket_size = 200 is not supported: .*equal to reduce_bucket_size", function()
      accel.DeepSpeedPlugin{hf_ds_config = {zero_optimization = {reduce_bucket_size = 100, allgather_bucket_size = 200}}}
    end)
    error_matching("train_batch_size = 10 is not train_micro_batch_size_per_gpu 4 x gradient_accumulation_steps 2 x 1 "
      .. "process", function()
      accel.Accelerator{deepspeed_plugin = {hf_ds_config = {train_batch_size = 10, train_micro_batch_size_per_gpu = 4,
        gradient_accumulation_steps = 2, zero_optimization = {stage = 2}}}}
    end)
  end)

  it("reports the ds_config keys with no meaning here by name, once", function()
    local bin = os.getenv("ACCEL_LUA_BIN") or arg[-1]
    local p = assert(io.popen("'" .. bin .. "' -e \"local ds = accel.DeepSpeedPlugin{hf_ds_config = "
      .. "{zero_optimization = {stage = 2, round_robin_gradients = true}, wall_clock_breakdown = false}} "
      .. "local a = accel.Accelerator{deepspeed_plugin = ds} accel.Accelerator{deepspeed_plugin = ds} "
      .. "io.write(a.zero_stage)\" 2>&1"))
    local out = p:read("a")
    p:close()
    assert.are.equal("DeepSpeedPlugin: ds_config keys with no meaning here were ignored: wall_clock_breakdown, "
      .. "zero_optimization.round_robin_gradients\n2", out)
  end)

  it("keeps the DeepSpeed config in plugin.deepspeed_config; prepare reads its settings from it", function()
    -- without hf_ds_config, Accelerate 1.15's DeepSpeedPlugin(zero_stage=2, gradient_accumulation_steps=2)
    -- .deepspeed_config is {'train_batch_size': 'auto', 'train_micro_batch_size_per_gpu': 'auto',
    -- 'gradient_accumulation_steps': 2, 'zero_optimization': {'stage': 2, 'offload_optimizer': {'device': 'none',
    -- 'nvme_path': None}, 'offload_param': {'device': 'none', 'nvme_path': None},
    -- 'stage3_gather_16bit_weights_on_model_save': False}, 'gradient_clipping': 'auto', 'steps_per_print': inf}
    -- (without gradient_clipping here: no clipping unless it is given; steps_per_print has no meaning here)
    local ds = accel.DeepSpeedPlugin{zero_stage = 2, gradient_accumulation_steps = 2}
    assert.are.same({train_batch_size = "auto", train_micro_batch_size_per_gpu = "auto", gradient_accumulation_steps = 2,
      zero_optimization = {stage = 2, offload_optimizer = {device = "none"}, offload_param = {device = "none"},
        stage3_gather_16bit_weights_on_model_save = false}}, ds.deepspeed_config)
    -- an edit before prepare counts (Accelerate hands this table to deepspeed.initialize): DeepSpeed's
    -- gradient_clipping makes the SGD(lr = 1) update's total norm exactly 0.3
    local a = accel.Accelerator{deepspeed_plugin = ds}
    ds.deepspeed_config.gradient_clipping = 0.3
    ds.deepspeed_config.zero_optimization.offload_optimizer.device = "cpu"
    local model = mlp(4, 4, 8, 2)
    local before = {}
    for i, p in ipairs(model:parameters()) do before[i] = p:clone() end
    local opt = optim.SGD(model:parameters(), {lr = 1})
    local train = data.DataLoader(data.TensorDataset(accel.randn(8, 4)), {batch_size = 4})
    local eval = data.DataLoader(data.TensorDataset(accel.randn(8, 4)), {batch_size = 2})
    model, opt = a:prepare(model, opt, train, eval)
    assert.is_true(a.shard_engine._c:info().offload_optimizer)
    a:backward(model(accel.randn(6, 4)):pow(2):sum())
    opt:step()
    local d2 = 0
    for i, p in ipairs(model:parameters()) do d2 = d2 + (p - before[i]):pow(2):sum():item() end
    assert.is_true(math.abs(math.sqrt(d2) - 0.3) < 1e-5, ("update norm %g"):format(math.sqrt(d2)))
    -- "auto" batch sizes: the smallest batch of the prepared loaders (Accelerate's is_train_batch_min), and
    -- train_batch_size = 2 x accumulation 2 x 1 process
    assert.are.equal(2, ds.deepspeed_config.train_micro_batch_size_per_gpu)
    assert.are.equal(4, ds.deepspeed_config.train_batch_size)
    -- a numeric micro batch is DeepSpeed's own: loaders of other batch sizes are accepted (Accelerate compares none)
    local b = accel.Accelerator{deepspeed_plugin = {hf_ds_config = {train_micro_batch_size_per_gpu = 3,
      zero_optimization = {stage = 0}}}}
    b:prepare(data.DataLoader(data.TensorDataset(accel.randn(8, 4)), {batch_size = 4}))
    b:prepare(data.DataLoader(data.TensorDataset(accel.randn(8, 4)), {batch_size = 5}))
    error_matching("train_batch_size = 8, but the loaders' smallest batch per process 2 x gradient_accumulation_steps 1 "
      .. "x 1 process%(es%) = 2", function()
      local c = accel.Accelerator{deepspeed_plugin = {hf_ds_config = {train_micro_batch_size_per_gpu = "auto",
        train_batch_size = 8, zero_optimization = {stage = 0}}}}
      c:prepare(data.DataLoader(data.TensorDataset(accel.randn(8, 4)), {batch_size = 4}),
        data.DataLoader(data.TensorDataset(accel.randn(8, 4)), {batch_size = 2}))
    end)
    -- Accelerate's named-plugins table and its plugin fields with no engine here are refused by name
    error_matching("deepspeed_plugin = {one = DeepSpeedPlugin, ...} %(several named plugins%) is not supported",
      function() accel.Accelerator{deepspeed_plugin = {one = accel.DeepSpeedPlugin{}}} end)
    error_matching("DeepSpeedPlugin: option enable_msamp is Accelerate's but not supported here",
      function() accel.DeepSpeedPlugin{enable_msamp = true} end)
    for _, k in ipairs({"mixed_precision_policy", "ignored_modules", "state_dict_config", "optim_state_dict_config",
      "param_init_fn"}) do
      error_matching("FullyShardedDataParallelPlugin: option " .. k .. " is Accelerate's but not supported here",
        function() accel.FullyShardedDataParallelPlugin{[k] = {}} end)
    end
    -- Accelerate's attribute defaults (FullyShardedDataParallelPlugin() in accelerate 1.15)
    local f1 = accel.FullyShardedDataParallelPlugin{}
    assert.same({true, false, false, false}, {f1.limit_all_gathers, f1.use_orig_params, f1.forward_prefetch,
      f1.activation_checkpointing_offload})
    -- what the Accelerator read when it was created cannot change before prepare
    local ds3 = accel.DeepSpeedPlugin{zero_stage = 2}
    local c = accel.Accelerator{deepspeed_plugin = ds3}
    ds3.deepspeed_config.zero_optimization.stage = 3
    error_matching("prepare: deepspeed_plugin.deepspeed_config: zero_optimization.stage changed from 2 to 3 after the "
      .. "Accelerator was created", function() c:prepare(mlp(1, 4, 8, 2)) end)
    ds3.deepspeed_config.zero_optimization.stage = 2
    ds3.deepspeed_config.zero_optimization.offload_optimizer.device = "nvme"
    error_matching('offload_optimizer_device = "nvme" is not supported: NVMe offload', function()
      c:prepare(mlp(1, 4, 8, 2))
    end)
  end)

  -- Accelerate's str_to_bool (PyTorch 2.15 env): 1/YES/y/True/t/ON true,
  -- 0/No/n/FALSE/f/off false, "maybe": ValueError "invalid truth value maybe".
  it("reads launch's boolean settings as Accelerate's str_to_bool", function()
    local bin = os.getenv("ACCEL_LUA_BIN") or arg[-1]
    local function run(env)
      local p = assert(io.popen("ACCEL_LUA_DEVICE=sim " .. env .. " '" .. bin .. "' -e "
        .. "\"local a = accel.Accelerator() io.write(tostring(a.device), ' ', a.distributed_type)\" 2>&1"))
      local out = p:read("a")
      p:close()
      return out
    end
    for _, v in ipairs({"1", "YES", "y", "True", "t", "ON"}) do
      assert.are.equal("cpu NO", run("ACCEL_LUA_USE_CPU=" .. v), v)
    end
    for _, v in ipairs({"0", "No", "n", "FALSE", "f", "off"}) do
      assert.are.equal("sim NO", run("ACCEL_LUA_USE_CPU=" .. v), v)
    end
    assert.matches("ACCEL_LUA_USE_CPU=maybe: invalid truth value", run("ACCEL_LUA_USE_CPU=maybe"))
    assert.matches("sim DEEPSPEED", run("ACCEL_LUA_USE_DEEPSPEED=Yes ACCEL_LUA_ZERO_STAGE=0"))
    assert.matches("ACCEL_LUA_USE_FSDP=2: invalid truth value", run("ACCEL_LUA_USE_FSDP=2"))
  end)

  it("takes its defaults from accel-lua launch's settings", function()
    local bin = os.getenv("ACCEL_LUA_BIN") or arg[-1]
    local function run(env)
      local p = assert(io.popen(env .. " '" .. bin .. "' -e "
        .. "\"local a = accel.Accelerator() io.write(a.mixed_precision, ' ', a.gradient_accumulation_steps, ' ', "
        .. "a.zero_stage, ' ', a.distributed_type)\" 2>&1"))
      local out = p:read("a")
      p:close()
      return out
    end
    assert.are.equal("bf16 3 0 DEEPSPEED", run("ACCEL_LUA_MIXED_PRECISION=bf16 ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=3 "
      .. "ACCEL_LUA_USE_DEEPSPEED=true ACCEL_LUA_ZERO_STAGE=0"))
    assert.are.equal("no 1 1 DEEPSPEED", run("ACCEL_LUA_USE_DEEPSPEED=true ACCEL_LUA_ZERO_STAGE=1"))
    assert.matches("ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=abc is not a positive integer",
      run("ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=abc"))
    assert.are.equal("no 1 2 DEEPSPEED", run("ACCELERATE_USE_DEEPSPEED=true"))
    assert.matches("ACCEL_LUA_OFFLOAD_OPTIMIZER_DEVICE=cpu%): offload_optimizer_device = \"cpu\" is not supported",
      run("ACCEL_LUA_USE_DEEPSPEED=true ACCEL_LUA_ZERO_STAGE=0 ACCEL_LUA_OFFLOAD_OPTIMIZER_DEVICE=cpu"))
    assert.are.equal("no 1 2 FSDP", run("ACCEL_LUA_USE_FSDP=true ACCEL_LUA_FSDP_SHARDING_STRATEGY=SHARD_GRAD_OP"))
    assert.matches("ACCEL_LUA_FSDP_OFFLOAD_PARAMS=true%): cpu_offload = true is not supported",
      run("ACCEL_LUA_USE_FSDP=true ACCEL_LUA_FSDP_SHARDING_STRATEGY=NO_SHARD ACCEL_LUA_FSDP_OFFLOAD_PARAMS=true"))
    assert.are.equal("no 1 3 FSDP", run("ACCELERATE_USE_FSDP=true"))
    assert.are.equal("no 1 0 FSDP", run("ACCEL_LUA_USE_FSDP=true ACCEL_LUA_FSDP_SHARDING_STRATEGY=NO_SHARD "
      .. "ACCEL_LUA_FSDP_STATE_DICT_TYPE=FULL_STATE_DICT ACCEL_LUA_FSDP_BACKWARD_PREFETCH=BACKWARD_PRE"))
    -- every setting launch exports for --use_fsdp / --use_deepspeed is read (the plugin defaults here)
    assert.are.equal("no 1 3 FSDP", run("ACCEL_LUA_USE_FSDP=true ACCEL_LUA_FSDP_VERSION=1 "
      .. "ACCEL_LUA_FSDP_SHARDING_STRATEGY=FULL_SHARD ACCEL_LUA_FSDP_OFFLOAD_PARAMS=false "
      .. "ACCEL_LUA_FSDP_AUTO_WRAP_POLICY=NO_WRAP ACCEL_LUA_FSDP_BACKWARD_PREFETCH=BACKWARD_PRE "
      .. "ACCEL_LUA_FSDP_STATE_DICT_TYPE=SHARDED_STATE_DICT ACCEL_LUA_FSDP_RESHARD_AFTER_FORWARD=true "
      .. "ACCEL_LUA_FSDP_FORWARD_PREFETCH=false ACCEL_LUA_FSDP_USE_ORIG_PARAMS=true "
      .. "ACCEL_LUA_FSDP_CPU_RAM_EFFICIENT_LOADING=true ACCEL_LUA_FSDP_SYNC_MODULE_STATES=true "
      .. "ACCEL_LUA_FSDP_ACTIVATION_CHECKPOINTING=false"))
    assert.are.equal("no 1 2 FSDP", run("ACCEL_LUA_USE_FSDP=true ACCEL_LUA_FSDP_VERSION=2 "
      .. "ACCEL_LUA_FSDP_RESHARD_AFTER_FORWARD=false"))
    assert.matches('sharding_strategy = "SHARD_GRAD_OP" contradicts reshard_after_forward = true',
      run("ACCEL_LUA_USE_FSDP=true ACCEL_LUA_FSDP_VERSION=2 ACCEL_LUA_FSDP_SHARDING_STRATEGY=SHARD_GRAD_OP "
      .. "ACCEL_LUA_FSDP_RESHARD_AFTER_FORWARD=true"))
    -- zero3_init_flag = true at stage 2, as `accelerate config` may write it: Accelerate 1.15 warns, sets it false
    assert.matches("DeepSpeed Zero3 Init flag is only applicable for ZeRO Stage 3. Setting it to False.\nno 1 2 "
      .. "DEEPSPEED$", run("ACCEL_LUA_USE_DEEPSPEED=true ACCEL_LUA_ZERO_STAGE=2 ACCEL_LUA_ZERO3_INIT_FLAG=true"))
    assert.matches("ACCEL_LUA_FSDP_ACTIVATION_CHECKPOINTING=true%): activation_checkpointing = true runs each wrap "
      .. "unit under checkpoint, and auto_wrap_policy = \"no_wrap\"", run("ACCEL_LUA_USE_FSDP=true "
      .. "ACCEL_LUA_FSDP_AUTO_WRAP_POLICY=NO_WRAP ACCEL_LUA_FSDP_ACTIVATION_CHECKPOINTING=true"))
    assert.are.equal("no 1 2 DEEPSPEED", run("ACCEL_LUA_USE_DEEPSPEED=true ACCEL_LUA_ZERO_STAGE=2 "
      .. "ACCEL_LUA_OFFLOAD_OPTIMIZER_DEVICE=none ACCEL_LUA_OFFLOAD_PARAM_DEVICE=none ACCEL_LUA_ZERO3_INIT_FLAG=false "
      .. "ACCEL_LUA_ZERO3_SAVE_16BIT_MODEL=false"))
    assert.matches("ACCEL_LUA_DEEPSPEED_MOE_LAYER_CLS_NAMES=MoE%): transformer_moe_cls_names = \"MoE\" is not "
      .. "supported: there are no mixture%-of%-experts layers", run("ACCEL_LUA_USE_DEEPSPEED=true "
      .. "ACCEL_LUA_DEEPSPEED_MOE_LAYER_CLS_NAMES=MoE"))
    assert.matches("ACCEL_LUA_OFFLOAD_PARAM_NVME_PATH=/nvme%): offload_param_nvme_path = \"/nvme\" is not supported",
      run("ACCEL_LUA_USE_DEEPSPEED=true ACCEL_LUA_OFFLOAD_PARAM_NVME_PATH=/nvme"))
    -- a DeepSpeed config file: launch's default ZERO_STAGE=2 does not override the file's stage
    local dir = tmpdir()
    local fh = assert(io.open(dir .. "/ds3.json", "w"))
    fh:write('{"zero_optimization": {"stage": 3}}')
    fh:close()
    assert.are.equal("no 1 3 DEEPSPEED", run("ACCEL_LUA_USE_DEEPSPEED=true ACCEL_LUA_ZERO_STAGE=2 "
      .. "ACCEL_LUA_DEEPSPEED_CONFIG_FILE=" .. dir .. "/ds3.json"))
    assert.matches("ACCEL_LUA_ZERO_STAGE = 1 disagrees with .*ds3.json's zero_optimization.stage = 3",
      run("ACCEL_LUA_USE_DEEPSPEED=true ACCEL_LUA_ZERO_STAGE=1 ACCEL_LUA_DEEPSPEED_CONFIG_FILE=" .. dir .. "/ds3.json"))
    -- launch's mixed_precision / gradient_accumulation_steps against the file's: launch's defaults ("no", 1)
    -- leave the file's values; another value that disagrees is an error (Accelerate 1.15's
    -- DeepSpeedPlugin.set_mixed_precision("fp16") with bf16 in the file: "`--mixed_precision` arg cannot be
    -- set to `fp16` when `bf16` is set in the DeepSpeed config file.")
    fh = assert(io.open(dir .. "/bf16.json", "w"))
    fh:write('{"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}, "gradient_accumulation_steps": 4}')
    fh:close()
    local file = "ACCEL_LUA_USE_DEEPSPEED=true ACCEL_LUA_DEEPSPEED_CONFIG_FILE=" .. dir .. "/bf16.json "
    assert.are.equal("bf16 4 2 DEEPSPEED", run(file .. "ACCEL_LUA_MIXED_PRECISION=no "
      .. "ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=1"))
    assert.are.equal("bf16 4 2 DEEPSPEED", run(file .. "ACCEL_LUA_MIXED_PRECISION=bf16 "
      .. "ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=4"))
    assert.matches("^accel%-lua: %(command line%):1: Accelerator: %-%-mixed_precision %(ACCEL_LUA_MIXED_PRECISION=fp16%) cannot be "
      .. "set to fp16 when bf16 is set in the DeepSpeed config", run(file .. "ACCEL_LUA_MIXED_PRECISION=fp16"))
    assert.matches("^accel%-lua: %(command line%):1: Accelerator: ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=2 %(launch's "
      .. "%-%-gradient_accumulation_steps%) disagrees with the DeepSpeed config's gradient_accumulation_steps = 4",
      run(file .. "ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=2"))
    -- FSDP1: a boolean reshard_after_forward contradicting the strategy (Accelerate 1.15: "reshard_after_forward
    -- set to False. This is not supported with FSDP1, please set to a `str` ...")
    assert.matches("reshard_after_forward set to false. This is not supported with FSDP1",
      run("ACCEL_LUA_USE_FSDP=true ACCEL_LUA_FSDP_SHARDING_STRATEGY=FULL_SHARD ACCEL_LUA_FSDP_RESHARD_AFTER_FORWARD=false"))
    assert.are.equal("no 1 3 FSDP", run("ACCEL_LUA_USE_FSDP=true ACCEL_LUA_FSDP_SHARDING_STRATEGY=1"))
    os.execute("rm -rf '" .. dir .. "'")
  end)

  -- Accelerate 1.16's plugins read the environment for every field not given (DeepSpeedPlugin.__post_init__:
  -- "if self.gradient_clipping is None: gradient_clipping = os.environ.get("ACCELERATE_GRADIENT_CLIPPING",
  -- "auto")", FullyShardedDataParallelPlugin's FSDP_VERSION, FSDP_AUTO_WRAP_POLICY, ...), so a plugin the script
  -- makes under `accelerate launch --use_deepspeed --gradient_clipping 0.5` clips at 0.5.
  it("fills the options a plugin is not given from launch's settings", function()
    local bin = os.getenv("ACCEL_LUA_BIN") or arg[-1]
    local function run(env, code)
      local p = assert(io.popen(env .. " '" .. bin .. "' -e \"" .. code .. "\" 2>&1"))
      local out = p:read("a")
      p:close()
      return out
    end
    local ds = "local p = accel.DeepSpeedPlugin{zero_stage = 2} local a = accel.Accelerator{deepspeed_plugin = p} "
      .. "io.write(tostring(p.gradient_clipping), ' ', tostring(p.deepspeed_config.gradient_clipping), ' ', a.zero_stage)"
    assert.are.equal("0.05 0.05 2", run("ACCEL_LUA_USE_DEEPSPEED=true ACCEL_LUA_ZERO_STAGE=3 "
      .. "ACCEL_LUA_GRADIENT_CLIPPING=0.05", ds)) -- the option given (zero_stage) wins
    assert.are.equal("0.5 0.5 2", run("ACCELERATE_GRADIENT_CLIPPING=0.5", ds))
    assert.are.equal("nil nil 2", run("", ds))
    assert.matches("DeepSpeedPlugin with accel%-lua launch's settings %(ACCEL_LUA_OFFLOAD_OPTIMIZER_DEVICE=cpu%): "
      .. "offload_optimizer_device = \"cpu\" is not supported", run("ACCEL_LUA_OFFLOAD_OPTIMIZER_DEVICE=cpu",
      "accel.DeepSpeedPlugin{zero_stage = 0}"))
    assert.matches("ACCEL_LUA_GRADIENT_CLIPPING=abc is not a number", run("ACCEL_LUA_GRADIENT_CLIPPING=abc", ds))
    local fsdp = "local p = accel.FullyShardedDataParallelPlugin{%s} io.write(p.fsdp_version, ' ', p.sharding_strategy, "
      .. "' ', p.auto_wrap_policy, ' ', table.concat(p.transformer_cls_names_to_wrap or {}, ','), ' ', "
      .. "tostring(p.activation_checkpointing), ' ', tostring(p.cpu_offload))"
    local env = "ACCEL_LUA_USE_FSDP=true ACCEL_LUA_FSDP_VERSION=2 ACCEL_LUA_FSDP_RESHARD_AFTER_FORWARD=false "
      .. "ACCEL_LUA_FSDP_AUTO_WRAP_POLICY=TRANSFORMER_BASED_WRAP ACCEL_LUA_FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP=Block "
      .. "ACCEL_LUA_FSDP_ACTIVATION_CHECKPOINTING=true ACCEL_LUA_FSDP_OFFLOAD_PARAMS=true"
    assert.are.equal("2 SHARD_GRAD_OP transformer_based_wrap Block true true", run(env, fsdp:format("")))
    assert.are.equal("2 SHARD_GRAD_OP size_based_wrap Block false true",
      run(env, fsdp:format("auto_wrap_policy = 'size_based_wrap', activation_checkpointing = false")))
    assert.are.equal("1 FULL_SHARD no_wrap  false false", run("", fsdp:format("")))
    -- a DeepSpeed config file: launch's default ZERO3_SAVE_16BIT_MODEL=false (and ZERO_STAGE=2) give way to it
    local dir = tmpdir()
    local fh = assert(io.open(dir .. "/z3.json", "w"))
    fh:write('{"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}}')
    fh:close()
    local launch = "ACCEL_LUA_USE_DEEPSPEED=true ACCEL_LUA_ZERO_STAGE=2 ACCEL_LUA_ZERO3_SAVE_16BIT_MODEL=false "
      .. "ACCEL_LUA_DEEPSPEED_CONFIG_FILE=" .. dir .. "/z3.json"
    local save16 = "io.write(tostring(a.deepspeed_plugin.zero3_save_16bit_model), ' ', a.zero_stage)"
    assert.are.equal("true 3", run(launch, "local a = accel.Accelerator() " .. save16))
    assert.are.equal("true 3", run(launch, "local a = accel.Accelerator{deepspeed_plugin = accel.DeepSpeedPlugin{}} "
      .. save16))
    fh = assert(io.open(dir .. "/keep32.json", "w")) -- launch's value other than its default must agree
    fh:write('{"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": false}}')
    fh:close()
    assert.matches("ACCEL_LUA_ZERO3_SAVE_16BIT_MODEL = true disagrees with .*keep32.json's "
      .. "zero_optimization.stage3_gather_16bit_weights_on_model_save = false", run((launch:gsub("MODEL=false",
      "MODEL=true"):gsub("z3.json", "keep32.json")), "accel.DeepSpeedPlugin{}"))
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("takes a ProjectConfiguration or a plain table", function()
    local a = accel.Accelerator{project_config = accel.ProjectConfiguration{project_dir = "p", total_limit = 2}}
    assert.are.equal("p", a.project_dir)
    assert.are.equal(2, a.project_configuration.total_limit)
    local b = accel.Accelerator{project_config = {automatic_checkpoint_naming = true}, project_dir = "q"}
    assert.are.equal("q", b.project_dir)
    assert.is_true(b.project_configuration.automatic_checkpoint_naming)
    error_matching("unknown option", function() accel.ProjectConfiguration{project = "x"} end)
  end)
end)

describe("Accelerator:prepare", function()
  it("returns every argument in order, wrapped", function()
    local a = accel.Accelerator()
    local model = mlp(1, 4, 8, 2)
    local opt = optim.SGD(model:parameters(), {lr = 0.1})
    local sched = optim.lr_scheduler.StepLR(opt, {step_size = 1})
    local loader = data.DataLoader(data.TensorDataset(accel.randn(10, 4)), {batch_size = 5})
    local other = {hello = "world"}
    local m2, o2, l2, s2, x2, n2 = a:prepare(model, opt, loader, sched, other, 7)
    assert.are.equal(model, m2)
    assert.are.equal(model, a:unwrap_model(m2))
    assert.are_not.equal(opt, o2)
    assert.are.equal(opt, o2.optimizer)
    assert.are.equal(opt.param_groups, o2.param_groups)
    assert.are.equal(sched, s2.scheduler)
    assert.are.equal(other, x2)
    assert.are.equal(7, n2)
    assert.are.equal(2, #l2)
    o2.param_groups[1].lr = 0.5
    assert.are.equal(0.5, opt.param_groups[1].lr)
    assert.are.equal(a:prepare(o2), o2)
  end)

  it("takes only known options, in prepare_* and as prepare's last argument", function()
    local a = accel.Accelerator()
    local model = mlp(1, 2, 2, 1)
    local opt = optim.SGD(model:parameters(), {lr = 0.1})
    local sched = optim.lr_scheduler.StepLR(opt, {step_size = 1})
    error_matching("prepare_optimizer: unknown option bogus %(known: device_placement%)",
      function() a:prepare_optimizer(opt, {device_placement = false, bogus = 1}) end)
    error_matching("prepare_scheduler: unknown option bogus %(it takes no options%)",
      function() a:prepare_scheduler(sched, {bogus = 1}) end)
    error_matching("prepare_model: unknown option bogus", function() a:prepare_model(model, {bogus = 1}) end)
    error_matching("prepare_scheduler: takes the object and an options table, got 1 more argument",
      function() a:prepare_scheduler(sched, nil, 1) end)
    error_matching("prepare: unknown option bogus %(known: device_placement%)",
      function() a:prepare(model, {device_placement = {true}, bogus = 1}) end)
    -- Accelerate: "`device_placement` should be a list with 1 elements (the number of objects passed)."
    error_matching("prepare: device_placement should be a list with 1 elements %(the number of objects passed%), got 2",
      function() a:prepare(model, {device_placement = {true, false}}) end)
    error_matching("prepare: device_placement%[1%] must be a boolean, got string",
      function() a:prepare(model, {device_placement = {"no"}}) end)
    -- the options table is not returned; a plain table without device_placement is an object, returned as is
    assert.are.equal(1, select("#", a:prepare(model, {device_placement = {false}})))
    local other = {hello = "world"}
    local m2, x2 = a:prepare(model, other)
    assert.are.equal(model, m2)
    assert.are.equal(other, x2)
    assert.is_false(a:prepare(opt, {device_placement = {false}}).device_placement)
  end)

  it("marks the last batch of a pass and moves through epochs", function()
    local a = accel.Accelerator()
    local loader = a:prepare(data.DataLoader(data.TensorDataset(accel.arange(10)), {batch_size = 4}))
    assert.are.equal(10, loader.total_dataset_length) -- Accelerate's DataLoaderShard property: len(dataset)
    local ends, seen, inside = {}, {}, {}
    assert.is_false(a.gradient_state.in_dataloader)
    for xb in loader:iter() do
      ends[#ends + 1] = a.gradient_state.end_of_dataloader -- a value, as Accelerate's property
      assert.are.equal(a.gradient_state.end_of_dataloader, loader.end_of_dataloader) -- the loader's too
      seen[#seen + 1] = xb:size(1)
      inside[#inside + 1] = a.gradient_state.in_dataloader and a.gradient_state.remainder
    end
    assert.are.same({false, false, true}, ends)
    assert.are.same({4, 4, 2}, seen)
    assert.are.same({2, 2, 2}, inside) -- 10 samples in batches of 4: 2 left for the last one
    assert.are.same({epoch = 1, samples = 0}, loader:state_dict())
    assert.is_false(a.gradient_state.end_of_dataloader)
    local skipped = a:skip_first_batches(loader, 2)
    local n = 0
    for xb in skipped:iter() do
      n = n + 1
      assert.are.equal(8, xb[1]:item())
    end
    assert.are.equal(1, n)
  end)
end)

-- Trains with micro-batches of size `bs` and k accumulation steps for the
-- given epochs (close_form: the Lua 5.4 <close> handle instead of a function).
local function train_accumulated(x, y, bs, k, epochs, opt_name, close_form)
  local model = mlp(7, x:size(2), 16, 3)
  local opt = opt_name == "adamw" and optim.AdamW(model:parameters(), {lr = 1e-2, weight_decay = 0.1})
    or optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
  local a = accel.Accelerator{gradient_accumulation_steps = k}
  local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = bs, shuffle = true, seed = 3})
  model, opt, loader = a:prepare(model, opt, loader)
  local criterion = nn.CrossEntropyLoss()
  local syncs = 0
  for _ = 1, epochs do
    for xb, yb in loader:iter() do
      local function body()
        a:backward(criterion(model(xb), yb))
        if a.sync_gradients then syncs = syncs + 1 end
        opt:step()
        opt:zero_grad()
      end
      if close_form then
        local _ <close> = a:accumulate(model)
        body()
      else
        a:accumulate(model, body)
      end
    end
  end
  return model, syncs
end

describe("gradient accumulation", function()
  local x, y = teacher_data(96, 6, 3, 11)

  for _, opt_name in ipairs({"sgd", "adamw"}) do
    it("k micro-batches equal one batch k times larger (" .. opt_name .. ")", function()
      local big, big_syncs = train_accumulated(x, y, 32, 1, 3, opt_name)
      local small, small_syncs = train_accumulated(x, y, 8, 4, 3, opt_name)
      assert.are.equal(9, big_syncs)
      assert.are.equal(9, small_syncs)
      params_close(big, small, 1e-6)
      local untrained = mlp(7, 6, 16, 3)
      assert.is_true(max_abs_diff(untrained:parameters()[1], big:parameters()[1]) > 1e-3)
    end)
  end

  it("the <close> handle form equals the function form", function()
    local m1 = train_accumulated(x, y, 8, 4, 1, "sgd", false)
    local m2 = train_accumulated(x, y, 8, 4, 1, "sgd", true)
    assert.is_true(params_equal(m1, m2))
  end)

  it("syncs every k-th step and at the end of the loader", function()
    local a = accel.Accelerator{gradient_accumulation_steps = 4}
    local loader = a:prepare(data.DataLoader(data.TensorDataset(accel.arange(13)), {batch_size = 1}))
    local flags = {}
    for _ in loader:iter() do
      a:accumulate(function() flags[#flags + 1] = a.sync_gradients end)
    end
    assert.are.same({false, false, false, true, false, false, false, true, false, false, false, true, true}, flags)
  end)

  it("steps the optimizer and zeroes grads only on sync steps", function()
    local a = accel.Accelerator{gradient_accumulation_steps = 2}
    local model = mlp(1, 3, 4, 2)
    local opt = a:prepare(optim.SGD(model:parameters(), {lr = 0.5}))
    model = a:prepare(model)
    local w = model:parameters()[1]
    local before = w:clone()
    a:accumulate(model, function()
      a:backward(model(accel.ones(2, 3)):sum())
      assert.is_false(a.sync_gradients)
      opt:step()
      opt:zero_grad()
    end)
    assert.is_true(w:equal(before))
    local g1 = w.grad:clone()
    a:accumulate(model, function()
      a:backward(model(accel.ones(2, 3)):sum())
      assert.is_true(a.sync_gradients)
      assert.is_true(max_abs_diff(w.grad, g1 * 2) < 1e-6)
      opt:step()
    end)
    assert.is_true(max_abs_diff(w, before - g1 * 2 * 0.5) < 1e-6)
  end)

  it("no_sync runs its body (function and handle forms)", function()
    local a = accel.Accelerator()
    local model = mlp(1, 3, 4, 2)
    assert.are.equal(42, a:no_sync(model, function() return 42 end))
    do
      local _ <close> = a:no_sync(model)
      assert.is_false(a._grad_sync[model])
    end
    assert.is_true(a._grad_sync[model])
  end)
end)

describe("prepared schedulers", function()
  local function run(k, coupled, calls)
    local a = accel.Accelerator{gradient_accumulation_steps = k, step_scheduler_with_optimizer = coupled}
    local model = mlp(1, 3, 4, 2)
    local opt = optim.SGD(model:parameters(), {lr = 1.0})
    local sched = optim.lr_scheduler.StepLR(opt, {step_size = 1, gamma = 0.5})
    model, opt, sched = a:prepare(model, opt, sched)
    for _ = 1, calls do
      a:accumulate(model, function()
        a:backward(model(accel.ones(1, 3)):sum())
        opt:step()
        sched:step()
        opt:zero_grad()
      end)
    end
    return opt.param_groups[1].lr, sched
  end

  it("step only after a real optimizer step", function()
    assert.are.equal(0.5 ^ 6, (run(1, true, 6)))
    assert.are.equal(0.5 ^ 3, (run(2, true, 6)))
    assert.are.equal(0.5 ^ 2, (run(3, true, 6)))
  end)

  it("step on every call with step_scheduler_with_optimizer = false", function()
    assert.are.equal(0.5 ^ 6, (run(3, false, 6)))
  end)

  it("pass get_last_lr and state_dict through", function()
    local _, sched = run(2, true, 4)
    assert.are.same({0.25}, sched:get_last_lr())
    assert.are.equal(2, sched:state_dict().last_epoch)
  end)

  it("stop a OneCycleLR at total_steps, but raise past it under split_batches, as Accelerate", function()
    -- Accelerate 1.15, SGD(lr = 0.1, momentum = 0.9), OneCycleLR(opt, 0.5, total_steps = 3): lrs
    -- 0.23131855133348753, 2e-06, 0.23131855133348764; a 4th step is skipped without split_batches and raises
    -- "ValueError: Tried to step 4 times. The specified number of total steps is 3" with it
    local function steps(split)
      local before = accel.get_default_device()
      local a = accel.Accelerator{cpu = true, split_batches = split}
      accel.set_default_device(before) -- cpu = true made the CPU the default device
      local model = mlp(1, 2, 2, 1)
      local opt = optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
      local sched = optim.lr_scheduler.OneCycleLR(opt, 0.5, {total_steps = 3})
      model, opt, sched = a:prepare(model, opt, sched)
      for _, want in ipairs({0.23131855133348753, 2e-06, 0.23131855133348764}) do
        opt:step()
        sched:step()
        assert.is_true(math.abs(opt.param_groups[1].lr - want) <= 1e-15 * want)
      end
      opt:step()
      return sched, opt
    end
    local sched, opt = steps(false)
    sched:step()
    assert.are.equal(3, sched.scheduler.last_epoch)
    assert.are.equal(0.23131855133348764, opt.param_groups[1].lr)
    sched = steps(true)
    local ok, err = pcall(sched.step, sched)
    assert.is_false(ok)
    assert.matches("accelerator_spec.lua:%d+: OneCycleLR: Tried to step 4 times. The specified number of total "
      .. "steps is 3", err)
  end)
end)

describe("fp16 loss scaling", function()
  it("checks each gradient element: large finite gradients whose sum overflows are not skipped", function()
    local scaler = require("accel.amp").GradScaler{init_scale = 1}
    local p = accel.zeros(2, {requires_grad = true})
    p.grad = accel.tensor{2e38, 2e38} -- a float32 sum of the two is inf
    assert.is_true(scaler:step(optim.SGD({p}, {lr = 0})))
    p.grad = accel.tensor{2e38, math.huge}
    assert.is_false(scaler:step(optim.SGD({p}, {lr = 0})))
  end)

  it("skips an overflowing step and halves the scale", function()
    local a = accel.Accelerator{mixed_precision = "fp16"}
    local model = mlp(3, 4, 8, 2)
    local opt = optim.SGD(model:parameters(), {lr = 0.1})
    local sched = optim.lr_scheduler.StepLR(opt, {step_size = 1, gamma = 0.5})
    model, opt, sched = a:prepare(model, opt, sched)
    local x = accel.randn(5, 4)
    assert.are.equal(65536, a.scaler:get_scale())

    local function step(loss_factor)
      a:backward(model(x):pow(2):mean() * loss_factor)
      opt:step()
      sched:step()
      opt:zero_grad()
    end

    local w = model:parameters()[1]
    local before = w:clone()
    step(1)
    assert.is_false(a.optimizer_step_was_skipped)
    assert.is_false(w:equal(before))
    assert.are.equal(65536, a.scaler:get_scale())
    assert.are.equal(0.05, opt.param_groups[1].lr)

    before = w:clone()
    step(1e38) -- times the scale: inf
    assert.is_true(a.optimizer_step_was_skipped)
    assert.is_true(opt.step_was_skipped)
    assert.is_true(w:equal(before))
    assert.are.equal(32768, a.scaler:get_scale())
    assert.are.equal(0.05, opt.param_groups[1].lr) -- the scheduler did not step either

    step(1)
    assert.is_false(a.optimizer_step_was_skipped)
    assert.is_false(w:equal(before))
    assert.are.equal(32768, a.scaler:get_scale())
  end)

  it("grows the scale after growth_interval good steps", function()
    local a = accel.Accelerator{mixed_precision = "fp16"}
    local model = mlp(3, 4, 8, 2)
    local opt
    model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 0.01}))
    a.scaler.growth_interval = 3
    for i = 1, 7 do
      a:backward(model(accel.randn(2, 4)):mean() * 1e-3) -- small: no fp16 overflow at 4 * 2^16
      opt:step()
      opt:zero_grad()
      local want = i >= 6 and 4 * 65536 or i >= 3 and 2 * 65536 or 65536
      assert.are.equal(want, a.scaler:get_scale())
    end
  end)

  it("a step with no gradient to check is an error and leaves the scale, as PyTorch's GradScaler", function()
    -- torch.amp.GradScaler("cpu", growth_interval=1) behind Accelerate 1.15's prepared optimizer: step() with every
    -- .grad None raises "No inf checks were recorded for this optimizer." and the scale stays; with zero gradients
    -- (zero_grad(set_to_none=False)) the step runs and the scale doubles. (torch leaves the optimizer UNSCALED
    -- after that failed step, so its later steps fail too until update(); here the failed step leaves it ready.)
    local a = accel.Accelerator{mixed_precision = "fp16", kwargs_handlers = {accel.GradScalerKwargs{init_scale = 4,
      growth_interval = 1}}}
    local model = mlp(3, 4, 8, 2)
    local opt
    model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 0.01}))
    error_matching("accelerator_spec.lua:%d+: optimizer step %(fp16 GradScaler%): no parameter of the optimizer has a "
      .. "gradient", function() opt:step() end)
    assert.are.equal(4, a.scaler:get_scale())
    a:backward(model(accel.randn(2, 4)):mean())
    opt:step()
    assert.are.equal(8, a.scaler:get_scale())
    opt:zero_grad()
    error_matching("no inf/NaN check was recorded", function() opt:step() end)
    assert.are.equal(8, a.scaler:get_scale())
    opt:zero_grad({set_to_none = false}) -- zeros are checked: the step runs
    a:backward(model(accel.randn(2, 4)):mean())
    opt:step()
    opt:zero_grad({set_to_none = false})
    opt:step()
    assert.is_false(a.optimizer_step_was_skipped)
    assert.are.equal(32, a.scaler:get_scale())
  end)

  it("unscales gradients before the step (matches fp32 to fp16 precision)", function()
    local function one_step(mp)
      local a = accel.Accelerator{mixed_precision = mp}
      local model = mlp(5, 6, 16, 3)
      local opt
      model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 1.0}))
      local before = model:parameters()[1]:clone()
      accel.set_seed(9)
      local x = accel.randn(8, 6)
      a:backward(model(x):pow(2):mean())
      local norm = a:clip_grad_norm_(model:parameters(), 1e9)
      opt:step()
      return before - model:parameters()[1], norm:item()
    end
    local d32, n32 = one_step("no")
    local d16, n16 = one_step("fp16")
    local scale = d32:abs():max():item()
    assert.is_true(scale > 1e-4)
    assert.is_true(max_abs_diff(d32, d16) < 1e-2 * scale)
    assert.is_true(math.abs(n32 - n16) < 1e-2 * n32, ("norms %g vs %g"):format(n32, n16))
  end)

  -- Two prepared Linear(1, 1) models (weight 1, no bias), each with SGD lr 0.1, under fp16 (init scale 8),
  -- and the input ones(1, 1): a gradient of 1 for each weight.
  local function two_fp16_units()
    local a = accel.Accelerator{mixed_precision = "fp16", kwargs_handlers = {accel.GradScalerKwargs{init_scale = 8}}}
    local function unit()
      local m = nn.Linear(1, 1, {bias = false})
      accel.no_grad(function() m.weight:fill_(1) end)
      return m
    end
    local m1, m2 = unit(), unit()
    local o1, o2
    m1, m2, o1, o2 = a:prepare(m1, m2, optim.SGD(m1:parameters(), {lr = 0.1}), optim.SGD(m2:parameters(), {lr = 0.1}))
    return a, m1, m2, o1, o2, accel.ones(1, 1)
  end

  it("two optimizers clipped together, then stepped: each gradient is unscaled once (closed form: both 0.9)", function()
    -- Accelerate calls torch's scaler.update() after each prepared optimizer's step, which resets the second
    -- optimizer too, so its step divides its already unscaled gradient by the scale again (torch + Accelerate:
    -- 1 - 0.1 / 8 = 0.9875); here only the stepped optimizer is reset.
    local a, m1, m2, o1, o2, x = two_fp16_units()
    a:backward(m1(x):sum() + m2(x):sum())
    local params = {m1.weight, m2.weight}
    a:clip_grad_norm_(params, 1e9)
    o1:step()
    o2:step()
    assert.is_true(math.abs(m2.weight:item() - 0.9) < 1e-6, tostring(m2.weight:item()))
    assert.is_true(math.abs(m1.weight:item() - 0.9) < 1e-6)
  end)

  it("GAN-style: clip and step one optimizer, then the other (an optimizer unscaled before it had gradients is ready again)", function()
    -- closed form: gradient 1 for each weight, lr 0.1: both 0.9 (Accelerate with torch's GradScaler runs this loop)
    local a, d, g, od, og, x = two_fp16_units()
    a:backward(d(x):sum())
    a:clip_grad_norm_(d:parameters(), 1e9)
    od:step()
    a:backward(g(x):sum())
    a:clip_grad_norm_(g:parameters(), 1e9)
    og:step()
    assert.is_true(math.abs(d.weight:item() - 0.9) < 1e-6, tostring(d.weight:item()))
    assert.is_true(math.abs(g.weight:item() - 0.9) < 1e-6, tostring(g.weight:item()))
  end)

  it("unscaling twice before a step is an error (torch's GradScaler), not a step on still-scaled gradients", function()
    local a = accel.Accelerator{mixed_precision = "fp16"}
    local model = mlp(5, 6, 16, 3)
    local opt
    model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 0.1}))
    a:backward(model(accel.randn(4, 6)):sum())
    a:clip_grad_norm_(model:parameters(), 1e9)
    opt:zero_grad() -- the step was skipped: the next clip would unscale again
    a:backward(model(accel.randn(4, 6)):sum())
    error_matching("unscale_%(%) has already been called on this optimizer since the last update",
      function() a:clip_grad_norm_(model:parameters(), 1e9) end)
  end)

  -- torch.amp.GradScaler("cpu", init_scale=8) on p = [1, 2], SGD lr 0.1, loss scale(p.sum()) (torch 2.15):
  -- the optimizer's state goes READY -> UNSCALED -> STEPPED and back to READY only at update().
  local function scaler_case(init_scale)
    local amp = require("accel.amp")
    local p = nn.Parameter(accel.tensor({1.0, 2.0}))
    local opt = optim.SGD({p}, {lr = 0.1})
    local s = amp.GradScaler{init_scale = init_scale or 8}
    local function backward(factor)
      opt:zero_grad()
      s:scale((p * (factor or 1.0)):sum()):backward()
    end
    return p, opt, s, backward
  end

  it("update() after unscale_ without a step uses its inf check and readies the optimizer, as torch's", function()
    local p, opt, s, backward = scaler_case()
    backward(math.huge)
    s:unscale_(opt) -- finds the inf; the step is left out
    s:update()
    assert.are.equal(4, s:get_scale()) -- torch: 8 -> 4
    p, opt, s, backward = scaler_case()
    backward(); s:unscale_(opt); s:update()
    backward(); s:step(opt); s:update()
    assert.is_true(math.abs(p[1]:item() - 0.8999999761581421) < 1e-7) -- torch: 0.9 (the step unscales again)
    assert.are.equal(8, s:get_scale())
    p, opt, s, backward = scaler_case()
    backward(); s:unscale_(opt); s:update()
    backward(); s:unscale_(opt) -- unscales this backward's gradients, then backward again: still scaled
    backward(); s:step(opt); s:update()
    assert.is_true(math.abs(p[1]:item() - 0.19999998807907104) < 1e-7) -- torch: the step does not unscale again
  end)

  it("step twice, unscale_ after step and update with no check are errors, as torch's", function()
    local p, opt, s, backward = scaler_case()
    backward()
    s:step(opt)
    error_matching("accelerator_spec.lua:%d+: GradScaler:step: step%(%) has already been called since the last "
      .. "update%(%)", function() s:step(opt) end)
    error_matching("accelerator_spec.lua:%d+: GradScaler:unscale_: unscale_%(%) is being called after step%(%)",
      function() s:unscale_(opt) end)
    assert.is_true(math.abs(p[1]:item() - 0.9) < 1e-7) -- stepped once
    s:update()
    error_matching("accelerator_spec.lua:%d+: GradScaler:update: No inf checks were recorded prior to update%(%)",
      function() s:update() end)
    assert.are.equal(8, s:get_scale())
    backward(); s:step(opt); s:update() -- ready again after update()
    assert.is_true(math.abs(p[1]:item() - 0.8) < 1e-6)
  end)

  it("load_state_dict refuses an empty or incomplete state dict, as torch's", function()
    local _, _, s = scaler_case()
    error_matching("accelerator_spec.lua:%d+: GradScaler:load_state_dict: the source state dict is empty, possibly "
      .. "because it was saved from a disabled instance of GradScaler", function() s:load_state_dict({}) end)
    error_matching("GradScaler:load_state_dict: the state dict's _growth_tracker must be a number, got nil", function()
      s:load_state_dict({scale = 4.0, growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 10})
    end)
    error_matching('the state dict\'s scale must be a number, got "abc"', function()
      s:load_state_dict({scale = "abc", growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 10,
        _growth_tracker = 0})
    end)
    assert.are.equal(8, s:get_scale()) -- unchanged
  end)
end)

describe("bf16", function()
  it("MLP training ends within 1% of the fp32 loss", function()
    local x, y = teacher_data(512, 16, 4, 21)
    local criterion = nn.CrossEntropyLoss()
    local function train(mp)
      local a = accel.Accelerator{mixed_precision = mp}
      local model = mlp(4, 16, 64, 4)
      local opt = optim.AdamW(model:parameters(), {lr = 3e-3})
      local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = 32, shuffle = true, seed = 1})
      model, opt, loader = a:prepare(model, opt, loader)
      for _ = 1, 8 do
        for xb, yb in loader:iter() do
          a:backward(criterion(model(xb), yb))
          opt:step()
          opt:zero_grad()
        end
      end
      return accel.no_grad(function() return criterion(a:unwrap_model(model, {keep_fp32_wrapper = false})(x), y):item() end)
    end
    local l32, l16 = train("no"), train("bf16")
    assert.is_true(l32 < 0.5, "fp32 training did not learn: loss " .. l32)
    assert.is_true(math.abs(l16 - l32) <= 0.01 * l32, ("bf16 loss %.5f vs fp32 %.5f"):format(l16, l32))
  end)

  it("runs the prepared model's GEMMs in bf16 and returns float32", function()
    local Probe = nn.Module:extend("Probe")
    function Probe:init() self.fc = nn.Linear(4, 3) end
    function Probe:forward(x)
      local h = self.fc(x)
      self.seen = h.dtype
      return h
    end
    local a = accel.Accelerator{mixed_precision = "bf16"}
    local model = a:prepare(Probe())
    local out = model(accel.randn(2, 4))
    assert.are.equal(accel.bfloat16, model.seen)
    assert.are.equal(accel.float32, out.dtype)
    assert.is_nil(accel._C.set_autocast(nil))
    a:unwrap_model(model, {keep_fp32_wrapper = false})
    model(accel.randn(2, 4))
    assert.are.equal(accel.float32, model.seen)
  end)

  it("autocast scopes restore the previous setting, also on error", function()
    local a = accel.Accelerator{mixed_precision = "bf16"}
    local w = accel.randn(4, 2)
    local dt = a:autocast(function() return accel.matmul(accel.randn(3, 4), w).dtype end)
    assert.are.equal(accel.bfloat16, dt)
    assert.are.equal(accel.float32, accel.matmul(accel.randn(3, 4), w).dtype)
    assert.is_false(pcall(a.autocast, a, function() error("boom") end))
    assert.are.equal(accel.float32, accel.matmul(accel.randn(3, 4), w).dtype)
    do
      local _ <close> = a:autocast()
      assert.are.equal(accel.bfloat16, accel.matmul(accel.randn(3, 4), w).dtype)
    end
    assert.are.equal(accel.float32, accel.matmul(accel.randn(3, 4), w).dtype)
    local plain = accel.Accelerator()
    assert.are.equal(accel.float32, plain:autocast(function() return accel.matmul(accel.randn(3, 4), w).dtype end))
  end)

  it("losses run in float32 inside autocast (PyTorch's autocast float32 list); outside, a bf16 input stays bf16", function()
    local F = accel.nn.functional
    local a16 = accel.Accelerator{mixed_precision = "fp16"}
    local x, w1, w2 = accel.randn(4, 8) * 30, accel.randn(8, 8) * 30, accel.randn(8, 8) * 30
    local loss = a16:autocast(function() return F.mse_loss(F.linear(x, w1), F.linear(x, w2)) end)
    assert.are.equal(accel.float32, loss.dtype)
    -- the fp16 products (operands rounded to fp16, float32 accumulation, fp16 result), then float32
    local function h16(t) return t:half():float() end
    local want = F.mse_loss(h16(F.linear(h16(x), h16(w1))), h16(F.linear(h16(x), h16(w2)))):item()
    assert.is_true(loss:item() < math.huge and math.abs(loss:item() - want) <= 1e-5 * want, tostring(loss) .. " " .. want)
    local a = accel.Accelerator{mixed_precision = "bf16"}
    a:autocast(function()
      local h, t = F.linear(x, w1), F.linear(x, w2)
      for _, l in ipairs({F.mse_loss(h, t), F.l1_loss(h, t), F.binary_cross_entropy_with_logits(h, t:sigmoid()),
        F.nll_loss(F.log_softmax(h, 2), accel.tensor{0, 1, 2, 3})}) do
        assert.are.equal(accel.float32, l.dtype)
      end
    end)
    assert.are.equal(accel.bfloat16, F.mse_loss(x:bfloat16(), x:bfloat16()).dtype)
  end)

  it("soft-target cross_entropy and prod run in float32 under autocast, as on torch's CPU autocast float32 list", function()
    -- torch 2.15: with torch.autocast("cpu", dtype) for bf16 / fp16, F.cross_entropy(x.to(dtype), p) with a float32 /
    -- a dtype p, torch.full((6,), 1.5).to(dtype).prod() and the row prod of [[1.5]*6, [1.25]*6].to(dtype)
    local F, amp = accel.nn.functional, require("accel.amp")
    local x = accel.tensor{{0.3, -1.2, 2.5}, {1.7, 0.1, -0.4}}
    local p = accel.tensor{{0.2, 0.5, 0.3}, {0.6, 0.1, 0.3}}
    local want = {[accel.bfloat16] = {1.7450035, 1.7465223}, [accel.float16] = {1.7440588, 1.7440541}}
    for dt, ce in pairs(want) do
      amp.run(dt, function()
        for i, tgt in ipairs({p, p:to(dt)}) do
          local l = F.cross_entropy(x:to(dt), tgt)
          assert.are.equal(accel.float32, l.dtype)
          assert.is_true(math.abs(l:item() - ce[i]) < 2e-6, ("%s target %d: %.7f vs %.7f"):format(dt, i, l:item(), ce[i]))
        end
        local all = accel.full({6}, 1.5):to(dt):prod()
        assert.are.equal(accel.float32, all.dtype)
        assert.are.equal(11.390625, all:item()) -- 1.5^6, exact in float32 (bf16 rounds it to 11.375)
        local rows = accel.tensor{{1.5, 1.5, 1.5, 1.5, 1.5, 1.5}, {1.25, 1.25, 1.25, 1.25, 1.25, 1.25}}:to(dt):prod(2)
        assert.are.equal(accel.float32, rows.dtype)
        assert.are.same({11.390625, 3.814697265625}, rows:tolist())
      end)
    end
    assert.are.equal(accel.bfloat16, accel.full({6}, 1.5):bfloat16():prod().dtype) -- outside autocast (torch: 11.375)
  end)

  it("restores autocast when the model's forward raises", function()
    local Bad = nn.Module:extend("Bad")
    function Bad:init() self.fc = nn.Linear(2, 2) end
    function Bad:forward() error("forward failed") end
    local a = accel.Accelerator{mixed_precision = "bf16"}
    local model = a:prepare(Bad())
    error_matching("forward failed", function() model(accel.randn(1, 2)) end)
    assert.is_nil(accel._C.set_autocast(nil))
  end)
end)

describe("operations on one process", function()
  local a = accel.Accelerator()

  it("gather, reduce, broadcast and pad_across_processes", function()
    local t = accel.tensor({{1.0, 2.0}, {3.0, 4.0}})
    assert.is_true(a:gather(t):equal(t))
    local g = a:gather(accel.tensor(5.0))
    assert.are.equal(0, g:dim()) -- unchanged on one process, as Accelerate
    local nested = a:gather({a = t, b = {t}})
    assert.is_true(nested.b[1]:equal(t))
    assert.is_true(a:reduce(t):equal(t))
    assert.is_true(a:reduce(t, "mean"):equal(t))
    assert.is_true(a:reduce(t, {reduction = "sum", scale = 1}):equal(t))
    -- an int64 mean on one process comes back unchanged (Accelerate: torch.int64, tensor([1, 4]))
    local i = accel.tensor({1, 4}, {dtype = accel.int64})
    local r = a:reduce(i, "mean")
    assert.are.equal(accel.int64, r.dtype)
    assert.are.same({1, 4}, r:tolist())
    error_matching('reduction must be', function() a:reduce(t, "median") end)
    assert.is_true(a:broadcast(t):equal(t))
    assert.is_true(a:pad_across_processes(t, {dim = 2}):equal(t))
    -- Accelerate's dim = 0 (it did nothing), a process that does not exist, a table that is no list
    error_matching("pad_across_processes: dimension 0 is invalid", function() a:pad_across_processes(t, {dim = 0}) end)
    error_matching("pad_across_processes: dimension 0 is invalid", function() a:pad_across_processes(t, 0) end)
    error_matching("broadcast: from_process must be a process index in 0..0, got 5", function() a:broadcast(t, 5) end)
    error_matching("broadcast: from_process must be a process index in 0..0, got 1.5", function() a:broadcast(t, 1.5) end)
    error_matching("broadcast_object_list: expected a list", function() a:broadcast_object_list({x = 1}) end)
  end)

  it("gather_object, split_between_processes and gather_for_metrics", function()
    assert.are.same({1, 2, 3}, a:gather_object({1, 2, 3}))
    -- Accelerate 1.15 on one process: gather_object returns its argument (3, {'x': 1}, 's')
    assert.are.same({x = 1}, a:gather_object({x = 1}))
    assert.are.equal(3, a:gather_object(3))
    assert.are.equal("s", a:gather_object("s"))
    assert.are.same({"a", "b", "c"}, a:split_between_processes({"a", "b", "c"}))
    assert.are.same({"a", "b", "c"}, a:split_between_processes({"a", "b", "c"}, {apply_padding = true}))
    assert.are.equal(3, a:split_between_processes({"a", "b", "c"}, function(part) return #part end))
    assert.are.equal(4, a:split_between_processes(accel.arange(4)):numel())
    local ops = require("accel.operations")
    -- the rule for several processes: contiguous parts, the first len % N one longer
    assert.are.same({"c", "d"}, ops.split({"a", "b", "c", "d", "e"}, 1, 3))
    assert.are.same({"e", "e"}, ops.split({"a", "b", "c", "d", "e"}, 2, 3, true))
    local loader = a:prepare(data.DataLoader(data.TensorDataset(accel.arange(10)), {batch_size = 4}))
    local all = {}
    for xb in loader:iter() do
      local g = a:gather_for_metrics(xb)
      for _, v in ipairs(g:tolist()) do all[#all + 1] = v end
    end
    assert.are.same({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, all)
  end)

  it("main_process_first, on_main_process, triggers, print, free_memory", function()
    assert.are.equal(5, a:main_process_first(function() return 5 end))
    do
      local _ <close> = a:main_process_first()
    end
    local ran = false
    a:on_main_process(function() ran = true end)()
    assert.is_true(ran)
    -- any callable, as Accelerate's decorators and split_between_processes' function
    local called = setmetatable({}, {__call = function(_, x) return "called " .. tostring(x) end})
    assert.are.equal("called 1", a:on_main_process(called)(1))
    assert.are.equal("called 2", a:on_local_main_process(called)(2))
    assert.are.equal("called 3", a:on_last_process(called)(3))
    assert.are.equal("called 4", a:on_process(called, 0)(4))
    assert.are.equal("called 5", a:on_local_process(called, 0)(5))
    local part = a:split_between_processes({1, 2}, setmetatable({}, {__call = function(_, p) return #p end}))
    assert.are.equal(2, part)
    error_matching("split_between_processes: expected a function to call with the part, got number",
      function() a:split_between_processes({1, 2}, nil, 5) end)
    local hook = a:register_save_state_pre_hook(called)
    hook:remove()
    assert.is_false(a:check_trigger())
    a:set_trigger()
    assert.is_true(a:check_trigger())
    assert.is_false(a:check_trigger())
    a:wait_for_everyone()
    a:print("accelerator_spec: print on the main process")
    local x, y = a:free_memory(1, 2)
    assert.is_nil(x)
    assert.is_nil(y)
  end)

  it("clip_grad_norm_ returns the total norm and clips; clip_grad_value_ clamps", function()
    local w = nn.Parameter(accel.tensor({3.0, 4.0}))
    w.grad = accel.tensor({3.0, 4.0})
    local n = a:clip_grad_norm_({w}, 1.0)
    assert.is_true(math.abs(n:item() - 5) < 1e-6)
    assert.is_true(math.abs(w.grad:norm():item() - 1) < 1e-4)
    w.grad = accel.tensor({3.0, -4.0})
    a:clip_grad_value_({w}, 0.5)
    assert.are.same({0.5, -0.5}, w.grad:tolist())
  end)

  -- accelerate 1.16: clip_grad_norm_(parameters, max_norm, norm_type=2) takes no 4th argument (a TypeError)
  it("refuse arguments past their signature, naming the method", function()
    local w = nn.Parameter(accel.ones(2))
    error_matching("Accelerator:clip_grad_norm_ takes at most 3 arguments, got 4", function()
      a:clip_grad_norm_({w}, 1.0, 2, true)
    end)
    error_matching("Accelerator:gather takes at most 1 argument, got 2", function() a:gather(accel.ones(1), {}) end)
    error_matching("Accelerator:wait_for_everyone takes at most 0 arguments, got 1", function() a:wait_for_everyone({}) end)
    error_matching("Accelerator:save_model takes at most 3 arguments, got 4", function() a:save_model(w, "x", {}, {}) end)
  end)

  -- accelerate 1.16: on_process(process_index=0) / on_local_process(local_process_index=0) as keywords,
  -- skip_first_batches(loader) with num_batches = 0, accelerator.sync_gradients = False and accelerator.step = 3
  -- assignable, print(..., sep=, end=) passed on to print
  it("take Accelerate's keyword forms, defaults and setters", function()
    assert.are.equal(7, a:on_process({process_index = 0}, function() return 7 end)())
    assert.are.equal(8, a:on_local_process(function() return 8 end, {local_process_index = 0})())
    error_matching("on_process: unknown option process_idx", function() a:on_process(print, {process_idx = 0}) end)
    local loader = a:prepare(data.DataLoader(data.TensorDataset(accel.arange(4)), {batch_size = 2}))
    assert.are.equal(2, #a:skip_first_batches(loader))
    local b = accel.Accelerator()
    b.sync_gradients = false
    assert.is_false(b.sync_gradients)
    b.sync_gradients = true
    b.step = 3
    assert.are.equal(3, b.step)
    error_matching("Accelerator.sync_gradients must be a boolean", function() b.sync_gradients = 1 end)
    error_matching("Accelerator.step must be a non%-negative integer", function() b.step = -1 end)
    b.step = 0
    local code = "local a = accel.Accelerator() a:print('x', 1, {sep = '-', ['end'] = '!'}) a:print('y', {1})"
    local out = support.command_output(("%s -e %s 2>&1"):format(support.shell_quote(support.ACCEL_LUA),
      support.shell_quote(code)))
    assert.matches("^x%-1!y\ttable: ", out)
  end)
end)

describe("trackers", function()
  it("log through accel.tracking on the main process", function()
    local dir = tmpdir()
    local a = accel.Accelerator{log_with = "jsonl", project_dir = dir}
    a:init_trackers("run1", {config = {lr = 0.1}})
    a:log({loss = 1.5}, {step = 1})
    a:log({loss = 1.25}, 2)
    a:end_training()
    local f = assert(io.open(dir .. "/run1/metrics.jsonl"))
    local text = f:read("a")
    f:close()
    assert.is_truthy(text:find("1.25", 1, true))
    assert.is_truthy(text:find("1.5", 1, true))
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("need a project_dir (the constructor says so, as Accelerate's)", function()
    error_matching('tracker "csv" requires a logging directory', function() return accel.Accelerator{log_with = "csv"} end)
  end)
end)

-- Accelerate's LocalSGD on one process (distributed_type NO): disabled,
-- step only counts (as Accelerate's); its averaging on 2 ranks is checked
-- by ddp_test.lua (helpers/ddp_local_sgd.lua).
describe("LocalSGD", function()
  local expect_error = support.expect_error
  local function model_and_acc(o)
    local acc = accel.Accelerator(o)
    return acc:prepare(nn.Linear(2, 1)), acc
  end

  it("is disabled on one process: step counts, parameters and gradient sync stay as they are", function()
    local m, acc = model_and_acc()
    local before = m.weight:clone()
    local ls = accel.LocalSGD{accelerator = acc, model = m, local_sgd_steps = 1}
    assert.is_false(ls.enabled)
    assert.are.same({"a", "b"}, {ls:run(function(l)
      assert.are.equal(ls, l)
      l:step()
      l:step()
      return "a", "b"
    end)})
    assert.are.equal(2, ls.num_steps)
    assert.is_true(m.weight:equal(before))
    assert.is_nil(acc._grad_sync[m])
    do
      local h <close> = ls:enter()
      assert.are.equal(ls, h)
      h:step()
    end
    assert.are.equal(3, ls.num_steps)
    ls:enter():close() -- closed above: it can be entered again
    assert.is_false(accel.local_sgd.LocalSGD{accelerator = acc, model = m, local_sgd_steps = 2, enabled = false}.enabled)
  end)

  it("refuses DeepSpeed and FSDP with Accelerate's message", function()
    local ds = accel.Accelerator{deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 2}}
    expect_error(function() local _ = accel.LocalSGD{accelerator = ds, model = nn.Linear(2, 1), local_sgd_steps = 2} end,
      "LocalSGD is supported only for CPUs and GPUs (no DeepSpeed or MegatronLM)", "distributed_type is DEEPSPEED")
    local fsdp = accel.Accelerator{fsdp_plugin = accel.FullyShardedDataParallelPlugin{}}
    expect_error(function() local _ = accel.LocalSGD{accelerator = fsdp, model = nn.Linear(2, 1), local_sgd_steps = 2} end,
      "LocalSGD is supported only for CPUs and GPUs (no DeepSpeed or MegatronLM)", "distributed_type is FSDP")
  end)

  it("checks its options and its use", function()
    local m, acc = model_and_acc()
    expect_error(function() local _ = accel.LocalSGD{accelerator = acc, model = m} end,
      "LocalSGD: option local_sgd_steps is required")
    -- accelerate 1.16's example: LocalSGD(..., local_sgd_steps=None, enabled=False) runs, never averaging
    local off = accel.LocalSGD{accelerator = acc, model = m, enabled = false}
    assert.is_false(off.enabled)
    off:run(function(l) l:step() end)
    expect_error(function() local _ = accel.LocalSGD{accelerator = acc, model = m, local_sgd_steps = 0} end,
      "LocalSGD: local_sgd_steps must be a positive integer, got 0")
    expect_error(function() local _ = accel.LocalSGD{accelerator = acc, model = m, local_sgd_steps = 2, steps = 1} end,
      "LocalSGD: unknown option steps")
    local ls = accel.LocalSGD{accelerator = acc, model = m, local_sgd_steps = 2}
    expect_error(function() ls:run(42) end, "LocalSGD:run: expected a function, got number")
    ls:enter()
    expect_error(function() ls:enter() end, "LocalSGD:enter: already entered")
    ls:close()
  end)
end)
