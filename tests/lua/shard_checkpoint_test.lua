-- shard_checkpoint_test.lua: checkpoints under the sharding engine
-- (accel.shard_checkpoint, docs/sharded-checkpoints.md). Run by
-- scripts/run-tests.sh as `accel-lua shard_checkpoint_test.lua` (exit 0 =
-- pass); it starts `accel-lua launch --cpu --num_processes N` jobs
-- (OpenMPI, oversubscribed) of tests/lua/helpers/shard_resume.lua, a
-- 205-parameter model trained with AdamW + StepLR through the Accelerator
-- (global batch 12, 5 steps an epoch), and checks:
--   (a) save_state on 2 ranks at stage 1, 2, 3, after 5 steps (epoch
--       boundary) and 7 (mid-epoch), load_state on 3 ranks (same stage) and
--       on 1 process without sharding, continued to 12 steps: the
--       parameters equal one process trained 12 steps unbroken (1e-6);
--       also 3 -> 1 (stage 2 -> stage 1), 1 -> 2 (stage 3 -> stage 2) and
--       an unsharded checkpoint (1 process) into stage 3 on 2 ranks, DDP into
--       stage 1, and a load inside eng:gathered(fn); peak live bytes during
--       load_state (3 ranks stage 3, 2 ranks stage 1, 1 process without
--       sharding) <= what the load leaves + 4 tensors (< half the model);
--   (b) merge-weights of a 2-rank checkpoint (each stage) is byte-identical
--       to save_model of the same model trained with DDP on 2 ranks, to
--       save_model under the engine (streamed) and to checkpoint.save_model
--       of eng:full_state_dict(); with max_shard_size = 300 bytes the
--       streamed files and model.safetensors.index.json equal the
--       unstreamed ones; peak live bytes during save_model <= the live bytes
--       before + the largest tensor (stage 3: < the full model);
--   (c) refusals, each naming the file and changing nothing (the run then
--       equals one that never loaded): a missing rank's shard file (on
--       disk, and also dropped from the index), a corrupted shard, a model
--       of another shape, an index whose pieces leave a gap; merge-weights
--       on indexes with such a gap, a rank past the world, a string shape
--       or fewer files than processes, on a missing / corrupt / unsharded
--       folder, --help, bad arguments, an OUTPUT inside CHECKPOINT_DIR
--       (the checkpoint unchanged byte for byte);
--   (d) tests/lua/helpers/shard_frozen.lua: frozen parameters (requires_grad
--       = false) get the saved values under stage 1 / 3 and without sharding,
--       also when the checkpoint's frozen / trainable split differs (the
--       constants the saving run set); frozen, saved, unfrozen and resumed ==
--       one process unfreezing (a fresh optimizer state); tied weights saved
--       at stage 3 load without sharding; a pre-hook keeping the model out
--       (saving it itself into a sub-folder) still gets the optimizer state
--       back; strict = false from a sharded checkpoint into a model without
--       sharding; merge-weights creates OUTPUT's folders;
--   (e) tests/lua/helpers/zero3_16bit.lua: DeepSpeed's zero3_save_16bit_model
--       under ZeRO-3 and bf16 gathers the weights in bfloat16.
-- The accel-lua under test is $ACCEL_LUA_BIN, else the interpreter running
-- this script.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")
local json = require("accel.json")

local jobs = support.job_checks()
local check, all_ranks_ok, has = jobs.check, support.all_ranks_ok, support.has

support.require_mpirun()
local DIR = support.tmpdir()
local ENV = support.job_env(DIR)
local launch, max_rel = support.launcher(jobs, ENV, HERE .. "/helpers/"), support.max_rel
local q = support.shell_quote
local accel_load = require("accel").load

local function path(name) return DIR .. "/" .. name end
local function ok_run(run, n) return {run.code == 0 and all_ranks_ok(run, n), "exit " .. run.code .. ": " .. run.err:sub(-400)} end
local function same_bytes(a, b)
  local x, y = support.read_if_exists(a), support.read_if_exists(b)
  return x ~= nil and x ~= "" and x == y
end
local function merge(...)
  local args = {}
  for i, a in ipairs({...}) do args[i] = q(a) end
  return jobs.run(("%s%s merge-weights %s"):format(ENV, q(support.ACCEL_LUA), table.concat(args, " ")))
end

-- ---- (a) save on N ranks, load on M, continue == unbroken ----
local ref = launch(1, "shard_resume.lua", path("ref.st"), "stage=0", "steps=12")
check("reference: 12 steps on one process", ref, ok_run(ref, 1))

-- opt: "sgd" for SGD with momentum (its reference is ref_sgd.st), default AdamW
local function resume(what, save_n, save_stage, at, load_n, load_stage, opt)
  opt = opt or "adamw"
  local ck = path(("ck_%d_s%d_%d%s"):format(save_n, save_stage, at, opt == "adamw" and "" or "_" .. opt))
  local first = launch(save_n, "shard_resume.lua", ck .. ".st", "stage=" .. save_stage, "steps=" .. at, "save=" .. ck,
    "opt=" .. opt)
  local out = path(("res_%d_s%d_%d_to_%d_s%d_%s.st"):format(save_n, save_stage, at, load_n, load_stage, opt))
  local run = launch(load_n, "shard_resume.lua", out, "stage=" .. load_stage, "steps=" .. (12 - at), "load=" .. ck,
    "opt=" .. opt)
  local d, where = max_rel(out, path(opt == "adamw" and "ref.st" or "ref_" .. opt .. ".st"))
  local function label(n, s) return s == 0 and ("%d process(es) without sharding"):format(n) or ("stage %d on %d rank(s)"):format(s, n) end
  check(("%s: saved at step %d (%s) by %s, loaded by %s, 12 steps == unbroken (1e-6)"):format(what, at,
    at % 5 == 0 and "epoch boundary" or "mid-epoch", label(save_n, save_stage), label(load_n, load_stage)), run,
    {first.code == 0, "the saving run failed: " .. first.err:sub(-400)}, ok_run(run, load_n),
    {d <= 1e-6, ("parameters differ by %g relative (%s)"):format(d, where)})
  return ck
end

-- SGD's momentum buffers carry no step: loaded into the engine they must be
-- used as they are, not taken for a first step's (which sets them to the gradient)
local ref_sgd = launch(1, "shard_resume.lua", path("ref_sgd.st"), "stage=0", "steps=12", "opt=sgd")
check("reference: 12 SGD (momentum) steps on one process", ref_sgd, ok_run(ref_sgd, 1))
resume("SGD momentum, 1 -> 2", 1, 0, 7, 2, 2, "sgd")
resume("SGD momentum, 2 -> 2", 2, 3, 7, 2, 1, "sgd")

for stage = 1, 3 do
  for _, at in ipairs({5, 7}) do
    local ck = path(("ck_2_s%d_%d"):format(stage, at))
    resume("2 -> 3", 2, stage, at, 3, stage)
    local out = path(("res1_s%d_%d.st"):format(stage, at))
    local run = launch(1, "shard_resume.lua", out, "stage=0", "steps=" .. (12 - at), "load=" .. ck)
    local d, where = max_rel(out, path("ref.st"))
    check(("2 -> 1: saved at step %d by stage %d on 2 ranks, loaded on 1 process without sharding == unbroken (1e-6)")
      :format(at, stage), run, ok_run(run, 1), {d <= 1e-6, ("parameters differ by %g relative (%s)"):format(d, where)})
  end
end
do -- through the Accelerator: prepare with a DeepSpeedPlugin builds the engine, save_state / load_state use it
  local ck = path("ck_plugin")
  local first = launch(2, "shard_resume.lua", path("plugin_first.st"), "stage=2", "steps=7", "save=" .. ck, "via=plugin")
  local out = path("plugin_res.st")
  local run = launch(3, "shard_resume.lua", out, "stage=3", "steps=5", "load=" .. ck, "via=plugin")
  local d, where = max_rel(out, path("ref.st"))
  check("Accelerator with DeepSpeedPlugin: saved mid-epoch at stage 2 on 2 ranks, loaded at stage 3 on 3 ranks, "
    .. "12 steps == unbroken (1e-6)", run, {first.code == 0, "the saving run failed: " .. first.err:sub(-400)},
    ok_run(run, 3), {d <= 1e-6, ("parameters differ by %g relative (%s)"):format(d, where)})
end
resume("3 -> 1", 3, 2, 7, 1, 1)
resume("1 -> 2", 1, 3, 7, 2, 2)
resume("unsharded -> sharded", 1, 0, 7, 2, 3)
resume("DDP -> sharded", 2, 0, 5, 3, 1)
do -- loaded while stage 3's parameters are gathered (eng:gathered): the gathered copies get the full tensors
  local out = path("gathered.st")
  local run = launch(3, "shard_resume.lua", out, "stage=3", "steps=5", "load=" .. path("ck_2_s3_7"), "gathered=1")
  local d, where = max_rel(out, path("ref.st"))
  check("2 -> 3 at stage 3, load_state inside eng:gathered(fn): the parameters seen there == the loaded ones, "
    .. "continued == unbroken (1e-6)", run, ok_run(run, 3), {d <= 1e-6, ("parameters differ by %g relative (%s)"):format(d, where)})
end

do -- memory while loading: beyond what the load leaves, at most a few tensors, far below a model
  local wide = {"hidden=32", "blocks=8"} -- 37000 bytes of parameters, the largest 4096
  local ck = path("ck_wide")
  local first = launch(2, "shard_resume.lua", path("wide.st"), "stage=3", "steps=7", "save=" .. ck, table.unpack(wide))
  for _, c in ipairs({{3, 3}, {2, 1}, {1, 0}}) do
    local run = launch(c[1], "shard_resume.lua", path("wide_" .. c[1] .. ".st"), "stage=" .. c[2], "steps=1",
      "load=" .. ck, "mem=1", table.unpack(wide))
    local why = {{first.code == 0, "the saving run failed: " .. first.err:sub(-300)}, ok_run(run, c[1])}
    for r = 0, c[1] - 1 do
      local peak, _, after, largest, total = run.out:match(("loadstate_peak (%%d+) before (%%d+) after (%%d+) largest (%%d+) "
        .. "model (%%d+) rank %d"):format(r))
      peak, after, largest, total = tonumber(peak), tonumber(after), tonumber(largest), tonumber(total)
      why[#why + 1] = {peak and peak - after <= 4 * largest and 4 * largest < total / 2,
        ("rank %d: peak %s, after the load %s, largest tensor %s, model %s"):format(r, tostring(peak), tostring(after),
          tostring(largest), tostring(total))}
    end
    check(("load_state on %d rank(s) (%s): peak live bytes <= what the load leaves + 4 tensors (< half the model)")
      :format(c[1], c[2] == 0 and "no sharding" or "stage " .. c[2]), run, table.unpack(why))
  end
end

-- ---- (b) merge-weights, save_model under the engine ----
local ddp = launch(2, "shard_resume.lua", path("ddp.st"), "stage=0", "steps=7", "model=" .. path("ddp_model"))
check("DDP reference: 7 steps on 2 ranks, save_model", ddp, ok_run(ddp, 2))
for stage = 1, 3 do
  local ck, sm, plain = path("mck" .. stage), path("msm" .. stage), path("mplain" .. stage)
  local run = launch(2, "shard_resume.lua", path("m" .. stage .. ".st"), "stage=" .. stage, "steps=7", "save=" .. ck,
    "model=" .. sm, "plain=" .. plain, "mem=1")
  local merged = path("merged" .. stage .. ".safetensors")
  local m = merge(ck, merged)
  check(("merge-weights of a stage %d checkpoint on 2 ranks == save_model of DDP on 2 ranks (bitwise)"):format(stage), m,
    ok_run(run, 2), {m.code == 0 and has(m.out, "wrote"), "merge-weights failed: " .. m.err},
    {same_bytes(merged, path("ddp_model/model.safetensors")), "the merged file differs from DDP's save_model"})
  check(("stage %d: save_model (streamed) == merge-weights == checkpoint.save_model(full_state_dict) (bitwise)"):format(stage),
    run, {same_bytes(merged, sm .. "/model.safetensors"), "streamed save_model differs from the merged file"},
    {same_bytes(plain .. "/model.safetensors", sm .. "/model.safetensors"), "streamed save_model differs from the full state dict's"})
  for r = 0, 1 do
    local peak, before, largest, total = run.out:match(("savemodel_peak (%%d+) before (%%d+) largest (%%d+) model (%%d+) rank %d"):format(r))
    peak, before, largest, total = tonumber(peak), tonumber(before), tonumber(largest), tonumber(total)
    check(("stage %d rank %d: peak live bytes during save_model <= before + the largest tensor"):format(stage, r), run,
      {peak ~= nil, "no savemodel_peak line"},
      {peak and peak <= before + largest, ("peak %s, before %s, largest tensor %s, model %s"):format(tostring(peak),
        tostring(before), tostring(largest), tostring(total))},
      {peak and (peak - before) < total, "save_model held a full model's worth of extra tensors"})
  end
end
do -- sharded save_model files (max_shard_size = 300 bytes)
  local run = launch(2, "shard_resume.lua", path("ms.st"), "stage=3", "steps=2", "model=" .. path("ms_stream"),
    "plain=" .. path("ms_plain"), "max_shard_size=300")
  local files = support.read_if_exists(path("ms_plain/model.safetensors.index.json"))
  local why = {ok_run(run, 2), {files and files ~= "", "no model.safetensors.index.json"}}
  local index = files and files ~= "" and json.decode(files) or {weight_map = {}}
  local seen, n = {}, 0
  for _, f in pairs(index.weight_map) do
    if not seen[f] then
      seen[f], n = true, n + 1
      why[#why + 1] = {same_bytes(path("ms_plain/" .. f), path("ms_stream/" .. f)), f .. " differs"}
    end
  end
  why[#why + 1] = {n >= 3, ("only %d weight files"):format(n)}
  why[#why + 1] = {same_bytes(path("ms_plain/model.safetensors.index.json"), path("ms_stream/model.safetensors.index.json")),
    "model.safetensors.index.json differs"}
  check("stage 3, max_shard_size 300 B: streamed save_model's files and index == checkpoint.save_model's", run,
    table.unpack(why))
end

-- ---- (c) refusals ----
local base = path("ck_2_s3_7") -- saved at stage 3 on 2 ranks, mid-epoch
local fresh = launch(3, "shard_resume.lua", path("fresh.st"), "stage=3", "steps=5")
local function copy(name)
  local dst = path(name)
  os.execute(("rm -rf %s && cp -r %s %s"):format(q(dst), q(base), q(dst)))
  return dst
end
local function refused(what, dir, want, extra, unloaded)
  local out = path("refused_" .. what:gsub("%W", "_") .. ".st")
  local run = launch(3, "shard_resume.lua", out, "stage=3", "steps=5", "load=" .. dir, "refused=1", table.unpack(extra or {}))
  local d = max_rel(out, unloaded and unloaded.path or path("fresh.st"))
  fresh = unloaded and unloaded.run or fresh
  check("load_state refuses " .. what, run, ok_run(run, 3), {has(run.out, "refused: ") and has(run.out, want),
    ("the message does not name %q: %s"):format(want, run.out:match("refused: [^\n]*") or "(none)")},
    {fresh.code == 0 and d == 0, ("after the refusal the run differs from one that never loaded (%g)"):format(d)})
end
local missing = copy("missing")
os.remove(missing .. "/model_shard_1.safetensors")
refused("a checkpoint missing rank 1's shard file", missing, "model_shard_1.safetensors")
local dropped = copy("dropped")
os.remove(dropped .. "/optimizer_shard_1.safetensors")
do
  local f = dropped .. "/checkpoint_index.json"
  local idx = json.decode(support.read_file(f))
  idx.files["optimizer_shard_1.safetensors"] = nil
  support.write_file(f, json.encode(idx))
end
refused("a shard file missing from the folder and from the index", dropped, "optimizer_shard_1.safetensors is missing")
local unlisted = copy("unlisted")
do -- the index's layout without the pieces of inp.weight (the fingerprint still lists it)
  local f = unlisted .. "/checkpoint_index.json"
  local idx = json.decode(support.read_file(f))
  local params = idx.models[1].sharded.params
  for i = #params, 1, -1 do
    if params[i].name == "inp.weight" then table.remove(params, i) end
  end
  support.write_file(f, json.encode(idx))
end
refused("a layout that lacks a parameter", unlisted,
  "model_shard_0.safetensors does not hold inp.weight of model 1 as [7,6] (missing)")
-- a copy of base whose index's layout (models[1].sharded) edit(layout) changed
local function edited_layout(name, edit)
  local dir = copy(name)
  local f = dir .. "/checkpoint_index.json"
  local idx = json.decode(support.read_file(f))
  edit(idx.models[1].sharded)
  support.write_file(f, json.encode(idx))
  return dir
end
local function split_param(layout) -- the first parameter held in two pieces
  for _, p in ipairs(layout.params) do
    if #p.pieces == 2 and p.pieces[1][3] > 1 and p.pieces[2][3] > 1 then return p end
  end
  error("no parameter of the layout is split over the two ranks")
end
local gap = edited_layout("gap", function(layout) -- element 0 left out, one element read twice
  local p = split_param(layout)
  p.pieces[1][2] = 1
end)
refused("pieces that leave a gap", gap, "do not cover its")
local corrupt = copy("corrupt")
do
  local f = corrupt .. "/model_shard_0.safetensors"
  local bytes = support.read_file(f)
  local k = #bytes - 3
  support.write_file(f, bytes:sub(1, k - 1) .. string.char((bytes:byte(k) + 1) % 256) .. bytes:sub(k + 1))
end
refused("a corrupted shard", corrupt, "model_shard_0.safetensors is corrupted")
refused("a checkpoint of another model shape", base, "checkpoint of another model", {"hidden=5"},
  {path = path("fresh5.st"), run = launch(3, "shard_resume.lua", path("fresh5.st"), "stage=3", "steps=5", "hidden=5")})

local m = merge(missing, path("x.safetensors"))
check("merge-weights refuses a missing shard, naming it", m, {m.code == 1, "exit " .. m.code},
  {has(m.err, "model_shard_1.safetensors"), m.err}, {require("accel")._C.fs_stat(path("x.safetensors")) == nil, "wrote a file"})
m = merge(corrupt, path("x.safetensors"))
check("merge-weights refuses a corrupted shard", m, {m.code == 1, "exit " .. m.code},
  {has(m.err, "model_shard_0.safetensors is corrupted"), m.err})
m = merge(path("ck_2_s0_5"), path("x_out"))
check("merge-weights refuses a folder saved without sharding, and creates no OUTPUT folder", m,
  {m.code == 1, "exit " .. m.code}, {has(m.err, "is not a sharded checkpoint"), m.err},
  {require("accel")._C.fs_stat(path("x_out")) == nil, "left an OUTPUT folder"})
for _, c in ipairs({
  {"pieces that leave a gap", gap, "pieces of %S+ do not cover its %d+ elements exactly once"},
  {"overlapping pieces", edited_layout("overlap", function(layout) -- rank 1's piece starts one element early
    local p = split_param(layout)
    p.pieces[2][2] = p.pieces[2][2] - 1
  end), "pieces of %S+ do not cover its %d+ elements exactly once"},
  {"a piece past the end", edited_layout("pastend", function(layout)
    local p = split_param(layout)
    p.pieces[2][3] = p.pieces[2][3] + 1
  end), "pieces of %S+ do not cover its %d+ elements exactly once"},
  {"a piece on a rank past the world", edited_layout("rank7", function(layout) split_param(layout).pieces[2][1] = 7 end),
    "piece 2 of %S+ is not {rank < 2, start, length}"},
  {"a string shape", edited_layout("strshape", function(layout) layout.params[1].shape = "x" end), "bad shard layout: "},
  {"fewer files than processes", edited_layout("onefile", function(layout) layout.files = {layout.files[1]} end),
    "bad shard layout: 1 files listed for 2 processes"},
}) do
  m = merge(c[2], path("x.safetensors"))
  check("merge-weights refuses an index with " .. c[1], m, {m.code == 1, "exit " .. m.code},
    {m.err:find("checkpoint_index.json is corrupted", 1, true) and m.err:find(c[3]), m.err},
    {require("accel")._C.fs_stat(path("x.safetensors")) == nil, "wrote a file"})
end
m = merge(path("nothing-here"), path("x.safetensors"))
check("merge-weights: no such folder", m, {m.code == 1 and has(m.err, "no checkpoint at"), m.err})
m = merge("--help")
check("merge-weights --help", m, {m.code == 0 and has(m.out, "usage: accel-lua merge-weights"), m.out .. m.err})
m = merge(base)
check("merge-weights with one argument: usage, exit 2", m, {m.code == 2 and has(m.err, "usage:"), m.err})
m = merge(base, path("y.st"), "--frobnicate")
check("merge-weights: unknown option named", m, {m.code == 2 and has(m.err, "--frobnicate"), m.err})
m = merge(base, path("y.st"), "--unsafe_serialization")
check("merge-weights --unsafe_serialization refused", m, {m.code == 2 and has(m.err, "only safetensors"), m.err})
do -- OUTPUT as a folder (accelerate merge-weights' form), --remove_checkpoint_dir
  local ck = copy("to_remove")
  m = merge(ck, path("merged_dir"), "--remove_checkpoint_dir")
  local fs = require("accel")._C.fs_stat
  check("merge-weights CKPT DIR --remove_checkpoint_dir: DIR/model.safetensors, the checkpoint removed", m,
    {m.code == 0, m.err}, {max_rel(path("merged_dir/model.safetensors"), path("ck_2_s3_7.st")) == 0,
      "DIR/model.safetensors is missing or differs from the saving run's weights"},
    {fs(ck) == nil, "the checkpoint is still there"})
end
do -- OUTPUT inside CHECKPOINT_DIR (or equal to it) is refused before anything is written: the folder stays byte for byte
  local C = require("accel")._C
  local ck = copy("inside")
  local function snapshot()
    local files = {}
    for _, name in ipairs(C.fs_listdir(ck) or {}) do files[name] = support.read_file(ck .. "/" .. name) end
    return files
  end
  local function same_files(a, b)
    for name, bytes in pairs(a) do if b[name] ~= bytes then return false, name .. " changed or is gone" end end
    for name in pairs(b) do if a[name] == nil then return false, name .. " appeared" end end
    return true
  end
  os.execute(("ln -s %s %s"):format(q(ck), q(path("inside_link"))))
  for _, c in ipairs({
    {"a shard file of the checkpoint", ck .. "/model_shard_0.safetensors"},
    {"a new file in it, with --remove_checkpoint_dir", ck .. "/merged.safetensors", "--remove_checkpoint_dir"},
    {"the checkpoint folder itself", ck},
    {"a new folder in it", ck .. "/sub"},
    {"a path through ..", ck .. "/../inside/x.safetensors"},
    {"a path through a symbolic link to it", path("inside_link") .. "/model_shard_1.safetensors"},
  }) do
    copy("inside") -- afresh for each case (the same path)
    local before = snapshot()
    local m = merge(ck, c[2], c[3])
    local same, why = same_files(before, snapshot())
    check("merge-weights refuses OUTPUT inside CHECKPOINT_DIR (" .. c[1] .. "): exit 2, the checkpoint unchanged", m,
      {m.code == 2, "exit " .. m.code}, {has(m.err, "is inside CHECKPOINT_DIR") and has(m.err, c[2]) and has(m.err, ck), m.err},
      {same, why}, {C.fs_stat(ck .. "/sub") == nil, "created a folder in the checkpoint"})
  end
  os.remove(path("inside_link"))
end

-- ---- (d) frozen parameters, tied weights, pre-hooks, strict = false (helpers/shard_frozen.lua) ----
local function frozen_run(n, out, ...) return launch(n, "shard_frozen.lua", path(out), ...) end
local FILL = {["emb.weight"] = 0.125, ["inp.weight"] = 0.25, ["inp.bias"] = 0.375, ["fz.weight"] = 0.5,
  ["fz.bias"] = 0.625, ["head.weight"] = 0.75, count = 0.875}
-- every entry of the result file == the constant the saving run set (closed form; count + forwards after it)
local function constants(file, forwards)
  local ok, sd = pcall(accel_load, path(file))
  if not ok then return {false, "no result file " .. file} end
  for name, v in pairs(FILL) do
    v = name == "count" and v + (forwards or 0) or v
    local t = sd[name]
    if not t or t:min():item() ~= v or t:max():item() ~= v then
      local range = t and ("%g..%g"):format(t:min():item(), t:max():item()) or "missing"
      return {false, ("%s is not all %g (%s)"):format(name, v, range)}
    end
  end
  return {true}
end
local function label(n, stage)
  return stage == 0 and ("%d process(es) without sharding"):format(n) or ("stage %d on %d rank(s)"):format(stage, n)
end
do -- loaded values of frozen entries, either way round (frozen <-> trainable is no shape difference)
  local saves = {
    {"fz_frozen", 2, 3, "frozen=1"}, {"fz_train", 2, 1, "frozen=0"}, {"fz_plain", 1, 0, "frozen=1"}}
  local loads = {
    fz_frozen = {{3, 3, "frozen=1"}, {2, 1, "frozen=1"}, {3, 3, "frozen=0"}, {1, 0, "frozen=0"}},
    fz_train = {{2, 3, "frozen=1"}, {1, 0, "frozen=1"}},
    fz_plain = {{2, 3, "frozen=1"}, {2, 3, "frozen=0"}}}
  for _, c in ipairs(saves) do
    local ck = path(c[1])
    local first = frozen_run(c[2], c[1] .. ".st", "stage=" .. c[3], c[4], "fill=1", "save=" .. ck)
    for k, l in ipairs(loads[c[1]]) do
      local out = c[1] .. "_" .. k .. ".st"
      local run = frozen_run(l[1], out, "stage=" .. l[2], l[3], "load=" .. ck)
      check(("saved by %s with %s, loaded by %s with %s: every entry (frozen ones too) has the saved value")
        :format(label(c[2], c[3]), c[4], label(l[1], l[2]), l[3]), run,
        {first.code == 0, "the saving run failed: " .. first.err:sub(-400)}, ok_run(run, l[1]), constants(out))
    end
  end
end
for _, c in ipairs({{2, 3}, {2, 1}}) do -- model:load_state_dict under an engine: frozen entries too, the master copy too
  local out = ("set_%d_s%d.st"):format(c[1], c[2])
  local run = frozen_run(c[1], out, "stage=" .. c[2], "frozen=1", "set=1", "steps=2")
  check(("model:load_state_dict at %s with fz frozen, then 2 steps at lr 0: every entry has the value given")
    :format(label(c[1], c[2])), run, ok_run(run, c[1]), constants(out, 2))
end
local function same_as(run, n, out, ref)
  local d, where = max_rel(path(out), path(ref))
  return ok_run(run, n), {d <= 1e-6, ("parameters differ by %g relative (%s)"):format(d, where)}
end
do -- frozen for 3 steps, saved, unfrozen and resumed == one process unfreezing after 3 steps (a fresh optimizer state)
  local ref = frozen_run(1, "unf_ref.st", "stage=0", "frozen=1", "unfreeze_at=3", "steps=6")
  check("reference: fz frozen 3 steps, then trainable 3 steps, one process", ref, ok_run(ref, 1))
  for _, c in ipairs({{"unf_s3", 2, 3, {{3, 3}, {1, 0}}}, {"unf_plain", 1, 0, {{2, 2}}}}) do
    local ck = path(c[1])
    local first = frozen_run(c[2], c[1] .. ".st", "stage=" .. c[3], "frozen=1", "steps=3", "save=" .. ck)
    for k, l in ipairs(c[4]) do
      local out = c[1] .. "_" .. k .. ".st"
      local run = frozen_run(l[1], out, "stage=" .. l[2], "frozen=0", "steps=3", "load=" .. ck)
      check(("saved frozen by %s after 3 steps, resumed unfrozen by %s, 3 steps == unbroken (1e-6)")
        :format(label(c[2], c[3]), label(l[1], l[2])), run,
        {first.code == 0, "the saving run failed: " .. first.err:sub(-400)}, same_as(run, l[1], out, "unf_ref.st"))
    end
  end
end
for _, case in ipairs({
  {"tie", {"tie=1"}, {{1, 0}, {3, 1}}, "tied head.weight = emb.weight"},
  {"hook", {"hook=1", "frozen=1"}, {{2, 3}, {3, 1}, {1, 0}},
    "a pre-hook saving the model itself (save_model into a sub-folder) and keeping it out: the optimizer shards saved"},
}) do
  local ref = frozen_run(1, case[1] .. "_ref.st", "stage=0", "steps=4", table.unpack(case[2]))
  local ck = path(case[1] .. "_ck")
  local first = frozen_run(2, case[1] .. "_first.st", "stage=3", "steps=2", "save=" .. ck, table.unpack(case[2]))
  for k, l in ipairs(case[3]) do
    local out = case[1] .. "_" .. k .. ".st"
    local run = frozen_run(l[1], out, "stage=" .. l[2], "steps=2", "load=" .. ck, table.unpack(case[2]))
    check(("%s: saved at stage 3 on 2 ranks after 2 steps, loaded by %s, 4 steps == unbroken (1e-6)")
      :format(case[4], label(l[1], l[2])), run, {ref.code == 0, "the reference failed: " .. ref.err:sub(-400)},
      {first.code == 0, "the saving run failed: " .. first.err:sub(-400)}, same_as(run, l[1], out, case[1] .. "_ref.st"))
  end
end
do -- merge-weights of the tied model: head.weight left out as save_model (and Accelerate's) leaves it out
  local out = path("tie_merged.safetensors")
  local m = merge(path("tie_ck"), out)
  local ok, sd = pcall(accel_load, out)
  local names = {}
  for k in pairs(ok and sd or {}) do names[#names + 1] = k end
  table.sort(names)
  check("merge-weights of a tied model writes the tied weight once, under its first name, with Accelerate's warning",
    m, {m.code == 0, m.err}, {table.concat(names, ",") == "count,emb.weight,fz.bias,fz.weight,inp.bias,inp.weight",
      "merged names: " .. table.concat(names, ",")},
    {m.err:find("Removed shared tensor {'head.weight'} while saving", 1, true) ~= nil, "no warning: " .. m.err})
end
do -- strict = false into a model without sharding, from a sharded checkpoint with an extra buffer
  local ck = path("xbuf_ck")
  local first = frozen_run(2, "xbuf_first.st", "stage=3", "fill=1", "xbuf=1", "save=" .. ck)
  local run = frozen_run(1, "xbuf_1.st", "stage=0", "strict=0", "load=" .. ck)
  check("strict = false: a stage 3 checkpoint with an extra buffer loads into one process without sharding", run,
    {first.code == 0, "the saving run failed: " .. first.err:sub(-400)}, ok_run(run, 1), constants("xbuf_1.st"))
end
do -- merge-weights creates OUTPUT's missing folders (accelerate: mkdir(parents=True))
  local out = path("new/deeper/merged.safetensors")
  local m = merge(path("ck_2_s3_7"), out)
  check("merge-weights CKPT new/deeper/x.safetensors creates the folders", m, {m.code == 0, m.err},
    {max_rel(out, path("ck_2_s3_7.st")) == 0, "the merged file is missing or differs from the saving run's weights"})
end

do -- DeepSpeed's zero3_save_16bit_model: the weights gathered in the mixed precision's 16 bits
  local run = launch(2, "zero3_16bit.lua", path("z16"))
  check("zero3_save_16bit_model under ZeRO-3 and bf16: get_state_dict / save_model give bfloat16 weights", run,
    ok_run(run, 2))
end

support.remove_tree(DIR)
jobs.finish()
