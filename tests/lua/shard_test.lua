-- shard_test.lua: the sharding engine (core/dist/shard.c, accel.shard) across
-- processes. Run by scripts/run-tests.sh as `accel-lua shard_test.lua`
-- (exit 0 = pass); it starts `accel-lua launch --cpu --num_processes N`
-- jobs (OpenMPI, oversubscribed) on the helpers in tests/lua/helpers/:
--   shard_equiv.lua   stages 1, 2 and 3 on 1, 2 and 3 ranks end with the
--                     parameters of one process trained on the global batch
--                     (DESIGN §6.2) after 20 AdamW steps, to 1e-5 relative,
--                     on a 205-parameter model; also with clipping (the
--                     total norm equal too), accumulation k = 3, SGD with
--                     momentum and nesterov, Adam with amsgrad, two param groups with a StepLR schedule, and
--                     the wrap policies module_list, no_wrap, min_num_params,
--                     a module list and transformer_cls_names, CPU
--                     offload; under bf16 autocast every stage equals DDP
--                     on the same 2 ranks
--                     Also: full_state_dict + full_optim_state saved on 2
--                     ranks, loaded on 3 and on 1 ranks (another stage),
--                     continued == the unbroken run
--   shard_memory.lua  peak live tensor bytes per rank under stage 3 on 2
--                     ranks <= 0.55 x DDP's, for a model with small
--                     activations
--   shard_ops.lua     unscale_'s found_inf agreed by every rank, shard_state's
--                     index against the gathered tensors, full_state_dict,
--                     the offload flag, zero_grad(set_to_none = false)
--                     zeroing stage 1's .grad
--   shard_errors.lua  bad options and uses, each one clear error
--   shard_main_only.lua  get_state_dict / save_model under stage 3 on the
--                     main process only: a collective mismatch at once
--   shard_wrap.lua    FSDP FULL_SHARD wrap units on 2 ranks == DDP on 2
--                     ranks after 4 AdamW steps, to 1e-5 relative:
--                     size_based_wrap over layers in an nn.ModuleList and
--                     an nn.ModuleDict (never units) and an
--                     nn.MultiheadAttention (a unit as a whole); GPT-2 whose
--                     head is tied to transformer.wte with
--                     transformer_cls_names_to_wrap {"Embedding"} or
--                     {"GPT2Model"} or size_based_wrap (the tied weight in
--                     the root unit); each run's units checked. Also: a
--                     class not in the model, and ModuleList named, each
--                     one clear error at prepare
-- The accel-lua under test is $ACCEL_LUA_BIN, else the interpreter running
-- this script.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local HELPERS = HERE .. "/helpers/"
local all_ranks_ok = support.all_ranks_ok
local jobs = support.job_checks()
local check = jobs.check

support.require_mpirun()
local DIR = support.tmpdir()

local launch, max_rel = support.launcher(jobs, support.job_env(DIR), HELPERS), support.max_rel

local refs = {}
-- The reference run of a configuration: one process (stage=0) unless ddp
-- names a rank count for DDP (stage=-1) on that many ranks.
local function reference(key, ddp, extra)
  if not refs[key] then
    local path = DIR .. "/ref_" .. key .. ".st"
    local run = launch(ddp or 1, "shard_equiv.lua", path, ddp and "stage=-1" or "stage=0", table.unpack(extra))
    refs[key] = {path = path, run = run, norm = tonumber(run.out:match("norm ([%d.]+)"))}
  end
  return refs[key]
end

local function equiv(name, n, stage, key, extra, ddp)
  local ref = reference(key, ddp, extra)
  local path = ("%s/%s_s%d_n%d.st"):format(DIR, key, stage, n)
  local run = launch(n, "shard_equiv.lua", path, "stage=" .. stage, table.unpack(extra))
  local d, where = max_rel(path, ref.path)
  local norm = tonumber(run.out:match("norm ([%d.]+)"))
  local early = tonumber(run.out:match("early (%d+)") or "0")
  local why = {{ref.run.code == 0, "the reference run failed: " .. ref.run.err:sub(-300)},
    {run.code == 0, "exit status"}, {all_ranks_ok(run, n), "not every rank finished"},
    {d <= 1e-5, ("parameters differ by %g relative (%s)"):format(d, where)}}
  if table.concat(extra, " "):find("clip=", 1, true) then
    why[#why + 1] = {norm and ref.norm and ref.norm > 0.1 and math.abs(norm - ref.norm) <= 1e-5 * ref.norm,
      ("clip total norm %s, reference %s"):format(tostring(norm), tostring(ref.norm))}
  end
  if stage >= 2 and n > 1 then
    why[#why + 1] = {early > 0, "no reduction started during backward"}
  end
  if table.concat(extra, " "):find("prefetch=1", 1, true) then
    why[#why + 1] = {tonumber(run.out:match(" prefetches (%d+)") or "0") > 0, "no unit was prefetched"}
    why[#why + 1] = {tonumber(run.out:match("forward_prefetches (%d+)") or "0") > 0, "no unit was prefetched in forward"}
  end
  local against = ddp and ("DDP on %d ranks"):format(ddp) or "1 process, global batch"
  check(("%s: stage %d on %d rank(s) == %s"):format(name, stage, n, against), run, table.unpack(why))
end

-- ---- (a) every stage on 1, 2, 3 ranks, AdamW ----
for _, n in ipairs({1, 2, 3}) do
  for stage = 1, 3 do equiv("AdamW, wrap module_list", n, stage, "base", {"wrap=module_list"}) end
end

-- ---- (b) clipping, accumulation, SGD momentum, param groups + scheduler, wrap policies ----
for stage = 1, 3 do
  equiv("clip_grad_norm_(0.1), wrap min_num_params", 2, stage, "clip", {"clip=0.1", "wrap=min"})
  equiv("accumulation k = 3, no_wrap", 3, stage, "accum", {"accum=3", "wrap=no_wrap"})
  equiv("SGD momentum 0.9, wrap a module list", 3, stage, "sgd", {"opt=sgd", "wrap=list"})
  equiv("2 param groups + StepLR, transformer_cls_names", 3, stage, "groups", {"groups=2", "wrap=cls"})
end
equiv("stage 1-2 default units (bucket-sized)", 3, 2, "default", {"wrap=default"})
for stage = 2, 3 do
  equiv("Adam (L2 decay) amsgrad, betas (0.8, 0.99)", 3, stage, "amsgrad", {"opt=amsgrad", "wrap=module_list"})
  equiv("SGD nesterov", 2, stage, "nesterov", {"opt=nesterov", "wrap=min"})
end
equiv("forward + backward prefetch", 3, 3, "base", {"wrap=module_list", "prefetch=1"})
equiv("forward + backward prefetch, accumulation k = 3", 2, 3, "accum", {"accum=3", "wrap=cls", "prefetch=1"})
equiv("no prefetch", 2, 3, "base", {"wrap=module_list", "prefetch=0"})

-- ---- (b2) full state saved on 2 ranks, loaded on 3 and on 1, continued ----
do
  local ref = reference("base", nil, {"wrap=module_list"})
  local ck = DIR .. "/full_ck.st"
  local first = launch(2, "shard_equiv.lua", DIR .. "/half.st", "stage=2", "steps=10", "save=" .. ck)
  for _, c in ipairs({{3, 3}, {1, 1}}) do
    local path = ("%s/resumed_%d.st"):format(DIR, c[1])
    local run = launch(c[1], "shard_equiv.lua", path, "stage=" .. c[2], "steps=10", "start=10", "load=" .. ck)
    local d, where = max_rel(path, ref.path)
    check(("10 steps at stage 2 on 2 ranks, full state loaded at stage %d on %d rank(s), 10 more == 20 unbroken")
      :format(c[2], c[1]), run, {first.code == 0, "the saving run failed: " .. first.err:sub(-300)},
      {run.code == 0, "exit status"}, {d <= 1e-5, ("parameters differ by %g relative (%s)"):format(d, where)})
  end
end

-- ---- (c) memory: stage 3 on 2 ranks vs DDP ----
do
  local ddp = launch(2, "shard_memory.lua", "ddp")
  local s3 = launch(2, "shard_memory.lua", "stage3")
  local why = {{ddp.code == 0, "the DDP run failed: " .. ddp.err:sub(-300)}, {s3.code == 0, "exit status"}}
  for r = 0, 1 do
    local a = tonumber(ddp.out:match("peak " .. r .. " (%d+)") or "")
    local b = tonumber(s3.out:match("peak " .. r .. " (%d+)") or "")
    why[#why + 1] = {a and b and b <= 0.55 * a,
      ("rank %d: stage 3 peak %s bytes, DDP %s (ratio %s)"):format(r, tostring(b), tostring(a),
        a and b and ("%.3f"):format(b / a) or "?")}
  end
  check("stage 3 peak live bytes per rank <= 0.55 x DDP's (2 ranks)", s3, table.unpack(why))
end

-- ---- (d) unscale_ / found_inf, shard_state's index, full_state_dict, offload; (e) bad inputs ----
local function all_ok(what, helper, n)
  local run = launch(n, helper)
  check(("%s (%d rank(s))"):format(what, n), run, {run.code == 0, "exit status"},
    {all_ranks_ok(run, n), "not every rank printed its ok line"})
end
for _, n in ipairs({2, 3}) do
  all_ok("found_inf agreed, shard_state index, full_state_dict, offload flag, stages 1-3", "shard_ops.lua", n)
end
for stage = 2, 3 do
  equiv("offload_optimizer = cpu", 2, stage, "base", {"wrap=module_list", "offload=cpu"})
end
for stage = 1, 3 do
  equiv("bf16 autocast, clip 0.1", 2, stage, "bf16", {"wrap=module_list", "amp=bf16", "clip=0.1"}, 2)
end
for _, n in ipairs({1, 2}) do all_ok("bad options and uses give one clear error each", "shard_errors.lua", n) end
do -- a collective gather called on the main process only: an immediate mismatch at the callers' lines
  local lines = {}
  local n = 0
  for line in io.lines(HELPERS .. "shard_main_only.lua") do
    n = n + 1
    local mark = line:match("%-%- (%a+):$")
    if mark then lines[mark] = n end
  end
  for _, what in ipairs({"get_state_dict", "save_model"}) do
    local run = launch(2, "shard_main_only.lua", what, DIR .. "/main_only")
    local why = {{run.code ~= 0, "the run did not fail"}, {run.secs < 30, "it waited for the collective timeout"},
      {not run.out:find("was not stopped", 1, true), "a rank went on"}}
    -- each rank stops at its own line with the mismatch; the first to stop
    -- ends the job (MPI_Abort), so under load the other's message may never
    -- be printed: one of the two must be there
    local found, wants = false, {}
    for rank, mark in pairs({[0] = "main", [1] = "others"}) do
      local want = ("rank %d: %sshard_main_only.lua:%d: collective mismatch: rank 0 called all_gather_v, rank 1 "
        .. "called barrier"):format(rank, HELPERS, lines[mark])
      found = found or run.err:find(want, 1, true) ~= nil
      wants[#wants + 1] = want
    end
    why[#why + 1] = {found, "no error saying: " .. table.concat(wants, " or: ")}
    check(what .. " under stage 3 on the main process only: one collective mismatch at once on every rank", run,
      table.unpack(why))
  end
end

-- ---- (f) wrap units: containers never called, a parameter shared across units, unknown classes ----
local wrap_refs = {}
-- name: what runs; args: shard_wrap.lua's (model= first); units: the unit classes expected.
local function wrap_equiv(name, args, units)
  local model = args[1]
  if not wrap_refs[model] then
    local path = ("%s/wrap_ref_%s.st"):format(DIR, model)
    wrap_refs[model] = {path = path, run = launch(2, "shard_wrap.lua", path, model, "wrap=none")}
  end
  local ref = wrap_refs[model]
  local path = ("%s/wrap_%s.st"):format(DIR, (table.concat(args, "_"):gsub("[=,]", "-")))
  local run = launch(2, "shard_wrap.lua", path, table.unpack(args))
  local d, where = max_rel(path, ref.path)
  check(name .. ": FULL_SHARD on 2 ranks == DDP on 2 ranks", run,
    {ref.run.code == 0, "the DDP run failed: " .. ref.run.err:sub(-300)}, {run.code == 0, "exit status"},
    {all_ranks_ok(run, 2), "not every rank finished"},
    {d <= 1e-5, ("parameters differ by %g relative (%s)"):format(d, where)},
    {run.out:find("units " .. units .. "\n", 1, true), "units are not: " .. units})
end
-- name: what is refused; args: shard_wrap.lua's; texts: what the error must say.
local function wrap_refused(name, args, ...)
  local run = launch(2, "shard_wrap.lua", DIR .. "/wrap_refused.st", table.unpack(args))
  local why = {{run.code ~= 0, "the run did not fail"}}
  for _, text in ipairs({...}) do why[#why + 1] = {run.err:find(text, 1, true), "the error does not say: " .. text} end
  check(name .. ": one clear error at prepare (2 ranks)", run, table.unpack(why))
end
wrap_equiv("size_based_wrap min_num_params = 60: no ModuleList / ModuleDict unit, MultiheadAttention whole",
  {"model=lists", "wrap=size", "min=60"}, "root MultiheadAttention")
wrap_equiv("a callable auto_wrap_policy (every Linear; none inside MultiheadAttention)", {"model=lists", "wrap=policy"},
  "root Linear Linear Linear Linear Linear")
wrap_equiv("GPT-2 tied head, transformer_cls_names_to_wrap = {Embedding}",
  {"model=gpt", "wrap=transformer", "names=Embedding"}, "root Embedding")
wrap_equiv("GPT-2 tied head, transformer_cls_names_to_wrap = {GPT2Model}",
  {"model=gpt", "wrap=transformer", "names=GPT2Model"}, "root GPT2Model")
wrap_equiv("GPT-2 tied head, size_based_wrap min_num_params = 500 (GPT2Model, not its ModuleList)",
  {"model=gpt", "wrap=size", "min=500"}, "root GPT2Model")
wrap_refused("transformer_cls_names_to_wrap = {GPT2block}", {"model=gpt", "wrap=transformer", "names=GPT2block"},
  "could not find the transformer layer class GPT2block in the model",
  "module classes are: GPT2LMHeadModel, GPT2Model, Embedding, Dropout, ModuleList, GPT2Block")
wrap_refused("transformer_cls_names_to_wrap = {GPT2Block, ModuleList}",
  {"model=gpt", "wrap=transformer", "names=GPT2Block,ModuleList"},
  "a ModuleList cannot be a wrap unit: it is never called", "their classes: GPT2Block")

support.remove_tree(DIR)
jobs.finish()
