-- accelerator_options_spec.lua: no accepted option is ignored. For every
-- key of every option table the Accelerator, its plugins, kwargs handlers
-- and configurations accept (accel.plugins.OPTION_SPECS, filled by the
-- constructors themselves), a case below shows the key's effect, or the
-- one clear error naming it when the value cannot be honoured yet. The
-- first test fails when a key has no case (a key added later without a
-- test) or a case names a key that does not exist. Effects that only show
-- on several processes are checked in accelerator_parity_test.lua and
-- ddp_test.lua; the cases here say so and check what one process shows.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["every key of every option table has a case here, and every case a key"] = "pairs on a read-only view (LuaJIT's pairs ignores __pairs)",
})
local tmpdir, error_matching, expect_error = support.tmpdir, support.error_matching, support.expect_error
local nn, optim, data = accel.nn, accel.optim, accel.data
local C = accel._C
local _ = accel.Accelerator -- loads every module that registers an option table
_ = accel.utils -- and set_seed's, send_to_device's
_ = accel.LocalSGD -- and LocalSGD's
local SPECS = accel.plugins.OPTION_SPECS

-- The device the suite runs on (ACCEL_LUA_DEVICE; the CPU without it):
-- where an Accelerator puts models and batches.
local RUN_DEVICE = os.getenv("ACCEL_LUA_DEVICE")
if RUN_DEVICE == nil or RUN_DEVICE == "" then RUN_DEVICE = "cpu" end
RUN_DEVICE = tostring(accel.device(RUN_DEVICE)) -- as a device prints: "cuda" is cuda:0

local function mlp(seed)
  accel.set_seed(seed)
  return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
end

-- The autocast dtype in force (nil when off).
local function current_autocast()
  local prev = C.set_autocast(nil)
  C.set_autocast(prev)
  return prev
end

-- Parameters after `steps` SGD steps on fixed data with Accelerator{o}
-- (and the Accelerator).
local function trained(o, steps)
  local a = accel.Accelerator(o)
  local model = mlp(11)
  local opt
  model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 0.1}))
  accel.set_seed(12)
  local x = accel.randn(6, 4)
  for _ = 1, steps or 2 do
    a:accumulate(model, function()
      a:backward(model(x):pow(2):mean())
      opt:step()
      opt:zero_grad()
    end)
  end
  local out = {}
  local function read()
    for i, p in ipairs(model:parameters()) do out[i] = p:clone() end
  end
  local eng = a.shard_engine -- under ZeRO stage 3 the parameters are read while gathered
  if eng and eng.stage == 3 then eng:gathered(read) else read() end
  return out, a
end

local BASELINE = nil
local function same_as_plain(o)
  BASELINE = BASELINE or trained({})
  local got = trained(o)
  for i, p in ipairs(BASELINE) do assert.is_true(p:equal(got[i]), "parameter " .. i .. " differs") end
end

-- The options a prepared loader's shard() was called with.
local function shard_options(o, before_prepare)
  local loader = data.DataLoader(data.TensorDataset(accel.arange(8)), {batch_size = 2})
  local orig, seen = loader.shard, nil
  loader.shard = function(self, r, w, so)
    seen = so
    return orig(self, r, w, so)
  end
  local a = accel.Accelerator(o)
  if before_prepare then before_prepare(a) end
  local prepared = a:prepare(loader)
  return seen, prepared, a
end

-- sync_gradients after each micro-batch of one pass over a loader of n batches.
local function sync_pattern(o, n)
  local a = accel.Accelerator(o)
  local model = a:prepare(mlp(1))
  local loader = a:prepare(data.DataLoader(data.TensorDataset(accel.randn(n, 4)), {batch_size = 1}))
  local out = {}
  for _ in loader:iter() do
    a:accumulate(model, function() out[#out + 1] = a.sync_gradients end)
  end
  return out
end

-- The lr after each of `micro` micro-batches with StepLR(gamma 0.5) stepped every micro-batch.
local function lr_sequence(o, micro)
  local a = accel.Accelerator(o)
  local model = mlp(2)
  local opt = optim.SGD(model:parameters(), {lr = 1})
  local sched = optim.lr_scheduler.StepLR(opt, {step_size = 1, gamma = 0.5})
  model, opt, sched = a:prepare(model, opt, sched)
  local lrs = {}
  for _ = 1, micro do
    a:accumulate(model, function()
      a:backward(model(accel.randn(2, 4)):sum())
      opt:step()
      sched:step()
      opt:zero_grad()
    end)
    lrs[#lrs + 1] = opt.param_groups[1].lr
  end
  return lrs
end

-- The fp16 loss scale after the given steps (true: a clean step, false: an overflowing one).
local function scale_after(kw, steps)
  local a = accel.Accelerator{mixed_precision = "fp16", kwargs_handlers = {accel.GradScalerKwargs(kw)}}
  local model = mlp(3)
  local opt
  model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 1e-3}))
  for _, clean in ipairs(steps) do
    a:backward(model(accel.randn(2, 4)):mean() * (clean and 1e-3 or 1e38))
    opt:step()
    opt:zero_grad()
  end
  return a.scaler:get_scale()
end

-- torch 2.15: GradScaler(init_scale=1e38, growth_factor=10, growth_interval=1) after a clean step: get_scale()
-- 9.999999680285692e+37 (kept: 1e39 would pass float32's range; the scale is a float32 from then on)
describe("the fp16 loss scale and other Accelerator arguments", function()
  it("does not grow past float32's range, and is kept in float32", function()
    local s = require("accel.amp").GradScaler{init_scale = 1e38, growth_factor = 10, growth_interval = 1}
    local p = nn.Parameter(accel.ones(2))
    local o = optim.SGD({p}, {lr = 0.1})
    s:scale((p * 1e-40):sum()):backward() -- a step without an inf or NaN
    s:step(o)
    s:update()
    assert.are.equal(9.999999680285692e+37, s:get_scale())
  end)

  -- torch 2.15: torch.amp.GradScaler(growth_factor=0.5): "The growth factor must be > 1.0."
  it("accel.amp.GradScaler checks its options as GradScalerKwargs does", function()
    local amp = require("accel.amp")
    error_matching("GradScaler: unknown option 'grwoth_factor'", function() amp.GradScaler{grwoth_factor = 3} end)
    error_matching("GradScaler: growth_factor = 0.5 is not supported: it must be greater than 1", function()
      amp.GradScaler{growth_factor = 0.5}
    end)
    assert.are.equal(2, amp.GradScaler{init_scale = 2}:get_scale())
  end)

  -- torch 2.15: s = torch.amp.GradScaler("cpu", enabled=False): is_enabled() False, get_scale() 1.0,
  -- scale(tensor(3.)) tensor(3.), state_dict() {}; step(opt) steps even with inf gradients (p = [-inf, -inf]);
  -- update() and unscale_(opt) do nothing. GradScaler("cpu", 4.0): get_scale() 4.0, scale(tensor(2., float16))
  -- tensor(8.) (float32), scale(tensor([2.], float16)) tensor([8.], dtype=torch.float16)
  it("accel.amp.GradScaler takes torch's positional arguments, and enabled = false passes everything through", function()
    local amp = require("accel.amp")
    local s = amp.GradScaler("cpu", {enabled = false})
    assert.is_false(s:is_enabled())
    assert.are.equal(1.0, s:get_scale())
    assert.are.equal(3, s:scale(accel.tensor(3.0)):item())
    assert.are.same({}, s:state_dict())
    local p = nn.Parameter(accel.ones(2))
    local o = optim.SGD({p}, {lr = 0.1})
    local loss = (p * math.huge):sum()
    loss:backward()
    s:step(o)
    assert.are.same({-math.huge, -math.huge}, p:tolist())
    s:update()
    s:unscale_(o)
    s:load_state_dict({})
    local s4 = amp.GradScaler("cpu", 4.0)
    assert.is_true(s4:is_enabled())
    assert.are.equal(4.0, s4:get_scale())
    local half0 = s4:scale(accel.tensor(2.0, {dtype = accel.float16}))
    assert.are.equal(accel.float32, half0.dtype)
    assert.are.equal(8, half0:item())
    assert.are.equal(accel.float16, s4:scale(accel.tensor({2.0}, {dtype = accel.float16})).dtype)
    error_matching("GradScaler: unknown device 'nodev'", function() amp.GradScaler("nodev") end)
    error_matching("GradScaler: device 'sim:3': sim has one device", function() amp.GradScaler("sim:3") end)
    assert.are.equal("sim", amp.GradScaler(accel.device("sim")).device.type) -- a device object too, as torch.device
    error_matching("GradScaler: argument 'enabled' must be a boolean, got number", function() amp.GradScaler{enabled = 0} end)
  end)

    -- a single handler, not in a list, was silently ignored (accelerate 1.15 raises a TypeError iterating it);
  -- accumulate's body that is not a function (or a misspelt, nil one) made a handle and never ran
  it("a kwargs handler not in a list, and an accumulate body that is not a function, are errors", function()
    error_matching("kwargs_handlers must be a list of handlers %({accel.InitProcessGroupKwargs{...}}%), got one handler",
      function() accel.Accelerator{kwargs_handlers = accel.InitProcessGroupKwargs{timeout = 5}} end)
    local a = accel.Accelerator()
    local m = a:prepare(nn.Linear(2, 2))
    error_matching("accumulate: argument 2 must be a model %(or, last, the function to run%), got number",
      function() a:accumulate(m, 5) end)
    error_matching("got nil", function() a:accumulate(m, nil) end)
    local ran = false
    a:accumulate(m, function() ran = true end)
    assert.is_true(ran)
  end)

-- accelerate 1.15: Accelerator(mixed_precision="BF16"): "ValueError: Unknown mixed_precision mode: BF16"
  it("mixed_precision is one of Accelerate's exact strings", function()
    error_matching('unknown mixed_precision "BF16"', function() accel.Accelerator{mixed_precision = "BF16"} end)
  end)
end)

local function with_timeout_restored(fn)
  local before = accel.dist.get_timeout()
  local ok, err = pcall(fn)
  accel.dist.set_timeout(before)
  if not ok then error(err, 0) end
end

local CASES = {}

CASES.Accelerator = {
  mixed_precision = function()
    local a = accel.Accelerator{mixed_precision = "bf16"}
    assert.are.equal(accel.bfloat16, a:autocast(current_autocast))
    local model = a:prepare(mlp(1))
    assert.are.equal(accel.float32, model(accel.randn(2, 4)).dtype)
    error_matching('unknown mixed_precision "fp4"', function() accel.Accelerator{mixed_precision = "fp4"} end)
  end,
  gradient_accumulation_steps = function()
    local a = accel.Accelerator{gradient_accumulation_steps = 2}
    local seen = {}
    for _ = 1, 4 do a:accumulate(function() seen[#seen + 1] = a.sync_gradients end) end
    assert.are.same({false, true, false, true}, seen)
    -- launch's setting is the default: the script's option and a plugin's num_steps win (Accelerate's
    -- launcher exports its --gradient_accumulation_steps only for DeepSpeed, where the file must agree)
    local script = support.tmpname(".lua")
    support.write_file(script, 'local accel = require("accel")\n'
      .. "print(accel.Accelerator{gradient_accumulation_steps = 3}.gradient_accumulation_steps)\n"
      .. "print(accel.Accelerator{gradient_accumulation_plugin = {num_steps = 3}}.gradient_accumulation_steps)\n"
      .. "print(accel.Accelerator().gradient_accumulation_steps)\n"
      .. "print(accel.DeepSpeedPlugin{zero_stage = 2}.gradient_accumulation_steps)\n")
    local out, ok = support.command_output("ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=4 "
      .. support.shell_quote(support.ACCEL_LUA) .. " " .. support.shell_quote(script) .. " 2>&1")
    os.remove(script)
    assert.is_true(ok, out)
    assert.are.equal("3\n3\n4\n4\n", out) -- the plugin's field: launch's value (Accelerate's env default)
  end,
  cpu = function()
    -- a first Accelerator{cpu = true} makes the process state on the CPU (as
    -- Accelerate's AcceleratorState(cpu=True)); a fresh state, then back
    -- (it also makes the CPU the default device: put back afterwards)
    local state = require("accel.state")
    local before = accel.get_default_device()
    state.reset_state()
    local ok, a = pcall(accel.Accelerator, {cpu = true})
    local st, default = ok and a.state, accel.get_default_device()
    state.reset_state()
    accel.set_default_device(before)
    assert(ok, a)
    assert.is_true(a.cpu)
    assert.are.equal("cpu", tostring(a.device))
    assert.are.equal("cpu", tostring(st.device))
    assert.are.equal("cpu", tostring(default))
  end,
  device_placement = function()
    local _, on = shard_options({})
    assert.are.equal(RUN_DEVICE, tostring(on.device))
    local _, off = shard_options({device_placement = false})
    assert.is_nil(off.device) -- batches are left where the loader made them
  end,
  log_with = function()
    local got = {}
    local tracker = accel.tracking.GeneralTracker:extend{name = "mine"}:new{}
    function tracker.log(_, values, step) got[#got + 1] = {values.loss, step} end
    local a = accel.Accelerator{log_with = tracker}
    a:init_trackers("p")
    a:log({loss = 0.5}, 3)
    assert.are.same({{0.5, 3}}, got)
  end,
  project_dir = function()
    local a = accel.Accelerator{project_dir = "proj"}
    assert.are.equal("proj", a.project_dir)
    assert.are.equal("proj", a.logging_dir)
  end,
  project_config = function()
    local dir = tmpdir()
    local a = accel.Accelerator{project_config = {project_dir = dir, automatic_checkpoint_naming = true}}
    a:prepare(mlp(1))
    assert.are.equal(dir .. "/checkpoints/checkpoint_0", a:save_state())
    support.remove_tree(dir)
  end,
  step_scheduler_with_optimizer = function()
    assert.are.same({1, 0.5, 0.5, 0.25}, lr_sequence({gradient_accumulation_steps = 2}, 4))
    assert.are.same({0.5, 0.25, 0.125, 0.0625},
      lr_sequence({gradient_accumulation_steps = 2, step_scheduler_with_optimizer = false}, 4))
  end,
  split_batches = function()
    assert.is_false(shard_options({}).split_batches)
    assert.is_true(shard_options({split_batches = true}).split_batches)
  end,
  even_batches = function()
    assert.is_true(shard_options({}).even_batches)
    assert.is_false(shard_options({even_batches = false}).even_batches)
    -- Accelerate's even_batches is a property over dataloader_config, with a setter writing into it; its
    -- split_batches, non_blocking and use_seedable_sampler are properties without one
    local seen, _, a = shard_options({}, function(acc) acc.even_batches = false end)
    assert.is_false(seen.even_batches)
    assert.is_false(a.dataloader_config.even_batches)
    assert.is_false(shard_options({}, function(acc) acc.dataloader_config.even_batches = false end).even_batches)
    assert.is_true(shard_options({}, function(acc) acc.dataloader_config.split_batches = true end).split_batches)
    error_matching("Accelerator.split_batches is read%-only", function() a.split_batches = true end)
    error_matching("Accelerator.even_batches must be a boolean, got 0", function() a.even_batches = 0 end)
  end,
  deepspeed_plugin = function()
    local a = accel.Accelerator{deepspeed_plugin = {zero_stage = 0, gradient_accumulation_steps = 3}}
    assert.are.equal(3, a.gradient_accumulation_steps)
    assert.are.equal("DEEPSPEED", a.distributed_type) -- Accelerate's value; stage 0 runs as DDP
    -- the shared state has it too (Accelerate's AcceleratorState.deepspeed_plugin)
    assert.are.equal(a.deepspeed_plugin, a.state.deepspeed_plugin)
    assert.is_nil(a.state.fsdp_plugin)
    local _, b = trained({deepspeed_plugin = {zero_stage = 2}})
    assert.are.equal(2, b.shard_engine.stage) -- prepare built the sharding engine
    same_as_plain({deepspeed_plugin = {zero_stage = 2}})
  end,
  fsdp_plugin = function()
    local a = accel.Accelerator{fsdp_plugin = {sharding_strategy = "NO_SHARD"}}
    assert.are.equal(0, a.zero_stage)
    assert.are.equal("FSDP", a.distributed_type)
    assert.are.equal(a.fsdp_plugin, a.state.fsdp_plugin) -- AcceleratorState.fsdp_plugin
    assert.are.equal("NO_SHARD", a.state.fsdp_plugin.sharding_strategy)
    assert.is_nil(a.state.deepspeed_plugin)
    local _, b = trained({fsdp_plugin = {sharding_strategy = "FULL_SHARD"}})
    assert.are.equal(3, b.shard_engine.stage)
    same_as_plain({fsdp_plugin = {}}) -- FULL_SHARD, the default
  end,
  zero_stage = function()
    assert.are.equal(0, accel.Accelerator{zero_stage = 0}.zero_stage)
    local _, a = trained({zero_stage = 3})
    assert.are.equal(3, a.deepspeed_plugin.zero_stage) -- zero_stage = S is DeepSpeedPlugin{zero_stage = S}
    assert.are.equal(3, a.shard_engine.stage)
    error_matching("zero_stage must be 0, 1, 2 or 3, got 4", function() accel.Accelerator{zero_stage = 4} end)
  end,
  kwargs_handlers = function()
    local a = accel.Accelerator{kwargs_handlers = {accel.DistributedDataParallelKwargs{bucket_cap_mb = 5},
      accel.AutocastKwargs{enabled = false}}}
    assert.are.equal(5, a.ddp_kwargs.bucket_cap_mb)
    assert.is_false(a.autocast_handler.enabled)
    error_matching("more than one accel.GradScalerKwargs", function()
      accel.Accelerator{kwargs_handlers = {accel.GradScalerKwargs(), accel.GradScalerKwargs{init_scale = 2}}}
    end)
    error_matching("kwargs_handlers%[2%] is not a handler this Accelerator knows %(accel.AutocastKwargs, "
      .. "accel.DistributedDataParallelKwargs, accel.FP8RecipeKwargs, accel.GradScalerKwargs, "
      .. "accel.InitProcessGroupKwargs%)", function()
      accel.Accelerator{kwargs_handlers = {accel.AutocastKwargs(), {timeout = 3}}}
    end)
    error_matching("kwargs_handlers%[1%] is a GradientAccumulationPlugin; pass it as gradient_accumulation_plugin",
      function() accel.Accelerator{kwargs_handlers = {accel.GradientAccumulationPlugin{num_steps = 2}}} end)
  end,
  gradient_accumulation_plugin = function()
    local a = accel.Accelerator{gradient_accumulation_plugin = accel.GradientAccumulationPlugin{num_steps = 3}}
    assert.are.equal(3, a.gradient_accumulation_steps)
    assert.are.equal(2, accel.Accelerator{gradient_accumulation_plugin = {num_steps = 2}}.gradient_accumulation_steps)
    error_matching("either gradient_accumulation_steps or gradient_accumulation_plugin", function()
      accel.Accelerator{gradient_accumulation_steps = 2, gradient_accumulation_plugin = {num_steps = 2}}
    end)
    error_matching("gradient_accumulation_steps = 4 disagrees with gradient_accumulation_plugin.num_steps = 2", function()
      accel.Accelerator{deepspeed_plugin = {zero_stage = 0, gradient_accumulation_steps = 4},
        gradient_accumulation_plugin = {num_steps = 2}}
    end)
  end,
  dataloader_config = function()
    assert.is_true(shard_options({dataloader_config = accel.DataLoaderConfiguration{split_batches = true}}).split_batches)
    assert.is_true(shard_options({dataloader_config = {even_batches = false}, split_batches = true}).split_batches)
    error_matching("even_batches = true disagrees with dataloader_config.even_batches = false", function()
      accel.Accelerator{dataloader_config = {even_batches = false}, even_batches = true}
    end)
  end,
}

CASES.ProjectConfiguration = {
  project_dir = function()
    assert.are.equal("d", accel.Accelerator{project_config = {project_dir = "d"}}.project_dir)
  end,
  logging_dir = function()
    local a = accel.Accelerator{project_config = {project_dir = "d", logging_dir = "logs"}}
    assert.are.equal("logs", a.logging_dir)
  end,
  automatic_checkpoint_naming = function()
    local a = accel.Accelerator{project_config = {project_dir = "d"}}
    error_matching("give an output directory", function() a:save_state() end)
  end,
  total_limit = function()
    local dir = tmpdir()
    local a = accel.Accelerator{project_config = {project_dir = dir, automatic_checkpoint_naming = true, total_limit = 1}}
    a:prepare(mlp(1))
    a:save_state()
    a:save_state()
    assert.are.same({"checkpoint_1"}, C.fs_listdir(dir .. "/checkpoints"))
    support.remove_tree(dir)
    error_matching("total_limit must be a positive integer", function() accel.ProjectConfiguration{total_limit = 0} end)
  end,
  iteration = function()
    local dir = tmpdir()
    local a = accel.Accelerator{project_config = {project_dir = dir, automatic_checkpoint_naming = true, iteration = 5}}
    a:prepare(mlp(1))
    assert.are.equal(dir .. "/checkpoints/checkpoint_5", a:save_state())
    assert.are.equal(6, a.save_iteration)
    a:save_state(dir .. "/explicit") -- every save counts, as Accelerate's iteration += 1
    assert.are.equal(7, a.save_iteration)
    assert.are.equal(dir .. "/checkpoints/checkpoint_7", a:save_state()) -- the explicit one took number 6 (docs/checkpoints.md)
    support.remove_tree(dir)
  end,
  save_on_each_node = function()
    -- on one machine, "each node" is the main process's node: accepted
    local dir = tmpdir()
    local a = accel.Accelerator{project_config = {save_on_each_node = true}}
    a:prepare(mlp(1))
    a:save_state(dir .. "/ck")
    support.remove_tree(dir)
    -- a job over several machines is refused (simulated: fewer local processes than processes)
    local comm = accel.PartialState().comm
    local before = comm.local_world_size
    comm.local_world_size = 0
    local ok, err = pcall(accel.Accelerator, {project_config = {save_on_each_node = true}})
    comm.local_world_size = before
    assert.is_false(ok)
    assert.matches("save_on_each_node = true is not supported on several machines", err)
  end,
}

-- The open engine after a short training run under Accelerator{o}.
local function engine_after(o)
  local _, a = trained(o)
  return a.shard_engine, a
end
local function ds_engine(o) return engine_after({deepspeed_plugin = o}) end

CASES.DeepSpeedPlugin = {
  zero_stage = function()
    assert.are.equal(2, accel.DeepSpeedPlugin{}.zero_stage) -- Accelerate's default
    assert.is_nil(ds_engine({zero_stage = 0})) -- plain data parallel
    for s = 1, 3 do assert.are.equal(s, ds_engine({zero_stage = s}).stage) end
    error_matching("zero_stage must be 0, 1, 2 or 3", function() accel.DeepSpeedPlugin{zero_stage = 7} end)
  end,
  offload_optimizer_device = function()
    assert.is_false(ds_engine({zero_stage = 2, offload_optimizer_device = "none"})._c:info().offload_optimizer)
    assert.is_true(ds_engine({zero_stage = 2, offload_optimizer_device = "cpu"})._c:info().offload_optimizer)
    same_as_plain({deepspeed_plugin = {zero_stage = 2, offload_optimizer_device = "cpu"}})
    error_matching('offload_optimizer_device = "cpu" is not supported: offloading the optimizer needs ZeRO stage 1, 2 '
      .. "or 3 %(stage 0 shards nothing%)", function()
      accel.DeepSpeedPlugin{zero_stage = 0, offload_optimizer_device = "cpu"}
    end)
    error_matching('offload_optimizer_device = "nvme" is not supported: NVMe offload', function()
      accel.DeepSpeedPlugin{offload_optimizer_device = "nvme"}
    end)
  end,
  offload_param_device = function()
    -- stage 3 on the CPU build: the parameter shards are on the host already (trains as without it)
    same_as_plain({deepspeed_plugin = {zero_stage = 3, offload_param_device = "cpu"}})
    error_matching('offload_param_device = "cpu" is not supported: offloading parameters is ZeRO stage 3, where '
      .. "parameters are sharded %(this is stage 2%)", function()
      accel.DeepSpeedPlugin{zero_stage = 2, offload_param_device = "cpu"}
    end)
    error_matching('offload_param_device = "nvme" is not supported: NVMe offload', function()
      accel.DeepSpeedPlugin{zero_stage = 3, offload_param_device = "nvme"}
    end)
  end,
  offload_optimizer_nvme_path = function()
    assert.are.equal("none", accel.DeepSpeedPlugin{offload_optimizer_nvme_path = "none"}.offload_optimizer_nvme_path)
    error_matching('offload_optimizer_nvme_path = "/nvme" is not supported: NVMe offload', function()
      accel.DeepSpeedPlugin{offload_optimizer_nvme_path = "/nvme"}
    end)
  end,
  offload_param_nvme_path = function()
    error_matching('offload_param_nvme_path = "/nvme" is not supported: NVMe offload', function()
      accel.DeepSpeedPlugin{zero_stage = 3, offload_param_nvme_path = "/nvme"}
    end)
  end,
  gradient_accumulation_steps = function()
    assert.are.equal(4, accel.Accelerator{deepspeed_plugin = {zero_stage = 2, gradient_accumulation_steps = 4}}
      .gradient_accumulation_steps)
    error_matching("gradient_accumulation_steps = 0 is not supported", function()
      accel.DeepSpeedPlugin{zero_stage = 0, gradient_accumulation_steps = 0}
    end)
  end,
  gradient_clipping = function()
    -- DeepSpeed clips the gradients' total norm to gradient_clipping before
    -- every step: with SGD(lr = 1) the update's total norm is then exactly it
    -- (stage 0 on .grad, stages 2-3 through the engine's shards).
    for _, stage in ipairs({0, 2, 3}) do
      local a = accel.Accelerator{deepspeed_plugin = {zero_stage = stage, gradient_clipping = 0.01}}
      local model = mlp(4)
      local opt
      model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 1}))
      assert.are.equal(stage > 0, a:shard_engine_of(model) ~= nil)
      local before = {}
      local function full() return a:get_state_dict(model) end -- full weights also under stage 3
      for k, p in pairs(full()) do before[k] = p:clone() end
      a:backward(model(accel.randn(6, 4)):pow(2):sum())
      opt:step()
      local d2 = 0
      for k, p in pairs(full()) do d2 = d2 + (p - before[k]):pow(2):sum():item() end
      assert.is_true(math.abs(math.sqrt(d2) - 0.01) < 1e-4, ("stage %d: update norm %g"):format(stage, math.sqrt(d2)))
      a:free_memory()
    end
    -- 0 is DeepSpeed's default (GRADIENT_CLIPPING_DEFAULT = 0.; its engine clips only above 0): no clipping,
    -- the SGD(lr = 1) update is the whole gradient
    local a = accel.Accelerator{deepspeed_plugin = {zero_stage = 0, gradient_clipping = 0}}
    local model = mlp(4)
    local opt
    model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 1}))
    local before = {}
    for k, p in pairs(a:get_state_dict(model)) do before[k] = p:clone() end
    a:backward(model(accel.randn(6, 4)):pow(2):sum())
    local g2, d2 = 0, 0
    for _, p in ipairs(model:parameters()) do g2 = g2 + p.grad:pow(2):sum():item() end
    opt:step()
    for k, p in pairs(a:get_state_dict(model)) do d2 = d2 + (p - before[k]):pow(2):sum():item() end
    assert.is_true(g2 > 1e-2, "the gradient is larger than the clip values above")
    assert.is_true(math.abs(math.sqrt(d2) - math.sqrt(g2)) < 1e-5 * math.sqrt(g2), ("update norm %g, gradient "
      .. "norm %g"):format(math.sqrt(d2), math.sqrt(g2)))
    a:free_memory()
    error_matching("gradient_clipping = %-1 is not supported", function()
      accel.DeepSpeedPlugin{zero_stage = 0, gradient_clipping = -1}
    end)
  end,
  hf_ds_config = function()
    local ds = accel.DeepSpeedPlugin{hf_ds_config = {zero_optimization = {stage = 2, reduce_bucket_size = 10},
      gradient_accumulation_steps = 2, fp16 = {enabled = true, initial_scale_power = 10, loss_scale_window = 7},
      train_batch_size = "auto", train_micro_batch_size_per_gpu = "auto", steps_per_print = 5}}
    assert.are.same({"steps_per_print"}, ds.ignored_keys)
    local a = accel.Accelerator{deepspeed_plugin = ds}
    assert.are.equal(2, a.gradient_accumulation_steps)
    assert.are.equal("fp16", a.mixed_precision)
    assert.are.equal(1024, a.scaler:get_scale()) -- 2^initial_scale_power
    assert.are.equal(7, a.scaler.growth_interval) -- loss_scale_window
    -- without the fp16 keys, DeepSpeed's defaults (runtime/constants.py: FP16_INITIAL_SCALE_POWER_DEFAULT = 16,
    -- FP16_LOSS_SCALE_WINDOW_DEFAULT = 1000), not GradScaler's 2000; a GradScalerKwargs may give the window then
    local d = accel.Accelerator{mixed_precision = "fp16", deepspeed_plugin = {zero_stage = 2}}
    assert.are.same({65536, 1000}, {d.scaler:get_scale(), d.scaler.growth_interval})
    d = accel.Accelerator{deepspeed_plugin = {hf_ds_config = {zero_optimization = {stage = 2}, fp16 = {enabled = true}}},
      kwargs_handlers = {accel.GradScalerKwargs{growth_interval = 50}}}
    assert.are.equal(50, d.scaler.growth_interval)
    local model = mlp(1)
    model = a:prepare(model, optim.SGD(model:parameters(), {lr = 0.1}))
    assert.is_true(a.shard_engine:stats().units >= 4, "reduce_bucket_size = 10 elements makes small units")
    a:prepare(data.DataLoader(data.TensorDataset(accel.randn(8, 4)), {batch_size = 4}))
    assert.are.equal(4, ds.deepspeed_config.train_micro_batch_size_per_gpu) -- "auto" filled from the loader
    assert.are.equal(8, ds.deepspeed_config.train_batch_size) -- micro x accumulation x processes
    error_matching('mixed_precision = "bf16" disagrees with the DeepSpeed config %(fp16.enabled = true%)', function()
      accel.Accelerator{deepspeed_plugin = ds, mixed_precision = "bf16"}
    end)
    -- a numeric train_micro_batch_size_per_gpu is DeepSpeed's own (Accelerate compares no loader with it)
    local b = accel.Accelerator{deepspeed_plugin = {hf_ds_config = {train_micro_batch_size_per_gpu = 3,
      zero_optimization = {stage = 2}}}}
    b:prepare(data.DataLoader(data.TensorDataset(accel.randn(8, 4)), {batch_size = 4}))
    assert.are.equal(3, b.deepspeed_plugin.deepspeed_config.train_micro_batch_size_per_gpu)
    -- DeepSpeed's static loss scale: fixed, an overflowing step skipped and the scale kept
    local st = accel.Accelerator{deepspeed_plugin = {hf_ds_config = {zero_optimization = {stage = 2},
      fp16 = {enabled = true, loss_scale = 128}}}}
    local m2 = mlp(1)
    local o2
    m2, o2 = st:prepare(m2, optim.SGD(m2:parameters(), {lr = 0.1}))
    for step = 1, 3 do
      local y = m2(accel.randn(4, 4)):sum()
      st:backward(step == 2 and y * math.huge or y)
      o2:step()
      o2:zero_grad()
      assert.are.equal(128, st.scaler:get_scale())
      assert.are.equal(step == 2, st.optimizer_step_was_skipped)
    end
    st:free_memory()
    error_matching("ds_config has both bf16.enabled and fp16.enabled true", function()
      accel.DeepSpeedPlugin{hf_ds_config = {zero_optimization = {stage = 2}, bf16 = {enabled = true},
        fp16 = {enabled = true}}}
    end)
    error_matching('mixed_precision = "bf16" disagrees with the DeepSpeed config %(bf16.enabled = false%)', function()
      accel.Accelerator{mixed_precision = "bf16", deepspeed_plugin = {hf_ds_config = {zero_optimization = {stage = 2},
        bf16 = {enabled = false}}}}
    end)
    error_matching("hf_ds_config has no zero_optimization section;", function()
      accel.DeepSpeedPlugin{hf_ds_config = {gradient_clipping = 1}}
    end)
    error_matching('zero_stage must be 0, 1, 2 or 3, got "2"', function()
      accel.DeepSpeedPlugin{hf_ds_config = {zero_optimization = {stage = "2"}}}
    end)
    error_matching("zero_stage = 1 disagrees with hf_ds_config's zero_optimization.stage = 3", function()
      accel.DeepSpeedPlugin{zero_stage = 1, hf_ds_config = {zero_optimization = {stage = 3}}}
    end)
    assert.are.equal(1, accel.DeepSpeedPlugin{zero_stage = 1, hf_ds_config = {zero_optimization = {stage = "auto"}}}
      .zero_stage)
    error_matching("loss_scale = %-1 is not supported: it must be a number >= 0", function()
      accel.DeepSpeedPlugin{hf_ds_config = {zero_optimization = {stage = 2}, fp16 = {loss_scale = -1}}}
    end)
  end,
  zero3_init_flag = function()
    assert.is_false(accel.DeepSpeedPlugin{zero_stage = 3, zero3_init_flag = false}.zero3_init_flag)
    error_matching("zero3_init_flag = true is not supported: parameters are created in full by the model's "
      .. "constructor", function() accel.DeepSpeedPlugin{zero_stage = 3, zero3_init_flag = true} end)
    -- below stage 3 Accelerate 1.15 warns and sets it to False (its DeepSpeedPlugin, observed)
    for stage = 0, 2 do
      local p
      local err = support.stderr_of(function()
        p = accel.DeepSpeedPlugin{zero_stage = stage, zero3_init_flag = true}
      end)
      assert.is_false(p.zero3_init_flag)
      assert.truthy(err:find("DeepSpeed Zero3 Init flag is only applicable for ZeRO Stage 3. Setting it to False.",
        1, true))
    end
  end,
  zero3_save_16bit_model = function()
    -- get_state_dict / save_model under stage 3 gather the full weights either way (float32 here)
    for _, flag in ipairs({true, false}) do
      local got, a = trained({deepspeed_plugin = {zero_stage = 3, zero3_save_16bit_model = flag}})
      local sd = a:get_state_dict(a._models[1])
      assert.are.equal(4 * 8, sd["0.weight"]:numel())
      assert.is_true(sd["2.bias"]:equal(a.shard_engine:full_state_dict()["2.bias"]))
      assert.are.equal(#got, #a._models[1]:parameters()) -- trained() read every parameter (gathered)
      a:free_memory()
    end
  end,
  is_train_batch_min = function()
    -- "auto" micro batch of loaders of batch 4 and 2: the smallest by default, the largest with false
    -- (Accelerate: min(batch_sizes) if is_train_batch_min else max(batch_sizes)); x accumulation 1 x 1 process
    for flag, want in pairs({[true] = 2, [false] = 4}) do
      local ds = accel.DeepSpeedPlugin{zero_stage = 0, is_train_batch_min = flag}
      accel.Accelerator{deepspeed_plugin = ds}:prepare(data.DataLoader(data.TensorDataset(accel.randn(8, 4)),
        {batch_size = 4}), data.DataLoader(data.TensorDataset(accel.randn(8, 4)), {batch_size = 2}))
      assert.are.equal(want, ds.deepspeed_config.train_micro_batch_size_per_gpu)
      assert.are.equal(want, ds.deepspeed_config.train_batch_size)
    end
    assert.is_true(accel.DeepSpeedPlugin{}.is_train_batch_min)
  end,
  transformer_moe_cls_names = function()
    assert.are.equal("", accel.DeepSpeedPlugin{transformer_moe_cls_names = ""}.transformer_moe_cls_names)
    error_matching('transformer_moe_cls_names = "MoE" is not supported: there are no mixture%-of%-experts', function()
      accel.DeepSpeedPlugin{transformer_moe_cls_names = "MoE"}
    end)
  end,
}

local function fsdp(o)
  o.sharding_strategy = o.sharding_strategy or "NO_SHARD"
  return accel.FullyShardedDataParallelPlugin(o)
end
-- NO_SHARD with this option trains exactly as no plugin at all (the
-- option only groups or orders communication, as in PyTorch).
local function no_shard_same(o)
  o.sharding_strategy = "NO_SHARD"
  same_as_plain({fsdp_plugin = o})
end
local function fsdp_engine(o) return engine_after({fsdp_plugin = o}) end
-- The engine's wrap units (their parameter counts) under FULL_SHARD with o.
local function unit_sizes(o)
  o.sharding_strategy = "FULL_SHARD"
  local eng = fsdp_engine(o)
  local sizes = {}
  for i, u in ipairs(eng:units()) do sizes[i] = u.numel end
  return sizes
end

CASES.FullyShardedDataParallelPlugin = {
  activation_checkpointing_offload = function()
    assert.is_false(accel.FullyShardedDataParallelPlugin{activation_checkpointing_offload = false}
      .activation_checkpointing_offload)
    error_matching("activation_checkpointing_offload = true is not supported: checkpointed activations are recomputed",
      function() accel.FullyShardedDataParallelPlugin{activation_checkpointing_offload = true} end)
  end,
  sharding_strategy = function()
    assert.are.equal(0, fsdp{sharding_strategy = "no_shard"}.zero_stage)
    assert.are.equal(0, fsdp{sharding_strategy = 3}.zero_stage) -- PyTorch's ShardingStrategy.NO_SHARD
    no_shard_same({})
    assert.are.equal(3, fsdp_engine({sharding_strategy = "FULL_SHARD"}).stage)
    assert.are.equal(2, fsdp_engine({sharding_strategy = 2}).stage) -- SHARD_GRAD_OP
    -- Accelerate 1.15 takes digit strings: FullyShardedDataParallelPlugin(sharding_strategy="1") is FULL_SHARD
    assert.are.equal("FULL_SHARD", fsdp{sharding_strategy = "1"}.sharding_strategy)
    assert.are.equal("SHARD_GRAD_OP", fsdp{sharding_strategy = "2"}.sharding_strategy)
    error_matching('HYBRID_SHARD" shards inside each machine .*needs several machines', function()
      accel.Accelerator{fsdp_plugin = {sharding_strategy = "HYBRID_SHARD"}}
    end)
    error_matching("sharding_strategy must be", function() fsdp{sharding_strategy = "HALF"} end)
  end,
  auto_wrap_policy = function()
    assert.are.equal("size_based_wrap", fsdp{auto_wrap_policy = "SIZE_BASED_WRAP"}.auto_wrap_policy)
    assert.are.same({58}, unit_sizes({auto_wrap_policy = "no_wrap"})) -- the whole model (58 parameters)
    assert.are.same({40, 18}, unit_sizes({auto_wrap_policy = "transformer_based_wrap",
      transformer_cls_names_to_wrap = {"Linear"}}))
    no_shard_same({auto_wrap_policy = "transformer_based_wrap"})
    error_matching("auto_wrap_policy must be one of", function() fsdp{auto_wrap_policy = "all"} end)
  end,
  cpu_offload = function()
    assert.is_false(fsdp{cpu_offload = false}.cpu_offload)
    assert.is_true(fsdp_engine({cpu_offload = true})._c:info().offload_optimizer)
    same_as_plain({fsdp_plugin = {cpu_offload = true}})
    error_matching("cpu_offload = true is not supported: offloading needs a sharded strategy", function()
      fsdp{cpu_offload = true}
    end)
  end,
  min_num_params = function()
    -- both Linear layers (40 and 18 parameters) reach 10; only the first reaches 30, the
    -- second stays in the root unit (listed first)
    assert.are.same({40, 18}, unit_sizes({auto_wrap_policy = "size_based_wrap", min_num_params = 10}))
    assert.are.same({18, 40}, unit_sizes({auto_wrap_policy = "size_based_wrap", min_num_params = 30}))
    no_shard_same({auto_wrap_policy = "size_based_wrap", min_num_params = 10})
    error_matching("min_num_params = 0 is not supported", function() fsdp{min_num_params = 0} end)
  end,
  transformer_cls_names_to_wrap = function()
    assert.are.same({40, 18}, unit_sizes({auto_wrap_policy = "transformer_based_wrap",
      transformer_cls_names_to_wrap = "Linear"})) -- launch's comma-separated spelling
    error_matching("could not find the transformer layer class Block in the model", function()
      unit_sizes({auto_wrap_policy = "transformer_based_wrap", transformer_cls_names_to_wrap = {"Block"}})
    end) -- as Accelerate: a class the model does not have is an error
    no_shard_same({transformer_cls_names_to_wrap = {"Block"}})
  end,
  state_dict_type = function()
    assert.are.equal("FULL_STATE_DICT", fsdp{state_dict_type = "full_state_dict"}.state_dict_type)
    assert.are.equal("SHARDED_STATE_DICT", fsdp{sharding_strategy = "FULL_SHARD",
      state_dict_type = "SHARDED_STATE_DICT"}.state_dict_type)
    error_matching('state_dict_type = "LOCAL_STATE_DICT" is not supported: LOCAL_STATE_DICT is each rank', function()
      fsdp{state_dict_type = "LOCAL_STATE_DICT"}
    end)
    -- Accelerate 1.x (FullyShardedDataParallelPlugin): "1" / "3" -> StateDictType(1) FULL_STATE_DICT / (3)
    -- SHARDED_STATE_DICT, "2" -> LOCAL_STATE_DICT; the default is FULL_STATE_DICT with fsdp_version = 1,
    -- SHARDED_STATE_DICT with fsdp_version = 2
    assert.are.equal("FULL_STATE_DICT", fsdp{state_dict_type = "1"}.state_dict_type)
    assert.are.equal("SHARDED_STATE_DICT", fsdp{state_dict_type = "3"}.state_dict_type)
    error_matching('state_dict_type = "LOCAL_STATE_DICT" is not supported', function() fsdp{state_dict_type = "2"} end)
    error_matching('state_dict_type must be one of FULL_STATE_DICT, SHARDED_STATE_DICT, LOCAL_STATE_DICT %(or "1" to "3"%), '
      .. 'got "4"', function() fsdp{state_dict_type = "4"} end)
    assert.are.equal("FULL_STATE_DICT", fsdp{}.state_dict_type)
    assert.are.equal("SHARDED_STATE_DICT", fsdp{fsdp_version = 2, sharding_strategy = "FULL_SHARD"}.state_dict_type)
    assert.are.equal("FULL_STATE_DICT", fsdp{fsdp_version = 2, sharding_strategy = "FULL_SHARD",
      state_dict_type = "FULL_STATE_DICT"}.state_dict_type)
  end,
  use_orig_params = function()
    no_shard_same({use_orig_params = false})
    -- the model keeps its own parameter tensors either way (use_orig_params = true's behaviour)
    same_as_plain({fsdp_plugin = {use_orig_params = false}})
  end,
  sync_module_states = function()
    no_shard_same({sync_module_states = true})
    same_as_plain({fsdp_plugin = {sync_module_states = false}}) -- one process: nothing to copy
    error_matching("sync_module_states = false is not supported: with NO_SHARD prepare always broadcasts", function()
      fsdp{sync_module_states = false}
    end)
  end,
  backward_prefetch = function()
    no_shard_same({backward_prefetch = "BACKWARD_POST"})
    assert.is_true(fsdp_engine({backward_prefetch = "BACKWARD_PRE", auto_wrap_policy = "transformer_based_wrap",
      transformer_cls_names_to_wrap = {"Linear"}}):stats().prefetches > 0)
    assert.are.equal(0, fsdp_engine({backward_prefetch = "NO_PREFETCH", auto_wrap_policy = "transformer_based_wrap",
      transformer_cls_names_to_wrap = {"Linear"}}):stats().prefetches)
    -- not given: PyTorch's default BACKWARD_PRE
    assert.is_true(fsdp_engine({auto_wrap_policy = "transformer_based_wrap",
      transformer_cls_names_to_wrap = {"Linear"}}):stats().prefetches > 0)
    error_matching("backward_prefetch must be one of", function() fsdp{backward_prefetch = "SOON"} end)
  end,
  forward_prefetch = function()
    no_shard_same({forward_prefetch = true})
    same_as_plain({fsdp_plugin = {sharding_strategy = "SHARD_GRAD_OP", forward_prefetch = true}})
    -- FULL_SHARD: the second forward prefetches the unit that followed in the first
    local units = {auto_wrap_policy = "transformer_based_wrap", transformer_cls_names_to_wrap = {"Linear"},
      backward_prefetch = "NO_PREFETCH"}
    units.forward_prefetch = true
    assert.is_true(fsdp_engine(units):stats().forward_prefetches > 0)
    units.forward_prefetch = false
    assert.are.equal(0, fsdp_engine(units):stats().forward_prefetches)
    same_as_plain({fsdp_plugin = {sharding_strategy = "FULL_SHARD", forward_prefetch = true}})
  end,
  limit_all_gathers = function()
    no_shard_same({limit_all_gathers = false})
    same_as_plain({fsdp_plugin = {limit_all_gathers = true}}) -- the engine has at most one prefetch in flight
  end,
  activation_checkpointing = function()
    no_shard_same({activation_checkpointing = false})
    local _, a = trained({fsdp_plugin = {activation_checkpointing = true, auto_wrap_policy = "transformer_based_wrap",
      transformer_cls_names_to_wrap = {"Linear"}}})
    local model = a._models[1]
    assert.is_true(accel.utils.is_checkpointed(model[1]))
    assert.is_true(accel.utils.is_checkpointed(model[3]))
    assert.is_false(accel.utils.is_checkpointed(model))
    same_as_plain({fsdp_plugin = {activation_checkpointing = true, auto_wrap_policy = "transformer_based_wrap",
      transformer_cls_names_to_wrap = {"Linear"}}})
    error_matching('activation_checkpointing = true runs each wrap unit under checkpoint, and auto_wrap_policy = '
      .. '"no_wrap"', function() accel.Accelerator{fsdp_plugin = {activation_checkpointing = true}} end)
    error_matching("activation_checkpointing = true checkpoints the sharded wrap units, and NO_SHARD has none",
      function() accel.Accelerator{fsdp_plugin = {sharding_strategy = "NO_SHARD", activation_checkpointing = true}} end)
  end,
  fsdp_version = function()
    assert.is_false(accel.Accelerator{fsdp_plugin = {fsdp_version = 1}}.is_fsdp2)
    assert.is_true(accel.Accelerator{fsdp_plugin = {fsdp_version = 2}}.is_fsdp2)
    same_as_plain({fsdp_plugin = {fsdp_version = 2}})
    error_matching("fsdp_version = 3 is not supported", function() fsdp{fsdp_version = 3} end)
    -- FSDP2 as Accelerate: reshard_after_forward (a boolean) decides over the deprecated sharding_strategy
    local P = accel.FullyShardedDataParallelPlugin
    assert.are.equal("SHARD_GRAD_OP", P{fsdp_version = 2, sharding_strategy = "SHARD_GRAD_OP",
      reshard_after_forward = false}.sharding_strategy)
    -- an explicit strategy that contradicts an explicit reshard_after_forward (true: parameters resharded, stage 3;
    -- false: kept, stage 2) is refused rather than silently replaced
    for s, r in pairs({SHARD_GRAD_OP = true, FULL_SHARD = false, HYBRID_SHARD = false, HYBRID_SHARD_ZERO2 = true}) do
      error_matching(('sharding_strategy = "%s" contradicts reshard_after_forward = %s %%(it needs %s%%)')
        :format(s, tostring(r), tostring(not r)), function()
        P{fsdp_version = 2, sharding_strategy = s, reshard_after_forward = r}
      end)
    end
    assert.are.equal("SHARD_GRAD_OP", P{fsdp_version = 2, reshard_after_forward = false}.sharding_strategy)
    error_matching('for sharding_strategy = "SHARD_GRAD_OP" set reshard_after_forward = false',
      function() P{fsdp_version = 2, sharding_strategy = "SHARD_GRAD_OP"} end)
    error_matching('reshard_after_forward set to "FULL_SHARD". This is not supported with FSDP2',
      function() P{fsdp_version = 2, reshard_after_forward = "FULL_SHARD"} end)
    error_matching("forward_prefetch is not yet implemented in FSDP2",
      function() P{fsdp_version = 2, forward_prefetch = true} end)
  end,
  reshard_after_forward = function()
    assert.are.equal(3, fsdp_engine({reshard_after_forward = true}).stage)
    assert.are.equal(2, fsdp_engine({reshard_after_forward = false}).stage) -- FSDP2: parameters kept: SHARD_GRAD_OP
    assert.are.equal(2, fsdp_engine({reshard_after_forward = "SHARD_GRAD_OP"}).stage) -- Accelerate's FSDP1 spelling
    error_matching('reshard_after_forward = "SHARD_GRAD_OP" disagrees with sharding_strategy = "FULL_SHARD"', function()
      accel.FullyShardedDataParallelPlugin{sharding_strategy = "FULL_SHARD", reshard_after_forward = "SHARD_GRAD_OP"}
    end)
    -- FSDP1, a boolean that contradicts the strategy given: Accelerate 1.15's "reshard_after_forward set to
    -- False. This is not supported with FSDP1, please set to a `str` or ... ShardingStrategy" (True likewise)
    error_matching("reshard_after_forward set to false. This is not supported with FSDP1", function()
      accel.FullyShardedDataParallelPlugin{sharding_strategy = "FULL_SHARD", reshard_after_forward = false}
    end)
    error_matching("reshard_after_forward set to true. This is not supported with FSDP1", function()
      accel.FullyShardedDataParallelPlugin{sharding_strategy = "SHARD_GRAD_OP", reshard_after_forward = "true"}
    end)
  end,
  cpu_ram_efficient_loading = function()
    -- rank 0's weights reach every rank at prepare (every rank still builds the model first)
    same_as_plain({fsdp_plugin = {cpu_ram_efficient_loading = true}})
    error_matching("cpu_ram_efficient_loading = true needs sync_module_states = true", function()
      accel.FullyShardedDataParallelPlugin{cpu_ram_efficient_loading = true, sync_module_states = false}
    end)
  end,
}

local function ddp_kw(o) return accel.Accelerator{kwargs_handlers = {accel.DistributedDataParallelKwargs(o)}}.ddp_kwargs end
-- On one process there is no reducer; these reach the Accelerator's
-- ddp_kwargs, which prepare hands to the reducer on N processes (their
-- effect there: accelerator_parity_test.lua and ddp_test.lua).
CASES.DistributedDataParallelKwargs = {
  dim = function()
    same_as_plain({kwargs_handlers = {accel.DistributedDataParallelKwargs{dim = 0}}})
    error_matching("dim = 1 is not supported", function() accel.DistributedDataParallelKwargs{dim = 1} end)
  end,
  broadcast_buffers = function() assert.is_false(ddp_kw({broadcast_buffers = false}).broadcast_buffers) end,
  bucket_cap_mb = function()
    assert.are.equal(0.5, ddp_kw({bucket_cap_mb = 0.5}).bucket_cap_mb)
    error_matching("bucket_cap_mb must be a positive number", function()
      accel.DistributedDataParallelKwargs{bucket_cap_mb = 0}
    end)
  end,
  find_unused_parameters = function()
    assert.is_true(ddp_kw({find_unused_parameters = true}).find_unused_parameters)
  end,
  check_reduction = function()
    same_as_plain({kwargs_handlers = {accel.DistributedDataParallelKwargs{check_reduction = true}}})
  end,
  gradient_as_bucket_view = function()
    same_as_plain({kwargs_handlers = {accel.DistributedDataParallelKwargs{gradient_as_bucket_view = true}}})
  end,
  static_graph = function()
    same_as_plain({kwargs_handlers = {accel.DistributedDataParallelKwargs{static_graph = true}}})
  end,
  comm_hook = function()
    error_matching("comm_hook / comm_wrapper / comm_state_option are not supported", function()
      accel.DistributedDataParallelKwargs{comm_hook = "fp16"}
    end)
  end,
  comm_wrapper = function()
    error_matching("not supported", function() accel.DistributedDataParallelKwargs{comm_wrapper = "fp16"} end)
  end,
  comm_state_option = function()
    error_matching("not supported", function() accel.DistributedDataParallelKwargs{comm_state_option = {}} end)
  end,
}

CASES.InitProcessGroupKwargs = {
  timeout = function()
    with_timeout_restored(function()
      local before = accel.dist.get_timeout()
      accel.Accelerator{kwargs_handlers = {accel.InitProcessGroupKwargs()}}
      assert.are.equal(before, accel.dist.get_timeout()) -- not given: the default stays
      accel.Accelerator{kwargs_handlers = {accel.InitProcessGroupKwargs{timeout = 7}}}
      assert.are.equal(7, accel.dist.get_timeout())
    end)
    error_matching("timeout = 0 is not supported: it must be a positive number of seconds", function()
      accel.InitProcessGroupKwargs{timeout = 0}
    end)
    with_timeout_restored(function() -- a refused Accelerator leaves the timeout alone
      local before = accel.dist.get_timeout()
      pcall(accel.Accelerator, {kwargs_handlers = {accel.InitProcessGroupKwargs{timeout = 9}}, mixed_precision = "fp17"})
      assert.are.equal(before, accel.dist.get_timeout())
    end)
  end,
  backend = function()
    error_matching('backend = "nccl" is not supported: .*accel%-lua launch', function()
      accel.InitProcessGroupKwargs{backend = "nccl"}
    end)
  end,
  init_method = function()
    error_matching("init_method = .* is not supported", function()
      accel.InitProcessGroupKwargs{init_method = "env://"}
    end)
  end,
}

CASES.GradScalerKwargs = {
  init_scale = function()
    assert.are.equal(1024, scale_after({init_scale = 1024}, {}))
    error_matching("init_scale = 0 is not supported", function() accel.GradScalerKwargs{init_scale = 0} end)
  end,
  growth_factor = function()
    assert.are.equal(4096, scale_after({init_scale = 1024, growth_factor = 4, growth_interval = 1}, {true}))
    error_matching("growth_factor = 1 is not supported", function() accel.GradScalerKwargs{growth_factor = 1} end)
  end,
  backoff_factor = function()
    assert.are.equal(256, scale_after({init_scale = 1024, backoff_factor = 0.25}, {false}))
    error_matching("backoff_factor = 1 is not supported", function() accel.GradScalerKwargs{backoff_factor = 1} end)
  end,
  growth_interval = function()
    assert.are.equal(1024, scale_after({init_scale = 1024, growth_interval = 3}, {true, true}))
    assert.are.equal(2048, scale_after({init_scale = 1024, growth_interval = 3}, {true, true, true}))
    error_matching("growth_interval = 1.5 is not supported", function() accel.GradScalerKwargs{growth_interval = 1.5} end)
  end,
  enabled = function()
    local a = accel.Accelerator{mixed_precision = "fp16", kwargs_handlers = {accel.GradScalerKwargs{enabled = false}}}
    -- a disabled GradScaler, as Accelerate builds on a GPU (torch 2.15: is_enabled() False, get_scale() 1.0)
    assert.is_false(a.scaler:is_enabled())
    assert.are.equal(1.0, a.scaler:get_scale())
    local model = mlp(5)
    local ref = mlp(5)
    a:backward(a:prepare(model)(accel.ones(1, 4)):sum())
    ref(accel.ones(1, 4)):sum():backward()
    -- not scaled by 2^16 (fp16 GEMMs make the values differ slightly)
    local g, r = model:parameters()[1].grad, ref:parameters()[1].grad
    assert.is_true((g - r):abs():max():item() < 1e-2 * r:abs():max():item())
    local opt = a:prepare(accel.optim.SGD(model:parameters(), {lr = 0.1}))
    local before = model:parameters()[1]:clone()
    opt:step()
    assert.is_false(opt.step_was_skipped)
    assert.is_false(before:equal(model:parameters()[1]))
  end,
}

CASES.AutocastKwargs = {
  enabled = function()
    local a = accel.Accelerator{mixed_precision = "bf16", kwargs_handlers = {accel.AutocastKwargs{enabled = false}}}
    assert.is_nil(a:autocast(current_autocast))
    local inner = nil
    local model = mlp(1)
    local forward = model.forward
    model.forward = function(self, x)
      inner = current_autocast()
      return forward(self, x)
    end
    a:prepare(model)(accel.randn(2, 4))
    assert.is_nil(inner) -- the prepared forward does not autocast either
    -- Accelerate 1.15 (torch 2.15 CPU) wraps that forward in autocast(enabled=False) and convert_outputs_to_fp32:
    -- inside an enabled accelerator.autocast the GEMM stays float32 and a bf16 output comes back float32
    local Half = nn.Module:extend("Half")
    function Half:init() self.l = nn.Linear(3, 2) end
    function Half:forward(x)
      local y = self.l(x)
      return y:bfloat16(), y.dtype
    end
    local half = a:prepare(Half())
    local out, gemm = a:autocast(accel.AutocastKwargs{enabled = true}, function() return half(accel.randn(2, 3)) end)
    assert.are.equal(accel.float32, gemm)
    assert.are.equal(accel.float32, out.dtype)
    local b = accel.Accelerator{mixed_precision = "bf16"}
    assert.are.equal(accel.bfloat16, b:autocast(current_autocast))
    assert.is_nil(b:autocast(accel.AutocastKwargs{enabled = false}, current_autocast)) -- Accelerate's autocast(handler)
  end,
  cache_enabled = function()
    -- casts are never cached here (a weight changed in place inside the region is cast afresh); autocast stays on
    for _, v in ipairs({true, false}) do
      local a = accel.Accelerator{mixed_precision = "bf16", kwargs_handlers = {accel.AutocastKwargs{cache_enabled = v}}}
      assert.are.equal(accel.bfloat16, a:autocast(current_autocast))
    end
    -- torch 2.15 (cache on): F.linear before and after w.mul_(2) under no_grad in one autocast region gives the
    -- ratio 1.0 (its stale cached cast); here the weight is cast afresh: 2.0
    local a = accel.Accelerator{mixed_precision = "bf16", kwargs_handlers = {accel.AutocastKwargs{cache_enabled = true}}}
    local x, w = accel.ones(2, 3), nn.Parameter(accel.ones(4, 3))
    local ratio = a:autocast(function()
      local y1 = accel.nn.functional.linear(x, w)
      accel.no_grad(function() w:mul_(2) end)
      return (accel.nn.functional.linear(x, w):float() / y1:float()):mean():item()
    end)
    assert.are.equal(2.0, ratio)
  end,
}

-- The scaling state an fp8 Accelerator with FP8RecipeKwargs(o) gives a
-- prepared Linear (the option reaches the recipe the Linear runs).
local function fp8_meta(o)
  local a = accel.Accelerator{mixed_precision = "fp8", kwargs_handlers = {accel.FP8RecipeKwargs(o)}}
  return a:prepare(accel.nn.Linear(3, 2)).fp8_meta
end
CASES.FP8RecipeKwargs = {
  fp8_format = function()
    assert.are.equal("E4M3", accel.FP8RecipeKwargs{fp8_format = "e4m3"}.fp8_format)
    error_matching('fp8_format must be "HYBRID", "E4M3" or "E5M2", got "E3M4"', function()
      accel.FP8RecipeKwargs{fp8_format = "E3M4"}
    end)
    assert.are.equal(accel.float8_e5m2, fp8_meta({fp8_format = "HYBRID"}).grad_output.dtype)
    assert.are.equal(accel.float8_e4m3fn, fp8_meta({fp8_format = "E4M3"}).grad_output.dtype)
  end,
  amax_history_len = function()
    assert.are.equal(16, accel.FP8RecipeKwargs{amax_history_len = 16}.amax_history_len)
    error_matching("amax_history_len = 0 is not supported", function() accel.FP8RecipeKwargs{amax_history_len = 0} end)
    assert.are.equal(16, fp8_meta({amax_history_len = 16}).input.len)
  end,
  amax_compute_algo = function()
    assert.are.equal("max", accel.FP8RecipeKwargs{amax_compute_algo = "MAX"}.amax_compute_algo)
    error_matching('amax_compute_algo must be "max" or "most_recent"', function()
      accel.FP8RecipeKwargs{amax_compute_algo = "mean"}
    end)
    assert.are.equal("max", fp8_meta({amax_compute_algo = "max"}).weight.algo)
  end,
  margin = function()
    error_matching("margin = %-1 is not supported", function() accel.FP8RecipeKwargs{margin = -1} end)
    assert.are.equal(1, fp8_meta({margin = 1}).input.margin)
  end,
  interval = function()
    error_matching("interval = 0 is not supported", function() accel.FP8RecipeKwargs{interval = 0} end)
    assert.are.equal(2, fp8_meta({interval = 2}).grad_output.interval)
  end,
  use_autocast_during_eval = function()
    -- false (Accelerate's default): in eval mode the fp8 Linear runs in bf16 and its scales stay put
    local a = accel.Accelerator{mixed_precision = "fp8", kwargs_handlers = {
      accel.FP8RecipeKwargs{use_autocast_during_eval = false}}}
    local lin = a:prepare(accel.nn.Linear(3, 2)):eval()
    local before = lin.fp8_meta.input.scale
    lin(accel.randn(4, 3))
    lin(accel.randn(4, 3)) -- (in train mode two forwards move the scale)
    assert.are.equal(before, lin.fp8_meta.input.scale)
    error_matching("use_autocast_during_eval = true is not supported", function()
      accel.FP8RecipeKwargs{use_autocast_during_eval = true}
    end)
    error_matching("option opt_level is Accelerate's but not supported here", function()
      accel.FP8RecipeKwargs{opt_level = "O2"}
    end)
    error_matching('requires mixed_precision = "fp8", got "bf16"', function()
      accel.Accelerator{mixed_precision = "bf16", kwargs_handlers = {accel.FP8RecipeKwargs{}}}
    end)
    assert.are.equal(3, accel.TERecipeKwargs{margin = 3}.margin) -- Accelerate 1.x's name for the same recipe
  end,
}

CASES.GradientAccumulationPlugin = {
  num_steps = function()
    assert.are.same({false, false, true, false, true},
      sync_pattern({gradient_accumulation_plugin = {num_steps = 3}}, 5))
    error_matching("num_steps = 0 is not supported", function() accel.GradientAccumulationPlugin{num_steps = 0} end)
  end,
  adjust_scheduler = function()
    -- Accelerate's GradientState reads adjust_scheduler from the plugin's
    -- non-default values with a default of false, so neither value changes
    -- the schedule: one StepLR step per optimizer step.
    for _, v in ipairs({true, false}) do
      local o = {gradient_accumulation_plugin = {num_steps = 2, adjust_scheduler = v}}
      assert.are.same({1, 0.5, 0.5, 0.25}, lr_sequence(o, 4))
    end
  end,
  sync_with_dataloader = function()
    assert.are.same({false, true, true}, sync_pattern({gradient_accumulation_plugin = {num_steps = 2}}, 3))
    assert.are.same({false, true, false},
      sync_pattern({gradient_accumulation_plugin = {num_steps = 2, sync_with_dataloader = false}}, 3))
  end,
  sync_each_batch = function()
    -- one process: nothing to synchronise, the optimizer steps as before
    -- (the reducer syncing every micro-batch on N processes:
    -- accelerator_parity_test.lua)
    assert.are.same({false, true, true},
      sync_pattern({gradient_accumulation_plugin = {num_steps = 2, sync_each_batch = true}}, 3))
    local a = accel.Accelerator{gradient_accumulation_plugin = {num_steps = 2, sync_each_batch = true}}
    assert.is_true(a.gradient_state.sync_each_batch)
  end,
}

CASES.DataLoaderConfiguration = {
  split_batches = function()
    assert.is_true(shard_options({dataloader_config = {split_batches = true}}).split_batches)
  end,
  even_batches = function()
    assert.is_false(shard_options({dataloader_config = {even_batches = false}}).even_batches)
  end,
  dispatch_batches = function()
    shard_options({dataloader_config = {dispatch_batches = false}})
    error_matching("dispatch_batches = true is not supported: every process iterates its own shard", function()
      accel.DataLoaderConfiguration{dispatch_batches = true}
    end)
  end,
  use_seedable_sampler = function()
    -- the prepared order depends only on (seed, epoch): with the same seed
    -- two loaders agree, and the next epoch reshuffles
    local function order(epoch)
      local a = accel.Accelerator{dataloader_config = {use_seedable_sampler = true}}
      local l = a:prepare(data.DataLoader(data.TensorDataset(accel.arange(16)), {batch_size = 16, shuffle = true,
        seed = 5}))
      l:set_epoch(epoch)
      for xb in l:iter() do return xb:tolist() end
    end
    assert.are.same(order(0), order(0))
    assert.are_not.same(order(0), order(1))
  end,
  data_seed = function()
    -- with use_seedable_sampler, the prepared order is the one of a loader seeded with data_seed
    local function first_batch(dlc, seed)
      local a = accel.Accelerator{dataloader_config = dlc}
      local l = a:prepare(data.DataLoader(data.TensorDataset(accel.arange(16)), {batch_size = 16, shuffle = true,
        seed = seed}))
      for xb in l:iter() do return xb:tolist() end
    end
    local seeded = first_batch({use_seedable_sampler = true, data_seed = 11}, 5)
    assert.are.same(first_batch({}, 11), seeded)
    assert.are_not.same(first_batch({}, 5), seeded)
    assert.are.same(first_batch({}, 5), first_batch({data_seed = 11}, 5)) -- unused without the seedable sampler
    -- a seed that is no integer is refused when configured (Accelerate fails later, in manual_seed)
    expect_error(function() accel.DataLoaderConfiguration{data_seed = 1.5} end, "data_seed = 1.5", "integer")
    expect_error(function() accel.DataLoaderConfiguration{data_seed = 2 ^ 70} end, "data_seed", "integer")
  end,
  use_stateful_dataloader = function()
    -- prepared loaders always save their position: both values are accepted
    for _, v in ipairs({true, false}) do
      assert.are.equal(v, accel.DataLoaderConfiguration{use_stateful_dataloader = v}.use_stateful_dataloader)
    end
    error_matching("use_stateful_dataloader", function() accel.DataLoaderConfiguration{use_stateful_dataloader = 1} end)
  end,
  non_blocking = function()
    -- on the CPU there is no copy to make; on sim the copy is queued (staged)
    local _, l = shard_options({dataloader_config = {non_blocking = true}})
    for xb in l:iter() do assert.are.equal(RUN_DEVICE, tostring(xb.device)) end
    -- a copy to a GPU would be synchronous: refused there (a faked cuda:0 state)
    local a = accel.Accelerator{dataloader_config = {non_blocking = true}}
    local state = accel.PartialState()
    local before = rawget(state, "device")
    rawset(state, "device", "cuda:0")
    local ok, err = pcall(a.prepare, a, data.DataLoader(data.TensorDataset(accel.arange(4)), {batch_size = 2}))
    rawset(state, "device", before)
    assert.is_false(ok)
    assert.matches("non_blocking = true is not supported on cuda:0", err)
  end,
}

CASES.find_executable_batch_size = {
  starting_batch_size = function()
    local seen = nil
    accel.find_executable_batch_size(function(bs) seen = bs end, {starting_batch_size = 24})()
    assert.are.equal(24, seen)
    -- accelerate 1.16: calling the wrapper with the batch size too is a TypeError "Batch size was passed into
    -- `f` as the first argument when called"
    local g = accel.find_executable_batch_size(function(bs, x) return bs, x end, {starting_batch_size = 8})
    assert.are.same({8, "x"}, {g("x")})
    error_matching("the batch size was passed as the first argument when called", function() g(64, "x") end)
  end,
  reduce_batch_size_fn = function()
    local seen = {}
    accel.find_executable_batch_size(function(bs)
      seen[#seen + 1] = bs
      if bs > 5 then accel.empty(2 ^ 40) end
    end, {starting_batch_size = 8, reduce_batch_size_fn = function() return 5 end})()
    assert.are.same({8, 5}, seen)
    error_matching("reduce_batch_size_fn returned 2.5, expected a whole number", function()
      accel.find_executable_batch_size(function() accel.empty(2 ^ 40) end,
        {starting_batch_size = 8, reduce_batch_size_fn = function() return 2.5 end})()
    end)
  end,
}

-- LocalSGD's averaging shows on several processes: ddp_test.lua
-- (helpers/ddp_local_sgd.lua) checks it on 2 ranks; here what one process shows.
CASES.LocalSGD = {
  accelerator = function()
    local m = nn.Linear(2, 1)
    error_matching("LocalSGD: option accelerator is required", function()
      return accel.LocalSGD{model = m, local_sgd_steps = 1}
    end)
    error_matching("no DeepSpeed or MegatronLM%); distributed_type is DEEPSPEED", function()
      return accel.LocalSGD{accelerator = accel.Accelerator{deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 1}},
        model = m, local_sgd_steps = 1}
    end)
  end,
  model = function()
    local acc, m = accel.Accelerator{}, nn.Linear(2, 1)
    assert.are.equal(m, accel.LocalSGD{accelerator = acc, model = m, local_sgd_steps = 1}.model)
    error_matching("LocalSGD: option model must be a table, got number", function()
      return accel.LocalSGD{accelerator = acc, model = 1, local_sgd_steps = 1}
    end)
  end,
  local_sgd_steps = function()
    local ls = accel.LocalSGD{accelerator = accel.Accelerator{}, model = nn.Linear(2, 1), local_sgd_steps = 3}
    assert.are.equal(3, ls.local_sgd_steps)
    error_matching("local_sgd_steps must be a positive integer, got 2.5", function()
      return accel.LocalSGD{accelerator = accel.Accelerator{}, model = nn.Linear(2, 1), local_sgd_steps = 2.5}
    end)
  end,
  enabled = function()
    -- on one process Accelerate's LocalSGD is disabled whatever enabled says
    for _, on in ipairs({true, false}) do
      local ls = accel.LocalSGD{accelerator = accel.Accelerator{}, model = nn.Linear(2, 1), local_sgd_steps = 1,
        enabled = on}
      assert.is_false(ls.enabled)
    end
  end,
}

CASES.save_model = {
  max_shard_size = function()
    local dir = tmpdir()
    local a = accel.Accelerator()
    a:save_model(a:prepare(mlp(1)), dir, {max_shard_size = 100})
    local files = C.fs_listdir(dir)
    table.sort(files)
    assert.is_true(#files > 2, "several shards and an index")
    assert.are.equal("model.safetensors.index.json", files[#files])
    support.remove_tree(dir)
  end,
  safe_serialization = function()
    error_matching("only safetensors is written", function()
      accel.Accelerator():save_model(mlp(1), "x", {safe_serialization = false})
    end)
  end,
}

CASES.split_between_processes = {
  apply_padding = function()
    -- one process: the input itself; the padding rule at N processes is in accelerator_parity_spec.lua
    local ops = require("accel.operations")
    assert.are.same({"C", "C"}, ops.split({"A", "B", "C"}, 1, 2, true))
    assert.are.same({"C"}, ops.split({"A", "B", "C"}, 1, 2, false))
  end,
}

CASES.PartialState = {
  cpu = function()
    -- the state's device is picked when it is made: a fresh one, then back
    local state = require("accel.state")
    state.reset_state()
    local ok, st = pcall(accel.PartialState, {cpu = true})
    state.reset_state()
    assert(ok, st)
    assert.are.equal("cpu", tostring(st.device))
    assert.are.equal(RUN_DEVICE, tostring(accel.PartialState().device))
    error_matching("unknown option gpu", function() accel.PartialState{gpu = true} end)
  end,
}

CASES.prepare_data_loader = {
  device_placement = function()
    local function first_batch(a, o)
      local l = a:prepare_data_loader(data.DataLoader(data.TensorDataset(accel.arange(4, {device = "cpu"})),
        {batch_size = 2}), o)
      return l:iter()()
    end
    local a = accel.Accelerator()
    assert.are.equal("cpu", tostring(first_batch(a, {device_placement = false}).device)) -- left where it was
    assert.are.equal(RUN_DEVICE, tostring(first_batch(a).device))
    local off = accel.Accelerator{device_placement = false}
    assert.are.equal(RUN_DEVICE, tostring(first_batch(off, {device_placement = true}).device))
    error_matching("unknown option slice_fn_for_dispatch", function()
      a:prepare_data_loader(data.DataLoader(data.TensorDataset(accel.arange(4))), {slice_fn_for_dispatch = 1})
    end)
  end,
}

CASES.prepare_model = {
  device_placement = function()
    local a = accel.Accelerator()
    local model = mlp(1):to("cpu")
    assert.are.equal(model, a:prepare_model(model, {device_placement = false}))
    assert.are.equal("cpu", tostring(model:parameters()[1].device)) -- left where it was
    local placed = a:prepare_model(mlp(1):to("cpu"))
    assert.are.equal(RUN_DEVICE, tostring(placed:parameters()[1].device))
    error_matching("unknown option evaluation_mode", function() a:prepare_model(mlp(1), {evaluation_mode = true}) end)
  end,
}

CASES.prepare = {
  device_placement = function() -- one boolean per object, as Accelerate's prepare(*args, device_placement=)
    local a = accel.Accelerator()
    local kept, placed = mlp(1):to("cpu"), mlp(2):to("cpu")
    assert.are.equal(2, select("#", a:prepare(kept, placed, {device_placement = {false, true}})))
    assert.are.equal("cpu", tostring(kept:parameters()[1].device)) -- left where it was
    assert.are.equal(RUN_DEVICE, tostring(placed:parameters()[1].device))
    error_matching("should be a list with 1 elements", function() a:prepare(mlp(3), {device_placement = {}}) end)
  end,
}

CASES.prepare_optimizer = {
  device_placement = function() -- false: the state is not moved (AcceleratedOptimizer(device_placement=False))
    local model = mlp(1):to("cpu")
    local opt = optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
    model(accel.ones(2, 4, {device = "cpu"})):sum():backward()
    opt:step()
    local a = accel.Accelerator()
    assert.is_false(a:prepare_optimizer(opt, {device_placement = false}).device_placement)
    a:prepare_model(model)
    assert.are.equal("cpu", tostring(opt.state[model:parameters()[1]].momentum_buffer.device))
    error_matching("prepare_optimizer: unknown option bogus", function() a:prepare_optimizer(opt, {bogus = 1}) end)
  end,
}

CASES.unwrap_model = {
  keep_fp32_wrapper = function()
    local a = accel.Accelerator{mixed_precision = "bf16"}
    local model = mlp(1)
    local plain = model.forward
    a:prepare(model)
    assert.are_not.equal(plain, model.forward) -- the autocast / float32-output patch
    a:unwrap_model(model, {keep_fp32_wrapper = true})
    assert.are_not.equal(plain, model.forward)
    a:unwrap_model(model, {keep_fp32_wrapper = false})
    assert.are.equal(plain, model.forward)
  end,
  -- accelerate 1.16: unwrap_model(model, keep_torch_compile=False) of a model never compiled is the model
  keep_torch_compile = function()
    local a = accel.Accelerator()
    local model = a:prepare(mlp(1))
    assert.are.equal(model, a:unwrap_model(model, {keep_torch_compile = false}))
    assert.are.equal(model, a:unwrap_model(model, {keep_torch_compile = true}))
    assert.are.equal(model, a:unwrap_model(model, true)) -- positional keep_fp32_wrapper, as Accelerate's
    error_matching("keep_torch_compile must be a boolean", function() a:unwrap_model(model, {keep_torch_compile = 1}) end)
  end,
}

-- accelerate 1.16: get_state_dict(model, unwrap=False) on one process gives the plain names (no wrapper there);
-- under DDP on 2 processes "module.bias", "module.weight" (helpers/coll_ops.lua, run by collectives_test.lua)
CASES.get_state_dict = {
  unwrap = function()
    local a = accel.Accelerator()
    local model = a:prepare(nn.Linear(2, 1))
    local names = {}
    for k in pairs(a:get_state_dict(model, {unwrap = false})) do names[#names + 1] = k end
    table.sort(names)
    assert.are.same({"bias", "weight"}, names)
    error_matching("get_state_dict: unknown option unwarp", function() a:get_state_dict(model, {unwarp = false}) end)
    assert.is_truthy(a:get_state_dict(model, false).weight) -- positional, as Accelerate's get_state_dict(model, False)
  end,
}

CASES.backward = {
  gradient = function()
    local a = accel.Accelerator()
    local w = nn.Parameter(accel.ones(2))
    a:backward(w * 3, {gradient = accel.tensor({1, 2})})
    assert.are.same({3, 6}, w.grad:tolist())
    error_matching("unknown option create_graph", function() a:backward((w * 3):sum(), {create_graph = true}) end)
  end,
  -- Accelerate's backward(loss, **kwargs) hands retain_graph to loss.backward
  retain_graph = function()
    local a = accel.Accelerator()
    local w = nn.Parameter(accel.ones(2))
    local loss = (w * w):sum()
    a:backward(loss, {retain_graph = true})
    a:backward(loss)
    assert.are.same({4, 4}, w.grad:tolist())
    error_matching("a second time", function() a:backward(loss) end)
  end,
}

-- the Accelerator's collectives on one process (their N-process effects: accelerator_parity_spec.lua, ddp_test.lua)
CASES.reduce = {
  reduction = function()
    local a = accel.Accelerator()
    assert.are.same({1, 2}, a:reduce(accel.tensor({1.0, 2.0}), {reduction = "mean"}):tolist())
    error_matching("unknown option reductio", function() a:reduce(accel.tensor({1.0}), {reductio = "max"}) end)
  end,
  -- accelerate 1.16: scale is applied on XLA only (its docstring: "only valid on XLA"); reduce(t, "sum", 2) on
  -- CPUs gives the plain sum, here with a warning that says so
  scale = function()
    local code = "print(table.concat(accel.Accelerator():reduce(accel.tensor({1.0, 2.0}), {reduction = 'sum', "
      .. "scale = 2}):tolist(), ' '))"
    local out = support.command_output(("%s -e %s 2>&1"):format(support.shell_quote(support.ACCEL_LUA), support.shell_quote(code)))
    assert.matches("^accel%-lua: warning: reduce: scale = 2 is not applied: Accelerate applies it on XLA", out)
    assert.matches("\n1%.?0? 2%.?0?\n$", out) -- (LuaJIT prints 1 2)
  end,
}

CASES.pad_across_processes = {
  dim = function()
    local a = accel.Accelerator()
    assert.are.same({2, 3}, {a:pad_across_processes(accel.ones(2, 3), {dim = 2}):size(1), 3})
    assert.are.same({2, 3}, a:pad_across_processes(accel.ones(2, 3), 2, 0, true).shape) -- Accelerate's positional form
    error_matching("unknown option dims", function() a:pad_across_processes(accel.ones(2), {dims = 1}) end)
  end,
  pad_index = function()
    assert.are.same({1, 1}, accel.Accelerator():pad_across_processes(accel.ones(2), {pad_index = 5}):tolist())
  end,
  pad_first = function()
    assert.are.same({1, 1}, accel.Accelerator():pad_across_processes(accel.ones(2), {pad_first = true}):tolist())
  end,
}

CASES.broadcast = {
  from_process = function()
    local a = accel.Accelerator()
    assert.are.same({1, 2}, a:broadcast(accel.tensor({1.0, 2.0}), {from_process = 0}):tolist())
    error_matching("unknown option from_proces", function() a:broadcast(accel.ones(1), {from_proces = 1}) end)
  end,
}

CASES.broadcast_object_list = {
  from_process = function()
    local a = accel.Accelerator()
    local list = {1, "two"}
    assert.are.equal(list, a:broadcast_object_list(list, {from_process = 0}))
    error_matching("from_process must be a process index in 0..0, got 1", function()
      a:broadcast_object_list({1}, {from_process = 1})
    end)
    error_matching("unknown option from_proces", function() a:broadcast_object_list({1}, {from_proces = 0}) end)
  end,
}

-- accel.utils' Accelerate utilities (device_specific on several processes: collectives_test.lua)
CASES.set_seed = {
  device_specific = function()
    accel.set_seed(42, {device_specific = true}) -- one process: index 0
    assert.are.equal(42, accel.initial_seed())
    accel.set_seed(42, true)
    assert.are.equal(42, accel.initial_seed())
  end,
  deterministic = function()
    accel.utils.set_seed(1, {deterministic = false})
    if accel.cuda.is_available() then -- (a GPU run: the CUDA atomics have no deterministic form)
      error_matching("set_seed: deterministic = true is not supported on a GPU", function() accel.set_seed(1, false, true) end)
    else -- every CPU op is deterministic: accepted, and it seeds
      accel.set_seed(7, false, true)
      assert.are.equal(7, accel.initial_seed())
    end
    error_matching("set_seed: seed must be an integer, got", function() accel.set_seed(2 ^ 63) end)
  end,
}

CASES.send_to_device = {
  non_blocking = function()
    local t = accel.ones(2, {device = "cpu"})
    assert.are.equal(t, accel.utils.send_to_device({t}, "cpu", {non_blocking = true})[1])
    error_matching("send_to_device: non_blocking = true is not supported on cuda:0", function()
      accel.utils.send_to_device({t}, "cuda:0", {non_blocking = true})
    end)
  end,
  skip_keys = function()
    local out = accel.utils.send_to_device({a = accel.ones(1, {device = "cpu"}), b = accel.ones(1, {device = "cpu"})},
      "sim", {skip_keys = {"a"}})
    assert.are.same({"cpu", "sim"}, {out.a.device.type, out.b.device.type})
    error_matching("skip_keys must be a string or a list of strings, got number", function()
      accel.utils.send_to_device({}, "cpu", {skip_keys = 1})
    end)
  end,
}

-- load_checkpoint_in_model (loading itself: checkpoint_spec.lua). Accelerate 1.16's big-model options have no
-- engine here and are refused by name; dtype changes nothing (Accelerate without a device_map passes the
-- checkpoint's tensors to set_model_state_dict, which copies them into the model's dtype).
local function with_checkpoint(fn)
  local dir = support.tmpdir()
  local src = mlp(3)
  accel.save(src:state_dict(), dir .. "/m.safetensors")
  fn(dir .. "/m.safetensors", src)
  support.remove_tree(dir)
end
local function refused(key, value)
  return function()
    with_checkpoint(function(path)
      error_matching(key .. " = " .. tostring(value) .. " is not supported: there is no big%-model dispatch", function()
        accel.load_checkpoint_in_model(mlp(1), path, {[key] = value})
      end)
    end)
  end
end
CASES.load_checkpoint_in_model = {
  strict = function()
    with_checkpoint(function(path, src)
      local m = mlp(1)
      m.extra = accel.nn.Parameter(accel.ones(2))
      accel.load_checkpoint_in_model(m, path) -- strict = false: the extra parameter keeps its values
      assert.are.same({1, 1}, m.extra:tolist())
      assert.are.same(src:state_dict()["0.weight"]:tolist(), m:state_dict()["0.weight"]:tolist())
      error_matching('Missing key%(s%) in state_dict: "extra"', function()
        accel.load_checkpoint_in_model(m, path, {strict = true})
      end)
    end)
  end,
  dtype = function()
    with_checkpoint(function(path, src)
      local m = mlp(1)
      accel.load_checkpoint_in_model(m, path, {dtype = accel.bfloat16})
      assert.are.equal(accel.float32, m:state_dict()["0.weight"].dtype)
      assert.are.same(src:state_dict()["0.weight"]:tolist(), m:state_dict()["0.weight"]:tolist())
    end)
  end,
  device_map = refused("device_map", "auto"),
  offload_folder = refused("offload_folder", "off"),
  offload_state_dict = refused("offload_state_dict", true),
  offload_buffers = refused("offload_buffers", true),
  keep_in_fp32_modules = refused("keep_in_fp32_modules", "x"),
  offload_8bit_bnb = refused("offload_8bit_bnb", true),
  broadcast_from_rank0 = refused("broadcast_from_rank0", true),
  full_state_dict = function()
    with_checkpoint(function(path)
      accel.load_checkpoint_in_model(mlp(1), path, {full_state_dict = true})
      error_matching("full_state_dict = false is not supported", function()
        accel.load_checkpoint_in_model(mlp(1), path, {full_state_dict = false})
      end)
    end)
  end,
}

-- skip_first_batches(loader, num_batches) with Accelerate's keyword as an options table
CASES.skip_first_batches = {
  num_batches = function()
    local loader = data.DataLoader(data.TensorDataset(accel.arange(6)), {batch_size = 2})
    local a = accel.Accelerator()
    for _, skipped in ipairs({a:skip_first_batches(loader, {num_batches = 2}),
      accel.utils.skip_first_batches(loader, {num_batches = 2}), accel.skip_first_batches(loader, 2)}) do
      local seen = {}
      for x in skipped:iter() do seen[#seen + 1] = x:tolist() end
      assert.are.same({{4, 5}}, seen)
    end
    error_matching("skip_first_batches: unknown option num_batch %(known: num_batches%)", function()
      a:skip_first_batches(loader, {num_batch = 2})
    end)
  end,
}

CASES.log = {
  step = function()
    local seen = {}
    local T = {name = "steps", requires_logging_directory = false}
    function T:log(values, step) seen[#seen + 1] = step end
    function T:store_init_configuration() end
    function T:finish() end
    local a = accel.Accelerator{log_with = T}
    a:init_trackers("p")
    a:log({x = 1}, {step = 7})
    a:log({x = 1}, 8)
    assert.are.same({7, 8}, seen)
    error_matching("unknown option stp", function() a:log({x = 1}, {stp = 3}) end)
  end,
  log_kwargs = function()
    local seen = {}
    local T = accel.tracking.GeneralTracker:extend{name = "kw"}
    function T:log(_, step, kwargs) seen[#seen + 1] = {step, kwargs} end
    local a = accel.Accelerator{log_with = T:new{}}
    a:init_trackers("p")
    a:log({x = 1}, {step = 2, log_kwargs = {kw = {a = 1}}})
    a:log({x = 1}, 3, {kw = {b = 2}})
    assert.are.same({{2, {a = 1}}, {3, {b = 2}}}, seen)
    error_matching("log_kwargs.other names no tracker", function() a:log({x = 1}, 4, {other = {}}) end)
  end,
}

-- accelerate 1.16: get_tracker("my", unwrap=False) is the tracker, unwrap=True its inner object
CASES.get_tracker = {
  unwrap = function()
    local T = accel.tracking.GeneralTracker:extend{name = "wrapped"}
    function T:log() end
    T.tracker = "INNER"
    local t = T:new{}
    local a = accel.Accelerator{log_with = t}
    a:init_trackers("p")
    assert.are.equal(t, a:get_tracker("wrapped", {unwrap = false}))
    assert.are.equal("INNER", a:get_tracker("wrapped", {unwrap = true}))
    assert.are.equal("INNER", a:get_tracker("wrapped", true))
    error_matching("get_tracker: unknown option unwarp", function() a:get_tracker("wrapped", {unwarp = true}) end)
    a:end_training()
  end,
}

CASES.save = {
  safe_serialization = function()
    local dir = tmpdir()
    local a = accel.Accelerator()
    a:save({w = accel.ones(2)}, dir .. "/w.safetensors", {safe_serialization = true})
    assert.are.same({1, 1}, accel.load(dir .. "/w.safetensors").w:tolist())
    error_matching("never pickle", function() a:save({w = accel.ones(2)}, dir .. "/x", {safe_serialization = false}) end)
    support.remove_tree(dir)
  end,
}

CASES.save_state = {
  safe_serialization = function()
    local dir = tmpdir()
    local a = accel.Accelerator()
    a:prepare(mlp(1))
    a:save_state(dir .. "/ck", {safe_serialization = true})
    assert.is_true(C.fs_stat(dir .. "/ck/model.safetensors") ~= nil)
    error_matching("never pickle", function() a:save_state(dir .. "/ck2", {safe_serialization = false}) end)
    assert.is_nil(C.fs_stat(dir .. "/ck2"))
    error_matching("load_state: unknown option bogus %(known: strict%)",
      function() a:load_state(dir .. "/ck", {bogus = 1}) end)
    support.remove_tree(dir)
  end,
}

CASES.load_state = {
  strict = function() -- Accelerate passes strict on to load_state_dict: an extra parameter is left as it is
    local dir = tmpdir()
    local a = accel.Accelerator()
    a:prepare(mlp(1))
    a:save_state(dir .. "/ck")
    local b = accel.Accelerator()
    local m = b:prepare(mlp(2))
    m.extra = accel.nn.Parameter(accel.ones(2))
    error_matching("which the checkpoint lacks", function() b:load_state(dir .. "/ck", {strict = true}) end)
    b:load_state(dir .. "/ck", {strict = false})
    assert.are.same({1, 1}, m.extra:tolist())
    error_matching("load_state: option strict must be a boolean", function() b:load_state(dir .. "/ck", {strict = 1}) end)
    support.remove_tree(dir)
  end,
}

describe("option tables", function()
  it("every key of every option table has a case here, and every case a key", function()
    local missing, extra, n = {}, {}, 0
    for name, spec in pairs(SPECS) do
      for key in pairs(spec) do
        n = n + 1
        if not (CASES[name] and CASES[name][key]) then missing[#missing + 1] = name .. "." .. key end
      end
    end
    for name, cases in pairs(CASES) do
      for key in pairs(cases) do
        if not (SPECS[name] and SPECS[name][key] ~= nil) then extra[#extra + 1] = name .. "." .. key end
      end
    end
    table.sort(missing)
    table.sort(extra)
    assert.are.same({}, missing, "options without a test case")
    assert.are.same({}, extra, "cases for options that do not exist")
    assert.is_true(n > 75, ("only %d options registered"):format(n))
  end)

  it("the registry is read-only", function()
    error_matching("read%-only", function() SPECS.Accelerator.new_key = "any" end)
    error_matching("read%-only", function() SPECS.Other = {} end)
  end)
end)

local names = {}
for name in pairs(CASES) do names[#names + 1] = name end
table.sort(names)
for _, name in ipairs(names) do
  describe(name, function()
    local keys = {}
    for key in pairs(CASES[name]) do keys[#keys + 1] = key end
    table.sort(keys)
    for _, key in ipairs(keys) do it(key, CASES[name][key]) end
  end)
end
