-- shard_main_only.lua: get_state_dict / save_model (arg[1]; save_model
-- writes to arg[2]) under ZeRO stage 3 called on the main process only,
-- while the other ranks go on to wait_for_everyone. They are collective
-- (every parameter is all-gathered), so every rank must fail at once with
-- one "collective mismatch" naming its line here (the lines marked
-- "main:" and "others:"), not wait for the collective timeout (60 s here).
-- Run by shard_test.lua on 2 ranks.
local accel = require("accel")
local nn, optim = accel.nn, accel.optim
accel.set_seed(1)
local model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
local opt = optim.AdamW(model:parameters(), {lr = 1e-2})
local acc = accel.Accelerator{zero_stage = 3, kwargs_handlers = {accel.InitProcessGroupKwargs{timeout = 60}}}
model, opt = acc:prepare(model, opt)
if acc.is_main_process then
  if arg[1] == "save_model" then acc:save_model(model, arg[2]) else acc:get_state_dict(model) end -- main:
end
acc:wait_for_everyone() -- others:
print("rank " .. acc.process_index .. " was not stopped")
