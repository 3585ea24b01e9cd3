-- accel.estimate_memory: `accel-lua estimate-memory`, the per-rank memory
-- of a training run, printed as a table in the style of Accelerate's
-- `accelerate estimate-memory` (a boxed table, sizes through Accelerate's
-- convert_bytes rule: 1024-based units, two decimals). User guide:
-- docs/estimate-memory.md.
--
--   accel-lua estimate-memory SCRIPT.lua | --model gpt2 [--model_args k=v,...]
--     [--num_processes N] [--zero_stage 0-3] [--mixed_precision no|bf16|fp16]
--     [--batch_size B] [--seq_len T] [--optimizer adamw|adam|sgd|sgd_momentum]
--     [--offload_optimizer] [--wrap transformer_based_wrap|no_wrap] [--steps K]
--     [--gc_phases P]
--
-- Where Accelerate's command multiplies the parameter bytes by fixed
-- factors for "Training using Adam" at batch size 1, this one
--  * computes the model state per rank (parameters, gradients, optimizer
--    state) from the model's own parameter list and the layout of this
--    runtime's sharding engine (DESIGN §4), and
--  * MEASURES the activations: forward/backward passes of the full model
--    in this process at the per-rank batch size, each started with the
--    gradients freed as optimizer:zero_grad() frees them; activations = the
--    highest peak of live tensor bytes (accel.memory_stats()'s third value
--    after reset_peak_memory_stats) minus the parameter and gradient
--    bytes. Tensors of the previous pass that wait for Lua's garbage
--    collector count, as they do in training. Where the collector's full
--    collections fall in a step (every 64 MiB of tensor bytes) decides
--    whether the forward's dead tensors are freed before backward, and a
--    training loop settles into one such phase, set by whatever else it
--    allocates: the same model and batch can peak a third apart. So after a
--    warm-up pass, --steps passes (default 3) run at each of --gc_phases
--    (default 8) offsets of that cycle; the highest peak is reported (not
--    a guaranteed bound: a loop may settle in a phase not sampled) and the
--    lowest settled one is printed below. A small model's pass pushes far
--    less than a cycle, so the dead tensors of many passes wait together
--    for the next full collection: passes in a row covering one cycle (by
--    the tensor bytes the warm-up pass handed to Lua, at most 256), each
--    followed by an optimizer step, beside an Accelerator's modules, as a
--    training loop runs them, measure that too.
--
-- The per-rank formulas (P: trainable parameter elements; units u: the
-- engine's flat buffers, each padded to pad_u = N * ceil(n_u / N) elements
-- and sharded into sh_u = pad_u / N; k: optimizer state tensors per
-- parameter, AdamW / Adam 2, SGD with momentum 1, SGD 0; all float32,
-- whatever mixed_precision says, since master weights stay float32 and
-- autocast casts GEMM operands on the fly; those casts are activations):
--   stage 0 (DDP)  parameters 4P; gradients 4P, plus 4P of DDP bucket
--                  buffers when N > 1 (.grad is never a view into a bucket);
--                  optimizer 4kP
--   stage 1        parameters 4 sum(pad_u) (the full buffers the model
--                  uses, all-gathered after each step) + 4 sum(sh_u) (the
--                  fp32 master shard); gradients 4P (.grad) + 4P (DDP
--                  buckets); optimizer 4k sum(sh_u)
--   stage 2        parameters as stage 1; gradients 4 sum(sh_u); optimizer
--                  4k sum(sh_u); transient: one unit's full gradient buffer,
--                  4 max(pad_u), before its reduce-scatter
--   stage 3        parameters 4 sum(sh_u) (master shards); gradients and
--                  optimizer as stage 2; transient: the gathered parameters
--                  of the root unit (parameters outside every wrapped
--                  module, gathered for the whole step) and of the largest
--                  other unit, 4 (pad_root + max pad_u), plus the gradient
--                  buffer as stage 2
-- Units: stages 1-2 consecutive parameters in chunks of 25 MiB (the
-- engine's default bucket_cap_mb); stage 3 by --wrap:
-- transformer_based_wrap (default: each child of every ModuleList, e.g.
-- GPT-2's blocks, the rest in the root unit) or no_wrap (one unit). Frozen
-- parameters are counted in full in "parameters" at every stage.
-- --offload_optimizer moves the optimizer state to the host; on this CPU
-- build that is the same memory, and the output says so.
--
-- SCRIPT.lua protocol: the script returns a table (or a function that
-- returns one) with
--   model = function() return module end     (or the module itself)
--   batch = function(batch_size, seq_len) return batch end   (seq_len: the
--           --seq_len value or nil; the batch may be any Lua value)
--   loss  = function(model, batch) return scalar_loss, ... end   (optional:
--           by default model(batch), whose first result must be the scalar
--           loss). Everything it returns stays alive through backward, as
--           a training loop's locals do (`local logits, loss = model(x)`):
--           return what your loop keeps in scope, e.g. the logits.
local accel = require("accel")
local amp = require("accel.amp")
local util = require("accel.util")

local M = {}

local WHO = "accel-lua estimate-memory"
local BUCKET_CAP_MB = 25

-- ---------------------------------------------------------------- errors

-- Usage errors are tables so main can tell them from failures of the
-- model's code (which keep their file:line).
local function usage(fmt, ...)
  error({usage = string.format(fmt, ...)}, 0)
end

-- A bad value on the command line found after its flags were read (in
-- --model_args, or against the model): its usage lines are printed too.
local function flag_usage(fmt, ...)
  error({usage = string.format(fmt, ...), show_usage = true}, 0)
end

-- ---------------------------------------------------------------- flags

local FLAGS = {
  model = "string", model_args = "string", num_processes = "int", zero_stage = "int",
  mixed_precision = "string", batch_size = "int", seq_len = "int", optimizer = "string",
  offload_optimizer = "bool", wrap = "string", steps = "int", gc_phases = "int", help = "bool",
}
local CHOICES = {
  mixed_precision = {no = true, bf16 = true, fp16 = true},
  optimizer = {adamw = true, adam = true, sgd = true, sgd_momentum = true},
  wrap = {transformer_based_wrap = true, no_wrap = true},
}
M.OPTIMIZER_STATES = {adamw = 2, adam = 2, sgd_momentum = 1, sgd = 0}

-- `accelerate estimate-memory`'s flags that mean nothing here, and why.
local ACCELERATE_ONLY = {
  dtypes = "Accelerate's table of weight sizes per dtype is not provided: this command estimates training "
    .. "(--mixed_precision bf16 or fp16 sets the precision it measures)",
  library_name = "models come from a SCRIPT.lua or --model gpt2, not from the Hugging Face Hub",
  trust_remote_code = "models come from a SCRIPT.lua or --model gpt2, not from the Hugging Face Hub",
}

-- argv list -> options table (defaults filled in but --wrap's, which
-- check_options fills after checking that it applies).
function M.parse_args(argv)
  for _, a in ipairs(argv) do
    local name = a:match("^%-%-([%w_]+)")
    if name and ACCELERATE_ONLY[name] then usage("--%s: %s", name, ACCELERATE_ONLY[name]) end
  end
  local o = {num_processes = 1, zero_stage = 0, mixed_precision = "no", batch_size = 1, optimizer = "adamw",
    steps = 3, gc_phases = 8, offload_optimizer = false}
  local given, pos = util.parse_flags(argv, FLAGS, usage)
  for k, v in pairs(given) do o[k] = v end
  if #pos > 1 then usage("one SCRIPT.lua only, got %s and %s", pos[1], pos[2]) end
  o.script = pos[1]
  return o
end

local function check_choice(o, name)
  if not CHOICES[name][o[name]] then
    local list = {}
    for k in pairs(CHOICES[name]) do list[#list + 1] = k end
    table.sort(list)
    usage("--%s must be one of %s, got %q", name, table.concat(list, ", "), tostring(o[name]))
  end
end

-- The models --model builds.
local MODELS = {gpt2 = true}

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

-- The model: a SCRIPT.lua or --model, one of them. Accelerate's positional
-- model name (`accelerate estimate-memory gpt2`) gets --model suggested.
local function check_model(o)
  if o.script and MODELS[o.script] and not exists(o.script) then
    usage("no file %s: for the built-in model write --model %s (the positional argument is a SCRIPT.lua, not a model "
      .. "name as in accelerate estimate-memory)", o.script, o.script)
  end
  if o.script and o.model then usage("give a SCRIPT.lua or --model, not both (got %s and --model %s)", o.script, o.model) end
  if not o.script and not o.model then usage("missing model: give a SCRIPT.lua or --model gpt2") end
  if o.model and not MODELS[o.model] then usage("--model: unknown model %q (known: gpt2; or give a SCRIPT.lua)", o.model) end
  if o.model_args and not o.model then usage("--model_args needs --model") end
end

-- --wrap groups stage 3's units; stages 0-2 have none to choose.
local function check_wrap(o)
  if o.wrap ~= nil and o.zero_stage ~= 3 then
    usage("--wrap applies to --zero_stage 3 only (it picks stage 3's wrap units), got --zero_stage %d", o.zero_stage)
  end
  o.wrap = o.wrap or "transformer_based_wrap"
end

function M.check_options(o)
  if o.help then return o end
  check_model(o)
  if o.zero_stage < 0 or o.zero_stage > 3 then usage("--zero_stage must be 0, 1, 2 or 3, got %d", o.zero_stage) end
  if o.num_processes < 1 then usage("--num_processes must be at least 1, got %d", o.num_processes) end
  if o.batch_size < 1 then usage("--batch_size must be at least 1, got %d", o.batch_size) end
  if o.seq_len ~= nil and o.seq_len < 1 then usage("--seq_len must be at least 1, got %d", o.seq_len) end
  if o.steps < 1 then usage("--steps must be at least 1, got %d", o.steps) end
  if o.gc_phases < 1 then usage("--gc_phases must be at least 1, got %d", o.gc_phases) end
  if o.mixed_precision == "fp8" then
    usage("--mixed_precision fp8 needs the GPU backend, which this build does not have (no, bf16 or fp16)")
  end
  check_wrap(o)
  for _, name in ipairs({"mixed_precision", "optimizer", "wrap"}) do check_choice(o, name) end
  if o.offload_optimizer and o.zero_stage == 0 then
    usage("--offload_optimizer needs --zero_stage 1, 2 or 3 (the optimizer state is offloaded by the sharding engine)")
  end
  return o
end

-- "n_layer=2,n_embd=64,tie_word_embeddings=false" -> table of numbers,
-- booleans and strings.
function M.parse_model_args(s)
  local out = {}
  if s == nil then return out end
  for item in s:gmatch("[^,]+") do
    local k, v = item:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
    if not k or v == "" then flag_usage("--model_args: expected key=value, got %q", item) end
    if v == "true" then out[k] = true
    elseif v == "false" then out[k] = false
    else out[k] = tonumber(v) or v end
  end
  return out
end

-- ---------------------------------------------------------------- models

-- {model = module, batch = fn(B, T), loss = fn(model, batch), name, seq_len}
local function gpt2_job(o)
  local gpt2 = accel.models.gpt2
  local ok, config = pcall(gpt2.GPT2Config, M.parse_model_args(o.model_args))
  if not ok then flag_usage("--model_args: %s", tostring(config)) end
  local T = o.seq_len or config.n_positions
  if T > config.n_positions then
    flag_usage("--seq_len %d is longer than the model's n_positions (%d)", T, config.n_positions)
  end
  return {
    name = "gpt2", detail = tostring(config), seq_len = T,
    model = gpt2.GPT2LMHeadModel(config),
    batch = function(B)
      local d = accel.randint(0, config.vocab_size, {B, T + 1})
      return {d:narrow(2, 1, T), d:narrow(2, 2, T)}
    end,
    loss = function(model, b)
      local logits, loss = model(b[1], {targets = b[2]})
      return loss, logits
    end,
  }
end

local function is_module(x) return type(x) == "table" and type(x.parameters) == "function" end

-- The loss without a script loss function: model(batch). The call is the
-- library's, so an error raised in the model's library code (nn.Linear's
-- shape check, ...) would name no line of the script: one without a
-- position outside the library gets `fn`'s (the script's model function,
-- else its batch function) file:line.
local function default_loss(fn)
  local info = debug.getinfo(fn, "S")
  local where = ("%s:%d"):format(info.source:gsub("^@", ""), info.linedefined)
  local function checked(ok, ...)
    if ok then return ... end
    local err = ...
    local pos = type(err) == "string" and err:match("^([^\n]-):%d+: ")
    if type(err) == "string" and (not pos or pos:find("^%[accel%]")) then
      err = ("%s: model(batch) failed (the script has no loss function): %s"):format(where, err)
    end
    error(err, 0)
  end
  return function(model, b) return checked(pcall(model, b)) end
end

-- Runs load() (the script's top level) with accel.Accelerator and the
-- optimizer classes refusing to start: a training script passed here by
-- mistake stops at its first step of training, before it trains or writes
-- anything. After load() the names are what they were (a function captured
-- meanwhile calls through).
local function load_without_training(script, load)
  local loading, saved = true, {}
  local function guard(tbl, key)
    local orig = tbl[key]
    saved[#saved + 1] = {tbl, key, rawget(tbl, key)}
    rawset(tbl, key, function(...)
      if loading then
        usage("%s creates accel.%s while it loads: estimate-memory runs the script only to get its "
          .. "description, a table {model = fn, batch = fn(batch_size, seq_len), loss = fn(model, batch)}; "
          .. "a training script is not one (docs/estimate-memory.md)", script, key == "Accelerator" and key
          or "optim." .. key)
      end
      return orig(...)
    end)
  end
  guard(accel, "Accelerator")
  for _, name in ipairs({"SGD", "Adam", "AdamW"}) do guard(accel.optim, name) end
  local ok, result = pcall(load)
  loading = false
  for i = #saved, 1, -1 do rawset(saved[i][1], saved[i][2], saved[i][3]) end
  if not ok then error(result, 0) end
  return result
end

local function script_job(o)
  local chunk, err = loadfile(o.script)
  if not chunk then usage("cannot load %s: %s", o.script, tostring(err)) end
  -- the script sees the global arg that `accel-lua SCRIPT.lua` gives it (with no arguments after the name)
  if rawget(_G, "arg") == nil then rawset(_G, "arg", {[0] = o.script}) end
  local spec = load_without_training(o.script, function()
    local s = chunk()
    if type(s) == "function" then s = s() end
    return s
  end)
  if type(spec) ~= "table" then
    usage("%s must return a table {model = fn, batch = fn(batch_size, seq_len), loss = fn(model, batch)} "
      .. "(or a function returning one), got %s", o.script, type(spec))
  end
  local model = spec.model
  local model_fn = type(model) == "function" and model or nil
  if model_fn then model = model() end
  if not is_module(model) then usage("%s: model must be a module or a function returning one, got %s", o.script, type(model)) end
  if type(spec.batch) ~= "function" then usage("%s: batch must be a function(batch_size, seq_len), got %s", o.script, type(spec.batch)) end
  if spec.loss ~= nil and type(spec.loss) ~= "function" then usage("%s: loss must be a function(model, batch), got %s", o.script, type(spec.loss)) end
  local T = o.seq_len
  return {name = o.script, seq_len = T, model = model, loss = spec.loss or default_loss(model_fn or spec.batch),
    batch = function(B) return spec.batch(B, T) end}
end

-- ---------------------------------------------------------------- layout

-- Trainable (unique, requires_grad) and frozen parameters of model.
local function split_params(model)
  local trainable, frozen = {}, {}
  for _, p in ipairs(model:parameters()) do
    if p.requires_grad then trainable[#trainable + 1] = p else frozen[#frozen + 1] = p end
  end
  return trainable, frozen
end

-- Each unit's padded length and shard for N ranks.
function M.pad_units(units, N)
  for _, u in ipairs(units) do
    u.padded = N * math.ceil(u.numel / N)
    u.shard = u.padded / N
  end
  return units
end

-- ---------------------------------------------------------------- formulas

local function sums(units)
  local pad, sh, max_pad, root_pad, max_other = 0, 0, 0, 0, 0
  for _, u in ipairs(units) do
    pad, sh = pad + u.padded, sh + u.shard
    max_pad = math.max(max_pad, u.padded)
    if u.root then root_pad = u.padded else max_other = math.max(max_other, u.padded) end
  end
  return {pad = pad, sh = sh, max_pad = max_pad, root_pad = root_pad, max_other = max_other}
end

-- The model-state rows per rank, in bytes, with the formula of each:
-- {parameters, gradients, optimizer, gathered, grad_bucket} (f: formulas).
function M.model_state(s)
  local N, k, P, F = s.num_processes, s.optimizer_states, s.trainable, s.frozen
  local u = sums(s.units)
  local frozen = F > 0 and " + 4F frozen" or ""
  local r = {f = {}}
  local stage = s.zero_stage
  if stage == 0 then
    r.parameters, r.f.parameters = 4 * P, "4P"
    r.gradients = N > 1 and 8 * P or 4 * P
    r.f.gradients = N > 1 and "4P .grad + 4P DDP buckets" or "4P"
    r.optimizer, r.f.optimizer = 4 * k * P, ("%dP"):format(4 * k)
  else
    if stage == 3 then
      r.parameters, r.f.parameters = 4 * u.sh, "4 sum(pad_u)/N master shards"
    else
      r.parameters = 4 * u.pad + 4 * u.sh
      r.f.parameters = "4 sum(pad_u) full + 4 sum(pad_u)/N master shard"
    end
    if stage == 1 then
      r.gradients, r.f.gradients = 8 * P, "4P .grad + 4P DDP buckets"
    else
      r.gradients, r.f.gradients = 4 * u.sh, "4 sum(pad_u)/N shards"
      r.grad_bucket, r.f.grad_bucket = 4 * u.max_pad, "4 max(pad_u), one unit before its reduce-scatter"
    end
    r.optimizer, r.f.optimizer = 4 * k * u.sh, ("%d sum(pad_u)/N shards"):format(4 * k)
    if stage == 3 then
      r.gathered = 4 * (u.root_pad + u.max_other)
      r.f.gathered = u.root_pad > 0 and u.max_other > 0 and "4 (pad_root + max other pad_u)" or "4 max(pad_u)"
    end
  end
  r.parameters = r.parameters + 4 * F
  r.f.parameters = r.f.parameters .. frozen
  return r
end

-- ---------------------------------------------------------------- measuring

-- Lua's full collections come every 64 MiB of tensor bytes pushed
-- (GC_FULL_MIN in bindings/lua_util.c), and where they fall in a step
-- decides whether the forward's dead tensors are gone before backward.
local GC_CYCLE = 64 * 1048576
-- At most this many passes in a row (a pass that needs fewer than 256 KiB
-- of tensors is cut short of a whole cycle).
local MAX_PASSES_IN_ROW = 256

-- One pass: free the gradients (as optimizer:zero_grad() does), push
-- `offset` bytes through the GC accounting, then batch / forward / loss /
-- backward. Returns the pass's peak of live tensor bytes.
local function one_pass(job, o, scaler, trainable, offset, opt)
  accel._C.clear_grads(trainable)
  if offset > 0 then accel.empty(math.floor(offset / 4)):free() end
  accel.reset_peak_memory_stats()
  local b = job.batch(o.batch_size)
  local results = {job.loss(job.model, b)} -- kept through backward, as a loop's locals are
  local loss = results[1]
  if not accel.is_tensor(loss) or loss:numel() ~= 1 or not loss.requires_grad then
    usage("%s: the loss must be a scalar tensor that requires grad, got %s", job.name,
      accel.is_tensor(loss) and ("a tensor of shape " .. tostring(loss.shape)) or type(loss))
  end
  if scaler then loss = scaler:scale_loss(loss) end
  loss:backward()
  if opt then opt:step() end
  return (select(3, accel.memory_stats()))
end

-- The training loop the passes in a row stand for: an Accelerator's, whose
-- modules fill the Lua heap (the collector lets garbage wait longer beside
-- a larger heap: backward forces a full collection at 16 times the heap's
-- size, bindings/lua_util.c), with an optimizer step after each backward
-- (learning rate 0: the parameters stay). Returns the optimizer and the
-- bytes of its state.
local function loop_optimizer(o, trainable)
  local _ = accel.Accelerator
  local optim, opt = accel.optim, nil
  if o.optimizer == "adamw" then opt = optim.AdamW(trainable, {lr = 0})
  elseif o.optimizer == "adam" then opt = optim.Adam(trainable, {lr = 0})
  elseif o.optimizer == "sgd_momentum" then opt = optim.SGD(trainable, {lr = 0, momentum = 0.9})
  else opt = optim.SGD(trainable, {lr = 0}) end
  accel._C.clear_grads(trainable)
  collectgarbage()
  local before = accel.memory_stats()
  for _, p in ipairs(trainable) do p.grad = accel.zeros_like(p) end
  opt:step()
  accel._C.clear_grads(trainable)
  collectgarbage()
  return opt, accel.memory_stats() - before
end

-- Activations: one warm-up pass, then --steps passes at each of
-- --gc_phases offsets of the collector's cycle (a training loop settles
-- into one phase, fixed by what else it allocates); the highest peak, and
-- the lowest settled one (last pass of a phase), each minus the bytes of
-- the parameters and their gradients.
function M.measure(job, o, trainable)
  local model = job.model
  amp.patch_forward(model, amp.dtype_of(o.mixed_precision))
  model:train()
  local scaler = o.mixed_precision == "fp16" and amp.GradScaler() or nil
  local state = 0
  for _, p in ipairs(model:parameters()) do state = state + p:numel() * p:element_size() end
  for _, p in ipairs(trainable) do state = state + p:numel() * p:element_size() end
  local pushed = accel._C.gc_tensor_bytes_pushed()
  one_pass(job, o, scaler, trainable, 0) -- warm-up
  pushed = accel._C.gc_tensor_bytes_pushed() - pushed
  local highest, lowest = 0, math.huge
  for phase = 0, o.gc_phases - 1 do
    local peak
    for _ = 1, o.steps do
      peak = one_pass(job, o, scaler, trainable, phase * GC_CYCLE / o.gc_phases)
      highest = math.max(highest, peak)
    end
    lowest = math.min(lowest, peak)
  end
  -- A small model's passes leave their garbage for many of them before a
  -- full collection: passes in a row over one whole cycle (counted in the
  -- tensor bytes a pass hands to Lua, as the collector counts it), as a
  -- training loop runs them, see the most of it.
  local in_row = math.min(MAX_PASSES_IN_ROW, math.ceil(GC_CYCLE / math.max(pushed, 1)) + 1)
  local opt, opt_state = loop_optimizer(o, trainable)
  local in_row_highest = 0
  for _ = 1, in_row do in_row_highest = math.max(in_row_highest, one_pass(job, o, scaler, trainable, 0, opt)) end
  highest = math.max(highest, in_row_highest - opt_state)
  accel._C.clear_grads(trainable)
  amp.unpatch_forward(model)
  local function net(b) return math.max(b - state, 0) end
  return {highest = net(highest), lowest = net(lowest), in_row = in_row}
end

-- ---------------------------------------------------------------- output

-- Accelerate's convert_bytes: the largest 1024-based unit, two decimals
-- at most (Python's round(x, 2) printed: "9.0 MB", "84.95 MB").
function M.convert_bytes(n)
  local function rounded(v) return (("%.2f"):format(v):gsub("0$", "")) end -- Python's round(v, 2) as printed
  local size = n
  for _, unit in ipairs({"bytes", "KB", "MB", "GB", "TB"}) do
    if size < 1024 then
      local whole = n == math.floor(n) and (not math.type or math.type(n) == "integer")
      if unit == "bytes" and whole then return ("%d bytes"):format(n) end
      return rounded(size) .. " " .. unit
    end
    size = size / 1024
  end
  return rounded(size) .. " PB"
end

local function utf8_len(s)
  local _, n = s:gsub("[^\128-\191]", "")
  return n
end

local function pad_to(s, w, align)
  local gap = w - utf8_len(s)
  if align == "left" then return " " .. s .. (" "):rep(gap) .. " " end
  if align == "right" then return " " .. (" "):rep(gap) .. s .. " " end
  local left = math.floor(gap / 2)
  return " " .. (" "):rep(left) .. s .. (" "):rep(gap - left) .. " "
end

-- A boxed table as Accelerate's create_ascii_table draws it (title row,
-- centred headers); the first column left-aligned, numbers right-aligned.
function M.ascii_table(title, headers, rows, rule_before)
  local widths = {}
  for c, h in ipairs(headers) do
    widths[c] = utf8_len(h)
    for _, r in ipairs(rows) do widths[c] = math.max(widths[c], utf8_len(r[c])) end
  end
  local inner = -1
  for _, w in ipairs(widths) do inner = inner + w + 3 end
  if utf8_len(title) + 2 > inner then
    widths[#widths] = widths[#widths] + utf8_len(title) + 2 - inner
    inner = utf8_len(title) + 2
  end
  local function rule(l, m, r)
    local parts = {}
    for c, w in ipairs(widths) do parts[c] = ("─"):rep(w + 2) end
    return l .. table.concat(parts, m) .. r
  end
  local function line(cells, aligns)
    local parts = {}
    for c, s in ipairs(cells) do parts[c] = pad_to(s, widths[c], aligns and aligns[c]) end
    return "│" .. table.concat(parts, "│") .. "│"
  end
  local out = {"┌" .. ("─"):rep(inner) .. "┐", "│" .. pad_to(title, inner - 2) .. "│", rule("├", "┬", "┤"),
    line(headers), rule("├", "┼", "┤")}
  local aligns = {"left", "right", "right", "left"}
  for i, r in ipairs(rows) do
    if rule_before[i] then out[#out + 1] = rule("├", "┼", "┤") end
    out[#out + 1] = line(r, aligns)
  end
  out[#out + 1] = rule("└", "┴", "┘")
  return table.concat(out, "\n")
end

local STAGE_NAMES = {[0] = "no sharding (DDP)", "ZeRO-1: optimizer state sharded",
  "ZeRO-2 / SHARD_GRAD_OP: + gradients", "ZeRO-3 / FULL_SHARD: + parameters"}
local OPT_NAMES = {adamw = "AdamW", adam = "Adam", sgd = "SGD", sgd_momentum = "SGD (momentum)"}

local function report(job, o, s, r, act, machine)
  local opt_label = o.offload_optimizer and "optimizer states (host)" or "optimizer states"
  local rows = {
    {"parameters", r.parameters, r.f.parameters},
    {"gradients", r.gradients, r.f.gradients},
    {opt_label, r.optimizer, r.f.optimizer},
  }
  if r.gathered then rows[#rows + 1] = {"gathered unit (transient)", r.gathered, r.f.gathered} end
  if r.grad_bucket then rows[#rows + 1] = {"gradient buffer (transient)", r.grad_bucket, r.f.grad_bucket} end
  rows[#rows + 1] = {"activations (measured)", act.highest, "highest peak - params - grads"}
  local total = 0
  for _, row in ipairs(rows) do total = total + row[2] end
  rows[#rows + 1] = {"total", total, "sum of the rows above"}
  local cells = {}
  for i, row in ipairs(rows) do
    local bytes = math.tointeger and math.tointeger(row[2]) or row[2] -- a whole count: "444 bytes", not "444.0 bytes"
    cells[i] = {row[1], M.convert_bytes(bytes), ("%d"):format(bytes), row[3]}
  end
  local title = ("Memory per rank for training `%s`"):format(job.name)
  print(M.ascii_table(title, {"Component", "Size", "Bytes", "Formula"}, cells, {[#cells] = true}))
  print(("processes: %d; stage %d, %s; mixed_precision %s; optimizer %s; batch size %d per rank%s")
    :format(o.num_processes, o.zero_stage, STAGE_NAMES[o.zero_stage], o.mixed_precision, OPT_NAMES[o.optimizer],
      o.batch_size, job.seq_len and (", seq_len " .. job.seq_len) or ""))
  if job.detail then print("model: " .. job.detail) end
  local unit_sizes = {}
  for _, u in ipairs(s.units) do
    local label = ("%s%d"):format(u.root and "root " or "", u.numel)
    local last = unit_sizes[#unit_sizes]
    if last and last.label == label then last.n = last.n + 1 else unit_sizes[#unit_sizes + 1] = {label = label, n = 1} end
  end
  for i, g in ipairs(unit_sizes) do unit_sizes[i] = g.n > 1 and ("%d x %s"):format(g.n, g.label) or g.label end
  print(("P = %d trainable parameter elements (F = %d frozen); %d unit(s) of %s elements, padded to multiples of N = %d")
    :format(s.trainable, s.frozen, #s.units, table.concat(unit_sizes, ", "), o.num_processes))
  print(("measured on: %s, %d logical CPU(s), %d physical core(s), %d compute thread(s); float32 master weights%s")
    :format(machine.cpu or "unknown CPU", machine.logical_cpus or 0, machine.physical_cores or 0, accel.num_threads(),
      o.mixed_precision ~= "no" and (", " .. o.mixed_precision .. " autocast (GEMM operands cast on the fly)") or ""))
  local dev = accel.get_default_device().type
  if dev ~= "cpu" then
    print(("device: %s (the default device: the model, its gradients, optimizer state and activations live there; "
      .. "the bytes are its live tensor bytes)"):format(dev))
  end
  print(("activations: the highest peak of %d pass(es) at each of %d phase(s) of Lua's garbage collector and of "
    .. "%d pass(es) in a row (one collector cycle), after a warm-up pass; the lowest settled phase needs %s (a "
    .. "training loop settles into one phase, depending on what else it allocates)"):format(o.steps, o.gc_phases,
      act.in_row, M.convert_bytes(act.lowest)))
  if o.offload_optimizer and dev ~= "cpu" then
    print(("offload: the sharding engine keeps the optimizer states on %s (moving them to the host is not "
      .. "implemented for devices yet), so the total stays the same"):format(dev))
  elseif o.offload_optimizer then
    print("offload: the optimizer states live on the host; this is a CPU-only build, where the host memory is the "
      .. "device memory, so nothing moves and the total stays the same")
  end
  if o.zero_stage == 1 or o.zero_stage == 2 then
    print("stages 1-2: each rank keeps the full parameters, all-gathered after every optimizer step")
  end
end

-- ---------------------------------------------------------------- main

-- The usage lines, printed after a command-line error and first in --help.
M.USAGE = [[
usage: accel-lua estimate-memory SCRIPT.lua | --model gpt2 [--model_args k=v,...]
         [--num_processes N] [--zero_stage 0-3] [--mixed_precision no|bf16|fp16]
         [--batch_size B] [--seq_len T] [--optimizer adamw|adam|sgd|sgd_momentum]
         [--offload_optimizer] [--wrap transformer_based_wrap|no_wrap] [--steps K] [--gc_phases P]
]]

local HELP = M.USAGE .. [[

Per-rank memory of a training run: parameters, gradients and optimizer
states from the model's parameter list and the sharding layout, plus the
activations measured by running forward/backward passes of the model in
this process at the per-rank batch size.

  SCRIPT.lua                  returns {model = fn() or module, batch = fn(batch_size, seq_len),
                              loss = fn(model, batch)} (loss optional: model(batch) is the loss)
  --model gpt2                accel.models.gpt2.GPT2LMHeadModel
  --model_args k=v,...        GPT2Config keys (n_layer, n_embd, n_head, vocab_size, n_positions, ...)
  --num_processes N           ranks (default 1)
  --zero_stage S              0 (DDP), 1, 2 or 3 (default 0)
  --mixed_precision M         no, bf16 or fp16 (default no)
  --batch_size B              per rank (default 1)
  --seq_len T                 sequence length (gpt2 default: n_positions; passed to a script's batch)
  --optimizer O               adamw, adam, sgd or sgd_momentum (default adamw)
  --offload_optimizer         optimizer states on the host (stages 1-3); true/false may follow
                              it or an = (also yes/no, 1/0, on/off)
  --wrap W                    stage 3 only: its units, transformer_based_wrap (each ModuleList
                              child; default) or no_wrap
  --steps K                   measured passes per GC phase (default 3)
  --gc_phases P               phases of Lua's garbage collector measured (default 8)
  -h, --help                  this text
Flags may be written with dashes (--zero-stage) and as --zero_stage=3.

Example:
  accel-lua estimate-memory --model gpt2 --num_processes 2 --zero_stage 3 --batch_size 8 --mixed_precision bf16
  accel-lua estimate-memory my_model.lua --num_processes 3 --zero_stage 2 --batch_size 4
]]

-- The options of the command line; its usage errors print the usage lines.
local function command_line(argv)
  local ok, o = pcall(function() return M.check_options(M.parse_args(argv)) end)
  if ok then return o end
  if type(o) == "table" and o.usage then o.show_usage = true end
  error(o, 0)
end

local function run(argv, machine)
  if util.help_asked(argv) then
    io.write(HELP)
    return 0
  end
  local o = command_line(argv)
  local job = o.script and script_job(o) or gpt2_job(o)
  local trainable, frozen = split_params(job.model)
  if #trainable == 0 then usage("%s: the model has no parameters that require grad", job.name) end
  local s = {num_processes = o.num_processes, zero_stage = o.zero_stage,
    optimizer_states = M.OPTIMIZER_STATES[o.optimizer], trainable = 0, frozen = 0}
  for _, p in ipairs(trainable) do s.trainable = s.trainable + p:numel() end
  for _, p in ipairs(frozen) do s.frozen = s.frozen + p:numel() end
  -- the engine's own layout: stages 1-2 chunks of 25 MiB, stage 3 the wrap units
  local wrap = o.zero_stage == 3 and (o.wrap == "transformer_based_wrap" and "module_list" or "no_wrap") or nil
  local units = require("accel.shard").unit_sizes(job.model, trainable, wrap, o.zero_stage == 3, BUCKET_CAP_MB)
  s.units = M.pad_units(units, o.num_processes)
  local r = M.model_state(s)
  report(job, o, s, r, M.measure(job, o, trainable), machine)
  return 0
end

-- main(argv, machine) -> exit status; errors are printed here.
function M.main(argv, machine)
  local ok, res = pcall(run, argv, machine or {})
  if ok then return res end
  io.stdout:flush()
  if type(res) == "table" and res.usage then
    io.stderr:write(WHO, ": ", res.usage, "\n", res.show_usage and M.USAGE or "")
    return 2
  end
  io.stderr:write(WHO, ": ", tostring(res), "\n")
  return 1
end

return M
