-- shard_frozen.lua: the runs behind shard_checkpoint_test.lua's frozen /
-- tied / pre-hook / strict = false cases, on 1, 2 or 3 ranks:
--
--   accel-lua launch --cpu --num_processes N shard_frozen.lua OUT key=value...
--     stage=0|1|2|3   0: no engine (DDP on N > 1), else DeepSpeedPlugin{zero_stage}
--     frozen=1        fz (a Linear(4, 4) in the middle) has requires_grad = false
--     unfreeze_at=K   (stage 0) fz becomes trainable after K steps (the optimizer
--                     holds it from the start, so it gets a fresh state then)
--     fill=1          before prepare, every entry set to its constant (FILL below;
--                     shard_checkpoint_test.lua expects these)
--     tie=1           head.weight is emb.weight (an Embedding(5, 4) in front)
--     xbuf=1          an extra buffer xbuf
--     hook=1          a save_state pre-hook that saves the model itself into
--                     <dir>/own (save_model) and removes it from weights; a
--                     load_state pre-hook that loads it from there
--     strict=0        load_state(dir, {strict = false})
--     set=1           after prepare, model:load_state_dict of the FILL constants, then 2 steps
--                     at lr 0 (the engine's master copy must hold them too)
--     steps=K  load=DIR  save=DIR
-- Every step uses the same 12 samples, split over the ranks (a mean loss, so
-- any number of ranks trains alike). Rank 0 writes get_state_dict to OUT.
local accel = require("accel")
local nn = accel.nn

local out = arg[1]
local o = {stage = "0", frozen = "0", unfreeze_at = "-1", fill = "0", tie = "0", xbuf = "0", hook = "0", strict = "1",
  steps = "0", load = "", save = "", set = "0"}
for i = 2, #arg do
  local k, v = arg[i]:match("^([%w_]+)=(.*)$")
  if not k or o[k] == nil then error("bad argument " .. arg[i]) end
  o[k] = v
end
local stage = tonumber(o.stage)

local Net = nn.Module:extend("FrozenNet")
function Net:init()
  self.emb = nn.Embedding(5, 4)
  self.inp = nn.Linear(4, 4)
  self.fz = nn.Linear(4, 4)
  self.head = nn.Linear(4, 5, {bias = false})
  if o.tie == "1" then self.head.weight = self.emb.weight end
  self:register_buffer("count", accel.zeros(1))
  if o.xbuf == "1" then self:register_buffer("xbuf", accel.ones(3)) end
end
function Net:forward(i)
  accel.no_grad(function() self.count:add_(1) end)
  return self.head(self.fz(self.inp(self.emb(i)):tanh()):tanh())
end

local rank = tonumber(os.getenv("OMPI_COMM_WORLD_RANK") or "0")
accel.set_seed(7 + rank * 100) -- each rank starts elsewhere: prepare broadcasts rank 0's
local model = Net()
if o.frozen == "1" then model.fz.weight.requires_grad, model.fz.bias.requires_grad = false, false end
local FILL = {["emb.weight"] = 0.125, ["inp.weight"] = 0.25, ["inp.bias"] = 0.375, ["fz.weight"] = 0.5,
  ["fz.bias"] = 0.625, ["head.weight"] = 0.75, count = 0.875, xbuf = 1}
if o.fill == "1" then
  local entries = model:state_dict({keep_vars = true})
  accel.no_grad(function()
    for name, t in pairs(entries) do t:fill_(FILL[name]) end
  end)
end
local opt = accel.optim.AdamW(model:parameters(), {lr = 0.05, weight_decay = 0.01})
local acc = accel.Accelerator(stage > 0 and {deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = stage}} or {})
model, opt = acc:prepare(model, opt)
if o.hook == "1" then
  acc:register_save_state_pre_hook(function(models, weights, dir)
    acc:save_model(models[1], dir .. "/own")
    table.remove(weights, 1)
  end)
  acc:register_load_state_pre_hook(function(models, dir)
    models[1]:load_state_dict(accel.load(dir .. "/own/model.safetensors"))
    table.remove(models, 1)
  end)
end
if o.set == "1" then
  local sd = {}
  for name, t in pairs(acc:get_state_dict(model)) do sd[name] = accel.full(t.shape, FILL[name]) end
  model:load_state_dict(sd)
  for _, g in ipairs(opt.param_groups) do g.lr, g.weight_decay = 0, 0 end
end
if o.load ~= "" then acc:load_state(o.load, o.strict == "0" and {strict = false} or nil) end

local n = acc.num_processes
local idx = accel.tensor({0, 1, 2, 3, 4, 4, 3, 2, 1, 0, 2, 2}, {dtype = accel.int64}):narrow(1, 1 + rank * 12 // n, 12 // n)
local tgt = accel.tensor({1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 1, 3}, {dtype = accel.int64}):narrow(1, 1 + rank * 12 // n, 12 // n)
for s = 1, tonumber(o.steps) do
  acc:backward(nn.functional.cross_entropy(model(idx), tgt))
  opt:step()
  opt:zero_grad()
  if s == tonumber(o.unfreeze_at) then model.fz.weight.requires_grad, model.fz.bias.requires_grad = true, true end
end
if o.save ~= "" then acc:save_state(o.save) end
local sd = acc:get_state_dict(model)
if acc.is_main_process then accel.save(sd, out) end
acc:wait_for_everyone()
print(("ok rank %d: 1 checks"):format(acc.process_index))
