-- checkpoint_ranks_test.lua: save_state / load_state of registered objects
-- on 2 ranks (tests/lua/helpers/checkpoint_ranks.lua): every rank calls
-- state_dict(), so one that runs a collective saves (Accelerate calls it
-- on every rank and writes rank 0's), and a state_dict failing on rank 1
-- only fails the save on both ranks and leaves no temporary folder; a
-- forged random state file of rank 1 fails load_state on both ranks. Run by
-- scripts/run-tests.sh as `accel-lua checkpoint_ranks_test.lua` (exit 0 = pass).
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local all_ranks_ok = support.all_ranks_ok
local jobs = support.job_checks()
support.require_mpirun()

local dir = support.tmpdir()
local run = jobs.run(support.mpirun_command(HERE .. "/helpers/checkpoint_ranks.lua", dir))
support.remove_tree(dir)
jobs.check("registered objects on 2 ranks: state_dict on every rank, a failure on rank 1 saves nothing", run,
  {run.code == 0, "exit status"}, {all_ranks_ok(run, 2), "not every rank printed its ok line"},
  {run.out:find("rank 0: save_state: [^\n]*checkpoint_ranks%.lua:%d+: save_state: process 1 failed, so nothing was "
    .. "saved") ~= nil, "rank 0 did not report rank 1's failed save"},
  {run.out:find("rank 0: load_state: [^\n]*load_state: process 1 failed, so nothing was loaded") ~= nil,
    "rank 0 did not report rank 1's refused load"},
  {run.secs < 30, "took 30 s or more (a rank waited for the other)"})
jobs.finish()
