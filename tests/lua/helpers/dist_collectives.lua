-- dist_collectives.lua: run by tests/lua/dist_mpi_test.lua under
-- `mpirun -np N accel-lua dist_collectives.lua N`. Every rank checks every
-- collective of accel.dist against closed forms of rank-dependent inputs,
-- then prints "ok rank R"; any mismatch raises an error (the job fails).
local accel = require("accel")
local dist = accel.dist

local N = tonumber(arg[1])
local r = dist.get_rank()
local n = dist.get_world_size()
local checks = 0

local function check(cond, fmt, ...)
  checks = checks + 1
  if not cond then error(("rank %d: " .. fmt):format(r, ...), 2) end
end

-- t's values (any shape, flattened) equal the list `want` exactly.
local function same(t, want, what)
  local got = t:reshape(-1):double():tolist()
  check(#got == #want, "%s: %d values, expected %d", what, #got, #want)
  for i = 1, #want do
    check(got[i] == want[i], "%s: value %d is %s, expected %s", what, i, tostring(got[i]), tostring(want[i]))
  end
end

local function list(len, f)
  local l = {}
  for i = 1, len do l[i] = f(i) end
  return l
end

-- ---- the process group ----
check(dist.get_backend() == "mpi", "backend %s", dist.get_backend())
check(n == N, "world size %d, launched %d", n, N)
check(r == tonumber(os.getenv("OMPI_COMM_WORLD_RANK")), "rank %d differs from mpirun's", r)
check(dist.get_local_rank() == r and dist.get_local_world_size() == n, "local rank %d / %d on one machine",
  dist.get_local_rank(), dist.get_local_world_size())
if not os.getenv("ACCEL_LUA_COLLECTIVE_TIMEOUT") then
  check(dist.get_timeout() == 300, "default timeout %s", tostring(dist.get_timeout()))
end
dist.reset_counters()

-- ---- all_reduce: rank r holds (r + 1) * i at position i ----
local tri = n * (n + 1) / 2
local expect = {
  sum = function(i) return i * tri end,
  avg = function(i) return i * (n + 1) / 2 end,
  max = function(i) return i * n end,
  min = function(i) return i end,
}
local dtypes = {accel.float32, accel.float64, accel.bfloat16, accel.float16, accel.int64, accel.int32, accel.uint8}
local reduces = 0
for _, dt in ipairs(dtypes) do
  for _, op in ipairs({"sum", "avg", "max", "min"}) do
    local is_float = dt == accel.float32 or dt == accel.float64 or dt == accel.bfloat16 or dt == accel.float16
    if op ~= "avg" or is_float then
      local t = accel.tensor(list(5, function(i) return (r + 1) * i end), {dtype = dt})
      local out = dist.all_reduce(t, op)
      reduces = reduces + 1
      check(rawequal(out, t), "all_reduce returns its tensor")
      same(t, list(5, expect[op]), ("all_reduce %s %s"):format(op, tostring(dt)))
    end
  end
end
-- bool: sum / max = or, min = and (rank 0 holds {true, false}, the others {false, false})
local b = accel.tensor({r == 0, false})
dist.all_reduce(b, "sum")
same(b, {1, 0}, "all_reduce bool sum")
b = accel.tensor({true, r == 0})
dist.all_reduce(b, "min")
same(b, {1, 0}, "all_reduce bool min")
reduces = reduces + 2
-- a large buffer (segmented algorithms, shared-memory single copy)
local big = accel.arange(300000):float() * (r + 1)
dist.all_reduce(big)
check(big:equal(accel.arange(300000):float() * tri), "all_reduce of 300000 floats")
reduces = reduces + 1
-- a 2-d tensor and "mean" as avg
local m = accel.full({2, 3}, r + 1.0)
dist.all_reduce(m, "mean")
same(m, list(6, function() return (n + 1) / 2 end), "all_reduce mean [2, 3]")
reduces = reduces + 1

-- ---- reduce_scatter: input [2n, 3] with row j holding (r + 1) * j ----
local rows = (accel.arange(2 * n):float():view(2 * n, 1) * (r + 1)):expand(2 * n, 3)
local part = dist.reduce_scatter(rows, "sum") -- non-contiguous input is copied
check(part:dim() == 2 and part:size(1) == 2 and part:size(2) == 3, "reduce_scatter shape %s", tostring(part.shape))
same(part, list(6, function(i) return (2 * r + math.floor((i - 1) / 3)) * tri end), "reduce_scatter sum")
local into = accel.zeros(2, 3, {dtype = accel.float64})
dist.reduce_scatter(rows:double():contiguous(), "avg", {out = into})
same(into, list(6, function(i) return (2 * r + math.floor((i - 1) / 3)) * (n + 1) / 2 end), "reduce_scatter avg out=")
local hp = dist.reduce_scatter(accel.arange(n):bfloat16() + r, "max")
same(hp, {r + n - 1}, "reduce_scatter max bf16")

-- ---- all_gather ----
local g = dist.all_gather(accel.full({2, 3}, r, {dtype = accel.int64}))
check(g:size(1) == 2 * n and g:size(2) == 3, "all_gather shape %s", tostring(g.shape))
same(g, list(6 * n, function(i) return math.floor((i - 1) / 6) end), "all_gather int64")
same(dist.all_gather(accel.tensor(r * 1.5)), list(n, function(i) return (i - 1) * 1.5 end), "all_gather 0-dim")
local gout = accel.empty(n, 2, {dtype = accel.float16})
local gret = dist.all_gather(accel.tensor({{r, -r}}, {dtype = accel.float16}), {out = gout})
check(rawequal(gret, gout), "all_gather returns out=")
same(gout, list(2 * n, function(i) local k = math.floor((i - 1) / 2) return i % 2 == 1 and k or -k end), "all_gather out=")
same(dist.all_gather(accel.tensor({r % 2 == 0})), list(n, function(i) return (i - 1) % 2 == 0 and 1 or 0 end), "all_gather bool")

-- ---- all_gather_v: rank k contributes k + 1 rows (then k rows: rank 0 none) of value k ----
local function gathered(len)
  local want = {}
  for k = 0, n - 1 do
    for _ = 1, len(k) * 2 do want[#want + 1] = k end
  end
  return want
end
for _, len in ipairs({function(k) return k + 1 end, function(k) return k end}) do
  local v, counts = dist.all_gather_v(accel.full({len(r), 2}, r))
  check(#counts == n, "all_gather_v: %d counts", #counts)
  for k = 0, n - 1 do check(counts[k + 1] == len(k), "all_gather_v: count of rank %d is %d", k, counts[k + 1]) end
  same(v, gathered(len), "all_gather_v")
end

-- ---- broadcast from the last rank ----
local bc = accel.full({4}, r, {dtype = accel.int32})
check(rawequal(dist.broadcast(bc, n - 1), bc), "broadcast returns its tensor")
same(bc, {n - 1, n - 1, n - 1, n - 1}, "broadcast int32")
local bf = accel.full({3}, r + 0.5, {dtype = accel.bfloat16})
dist.broadcast(bf, {src = 0})
same(bf, {0.5, 0.5, 0.5}, "broadcast bf16 {src=0}")
dist.barrier()

-- ---- byte strings: different lengths, embedded zeros, an empty one ----
local mine = r == 0 and "" or (string.rep("x", r) .. "\0" .. r)
local all = dist.all_gather_bytes(mine)
check(#all == n, "all_gather_bytes: %d strings", #all)
for k = 0, n - 1 do
  local want = k == 0 and "" or (string.rep("x", k) .. "\0" .. k)
  check(all[k + 1] == want, "all_gather_bytes: string of rank %d is %q", k, all[k + 1])
end
local msg = dist.broadcast_bytes(r == n - 1 and "from the last\0rank" or nil, n - 1)
check(msg == "from the last\0rank", "broadcast_bytes: got %q", msg)

-- ---- counters (every call above, blocking, counted once per call) ----
local calls, bytes = dist.counters()
check(calls.all_reduce == reduces, "all_reduce calls %d, expected %d", calls.all_reduce, reduces)
check(calls.reduce_scatter == 3 and calls.all_gather == 4 and calls.all_gather_v == 2, "rs %d ag %d agv %d",
  calls.reduce_scatter, calls.all_gather, calls.all_gather_v)
check(calls.broadcast == 2 and calls.barrier == 1, "broadcast %d barrier %d", calls.broadcast, calls.barrier)
check(calls.all_gather_bytes == 1 and calls.broadcast_bytes == 1, "bytes helpers %d %d",
  calls.all_gather_bytes, calls.broadcast_bytes)
check(calls.total == reduces + 14, "total %d", calls.total)
check(bytes.barrier == 0 and bytes.broadcast == 4 * 4 + 3 * 2, "broadcast bytes %d", bytes.broadcast)

-- ---- non-blocking: all started, compute overlaps, waited in reverse order ----
dist.reset_counters()
local a = accel.full({1000}, r + 1.0)
local ga = accel.full({3}, r)
local bb = accel.full({5}, r * 1.0)
local rs = accel.arange(n * 2):float() * (r + 1)
local h = {
  dist.all_reduce(a, "avg", {async_op = true}),
  dist.all_gather(ga, {async_op = true}),
  dist.broadcast(bb, 0, {async_op = true}),
  dist.reduce_scatter(rs, "sum", {async_op = true}),
  dist.all_gather_v(accel.full({r + 1, 2}, r), {async_op = true}),
  dist.barrier({async_op = true}),
  dist.all_reduce(accel.tensor({r + 1.0}), "max", {async_op = true}), -- fewer elements than ranks
  dist.all_reduce(accel.arange(300000):float() * (r + 1), "sum", {async_op = true}),
}
local x = accel.randn(64, 64)
for _ = 1, 20 do
  x = accel.matmul(x, x):tanh()
  dist.progress()
end
for i = #h, 1, -1 do
  local res = {h[i]:wait()}
  check(h[i]:test() == true and h[i]:is_completed() == true, "handle %d completed after wait", i)
  if i == 5 then
    same(res[1], gathered(function(k) return k + 1 end), "iall_gather_v")
    check(type(res[2]) == "table" and res[2][n] == n, "iall_gather_v counts")
  elseif i == 6 then
    check(#res == 0, "ibarrier wait returns nothing")
  elseif i == 7 then
    same(res[1], {n}, "iall_reduce max of one element")
  elseif i == 8 then
    check(res[1]:equal(accel.arange(300000):float() * tri), "iall_reduce of 300000 floats")
  else
    check(#res == 1, "handle %d returns its tensor", i)
  end
end
same(a, list(1000, function() return (n + 1) / 2 end), "iall_reduce avg")
same(h[2]:wait(), list(3 * n, function(i) return math.floor((i - 1) / 3) end), "iall_gather")
check(rawequal(h[3]:wait(), bb), "ibroadcast returns its tensor")
same(bb, {0, 0, 0, 0, 0}, "ibroadcast")
same(h[4]:wait(), {2 * r * tri, (2 * r + 1) * tri}, "ireduce_scatter")
calls = dist.counters()
check(calls.total == 8 and calls.all_reduce == 3 and calls.barrier == 1, "async calls counted once: %d", calls.total)

-- ---- a handle collected while in flight completes at exit; compute-only steps count nothing ----
dist.reset_counters()
do local _ = dist.all_reduce(accel.ones(10), "sum", {async_op = true}) end
collectgarbage()
collectgarbage()
for _ = 1, 5 do x = (x * 0.5):tanh() end
calls = dist.counters()
check(calls.total == 1, "compute without collectives counted %d calls", calls.total - 1)
dist.barrier()

io.write(("ok rank %d: %d checks\n"):format(r, checks))
