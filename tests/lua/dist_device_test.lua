-- dist_device_test.lua: collectives, DDP and the sharding engine on a
-- device whose memory the host cannot address (the simulated device
-- "sim", core/backend/backend_sim.c), against the same runs on the CPU. Run by
-- scripts/run-tests.sh as `accel-lua dist_device_test.lua` (exit 0 = pass).
--
--   DDP (accel.ddp.Reducer) and the sharding engine at stages 1, 2 and 3 on
--   2 ranks, 6 AdamW steps of tests/lua/helpers/shard_equiv.lua with
--   ACCEL_LUA_DEVICE=sim (the parameters, buffers, shards and optimizer
--   state live on sim; collectives stage through the host) end with the
--   same parameters as with ACCEL_LUA_DEVICE=cpu, BITWISE: the sim runs
--   every entry with the CPU kernels in the same order on the same values,
--   the staging copies are byte copies, and avg divides on the device with
--   the same float32 division, so any difference is a bug (a missing
--   synchronisation reading stale values, a lost copy-back), not rounding.
--   The helper prints the parameters' device, so a run that silently
--   stayed on the CPU fails.
--   A sim script that ends right after a backward (work still queued)
--   exits cleanly, 20 runs (the queue drains when the interpreter closes;
--   before, about one run in three crashed in a GEMM while oneDNN unloaded).
-- The accel-lua under test is $ACCEL_LUA_BIN, else the interpreter running
-- this script.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local HELPERS = HERE .. "/helpers/"
local jobs = support.job_checks()
local check, all_ranks_ok, q = jobs.check, support.all_ranks_ok, support.shell_quote

support.require_mpirun()
local DIR = support.tmpdir()
local env = support.job_env(DIR)
local on = {
  cpu = support.launcher(jobs, env .. " ACCEL_LUA_DEVICE=cpu ", HELPERS),
  sim = support.launcher(jobs, env .. " ACCEL_LUA_DEVICE=sim ", HELPERS),
}

local function bytes(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local names = {[-1] = "DDP", [1] = "stage 1", [2] = "stage 2", [3] = "stage 3"}
for _, stage in ipairs({-1, 1, 2, 3}) do
  local runs, paths = {}, {}
  for _, dev in ipairs({"cpu", "sim"}) do
    paths[dev] = ("%s/s%d_%s.st"):format(DIR, stage, dev)
    runs[dev] = on[dev](2, "shard_equiv.lua", paths[dev], "stage=" .. stage, "steps=6")
  end
  local a, b = bytes(paths.sim), bytes(paths.cpu)
  local d, where = support.max_rel(paths.sim, paths.cpu)
  check(("%s on 2 ranks, 6 AdamW steps: sim == cpu, bitwise"):format(names[stage]), runs.sim,
    {runs.cpu.code == 0, "the cpu run failed: " .. runs.cpu.err:sub(-400)},
    {runs.sim.code == 0, "exit status"}, {all_ranks_ok(runs.sim, 2), "not every rank finished"},
    {runs.cpu.out:find("device cpu", 1, true), "the cpu run did not train on cpu"},
    {runs.sim.out:find("device sim", 1, true), "the sim run did not train on sim"},
    {a ~= nil and a == b, ("parameters differ (max relative %g in %s)"):format(d, where)})
end

-- Work still queued when a script ends.
do
  local script = DIR .. "/queued_at_exit.lua"
  local f = assert(io.open(script, "w"))
  f:write([[
local accel = require("accel")
local m = accel.nn.Linear(4, 3)
m(accel.ones(2, 4)):sum():backward()
]])
  f:close()
  local failed, last = 0, nil
  for _ = 1, 20 do
    local run = jobs.run(("env ACCEL_LUA_DEVICE=sim %s %s"):format(q(support.ACCEL_LUA), q(script)))
    if run.code ~= 0 then failed, last = failed + 1, run end
  end
  check("a sim script ending with queued work exits 0 (20 runs)", last or {secs = 0, code = 0, out = "", err = ""},
    {failed == 0, ("%d of 20 runs failed"):format(failed)})
end

jobs.finish()
