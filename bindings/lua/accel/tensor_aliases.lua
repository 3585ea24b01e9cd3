-- accel.tensor_aliases: PyTorch tensor methods that are another method
-- under a second name, or a short composition of existing ones (autograd
-- comes with them): type_as, unflatten, ger, ravel, sgn, absolute, positive,
-- conj, resolve_conj, is_complex, is_signed, exp2, float_power, signbit,
-- heaviside, msort, nansum, nanmean, nancumsum, isposinf, isneginf, the
-- in-place comparisons (ge_, ...) and the comparisons' long names (greater,
-- less_equal, ...), the in-place forms of unary and binary ops (cumsum_,
-- xlogy_, ...) and their second names (divide_, fix, ...), adjoint,
-- is_same_size, is_nonzero, get_device, split_with_sizes, narrow_copy,
-- diagflat, logaddexp2, dist, sum_to_size, angle, hardshrink, prelu, mvlgamma,
-- unsafe_chunk / unsafe_split, is_inference, float_power_. Tensors are real here, so the complex
-- ones (conj, sgn, ...) are their real meaning. Returns the methods, merged
-- into the tensor method table by accel.tensor_methods.
local accel = require("accel")
local util = require("accel.util")

local raise, no_more = util.raise, util.no_more
local A = {}

local function identity(t) return t end

-- t:type_as(other): t in other's dtype and device (t itself when they match)
function A.type_as(t, other, ...)
  no_more("type_as", 1, ...)
  if not accel.is_tensor(other) then raise("type_as: expected a tensor, got %s", util.show(other)) end
  return t:to({dtype = other.dtype, device = other.device})
end

-- t:unflatten(dim, sizes): dim split into the dims of sizes (one -1 inferred)
function A.unflatten(t, dim, sizes, ...)
  no_more("unflatten", 2, ...)
  if type(sizes) ~= "table" or #sizes == 0 then
    raise("unflatten: sizes must be a non-empty list of sizes, got %s", util.show(sizes))
  end
  local nd = t:dim()
  if type(dim) ~= "number" or dim ~= math.floor(dim) or dim == 0 or dim > nd or dim < -nd then
    raise("unflatten: dim %s out of range for a %d-D tensor (dims are 1-based, negative from the end)", util.show(dim), nd)
  end
  local d = dim < 0 and nd + 1 + dim or dim
  local known, free = 1, nil
  for i, s in ipairs(sizes) do
    if s == -1 then
      if free then raise("unflatten: only one size can be -1, got %s", util.show(sizes)) end
      free = i
    else
      known = known * s
    end
  end
  local n = t:size(d)
  if (free and (known == 0 or n % known ~= 0)) or (not free and known ~= n) then
    raise("unflatten: sizes %s do not multiply up to the size of dim %d (%d)", util.show(sizes), dim, n)
  end
  local shape = {}
  for i = 1, d - 1 do shape[#shape + 1] = t:size(i) end
  for i, s in ipairs(sizes) do shape[#shape + 1] = i == free and math.floor(n / known) or s end
  for i = d + 1, nd do shape[#shape + 1] = t:size(i) end
  return t:view(shape)
end

-- t:ger(v): the old name of t:outer(v)
function A.ger(t, v, ...) no_more("ger", 1, ...) return t:outer(v) end

-- t:ravel(): t flattened to 1-D (a view when t is contiguous)
function A.ravel(t, ...)
  no_more("ravel", 0, ...)
  return t:reshape({-1})
end

function A.sgn(t, ...) no_more("sgn", 0, ...) return t:sign() end
function A.absolute(t, ...) no_more("absolute", 0, ...) return t:abs() end
function A.absolute_(t, ...) no_more("absolute_", 0, ...) return t:abs_() end
A.positive, A.conj, A.resolve_conj, A.resolve_neg = identity, identity, identity, identity
function A.is_complex() return false end
function A.is_signed(t) return t.dtype ~= accel.uint8 and t.dtype ~= accel.bool end

-- 2 ^ t (integers give float32)
function A.exp2(t, ...)
  no_more("exp2", 0, ...)
  return accel.pow(2, t.dtype.is_floating_point and t or t:float())
end

-- t ^ exponent in float64
function A.float_power(t, exponent, ...)
  no_more("float_power", 1, ...)
  if accel.is_tensor(exponent) then exponent = exponent:double() end
  return t:double():pow(exponent)
end

-- true where the sign bit is set: negative numbers and -0.0 (a NaN reads
-- false whatever its sign bit: it cannot be told apart here)
function A.signbit(t, ...)
  no_more("signbit", 0, ...)
  if not t.dtype.is_floating_point then return t:lt(0) end
  return t:lt(0):logical_or(t:eq(0):logical_and(t:reciprocal():lt(0)))
end

-- t:heaviside(values): 0 below zero, values at zero, 1 above
function A.heaviside(t, values, ...)
  no_more("heaviside", 1, ...)
  if not accel.is_tensor(values) then raise("heaviside: values must be a tensor, got %s", util.show(values)) end
  if values.dtype ~= t.dtype then
    raise("heaviside: t and values must have the same dtype, got %s and %s", t.dtype.name, values.dtype.name)
  end
  return accel.where(t:eq(0), values, t:gt(0):to(t.dtype))
end

-- t:msort(): sorted along the first dim
function A.msort(t, ...)
  no_more("msort", 0, ...)
  return (t:sort(1))
end

-- t:nansum([dim], [keepdim], [{dtype=}]): sum with NaNs counted as zero
function A.nansum(t, ...)
  if not t.dtype.is_floating_point then return t:sum(...) end
  return accel.where(t:isnan(), 0, t):sum(...)
end

-- t:nanmean([dim], [keepdim], [{dtype=}]): mean of the non-NaN values (NaN where there are none)
function A.nanmean(t, ...)
  if not t.dtype.is_floating_point then
    raise("nanmean: expected a floating point input, got %s", t.dtype.name)
  end
  local present = t:isnan():logical_not()
  return A.nansum(t, ...) / present:to(t.dtype):sum(...)
end

-- torch's other names of the comparisons
for alias, name in pairs({greater = "gt", greater_equal = "ge", less = "lt", less_equal = "le", not_equal = "ne"}) do
  A[alias] = function(t, ...) return t[name](t, ...) end
end

-- Whether a result of dtype `from` may be written into a tensor of dtype
-- `to` in place (torch's can_cast: no float into an integer, nothing but
-- bool into bool).
local function can_cast(from, to)
  if from.is_floating_point and not to.is_floating_point then return false end
  return to ~= accel.bool or from == accel.bool
end

-- torch's name of a dtype in its cast errors ("Float", "Long", ...)
local TORCH_NAMES = {float32 = "Float", float64 = "Double", float16 = "Half", bfloat16 = "BFloat16", int64 = "Long",
  int32 = "Int", uint8 = "Byte", bool = "Bool"}
local function torch_name(dt)
  local short = tostring(dt):gsub("^accel%.", "")
  return TORCH_NAMES[short] or short
end

-- t:name_(...): t:name(...) written into t (copy_'s autograd rules), the
-- result of t's shape and castable to t's dtype (torch's errors). n_args:
-- how many arguments it takes (nil: any).
local function inplace_of(name, n_args)
  return function(t, ...)
    if n_args then no_more(name .. "_", n_args, select(n_args + 1, ...)) end
    util.check_inplace_leaf(name .. "_", t)
    local result = t[name](t, ...)
    if util.shape_str(result) ~= util.shape_str(t) then
      raise("%s_: output with shape %s doesn't match the broadcast shape %s", name, util.shape_str(t), util.shape_str(result))
    end
    if not can_cast(result.dtype, t.dtype) then
      raise("%s_: result type %s can't be cast to the desired output type %s", name, torch_name(result.dtype),
        torch_name(t.dtype))
    end
    return t:copy_(result)
  end
end

-- t:eq_(other) / ne_ / lt_ / le_ / gt_ / ge_ (and the long names with _): t
-- set to the comparison's 1 / 0 in t's dtype, in place; other must broadcast
-- to t's shape. Their gradient is zero, as PyTorch's.
for _, name in ipairs({"eq", "ne", "lt", "le", "gt", "ge"}) do A[name .. "_"] = inplace_of(name, 1) end
for alias, name in pairs({greater = "gt", greater_equal = "ge", less = "lt", less_equal = "le", not_equal = "ne"}) do
  A[alias .. "_"] = A[name .. "_"]
end

-- t:isposinf() / t:isneginf(): bool, where t is +inf / -inf
function A.isposinf(t) return t:eq(math.huge) end
function A.isneginf(t) return t:eq(-math.huge) end

-- t:nancumsum(dim, [{dtype =}]): cumsum with NaN counted as 0
function A.nancumsum(t, ...)
  if not t.dtype.is_floating_point then return t:cumsum(...) end
  return accel.where(t:isnan(), 0, t):cumsum(...)
end

-- ---- in-place forms and further names ----

-- torch's second names of in-place ops
for alias, name in pairs({divide_ = "div_", multiply_ = "mul_", subtract_ = "sub_", true_divide_ = "div_",
  fix = "trunc", fix_ = "trunc_", sgn_ = "sign_"}) do
  A[alias] = function(t, ...) return t[name](t, ...) end
end

-- t:angle(): the argument of a real number: pi below zero, 0 from -0 up,
-- NaN at NaN; an integer tensor gives the default float dtype. The
-- gradient is zero everywhere, as torch's for real tensors.
function A.angle(t, ...)
  no_more("angle", 0, ...)
  local x = t.dtype.is_floating_point and t or t:to(accel.get_default_dtype())
  local v = x:detach()
  local value = accel.where(v:isnan(), v, v:lt(0):to(v.dtype) * math.pi)
  return accel.where(accel.ones_like(v, {dtype = accel.bool}), value, x) -- (x on the graph, its gradient 0)
end

-- t:hardshrink([lambd = 0.5]) and t:prelu(weight): nn.functional's
function A.hardshrink(t, ...) return require("accel.nn.functional").hardshrink(t, ...) end
function A.prelu(t, ...) return require("accel.nn.functional").prelu(t, ...) end

-- t:mvlgamma(p): the multivariate log-gamma of dimension p,
-- p (p - 1) / 4 log(pi) + sum over j = 1..p of lgamma(t - (j - 1) / 2);
-- an integer tensor gives the default float dtype
function A.mvlgamma(t, p, ...)
  no_more("mvlgamma", 1, ...)
  if type(p) ~= "number" or p ~= math.floor(p) then raise("mvlgamma: p must be an integer, got %s", util.show(p)) end
  if p < 1 then raise("mvlgamma: p has to be greater than or equal to 1, got %d", p) end
  local x = t.dtype.is_floating_point and t or t:to(accel.get_default_dtype())
  local sum = x:lgamma()
  for j = 2, p do sum = sum + (x - (j - 1) / 2):lgamma() end
  return sum + p * (p - 1) / 4 * math.log(math.pi)
end

for _, name in ipairs({"cumsum", "cumprod", "logical_and", "logical_or", "logical_xor", "nan_to_num", "erfinv", "exp2",
  "frac", "deg2rad", "rad2deg", "sinc", "logit", "hypot", "xlogy", "heaviside", "mvlgamma"}) do
  A[name .. "_"] = inplace_of(name)
end

-- t:adjoint(): the last two dims swapped (the conjugate is t: tensors are real)
function A.adjoint(t, ...) no_more("adjoint", 0, ...) return t.mT end
function A.is_conj() return false end
function A.is_neg() return false end
-- t:isreal(): true everywhere (no complex tensors)
function A.isreal(t, ...) no_more("isreal", 0, ...) return accel.ones_like(t, {dtype = accel.bool}) end
-- t:get_device(): -1 on the CPU, else the device's index
function A.get_device(t) return t.device.type == "cpu" and -1 or (t.device.index or 0) end

function A.is_same_size(t, other, ...)
  no_more("is_same_size", 1, ...)
  if not accel.is_tensor(other) then raise("is_same_size: expected a tensor, got %s", util.show(other)) end
  return util.shape_str(t) == util.shape_str(other)
end

-- t:is_nonzero(): the one element is not zero (torch's errors otherwise)
function A.is_nonzero(t, ...)
  no_more("is_nonzero", 0, ...)
  if t:numel() == 0 then raise("is_nonzero: Boolean value of Tensor with no values is ambiguous") end
  if t:numel() > 1 then raise("is_nonzero: Boolean value of Tensor with more than one value is ambiguous") end
  return t:item() ~= 0 and t:item() ~= false
end

-- t:split_with_sizes(sizes, [dim = 1]): split with a list of sizes
function A.split_with_sizes(t, sizes, ...)
  if type(sizes) ~= "table" then raise("split_with_sizes: split_sizes must be a list of sizes, got %s", util.show(sizes)) end
  return t:split(sizes, ...)
end

-- torch's unsafe_ forms (no view check there; the same views here), and
-- is_inference (no inference-mode tensors here)
function A.unsafe_chunk(t, ...) return t:chunk(...) end
function A.unsafe_split(t, ...) return t:split(...) end
function A.is_inference() return false end

-- t:float_power_(e): float_power in place; t must be float64 (the result's dtype), as torch
function A.float_power_(t, e, ...)
  no_more("float_power_", 1, ...)
  if t.dtype ~= accel.float64 then
    raise("float_power_: the base given to float_power_ has dtype %s but the operation's result requires dtype float64",
      t.dtype.name)
  end
  return t:copy_(A.float_power(t, e))
end

-- t:narrow_copy(dim, start, length): narrow's slice as a new tensor
function A.narrow_copy(t, ...) return t:narrow(...):clone() end

-- (accel.diagflat itself finds this method first: call the function's own code)
function A.diagflat(t, ...) return require("accel.tensor_functions").diagflat(t, ...) end

-- t:logaddexp2(other): log2(2^t + 2^other)
function A.logaddexp2(t, other, ...)
  no_more("logaddexp2", 1, ...)
  local ln2 = math.log(2)
  return t:mul(ln2):logaddexp(accel.is_tensor(other) and other:mul(ln2) or other * ln2):div(ln2)
end

-- t:dist(other, [p = 2]): the p-norm of t - other
function A.dist(t, other, p, ...)
  no_more("dist", 2, ...)
  return (t - other):norm(p or 2)
end

-- t:sum_to_size(size...): t summed down to a shape it broadcasts from
function A.sum_to_size(t, ...)
  local size = select("#", ...) == 1 and type((...)) == "table" and (...) or {...}
  local nd, want = t:dim(), #size
  local ok = want <= nd
  local r = t
  if ok and nd > want then
    local lead = {}
    for i = 1, nd - want do lead[i] = i end
    r = r:sum(lead)
  end
  for i = 1, want do
    local have = ok and r:size(i)
    if not ok or (size[i] ~= have and size[i] ~= 1) then
      raise("sum_to_size: size {%s} is not expandable to size {%s}", table.concat(size, ", "), util.shape_str(t):sub(2, -2))
    end
    if size[i] == 1 and have ~= 1 then r = r:sum(i, true) end
  end
  return r
end

return A
