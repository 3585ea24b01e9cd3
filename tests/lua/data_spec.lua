-- data_spec.lua: accel.data. The loader's order is checked against a
-- pure-Lua Philox4x32-10 + Fisher-Yates written from the definition in
-- core/rng.c's top comment, the sharding rules against a step-by-step
-- transcription of Accelerate's BatchSamplerShard, the file readers against
-- files this spec writes byte by byte (string.pack), and the real
-- Fashion-MNIST test set against its published shape and class balance.
local accel = require("accel")
local data = accel.data
local support = dofile("tests/lua/support.lua")

local expect_error, shape_of = support.expect_error, support.shape_of
local tmpname, read_file, write_file = support.tmpname, support.read_file, support.write_file

local function write_gzip(path, s)
  local p = assert(io.popen("gzip -c > '" .. path .. "'", "w"))
  p:write(s)
  assert(p:close())
end

-- A dataset whose samples are their own 0-based ids: batches show the order.
local function ids_dataset(n) return data.TensorDataset(accel.arange(n)) end

-- All batches of one pass, each a Lua list of ids.
local function pass(loader)
  local out = {}
  for b in loader:iter() do out[#out + 1] = b:tolist() end
  return out
end

local function flatten(batches)
  local out = {}
  for _, b in ipairs(batches) do
    for _, v in ipairs(b) do out[#out + 1] = v end
  end
  return out
end

-- ---------------------------------------------------------------------
-- Reference permutation: Philox4x32-10 keyed by the seed, counter = block
-- index, 64-bit draws high word first, Fisher-Yates with
-- j = floor(x * (i + 1) / 2^64); epoch e starts at block e * 2^40.

local M32 = 0xffffffff

local function philox(block, k0, k1)
  local c0, c1, c2, c3 = block & M32, (block >> 32) & M32, 0, 0
  for r = 1, 10 do
    if r > 1 then k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32 end
    local p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
    c0, c1, c2, c3 = ((p1 >> 32) ~ c1 ~ k0) & M32, p1 & M32, ((p0 >> 32) ~ c3 ~ k1) & M32, p0 & M32
  end
  return {c0, c1, c2, c3}
end

local function reference_perm(n, seed, epoch)
  local k0, k1 = seed & M32, (seed >> 32) & M32
  local block, words, pos = epoch << 40, nil, 5
  local function next32()
    if pos == 5 then words, block, pos = philox(block, k0, k1), block + 1, 1 end
    pos = pos + 1
    return words[pos - 1]
  end
  local function scale(x, range) -- floor(x * range / 2^64), x unsigned 64-bit, range < 2^32
    local xh, xl = (x >> 32) & M32, x & M32
    return (xh * range + ((xl * range) >> 32)) >> 32
  end
  local perm = {}
  for i = 0, n - 1 do perm[i] = i end
  for i = n - 1, 1, -1 do
    local x = (next32() << 32) | next32()
    local j = scale(x, i + 1)
    perm[i], perm[j] = perm[j], perm[i]
  end
  local out = {}
  for i = 0, n - 1 do out[i + 1] = perm[i] end
  return out
end

-- ---------------------------------------------------------------------
-- Reference sharding: Accelerate's BatchSamplerShard, transcribed loop by
-- loop. global: the unsharded batches (lists of ids) of one pass.

local function concat(a, b)
  local out = {}
  for _, v in ipairs(a) do out[#out + 1] = v end
  for _, v in ipairs(b) do out[#out + 1] = v end
  return out
end

local function slice(t, i, j) -- Python t[i:j]
  local out = {}
  for k = i + 1, math.min(j, #t) do out[#out + 1] = t[k] end
  return out
end

local function shard_no_split(global, bs, N, r, drop_last, even)
  local out, initial, to_yield, batch, idx = {}, {}, {}, {}, -1
  for i, b in ipairs(global) do
    idx, batch = i - 1, b
    if not drop_last and idx < N then initial = concat(initial, b) end
    if idx % N == r then to_yield = b end
    if idx % N == N - 1 and #b == bs then
      out[#out + 1] = to_yield
      to_yield = {}
    end
  end
  if drop_last or #initial == 0 then return out end
  if not even then
    if #to_yield > 0 then out[#out + 1] = to_yield end
    return out
  end
  if #to_yield == bs then out[#out + 1] = to_yield end
  while #initial < N * bs do initial = concat(initial, initial) end
  if #batch == bs then batch, idx = {}, idx + 1 end
  local cycle = 0
  while idx % N ~= 0 or #batch > 0 do
    local stop = cycle + bs - #batch
    batch = concat(batch, slice(initial, cycle, stop))
    if idx % N == r then out[#out + 1] = batch end
    cycle, batch, idx = stop, {}, idx + 1
  end
  return out
end

local function shard_split(global, bs, N, r, drop_last, even)
  local out, initial, bl, last = {}, {}, bs // N, {}
  for i, b in ipairs(global) do
    if i == 1 then initial = b end
    if #b == bs then out[#out + 1] = slice(b, bl * r, bl * (r + 1)) end
    last = b
  end
  if not drop_last and #initial > 0 and #last < bs then
    if not even then
      if #last > bl * r then out[#out + 1] = slice(last, bl * r, bl * (r + 1)) end
    else
      while #initial < bs do initial = concat(initial, initial) end
      out[#out + 1] = slice(concat(last, initial), bl * r, bl * (r + 1))
    end
  end
  return out
end

-- ---------------------------------------------------------------------

describe("datasets", function()
  it("TensorDataset gives rows of every tensor, #ds the sample count", function()
    local x, y = accel.arange(12):view(4, 3):float(), accel.tensor{10, 11, 12, 13}
    local ds = data.TensorDataset(x, y)
    assert.are.equal(4, #ds)
    local xi, yi = ds:get(3)
    assert.are.same({6.0, 7.0, 8.0}, xi:tolist())
    assert.are.equal(12, yi:item())
    -- a whole number given as a float (4 / 2) is that index, as t:select(1, 4 / 2) takes it
    local x2, y2 = ds:get(4 / 2)
    assert.are.same({{3.0, 4.0, 5.0}, 11}, {x2:tolist(), y2:item()})
    expect_error(function() ds:get(2.5) end, "TensorDataset: index must be an integer, got 2.5")
    expect_error(function() ds:get(5) end, "TensorDataset: index 5 is out of range 1..4 (or -4..-1)")
    -- negative positions count from the end (torch: TensorDataset(...)[-1] is the last sample)
    assert.are.equal(13, select(2, ds:get(-1)):item())
  end)

  -- torch 2.15: Subset(TensorDataset(arange(5) * 10), [4, 0, 2]) has len 3, [0] = 40, [-1] = 20;
  -- ConcatDataset([range(3), range(10, 12)]): len 5, [3] = 10, [-1] = 11, cumulative_sizes [3, 5]
  it("Subset and ConcatDataset", function()
    local ds = data.TensorDataset(accel.arange(5) * 10)
    local s = data.Subset(ds, {5, 1, 3}) -- 1-based positions in a Lua list
    assert.are.equal(3, #s)
    assert.are.equal(40, s:get(1):item())
    assert.are.equal(20, s:get(-1):item())
    local t = data.Subset(ds, accel.tensor({4, 0, 2})) -- 0-based values in an index tensor
    assert.are.same({40, 0, 20}, {t:get(1):item(), t:get(2):item(), t:get(3):item()})
    assert.are.same({{40, 0}, {20}}, pass(data.DataLoader(t, {batch_size = 2}))) -- through the dataset's get_batch
    local function range(a, b) return data.Dataset{len = b - a, get = function(i) return a + i - 1 end} end
    local c = data.ConcatDataset({range(0, 3), range(10, 12)})
    assert.are.equal(5, #c)
    assert.are.same({0, 2, 10, 11}, {c:get(1), c:get(3), c:get(4), c:get(-1)})
    assert.are.same({3, 5}, c.cumulative_sizes)
    expect_error(function() data.Subset(ds, {6}) end, "Subset: indices: index 6 is out of range 1..5")
    expect_error(function() data.Subset(ds, accel.tensor({5})) end, "Subset: an index is out of range for a dataset of 5")
    expect_error(function() data.ConcatDataset({}) end, "ConcatDataset: expected a non-empty list of datasets")
  end)

  -- torch 2.15: random_split(range(10), [0.33, 0.33, 0.34]) sizes [4, 3, 3]; range(5), [0.1, 0.1, 0.8]:
  -- [1, 0, 4]; range(10), [3, 3]: "Sum of input lengths does not equal the length of the input dataset!"
  it("random_split: counts or fractions, a partition of the dataset, repeatable with a seed", function()
    local ds = data.TensorDataset(accel.arange(10))
    local function sizes(parts)
      local out = {}
      for j, p in ipairs(parts) do out[j] = #p end
      return out
    end
    assert.are.same({4, 3, 3}, sizes(data.random_split(ds, {0.33, 0.33, 0.34})))
    assert.are.same({1, 0, 4}, sizes(data.random_split(data.TensorDataset(accel.arange(5)), {0.1, 0.1, 0.8})))
    local parts = data.random_split(ds, {6, 4}, {seed = 3})
    local seen = {}
    for _, p in ipairs(parts) do
      for i = 1, #p do seen[#seen + 1] = p:get(i):item() end
    end
    table.sort(seen)
    assert.are.same({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, seen)
    local again = data.random_split(ds, {6, 4}, {seed = 3})
    assert.are.equal(parts[2]:get(1):item(), again[2]:get(1):item())
    expect_error(function() data.random_split(ds, {3, 3}) end, "random_split: the lengths sum to 6, not to the dataset's length 10")
  end)

  it("torch's samplers and other names accel.data lacks are errors naming them", function()
    expect_error(function() local _ = data.RandomSampler end, "accel.data.RandomSampler is not provided")
    expect_error(function() local _ = data.IterableDataset end, "accel.data.IterableDataset is not provided")
  end)

  it("TensorDataset refuses tensors with different first dims, naming both shapes", function()
    expect_error(function() data.TensorDataset(accel.zeros(5, 2), accel.zeros(4)) end,
      "TensorDataset", "[5, 2]", "[4]", "first dimension")
    expect_error(function() data.TensorDataset(accel.zeros(3), 7) end, "TensorDataset", "argument 2")
    expect_error(function() data.TensorDataset(accel.tensor(1.0)) end, "TensorDataset", "0-dimensional")
  end)

  it("Dataset wraps Lua functions; len may be a number or a function", function()
    local ds = data.Dataset{len = 3, get = function(i) return i * 10 end}
    assert.are.equal(3, #ds)
    assert.are.equal(20, ds:get(2))
    local n = 2
    local dyn = data.Dataset{len = function() return n end, get = function(i) return i end}
    assert.are.equal(2, #dyn)
    n = 5
    assert.are.equal(5, #dyn)
    expect_error(function() data.Dataset{len = 3} end, "Dataset", "get")
    expect_error(function() data.Dataset{len = -1, get = print} end, "Dataset", "len")
  end)

  -- torch: ds[i] is sample i; here it would be a silent nil (a sample's fields are several values)
  it("ds[i] is an error pointing at ds:get(i), on every kind of dataset", function()
    local td = data.TensorDataset(accel.arange(4), accel.arange(4))
    expect_error(function() return td[1] end, "TensorDataset: a dataset has no ds[1]; read sample i with ds:get(i)")
    expect_error(function() return data.Dataset{len = 2, get = print}[2] end, "Dataset: a dataset has no ds[2]")
    expect_error(function() return data.Subset(td, {1})[1] end, "Subset: a dataset has no ds[1]")
    -- torch: Subset(ds, torch.tensor([-1]))[0] is the last sample
    assert.are.same({3, 0}, {data.Subset(td, accel.tensor({-1, 0})):get(1):item(), data.Subset(td, accel.tensor({-1, 0})):get(2):item()})
    expect_error(function() data.Subset(td, accel.tensor({-5})) end, "out of range", "-4..-1 from the end")
    expect_error(function() return data.ConcatDataset({td, td})[1] end, "ConcatDataset: a dataset has no ds[1]")
    expect_error(function() td:get_batch({1, 2}) end, "TensorDataset:get_batch: expected an int64 tensor of 0-based indices")
    -- torch: "Sum of input lengths does not equal the length of the input dataset!"; DataLoader(generator=) has no
    -- counterpart here
    expect_error(function() data.random_split(td, {0.5, 0.6}) end, "the lengths sum to 1.1, not to the dataset's length 4")
    expect_error(function() data.DataLoader(td, {generator = 1}) end, "option 'generator' is not taken", "seed = n")
  end)
end)

describe("DataLoader order", function()
  it("visits every sample exactly once per epoch, in batches of batch_size", function()
    local loader = data.DataLoader(ids_dataset(23), {batch_size = 5, shuffle = true, seed = 3})
    assert.are.equal(5, #loader)
    local orders = {}
    for e = 1, 3 do
      local batches = pass(loader)
      assert.are.equal(5, #batches)
      for b = 1, 4 do assert.are.equal(5, #batches[b]) end
      assert.are.equal(3, #batches[5])
      local seen, ids = {}, flatten(batches)
      for _, v in ipairs(ids) do
        assert.is_nil(seen[v], "sample " .. v .. " seen twice")
        seen[v] = true
      end
      assert.are.equal(23, #ids)
      orders[e] = table.concat(ids, ",")
    end
    assert.are_not.equal(orders[1], orders[2])
    assert.are_not.equal(orders[2], orders[3])
  end)

  it("is the documented Philox permutation of (seed, epoch)", function()
    for _, case in ipairs{{n = 10, seed = 1234}, {n = 37, seed = 0x123456789AB}, {n = 2, seed = -5}} do
      local loader = data.DataLoader(ids_dataset(case.n), {batch_size = 4, shuffle = true, seed = case.seed})
      for epoch = 0, 2 do
        assert.are.same(reference_perm(case.n, case.seed, epoch), flatten(pass(loader)))
      end
    end
  end)

  it("depends only on (seed, epoch), not on the global generator", function()
    local a = data.DataLoader(ids_dataset(50), {batch_size = 8, shuffle = true, seed = 99})
    local b = data.DataLoader(ids_dataset(50), {batch_size = 8, shuffle = true, seed = 99})
    local first = flatten(pass(a))
    accel.set_seed(1)
    accel.randn(100)
    assert.are.same(first, flatten(pass(b)))
    accel.randperm(7)
    local second = flatten(pass(a))
    b:set_epoch(1)
    assert.are.same(second, flatten(pass(b)))
    local c = data.DataLoader(ids_dataset(50), {batch_size = 8, shuffle = true, seed = 99})
    c:set_epoch(1)
    assert.are.same(second, flatten(pass(c)))
  end)

  it("leaves the global generator untouched while iterating", function()
    local loader = data.DataLoader(ids_dataset(30), {batch_size = 4, shuffle = true, seed = 5})
    accel.set_seed(17)
    local s0, o0 = accel.get_rng_state()
    pass(loader)
    local s1, o1 = accel.get_rng_state()
    assert.are.equal(s0, s1)
    assert.are.equal(o0, o1)
  end)

  it("draws its default seed from the global generator once, at construction", function()
    accel.set_seed(2024)
    local a = data.DataLoader(ids_dataset(40), {batch_size = 40, shuffle = true})
    local after_a = accel.randn(3):tolist()
    accel.set_seed(2024)
    local b = data.DataLoader(ids_dataset(40), {batch_size = 40, shuffle = true})
    accel.set_seed(2024)
    local no_draw = accel.randn(3):tolist()
    assert.are.same(flatten(pass(a)), flatten(pass(b)))
    assert.are_not.same(no_draw, after_a) -- construction advanced the generator
    accel.set_seed(2024)
    data.DataLoader(ids_dataset(40), {batch_size = 40}) -- no shuffle: draws nothing
    assert.are.same(no_draw, accel.randn(3):tolist())
    accel.set_seed(2025)
    local c = data.DataLoader(ids_dataset(40), {batch_size = 40, shuffle = true})
    assert.are_not.same(flatten(pass(a)), flatten(pass(c)))
  end)

  it("keeps the dataset order without shuffle", function()
    local loader = data.DataLoader(ids_dataset(7), {batch_size = 3})
    assert.are.same({{0, 1, 2}, {3, 4, 5}, {6}}, pass(loader))
    assert.are.same({{0, 1, 2}, {3, 4, 5}, {6}}, pass(loader))
  end)

  -- PyTorch 2.x (SequentialSampler) over a data set of 10^12 samples: len(loader) = 5 * 10^11 and
  -- the first batch [0, 1], at once; the order 0..n-1 is never built (8 TB of int64)
  it("without shuffle the order is never built: a loader over 10^12 samples starts at once", function()
    local N = 1000000000000
    local loader = data.DataLoader(data.Dataset{len = N, get = function(i) return i - 1 end}, {batch_size = 2})
    assert.are.equal(N // 2, #loader)
    assert.are.same({0, 1}, loader:iter()():tolist())
    loader:load_state_dict({epoch = 0, samples = N - 2})
    assert.are.same({{N - 2, N - 1}}, pass(loader))
    assert.are.same({2, 3}, loader:shard(1, 2):iter()():tolist())
    -- the padding of the last round still wraps to the start of the order (Accelerate's
    -- BatchSamplerShard over BatchSampler(SequentialSampler(range(5)), 2): [[0, 1], [4, 0]], [[2, 3], [1, 2]])
    local short = data.DataLoader(ids_dataset(5), {batch_size = 2})
    assert.are.same({{{0, 1}, {4, 0}}, {{2, 3}, {1, 2}}}, {pass(short:shard(0, 2)), pass(short:shard(1, 2))})
  end)

  it("get_batch gets indices it may change in place: later passes are not affected", function()
    local x = accel.arange(10, {device = "cpu"}) * 10 -- on the host, as the indices
    local ds = setmetatable({get = function(_, i) return x[i] end}, {__len = function() return 9 end})
    function ds.get_batch(_, idx) return x:index_select(1, idx:add_(1)) end -- 1-based, in place
    for _, shuffle in ipairs{false, true} do
      local loader = data.DataLoader(ds, {batch_size = 3, shuffle = shuffle, seed = 5})
      local want = {}
      for k, v in ipairs(shuffle and reference_perm(9, 5, 0) or {0, 1, 2, 3, 4, 5, 6, 7, 8}) do want[k] = (v + 1) * 10 end
      for _ = 1, 3 do
        loader:set_epoch(0)
        assert.are.same(want, flatten(pass(loader)))
      end
    end
  end)

  it("drop_last drops the incomplete last batch", function()
    local loader = data.DataLoader(ids_dataset(10), {batch_size = 4, drop_last = true})
    assert.are.equal(2, #loader)
    assert.are.same({{0, 1, 2, 3}, {4, 5, 6, 7}}, pass(loader))
    local shuffled = data.DataLoader(ids_dataset(10), {batch_size = 4, drop_last = true, shuffle = true, seed = 8})
    local batches = pass(shuffled)
    assert.are.equal(2, #batches)
    assert.are.same(slice(reference_perm(10, 8, 0), 0, 8), flatten(batches))
    assert.are.equal(0, #data.DataLoader(ids_dataset(3), {batch_size = 4, drop_last = true}))
  end)

  it("batches of a TensorDataset are the rows of its tensors at the batch's ids", function()
    local x = accel.randn(20, 3, 2)
    local y = accel.arange(20)
    local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = 6, shuffle = true, seed = 1})
    for xb, yb in loader:iter() do
      assert.are.same({yb:size(1), 3, 2}, {xb:size(1), xb:size(2), xb:size(3)})
      for b, id in ipairs(yb:tolist()) do
        assert.is_true(xb[b]:equal(x[id + 1]))
      end
    end
  end)
end)

describe("DataLoader epochs and resume", function()
  it("a full pass advances the epoch; an abandoned pass restarts it", function()
    local loader = data.DataLoader(ids_dataset(9), {batch_size = 2, shuffle = true, seed = 4})
    assert.are.same({epoch = 0, samples = 0}, loader:state_dict())
    pass(loader)
    assert.are.same({epoch = 1, samples = 0}, loader:state_dict())
    local it = loader:iter()
    local b1 = it():tolist()
    it()
    assert.are.same({epoch = 1, samples = 4}, loader:state_dict())
    assert.are.same(b1, loader:iter()():tolist()) -- same epoch again from its start
    assert.are.same(reference_perm(9, 4, 1), flatten(pass(loader)))
    assert.are.same({epoch = 2, samples = 0}, loader:state_dict())
  end)

  it("set_epoch selects the order of that epoch", function()
    local loader = data.DataLoader(ids_dataset(11), {batch_size = 3, shuffle = true, seed = 21})
    loader:set_epoch(5)
    assert.are.same(reference_perm(11, 21, 5), flatten(pass(loader)))
    assert.are.equal(6, loader:state_dict().epoch)
    expect_error(function() loader:set_epoch(-1) end, "set_epoch", "epoch")
  end)

  it("does not count a batch whose fetch raised as consumed (a resume would skip it)", function()
    local failing = true
    local ds = data.Dataset{len = 12, get = function(i)
      if failing and i == 5 then error("corrupt sample " .. i) end
      return accel.tensor({i - 1})
    end}
    local loader = data.DataLoader(ds, {batch_size = 3})
    local seen = 0
    local ok, err = pcall(function() for _ in loader:iter() do seen = seen + 1 end end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("corrupt sample 5", 1, true), err)
    assert.are.equal(1, seen)
    assert.are.same({epoch = 0, samples = 3}, loader:state_dict()) -- as a break after the first batch
    failing = false
    local resumed = data.DataLoader(ds, {batch_size = 3})
    resumed:load_state_dict(loader:state_dict())
    local first = resumed:iter()()
    assert.are.same({{3}, {4}, {5}}, first:tolist())
  end)

  it("load_state_dict resumes mid-epoch with the same remaining batches", function()
    local a = data.DataLoader(ids_dataset(30), {batch_size = 4, shuffle = true, seed = 77})
    pass(a)
    local rest, it, state = {}, a:iter(), nil
    for k = 1, 8 do
      local b = it()
      if k == 3 then state = a:state_dict() end
      if k > 3 then rest[#rest + 1] = b:tolist() end
    end
    assert.are.same({epoch = 1, samples = 12}, state)
    local b = data.DataLoader(ids_dataset(30), {batch_size = 4, shuffle = true, seed = 77})
    b:load_state_dict(state)
    b:set_epoch(1) -- the usual per-epoch call keeps the resume position
    assert.are.same(state, b:state_dict())
    assert.are.same(rest, pass(b))
    assert.are.same({epoch = 2, samples = 0}, b:state_dict())
    assert.are.same(reference_perm(30, 77, 2), flatten(pass(b))) -- then whole epochs
  end)

  -- Accelerate 1.16: save_state on the last batch of epoch 0 (inside the loop), load_state in a new process:
  -- the next pass is epoch 1's order, as the unbroken run's next pass
  it("a position at the end of an epoch is the start of the next one, saved or loaded", function()
    local loader = data.DataLoader(ids_dataset(8), {batch_size = 4, shuffle = true, seed = 1})
    loader:load_state_dict({epoch = 3, batches = 2})
    assert.are.same({epoch = 4, samples = 0}, loader:state_dict())
    assert.are.same(reference_perm(8, 1, 4), flatten(pass(loader)))
    local saver = data.DataLoader(ids_dataset(8), {batch_size = 4, shuffle = true, seed = 1})
    local it = saver:iter()
    it()
    assert.are.same({epoch = 0, samples = 4}, saver:state_dict())
    it() -- the last batch, the pass not yet closed
    assert.are.same({epoch = 1, samples = 0}, saver:state_dict())
    local dropping = data.DataLoader(ids_dataset(9), {batch_size = 4, drop_last = true}) -- sample 9 is never used
    for _ in dropping:iter() do end
    dropping:load_state_dict({epoch = 0, samples = 8})
    assert.are.same({epoch = 1, samples = 0}, dropping:state_dict())
  end)

  it("skip_first_batches starts at batch n + 1 without loading the skipped samples", function()
    local calls = 0
    local ds = data.Dataset{len = 20, get = function(i)
      calls = calls + 1
      return i
    end}
    local loader = data.DataLoader(ds, {batch_size = 3, shuffle = true, seed = 9})
    local full = pass(loader) -- epoch 0
    loader:set_epoch(0)
    calls = 0
    local skipped = loader:skip_first_batches(4)
    assert.are.equal(3, #skipped)
    assert.are.equal(7, #loader)
    local rest = {}
    for b in skipped:iter() do
      rest[#rest + 1] = b:tolist()
    end
    assert.are.equal(20 - 12, calls)
    assert.are.same({full[5], full[6], full[7]}, rest)
    -- the pass through the skip loader finished epoch 0 for the loader too
    assert.are.same({epoch = 1, samples = 0}, loader:state_dict())
    -- as Accelerate's skip loader, it skips on every pass (of epoch 1 now), and its length stays 3
    local e1 = pass(loader:skip_first_batches(0))
    loader:set_epoch(1)
    assert.are.same({e1[5], e1[6], e1[7]}, pass(skipped))
    assert.are.equal(3, #skipped)
  end)

  it("refuses a state from a longer loader", function()
    local loader = data.DataLoader(ids_dataset(10), {batch_size = 5})
    expect_error(function() loader:load_state_dict({epoch = 0, batches = 3}) end, "load_state_dict", "3", "2 batches")
    expect_error(function() loader:load_state_dict({epoch = "x", batches = 0}) end, "load_state_dict", "epoch")
  end)

  it("end_of_dataloader is true during the last batch only", function()
    local loader = data.DataLoader(ids_dataset(5), {batch_size = 2})
    local flags = {}
    for _ in loader:iter() do flags[#flags + 1] = loader:end_of_dataloader() end
    assert.are.same({false, false, true}, flags)
    assert.is_false(loader:end_of_dataloader())
  end)
end)

describe("DataLoader sharding", function()
  local function shards(n, bs, N, opts, loader_opts)
    loader_opts = loader_opts or {}
    loader_opts.batch_size, loader_opts.shuffle, loader_opts.seed = bs, true, 123
    local base = data.DataLoader(ids_dataset(n), loader_opts)
    local out = {}
    for r = 0, N - 1 do out[r] = pass(base:shard(r, N, opts)) end
    return out, pass(base)
  end

  it("rank r gets global batches r, r + N, ...; even_batches pads by wrapping to the start", function()
    for _, N in ipairs{2, 3} do
      for _, n in ipairs{1, 5, 10, 11, 12, 13} do
        for _, bs in ipairs{1, 2, 3, 4} do
          local got, global = shards(n, bs, N, {even_batches = true})
          local counts
          for r = 0, N - 1 do
            assert.are.same(shard_no_split(global, bs, N, r, false, true), got[r], ("n=%d bs=%d N=%d r=%d"):format(n, bs, N, r))
            counts = counts or #got[r]
            assert.are.equal(counts, #got[r])
            for _, b in ipairs(got[r]) do assert.are.equal(bs, #b) end
          end
          -- dealt back round-robin: the global order, then padding from its start
          local union = {}
          for j = 1, counts do
            for r = 0, N - 1 do union[#union + 1] = got[r][j] end
          end
          union = flatten(union)
          local order = flatten(global)
          for k = 1, #union do assert.are.equal(order[(k - 1) % n + 1], union[k]) end
          assert.is_true(#union >= n and #union - n < N * bs)
        end
      end
    end
  end)

  it("without even_batches the shards partition the global order exactly", function()
    for _, n in ipairs{7, 10, 12} do
      local got, global = shards(n, 3, 2, {even_batches = false})
      for r = 0, 1 do assert.are.same(shard_no_split(global, 3, 2, r, false, false), got[r]) end
      local union = {}
      for j = 1, math.max(#got[0], #got[1]) do
        union[#union + 1] = got[0][j]
        union[#union + 1] = got[1][j]
      end
      assert.are.same(flatten(global), flatten(union))
    end
  end)

  it("drop_last keeps only whole rounds of full batches", function()
    for _, n in ipairs{10, 13, 16, 17} do
      local got, global = shards(n, 2, 3, {even_batches = true}, {drop_last = true})
      for r = 0, 2 do
        assert.are.same(shard_no_split(global, 2, 3, r, true, true), got[r])
        assert.are.equal(math.floor(math.floor(n / 2) / 3), #got[r])
      end
    end
  end)

  it("split_batches cuts every global batch N ways", function()
    for _, even in ipairs{true, false} do
      for _, n in ipairs{3, 8, 10, 11} do
        local got, global = shards(n, 4, 2, {split_batches = true, even_batches = even})
        for r = 0, 1 do
          assert.are.same(shard_split(global, 4, 2, r, false, even), got[r], ("n=%d even=%s r=%d"):format(n, even, r))
        end
      end
    end
    local got, global = shards(10, 4, 2, {split_batches = true}, {drop_last = true})
    for r = 0, 1 do assert.are.same(shard_split(global, 4, 2, r, true, true), got[r]) end
  end)

  it("the length of a shard is its number of batches (with split_batches, the global count)", function()
    local base = data.DataLoader(ids_dataset(9), {batch_size = 2})
    assert.are.equal(3, #base:shard(0, 2))
    assert.are.equal(3, #base:shard(1, 2))
    assert.are.equal(3, #base:shard(0, 2, {even_batches = false}))
    assert.are.equal(2, #base:shard(1, 2, {even_batches = false}))
    -- accelerate 1.16's BatchSamplerShard(9 samples, batch 4, 2 processes, split_batches, even_batches = False):
    -- rank 0 yields [[0, 1], [4, 5], [8]], rank 1 [[2, 3], [6, 7]], and len() is 3 on both
    local wide = data.DataLoader(ids_dataset(9), {batch_size = 4})
    for r = 0, 1 do
      local shard = wide:shard(r, 2, {split_batches = true, even_batches = false})
      assert.are.equal(3, #shard)
      assert.are.equal(r == 0 and 3 or 2, #pass(shard))
    end
    local s = base:shard(1, 2, {split_batches = false})
    assert.are.same({1, 2, true, false}, {s.process_index, s.num_processes, s.even_batches, s.split_batches})
    assert.are.equal(data.DataLoader, getmetatable(s))
    assert.are.equal(data.DataLoader, getmetatable(base))
    assert.are.equal(#base, #base:shard(0, 1))
    assert.are.same(pass(base), pass(base:shard(0, 1)))
  end)

  it("shards resume mid-epoch and reshuffle per epoch like the global order", function()
    local base = data.DataLoader(ids_dataset(40), {batch_size = 3, shuffle = true, seed = 6})
    local s = base:shard(1, 2)
    local e0 = pass(s)
    local e1 = pass(s)
    assert.are_not.same(e0, e1)
    local t = base:shard(1, 2)
    t:load_state_dict({epoch = 1, batches = 2})
    assert.are.same(slice(e1, 2, #e1), pass(t))
    local u = base:shard(1, 2):skip_first_batches(5)
    assert.are.same(slice(e0, 5, #e0), pass(u))
  end)

  it("a position is samples of the global order: any number of shards continues it", function()
    local order = reference_perm(23, 6, 0)
    local saver = data.DataLoader(ids_dataset(23), {batch_size = 2, shuffle = true, seed = 6}):shard(1, 2)
    local it = saver:iter()
    it()
    it()
    it()
    assert.are.same({epoch = 0, samples = 12}, saver:state_dict()) -- 3 rounds of 2 shards x 2
    -- 3 shards from sample 12: shard r's batch j holds positions 12 + (r + 3j) * 2 .. + 1, the last round
    -- padded from the start of the order
    for r = 0, 2 do
      local t = data.DataLoader(ids_dataset(23), {batch_size = 2, shuffle = true, seed = 6}):shard(r, 3)
      t:load_state_dict({epoch = 0, samples = 12})
      local want = {}
      for j = 0, 1 do
        local p = 12 + (r + 3 * j) * 2
        want[#want + 1] = {order[p % 23 + 1], order[(p + 1) % 23 + 1]}
      end
      assert.are.same(want, pass(t))
      assert.are.same({epoch = 1, samples = 0}, t:state_dict())
    end
    local last = data.DataLoader(ids_dataset(23), {batch_size = 2}):shard(0, 2)
    for _ in last:iter() do
      if last:end_of_dataloader() then assert.are.same({epoch = 1, samples = 0}, last:state_dict()) end
    end
  end)

  it("refuses a position past the end or between batches, naming it", function()
    local loader = data.DataLoader(ids_dataset(10), {batch_size = 4})
    expect_error(function() loader:load_state_dict({epoch = 0, samples = 11}) end,
      "the position (epoch 0, 11 of 10 samples consumed) is past the end")
    expect_error(function() loader:load_state_dict({epoch = 0, samples = 6}) end,
      "the position (epoch 0, 6 of 10 samples consumed) is not a whole number of batches of 4 for 1 process")
    expect_error(function() loader:load_state_dict({epoch = 0, samples = -4}) end, "samples must be an integer >= 0")
    loader:load_state_dict({epoch = 0, samples = 10}) -- the end: the next epoch's start
    assert.are.same({epoch = 1, samples = 0}, loader:state_dict())
    assert.are.same({{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}, pass(loader))
  end)

  it("with drop_last, says when a layout would skip what the saving one still yields", function()
    local base = data.DataLoader(ids_dataset(23), {batch_size = 2, drop_last = true})
    -- from 12: 5 full batches left; 2 shards yield 4 of them (to 20), 3 shards only 3 (to 18), 1 shard all 5
    local why = base:shard(0, 3):position_problem(0, 12, {num_processes = 2})
    assert.is_truthy(why and why:find("samples 19 to 20 of the epoch's order, which 2 processes would still see", 1, true))
    assert.is_nil(base:position_problem(0, 12, {num_processes = 2}))
    assert.is_nil(base:shard(1, 2):position_problem(0, 12, {num_processes = 2}))
    -- split_batches on 2 yields every full batch (to 22): 3 shards would lose samples 19 to 22
    why = base:shard(0, 3):position_problem(0, 12, {num_processes = 2, split_batches = true})
    assert.is_truthy(why and why:find("saved by 2 processes with split_batches) cannot be continued exactly by "
      .. "3 processes", 1, true) and why:find("samples 19 to 22", 1, true))
  end)

  it("rejects bad shard arguments", function()
    local base = data.DataLoader(ids_dataset(10), {batch_size = 3})
    expect_error(function() base:shard(2, 2) end, "shard", "rank", "0..1")
    expect_error(function() base:shard(0, 0) end, "shard", "world_size")
    expect_error(function() base:shard(0, 2, {split_batches = true}) end, "split_batches", "(3)", "(2)")
    expect_error(function() base:shard(0, 2):shard(0, 2) end, "already")
    expect_error(function() base:shard(0, 2, {evenbatches = true}) end, "evenbatches")
  end)
end)

describe("collation", function()
  it("numbers become int64 (integers) or float32 tensors, tensors are stacked", function()
    local ds = data.Dataset{len = 4, get = function(i) return accel.full({2, 3}, i), i, i / 2, i % 2 == 0, "s" .. i end}
    local loader = data.DataLoader(ds, {batch_size = 4})
    local t, ints, floats, bools, strs = loader:iter()()
    assert.are.same({4, 2, 3}, {t:size(1), t:size(2), t:size(3)})
    assert.are.equal(3.0, t[3][2][1]:item())
    assert.are.equal(accel.int64, ints.dtype)
    assert.are.same({1, 2, 3, 4}, ints:tolist())
    assert.are.equal(accel.float32, floats.dtype)
    assert.are.same({0.5, 1.0, 1.5, 2.0}, floats:tolist())
    assert.are.equal(accel.bool, bools.dtype)
    assert.are.same({"s1", "s2", "s3", "s4"}, strs)
  end)

  it("tables are collated key by key", function()
    local ds = data.Dataset{len = 3, get = function(i) return {x = accel.ones(2) * i, label = i - 1} end}
    local batch = data.DataLoader(ds, {batch_size = 3}):iter()()
    assert.are.same({{1.0, 1.0}, {2.0, 2.0}, {3.0, 3.0}}, batch.x:tolist())
    assert.are.same({0, 1, 2}, batch.label:tolist())
    local c = data.default_collate({{a = 1, b = {2, 3}}, {a = 4, b = {5, 6}}})
    assert.are.same({1, 4}, c.a:tolist())
    assert.are.same({2, 5}, c.b[1]:tolist())
  end)

  it("lists of different lengths, or samples with different keys, are an error (not cut to the first)", function()
    local seqs = {{5, 6}, {7, 8, 9}}
    local ds = data.Dataset{len = 2, get = function(i) return {input_ids = seqs[i]} end}
    expect_error(function() data.DataLoader(ds, {batch_size = 2}):iter()() end,
      "each element in list of batch should be of equal size", "item 1 has 2", "item 2 has 3")
    expect_error(function() data.default_collate({{1, 2}, {3, 4, 5}}) end, "should be of equal size")
    expect_error(function() data.default_collate({{a = 1}, {a = 2, b = 3}}) end, "has key b but")
  end)

  it("a dataset length given as a float (8 / 2) indexes with integers", function()
    local got = {}
    local ds = data.Dataset{len = 8 / 2, get = function(i) return i end}
    for b in data.DataLoader(ds, {batch_size = 4, collate_fn = function(x) return x end}):iter() do got = b end
    assert.are.same({"1", "2", "3", "4"}, {tostring(got[1]), tostring(got[2]), tostring(got[3]), tostring(got[4])})
    local bad = data.Dataset{len = function() return 4.5 end, get = print}
    expect_error(function() data.DataLoader(bad, {batch_size = 2}) end, "Dataset: len() must be an integer >= 0, got 4.5")
  end)

  it("collate_fn receives the list of samples and its results are yielded", function()
    local ds = data.TensorDataset(accel.arange(6), accel.arange(6) * 10)
    local seen
    local loader = data.DataLoader(ds, {batch_size = 4, collate_fn = function(batch)
      seen = batch
      local s = 0
      for _, sample in ipairs(batch) do s = s + sample[1]:item() + sample[2]:item() end
      return s, #batch
    end})
    local it = loader:iter()
    local s, n = it()
    assert.are.equal(0 + 1 + 2 + 3 + 10 * (0 + 1 + 2 + 3), s)
    assert.are.equal(4, n)
    assert.are.equal(4, #seen)
    local single = data.DataLoader(data.Dataset{len = 2, get = function(i) return {id = i} end},
      {batch_size = 2, collate_fn = function(batch) return batch end})
    assert.are.same({{id = 1}, {id = 2}}, single:iter()())
  end)

  it("items of different shapes give an error naming both shapes and positions", function()
    local ds = data.Dataset{len = 4, get = function(i) return accel.zeros(i == 3 and 4 or 3), i end}
    local loader = data.DataLoader(ds, {batch_size = 4})
    expect_error(function() for _ in loader:iter() do end end, "[3]", "[4]", "item 1", "item 3")
    local shuffled = data.DataLoader(ds, {batch_size = 4, shuffle = true, seed = 3})
    expect_error(function() for _ in shuffled:iter() do end end, "[4]", "item 3")
    expect_error(function() data.default_collate({accel.zeros(2), accel.zeros(2, 1)}) end, "[2]", "[2, 1]", "sample 2")
  end)

  it("samples with different field counts or kinds are errors", function()
    local ragged = data.Dataset{len = 2, get = function(i) if i == 1 then return 1, 2 end return 1 end}
    expect_error(function() for _ in data.DataLoader(ragged, {batch_size = 2}):iter() do end end, "item 2", "1 fields", "2")
    local mixed = data.Dataset{len = 2, get = function(i) if i == 1 then return 1 end return accel.zeros(1) end}
    expect_error(function() for _ in data.DataLoader(mixed, {batch_size = 2}):iter() do end end, "number", "tensor")
  end)
end)

describe("DataLoader options", function()
  it("batch_size must be a positive integer", function()
    local ds = ids_dataset(4)
    expect_error(function() data.DataLoader(ds, {batch_size = 0}) end, "batch_size", "positive", "0")
    expect_error(function() data.DataLoader(ds, {batch_size = -2}) end, "batch_size", "-2")
    expect_error(function() data.DataLoader(ds, {batch_size = 1.5}) end, "batch_size", "1.5")
  end)

  it("unknown options, non-datasets and bad flags are errors", function()
    local ds = ids_dataset(4)
    expect_error(function() data.DataLoader(ds, {batchsize = 2}) end, "unknown option", "batchsize")
    expect_error(function() data.DataLoader(accel.zeros(3)) end, "DataLoader", "TensorDataset")
    expect_error(function() data.DataLoader({}, {}) end, "DataLoader", "get")
    expect_error(function() data.DataLoader(ds, {shuffle = 1}) end, "shuffle")
    expect_error(function() data.DataLoader(ds, {seed = 1.5}) end, "seed")
    expect_error(function() data.DataLoader(ds, {batch_size = "2"}) end, 'batch_size must be a positive integer, got string "2"')
    expect_error(function() data.DataLoader(ds, {collate_fn = 3}) end, "collate_fn")
    assert.are.equal(2, #data.DataLoader(ds, {batch_size = 2, num_workers = 4, pin_memory = true}))
    -- the ignored worker options still get PyTorch's value checks
    expect_error(function() data.DataLoader(ds, {num_workers = -1}) end, "num_workers option should be a non-negative")
    expect_error(function() data.DataLoader(ds, {num_workers = "x"}) end, "num_workers option should be a non-negative")
    expect_error(function() data.DataLoader(ds, {persistent_workers = true}) end, "persistent_workers option needs")
    expect_error(function() data.DataLoader(ds, {prefetch_factor = 2}) end, "prefetch_factor option could only be")
    expect_error(function() data.DataLoader(ds, {pin_memory = 1}) end, "pin_memory must be true or false")
    assert.are.equal(4, #data.DataLoader(ds, {num_workers = 2, persistent_workers = true, prefetch_factor = 2}))
    -- PyTorch 2.15: "ValueError: prefetch_factor option should be non-negative"
    expect_error(function() data.DataLoader(ds, {num_workers = 2, prefetch_factor = -1}) end,
      "prefetch_factor option should be a non-negative integer, got -1")
    expect_error(function() data.DataLoader(ds, {num_workers = 2, prefetch_factor = "x"}) end, "prefetch_factor")
    expect_error(function() data.DataLoader(ds, {num_workers = "2"}) end, 'got string "2"')
    -- torch's defaults of its other worker options are accepted (there are no workers: they change nothing)
    assert.are.equal(2, #data.DataLoader(ds, {batch_size = 2, timeout = 0, in_order = true, pin_memory_device = ""}))
    expect_error(function() data.DataLoader(ds, {timeout = -1}) end, "timeout option should be non-negative")
    -- a table dataset without __len (a ported __len__ method, or data.Dataset{} forgotten) has #ds == 0:
    -- PyTorch raises "object of type 'D' has no len()" instead of training on nothing
    local Ported = {}
    Ported.__index = Ported
    function Ported:__len__() return 10 end
    function Ported:get(i) return i end
    expect_error(function() data.DataLoader(setmetatable({}, Ported)) end, "the dataset has no length")
    expect_error(function() data.DataLoader({len = 10, get = function(_, i) return i end}) end, "data.Dataset{len")
    -- collate_fn receives single samples: a dataset with only get_batch cannot feed it
    local batched = setmetatable({}, {__len = function() return 4 end,
      __index = {get_batch = function(_, idx) return idx end}})
    assert.are.equal(2, #data.DataLoader(batched, {batch_size = 2}))
    expect_error(function() data.DataLoader(batched, {collate_fn = function(s) return s end}) end,
      "collate_fn needs the dataset's get(i)")
    -- ipairs(loader) would end at once and train on nothing: loader[i] is an error
    local loader = data.DataLoader(ds, {batch_size = 2})
    expect_error(function() for _ in ipairs(loader) do end end, "a loader has no loader[1]", "loader:iter()")
  end)

  -- PyTorch 2.x: DataLoader(ds, batch_size=math.inf) raises "batch_size should be a positive integer
  -- value, but got batch_size=inf"; inf and 2^63 pass a v == floor(v) test but are no integers
  it("inf and numbers past the largest integer are refused where an integer is needed", function()
    local ds = ids_dataset(4)
    expect_error(function() data.DataLoader(ds, {batch_size = math.huge}) end, "batch_size must be a positive integer", "inf")
    expect_error(function() data.DataLoader(ds, {batch_size = 0 / 0}) end, "batch_size must be a positive integer, got nan")
    expect_error(function() data.DataLoader(ds, {shuffle = true, seed = 2 ^ 63}) end, "seed must be an integer", "2^63 - 1")
    expect_error(function() data.DataLoader(ds, {shuffle = true, seed = -math.huge}) end, "seed must be an integer", "-inf")
    local loader = data.DataLoader(ds, {batch_size = 2, shuffle = true, seed = 1})
    expect_error(function() loader:set_epoch(math.huge) end, "set_epoch: epoch must be an integer", "inf")
    -- a shuffled epoch e draws from Philox block e * 2^40: epochs stop below 2^24
    expect_error(function() loader:set_epoch(2 ^ 24) end, "set_epoch: epoch must be an integer in 0..16777215, got 16777216")
    expect_error(function() loader:load_state_dict({epoch = math.huge, samples = 0}) end, "load_state_dict: epoch", "inf")
    expect_error(function() loader:skip_first_batches(math.huge) end, "skip_first_batches: n", "inf")
    expect_error(function() data.Dataset{len = math.huge, get = print} end, "Dataset: len must be an integer >= 0, got inf")
    -- 2^62 batches of 2 are past the end of the epoch (2^62 * 2 would wrap around to 0 as an int64)
    local skipped = loader:skip_first_batches(2 ^ 62)
    assert.are.same({0, {}}, {#skipped, pass(skipped)})
  end)

  -- PyTorch 2.x: len(ds) with __len__ returning 2.5 raises "'float' object cannot be interpreted as an
  -- integer", with -3 "__len__() should return >= 0", and an error raised in __len__ comes through as it is
  it("the dataset's length must be an integer >= 0, and an error raised by #ds comes through", function()
    local function with_len(f) return setmetatable({get = function(_, i) return i end}, {__len = f}) end
    expect_error(function() data.DataLoader(with_len(function() return 2.5 end)) end, "length (#ds) must be an integer >= 0, got 2.5")
    expect_error(function() data.DataLoader(with_len(function() return -3 end)) end, "length (#ds) must be an integer >= 0, got -3")
    local ok, err = pcall(data.DataLoader, with_len(function() error("my len failed") end))
    assert.is_false(ok)
    assert.truthy(tostring(err):find("my len failed", 1, true), err)
    ok, err = pcall(data.DataLoader, data.Dataset{len = function() error("my len failed") end, get = print})
    assert.truthy(not ok and tostring(err):find("my len failed", 1, true), err)
    local n = 4 -- a length that goes bad later is refused when the next pass starts
    local loader = data.DataLoader(with_len(function() return n end), {batch_size = 2})
    n = -1
    expect_error(function() loader:iter() end, "length (#ds) must be an integer >= 0, got -1")
  end)

  -- PyTorch yields None for a collate_fn returning None; a Lua loop ends at a nil, so it is an error
  it("a collate_fn or get_batch that returns nil is an error naming it and the batch", function()
    local forgot = data.DataLoader(ids_dataset(6), {batch_size = 2, collate_fn = function(b) local _ = accel.stack(b) end})
    expect_error(function() for _ in forgot:iter() do end end, "collate_fn returned nil for batch 1")
    local custom = setmetatable({get = function(_, i) return i end}, {__len = function() return 4 end})
    function custom.get_batch(_, idx) if idx[1]:item() == 2 then return nil end return idx end
    expect_error(function() for _ in data.DataLoader(custom, {batch_size = 2}):iter() do end end,
      "the dataset's get_batch returned nil for batch 2")
  end)

  it("an empty dataset gives no batches, and cannot be shuffled", function()
    local empty = data.Dataset{len = 0, get = function() end}
    local loader = data.DataLoader(empty, {batch_size = 3})
    assert.are.equal(0, #loader)
    assert.are.same({}, pass(loader))
    -- torch 2.15: "ValueError: num_samples should be a positive integer value, but got num_samples=0"
    expect_error(function() data.DataLoader(empty, {shuffle = true}) end,
      "DataLoader: shuffle needs a dataset of at least one sample, this one has 0")
  end)
end)

-- ---------------------------------------------------------------------

local function idx_bytes(code, shape, fmt, values)
  local parts = {string.pack(">BBBB", 0, 0, code, #shape)}
  for _, d in ipairs(shape) do parts[#parts + 1] = string.pack(">I4", d) end
  for _, v in ipairs(values) do parts[#parts + 1] = string.pack(fmt, v) end
  return table.concat(parts)
end

describe("read_idx", function()
  local cases = {
    {code = 0x08, fmt = ">B", dtype = accel.uint8, shape = {2, 3, 2}, values = {0, 1, 2, 127, 128, 255, 9, 8, 7, 6, 5, 4}},
    {code = 0x0C, fmt = ">i4", dtype = accel.int32, shape = {4}, values = {-2147483648, -1, 65536 + 3, 2147483647}},
    {code = 0x0D, fmt = ">f", dtype = accel.float32, shape = {2, 2}, values = {1.5, -0.25, 3e8, 0.0}},
    {code = 0x0E, fmt = ">d", dtype = accel.float64, shape = {3}, values = {math.pi, -1e-300, 2 ^ 60}},
    {code = 0x0B, fmt = ">i2", dtype = accel.int32, shape = {3}, values = {-32768, -2, 300}},
    {code = 0x09, fmt = ">i1", dtype = accel.int32, shape = {2}, values = {-128, 5}},
  }

  local function check(t, case)
    assert.are.equal(case.dtype, t.dtype)
    assert.are.same(case.shape, shape_of(t))
    assert.are.same(case.values, t:reshape(-1):tolist())
  end

  it("reads every element type, plain and gzipped", function()
    for _, case in ipairs(cases) do
      local bytes = idx_bytes(case.code, case.shape, case.fmt, case.values)
      local plain, gz = tmpname(".idx"), tmpname(".idx.gz")
      write_file(plain, bytes)
      write_gzip(gz, bytes)
      assert.are_not.equal(bytes, read_file(gz))
      check(data.read_idx(plain), case)
      check(data.read_idx(gz), case)
      os.remove(plain)
      os.remove(gz)
    end
  end)

  it("names the file and the problem for bad files", function()
    local good = idx_bytes(0x08, {4, 5}, ">B", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
    local path, gz = tmpname(".idx"), tmpname(".idx.gz")
    write_file(path, good:sub(1, #good - 3))
    expect_error(function() data.read_idx(path) end, path, "truncated", "20 uint8 elements", "[4, 5]")
    write_file(path, good:sub(1, 6))
    expect_error(function() data.read_idx(path) end, path, "truncated", "dimension sizes")
    write_file(path, "")
    expect_error(function() data.read_idx(path) end, path, "truncated", "header")
    write_gzip(gz, good)
    local z = read_file(gz)
    write_file(gz, z:sub(1, #z - 12))
    expect_error(function() data.read_idx(gz) end, gz, "truncated")
    -- Python's gzip: the stream cut in its 8-byte trailer (CRC-32, size) raises "Compressed file ended
    -- before the end-of-stream marker was reached", a changed CRC-32 "CRC check failed"
    write_file(gz, z:sub(1, #z - 6))
    expect_error(function() data.read_idx(gz) end, gz, "is truncated: the gzip stream ends before its end-of-stream marker")
    write_file(gz, z:sub(1, #z - 8) .. string.char((z:byte(#z - 7) + 1) % 256) .. z:sub(#z - 6))
    local err = expect_error(function() data.read_idx(gz) end, gz, "is a corrupt gzip file", "incorrect data check")
    assert.is_nil(err:find("header", 1, true), err) -- the header bytes are fine
    write_file(path, "\1\2\8\1" .. string.pack(">I4", 0))
    expect_error(function() data.read_idx(path) end, path, "not an IDX file")
    write_file(path, "\0\0\7\1" .. string.pack(">I4", 0))
    expect_error(function() data.read_idx(path) end, path, "element type 0x07")
    write_file(path, good .. "xx")
    expect_error(function() data.read_idx(path) end, path, "bytes after")
    os.remove(path)
    os.remove(gz)
    expect_error(function() data.read_idx(path) end, path, "cannot open", "No such file")
  end)
end)

describe("TokenFile", function()
  local function token_file(tokens, over)
    over = over or {}
    local h = {over.magic or 20240520, over.version or 1, over.count or #tokens}
    local parts = {string.pack("<i4i4i4", h[1], h[2], h[3]), string.rep("\0", 1024 - 12)}
    for _, t in ipairs(tokens) do parts[#parts + 1] = string.pack("<I2", t) end
    local path = tmpname(".bin")
    write_file(path, table.concat(parts) .. (over.extra or ""))
    return path
  end

  local toks = {5, 300, 65535, 0, 50256, 7, 32768, 1, 2, 3, 4}

  it("maps the token stream and serves (x, y) blocks shifted by one", function()
    local path = token_file(toks)
    local tf = data.TokenFile(path, {block_size = 3})
    assert.are.equal(11, tf.num_tokens)
    assert.are.equal(accel.uint8, tf.tokens.dtype)
    assert.are.same({11, 2}, {tf.tokens:size(1), tf.tokens:size(2)})
    assert.are.same({44, 1}, {tf.tokens[2][1]:item(), tf.tokens[2][2]:item()}) -- 300 = 0x012C, little-endian
    assert.are.equal(3, #tf) -- blocks of 4 tokens at 0, 3, 6 (9 + 4 > 11)
    local x, y = tf:get(2)
    assert.are.equal(accel.int64, x.dtype)
    assert.are.same({0, 50256, 7}, x:tolist())
    assert.are.same({50256, 7, 32768}, y:tolist())
    assert.are.same({0, 50256, 7}, (tf:get(4 / 2)):tolist()) -- a whole float is that index
    expect_error(function() data.TokenFile(path, {block_size = math.huge}) end, "block_size must be an integer >= 1", "inf")
    assert.are.same({65535, 0}, tf:ids(3, 2):tolist())
    local loader = data.DataLoader(tf, {batch_size = 2})
    local xb, yb = loader:iter()()
    assert.are.same({{5, 300, 65535}, {0, 50256, 7}}, xb:tolist())
    assert.are.same({{300, 65535, 0}, {50256, 7, 32768}}, yb:tolist())
    -- the mapping is copy-on-write: writing into tokens changes this copy, not the file (it used to crash)
    tf.tokens:zero_()
    assert.are.equal(0, tf.tokens:sum():item())
    assert.are.same({300, 65535}, data.TokenFile(path, {block_size = 3}):ids(2, 2):tolist())
    local overlapping = data.TokenFile(path, {block_size = 4, stride = 1})
    assert.are.equal(7, #overlapping)
    local ox, oy = overlapping:get(7)
    assert.are.same({32768, 1, 2, 3}, ox:tolist())
    assert.are.same({1, 2, 3, 4}, oy:tolist())
    expect_error(function() overlapping:get(8) end, "TokenFile", "8", "1..7")
    expect_error(function() overlapping:get("1") end, 'TokenFile: index must be a number, got string "1"')
    expect_error(function() return overlapping[1] end, "TokenFile: a dataset has no ds[1]; read sample i with ds:get(i)")
    -- 11 tokens hold no sample of 11 + 1: an error naming the file (a 0-sample loader would train on nothing)
    expect_error(function() data.TokenFile(path, {block_size = 11}) end, path, "holds 11 tokens",
      "a sample needs block_size + 1 = 12")
    tf, overlapping, loader = nil, nil, nil
    collectgarbage()
    os.remove(path)
  end)

  it("validates the header with clear errors", function()
    local bad_magic = token_file(toks, {magic = 1234})
    expect_error(function() data.TokenFile(bad_magic, {block_size = 2}) end, bad_magic, "magic 1234", "20240520")
    local bad_version = token_file(toks, {version = 2})
    expect_error(function() data.TokenFile(bad_version, {block_size = 2}) end, bad_version, "version 2")
    local short = token_file(toks, {count = 12})
    expect_error(function() data.TokenFile(short, {block_size = 2}) end, short, "truncated", "12 tokens")
    local long = token_file(toks, {extra = "abcd"})
    expect_error(function() data.TokenFile(long, {block_size = 2}) end, long, "longer")
    local tiny = tmpname(".bin")
    write_file(tiny, "abc")
    expect_error(function() data.TokenFile(tiny, {block_size = 2}) end, tiny, "header")
    expect_error(function() data.TokenFile(tiny) end, "block_size")
    expect_error(function() data.TokenFile(tiny .. ".missing", {block_size = 2}) end, "cannot open")
    for _, p in ipairs{bad_magic, bad_version, short, long, tiny} do os.remove(p) end
  end)
end)

describe("CSV", function()
  local text = 'a,"b",label\r\n1,2.5,0\r\n\r\n-3,4e2,1\r\n 5 , "6" ,2\r\n'

  it("reads a table into a dataset of the chosen column groups", function()
    local path = tmpname(".csv")
    write_file(path, text)
    local t, names = data.read_csv(path)
    assert.are.same({"a", "b", "label"}, names)
    assert.are.equal(accel.float32, t.dtype)
    assert.are.same({{1, 2.5, 0}, {-3, 400, 1}, {5, 6, 2}}, t:tolist())
    local ds = data.CSV(path, {columns = {{"a", "b"}, "label"}, dtype = {accel.float32, accel.int64}})
    assert.are.equal(3, #ds)
    assert.are.same({"a", "b", "label"}, ds.columns)
    local x, y = ds:get(2)
    assert.are.same({-3, 400}, x:tolist())
    assert.are.equal(accel.int64, y.dtype)
    assert.are.equal(1, y:item())
    local all = data.CSV(path, {dtype = accel.float64})
    assert.are.same({5, 6, 2}, all:get(3):tolist())
    local by_index = data.CSV(path, {columns = {3, {1}}})
    local l, a = by_index:get(1)
    assert.are.same({0, {1}}, {l:item(), a:tolist()})
    l, a = data.CSV(path, {columns = {6 / 2, {1.0}}}):get(1) -- whole floats are those columns
    assert.are.same({0, {1}}, {l:item(), a:tolist()})
    os.remove(path)
  end)

  it("reads files without a header and with other delimiters", function()
    local path = tmpname(".tsv")
    write_file(path, "1\t2\n3\t4")
    local t, names = data.read_csv(path, {header = false, delimiter = "\t", dtype = accel.int64})
    assert.is_nil(names)
    assert.are.same({{1, 2}, {3, 4}}, t:tolist())
    os.remove(path)
  end)

  it("names file:line for malformed rows", function()
    local path = tmpname(".csv")
    write_file(path, "a,b\n1,2\n3\n")
    expect_error(function() data.CSV(path) end, path .. ":3", "expected 2 fields", "found 1")
    write_file(path, "a,b\n1,2\n3,x4\n")
    expect_error(function() data.read_csv(path) end, path .. ":3", 'column 2 ("b")', '"x4" is not a number')
    write_file(path, "a,b\n1,\n")
    expect_error(function() data.read_csv(path) end, path .. ":2", 'column 2 ("b") is empty')
    write_file(path, "a,b\n1,2\n")
    expect_error(function() data.CSV(path, {columns = {"c"}}) end, "no column 'c'", "a, b")
    expect_error(function() data.CSV(path, {columns = {3}}) end, "column 3", "1..2")
    expect_error(function() data.CSV(path, {delimiter = ";;"}) end, "delimiter")
    expect_error(function() data.read_csv(path, {dtype = "int8"}) end, "read_csv: " .. path .. ": unknown dtype 'int8'")
    expect_error(function() data.CSV(path, {columns = {"a"}, dtype = {accel.float32, accel.int64}}) end,
      "CSV: " .. path .. ": dtype lists 2 dtypes for 1 fields")
    write_file(path, "a,a,b\n1,2,3\n")
    expect_error(function() data.CSV(path, {columns = {"a"}}) end, "column 'a' is ambiguous", "columns 1 and 2")
    assert.are.same({{2}}, data.CSV(path, {columns = {{2}}}).tensors[1]:tolist())
    write_file(path, "")
    expect_error(function() data.read_csv(path) end, path, "no rows")
    -- old Mac line ends: Python's csv reads 2 rows, here they used to read as one header line and 0 rows
    write_file(path, "a,b\r1,2\r3,4\r")
    expect_error(function() data.read_csv(path) end, path .. ":1", "a carriage return that does not end a line")
    write_file(path, "a,b\r\n1,2\r\n3,4\r")
    assert.are.same({{1, 2}, {3, 4}}, data.read_csv(path):tolist())
    os.remove(path)
    expect_error(function() data.read_csv(path) end, path, "cannot open")
  end)

  it("reads only the selected columns as numbers: the others may hold any text", function()
    local path = tmpname(".csv")
    write_file(path, 'id,name,x\n9007199254740993,"Smith, J",1.5\n2,"a ""q""\nsecond line",-2\n3,plain text,4e1\n')
    local ds = data.CSV(path, {columns = {"id", "x"}, dtype = {accel.int64, accel.float32}})
    local id, x = ds.tensors[1], ds.tensors[2]
    assert.are.same({3}, shape_of(id))
    assert.are.equal(accel.int64, id.dtype)
    assert.are.same({2, 3}, id:narrow(1, 2, 2):tolist())
    assert.are.same({1.5, -2, 40}, x:tolist())
    -- the text column selected as a number names line, column and value
    expect_error(function() data.CSV(path, {columns = {"name"}}) end,
      path .. ":2", 'column 2 ("name")', '"Smith, J" is not a number')
    expect_error(function() data.CSV(path, {columns = {2}, header = true}) end, path .. ":2", "column 2")
    os.remove(path)
  end)

  it("reads integer dtypes exactly, refusing fractions and values out of the dtype's range", function()
    local path = tmpname(".csv")
    write_file(path, "id,x\n9007199254740993,1.5\n-3,2\n")
    local ds = data.CSV(path, {columns = {"id", "x"}, dtype = {accel.int64, accel.float64}})
    local id = ds.tensors[1]
    -- 2^53 + 1 survives (a double would round it to 2^53); checked with int64 arithmetic (LuaJIT's numbers are doubles)
    assert.are.equal(1, (id:narrow(1, 1, 1) - 9007199254740992):item())
    assert.are.equal(-3, id[2]:item())
    expect_error(function() data.CSV(path, {columns = {"x"}, dtype = accel.int64}) end,
      path .. ":2", 'column 2 ("x")', '"1.5" is not an integer', "int64")
    expect_error(function() data.read_csv(path, {dtype = accel.int32}) end,
      path .. ":2", 'column 1 ("id")', '"9007199254740993" is out of range for int32')
    write_file(path, "a,b\n-3,1\n")
    expect_error(function() data.read_csv(path, {dtype = accel.uint8}) end,
      path .. ":2", 'column 1 ("a")', '"-3" is out of range for uint8 (0..255)')
    write_file(path, "a\n99999999999999999999\n")
    expect_error(function() data.read_csv(path, {dtype = accel.int64}) end, path .. ":2", "out of range for int64")
    write_file(path, "a\n1e3\n")
    expect_error(function() data.read_csv(path, {dtype = accel.int64}) end, path .. ":2", '"1e3" is not an integer')
    write_file(path, "a\n0x10\n")
    expect_error(function() data.read_csv(path, {dtype = accel.uint8}) end, path .. ":2", '"0x10" is not')
    write_file(path, 'a,b\n 255 ,"+7"\n0,-0\n')
    assert.are.same({{255, 7}, {0, 0}}, data.read_csv(path, {dtype = accel.uint8}):tolist())
    write_file(path, "a\n0\n1\n2\n")
    expect_error(function() data.read_csv(path, {dtype = accel.bool}) end, path .. ":4", '"2" is out of range for bool (0..1)')
    write_file(path, "a\n1.5\nnan\n-inf\n")  -- float columns: strtod, nan and inf included
    local f = data.read_csv(path, {dtype = accel.float32}):tolist()
    assert.are.equal(1.5, f[1][1])
    assert.is_true(f[2][1] ~= f[2][1])
    assert.are.equal(-math.huge, f[3][1])
    os.remove(path)
  end)

  it("drops a UTF-8 byte-order mark before the first column name", function()
    local path = tmpname(".csv")
    write_file(path, "\239\187\191a,b\r\n1,2\r\n")
    local ds = data.CSV(path, {columns = {"a"}})
    assert.are.same({"a", "b"}, ds.columns)
    assert.are.same({1}, ds.tensors[1]:tolist())
    write_file(path, "\239\187\1913,4\n")
    assert.are.same({{3, 4}}, data.read_csv(path, {header = false}):tolist())
    os.remove(path)
  end)

  it("reads quoted fields across lines and names the line of a quote never closed", function()
    local path = tmpname(".csv")
    write_file(path, 'a,b\n1,2\n"3,4\n')
    expect_error(function() data.read_csv(path) end, path .. ":3", "unclosed quote", "column 1", "end of the file")
    write_file(path, 'a,b\n"1\n2",3\n')  -- one record over two lines
    expect_error(function() data.read_csv(path) end, path .. ":2", '"1\\n2" is not a number')
    write_file(path, 'note,b\n"x\ny, z",3\n"",4\n')
    local ds = data.CSV(path, {columns = {"b"}})
    assert.are.same({3, 4}, ds.tensors[1]:tolist())
    write_file(path, 'a,b\n"1,2\n3,4\n5,6\n')  -- an opening quote swallows the rest
    expect_error(function() data.CSV(path, {columns = {"b"}}) end, path .. ":2", "unclosed quote")
    os.remove(path)
  end)
end)

describe("Fashion-MNIST (Debian's dataset-fashion-mnist)", function()
  it("loads the real test set: 10000 28x28 uint8 images, 1000 of each class", function()
    local dir = data.fashion_mnist_dir()
    assert(dir, "dataset-fashion-mnist is not installed (scripts/install-deps.sh installs it); "
      .. "data.fashion_mnist_dir() found no t10k-images-idx3-ubyte.gz")
    local images = data.read_idx(dir .. "/t10k-images-idx3-ubyte.gz")
    assert.are.equal(accel.uint8, images.dtype)
    assert.are.same({10000, 28, 28}, shape_of(images))
    assert.are.equal(255, images:float():max():item())
    assert.are.equal(0, images:float():min():item())
    local labels = data.read_idx(dir .. "/t10k-labels-idx1-ubyte.gz")
    assert.are.equal(accel.uint8, labels.dtype)
    assert.are.same({10000}, shape_of(labels))
    local counts = {}
    for _, c in ipairs(labels:tolist()) do counts[c] = (counts[c] or 0) + 1 end
    for c = 0, 9 do assert.are.equal(1000, counts[c], "class " .. c) end
    assert.are.same({9, 2, 1, 1, 6}, labels:narrow(1, 1, 5):tolist()) -- the published first test labels
  end)
end)
