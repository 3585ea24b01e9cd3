-- common.lua: what the Lua benchmarks share, loaded with dofile from the
-- script's own folder:
--   local common = dofile((debug.getinfo(1, "S").source:match("^@(.*)/") or ".") .. "/common.lua")
--   common.median(v)   the median of a list of numbers (0 for none); sorts v
--                      in place, so v[1] and v[#v] are then its min and max
--   common.gpt(cfg)    the pre-LN GPT-2 of shared/anchors/bench_gpt.py
--                      (gpt.lua, ddp_gpt.lua): a new model for cfg = {V, T,
--                      L, H, C, attn = "sdpa" | "explicit"}
--   common.SHAPES      {small = {V, T, L, H, C, B}, gpt2 = {...}}: the shapes
--                      of bench_gpt.py / fsdp_gpt.py (B per rank); gpt2_b16
--                      is the GPU one (B 16, T 1024)
--   common.args(arg, flags)  the script's arguments: the positional ones
--                      (a list) and flags (the table given, with --k=v as
--                      flags.k = "v" and --k as flags.k = true)
--   common.proc_number(name, pattern)  the number pattern captures in
--                      /proc/self/<name>, or 0
local accel = require("accel")

local M = {}

M.SHAPES = {
  small = {V = 65, T = 64, L = 4, H = 4, C = 128, B = 16},
  gpt2 = {V = 50257, T = 256, L = 12, H = 12, C = 768, B = 4},
  -- the GPU benchmark's GPT-2-124M step (scripts/gpu-check.sh)
  gpt2_b16 = {V = 50257, T = 1024, L = 12, H = 12, C = 768, B = 16},
}

function M.args(argv, flags)
  local pos = {}
  for _, a in ipairs(argv) do
    local k, v = a:match("^%-%-([%w_]+)=(.*)$")
    if k then flags[k] = v
    elseif a:match("^%-%-") then flags[a:sub(3)] = true
    else pos[#pos + 1] = a end
  end
  return pos, flags
end

function M.proc_number(name, pattern)
  local f = io.open("/proc/self/" .. name)
  if not f then return 0 end
  local s = f:read("a")
  f:close()
  return tonumber(s:match(pattern)) or 0
end

function M.median(v)
  table.sort(v)
  local n = #v
  if n == 0 then return 0 end
  return n % 2 == 1 and v[math.floor((n + 1) / 2)] or (v[math.floor(n / 2)] + v[math.floor(n / 2) + 1]) / 2
end

-- Token + position embeddings; per block x += proj(attn(ln1(x))),
-- x += fc2(gelu_tanh(fc1(ln2(x)))) with qkv one Linear(C, 3C); final
-- LayerNorm; LM head tied to the token embedding; every Linear has a bias;
-- N(0, 0.02) init, zero biases. Causal attention through
-- F.scaled_dot_product_attention{is_causal} (attn = "sdpa", the default) or
-- written out as the Python script does (q k^T, masked_fill, softmax, @ v).
-- The op profiler's trace summed by top-level event (events nested in
-- another are inside its time): {by = {name = us}, total_us = us}. Backward
-- functions are summed as "backward ops" unless keep_backward.
function M.profile_totals(trace, keep_backward)
  local by, stack_end, total = {}, {}, 0
  for _, e in ipairs(trace.traceEvents) do
    while #stack_end > 0 and e.ts >= stack_end[#stack_end] do stack_end[#stack_end] = nil end
    if #stack_end == 0 then
      local k = (not keep_backward and e.name:match("Backward$")) and "backward ops" or e.name
      by[k] = (by[k] or 0) + e.dur
      total = total + e.dur
    end
    stack_end[#stack_end + 1] = e.ts + e.dur
  end
  return {by = by, total_us = total}
end

-- The n largest entries of profile_totals as JSON members ("name": ms, ...).
function M.profile_top_json(by, n)
  local names = {}
  for k in pairs(by) do names[#names + 1] = k end
  table.sort(names, function(a, b) return by[a] > by[b] end)
  local items = {}
  for i = 1, math.min(n, #names) do items[i] = ('"%s": %.1f'):format(names[i], by[names[i]] / 1e3) end
  return table.concat(items, ", ")
end

function M.gpt(cfg)
  local nn = accel.nn -- loaded here, so that per_op.lua's RSS does not count it
  local F = nn.functional
  local V, T, L, H, C = cfg.V, cfg.T, cfg.L, cfg.H, cfg.C
  local explicit = cfg.attn == "explicit"
  local hs = math.floor(C / H)

  local Attn = nn.Module:extend("Attn")
  function Attn:init()
    self.qkv = nn.Linear(C, 3 * C)
    self.proj = nn.Linear(C, C)
    if explicit then self:register_buffer("mask", accel.ones(T, T):tril():view(1, 1, T, T)) end
  end
  function Attn:forward(x)
    local b, t = x:size(1), x:size(2)
    local parts = self.qkv(x):split(C, 3)
    local q = parts[1]:view(b, t, H, hs):transpose(2, 3)
    local k = parts[2]:view(b, t, H, hs):transpose(2, 3)
    local v = parts[3]:view(b, t, H, hs):transpose(2, 3)
    local y
    if explicit then
      local att = q:matmul(k:transpose(-2, -1)) * (1.0 / math.sqrt(hs))
      att = att:masked_fill(self.mask:narrow(3, 1, t):narrow(4, 1, t):eq(0), -math.huge)
      y = F.softmax(att, -1):matmul(v)
    else
      y = F.scaled_dot_product_attention(q, k, v, {is_causal = true})
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

  return GPT()
end

return M
