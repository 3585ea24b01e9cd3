-- conv_cnn.lua: one training step (forward + backward, no optimizer) of the
-- Fashion-MNIST CNN of issue 3, batch 64, through accel.nn.functional:
--   Conv2d(1,32,3,p1)-ReLU-MaxPool2-Conv2d(32,64,3,p1)-ReLU-MaxPool2-
--   Linear(3136,128)-ReLU-Linear(128,10), cross-entropy
-- and the share of it spent in conv2d / max_pool2d (each timed alone, forward
-- and forward + backward). Times are process CPU time (os.clock), so run it
-- single-threaded; the best of REPEATS runs of STEPS steps (the least
-- disturbed by other load on the machine). The last line gives the second
-- conv layer's forward GFLOP/s.
--   OMP_NUM_THREADS=1 build/accel-lua scripts/bench/conv_cnn.lua [STEPS] [REPEATS]
local accel = require("accel")
local F = accel.nn.functional

local STEPS = tonumber(arg and arg[1]) or 20
local REPEATS = tonumber(arg and arg[2]) or 5
accel.set_seed(0)

local function param(...) local t = accel.randn(...) * 0.05; t:requires_grad_(true); return t end
local w1, b1 = param(32, 1, 3, 3), param(32)
local w2, b2 = param(64, 32, 3, 3), param(64)
local w3, b3 = param(128, 3136), param(128)
local w4, b4 = param(10, 128), param(10)
local params = {w1, b1, w2, b2, w3, b3, w4, b4}
local x = accel.randn(64, 1, 28, 28)
local y = accel.randint(0, 10, {64})
local pad1 = {padding = 1}

local function step()
  local h = F.max_pool2d(F.conv2d(x, w1, b1, pad1):relu(), 2)
  h = F.max_pool2d(F.conv2d(h, w2, b2, pad1):relu(), 2)
  h = F.linear(h:reshape(64, 3136), w3, b3):relu()
  F.cross_entropy(F.linear(h, w4, b4), y):backward()
  for _, p in ipairs(params) do p.grad = nil end
end

-- the best over REPEATS of the mean ms per call of fn, STEPS calls each
local function time_ms(fn)
  for _ = 1, 2 do fn() end
  local runs = {}
  for r = 1, REPEATS do
    local t0 = os.clock()
    for _ = 1, STEPS do fn() end
    runs[r] = (os.clock() - t0) * 1000 / STEPS
  end
  table.sort(runs)
  return runs[1]
end

-- an op alone: forward (no graph) and forward + backward of its output
local function op_times(fwd, out_shape, inputs)
  local g = accel.randn(out_shape)
  local f = time_ms(function() accel.no_grad(fwd) end)
  local fb = time_ms(function()
    fwd():backward(g)
    for _, t in ipairs(inputs) do t.grad = nil end
  end)
  return f, fb
end

local total = time_ms(step)
local p1 = accel.randn(64, 32, 14, 14); p1:requires_grad_(true)
local c1 = accel.randn(64, 32, 28, 28); c1:requires_grad_(true)
local c2 = accel.randn(64, 64, 14, 14); c2:requires_grad_(true)
local rows = {
  {"conv1 (1->32, 28x28)", op_times(function() return F.conv2d(x, w1, b1, pad1) end, {64, 32, 28, 28}, {w1, b1})},
  {"conv2 (32->64, 14x14)", op_times(function() return F.conv2d(p1, w2, b2, pad1) end, {64, 64, 14, 14}, {p1, w2, b2})},
  {"max_pool1 (64x32x28x28)", op_times(function() return F.max_pool2d(c1, 2) end, {64, 32, 14, 14}, {c1})},
  {"max_pool2 (64x64x14x14)", op_times(function() return F.max_pool2d(c2, 2) end, {64, 64, 7, 7}, {c2})},
}
print(("threads %d, %d steps x %d repeats, CPU ms (best run)"):format(accel.num_threads(), STEPS, REPEATS))
print(("training step (fwd + bwd)            %8.2f ms  (%.1f s per 938-step epoch)"):format(total, total * 938 / 1000))
local conv, pool = 0, 0
for i, r in ipairs(rows) do
  print(("%-28s fwd %7.2f ms  fwd+bwd %7.2f ms"):format(r[1], r[2], r[3]))
  if i <= 2 then conv = conv + r[3] else pool = pool + r[3] end
end
print(("conv2d share %.1f%%, max_pool2d share %.1f%%"):format(100 * conv / total, 100 * pool / total))
local conv2_flop = 2 * 64 * 64 * 196 * 288
print(("conv2 forward %.1f GFLOP/s"):format(conv2_flop / (rows[2][2] / 1000) / 1e9))
