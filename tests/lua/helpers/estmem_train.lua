-- estmem_train.lua: a plain GPT-2 training loop (AdamW, zero_grad /
-- forward / backward / step, a fresh batch of random tokens each step), as
-- a user writes it, for estimate_memory_spec.lua. Prints the highest peak
-- of live tensor bytes over steps 2..STEPS (step 1 creates the optimizer
-- state) and the model's parameter count:
--   accel-lua tests/lua/helpers/estmem_train.lua MODEL_ARGS BATCH SEQ_LEN STEPS MIXED_PRECISION
--   -> "peak_live_bytes <n> params <P>"
local accel = require("accel")
local gpt2 = accel.models.gpt2
local model_args, B, T, steps, mp = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), arg[5] or "no"

local cfg = {}
for k, v in model_args:gmatch("([%w_]+)=([^,]+)") do cfg[k] = tonumber(v) or v end
local model = gpt2.GPT2LMHeadModel(gpt2.GPT2Config(cfg))
local accelerator = accel.Accelerator{mixed_precision = mp, cpu = true}
local opt = accel.optim.AdamW(model:parameters(), {lr = 1e-3})
model, opt = accelerator:prepare(model, opt)
local highest = 0
for step = 1, steps do
  local data = accel.randint(0, model.config.vocab_size, {B, T + 1})
  accel.reset_peak_memory_stats()
  opt:zero_grad()
  local _, loss = model(data:narrow(2, 1, T), {targets = data:narrow(2, 2, T)})
  accelerator:backward(loss)
  opt:step()
  local peak = select(3, accel.memory_stats())
  if step >= 2 and peak > highest then highest = peak end
end
local P = 0
for _, p in ipairs(model:parameters()) do P = P + p:numel() end
print(("peak_live_bytes %d params %d"):format(highest, P))
