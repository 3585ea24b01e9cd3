-- ddp_tied.lua: DDP gradients of shared parameters and of parameters that
-- get no gradient, run by ddp_test.lua as
-- `accel-lua launch --cpu --num_processes N ddp_tied.lua`.
--
-- 1. A GPT-like model whose head is tied to the token embedding and whose
--    middle Linear is applied twice: each rank computes its local gradients
--    (under no_sync), then the synchronised ones on the same data; these
--    must equal the average over ranks of the local ones (all_reduce avg of
--    copies), each parameter is reported once per backward (hook calls =
--    distinct parameters), and the buckets start during backward.
-- 2. Parameters without a gradient: one used only on rank 0, one used
--    nowhere. With find_unused_parameters the first gets the average
--    (rank 0's gradient / N) everywhere and the second stays nil; without
--    it the second gets zeros on every rank.
-- Prints "ok rank R: C checks"; a failed check raises an error.
local accel = require("accel")
local nn, F, dist = accel.nn, accel.nn.functional, accel.dist

local checks, rank = 0, dist.get_rank()
local function check(cond, fmt, ...)
  checks = checks + 1
  if not cond then error(("rank %d: " .. fmt):format(rank, ...), 2) end
end

local function rel_diff(a, b)
  local scale = b:double():abs():max():item()
  return (a:double() - b:double()):abs():max():item() / (scale > 0 and scale or 1)
end

-- ---- 1. tied and reused weights ----
local Tiny = nn.Module:extend("Tiny")
function Tiny:init()
  self.wte = nn.Embedding(11, 8)
  self.mid = nn.Linear(8, 8)
  self.head = nn.Linear(8, 11, {bias = false})
  self.head.weight = self.wte.weight
end
function Tiny:forward(idx)
  local h = self.wte(idx)
  h = self.mid(h):tanh()
  h = self.mid(h)
  return self.head(h)
end

accel.set_seed(3)
local model = Tiny()
local acc = accel.Accelerator{kwargs_handlers = {accel.DistributedDataParallelKwargs{bucket_cap_mb = 0.0004}}}
local optimizer = accel.optim.SGD(model:parameters(), {lr = 0.1})
model, optimizer = acc:prepare(model, optimizer)
local reducer = acc._reducers[1].reducer
local N = acc.num_processes
check(#model:parameters() == 3, "the tied model has %d distinct parameters, expected 3", #model:parameters())

accel.set_seed(100 + rank) -- each rank its own data
local idx = accel.randint(0, 11, {4, 5})
local tgt = accel.randint(0, 11, {20})
local function loss_fn() return F.cross_entropy(model(idx):reshape(20, 11), tgt) end

acc:no_sync(model, function() acc:backward(loss_fn()) end)
local want = {}
for name, p in model:named_parameters() do want[name] = dist.all_reduce(p.grad:clone(), "avg") end
optimizer:zero_grad()

local before = reducer:stats()
acc:backward(loss_fn())
local after = reducer:stats()
check(after.hook_calls - before.hook_calls == 3, "%d hook calls for 3 parameters", after.hook_calls - before.hook_calls)
check(after.early_launches - before.early_launches == #reducer:buckets(), "buckets started during backward: %d of %d",
  after.early_launches - before.early_launches, #reducer:buckets())
check(#reducer:buckets() >= 2, "bucket_cap_mb 0.0004 gives several buckets")
for name, p in model:named_parameters() do
  local d = rel_diff(p.grad, want[name])
  check(d <= 1e-6, "%s: synced gradient differs from the average of local ones by %g", name, d)
end

-- ---- 2. parameters without a gradient ----
local Branchy = nn.Module:extend("Branchy")
function Branchy:init()
  self.a = nn.Linear(3, 2)
  self.only0 = nn.Linear(3, 2)
  self.never = nn.Linear(3, 2)
end
function Branchy:forward(x, use_b)
  local y = self.a(x)
  if use_b then y = y + self.only0(x) end
  return y
end

for _, find in ipairs({true, false}) do
  accel.set_seed(5)
  local m = Branchy()
  local a2 = accel.Accelerator{kwargs_handlers = {accel.DistributedDataParallelKwargs{find_unused_parameters = find}}}
  m = a2:prepare(m)
  local x = accel.full({4, 3}, rank + 1.0)
  -- rank 0's gradient of only0, computed without DDP
  local ref = nn.Linear(3, 2)
  accel.no_grad(function()
    ref.weight:copy_(m.only0.weight)
    ref.bias:copy_(m.only0.bias)
  end)
  ref(accel.full({4, 3}, 1.0)):sum():backward()
  a2:backward(m(x, rank == 0):sum())
  local what = find and "find_unused_parameters" or "default"
  local g = m.only0.weight.grad
  check(g ~= nil, "%s: only0.weight has no gradient on rank %d", what, rank)
  check(rel_diff(g, ref.weight.grad / N) <= 1e-6, "%s: only0.weight gradient is not rank 0's / %d", what, N)
  if find then
    check(m.never.weight.grad == nil and m.never.bias.grad == nil, "find_unused_parameters: never.* got a gradient")
  else
    check(m.never.weight.grad ~= nil and m.never.weight.grad:abs():max():item() == 0, "default: never.weight is not zeros")
  end
  a2:free_memory()
end

acc:wait_for_everyone()
print(("ok rank %d: %d checks"):format(rank, checks))
