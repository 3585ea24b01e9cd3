-- machines_who.lua: run by scripts/test-machines.sh on every rank of a job
-- started across machines by an outside launcher. Prints, per rank,
--   who R local L of N on HOST sum S
-- from the Accelerator (process_index, local_process_index, num_processes),
-- the machine's host name, and an all_reduce of ones over the job (S = N
-- when the ranks really joined one job).
local accel = require("accel")

local a = accel.Accelerator{}
local p = assert(io.popen("hostname"))
local host = p:read("l")
p:close()
local s = accel.dist.all_reduce(accel.ones(1)):item()
print(("who %d local %d of %d on %s sum %d"):format(a.process_index, a.local_process_index, a.num_processes,
  host, math.floor(s + 0.5)))
