-- shard_errors.lua: bad options and bad uses of accel.shard.Engine, each
-- one error naming the cause at this file's line (run on 1 and 2 ranks by
-- shard_test.lua). Prints "ok rank R: N checks" when all hold.
local accel = require("accel")
local nn, optim, dist = accel.nn, accel.optim, accel.dist
local rank = dist.get_rank()
local checks = 0

local function expect(what, fn, ...)
  local ok, err = pcall(fn)
  err = tostring(err)
  if ok then error(("rank %d: %s: no error"):format(rank, what)) end
  if not err:find("shard_errors.lua:%d+:") then
    error(("rank %d: %s: the error does not name this file's line: %s"):format(rank, what, err))
  end
  for _, want in ipairs({...}) do
    if not err:find(want, 1, true) then
      error(("rank %d: %s: expected %q in: %s"):format(rank, what, want, err))
    end
  end
  checks = checks + 1
end

local function fresh()
  accel.set_seed(1)
  local m = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))
  return m, optim.AdamW(m:parameters())
end

local Engine = accel.shard.Engine
local m, o = fresh()
expect("stage 4", function() Engine(m, o, {stage = 4}) end, "stage must be 1, 2 or 3, got 4")
expect("stage 0", function() Engine(m, o, {stage = 0}) end, "stage 0 / NO_SHARD is DDP")
expect("no stage", function() Engine(m, o, {}) end, "option stage is required")
expect("unknown option", function() Engine(m, o, {stage = 1, zero_stage = 2}) end, "unknown option zero_stage")
expect("bad offload", function() Engine(m, o, {stage = 2, offload_optimizer = "nvme"}) end,
  "offload_optimizer must be false, true, \"cpu\" or \"none\", got nvme")
expect("bad wrap", function() Engine(m, o, {stage = 3, wrap = 7}) end, "wrap must be")
expect("bad wrap entry", function() Engine(m, o, {stage = 3, wrap = {m[1], 5}}) end, "wrap[2] must be a module")
expect("bad min_num_params", function() Engine(m, o, {stage = 3, wrap = {min_num_params = 0}}) end,
  "wrap.min_num_params must be a positive number")
local Lion = optim.Optimizer:extend("Lion")
function Lion:init(params) optim.Optimizer.init(self, params, {lr = 1}) end
expect("unsupported optimizer", function() Engine(m, Lion(m:parameters()), {stage = 1}) end,
  "the optimizer must be accel.optim.SGD, Adam or AdamW, got Lion")
expect("parameter outside the optimizer", function() Engine(m, optim.AdamW(m[1]:parameters()), {stage = 2}) end,
  "parameter 2.weight requires grad but is in none of the optimizer's param groups")
local m64 = nn.Linear(2, 2):double()
expect("float64 parameters", function() Engine(m64, optim.SGD(m64:parameters()), {stage = 1}) end,
  "parameter 1 must be a float32 leaf that requires grad, got float64")
-- parameters on two devices: one error naming both (the other device is sim,
-- or cpu when sim is the default)
local other = accel.get_default_device().type == "sim" and "cpu" or "sim"
local split = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2):to(other))
expect("parameters on two devices", function() Engine(split, optim.SGD(split:parameters()), {stage = 2}) end,
  "shard: parameter 3 is on " .. other, "(the engine's parameters must be on one device)")

-- stage 3: released parameters refuse use, state_dict included
local eng = Engine(m, o, {stage = 3, wrap = {m[1], m[3]}})
if accel.shard.engine_of(o) ~= eng or accel.shard.engine_of(m) ~= eng or accel.shard.engine_of(m[3].bias) ~= eng then
  error("engine_of does not find the engine")
end
expect("a released parameter", function() return m[1].weight:sum() end, "its memory is released",
  "tensor of shape [5, 3]")
-- its shape stays readable (FSDP2's parameters give their global numel): counting parameters works
do
  local w = m[1].weight
  if w:numel() ~= 15 or w:dim() ~= 2 or w:size(1) ~= 5 or w:size()[2] ~= 3 then
    error(("rank %d: a released parameter's numel / dim / size: %s %s %s"):format(rank, w:numel(), w:dim(), w:size(1)))
  end
end
-- a wrapped submodule's own state_dict touches its released parameters; the
-- engine's model gathers them (as accelerator:get_state_dict does)
expect("state_dict of a released submodule", function() return m[1]:state_dict() end, "its memory is released")
do
  local full = m:state_dict()
  if not (accel.is_tensor(full["0.weight"]) and full["0.weight"].shape[2] == 3) then
    error("rank " .. rank .. ": the model's state_dict under stage 3 did not give the full weights")
  end
end
if m[1].weight.shape[2] ~= 3 then error("the shape of a released parameter is not readable") end
expect("a second engine on hooked parameters", function() Engine(m, o, {stage = 2}) end,
  "parameter 0.weight is already held by another engine")
-- a graph that saved a parameter, which is released before its backward
eng._c:gather(1)
local saved = m[1].weight * m[1].weight
eng._c:release(1)
expect("backward through a released parameter", function() saved:sum():backward() end,
  "a tensor it saved (shape [5, 3]) has no memory")
-- inside the unit's forward the parameters are there; after close too
local y = m(accel.randn(4, 3))
y:sum():backward()
eng:step()
expect("loading without a tensor", function() eng:load_full_state_dict({}) end, "no tensor for 0.weight")
expect("loading a wrong shape", function() eng:load_full_state_dict({["0.weight"] = accel.zeros(2)}) end,
  "0.weight has shape [2], the parameter [5, 3]")
expect("loading optimizer state without an entry", function() eng:load_full_optim_state({}) end,
  "no state for parameter 0.weight")
eng:gathered(function()
  if m[1].weight:abs():sum():item() <= 0 then error("gathered parameters are empty") end
end)
eng:close()
expect("a closed engine", function() eng:step() end, "the engine was closed")
if accel.shard.engine_of(o) ~= nil or accel.shard.engine_of(m) ~= nil then error("engine_of finds a closed engine") end
if m[1].weight:abs():sum():item() <= 0 then error("close did not gather the parameters") end
checks = checks + 1
do -- a parameter added to the optimizer after the engine was made: refused, not left unstepped
  local m2, o2 = fresh()
  local e2 = Engine(m2, o2, {stage = 2})
  o2:add_param_group({params = {accel.zeros(2, {requires_grad = true})}, lr = 0.5})
  m2(accel.randn(4, 3)):sum():backward()
  expect("a param group added after the engine", function() o2:step() end,
    "param group 2 holds a parameter that is not in the sharded model")
  e2:close()
end
do -- one of the model's parameters, frozen at prepare, unfrozen and added later: named, with the cause
  local m3, o3 = fresh()
  m3[1]:requires_grad_(false)
  local e3 = Engine(m3, optim.SGD(m3[3]:parameters(), {lr = 0.1}), {stage = 1})
  m3[1]:requires_grad_(true)
  e3.optimizer:add_param_group({params = m3[1]:parameters(), lr = 0.05})
  m3(accel.randn(4, 3)):sum():backward()
  expect("a frozen parameter added after the engine", function() e3.optimizer:step() end,
    "param group 2 holds 0.weight, which did not require grad when the model was prepared",
    "call requires_grad_(true) on it before prepare")
  e3:close()
end
print(("ok rank %d: %d checks"):format(rank, checks))
