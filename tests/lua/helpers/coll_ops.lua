-- coll_ops.lua: run by tests/lua/collectives_test.lua as
-- `accel-lua launch --cpu --num_processes N coll_ops.lua`. On N ranks:
-- broadcast_object_list replaces the list's items with the source's;
-- gather_for_metrics(a, b) returns both gathered (the padded remainder cut
-- from each); gather / reduce / broadcast / pad_across_processes of values
-- that are not tensors raise on every rank (naming the type, where it is
-- and the op) instead of returning each rank's value. Expected values are
-- closed forms. Each rank prints "ok rank R: C checks" or raises.
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

acc:wait_for_everyone()
print(("ok rank %d: %d checks"):format(rank, rc.count))
