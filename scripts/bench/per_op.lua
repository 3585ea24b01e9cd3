-- per_op.lua: per-op overhead benchmark, accel-lua side (PyTorch side: per_op.py).
-- Two 16-element float32 tensors, 1 thread; times `a + b` (no grad) and
-- `(a + b):sum():backward()` (requires_grad), N iterations each, median of
-- REPEATS runs; prints us/op and VmRSS before/after. Unless --no-torch is
-- given, it then runs per_op.py under $PYTHON (default /usr/bin/python3; OMP_NUM_THREADS=1
-- OPENBLAS_NUM_THREADS=1) and prints the ratios. The tensors are on the
-- default device (ACCEL_LUA_DEVICE=cuda: the launch overhead on a GPU, each
-- loop timed up to accel.synchronize()); PyTorch's side uses the same device.
--   OMP_NUM_THREADS=1 build/accel-lua scripts/bench/per_op.lua [N] [REPEATS] [--no-torch]
-- Last line: "RESULT accel add=<us> fwdbwd=<us> rss_before_kib=<n> rss_after_kib=<n>
-- [torch_add=<us> torch_fwdbwd=<us>]". Runs under Lua 5.4 and LuaJIT
-- (build/luajit/accel-lua; run.sh reports both).
local accel = require("accel")
local common = dofile((debug.getinfo(1, "S").source:match("^@(.*)/") or ".") .. "/common.lua")

local N, REPEATS, with_torch = 100000, 3, true
local nums = {}
for _, v in ipairs(arg) do
  local num = tonumber(v)
  if v == "--no-torch" then with_torch = false elseif num then nums[#nums + 1] = math.floor(num) end
end
N = nums[1] or N
REPEATS = nums[2] or REPEATS

local function vmrss_kib()
  local f = io.open("/proc/self/status")
  if not f then return -1 end
  for line in f:lines() do
    local kb = line:match("^VmRSS:%s+(%d+)")
    if kb then f:close() return tonumber(kb) end
  end
  f:close()
  return -1
end

local median = common.median

local device = accel.get_default_device()

local function time_loop(body, n, repeats)
  body(math.min(n, 1000)) -- warm up
  accel.synchronize(device)
  local runs = {}
  for r = 1, repeats do
    local t0 = accel.clock()
    body(n)
    accel.synchronize(device) -- queued device work counts
    runs[r] = (accel.clock() - t0) / n * 1e6
  end
  return median(runs)
end

accel.num_threads(1)
accel.set_seed(0)
local x, y = accel.randn(16), accel.randn(16)
local a = accel.randn(16, {requires_grad = true})
local b = accel.randn(16, {requires_grad = true})

local function add(k)
  for _ = 1, k do local _ = x + y end
end

local function fwdbwd(k)
  for _ = 1, k do (a + b):sum():backward() end
end

local rss0 = vmrss_kib()
local t_add = time_loop(add, N, REPEATS)
local t_fb = time_loop(fwdbwd, N, REPEATS)
local rss1 = vmrss_kib()
print(("accel-lua %s per-op under %s (16-element float32 on %s, %d iterations, median of %d, %d thread)")
  :format(accel.__version__, rawget(_G, "jit") and jit.version or _VERSION, tostring(device), N, REPEATS,
    accel.num_threads()))
print(("  a + b (no grad)            %8.3f us/op"):format(t_add))
print(("  (a + b):sum():backward()   %8.3f us/op"):format(t_fb))
print(("  VmRSS before %d KiB, after %d KiB (Lua heap %.0f KiB)"):format(rss0, rss1, collectgarbage("count")))

local result = ("RESULT accel add=%.4f fwdbwd=%.4f rss_before_kib=%d rss_after_kib=%d"):format(t_add, t_fb, rss0, rss1)
if with_torch then
  local dir = (arg[0]:match("^(.*)/[^/]*$") or ".")
  local python = os.getenv("PYTHON") or "/usr/bin/python3"
  local cmd = ("OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 '%s' '%s/per_op.py' %d %d %s 2>&1"):format(python, dir, N,
    REPEATS, device.type)
  local p = io.popen(cmd)
  local out = p:read("a")
  p:close()
  io.write(out)
  local ta, tf = out:match("RESULT torch add=(%S+) fwdbwd=(%S+)")
  if ta then
    ta, tf = tonumber(ta), tonumber(tf)
    print(("  ratio PyTorch/accel-lua: a + b %.2fx, fwd+bwd %.2fx (>1: accel-lua faster)"):format(ta / t_add, tf / t_fb))
    result = result .. (" torch_add=%.4f torch_fwdbwd=%.4f"):format(ta, tf)
  else
    print("  (PyTorch side did not run)")
  end
end
print(result)
