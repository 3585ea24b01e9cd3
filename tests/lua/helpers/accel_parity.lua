-- accel_parity.lua: the Accelerator's cross-process parity checks on N
-- ranks, run by accelerator_parity_test.lua as
-- `accel-lua launch --cpu --num_processes N accel_parity.lua`. Every rank
-- checks each result against a closed form and raises on the first
-- mismatch; at the end each rank prints "ok rank R: C checks".
local accel = require("accel")
local nn, optim, dist = accel.nn, accel.optim, accel.dist

local support = dofile((arg[0]:match("^(.*)/helpers/[^/]*$") or "tests/lua") .. "/support.lua")

local acc = accel.Accelerator{kwargs_handlers = {accel.InitProcessGroupKwargs{timeout = 77}}}
local rank, N = acc.process_index, acc.num_processes
local check, checks = support.rank_checker(rank)

local function mlp(seed)
  accel.set_seed(seed)
  return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
end

-- Every rank's copy of tensor t (as flat lists), through gather_object.
local function everyones(t) return acc:gather_object({t:reshape(-1):double():tolist()}) end -- a list per rank

local function same_everywhere(t, what)
  local all = everyones(t)
  for r = 2, #all do
    for i, v in ipairs(all[1]) do check(all[r][i] == v, "%s differs between rank 0 and rank %d", what, r - 1) end
  end
end

-- ---- InitProcessGroupKwargs{timeout} reaches the watchdog on every rank ----
check(dist.get_timeout() == 77, "collective timeout %s, expected 77", tostring(dist.get_timeout()))

-- ---- split_between_processes pads with the input's last item ----
do
  local items = {}
  for i = 1, N - 1 do items[i] = "item" .. i end -- fewer items than ranks: the last rank's part is empty
  local part = acc:split_between_processes(items, {apply_padding = true})
  local want = rank < N - 1 and items[rank + 1] or items[N - 1]
  check(#part == 1 and part[1] == want, "padded part {%s}, expected {%s}", table.concat(part, ","), want)
  local t = acc:split_between_processes(accel.arange(N - 1):float(), {apply_padding = true})
  check(t:numel() == 1 and t:item() == (rank < N - 1 and rank or N - 2), "padded tensor part %s", tostring(t))
  check(#acc:split_between_processes(items) == (rank < N - 1 and 1 or 0), "unpadded part length")
  -- a nested table: its lists are split like the top level's (they used to come back empty)
  local nested = acc:split_between_processes({a = {x = {10, 20, 30, 40, 50, 60}}, b = accel.arange(6)})
  local per = math.floor(6 / N) + (rank < 6 % N and 1 or 0)
  check(#nested.a.x == per and nested.b:numel() == per, "nested part lengths %d, %d, expected %d", #nested.a.x,
    nested.b:numel(), per)
  check(nested.a.x[1] == nested.b[1]:item() * 10 + 10, "nested parts of the same rows")
  local ok, err = pcall(acc.split_between_processes, acc, {a = {x = {1, 2, 3}}, b = {1, 2}})
  check(not ok and tostring(err):find("b has 2, another 3", 1, true) ~= nil, "unequal nested lengths: %s", tostring(err))
end

-- ---- distributed_type tells what runs ----
check(acc.distributed_type == "MULTI_CPU", "distributed_type %s", acc.distributed_type)
check(accel.Accelerator{fsdp_plugin = {sharding_strategy = "NO_SHARD"}}.distributed_type == "FSDP",
  "NO_SHARD (DDP underneath) says FSDP, as Accelerate")

-- ---- fp16: an overflow on one rank skips the step on every rank ----
do
  local a = accel.Accelerator{mixed_precision = "fp16"}
  local model = mlp(1)
  local opt
  model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 0.1}))
  local before = model:parameters()[1]:clone()
  a:no_sync(model, function() -- local gradients: only the last rank's overflow
    a:backward(model(accel.ones(2, 4)):pow(2):mean() * (rank == N - 1 and 1e38 or 1))
  end)
  a:clip_grad_norm_(model:parameters(), 1.0)
  opt:step()
  opt:zero_grad()
  check(a.optimizer_step_was_skipped, "the step ran although rank %d overflowed", N - 1)
  check(model:parameters()[1]:equal(before), "parameters changed")
  check(a.scaler:get_scale() == 32768, "scale %g, expected 32768", a.scaler:get_scale())
  same_everywhere(model:parameters()[1], "parameters after the skipped step")
end

-- ---- sync_each_batch: gradients averaged on every micro-batch ----
local function collectives_per_microbatch(o)
  local a = accel.Accelerator(o)
  local model = mlp(2)
  local opt
  model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 0.1}))
  local counts, syncs = {}, {}
  for i = 1, 4 do
    local c0 = dist.counters().all_reduce or 0
    a:accumulate(model, function()
      a:backward(model(accel.full({2, 4}, rank + i, {dtype = accel.float32})):sum())
      counts[i] = (dist.counters().all_reduce or 0) - c0
      syncs[i] = a.sync_gradients
      opt:step()
      opt:zero_grad()
    end)
  end
  same_everywhere(model:parameters()[1], "parameters")
  a:free_memory()
  return counts, syncs, model
end
do
  local plain, s1, m1 = collectives_per_microbatch({gradient_accumulation_plugin = {num_steps = 2}})
  local each, s2, m2 = collectives_per_microbatch({gradient_accumulation_plugin = {num_steps = 2, sync_each_batch = true}})
  check(plain[1] == 0 and plain[3] == 0 and plain[2] > 0, "without sync_each_batch: all_reduce counts %d %d %d %d",
    plain[1], plain[2], plain[3], plain[4])
  check(each[1] > 0 and each[3] > 0, "sync_each_batch: no all_reduce on a non-sync micro-batch (%d %d %d %d)",
    each[1], each[2], each[3], each[4])
  check(not s2[1] and s2[2] and not s2[3] and s2[4], "sync_each_batch: the optimizer still steps every 2")
  check(not s1[1] and s1[2], "plain accumulation sync pattern")
  -- averaging every micro-batch or once per window gives the same update
  local d = (m1:parameters()[1] - m2:parameters()[1]):abs():max():item()
  check(d < 1e-6, "sync_each_batch changed the result by %g", d)
end

-- ---- trigger_sync_in_backward averages inside no_sync ----
do
  local a = accel.Accelerator()
  local model = a:prepare(mlp(3))
  a:no_sync(model, function()
    a:backward(model(accel.full({2, 4}, rank + 1, {dtype = accel.float32})):sum()) -- local only
    local g = model:parameters()[1].grad:clone()
    local all = everyones(g)
    check(all[1][1] ~= all[N][1], "no_sync gradients are local")
    model:zero_grad()
    a:trigger_sync_in_backward(model, function()
      a:backward(model(accel.full({2, 4}, rank + 1, {dtype = accel.float32})):sum())
    end)
    same_everywhere(model:parameters()[1].grad, "gradients after trigger_sync_in_backward")
  end)
  a:free_memory()
end

-- ---- DDP decides in forward whether that forward's backward averages ----
-- (PyTorch's DistributedDataParallel.forward arms the reducer only when
-- require_backward_grad_sync; torch 2.15 on 2 ranks, Linear(2, 1) weight 1,
-- x = rank + 1: forward outside no_sync and backward inside -> [[1.5, 1.5]]
-- on both; forward inside and backward outside -> the local [[1, 1]] /
-- [[2, 2]]; Accelerate's trigger_sync_in_backward calls
-- reducer.prepare_for_backward itself, so it averages a backward whose
-- forward ran under no_sync)
do
  local a = accel.Accelerator()
  local m = nn.Linear(2, 1, {bias = false})
  accel.no_grad(function() m.weight:fill_(1) end)
  m = a:prepare(m)
  local x = accel.full({1, 2}, rank + 1.0)
  local function grad() return m.weight.grad:min():item(), m.weight.grad:max():item() end
  local loss = m(x):sum()
  a:no_sync(m, function() a:backward(loss) end)
  local lo, hi = grad()
  check(lo == (N + 1) / 2 and hi == lo, "forward outside no_sync, backward inside: gradient %g..%g, expected the "
    .. "average %g", lo, hi, (N + 1) / 2)
  m.weight.grad = nil
  a:no_sync(m, function() loss = m(x):sum() end)
  a:backward(loss)
  lo, hi = grad()
  check(lo == rank + 1 and hi == lo, "forward inside no_sync, backward outside: gradient %g..%g, expected the local "
    .. "%d", lo, hi, rank + 1)
  m.weight.grad = nil
  a:no_sync(m, function() loss = m(x):sum() end)
  a:trigger_sync_in_backward(m, function() a:backward(loss) end)
  lo, hi = grad()
  check(lo == (N + 1) / 2 and hi == lo, "forward under no_sync, backward under trigger_sync_in_backward: gradient "
    .. "%g..%g, expected the average %g", lo, hi, (N + 1) / 2)
  a:free_memory()
end

-- ---- an inner accumulate / no_sync keeps an outer no_sync's local gradients ----
-- (Accelerate on 2 ranks, weight 1, x = rank + 1, 2 accumulation steps:
-- 0.5 / 1.0 after each backward, 1.0 / 2.0 after two: (rank + 1) / 2 each),
-- under DDP and under ZeRO stage 1 (whose engine keeps .grad local without sync)
local function nested_no_sync(what, o)
  o.gradient_accumulation_steps = 2
  local a = accel.Accelerator(o)
  local m = nn.Linear(1, 1, {bias = false})
  accel.no_grad(function() m.weight:fill_(1) end)
  m = a:prepare(m, optim.SGD(m:parameters(), {lr = 0.1}))
  local x = accel.tensor({{rank + 1.0}})
  local function grad() return m.weight.grad:item() end
  a:no_sync(m, function()
    a:accumulate(m, function() a:backward(m(x):sum()) end)
    check(grad() == (rank + 1) / 2, "%s: accumulate inside no_sync: gradient %g, expected %g", what, grad(), (rank + 1) / 2)
    a:backward(m(x):sum())
    check(grad() == rank + 1, "%s: backward after an inner accumulate: gradient %g, expected the local %d", what, grad(),
      rank + 1)
  end)
  m.weight.grad = nil
  a:no_sync(m, function()
    a:no_sync(m, function() end)
    a:no_sync(m):close()
    a:backward(m(x):sum())
    check(grad() == (rank + 1) / 2, "%s: backward after an inner no_sync: gradient %g, expected the local %g", what,
      grad(), (rank + 1) / 2)
  end)
  m.weight.grad = nil
  a:backward(m(x):sum())
  check(grad() == (N + 1) / 4, "%s: after the outer no_sync: gradient %g, expected the average %g", what, grad(),
    (N + 1) / 4)
  a:free_memory()
end
nested_no_sync("DDP", {})
nested_no_sync("ZeRO stage 1", {deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 1}})

-- ---- DistributedDataParallelKwargs{broadcast_buffers = false} keeps each rank's buffers ----
do
  local function with_buffer()
    local m = mlp(4)
    m:register_buffer("mark", accel.full({1}, rank + 1))
    return m
  end
  local a = accel.Accelerator()
  local m = a:prepare(with_buffer())
  check(m.mark:item() == 1, "buffers broadcast from rank 0 by default (got %g)", m.mark:item())
  a:free_memory()
  local b = accel.Accelerator{kwargs_handlers = {accel.DistributedDataParallelKwargs{broadcast_buffers = false}}}
  local m2 = b:prepare(with_buffer())
  check(m2.mark:item() == rank + 1, "broadcast_buffers = false: buffer %g, expected %d", m2.mark:item(), rank + 1)
  b:free_memory()
end

-- ---- on_local_process / on_process / on_last_process ----
do
  local ran = 0
  acc:on_local_process(function() ran = ran + 1 end, 1)()
  acc:on_last_process(function() ran = ran + 10 end)()
  local want = (rank == 1 and 1 or 0) + (rank == N - 1 and 10 or 0)
  check(ran == want, "decorators ran %d, expected %d", ran, want)
end

acc:wait_for_everyone()
-- ---- end_training on the main process only (as Accelerate's, it is no collective) ----
if acc.is_main_process then acc:end_training() end
print(("ok rank %d: %d checks"):format(rank, checks()))
