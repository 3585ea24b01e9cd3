-- json_test.lua: gather_object / broadcast_object on 2 ranks when one rank's
-- value cannot be sent as JSON (tests/lua/helpers/json_objects.lua): the
-- error appears on every rank, names the rank that gave the bad value and the
-- script's file:line, nothing hangs, and later collectives still work; a
-- save_state failing on one rank fails on both and leaves no temporary
-- folder; accelerator:profile writes one trace per rank. Run by
-- scripts/run-tests.sh as `accel-lua json_test.lua` (exit 0 = pass).
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local has, all_ranks_ok = support.has, support.all_ranks_ok
local jobs = support.job_checks()
support.require_mpirun()

local dir = support.tmpdir()
local run = jobs.run(support.mpirun_command(HERE .. "/helpers/json_objects.lua", dir))
support.remove_tree(dir)
local check = jobs.check
check("unsendable objects on 2 ranks: every rank refuses, names the rank, no hang", run,
  {run.code == 0, "exit status"}, {all_ranks_ok(run, 2), "not every rank printed its ok line"},
  {has(run.out, "rank 0: function on rank 1: ") and has(run.out, "rank 1: function on rank 1: "),
    "a rank did not report the refusal"},
  {run.out:find("rank 1: save_state: [^\n]*json_objects%.lua:%d+: save_state: process 0 failed, so nothing was saved") ~= nil, "rank 1 did not report rank 0's failed save"},
  {run.secs < 30, "took 30 s or more (a rank waited for the other)"})
jobs.finish()
