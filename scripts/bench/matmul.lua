-- matmul.lua: GEMM throughput of accel.matmul, single-threaded, against
-- oneDNN called directly (scripts/bench/matmul.c).
-- Times `a:matmul(b)` for n x n float32 and bfloat16 tensors
-- (a, b = accel.randn(n, n):to(accel.bfloat16)) at n = 256 512 1024 2048;
-- GFLOP/s = 2 n^3 / best time (warm-up call first, then up to 50 runs or
-- ~0.5 s; the best run, as matmul.c does: robust on a shared machine).
--   OMP_NUM_THREADS=1 build/accel-lua scripts/bench/matmul.lua [--direct BIN] [n ...]
-- BIN is matmul.c built (gcc -O2 -o BIN scripts/bench/matmul.c -ldnnl); with it
-- the direct figures and the accel/direct ratios are printed as well.
-- One line per n: "RESULT matmul n=<n> f32=<GF/s> bf16=<GF/s>
-- [direct_f32=<GF/s> direct_bf16=<GF/s> direct_bf16_widened=<GF/s>]".
local accel = require("accel")

local sizes, direct = {}, nil
local i = 1
while i <= #arg do
  if arg[i] == "--direct" then
    direct = arg[i + 1]
    i = i + 1
  else
    sizes[#sizes + 1] = math.tointeger(tonumber(arg[i]))
  end
  i = i + 1
end
if #sizes == 0 then sizes = {256, 512, 1024, 2048} end

accel.num_threads(1)
accel.set_seed(0)

-- best seconds per call of fn (one warm-up call; 3..50 runs, ~0.5 s)
local function time_best(fn)
  fn()
  local runs, start = {}, accel.clock()
  while #runs < 50 and (#runs < 3 or accel.clock() - start < 0.5) do
    local t0 = accel.clock()
    fn()
    runs[#runs + 1] = accel.clock() - t0
  end
  return math.min(table.unpack(runs))
end

-- direct oneDNN figures, n -> {sgemm=, bf16=, bf16_widened=}
local ref = {}
if direct then
  local ns = {}
  for k, n in ipairs(sizes) do ns[k] = tostring(n) end
  local p = io.popen(("OMP_NUM_THREADS=1 '%s' %s"):format(direct, table.concat(ns, " ")))
  for line in p:lines() do
    local n, f, b, bw = line:match("^RESULT direct n=(%d+) sgemm=(%S+) bf16=(%S+) bf16_bf16=%S+ bf16_widened=(%S+)")
    if n then ref[tonumber(n)] = {f32 = tonumber(f), bf16 = tonumber(b), wide = tonumber(bw)} end
  end
  p:close()
end

print(("accel.matmul, n x n, %d thread (GFLOP/s; direct = oneDNN called from C)"):format(accel.num_threads()))
local hdr = ("  %5s %9s %9s"):format("n", "f32", "bf16")
if direct then
  hdr = hdr .. ("  %11s %11s %13s %9s %9s"):format("direct f32", "direct bf16", "direct widen", "f32 ratio", "bf16 ratio")
end
print(hdr)
local results = {}
for _, n in ipairs(sizes) do
  local flop = 2.0 * n * n * n
  local a, b = accel.randn(n, n), accel.randn(n, n)
  local t32 = time_best(function() return a:matmul(b) end)
  local a16, b16 = a:to(accel.bfloat16), b:to(accel.bfloat16)
  local c16 = a16:matmul(b16)
  assert(c16.dtype == accel.bfloat16, "bf16 matmul did not return bfloat16")
  local t16 = time_best(function() return a16:matmul(b16) end)
  local g32, g16 = flop / t32 * 1e-9, flop / t16 * 1e-9
  local line = ("  %5d %9.2f %9.2f"):format(n, g32, g16)
  local res = ("RESULT matmul n=%d f32=%.2f bf16=%.2f"):format(n, g32, g16)
  local r = ref[n]
  if r then
    -- bf16: compare with oneDNN's bf16 matmul where it exists, else with
    -- the widen-to-f32 + sgemm path accel falls back to
    local rb = r.bf16 > 0 and r.bf16 or r.wide
    line = line .. ("  %11.2f %11s %13.2f %9.2f %9.2f"):format(r.f32, r.bf16 > 0 and ("%.2f"):format(r.bf16) or "n/a",
      r.wide, g32 / r.f32, g16 / rb)
    res = res .. (" direct_f32=%.2f direct_bf16=%.2f direct_bf16_widened=%.2f"):format(r.f32, r.bf16, r.wide)
  end
  print(line)
  results[#results + 1] = res
  a, b, a16, b16, c16 = nil, nil, nil, nil, nil
  collectgarbage()
end
if direct and next(ref) and select(2, next(ref)).bf16 == 0 then
  print("  (this oneDNN has no bf16 matmul on this CPU: bf16 ratio is against widen-to-f32 + dnnl_sgemm)")
end
for _, r in ipairs(results) do print(r) end
