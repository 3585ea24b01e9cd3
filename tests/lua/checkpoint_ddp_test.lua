-- checkpoint_ddp_test.lua: activation checkpointing under DDP on 2 ranks.
-- Run by scripts/run-tests.sh as `accel-lua checkpoint_ddp_test.lua` (exit
-- 0 = pass). Trains the same model with and without checkpointed blocks
-- (tests/lua/helpers/ckpt_ddp.lua, dropout 0.1): the parameters after 8
-- AdamW steps are bitwise equal, and the gradient buckets are launched
-- during backward in both (the recompute's backward is part of the pass
-- the reducer watches).
local accel = require("accel")
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

support.require_mpirun()
local jobs = support.job_checks()
local DIR = support.tmpdir()
local q = support.shell_quote

-- No config file and no inherited launch settings for the jobs.
local CLEAN = ("env -u ACCEL_LUA_MIXED_PRECISION -u ACCEL_LUA_USE_DEEPSPEED -u ACCEL_LUA_USE_FSDP "
  .. "-u ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS ACCEL_LUA_CONFIG=%s %s"):format(q(DIR .. "/none.yaml"), support.asan_env())

local function train(mode)
  local path = DIR .. "/" .. mode .. ".safetensors"
  local run = jobs.run(("%stimeout -k 5 120 %s launch --cpu --num_processes 2 %s %s %s"):format(CLEAN,
    q(support.ACCEL_LUA), q(HERE .. "/helpers/ckpt_ddp.lua"), mode, q(path)))
  run.early, run.late = run.out:match("early (%d+) late (%d+)")
  run.params = run.code == 0 and accel.load(path) or {}
  return run
end

local plain, ckpt = train("plain"), train("ckpt")
local worst, n = 0, 0
for k, t in pairs(plain.params) do
  n = n + 1
  local other = ckpt.params[k]
  worst = math.max(worst, other and (other - t):abs():max():item() or math.huge)
end
jobs.check("2 ranks: checkpointed blocks train to bitwise the parameters of plain ones", ckpt,
  {plain.code == 0, "the plain run failed: " .. plain.err:sub(-500)}, {ckpt.code == 0, "exit status"},
  {n > 0 and worst == 0, ("parameters differ by %g"):format(worst)},
  {ckpt.early ~= nil and ckpt.early == plain.early and tonumber(ckpt.early) > 0 and ckpt.late == plain.late,
    ("bucket launches early/late: checkpointed %s/%s, plain %s/%s"):format(tostring(ckpt.early), tostring(ckpt.late),
      tostring(plain.early), tostring(plain.late))})
support.remove_tree(DIR)
jobs.finish()
