-- checkpoint_ranks.lua: run by tests/lua/checkpoint_ranks_test.lua under
-- `mpirun -np 2 accel-lua checkpoint_ranks.lua DIR`. A registered metric
-- whose state_dict() sums a count over the ranks (acc:reduce) saves and
-- loads back (Accelerate 1.15 with torch.distributed, 2 ranks counting 1
-- and 2: state_dict runs on both, custom_checkpoint_0 holds count = 3);
-- rank 1's random state file forged (its index entry fitted, so only its
-- contents are wrong) makes load_state refuse on both ranks, and neither
-- rank's model changes; then a state_dict failing on rank 1 only fails
-- save_state on both ranks, and neither a temporary folder nor a change to
-- the old checkpoint is left. Prints "ok rank R: C checks".
local accel = require("accel")
local C = accel._C
local acc = accel.Accelerator()
local rank, checks = acc.process_index, 0
local dir = arg[1]

local function check(cond, what)
  checks = checks + 1
  if not cond then
    print(("FAIL rank %d: %s"):format(rank, what))
    os.exit(1)
  end
end

local model = acc:prepare(accel.nn.Linear(2, 2))
local metric, calls = {count = rank + 1}, 0
function metric:state_dict()
  calls = calls + 1
  return {count = acc:reduce(accel.tensor({self.count}), "sum"):item()}
end
function metric:load_state_dict(s) self.count = s.count end
acc:register_for_checkpointing(metric)
local ok, err = pcall(acc.save_state, acc, dir .. "/ckpt")
check(ok, "save_state with a collective in state_dict: " .. tostring(err))
check(calls == 1, "state_dict ran " .. calls .. " time(s) on this rank")
metric.count = -1
acc:load_state(dir .. "/ckpt")
check(metric.count == 3, "count loaded: " .. tostring(metric.count))

local json = require("accel.json")
local rng_file, index_file = dir .. "/ckpt/random_states_1.json", dir .. "/ckpt/checkpoint_index.json"
local function read(path) local f = io.open(path, "rb") local s = f:read("a") f:close() return s end
local function write(path, s) local f = io.open(path, "wb") f:write(s) f:close() end
local saved_rng, saved_index = read(rng_file), read(index_file)
acc:wait_for_everyone()
if rank == 0 then
  write(rng_file, '{"accel": [0, "zz"], "step": 3}')
  local idx = json.decode(saved_index)
  local crc, size = C.fs_crc32(rng_file)
  idx.files["random_states_1.json"] = {size = size, crc32 = crc}
  write(index_file, json.encode(idx))
end
acc:wait_for_everyone()
accel.no_grad(function() model.weight:fill_(7) end)
ok, err = pcall(acc.load_state, acc, dir .. "/ckpt")
print(("rank %d: load_state: %s"):format(rank, tostring(err)))
check(not ok, "load_state of a forged random state file did not fail")
check(tostring(err):find(rank == 1 and "random_states_1.json is malformed" or "load_state: process 1 failed, so nothing "
  .. "was loaded", 1, true), "load_state error: " .. tostring(err))
check(model.weight:eq(7):all():item(), "the model changed though load_state refused")
acc:wait_for_everyone()
if rank == 0 then write(rng_file, saved_rng) write(index_file, saved_index) end
acc:wait_for_everyone()

local index = io.open(dir .. "/ckpt/checkpoint_index.json"):read("a")
acc:register_for_checkpointing({load_state_dict = function() end, state_dict = function()
  if rank == 1 then error("rank 1's state_dict fails on purpose") end
  return {}
end})
ok, err = pcall(acc.save_state, acc, dir .. "/ckpt")
print(("rank %d: save_state: %s"):format(rank, tostring(err)))
check(not ok, "save_state did not fail")
check(tostring(err):find(rank == 1 and "rank 1's state_dict fails on purpose" or "save_state: process 1 failed", 1, true),
  "save_state error: " .. tostring(err))
acc:wait_for_everyone()
check(table.concat(C.fs_listdir(dir), " ") == "ckpt", "leftovers: " .. table.concat(C.fs_listdir(dir), " "))
check(io.open(dir .. "/ckpt/checkpoint_index.json"):read("a") == index, "the old checkpoint changed")
print(("ok rank %d: %d checks"):format(rank, checks))
