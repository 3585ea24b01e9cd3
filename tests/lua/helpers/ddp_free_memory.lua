-- ddp_free_memory.lua: a model prepared before accelerator:free_memory()
-- still averages its gradients across the ranks (as Accelerate's DDP
-- wrapper does), a model prepared after it too, and the reducer of a model
-- the script dropped is closed by a later free_memory. Run on 2 ranks by
-- ddp_test.lua; prints "ok rank R: N checks".
local accel = require("accel")
local acc = accel.Accelerator()
local rank, checks = acc.process_index, 0

local function expect(cond, what)
  if not cond then error(("rank %d: %s"):format(rank, what), 2) end
  checks = checks + 1
end

-- one backward of weight * (rank + 1) on a fresh Linear(1, 1): the averaged gradient is 1.5
local function grad_after_step(model, opt)
  acc:backward(model(accel.tensor({{rank + 1.0}})):sum())
  local g = model.weight.grad:item()
  opt:step()
  opt:zero_grad()
  return g
end

local m = accel.nn.Linear(1, 1)
local opt = accel.optim.SGD(m:parameters(), {lr = 0.1})
m, opt = acc:prepare(m, opt)
acc:free_memory()
expect(grad_after_step(m, opt) == 1.5, "a model kept after free_memory did not average its gradient")
m, opt = nil, nil
collectgarbage()
collectgarbage()
local m2 = accel.nn.Linear(1, 1)
local o2 = accel.optim.SGD(m2:parameters(), {lr = 0.1})
m2, o2 = acc:prepare(m2, o2)
expect(grad_after_step(m2, o2) == 1.5, "a model prepared after free_memory did not average its gradient")
acc:free_memory()
expect(#acc._released_reducers == 1, "the dropped model's reducer was kept: " .. #acc._released_reducers)
print(("ok rank %d: %d checks"):format(rank, checks))
