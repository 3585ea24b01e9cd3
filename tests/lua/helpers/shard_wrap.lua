-- shard_wrap.lua: stage-3 wrap units around modules that are never called
-- and around a parameter used by modules of two units, set up through the
-- Accelerator's FullyShardedDataParallelPlugin (FULL_SHARD); run by
-- shard_test.lua:
--
--   accel-lua launch --cpu --num_processes N shard_wrap.lua OUT key=value...
--     model=lists|gpt  lists: a 476-parameter model whose layers sit in an
--                      nn.ModuleList and an nn.ModuleDict, with an
--                      nn.MultiheadAttention; gpt: accel.models.gpt2's
--                      GPT2LMHeadModel (its head is tied to transformer.wte)
--     wrap=none|size|transformer|policy   none: plain DDP (the reference);
--                      size: size_based_wrap with min_num_params = min;
--                      transformer: transformer_based_wrap with
--                      transformer_cls_names_to_wrap = names; policy: a
--                      callable auto_wrap_policy wrapping every Linear
--     min=100  names=A,B (a comma-separated list)  steps=4
--
-- AdamW, 8 samples per optimizer step over all ranks from a prepared
-- DataLoader. Rank 0 writes the full parameters (get_state_dict) to OUT and
-- prints "units C1 C2 ..." (the class of each wrap unit's module, "root" for
-- the root unit; "units none" under DDP); every rank prints its ok line. A
-- configuration the engine refuses raises from prepare.
local accel = require("accel")
local nn, optim = accel.nn, accel.optim

local out = arg[1]
local o = {model = "lists", wrap = "none", min = "100", names = "", steps = "4"}
for i = 2, #arg do
  local k, v = arg[i]:match("^(%w+)=(.*)$")
  if not k or o[k] == nil then error("bad argument " .. arg[i]) end
  o[k] = v
end
local steps = tonumber(o.steps)

-- Layers in a ModuleList (36 + 40 parameters) and a ModuleDict (36 + 36),
-- an attention block (216 + its out_proj's 72), an input layer (40).
local Lists = nn.Module:extend("Lists")
function Lists:init()
  self.inp = nn.Linear(4, 8)
  self.layers = nn.ModuleList({nn.Linear(8, 4), nn.Linear(4, 8)})
  self.attn = nn.MultiheadAttention(8, 2, {batch_first = true})
  self.heads = nn.ModuleDict({out = nn.Linear(8, 4), aux = nn.Linear(8, 4)})
end
function Lists:forward(x)
  local h = self.inp(x):tanh()
  h = h + self.layers[2](self.layers[1](h):tanh())
  h = h + self.attn(h, h, h)
  h = h:mean(2)
  return self.heads.out(h) + self.heads.aux(h):tanh()
end

-- model, data tensors, loss(model, batch...)
local function lists_job(n)
  local model = Lists()
  local criterion = nn.CrossEntropyLoss()
  return model, {accel.randn(n, 3, 4), accel.randint(0, 4, {n})}, function(m, x, y) return criterion(m(x), y) end
end

local function gpt_job(n)
  local gpt2 = accel.models.gpt2
  local model = gpt2.GPT2LMHeadModel(gpt2.GPT2Config{vocab_size = 17, n_positions = 8, n_embd = 5, n_layer = 2,
    n_head = 1, dropout = 0})
  return model, {accel.randint(0, 17, {n, 9})}, function(m, ids)
    local _, loss = m(ids:narrow(2, 1, 8), {targets = ids:narrow(2, 2, 8)})
    return loss
  end
end

local opts = {}
if o.wrap ~= "none" then
  local policy = {size = "size_based_wrap", transformer = "transformer_based_wrap",
    policy = function(m, recurse) return recurse or m:isinstance(nn.Linear) end}
  opts.fsdp_plugin = accel.FullyShardedDataParallelPlugin{sharding_strategy = "FULL_SHARD",
    auto_wrap_policy = policy[o.wrap], min_num_params = tonumber(o.min),
    transformer_cls_names_to_wrap = o.names ~= "" and o.names or nil}
end
local accelerator = accel.Accelerator(opts)
local rank, world = accelerator.process_index, accelerator.num_processes

accel.set_seed(5)
local model, data, loss_of = (o.model == "gpt" and gpt_job or lists_job)(8 * steps)
local optimizer = optim.AdamW(model:parameters(), {lr = 1e-2, weight_decay = 0.05})
local loader = accel.data.DataLoader(accel.data.TensorDataset(table.unpack(data)), {batch_size = 8 / world})
model, optimizer, loader = accelerator:prepare(model, optimizer, loader)

for x, y in loader:iter() do
  accelerator:backward(loss_of(model, x, y))
  optimizer:step()
  optimizer:zero_grad()
end

-- "root" or the unit module's class, for each unit of the engine.
local function unit_classes(eng)
  if not eng then return "none" end
  local out = {}
  for i, u in ipairs(eng._units) do out[i] = u.root and "root" or u.module:_get_name() end
  return table.concat(out, " ")
end

local sd = accelerator:get_state_dict(model)
if rank == 0 then
  accel.save(sd, out)
  print("units " .. unit_classes(accelerator.shard_engine))
end
accelerator:free_memory()
print(("ok rank %d: 1 checks"):format(rank))
