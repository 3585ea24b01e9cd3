-- shard_equiv.lua: the training run behind shard_test.lua's equivalence
-- checks, started on 1, 2 or 3 ranks:
--
--   accel-lua launch --cpu --num_processes N shard_equiv.lua OUT key=value...
--     stage=0|1|2|3   0: no engine, one process (the reference)
--     steps=20 accum=1 clip=0 (max norm; 0 = none) opt=adamw|sgd|nesterov|amsgrad (Adam, L2 decay)
--     wrap=module_list|no_wrap|min|list|cls|default  groups=1|2 (2: two param groups + StepLR)
--     offload=none|cpu  prefetch=1|0 (stage 3 forward_prefetch and
--     backward_prefetch; default 1, the engine's default)
--     save=PATH: at the end, full_state_dict + full_optim_state into PATH;
--     load=PATH start=K: load them first and train on the data of steps K+1..  amp=no|bf16 (the model's forward under autocast, as the Accelerator patches it)
--     stage=-1: DDP (accel.ddp.Reducer) on N ranks, the other reference
--     hybrid=0|1: the engine's hybrid option (HYBRID_SHARD / _ZERO2); every
--     rank then prints "state rank R elems E units U" (its optimizer state
--     elements, summed over the slots, and the unit count)
--
-- Every optimizer step consumes the same 12 * accum samples of a fixed set
-- (global batch 12 per micro-step, split evenly over the ranks); the
-- reference consumes them as one batch of 12 * accum. Ranks other than 0
-- start from other parameters (the engine broadcasts rank 0's). The model
-- has 205 parameters (divisible by neither 2 nor 3) and applies one block
-- twice. Checks on every rank, raising on failure: stages 2-3 leave .grad
-- nil; stage 3 refuses a released parameter; every rank ends with the same
-- full parameters. Rank 0 writes the full parameters to OUT (safetensors)
-- and prints "norm N" (the last clip's total norm), "device D" (the
-- parameters' device: the default device, e.g. ACCEL_LUA_DEVICE=sim) and
-- the engine's stats.
local accel = require("accel")
local nn, optim, dist = accel.nn, accel.optim, accel.dist

local out = arg[1]
local o = {stage = "0", steps = "20", accum = "1", clip = "0", opt = "adamw", wrap = "module_list", groups = "1",
  offload = "none", amp = "no", prefetch = "1", save = "", load = "", start = "0", hybrid = "0"}
for i = 2, #arg do
  local k, v = arg[i]:match("^(%w+)=(.*)$")
  if not k or o[k] == nil then error("bad argument " .. arg[i]) end
  o[k] = v
end
local stage, steps, accum, clip = tonumber(o.stage), tonumber(o.steps), tonumber(o.accum), tonumber(o.clip)

local Block = nn.Module:extend("Block")
function Block:init()
  self.norm = nn.LayerNorm(7)
  self.lin = nn.Linear(7, 7)
end
function Block:forward(h) return self.lin(self.norm(h)):tanh() end

local Net = nn.Module:extend("Net")
function Net:init()
  self.inp = nn.Linear(6, 7)
  self.blocks = nn.ModuleList({Block(), Block()})
  self.out = nn.Linear(7, 2)
end
function Net:forward(x)
  local h = nn.functional.gelu(self.inp(x))
  h = h + self.blocks[1](h)
  h = h + self.blocks[2](h)
  h = h + self.blocks[1](h) -- a unit used twice in one forward
  return self.out(h)
end

local world, rank = 1, 0
if stage ~= 0 then world, rank = dist.get_world_size(), dist.get_rank() end
local function fail(fmt, ...) error(("rank %d: " .. fmt):format(rank, ...), 2) end

accel.set_seed(7)
local n = 12 * accum * math.max(40, steps + tonumber(o.start)) -- the same data for every run length
local x = accel.randn(n, 6)
local y = accel.randint(0, 2, {n})
local model = Net()
local count = 0
for _, p in ipairs(model:parameters()) do count = count + p:numel() end
if count ~= 205 then fail("the model has %d parameters, expected 205", count) end
if rank ~= 0 then
  accel.no_grad(function()
    for _, p in ipairs(model:parameters()) do p:add_(rank) end
  end)
end

local groups = model:parameters()
if o.groups == "2" then
  local head = {model.out.weight, model.out.bias}
  local body = {}
  for _, p in ipairs(model:parameters()) do
    if p ~= head[1] and p ~= head[2] then body[#body + 1] = p end
  end
  groups = {{params = body}, {params = head, lr = 5e-3, weight_decay = 0}}
end
local optimizer
if o.opt == "sgd" then
  optimizer = optim.SGD(groups, {lr = 0.05, momentum = 0.9, weight_decay = 0.01})
elseif o.opt == "nesterov" then
  optimizer = optim.SGD(groups, {lr = 0.05, momentum = 0.8, nesterov = true, weight_decay = 0.01})
elseif o.opt == "amsgrad" then
  optimizer = optim.Adam(groups, {lr = 1e-2, weight_decay = 0.01, amsgrad = true, betas = {0.8, 0.99}})
else
  optimizer = optim.AdamW(groups, {lr = 1e-2, weight_decay = 0.05})
end
local sched = o.groups == "2" and optim.lr_scheduler.StepLR(optimizer, 5, {gamma = 0.5}) or nil

local wraps = {
  module_list = "module_list", no_wrap = "no_wrap", min = {min_num_params = 50},
  list = {model.inp, model.blocks[2], model.out}, cls = {transformer_cls_names = {"Block"}},
}
if o.amp ~= "no" then require("accel.amp").patch_forward(model, require("accel.amp").dtype_of(o.amp)) end
local eng, reducer
if stage == -1 then
  accel.ddp.broadcast_model(model, 0)
  reducer = accel.ddp.Reducer(model, {bucket_cap_mb = 0.0004})
elseif stage > 0 then
  eng = accel.shard.Engine(model, optimizer, {stage = stage, wrap = wraps[o.wrap], bucket_cap_mb = 0.0004,
    offload_optimizer = o.offload, backward_prefetch = o.prefetch == "1",
    forward_prefetch = o.prefetch == "1", hybrid = o.hybrid == "1"})
end

-- Full parameters and optimizer state <-> one safetensors file.
local function save_full(path)
  local sd, st, flat = eng:full_state_dict(), eng:full_optim_state(), {}
  for name, t in pairs(sd) do flat["p/" .. name] = t end
  for name, s in pairs(st) do
    for k, v in pairs(s) do flat[("s/%s/%s"):format(name, k)] = accel.is_tensor(v) and v or accel.tensor(v) end
  end
  if rank == 0 then accel.save(flat, path) end
end

local function load_full(path)
  local flat, sd, st = accel.load(path), {}, {}
  for key, t in pairs(flat) do
    local name = key:match("^p/(.*)$")
    if name then sd[name] = t end
    local pname, k = key:match("^s/(.*)/([%w_]+)$")
    if pname then
      st[pname] = st[pname] or {}
      st[pname][k] = k == "step" and math.floor(t:item()) or t
    end
  end
  eng:load_full_state_dict(sd)
  eng:load_full_optim_state(st)
end
if o.load ~= "" then load_full(o.load) end

local criterion = nn.CrossEntropyLoss()
local b = 12 / world
local norm = 0
for s = tonumber(o.start) + 1, tonumber(o.start) + steps do
  if stage == 0 then
    local lo = (s - 1) * 12 * accum
    local loss = criterion(model(x:narrow(1, lo + 1, 12 * accum)), y:narrow(1, lo + 1, 12 * accum))
    loss:backward()
    if clip > 0 then norm = nn.utils.clip_grad_norm_(model:parameters(), clip):item() end
  else
    for m = 1, accum do
      local lo = ((s - 1) * accum + (m - 1)) * 12 + rank * b
      local sync = eng or reducer
      sync:set_sync(m == accum)
      local loss = criterion(model(x:narrow(1, lo + 1, b)), y:narrow(1, lo + 1, b)) / accum
      loss:backward()
      sync:finalize()
      if stage >= 2 then
        for name, p in model:named_parameters() do
          if p.grad ~= nil then fail("stage %d: %s.grad is not nil after finalize", stage, name) end
        end
      end
    end
    if clip > 0 and eng then norm = eng:clip_grad_norm_(clip):item() end
    if clip > 0 and reducer then norm = nn.utils.clip_grad_norm_(model:parameters(), clip):item() end
  end
  optimizer:step()
  optimizer:zero_grad()
  if sched then sched:step() end
end

if stage == 3 then
  local ok, err = pcall(function() return model.inp.weight * 2 end)
  if ok or not tostring(err):find("its memory is released", 1, true) then
    fail("a released parameter was usable: %s", tostring(err))
  end
end

if o.hybrid == "1" then
  local elems, units = 0, eng:units()
  for u = 1, #units do
    for k = 1, 3 do
      local t = eng._c:shard(u, k)
      if t then elems = elems + t:numel() end
    end
  end
  print(("state rank %d elems %d units %d"):format(rank, elems, #units))
end
if o.save ~= "" then save_full(o.save) end
local sd
if stage <= 0 then
  sd = {}
  for name, p in model:named_parameters() do sd[name] = p:detach():clone() end
else
  sd = eng:full_state_dict()
  local names = {}
  for name in pairs(sd) do names[#names + 1] = name end
  table.sort(names) -- the same collective order on every rank
  for _, name in ipairs(names) do
    local t = sd[name]
    if not t:equal(dist.broadcast(t:clone(), 0)) then fail("parameter %s differs from rank 0's", name) end
  end
end
if rank == 0 then
  accel.save(sd, out)
  print(("norm %.6f"):format(norm))
  print("device " .. model.out.weight.device.type) -- where the run trained (dist_device_test.lua)
  if eng then
    local st = eng:stats()
    print(("units %d reductions %d early %d gathers %d releases %d prefetches %d forward_prefetches %d"):format(
      st.units, st.reductions, st.early, st.gathers, st.releases, st.prefetches, st.forward_prefetches))
  end
end
if eng then eng:close() end
print(("ok rank %d: 1 checks"):format(rank))
