-- accel.tensor_functions: torch functions that are not tensor methods,
-- composed from views, cat and element-wise ops (autograd comes with them):
-- meshgrid, broadcast_tensors, cartesian_prod, atleast_1d/2d/3d, hstack,
-- vstack, dstack, column_stack, block_diag, tril_indices, triu_indices,
-- logspace, cdist, bucketize, isin, var_mean, std_mean, finfo, iinfo,
-- concatenate, as_tensor, randint_like, diagflat, get_default_dtype,
-- set_num_threads / get_num_threads, normal, scalar_tensor, unravel_index,
-- set_float32_matmul_precision / get_float32_matmul_precision. accel.X looks a name up here after the tensor methods.
-- What torch returns as a tuple as long as its inputs comes back as a Lua
-- list; fixed pairs as two values; index tensors hold 0-based values.
local accel = require("accel")
local util = require("accel.util")
local compat = require("accel.compat")

local raise, torch_args = util.raise, util.torch_args
local unpack = compat.unpack
local T = {}

-- the tensors of f(t1, t2, ...) or f({t1, t2, ...}), and a trailing options table
local function tensor_list(op, ...)
  local args, n = {...}, select("#", ...)
  local o
  if n > 0 and util.is_options(args[n]) then o, n = args[n], n - 1 end
  local list = args
  if n == 1 and type(args[1]) == "table" and not accel.is_tensor(args[1]) then list, n = args[1], #args[1] end
  local out = {}
  for i = 1, n do
    if not accel.is_tensor(list[i]) then raise("%s: argument %d must be a tensor, got %s", op, i, util.show(list[i])) end
    out[i] = list[i]
  end
  return out, o
end

-- accel.meshgrid(t1, t2, ..., [{indexing = "ij"}]): a list of N grids of
-- shape (n1, n2, ...) (with indexing = "xy" the first two dims swapped);
-- expanded views of the 0-D or 1-D inputs
function T.meshgrid(...)
  local ts, o = tensor_list("meshgrid", ...)
  o = util.check_options("meshgrid", o, {"indexing"})
  local indexing = o.indexing or "ij"
  if indexing ~= "ij" and indexing ~= "xy" then
    raise('meshgrid: indexing must be "ij" or "xy", got %s', util.show(indexing))
  end
  if #ts == 0 then raise("meshgrid: expects at least one tensor") end
  local swap = indexing == "xy" and #ts >= 2
  if swap then ts[1], ts[2] = ts[2], ts[1] end
  local shape = {}
  for i, t in ipairs(ts) do
    if t:dim() > 1 then raise("meshgrid: expects 0-D or 1-D tensors, argument %d is %d-D", i, t:dim()) end
    if t.dtype ~= ts[1].dtype or t.device ~= ts[1].device then
      raise("meshgrid: expects all tensors to have the same dtype and device, argument %d has %s on %s",
        i, t.dtype.name, tostring(t.device))
    end
    shape[i] = t:numel()
  end
  local grids = {}
  for i, t in ipairs(ts) do
    local view = {}
    for j = 1, #ts do view[j] = j == i and -1 or 1 end
    grids[i] = t:reshape(view):expand(shape)
  end
  if swap then grids[1], grids[2] = grids[2], grids[1] end
  return grids
end

-- the broadcast shape of the size lists (PyTorch's rules), or an error naming both sizes
local function broadcast_shape(op, shapes)
  local nd = 0
  for _, sizes in ipairs(shapes) do nd = math.max(nd, #sizes) end
  local shape = {}
  for d = 1, nd do shape[d] = 1 end
  for _, sizes in ipairs(shapes) do
    for d = 1, #sizes do
      local at, s = nd - #sizes + d, sizes[d]
      if s ~= 1 then
        if shape[at] ~= 1 and shape[at] ~= s then
          raise("%s: shapes cannot be broadcast together (size %d against %d in dim %d)", op, shape[at], s, at)
        end
        shape[at] = s
      end
    end
  end
  return shape
end

-- accel.broadcast_tensors(t1, t2, ...): a list of the tensors expanded to one shape
function T.broadcast_tensors(...)
  local ts = tensor_list("broadcast_tensors", ...)
  local shapes = {}
  for i, t in ipairs(ts) do shapes[i] = util.sizes_of(t) end
  local shape = broadcast_shape("broadcast_tensors", shapes)
  local out = {}
  for i, t in ipairs(ts) do out[i] = t:expand(shape) end
  return out
end

-- accel.broadcast_shapes(s1, s2, ...): the broadcast shape of the sizes (lists or numbers), a list
function T.broadcast_shapes(...)
  local shapes = {}
  for i = 1, select("#", ...) do
    local s = select(i, ...)
    if type(s) == "number" then s = {s} end
    if type(s) ~= "table" then raise("broadcast_shapes: argument %d must be a shape, got %s", i, util.show(s)) end
    shapes[i] = s
  end
  return broadcast_shape("broadcast_shapes", shapes)
end

-- accel.cartesian_prod(t1, t2, ...): (n1 * n2 * ..., N), every combination in order
function T.cartesian_prod(...)
  local ts = tensor_list("cartesian_prod", ...)
  for i, t in ipairs(ts) do
    if t:dim() ~= 1 then raise("cartesian_prod: expects 1-D tensors, argument %d is %d-D", i, t:dim()) end
  end
  if #ts == 1 then return ts[1] end
  local cols = {}
  for i, g in ipairs(T.meshgrid(ts)) do cols[i] = g:reshape({-1}) end
  return accel.stack(cols, 2)
end

local ATLEAST = {
  [1] = function(t) return t:dim() == 0 and t:reshape({1}) or t end,
  [2] = function(t) return t:dim() == 0 and t:reshape({1, 1}) or t:dim() == 1 and t:unsqueeze(1) or t end,
  [3] = function(t)
    if t:dim() == 0 then return t:reshape({1, 1, 1}) end
    if t:dim() == 1 then return t:reshape({1, -1, 1}) end
    return t:dim() == 2 and t:unsqueeze(3) or t
  end,
}

-- accel.atleast_Nd(t): t with leading (and for 3-D, trailing) size-1 dims
-- added up to N dims; of several tensors (or one list): a list
local function atleast(n)
  local op = "atleast_" .. n .. "d"
  return function(...)
    local one = select("#", ...) == 1 and accel.is_tensor((...))
    local ts = tensor_list(op, ...)
    if one then return ATLEAST[n](ts[1]) end
    local out = {}
    for i, t in ipairs(ts) do out[i] = ATLEAST[n](t) end
    return out
  end
end
T.atleast_1d, T.atleast_2d, T.atleast_3d = atleast(1), atleast(2), atleast(3)

local function cat_of(op, tensors, n, dim)
  local ts = tensor_list(op, tensors)
  if #ts == 0 then raise("%s: expects a non-empty list of tensors", op) end
  for i, t in ipairs(ts) do ts[i] = ATLEAST[n](t) end
  return accel.cat(ts, dim(ts))
end

-- accel.hstack({...}): cat along dim 2 (dim 1 for 1-D tensors)
function T.hstack(tensors) return cat_of("hstack", tensors, 1, function(ts) return ts[1]:dim() == 1 and 1 or 2 end) end
-- accel.vstack({...}) (alias row_stack): cat along dim 1 of the tensors made at least 2-D
function T.vstack(tensors) return cat_of("vstack", tensors, 2, function() return 1 end) end
T.row_stack = T.vstack
-- accel.dstack({...}): cat along dim 3 of the tensors made at least 3-D
function T.dstack(tensors) return cat_of("dstack", tensors, 3, function() return 3 end) end

-- accel.column_stack({...}): 0-D and 1-D tensors as columns, then hstack
function T.column_stack(tensors)
  local ts = tensor_list("column_stack", tensors)
  if #ts == 0 then raise("column_stack: expects a non-empty list of tensors") end
  for i, t in ipairs(ts) do
    if t:dim() <= 1 then ts[i] = t:reshape({-1, 1}) end
  end
  return accel.cat(ts, 2)
end

-- accel.block_diag(t1, t2, ...): the 0-D, 1-D or 2-D blocks on the
-- diagonal of a matrix of zeros (one dtype for all, as torch promotes)
function T.block_diag(...)
  local ts = tensor_list("block_diag", ...)
  local cols, dtype = 0, nil
  for i, t in ipairs(ts) do
    if t:dim() > 2 then raise("block_diag: expects tensors of at most 2 dims, argument %d is %d-D", i, t:dim()) end
    ts[i] = ATLEAST[2](t)
    cols = cols + ts[i]:size(2)
    dtype = dtype and (accel.zeros({}, {dtype = dtype}) + accel.zeros({}, {dtype = t.dtype})).dtype or t.dtype
  end
  if #ts == 0 then return accel.empty({1, 0}) end
  local rows, before = {}, 0
  for i, t in ipairs(ts) do
    local r, c = t:size(1), t:size(2)
    local opts = {dtype = dtype, device = t.device}
    rows[i] = accel.cat({accel.zeros({r, before}, opts), t:to(dtype), accel.zeros({r, cols - before - c}, opts)}, 2)
    before = before + c
  end
  return accel.cat(rows, 1)
end

-- the 0-based (row, col) positions of a (row, col) matrix's entries with
-- col - row <= offset (lower) or >= offset (upper), in row-major order:
-- a (2, N) tensor
local function triangle_indices(op, lower, row, col, ...)
  local a = torch_args(op, {"offset:int", "dtype", "device"}, ...)
  for _, v in ipairs({row, col}) do
    if type(v) ~= "number" or v < 0 or v ~= math.floor(v) then raise("%s: row and col must be non-negative integers, got %s", op, util.show(v)) end
  end
  local offset, rs, cs = a.offset or 0, {}, {}
  for r = 0, row - 1 do
    for c = 0, col - 1 do
      if (lower and c - r <= offset) or (not lower and c - r >= offset) then rs[#rs + 1], cs[#cs + 1] = r, c end
    end
  end
  local opts = {dtype = a.dtype or accel.int64, device = a.device}
  if #rs == 0 then return accel.zeros({2, 0}, opts) end
  return accel.tensor({rs, cs}, opts)
end

-- accel.tril_indices(row, col, [offset = 0], [{dtype =, device =}])
function T.tril_indices(row, col, ...) return triangle_indices("tril_indices", true, row, col, ...) end
-- accel.triu_indices(row, col, [offset = 0], [{dtype =, device =}])
function T.triu_indices(row, col, ...) return triangle_indices("triu_indices", false, row, col, ...) end

-- An integer logspace's ends converted to dtype first, as torch's (and
-- integer linspace's): truncated, a whole negative wrapping in uint8, an
-- end the dtype cannot hold an error. The powers between stay fractional:
-- logspace(0.5, 2.5, 5) in int64 is 10^{0, 0.5, 1, 1.5, 2} = {1, 3, 10, 31, 100}.
local function int_logspace_ends(start, stop, dtype)
  local ok, ends = pcall(accel.linspace, start, stop, 2, {dtype = dtype}) -- [2]: exactly the converted ends
  if not ok then raise("logspace: %s", (util.strip_position(ends):gsub("^linspace: ", ""))) end
  return ends[1]:item(), ends[2]:item()
end

-- accel.logspace(start, end, steps, [base = 10], [{dtype =, device =, requires_grad =}])
function T.logspace(start, stop, steps, ...)
  local a = torch_args("logspace", {"base:number", "dtype", "device", "requires_grad:bool"}, ...)
  local dtype = a.dtype or accel.float32
  if not dtype.is_floating_point and steps ~= 1 then start, stop = int_logspace_ends(start, stop, dtype) end
  local exps = accel.linspace(start, stop, steps, {dtype = accel.float64})
  local out = accel.pow(a.base or 10, exps):to({dtype = dtype, device = a.device})
  if a.requires_grad then out:requires_grad_() end
  return out
end

-- the p = inf distances of diff (..., P, R, M) -> (..., P, R), with torch's
-- cdist gradient: each coordinate at the maximum gets the whole g sign(diff),
-- where norm's shares it among them: g sign(d) (1 - min(1, ceil(||d| - dist|)))
-- (NaN in a row whose distance is NaN)
local max_distance -- the autograd.Function, made on first use
local function inf_distance(diff)
  max_distance = max_distance or require("accel.autograd").Function{
    name = "cdist",
    forward = function(ctx, d)
      ctx:save_for_backward(d)
      return d:norm("inf", -1)
    end,
    backward = function(ctx, g)
      local d = ctx.saved_tensors[1]
      local dist = d:norm("inf", -1, {keepdim = true}) -- (..., P, R, 1)
      local at_max = 1 - (d:abs() - dist):abs():ceil():clamp_max(1)
      return g:unsqueeze(-1) * d:sign() * at_max
    end,
  }
  return max_distance(diff)
end

-- accel.cdist(x1, x2, [p = 2]): (..., P, M) and (..., R, M) -> (..., P, R), the p-norm distances
function T.cdist(x1, x2, ...)
  local a = torch_args("cdist", {"p:number", "compute_mode:string"}, ...)
  if not accel.is_tensor(x1) or not accel.is_tensor(x2) then raise("cdist: expected two tensors") end
  if x1:dim() < 2 or x2:dim() < 2 then
    raise("cdist: x1 and x2 must have at least 2 dims, got %d-D and %d-D", x1:dim(), x2:dim())
  end
  if x1:size(-1) ~= x2:size(-1) then
    raise("cdist: x1 and x2 must have the same number of columns, got %d and %d", x1:size(-1), x2:size(-1))
  end
  local p = a.p or 2
  if p < 0 then raise("cdist: p must be non-negative, got %s", p) end
  local amp = require("accel.amp") -- on torch's autocast float32 list (CPU): half inputs widened
  x1, x2 = amp.fp32_input(x1), amp.fp32_input(x2)
  local diff = x1:unsqueeze(-2) - x2:unsqueeze(-3) -- (..., P, R, M)
  if p == math.huge then return inf_distance(diff) end
  return diff:norm(p, -1)
end

-- accel.bucketize(input, boundaries, [{right = false, out_int32 = false}]):
-- the index of the bucket of each value (searchsorted of the boundaries)
function T.bucketize(input, boundaries, ...)
  local a = torch_args("bucketize", {"out_int32:bool", "right:bool"}, ...)
  if not accel.is_tensor(boundaries) or boundaries:dim() ~= 1 then
    raise("bucketize: boundaries must be a 1-D tensor, got %s", util.show(boundaries))
  end
  local scalar = type(input) == "number"
  if scalar then input = accel.tensor({input}, {dtype = boundaries.dtype}) end
  local r = boundaries:searchsorted(input, {right = a.right == true})
  if scalar then r = r:reshape({}) end
  return a.out_int32 and r:int() or r
end

-- accel.isin(elements, test_elements, [{assume_unique =, invert = false}]): bool, elements' shape
-- (by sorting the test elements: O((n + m) log m) time, O(n + m) memory)
function T.isin(elements, test_elements, ...)
  local a = torch_args("isin", {"assume_unique:bool", "invert:bool"}, ...)
  if not accel.is_tensor(elements) and not accel.is_tensor(test_elements) then
    raise("isin: elements or test_elements must be a tensor")
  end
  local scalar = not accel.is_tensor(elements)
  if scalar then elements = accel.tensor(elements) end
  if not accel.is_tensor(test_elements) then test_elements = accel.tensor({test_elements}) end
  if elements.dtype ~= test_elements.dtype then -- compared in one dtype that holds both
    elements, test_elements = elements:double(), test_elements:double()
  end
  -- each element's place among the sorted test elements: found where the value there equals it
  local sorted = (test_elements:reshape({-1}):sort())
  local found
  if sorted:numel() == 0 then
    found = accel.zeros(util.sizes_of(elements), {dtype = accel.bool, device = elements.device})
  else
    local at = sorted:searchsorted(elements:reshape({-1})):clamp(nil, sorted:numel() - 1)
    found = sorted:index_select(1, at):eq(elements:reshape({-1})):reshape(util.sizes_of(elements))
  end
  return a.invert and found:logical_not() or found
end

-- the dim and keepdim of var / std arguments (dim, unbiased, keepdim, {...})
local function moment_dims(...)
  local args, n = {...}, select("#", ...)
  local o = n > 0 and util.is_options(args[n]) and args[n] or {}
  local dim = args[1]
  if type(dim) == "boolean" or util.is_options(dim) then dim = nil end
  local keepdim = args[3]
  if type(keepdim) ~= "boolean" then keepdim = o.keepdim end
  if dim == nil then dim = o.dim end
  return dim, keepdim == true
end

local function with_mean(op, stat)
  return function(t, ...)
    if not accel.is_tensor(t) then raise("%s: expected a tensor, got %s", op, util.show(t)) end
    local s = t[stat](t, ...)
    local dim, keepdim = moment_dims(...)
    return s, t:mean(dim, keepdim)
  end
end

-- accel.var_mean(t, [dim], [unbiased], [keepdim], [{correction =, keepdim =}]) -> var, mean
T.var_mean = with_mean("var_mean", "var")
-- accel.std_mean(...) -> std, mean
T.std_mean = with_mean("std_mean", "std")

-- The limits of the floating point dtypes, torch.finfo's fields.
local FINFO = {
  float32 = {bits = 32, eps = 1.1920928955078125e-07, max = 3.4028234663852886e+38,
             tiny = 1.1754943508222875e-38, resolution = 1e-06},
  float64 = {bits = 64, eps = 2.220446049250313e-16, max = 1.7976931348623157e+308,
             tiny = 2.2250738585072014e-308, resolution = 1e-15},
  bfloat16 = {bits = 16, eps = 0.0078125, max = 3.3895313892515355e+38, tiny = 1.1754943508222875e-38, resolution = 0.01},
  float16 = {bits = 16, eps = 0.0009765625, max = 65504.0, tiny = 6.103515625e-05, resolution = 0.001},
  float8_e4m3fn = {bits = 8, eps = 0.125, max = 448.0, tiny = 0.015625, resolution = 1.0},
  float8_e5m2 = {bits = 8, eps = 0.25, max = 57344.0, tiny = 6.103515625e-05, resolution = 1.0},
}
local IINFO = {
  int64 = {bits = 64, min = math.mininteger or -2 ^ 63, max = math.maxinteger or 2 ^ 63}, -- (LuaJIT: as floats)
  int32 = {bits = 32, min = -2147483648, max = 2147483647},
  uint8 = {bits = 8, min = 0, max = 255},
}

local function dtype_arg(op, dtype)
  if type(dtype) ~= "table" or type(dtype.name) ~= "string" then
    raise("%s: expected a dtype (accel.float32, ...), got %s", op, util.show(dtype))
  end
  return dtype
end

-- accel.finfo([dtype = float32]): {bits, eps, max, min, tiny, smallest_normal, resolution, dtype}
function T.finfo(dtype)
  dtype = dtype_arg("finfo", dtype == nil and accel.float32 or dtype)
  local f = FINFO[dtype.name]
  if not f then raise("finfo: %s is not a floating point dtype (accel.iinfo takes the integer ones)", dtype.name) end
  return {bits = f.bits, eps = f.eps, max = f.max, min = -f.max, tiny = f.tiny, smallest_normal = f.tiny,
          resolution = f.resolution, dtype = dtype.name}
end

-- accel.iinfo(dtype): {bits, min, max, dtype} of an integer dtype
function T.iinfo(dtype)
  dtype = dtype_arg("iinfo", dtype)
  local f = IINFO[dtype.name]
  if not f then raise("iinfo: %s is not an integer dtype (accel.finfo takes the floating point ones)", dtype.name) end
  return {bits = f.bits, min = f.min, max = f.max, dtype = dtype.name}
end

-- accel.concatenate(tensors, [dim]): accel.cat
function T.concatenate(...) return accel.cat(...) end

-- accel.as_tensor(data, [{dtype =, device =}]): a tensor as it is when it
-- already has that dtype and device (else converted), or a new one from Lua data
function T.as_tensor(data, ...)
  local o = torch_args("as_tensor", {"dtype", "device"}, ...)
  if accel.is_tensor(data) then return data:to({dtype = o.dtype or data.dtype, device = o.device or data.device}) end
  return accel.tensor(data, {dtype = o.dtype, device = o.device})
end

-- accel.randint_like(t, [low = 0], high, [{dtype =, device =}]): random integers of t's shape, dtype and device
function T.randint_like(t, low, high, o)
  if not accel.is_tensor(t) then raise("randint_like: expected a tensor, got %s", util.show(t)) end
  if high == nil or type(high) == "table" then low, high, o = 0, low, high end
  o = util.check_options("randint_like", o, {"dtype", "device"})
  return accel.randint(low, high, util.sizes_of(t), {dtype = o.dtype or t.dtype, device = o.device or t.device})
end

-- accel.diagflat(t, [offset = 0]): the matrix with t's elements on that diagonal
function T.diagflat(t, offset)
  if not accel.is_tensor(t) then raise("diagflat: expected a tensor, got %s", util.show(t)) end
  return t:reshape({-1}):diag(offset or 0)
end

-- accel.get_default_dtype(): the dtype of tensors made from Lua numbers
function T.get_default_dtype() return accel.float32 end

-- torch's names of accel.num_threads: set_num_threads(n) (a positive
-- integer, capped to the cores), get_num_threads()
function T.set_num_threads(n, ...)
  util.no_more("set_num_threads", 1, ...)
  accel.num_threads(n)
end
function T.get_num_threads(...)
  util.no_more("get_num_threads", 0, ...)
  return accel.num_threads()
end

-- accel.scalar_tensor(v, [{dtype =, device =}]): a 0-D tensor (float32 unless dtype says)
function T.scalar_tensor(v, o, ...)
  util.no_more("scalar_tensor", 2, ...)
  if type(v) ~= "number" and type(v) ~= "boolean" then raise("scalar_tensor: expected a number, got %s", util.show(v)) end
  o = util.check_options("scalar_tensor", o, {"dtype", "device", "requires_grad"})
  return accel.tensor(v, {dtype = o.dtype or accel.get_default_dtype(), device = o.device, requires_grad = o.requires_grad})
end

-- accel.unravel_index(indices, shape): the 0-based coordinates in shape of
-- flat 0-based indices (an integer tensor or number), one int64 tensor per
-- dim (multiple returns); as torch, indices are taken modulo the shape's
-- size (floor division, so -1 is the last element)
function T.unravel_index(indices, shape, ...)
  util.no_more("unravel_index", 2, ...)
  if type(indices) == "number" then indices = accel.tensor(indices, {dtype = accel.int64}) end
  if not accel.is_tensor(indices) or indices.dtype.is_floating_point or indices.dtype == accel.bool then
    raise("unravel_index: expected 'indices' to be integer dtype, got %s",
      accel.is_tensor(indices) and indices.dtype.name or util.show(indices))
  end
  if type(shape) == "number" then shape = {shape} end
  if type(shape) ~= "table" then raise("unravel_index: shape must be a list of sizes, got %s", util.show(shape)) end
  local rest, coords = indices:to(accel.int64), {}
  for d = #shape, 1, -1 do
    local n = shape[d]
    if type(n) ~= "number" or n < 0 or n ~= math.floor(n) then
      raise("unravel_index: 'shape' cannot have negative values, got %s", util.show(n))
    end
    coords[d] = rest:remainder(n)
    rest = rest:div(n, {rounding_mode = "floor"})
  end
  return compat.unpack(coords, 1, #shape)
end

-- accel.set_float32_matmul_precision(p) / get_float32_matmul_precision():
-- torch's setting, kept and reported. It permits lower-precision internal
-- arithmetic; float32 products here always run in float32, which each of
-- the three settings allows.
local matmul_precision = "highest"
function T.set_float32_matmul_precision(p, ...)
  util.no_more("set_float32_matmul_precision", 1, ...)
  if p ~= "highest" and p ~= "high" and p ~= "medium" then
    raise("set_float32_matmul_precision: %s is not one of 'highest', 'high', or 'medium'", util.show(p))
  end
  matmul_precision = p
end
function T.get_float32_matmul_precision() return matmul_precision end

-- accel.normal(mean, std, [size], [{dtype =, device =}]): samples of
-- N(mean, std); mean and std numbers or tensors (broadcast together; a
-- tensor gives the dtype and device), or both numbers and a size. No
-- gradient flows back (torch's gradient is zero for both).
function T.normal(mean, std, ...)
  if std == nil then std = 1 end
  local tensors = accel.is_tensor(mean) or accel.is_tensor(std)
  local size, o = ...
  if util.is_options(size) and not tensors then o, size = size, nil end
  o = util.check_options("normal", o, {"dtype", "device", "generator"})
  if o.generator ~= nil then raise("normal: generator is not supported (seed with accel.manual_seed)") end
  local noise
  if tensors then
    if size ~= nil then raise("normal: size is only taken when mean and std are both numbers") end
    local like = accel.is_tensor(mean) and mean or std
    local shape = accel.broadcast_shapes(accel.is_tensor(mean) and mean.shape or {}, accel.is_tensor(std) and std.shape or {})
    if accel.is_tensor(std) and std:lt(0):any():item() or (not accel.is_tensor(std) and std < 0) then
      raise("normal: expects all elements of std >= 0.0")
    end
    noise = accel.randn(shape, {dtype = like.dtype, device = like.device})
  else
    if type(mean) ~= "number" or type(std) ~= "number" then
      raise("normal: mean and std must be numbers or tensors, got %s and %s", util.show(mean), util.show(std))
    end
    if std < 0 then raise("normal: expects std >= 0.0, but found std %s", util.show(std)) end
    if size == nil then raise("normal: with a number mean and std, give the size (normal(mean, std, {2, 3}))") end
    noise = accel.randn(size, {dtype = o.dtype, device = o.device})
  end
  local detach = function(v) return accel.is_tensor(v) and v:detach() or v end
  return noise * detach(std) + detach(mean)
end

return T
