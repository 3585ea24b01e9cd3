-- accel.data.loader: DataLoader. The semantics (order, epochs, resume,
-- sharding) are written down at the top of accel/data/init.lua.
--
-- A pass over local batches j = 0, 1, ... of epoch e: the global order is
-- a permutation of 0..n-1 that depends only on (seed, e) (the identity
-- without shuffle); a pass covers positions [offset, n) of it (offset 0, or
-- the saved position it resumes, or the batches skip_first_batches skips),
-- dealt to the shards by the layout's rules from offset on; local batch j
-- covers positions [start, stop), taken modulo n where padding wraps to the
-- start of the order. Without shuffle the order is never built: a batch's
-- indices are its range of positions. Skipping k local batches is the same
-- as the offset k * (global batch), so a same-layout resume deals exactly
-- the batches an unbroken pass would. A position is samples of the order,
-- the same on every rank and meaningful for any number of shards;
-- position_problem says when a layout cannot continue one exactly
-- (docs/data-positions.md).
local accel = require("accel")
local C = accel._C
local U = require("accel.data.util")
local collate = require("accel.data.collate")

local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min

local DataLoader = {}
DataLoader.__name = "accel.data.DataLoader"
-- loader[i] is an error: ipairs(loader) would otherwise end at once and a
-- ported `for _, batch in ipairs(loader)` train on nothing, silently.
DataLoader.__index = function(_, k)
  local v = DataLoader[k]
  if v == nil and type(k) == "number" then
    U.failf("DataLoader: a loader has no loader[%s]; iterate it with `for batch in loader:iter()` or `for batch in "
      .. "loader` (ipairs and pairs do not walk a loader)", tostring(k))
  end
  return v
end

local KNOWN = {batch_size = true, shuffle = true, drop_last = true, seed = true, collate_fn = true}
-- PyTorch options that mean nothing here (no worker processes, no pinned memory)
local IGNORED = {num_workers = true, pin_memory = true, persistent_workers = true, prefetch_factor = true,
  timeout = true, in_order = true, pin_memory_device = true}

-- #ds, read at each use (a dataset may change its length) and checked, as
-- PyTorch's "__len__() should return >= 0"; an error raised by the
-- dataset's own __len passes through as it is.
local function length(ds) return U.check_int(U.len(ds), 0, "DataLoader: the dataset's length (#ds)") end

local function check_dataset(ds)
  local t = type(ds)
  if (t ~= "table" and t ~= "userdata") or accel.is_tensor(ds) then
    U.failf("DataLoader: expected a dataset (an object with #ds and ds:get(i); see data.Dataset, data.TensorDataset), got %s",
      accel.is_tensor(ds) and "a tensor (wrap it: data.TensorDataset(t))" or t)
  end
  if type(ds.get) ~= "function" and type(ds.get_batch) ~= "function" then
    U.fail("DataLoader: the dataset has no get(i) method (see data.Dataset{len = ..., get = function(i) ... end})")
  end
  -- A table without __len has the length of its array part: 0 for an object
  -- with named fields only (a ported `__len__` method, or a table passed
  -- without data.Dataset{}), which would otherwise train on nothing.
  local mt = getmetatable(ds)
  local has_len = type(mt) == "table" and mt.__len ~= nil
  if not has_len and (t == "userdata" or #ds == 0) then
    U.fail("DataLoader: the dataset has no length (#ds must give the sample count: give its metatable __len, "
      .. "or build it with data.Dataset{len = n, get = ...})")
  end
  length(ds)
end

local function check_collate(ds, collate_fn)
  if collate_fn == nil then return end
  if type(collate_fn) ~= "function" then
    U.failf("DataLoader: collate_fn must be a function(batch), got %s", type(collate_fn))
  end
  if type(ds.get) ~= "function" then
    U.fail("DataLoader: collate_fn needs the dataset's get(i) (collate_fn receives single samples); this dataset has "
      .. "only get_batch, which returns whole batches")
  end
end

local function check_flag(v, name)
  if v ~= nil and type(v) ~= "boolean" then U.failf("DataLoader: %s must be true or false, %s", name, U.got(v)) end
  return v == true
end

-- The ignored options still get PyTorch's checks of their values.
local function check_ignored(opts)
  if type(opts) ~= "table" then return end
  local workers = opts.num_workers
  if workers ~= nil and not (U.to_int(workers) and workers >= 0) then
    U.failf("DataLoader: num_workers option should be a non-negative integer, %s (use num_workers = 0 to disable "
      .. "multiprocessing)", U.got(workers))
  end
  check_flag(opts.pin_memory, "pin_memory")
  if check_flag(opts.persistent_workers, "persistent_workers") and (workers or 0) == 0 then
    U.fail("DataLoader: persistent_workers option needs num_workers > 0")
  end
  if opts.prefetch_factor ~= nil and (workers or 0) == 0 then
    U.fail("DataLoader: prefetch_factor option could only be specified in multiprocessing (num_workers > 0)")
  end
  local prefetch = opts.prefetch_factor
  if prefetch ~= nil and not (U.to_int(prefetch) and prefetch >= 0) then
    U.failf("DataLoader: prefetch_factor option should be a non-negative integer, %s", U.got(prefetch))
  end
  if prefetch == 0 then U.fail("DataLoader: prefetch_factor must be greater than 0") end -- (torch: when iterating)
  local timeout = opts.timeout
  if timeout ~= nil and not (type(timeout) == "number" and timeout >= 0) then
    U.failf("DataLoader: timeout option should be non-negative, %s", U.got(timeout))
  end
  check_flag(opts.in_order, "in_order")
  if opts.pin_memory_device ~= nil and type(opts.pin_memory_device) ~= "string" then
    U.failf("DataLoader: pin_memory_device must be a string, %s", U.got(opts.pin_memory_device))
  end
end

function DataLoader.new(dataset, opts)
  check_dataset(dataset)
  if type(opts) == "table" and opts.generator ~= nil then
    U.fail("DataLoader: option 'generator' is not taken (there are no torch.Generator objects): give seed = n for a "
      .. "seeded shuffle")
  end
  check_ignored(opts)
  opts = U.check_opts(opts, KNOWN, IGNORED, "DataLoader")
  local bs = U.to_int(opts.batch_size == nil and 1 or opts.batch_size)
  if not (bs and bs >= 1) then U.failf("DataLoader: batch_size must be a positive integer, %s", U.got(opts.batch_size)) end
  local shuffle = check_flag(opts.shuffle, "shuffle")
  local seed = opts.seed
  if seed ~= nil then
    seed = U.to_int(seed) or U.failf("DataLoader: seed must be an integer, %s", U.got(opts.seed))
  end
  if seed == nil and shuffle then seed = C.data_draw_seed() end
  if shuffle and length(dataset) == 0 then -- torch's RandomSampler: "num_samples should be a positive integer value"
    U.fail("DataLoader: shuffle needs a dataset of at least one sample, this one has 0")
  end
  check_collate(dataset, opts.collate_fn)
  return setmetatable({
    dataset = dataset, batch_size = bs, shuffle = shuffle, drop_last = check_flag(opts.drop_last, "drop_last"),
    seed = seed, collate_fn = opts.collate_fn,
    process_index = 0, num_processes = 1, split_batches = false, even_batches = true, _pad = false,
    _state = {epoch = 0, batches = 0, offset = 0}, -- shared with skip_first_batches copies
  }, DataLoader)
end

local function copy(self)
  local c = {}
  for k, v in pairs(self) do c[k] = v end
  return setmetatable(c, getmetatable(self))
end

-- ---- batch arithmetic ----
-- A pass covers positions [offset, n) of the epoch's order (offset 0 unless
-- the pass resumes a saved position or skips batches). The layout L is a
-- loader or a table with its batch_size, num_processes, process_index,
-- split_batches, drop_last and _pad fields (a saving layout is rebuilt so).

-- Samples of the global order one local batch of every rank covers.
local function global_batch(L)
  if L.split_batches then return L.batch_size end
  return L.batch_size * L.num_processes
end

-- Local batches of rank L.process_index in a pass from offset.
local function pass_count(L, n, offset)
  local bs, N, r = L.batch_size, L.num_processes, n - offset
  local full = floor(r / bs)
  if L.split_batches then
    if L.drop_last then return full end
    local rem = r - full * bs
    if rem == 0 or L._pad then return ceil(r / bs) end
    return full + ((rem > L.process_index * floor(bs / N)) and 1 or 0)
  end
  if L.drop_last then return floor(full / N) end
  local nb = ceil(r / bs)
  if L._pad then return ceil(nb / N) end
  return max(0, ceil((nb - L.process_index) / N))
end

-- Where the real samples of a pass from offset end (exclusive): n, or with
-- drop_last the end of the last whole round of batches.
local function pass_end(L, n, offset)
  if not L.drop_last then return n end
  return offset + pass_count(L, n, offset) * global_batch(L)
end

-- The position (samples of the order consumed by all ranks together) after
-- rank 0 has taken `batches` local batches of a pass from offset: the end
-- of the epoch once the pass is done (what drop_last leaves out counts as
-- consumed; padding never goes past n).
local function position_after(L, n, offset, batches)
  if batches > 0 and batches >= pass_count(L, n, offset) then return n end
  return min(offset + batches * global_batch(L), n)
end

-- Local batches per pass (from the start of the epoch, or for a skip
-- loader from its first batch).
function DataLoader:_count()
  return pass_count(self, length(self.dataset), self._skip or 0)
end

-- The shuffled order of an epoch (a permutation of 0..n-1), as PyTorch's
-- RandomSampler builds it; without shuffle there is none to build.
function DataLoader:_order(epoch, n)
  local c = self._cache -- keyed by everything the order depends on (prepare may change the seed)
  if c and c.n == n and c.epoch == epoch and c.seed == self.seed then return c.order end
  local order = C.data_randperm(n, self.seed, epoch)
  self._cache = {epoch = epoch, n = n, seed = self.seed, order = order}
  return order
end

-- 0-based sample indices of local batch j of a pass from offset: a new
-- int64 tensor (a get_batch may change it in place) on the host, as
-- PyTorch's samplers yield Python ints (a data set whose tensors are on a
-- device moves them there itself: TensorDataset:get_batch). order: the
-- shuffled order, or nil for 0..n-1.
function DataLoader:_indices(order, j, n, offset)
  local bs, N, start, len = self.batch_size, self.num_processes, nil, nil
  if self.split_batches then
    len = floor(bs / N)
    start = offset + j * bs + self.process_index * len
  else
    start = offset + (self.process_index + j * N) * bs
    len = bs
  end
  if not self._pad and len > n - start then len = n - start end
  return C.data_batch_indices(order, start, len, n) -- padding wraps to the start of the order
end

-- A pass ends at its first nil batch: one from get_batch or collate_fn
-- (a forgotten return) would end it early, silently.
local function not_nil(who, j, v1, ...)
  if v1 == nil then
    U.failf("DataLoader: %s returned nil for batch %d of the pass (a nil batch would end the loop; return the batch)", who, j)
  end
  return v1, ...
end

-- The batch of the given indices: get_batch fast path, else get + collate;
-- j: its number in the pass.
function DataLoader:_fetch(idx, j)
  local ds, collate_fn = self.dataset, self.collate_fn
  if collate_fn == nil and ds.get_batch then return not_nil("the dataset's get_batch", j, ds:get_batch(idx)) end
  local items, samples, nfields = idx:tolist(), {}, nil
  for b = 1, #items do
    local i = items[b] + 1
    items[b] = i
    local s = U.pack(ds:get(i))
    if s.n == 0 then U.failf("DataLoader: dataset item %d: get(%d) returned nothing", i, i) end
    nfields = nfields or s.n
    if s.n ~= nfields then
      U.failf("DataLoader: dataset item %d has %d fields but item %d has %d", i, s.n, items[1], nfields)
    end
    for f = 1, s.n do
      if s[f] == nil then U.failf("DataLoader: dataset item %d: field %d is nil", i, f) end
    end
    s.n = nil
    samples[b] = s
  end
  if collate_fn then
    if nfields == 1 then
      for b = 1, #samples do samples[b] = samples[b][1] end
    end
    return not_nil("collate_fn", j, collate_fn(samples))
  end
  return collate.collate_fields(samples, items, nfields)
end

-- ---- the public face ----

-- #loader: Accelerate's len. With split_batches (the last batch kept) every
-- rank reports the number of global batches, also one the last, short batch
-- does not reach (even_batches = false), as Accelerate's BatchSamplerShard;
-- otherwise the rank's own count.
function DataLoader:__len()
  if self.split_batches and not self.drop_last then
    return ceil((length(self.dataset) - (self._skip or 0)) / self.batch_size)
  end
  return self:_count()
end

-- The batch's values, after counting j batches of the pass consumed: only
-- once fetched (a batch whose get or collate_fn raised was not).
local function consumed(st, j, ...)
  st.batches = j
  return ...
end

-- The position (st: epoch, offset, batches) is the pass's that yielded
-- last: st.owner is that pass, false once one ended, nil once set_epoch or
-- load_state_dict moved it (the pass then leaves the epoch alone). A pass
-- nested in another over the same loader takes the position; the outer
-- one takes it back at its next batch.
function DataLoader:iter()
  local st, n = self._state, length(self.dataset)
  local offset = min(self._skip or st.resume or 0, n) -- a skip_first_batches copy skips on every pass
  local epoch, count, me = st.epoch, pass_count(self, n, offset), {}
  st.resume, st.offset, st.batches, st.owner = nil, offset, 0, me
  local order = count > 0 and self.shuffle and self:_order(epoch, n) or nil
  local j, done = 0, false
  return function()
    if j >= count then
      if not done then
        done = true
        if st.owner ~= nil then st.epoch, st.batches, st.offset, st.owner = epoch + 1, 0, 0, false end
      end
      return nil
    end
    local idx = self:_indices(order, j, n, offset)
    j = j + 1
    if st.owner ~= me and st.owner ~= nil then st.epoch, st.offset, st.owner = epoch, offset, me end
    return consumed(st, j, self:_fetch(idx, j))
  end
end

-- `for batch in loader do` (the loader itself as the iterator, as a Python
-- `for batch in loader:` reads): the generic for calls the loader with its
-- hidden (state, control) on every turn. Every loop has a pass of its own,
-- as from loader:iter(), so a loop nested in another over the same loader,
-- or one left with break, leaves the others alone: the loop's first call
-- (state nil) starts a pass and stores it as the loop's state, which the
-- loop then hands back on every later call.

-- The local slot of the function calling __call (stack level 3 from here)
-- that holds the state of its innermost generic for over loader still
-- without one (the loop making its first call), or nil. A for's hidden
-- locals are named "(for ...)": generator, state, control (and, Lua 5.4, a
-- closing value), the generator first.
local function for_state_slot(loader)
  local slot, i, in_for = nil, 1, false
  while true do
    local name, v = debug.getlocal(3, i)
    if name == nil then return slot end
    local hidden = name:sub(1, 5) == "(for "
    if hidden and not in_for and rawequal(v, loader) then
      local next_name, state = debug.getlocal(3, i + 1)
      if state == nil and next_name and next_name:sub(1, 5) == "(for " then slot = i + 1 end
    end
    in_for, i = hidden, i + 1
  end
end

function DataLoader:__call(pass)
  if pass ~= nil then return pass() end
  local slot = for_state_slot(self)
  if slot == nil then
    U.fail("DataLoader: a loader called as a function must be the iterator of a `for batch in loader do` loop "
      .. "(in code with its debug information); iterate with `for batch in loader:iter() do`")
  end
  pass = self:iter()
  debug.setlocal(2, slot, pass)
  return pass()
end

-- The epochs a shuffled order exists for: epoch e draws from Philox block
-- e * 2^40 on (bindings/data_lua.c), below 2^64.
local MAX_EPOCH = 16777215 -- 2^24 - 1

function DataLoader:set_epoch(epoch)
  epoch = U.check_int(epoch, 0, "DataLoader:set_epoch: epoch", MAX_EPOCH)
  local st = self._state
  if epoch ~= st.epoch then
    st.epoch, st.batches, st.offset, st.resume, st.owner = epoch, 0, 0, nil, nil
  end
end

-- {epoch = e, samples = s}: s samples of epoch e's global order consumed by
-- all processes together (the same on every rank while the ranks are in
-- step; save_state writes rank 0's).
--
-- A position past the last batch of its epoch (saved on the last batch,
-- inside the loop) is the start of the next epoch, as the next pass of an
-- unbroken run is: {epoch = e + 1, samples = 0}.
local function next_pass_position(L, n, epoch, samples)
  if samples > 0 and pass_count(L, n, samples) == 0 and epoch < MAX_EPOCH then return epoch + 1, 0 end
  return epoch, samples
end

function DataLoader:state_dict()
  local st, n = self._state, length(self.dataset)
  local s = st.resume or position_after(self, n, st.offset or 0, st.batches)
  local epoch, samples = next_pass_position(self, n, st.epoch, s)
  return {epoch = epoch, samples = samples}
end

-- "N process(es)[ with split_batches]" for a layout.
local function layout_text(L)
  return ("%d process%s%s"):format(L.num_processes, L.num_processes == 1 and "" or "es",
    L.split_batches and " with split_batches" or "")
end

-- The layout {num_processes =, split_batches =} a position was saved by,
-- as a table pass_count can read (drop_last and batch_size: this loader's).
function DataLoader:_saving_layout(from)
  return {batch_size = self.batch_size, num_processes = from.num_processes, process_index = 0,
    split_batches = from.split_batches == true, drop_last = self.drop_last, _pad = false}
end

-- Why this loader cannot continue epoch `epoch` from position `samples`
-- exactly (every remaining sample of the order once, in the unprepared
-- loader's batches), or nil. from: the saving layout {num_processes =,
-- split_batches =}, or nil when unknown.
function DataLoader:position_problem(epoch, samples, from)
  local n, bs = length(self.dataset), self.batch_size
  local where = ("the position (epoch %d, %d of %d samples consumed%s)"):format(epoch, samples, n,
    from and ", saved by " .. layout_text(self:_saving_layout(from)) or "")
  if samples > n then
    return ("%s is past the end of this loader's epoch of %d samples (another data set?)"):format(where, n)
  end
  if samples < n and samples % bs ~= 0 then
    return ("%s is not a whole number of batches of %d for %s (another batch size?)"):format(where, bs,
      layout_text(self))
  end
  if from and samples < n then
    local want, got = pass_end(self:_saving_layout(from), n, samples), pass_end(self, n, samples)
    if got < want then
      local saved = layout_text(self:_saving_layout(from))
      return ("%s cannot be continued exactly by %s: with drop_last they take only whole rounds of %d samples, "
        .. "so samples %d to %d of the epoch's order, which %s would still see, would be skipped; resume with %s, "
        .. "or from a checkpoint saved at the end of an epoch"):format(where, layout_text(self), global_batch(self),
        got + 1, want, saved, saved)
    end
  end
  return nil
end

-- The position of an older {epoch, batches} state: `batches` local batches
-- of rank 0 in the layout `from` (nil: this loader's own). Returns the
-- samples, or nil and why it does not fit this loader.
function DataLoader:position_of_batches(batches, from)
  local L, n = from and self:_saving_layout(from) or self, length(self.dataset)
  local count = pass_count(L, n, 0)
  if batches > count then
    return nil, ("the state has %d batches consumed but %s has %d batches per epoch (a different data set or batch size?)")
      :format(batches, from and "this loader on " .. layout_text(L) or "this loader", count)
  end
  return position_after(L, n, 0, batches)
end

-- s: {epoch =, samples =} (state_dict's), or the older {epoch =, batches =}
-- in this loader's own batches. The next iter() continues epoch e's order
-- from sample s + 1.
function DataLoader:load_state_dict(s)
  if type(s) ~= "table" then U.failf("DataLoader:load_state_dict: expected a table {epoch =, samples =}, got %s", type(s)) end
  local epoch = U.check_int(s.epoch, 0, "DataLoader:load_state_dict: epoch", MAX_EPOCH)
  local samples, why
  if s.samples == nil and s.batches ~= nil then
    samples, why = self:position_of_batches(U.check_int(s.batches, 0, "DataLoader:load_state_dict: batches"))
  else
    samples = U.check_int(s.samples, 0, "DataLoader:load_state_dict: samples")
    why = self:position_problem(epoch, samples)
  end
  if why then U.fail("DataLoader:load_state_dict: " .. why) end
  epoch, samples = next_pass_position(self, length(self.dataset), epoch, samples)
  local st = self._state
  st.epoch, st.batches, st.offset, st.resume, st.owner = epoch, 0, samples, samples, nil
end

function DataLoader:skip_first_batches(n)
  n = U.check_int(n, 0, "DataLoader:skip_first_batches: n")
  local c, total, gb = copy(self), length(self.dataset), global_batch(self)
  c._skip = n >= total / gb and total or min(n * gb, total) -- (n * gb may be past the largest integer)
  return c
end

-- The first position of the order the current (or next) pass covers.
function DataLoader:pass_start()
  local st = self._state
  return st.resume or st.offset or 0
end

-- True while the batch just yielded is the last one of the pass.
function DataLoader:end_of_dataloader()
  local st = self._state
  local count = pass_count(self, length(self.dataset), st.offset or 0)
  return count > 0 and st.batches >= count
end

function DataLoader:shard(rank, world_size, opts)
  opts = U.check_opts(opts, {even_batches = true, split_batches = true}, nil, "DataLoader:shard")
  U.check_int(world_size, 1, "DataLoader:shard: world_size")
  U.check_int(rank, 0, "DataLoader:shard: rank")
  if rank >= world_size then U.failf("DataLoader:shard: rank must be in 0..%d (0-based), got %d", world_size - 1, rank) end
  if self.num_processes ~= 1 then
    U.failf("DataLoader:shard: this loader is already rank %d's shard of %d", self.process_index, self.num_processes)
  end
  local split = opts.split_batches == true
  if split and self.batch_size % world_size ~= 0 then
    U.failf("DataLoader:shard: with split_batches the batch size (%d) must be a multiple of the number of processes (%d)",
      self.batch_size, world_size)
  end
  local c = copy(self)
  c.process_index, c.num_processes, c.split_batches = rank, world_size, split
  c.even_batches = opts.even_batches ~= false
  c._pad = world_size > 1 and c.even_batches and not self.drop_last
  c._skip, c._state = nil, {epoch = self._state.epoch, batches = 0, offset = 0}
  return c
end

-- data.DataLoader(dataset, opts) constructs; getmetatable(loader) == data.DataLoader.
-- loader.iter() and the like: "DataLoader.iter: call it as obj:iter(...)"
require("accel.util").check_methods(DataLoader, "DataLoader")

return setmetatable(DataLoader, {__call = function(_, dataset, opts) return DataLoader.new(dataset, opts) end})
