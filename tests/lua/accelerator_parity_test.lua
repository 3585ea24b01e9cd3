-- accelerator_parity_test.lua: the cross-process half of
-- accelerator_parity_spec.lua, run by scripts/run-tests.sh as
-- `accel-lua accelerator_parity_test.lua` (exit 0 = pass). It launches
-- tests/lua/helpers/accel_parity.lua on 2 and 3 ranks: split padding with
-- an empty part, fp16 overflow on one rank skipping the step everywhere,
-- sync_each_batch, trigger_sync_in_backward, nested no_sync / accumulate
-- (DDP and ZeRO stage 1), broadcast_buffers,
-- InitProcessGroupKwargs' timeout, on_local_process / on_last_process.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")
local quote, all_ranks_ok = support.shell_quote, support.all_ranks_ok
local jobs = support.job_checks()

support.require_mpirun()
local DIR = support.tmpdir()
local ENV = "env -u ACCEL_LUA_COLLECTIVE_TIMEOUT -u ACCEL_LUA_DIST_BACKEND -u ACCEL_LUA_MIXED_PRECISION "
  .. "-u ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS -u ACCEL_LUA_USE_DEEPSPEED -u ACCEL_LUA_USE_FSDP "
  .. "ACCEL_LUA_CONFIG=" .. quote(DIR .. "/no-config.yaml") .. " " .. support.asan_env()

for _, n in ipairs({2, 3}) do
  local run = jobs.run(("%stimeout -k 5 120 %s launch --cpu --num_processes %d %s"):format(ENV,
    quote(support.ACCEL_LUA), n, quote(HERE .. "/helpers/accel_parity.lua")))
  jobs.check(("Accelerator parity checks on %d ranks"):format(n), run, {run.code == 0, "exit status"},
    {all_ranks_ok(run, n), "not every rank printed its ok line"})
end

support.remove_tree(DIR)
jobs.finish()
