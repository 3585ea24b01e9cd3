-- shard_resume.lua: the training run behind shard_checkpoint_test.lua, on
-- 1, 2 or 3 ranks:
--
--   accel-lua launch --cpu --num_processes N shard_resume.lua OUT key=value...
--     stage=0|1|2|3  0: no engine (the Accelerator's DDP on N > 1 ranks, plain on one)
--     via=engine     the model handed to accel.shard.Engine and registered with the
--                    Accelerator by hand (until prepare builds the engine from a
--                    plugin: via=plugin then prepares it with DeepSpeedPlugin{zero_stage})
--     steps=K        optimizer steps in this run (an epoch is 5 steps: 60 samples,
--                    global batch 12 split over the ranks, shuffled)
--     load=DIR       load_state(DIR) first       save=DIR   save_state(DIR) at the end
--     model=DIR      save_model(DIR) at the end (max_shard_size=B, default 10GB)
--     plain=DIR      also checkpoint.save_model(eng:full_state_dict()) into DIR (the
--                    unstreamed path, same max_shard_size) — stage > 0 only
--     opt=adamw|sgd  the optimizer: AdamW, or SGD with momentum (whose state has no step)
--     hidden=7       the width (7: 205 parameters, divisible by neither 2 nor 3)
--     blocks=2       the number of residual blocks
--     gathered=1     stage 3: load_state inside eng:gathered(fn); the parameters read
--                    there must equal get_state_dict's afterwards (bitwise)
--     refused=1      load_state must raise: print "refused: <message>" and go on (the
--                    run must then equal one without load=)
--     mem=1          print "savemodel_peak P before B largest L model M rank R" (live
--                    tensor bytes on this rank around save_model) and
--                    "loadstate_peak P before B after A largest L model M rank R" around load_state
-- Rank 0 writes the full parameters to OUT (safetensors, through get_state_dict).
local accel = require("accel")
local nn, optim, data = accel.nn, accel.optim, accel.data
local checkpoint = require("accel.checkpoint")

local out = arg[1]
local o = {stage = "0", via = "engine", steps = "5", load = "", save = "", model = "", plain = "", hidden = "7",
  mem = "0", max_shard_size = "10GB", refused = "0", gathered = "0", blocks = "2", opt = "adamw"}
for i = 2, #arg do
  local k, v = arg[i]:match("^([%w_]+)=(.*)$")
  if not k or o[k] == nil then error("bad argument " .. arg[i]) end
  o[k] = v
end
local stage, H = tonumber(o.stage), tonumber(o.hidden)

local Block = nn.Module:extend("Block")
function Block:init()
  self.norm = nn.LayerNorm(H)
  self.lin = nn.Linear(H, H)
end
function Block:forward(h) return self.lin(self.norm(h)):tanh() end

local Net = nn.Module:extend("Net")
function Net:init()
  self.inp = nn.Linear(6, H)
  local blocks = {}
  for i = 1, tonumber(o.blocks) do blocks[i] = Block() end
  self.blocks = nn.ModuleList(blocks)
  self.out = nn.Linear(H, 2)
end
function Net:forward(x)
  local h = nn.functional.gelu(self.inp(x))
  local n = #self.blocks
  for i = 1, n - 1 do h = h + self.blocks[i](h) end
  return self.out(h + self.blocks[n](h))
end

accel.set_seed(11)
local x, y = accel.randn(60, 6), accel.randint(0, 2, {60})
local model = Net()
local rank = tonumber(os.getenv("OMPI_COMM_WORLD_RANK") or "0")
if rank ~= 0 then -- other ranks start elsewhere: the engine / DDP broadcast rank 0's
  accel.no_grad(function()
    for _, p in ipairs(model:parameters()) do p:add_(rank) end
  end)
end
local optimizer = o.opt == "sgd" and optim.SGD(model:parameters(), {lr = 0.05, momentum = 0.9})
  or optim.AdamW(model:parameters(), {lr = 1e-2, weight_decay = 0.05})
local scheduler = optim.lr_scheduler.StepLR(optimizer, {step_size = 3, gamma = 0.5})
local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = 12, shuffle = true, seed = 4})

local acc, eng
if stage > 0 and o.via == "plugin" then
  acc = accel.Accelerator{split_batches = true, deepspeed_plugin = accel.DeepSpeedPlugin{zero_stage = stage}}
  model, optimizer, loader, scheduler = acc:prepare(model, optimizer, loader, scheduler)
  eng = accel.shard.engine_of(model)
  assert(eng, "prepare with a DeepSpeedPlugin built no sharding engine")
elseif stage > 0 then
  acc = accel.Accelerator{split_batches = true}
  eng = accel.shard.Engine(model, optimizer, {stage = stage, wrap = "module_list", bucket_cap_mb = 0.0004})
  acc._models[#acc._models + 1] = model
  optimizer, loader, scheduler = acc:prepare(optimizer, loader, scheduler)
else
  acc = accel.Accelerator{split_batches = true}
  model, optimizer, loader, scheduler = acc:prepare(model, optimizer, loader, scheduler)
end

-- Bytes of the largest parameter and of all of them.
local function sizes()
  local largest, total = 0, 0
  for _, p in ipairs(model:parameters()) do
    local n = 4
    for _, d in ipairs(p.shape) do n = n * d end
    largest, total = math.max(largest, n), total + n
  end
  return largest, total
end

if o.load ~= "" and o.refused == "1" then
  local ok, err = pcall(acc.load_state, acc, o.load)
  assert(not ok, "load_state accepted " .. o.load)
  print("refused: " .. tostring(err):gsub("\n", " "))
elseif o.load ~= "" and o.gathered == "1" then
  local seen = {}
  eng:gathered(function()
    acc:load_state(o.load)
    for name, p in model:named_parameters() do seen[name] = p:detach():clone() end
  end)
  local sd = acc:get_state_dict(model)
  for name, t in pairs(seen) do
    assert(t:equal(sd[name]), ("rank %d: %s read inside gathered() differs from the loaded weights"):format(rank, name))
  end
elseif o.load ~= "" then
  collectgarbage()
  local before = accel.memory_stats()
  accel.reset_peak_memory_stats()
  acc:load_state(o.load)
  if o.mem == "1" then
    local peak = select(3, accel.memory_stats())
    collectgarbage()
    local largest, total = sizes()
    print(("loadstate_peak %d before %d after %d largest %d model %d rank %d"):format(peak, before, accel.memory_stats(),
      largest, total, rank))
  end
end

local criterion = nn.CrossEntropyLoss()
local steps, want = 0, tonumber(o.steps)
while steps < want do
  local finished = true
  for xb, yb in loader:iter() do
    acc:backward(criterion(model(xb), yb))
    optimizer:step()
    optimizer:zero_grad()
    scheduler:step()
    steps = steps + 1
    if steps == want then
      finished = false
      break
    end
  end
  if finished and steps == want then break end
end

if o.save ~= "" then acc:save_state(o.save) end
if o.model ~= "" then
  collectgarbage()
  local before = select(1, accel.memory_stats())
  accel.reset_peak_memory_stats()
  acc:save_model(model, o.model, {max_shard_size = tonumber(o.max_shard_size) or o.max_shard_size})
  local peak = select(3, accel.memory_stats())
  if o.mem == "1" then
    local largest, total = sizes()
    print(("savemodel_peak %d before %d largest %d model %d rank %d"):format(peak, before, largest, total, rank))
  end
end
if o.plain ~= "" then
  local sd = eng:full_state_dict()
  local max = checkpoint.parse_size(tonumber(o.max_shard_size) or o.max_shard_size, "max_shard_size")
  if acc.is_main_process then checkpoint.save_model(sd, model:state_dict_keys(), o.plain, max) end
end
local sd = acc:get_state_dict(model)
if acc.is_main_process then accel.save(sd, out) end
acc:wait_for_everyone()
if eng then eng:close() end
print(("ok rank %d: 1 checks"):format(acc.process_index))
