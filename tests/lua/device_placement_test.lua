-- device_placement_test.lua: device placement across processes. Run by
-- scripts/run-tests.sh as `accel-lua device_placement_test.lua` (exit 0 =
-- pass); it starts `mpirun -np N accel-lua helpers/device_ranks.lua` with
-- ACCEL_LUA_DEVICE=sim (2 and 3 ranks, oversubscribed): every rank's
-- Accelerator is on sim, check_trigger and pad_across_processes agree
-- across the ranks with their data on sim, and prepared loaders deal each
-- rank its shard on sim (closed forms in the helper). The accel-lua under
-- test is $ACCEL_LUA_BIN, else the interpreter running this script.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local quote, all_ranks_ok = support.shell_quote, support.all_ranks_ok
local jobs = support.job_checks()
local check = jobs.check

support.require_mpirun()
local DIR = support.tmpdir()
local run_mpi = support.mpi_runner(jobs, support.job_env(DIR))

for _, n in ipairs({2, 3}) do
  local run = run_mpi(n, quote(HERE .. "/helpers/device_ranks.lua"), "ACCEL_LUA_DEVICE=sim ")
  check(("accelerator.device, check_trigger, pad_across_processes and loader shards on sim, %d ranks"):format(n), run,
    {run.code == 0, "exit status"}, {all_ranks_ok(run, n), "not every rank printed its ok line"})
end

support.remove_tree(DIR)
jobs.finish()
