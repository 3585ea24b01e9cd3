-- accel.data.subsets: datasets made of other datasets, as torch.utils.data's:
-- Subset(dataset, indices), ConcatDataset(datasets) and
-- random_split(dataset, lengths). Positions given as a Lua list are 1-based
-- (as every position here); an int64 tensor of indices holds 0-based values
-- (data, as accel.randperm gives them). random_split takes {seed = n} where
-- torch takes a generator: the same seed gives the same split, drawn as
-- the DataLoader draws an epoch's order; without it the split comes from
-- the global generator (accel.randperm).
local accel = require("accel")
local U = require("accel.data.util")

local C = accel._C
local M = {}

local function check_dataset(what, ds)
  local ok = type(ds) == "table" or type(ds) == "userdata"
  if not ok or type(ds.get) ~= "function" then
    U.failf("%s: expected a dataset (an object with #ds and ds:get(i)), got %s", what, type(ds))
  end
  return U.len(ds)
end

-- ---- Subset(dataset, indices) ----

local Subset = {}
Subset.__index = U.dataset_index(Subset, "Subset")
Subset.__name = "accel.data.Subset"

function Subset:__len() return self._n end

function Subset:get(i)
  local k = U.check_index("Subset", i, self._n)
  return self.dataset:get(self._positions[k]:item() + 1)
end

-- the positions as a 0-based int64 tensor, each checked against the dataset's length n
local function positions_of(indices, n)
  local ids
  if accel.is_tensor(indices) then
    if indices:dim() ~= 1 or (indices.dtype ~= accel.int64 and indices.dtype ~= accel.int32) then
      U.failf("Subset: an index tensor must be 1-D int64 or int32 (0-based values), got %s %s", indices.dtype.name,
        U.shape_str(indices))
    end
    ids = indices:to({dtype = accel.int64, device = "cpu"})
    if ids:numel() > 0 and ids:min():item() < 0 and ids:min():item() >= -n then -- from the end, as torch's
      ids = accel.where(ids:lt(0), ids + n, ids)
    end
  elseif type(indices) == "table" then
    local list = {}
    for j = 1, #indices do list[j] = U.check_index("Subset: indices", indices[j], n) - 1 end
    ids = accel.tensor(list, {dtype = accel.int64})
  else
    U.failf("Subset: indices must be a list of 1-based positions or an int64 tensor of 0-based indices, got %s",
      type(indices))
  end
  if ids:numel() > 0 and (ids:min():item() < 0 or ids:max():item() >= n) then
    U.failf("Subset: an index is out of range for a dataset of %d samples (0-based values 0..%d in a tensor, or "
      .. "-%d..-1 from the end)", n, n - 1, n)
  end
  return ids
end

function M.Subset(dataset, indices)
  local n = check_dataset("Subset", dataset)
  local ids = positions_of(indices, n)
  local self = setmetatable({dataset = dataset, indices = indices, _positions = ids, _n = ids:numel()}, Subset)
  if type(dataset.get_batch) == "function" then -- batches stay one index_select per field
    self.get_batch = function(s, idx) return s.dataset:get_batch(s._positions:index_select(1, idx)) end
  end
  return self
end

-- ---- ConcatDataset(datasets) ----

local ConcatDataset = {}
ConcatDataset.__index = U.dataset_index(ConcatDataset, "ConcatDataset")
ConcatDataset.__name = "accel.data.ConcatDataset"

function ConcatDataset:__len() return self.cumulative_sizes[#self.cumulative_sizes] or 0 end

function ConcatDataset:get(i)
  local sizes = self.cumulative_sizes
  local k = U.check_index("ConcatDataset", i, sizes[#sizes] or 0)
  local lo, hi = 1, #sizes -- the first dataset whose cumulative size reaches k
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if sizes[mid] >= k then hi = mid else lo = mid + 1 end
  end
  return self.datasets[lo]:get(k - (sizes[lo - 1] or 0))
end

function M.ConcatDataset(datasets)
  if type(datasets) ~= "table" or datasets.get ~= nil or #datasets == 0 then
    U.fail("ConcatDataset: expected a non-empty list of datasets")
  end
  local sizes, total = {}, 0
  for j, ds in ipairs(datasets) do
    total = total + check_dataset(("ConcatDataset: dataset %d"):format(j), ds)
    sizes[j] = total
  end
  return setmetatable({datasets = datasets, cumulative_sizes = sizes}, ConcatDataset)
end

-- ---- random_split(dataset, lengths, [{seed =}]) ----

-- lengths as counts summing to n, or fractions summing to 1 (floors, then
-- one more to the first ones until they sum to n, as torch's)
local function split_lengths(lengths, n)
  if type(lengths) ~= "table" or #lengths == 0 then U.fail("random_split: lengths must be a non-empty list") end
  local sum, fractions = 0, true
  for j, v in ipairs(lengths) do
    if type(v) ~= "number" or v < 0 then U.failf("random_split: length %d must be a non-negative number, %s", j, U.got(v)) end
    sum = sum + v
    fractions = fractions and v <= 1
  end
  local out = {}
  if fractions and math.abs(sum - 1) < 1e-9 then
    local given = 0
    for j, f in ipairs(lengths) do out[j] = math.floor(n * f); given = given + out[j] end
    for j = 1, n - given do
      local k = (j - 1) % #out + 1
      out[k] = out[k] + 1
    end
    return out
  end
  if sum ~= n then -- (torch: "Sum of input lengths does not equal the length of the input dataset!")
    U.failf("random_split: the lengths sum to %s, not to the dataset's length %d (fractions must sum to 1)",
      tostring(sum), n)
  end
  for j, v in ipairs(lengths) do out[j] = U.to_int(v) or U.failf("random_split: length %d must be an integer, %s", j, U.got(v)) end
  return out
end

function M.random_split(dataset, lengths, o)
  local n = check_dataset("random_split", dataset)
  o = U.check_opts(o, {seed = true}, nil, "random_split")
  local counts = split_lengths(lengths, n)
  local order
  if o.seed ~= nil then
    order = C.data_randperm(n, U.to_int(o.seed) or U.failf("random_split: seed must be an integer, %s", U.got(o.seed)), 0)
  else
    order = accel.randperm(n)
  end
  local parts, at = {}, 0
  for j, count in ipairs(counts) do
    parts[j] = M.Subset(dataset, order:narrow(1, at + 1, count):clone())
    at = at + count
  end
  return parts
end

require("accel.util").check_methods(Subset, "Subset")
require("accel.util").check_methods(ConcatDataset, "ConcatDataset")

return M
