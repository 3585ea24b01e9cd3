-- estmem_train.lua: a plain GPT-2 training loop (AdamW, zero_grad /
-- forward / backward / step, a fresh batch of random tokens each step), as
-- a user writes it, for estimate_memory_spec.lua. Prints the highest peak
-- of live tensor bytes over steps 2..STEPS (step 1 creates the optimizer
-- state) and the model's parameter count (rank 0 only):
--   accel-lua tests/lua/helpers/estmem_train.lua MODEL_ARGS BATCH SEQ_LEN STEPS MIXED_PRECISION [STAGE]
--   -> "peak_live_bytes <n> params <P>"
-- STAGE 0 (default) trains through an Accelerator; 1-3 through
-- accel.shard.Engine (stage 3 wrapping each GPT-2 block), run it under
-- `accel-lua launch --num_processes N`.
local accel = require("accel")
local gpt2 = accel.models.gpt2
local model_args, B, T, steps, mp = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), arg[5] or "no"
local stage = tonumber(arg[6] or "0")

local cfg = {}
for k, v in model_args:gmatch("([%w_]+)=([^,]+)") do cfg[k] = tonumber(v) or v end
accel.set_seed(0)
local model = gpt2.GPT2LMHeadModel(gpt2.GPT2Config(cfg))
local opt = accel.optim.AdamW(model:parameters(), {lr = 1e-3})
local P = 0
for _, p in ipairs(model:parameters()) do P = P + p:numel() end
local engine, backward
if stage == 0 then
  local accelerator = accel.Accelerator{mixed_precision = mp, cpu = true}
  model, opt = accelerator:prepare(model, opt)
  backward = function(loss) accelerator:backward(loss) end
else
  local amp = require("accel.amp")
  amp.patch_forward(model, amp.dtype_of(mp))
  engine = require("accel.shard").Engine(model, opt, {stage = stage, wrap = stage == 3 and "module_list" or nil})
  local scaler = mp == "fp16" and amp.GradScaler() or nil
  backward = function(loss) (scaler and scaler:scale_loss(loss) or loss):backward() end
end
local highest = 0
local device = model:parameters()[1].device -- the batches go where the model is
for step = 1, steps do
  local data = accel.randint(0, cfg.vocab_size, {B, T + 1}):to(device)
  accel.reset_peak_memory_stats()
  opt:zero_grad()
  local ids = data:narrow(2, 1, T) -- as a transformers loop: labels = the inputs, shifted inside
  local _, loss = model(ids, {labels = ids})
  backward(loss)
  opt:step()
  local peak = select(3, accel.memory_stats())
  if step >= 2 and peak > highest then highest = peak end
end
if engine then engine:close() end
if (os.getenv("OMPI_COMM_WORLD_RANK") or "0") == "0" then print(("peak_live_bytes %d params %d"):format(highest, P)) end
