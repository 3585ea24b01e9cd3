-- accel.tensor_products: PyTorch's vector and tensor products composed from
-- matmul, mul and sum (so autograd comes with them): dot, vdot, inner, mv,
-- addmv, addr, addbmm, kron, tensordot, and the in-place addmm_ / baddbmm_ /
-- addmv_ / addr_ / addbmm_.
-- Returns the methods, merged into the tensor method table by
-- accel.tensor_methods; tensordot (a torch function, not a method) is
-- exported as accel.tensordot. Dims are 1-based, negative from the end.
local accel = require("accel")
local util = require("accel.util")

local raise, torch_args = util.raise, util.torch_args
local P = {}

local function is_tensor(v) return accel.is_tensor(v) end

local function check_tensors(op, a, b)
  if not is_tensor(a) or not is_tensor(b) then
    raise("%s: expected two tensors, got %s and %s", op, util.show(a), util.show(b))
  end
end

-- dot / vdot: 1-D tensors of one size and one dtype
local function vectors(op, a, b)
  check_tensors(op, a, b)
  if a:dim() ~= 1 or b:dim() ~= 1 then
    raise("%s: 1-D tensors expected, got %d-D and %d-D tensors", op, a:dim(), b:dim())
  end
  if a:numel() ~= b:numel() then
    raise("%s: inconsistent tensor sizes, expected tensors of the same number of elements, got %d and %d",
      op, a:numel(), b:numel())
  end
  if a.dtype ~= b.dtype then
    raise("%s: expected both vectors to have the same dtype, got %s and %s", op, a.dtype.name, b.dtype.name)
  end
  return (a * b):sum()
end

-- t:dot(v): the sum of the products of two 1-D tensors (a 0-D tensor)
function P.dot(t, v, ...)
  util.no_more("dot", 1, ...)
  return vectors("dot", t, v)
end

-- t:vdot(v): dot with t conjugated (the same for real tensors)
function P.vdot(t, v, ...)
  util.no_more("vdot", 1, ...)
  return vectors("vdot", t, v)
end

-- t:mv(vec): (n, m) @ (m) -> (n)
function P.mv(t, vec, ...)
  util.no_more("mv", 1, ...)
  check_tensors("mv", t, vec)
  if t:dim() ~= 2 or vec:dim() ~= 1 then
    raise("mv: a matrix and a vector expected, got %d-D and %d-D tensors", t:dim(), vec:dim())
  end
  if t:size(2) ~= vec:size(1) then
    raise("mv: size mismatch, matrix (%dx%d) and vector (%d)", t:size(1), t:size(2), vec:size(1))
  end
  return require("accel.amp").off(t.matmul, t, vec) -- (mv is on no autocast list: float32 stays)
end

-- beta * t + alpha * product (beta = 0: t is not read, as torch)
local function scaled_sum(t, product, beta, alpha)
  if alpha ~= 1 then product = product * alpha end
  if beta == 0 then return product end
  return (beta == 1 and t or t * beta) + product
end

local SCALES = {"beta:number", "alpha:number"}

-- beta and alpha of op's options; whole numbers for an integer t, as torch
local function scales(op, t, ...)
  local a = torch_args(op, SCALES, ...)
  local beta, alpha = a.beta or 1, a.alpha or 1
  if not t.dtype.is_floating_point and t.dtype ~= accel.bool then
    for _, k in ipairs({"beta", "alpha"}) do
      local v = a[k]
      if v ~= nil and v ~= math.floor(v) then
        raise("%s: for integral input tensors, argument %s must not be a floating point number, got %s", op, k, util.show(v))
      end
    end
  end
  return beta, alpha
end

-- t:addmv(mat, vec, [{beta = 1, alpha = 1}]): beta * t + alpha * (mat @ vec)
function P.addmv(t, mat, vec, ...)
  local a = torch_args("addmv", SCALES, ...)
  return scaled_sum(t, P.mv(mat, vec), a.beta or 1, a.alpha or 1)
end

-- a and b are tensors of nd dims, else fmt(op, which one, its dims)
local function check_ndim(op, a, b, nd, fmt)
  check_tensors(op, a, b)
  for i, v in ipairs({a, b}) do
    if v:dim() ~= nd then raise(fmt, op, i, v:dim()) end
  end
end

-- t:addr(vec1, vec2, [{beta = 1, alpha = 1}]): beta * t + alpha * (the
-- outer product of two 1-D tensors), t broadcast to (#vec1, #vec2)
function P.addr(t, vec1, vec2, ...)
  check_ndim("addr", vec1, vec2, 1, "%s: expected 1-D argument vec%d, got %d-D")
  local beta, alpha = scales("addr", t, ...)
  local shape = {vec1:size(1), vec2:size(1)}
  local ok = pcall(t.expand, t, shape)
  if not ok then
    raise("addr: t of shape %s does not broadcast to the outer product's shape (%d, %d)", util.shape_str(t), shape[1], shape[2])
  end
  return scaled_sum(t, vec1:unsqueeze(2) * vec2:unsqueeze(1), beta, alpha)
end

-- t:addbmm(batch1, batch2, [{beta = 1, alpha = 1}]): beta * t + alpha * the
-- sum over the batch of batch1[i] @ batch2[i] ((b, n, m) and (b, m, p))
function P.addbmm(t, b1, b2, ...)
  check_ndim("addbmm", b1, b2, 3, "%s: batch%d must be a 3-D tensor, got %d-D")
  if b1:size(1) ~= b2:size(1) then
    raise("addbmm: batch1 and batch2 must have the same number of batches, got %d and %d", b1:size(1), b2:size(1))
  end
  local beta, alpha = scales("addbmm", t, ...)
  t = require("accel.amp").cast_input(t) -- (addbmm is on autocast's lower-precision list, as addmm)
  return scaled_sum(t, b1:matmul(b2):sum(1), beta, alpha)
end

function P.addmv_(t, mat, vec, ...) return t:copy_(P.addmv(t, mat, vec, ...)) end
function P.addr_(t, v1, v2, ...) return t:copy_(P.addr(t, v1, v2, ...)) end
function P.addbmm_(t, b1, b2, ...) return t:copy_(P.addbmm(t, b1, b2, ...)) end
function P.addmm_(t, m1, m2, ...) return t:copy_(t:addmm(m1, m2, ...)) end
function P.baddbmm_(t, b1, b2, ...) return t:copy_(t:baddbmm(b1, b2, ...)) end

-- a positive 0-based dim of a tensor with nd dims, from a 1-based one
local function dim0(op, nd, d)
  if type(d) ~= "number" or d ~= math.floor(d) then raise("%s: a dim must be an integer, got %s", op, util.show(d)) end
  local p = d < 0 and nd + d or d - 1
  if d == 0 or p < 0 or p >= nd then
    raise("%s: dim %d out of range for a %d-D tensor (dims are 1-based, negative from the end)", op, d, nd)
  end
  return p
end

-- the dims of a, b to contract for tensordot's dims argument: a count n
-- (the last n of a with the first n of b) or two lists of 1-based dims
local function contracted_dims(a, b, dims)
  local da, db = {}, {}
  if type(dims) == "number" then
    if dims < 0 or dims ~= math.floor(dims) or dims > a:dim() or dims > b:dim() then
      raise("tensordot: dims must be a count from 0 to %d, got %s", math.min(a:dim(), b:dim()), util.show(dims))
    end
    for i = 1, dims do da[i], db[i] = a:dim() - dims + i - 1, i - 1 end
  elseif type(dims) == "table" and type(dims[1]) == "table" and type(dims[2]) == "table" then
    if #dims[1] ~= #dims[2] then
      raise("tensordot: both dim lists must have the same length, got %d and %d", #dims[1], #dims[2])
    end
    for i = 1, #dims[1] do da[i], db[i] = dim0("tensordot", a:dim(), dims[1][i]), dim0("tensordot", b:dim(), dims[2][i]) end
  else
    raise("tensordot: dims must be a count or two lists of dims ({{dims of a}, {dims of b}}), got %s", util.show(dims))
  end
  for i = 1, #da do
    if a:size(da[i] + 1) ~= b:size(db[i] + 1) then
      raise("tensordot: contracted dims must match, a has size %d in dim %d and b size %d in dim %d",
        a:size(da[i] + 1), da[i] + 1, b:size(db[i] + 1), db[i] + 1)
    end
  end
  return da, db
end

-- t permuted so that the dims of list come first (first = true) or last,
-- reshaped to 2-D; and the sizes of the kept dims
local function matrix_of(t, list, first)
  local taken, kept, kept_sizes, k = {}, {}, {}, 1
  for _, d in ipairs(list) do taken[d] = true end
  for d = 0, t:dim() - 1 do
    if not taken[d] then kept[#kept + 1], kept_sizes[#kept_sizes + 1] = d + 1, t:size(d + 1) end
  end
  local order = {}
  for _, d in ipairs(first and list or kept) do order[#order + 1] = first and d + 1 or d end
  for _, d in ipairs(first and kept or list) do order[#order + 1] = first and d or d + 1 end
  local rest = 1
  for _, d in ipairs(list) do k = k * t:size(d + 1) end
  for _, s in ipairs(kept_sizes) do rest = rest * s end
  local m = t:permute(order):reshape(first and {k, rest} or {rest, k})
  return m, kept_sizes
end

-- accel.tensordot(a, b, [dims = 2]) or (a, b, {dims =}): the sum of
-- products over the given dims of a and b; the result has a's other dims,
-- then b's
function P.tensordot(a, b, ...)
  local o = torch_args("tensordot", {"dims"}, ...)
  check_tensors("tensordot", a, b)
  local da, db = contracted_dims(a, b, o.dims == nil and 2 or o.dims)
  local ma, sa = matrix_of(a, da, false)
  local mb, sb = matrix_of(b, db, true)
  local shape = {}
  for _, s in ipairs(sa) do shape[#shape + 1] = s end
  for _, s in ipairs(sb) do shape[#shape + 1] = s end
  return ma:matmul(mb):reshape(shape)
end

-- t:inner(u): the sum of products over the last dims (a number side: a product)
function P.inner(t, u, ...)
  util.no_more("inner", 1, ...)
  if not is_tensor(u) or t:dim() == 0 or u:dim() == 0 then return t * u end
  if t:dim() == 1 and u:dim() == 1 then return vectors("inner", t, u) end -- (a sum of products, as torch: no autocast)
  if t:size(-1) ~= u:size(-1) then
    raise("inner: the last dims must match, got shapes %s and %s", util.shape_str(t), util.shape_str(u))
  end
  return P.tensordot(t, u, {{-1}, {-1}})
end

-- t:kron(u): the Kronecker product; dims padded with leading 1s to the same count
function P.kron(t, u, ...)
  util.no_more("kron", 1, ...)
  check_tensors("kron", t, u)
  local nd = math.max(t:dim(), u:dim())
  local tv, uv, out = {}, {}, {}
  for i = 1, nd do
    local st = i > nd - t:dim() and t:size(i - nd + t:dim()) or 1
    local su = i > nd - u:dim() and u:size(i - nd + u:dim()) or 1
    tv[2 * i - 1], tv[2 * i] = st, 1 -- (t1, 1, t2, 1, ...)
    uv[2 * i - 1], uv[2 * i] = 1, su -- (1, u1, 1, u2, ...)
    out[i] = st * su
  end
  if nd == 0 then return t * u end
  return (t:reshape(tv) * u:reshape(uv)):reshape(out)
end

return P
