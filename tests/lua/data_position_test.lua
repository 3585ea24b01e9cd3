-- data_position_test.lua: a prepared loader's checkpointed position is
-- samples of the global order, so a mid-epoch save_state resumes on another
-- number of processes (docs/data-positions.md). Run by scripts/run-tests.sh
-- as `accel-lua data_position_test.lua` (exit 0 = pass); it starts
-- `accel-lua launch --cpu --num_processes N` jobs of helpers/data_position.lua
-- (oversubscribed on however few cores).
--
-- The expected values come from the unprepared loader on this one process
-- (its pass is the epoch's global order) and from the dealing rule of
-- DESIGN §2 written out here: rank r's batch j of a pass from position s
-- on M processes holds positions s + (r + j*M)*bs ... (+ bs), or under
-- split_batches the r-th of M slices of positions s + j*bs ...; even_batches
-- completes the last round from the start of the order. Checked:
--   * saved after k batches on N ranks, resumed on M (2 -> 3, 2 -> 1,
--     1 -> 2, split_batches 2 -> 3, an older {epoch, batches} file 2 -> 3):
--     what the ranks saw before saving is the first s = k * global batch
--     samples of the order; after resuming, the ranks' batches taken round
--     by round are exactly the rest of the order (then the padding from its
--     start); gather_for_metrics of the rest returns exactly the rest; the
--     next epoch is the whole epoch-1 order;
--   * drop_last: 2 -> 1 continues with every remaining full batch; 2 -> 3,
--     where 3 processes would skip samples 2 processes would still see, is
--     refused naming both layouts and the position; a loader whose batch
--     size does not divide the position is refused naming it.
-- The accel-lua under test is $ACCEL_LUA_BIN, else the interpreter running
-- this script.
local accel = require("accel")
local data = accel.data
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local has = support.has
local jobs = support.job_checks()
local check = jobs.check

support.require_mpirun()
local DIR = support.tmpdir()

local run_helper = support.launcher(jobs, support.job_env(DIR), HERE .. "/helpers/")

-- `accel-lua launch --cpu --num_processes np data_position.lua args...` -> {code, out, err, secs}
local function launch(np, ...) return run_helper(np, "data_position.lua", ...) end

local N_SAMPLES, SEED = 23, 5

-- Epoch e's global order (0-based ids) from the unprepared loader.
local function global_order(epoch)
  local loader = data.DataLoader(data.TensorDataset(accel.arange(N_SAMPLES)), {batch_size = 4, shuffle = true, seed = SEED})
  loader:set_epoch(epoch)
  local order = {}
  for xb in loader:iter() do
    for _, v in ipairs(xb:tolist()) do order[#order + 1] = v end
  end
  return order
end
local ORDER, ORDER1 = global_order(0), global_order(1)

-- The batches (lists of ids) in a helper's file.
local function batches(path)
  local out = {}
  for _, line in ipairs(support.lines_of(support.read_if_exists(path))) do
    local b = {}
    for v in line:gmatch("%d+") do b[#b + 1] = tonumber(v) end
    out[#out + 1] = b
  end
  return out
end

-- The ids of ranks 0..np-1's files for tag, taken round by round (batch 1
-- of every rank, then batch 2, ...), and whether every rank had as many.
local function dealt(tag, np)
  local per, ids, even = {}, {}, true
  for r = 0, np - 1 do
    per[r] = batches(("%s/%s_r%d.txt"):format(DIR, tag, r))
    even = even and #per[r] == #per[0]
  end
  for j = 1, #per[0] do
    for r = 0, np - 1 do
      for _, v in ipairs(per[r][j] or {}) do ids[#ids + 1] = v end
    end
  end
  return ids, even
end

local function concat(list)
  local out = {}
  for _, b in ipairs(list) do for _, v in ipairs(b) do out[#out + 1] = v end end
  return out
end

-- ORDER positions first..last (1-based, inclusive), wrapping past the end.
local function positions(order, first, last)
  local out = {}
  for p = first, last do out[#out + 1] = order[(p - 1) % #order + 1] end
  return out
end

local function same(got, want) return table.concat(got, " ") == table.concat(want, " ") end

local function show(t) return "{" .. table.concat(t, " ") .. "}" end

-- Saves on n_save ranks after k batches (once per ckpt name).
local saved = {}
local function save(ckpt, n_save, k, ...)
  if not saved[ckpt] then saved[ckpt] = {run = launch(n_save, "save", DIR, ckpt, ckpt .. "_save", "k=" .. k, ...)} end
  return saved[ckpt].run
end

-- Save on n_save after k batches, resume on n_resume; o: {bs = 2, split =,
-- legacy =}. The rest of the order must be dealt exactly.
local function resumed(name, ckpt, n_save, n_resume, k, o)
  local bs, split = o.bs or 2, o.split == true
  local opts = {"bs=" .. bs, "split=" .. (split and 1 or 0)}
  local first = save(ckpt, n_save, k, opts[1], opts[2], "legacy=" .. (o.legacy and 1 or 0))
  local out = name:gsub("%W", "_")
  local run = launch(n_resume, "resume", DIR, ckpt, out, opts[1], opts[2])
  local s = k * (split and bs or bs * n_save) -- k steps of the saving layout
  local before = dealt(ckpt .. "_save", n_save)
  local after, even = dealt(out, n_resume)
  local rest = positions(ORDER, s + 1, N_SAMPLES)
  local round = split and bs or bs * n_resume
  local padded = n_resume == 1 and N_SAMPLES - s or math.ceil((N_SAMPLES - s) / round) * round -- no padding on 1
  local gathered = concat(batches(DIR .. "/" .. out .. "_gathered.txt"))
  local nxt = concat(batches(DIR .. "/" .. out .. "_next.txt"))
  check(name, run, {first.code == 0, "the saving run failed: " .. first.err:sub(-400)}, {run.code == 0, "exit status"},
    {has(run.out, ("rank 0: epoch 0 samples %d"):format(s)), ("expected position %d"):format(s)},
    {same(before, positions(ORDER, 1, s)), ("before saving the ranks saw %s, expected the first %d samples %s"):format(
      show(before), s, show(positions(ORDER, 1, s)))},
    {same(after, positions(ORDER, s + 1, s + padded)) and even, ("after resuming the ranks saw %s (round by round), "
      .. "expected the rest %s then padding from the start"):format(show(after), show(rest))},
    {same(gathered, rest), ("gather_for_metrics of the rest gave %s"):format(show(gathered))},
    {same(nxt, ORDER1), ("the next epoch gave %s, expected %s"):format(show(nxt), show(ORDER1))})
end

-- Global batch 2 ranks x 2 = 4: k = 2 is position 8, which is not a whole
-- number of 3-rank steps (6): the resumed steps straddle the saved ones.
resumed("2 ranks mid-epoch -> 3 ranks continue the global order", "c2", 2, 3, 2, {})
resumed("2 ranks mid-epoch -> 1 rank continues the global order", "c2", 2, 1, 2, {})
resumed("1 rank mid-epoch -> 2 ranks continue the global order", "c1", 1, 2, 5, {})
resumed("split_batches: 2 ranks -> 3 ranks continue the global order", "cs", 2, 3, 2, {bs = 6, split = true})
resumed("an older {epoch, batches} position saved on 2 ranks -> 3 ranks", "cl", 2, 3, 3, {legacy = true})

-- ---- drop_last: 2 ranks keep 5 rounds of 2 batches (positions 0..19) ----
do
  local first = save("cd", 2, 3, "drop_last=1") -- position 12
  local one = launch(1, "resume", DIR, "cd", "drop_one", "drop_last=1")
  local after = concat(batches(DIR .. "/drop_one_r0.txt"))
  check("drop_last: 2 ranks mid-epoch -> 1 rank takes every remaining full batch", one,
    {first.code == 0, "the saving run failed: " .. first.err:sub(-400)}, {one.code == 0, "exit status"},
    {same(after, positions(ORDER, 13, 22)), ("1 rank saw %s, expected %s"):format(show(after),
      show(positions(ORDER, 13, 22)))})
  -- 3 ranks from 12: only one round of 3 batches fits in the 11 left, so
  -- positions 18, 19 (samples 19 to 20), which 2 ranks would see, are lost
  local three = launch(3, "resume", DIR, "cd", "drop_three", "drop_last=1")
  check("drop_last: 2 ranks mid-epoch -> 3 ranks is refused, naming both layouts and the position", three,
    {three.code == 0, "exit status"},
    {has(three.out, "rank 2: refused: ") and has(three.out, "dataloader.json does not fit data loader 1: the position "
      .. "(epoch 0, 12 of 23 samples consumed, saved by 2 processes) cannot be continued exactly by 3 processes")
      and has(three.out, "samples 19 to 20 of the epoch's order, which 2 processes would still see, would be skipped"),
      "no refusal naming the position and both layouts"},
    {support.read_if_exists(DIR .. "/drop_three_r0.txt") == "", "a refused rank iterated anyway"})
  local bs3 = launch(1, "resume", DIR, "c2", "bs3", "bs=3")
  check("a loader whose batch size does not divide the position is refused", bs3, {bs3.code == 0, "exit status"},
    {has(bs3.out, "rank 0: refused: ") and has(bs3.out, "the position (epoch 0, 8 of 23 samples consumed, saved by "
      .. "2 processes) is not a whole number of batches of 3 for 1 process"), "no refusal naming the position"})
end

support.remove_tree(DIR)
jobs.finish()
