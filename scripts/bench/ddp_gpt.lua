-- ddp_gpt.lua: the small GPT of shared/anchors/bench_gpt.py (V65 T64 L4
-- H4 C128, per-rank batch 16) trained data-parallel through the
-- Accelerator, for the DDP scaling benchmark (scripts/bench/ddp_gpt.sh;
-- PyTorch's side is shared/anchors/ddp_gpt.py).
--
--   accel-lua scripts/bench/ddp_gpt.lua [STEPS [WARMUP [B [BUCKET_CAP_MB]]]]        # 1 rank
--   accel-lua launch --cpu --num_processes 2 scripts/bench/ddp_gpt.lua [STEPS ...]  # 2 ranks
--
-- Model (common.gpt of scripts/bench/common.lua, shared with gpt.lua):
-- token + position embeddings; per block x += proj(causal_attn(ln1(x))),
-- x += fc2(gelu_tanh(fc1(ln2(x)))) with qkv = one Linear(C, 3C) and attention through
-- F.scaled_dot_product_attention{is_causal = true}; final LayerNorm; LM head
-- tied to the token embedding; N(0, 0.02) init, zero biases; AdamW lr 3e-4,
-- betas (0.9, 0.95), weight_decay 0.1. As in ddp_gpt.py: the model is
-- initialised from seed 0 (prepare broadcasts rank 0's anyway), each rank
-- draws its own random token batches (seed 1000 + rank), and the timed
-- region of a step is zero_grad + forward + loss + backward (gradient
-- averaging included) + optimizer step.
--
-- Rank 0 prints one JSON line: per-rank median step (wall clock, and the
-- process's CPU time, which other jobs on the machine do not inflate the way
-- they inflate the wall clock), global tokens/s from
-- rank 0's median step and from the whole timed loop, and where a step's
-- time goes (medians over steps, rank 0): forward, backward (hooks and
-- bucket launches included), finalize (waiting for the last buckets and
-- copying the averages back), optimizer step; plus the time of a plain
-- all_reduce of one bucket's size, measured after training.
local accel = require("accel")
local optim = accel.optim
local common = dofile((debug.getinfo(1, "S").source:match("^@(.*)/") or ".") .. "/common.lua")

local steps = tonumber(arg[1]) or 30
local warmup = tonumber(arg[2]) or 5
local V, T, L, H, C = 65, 64, 4, 4, 128
local B = tonumber(arg[3]) or 16
local cap_mb = tonumber(arg[4]) or 25

accel.set_seed(0)
local model = common.gpt({V = V, T = T, L = L, H = H, C = C})
local opt = optim.AdamW(model:parameters(), {lr = 3e-4, betas = {0.9, 0.95}, weight_decay = 0.1})
local t_prep = accel.clock()
local acc = accel.Accelerator{kwargs_handlers = {accel.DistributedDataParallelKwargs{bucket_cap_mb = cap_mb}}}
model, opt = acc:prepare(model, opt)
t_prep = accel.clock() - t_prep
local rank, world = acc.process_index, acc.num_processes
accel.set_seed(1000 + rank)

local median = common.median

local times, cpus, parts = {}, {}, {fwd = {}, bwd = {}, fin = {}, opt = {}, cpu_fin = {}}
local loss_first, loss_last, t_loop
for i = 1, warmup + steps do
  if i == warmup + 1 then t_loop = accel.clock() end
  local data = accel.randint(0, V, {B, T + 1})
  local idx, tgt = data:narrow(2, 1, T), data:narrow(2, 2, T)
  local c0, t0 = os.clock(), accel.clock()
  opt:zero_grad()
  local loss = model(idx, tgt)
  local t1 = accel.clock()
  loss:backward() -- the hooks start the buckets
  local t2, c2 = accel.clock(), os.clock()
  acc:_finish_grad_sync() -- what accelerator:backward does after loss:backward()
  local t3, c3 = accel.clock(), os.clock()
  opt:step()
  local t4, c4 = accel.clock(), os.clock()
  local l = loss:item()
  loss_first = loss_first or l
  loss_last = l
  if i > warmup then
    times[#times + 1] = t4 - t0
    cpus[#cpus + 1] = c4 - c0
    parts.fwd[#parts.fwd + 1] = t1 - t0
    parts.bwd[#parts.bwd + 1] = t2 - t1
    parts.fin[#parts.fin + 1] = t3 - t2
    parts.opt[#parts.opt + 1] = t4 - t3
    parts.cpu_fin[#parts.cpu_fin + 1] = c3 - c2
  end
end
local loop_s = accel.clock() - t_loop

-- one bucket's all_reduce alone (what communication costs without compute)
local comm_ms, bucket_numel, nbuckets = 0, 0, 0
if world > 1 then
  local r = acc._reducers[1].reducer
  local b = r:buckets()
  nbuckets = #b
  for _, bk in ipairs(b) do bucket_numel = bucket_numel + bk.padded end
  local buf = accel.zeros(bucket_numel)
  local ts = {}
  for k = 1, 12 do
    acc:wait_for_everyone()
    local t0 = accel.clock()
    accel.dist.all_reduce(buf, "avg")
    if k > 2 then ts[#ts + 1] = accel.clock() - t0 end
  end
  comm_ms = median(ts) * 1e3
end

local mine = {rank = rank, med = median(times), cpu = median(cpus), loss_first = loss_first, loss_last = loss_last}
local all = acc:gather_object({mine})
if rank == 0 then
  local meds, cpu = {}, {}
  for i, m in ipairs(all) do meds[i], cpu[i] = ("%.5f"):format(m.med), ("%.5f"):format(m.cpu) end
  local ms = function(xs) return ("%.2f"):format(median(xs) * 1e3) end
  local gtok = world * B * T
  print(("{\"bench\": \"ddp_gpt\", \"impl\": \"accel-lua\", \"world\": %d, \"B_per_rank\": %d, \"steps\": %d, "
    .. "\"warmup\": %d, \"threads\": %d, \"step_s_median\": %.5f, \"rank_step_medians\": [%s], "
    .. "\"rank_cpu_s_medians\": [%s], "
    .. "\"global_tokens_per_s\": %.0f, \"global_tokens_per_s_loop\": %.0f, \"loop_s\": %.4f, "
    .. "\"ms_forward\": %s, \"ms_backward\": %s, \"ms_finalize\": %s, \"cpu_ms_finalize\": %s, \"ms_optimizer\": %s, "
    .. "\"buckets\": %d, \"bucket_elems\": %d, \"ms_allreduce_alone\": %.3f, \"prepare_s\": %.4f, "
    .. "\"loss_first\": %.3f, \"loss_last\": %.3f}"):format(world, B, steps, warmup, accel.num_threads(), mine.med,
    table.concat(meds, ", "), table.concat(cpu, ", "), gtok / mine.med, gtok * steps / loop_s, loop_s,
    ms(parts.fwd), ms(parts.bwd), ms(parts.fin), ms(parts.cpu_fin), ms(parts.opt), nbuckets, bucket_numel, comm_ms, t_prep,
    loss_first, loss_last))
end
