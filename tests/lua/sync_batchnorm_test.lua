-- sync_batchnorm_test.lua: nn.SyncBatchNorm across processes. Run by
-- scripts/run-tests.sh as `accel-lua sync_batchnorm_test.lua` (exit 0 =
-- pass); it starts OpenMPI jobs (oversubscribed) of
-- tests/lua/helpers/sync_batchnorm.lua on 2 and 3 ranks: a CNN converted by
-- convert_sync_batchnorm, trained under the Accelerator on each rank's
-- share of a global batch, equals (1e-5) plain BatchNorm trained on the
-- whole batch in one process: parameters, running statistics, eval outputs
-- (the helper's header says how). The accel-lua under test is
-- $ACCEL_LUA_BIN, else the interpreter running this script.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local quote, all_ranks_ok = support.shell_quote, support.all_ranks_ok
local jobs = support.job_checks()
local mpirun = support.mpi_runner(jobs, "env -u ACCEL_LUA_COLLECTIVE_TIMEOUT -u ACCEL_LUA_DIST_BACKEND ")

support.require_mpirun()

for _, n in ipairs({2, 3}) do
  local run = mpirun(n, quote(HERE .. "/helpers/sync_batchnorm.lua"))
  jobs.check(("%d ranks: SyncBatchNorm training equals BatchNorm on the global batch"):format(n), run,
    {run.code == 0, "exit status"}, {all_ranks_ok(run, n), "not every rank printed its ok line"})
end

jobs.finish()
