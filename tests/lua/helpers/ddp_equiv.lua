-- ddp_equiv.lua: the training run behind ddp_test.lua's equivalence and
-- accumulation checks, started on 1, 2 or 3 ranks:
--
--   accel-lua launch --cpu --num_processes N ddp_equiv.lua OUT BATCH STEPS [ACCUM [CAP_MB]]
--
-- Trains an MLP (LayerNorm, GELU, a layer used twice) with AdamW for STEPS
-- optimizer steps, per-rank batch BATCH, gradient_accumulation_steps ACCUM
-- and DDP buckets of CAP_MB, on a shuffled 240-sample set. Ranks other
-- than 0 start from different parameters and buffers (prepare must
-- broadcast rank 0's).
-- Checks on every rank, raising an error on a failure: no collective at all
-- on non-synchronising micro-steps; exactly one all_reduce per bucket (and
-- nothing else) on synchronising ones; no_sync communicates nothing; at
-- the end every rank holds bitwise rank 0's parameters. Rank 0 writes the
-- parameters to OUT (safetensors) and prints "buckets B early E late L".
local accel = require("accel")
local nn, optim, data, dist = accel.nn, accel.optim, accel.data, accel.dist

local out, batch, steps = arg[1], tonumber(arg[2]), tonumber(arg[3])
local accum, cap = tonumber(arg[4] or "1"), tonumber(arg[5] or "25")

local Net = nn.Module:extend("Net")
function Net:init()
  self.inp = nn.Linear(6, 16)
  self.norm = nn.LayerNorm(16)
  self.mid = nn.Linear(16, 16) -- applied twice: two contributions per backward
  self.out = nn.Linear(16, 3)
  self:register_buffer("shift", accel.zeros(16))
end
function Net:forward(x)
  local h = accel.nn.functional.gelu(self.norm(self.inp(x)) + self.shift)
  h = self.mid(h):tanh()
  return self.out(self.mid(h))
end

accel.set_seed(7)
local n = 240
local x = accel.randn(n, 6)
local y = accel.randint(0, 3, {n})
local model = Net()
local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = batch, shuffle = true, seed = 11})
local acc = accel.Accelerator{gradient_accumulation_steps = accum,
  kwargs_handlers = {accel.DistributedDataParallelKwargs{bucket_cap_mb = cap}}}
local rank = acc.process_index
if rank ~= 0 then
  accel.no_grad(function()
    for _, p in ipairs(model:parameters()) do p:add_(rank) end
    model.shift:fill_(rank)
  end)
end
local optimizer = optim.AdamW(model:parameters(), {lr = 1e-2, weight_decay = 0.05})
model, optimizer, loader = acc:prepare(model, optimizer, loader)
if model.shift:abs():max():item() ~= 0 then error(("rank %d: prepare did not broadcast the buffer"):format(rank)) end
local criterion = nn.CrossEntropyLoss()

local function fail(fmt, ...) error(("rank %d: " .. fmt):format(rank, ...), 2) end

local nbuckets = 0
if acc.num_processes > 1 then nbuckets = #acc._reducers[1].reducer:buckets() end

-- As PyTorch's DDP (broadcast_buffers), the buffer is broadcast before a
-- forward whose previous forward synchronised (and before the first one).
local prev_synced = true
local function buffer_broadcasts()
  local n = (acc.num_processes > 1 and prev_synced) and 1 or 0
  prev_synced = acc.sync_gradients
  return n
end

-- no_sync: a backward whose gradients are not reduced (then dropped); only
-- the first forward's buffer broadcast communicates.
do
  local before = dist.counters().total
  acc:no_sync(model, function()
    acc:backward(criterion(model(x:narrow(1, 1, 4)), y:narrow(1, 1, 4)))
  end)
  local want = buffer_broadcasts()
  prev_synced = false
  if dist.counters().total - before ~= want then fail("no_sync communicated %d times", dist.counters().total - before) end
  optimizer.optimizer:zero_grad()
end

local done = 0
while done < steps do
  for xb, yb in loader:iter() do
    local c0 = dist.counters()
    acc:accumulate(model, function()
      acc:backward(criterion(model(xb), yb))
      optimizer:step()
      optimizer:zero_grad()
    end)
    local c1 = dist.counters()
    local bcast = buffer_broadcasts()
    if acc.sync_gradients then
      done = done + 1
      local want = acc.num_processes > 1 and nbuckets or 0
      if c1.all_reduce - c0.all_reduce ~= want or c1.total - c0.total ~= want + bcast then
        fail("synchronising step %d: %d all_reduce / %d collectives, expected %d / %d", done,
          c1.all_reduce - c0.all_reduce, c1.total - c0.total, want, want + bcast)
      end
    elseif c1.total - c0.total ~= bcast then
      fail("a non-synchronising micro-step ran %d collectives, expected %d", c1.total - c0.total, bcast)
    end
    if done == steps then break end
  end
end

for name, p in model:named_parameters() do
  local mine = p:detach():clone()
  local r0 = dist.broadcast(p:detach():clone(), 0)
  if not mine:equal(r0) then fail("parameter %s differs from rank 0's", name) end
end
if rank == 0 then
  accel.save(model:state_dict(), out)
  if acc.num_processes > 1 then
    local st = acc._reducers[1].reducer:stats()
    print(("buckets %d early %d late %d"):format(nbuckets, st.early_launches, st.late_launches))
  end
end
