-- train_resume.lua: the training run behind checkpoint_spec.lua's resume
-- and crash tests (a new process is the point, so the spec spawns this).
--
--   accel-lua train_resume.lua MODE DIR STEPS [MIXED_PRECISION]
--
--   straight  train STEPS micro-batches from scratch
--   first     train STEPS micro-batches, then save_state(DIR/ckpt)
--   second    load_state(DIR/ckpt), then train STEPS more micro-batches
--   save      train STEPS micro-batches, then save_state(DIR/ckpt) (the
--             crash test sets ACCEL_TEST_SAVE_PAUSE_MS and kills it)
--
-- Each mode writes DIR/MODE.txt (one loss per line, exact hex floats) and
-- DIR/MODE.safetensors (parameters and optimizer state). dofile() without
-- arguments returns {setup = fn, train = fn} instead.
local accel = require("accel")
local nn, optim, data = accel.nn, accel.optim, accel.data

local M = {}

-- The model, data and training objects (the same in every process).
function M.setup(mixed_precision)
  accel.set_seed(1234)
  local x = accel.randn(100, 6)
  local _, y = accel.matmul(x, accel.randn(6, 3)):max(2)
  local model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3))
  local optimizer = optim.AdamW(model:parameters(), {lr = 1e-2, weight_decay = 0.01})
  local scheduler = optim.lr_scheduler.StepLR(optimizer, {step_size = 1, gamma = 0.7})
  local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = 8, shuffle = true}) -- 13 batches
  local accelerator = accel.Accelerator{mixed_precision = mixed_precision, gradient_accumulation_steps = 2}
  model, optimizer, loader, scheduler = accelerator:prepare(model, optimizer, loader, scheduler)
  local counter = {count = 0, history = {}}
  function counter:state_dict() return {count = self.count, history = self.history} end
  function counter:load_state_dict(s) self.count, self.history = s.count, s.history end
  accelerator:register_for_checkpointing(counter)
  return {accelerator = accelerator, model = model, optimizer = optimizer, loader = loader, scheduler = scheduler,
    counter = counter, criterion = nn.CrossEntropyLoss()}
end

-- steps micro-batches (epochs roll over inside); returns the losses.
function M.train(s, steps)
  local a, losses = s.accelerator, {}
  while #losses < steps do
    local finished = true
    for xb, yb in s.loader:iter() do
      a:accumulate(s.model, function()
        local loss = s.criterion(s.model(xb), yb)
        a:backward(loss)
        if a.sync_gradients then a:clip_grad_norm_(s.model:parameters(), 1.0) end
        s.optimizer:step()
        s.optimizer:zero_grad()
        losses[#losses + 1] = loss:item()
      end)
      s.counter.count = s.counter.count + 1
      s.counter.history[#s.counter.history + 1] = xb:sum():item()
      if #losses == steps then
        finished = false
        break
      end
    end
    if finished then s.scheduler:step() end
  end
  return losses
end

function M.write_results(s, dir, mode, losses)
  local f = assert(io.open(dir .. "/" .. mode .. ".txt", "w"))
  for _, l in ipairs(losses) do f:write(("%a\n"):format(l)) end
  f:write(("count %d lr %a\n"):format(s.counter.count, s.optimizer.param_groups[1].lr))
  f:close()
  local out = {}
  for name, p in s.model:named_parameters() do out["param." .. name] = p end
  for i, st in pairs(s.optimizer:state_dict().state) do
    for k, v in pairs(st) do
      if accel.is_tensor(v) then out[("opt.%d.%s"):format(i, k)] = v end
    end
  end
  accel.save(out, dir .. "/" .. mode .. ".safetensors")
end

local mode, dir, steps, mp = ...
if mode == nil then return M end
steps = tonumber(steps)
local s = M.setup(mp or "no")
if mode == "second" then s.accelerator:load_state(dir .. "/ckpt") end
local losses = M.train(s, steps)
if mode == "first" or mode == "save" then s.accelerator:save_state(dir .. "/ckpt") end
M.write_results(s, dir, mode, losses)
