-- ddp_ops.lua: the Accelerator's cross-process operations on N ranks, run
-- by ddp_test.lua as `accel-lua launch --cpu --num_processes N ddp_ops.lua DIR`.
-- Every rank checks every result against closed forms (or, for
-- gather_for_metrics, against the unprepared loader's order computed
-- locally) and raises an error on the first mismatch; at the end each rank
-- prints "ok rank R: C checks" and rank 0 prints "printed once" through
-- accelerator:print.
local accel = require("accel")
local data = accel.data

local dir = arg[1]
local acc = accel.Accelerator()
local rank, N = acc.process_index, acc.num_processes
local checks = 0

local function check(cond, fmt, ...)
  checks = checks + 1
  if not cond then error(("rank %d: " .. fmt):format(rank, ...), 2) end
end

local function same_list(got, want, what)
  check(#got == #want, "%s: %d items, expected %d", what, #got, #want)
  for i = 1, #want do
    if got[i] ~= want[i] then check(false, "%s: item %d is %s, expected %s", what, i, tostring(got[i]), tostring(want[i])) end
  end
  checks = checks + 1
end

local function values(t) return t:reshape(-1):double():tolist() end

-- ---- process fields ----
check(rank == tonumber(os.getenv("OMPI_COMM_WORLD_RANK")), "process_index %d differs from mpirun's rank", rank)
check(N == tonumber(os.getenv("OMPI_COMM_WORLD_SIZE")), "num_processes %d", N)
check(acc.local_process_index == rank, "local_process_index %d on one machine", acc.local_process_index)
check(acc.is_main_process == (rank == 0) and acc.is_local_main_process == (rank == 0), "main process flags")
check(acc.is_last_process == (rank == N - 1), "is_last_process")
check(acc.distributed_type == "MULTI_CPU", "distributed_type %s", tostring(acc.distributed_type))

-- ---- gather_for_metrics over 1001 samples: exactly the data set, in order ----
local n = 1001
local ids = accel.arange(n)
local ds = data.TensorDataset(ids)

local function global_order(bs, epochs)
  local l = data.DataLoader(ds, {batch_size = bs, shuffle = true, seed = 5})
  local out = {}
  for _ = 1, epochs do
    for b in l:iter() do
      for _, v in ipairs(b:tolist()) do out[#out + 1] = v end
    end
  end
  return out
end

local function gathered(a, bs, epochs)
  local l = a:prepare(data.DataLoader(ds, {batch_size = bs, shuffle = true, seed = 5}))
  local as_tensor, as_numbers, as_strings = {}, {}, {}
  for _ = 1, epochs do
    for b in l:iter() do
      for _, v in ipairs(a:gather_for_metrics(b):tolist()) do as_tensor[#as_tensor + 1] = v end
      local nums, strs = {}, {}
      for i, v in ipairs(b:tolist()) do nums[i], strs[i] = v, "s" .. v end
      for _, v in ipairs(a:gather_for_metrics(nums)) do as_numbers[#as_numbers + 1] = v end
      for _, v in ipairs(a:gather_for_metrics(strs)) do as_strings[#as_strings + 1] = v end
    end
  end
  return as_tensor, as_numbers, as_strings
end

-- One pass of the prepared loader l, gathered from every rank, sorted.
local function gathered_pass(l)
  local seen = {}
  for b in l:iter() do
    for _, v in ipairs(acc:gather_for_metrics(b):tolist()) do seen[#seen + 1] = v end
  end
  table.sort(seen)
  return seen
end

local function range(first, last)
  local r = {}
  for v = first, last do r[#r + 1] = v end
  return r
end

-- The prepared loader's pass, gathered from every rank, is the whole data set once.
local function partitions_the_data(loader, what) same_list(gathered_pass(acc:prepare(loader)), range(0, n - 1), what) end

-- ---- a shuffled loader without a seed, after the ranks used their generators differently:
-- the shards still partition the data set (every rank deals from rank 0's order) ----
accel.randn(rank + 1) -- each rank moves its generator a different amount
partitions_the_data(data.DataLoader(ds, {batch_size = 10, shuffle = true}),
  "shuffled without a seed, generators out of step: the shards")

-- ---- the same with per-rank seeds and one batch looked at before prepare (the loader's
-- cached order of that epoch belongs to its own seed, not rank 0's) ----
do
  local peeked = data.DataLoader(ds, {batch_size = 10, shuffle = true, seed = 42 + rank})
  for _ in peeked:iter() do break end
  partitions_the_data(peeked, "per-rank seeds, a batch looked at before prepare: the shards")
end

-- ---- a dataset whose length changes after prepare: gather_for_metrics reads it at every pass ----
do
  local len = 7
  local grow = data.Dataset{len = function() return len end, get = function(i) return i end}
  local l = acc:prepare(data.DataLoader(grow, {batch_size = 2}))
  for _, new_len in ipairs({5, 9}) do
    len = new_len
    same_list(gathered_pass(l), range(1, new_len),
      ("a dataset grown / shrunk to %d after prepare: gather_for_metrics"):format(new_len))
  end
end

for _, case in ipairs({{bs = 10, split = false}, {bs = 12, split = true}}) do
  local a = case.split and accel.Accelerator{split_batches = true} or acc
  local want = global_order(case.bs, 2)
  local t, nums, strs = gathered(a, case.bs, 2)
  local what = ("gather_for_metrics (batch %d%s)"):format(case.bs, case.split and ", split_batches" or "")
  same_list(t, want, what .. " of tensors")
  same_list(nums, want, what .. " of Lua numbers")
  local want_s = {}
  for i, v in ipairs(want) do want_s[i] = "s" .. v end
  same_list(strs, want_s, what .. " of Lua strings")
end

-- ---- gather: equal and unequal first dims ----
do
  local g = acc:gather(accel.full({2, 3}, rank))
  check(g:size(1) == 2 * N and g:size(2) == 3, "gather shape")
  for r = 0, N - 1 do check(g[2 * r + 1][1]:item() == r and g[2 * r + 2][3]:item() == r, "gather rank %d rows", r) end
  local u = acc:gather(accel.full({rank + 1}, rank))
  local want = {}
  for r = 0, N - 1 do
    for _ = 1, r + 1 do want[#want + 1] = r end
  end
  same_list(values(u), want, "gather of unequal lengths")
  local s = acc:gather(accel.tensor(rank * 1.5))
  check(s:dim() == 1 and s:size(1) == N and s[N]:item() == (N - 1) * 1.5, "gather of a 0-dim tensor")
  local nested = acc:gather({a = accel.tensor({rank}), b = {accel.tensor({rank * 2})}})
  check(nested.a:size(1) == N and nested.b[1][N]:item() == 2 * (N - 1), "gather of a nested table")
end

-- ---- reduce ----
do
  local t = accel.tensor({rank + 1.0, -rank})
  local sum = N * (N + 1) / 2
  same_list(values(acc:reduce(t, "sum")), {sum, -(N - 1) * N / 2}, "reduce sum")
  same_list(values(acc:reduce(t, "mean")), {sum / N, -(N - 1) / 2}, "reduce mean")
  same_list(values(acc:reduce(t, {reduction = "max"})), {N, 0}, "reduce max")
  same_list(values(acc:reduce(t, "min")), {1, -(N - 1)}, "reduce min")
  -- Accelerate 1.16 applies scale on XLA only: reduce(t, "sum", 0.5) on CPUs is the plain sum
  same_list(values(acc:reduce(t, "sum", 0.5)), {sum, -(N - 1) * N / 2}, "reduce sum with scale (not applied)")
  -- Accelerate 1.15 on 2 ranks: reduce(tensor([3.]) / tensor([4.]), "none") gives [7.] on both (SUM)
  same_list(values(acc:reduce(t, "none")), {sum, -(N - 1) * N / 2}, "reduce none sums")
  -- an integer mean over several processes: Accelerate's in-place division raises
  -- "result type Float can't be cast to the desired output type Long"
  local i = accel.tensor({rank + 1, 4}, {dtype = accel.int64})
  check(acc:reduce(i, "sum").dtype == accel.int64, "reduce sum of an int64 tensor keeps its dtype")
  local ok, err = pcall(function() return acc:reduce(i, "mean") end)
  check(not ok and tostring(err):find('reduce: reduction "mean" of an accel.int64 tensor over ' .. N .. " processes", 1,
    true) ~= nil, "reduce mean of an int64 tensor: %s", tostring(err))
end

-- ---- pad_across_processes ----
do
  local t = accel.full({2, rank + 1}, 7)
  local p = acc:pad_across_processes(t, {dim = 2, pad_index = -1})
  check(p:size(1) == 2 and p:size(2) == N, "pad_across_processes shape")
  local row = values(p[1])
  for j = 1, N do check(row[j] == (j <= rank + 1 and 7 or -1), "pad_across_processes value %d", j) end
  local f = acc:pad_across_processes(accel.full({rank + 1}, 3), {pad_first = true})
  local fv = values(f)
  check(#fv == N and fv[N] == 3 and (rank == N - 1 or fv[1] == 0), "pad_across_processes pad_first")
end

-- ---- broadcast, gather_object ----
do
  local b = acc:broadcast(accel.full({3}, rank + 0.25), N - 1)
  same_list(values(b), {N - 0.75, N - 0.75, N - 0.75}, "broadcast from the last rank")
  local nc = accel.full({3, 2}, rank):t() -- not contiguous
  same_list(values(acc:broadcast(nc, 0)), {0, 0, 0, 0, 0, 0}, "broadcast of a non-contiguous tensor")
  local objs = acc:gather_object({rank, "r" .. rank})
  local want = {}
  for r = 0, N - 1 do want[#want + 1], want[#want + 2] = r, "r" .. r end
  same_list(objs, want, "gather_object of lists")
  local one = acc:gather_object(("x%d"):format(rank))
  check(#one == N and one[N] == "x" .. (N - 1), "gather_object of a string")
end

-- ---- split_between_processes ----
do
  local items = {1, 2, 3, 4, 5, 6, 7}
  local all = acc:gather_object(acc:split_between_processes(items))
  same_list(all, items, "split_between_processes parts, gathered")
  local padded = acc:split_between_processes(items, {apply_padding = true})
  check(#padded == math.ceil(7 / N), "split_between_processes with padding: %d items", #padded)
  local part = acc:split_between_processes(accel.arange(7), function(p) return p end)
  local lens = acc:gather_object(part:size(1))
  local total = 0
  for _, k in ipairs(lens) do total = total + k end
  check(total == 7, "split_between_processes of a tensor covers it")
end

-- ---- ordering helpers ----
do
  local flag = dir .. "/main_first.txt"
  acc:main_process_first(function()
    if rank == 0 then
      local f = assert(io.open(flag, "w"))
      f:write("main")
      f:close()
    else
      check(io.open(flag, "r") ~= nil, "main_process_first: rank 0's file is not there yet")
    end
  end)
  acc:wait_for_everyone()
  local ran = 0
  local only_main = acc:on_main_process(function(k) ran = ran + k end)
  only_main(3)
  check(ran == (rank == 0 and 3 or 0), "on_main_process ran on rank %d", rank)
  local last = 0
  acc:on_last_process(function() last = 1 end)()
  check(last == (rank == N - 1 and 1 or 0), "on_last_process")
  if rank == N - 1 then acc:set_trigger() end
  check(acc:check_trigger() == true, "check_trigger after set_trigger on rank %d", N - 1)
  check(acc:check_trigger() == false, "check_trigger is reset")
  acc:print("printed once")
end

-- ---- DistributedDataParallelKwargs.broadcast_buffers: rank 0's buffers before a forward after a synchronising one (PyTorch's DDP) ----
do
  local nn = accel.nn
  local Counter = nn.Module:extend("Counter")
  function Counter:init()
    self.l = nn.Linear(1, 1)
    self:register_buffer("seen", accel.zeros(1))
  end
  function Counter:forward(x)
    accel.no_grad(function() self.seen:add_(x:sum()) end)
    return self.l(x)
  end
  for _, bb in ipairs({true, false}) do
    local a = accel.Accelerator{kwargs_handlers = {accel.DistributedDataParallelKwargs{broadcast_buffers = bb}}}
    local m = a:prepare(Counter())
    for _ = 1, 3 do a:backward(m(accel.tensor{{rank + 1.0}}):sum()) end
    -- with the broadcast: rank 0's 2 after two forwards, then this rank's own third; without: 3 of its own
    local want = bb and 2 + (rank + 1) or 3 * (rank + 1)
    check(m.seen:item() == want, "broadcast_buffers = %s: buffer %g on rank %d, expected %g", tostring(bb),
      m.seen:item(), rank, want)
    -- two no_grad forwards (an evaluation): PyTorch syncs before the first (the previous forward
    -- synchronised), not before the second (the previous one ran without grad)
    for _ = 1, 2 do accel.no_grad(function() m(accel.tensor{{rank + 1.0}}) end) end
    want = bb and 3 + 2 * (rank + 1) or 5 * (rank + 1)
    check(m.seen:item() == want, "broadcast_buffers = %s after two no_grad forwards: buffer %g on rank %d, expected %g",
      tostring(bb), m.seen:item(), rank, want)
    a:free_memory()
  end
end

acc:wait_for_everyone()
print(("ok rank %d: %d checks"):format(rank, checks))
