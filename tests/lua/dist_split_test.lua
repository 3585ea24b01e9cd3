-- dist_split_test.lua: sub-communicators (core/dist/dist.h dist_split,
-- dist_node_comm, dist_cross_node_comm; accel.dist groups) across
-- processes. Run by scripts/run-tests.sh as `accel-lua dist_split_test.lua`
-- (exit 0 = pass); it starts OpenMPI jobs (oversubscribed) on helpers in
-- tests/lua/helpers/:
--   dist_split.lua           4 ranks faked as 2 machines x 2
--                            (ACCEL_LUA_TEST_RANKS_PER_NODE=2), and 2 ranks
--                            on this machine grouped by host name: every
--                            collective on the node, cross-node and split
--                            groups against closed forms, mismatches naming
--                            the group's ranks and their world ranks, the
--                            groups' own counters, freed groups refused
--   dist_split_watchdog.lua  a rank skipping a collective of its node group:
--                            the watchdog ends the job, counting the group's
--                            collectives and naming the group rank with its
--                            world rank
-- plus ACCEL_LUA_TEST_RANKS_PER_NODE values that are refused. The accel-lua
-- under test is $ACCEL_LUA_BIN, else the interpreter running this script.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local HELPERS = HERE .. "/helpers/"
local quote, has, all_ranks_ok = support.shell_quote, support.has, support.all_ranks_ok
local jobs = support.job_checks()
local check = jobs.check
local mpirun = support.mpi_runner(jobs,
  "env -u ACCEL_LUA_COLLECTIVE_TIMEOUT -u ACCEL_LUA_DIST_BACKEND -u ACCEL_LUA_TEST_RANKS_PER_NODE ")

support.require_mpirun()

do
  local run = mpirun(4, quote(HELPERS .. "dist_split.lua") .. " fake", "ACCEL_LUA_TEST_RANKS_PER_NODE=2 ")
  check("node / cross-node / split groups on 4 ranks as 2 machines x 2: collectives, mismatches, counters", run,
    {run.code == 0, "exit status"}, {all_ranks_ok(run, 4), "not every rank printed its ok line"})
  run = mpirun(2, quote(HELPERS .. "dist_split.lua") .. " real")
  check("2 ranks on this machine: one node group of 2 (by host name), cross-node groups of 1", run,
    {run.code == 0, "exit status"}, {all_ranks_ok(run, 2), "not every rank printed its ok line"})
end

do
  local run = mpirun(4, quote(HELPERS .. "dist_split_watchdog.lua"),
    "ACCEL_LUA_TEST_RANKS_PER_NODE=2 ACCEL_LUA_COLLECTIVE_TIMEOUT=3 ")
  check("watchdog on the node group: names the group's rank 1 (world rank 3) and the group's collective number", run,
    {run.code ~= 0, "job exited 0"},
    {has(run.err, "accel-lua: rank 2: collective all_reduce #2 (called at tests/lua/helpers/dist_split_watchdog.lua:24) "
      .. "on the node communicator timed out after 3 s; not entered by rank 1 (world rank 3) (last in all_reduce #1, "
      .. "left it "), "stderr lacks the message"},
    {run.secs >= 3 and run.secs < 20, "did not end between 3 and 20 s"},
    {not has(run.out, "passed a collective"), "world rank 2 passed the stalled collective"})
end

for _, v in ipairs({"3", "0", "two", "-2"}) do
  local run = mpirun(4, "-e " .. quote("require('accel').dist.node_group()"), "ACCEL_LUA_TEST_RANKS_PER_NODE=" .. v .. " ")
  check("ACCEL_LUA_TEST_RANKS_PER_NODE=" .. v .. " on 4 ranks is an error", run, {run.code ~= 0, "job exited 0"},
    {has(run.err, "ACCEL_LUA_TEST_RANKS_PER_NODE=" .. v .. ": a testing knob that must be a positive integer "
      .. "dividing the 4 processes"), "no error naming it"})
end

jobs.finish()
