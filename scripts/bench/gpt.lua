-- gpt.lua: benchmark B of shared/anchors/bench_gpt.py in accel-lua: the same
-- pre-LN GPT-2 step (token + position embeddings; per block
-- x += proj(attn(ln1(x))), x += fc2(gelu_tanh(fc1(ln2(x)))) with qkv one
-- Linear(C, 3C); final LayerNorm; LM head tied to the token embedding;
-- every Linear has a bias; N(0, 0.02) init, zero biases; AdamW lr 3e-4,
-- betas (0.9, 0.95), weight_decay 0.1; a fresh batch of uniform random
-- token ids each step). Timed per step: zero_grad + forward + loss +
-- backward + step. Prints one JSON line (median step, tokens/s, achieved
-- GFLOP/s with the Python script's FLOP formula, peak RSS, and the most
-- tensor bytes alive at once: "peak_live_mib", the part of the RSS that
-- tensors need, the rest being the allocator's cache and the libraries).
--
--   accel-lua scripts/bench/gpt.lua THREADS small|gpt2 [STEPS] [WARMUP] [options]
--   options: --attn=sdpa|explicit  causal attention through
--              F.scaled_dot_product_attention{is_causal} (default) or written
--              out as the Python script does (q k^T, masked_fill, softmax, @ v)
--            --bf16                 forward under bf16 autocast
--            --losses               also print every step's loss (JSON list)
--            --tf32                 accel.backends.cuda.matmul.allow_tf32 = true
--            --fp8                  mixed_precision = "fp8" (instead of --bf16)
--            --profile              one more step under the op profiler with
--              activities {"cpu", "cuda"} (each op waits for its device work):
--              "profile_top_ms", the top-level ops and backward functions
--              with the most time, by name
-- The device is the default one (ACCEL_LUA_DEVICE=cuda runs it on a GPU);
-- each timed step ends with accel.synchronize(), so queued GPU work counts.
local accel = require("accel")
local optim = accel.optim
local common = dofile((debug.getinfo(1, "S").source:match("^@(.*)/") or ".") .. "/common.lua")

local pos, flags = common.args(arg, {attn = "sdpa"})
local threads = tonumber(pos[1]) or 1
local cfg_name = pos[2] or "small"
local cfg = common.SHAPES[cfg_name] or error("gpt.lua: shape must be small, gpt2 or gpt2_b16, got " .. tostring(cfg_name))
local steps = tonumber(pos[3]) or (cfg_name == "small" and 30 or 5)
if flags.tf32 then accel.backends.cuda.matmul.allow_tf32 = true end
local warmup = tonumber(pos[4]) or (cfg_name == "small" and 5 or 1)
if flags.attn ~= "sdpa" and flags.attn ~= "explicit" then error("gpt.lua: --attn must be sdpa or explicit") end
accel.num_threads(threads)
accel.set_seed(0)
local V, T, L, H, C, B = cfg.V, cfg.T, cfg.L, cfg.H, cfg.C, cfg.B

local model = common.gpt({V = V, T = T, L = L, H = H, C = C, attn = flags.attn})
local nparams = 0
for _, p in ipairs(model:parameters()) do nparams = nparams + p:numel() end
local n_nonpos = nparams - model.wpe.weight:numel()
local opt = optim.AdamW(model:parameters(), {lr = 3e-4, betas = {0.9, 0.95}, weight_decay = 0.1})
local flops_step = 6 * n_nonpos * B * T + 12 * L * T * C * B * T

local precision = flags.fp8 and "fp8" or flags.bf16 and "bf16" or nil
local accelerator = precision and accel.Accelerator{mixed_precision = precision} or nil
local function forward(idx, tgt)
  if accelerator then return accelerator:autocast(function() return model(idx, tgt) end) end
  return model(idx, tgt)
end

local proc_number = common.proc_number

local function peak_rss_kib() return proc_number("status", "VmHWM:%s*(%d+)") end

local function minflt() return proc_number("stat", "^.-%) %S+" .. (" %S+"):rep(6) .. " (%d+)") end -- field 10

local median = common.median

local function train_step(idx, tgt)
  opt:zero_grad({set_to_none = true})
  local loss = forward(idx, tgt)
  loss:backward()
  opt:step()
  accel.synchronize()
  return loss
end

local function batch()
  local data = accel.randint(0, V, {B, T + 1})
  return data:narrow(2, 1, T), data:narrow(2, 2, T)
end

local times, cpus, losses, faults = {}, {}, {}, 0
for i = 1, warmup + steps do
  local idx, tgt = batch()
  local f0, c0, t0 = minflt(), os.clock(), accel.clock()
  local loss = train_step(idx, tgt)
  local dt, dc, df = accel.clock() - t0, os.clock() - c0, minflt() - f0
  losses[#losses + 1] = loss:item()
  if i > warmup then
    times[#times + 1], cpus[#cpus + 1], faults = dt, dc, faults + df
  end
end
local _, cached, peak_live = accel.memory_stats()
local med, cpu_med = median(times), median(cpus)
local n = #times
local out = {
  ('"bench": "gpt", "impl": "accel-lua", "cfg": "%s", "V": %d, "T": %d, "L": %d, "H": %d, "C": %d, "B": %d')
    :format(cfg_name, V, T, L, H, C, B),
  ('"threads": %d, "attn": "%s", "bf16": %s, "precision": "%s", "tf32": %s, "device": "%s"'):format(threads,
    flags.attn, flags.bf16 and "true" or "false", precision or "fp32", flags.tf32 and "true" or "false",
    tostring(accel.get_default_device())),
  ('"params": %d, "steps": %d, "warmup": %d'):format(nparams, steps, warmup),
  ('"step_s_median": %.5f, "step_s_min": %.5f, "step_s_max": %.5f, "cpu_s_median": %.5f'):format(
    med, times[1], times[n], cpu_med),
  ('"tokens_per_s": %.0f, "model_gflop_per_step": %.2f, "achieved_gflops": %.1f'):format(
    B * T / med, flops_step / 1e9, flops_step / med / 1e9),
  ('"loss_first": %.3f, "loss_last": %.3f, "peak_rss_kib": %d, "page_faults_per_step": %.0f'):format(
    losses[1], losses[#losses], peak_rss_kib(), faults / n),
  ('"peak_live_mib": %.0f, "cached_mib_at_end": %.0f'):format(peak_live / 2^20, cached / 2^20),
}
if flags.losses then
  local ls = {}
  for i, l in ipairs(losses) do ls[i] = ("%.5f"):format(l) end
  out[#out + 1] = '"losses": [' .. table.concat(ls, ", ") .. "]"
end
if flags.profile then
  local idx, tgt = batch()
  local prof, t0 = nil, accel.clock()
  require("accel.profiler").run(function() train_step(idx, tgt) end, {activities = {"cpu", "cuda"},
    on_trace_ready = function(trace) prof = common.profile_totals(trace, true) end}, 0)
  out[#out + 1] = ('"profile_step_ms": %.1f, "profile_ops_ms": %.1f, "profile_top_ms": {%s}'):format(
    (accel.clock() - t0) * 1e3, prof.total_us / 1e3, common.profile_top_json(prof.by, 16))
end
print("{" .. table.concat(out, ", ") .. "}")
