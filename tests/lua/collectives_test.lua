-- collectives_test.lua: the Accelerator's collectives across processes
-- (bindings/lua/accel/operations.lua, join.lua). Run by
-- scripts/run-tests.sh as `accel-lua collectives_test.lua` (exit 0 = pass);
-- it starts `accel-lua launch --cpu --num_processes N` jobs (OpenMPI,
-- oversubscribed) on the helpers in tests/lua/helpers/:
--   coll_ops.lua   broadcast_object_list, gather_for_metrics of several
--                  values, non-tensor values refused by gather / reduce /
--                  broadcast / pad_across_processes, what differs between
--                  ranks (nested structure, arguments, gather_object's
--                  lists and values) failing on every rank, set_seed's
--                  device_specific, synchronize_rng_states (2 and 3 ranks)
--   coll_join.lua  even_batches = false, rank 0 with one batch more:
--                  inside join_uneven_inputs every rank ends with the same
--                  parameters, equal to SGD computed here in closed form
--                  with PyTorch's Join averaging (divide_by_initial_world_size:
--                  the gradient of a step is the sum over the ranks that
--                  have a batch divided by the world size); without join the
--                  job fails within 15 s naming join_uneven_inputs
-- The accel-lua under test is $ACCEL_LUA_BIN, else the interpreter running
-- this script.
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local support = dofile(HERE .. "/support.lua")

local HELPERS = HERE .. "/helpers/"
local has, all_ranks_ok = support.has, support.all_ranks_ok
local jobs = support.job_checks()
local check = jobs.check

support.require_mpirun()
local DIR = support.tmpdir()
local launch = support.launcher(jobs, support.job_env(DIR), HELPERS)

-- ---- broadcast_object_list, gather_for_metrics(a, b), non-tensors ----
for _, n in ipairs({2, 3}) do
  local run = launch(n, "coll_ops.lua")
  check(("broadcast_object_list, gather_for_metrics of several values, non-tensor values, disagreeing ranks, seeds on "
    .. "%d ranks"):format(n), run,
    {run.code == 0, "exit status"}, {all_ranks_ok(run, n), "not every rank printed its ok line"})
end

-- ---- join_uneven_inputs ----

-- The parameters {w1, w2, w3, b} after SGD (lr 0.1) on coll_join.lua's data
-- with N ranks and k-step accumulation: global batch j (samples 2j, 2j + 1)
-- is rank j % N's local batch j // N; a rank's window w is its local batches
-- wk .. wk + k - 1 (the last one may be shorter), each batch's gradient
-- divided by k (accelerator:backward); an optimizer step's gradient is the
-- sum over the ranks that have window w divided by N (ranks without it add
-- zeros: PyTorch's divide_by_initial_world_size).
local function batch_grad(p, j, g, scale)
  for i = 2 * j, 2 * j + 1 do
    local x = {i / 4, 1 - i / 8, (i % 3) / 2}
    local y = x[1] - 2 * x[2] + 0.5 * x[3] + 0.25
    local e = p[1] * x[1] + p[2] * x[2] + p[3] * x[3] + p[4] - y
    -- d/dp of the batch's mean of e^2: (2 / 2) * e * (x, 1), summed over its 2 samples
    for d = 1, 3 do g[d] = g[d] + scale * e * x[d] end
    g[4] = g[4] + scale * e
  end
end

local function reference(samples, N, k)
  local p = {0.1, -0.2, 0.3, 0.05}
  local nb = samples // 2
  local local_batches = (nb + N - 1) // N -- rank 0's, the most
  for w = 0, (local_batches - 1) // k do
    local g = {0, 0, 0, 0}
    for r = 0, N - 1 do
      for b = w * k, w * k + k - 1 do
        local j = b * N + r
        if j < nb then batch_grad(p, j, g, 1 / k) end
      end
    end
    for d = 1, 4 do p[d] = p[d] - 0.1 * g[d] / N end
  end
  return p
end

for _, case in ipairs({{n = 2, samples = 10, k = 1}, {n = 3, samples = 14, k = 1}, {n = 2, samples = 10, k = 2}}) do
  local run = launch(case.n, "coll_join.lua", "join", case.samples, case.k)
  local want, lines, worst = reference(case.samples, case.n, case.k), {}, 0
  for r = 0, case.n - 1 do
    lines[r] = run.out:match(("params %d: ([^\n]+)"):format(r))
    local i = 0
    for v in (lines[r] or ""):gmatch("%S+") do
      i = i + 1
      worst = math.max(worst, math.abs(tonumber(v) - want[i]) / math.max(1, math.abs(want[i])))
    end
    if i ~= 4 then worst = math.huge end
  end
  local same = true
  for r = 1, case.n - 1 do same = same and lines[r] == lines[0] end
  check(("join_uneven_inputs on %d ranks, accumulation %d, rank 0 with one batch more: same parameters, Join's "
    .. "averages"):format(case.n, case.k), run, {run.code == 0, "exit status"},
    {same, "the ranks end with different parameters"},
    {worst <= 1e-5, ("parameters differ from the closed form by %g relative"):format(worst)},
    {run.secs < 60, "took 60 s or more"})
end

do
  local run = launch(2, "coll_join.lua", "join", 10, 3)
  -- each rank's own error line (launch's summary line repeats the first one)
  local _, n = run.err:gsub("accel%-lua: rank %d: [^\n]*join_uneven_inputs: in this step 1 of the 2 processes still "
    .. "training synchronise the gradients of model 1 and the others do not", "")
  check("join_uneven_inputs with accumulation windows ending at different batches: one error on every rank", run,
    {run.code ~= 0, "job exited 0"}, {n == 2, ("%d ranks reported the disagreement, expected 2"):format(n)},
    {run.secs < 15, "took 15 s or more"})
end

do
  local run = launch(2, "coll_join.lua", "nojoin", 10)
  check("even_batches = false without join_uneven_inputs fails fast, naming it", run, {run.code ~= 0, "job exited 0"},
    {has(run.err, "gives the processes different numbers of batches (rank 0: 3, rank 1: 2)")
      and has(run.err, "accelerator:join_uneven_inputs(models, {even_batches = false}, fn)"),
      "stderr lacks the message naming the batch counts and join_uneven_inputs"},
    {run.secs < 15, "took 15 s or more"}, {not has(run.out, "finished without join"), "a rank finished"})
end

support.remove_tree(DIR)
jobs.finish()
