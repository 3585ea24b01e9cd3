-- shard_hybrid_test.lua: HYBRID sharding (accel.shard.Engine's hybrid =
-- true: FSDP's HYBRID_SHARD at stage 3, HYBRID_SHARD_ZERO2 at stage 2):
-- sharded inside each machine, replicated across machines. Run by
-- scripts/run-tests.sh as `accel-lua shard_hybrid_test.lua` (exit 0 =
-- pass). The jobs run 4 ranks as 2 machines x 2 on this computer
-- (ACCEL_LUA_TEST_RANKS_PER_NODE=2, the testing knob of core/dist/dist.h) on
-- tests/lua/helpers/shard_equiv.lua (a 205-parameter model: divisible by
-- neither 2 nor 3; ranks other than 0 start from other parameters):
--   - stages 3 and 2 after 20 AdamW steps == one process trained on the
--     global batch (1e-5 relative), also with accumulation k = 3 (the
--     cross-machine average deferred to the synchronising micro-step) and
--     with clipping (the total norm equal too);
--   - each rank's optimizer state is half the model's (its machine has 2
--     ranks), not a quarter: module_list units of 65, 70 and 70 elements,
--     per AdamW slot ceil(65/2) + 2 * ceil(70/2) = 103 elements, so 206 for
--     exp_avg + exp_avg_sq (a 4-way shard would hold 2 * (17 + 18 + 18) = 106);
--   - HYBRID on one real machine (2 ranks, and 1 process, without the knob)
--     and with stage 1: one clear error.
-- The accel-lua under test is $ACCEL_LUA_BIN, else the interpreter running
-- this script.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local HELPERS = HERE .. "/helpers/"
local all_ranks_ok, has = support.all_ranks_ok, support.has
local jobs = support.job_checks()
local check = jobs.check

support.require_mpirun()
local DIR = support.tmpdir()
local ENV = support.job_env(DIR)
local launch = support.launcher(jobs, ENV, HELPERS)
local fake = support.launcher(jobs, ENV .. "ACCEL_LUA_TEST_RANKS_PER_NODE=2 ", HELPERS)
local max_rel = support.max_rel

local HALF_STATE = 2 * (math.ceil(65 / 2) + 2 * math.ceil(70 / 2)) -- 206, see the top

local refs = {}
local function reference(key, extra)
  if not refs[key] then
    local path = DIR .. "/ref_" .. key .. ".st"
    local run = launch(1, "shard_equiv.lua", path, "stage=0", table.unpack(extra))
    refs[key] = {path = path, run = run, norm = tonumber(run.out:match("norm ([%d.]+)"))}
  end
  return refs[key]
end

local function hybrid(name, stage, key, extra)
  local ref = reference(key, extra)
  local path = ("%s/%s_h%d.st"):format(DIR, key, stage)
  local run = fake(4, "shard_equiv.lua", path, "stage=" .. stage, "hybrid=1", table.unpack(extra))
  local d, where = max_rel(path, ref.path)
  local why = {{ref.run.code == 0, "the reference run failed: " .. ref.run.err:sub(-300)},
    {run.code == 0, "exit status"}, {all_ranks_ok(run, 4), "not every rank finished"},
    {d <= 1e-5, ("parameters differ by %g relative (%s)"):format(d, where)}}
  for r = 0, 3 do
    local elems = tonumber(run.out:match("state rank " .. r .. " elems (%d+)") or "")
    why[#why + 1] = {elems == HALF_STATE, ("rank %d holds %s optimizer-state elements, expected %d (half of 2 x 205 "
      .. "plus padding)"):format(r, tostring(elems), HALF_STATE)}
  end
  if table.concat(extra, " "):find("clip=", 1, true) then
    local norm = tonumber(run.out:match("norm ([%d.]+)"))
    why[#why + 1] = {norm and ref.norm and ref.norm > 0.1 and math.abs(norm - ref.norm) <= 1e-5 * ref.norm,
      ("clip total norm %s, reference %s"):format(tostring(norm), tostring(ref.norm))}
  end
  check(("%s: HYBRID stage %d, 2 machines x 2 ranks == 1 process, global batch"):format(name, stage), run,
    table.unpack(why))
end

hybrid("AdamW, wrap module_list", 3, "base", {"wrap=module_list"})
hybrid("AdamW, wrap module_list", 2, "base", {"wrap=module_list"})
hybrid("accumulation k = 3", 3, "accum", {"wrap=module_list", "accum=3"})
hybrid("clip_grad_norm_(0.1)", 2, "clip", {"wrap=module_list", "clip=0.1"})

-- ---- refused ----
local ONE = "shard: HYBRID_SHARD shards inside a machine and replicates across machines, but all %d process(es) of "
  .. "this job run on one machine"
for _, n in ipairs({2, 1}) do
  local run = launch(n, "shard_equiv.lua", DIR .. "/no.st", "stage=3", "hybrid=1")
  check(("HYBRID on one machine (%d process(es), no knob): one clear error"):format(n), run,
    {run.code ~= 0, "job exited 0"}, {has(run.err, ONE:format(n)), "no error saying it needs several machines"},
    {has(run.err, "shard_equiv.lua:"), "the error does not name the user's file:line"})
end
do
  local run = fake(4, "shard_equiv.lua", DIR .. "/no.st", "stage=1", "hybrid=1")
  check("hybrid = true with stage 1: one clear error", run, {run.code ~= 0, "job exited 0"},
    {has(run.err, "shard.Engine: hybrid = true needs stage 2 (HYBRID_SHARD_ZERO2) or 3 (HYBRID_SHARD), got stage 1"),
      "no error naming the stage"})
end

support.remove_tree(DIR)
jobs.finish()
