-- accel.join: training on uneven inputs under DDP (Accelerate's
-- Accelerator.join_uneven_inputs, PyTorch's torch.distributed.algorithms.Join
-- with DDP as the joinable), as a function-taking method:
--
--   accelerator:join_uneven_inputs({model}, {even_batches = false}, function()
--     for xb, yb in loader:iter() do ... accelerator:backward(loss) ... end
--   end)
--
-- How it works. Inside fn, each forward of the first model (with gradients
-- enabled) is one step: the rank tells the others, in one small all_reduce
-- (sum), that it is still training and whether each model's gradients
-- synchronise in this step. When fn returns the rank has run out of data
-- and joins: it keeps taking part in that all_reduce with zeros, and for
-- every step in which the others synchronise a model it takes part in that
-- model's bucket all-reduces (and find_unused flags) with zero gradients
-- (ddp's Reducer:shadow). When no rank is training any more, the ranks
-- agree on the last rank to join (the largest rank among those that never
-- shadowed a step) and broadcast its parameters and buffers to every rank,
-- so all ranks end with the same model (PyTorch's final model sync).
--
-- Averaging: a bucket's all-reduce divides the sum by the initial world
-- size, so in a step where k of N ranks have data each parameter's gradient
-- is (sum over the k ranks) / N: PyTorch's default
-- divide_by_initial_world_size = True. Optimizer state (momentum, Adam's
-- moments) is not synchronised, as in PyTorch: it stays what each rank had.
--
-- The step's all_reduce also checks that the ranks still training agree on
-- synchronising (gradient accumulation windows that end at different
-- batches would not): one error on every rank instead of a hang.
--
-- Limits (as in PyTorch): inside fn only the gradient synchronisation is
-- shadowed. A rank that calls another collective per step (gather,
-- reduce, gather_for_metrics, wait_for_everyone ...) while another rank has
-- joined gets the collective mismatch error (core/dist/dist.c) on every rank;
-- each model must run forward and backward once per step.
--
-- even_batches: the option (default: the Accelerator's) is set on every
-- prepared data loader for the duration of fn, as Accelerate does; with
-- even_batches = true the loaders pad every rank to the same number of
-- batches and join is not needed (fn just runs). On one process fn runs as
-- it is.
--
-- Without join: when a prepared loader with even_batches = false gives the
-- ranks different numbers of batches, accelerator:backward under DDP raises
-- on every rank (computed locally from the loader's lengths, no
-- collective) naming the counts and join_uneven_inputs, instead of leaving
-- the rank with more batches waiting in the gradient all-reduce.
local accel = require("accel")
local compat = require("accel.compat")
local ddp = require("accel.ddp")
local raise = require("accel.nn.module").raise

local join = {}

-- ---------------------------------------------------------------- arguments

local function model_list(models)
  if type(models) == "table" and getmetatable(models) == nil then return models end
  return {models}
end

local function check_args(models, o, fn)
  if type(o) == "function" and fn == nil then o, fn = nil, o end
  if type(fn) ~= "function" then
    raise("join_uneven_inputs: expected (models, {even_batches = ...}, fn) with fn a function, got %s", type(fn))
  end
  if o ~= nil and (type(o) ~= "table" or getmetatable(o) ~= nil) then
    raise("join_uneven_inputs: the options must be a table {even_batches = ...}, got %s", type(o))
  end
  for k, v in pairs(o or {}) do
    if k ~= "even_batches" then raise("join_uneven_inputs: unknown option '%s' (even_batches)", tostring(k)) end
    if type(v) ~= "boolean" then raise("join_uneven_inputs: even_batches must be a boolean, got %s", type(v)) end
  end
  local list = model_list(models)
  if #list == 0 then raise("join_uneven_inputs: expected a model or a list of models (the joinables)") end
  for i, m in ipairs(list) do
    if type(m) ~= "table" or type(m.parameters) ~= "function" then
      raise("join_uneven_inputs: joinable %d must be a prepared model, got %s", i, type(m))
    end
  end
  return list, o or {}, fn
end

-- ---------------------------------------------------------------- loaders

-- The base (sharded accel.data DataLoader) of a prepared loader, if any.
local function base_of(dl)
  local b = rawget(dl, "base")
  return type(b) == "table" and type(b._count) == "function" and b or nil
end

-- Sets even_batches on every prepared loader; returns a function restoring them.
local function override_even_batches(acc, even)
  local saved = {}
  for _, dl in ipairs(acc._dataloaders) do
    local b = base_of(dl)
    saved[#saved + 1] = {dl, rawget(dl, "even_batches"), b, b and b.even_batches, b and b._pad}
    rawset(dl, "even_batches", even or acc.num_processes == 1)
    if b then
      b.even_batches = even
      b._pad = b.num_processes > 1 and even and not b.drop_last
    end
  end
  return function()
    for _, s in ipairs(saved) do
      rawset(s[1], "even_batches", s[2])
      if s[3] then s[3].even_batches, s[3]._pad = s[4], s[5] end
    end
  end
end

-- Every rank's number of batches per pass of a prepared loader (from its
-- lengths, no collective), or nil when unknown.
function join.batch_counts(dl)
  local b = base_of(dl)
  if not b then return nil end
  local counts = {}
  for r = 0, b.num_processes - 1 do
    local ok, n = pcall(b._count, setmetatable({process_index = r}, {__index = b}))
    if not ok then return nil end
    counts[r + 1] = n
  end
  return counts
end

local function uneven_text(counts)
  local parts = {}
  for r, n in ipairs(counts) do parts[r] = ("rank %d: %d"):format(r - 1, n) end
  return table.concat(parts, ", ")
end

-- Called by Accelerator:backward: the loaders being iterated must give every
-- rank the same number of batches unless the step runs inside join.
function join.check_uneven(acc)
  if acc.num_processes == 1 or rawget(acc, "_joining") or #acc._reducers == 0 then return end
  for _, dl in ipairs(acc.gradient_state.loaders or {}) do
    local counts = rawget(dl, "even_batches") == false and join.batch_counts(dl)
    if counts then
      for r = 2, #counts do
        if counts[r] ~= counts[1] then
          raise("backward: the data loader was prepared with even_batches = false and gives the processes different "
            .. "numbers of batches (%s); under DDP the process that runs out would leave the others waiting in the "
            .. "gradient all-reduce: run the training loop inside accelerator:join_uneven_inputs(models, "
            .. "{even_batches = false}, fn), or keep even_batches = true", uneven_text(counts))
        end
      end
    end
  end
end

-- ---------------------------------------------------------------- join

local function reducers_of(acc, models)
  local out = {}
  for i, m in ipairs(models) do
    local r = nil
    for _, e in ipairs(acc._reducers) do
      if rawequal(e.model, m) then r = e.reducer end
    end
    if not r and #ddp.trainable(m) > 0 then
      raise("join_uneven_inputs: joinable %d is not a prepared model (call accelerator:prepare(model) first)", i)
    end
    out[#out + 1] = r
  end
  return out
end

-- {still training, sync of reducer 1, ...}, summed over the ranks; every
-- rank raises the same error when the training ranks disagree on a sync.
local function agree_step(comm, training, reducers)
  local v = {training and 1 or 0}
  for i, r in ipairs(reducers) do v[i + 1] = training and r:sync() and accel.is_grad_enabled() and 1 or 0 end
  v = comm:all_reduce(accel.tensor(v, {dtype = accel.int64, device = "cpu"}), "sum"):tolist()
  for i = 2, #v do
    if v[i] > 0 and v[i] < v[1] then
      raise("join_uneven_inputs: in this step %d of the %d processes still training synchronise the gradients of "
        .. "model %d and the others do not (gradient accumulation windows that end at different batches, e.g. at "
        .. "each process's last batch); give every process a whole number of accumulation windows, or "
        .. "gradient_accumulation_steps = 1", v[i], v[1], i - 1)
    end
  end
  return v
end

-- Each forward of model (with gradients enabled or not) announces a step.
local function announce_steps(model, on_forward)
  local orig = model.forward
  model.forward = function(self, ...)
    on_forward()
    return orig(self, ...)
  end
  return function()
    model.forward = nil -- an nn.Module falls back to its class's forward
    if model.forward ~= orig then model.forward = orig end
  end
end

-- The joined rank's loop; returns whether it never shadowed a step.
local function shadow_until_all_joined(comm, reducers)
  local last_joiner = true
  while true do
    local v = agree_step(comm, false, reducers)
    if v[1] == 0 then return last_joiner end
    for i, r in ipairs(reducers) do
      if v[i + 1] > 0 then r:shadow() end
    end
    last_joiner = false
  end
end

local function sync_final_models(acc, models, last_joiner)
  local comm = acc.state.comm
  local candidate = last_joiner and comm.rank or -1
  local src = comm:all_reduce(accel.tensor({candidate}, {dtype = accel.int64, device = "cpu"}), "max"):item()
  for _, m in ipairs(models) do ddp.broadcast_model(m, src, acc.ddp_kwargs.broadcast_buffers) end
end

local function run_joined(acc, models, fn)
  local comm = acc.state.comm
  local reducers = reducers_of(acc, models)
  local restore = announce_steps(models[1], function() agree_step(comm, true, reducers) end)
  rawset(acc, "_joining", true)
  local res = compat.pack(pcall(fn))
  restore()
  if not res[1] then
    rawset(acc, "_joining", nil)
    error(res[2], 0)
  end
  local ok, err = pcall(function() sync_final_models(acc, models, shadow_until_all_joined(comm, reducers)) end)
  rawset(acc, "_joining", nil)
  if not ok then error(err, 0) end
  return compat.unpack(res, 2, res.n)
end

-- join_uneven_inputs(models, {even_batches =}, fn) -> fn's results.
function join.join_uneven_inputs(acc, models, o, fn)
  models, o, fn = check_args(models, o, fn)
  local even = o.even_batches
  if even == nil then even = acc.even_batches end
  local restore = o.even_batches ~= nil and override_even_batches(acc, even) or function() end
  local res
  if acc.num_processes == 1 or even then
    res = compat.pack(pcall(fn))
  else
    res = compat.pack(pcall(run_joined, acc, models, fn))
  end
  restore()
  if not res[1] then error(res[2], 0) end
  return compat.unpack(res, 2, res.n)
end

return join
