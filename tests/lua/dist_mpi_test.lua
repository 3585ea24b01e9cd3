-- dist_mpi_test.lua: the communicator across processes (core/dist, "mpi"
-- backend). Run by scripts/run-tests.sh as `accel-lua dist_mpi_test.lua`
-- (exit 0 = pass); it starts OpenMPI jobs of accel-lua on the helper
-- scripts in tests/lua/helpers/ (oversubscribed: 2 and 3 ranks on however
-- few cores) and checks their exit status, output and duration:
--   dist_collectives.lua  every collective against closed forms (2 and 3 ranks)
--   dist_watchdog.lua     a skipped collective: the watchdog ends the job, naming
--                         the rank that did not enter it and what it did last
--   dist_failure.lua      a rank that exits, raises or aborts: the job ends at once
--   dist_mpi_error.lua    inputs of different sizes: the same error on every rank
--                         instead of MPI_ERR_TRUNCATE on one of them
--   dist_agree.lua        every collective checks shapes, dtypes, ops, roots and
--                         the collective itself across ranks (2 and 3 ranks)
--   dist_ddp_agree.lua    DDP buckets agree at creation; with ACCEL_LUA_DEBUG_MODE
--                         their all-reduces are checked too
-- plus ACCEL_LUA_COLLECTIVE_TIMEOUT / ACCEL_LUA_DEBUG_MODE values that are refused
-- plus accel.so under plain lua5.4 in an MPI job. The accel-lua under test
-- is $ACCEL_LUA_BIN, else the interpreter running this script.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local BIN = support.ACCEL_LUA
local HELPERS = HERE .. "/helpers/"
local MPIRUN = "timeout -k 5 90 mpirun --allow-run-as-root --oversubscribe"
local quote, has, all_ranks_ok = support.shell_quote, support.has, support.all_ranks_ok
local jobs = support.job_checks()
local check = jobs.check

-- Sanitizer builds: MPI's own leaks are suppressed only with full stacks
-- (scripts/lsan.supp).
local ASAN = support.asan_env()
local ENV = ASAN ~= "" and "env " .. ASAN or ""

-- Runs `mpirun -np N PROGRAM ARGS` (PROGRAM defaults to accel-lua); returns
-- {code, out, err, secs}.
local function mpirun(np, args, o)
  o = o or {}
  return jobs.run(("%s%s %s -np %d %s %s"):format(ENV, o.env or "", MPIRUN, np, o.program or quote(BIN), args))
end

support.require_mpirun()
local unset = "env -u ACCEL_LUA_COLLECTIVE_TIMEOUT -u ACCEL_LUA_DIST_BACKEND "

-- ---- every collective, 2 and 3 ranks ----
for _, n in ipairs({2, 3}) do
  local run = mpirun(n, quote(HELPERS .. "dist_collectives.lua") .. " " .. n, {env = unset})
  check(("collectives on %d ranks"):format(n), run, {run.code == 0, "exit status"},
    {all_ranks_ok(run, n), "not every rank printed its ok line"})
end

-- ---- watchdog: environment and set_timeout; who did not arrive ----
do
  local run = mpirun(2, quote(HELPERS .. "dist_watchdog.lua"), {env = unset .. "ACCEL_LUA_COLLECTIVE_TIMEOUT=3"})
  check("watchdog (ACCEL_LUA_COLLECTIVE_TIMEOUT=3) ends a stalled job, naming the rank that did not enter", run,
    {run.code ~= 0, "job exited 0"},
    {has(run.err, "accel-lua: rank 0: collective all_reduce #2 (called at tests/lua/helpers/dist_watchdog.lua:17) "
      .. "timed out after 3 s; not entered by rank 1 (last in all_reduce #1, left it "),
      "stderr does not name rank 1 as not having entered all_reduce #2 (called at the helper's line 17)"},
    {run.secs >= 3 and run.secs < 15, "did not end between 3 and 15 s"},
    {not has(run.out, "passed a collective"), "rank 0 passed the stalled collective"})
  run = mpirun(3, quote(HELPERS .. "dist_watchdog.lua") .. " 2", {env = unset})
  local _, named = run.err:gsub("collective all_reduce #2 %(called at [^)]*dist_watchdog.lua:17%) timed out after 2 s; "
    .. "not entered by rank 1 %(", "")
  check("watchdog (dist.set_timeout(2)) on 3 ranks: the waiting ranks name rank 1", run,
    {run.code ~= 0, "job exited 0"},
    {named >= 1 and not has(run.err, "not entered by rank 0") and not has(run.err, "not entered by rank 2"),
      "stderr does not name rank 1 (only)"},
    {run.secs >= 2 and run.secs < 14, "did not end between 2 and 14 s"})
  for _, v in ipairs({"-1", "abc", "nan", "5s"}) do
    run = mpirun(2, "-e " .. quote("require('accel').dist.barrier()"), {env = unset .. "ACCEL_LUA_COLLECTIVE_TIMEOUT=" .. v})
    check("ACCEL_LUA_COLLECTIVE_TIMEOUT=" .. v .. " is an error", run, {run.code ~= 0, "job exited 0"},
      {has(run.err, "ACCEL_LUA_COLLECTIVE_TIMEOUT=" .. v .. " is not a number of seconds >= 0"), "no error naming it"},
      {run.secs < 15, "took 15 s or more"})
  end
  run = mpirun(2, "-e " .. quote("local d = require('accel').dist; d.barrier(); print('timeout ' .. d.get_timeout())"),
    {env = unset .. "ACCEL_LUA_COLLECTIVE_TIMEOUT=0"})
  check("ACCEL_LUA_COLLECTIVE_TIMEOUT=0 turns the watchdog off", run, {run.code == 0, "exit status"},
    {has(run.out, "timeout 0.0"), "get_timeout is not 0"})
  -- a rank whose script ends normally while rank 0 waits for it: at once, not at the (default 300 s) timeout
  run = mpirun(2, "-e " .. quote("local d = require('accel').dist; if d.get_rank() == 0 then d.barrier() end"),
    {env = unset})
  check("a rank whose script ended is named at once by the rank waiting for it", run, {run.code ~= 0, "job exited 0"},
    {has(run.err, "accel-lua: rank 0: collective barrier #1 (called at (command line):1) cannot complete; not entered by "
      .. "rank 1 (its script has ended); a collective must be called on every process"),
      "stderr does not say rank 1's script ended"},
    {run.secs < 15, "took 15 s or more"})
  run = mpirun(2, "-e " .. quote("require('accel').dist.barrier()"), {env = unset .. "ACCEL_LUA_DEBUG_MODE=maybe"})
  check("ACCEL_LUA_DEBUG_MODE=maybe is an error", run, {run.code ~= 0, "job exited 0"},
    {has(run.err, "ACCEL_LUA_DEBUG_MODE=maybe is not a boolean"), "no error naming it"})
end

-- ---- every collective checks what the ranks pass ----
for _, n in ipairs({2, 3}) do
  local run = mpirun(n, quote(HELPERS .. "dist_agree.lua"), {env = unset})
  check(("shape / dtype / op / root / collective mismatches on %d ranks: one error, the same on every rank"):format(n),
    run, {run.code == 0, "exit status"}, {all_ranks_ok(run, n), "not every rank printed its ok line"})
end
do
  local run = mpirun(2, quote(HELPERS .. "dist_ddp_agree.lua") .. " layout", {env = unset})
  check("DDP reducers agree on their layout at creation", run, {run.code == 0, "exit status"},
    {all_ranks_ok(run, 2), "not every rank printed its ok line"})
  run = mpirun(2, quote(HELPERS .. "dist_ddp_agree.lua") .. " debug", {env = unset .. "ACCEL_LUA_DEBUG_MODE=true"})
  check("ACCEL_LUA_DEBUG_MODE=true checks every DDP bucket all-reduce", run, {run.code == 0, "exit status"},
    {all_ranks_ok(run, 2), "not every rank printed its ok line"}, {run.secs < 30, "took 30 s or more"})
  run = mpirun(2, quote(HELPERS .. "dist_ddp_agree.lua") .. " debug", {env = unset .. "ACCELERATE_DEBUG_MODE=1"})
  check("ACCELERATE_DEBUG_MODE=1 does the same", run, {run.code == 0, "exit status"},
    {all_ranks_ok(run, 2), "not every rank printed its ok line"}, {run.secs < 30, "took 30 s or more"})
end

-- ---- a failing rank ends the job at once ----
do
  local run = mpirun(2, quote(HELPERS .. "dist_failure.lua") .. " exit", {env = unset})
  check("a rank calling os.exit(3) ends the job", run, {run.code ~= 0, "job exited 0"},
    {has(run.err, "accel-lua: rank 1: exiting with status 3"), "stderr does not name rank 1 and its status"},
    {run.secs < 10, "took 10 s or more"}, {not has(run.out, "never joined"), "rank 0 went on alone"})
  run = mpirun(2, quote(HELPERS .. "dist_failure.lua") .. " abort", {env = unset})
  check("a rank calling dist.abort(5) ends the job", run, {run.code ~= 0, "job exited 0"},
    {has(run.err, "accel-lua: rank 1: dist.abort(5): ending the job"), "stderr does not name rank 1 and code 5"},
    {run.secs < 10, "took 10 s or more"}, {not has(run.out, "never joined"), "rank 0 went on alone"})
  run = mpirun(2, quote(HELPERS .. "dist_failure.lua") .. " error", {env = unset})
  check("a rank raising an error ends the job", run, {run.code ~= 0, "job exited 0"},
    {has(run.err, "rank 1 fails on purpose"), "stderr lacks the rank's error"},
    {run.secs < 10, "took 10 s or more"}, {not has(run.out, "never joined"), "rank 0 went on alone"})
end

-- ---- inputs MPI would reject on one rank only: one error on every rank ----
do
  local run = mpirun(2, quote(HELPERS .. "dist_mpi_error.lua"), {env = unset})
  local want = "all_gather: rank 0 has float32 [2], rank 1 has float32 [3]"
  check("all_gather of [2] and [3]: the same error on both ranks, no MPI_ERR_TRUNCATE", run,
    {run.code == 0, "exit status"},
    {run.out:match("rank 0: error [^\n]*" .. want:gsub("%p", "%%%0")) and run.out:match("rank 1: error [^\n]*"
      .. want:gsub("%p", "%%%0")), "a rank did not report the mismatch"},
    {not has(run.out, "MPI_ERR"), "an MPI error reached a rank"})
end

-- ---- accel.so in a plain Lua 5.4, in an MPI job ----
do
  local so = BIN:gsub("[^/]*$", "") .. "accel.so"
  local ldd = io.popen("ldd " .. quote(so) .. " 2>/dev/null"):read("a")
  if io.open(so) and os.execute("command -v lua5.4 >/dev/null 2>&1") and not ldd:find("libasan") then
    local script = ("package.cpath = %q; local accel = require('accel'); local d = accel.dist; "
      .. "local t = accel.full({3}, d.get_rank() + 1.0); d.all_reduce(t); "
      .. "print(d.get_backend() .. ' ' .. d.get_rank() .. ' ' .. t:sum():item())"):format(so)
    local run = mpirun(2, "-e " .. quote(script), {env = unset, program = "lua5.4"})
    check("accel.so under lua5.4 in a 2-rank job", run, {run.code == 0, "exit status"},
      {has(run.out, "mpi 0 9.0") and has(run.out, "mpi 1 9.0"), "wrong all_reduce through accel.so"})
  else
    print("skip accel.so under lua5.4 (no accel.so, no lua5.4, or a sanitizer build)")
  end
end

jobs.finish()
