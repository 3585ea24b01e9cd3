-- shard_grad_rules.lua: gradients under the sharding plugins as under DDP.
-- Run on 2 ranks by shard_accelerator_test.lua; prints "ok rank R: N checks".
-- * Parameters without a gradient, as under DDP with find_unused_parameters
--   (and PyTorch's DDP and FSDP2): a parameter no rank gave a gradient is
--   not stepped (no weight decay, no moment update, its step count
--   unchanged); one that some rank used is. The model's `pooler` is never
--   used, `extra` only on rank 0 and only in odd steps; DeepSpeed stages 1-3
--   and FSDP FULL_SHARD each end equal to DDP's parameters (1e-6), and
--   DDP's pooler equal to its initial value.
-- * clip_grad_norm_ of a subset of the parameters: under stage 1 the
--   subset's norm and only its gradients clipped (== DDP); under stages 2-3
--   a clear error. error_if_nonfinite under stage 3: PyTorch's error.
-- * model:load_state_dict under stage 3 (released parameters): loads the
--   full tensors; strict = false keeps the missing ones.
local accel = require("accel")
local nn, optim = accel.nn, accel.optim

local Net = nn.Module:extend("Net")
function Net:init()
  self.a = nn.Linear(5, 7)
  self.pooler = nn.Linear(7, 7)
  self.extra = nn.Linear(7, 7)
  self.b = nn.Linear(7, 3)
end
function Net:forward(x, use_extra)
  local h = self.a(x)
  if use_extra then h = h + self.extra(h) end
  return self.b(h)
end

-- 4 AdamW steps with weight decay through an Accelerator with options o
local function train(o)
  accel.set_seed(0)
  local m = Net()
  local opt = optim.AdamW(m:parameters(), {lr = 0.1, weight_decay = 0.1})
  local acc = accel.Accelerator(o)
  m, opt = acc:prepare(m, opt)
  for step = 1, 4 do
    accel.set_seed(100 + step + 10 * acc.process_index)
    local use_extra = acc.process_index == 0 and step % 2 == 1
    acc:backward(m(accel.randn(4, 5), use_extra):pow(2):sum())
    opt:step()
    opt:zero_grad()
  end
  return acc:get_state_dict(m), acc
end

local checks = 0
local function expect(cond, what)
  if not cond then error(what, 2) end
  checks = checks + 1
end

local function max_diff(a, b)
  local m = 0
  for k, v in pairs(a) do m = math.max(m, (v - b[k]):abs():max():item()) end
  return m
end

accel.set_seed(0)
local initial = Net():state_dict()
local ddp, acc = train({kwargs_handlers = {accel.DistributedDataParallelKwargs{find_unused_parameters = true}}})
expect(max_diff({w = ddp["pooler.weight"], b = ddp["pooler.bias"]},
  {w = initial["pooler.weight"], b = initial["pooler.bias"]}) == 0, "DDP moved the unused pooler")
expect((ddp["extra.weight"] - initial["extra.weight"]):abs():max():item() > 0, "DDP left extra (used on rank 0)")
local variants = {
  {"zero_stage 1", {deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 1}}},
  {"zero_stage 2", {deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 2}}},
  {"zero_stage 3", {deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 3}}},
  {"FSDP FULL_SHARD", {fsdp_plugin = accel.FullyShardedDataParallelPlugin{sharding_strategy = "FULL_SHARD"}}},
}
for _, v in ipairs(variants) do
  local got = train(v[2])
  local d = max_diff(got, ddp)
  expect(d <= 1e-6, ("%s: parameters differ from DDP's by %g"):format(v[1], d))
end

-- one backward, then clip_grad_norm_(subset of b) and return the norm and the parameters after an SGD step
local function clip_subset(o, scale)
  accel.set_seed(0)
  local m = Net()
  local opt = optim.SGD(m:parameters(), {lr = 0.1})
  local a = accel.Accelerator(o)
  m, opt = a:prepare(m, opt)
  accel.set_seed(7 + a.process_index)
  a:backward(m(accel.randn(4, 5)):pow(2):sum() * (scale or 1))
  local norm = a:clip_grad_norm_({m.b.weight, m.b.bias}, 0.01)
  opt:step()
  return norm, a:get_state_dict(m)
end

local ddp_norm, ddp_sd = clip_subset({})
local s1_norm, s1_sd = clip_subset({deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 1}})
expect(math.abs(s1_norm:item() - ddp_norm:item()) <= 1e-6 * ddp_norm:item(), "stage 1: subset norm differs from DDP's")
expect(max_diff(s1_sd, ddp_sd) <= 1e-6, "stage 1: subset clipping differs from DDP's")
local ok, err = pcall(clip_subset, {deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 2}})
expect(not ok and err:find("only the whole model's parameters can be clipped together; got 2 of its 8", 1, true),
  "stage 2: a subset was clipped: " .. tostring(err))
ok, err = pcall(function()
  accel.set_seed(0)
  local m = Net()
  local opt = optim.SGD(m:parameters(), {lr = 0.1})
  local a = accel.Accelerator{deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 3}}
  m, opt = a:prepare(m, opt)
  a:backward(m(accel.randn(4, 5)):sum() * math.huge)
  return a:clip_grad_norm_(m:parameters(), 1.0, {error_if_nonfinite = true})
end)
expect(not ok and err:find("The total norm of order 2.0 for gradients from `parameters` is non-finite", 1, true),
  "stage 3: error_if_nonfinite ignored: " .. tostring(err))
do
  accel.set_seed(0)
  local m = Net()
  accel.set_seed(3)
  local target = Net():state_dict()
  local opt = optim.SGD(m:parameters(), {lr = 0.1})
  local a = accel.Accelerator{deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = 3}}
  m, opt = a:prepare(m, opt)
  m:load_state_dict(target)
  expect(max_diff(target, m:state_dict()) == 0, "stage 3: load_state_dict did not load the full tensors")
  local missing = m:load_state_dict({["a.weight"] = accel.zeros(7, 5)}, {strict = false})
  local sd = m:state_dict()
  expect(#missing == 7 and sd["a.weight"]:abs():sum():item() == 0 and (sd["b.weight"] - target["b.weight"]):abs():max():item() == 0,
    "stage 3: load_state_dict with strict = false")
end
print(("ok rank %d: %d checks"):format(acc.process_index, checks))
