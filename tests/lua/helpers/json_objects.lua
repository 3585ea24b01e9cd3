-- json_objects.lua: run by tests/lua/json_test.lua under
-- `mpirun -np 2 accel-lua json_objects.lua`. One rank gives gather_object /
-- broadcast_object a value JSON cannot hold (a function, NaN, a cycle, a
-- 10^5-deep table, invalid UTF-8): every rank must get one error naming the
-- rank that gave it (this script's file:line), none may hang, and the
-- collectives after it must still pair up. Prints "ok rank R: C checks".
local accel = require("accel")
local acc = accel.Accelerator()
local rank, checks = acc.process_index, 0
local HERE = "json_objects.lua:"

local function check(cond, what)
  checks = checks + 1
  if not cond then
    print(("FAIL rank %d: %s"):format(rank, what))
    os.exit(1)
  end
end

local function deep(n)
  local top = {}
  local t = top
  for _ = 2, n do
    t[1] = {}
    t = t[1]
  end
  return top
end

-- fn must fail on this rank with a message naming `bad_rank` and `needle`.
local function refused(name, bad_rank, needle, fn)
  local ok, err = pcall(fn)
  check(not ok, name .. ": no error")
  err = tostring(err)
  print(("rank %d: %s: %s"):format(rank, name, err:sub(1, 200)))
  check(err:find(("rank %d's value cannot be sent"):format(bad_rank), 1, true), name .. ": rank not named: " .. err)
  check(err:find(needle, 1, true), name .. ": cause not named: " .. err)
  check(err:find(HERE, 1, true), name .. ": no file:line of the script: " .. err)
end

local cyc = {}
cyc.self = cyc
refused("function on rank 1", 1, "value.cb is a function", function()
  acc:gather_object(rank == 1 and {cb = print} or {cb = "fine"})
end)
refused("NaN on rank 0", 0, "value[1] is NaN", function() acc:gather_object({rank == 0 and 0 / 0 or 1.0}) end)
refused("cycle on rank 1", 1, "value.self contains itself", function() acc:gather_object(rank == 1 and cyc or {}) end)
refused("deep table on rank 0", 0, "deeper than 256 levels", function()
  acc:gather_object(rank == 0 and deep(100000) or {}) -- 10^6 is in json_spec (slow under ASan with full unwinds)
end)
refused("broadcast from rank 1 of bad UTF-8", 1, "value.s is not valid UTF-8", function()
  acc.state.comm:broadcast_object({s = rank == 1 and "\xff" or "ok"}, 1)
end)

-- A bad value on a rank that is not the source is not sent, so not refused.
local got = acc.state.comm:broadcast_object(rank == 0 and {n = 7} or {cb = print}, 0)
check(got.n == 7, "broadcast from rank 0 ignored the other rank's value")

-- The collectives still pair up after the refusals.
local all = acc:gather_object({rank, 2 ^ 53 + rank, "r\u{e9}" .. rank})
check(#all == 6 and all[1] == 0 and all[4] == 1, "gather_object after the refusals")
check(math.type(all[2]) == "float" and all[5] == 2 ^ 53 + 1, "float values came back changed")
local ints = acc:gather_object(math.maxinteger - rank)
check(ints[1] == math.maxinteger and ints[2] == math.maxinteger - 1 and math.type(ints[2]) == "integer",
  "integers near 2^63 came back changed")
local sum = acc:reduce(accel.tensor({rank + 1.0}), "sum")
check(sum:item() == 3, "a tensor collective after the refusals")

-- save_state failing on rank 0 only
local dir = arg[1]
local C = accel._C
local model = acc:prepare(accel.nn.Linear(3, 2))
acc:save_state(dir .. "/ckpt")
local index = io.open(dir .. "/ckpt/checkpoint_index.json"):read("a")
acc:register_for_checkpointing({load_state_dict = function() end, state_dict = function()
  if rank == 0 then error("rank 0's state_dict fails on purpose") end
  return {}
end})
local ok, err = pcall(acc.save_state, acc, dir .. "/ckpt")
print(("rank %d: save_state: %s"):format(rank, tostring(err)))
check(not ok, "save_state did not fail")
check(tostring(err):find(rank == 0 and "rank 0's state_dict fails on purpose" or "save_state: process 0 failed", 1, true),
  "save_state error: " .. tostring(err))
acc:wait_for_everyone()
check(table.concat(C.fs_listdir(dir), " ") == "ckpt", "leftovers: " .. table.concat(C.fs_listdir(dir), " "))
check(io.open(dir .. "/ckpt/checkpoint_index.json"):read("a") == index, "the old checkpoint changed")

-- profile: one trace file per rank, written before profile returns anywhere
local json = require("accel.json")
acc:wait_for_everyone() -- both ranks have looked at dir
acc:profile(function() accel.ones(2):add(rank) end, {output_trace_dir = dir .. "/traces"})
for r = 0, 1 do
  local f = io.open(("%s/traces/profile_%d.json"):format(dir, r))
  check(f ~= nil, "no profile_" .. r .. ".json")
  local trace = json.decode(f:read("a"))
  f:close()
  check(#trace.traceEvents == 1 and trace.traceEvents[1].name == "add" and trace.traceEvents[1].pid == r,
    "profile_" .. r .. ".json: " .. json.encode(trace.traceEvents))
end
print(("ok rank %d: %d checks"):format(rank, checks))
