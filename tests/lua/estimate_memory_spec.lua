-- `accel-lua estimate-memory`: the table's parameter / gradient /
-- optimizer rows equal the closed forms written out here (GPT-2's
-- parameter count, the sharding layout of docs/estimate-memory.md) for a
-- small GPT-2 whose parameter count divides by neither 2 nor 3, at N = 1,
-- 2, 3 and stages 0-3; the total is within 10 % of the peak live bytes of
-- a real training run; a SCRIPT.lua model; --help; bad input.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local q = support.shell_quote

local BIN = support.ACCEL_LUA

-- Runs the command line; {code, out, err}.
local function sh(cmd)
  local out, err = support.tmpname(".out"), support.tmpname(".err")
  local _, how, code = support.execute(("%s >%s 2>%s"):format(cmd, q(out), q(err)))
  local r = {code = how == "exit" and code or 128 + code, out = support.read_if_exists(out),
    err = support.read_if_exists(err)}
  os.remove(out)
  os.remove(err)
  return r
end

local function estimate(args, env)
  local r = sh((env and "env " .. env .. " " or "") .. q(BIN) .. " estimate-memory " .. args)
  assert.are.equal(0, r.code, "estimate-memory " .. args .. " failed:\n" .. r.out .. r.err)
  return r.out
end

-- The table's rows: {component = bytes} (the "Bytes" column).
local function rows_of(out)
  local rows = {}
  for line in out:gmatch("[^\n]+") do
    local name, bytes = line:match("^│ (%a[%w ()]-)%s+│[^│]+│%s+(%d+) │")
    if name then rows[name] = tonumber(bytes) end
  end
  return rows
end

-- ---------------------------------------------------------------- closed forms

-- GPT-2 (tied embeddings, n_inner = 4d): vocab*d + T*d + L*(12 d^2 + 13 d) + 2d,
-- and its stage-3 units: the root (wte, wpe, ln_f) and one per block.
local SHAPE = {vocab_size = 65, n_positions = 16, n_embd = 7, n_layer = 2, n_head = 1}
local MODEL_ARGS = "vocab_size=65,n_positions=16,n_embd=7,n_layer=2,n_head=1"
local function gpt2_count(c)
  local d = c.n_embd
  return c.vocab_size * d + c.n_positions * d + c.n_layer * (12 * d * d + 13 * d) + 2 * d
end
local function gpt2_units(c)
  local d = c.n_embd
  local units = {{numel = c.vocab_size * d + c.n_positions * d + 2 * d, root = true}}
  for i = 1, c.n_layer do units[i + 1] = {numel = 12 * d * d + 13 * d} end
  return units
end

local function padded(n, N) return N * math.ceil(n / N) end

-- Per-rank bytes the documented formulas give (k optimizer states per element).
local function expected(P, units, N, stage, k)
  if stage == 0 then
    return {parameters = 4 * P, gradients = (N > 1 and 8 or 4) * P, ["optimizer states"] = 4 * k * P}
  end
  local pad, max_pad, root, other = 0, 0, 0, 0
  for _, u in ipairs(units) do
    local p = padded(u.numel, N)
    pad, max_pad = pad + p, math.max(max_pad, p)
    if u.root then root = p else other = math.max(other, p) end
  end
  local sh = pad / N
  local e = {["optimizer states"] = 4 * k * sh}
  if stage == 3 then
    e.parameters, e.gradients = 4 * sh, 4 * sh
    e["gathered unit (transient)"] = 4 * (root + other)
  else
    e.parameters = 4 * pad + 4 * sh
    e.gradients = stage == 1 and 8 * P or 4 * sh
  end
  if stage >= 2 then e["gradient buffer (transient)"] = 4 * max_pad end
  return e
end

describe("estimate-memory", function()
  it("GPT-2's parameter count: the model's numel sum equals the closed form, which divides by neither 2 nor 3", function()
    local model = accel.models.gpt2.GPT2LMHeadModel(SHAPE)
    local n = 0
    for _, p in ipairs(model:parameters()) do n = n + p:numel() end
    assert.are.equal(1939, gpt2_count(SHAPE))
    assert.are.equal(gpt2_count(SHAPE), n)
    assert.is_true(n % 2 ~= 0 and n % 3 ~= 0)
    -- and the 124M shape, as Hugging Face counts it
    assert.are.equal(124439808, gpt2_count({vocab_size = 50257, n_positions = 1024, n_embd = 768, n_layer = 12}))
  end)

  for _, N in ipairs({1, 2, 3}) do
    for stage = 0, 3 do
      it(("rows equal the closed form: N = %d, stage %d, AdamW"):format(N, stage), function()
        local out = estimate(("--model gpt2 --model_args %s --num_processes %d --zero_stage %d --batch_size 1 "
          .. "--seq_len 8 --steps 1 --gc_phases 1"):format(MODEL_ARGS, N, stage))
        local rows = rows_of(out)
        local P = gpt2_count(SHAPE)
        local units = stage == 3 and gpt2_units(SHAPE) or {{numel = P}}
        local want = expected(P, units, N, stage, 2)
        for name, bytes in pairs(want) do assert.are.equal(bytes, rows[name], name .. "\n" .. out) end
        assert.is_nil(rows["gathered unit (transient)"] and stage ~= 3 and "present" or nil)
        assert.is_true(rows["activations (measured)"] > 0)
        local sum = 0
        for name, bytes in pairs(rows) do
          if name ~= "total" then sum = sum + bytes end
        end
        assert.are.equal(sum, rows.total)
        assert.is_truthy(out:find(("P = %d trainable"):format(P), 1, true), out)
      end)
    end
  end

  for opt, k in pairs({adam = 2, sgd_momentum = 1, sgd = 0}) do
    it(("optimizer %s keeps %d state tensor(s) per element (stage 2, N = 3)"):format(opt, k), function()
      local rows = rows_of(estimate(("--model gpt2 --model_args %s --num_processes 3 --zero_stage 2 --optimizer %s "
        .. "--seq_len 8 --steps 1 --gc_phases 1"):format(MODEL_ARGS, opt)))
      assert.are.equal(4 * k * padded(gpt2_count(SHAPE), 3) / 3, rows["optimizer states"])
    end)
  end

  it("--offload_optimizer: the state is on the host, the same bytes, and the output says it is the same memory", function()
    local out = estimate(("--model gpt2 --model_args %s --num_processes 2 --zero_stage 1 --offload_optimizer "
      .. "--seq_len 8 --steps 1 --gc_phases 1"):format(MODEL_ARGS))
    assert.are.equal(8 * padded(gpt2_count(SHAPE), 2) / 2, rows_of(out)["optimizer states (host)"])
    local dev = accel.get_default_device().type
    if dev == "cpu" then
      assert.is_truthy(out:find("CPU-only build, where the host memory is the device memory", 1, true), out)
    else -- a device: the engine keeps the state there, and says so
      assert.is_truthy(out:find("the sharding engine keeps the optimizer states on " .. dev, 1, true), out)
    end
  end)

  it("names the device it measured on when that is not the cpu", function()
    local args = ("--model gpt2 --model_args %s --seq_len 8 --steps 1 --gc_phases 1"):format(MODEL_ARGS)
    local out = estimate(args, "ACCEL_LUA_DEVICE=sim")
    assert.is_truthy(out:find("device: sim (the default device: the model, its gradients, optimizer state and "
      .. "activations live there; the bytes are its live tensor bytes)", 1, true), out)
    assert.is_falsy(estimate(args, "ACCEL_LUA_DEVICE=cpu"):find("device: ", 1, true))
  end)

  it("prints the machine, the threads and the precision it measured with", function()
    local out = estimate(("--model gpt2 --model_args %s --seq_len 8 --steps 1 --gc_phases 1 --mixed_precision bf16"):format(MODEL_ARGS))
    assert.is_truthy(out:find("measured on: .+ compute thread%(s%); float32 master weights, bf16 autocast"), out)
    assert.is_truthy(out:find("Memory per rank for training `gpt2`", 1, true), out)
    assert.is_truthy(out:find("┌", 1, true) and out:find("┘", 1, true), out)
  end)

  -- Training comparisons: each entry trains with `train` (a shell command
  -- printing rank 0's "peak_live_bytes N") and estimates with the same
  -- settings, on a shape whose step pushes more than the collector's 64 MiB
  -- cycle (docs/estimate-memory.md: how far a loop's GC phase moves its
  -- peak). Stages 1-3 train through accel.shard.Engine under `launch` and
  -- are pending in a build without the sharding engine.
  local TRAIN_ARGS = "n_layer=2,n_embd=128,n_head=4,vocab_size=2048,n_positions=128"
  local function train_cmd(processes, mp, stage)
    local script = ("tests/lua/helpers/estmem_train.lua %s 8 128 4 %s %d"):format(TRAIN_ARGS, mp, stage)
    if processes == 1 then return q(BIN) .. " " .. script end
    -- no config file and no inherited launch settings
    local env = "env -u ACCEL_LUA_MIXED_PRECISION -u ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS -u ACCEL_LUA_USE_DEEPSPEED "
      .. "-u ACCEL_LUA_USE_FSDP ACCEL_LUA_CONFIG=" .. q(support.tmpname("-no-config.yaml")) .. " "
    return ("%s%s%s launch --cpu --num_processes %d %s"):format(env, support.asan_env(), q(BIN), processes, script)
  end
  local TRAINING = {
    {stage = 0, processes = 1, mixed_precision = "no"},
    {stage = 0, processes = 1, mixed_precision = "bf16"},
    {stage = 0, processes = 1, mixed_precision = "fp16"},
    {stage = 1, processes = 2, mixed_precision = "no"},
    {stage = 2, processes = 3, mixed_precision = "no"},
    {stage = 3, processes = 2, mixed_precision = "no"},
    {stage = 3, processes = 2, mixed_precision = "bf16"},
  }
  local has_engine = pcall(require, "accel.shard")
  for _, c in ipairs(TRAINING) do
    it(("the total is within 10 %% of training's peak live bytes: stage %d, %d process(es), %s, AdamW, batch 8")
      :format(c.stage, c.processes, c.mixed_precision), function()
      if c.stage > 0 and not has_engine then
        pending("accel.shard (the sharding engine) is not in this build")
        return
      end
      local r = sh(train_cmd(c.processes, c.mixed_precision, c.stage))
      assert.are.equal(0, r.code, r.out .. r.err)
      local peak = tonumber(r.out:match("peak_live_bytes (%d+)"))
      assert.is_not_nil(peak, r.out)
      local rows = rows_of(estimate(("--model gpt2 --model_args %s --batch_size 8 --seq_len 128 --zero_stage %d "
        .. "--num_processes %d --mixed_precision %s"):format(TRAIN_ARGS, c.stage, c.processes, c.mixed_precision)))
      local ratio = rows.total / peak
      print(("\n  estimate %d bytes, training peak %d bytes: ratio %.3f"):format(rows.total, peak, ratio))
      assert.is_true(ratio > 0.9 and ratio < 1.1, ("estimate %d vs training peak %d"):format(rows.total, peak))
    end)
  end

  it("a SCRIPT.lua returning {model, batch, loss}: rows from its own parameters (arg is the script's, as accel-lua's)", function()
    local path = support.tmpname(".lua")
    support.write_file(path, [[
local accel = require("accel")
local nn = accel.nn
local width = tonumber(arg[1]) or 7 -- a training script's reading of its arguments (none here)
assert(arg[0]:match("%.lua$"), "arg[0] is the script")
return {
  model = function() return nn.Sequential(nn.Linear(5, width), nn.Tanh(), nn.Linear(width, 3)) end,
  batch = function(B) return {accel.randn(B, 5), accel.randn(B, 3)} end,
  loss = function(model, b) return (model(b[1]) - b[2]):pow(2):mean() end,
}
]])
    local out = estimate(q(path) .. " --num_processes 2 --zero_stage 3 --batch_size 4 --steps 1 --gc_phases 2 --optimizer sgd_momentum")
    os.remove(path)
    local P = 5 * 7 + 7 + 7 * 3 + 3 -- 66: no ModuleList, so one unit
    local rows = rows_of(out)
    assert.are.equal(4 * P / 2, rows.parameters)
    assert.are.equal(4 * P / 2, rows["optimizer states"])
    assert.are.equal(4 * P, rows["gathered unit (transient)"])
  end)

  -- the dead tensors of many steps wait together for a full collection;
  -- the loops below are a user's AdamW loop on the same script, plain and
  -- through an Accelerator (whose modules make the Lua heap 15 times larger)
  for _, through in ipairs({"a plain loop", "an Accelerator loop"}) do
  it("a small model (a step far below the collector's cycle): within 10 % of the peak of 300 steps of " .. through,
    function()
    local script, loop = support.tmpname(".lua"), support.tmpname(".lua")
    support.write_file(script, [[
local accel = require("accel")
local nn = accel.nn
return {
  model = function() return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
    nn.Linear(256, 10)) end,
  batch = function(B) return {accel.randn(B, 784), accel.randint(0, 10, {B})} end,
  loss = function(model, b)
    local logits = model(b[1])
    return accel.nn.functional.cross_entropy(logits, b[2]), logits
  end,
}
]])
    support.write_file(loop, ([[
local accel = require("accel")
accel.set_seed(0)
local job = dofile(%q)
local model = job.model()
local opt = accel.optim.AdamW(model:parameters(), {lr = 1e-3})
if %s then model, opt = accel.Accelerator{cpu = true}:prepare(model, opt) end
local highest = 0
for step = 1, 300 do
  local b = job.batch(64)
  accel.reset_peak_memory_stats()
  local loss, logits = job.loss(model, b)
  loss:backward()
  opt:step()
  opt:zero_grad()
  if step > 1 then highest = math.max(highest, (select(3, accel.memory_stats()))) end
end
print("peak_live_bytes " .. highest)
]]):format(script, tostring(through == "an Accelerator loop")))
    local r = sh(q(BIN) .. " " .. q(loop))
    local rows = rows_of(estimate(q(script) .. " --batch_size 64"))
    os.remove(script)
    os.remove(loop)
    local peak = tonumber(r.out:match("peak_live_bytes (%d+)"))
    assert.is_not_nil(peak, r.out .. r.err)
    local ratio = rows.total / peak
    print(("\n  estimate %d bytes, training peak %d bytes: ratio %.3f"):format(rows.total, peak, ratio))
    assert.is_true(ratio > 0.9 and ratio < 1.1, ("estimate %d vs training peak %d"):format(rows.total, peak))
  end)
  end

  it("sizes are printed by Accelerate's convert_bytes rule (1024-based, Python's round(x, 2))", function()
    local convert = require("accel.estimate_memory").convert_bytes
    assert.are.equal("512 bytes", convert(512))
    assert.are.equal("535.0 KB", convert(547840))      -- 535.0
    assert.are.equal("1.04 MB", convert(1095680))      -- 1.0449...
    assert.are.equal("1.5 GB", convert(1610612736))    -- 1.5
    assert.are.equal("84.95 MB", convert(89076941))    -- 84.9500...
  end)

  it("a whole byte count below 1 KiB prints as an integer (convert_bytes(444) = \"444 bytes\", not \"444.0 bytes\")", function()
    local path = support.tmpname(".lua")
    support.write_file(path, [[
local accel = require("accel")
local nn = accel.nn
return {
  model = function()
    local m = nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 1))
    m[1].weight.requires_grad = false
    return m
  end,
  batch = function(b) return accel.randn(b, 10) end,
  loss = function(m, b) return m(b):sum() end,
}
]])
    -- stage 3 on 2 ranks: parameters = 4 * (10 + 10 + 1 padded to 22) / 2 master bytes + 4 * 100 frozen = 444
    local out = estimate(q(path) .. " --zero_stage 3 --num_processes 2 --steps 1 --gc_phases 1")
    os.remove(path)
    assert.is_truthy(out:find("│ parameters%s+│ 444 bytes │%s+444 │"), out)
    assert.is_nil(out:find("%d%.0 bytes"), out)
  end)

  -- values that only the model can judge are still command-line errors: their usage lines follow
  for _, args in ipairs({"--model_args n_lyer=2", "--model_args n_layer=abc", "--model_args n_layer",
                         "--model_args n_embd=30,n_head=4", "--model_args n_positions=8 --seq_len 9"}) do
    it("bad input: --model gpt2 " .. args .. " prints the usage lines", function()
      local r = sh(q(BIN) .. " estimate-memory --model gpt2 " .. args)
      assert.are.equal(2, r.code, r.out .. r.err)
      assert.is_truthy(r.err:find("^accel%-lua estimate%-memory: %-%-[ms][oe][dq]"), r.err)
      assert.is_truthy(r.err:find("\nusage: accel-lua estimate-memory SCRIPT.lua | --model gpt2", 1, true), r.err)
    end)
  end

  it("--help lists the flags", function()
    local r = sh(q(BIN) .. " estimate-memory --help")
    assert.are.equal(0, r.code)
    for _, flag in ipairs({"--model", "--model_args", "--num_processes", "--zero_stage", "--mixed_precision",
                           "--batch_size", "--seq_len", "--optimizer", "--offload_optimizer"}) do
      assert.is_truthy(r.out:find(flag, 1, true), flag)
    end
  end)

  -- boolean flags take launch's words after them or after = (docs/launch.md)
  for _, c in ipairs({
    {"--offload_optimizer false", "optimizer states"}, {"--offload_optimizer=FALSE", "optimizer states"},
    {"--offload-optimizer no", "optimizer states"}, {"--zero_stage 1 --offload_optimizer true", "optimizer states (host)"},
    {"--zero_stage 1 --offload_optimizer=1", "optimizer states (host)"},
  }) do
    it("boolean flag with a value: " .. c[1], function()
      local rows = rows_of(estimate(("--model gpt2 --model_args %s %s --seq_len 8 --steps 1 --gc_phases 1")
        :format(MODEL_ARGS, c[1])))
      assert.are.equal(8 * gpt2_count(SHAPE), rows[c[2]])
    end)
  end

  it("--wrap no_wrap at stage 3: one unit, so the gathered unit is the whole model", function()
    local rows = rows_of(estimate(("--model gpt2 --model_args %s --zero_stage 3 --wrap no_wrap --seq_len 8 --steps 1 "
      .. "--gc_phases 1"):format(MODEL_ARGS)))
    assert.are.equal(4 * gpt2_count(SHAPE), rows["gathered unit (transient)"])
  end)

  it("a command-line error prints the message and the usage lines (docs/cli.md), not the help", function()
    local usage = require("accel.estimate_memory").USAGE
    local r = sh(q(BIN) .. " estimate-memory --model gpt2 --bogus")
    assert.are.equal(2, r.code)
    assert.are.equal("accel-lua estimate-memory: unknown flag: --bogus\n" .. usage, r.err)
    local first = "usage: accel-lua estimate-memory SCRIPT.lua | --model gpt2"
    assert.are.equal(first, usage:sub(1, #first))
  end)

  it("--help has an Example: section", function()
    local r = sh(q(BIN) .. " estimate-memory --help")
    assert.is_truthy(r.out:find("\nExample:\n  accel-lua estimate-memory --model gpt2", 1, true), r.out)
  end)

  it("a positional gpt2 that is a file runs as a script (the --model hint is only for a missing file)", function()
    local dir = support.tmpdir()
    support.write_file(dir .. "/gpt2", [[
local accel = require("accel")
return {model = accel.nn.Linear(2, 2), batch = function(B) return accel.randn(B, 2) end,
  loss = function(m, b) return m(b):pow(2):mean() end}
]])
    local bin = BIN:sub(1, 1) == "/" and BIN or os.getenv("PWD") .. "/" .. BIN
    local r = sh(("cd %s && %s estimate-memory gpt2 --steps 1 --gc_phases 1"):format(q(dir), q(bin)))
    support.remove_tree(dir)
    assert.are.equal(0, r.code, r.out .. r.err)
    assert.is_truthy(r.out:find("Memory per rank for training `gpt2`", 1, true), r.out)
  end)

  local BAD = {
    {"--model gpt2 --bogus 1", "unknown flag: --bogus"},
    {"--model gpt2 --zero_stage 1 --wrap no_wrap", "--wrap applies to --zero_stage 3 only (it picks stage 3's wrap "
      .. "units), got --zero_stage 1"},
    {"--model gpt2 --wrap transformer_based_wrap", "--wrap applies to --zero_stage 3 only"},
    {"--model gpt2 --zero_stage 1 --offload_optimizer=maybe", "--offload_optimizer: 'maybe' is not a boolean (true or false)"},
    -- `true` after the flag is its value, not a SCRIPT.lua
    {"--model gpt2 --offload_optimizer true", "--offload_optimizer needs --zero_stage 1, 2 or 3"},
    -- Accelerate's positional model name
    {"gpt2 --zero_stage 2", "no file gpt2: for the built-in model write --model gpt2 (the positional argument is a "
      .. "SCRIPT.lua, not a model name as in accelerate estimate-memory)"},
    {"train.lua --model gpt2", "give a SCRIPT.lua or --model, not both (got train.lua and --model gpt2)"},
    {"--model gpt2 --zero_stage 4", "--zero_stage must be 0, 1, 2 or 3, got 4"},
    {"--batch_size 2", "missing model: give a SCRIPT.lua or --model gpt2"},
    {"--model gpt2 --batch_size 0", "--batch_size must be at least 1, got 0"},
    {"--model gpt2 --num_processes 0", "--num_processes must be at least 1, got 0"},
    {"--model gpt2 --optimizer lion", "--optimizer must be one of adam, adamw, sgd, sgd_momentum, got \"lion\""},
    {"--model gpt2 --offload_optimizer", "--offload_optimizer needs --zero_stage 1, 2 or 3"},
    {"--model gpt2 --model_args n_lyer=2", "--model_args: GPT2Config: unknown option \"n_lyer\""},
    {"--model gpt3", "--model: unknown model \"gpt3\" (known: gpt2"},
    {"--model gpt2 --batch_size", "missing value: --batch_size"},
    {"/nonexistent/model.lua", "cannot load /nonexistent/model.lua"},
    {"--model gpt2 --gc_phases 0", "--gc_phases must be at least 1, got 0"},
    -- `accelerate estimate-memory bert-base-cased --dtypes float32` prints weight sizes per dtype
    {"--model gpt2 --dtypes float32 float16", "--dtypes: Accelerate's table of weight sizes per dtype is not provided"},
    {"--model gpt2 --library_name transformers", "--library_name: models come from a SCRIPT.lua or --model gpt2"},
  }
  for _, case in ipairs(BAD) do
    it("bad input: " .. case[1], function()
      local r = sh(q(BIN) .. " estimate-memory " .. case[1])
      assert.are.equal(2, r.code, r.out .. r.err)
      assert.is_truthy(r.err:find("accel-lua estimate-memory: " .. case[2], 1, true), r.err)
      assert.are.equal("", r.out)
    end)
  end

  it("bad input: a script that returns no table, or a loss that is not a scalar, is named", function()
    local path = support.tmpname(".lua")
    support.write_file(path, "return 42\n")
    local r = sh(q(BIN) .. " estimate-memory " .. q(path))
    assert.are.equal(2, r.code)
    assert.is_truthy(r.err:find(path .. " must return a table {model = fn", 1, true), r.err)
    support.write_file(path, [[
local accel = require("accel")
return {model = accel.nn.Linear(2, 2), batch = function(B) return accel.randn(B, 2) end}
]])
    r = sh(q(BIN) .. " estimate-memory " .. q(path))
    os.remove(path)
    assert.are.equal(2, r.code)
    assert.is_truthy(r.err:find("the loss must be a scalar tensor that requires grad, got a tensor of shape", 1, true), r.err)
  end)

  it("bad input: a training script stops at its Accelerator or optimizer, before it trains or writes anything", function()
    local path, marker = support.tmpname(".lua"), support.tmpname(".txt")
    for _, case in ipairs({{"accel.Accelerator()", "accel.Accelerator"}, {"accel.optim.AdamW(model:parameters())",
      "accel.optim.AdamW"}}) do
      support.write_file(path, ([[
local accel = require("accel")
local model = accel.nn.Linear(2, 2)
local made = %s
io.open(%q, "w"):write("trained"):close()
]]):format(case[1], marker))
      local r = sh(q(BIN) .. " estimate-memory " .. q(path))
      assert.are.equal(2, r.code, r.out .. r.err)
      assert.is_truthy(r.err:find(path .. " creates " .. case[2] .. " while it loads", 1, true), r.err)
      assert.is_nil(io.open(marker), "the script ran past its " .. case[2])
    end
    -- a description may name them at its top level and use them later
    support.write_file(path, [[
local accel = require("accel")
local AdamW, Accelerator = accel.optim.AdamW, accel.Accelerator
return {model = function() return accel.nn.Linear(2, 2) end, batch = function(B) return accel.randn(B, 2) end,
  loss = function(m, b) assert(AdamW and Accelerator) return m(b):pow(2):mean() end}
]])
    local r = sh(q(BIN) .. " estimate-memory " .. q(path) .. " --steps 1 --gc_phases 1")
    os.remove(path)
    assert.are.equal(0, r.code, r.out .. r.err)
  end)

  it("no loss function: a forward failing in the library's layers names the script's model (else batch) line", function()
    local path = support.tmpname(".lua")
    local body = [[
local accel = require("accel")
local nn = accel.nn
return {
  model = %s,
  batch = function(B) return accel.randn(B, 3) end,
}
]]
    for _, c in ipairs({{"function() return nn.Linear(4, 2) end", 4}, {"nn.Linear(4, 2)", 5}}) do
      support.write_file(path, body:format(c[1]))
      local r = sh(q(BIN) .. " estimate-memory " .. q(path))
      assert.are.equal(1, r.code, r.out .. r.err)
      assert.is_truthy(r.err:find(("accel-lua estimate-memory: %s:%d: model(batch) failed (the script has no loss "
        .. "function): linear: input of shape [1, 3]"):format(path, c[2]), 1, true), r.err)
    end
    os.remove(path)
  end)
end)
