-- machines_spin.lua: run by scripts/test-machines.sh on several machines
-- (network namespaces) as `accel-lua launch ... machines_spin.lua DIR`.
-- Every rank writes its process id to DIR/pid_r<rank>, then all ranks run
-- small all_reduce calls until the test kills one of them (at most 60 s).
local accel = require("accel")

local dir = arg[1]
local a = accel.Accelerator{}
local stat = assert(io.open("/proc/self/stat"))
local pid = stat:read("n")
stat:close()
local f = assert(io.open(("%s/pid_r%d.tmp"):format(dir, a.process_index), "w"))
f:write(tostring(pid), "\n")
f:close()
assert(os.rename(("%s/pid_r%d.tmp"):format(dir, a.process_index), ("%s/pid_r%d"):format(dir, a.process_index)))
local t0 = os.time()
while os.time() - t0 < 60 do
  accel.dist.all_reduce(accel.ones(4))
  os.execute("sleep 0.05")
end
