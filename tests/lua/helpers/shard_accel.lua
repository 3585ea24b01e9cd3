-- shard_accel.lua: the training run behind shard_accelerator_test.lua,
-- an ordinary Accelerate-style loop whose sharding comes only from the
-- configuration:
--
--   accel-lua launch --cpu --num_processes N shard_accel.lua OUT key=value...
--     plugin=none|ds|fsdp|launch|dsconfig   none: plain DDP (the reference);
--                       launch: accel.Accelerator{} (the plugin comes from
--                       launch's flags / config file); dsconfig: a
--                       DeepSpeedPlugin{hf_ds_config = {...}} with "auto" values
--     stage=1|2|3 offload=none|cpu   (ds)
--     strategy=FULL_SHARD|SHARD_GRAD_OP|NO_SHARD wrap=transformer|size|no ckpt=0|1 version=1|2   (fsdp)
--     steps=20 accum=1 clip=0 (max norm: ds / dsconfig through the plugin's gradient_clipping,
--                              the others through accelerator:clip_grad_norm_ unless launch's
--                              settings gave DeepSpeed a gradient_clipping)
--     clipvalue=0 (accelerator:clip_grad_value_ on every synchronising step)
--     mp=no|bf16|fp16|fp8  overflow=0 (fp16: the optimizer step whose loss is inf on rank 1)
--
-- 12 samples per micro-step over all ranks from a prepared DataLoader, AdamW
-- with a StepLR schedule, mean squared error. The model has 151 parameters
-- (divisible by neither 2 nor 3) and applies one block twice. Rank 0 writes the full
-- parameters (accelerator:get_state_dict) to OUT; every rank prints
-- "skipped K calls C dt T norm N fp8 F engine ..." (optimizer steps skipped, Block
-- forwards run, distributed_type, the last clip's norm, fp8 input casts, the engine) and its
-- ok line. Checked on every rank: stages 2-3 leave .grad nil after backward;
-- join_uneven_inputs with uneven batches is refused under an engine.
local accel = require("accel")
local nn, optim = accel.nn, accel.optim

local out = arg[1]
local o = {plugin = "none", stage = "2", offload = "none", strategy = "FULL_SHARD", wrap = "transformer", ckpt = "0",
  steps = "20", accum = "1", clip = "0", mp = "no", overflow = "0", version = "1", clipvalue = "0"}
for i = 2, #arg do
  local k, v = arg[i]:match("^(%w+)=(.*)$")
  if not k or o[k] == nil then error("bad argument " .. arg[i]) end
  o[k] = v
end
local steps, accum, clip, clipvalue = tonumber(o.steps), tonumber(o.accum), tonumber(o.clip), tonumber(o.clipvalue)

local calls = 0
local Block = nn.Module:extend("Block")
function Block:init()
  self.lin = nn.Linear(6, 6)
  self.norm = nn.LayerNorm(6)
end
function Block:forward(h)
  calls = calls + 1
  return self.norm(self.lin(h)):tanh()
end

local Net = nn.Module:extend("Net")
function Net:init()
  self.inp = nn.Linear(5, 6)
  self.blocks = nn.ModuleList({Block(), Block()})
  self.head = nn.Linear(6, 1)
end
function Net:forward(x)
  local h = self.inp(x):tanh()
  for i = 1, 2 do h = h + self.blocks[i](h) end
  h = h + self.blocks[2](h) -- a unit used twice in one forward
  return self.head(h)
end

local opts = {mixed_precision = o.mp}
if o.plugin == "ds" then
  opts.deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = tonumber(o.stage), offload_optimizer_device = o.offload,
    gradient_clipping = clip > 0 and clip or nil, gradient_accumulation_steps = accum}
elseif o.plugin == "dsconfig" then
  opts.deepspeed_plugin = accel.DeepSpeedPlugin{hf_ds_config = {
    zero_optimization = {stage = tonumber(o.stage), reduce_bucket_size = 60, allgather_bucket_size = 60,
      overlap_comm = true, stage3_prefetch_bucket_size = "auto", offload_optimizer = {device = o.offload}},
    train_micro_batch_size_per_gpu = "auto", train_batch_size = "auto", gradient_accumulation_steps = "auto",
    gradient_clipping = clip > 0 and clip or nil, bf16 = {enabled = "auto"}, steps_per_print = 10}}
  opts.gradient_accumulation_steps = accum
elseif o.plugin == "fsdp" then
  local wraps = {transformer = "transformer_based_wrap", size = "size_based_wrap", no = "no_wrap"}
  local reshard -- FSDP2: reshard_after_forward decides between FULL_SHARD and SHARD_GRAD_OP
  if o.version == "2" and o.strategy ~= "NO_SHARD" then reshard = o.strategy == "FULL_SHARD" end
  opts.fsdp_plugin = accel.FullyShardedDataParallelPlugin{sharding_strategy = o.strategy,
    auto_wrap_policy = wraps[o.wrap], transformer_cls_names_to_wrap = o.wrap == "transformer" and {"Block"} or nil,
    min_num_params = o.wrap == "size" and 50 or nil, activation_checkpointing = o.ckpt == "1",
    backward_prefetch = "BACKWARD_PRE", fsdp_version = tonumber(o.version),
    reshard_after_forward = reshard}
  opts.gradient_accumulation_steps = accum
elseif o.plugin == "none" then
  opts.gradient_accumulation_steps = accum
end
local accelerator = accel.Accelerator(opts)
local rank, world = accelerator.process_index, accelerator.num_processes

accel.set_seed(7)
local n = 12 * accum * steps
local x = accel.randn(n, 5)
local y = accel.randn(n, 1)
local model = Net()
local count = 0
for _, p in ipairs(model:parameters()) do count = count + p:numel() end
assert(count == 151, "the model has " .. count .. " parameters")
if rank ~= 0 then -- prepare must broadcast rank 0's parameters
  accel.no_grad(function()
    for _, p in ipairs(model:parameters()) do p:add_(rank) end
  end)
end
local optimizer = optim.AdamW(model:parameters(), {lr = 1e-2, weight_decay = 0.05})
local sched = optim.lr_scheduler.StepLR(optimizer, 7, {gamma = 0.5})
local loader = accel.data.DataLoader(accel.data.TensorDataset(x, y), {batch_size = 12 / world})
model, optimizer, loader, sched = accelerator:prepare(model, optimizer, loader, sched)

local criterion = nn.MSELoss()
-- DeepSpeed's gradient_clipping clips by itself (the plugin, a ds_config or launch's settings)
local ds_clips = accelerator.deepspeed_plugin ~= nil and accelerator.deepspeed_plugin.gradient_clipping ~= nil
local skipped, micro, norm = 0, 0, 0
for xb, yb in loader:iter() do
  accelerator:accumulate(model, function()
    micro = micro + 1
    local step = math.floor((micro - 1) / accum) + 1
    local loss = criterion(model(xb), yb)
    if step == tonumber(o.overflow) and rank == 1 then loss = loss * math.huge end
    accelerator:backward(loss)
    local eng = accelerator.shard_engine
    if eng and eng.stage >= 2 then
      for name, p in model:named_parameters() do
        assert(p.grad == nil, ("rank %d: stage %d keeps %s.grad"):format(rank, eng.stage, name))
      end
    end
    if clip > 0 and not ds_clips and accelerator.sync_gradients then
      norm = accelerator:clip_grad_norm_(model:parameters(), clip):item()
    end
    if clipvalue > 0 and accelerator.sync_gradients then accelerator:clip_grad_value_(model:parameters(), clipvalue) end
    optimizer:step()
    sched:step()
    optimizer:zero_grad()
    if accelerator.sync_gradients and accelerator.optimizer_step_was_skipped then skipped = skipped + 1 end
  end)
end
assert(micro == steps * accum, ("%d micro-steps, expected %d"):format(micro, steps * accum))

local sd = accelerator:get_state_dict(model)
if rank == 0 then
  local params = {}
  for name in pairs(sd) do
    if name:find("weight", 1, true) or name:find("bias", 1, true) then
      local sum = sd[name]:double():sum():item() -- NaN / inf would compare as no difference
      assert(sum == sum and math.abs(sum) ~= math.huge, ("rank 0: parameter %s is not finite"):format(name))
      params[name] = sd[name]
    end
  end
  accel.save(params, out)
end
local eng = accelerator.shard_engine
if eng and world > 1 then
  local ok, err = pcall(accelerator.join_uneven_inputs, accelerator, {model}, {even_batches = false}, function() end)
  assert(not ok and tostring(err):find("uneven inputs cannot be joined", 1, true), "join_uneven_inputs: " .. tostring(err))
end
local fp8_casts = 0 -- the fp8 Linears' input casts (mixed_precision = "fp8")
for _, m in ipairs(model:modules()) do
  if m.fp8_meta then fp8_casts = fp8_casts + m.fp8_meta.input.steps end
end
print(("rank %d skipped %d calls %d dt %s norm %.6f fp8 %d engine %s"):format(rank, skipped, calls,
  accelerator.distributed_type, norm, fp8_casts, eng and ("stage %d units %d"):format(eng.stage, eng:stats().units) or "none"))
if rank == 0 then io.write(tostring(accelerator.state)) end
accelerator:free_memory()
print(("ok rank %d: 1 checks"):format(rank))
