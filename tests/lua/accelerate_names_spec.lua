-- accelerate_names_spec: the table of Accelerate names (docs/accelerate-names.md)
-- stays true.
-- Every public Accelerator method is listed there; every Accelerate member
-- or option we refuse is listed and raises naming itself and the reason
-- (never Lua's "attempt to call a nil value", never silently accepted).
local accel = require("accel")
local acc_mod = require("accel.accelerator")

local NAMES_DOC = "docs/accelerate-names.md"

local function names_table()
  local f = assert(io.open(NAMES_DOC, "rb"))
  local text = f:read("a")
  f:close()
  local start = assert(text:find("| Accelerate name | here |", 1, true), NAMES_DOC .. " has no names table")
  local stop = text:find("\n\n", start, true) or #text
  return text:sub(start, stop)
end

local function listed(tbl, name)
  return tbl:find("`" .. name .. "`", 1, true) ~= nil or tbl:find("`" .. name .. "(", 1, true) ~= nil
    or tbl:find(", " .. name .. ",", 1, true) ~= nil or tbl:find("{" .. name .. ",", 1, true) ~= nil
    or tbl:find(", " .. name .. "}", 1, true) ~= nil
end

describe("the Accelerate names table (" .. NAMES_DOC .. ")", function()
  local tbl = names_table()

  it("lists every public Accelerator method", function()
    local missing = {}
    for k, v in pairs(acc_mod.Accelerator_class) do
      if type(v) == "function" and not k:match("^_") and not listed(tbl, k) then missing[#missing + 1] = k end
    end
    table.sort(missing)
    assert.are.same({}, missing)
  end)

  it("quotes the grad_fn of t:to(dev) as t.grad_fn gives it (the printout adds PyTorch's 0)", function()
    local row = assert(tbl:match("\n(| `Tensor.to%(device%)`[^\n]*)"), "no Tensor.to(device) row")
    local quoted = assert(row:match("`grad_fn` `(%w+)`"), row)
    local other = accel.get_default_device().type == "sim" and "cpu" or "sim"
    local moved = accel.ones(2, {requires_grad = true}):to(other)
    assert.are.equal(quoted, moved.grad_fn)
    assert.truthy(tostring(moved):find("grad_fn=<" .. quoted .. "0>", 1, true), tostring(moved))
  end)

  it("lists every refused member, and reading one raises naming it", function()
    local a = accel.Accelerator{}
    local n = 0
    for name, why in pairs(acc_mod.REFUSED_MEMBERS) do
      n = n + 1
      assert.is_true(listed(tbl, name), name .. " is not in " .. NAMES_DOC)
      local ok, err = pcall(function() return a[name] end)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("Accelerator." .. name .. " is not supported here: " .. why, 1, true), err)
      assert.truthy(tostring(err):find("accelerate_names_spec.lua:%d+"), err)
    end
    assert.is_true(n >= 10)
  end)

  it("refuses Accelerate's constructor options we lack, naming each", function()
    for _, opt in ipairs({"rng_types", "dynamo_backend", "dynamo_plugin", "torch_tp_plugin", "megatron_lm_plugin",
                          "deepspeed_plugins", "parallelism_config"}) do
      assert.is_true(listed(tbl, opt), opt .. " is not in " .. NAMES_DOC)
      local ok, err = pcall(accel.Accelerator, {[opt] = {}})
      assert.is_false(ok)
      assert.truthy(tostring(err):find("option " .. opt .. " is Accelerate's but not supported here", 1, true), err)
    end
    -- dynamo_backend's "no" (Accelerate's DynamoBackend.NO, any case) asks for nothing and is accepted, as
    -- `launch --dynamo_backend no` is; any other backend is refused
    for _, v in ipairs({"no", "NO"}) do
      assert.are.equal("no", accel.Accelerator{cpu = true, dynamo_backend = v}.mixed_precision)
    end
    local refused_ok, refused_err = pcall(accel.Accelerator, {cpu = true, dynamo_backend = "inductor"})
    assert.is_false(refused_ok)
    assert.truthy(tostring(refused_err):find('option dynamo_backend is Accelerate\'s but not supported here: ' ..
      'torch.compile does not exist here (only "no" is accepted)', 1, true), refused_err)
    -- a name Accelerate does not have either stays "unknown"
    local ok, err = pcall(accel.Accelerator, {no_such_option = 1})
    assert.is_false(ok)
    assert.truthy(tostring(err):find("unknown option no_such_option", 1, true), err)
  end)

  it("lists the configuration classes we provide, and they exist", function()
    for _, name in ipairs({"PartialState", "ProjectConfiguration", "DistributedDataParallelKwargs",
                           "InitProcessGroupKwargs", "GradScalerKwargs", "AutocastKwargs", "GradientAccumulationPlugin",
                           "DataLoaderConfiguration", "FP8RecipeKwargs", "DeepSpeedPlugin",
                           "FullyShardedDataParallelPlugin", "find_executable_batch_size", "LocalSGD"}) do
      assert.is_true(listed(tbl, name), name .. " is not in " .. NAMES_DOC)
      assert.is_truthy(accel[name], "accel." .. name .. " does not exist")
    end
  end)

  it("lists DummyOptim / DummyScheduler as not provided; reading accel's is an error naming it", function()
    for _, name in ipairs({"DummyOptim", "DummyScheduler", "ProfileKwargs", "AcceleratorState", "init_empty_weights"}) do
      assert.is_true(listed(tbl, name), name .. " is not in " .. NAMES_DOC)
      local ok, err = pcall(function() return accel[name] end)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("accel." .. name .. " is Accelerate's but not provided by accel-lua", 1, true), err)
      -- accelerate.utils exports DummyOptim, DummyScheduler and ProfileKwargs too: accel.utils.X raises alike
      ok, err = pcall(function() return accel.utils[name] end)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("accel.utils." .. name .. " is Accelerate's but not provided by accel-lua", 1,
        true), err)
    end
    -- accelerate's top-level skip_first_batches and synchronize_rng_states
    local loader = accel.data.DataLoader(accel.data.TensorDataset(accel.arange(6)), {batch_size = 2})
    local n = 0
    for _ in accel.skip_first_batches(loader, 1):iter() do n = n + 1 end -- (LuaJIT's # ignores __len)
    assert.are.equal(2, n)
    assert.are.equal(accel.utils.synchronize_rng_states, accel.synchronize_rng_states)
    assert.truthy(tbl:find("| `DummyOptim`, `DummyScheduler` | not provided", 1, true))
  end)

  it("DistributedType's members are the strings distributed_type takes", function()
    assert.is_true(listed(tbl, "DistributedType"))
    local DT = accel.DistributedType
    assert.are.equal(accel.utils.DistributedType, DT)
    assert.are.equal(DT.NO, accel.Accelerator{}.distributed_type)
    assert.are.equal("DEEPSPEED", DT.DEEPSPEED)
    assert.are.equal("FSDP", DT.FSDP)
    assert.are.equal("MULTI_CPU", DT.MULTI_CPU)
    local ok, err = pcall(function() return DT.MULTI_TPU end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("DistributedType.MULTI_TPU does not exist", 1, true))
  end)

  it("a DeepSpeedPlugin's gradient_accumulation_steps reads \"auto\" when not given, as Accelerate's", function()
    -- Accelerate 1.15: DeepSpeedPlugin(zero_stage=2).gradient_accumulation_steps == "auto" (no launch setting)
    local saved = {os.getenv("ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS"), os.getenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")}
    if saved[1] == nil and saved[2] == nil then
      assert.are.equal("auto", accel.DeepSpeedPlugin{zero_stage = 2}.gradient_accumulation_steps)
    end
    assert.are.equal(3, accel.DeepSpeedPlugin{zero_stage = 2, gradient_accumulation_steps = 3}.gradient_accumulation_steps)
  end)

  -- accelerate 1.16's accelerate.utils: the configuration classes, wait_for_everyone, extract_model_from_parallel,
  -- save, is_*_available; set_seed(-1): "Seed must be between 0 and 2**32 - 1"; send_to_device(t, device, True)
  it("accel.utils has Accelerate's utilities, and names the ones it lacks", function()
    local u = accel.utils
    for _, name in ipairs({"ProjectConfiguration", "DataLoaderConfiguration", "GradientAccumulationPlugin",
                           "DeepSpeedPlugin", "FullyShardedDataParallelPlugin", "DistributedDataParallelKwargs",
                           "InitProcessGroupKwargs", "GradScalerKwargs", "AutocastKwargs"}) do
      assert.are.equal(accel[name], u[name], name)
    end
    assert.is_true(u.is_bf16_available())
    assert.is_true(u.is_tensorboard_available())
    assert.is_false(u.is_wandb_available())
    assert.are.equal(accel.cuda.is_available(), u.is_cuda_available())
    u.wait_for_everyone()
    local m = accel.nn.Linear(1, 1)
    assert.are.equal(m, u.extract_model_from_parallel(m))
    for _, name in ipairs({"PrecisionType", "LoggerType", "RNGType", "patch_environment"}) do
      local ok, err = pcall(function() return u[name] end)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("accel.utils." .. name .. " is not provided by accel-lua", 1, true), err)
    end
    assert.is_nil(u.no_such_name)
    local ok, err = pcall(u.set_seed, -1)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("seed must be between 0 and 2^32 - 1", 1, true), err)
    assert.is_false(pcall(u.set_seed, 2 ^ 40))
    local moved = u.send_to_device({a = accel.ones(1), b = accel.ones(2)}, "cpu", false, "b")
    assert.are.same({1}, moved.a:tolist())
  end)

  -- accelerate 1.16 reads ACCELERATE_DYNAMO_BACKEND and ACCELERATE_USE_MEGATRON_LM in Accelerator(): set to an engine,
  -- an error here naming the variable; the neutral values pass
  it("refuses the environment variables of engines it lacks, naming them", function()
    local support = dofile("tests/lua/support.lua")
    local function run(env)
      return support.command_output(("env %s %s -e %s 2>&1"):format(env, support.shell_quote(support.ACCEL_LUA),
        support.shell_quote("accel.Accelerator() print('made')")))
    end
    assert.truthy(run("ACCELERATE_DYNAMO_BACKEND=INDUCTOR"):find(
      "Accelerator: ACCELERATE_DYNAMO_BACKEND=INDUCTOR is not supported here: torch.compile does not exist here", 1, true))
    assert.truthy(run("ACCELERATE_USE_MEGATRON_LM=true"):find("ACCELERATE_USE_MEGATRON_LM=true is not supported here", 1, true))
    assert.truthy(run("ACCELERATE_DYNAMO_BACKEND=no ACCELERATE_USE_MEGATRON_LM=false"):find("made", 1, true))
  end)

  it("answers the plain properties as Accelerate does on the CPU", function()
    local a = accel.Accelerator{}
    assert.is_false(a.multi_device) -- Accelerate: only MULTI_GPU-like types are multi_device
    assert.is_true(a.should_save_model)
    assert.is_false(a.is_fsdp2)
  end)
end)
