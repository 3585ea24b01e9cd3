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
local accel = require("accel")
local nn, optim = accel.nn, accel.optim
local F = nn.functional

local CFGS = {
  small = {V = 65, T = 64, L = 4, H = 4, C = 128, B = 16},
  gpt2 = {V = 50257, T = 256, L = 12, H = 12, C = 768, B = 4},
}

local pos, flags = {}, {attn = "sdpa"}
for _, a in ipairs(arg) do
  local k, v = a:match("^%-%-([%w_]+)=(.*)$")
  if k then flags[k] = v
  elseif a:match("^%-%-") then flags[a:sub(3)] = true
  else pos[#pos + 1] = a end
end
local threads = tonumber(pos[1]) or 1
local cfg_name = pos[2] or "small"
local cfg = CFGS[cfg_name] or error("gpt.lua: shape must be small or gpt2, got " .. tostring(cfg_name))
local steps = tonumber(pos[3]) or (cfg_name == "small" and 30 or 5)
local warmup = tonumber(pos[4]) or (cfg_name == "small" and 5 or 1)
if flags.attn ~= "sdpa" and flags.attn ~= "explicit" then error("gpt.lua: --attn must be sdpa or explicit") end
accel.num_threads(threads)
accel.set_seed(0)
local V, T, L, H, C, B = cfg.V, cfg.T, cfg.L, cfg.H, cfg.C, cfg.B
local hs = C // H

local Attn = nn.Module:extend("Attn")
function Attn:init()
  self.qkv = nn.Linear(C, 3 * C)
  self.proj = nn.Linear(C, C)
  if flags.attn == "explicit" then
    self:register_buffer("mask", accel.ones(T, T):tril():view(1, 1, T, T))
  end
end
function Attn:forward(x)
  local b, t = x:size(1), x:size(2)
  local parts = self.qkv(x):split(C, 3)
  local q = parts[1]:view(b, t, H, hs):transpose(2, 3)
  local k = parts[2]:view(b, t, H, hs):transpose(2, 3)
  local v = parts[3]:view(b, t, H, hs):transpose(2, 3)
  local y
  if flags.attn == "sdpa" then
    y = F.scaled_dot_product_attention(q, k, v, {is_causal = true})
  else
    local att = q:matmul(k:transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    att = att:masked_fill(self.mask:narrow(3, 1, t):narrow(4, 1, t):eq(0), -math.huge)
    y = F.softmax(att, -1):matmul(v)
  end
  return self.proj(y:transpose(2, 3):contiguous():view(b, t, C))
end

local Block = nn.Module:extend("Block")
function Block:init()
  self.ln1 = nn.LayerNorm(C)
  self.attn = Attn()
  self.ln2 = nn.LayerNorm(C)
  self.fc1 = nn.Linear(C, 4 * C)
  self.act = nn.GELU({approximate = "tanh"})
  self.fc2 = nn.Linear(4 * C, C)
end
function Block:forward(x)
  x = x + self.attn(self.ln1(x))
  return x + self.fc2(self.act(self.fc1(self.ln2(x))))
end

local GPT = nn.Module:extend("GPT")
function GPT:init()
  self.wte = nn.Embedding(V, C)
  self.wpe = nn.Embedding(T, C)
  local blocks = {}
  for i = 1, L do blocks[i] = Block() end
  self.blocks = nn.ModuleList(blocks)
  self.lnf = nn.LayerNorm(C)
  for _, m in ipairs(self:modules()) do
    if m:isinstance(nn.Linear) or m:isinstance(nn.Embedding) then nn.init.normal_(m.weight, 0.0, 0.02) end
    if m:isinstance(nn.Linear) and m.bias ~= nil then nn.init.zeros_(m.bias) end
  end
  self.pos = accel.arange(0, T)
end
function GPT:forward(idx, tgt)
  local t = idx:size(2)
  local x = self.wte(idx) + self.wpe(self.pos:narrow(1, 1, t))
  for _, blk in ipairs(self.blocks) do x = blk(x) end
  local logits = F.linear(self.lnf(x), self.wte.weight) -- tied head
  return F.cross_entropy(logits:view(-1, V), tgt:reshape(-1))
end

local model = GPT()
local nparams = 0
for _, p in ipairs(model:parameters()) do nparams = nparams + p:numel() end
local n_nonpos = nparams - model.wpe.weight:numel()
local opt = optim.AdamW(model:parameters(), {lr = 3e-4, betas = {0.9, 0.95}, weight_decay = 0.1})
local flops_step = 6 * n_nonpos * B * T + 12 * L * T * C * B * T

local accelerator = flags.bf16 and accel.Accelerator{mixed_precision = "bf16"} or nil
local function forward(idx, tgt)
  if accelerator then return accelerator:autocast(function() return model(idx, tgt) end) end
  return model(idx, tgt)
end

local function peak_rss_kib()
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local s = f:read("a")
  f:close()
  return tonumber(s:match("VmHWM:%s*(%d+)")) or 0
end

local function minflt()
  local f = io.open("/proc/self/stat")
  if not f then return 0 end
  local s = f:read("a")
  f:close()
  return tonumber(s:match("^.-%) %S+" .. (" %S+"):rep(6) .. " (%d+)")) or 0 -- field 10
end

local function median(v)
  table.sort(v)
  local n = #v
  return n % 2 == 1 and v[(n + 1) // 2] or (v[n // 2] + v[n // 2 + 1]) / 2
end

local times, cpus, losses, faults = {}, {}, {}, 0
for i = 1, warmup + steps do
  local data = accel.randint(0, V, {B, T + 1})
  local idx, tgt = data:narrow(2, 1, T), data:narrow(2, 2, T)
  local f0, c0, t0 = minflt(), os.clock(), accel.clock()
  opt:zero_grad({set_to_none = true})
  local loss = forward(idx, tgt)
  loss:backward()
  opt:step()
  local dt, dc, df = accel.clock() - t0, os.clock() - c0, minflt() - f0
  losses[#losses + 1] = loss:item()
  if i > warmup then
    times[#times + 1], cpus[#cpus + 1], faults = dt, dc, faults + df
  end
end
local med, cpu_med = median(times), median(cpus)
local n = #times
local out = {
  ('"bench": "gpt", "impl": "accel-lua", "cfg": "%s", "V": %d, "T": %d, "L": %d, "H": %d, "C": %d, "B": %d')
    :format(cfg_name, V, T, L, H, C, B),
  ('"threads": %d, "attn": "%s", "bf16": %s, "params": %d, "steps": %d, "warmup": %d'):format(
    threads, flags.attn, flags.bf16 and "true" or "false", nparams, steps, warmup),
  ('"step_s_median": %.5f, "step_s_min": %.5f, "step_s_max": %.5f, "cpu_s_median": %.5f'):format(
    med, times[1], times[n], cpu_med),
  ('"tokens_per_s": %.0f, "model_gflop_per_step": %.2f, "achieved_gflops": %.1f'):format(
    B * T / med, flops_step / 1e9, flops_step / med / 1e9),
  ('"loss_first": %.3f, "loss_last": %.3f, "peak_rss_kib": %d, "page_faults_per_step": %.0f'):format(
    losses[1], losses[#losses], peak_rss_kib(), faults / n),
  ('"peak_live_mib": %.0f, "cached_mib_at_end": %.0f'):format(select(3, accel.memory_stats()) / 2^20,
    select(2, accel.memory_stats()) / 2^20),
}
if flags.losses then
  local ls = {}
  for i, l in ipairs(losses) do ls[i] = ("%.5f"):format(l) end
  out[#out + 1] = '"losses": [' .. table.concat(ls, ", ") .. "]"
end
print("{" .. table.concat(out, ", ") .. "}")
