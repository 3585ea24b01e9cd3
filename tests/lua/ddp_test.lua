-- ddp_test.lua: data-parallel training across processes (DDP in
-- core/ddp.c, the Accelerator's collectives and checkpoints on N ranks).
-- Run by scripts/run-tests.sh as `accel-lua ddp_test.lua` (exit 0 = pass);
-- it starts `accel-lua launch --cpu --num_processes N` jobs (OpenMPI,
-- oversubscribed on however few cores) on the helpers in tests/lua/helpers/:
--   ddp_equiv.lua   2 and 3 ranks with per-rank batch b end with the
--                   parameters of 1 rank with batch N*b after 20 AdamW
--                   steps (1e-5 relative); accumulation under DDP equals a
--                   batch k times larger; no collective on non-sync steps,
--                   one all_reduce per bucket on sync steps (counters)
--   ddp_ops.lua     gather_for_metrics over 1001 samples returns exactly
--                   them in order (2 and 3 ranks), and every other
--                   cross-process operation of the Accelerator
--   ddp_resume.lua  a 2-rank run saved and resumed by a new launch gives
--                   bitwise the losses, parameters and optimizer state of an
--                   unbroken run; loading on 3 ranks converts the loader
--                   position or refuses, naming why
--   ddp_tied.lua    tied / reused weights and parameters without gradients
-- The accel-lua under test is $ACCEL_LUA_BIN, else the interpreter running
-- this script.
local accel = require("accel")

local BIN = os.getenv("ACCEL_LUA_BIN") or arg[-1]
local HELPERS = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/helpers/"
local TMP = os.tmpname()
local DIR = TMP .. ".d"

local passed, failed = 0, 0

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

-- A clean environment for the jobs: no config file, no inherited settings.
local ENV = "env -u ACCEL_LUA_COLLECTIVE_TIMEOUT -u ACCEL_LUA_DIST_BACKEND -u ACCEL_LUA_MIXED_PRECISION "
  .. "-u ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS -u ACCEL_LUA_USE_DEEPSPEED -u ACCEL_LUA_USE_FSDP "
  .. "ACCEL_LUA_CONFIG=" .. quote(DIR .. "/no-config.yaml") .. " "
if os.getenv("ASAN_OPTIONS") then
  ENV = ENV .. "ASAN_OPTIONS=" .. quote(os.getenv("ASAN_OPTIONS") .. ":fast_unwind_on_malloc=0") .. " "
end

-- `accel-lua launch --cpu --num_processes np HELPER args...` -> {code, out, err, secs}
local function launch(np, helper, ...)
  local args = {}
  for i, a in ipairs({...}) do args[i] = quote(tostring(a)) end
  local cmd = ("%stimeout -k 5 120 %s launch --cpu --num_processes %d %s %s >%s 2>%s"):format(ENV, quote(BIN), np,
    quote(HELPERS .. helper), table.concat(args, " "), quote(TMP .. ".out"), quote(TMP .. ".err"))
  local t0 = accel.clock()
  local _, how, code = os.execute(cmd)
  local run = {secs = accel.clock() - t0, out = slurp(TMP .. ".out"), err = slurp(TMP .. ".err")}
  run.code = how == "exit" and code or 128 + code
  return run
end

-- check(name, run, {cond, "what failed"}, ...): one pass or fail line.
local function check(name, run, ...)
  local why = {}
  for _, c in ipairs({...}) do
    if not c[1] then why[#why + 1] = c[2] end
  end
  if #why == 0 then
    passed = passed + 1
    print(("ok   %s (%.1f s)"):format(name, run.secs))
    return
  end
  failed = failed + 1
  print(("FAIL %s (%.1f s, exit %d): %s"):format(name, run.secs, run.code, table.concat(why, "; ")))
  print("  stdout: " .. run.out:sub(-3000):gsub("\n", "\n  | "))
  print("  stderr: " .. run.err:sub(-3000):gsub("\n", "\n  | "))
end

local function has(s, plain) return s:find(plain, 1, true) ~= nil end

local function all_ranks_ok(run, n)
  for r = 0, n - 1 do
    if not run.out:find(("ok rank %d: %%d+ checks"):format(r)) then return false end
  end
  return true
end

-- Largest relative difference (per tensor: max |a - b| / max |b|) between
-- two safetensors files, and a description of it.
local function max_rel(path_a, path_b)
  local ok_a, a = pcall(accel.load, path_a)
  local ok_b, b = pcall(accel.load, path_b)
  if not (ok_a and ok_b) then return math.huge, "a result file is missing" end
  local worst, where = 0, "-"
  for k, t in pairs(b) do
    if not a[k] then return math.huge, "no " .. k end
    local scale = t:double():abs():max():item()
    local d = (a[k]:double() - t:double()):abs():max():item() / (scale > 0 and scale or 1)
    if d > worst then worst, where = d, k end
  end
  return worst, where
end

if not os.execute("command -v mpirun >/dev/null 2>&1") then
  print("FAIL mpirun not found (apt-get install openmpi-bin; scripts/install-deps.sh)")
  os.exit(1)
end
os.execute("mkdir -p " .. quote(DIR))

-- ---- (a) N ranks x batch b == 1 rank x batch N*b; (b) accumulation ----
do
  local b, steps = 4, 20
  for _, n in ipairs({2, 3}) do
    local one = launch(1, "ddp_equiv.lua", DIR .. "/one" .. n .. ".st", n * b, steps)
    local many = launch(n, "ddp_equiv.lua", DIR .. "/many" .. n .. ".st", b, steps, 1, 0.001)
    local d, where = max_rel(DIR .. "/many" .. n .. ".st", DIR .. "/one" .. n .. ".st")
    local buckets, early = many.out:match("buckets (%d+) early (%d+)")
    check(("%d ranks x batch %d == 1 rank x batch %d after %d AdamW steps"):format(n, b, n * b, steps), many,
      {one.code == 0, "the 1-rank run failed: " .. one.err:sub(-300)}, {many.code == 0, "exit status"},
      {d <= 1e-5, ("parameters differ by %g relative (%s)"):format(d, where)},
      {tonumber(buckets or 0) >= 2 and tonumber(early or 0) == tonumber(buckets or 0) * steps,
        "expected several buckets, all started during backward"})
  end
  local one = launch(1, "ddp_equiv.lua", DIR .. "/acc_one.st", 2 * 2 * b, steps)
  local acc = launch(2, "ddp_equiv.lua", DIR .. "/acc_many.st", b, steps, 2)
  local d, where = max_rel(DIR .. "/acc_many.st", DIR .. "/acc_one.st")
  check("accumulation 2 on 2 ranks == 1 rank x batch 16; no collective on non-sync steps", acc,
    {one.code == 0, "the 1-rank run failed: " .. one.err:sub(-300)}, {acc.code == 0, "exit status"},
    {d <= 1e-5, ("parameters differ by %g relative (%s)"):format(d, where)})
end

-- ---- (c) gather_for_metrics and the other collectives ----
for _, n in ipairs({2, 3}) do
  os.remove(DIR .. "/main_first.txt")
  local run = launch(n, "ddp_ops.lua", DIR)
  local _, prints = run.out:gsub("printed once", "")
  check(("gather_for_metrics over 1001 samples and the Accelerator's collectives on %d ranks"):format(n), run,
    {run.code == 0, "exit status"}, {all_ranks_ok(run, n), "not every rank printed its ok line"},
    {prints == 1, ("accelerator:print printed %d times"):format(prints)})
end

-- ---- (d) save_state on 2 ranks, resume in a new launch ----
do
  local d = DIR .. "/resume"
  os.execute("mkdir -p " .. quote(d))
  local straight = launch(2, "ddp_resume.lua", "straight", d, 12)
  local first = launch(2, "ddp_resume.lua", "first", d, 6)
  local second = launch(2, "ddp_resume.lua", "second", d, 6)
  local why = {{straight.code == 0 and first.code == 0, "straight / first run failed: " .. straight.err:sub(-300)
    .. first.err:sub(-300)}, {second.code == 0, "exit status of the resumed run"}}
  for r = 0, 1 do
    local function lines(mode)
      local out = {}
      for l in slurp(("%s/%s_r%d.txt"):format(d, mode, r)):gmatch("[^\n]+") do out[#out + 1] = l end
      return out
    end
    local s, f, c = lines("straight"), lines("first"), lines("second")
    local same = #s == 13 and #f == 7 and #c == 7
    for i = 1, 6 do same = same and s[i] == f[i] and s[i + 6] == c[i] end
    same = same and s[13] == c[7]
    why[#why + 1] = {same, ("rank %d: the losses (or counter / lr line) of the resumed run differ"):format(r)}
    local st = slurp(("%s/straight_r%d.safetensors"):format(d, r))
    why[#why + 1] = {#st > 0 and st == slurp(("%s/second_r%d.safetensors"):format(d, r)),
      ("rank %d: parameters / optimizer state differ from the unbroken run"):format(r)}
  end
  check("2 ranks: train 6, save_state, new launch, load_state, train 6 == train 12 (bitwise)", second,
    table.unpack(why))

  local moved = launch(3, "ddp_resume.lua", "position", d)
  check("load_state of a 2-rank checkpoint on 3 ranks converts the loader position", moved,
    {moved.code == 0, "exit status"},
    {has(moved.out, "rank 0: epoch 0 batch 4 step 6") and has(moved.out, "rank 2: epoch 0 batch 4 step 6"),
      "expected batch 4 (12 global batches / 3) and step 6 on every rank"},
    {has(moved.err, "was saved by 2 process(es) and has no random_states_<rank>.json for rank(s) 2"),
      "no warning naming rank 2's missing random state"})

  local odd = launch(2, "ddp_resume.lua", "first", d, 5)
  local refused = launch(3, "ddp_resume.lua", "position", d)
  check("load_state on 3 ranks of a 2-rank checkpoint at batch 5 is refused, saying why", refused,
    {odd.code == 0, "the 2-rank run saving at batch 5 failed"}, {refused.code == 0, "exit status"},
    {has(refused.out, "rank 1: refused:") and has(refused.out, "dataloader.json is at batch 5 of 2 processes")
      and has(refused.out, "not a whole number of batches for 3 processes"), "no refusal naming the position"})
end

-- ---- (e) tied weights, unused parameters ----
for _, n in ipairs({2, 3}) do
  local run = launch(n, "ddp_tied.lua")
  check(("tied and reused weights, parameters without gradients on %d ranks"):format(n), run,
    {run.code == 0, "exit status"}, {all_ranks_ok(run, n), "not every rank printed its ok line"})
end

os.execute("rm -rf " .. quote(DIR))
os.remove(TMP)
os.remove(TMP .. ".out")
os.remove(TMP .. ".err")
print(("%d passed, %d failed"):format(passed, failed))
os.exit(failed == 0 and 0 or 1)
