-- dist_split.lua: sub-communicators (core/dist/dist.h dist_split, accel.dist
-- groups), run by tests/lua/dist_split_test.lua under
--   ACCEL_LUA_TEST_RANKS_PER_NODE=2 mpirun -np 4 accel-lua dist_split.lua fake
-- (4 ranks as 2 "machines" x 2: nodes {0, 1} and {2, 3}, cross-node
-- groups {0, 2} and {1, 3}) or `mpirun -np 2 accel-lua dist_split.lua real`
-- (2 ranks on this one machine, grouped by host name: one node of 2, cross
-- groups of 1). Every collective on the node, cross-node and split groups
-- against closed forms (each rank holds r + 1, r its world rank); a shape
-- mismatch on the node group names both numberings, the same error on the
-- two ranks concerned while the other node's matching call succeeds; the
-- counters of a group count only its calls; a freed group is refused.
-- Prints "ok rank R: C checks".
local accel = require("accel")
local dist = accel.dist

local mode = arg[1]
local r, N = dist.get_rank(), dist.get_world_size()
local rc = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/rank_checks.lua")(r)
local check, expect = rc.check, rc.expect

local k = mode == "fake" and 2 or N -- ranks per machine
local first = r - r % k             -- the first world rank of this machine
local node, cross = dist.node_group(), dist.cross_node_group()
local before = dist.counters().total
local again = dist.node_group()
check(dist.counters().total == before and again:info().rank == node:info().rank, "node_group is not cached")

-- ---- membership ----
local ni, ci = node:info(), cross:info()
check(ni.label == "node" and ni.size == k and ni.rank == r % k, "node group %s rank %d of %d", ni.label, ni.rank, ni.size)
for q = 0, k - 1 do check(ni.world_ranks[q + 1] == first + q, "node member %d is world rank %s", q, ni.world_ranks[q + 1]) end
check(ci.size == N / k and ci.rank == r // k, "cross group rank %d of %d", ci.rank, ci.size)
for q = 0, ci.size - 1 do
  check(ci.world_ranks[q + 1] == q * k + r % k, "cross member %d is world rank %s", q, ci.world_ranks[q + 1])
end
check(dist.get_rank(node) == r % k and dist.get_world_size(cross) == N / k, "get_rank / get_world_size of a group")

-- ---- collectives against closed forms ----
local function close(t, want, what)
  local got = t:double():tolist()
  if type(got) ~= "table" then got = {got} end
  check(#got == #want, "%s: %d values, expected %d", what, #got, #want)
  for i = 1, #want do check(math.abs(got[i] - want[i]) < 1e-6, "%s[%d] = %s, expected %s", what, i, got[i], want[i]) end
end
local function members(info) return info.world_ranks end
local function sum_of(info)
  local s = 0
  for _, w in ipairs(members(info)) do s = s + w + 1 end
  return s
end
local mine = r + 1.0

for _, g in ipairs({{node, ni, "node"}, {cross, ci, "cross"}}) do
  local grp, info, name = g[1], g[2], g[3]
  local s = sum_of(info)
  close(dist.all_reduce(accel.full({3}, mine), "sum", {group = grp}), {s, s, s}, name .. " all_reduce sum")
  close(dist.all_reduce(accel.full({2}, mine), "avg", {group = grp}), {s / info.size, s / info.size}, name .. " avg")
  local hi = 0
  for _, w in ipairs(members(info)) do hi = math.max(hi, w + 1) end
  close(dist.all_reduce(accel.full({1}, mine), "max", {group = grp}), {hi}, name .. " max")
  local gathered = {}
  for q, w in ipairs(members(info)) do gathered[2 * q - 1], gathered[2 * q] = w + 1, w + 1 end
  close(dist.all_gather(accel.full({2}, mine), {group = grp}), gathered, name .. " all_gather")
  -- reduce_scatter: input [size * 2] of (world rank + 1) * (index + 1): this rank's slice of the sum
  local inp = accel.arange(1, 2 * info.size + 1):float() * mine
  local rs = {}
  for j = 1, 2 do rs[j] = s * (info.rank * 2 + j) end
  close(dist.reduce_scatter(inp, "sum", {group = grp}), rs, name .. " reduce_scatter")
  -- broadcast from the group's last rank
  local src = info.size - 1
  close(dist.broadcast(accel.full({2}, mine), src, {group = grp}),
    {members(info)[src + 1] + 1, members(info)[src + 1] + 1}, name .. " broadcast")
  -- all_gather_v: group rank q contributes q + 1 rows of its value
  local v, counts = dist.all_gather_v(accel.full({info.rank + 1}, mine), {group = grp})
  local want = {}
  for q, w in ipairs(members(info)) do
    check(counts[q] == q, "%s all_gather_v count %d = %s", name, q, counts[q])
    for _ = 1, q do want[#want + 1] = w + 1 end
  end
  close(v, want, name .. " all_gather_v")
  local h = dist.all_reduce(accel.full({2}, mine), "sum", {group = grp, async_op = true})
  close(h:wait(), {s, s}, name .. " async all_reduce")
  dist.barrier({group = grp})
end

-- ---- split_group: even and odd world ranks; a split of a group ----
local parity = dist.split_group(r % 2)
local pi = parity:info()
check(pi.label == "split" and pi.size == N / 2, "parity group of %d", pi.size)
local ps = 0
for q = r % 2, N - 1, 2 do ps = ps + q + 1 end
close(dist.all_reduce(accel.full({1}, mine), "sum", {group = parity}), {ps}, "parity all_reduce")
-- key reverses the order: the highest world rank becomes rank 0
local rev = dist.split_group(0, N - r)
check(rev:info().rank == N - 1 - r and rev:info().world_ranks[1] == N - 1, "key orders the members")
local solo = dist.split_group(0, 0, {group = node}) -- a split of the node group: the same members
check(solo:info().size == k, "a split of the node group has %d members", solo:info().size)
close(dist.all_reduce(accel.full({1}, mine), "sum", {group = solo}), {sum_of(ni)}, "split-of-node all_reduce")
rev:free()
solo:free()

-- ---- a shape mismatch on the node group: the last machine's second rank differs ----
if mode == "fake" then
  if first == 2 then
    expect("all_gather on the node communicator: rank 0 (world rank 2) has float32 [2], rank 1 (world rank 3) has "
      .. "float32 [3]", dist.all_gather, accel.ones(r == 3 and 3 or 2), {group = node})
  else
    close(dist.all_gather(accel.ones(2), {group = node}), {1, 1, 1, 1}, "the other node's matching all_gather")
  end
  expect("collective mismatch on the node communicator: rank 0 (world rank " .. first .. ") called all_reduce, rank 1 "
    .. "(world rank " .. first + 1 .. ") called barrier (every rank must issue the same collectives in the same order)",
    function()
      if r % 2 == 1 then dist.barrier({group = node}) else dist.all_reduce(accel.ones(1), {group = node}) end
    end)
end

-- ---- counters: a group's own calls ----
dist.reset_counters()
dist.all_reduce(accel.ones(2), {group = node})
dist.all_reduce(accel.ones(2), {group = node})
dist.barrier({group = cross})
local nc, cc, all = dist.counters(node), dist.counters(cross), dist.counters()
check(nc.all_reduce == 2 and nc.barrier == 0, "node counters: all_reduce %d barrier %d", nc.all_reduce, nc.barrier)
check(cc.all_reduce == 0 and cc.barrier == 1, "cross counters: all_reduce %d barrier %d", cc.all_reduce, cc.barrier)
check(all.all_reduce == 2 and all.barrier == 1, "process counters: all_reduce %d barrier %d", all.all_reduce, all.barrier)

-- ---- freed groups; the world's groups cannot be freed ----
parity:free()
expect("dist: the group was freed", dist.all_reduce, accel.ones(1), {group = parity})
node:free() -- not owned: a no-op
close(dist.all_reduce(accel.ones(1), {group = node}), {k}, "the node group after free()")
dist.barrier()
print(("ok rank %d: %d checks"):format(r, rc.count))
