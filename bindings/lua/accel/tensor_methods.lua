-- accel.tensor_methods: PyTorch tensor methods composed from the C ones
-- (sort / argsort / topk over _C.argsort_last; the rest from views,
-- index_select, cat, matmul and element-wise ops, so autograd comes with
-- them). Loaded into the tensor method table the first time a name the C
-- table does not have is looked up. Dims are 1-based (negative from the
-- end); keyword arguments go in a trailing options table, as everywhere.
local accel = require("accel")
local util = require("accel.util")
local compat = require("accel.compat")
local std_sort = require("accel.std_sort")

local C = accel._C
local M = C.tensor_methods
local raise, torch_args = util.raise, util.torch_args
local unpack = compat.unpack

local no_more = util.no_more

-- a function calling the accel.autograd.Function of def, made on first use
local function custom_function(def)
  local fn
  return function(...)
    fn = fn or require("accel.autograd").Function(def)
    return fn(...)
  end
end

-- dim d of t as a positive 1-based dim (a 0-d tensor takes 1 and -1).
local function positive_dim(op, t, d)
  local nd = math.max(t:dim(), 1)
  if type(d) ~= "number" or d ~= math.floor(d) then raise("%s: dim must be an integer, got %s", op, util.show(d)) end
  local p = d < 0 and nd + 1 + d or d
  if d == 0 or p < 1 or p > nd then
    raise("%s: dimension %s out of range (the tensor has %d dims; dims are 1-based, negative from the end)", op,
      util.show(d), nd)
  end
  return p
end

-- An integer list (a number alone is a list of one).
local function int_list(op, what, v)
  if type(v) == "number" then return {v} end
  if type(v) ~= "table" then raise("%s: %s must be an integer or a list of integers, got %s", op, what, type(v)) end
  for k, x in pairs(v) do
    if type(k) ~= "number" or type(x) ~= "number" or x ~= math.floor(x) then
      raise("%s: %s must be an integer or a list of integers, got a table with %s = %s", op, what, util.show(k), util.show(x))
    end
  end
  return v
end

-- the sizes of t's dims 1 .. last (default: all), as a list
local function sizes(t, last)
  local out = {}
  for d = 1, last or t:dim() do out[d] = t:size(d) end
  return out
end

-- fn(t with dim d last) -> a tensor of that layout, put back in t's layout.
local function along_last(t, d, fn)
  if t:dim() == 0 then return fn(t:reshape({1})):reshape({}) end
  local nd = t:dim()
  if d == nd then return fn(t) end
  return fn(t:transpose(d, nd):contiguous()):transpose(d, nd)
end

-- ---- sort / argsort / topk ----

local function sorted_indices(op, t, dim, descending)
  local d = positive_dim(op, t, dim)
  return along_last(t, d, function(x) return C.argsort_last(x, descending) end), d
end

-- t:argsort([dim = -1], [descending = false], [{dim =, descending =, stable =}])
function M.argsort(t, ...)
  local a = torch_args("argsort", {"dim:int", "descending:bool", "stable:bool"}, ...)
  return (sorted_indices("argsort", t, a.dim or -1, a.descending == true)) -- always stable
end

-- t:sort([dim = -1], [descending = false], [{...}]) -> values, indices
function M.sort(t, ...)
  local a = torch_args("sort", {"dim:int", "descending:bool", "stable:bool"}, ...)
  if t:dim() == 0 then return t:clone(), accel.zeros({}, {dtype = accel.int64, device = t.device}) end
  local idx, d = sorted_indices("sort", t, a.dim or -1, a.descending == true)
  return t:gather(d, idx), idx
end

-- t:topk(k, [dim = -1], [largest = true], [sorted = true], [{...}]) ->
-- values, indices (always in sorted order)
function M.topk(t, k, ...)
  local a = torch_args("topk", {"dim:int", "largest:bool", "sorted:bool"}, ...)
  local largest = a.largest ~= false -- (sorted or not, the k come sorted)
  local d = positive_dim("topk", t, a.dim or -1)
  local n = t:dim() == 0 and 1 or t:size(d)
  if type(k) ~= "number" or k ~= math.floor(k) or k < 0 or k > n then
    raise("topk: selected index k out of range (k = %s, dim %d has size %d)", util.show(k), d, n)
  end
  if t:dim() == 0 then return t:clone(), accel.zeros({}, {dtype = accel.int64, device = t.device}) end
  local idx = sorted_indices("topk", t, d, largest):narrow(d, 1, k)
  return t:gather(d, idx), idx
end

-- ---- cumulative sums ----

local function cumsum_dtype(t, dt)
  if dt then return dt end
  return t.dtype.is_floating_point and t.dtype or accel.int64 -- integers and bools sum in int64, as torch
end

-- Inclusive running sums along the last dim of x (..., n) by doubling
-- (Hillis-Steele): after the round with offset k each position holds the
-- sum of its last 2k inputs, so log2(n) adds of shifted halves; every
-- position adds only inputs at or before it (an inf or NaN reaches no
-- earlier position), integers stay exact, and float32 / bf16 / fp16 sum
-- in float64 (PyTorch's CPU loop accumulates in double) and are rounded
-- once. Differentiable (narrow, add, cat).
local function cumsum_last(x)
  local n, dt = x:size(-1), x.dtype
  local wide = dt.is_floating_point and dt ~= accel.float64
  if wide then x = x:to(accel.float64) end
  local k = 1
  while k < n do
    x = accel.cat({x:narrow(-1, 1, k), x:narrow(-1, k + 1, n - k) + x:narrow(-1, 1, n - k)}, -1)
    k = k * 2
  end
  return wide and x:to(dt) or x
end

-- op(dim, [{dtype =}])'s dim and input, cast as torch's cumsum / cumprod cast it
local function running_input(op, t, ...)
  local a = torch_args(op, {"dim:int", "dtype"}, ...)
  if a.dim == nil then raise("%s: dim must be given (t:%s(dim))", op, op) end
  return positive_dim(op, t, a.dim), t:to(cumsum_dtype(t, a.dtype))
end

-- x combined along d position by position: part k = combine(part k - 1,
-- slice k), one op per position (differentiable)
local function running(x, d, combine)
  if x:dim() == 0 or x:size(d) <= 1 then return x:clone() end
  local parts = {x:narrow(d, 1, 1)}
  for k = 2, x:size(d) do parts[k] = combine(parts[k - 1], x:narrow(d, k, 1)) end
  return accel.cat(parts, d)
end

-- t:cumsum(dim, [{dtype =}]) (its matmuls outside autocast: torch's cumsum keeps its dtype)
function M.cumsum(t, ...)
  local d, x = running_input("cumsum", t, ...)
  return require("accel.amp").off(along_last, x, d, cumsum_last)
end

-- ---- order statistics (over sort) ----

-- the values and indices at sorted positions pos (0-based, int64, keepdim
-- shape) of t along d, squeezed unless keep
local function pick_sorted(t, d, pos, keep)
  local idx = along_last(t, d, function(x) return C.argsort_last(x, false) end)
  local at = idx:gather(d, pos)
  local v = t:gather(d, at)
  if keep then return v, at end
  return v:squeeze(d), at:squeeze(d)
end

-- the per-row sorted position of the lower median: the first NaN when a
-- row has one (median) or of the non-NaN values (nanmedian)
local function median_positions(t, d, skip_nan)
  local n = t:size(d)
  local nans = t:isnan():sum(d, true) -- int64, keepdim
  if skip_nan then return accel.where(nans:lt(n), (nans:neg():add(n - 1)):div(2, {rounding_mode = "floor"}), 0) end
  return accel.where(nans:gt(0), nans:neg():add(n), (n - 1 - (n - 1) % 2) / 2):long()
end

local median

-- the median of all of t (op: "median" or "nanmedian") with torch's
-- evenly_distribute_backward: the gradient split evenly among the elements
-- equal to the result (the NaNs for a NaN result), 0 elsewhere even for an
-- inf or NaN gradient (torch's masked_fill into zeros)
local function median_all(op, skip_nan)
  return custom_function{
    name = op,
    forward = function(ctx, t)
      local v = median(op, t:reshape({-1}), skip_nan, 1) -- 0-d
      ctx.mask = t:eq(v):logical_or(t:isnan():logical_and(v:isnan()))
      return v
    end,
    backward = function(ctx, g) return accel.where(ctx.mask, g / ctx.mask:sum(), 0) end,
  }
end
local median_of_all = {median = median_all("median", false), nanmedian = median_all("nanmedian", true)}

function median(op, t, skip_nan, ...)
  local a = torch_args(op, {"dim:int", "keepdim:bool"}, ...)
  if t:numel() == 0 and a.dim == nil and t.dtype.is_floating_point then -- (torch: nan)
    return accel.full({}, 0 / 0, {dtype = t.dtype, device = t.device})
  end
  if t:numel() == 0 then raise("%s: cannot compute the median of an empty tensor", op) end
  if a.dim == nil then return median_of_all[op](t) end
  local d = positive_dim(op, t, a.dim)
  if t:dim() == 0 then return t:clone(), accel.zeros({}, {dtype = accel.int64, device = t.device}) end
  return pick_sorted(t, d, median_positions(t, d, skip_nan), a.keepdim == true)
end

-- t:median([dim], [keepdim = false]): the lower median (values, indices with
-- a dim; a 0-d value without); NaN when the row has one, as torch's
function M.median(t, ...) return median("median", t, false, ...) end
-- t:nanmedian(...): the lower median of the non-NaN values
function M.nanmedian(t, ...) return median("nanmedian", t, true, ...) end

-- t:kthvalue(k, [dim = -1], [keepdim = false]): the k-th smallest (k 1-based,
-- as torch's) -> values, indices
function M.kthvalue(t, k, ...)
  local a = torch_args("kthvalue", {"dim:int", "keepdim:bool"}, ...)
  local d = positive_dim("kthvalue", t, a.dim or -1)
  local n = t:dim() == 0 and 1 or t:size(d)
  if type(k) ~= "number" or k ~= math.floor(k) or k < 1 or k > n then
    raise("kthvalue: k (%s) out of range: dim %d has size %d (k is 1-based)", util.show(k), d, n)
  end
  if t:dim() == 0 then return t:clone(), accel.zeros({}, {dtype = accel.int64, device = t.device}) end
  local shape = sizes(t)
  shape[d] = 1
  return pick_sorted(t, d, accel.full(shape, k - 1, {dtype = accel.int64, device = t.device}),
    a.keepdim == true)
end

-- t:quantile(q, [dim], [keepdim = false], [{interpolation = "linear"}]) and
-- t:nanquantile(...): q a number or a 1-D tensor of quantiles in [0, 1] (a
-- tensor q adds a leading dim), over the flattened t without dim. Each
-- quantile sits at position q (n - 1) of its slice sorted; interpolation
-- picks between the neighbours there as torch's: "linear", "lower",
-- "higher", "nearest" (half to even) or "midpoint". quantile is NaN where
-- its slice holds a NaN; nanquantile leaves NaNs out (n counts the others;
-- NaN for a slice of NaNs only). Gradients flow through the sort.
local INTERPOLATIONS = {linear = true, lower = true, higher = true, nearest = true, midpoint = true}

local function quantile_of(op, t, q, ignore_nan, ...)
  local a = torch_args(op, {"dim:int", "keepdim:bool", "interpolation:string"}, ...)
  local how = a.interpolation or "linear"
  if not INTERPOLATIONS[how] then
    raise("%s: interpolation must be one of linear, lower, higher, midpoint or nearest, got '%s'", op, tostring(how))
  end
  if not t.dtype.is_floating_point then raise("%s: input must be a floating point tensor, got %s", op, t.dtype.name) end
  local x, d = t, a.dim
  if d == nil then x, d = t:reshape({-1}), 1 else d = positive_dim(op, t, d) end
  if x:size(d) == 0 then raise("%s: input tensor must be non-empty", op) end
  local qs = accel.is_tensor(q) and q:to(x.dtype) or accel.tensor({q}, {dtype = x.dtype, device = x.device})
  if qs:dim() > 1 then raise("%s: q must be a scalar or 1D tensor, got %d dims", op, qs:dim()) end
  if qs:lt(0):logical_or(qs:gt(1)):any():item() then raise("%s: q values must be in the range [0, 1]", op) end
  local sorted = x:sort(d) -- NaN last
  local nan = x:isnan()
  local count = ignore_nan and nan:logical_not():sum(d, true):to(x.dtype) or nil -- (keepdim: size 1 in dim d)
  local outs = {}
  for i, qi in ipairs(qs:double():tolist()) do
    local pos = ignore_nan and (count - 1):clamp_min(0) * qi or qi * (x:size(d) - 1)
    if type(pos) == "number" then pos = accel.full(count and count.shape or sizes(sorted:narrow(d, 1, 1)), pos,
      {dtype = x.dtype, device = x.device}) end
    if how == "nearest" then pos = pos:round() end -- (half to even, as torch's round)
    local lo, hi = pos:floor(), pos:ceil()
    if how == "lower" then hi = lo elseif how == "higher" then lo = hi end
    local l, h = sorted:gather(d, lo:to(accel.int64)), sorted:gather(d, hi:to(accel.int64))
    local v
    if how == "midpoint" then v = (l + h) * 0.5
    elseif how == "linear" then v = l + (h - l) * (pos - lo)
    else v = l end
    if ignore_nan then v = accel.where(count:eq(0), 0 / 0, v)
    else v = accel.where(nan:any(d, true), 0 / 0, v) end -- a NaN makes the quantile NaN
    outs[i] = a.keepdim and v or v:squeeze(d)
  end
  local r = accel.stack(outs, 1)
  if not accel.is_tensor(q) or q:dim() == 0 then r = r:squeeze(1) end
  if a.dim == nil and not a.keepdim then return r:reshape(accel.is_tensor(q) and q:dim() == 1 and {qs:numel()} or {}) end
  return r
end

function M.quantile(t, q, ...) return quantile_of("quantile", t, q, false, ...) end
function M.nanquantile(t, q, ...) return quantile_of("nanquantile", t, q, true, ...) end

-- t:unique([{sorted = true, return_inverse = false, return_counts = false, dim =}]):
-- the distinct values, sorted (then, as asked, the inverse indices of t's
-- shape and the counts), over the flattened tensor; with dim, of the slices
-- the slices of t along dim d in lexicographic order, each a Lua list of
-- its values (row-major), and their positions (1-based), stably sorted
local function sorted_slices(t, d)
  local rows = t:movedim(d, 1):reshape({t:size(d), -1}):tolist()
  local order = {}
  for i = 1, #rows do order[i] = i end
  table.sort(order, function(i, j)
    local a, b = rows[i], rows[j]
    for k = 1, #a do
      if a[k] ~= b[k] then return a[k] < b[k] end
    end
    return i < j
  end)
  return rows, order
end

local function same_list(a, b)
  for k = 1, #a do if a[k] ~= b[k] then return false end end
  return true
end

-- t:unique({dim = d, ...}): the distinct slices along d, sorted
-- lexicographically (then the inverse: each slice's group, 0-based, and
-- the counts), as torch's
local function unique_slices(t, d, a)
  if t:dim() == 0 then raise("unique: dim %d is out of range for a 0-D tensor", d) end
  d = positive_dim("unique", t, d)
  local rows, order = sorted_slices(t, d)
  local keep, counts, inverse = {}, {}, {}
  for k, i in ipairs(order) do
    if k == 1 or not same_list(rows[i], rows[order[k - 1]]) then
      keep[#keep + 1], counts[#counts + 1] = i - 1, 0
    end
    counts[#counts] = counts[#counts] + 1
    inverse[i] = #keep - 1
  end
  local opts = {dtype = accel.int64, device = t.device}
  local out = {t:index_select(d, accel.tensor(#keep > 0 and keep or {}, opts))}
  if a.return_inverse then out[#out + 1] = accel.tensor(#inverse > 0 and inverse or {}, opts) end
  if a.return_counts then out[#out + 1] = accel.tensor(#counts > 0 and counts or {}, opts) end
  return unpack(out)
end

function M.unique(t, ...)
  local a = torch_args("unique", {"sorted:bool", "return_inverse:bool", "return_counts:bool", "dim:int"}, ...)
  if a.dim ~= nil then return unique_slices(t, a.dim, a) end
  local flat = t:reshape({-1})
  local order = flat:argsort(1)
  local vals = flat:index_select(1, order):tolist()
  local uniq, counts, group = {}, {}, {}
  for i, v in ipairs(vals) do
    if i == 1 or v ~= vals[i - 1] or v ~= v then
      uniq[#uniq + 1], counts[#counts + 1] = v, 0
    end
    counts[#counts] = counts[#counts] + 1
    group[i] = #uniq - 1
  end
  local out = {accel.tensor(uniq, {dtype = t.dtype, device = t.device})}
  if #uniq == 0 then out[1] = accel.zeros(0, {dtype = t.dtype, device = t.device}) end
  if a.return_inverse then
    local inv, pos = {}, order:tolist()
    for i, p in ipairs(pos) do inv[p + 1] = group[i] end
    out[#out + 1] = accel.tensor(#inv > 0 and inv or {}, {dtype = accel.int64, device = t.device}):reshape(t.shape)
  end
  if a.return_counts then out[#out + 1] = accel.tensor(counts, {dtype = accel.int64, device = t.device}) end
  return unpack(out)
end

-- t:bincount([{weights =, minlength = 0}]) of a 1-D non-negative int64 t:
-- how often each value occurs (int64), or the sum of its weights: float32
-- weights summed in float32, any other weights in float64 (as torch's; an
-- empty t gives int64 zeros even with weights, as torch's)
function M.bincount(t, ...)
  local a = torch_args("bincount", {"weights:tensor", "minlength:int"}, ...)
  if t:dim() ~= 1 or t.dtype ~= accel.int64 then raise("bincount: only a 1-D int64 tensor is supported") end
  if t:numel() > 0 and t:min():item() < 0 then raise("bincount: input must contain only non-negative values") end
  local n = math.max(a.minlength or 0, t:numel() > 0 and t:max():item() + 1 or 0)
  local w = a.weights
  if w == nil or t:numel() == 0 then w = accel.ones(t:numel(), {dtype = accel.int64, device = t.device})
  elseif w.dtype ~= accel.float32 then w = w:double() end
  return accel.zeros(n, {dtype = w.dtype, device = t.device}):scatter_add(1, t, w)
end

-- torch's shape rules: sorted (n) with any values, or sorted (..., n) with
-- values (..., m)
local function check_searchsorted_shapes(sorted, values)
  if sorted:dim() == 0 then
    raise("searchsorted: boundaries tensor should have positive dimension, but got 0 dimension")
  end
  if sorted:dim() == 1 then return end
  if values:dim() == 0 then
    raise("searchsorted: input value can be a scalar only when boundaries tensor dimension is 1, but we got boundaries tensor dim(%d)", sorted:dim())
  end
  local lead = values:dim() == sorted:dim()
  for i = 1, sorted:dim() - 1 do lead = lead and values:size(i) == sorted:size(i) end
  if not lead then
    raise("searchsorted: boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor and input value tensor must match, but we got boundaries tensor %s and input value tensor %s",
      util.shape_str(sorted), util.shape_str(values))
  end
end

-- sorted's elements at pos (values' shape): along the last dim of (..., n)
-- rows, or of a 1-D sorted for every value
local function elements_at(sorted, pos)
  if sorted:dim() > 1 then return sorted:gather(-1, pos) end
  return sorted:index_select(1, pos:reshape({-1})):reshape(util.sizes_of(pos))
end

-- sorted:searchsorted(values, [{right = false}]), accel.searchsorted(sorted,
-- values): for each value, the insertion position that keeps each row of
-- sorted (1-D, or rows matching values' leading dims) in order. torch's
-- binary search, all values at once: [lo, hi) halves each step, moving right
-- past an element unless it is >= the value (right: > it). NaN compares
-- false, so the search moves right past a NaN element, and a NaN value ends
-- past the last element, as in torch.
function M.searchsorted(sorted, values, ...)
  local a = torch_args("searchsorted", {"right:bool", "side:string"}, ...)
  local right = a.right == true or a.side == "right"
  if not accel.is_tensor(values) then values = accel.tensor({values}, {dtype = sorted.dtype, device = sorted.device}):reshape({}) end
  check_searchsorted_shapes(sorted, values)
  local n = sorted:size(-1)
  local lo = accel.zeros(util.sizes_of(values), {dtype = accel.int64, device = sorted.device})
  local hi = lo + n
  local span = n
  while span > 0 do -- (the widest [lo, hi) halves each step)
    local mid = lo + (hi - lo):div(2, {rounding_mode = "floor"})
    local s = elements_at(sorted, mid:clamp(nil, n - 1)) -- (mid = n only where lo = hi: unused)
    local past = (right and s:gt(values) or s:ge(values)):logical_not()
    local open = lo:lt(hi)
    lo = accel.where(open:logical_and(past), mid + 1, lo)
    hi = accel.where(open:logical_and(past:logical_not()), mid, hi)
    span = math.floor(span / 2)
  end
  return lo
end

-- t:unique_consecutive([{return_inverse =, return_counts =}]): each run of
-- equal neighbours of the flattened tensor kept once
function M.unique_consecutive(t, ...)
  local a = torch_args("unique_consecutive", {"return_inverse:bool", "return_counts:bool", "dim:int"}, ...)
  if a.dim ~= nil then raise("unique_consecutive: dim is not supported (the flattened tensor only)") end
  local vals, uniq, counts, inv = t:reshape({-1}):tolist(), {}, {}, {}
  for i, v in ipairs(vals) do
    if i == 1 or v ~= vals[i - 1] then uniq[#uniq + 1], counts[#counts + 1] = v, 0 end
    counts[#counts] = counts[#counts] + 1
    inv[i] = #uniq - 1
  end
  local opts = {dtype = accel.int64, device = t.device}
  local out = {#uniq > 0 and accel.tensor(uniq, {dtype = t.dtype, device = t.device}) or accel.zeros(0, {dtype = t.dtype, device = t.device})}
  if a.return_inverse then out[#out + 1] = (#inv > 0 and accel.tensor(inv, opts) or accel.zeros(0, opts)):reshape(t.shape) end
  if a.return_counts then out[#out + 1] = #counts > 0 and accel.tensor(counts, opts) or accel.zeros(0, opts) end
  return unpack(out)
end

-- torch's CPU mode of a row holding NaN (a Lua list of numbers): torch puts
-- the (value, index) pairs in order by std::sort, which NaN (false against
-- everything) leaves partly unsorted, and takes the first of the longest runs
-- of equal neighbours (NaN equals nothing), at the index of its last pair.
-- Where std::sort leaves the NaNs decides the winner, so only its steps match.
local function nan_row_mode_index(row)
  local order = {}
  for j, v in ipairs(row) do order[j] = {v, j - 1} end
  std_sort.sort(order, function(x, y) return x[1] < y[1] end)
  local best, best_run, run = nil, 0, 0
  for j, p in ipairs(order) do
    run = run + 1
    if j == #order or p[1] ~= order[j + 1][1] then
      if run > best_run then best, best_run = p[2], run end
      run = 0
    end
  end
  return best
end

-- the 0-based index of the mode of one row (a Lua list of numbers): the
-- smallest of the most frequent values, at its last index (torch's result
-- for rows up to 16 long, where its std::sort is an insertion sort)
local function row_mode_index(row)
  local count, last = {}, {}
  for j, v in ipairs(row) do
    if v ~= v then return nan_row_mode_index(row) end
    count[v], last[v] = (count[v] or 0) + 1, j - 1
  end
  local bv
  for v, c in pairs(count) do
    if bv == nil or c > count[bv] or (c == count[bv] and v < bv) then bv = v end
  end
  return last[bv]
end

-- t:mode([dim = -1], [keepdim = false]) -> the most frequent value of each
-- row and its index (row_mode_index)
function M.mode(t, ...)
  local a = torch_args("mode", {"dim:int", "keepdim:bool"}, ...)
  local d = positive_dim("mode", t, a.dim or -1)
  if t:dim() == 0 then return t:clone(), accel.zeros({}, {dtype = accel.int64, device = t.device}) end
  local moved = t:movedim(d, -1):contiguous()
  local n = moved:size(-1)
  if n == 0 then raise("mode: cannot compute the mode of an empty dim") end
  if moved.dtype == accel.bool then moved = moved:to(accel.uint8) end -- (false < true as numbers)
  local best_i = {}
  for r, row in ipairs(moved:reshape({-1, n}):tolist()) do best_i[r] = row_mode_index(row) end
  local shape = sizes(moved, moved:dim() - 1)
  local i = accel.tensor(best_i, {dtype = accel.int64, device = t.device}):reshape(shape):unsqueeze(d)
  local v = t:gather(d, i) -- differentiable, as torch's ModeBackward0: the gradient goes to the index
  if a.keepdim then return v, i end
  return v:squeeze(d), i:squeeze(d)
end

-- t:histc([bins = 100], [min = 0], [max = 0]): counts of equal-width bins
-- over [min, max] (both 0: the data's range), elements outside ignored, the
-- maximum in the last bin; t's float dtype; a range that is not finite
-- (an inf bound, or no bounds and an inf or NaN in t) is torch's error
function M.histc(t, ...)
  local a = torch_args("histc", {"bins:int", "min:number", "max:number"}, ...)
  if not t.dtype.is_floating_point then raise("histc: input must be a floating point tensor, got %s", t.dtype.name) end
  local bins, lo, hi = a.bins or 100, a.min or 0, a.max or 0
  if type(bins) ~= "number" or bins < 1 or bins ~= math.floor(bins) then raise("histc: bins must be a positive integer") end
  local x = t:reshape({-1})
  if lo == 0 and hi == 0 and x:numel() > 0 then lo, hi = x:min():item(), x:max():item() end -- (NaN if any)
  if not (math.abs(lo) < math.huge and math.abs(hi) < math.huge) then
    raise("histc: range of [%g, %g] is not finite", lo, hi)
  end
  if lo == hi then lo, hi = lo - 1, hi + 1 end
  if lo > hi then raise("histc: max must be larger than min") end
  -- as torch, in t's dtype: the bounds rounded to it, then the bin
  -- (x - lo) * bins / (hi - lo) with each step rounded (in float32, 0.7 * 10
  -- is 7: 0.7 goes to bin 7 of 10 over [0, 1], where float64 puts it in bin 6)
  local function scalar(v) return accel.full({}, v, {dtype = t.dtype, device = t.device}) end
  local lo_t, hi_t = scalar(lo), scalar(hi)
  x = x:masked_select(x:ge(lo_t):logical_and(x:le(hi_t))) -- (NaN fails both)
  local b = ((x - lo_t) * scalar(bins) / (hi_t - lo_t)):floor():long():clamp(0, bins - 1)
  return b:bincount({minlength = bins}):to(t.dtype)
end

-- ---- small compositions ----

-- t:unfold(dim, size, step): the windows of size along dim, every step, as
-- a new dim of (count) replacing dim and a last dim of size: a view, as
-- torch's (of a 0-dim t, a copy)
function M.unfold(t, dim, size, step)
  local d = positive_dim("unfold", t, dim)
  local n = t:dim() == 0 and 1 or t:size(d)
  if type(size) ~= "number" or size % 1 ~= 0 or size < 0 or size > n then raise("unfold: size %s is larger than dim %d's size %d", util.show(size), d, n) end
  if type(step) ~= "number" or step % 1 ~= 0 or step < 1 then raise("unfold: step must be a positive integer, got %s", util.show(step)) end
  if t:dim() > 0 then return C.unfold(t, d, size, step) end
  local count = math.floor((n - size) / step) + 1
  local starts = accel.arange(count, {device = t.device}):mul(step):unsqueeze(2)
  local idx = (starts + accel.arange(size, {device = t.device})):reshape({-1})
  local picked = t:index_select(d, idx)
  local shape = {}
  for i = 1, t:dim() do shape[#shape + 1] = i == d and count or t:size(i) end
  table.insert(shape, d + 1, size)
  return picked:reshape(shape):movedim(d + 1, -1)
end

-- the shape t and the bool mask broadcast to (torch's: t (3) and mask
-- (1, 3) give (1, 3)); in place (op ending in _) it must be t's own
local function masked_shape(op, t, mask)
  if not accel.is_tensor(mask) or mask.dtype ~= accel.bool then raise("%s: mask must be a bool tensor", op) end
  local ok, shape = pcall(accel.broadcast_shapes, sizes(t), sizes(mask))
  if ok and op:sub(-1) == "_" then ok = table.concat(shape, ",") == table.concat(sizes(t), ",") end
  if not ok then
    raise("%s: mask of shape %s does not broadcast to the tensor's shape %s", op, util.shape_str(mask), util.shape_str(t))
  end
  return shape
end

-- t with source's elements in order where mask is true, both broadcast
-- to masked_shape
local function masked_scatter(op, t, mask, source)
  local shape = masked_shape(op, t, mask)
  local pos = M.nonzero(mask:expand(shape):reshape({-1})):reshape({-1})
  local k = pos:numel()
  if source:numel() < k then raise("%s: source has %d elements, the mask selects %d", op, source:numel(), k) end
  return M.index_copy(t:expand(shape):reshape({-1}), 1, pos, source:reshape({-1}):narrow(1, 1, k)):reshape(shape)
end
function M.masked_scatter(t, mask, source) return masked_scatter("masked_scatter", t, mask, source) end
function M.masked_scatter_(t, mask, source) return t:copy_(masked_scatter("masked_scatter_", t, mask, source)) end

-- self * beta + (m1 @ m2) * alpha (beta = 0: self is not read, as torch);
-- under autocast self is cast too (addmm / baddbmm are on its list), so the
-- result has the autocast dtype, as torch's
local function add_product(t, m1, m2, ...)
  local a = torch_args("addmm", {"beta:number", "alpha:number"}, ...)
  local beta, alpha = a.beta or 1, a.alpha or 1
  t = require("accel.amp").cast_input(t)
  local prod = m1:matmul(m2)
  if alpha ~= 1 then prod = prod * alpha end
  if beta == 0 then return prod + accel.zeros_like(t) end
  return (beta == 1 and t or t * beta) + prod
end
function M.addmm(t, ...) return add_product(t, ...) end
function M.baddbmm(t, ...) return add_product(t, ...) end

-- erfinv(y) in float64: Giles' approximation for |y|, refined by Newton
-- steps on erf(x) = |y|. For |y| >= 0.5 they are on log erfc(x) =
-- log(1 - |y|) instead (1 - |y| is exact there): erf(x) - |y| would cancel
-- to nothing near 1, and log erfc is near linear in x^2, so the far tail
-- (Giles' guess is off by 0.5 at 1 - 2^-53) converges too. +-inf at +-1.
local function erfinv_value(y)
  local a = y:abs()
  local w = -((1 - a) * (1 + a)):log()
  local function poly(z, c)
    local p = z:mul(0):add(c[1])
    for i = 2, #c do p = p * z + c[i] end
    return p
  end
  local small = poly(w - 2.5, {2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
    -0.00125372503, -0.00417768164, 0.246640727, 1.50140941})
  local large = poly(w:clamp(0, nil):sqrt() - 3, {-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
    0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682})
  local x = accel.where(w:lt(5), small, large) * a
  local tail = a:ge(0.5)
  for _ = 1, 4 do -- Newton (finite x only); residual / slope is the step for either equation
    local erfc_x = x:erfc()
    local residual = accel.where(tail, erfc_x * ((1 - a):log() - erfc_x:log()), x:erf() - a)
    local step = residual / ((-x * x):exp() * (2 / math.sqrt(math.pi)))
    x = accel.where(x:isfinite(), x - step, x)
  end
  x = accel.where(a:eq(1), math.huge, x)
  return accel.where(y:reciprocal():lt(0), -x, x) -- (1 / y < 0 also for y = -0, as torch's -0)
end

-- erfinv with torch's gradient sqrt(pi) / 2 exp(erfinv(y)^2) (inf at +-1)
local erfinv = custom_function{
  name = "erfinv",
  forward = function(ctx, t)
    local out = erfinv_value(t:double()):to(t.dtype.is_floating_point and t.dtype or accel.float32)
    ctx:save_for_backward(out)
    return out
  end,
  backward = function(ctx, g)
    local x = ctx.saved_tensors[1]
    return g * ((x * x):exp() * (math.sqrt(math.pi) / 2))
  end,
}
function M.erfinv(t) return erfinv(t) end

-- t:diff([n = 1], [dim = -1], [prepend], [append]): differences of neighbours, n
-- times, of t with prepend before it and append after it along dim
function M.diff(t, ...)
  local a = torch_args("diff", {"n:int", "dim:int", "prepend:tensor|number", "append:tensor|number"}, ...)
  local d = positive_dim("diff", t, a.dim or -1)
  local r = t
  if a.prepend ~= nil or a.append ~= nil then -- (torch: joined to t along dim first; a number fills one slice)
    local parts = {}
    for _, extra in ipairs({a.prepend or false, t, a.append or false}) do
      if extra == t then parts[#parts + 1] = t
      elseif extra then
        if not accel.is_tensor(extra) then
          local shape = sizes(t)
          shape[d] = 1
          extra = accel.full(shape, extra, {dtype = t.dtype, device = t.device})
        end
        if extra:dim() ~= t:dim() then
          raise("diff: prepend / append must have the same number of dims as the input (%d), got %d", t:dim(), extra:dim())
        end
        parts[#parts + 1] = extra
      end
    end
    r = accel.cat(parts, d)
  end
  for _ = 1, a.n or 1 do
    local len = r:size(d)
    if len == 0 then break end
    local after, before = r:narrow(d, 2, len - 1), r:narrow(d, 1, len - 1)
    r = r.dtype == accel.bool and after:logical_xor(before) or after - before -- (bools: xor, as torch)
  end
  return r
end

-- a slice bound of a dim of size n, as torch's slicing: below 0 counts from
-- the end, then clamped to [0, n]
local function slice_bound(i, n)
  if i < 0 then i = i + n end
  return math.min(math.max(i, 0), n)
end

-- t:tensor_split(sections | {indices}, [dim = 1]): Lua list of views; n
-- sections of sizes differing by at most one (the first ones larger), or cuts
-- at each 0-based index (in any order, as torch's)
local MAX_PIECES = 16777216 -- 2^24, as chunk's (bindings/tensor_lua.c): more pieces would only exhaust memory

function M.tensor_split(t, spec, ...)
  local a = torch_args("tensor_split", {"dim:int"}, ...)
  local d = positive_dim("tensor_split", t, a.dim or 1)
  local n, cuts = t:size(d), {}
  if type(spec) == "number" then
    if spec < 1 or spec ~= math.floor(spec) or spec == math.huge then
      raise("tensor_split: number of sections must be a positive integer, got %s", util.show(spec))
    end
    if spec > MAX_PIECES then
      raise("tensor_split: %s sections are more than the %d this build makes", util.show(spec), MAX_PIECES)
    end
    local base, extra, at = math.floor(n / spec), n % spec, 0
    for i = 1, spec - 1 do
      at = at + base + (i <= extra and 1 or 0)
      cuts[i] = at
    end
  else
    cuts = int_list("tensor_split", "indices", spec)
  end
  -- piece k is t[cuts[k-1] : cuts[k]] along d, as torch's slices: an index
  -- below 0 counts from the end, and an end before its start gives an empty piece
  local out = {}
  for k = 1, #cuts + 1 do
    local s, e = slice_bound(cuts[k - 1] or 0, n), slice_bound(cuts[k] or n, n)
    out[k] = t:narrow(d, s + 1, math.max(e - s, 0))
  end
  return out
end
function M.hsplit(t, spec) return M.tensor_split(t, spec, t:dim() == 1 and 1 or 2) end
function M.vsplit(t, spec) return M.tensor_split(t, spec, 1) end
function M.dsplit(t, spec)
  if t:dim() < 3 then raise("dsplit: requires a tensor with at least 3 dimensions, but got a tensor with %d dimensions", t:dim()) end
  return M.tensor_split(t, spec, 3)
end

-- t:rot90([k = 1], [dims = {1, 2}]): rotated by 90 degrees k times, from
-- the first dim towards the second
function M.rot90(t, k, dims)
  k = (k or 1) % 4
  dims = dims or {1, 2}
  if type(dims) ~= "table" or #dims ~= 2 then raise("rot90: dims must be a list of 2 dims, got %s", util.show(dims)) end
  if t:dim() < 2 then raise("rot90: expected a tensor of at least 2 dims, got %d", t:dim()) end
  local a, b = positive_dim("rot90", t, dims[1]), positive_dim("rot90", t, dims[2])
  if a == b then raise("rot90: expected rotation dims to be different, got %s and %s", dims[1], dims[2]) end
  if k == 1 then return M.flip(t, b):transpose(a, b) end
  if k == 2 then return M.flip(t, {a, b}) end
  if k == 3 then return M.flip(t, a):transpose(a, b) end
  return t:clone()
end

-- t:cross(u, [dim]): the cross product along a dim of size 3 (the first such without dim)
function M.cross(t, u, dim)
  local d = dim and positive_dim("cross", t, dim) or nil
  for i = 1, t:dim() do d = d or (t:size(i) == 3 and i or nil) end
  if not d or t:size(d) ~= 3 then raise("cross: no dimension of size 3 in the input") end
  local function c(x, i) return x:narrow(d, i, 1) end
  return accel.cat({c(t, 2) * c(u, 3) - c(t, 3) * c(u, 2), c(t, 3) * c(u, 1) - c(t, 1) * c(u, 3),
                    c(t, 1) * c(u, 2) - c(t, 2) * c(u, 1)}, d)
end

-- fn, whose errors from the op `inner` it is built on name `name`, the op
-- the user called (the message keeps its place, the user's file:line)
local function named_as(name, inner, fn)
  local prefix = inner .. ": "
  return function(...)
    local res = compat.pack(pcall(fn, ...))
    if res[1] then return compat.unpack(res, 2, res.n) end
    local msg = res[2]
    if type(msg) == "string" then
      local at = msg:find(prefix, 1, true)
      if at then msg = msg:sub(1, at - 1) .. name .. ": " .. msg:sub(at + #prefix) end
    end
    error(msg, 0)
  end
end

-- index's elements as 0-based positions in a flattened tensor of n
-- elements (1-D); a negative one counts from the end, as torch's take / put
local function flat_positions(op, index, n)
  local ids = index:reshape({-1})
  if ids:numel() > 0 then
    local lo, hi = ids:min():item(), ids:max():item()
    local bad = (lo < -n and lo) or (hi >= n and hi) or nil
    if bad then raise("%s: out of range: tried to access index %d on a tensor of %d elements", op, bad, n) end
  end
  return accel.where(ids:lt(0), ids + n, ids)
end

-- t:put(index, source, [accumulate = false]) (op "put" or "put_"): the
-- flattened t's elements at index set to (or, accumulating, added to by)
-- source's
local function putter(op)
  return named_as(op, "index_add", function(t, index, source, accumulate)
    if source:numel() ~= index:numel() then
      raise("%s: expected source and index to have the same number of elements, got %d and %d", op,
        source:numel(), index:numel())
    end
    local flat, ids, src = t:reshape({-1}), flat_positions(op, index, t:numel()), source:reshape({-1})
    local r = accumulate and flat:index_add(1, ids, src) or M.index_copy(flat, 1, ids, src)
    return r:reshape(t.shape)
  end)
end

-- t:take(index): t's elements at the 0-based flat positions in index (a
-- negative one counts from the end, as torch's), in index's shape
M.take = named_as("take", "index_select", function(t, index)
  return t:reshape({-1}):index_select(1, flat_positions("take", index, t:numel())):reshape(index.shape)
end)
M.put = putter("put")
local put_values = putter("put_")
function M.put_(t, ...) return t:copy_(put_values(t, ...)) end

-- t:take_along_dim(indices, [dim]), torch's: without dim, the flattened t at
-- the flattened indices (1-D); with dim, gather after t and indices broadcast
-- against each other in every dim but dim, where each keeps its own size:
-- t (2, 3), indices (1, 2), dim 2 -> both (2, 3) / (2, 2) -> (2, 2)
function M.take_along_dim(t, indices, dim)
  if dim == nil then return t:reshape({-1}):gather(1, indices:reshape({-1})) end
  if t:dim() ~= indices:dim() then
    raise("take_along_dim: input and indices should have the same number of dimensions, but got %d dimensions for "
      .. "input, and %d dimensions for indices", t:dim(), indices:dim())
  end
  local d = positive_dim("take_along_dim", t, dim)
  local tshape, ishape = sizes(t), sizes(indices)
  for i = 1, t:dim() do
    local a, b = tshape[i], ishape[i]
    if i ~= d and a ~= b then
      if a ~= 1 and b ~= 1 then
        raise("take_along_dim: input of shape %s and indices of shape %s do not broadcast (size %d against %d in dim %d)",
          util.shape_str(t), util.shape_str(indices), a, b, i)
      end
      local n = a == 1 and b or a -- (1 gives way also to 0)
      tshape[i], ishape[i] = n, n
    end
  end
  return t:expand(tshape):gather(d, indices:expand(ishape))
end

-- where along dim the rows listed in index are (a bool mask broadcasting to t)
local function rows_mask(t, d, index)
  local n = t:size(d)
  local hit = accel.zeros(n, {dtype = accel.int64, device = t.device})
    :index_add(1, index:reshape({-1}), accel.ones(index:numel(), {dtype = accel.int64, device = t.device})):gt(0)
  local shape = {}
  for i = 1, t:dim() do shape[i] = i == d and n or 1 end
  return hit:reshape(shape)
end

-- t:index_fill(dim, index, value): the rows at index along dim set to value
-- (a number value in t's dtype, as torch: 2.5 into an int64 tensor is 2)
local function index_filled(op, t, dim, index, value)
  local d = positive_dim(op, t, dim)
  if type(value) == "number" then value = accel.full_like(t, value) end
  return accel.where(rows_mask(t, d, index), value, t)
end
M.index_fill = named_as("index_fill", "index_add", function(t, dim, index, value)
  return index_filled("index_fill", t, dim, index, value)
end)
-- whether t is an expanded view: a dim of size > 1 with stride 0
local function is_expanded(t)
  for i = 1, t:dim() do
    if t:stride(i) == 0 and t:size(i) > 1 then return true end
  end
  return false
end

-- t:index_fill_(dim, index, value); into an expanded view it writes
-- through, as torch's (masked_fill_ fills a location any of the elements
-- sharing it selects), where copy_ would refuse the view
local function index_fill_(t, dim, index, value)
  if not is_expanded(t) then return t:copy_(index_filled("index_fill_", t, dim, index, value)) end
  return t:masked_fill_(rows_mask(t, positive_dim("index_fill_", t, dim), index), value)
end
M.index_fill_ = named_as("index_fill_", "index_add", named_as("index_fill_", "masked_fill_", index_fill_))

-- t:index_copy(dim, index, source): the rows at index replaced by source's
M.index_copy = named_as("index_copy", "index_add", function(t, dim, index, source)
  local d = positive_dim("index_copy", t, dim)
  return accel.where(rows_mask(t, d, index), accel.zeros_like(t):index_add(d, index, source), t)
end)
function M.index_copy_(t, ...) return t:copy_(M.index_copy(t, ...)) end

-- t:scatter(dim, index, src | value): the elements at index replaced (an
-- id given twice sums the sources, where torch's choice is undefined)
M.scatter = named_as("scatter", "scatter_add", function(t, dim, index, src, ...)
  local a = torch_args("scatter", {"reduce:string"}, ...)
  if a.reduce ~= nil then raise("scatter: reduce is not supported (use scatter_add for 'add')") end
  local ones = accel.ones(index.shape, {dtype = accel.int64, device = t.device})
  local hit = accel.zeros_like(t, {dtype = accel.int64}):scatter_add(dim, index, ones):gt(0)
  if type(src) == "number" or type(src) == "boolean" then -- (in t's dtype, as torch; a boolean is the bool scalar)
    return accel.where(hit, accel.full_like(t, src), t)
  end
  return accel.where(hit, accel.zeros_like(t):scatter_add(dim, index, src), t)
end)
function M.scatter_(t, ...) return t:copy_(M.scatter(t, ...)) end

function M.aminmax(t, ...)
  local a = torch_args("aminmax", {"dim:int", "keepdim:bool"}, ...)
  return t:amin(a.dim, a.keepdim or false), t:amax(a.dim, a.keepdim or false)
end

function M.frac(t) return t - t:trunc() end
-- the larger (smaller) where one side is NaN: the other, as torch's fmax / fmin
function M.fmax(t, u) return accel.where(t:isnan(), u, accel.where(u:isnan(), t, t:maximum(u))) end
function M.fmin(t, u) return accel.where(t:isnan(), u, accel.where(u:isnan(), t, t:minimum(u))) end
-- a * log(y) (y a tensor or a number), 0 where a is 0 unless y is NaN
local function xlogy_value(a, y)
  local log_y = accel.is_tensor(y) and y:log() or math.log(y)
  if not accel.is_tensor(y) and y ~= y then return a * log_y end
  local zero = a:eq(0)
  if accel.is_tensor(y) then zero = zero:logical_and(y:isnan():logical_not()) end
  return accel.where(zero, 0, a * log_y)
end

-- A differentiable op of (t, u), u a tensor or a number: value(t, u)
-- forward; grads(ctx, g, t, u) -> the gradients for t and u (u as given).
local function tensor_or_number_op(name, value, grads)
  return custom_function{
    name = name,
    forward = function(ctx, t, u)
      ctx:save_for_backward(t, accel.is_tensor(u) and u or nil)
      ctx.u = u
      return value(t, u)
    end,
    backward = function(ctx, g) return grads(ctx, g, ctx.saved_tensors[1], ctx.saved_tensors[2] or ctx.u) end,
  }
end

-- t:xlogy(u) with torch's gradients: for t, xlogy(grad, u), so log(u) where t
-- is 0 too, except 0 where t is 0 and u <= 0; for u, grad * t / u
local xlogy = tensor_or_number_op("xlogy", xlogy_value, function(ctx, g, x, y)
  local gx, gy
  if ctx.needs_input_grad[1] then
    -- 0 where x is 0 and y <= 0; also where x is 0 and y is a NaN number (torch's scalar overload)
    local scalar_nan = not accel.is_tensor(y) and y ~= y
    local masked = accel.is_tensor(y) and x:eq(0):logical_and(y:le(0)) or ((y <= 0 or scalar_nan) and x:eq(0))
    gx = xlogy_value(g, y)
    if masked then gx = accel.where(masked, 0, gx) end
  end
  if ctx.needs_input_grad[2] then gy = g * x / y end
  return gx, gy
end)
function M.xlogy(t, u) return xlogy(t, u) end
-- t:logit([eps]) = log(p / (1 - p)), p = t clamped to [eps, 1 - eps] when eps
-- is given (below eps: eps, else above 1 - eps: 1 - eps, as torch's kernel).
-- torch's gradient: g / (x (1 - x)), g * inf at 0 and 1; outside [eps, 1 - eps]
-- 0, and without eps NaN outside [0, 1]
local logit = custom_function{
  name = "logit",
  forward = function(ctx, t, eps)
    ctx:save_for_backward(t)
    ctx.eps = eps
    local p = eps and accel.where(t:lt(eps), eps, accel.where(t:gt(1 - eps), 1 - eps, t)) or t
    return (p / (1 - p)):log()
  end,
  backward = function(ctx, g)
    local x, eps = ctx.saved_tensors[1], ctx.eps
    local grad = accel.where(x:eq(0):logical_or(x:eq(1)), g * math.huge, g / (x * (1 - x)))
    local outside = x:lt(eps or 0):logical_or(x:gt(1 - (eps or 0)))
    return accel.where(outside, eps and 0 or 0 / 0, grad)
  end,
}
function M.logit(t, eps) return logit(t.dtype.is_floating_point and t or t:float(), eps) end
function M.deg2rad(t) return t * (math.pi / 180) end
function M.rad2deg(t) return t * (180 / math.pi) end
-- sqrt(t^2 + u^2); +inf where either is infinite, even with a NaN (C99's hypot, torch's)
function M.hypot(t, u)
  return accel.where(t:isinf():logical_or(u:isinf()), math.huge, (t * t + u * u):sqrt())
end
-- sin(pi t) / (pi t), 1 at 0
function M.sinc(t)
  local x = t * math.pi
  return accel.where(t:eq(0), 1, x:sin() / accel.where(t:eq(0), 1, x))
end

-- t:cumprod(dim, [{dtype =}]): running products along dim, one multiply
-- per position (differentiable; integers and bools in int64, as torch's)
function M.cumprod(t, ...)
  local d, x = running_input("cumprod", t, ...)
  return running(x, d, function(a, b) return a * b end)
end

-- running extremes along dim: values and the index where each was reached
-- (a tie takes the later index, NaN propagates, and each later NaN takes
-- over, index included, as torch's)
local function cumulative_extreme(op, t, dim, larger)
  local d = positive_dim(op, t, dim)
  if t:dim() == 0 then return t:clone(), accel.zeros({}, {dtype = accel.int64, device = t.device}) end
  local n = t:size(d)
  if n == 0 then return t:clone(), accel.zeros_like(t, {dtype = accel.int64}) end
  local vals, ids = {t:narrow(d, 1, 1)}, {accel.zeros_like(t:narrow(d, 1, 1), {dtype = accel.int64})}
  for k = 2, n do
    local x, prev = t:narrow(d, k, 1), vals[k - 1]
    local take = (larger and x:ge(prev) or x:le(prev)):logical_and(prev:isnan():logical_not())
    take = take:logical_or(x:isnan())
    vals[k] = accel.where(take, x, prev)
    ids[k] = accel.where(take, k - 1, ids[k - 1])
  end
  return accel.cat(vals, d), accel.cat(ids, d)
end

-- t:cummax(dim) / t:cummin(dim) -> values, indices
function M.cummax(t, dim) return cumulative_extreme("cummax", t, dim, true) end
function M.cummin(t, dim) return cumulative_extreme("cummin", t, dim, false) end

-- log(exp(t) + exp(u)), from the larger one; t itself where t and u are the
-- same infinity (their difference is NaN there)
local function logaddexp_value(t, u)
  local r = t:maximum(u) + (-(t - u):abs()):exp():log1p()
  return accel.where(t:isinf():logical_and(t:eq(u)), t, r)
end

local function logcumsumexp_value(x, d) return running(x, d, logaddexp_value) end

-- x:logcumsumexp(d) (r) with torch's gradient: exp(x_i + log sum_{j >= i}
-- g_j exp(-r_j)), the sum of the positive and the negative g in log space
-- (a zero g there the dtype's lowest value, as torch's); NaN where x_i and
-- r_j are the same infinity, as torch's
local logcumsumexp = custom_function{
  name = "logcumsumexp",
  forward = function(ctx, x, d)
    local r = logcumsumexp_value(x, d)
    ctx:save_for_backward(x, r)
    ctx.d = d
    return r
  end,
  backward = function(ctx, g)
    local x, r, d = ctx.saved_tensors[1], ctx.saved_tensors[2], ctx.d
    local log_g, lowest = g:abs():log(), accel.finfo(g.dtype).min
    local function part(mask) -- exp(x_i + log sum_{j >= i} |g_j| exp(-r_j)) over the g in mask
      local terms = accel.where(mask, log_g, lowest) - r
      return (logcumsumexp_value(terms:flip(d), d):flip(d) + x):exp()
    end
    return part(g:gt(0)) - part(g:lt(0))
  end,
}

-- t:logcumsumexp(dim): log of the running sums of exp(t), one logaddexp per
-- position (exact for widely spread values)
function M.logcumsumexp(t, dim)
  local d = positive_dim("logcumsumexp", t, dim)
  return logcumsumexp(t.dtype.is_floating_point and t or t:float(), d)
end

-- ---- reductions and element-wise compositions ----

-- t:logsumexp(dim, [keepdim = false]): log(sum(exp(t))) along dim (a list
-- too), computed from the maximum; an integer input gives float32.
M.logsumexp = named_as("logsumexp", "amax", function(t, ...)
  local a = torch_args("logsumexp", {"dim:int|table", "keepdim:bool"}, ...)
  if a.dim == nil then raise("logsumexp: dim must be given (t:logsumexp(dim))") end
  local keep = a.keepdim == true
  local x = t.dtype.is_floating_point and t or t:float()
  if x:numel() == 0 then return x:exp():sum(a.dim, keep):log() end -- (an empty sum: -inf, as torch's)
  local m = x:amax(a.dim, true):detach()
  m = accel.where(m:isinf(), 0, m) -- a row of -inf (or inf) sums as is
  local s = (x - m):exp():sum(a.dim, keep):log()
  return s + (keep and m or m:sum(a.dim))
end)

-- t:lerp(end, weight): t + weight * (end - t), in PyTorch's two forms (from
-- the nearer end) so the result matches it.
local function lerp(t, e, w)
  if type(w) ~= "number" and not accel.is_tensor(w) then
    raise("lerp: weight must be a number or a tensor, got %s", type(w))
  end
  -- torch: '"lerp_kernel_scalar" not implemented for 'Long'', 'expected dtype float for `end` but got dtype ...'
  if not t.dtype.is_floating_point then raise("lerp: not implemented for %s (floating-point tensors only)", t.dtype.name) end
  for _, arg in ipairs({{"end", e}, {"weight", w}}) do
    local v = arg[2]
    if accel.is_tensor(v) and v.dtype ~= t.dtype then
      raise("lerp: expected dtype %s for `%s` but got dtype %s", t.dtype.name, arg[1], v.dtype.name)
    end
  end
  local diff = e - t
  if type(w) == "number" then
    if math.abs(w) < 0.5 then return t + diff * w end
    return e - diff * (1 - w)
  end
  return accel.where(w:abs():lt(0.5), t + diff * w, e - diff * (1 - w))
end
function M.lerp(t, e, w, ...)
  no_more("lerp", 2, ...)
  return lerp(t, e, w)
end
function M.lerp_(t, e, w, ...)
  no_more("lerp_", 2, ...)
  return t:copy_(lerp(t, e, w))
end

-- x as a tensor of dtype dt (a number stays a number)
local function as_dtype(x, dt) return accel.is_tensor(x) and x:to(dt) or x end

local function integral(x) return accel.is_tensor(x) and not x.dtype.is_floating_point end

-- the dtype torch computes t + t1 * t2 in: that of the tensors with dims,
-- unless the 0-dim ones, then the numbers, are of a higher kind (bool <
-- integer < float), as in binary ops; found from one-element stand-ins
local function common_dtype(t, t1, t2)
  local dt = t.dtype
  if accel.is_tensor(t1) and accel.is_tensor(t2) and t1.dtype == dt and t2.dtype == dt then return dt end
  local dimmed, lower, numbers = nil, nil, {}
  local function fold(acc, x)
    if acc == nil or x == nil then return acc or x end
    return acc + x
  end
  for _, x in ipairs({t, t1, t2}) do
    if not accel.is_tensor(x) then numbers[#numbers + 1] = x
    elseif x:dim() == 0 then lower = fold(lower, accel.zeros({}, {dtype = x.dtype}))
    else dimmed = fold(dimmed, accel.zeros({1}, {dtype = x.dtype})) end
  end
  for _, n in ipairs(numbers) do lower = fold(lower, n) end
  return fold(dimmed, lower).dtype
end

-- t + value * t1 * t2 and t + value * t1 / t2, as torch: the operands
-- converted to the three's dtype first (a uint8 t1 * t2 beside an int64 t
-- does not wrap), bf16 / fp16 computed in float32 and rounded once, value
-- in that dtype (truncated for integers) and multiplied into t1 first
local function addc(op, t, t1, t2, ...)
  local value = torch_args(op, {"value:number"}, ...).value or 1
  local mul = op:sub(1, 7) == "addcmul"
  if not mul and integral(t1) and integral(t2) then
    raise("%s: integer division is not supported (as torch); use t + value * (t1 / t2) or float tensors", op)
  end
  local rd = common_dtype(t, t1, t2)
  local cd = (rd == accel.bfloat16 or rd == accel.float16) and accel.float32 or rd
  if not cd.is_floating_point then value = value < 0 and math.ceil(value) or math.floor(value) end
  local function operand(x) return as_dtype(as_dtype(x, rd), cd) end -- an int64 t rounds to bf16 first, as torch
  local a, b, c = operand(t), operand(t1), operand(t2)
  local scaled = value == 1 and b or b * value
  return (a + (mul and scaled * c or scaled / c)):to(rd)
end
function M.addcmul(t, ...) return addc("addcmul", t, ...) end
function M.addcdiv(t, ...) return addc("addcdiv", t, ...) end
function M.addcmul_(t, ...) return t:copy_(addc("addcmul_", t, ...)) end
function M.addcdiv_(t, ...) return t:copy_(addc("addcdiv_", t, ...)) end

function M.clamp_min(t, v) return t:clamp(v, nil) end
function M.clamp_max(t, v) return t:clamp(nil, v) end
function M.clamp_min_(t, v) return t:clamp_(v, nil) end
function M.clamp_max_(t, v) return t:clamp_(nil, v) end

-- t:logaddexp(u) with torch's gradients: g / (1 + exp(u - t)) for t and
-- g / (1 + exp(t - u)) for u (NaN where t and u are the same infinity)
local logaddexp = tensor_or_number_op("logaddexp", logaddexp_value, function(ctx, g, t, u)
  local diff = t - u
  return g / ((-diff):exp() + 1), ctx.needs_input_grad[2] and g / (diff:exp() + 1) or nil
end)
function M.logaddexp(t, u) return logaddexp(t, u) end

-- t:outer(v) of 1-D t (n) and v (m): (n, m)
function M.outer(t, v)
  if t:dim() ~= 1 or v:dim() ~= 1 then
    raise("outer: expected 1-D tensors, got %d-D and %d-D", t:dim(), v:dim())
  end
  return t:unsqueeze(2) * v:unsqueeze(1)
end

-- t, in the default float dtype unless floating already
local function as_float(t)
  return t.dtype.is_floating_point and t or t:to(accel.get_default_dtype())
end

-- t == u, or a finite |t - u| <= atol + rtol * |u| (torch's rule; NaNs
-- equal with equal_nan = true). As torch's, an integer or bool tensor is
-- compared in the default float dtype (uint8's 0 - 1 is -1, not 255), and
-- zero tolerances are equality alone.
function M.isclose(t, u, ...)
  local a = torch_args("isclose", {"rtol:number", "atol:number", "equal_nan:bool"}, ...)
  local rtol, atol = a.rtol or 1e-5, a.atol or 1e-8
  if rtol < 0 or atol < 0 then raise("isclose: rtol (%s) and atol (%s) must be non-negative", rtol, atol) end
  if not accel.is_tensor(u) then u = accel.full({}, u, {dtype = t.dtype, device = t.device}) end
  local close = t:eq(u)
  if a.equal_nan then close = close:logical_or(t:isnan():logical_and(u:isnan())) end
  if rtol == 0 and atol == 0 then return close end
  local x, y = as_float(t), as_float(u)
  local err = (x - y):abs()
  return close:logical_or(err:isfinite():logical_and(err:le(y:abs() * rtol + atol)))
end

-- NaN, inf and -inf replaced (by 0 and the dtype's largest / lowest finite
-- values unless given)
function M.nan_to_num(t, ...)
  local a = torch_args("nan_to_num", {"nan:number", "posinf:number", "neginf:number"}, ...)
  if not t.dtype.is_floating_point then return t:clone() end
  local big = accel.finfo(t.dtype).max
  local r = accel.where(t:isnan(), a.nan or 0, t)
  r = accel.where(r:eq(math.huge), a.posinf or big, r)
  return accel.where(r:eq(-math.huge), a.neginf or -big, r)
end

-- ---- reordering ----

local function reversed_positions(n, device)
  return accel.arange(n - 1, -1, -1, {device = device})
end

-- t:flip(dims): the order along each dim reversed
function M.flip(t, dims, ...)
  no_more("flip", 1, ...)
  local r, seen = t, {}
  for _, d in ipairs(int_list("flip", "dims", dims)) do
    if t:dim() == 0 and (d == 1 or d == -1) then return t:clone() end -- (a 0-d tensor: itself, as torch's flip(0))
    d = positive_dim("flip", t, d)
    if seen[d] then raise("flip: dim %d appears multiple times in the list of dims", d) end
    seen[d] = true
    r = r:index_select(d, reversed_positions(t:size(d), t.device))
  end
  return r
end
function M.fliplr(t) if t:dim() < 2 then raise("fliplr: input must be >= 2-d") end return M.flip(t, 2) end
function M.flipud(t) if t:dim() < 1 then raise("flipud: input must be >= 1-d") end return M.flip(t, 1) end

-- t:roll(shifts, [dims]): elements shifted along dims (cyclically); without
-- dims, over the flattened tensor
function M.roll(t, shifts, dims, ...)
  no_more("roll", 2, ...)
  if dims == nil then return M.roll(t:reshape({-1}), shifts, 1):reshape(t.shape) end
  shifts, dims = int_list("roll", "shifts", shifts), int_list("roll", "dims", dims)
  if #shifts ~= #dims then raise("roll: shifts (%d) and dims (%d) must have the same length", #shifts, #dims) end
  local r = t
  for i, d in ipairs(dims) do
    d = positive_dim("roll", t, d)
    local n = t:size(d)
    local s = n > 0 and shifts[i] % n or 0
    if s ~= 0 then r = accel.cat({r:narrow(d, n - s + 1, s), r:narrow(d, 1, n - s)}, d) end
  end
  return r
end

function M.swapaxes(t, a, b) return t:transpose(a, b) end
M.swapdims = M.swapaxes
function M.broadcast_to(t, shape) return t:expand(shape) end

-- t:movedim(source, destination): dims (or lists of dims) moved, the others
-- keeping their order
function M.movedim(t, source, destination)
  local src, dst = int_list("movedim", "source", source), int_list("movedim", "destination", destination)
  if #src ~= #dst then raise("movedim: source (%d dims) and destination (%d dims) must match", #src, #dst) end
  local nd, perm, taken = t:dim(), {}, {}
  for i = 1, #src do
    local s, d = positive_dim("movedim", t, src[i]), positive_dim("movedim", t, dst[i])
    if perm[d] or taken[s] then raise("movedim: repeated dim in source or destination") end
    perm[d], taken[s] = s, true
  end
  local rest = 1
  for d = 1, nd do
    if not perm[d] then
      while taken[rest] do rest = rest + 1 end
      perm[d], rest = rest, rest + 1
    end
  end
  return t:permute(perm)
end
M.moveaxis = M.movedim

-- ---- in-place forms of C ops ----

-- t:scatter_add_(dim, index, src) / t:index_add_(dim, index, source, [{alpha =}]):
-- the out-of-place result written into t (under copy_'s autograd rules)
function M.scatter_add_(t, ...) return t:copy_(t:scatter_add(...)) end
function M.index_add_(t, ...) return t:copy_(t:index_add(...)) end

-- ---- diagonals ----

-- t:diagonal([offset = 0], [dim1 = 1], [dim2 = 2]): the diagonal of the
-- (dim1, dim2) planes as a new last dim, a view as torch's (writing into it
-- writes into t); offset > 0 above the main diagonal, < 0 below
function M.diagonal(t, ...)
  local a = torch_args("diagonal", {"offset:int", "dim1:int", "dim2:int"}, ...)
  local d1, d2 = positive_dim("diagonal", t, a.dim1 or 1), positive_dim("diagonal", t, a.dim2 or 2)
  if d1 == d2 then raise("diagonal: dimensions cannot be identical %d, %d", d1, d2) end
  return C.diagonal(t, a.offset or 0, d1, d2)
end

-- t:diag([diagonal = 0]): of a 1-D t the square matrix with t on that
-- diagonal; of a 2-D t, its diagonal (a copy, as torch's, not a view)
function M.diag(t, k, ...)
  no_more("diag", 1, ...)
  k = k or 0
  if t:dim() == 2 then return M.diagonal(t, k):clone() end
  if t:dim() ~= 1 then raise("diag: expected a 1-D or 2-D tensor, got %d-D", t:dim()) end
  local n = t:size(1)
  local ids = accel.arange(n, {device = t.device})
  local square = t:unsqueeze(2) * ids:unsqueeze(2):eq(ids):to(t.dtype) -- (n, n), t on the main diagonal
  if k == 0 then return square end
  local F = require("accel.nn.functional")
  local m = math.abs(k)
  return k > 0 and F.pad(square, {m, 0, 0, m}) or F.pad(square, {0, m, m, 0})
end

function M.trace(t)
  if t:dim() ~= 2 then raise("trace: expected a matrix, got %d-D", t:dim()) end
  return M.diagonal(t):sum()
end

-- ---- masks and positions ----

-- 0-based flat positions of the true / nonzero elements of t, in order
local function nonzero_positions(t)
  local flat, pos = t:reshape({-1}):ne(0):tolist(), {}
  for i, v in ipairs(flat) do
    if v then pos[#pos + 1] = i - 1 end
  end
  return pos
end

-- t:nonzero([{as_tuple = false}]): (count, ndim) int64 indices (0-based,
-- as PyTorch's), or with as_tuple one 1-D tensor per dim
function M.nonzero(t, ...)
  local as_tuple = torch_args("nonzero", {"as_tuple:bool"}, ...).as_tuple
  local pos, nd, dims = nonzero_positions(t), t:dim(), sizes(t)
  local cols = {}
  for d = 1, math.max(nd, 1) do cols[d] = {} end
  for i, p in ipairs(pos) do
    for d = nd, 1, -1 do
      cols[d][i] = p % dims[d]
      p = (p - cols[d][i]) / dims[d]
    end
  end
  local outs = {}
  for d = 1, nd do outs[d] = accel.tensor(cols[d], {dtype = accel.int64, device = t.device}) end
  if as_tuple then return unpack(outs) end
  if nd == 0 then return accel.zeros(#pos, 0, {dtype = accel.int64, device = t.device}) end
  if #pos == 0 then return accel.zeros(0, nd, {dtype = accel.int64, device = t.device}) end
  return accel.stack(outs, 2)
end
function M.argwhere(t) return M.nonzero(t) end

-- t:masked_select(mask): 1-D, the elements where (broadcast) mask is true
function M.masked_select(t, mask)
  if not accel.is_tensor(mask) or mask.dtype ~= accel.bool then
    raise("masked_select: mask must be a bool tensor, got %s", accel.is_tensor(mask) and mask.dtype.name or type(mask))
  end
  local x, m = t, mask
  if tostring(t.shape) ~= tostring(mask.shape) then
    local both = accel.zeros_like(t, {dtype = accel.bool}):logical_or(mask)
    x, m = t:expand(both.shape), mask:expand(both.shape)
  end
  local pos = accel.tensor(nonzero_positions(m), {dtype = accel.int64, device = t.device})
  return x:reshape({-1}):index_select(1, pos)
end

function M.count_nonzero(t, dim) return t:ne(0):sum(dim) end

-- ---- random fills and sampling (accel's generator) ----

-- In-place random fills follow in-place rules: a leaf that requires grad is
-- refused while grad mode is on (nn.init's functions fill under no_grad).
local function check_fillable(op, t)
  util.check_inplace_leaf(op, t, (op == "normal_" or op == "uniform_") and " or nn.init." .. op or nil)
end

-- t:normal_([mean = 0], [std = 1]) and t:uniform_([from = 0], [to = 1]):
-- the draws of nn.init.normal_ / uniform_ (as torch's, whose init functions
-- call these methods)
function M.normal_(t, ...)
  local a = torch_args("normal_", {"mean:number", "std:number"}, ...)
  check_fillable("normal_", t)
  return require("accel.nn.initializers").normal_(t, a.mean or 0, a.std or 1)
end
function M.uniform_(t, ...)
  local a = torch_args("uniform_", {"from:number", "to:number"}, ...)
  check_fillable("uniform_", t)
  return require("accel.nn.initializers").uniform_(t, a.from or 0, a.to or 1)
end

-- t:bernoulli([p]): 0 / 1 draws (t's dtype) with probability p (a number
-- or tensor), or t's own values as the probabilities
function M.bernoulli(t, p, ...)
  no_more("bernoulli", 1, ...)
  local probs = p == nil and t or p
  if type(probs) == "number" and (probs < 0 or probs > 1) then raise("bernoulli: p must be in [0, 1], got %s", util.show(probs)) end
  if accel.is_tensor(probs) and probs:lt(0):logical_or(probs:gt(1)):logical_or(probs:isnan()):any():item() then
    raise("bernoulli: probabilities must be in [0, 1]")
  end
  local u = accel.rand(t.shape, {dtype = accel.float64, device = t.device})
  return u:lt(probs):to(t.dtype.is_floating_point and t.dtype or accel.float32)
end
-- t:bernoulli_([p = 0.5]): t filled with 0 / 1 draws of probability p
function M.bernoulli_(t, p, ...)
  no_more("bernoulli_", 1, ...)
  check_fillable("bernoulli_", t)
  return accel.no_grad(function() return t:copy_(M.bernoulli(t, p == nil and 0.5 or p)) end)
end
-- t filled (in place, no gradient) with f(u) of float64 uniform draws u in [0, 1)
local function fill_from_uniform(op, t, f)
  check_fillable(op, t)
  local u = accel.rand(t.shape, {dtype = accel.float64, device = t.device})
  return accel.no_grad(function() return t:copy_(f(u)) end)
end

-- t:exponential_([lambd = 1]): t filled with exponential draws of rate lambd
function M.exponential_(t, lambd, ...)
  no_more("exponential_", 1, ...)
  lambd = lambd or 1
  if type(lambd) ~= "number" or not (lambd > 0) then raise("exponential_: lambd must be positive, got %s", util.show(lambd)) end
  return fill_from_uniform("exponential_", t, function(u) return (-u):log1p() / -lambd end)
end

-- t:cauchy_([median = 0], [sigma = 1]), t:log_normal_([mean = 1], [std = 2]),
-- t:geometric_(p): draws of those distributions (by inverting their
-- distribution functions at uniform draws; log_normal_ is exp of normal
-- draws), with torch's defaults and checks
function M.cauchy_(t, ...)
  local a = torch_args("cauchy_", {"median:number", "sigma:number"}, ...)
  local median, sigma = a.median or 0, a.sigma or 1
  if not (sigma > 0) then raise("cauchy_: expects sigma > 0.0, but found sigma=%s", util.show(sigma)) end
  return fill_from_uniform("cauchy_", t, function(u) return ((u - 0.5) * math.pi):tan() * sigma + median end)
end
function M.log_normal_(t, ...)
  local a = torch_args("log_normal_", {"mean:number", "std:number"}, ...)
  local mean, std = a.mean or 1, a.std or 2
  if not (std > 0) then raise("log_normal_: expects std > 0.0, but found std=%s", util.show(std)) end
  check_fillable("log_normal_", t)
  local z = accel.randn(t.shape, {dtype = accel.float64, device = t.device})
  return accel.no_grad(function() return t:copy_((z * std + mean):exp()) end)
end
function M.geometric_(t, p, ...)
  no_more("geometric_", 1, ...)
  if type(p) ~= "number" or not (p > 0 and p <= 1) then
    raise("geometric_: expects p to be in (0, 1], but got p=%s", util.show(p))
  end
  return fill_from_uniform("geometric_", t, function(u)
    if p == 1 then return accel.ones_like(u) end
    return ((-u):log1p() / math.log(1 - p)):ceil():clamp_min(1) -- (1 - u is in (0, 1])
  end)
end

-- t:random_([from = 0], to): integers drawn uniformly from [from, to)
function M.random_(t, from, to, ...)
  no_more("random_", 2, ...)
  if to == nil then from, to = 0, from end
  if type(to) ~= "number" then raise("random_: give the upper bound: t:random_([from], to)") end
  check_fillable("random_", t)
  local draws = accel.randint(from, to, t.shape, {dtype = t.dtype, device = t.device})
  return accel.no_grad(function() return t:copy_(draws) end)
end

-- probs (C) or (N, C) checked as torch's multinomial checks them
local function check_distribution(probs)
  if not accel.is_tensor(probs) or not probs.dtype.is_floating_point or probs:dim() < 1 or probs:dim() > 2 then
    raise("multinomial: prob_dist must be a 1 or 2 dim floating point tensor")
  end
  local bad = probs:lt(0):logical_or(probs:isfinite():logical_not()):any():item()
  if bad then raise("multinomial: probability tensor contains either `inf`, `nan` or element < 0") end
  if probs:sum(-1):le(0):any():item() then raise("multinomial: invalid multinomial distribution (sum of probabilities <= 0)") end
end

-- probs:multinomial(num_samples, [replacement = false]): int64 (N, k) or
-- (k) category ids (0-based) drawn from accel's generator with weights
-- probs (rows need not sum to 1). With replacement: the inverse of the
-- cumulative weights at uniform draws; without: the k largest of
-- log(p) + Gumbel noise (the Gumbel-top-k trick), each category once.
function M.multinomial(probs, num_samples, ...)
  local a = torch_args("multinomial", {"replacement:bool"}, ...)
  check_distribution(probs)
  local k, c = num_samples, probs:size(-1)
  if type(k) ~= "number" or k ~= math.floor(k) or k <= 0 then
    raise("multinomial: num_samples must be a positive integer, got %s", util.show(k))
  end
  local p = probs:dim() == 1 and probs:unsqueeze(1) or probs -- (N, C)
  local n, opts = p:size(1), {dtype = p.dtype, device = p.device}
  local ids
  if a.replacement then
    local cdf = p:cumsum(2)
    local u = accel.rand(n, k, opts) * cdf:narrow(2, c, 1) -- (N, k) in [0, total)
    ids = cdf:unsqueeze(2):le(u:unsqueeze(3)):sum(3):clamp(nil, c - 1) -- (N, k, C) -> (N, k)
  else
    if k > c then raise("multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement") end
    if p:gt(0):sum(2):lt(k):any():item() then
      raise("multinomial: invalid multinomial distribution (with replacement=False, not enough non-negative category to sample)")
    end
    local gumbel = -(-accel.rand(n, c, opts):clamp(1e-30, nil):log()):log()
    local _, top = (p:log() + gumbel):topk(k, 2)
    ids = top
  end
  return probs:dim() == 1 and ids:squeeze(1) or ids
end

-- ---- new tensors of t's dtype and device ----

-- options o (nil or a table) with dtype and device defaulting to t's
local function new_options(t, o)
  o = o == nil and {} or util.copy_plain(o)
  if o.dtype == nil then o.dtype = t.dtype end
  if o.device == nil then o.device = t.device end
  return o
end

-- the arguments of new_zeros(2, 3, {dtype =}) / new_zeros({2, 3}) for
-- accel.zeros: the sizes, then the options with t's dtype and device
local function new_args(t, ...)
  local n = select("#", ...)
  local args = {...}
  if n > 0 and util.is_options(args[n]) then n = n - 1 end
  args[n + 1] = new_options(t, args[n + 1])
  return args, n + 1
end

function M.new_zeros(t, ...) local a, n = new_args(t, ...) return accel.zeros(unpack(a, 1, n)) end
function M.new_ones(t, ...) local a, n = new_args(t, ...) return accel.ones(unpack(a, 1, n)) end
function M.new_empty(t, ...) local a, n = new_args(t, ...) return accel.empty(unpack(a, 1, n)) end
function M.new_full(t, size, value, o) return accel.full(size, value, new_options(t, o)) end
function M.new_tensor(t, data, o) return accel.tensor(data, new_options(t, o)) end

-- the products (dot, mv, tensordot, ...), the aliases (type_as, ravel, ...)
-- and the view scatters (select_scatter, ...)
for _, part in ipairs({"accel.tensor_products", "accel.tensor_aliases", "accel.tensor_view_scatter"}) do
  for name, f in pairs(require(part)) do M[name] = f end
end

-- The argument kinds of methods written here (and of the aliases) whose
-- bodies would otherwise fail inside on a wrong one, or drop what they do
-- not read: PyTorch's TypeError instead, at the user's line. EXACT: methods
-- that take nothing more (no options table either).
local EXACT = {
  argwhere = {}, conj = {}, resolve_conj = {}, resolve_neg = {}, positive = {}, deg2rad = {}, rad2deg = {}, erfinv = {},
  fliplr = {}, flipud = {}, frac = {}, is_complex = {}, is_signed = {}, isneginf = {}, isposinf = {}, sinc = {}, trace = {},
  clamp_max = {"max:number|tensor"}, clamp_max_ = {"max:number|tensor"}, clamp_min = {"min:number|tensor"},
  clamp_min_ = {"min:number|tensor"}, count_nonzero = {"dim:int|table?"}, cummax = {"dim:int"}, cummin = {"dim:int"},
  logcumsumexp = {"dim:int"}, logaddexp = {"other:tensor|number"}, swapaxes = {"axis0:int", "axis1:int"},
  swapdims = {"dim0:int", "dim1:int"}, movedim = {"source:int|table", "destination:int|table"},
  moveaxis = {"source:int|table", "destination:int|table"}, hsplit = {"sections:int|table"},
  vsplit = {"sections:int|table"}, take = {"index:tensor"}, put = {"index:tensor", "source:tensor", "accumulate:bool?"},
  put_ = {"index:tensor", "source:tensor", "accumulate:bool?"}, index_fill = {"dim:int", "index:tensor", "value:number|bool|tensor"},
  index_fill_ = {"dim:int", "index:tensor", "value:number|bool|tensor"}, index_copy = {"dim:int", "index:tensor", "source:tensor"},
  index_copy_ = {"dim:int", "index:tensor", "source:tensor"}, fmin = {"other:tensor"}, fmax = {"other:tensor"},
  hypot = {"other:tensor"}, xlogy = {"other:tensor|number"}, outer = {"vec2:tensor"}, logit = {"eps:number?"},
}
-- the leading arguments of methods that take more after them (options, checked by the method)
local LEADING = {
  take_along_dim = {"indices:tensor", "dim:int?"}, scatter = {"dim:int", "index:tensor", "src:tensor|number|bool"},
  scatter_ = {"dim:int", "index:tensor", "src:tensor|number|bool"}, cross = {"other:tensor", "dim:int?"},
  addmm = {"mat1:tensor", "mat2:tensor"}, baddbmm = {"batch1:tensor", "batch2:tensor"}, quantile = {"q:number|tensor"},
  nanquantile = {"q:number|tensor"},
  random_ = {"from:int?", "to:int?"}, new_tensor = {"data", "options:table?"}, roll = {"shifts:int|table", "dims:int|table?"},
}
for name, specs in pairs(EXACT) do M[name] = util.with_positional_checks(name, specs, M[name], true) end
for name, specs in pairs(LEADING) do M[name] = util.with_positional_checks(name, specs, M[name]) end

return M
