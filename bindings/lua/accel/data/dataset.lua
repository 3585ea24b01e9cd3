-- accel.data.dataset: the dataset protocol and its two general makers.
--
-- A dataset is any object with a length (#ds) and ds:get(i) (i 1-based)
-- returning one sample: one value, or several values (the sample's fields,
-- e.g. x, y). It may also provide ds:get_batch(indices) (indices: an int64
-- tensor of 0-based positions, new for every batch) returning the collated
-- fields of those samples; the DataLoader uses it instead of get + default
-- collate when no collate_fn is given (TensorDataset, TokenFile and CSV
-- do: one index_select per field). The indices are on the host;
-- TensorDataset moves them to each field's device (once per device and
-- batch), so a data set kept on a device is indexed there.
local accel = require("accel")
local U = require("accel.data.util")

local M = {}

-- ---- Dataset{len = n | function() return n end, get = function(i) ... end} ----

local FnDataset = {}
FnDataset.__index = U.dataset_index(FnDataset, "Dataset")
FnDataset.__name = "accel.data.Dataset"

function FnDataset:__len()
  local n = self._len
  if type(n) == "function" then n = U.check_int(n(), 0, "Dataset: len()") end
  return n
end

function FnDataset:get(i) return self._get(i) end

function M.Dataset(spec)
  if type(spec) ~= "table" then U.fail("Dataset: expected a table {len = ..., get = function(i) ... end}") end
  if type(spec.get) ~= "function" then
    U.failf("Dataset: get must be a function(i) returning sample i (1-based), got %s", type(spec.get))
  end
  local n = spec.len
  if type(n) == "number" then
    n = U.check_int(n, 0, "Dataset: len")
  elseif type(n) ~= "function" then
    U.failf("Dataset: len must be a number or a function returning the number of samples, got %s", type(n))
  end
  return setmetatable({_len = n, _get = spec.get}, FnDataset)
end

-- ---- TensorDataset(t1, t2, ...): sample i is (t1[i], t2[i], ...) ----

local TensorDataset = {}
TensorDataset.__index = U.dataset_index(TensorDataset, "TensorDataset")
TensorDataset.__name = "accel.data.TensorDataset"

function TensorDataset:__len() return self._n end

-- t:method(1, arg) for each tensor t of ts, as separate results.
local function each_tensor(ts, method, arg)
  local k = #ts
  if k == 1 then return ts[1][method](ts[1], 1, arg) end
  if k == 2 then return ts[1][method](ts[1], 1, arg), ts[2][method](ts[2], 1, arg) end
  local out = {}
  for f = 1, k do out[f] = ts[f][method](ts[f], 1, arg) end
  return U.unpack(out, 1, k)
end

function TensorDataset:get(i)
  return each_tensor(self.tensors, "select", U.check_index("TensorDataset", i, self._n))
end

-- idx moved to each field's device (a field already there shares it).
local function index_fields(ts, idx)
  local by_device, out = {}, {}
  for f = 1, #ts do
    local t = ts[f]
    local key = tostring(t.device)
    local i = by_device[key]
    if i == nil then
      i = idx:to(t.device)
      by_device[key] = i
    end
    out[f] = t:index_select(1, i)
  end
  return U.unpack(out, 1, #ts)
end

function TensorDataset:get_batch(idx)
  if not accel.is_tensor(idx) then
    U.failf("TensorDataset:get_batch: expected an int64 tensor of 0-based indices, got %s", type(idx))
  end
  local ts = self.tensors
  if #ts == 1 and ts[1].device == idx.device then return ts[1]:index_select(1, idx) end
  return index_fields(ts, idx)
end

function M.TensorDataset(...)
  local ts = U.pack(...)
  if ts.n == 0 then U.fail("TensorDataset: expected at least one tensor") end
  local first
  for f = 1, ts.n do
    local t = ts[f]
    if not accel.is_tensor(t) then U.failf("TensorDataset: argument %d is a %s, expected a tensor", f, type(t)) end
    if t:dim() == 0 then U.failf("TensorDataset: tensor %d is 0-dimensional; samples are rows of dim 1", f) end
    if not first then
      first = t
    elseif t:size(1) ~= first:size(1) then
      U.failf("TensorDataset: all tensors must share the first dimension (the sample count): tensor 1 has %d (shape %s), tensor %d has %d (shape %s)",
        first:size(1), U.shape_str(first), f, t:size(1), U.shape_str(t))
    end
  end
  ts.n = nil
  return setmetatable({tensors = ts, _n = first:size(1)}, TensorDataset)
end

M.TensorDatasetClass = TensorDataset

-- ds.get(1): "TensorDataset.get: call it as obj:get(...)"
require("accel.util").check_methods(FnDataset, "Dataset")
require("accel.util").check_methods(TensorDataset, "TensorDataset")

return M
