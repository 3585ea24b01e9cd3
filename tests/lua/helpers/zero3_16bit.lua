-- zero3_16bit.lua: DeepSpeed's zero3_save_16bit_model under ZeRO-3 and bf16,
-- behind shard_checkpoint_test.lua:
--
--   accel-lua launch --cpu --num_processes N zero3_16bit.lua DIR
--
-- trains a small model 3 steps, then checks on every rank that
-- get_state_dict gives bfloat16 weights equal to the float32 ones (the
-- same call with the flag off) rounded to bfloat16, and (rank 0) that
-- save_model(DIR) wrote those bfloat16 tensors; prints "ok rank R: N checks".
local accel = require("accel")
local support = dofile((arg[0]:match("^(.*)/helpers/[^/]*$") or ".") .. "/support.lua")
local nn = accel.nn

local dir = assert(arg[1], "usage: zero3_16bit.lua DIR")
accel.manual_seed(0)
local model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
local opt = accel.optim.AdamW(model:parameters(), {lr = 1e-2})
local acc = accel.Accelerator{mixed_precision = "bf16",
  deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 3, zero3_save_16bit_model = true}}
model, opt = acc:prepare(model, opt)
local check, count = support.rank_checker(acc.process_index)
local x = accel.randn(4, 5)
for _ = 1, 3 do
  acc:backward(model(x):pow(2):mean())
  opt:step()
  opt:zero_grad()
end
local sd16 = acc:get_state_dict(model)
acc.deepspeed_plugin.zero3_save_16bit_model = false
local sd32 = acc:get_state_dict(model)
acc.deepspeed_plugin.zero3_save_16bit_model = true
acc:save_model(model, dir)
local names = 0
for k, v in pairs(sd32) do
  names = names + 1
  check(v.dtype == accel.float32, "%s: float32 without the flag, got %s", k, tostring(v.dtype))
  check(sd16[k].dtype == accel.bfloat16, "%s: bfloat16 with the flag, got %s", k, tostring(sd16[k].dtype))
  check(sd16[k]:float():equal(v:to(accel.bfloat16):float()), "%s: the float32 weights rounded to bfloat16", k)
end
check(names == 4, "4 tensors, got %d", names)
acc:wait_for_everyone()
if acc.is_main_process then
  local saved = accel.load(dir .. "/model.safetensors")
  for k, v in pairs(sd16) do
    check(saved[k] ~= nil and saved[k].dtype == accel.bfloat16 and saved[k]:float():equal(v:float()),
      "save_model wrote %s as get_state_dict's bfloat16", k)
  end
end
print(("ok rank %d: %d checks"):format(acc.process_index, count()))
