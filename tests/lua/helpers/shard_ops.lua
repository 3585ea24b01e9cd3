-- shard_ops.lua: the engine's other operations on N ranks, for each stage
-- (run by shard_test.lua on 2 and 3 ranks):
--   * unscale_(factor): found_inf is true on every rank when only the last
--     rank's loss (hence gradient) is infinite, and (stages 2-3) when one
--     element of the last rank's gradient shard is; false on every rank
--     after a clean backward; the gradient is multiplied by factor (the
--     total norm halves for factor 0.5);
--   * shard_state(): the index covers every element of every parameter and
--     optimizer state exactly once over the ranks, and this rank's shards
--     hold exactly the elements the index gives it (compared with the
--     gathered full tensors);
--   * full_state_dict() equals the parameters after close() (gathered);
--   * offload_optimizer = "cpu" is reported by the engine;
--   * zero_grad({set_to_none = false}) after a backward leaves stage 1's
--     full .grad in place as zeros (as torch's optimizer), and no .grad at
--     stages 2-3 (they keep none);
--   * clip_grad_norm_ with norm_type -inf (a min all-reduce) and -1 (a sum
--     of |g|^-1) from the shards equals nn.utils.clip_grad_norm_'s over
--     stage 1's full .grad, to float32 rounding.
-- Prints "ok rank R: N checks".
local accel = require("accel")
local nn, optim, dist = accel.nn, accel.optim, accel.dist
local rank, world = dist.get_rank(), dist.get_world_size()
local checks = 0

local function ensure(cond, fmt, ...)
  if not cond then error(("rank %d: " .. fmt):format(rank, ...), 2) end
  checks = checks + 1
end

local function model_and_opt()
  accel.set_seed(5)
  local m = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3), nn.Tanh(), nn.Linear(3, 2)) -- 25+18+8 = 51
  return m, optim.Adam(m:parameters(), {lr = 1e-2})
end

local function backward(m, x, scale)
  local loss = m(x):pow(2):mean()
  if scale then loss = loss * scale end
  loss:backward()
end

local function check_unscale(eng, m, x, stage)
  backward(m, x, rank == world - 1 and math.huge or 1.0)
  ensure(eng:unscale_(0.5) == true, "stage %d: an inf gradient on rank %d only was not found here", stage, world - 1)
  eng:zero_grad()
  backward(m, x)
  local before = eng:clip_grad_norm_(1e9):item()
  ensure(eng:unscale_(0.5) == false, "stage %d: found_inf after a clean backward", stage)
  local after = eng:clip_grad_norm_(1e9):item()
  ensure(before > 0 and math.abs(after - 0.5 * before) <= 1e-6 * before,
    "stage %d: unscale_(0.5) changed the norm from %g to %g", stage, before, after)
  if stage >= 2 then -- an inf in one element of the last rank's gradient shard only
    if rank == world - 1 then eng._c:shard(1, -1):narrow(1, 1, 1):fill_(math.huge) end
    ensure(eng:unscale_(1.0) == true, "stage %d: an inf in rank %d's gradient shard was not found here", stage,
      world - 1)
    eng:zero_grad()
    backward(m, x)
  end
  eng:step()
  eng:zero_grad()
end

local function check_zero_grad_kept(eng, m, x, stage)
  backward(m, x)
  eng.optimizer:zero_grad({set_to_none = false})
  for name, p in m:named_parameters() do
    if stage == 1 then
      ensure(p.grad ~= nil and p.grad:abs():sum():item() == 0, "stage 1: %s's .grad is not zeros", name)
    else
      ensure(p.grad == nil, "stage %d: %s has a .grad", stage, name)
    end
  end
end

local neg_ref -- nn.utils.clip_grad_norm_'s -inf and -1 norms of stage 1's full gradients

-- The engine's negative-order norms against neg_ref (every stage starts
-- from the same model and batch); max_norm 1e9 leaves the gradients alone.
local function check_negative_norms(eng, m, x, stage)
  backward(m, x)
  local got = {eng:clip_grad_norm_(1e9, -math.huge):item(), eng:clip_grad_norm_(1e9, -1):item()}
  if stage == 1 then -- (the clip above finalized the reduced .grad every rank holds)
    local ps = m:parameters()
    neg_ref = {nn.utils.clip_grad_norm_(ps, 1e9, -math.huge):item(), nn.utils.clip_grad_norm_(ps, 1e9, -1):item()}
  end
  for i, nt in ipairs({"-inf", "-1"}) do
    ensure(got[i] > 0 and math.abs(got[i] - neg_ref[i]) <= 1e-5 * neg_ref[i],
      "stage %d: norm_type %s from the shards is %g, over the full gradients %g", stage, nt, got[i], neg_ref[i])
  end
  eng:zero_grad()
end

-- The index entries of one (parameter, state) pair cover [0, numel) once.
local function check_cover(entries, numel, what)
  table.sort(entries, function(a, b) return a.begin < b.begin end)
  local pos = 0
  for _, e in ipairs(entries) do
    if e.begin ~= pos then return false end
    pos = pos + e.len
  end
  ensure(pos == numel, "%s: the index covers %d of %d elements", what, pos, numel)
end

local function check_shard_state(eng, stage)
  local st, full = eng:shard_state(), eng:full_state_dict()
  ensure(st.rank == rank and st.world == world and st.stage == stage, "stage %d: shard_state header", stage)
  local whole = {} -- [name .. "/" .. state] = full tensor, gathered in the same order on every rank
  for i, name in ipairs(eng.names) do
    whole[name .. "/param"] = full[name]
    for k, n in ipairs(st.state_names) do whole[name .. "/" .. n] = eng._c:full_tensor(i, k) end
  end
  local by, numel = {}, {}
  for _, u in ipairs(st.units) do
    for _, p in ipairs(u.params) do numel[p.name] = p.numel end
  end
  for _, e in ipairs(st.index) do
    local key = e.param .. "/" .. e.state
    by[key] = by[key] or {}
    table.insert(by[key], e)
    if e.rank == rank then
      local mine = st.tensors[("unit%d.%s"):format(e.unit, e.state)]:narrow(1, e.at + 1, e.len)
      ensure(mine:equal(whole[key]:reshape({-1}):narrow(1, e.begin + 1, e.len)), "stage %d: %s elements %d..%d",
        stage, key, e.begin, e.begin + e.len)
    end
  end
  for key, entries in pairs(by) do check_cover(entries, numel[key:match("^(.-)/")], key) end
  return full
end

for stage = 1, 3 do
  local m, opt = model_and_opt()
  local eng = accel.shard.Engine(m, opt, {stage = stage, wrap = {m[1], m[3]}, offload_optimizer = "cpu"})
  ensure(eng._c:info().offload_optimizer == true, "offload_optimizer not recorded")
  local x = accel.randn(3, 4):add(rank)
  check_negative_norms(eng, m, x, stage)
  check_unscale(eng, m, x, stage)
  check_zero_grad_kept(eng, m, x, stage)
  backward(m, x)
  eng:step()
  local full = check_shard_state(eng, stage)
  eng:close()
  for name, p in m:named_parameters() do
    ensure(p:equal(full[name]), "stage %d: %s after close differs from full_state_dict", stage, name)
  end
end
print(("ok rank %d: %d checks"):format(rank, checks))
