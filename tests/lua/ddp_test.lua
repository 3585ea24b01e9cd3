-- ddp_test.lua: data-parallel training across processes (DDP in
-- core/dist/ddp.c, the Accelerator's collectives and checkpoints on N ranks).
-- Run by scripts/run-tests.sh as `accel-lua ddp_test.lua` (exit 0 = pass);
-- it starts `accel-lua launch --cpu --num_processes N` jobs (OpenMPI,
-- oversubscribed on however few cores) on the helpers in tests/lua/helpers/:
--   ddp_equiv.lua   2 and 3 ranks with per-rank batch b end with the
--                   parameters of 1 rank with batch N*b after 20 AdamW
--                   steps (1e-5 relative); accumulation under DDP equals a
--                   batch k times larger; no collective on non-sync steps,
--                   one all_reduce per bucket on sync steps (counters)
--   ddp_ops.lua     gather_for_metrics over 1001 samples returns exactly
--                   them in order (2 and 3 ranks), and every other
--                   cross-process operation of the Accelerator
--   ddp_resume.lua  a 2-rank run saved and resumed by a new launch gives
--                   bitwise the losses, parameters and optimizer state of an
--                   unbroken run; loading on 3 ranks keeps the loader
--                   position (samples of the global order)
--   ddp_tied.lua    tied / reused weights and parameters without gradients
--   ddp_free_memory.lua  gradients still averaged after free_memory()
--   ddp_local_sgd.lua    LocalSGD: no gradient sync inside, parameters
--                   averaged every local_sgd_steps steps and on exit
--   ddp_bare_backward.lua  a bare loss:backward() averages as PyTorch's DDP:
--                   unprepared optimizer, two passes per step (also under
--                   ZeRO 1-3 and FSDP), two losses
-- The accel-lua under test is $ACCEL_LUA_BIN, else the interpreter running
-- this script.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local HELPERS = HERE .. "/helpers/"
local quote, has, all_ranks_ok = support.shell_quote, support.has, support.all_ranks_ok
local jobs = support.job_checks()
local check = jobs.check

support.require_mpirun()
local DIR = support.tmpdir()

local launch, max_rel = support.launcher(jobs, support.job_env(DIR), HELPERS), support.max_rel

-- ---- (a) N ranks x batch b == 1 rank x batch N*b; (b) accumulation ----
do
  local b, steps = 4, 20
  for _, n in ipairs({2, 3}) do
    local one = launch(1, "ddp_equiv.lua", DIR .. "/one" .. n .. ".st", n * b, steps)
    local many = launch(n, "ddp_equiv.lua", DIR .. "/many" .. n .. ".st", b, steps, 1, 0.001)
    local d, where = max_rel(DIR .. "/many" .. n .. ".st", DIR .. "/one" .. n .. ".st")
    local buckets, early = many.out:match("buckets (%d+) early (%d+)")
    check(("%d ranks x batch %d == 1 rank x batch %d after %d AdamW steps"):format(n, b, n * b, steps), many,
      {one.code == 0, "the 1-rank run failed: " .. one.err:sub(-300)}, {many.code == 0, "exit status"},
      {d <= 1e-5, ("parameters differ by %g relative (%s)"):format(d, where)},
      {tonumber(buckets or 0) >= 2 and tonumber(early or 0) == tonumber(buckets or 0) * steps,
        "expected several buckets, all started during backward"})
  end
  local one = launch(1, "ddp_equiv.lua", DIR .. "/acc_one.st", 2 * 2 * b, steps)
  local acc = launch(2, "ddp_equiv.lua", DIR .. "/acc_many.st", b, steps, 2)
  local d, where = max_rel(DIR .. "/acc_many.st", DIR .. "/acc_one.st")
  check("accumulation 2 on 2 ranks == 1 rank x batch 16; no collective on non-sync steps", acc,
    {one.code == 0, "the 1-rank run failed: " .. one.err:sub(-300)}, {acc.code == 0, "exit status"},
    {d <= 1e-5, ("parameters differ by %g relative (%s)"):format(d, where)})
end

-- ---- (c) gather_for_metrics and the other collectives ----
for _, n in ipairs({2, 3}) do
  os.remove(DIR .. "/main_first.txt")
  local run = launch(n, "ddp_ops.lua", DIR)
  local _, prints = run.out:gsub("printed once", "")
  check(("gather_for_metrics over 1001 samples and the Accelerator's collectives on %d ranks"):format(n), run,
    {run.code == 0, "exit status"}, {all_ranks_ok(run, n), "not every rank printed its ok line"},
    {prints == 1, ("accelerator:print printed %d times"):format(prints)})
end

-- ---- (d) save_state on 2 ranks, resume in a new launch ----
do
  local d = DIR .. "/resume"
  os.execute("mkdir -p " .. quote(d))
  local straight = launch(2, "ddp_resume.lua", "straight", d, 12)
  local first = launch(2, "ddp_resume.lua", "first", d, 6)
  local second = launch(2, "ddp_resume.lua", "second", d, 6)
  local why = {{straight.code == 0 and first.code == 0, "straight / first run failed: " .. straight.err:sub(-300)
    .. first.err:sub(-300)}, {second.code == 0, "exit status of the resumed run"}}
  for r = 0, 1 do
    local function lines(mode)
      local out = {}
      for l in support.read_if_exists(("%s/%s_r%d.txt"):format(d, mode, r)):gmatch("[^\n]+") do out[#out + 1] = l end
      return out
    end
    local s, f, c = lines("straight"), lines("first"), lines("second")
    local same = #s == 13 and #f == 7 and #c == 7
    for i = 1, 6 do same = same and s[i] == f[i] and s[i + 6] == c[i] end
    same = same and s[13] == c[7]
    why[#why + 1] = {same, ("rank %d: the losses (or counter / lr line) of the resumed run differ"):format(r)}
    local st = support.read_if_exists(("%s/straight_r%d.safetensors"):format(d, r))
    why[#why + 1] = {#st > 0 and st == support.read_if_exists(("%s/second_r%d.safetensors"):format(d, r)),
      ("rank %d: parameters / optimizer state differ from the unbroken run"):format(r)}
  end
  check("2 ranks: train 6, save_state, new launch, load_state, train 6 == train 12 (bitwise)", second,
    table.unpack(why))

  local moved = launch(3, "ddp_resume.lua", "position", d)
  check("load_state of a 2-rank checkpoint on 3 ranks keeps the loader's position in samples", moved,
    {moved.code == 0, "exit status"},
    {has(moved.out, "rank 0: epoch 0 samples 96 step 6") and has(moved.out, "rank 2: epoch 0 samples 96 step 6"),
      "expected 96 samples (6 batches x 2 ranks x 8) and step 6 on every rank"},
    {has(moved.err, "was saved by 2 process(es) and has no random_states_<rank>.json for rank(s) 2"),
      "no warning naming rank 2's missing random state"})

  -- 5 batches x 2 ranks is not a whole number of 3-rank steps; the position
  -- (80 samples) still continues (data_position_test.lua checks the batches)
  local odd = launch(2, "ddp_resume.lua", "first", d, 5)
  local moved_odd = launch(3, "ddp_resume.lua", "position", d)
  check("load_state on 3 ranks of a 2-rank checkpoint at batch 5 continues from sample 80", moved_odd,
    {odd.code == 0, "the 2-rank run saving at batch 5 failed"}, {moved_odd.code == 0, "exit status"},
    {has(moved_odd.out, "rank 0: epoch 0 samples 80 step 5") and has(moved_odd.out, "rank 2: epoch 0 samples 80 step 5"),
      "expected 80 samples and step 5 on every rank"})
end

-- ---- (e) tied weights, unused parameters ----
for _, n in ipairs({2, 3}) do
  local run = launch(n, "ddp_tied.lua")
  check(("tied and reused weights, parameters without gradients on %d ranks"):format(n), run,
    {run.code == 0, "exit status"}, {all_ranks_ok(run, n), "not every rank printed its ok line"})
end

-- ---- (f) free_memory keeps a used model data parallel ----
do
  local run = launch(2, "ddp_free_memory.lua")
  check("after free_memory a kept model and a newly prepared one average their gradients; a dropped one's reducer is "
    .. "closed", run, {run.code == 0, "exit status"}, {all_ranks_ok(run, 2), "not every rank printed its ok line"})
end

-- ---- (g) LocalSGD: local steps, an average every local_sgd_steps and on exit ----
do
  local run = launch(2, "ddp_local_sgd.lua")
  check("LocalSGD on 2 ranks: parameters differ after odd steps, equal the mean after even ones and on exit",
    run, {run.code == 0, "exit status"}, {all_ranks_ok(run, 2), "not every rank printed its ok line"})
end

-- ---- (h) a bare loss:backward() leaves averaged gradients ----
do
  local run = launch(2, "ddp_bare_backward.lua")
  check("bare loss:backward() on 2 ranks: averaged .grad with an unprepared optimizer, two passes per step and two "
    .. "losses through one model (closed forms, PyTorch's DDP values)", run, {run.code == 0, "exit status"},
    {all_ranks_ok(run, 2), "not every rank printed its ok line"})
  for _, kind in ipairs({"zero1", "zero2", "zero3", "fsdp"}) do
    local sharded = launch(2, "ddp_bare_backward.lua", kind)
    check(kind .. " on 2 ranks: two bare loss:backward() passes before one step add their averages", sharded,
      {sharded.code == 0, "exit status"}, {all_ranks_ok(sharded, 2), "not every rank printed its ok line"})
  end
end

support.remove_tree(DIR)
jobs.finish()
