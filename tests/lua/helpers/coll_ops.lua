-- coll_ops.lua: run by tests/lua/collectives_test.lua as
-- `accel-lua launch --cpu --num_processes N coll_ops.lua`. On N ranks:
-- broadcast_object_list replaces the list's items with the source's;
-- gather_for_metrics(a, b) returns both gathered (the padded remainder cut
-- from each); gather / reduce / broadcast / pad_across_processes of values
-- that are not tensors raise on every rank (naming the type, where it is
-- and the op) instead of returning each rank's value; what differs between
-- ranks (nested structure, arguments, a value refused on one rank,
-- gather_object's lists and values) is one error on every rank, after
-- which collectives still pair; set_seed's device_specific and
-- synchronize_rng_states; accel.utils' collectives (Accelerate's
-- accelerate.utils.broadcast, ...). Expected values are closed forms or accelerate
-- 1.15's results on 2 ranks. Each rank prints "ok rank R: C checks" or raises.
local accel = require("accel")
local data = accel.data

local acc = accel.Accelerator()
local rank, N = acc.process_index, acc.num_processes
local rc = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/rank_checks.lua")(rank)
local check, expect = rc.check, rc.expect_part

-- ---- broadcast_object_list ----
do
  local list = {"mine" .. rank, rank, {k = rank}, rank == 1 and "only on 1" or nil}
  local same = acc:broadcast_object_list(list, 1)
  check(same == list, "broadcast_object_list returns the list given")
  check(list[1] == "mine1" and list[2] == 1 and list[3].k == 1 and list[4] == "only on 1" and #list == 4,
    "broadcast_object_list from 1: got %s %s", tostring(list[1]), tostring(list[2]))
  local short = {rank, rank, rank}
  if rank == 0 then short = {"a"} end
  acc:broadcast_object_list(short)
  check(#short == 1 and short[1] == "a", "broadcast_object_list from 0: the list becomes rank 0's (%d items)", #short)
  expect("broadcast_object_list: from_process must be a process index in 0.." .. (N - 1) .. ", got " .. N,
    acc.broadcast_object_list, acc, {1}, N)
  expect("broadcast_object_list: expected a list, got number", acc.broadcast_object_list, acc, 5)
end

-- ---- gather_for_metrics of several values ----
do
  local n = 2 * N + 1 -- one sample more than two full global batches of N * 1
  local ds = data.TensorDataset(accel.arange(n), accel.arange(n) * 10)
  local loader = acc:prepare(data.DataLoader(ds, {batch_size = 1}))
  local xs, ys, objs = {}, {}, {}
  for xb, yb in loader:iter() do
    local gx, gy, go = acc:gather_for_metrics(xb, yb, {"s" .. xb:item()})
    for _, v in ipairs(gx:tolist()) do xs[#xs + 1] = v end
    for _, v in ipairs(gy:tolist()) do ys[#ys + 1] = v end
    for _, v in ipairs(go) do objs[#objs + 1] = v end
  end
  check(#xs == n and #ys == n and #objs == n, "gather_for_metrics(a, b, c): %d, %d, %d values, expected %d each",
    #xs, #ys, #objs, n)
  for i = 1, n do
    check(xs[i] == i - 1 and ys[i] == 10 * (i - 1) and objs[i] == "s" .. (i - 1), "gather_for_metrics value %d", i)
  end
  -- the options table after the data
  local a, b = acc:gather_for_metrics({rank}, {"r" .. rank}, {use_gather_object = true})
  check(#a == N and a[N] == N - 1 and #b == N and b[N] == "r" .. (N - 1), "gather_for_metrics with use_gather_object")
  expect("gather_for_metrics: unknown option 'use_gather_objects' (use_gather_object)",
    acc.gather_for_metrics, acc, accel.tensor({1}), {use_gather_objects = true})
  expect("gather_for_metrics: argument 2 is nil", acc.gather_for_metrics, acc, accel.tensor({1}), nil, {1})
end

-- ---- values that are not tensors ----
do
  local t = accel.ones(2)
  expect("gather: unsupported type number; only tensors and nested tables of tensors can be passed (use "
    .. "gather_object for other Lua values)", acc.gather, acc, rank)
  expect("gather: unsupported type string at data.b[2]", acc.gather, acc, {a = t, b = {t, "x"}})
  expect("reduce: unsupported type boolean at data[1]", acc.reduce, acc, {true}, "sum")
  expect("reduce: unsupported type number", acc.reduce, acc, 3, "none")
  expect("broadcast: unsupported type number; only tensors and nested tables of tensors can be passed (use "
    .. "broadcast_object_list for other Lua values)", acc.broadcast, acc, rank)
  expect("broadcast: unsupported type table with a metatable (Linear) at data.m", acc.broadcast, acc,
    {m = accel.nn.Linear(1, 1)})
  expect("pad_across_processes: unsupported type string", acc.pad_across_processes, acc, "x")
  -- tensors still work, on every rank alike
  local g = acc:gather({a = accel.tensor({rank}), b = {accel.tensor({rank * 2})}})
  check(g.a:size(1) == N and g.b[1][N]:item() == 2 * (N - 1), "gather of a nested table")
end

-- ---- what differs between ranks: one error on every rank, and the next collective still pairs ----
local function still_pairs(what)
  local g = acc:gather(accel.tensor({rank}))
  check(g:size(1) == N and g[N]:item() == N - 1, "the collective after %s pairs", what)
end

-- gather_object decides from every rank's value. Accelerate 1.15 (2 ranks): {} on rank 0 and
-- {"loss": 0.5} on rank 1 give the same result on both; 7 on rank 0 and [1, 2] on rank 1 raise
-- (TypeError) on both. Here tables of named fields are collected, lists concatenated.
do
  local got = acc:gather_object(rank == 0 and {} or {loss = rank / 2})
  check(#got == N and next(got[1]) == nil and got[N].loss == (N - 1) / 2, "gather_object of {} and tables: %d values", #got)
  local joined = acc:gather_object(rank == 0 and {} or {rank})
  check(#joined == N - 1 and joined[N - 1] == N - 1, "gather_object of {} and lists: %d items", #joined)
  expect("gather_object: rank 1 passes a list and rank 0 a number; every process must pass a list (the lists are "
    .. "concatenated) or every process another value (the values are collected)",
    acc.gather_object, acc, rank == 0 and 7 or {1, 2})
  still_pairs("gather_object")
end

-- Accelerate 1.16 under DDP on 2 processes: get_state_dict(model, unwrap=False) names "module.bias",
-- "module.weight"; pad_across_processes of an int64 tensor with pad_index 2.5 gives a float tensor
-- (new_zeros(size) + pad_index): rank 0's [1] padded to [1.0, 2.5]; the longest tensor is returned unchanged
do
  local model = acc:prepare(accel.nn.Linear(2, 1))
  local names = {}
  for k in pairs(acc:get_state_dict(model, {unwrap = false})) do names[#names + 1] = k end
  table.sort(names)
  check(table.concat(names, ",") == "module.bias,module.weight", "get_state_dict unwrap = false: %s", table.concat(names, ","))
  local padded = acc:pad_across_processes(accel.ones({rank + 1}, {dtype = accel.int64}), {pad_index = 2.5})
  local want = rank == N - 1 and accel.int64 or accel.float32 -- (the longest comes back as it is, as Accelerate's)
  check(padded.dtype == want and padded:size(1) == N and (rank == N - 1 or padded[N]:item() == 2.5),
    "pad_across_processes with a fractional pad_index of an int64 tensor: float32, padded with 2.5")
end

-- Accelerate 1.16 pickles tensors: gather_object([tensor of rank + 1 values]) on N ranks gives N tensors of
-- 1..N values, in rank order, on every rank
do
  local got = acc:gather_object({accel.full({rank + 1}, rank, {dtype = accel.int64}), "r" .. rank})
  local ok = #got == 2 * N
  for r = 0, N - 1 do
    local t = got[2 * r + 1]
    ok = ok and accel.is_tensor(t) and t:numel() == r + 1 and t.dtype == accel.int64 and t[1]:item() == r
      and got[2 * r + 2] == "r" .. r
  end
  check(ok, "gather_object of tensors of different sizes: every rank's, in order")
end

do
  local t = accel.ones(2)
  expect("gather: the processes pass differently structured data: rank 0 has a tensor at data[2], rank 1 nothing "
    .. "more (every process must pass tensors under the same keys)", acc.gather, acc, rank == 0 and {t, t} or {t})
  expect("reduce: the processes pass differently structured data: rank 0 has a tensor at data.a, rank 1 a tensor at "
    .. "data.b (every process must pass tensors under the same keys)", acc.reduce, acc, rank == 0 and {a = t} or {b = t})
  expect('reduce: rank 0 passes {reduction = "sum", scale = 1}, rank 1 {reduction = "mean", scale = 1}',
    acc.reduce, acc, {t}, rank == 0 and "sum" or "mean")
  -- one tensor: its all_reduce's header has neither reduction nor scale
  expect('reduce: rank 0 passes {reduction = "sum", scale = 1}, rank 1 {reduction = "mean", scale = 1}',
    acc.reduce, acc, accel.tensor({1.0 + rank}), rank == 0 and "sum" or "mean")
  expect('reduce: rank 0 passes {reduction = "sum", scale = 1}, rank 1 {reduction = "sum", scale = 2}',
    acc.reduce, acc, t, {reduction = "sum", scale = math.min(rank, 1) + 1})
  expect('reduce: rank 0 passes {reduction = "none", scale = 1}, rank 1 {reduction = "sum", scale = 1}',
    acc.reduce, acc, t, rank == 0 and "none" or "sum")
  expect("broadcast: rank 0 passes {from_process = 0}, rank 1 {from_process = 1}", acc.broadcast, acc, {t},
    math.min(rank, 1))
  expect("gather: rank 1: unsupported type string at data[1]; only tensors and nested tables of tensors can be passed "
    .. "(use gather_object for other Lua values)", acc.gather, acc, {rank == 0 and t or "x"})
  expect("broadcast: rank 1: from_process must be a process index in 0.." .. (N - 1) .. ", got " .. N, acc.broadcast,
    acc, {t}, rank == 0 and 0 or N)
  -- pad_across_processes: a tensor without the dim on one rank only, and different dims
  expect("pad_across_processes: rank 0's tensor has no dim 2, rank 1's has one (every process's tensor must have that "
    .. "dim, or none)", acc.pad_across_processes, acc, rank == 0 and accel.ones(2) or accel.ones(2, 3), {dim = 2})
  expect("pad_across_processes: rank 0 pads dim 1, rank 1 dim 2", acc.pad_across_processes, acc, accel.ones(2, 2),
    {dim = math.min(rank, 1) + 1})
  expect("pad_across_processes: rank 1: dim must be an integer, got 1.5", acc.pad_across_processes, acc, {t},
    rank == 0 and 1 or 1.5)
  local padded = acc:pad_across_processes(accel.ones(1, rank + 1), {dim = -1, pad_index = 7})
  check(padded:size(2) == N and padded[1][N]:item() == (rank == N - 1 and 1 or 7), "pad_across_processes dim -1")
  -- rank 0 holds the longest: the others are padded up to it (Accelerate: rank 1 of 2 gets [-1, -1, 1, 2, 3])
  local n = 5 - 2 * rank
  local firsts = acc:pad_across_processes((accel.arange(n) + 1):view(1, -1), {dim = 2, pad_index = -1, pad_first = true})
  local want = {}
  for i = 1, 5 do want[i] = i <= 5 - n and -1 or i - (5 - n) end
  check(table.concat(firsts[1]:tolist(), ",") == table.concat(want, ","), "pad_across_processes up to rank 0's size")
  still_pairs("the refused gather / reduce / broadcast / pad_across_processes")
end

do
  expect("broadcast_object_list: rank 1: expected a list, got a table of named fields", acc.broadcast_object_list,
    acc, rank == 0 and {1} or {a = 1})
  expect("broadcast_object_list: rank 0 broadcasts from process 0, rank 1 from process 1", acc.broadcast_object_list,
    acc, {1}, math.min(rank, 1))
  expect("broadcast_object_list: rank 0's value cannot be sent: json.encode: value[1] is a function, "
    .. "which JSON cannot represent", acc.broadcast_object_list, acc, {print})
  local list = {rank}
  acc:broadcast_object_list(list, {from_process = N - 1})
  check(list[1] == N - 1, "broadcast_object_list with {from_process =}")
  expect("collective mismatch: rank 0 called gather_object, rank 1 called broadcast_object_list (every process "
    .. "must call the same operations in the same order)", function()
      if rank == 0 then return acc:gather_object(1) end
      return acc:broadcast_object_list({1})
    end)
  still_pairs("the refused broadcast_object_list")
end

-- ---- set_seed(seed, device_specific): Accelerate 1.15 on 2 ranks gives torch.initial_seed() 42 and 43 ----
do
  accel.manual_seed(42 + rank)
  local want = accel.rand(3):tolist()
  accel.set_seed(42, true)
  check(accel.initial_seed() == 42 + rank, "set_seed device_specific: seed %d", accel.initial_seed())
  local got = accel.rand(3):tolist()
  check(got[1] == want[1] and got[3] == want[3], "set_seed device_specific draws as manual_seed(42 + rank)")
  accel.set_seed(42, {device_specific = true})
  check(accel.initial_seed() == 42 + rank, "set_seed {device_specific = true}")
  -- synchronize_rng_states: every rank continues with rank 0's generator
  accel.set_seed(7)
  accel.rand(rank + 1)
  local a0, b0 = accel.get_rng_state()
  local zero = acc:broadcast(accel.tensor({a0, b0}, {dtype = accel.int64}), 0):tolist()
  accel.utils.synchronize_rng_states({"torch"})
  local a, b = accel.get_rng_state()
  check(a == zero[1] and b == zero[2], "synchronize_rng_states: rank 0's state")
  local draws = acc:gather(accel.rand(2):view(1, 2))
  check(draws[1]:equal(draws[N]), "synchronize_rng_states: the same draws on every rank")
end

-- ---- accelerate.utils' collectives: accel.utils.* (no Accelerator needed) ----
do
  local u = accel.utils
  check(u.broadcast(accel.tensor({rank + 1.0}), N - 1):item() == N, "utils.broadcast from the last rank")
  check(u.gather(accel.tensor({rank})):equal(accel.arange(N)), "utils.gather")
  check(u.reduce(accel.tensor({rank + 1.0}), "sum"):item() == N * (N + 1) / 2, "utils.reduce sum")
  check(u.reduce(accel.tensor({rank + 1.0})):item() == (N + 1) / 2, "utils.reduce: mean by default")
  local padded = u.pad_across_processes(accel.ones(rank + 1), 1, -1)
  check(padded:numel() == N and padded[N]:item() == (rank == N - 1 and 1 or -1), "utils.pad_across_processes")
  local list = {"r" .. rank}
  u.broadcast_object_list(list, 1)
  check(list[1] == "r1", "utils.broadcast_object_list from 1: got %s", tostring(list[1]))
  local objs = u.gather_object({rank})
  check(#objs == N and objs[N] == N - 1, "utils.gather_object concatenates the lists")
end

-- ---- even_batches = false: gather_for_metrics cuts the padded last batch to the remainder ----
-- Accelerate 1.16 sets remainder = dataset length % total batch size whatever even_batches is; its
-- documented idiom pad_across_processes + gather_for_metrics on 11 samples, batch 2, 3 ranks gave
-- [1..6] then [7..11] with remainder 5 (2 ranks: 11 % 4 = 3)
do
  local uneven = accel.Accelerator{even_batches = false}
  local dl = uneven:prepare(data.DataLoader(data.TensorDataset(accel.arange(1, 12)), {batch_size = 2}))
  local seen = {}
  for x in dl:iter() do
    local g = uneven:gather_for_metrics(uneven:pad_across_processes(x, {dim = 1, pad_index = -1}))
    for _, v in ipairs(g:tolist()) do seen[#seen + 1] = v end
    check(uneven.gradient_state.remainder == 11 % (2 * N), "even_batches = false: remainder %s, expected %d",
      tostring(uneven.gradient_state.remainder), 11 % (2 * N))
  end
  check(#seen == 11, "even_batches = false: gather_for_metrics gave %d values, expected the 11 samples", #seen)
  for i = 1, #seen do check(seen[i] == i, "even_batches = false: value %d is %s", i, tostring(seen[i])) end
end

acc:wait_for_everyone()
print(("ok rank %d: %d checks"):format(rank, rc.count))
