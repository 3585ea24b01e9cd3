-- accel.data.loader: DataLoader. The semantics (order, epochs, resume,
-- sharding) are written down at the top of accel/data/init.lua.
--
-- A pass over local batches j = 0, 1, ... of epoch e: the global order is
-- a permutation of 0..n-1 that depends only on (seed, e) (the identity
-- without shuffle); a pass covers positions [offset, n) of it (offset 0, or
-- the saved position it resumes, or the batches skip_first_batches skips),
-- dealt to the shards by the layout's rules from offset on; local batch j
-- covers positions [start, stop), taken modulo n where padding wraps to the
-- start of the order; the indices of a batch that does not wrap are a view
-- (narrow) of the order. Skipping k local batches is the same as the offset
-- k * (global batch), so a same-layout resume deals exactly the batches an
-- unbroken pass would. A position is samples of the order, the same on
-- every rank and meaningful for any number of shards; position_problem
-- says when a layout cannot continue one exactly (docs/data-positions.md).
local accel = require("accel")
local C = accel._C
local U = require("accel.data.util")
local collate = require("accel.data.collate")

local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min

-- The sample order and batch indices live on the host (as PyTorch's
-- samplers yield Python ints): a data set whose tensors are on a device
-- moves the indices there itself (TensorDataset:get_batch).
local HOST = {device = "cpu"}

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
local IGNORED = {num_workers = true, pin_memory = true, persistent_workers = true, prefetch_factor = true}

local function check_dataset(ds)
  local t = type(ds)
  if (t ~= "table" and t ~= "userdata") or accel.is_tensor(ds) then
    U.failf("DataLoader: expected a dataset (an object with #ds and ds:get(i); see data.Dataset, data.TensorDataset), got %s",
      accel.is_tensor(ds) and "a tensor (wrap it: data.TensorDataset(t))" or t)
  end
  if type(ds.get) ~= "function" and type(ds.get_batch) ~= "function" then
    U.fail("DataLoader: the dataset has no get(i) method (see data.Dataset{len = ..., get = function(i) ... end})")
  end
  local ok, n = pcall(U.len, ds)
  if not ok and tostring(n):find("Dataset: len() must be", 1, true) then
    U.fail("DataLoader: " .. tostring(n):gsub("^.-Dataset: len%(%)", "the dataset's len()"))
  end
  if not ok or type(n) ~= "number" then U.fail("DataLoader: the dataset has no length (#ds must give the sample count)") end
end

local function check_flag(v, name)
  if v ~= nil and type(v) ~= "boolean" then U.failf("DataLoader: %s must be true or false, got %s", name, tostring(v)) end
  return v == true
end

-- The ignored options still get PyTorch's checks of their values.
local function check_ignored(opts)
  if type(opts) ~= "table" then return end
  local workers = opts.num_workers
  if workers ~= nil and not (type(workers) == "number" and workers == floor(workers) and workers >= 0) then
    U.failf("DataLoader: num_workers option should be a non-negative integer, got %s (use num_workers = 0 to disable "
      .. "multiprocessing)", tostring(workers))
  end
  check_flag(opts.pin_memory, "pin_memory")
  if check_flag(opts.persistent_workers, "persistent_workers") and (workers or 0) == 0 then
    U.fail("DataLoader: persistent_workers option needs num_workers > 0")
  end
  if opts.prefetch_factor ~= nil and (workers or 0) == 0 then
    U.fail("DataLoader: prefetch_factor option could only be specified in multiprocessing (num_workers > 0)")
  end
end

function DataLoader.new(dataset, opts)
  check_dataset(dataset)
  check_ignored(opts)
  opts = U.check_opts(opts, KNOWN, IGNORED, "DataLoader")
  local bs = opts.batch_size
  if bs == nil then bs = 1 end
  if not (type(bs) == "number" and bs == floor(bs) and bs >= 1) then
    U.failf("DataLoader: batch_size must be a positive integer, got %s", type(bs) == "string" and ("string %q"):format(bs) or tostring(bs))
  end
  local shuffle = check_flag(opts.shuffle, "shuffle")
  local seed = opts.seed
  if seed ~= nil and not (type(seed) == "number" and seed == floor(seed)) then
    U.failf("DataLoader: seed must be an integer, got %s", tostring(seed))
  end
  if seed == nil and shuffle then seed = C.data_draw_seed() end
  if opts.collate_fn ~= nil and type(opts.collate_fn) ~= "function" then
    U.failf("DataLoader: collate_fn must be a function(batch), got %s", type(opts.collate_fn))
  end
  return setmetatable({
    dataset = dataset, batch_size = floor(bs), shuffle = shuffle, drop_last = check_flag(opts.drop_last, "drop_last"),
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
  return pass_count(self, U.len(self.dataset), self._skip or 0)
end

function DataLoader:_order(epoch, n)
  local c = self._cache -- keyed by everything the order depends on (prepare may change the seed)
  if c and c.n == n and c.shuffle == self.shuffle and (not self.shuffle or (c.epoch == epoch and c.seed == self.seed)) then
    return c.order
  end
  local order = self.shuffle and C.data_randperm(n, self.seed, epoch) or accel.arange(n, HOST)
  self._cache = {epoch = epoch, n = n, seed = self.seed, shuffle = self.shuffle, order = order}
  return order
end

-- 0-based sample indices (int64 tensor) of local batch j of a pass from offset.
function DataLoader:_indices(order, j, n, offset)
  local bs, N, start, stop = self.batch_size, self.num_processes, nil, nil
  if self.split_batches then
    local bl = floor(bs / N)
    start = offset + j * bs + self.process_index * bl
    stop = start + bl
  else
    start = offset + (self.process_index + j * N) * bs
    stop = start + bs
  end
  if not self._pad and stop > n then stop = n end
  if stop <= n then return order:narrow(1, start + 1, stop - start) end
  return order:index_select(1, accel.arange(start, stop, HOST):remainder(n)) -- padding wraps to the start
end

-- The batch of the given indices: get_batch fast path, else get + collate.
function DataLoader:_fetch(idx)
  local ds, collate_fn = self.dataset, self.collate_fn
  if collate_fn == nil and ds.get_batch then return ds:get_batch(idx) end
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
    return collate_fn(samples)
  end
  return collate.collate_fields(samples, items, nfields)
end

-- ---- the public face ----

function DataLoader:__len() return self:_count() end

function DataLoader:iter()
  local st, n = self._state, U.len(self.dataset)
  local offset = min(self._skip or st.resume or 0, n) -- a skip_first_batches copy skips on every pass
  st.resume = nil
  local epoch, count = st.epoch, pass_count(self, n, offset)
  st.offset, st.batches = offset, 0
  local order = count > 0 and self:_order(epoch, n) or nil
  local j, done = 0, false
  return function()
    if j >= count then
      if not done then
        done = true
        if st.epoch == epoch then st.epoch, st.batches, st.offset = epoch + 1, 0, 0 end
      end
      return nil
    end
    local idx = self:_indices(order, j, n, offset)
    j = j + 1
    st.batches = j
    return self:_fetch(idx)
  end
end

-- `for batch in loader do` (the loader itself as the iterator, as a Python
-- `for batch in loader:` reads): the loop's first call (control value nil)
-- starts a pass as loader:iter() does, later calls continue it. A loop
-- left with break leaves its pass; the next loop starts a new one.
local for_passes = setmetatable({}, {__mode = "k"})

function DataLoader:__call(_, control)
  local it = for_passes[self]
  if control == nil or it == nil then
    it = self:iter()
    for_passes[self] = it
  end
  return (function(...)
    if (...) == nil then for_passes[self] = nil end
    return ...
  end)(it())
end

function DataLoader:set_epoch(epoch)
  U.check_int(epoch, 0, "DataLoader:set_epoch: epoch")
  local st = self._state
  if epoch ~= st.epoch then
    st.epoch, st.batches, st.offset, st.resume = epoch, 0, 0, nil
  end
end

-- {epoch = e, samples = s}: s samples of epoch e's global order consumed by
-- all processes together (the same on every rank while the ranks are in
-- step; save_state writes rank 0's).
function DataLoader:state_dict()
  local st = self._state
  local s = st.resume or position_after(self, U.len(self.dataset), st.offset or 0, st.batches)
  return {epoch = st.epoch, samples = s}
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
  local n, bs = U.len(self.dataset), self.batch_size
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
  local L, n = from and self:_saving_layout(from) or self, U.len(self.dataset)
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
  U.check_int(s.epoch, 0, "DataLoader:load_state_dict: epoch")
  local samples, why
  if s.samples == nil and s.batches ~= nil then
    U.check_int(s.batches, 0, "DataLoader:load_state_dict: batches")
    samples, why = self:position_of_batches(s.batches)
  else
    samples = U.check_int(s.samples, 0, "DataLoader:load_state_dict: samples")
    why = self:position_problem(s.epoch, samples)
  end
  if why then U.fail("DataLoader:load_state_dict: " .. why) end
  local st = self._state
  st.epoch, st.batches, st.offset, st.resume = s.epoch, 0, samples, samples
end

function DataLoader:skip_first_batches(n)
  U.check_int(n, 0, "DataLoader:skip_first_batches: n")
  local c = copy(self)
  c._skip = min(n * global_batch(self), U.len(self.dataset))
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
  local count = pass_count(self, U.len(self.dataset), st.offset or 0)
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
