-- accel.tensor_methods: PyTorch tensor methods composed from the C ones
-- (sort / argsort / topk over _C.argsort_last; the rest from views,
-- index_select, cat, matmul and element-wise ops, so autograd comes with
-- them). Loaded into the tensor method table the first time a name the C
-- table does not have is looked up. Dims are 1-based (negative from the
-- end); keyword arguments go in a trailing options table, as everywhere.
local accel = require("accel")
local util = require("accel.util")
local compat = require("accel.compat")

local C = accel._C
local M = C.tensor_methods
local raise, torch_args = util.raise, util.torch_args
local unpack = compat.unpack

-- Arguments past the positional ones op takes are PyTorch's TypeError.
local function no_more(op, taken, ...)
  if select("#", ...) > 0 then raise("%s: takes %d argument%s, got more", op, taken, taken == 1 and "" or "s") end
end

-- dim d of t as a positive 1-based dim (a 0-d tensor takes 1 and -1).
local function positive_dim(op, t, d)
  local nd = math.max(t:dim(), 1)
  if type(d) ~= "number" or d ~= math.floor(d) then raise("%s: dim must be an integer, got %s", op, util.show(d)) end
  local p = d < 0 and nd + 1 + d or d
  if d == 0 or p < 1 or p > nd then
    raise("%s: dimension %d out of range (the tensor has %d dims; dims are 1-based, negative from the end)", op, d, nd)
  end
  return p
end

-- An integer list (a number alone is a list of one).
local function int_list(op, what, v)
  if type(v) == "number" then return {v} end
  if type(v) ~= "table" then raise("%s: %s must be an integer or a list of integers, got %s", op, what, type(v)) end
  return v
end

-- fn(t with dim d last) -> a tensor of that layout, put back in t's layout.
local function along_last(t, d, fn)
  if t:dim() == 0 then return fn(t:reshape({1})):reshape({}) end
  local nd = t:dim()
  if d == nd then return fn(t) end
  return fn(t:transpose(d, nd):contiguous()):transpose(d, nd)
end

-- ---- sort / argsort / topk ----

local function boolean_arg(op, name, v, default)
  if v == nil then return default end
  if type(v) ~= "boolean" then raise("%s: %s must be a boolean, got %s", op, name, util.show(v)) end
  return v
end

local function sorted_indices(op, t, dim, descending)
  local d = positive_dim(op, t, dim)
  return along_last(t, d, function(x) return C.argsort_last(x, descending) end), d
end

-- t:argsort([dim = -1], [descending = false], [{dim =, descending =, stable =}])
function M.argsort(t, ...)
  local a = torch_args("argsort", {"dim", "descending", "stable"}, ...)
  boolean_arg("argsort", "stable", a.stable, false) -- always stable
  return (sorted_indices("argsort", t, a.dim or -1, boolean_arg("argsort", "descending", a.descending, false)))
end

-- t:sort([dim = -1], [descending = false], [{...}]) -> values, indices
function M.sort(t, ...)
  local a = torch_args("sort", {"dim", "descending", "stable"}, ...)
  boolean_arg("sort", "stable", a.stable, false)
  if t:dim() == 0 then return t:clone(), accel.zeros({}, {dtype = accel.int64, device = t.device}) end
  local idx, d = sorted_indices("sort", t, a.dim or -1, boolean_arg("sort", "descending", a.descending, false))
  return t:gather(d, idx), idx
end

-- t:topk(k, [dim = -1], [largest = true], [sorted = true], [{...}]) ->
-- values, indices (always in sorted order)
function M.topk(t, k, ...)
  local a = torch_args("topk", {"dim", "largest", "sorted"}, ...)
  boolean_arg("topk", "sorted", a.sorted, true)
  local largest = boolean_arg("topk", "largest", a.largest, true)
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

-- cumulative sums along the last dim of x (..., n): blocks of up to B
-- summed by one matmul with an upper-triangular matrix of ones, then the
-- block totals' exclusive sums added (recursively, over n / B blocks).
local B = 512
local function cumsum_last(x)
  local n = x:size(-1)
  if n <= B then return x:matmul(accel.ones(n, n, {dtype = x.dtype, device = x.device}):triu()) end
  local nb = math.ceil(n / B)
  local lead = {}
  for i = 1, x:dim() - 1 do lead[i] = x:size(i) end
  local padded = x
  if nb * B > n then
    local zshape = {unpack(lead)}
    zshape[#zshape + 1] = nb * B - n
    padded = accel.cat({x, accel.zeros(zshape, {dtype = x.dtype, device = x.device})}, -1)
  end
  local blocks_shape = {unpack(lead)}
  blocks_shape[#blocks_shape + 1], blocks_shape[#blocks_shape + 2] = nb, B
  local within = cumsum_last(padded:reshape(blocks_shape)) -- (..., nb, B)
  local totals = within:select(-1, B) -- (..., nb)
  local before = cumsum_last(totals) - totals
  local flat_shape = {unpack(lead)}
  flat_shape[#flat_shape + 1] = nb * B
  return (within + before:unsqueeze(-1)):reshape(flat_shape):narrow(-1, 1, n)
end

-- t:cumsum(dim, [{dtype =}])
function M.cumsum(t, ...)
  local a = torch_args("cumsum", {"dim", "dtype"}, ...)
  if a.dim == nil then raise("cumsum: dim must be given (t:cumsum(dim))") end
  local d = positive_dim("cumsum", t, a.dim)
  local x = t:to(cumsum_dtype(t, a.dtype))
  return along_last(x, d, cumsum_last)
end

-- ---- reductions and element-wise compositions ----

-- t:logsumexp(dim, [keepdim = false]): log(sum(exp(t))) along dim (a list
-- too), computed from the maximum; an integer input gives float32.
function M.logsumexp(t, ...)
  local a = torch_args("logsumexp", {"dim", "keepdim"}, ...)
  if a.dim == nil then raise("logsumexp: dim must be given (t:logsumexp(dim))") end
  local keep = boolean_arg("logsumexp", "keepdim", a.keepdim, false)
  local x = t.dtype.is_floating_point and t or t:float()
  local m = x:amax(a.dim, true):detach()
  m = accel.where(m:isinf(), 0, m) -- a row of -inf (or inf) sums as is
  local s = (x - m):exp():sum(a.dim, keep):log()
  return s + (keep and m or m:sum(a.dim))
end

-- t:lerp(end, weight): t + weight * (end - t), in PyTorch's two forms (from
-- the nearer end) so the result matches it.
local function lerp(t, e, w)
  if type(w) ~= "number" and not accel.is_tensor(w) then
    raise("lerp: weight must be a number or a tensor, got %s", type(w))
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

-- t + value * t1 * t2 and t + value * t1 / t2
local function addc(op, t, t1, t2, ...)
  local value = torch_args(op, {"value"}, ...).value or 1
  local prod = op:sub(1, 7) == "addcmul" and t1 * t2 or t1 / t2
  return t + (value == 1 and prod or prod * value)
end
function M.addcmul(t, ...) return addc("addcmul", t, ...) end
function M.addcdiv(t, ...) return addc("addcdiv", t, ...) end
function M.addcmul_(t, ...) return t:copy_(addc("addcmul_", t, ...)) end
function M.addcdiv_(t, ...) return t:copy_(addc("addcdiv_", t, ...)) end

function M.clamp_min(t, v) return t:clamp(v, nil) end
function M.clamp_max(t, v) return t:clamp(nil, v) end
function M.clamp_min_(t, v) return t:clamp_(v, nil) end
function M.clamp_max_(t, v) return t:clamp_(nil, v) end

-- log(exp(t) + exp(u)), from the larger one
function M.logaddexp(t, u)
  local m = t:maximum(u)
  return m + (-(t - u):abs()):exp():log1p()
end

-- t:outer(v) of 1-D t (n) and v (m): (n, m)
function M.outer(t, v)
  if t:dim() ~= 1 or v:dim() ~= 1 then
    raise("outer: expected 1-D tensors, got %d-D and %d-D", t:dim(), v:dim())
  end
  return t:unsqueeze(2) * v:unsqueeze(1)
end

-- |t - u| <= atol + rtol * |u| (NaNs equal with equal_nan = true)
function M.isclose(t, u, ...)
  local a = torch_args("isclose", {"rtol", "atol", "equal_nan"}, ...)
  local rtol, atol = a.rtol or 1e-5, a.atol or 1e-8
  if rtol < 0 or atol < 0 then raise("isclose: rtol (%s) and atol (%s) must be non-negative", rtol, atol) end
  if not accel.is_tensor(u) then u = accel.full({}, u, {dtype = t.dtype, device = t.device}) end
  local near = (t - u):abs():le(u:abs() * rtol + atol):logical_or(t:eq(u)) -- t:eq(u): equal infinities
  if a.equal_nan then near = near:logical_or(t:isnan():logical_and(u:isnan())) end
  return near
end

-- NaN, inf and -inf replaced (by 0 and the dtype's largest / lowest finite
-- values unless given)
local FINITE_MAX = {float32 = 3.4028234663852886e38, float64 = 1.7976931348623157e308, bfloat16 = 3.3895313892515355e38,
                    float16 = 65504, float8_e4m3fn = 448, float8_e5m2 = 57344}
function M.nan_to_num(t, ...)
  local a = torch_args("nan_to_num", {"nan", "posinf", "neginf"}, ...)
  if not t.dtype.is_floating_point then return t:clone() end
  local big = FINITE_MAX[t.dtype.name]
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
  local r = t
  for _, d in ipairs(int_list("flip", "dims", dims)) do
    d = positive_dim("flip", t, d)
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
-- (dim1, dim2) planes as a new last dim (a copy, not a view as torch's);
-- offset > 0 above the main diagonal, < 0 below
function M.diagonal(t, ...)
  local a = torch_args("diagonal", {"offset", "dim1", "dim2"}, ...)
  local off = a.offset or 0
  local d1, d2 = positive_dim("diagonal", t, a.dim1 or 1), positive_dim("diagonal", t, a.dim2 or 2)
  if d1 == d2 then raise("diagonal: dimensions cannot be identical %d, %d", d1, d2) end
  local x = t:movedim({d1, d2}, {-2, -1})
  local r, c = x:size(-2), x:size(-1)
  local n = math.max(0, math.min(r - math.max(0, -off), c - math.max(0, off)))
  local flat = {}
  for i = 1, x:dim() - 2 do flat[i] = x:size(i) end
  flat[#flat + 1] = r * c
  local pos = accel.arange(n, {device = t.device}):mul(c + 1):add(math.max(0, -off) * c + math.max(0, off))
  return x:reshape(flat):index_select(-1, pos)
end

-- t:diag([diagonal = 0]): of a 1-D t the square matrix with t on that
-- diagonal; of a 2-D t, its diagonal
function M.diag(t, k, ...)
  no_more("diag", 1, ...)
  k = k or 0
  if t:dim() == 2 then return M.diagonal(t, k) end
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
  local as_tuple = torch_args("nonzero", {"as_tuple"}, ...).as_tuple
  local pos, nd = nonzero_positions(t), t:dim()
  local sizes = {}
  for d = 1, nd do sizes[d] = t:size(d) end
  local cols = {}
  for d = 1, math.max(nd, 1) do cols[d] = {} end
  for i, p in ipairs(pos) do
    for d = nd, 1, -1 do
      cols[d][i] = p % sizes[d]
      p = (p - cols[d][i]) / sizes[d]
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
  if accel.is_grad_enabled() and t.requires_grad and t.is_leaf then
    local sizes = {}
    for d = 1, t:dim() do sizes[d] = t:size(d) end
    raise("%s: a leaf tensor that requires grad (shape [%s]) cannot be modified in place; use accel.no_grad or "
      .. "nn.init.%s", op, table.concat(sizes, ", "), op)
  end
end

-- t:normal_([mean = 0], [std = 1]) and t:uniform_([from = 0], [to = 1]):
-- the draws of nn.init.normal_ / uniform_ (as torch's, whose init functions
-- call these methods)
function M.normal_(t, ...)
  local a = torch_args("normal_", {"mean", "std"}, ...)
  check_fillable("normal_", t)
  return require("accel.nn.initializers").normal_(t, a.mean or 0, a.std or 1)
end
function M.uniform_(t, ...)
  local a = torch_args("uniform_", {"from", "to"}, ...)
  check_fillable("uniform_", t)
  return require("accel.nn.initializers").uniform_(t, a.from or 0, a.to or 1)
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
  local a = torch_args("multinomial", {"replacement"}, ...)
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

return M
