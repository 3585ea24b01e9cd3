-- progress_bar.lua [stdout|stderr] [wait] [fail]: a 10-step accel.progress
-- bar named "rankR" (R: this rank), on stderr or stdout, for the checks of
-- bars under `accel-lua launch` (scripts/test-progress-launch.sh,
-- scripts/test-machines.sh). wait: 2 s with the bar half done; fail: rank 0
-- raises an error right after a redraw (the others wait 20 s).
local progress = require("accel.progress")
local rank = os.getenv("OMPI_COMM_WORLD_RANK") or "0"
local file = arg[1] == "stdout" and io.stdout or io.stderr
local bar = progress.bar(10, {desc = "rank" .. rank, file = file, mininterval = 0})
for _ = 1, 5 do bar:update(1) end
if arg[2] == "wait" then
  local t = accel.clock()
  while accel.clock() - t < 2 do end
end
if arg[3] == "fail" then
  if rank == "0" then error("boom after a redraw") end
  local t = accel.clock()
  while accel.clock() - t < 20 do end
end
for _ = 1, 5 do bar:update(1) end
bar:close()
