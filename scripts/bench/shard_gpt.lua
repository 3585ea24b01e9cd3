-- shard_gpt.lua: the GPT of common.gpt trained data-parallel under DDP or
-- the sharding engine (ZeRO-1 / -2 / -3), for the sharding benchmark
-- (scripts/bench/shard_gpt.sh; PyTorch's side is scripts/bench/shard_gpt.py).
--
--   accel-lua launch --cpu --num_processes 2 scripts/bench/shard_gpt.lua \
--       ddp|zero1|zero2|zero3 small|gpt2 [STEPS [WARMUP]] [options]
--   options: --via=engine       accel.ddp.Reducer for ddp, accel.shard.Engine
--                               (wrap = "module_list": one unit per block) for
--                               zero1-3 (the default)
--            --via=accelerator  accel.Accelerator{} for ddp,
--                               accel.Accelerator{deepspeed_plugin =
--                               accel.DeepSpeedPlugin{zero_stage = S}} for zeroS,
--                               the loop through acc:prepare / acc:backward
--            --ckpt             activation checkpointing of every block
--                               (accel.utils.checkpoint_module)
--            --no_prefetch      engine path, stage 3: forward_prefetch and
--                               backward_prefetch = false (default: the
--                               engine's, both on: the next unit's gather
--                               starts while one runs forward / backward)
--            --bf16             forward under bf16 autocast (float32 master
--                               weights, gradients and collectives, as
--                               shard_gpt.py's bf16; --via=accelerator:
--                               mixed_precision = "bf16")
--            --profile          one extra step under the op profiler: where
--                               its time goes (top-level ops by name; the
--                               rest of the step is communication, hooks and
--                               Lua)
--
-- Shapes as shared/anchors/fsdp_gpt.py: small = V65 T64 L4 H4 C128 B16,
-- gpt2 = V50257 T256 L12 H12 C768 B4, B per rank. Model, optimizer (AdamW lr
-- 3e-4, betas (0.9, 0.95), weight_decay 0.1), init (seed 0 on every rank)
-- and data (fresh uniform random tokens per step, seed 1000 + rank) as
-- ddp_gpt.lua. The timed region of a step is zero_grad + forward + loss +
-- backward (gradient reduction included) + optimizer step + a barrier (as
-- fsdp_gpt.py times it), so every rank's step has the same length.
--
-- Memory, per rank, after the timed steps:
--   state_live: tensor bytes alive right after one more optimizer step,
--     before zero_grad, with garbage collected (accel.memory_stats' first
--     value): parameters + gradients + optimizer state as held, plus DDP's
--     buckets and the engine's buffers (the batch and the loss are a few KiB);
--   pgos: parameters + gradients + optimizer state counted from the layout
--     (docs/sharding.md "What each rank holds"): DDP 4 full copies; stage 1
--     full p + full g + master shard + 2 state shards; stage 2 full p +
--     master, gradient and 2 state shards; stage 3 the 4 shards;
--   peak_live: the most tensor bytes alive at once during the timed steps
--     (memory_stats' third value, reset after the warm-up);
--   peak_rss: the process's VmHWM (whole run).
-- CPU time: each rank's median process CPU time of a step up to the
-- barrier (os.clock), and global tokens over the larger one: the rate if
-- each rank had its core to itself (foreign load inflates wall time much
-- more than CPU time; waiting in a collective costs CPU time only where
-- MPI polls a free core).
-- Time: per phase (rank 0's medians): forward (with, under stage 3, the
-- units' blocking gathers, also given alone: ms_forward_gathers), backward
-- with the gradient reduction, optimizer step (stages 1-2: with the
-- parameters' all_gather), the barrier; collectives per step
-- (dist.counters).
-- Rank 0 prints one JSON line with the per-rank figures and their maxima.
local accel = require("accel")
local dist = accel.dist
local common = dofile((debug.getinfo(1, "S").source:match("^@(.*)/") or ".") .. "/common.lua")

local STAGES = {ddp = 0, zero1 = 1, zero2 = 2, zero3 = 3}

local pos, flags = common.args(arg, {via = "engine"})
local mode, cfg_name = pos[1], pos[2] or "small"
local stage = STAGES[mode or ""]
if not stage then error("shard_gpt.lua: mode must be ddp, zero1, zero2 or zero3, got " .. tostring(mode), 0) end
local cfg = common.SHAPES[cfg_name]
if not cfg then error("shard_gpt.lua: shape must be small or gpt2, got " .. tostring(cfg_name), 0) end
local steps = tonumber(pos[3]) or (cfg_name == "small" and 20 or 3)
local warmup = tonumber(pos[4]) or (cfg_name == "small" and 3 or 1)
if flags.via ~= "engine" and flags.via ~= "accelerator" then
  error("shard_gpt.lua: --via must be engine or accelerator, got " .. tostring(flags.via), 0)
end
local V, T, L, H, C, B = cfg.V, cfg.T, cfg.L, cfg.H, cfg.C, cfg.B

accel.num_threads(1)
accel.set_seed(0)
local model = common.gpt({V = V, T = T, L = L, H = H, C = C})
local nparams = 0
for _, p in ipairs(model:parameters()) do nparams = nparams + p:numel() end
if flags.ckpt then
  for _, blk in ipairs(model.blocks) do accel.utils.checkpoint_module(blk) end
end
local opt = accel.optim.AdamW(model:parameters(), {lr = 3e-4, betas = {0.9, 0.95}, weight_decay = 0.1})

-- Stage 3 on the engine path: the time of the engine's forward pre-hooks
-- (the blocking all_gather of each unit, and of the root unit when the
-- model's forward starts), between a hook registered before the engine's
-- and one registered after it (hooks run in registration order).
local gather_s, t_hook = 0, 0
local timed = {model}
for _, blk in ipairs(model.blocks) do timed[#timed + 1] = blk end
local function timing_hooks(fn)
  if stage == 3 and flags.via == "engine" then
    for _, m in ipairs(timed) do m:register_forward_pre_hook(fn) end
  end
end
timing_hooks(function() t_hook = accel.clock() end)

-- sync(loss): backward and the gradient reduction; eng: the sharding
-- engine (nil under DDP).
local sync, eng
local t_prep = accel.clock()
if flags.via == "accelerator" then
  local o = {}
  if stage > 0 then o.deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = stage} end
  if flags.bf16 then o.mixed_precision = "bf16" end
  local acc = accel.Accelerator(o)
  model, opt = acc:prepare(model, opt)
  eng = stage > 0 and (accel.shard.engine_of(opt) or accel.shard.engine_of(model)) or nil
  if stage > 0 and not eng then error("shard_gpt.lua: the Accelerator's prepare opened no sharding engine", 0) end
  sync = function(loss) acc:backward(loss) end
elseif stage == 0 then
  local reducer = accel.ddp.Reducer(model)
  sync = function(loss) loss:backward(); reducer:finalize() end
else
  eng = accel.shard.Engine(model, opt, {stage = stage, wrap = "module_list", backward_prefetch = not flags.no_prefetch,
    forward_prefetch = not flags.no_prefetch})
  sync = function(loss) loss:backward(); eng:finalize() end
end
t_prep = accel.clock() - t_prep
timing_hooks(function() gather_s = gather_s + accel.clock() - t_hook end)
local rank, world = dist.get_rank(), dist.get_world_size()
accel.set_seed(1000 + rank)

-- the model's forward (prepared by an Accelerator, it sets its own autocast)
local function forward(idx, tgt)
  if flags.bf16 and flags.via == "engine" then return require("accel.amp").run(accel.bfloat16, model, idx, tgt) end
  return model(idx, tgt)
end

local function batch()
  local data = accel.randint(0, V, {B, T + 1})
  return data:narrow(2, 1, T), data:narrow(2, 2, T)
end

-- One training step; returns the loss and its phases' end times.
local function step()
  local idx, tgt = batch()
  local c0, t0 = os.clock(), accel.clock()
  gather_s = 0
  opt:zero_grad()
  local loss = forward(idx, tgt)
  local t1 = accel.clock()
  sync(loss)
  local t2 = accel.clock()
  opt:step()
  local t3 = accel.clock()
  local c3 = os.clock()
  dist.barrier()
  return loss, t0, t1, t2, t3, accel.clock(), c3 - c0
end

local median = common.median
local times, cpus, parts = {}, {}, {fwd = {}, bwd = {}, opt = {}, wait = {}, gather = {}}
local losses, comm0 = {}, nil -- comm0: {calls, bytes} when the timed steps start
for i = 1, warmup + steps do
  if i == warmup + 1 then
    collectgarbage()
    collectgarbage()
    accel.reset_peak_memory_stats()
    comm0 = {dist.counters()}
  end
  local loss, t0, t1, t2, t3, t4, cpu = step()
  losses[#losses + 1] = loss:item()
  if i > warmup then
    times[#times + 1] = t4 - t0
    cpus[#cpus + 1] = cpu
    parts.fwd[#parts.fwd + 1] = t1 - t0
    parts.bwd[#parts.bwd + 1] = t2 - t1
    parts.opt[#parts.opt + 1] = t3 - t2
    parts.wait[#parts.wait + 1] = t4 - t3
    parts.gather[#parts.gather + 1] = gather_s
  end
end
local _, _, peak_live = accel.memory_stats()
-- collectives per step over the timed steps (dist.counters: calls, bytes)
local calls1, bytes1 = dist.counters()
local comm_calls = (calls1.total - comm0[1].total) / steps
local comm_bytes = (bytes1.total - comm0[2].total) / steps

-- one more step, stopped after the optimizer step: what it holds then
local idx, tgt = batch()
opt:zero_grad()
sync(forward(idx, tgt))
opt:step()
collectgarbage()
collectgarbage()
local state_live = accel.memory_stats()

-- parameters + gradients + optimizer state from the layout
local shard_el = 0
if eng then
  for _, u in ipairs(eng:units()) do shard_el = shard_el + u.shard end
end
local full_b, shard_b = 4 * nparams, 4 * shard_el
local pgos = ({[0] = {full_b, full_b, 2 * full_b}, {full_b + shard_b, full_b, 2 * shard_b},
  {full_b + shard_b, shard_b, 2 * shard_b}, {shard_b, shard_b, 2 * shard_b}})[stage]

-- --profile: one step under the op profiler, summed by top-level op name
local prof
if flags.profile then
  local s0, s1
  require("accel.profiler").run(function()
    local _, a, _, _, _, b = step()
    s0, s1 = a, b
  end, {on_trace_ready = function(trace) prof = common.profile_totals(trace) end}, rank)
  prof.step_us = (s1 - s0) * 1e6
end

local mine = {rank = rank, med = median(times), cpu = median(cpus),
  peak_rss = common.proc_number("status", "VmHWM:%s*(%d+)") * 1024,
  peak_live = peak_live, state_live = state_live, fwd = median(parts.fwd), bwd = median(parts.bwd),
  opt = median(parts.opt), wait = median(parts.wait), gather = median(parts.gather), loss_first = losses[1],
  loss_last = losses[#losses]}
local all = {}
for r, s in ipairs(dist.all_gather_bytes(require("accel.json").encode(mine))) do
  all[r] = require("accel.json").decode(s)
end
if rank ~= 0 then return end

local function max_of(key, fmt)
  local m, list = 0, {}
  for r, x in ipairs(all) do
    m = math.max(m, x[key])
    list[r] = (fmt or "%.0f"):format(x[key])
  end
  return m, table.concat(list, ", ")
end
local med_max = max_of("med")
local cpu_max, cpu_list = max_of("cpu", "%.4f")
local rss, rss_list = max_of("peak_rss")
local live, live_list = max_of("peak_live")
local st, st_list = max_of("state_live")
local info = eng and eng._c:info() or {}
local stats = eng and eng:stats() or {}
local out = {
  ('"bench": "shard_gpt", "impl": "accel-lua", "mode": "%s", "stage": %d, "via": "%s", "ckpt": %s, "bf16": %s, '
    .. '"prefetch": %s, "cfg": "%s"'):format(mode, stage, flags.via, flags.ckpt and "true" or "false",
    flags.bf16 and "true" or "false",
    (stage == 3 and not (flags.no_prefetch and flags.via == "engine")) and "true" or "false", cfg_name),
  ('"world": %d, "B_per_rank": %d, "T": %d, "params": %d, "steps": %d, "warmup": %d, "threads": %d')
    :format(world, B, T, nparams, steps, warmup, accel.num_threads()),
  ('"step_s_median": %.4f, "global_tokens_per_s": %.1f, "prepare_s": %.3f'):format(
    med_max, world * B * T / med_max, t_prep),
  ('"cpu_s_median_max_rank": %.4f, "cpu_s_median": [%s], "global_tokens_per_cpu_s": %.1f'):format(
    cpu_max, cpu_list, world * B * T / cpu_max),
  ('"ms_forward": %.1f, "ms_forward_gathers": %.1f, "ms_backward": %.1f, "ms_optimizer": %.1f, "ms_barrier": %.1f')
    :format(mine.fwd * 1e3, mine.gather * 1e3, mine.bwd * 1e3, mine.opt * 1e3, mine.wait * 1e3),
  ('"peak_rss_bytes_max_rank": %d, "peak_rss_bytes": [%s], "peak_live_bytes_max_rank": %d, "peak_live_bytes": [%s]')
    :format(rss, rss_list, live, live_list),
  ('"state_live_bytes_max_rank": %d, "state_live_bytes": [%s], "pgos_bytes": %d, "p_bytes": %d, "g_bytes": %d, '
    .. '"os_bytes": %d'):format(st, st_list, pgos[1] + pgos[2] + pgos[3], pgos[1], pgos[2], pgos[3]),
  ('"comm_calls_per_step": %.1f, "comm_bytes_per_step": %.0f'):format(comm_calls, comm_bytes),
  ('"units": %d, "gathers": %d, "releases": %d, "reductions": %d, "early": %d, "prefetches": %d, '
    .. '"forward_prefetches": %d'):format(
    info.units or #(eng and eng:units() or {}), stats.gathers or 0, stats.releases or 0, stats.reductions or 0,
    stats.early or 0, stats.prefetches or 0, stats.forward_prefetches or 0),
  ('"loss_first": %.3f, "loss_last": %.3f'):format(mine.loss_first, mine.loss_last),
}
if prof then
  out[#out + 1] = ('"profile_step_ms": %.1f, "profile_ops_ms": %.1f, "profile_top_ms": {%s}'):format(
    prof.step_us / 1e3, prof.total_us / 1e3, common.profile_top_json(prof.by, 8))
end
print("{" .. table.concat(out, ", ") .. "}")
