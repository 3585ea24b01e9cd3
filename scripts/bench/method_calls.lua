-- method_calls.lua: the per-call cost of the Lua method-call checks
-- (accel.util.check_methods): times N calls each of a small nn.Linear
-- forward m(x), m:parameters(), opt:zero_grad() and a 2-layer Sequential's
-- forward, median of REPEATS runs, in microseconds per call.
--   OMP_NUM_THREADS=1 build/accel-lua scripts/bench/method_calls.lua [N] [REPEATS]
-- Last line: "RESULT linear_fwd=<us> parameters=<us> zero_grad=<us> seq_fwd=<us>".
local accel = require("accel")
local nn = accel.nn
local N = math.tointeger(tonumber(arg[1] or "")) or 50000
local REPEATS = math.tointeger(tonumber(arg[2] or "")) or 5

local function median_us(fn)
  local runs = {}
  for r = 1, REPEATS do
    local t0 = accel.clock()
    for _ = 1, N do fn() end
    runs[r] = (accel.clock() - t0) / N * 1e6
  end
  table.sort(runs)
  return runs[math.floor((REPEATS + 1) / 2)]
end

local m = nn.Linear(4, 4)
local seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
local x = accel.randn(2, 4)
local opt = accel.optim.SGD(m:parameters(), {lr = 0.1})
local res = {
  ("linear_fwd=%.3f"):format(accel.no_grad(function() return median_us(function() return m(x) end) end)),
  ("parameters=%.3f"):format(median_us(function() return m:parameters() end)),
  ("zero_grad=%.3f"):format(median_us(function() opt:zero_grad() end)),
  ("seq_fwd=%.3f"):format(accel.no_grad(function() return median_us(function() return seq(x) end) end)),
}
print("RESULT " .. table.concat(res, " "))
