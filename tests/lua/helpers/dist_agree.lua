-- dist_agree.lua: run by tests/lua/dist_mpi_test.lua under
-- `mpirun -np N accel-lua dist_agree.lua N` (2 or 3 ranks). The last rank
-- passes a collective something that differs from what the others pass
-- (shape, dtype, op, root, the collective itself); every rank must get the
-- same one error, naming both ranks and what each has, and the job must
-- stay usable afterwards. The expected texts are written out here. Each
-- rank prints "ok rank R: C checks" at the end, or raises on the first
-- difference.
local accel = require("accel")
local dist = accel.dist

local r, N = dist.get_rank(), dist.get_world_size()
local odd = r == N - 1 -- the rank that differs
local last = N - 1
local rc = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/rank_checks.lua")(r)
local expect = rc.expect

local function f32(...) return accel.ones(...) end

expect(("all_reduce: rank 0 has float32 [2, 3], rank %d has float32 [3, 2]"):format(last),
  dist.all_reduce, odd and f32(3, 2) or f32(2, 3))
expect(("all_reduce: rank 0 has float32 [4], rank %d has float64 [4]"):format(last),
  dist.all_reduce, odd and f32(4):double() or f32(4))
expect(("all_reduce: rank 0 reduces with sum, rank %d with max"):format(last),
  dist.all_reduce, f32(4), odd and "max" or "sum")
expect(("broadcast: rank 0 has float32 [3], rank %d has float32 [5]"):format(last),
  dist.broadcast, odd and f32(5) or f32(3), 0)
expect(("broadcast: rank 0 broadcasts from rank 0, rank %d from rank 1"):format(last),
  dist.broadcast, f32(3), odd and 1 or 0)
expect(("all_gather: rank 0 has float32 [2], rank %d has float32 [3]"):format(last),
  dist.all_gather, odd and f32(3) or f32(2))
expect(("all_gather_v: rank 0 has float32 [3], rank %d has float32 [3, 1] (the dtype and every dim but the first "
  .. "must agree)"):format(last), dist.all_gather_v, odd and f32(3, 1) or f32(3))
expect(("reduce_scatter: rank 0 has float32 [%d], rank %d has float32 [%d]"):format(N * 2, last, N * 3),
  dist.reduce_scatter, odd and f32(N * 3) or f32(N * 2))
expect(("collective mismatch: rank 0 called all_reduce, rank %d called barrier (every rank must issue the same "
  .. "collectives in the same order)"):format(last), function()
  if odd then dist.barrier() else dist.all_reduce(f32(2)) end
end)
expect(("collective mismatch: rank 0 called all_gather_bytes, rank %d called broadcast_bytes (every rank must issue "
  .. "the same collectives in the same order)"):format(last), function()
  if odd then dist.broadcast_bytes("x", 0) else dist.all_gather_bytes("x") end
end)
-- the non-blocking form checks before it starts
expect(("all_reduce: rank 0 has float32 [2], rank %d has float32 [1, 2]"):format(last),
  dist.all_reduce, odd and f32(1, 2) or f32(2), {async_op = true})

-- the Accelerator's gather (all_gather_v of every rank's tensor) and reduce: the op named first
local acc = accel.Accelerator()
expect(("gather: all_gather_v: rank 0 has float32 [3], rank %d has float32 [3, 1] (the dtype and every dim but the "
  .. "first must agree)"):format(last), acc.gather, acc, odd and f32(3, 1) or f32(3))
expect(("reduce: all_reduce: rank 0 has float32 [2, 3], rank %d has float32 [3, 2]"):format(last),
  acc.reduce, acc, odd and f32(3, 2) or f32(2, 3), "sum")

-- after all of that the ranks are still in step
local t = accel.full({3}, r + 1.0)
dist.all_reduce(t)
rc.check(t:sum():item() == 3 * N * (N + 1) / 2, "all_reduce after the mismatches")
local g = acc:gather(accel.full({r + 1}, r))
rc.check(g:size(1) == N * (N + 1) / 2, "gather of different first dims after the mismatches")

print(("ok rank %d: %d checks"):format(r, rc.count))
