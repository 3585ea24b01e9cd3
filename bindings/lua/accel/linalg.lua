-- accel.linalg: the parts of torch.linalg that need no factorisation,
-- composed from abs, sums, extremes and matmul (autograd comes with them):
-- vector_norm, matrix_norm (Frobenius, 1, -1, inf, -inf), norm, vecdot,
-- multi_dot, matmul, cross, diagonal. Those that need a decomposition
-- (inv, det, svd, solve, ...) are errors naming them. Dims are 1-based,
-- negative from the end.
local accel = require("accel")
local util = require("accel.util")

local raise, torch_args = util.raise, util.torch_args
local L = {}

local INF = math.huge

-- an ord given as a number or as "inf" / "-inf" / "fro" / "nuc"
local function ord_value(ord)
  if ord == "inf" then return INF end
  if ord == "-inf" then return -INF end
  return ord
end

-- accel.linalg.vector_norm(x, [ord = 2], [dim], [keepdim = false], [{dtype =}])
function L.vector_norm(x, ...)
  local a = torch_args("linalg.vector_norm", {"ord", "dim", "keepdim:bool", "dtype"}, ...)
  if not accel.is_tensor(x) then raise("linalg.vector_norm: expected a tensor, got %s", util.show(x)) end
  if a.dtype then x = x:to(a.dtype) end
  if not x.dtype.is_floating_point then
    raise("linalg.vector_norm: expected a floating point input, got %s", x.dtype.name)
  end
  local ord, keepdim = ord_value(a.ord == nil and 2 or a.ord), a.keepdim == true
  if type(ord) ~= "number" then raise("linalg.vector_norm: ord must be a number, got %s", util.show(a.ord)) end
  local ax = x:abs()
  if ord == INF then return ax:amax(a.dim, keepdim) end
  if ord == -INF then return ax:amin(a.dim, keepdim) end
  if ord == 0 then return ax:ne(0):to(x.dtype):sum(a.dim, keepdim) end
  return x:norm(ord, a.dim, {keepdim = keepdim})
end

-- the two matrix dims of A named by dim (default {-2, -1}), as positive 1-based dims
local function matrix_dims(op, A, dim)
  if A:dim() < 2 then raise("%s: the input must have at least 2 dims, got %d-D", op, A:dim()) end
  dim = dim or {-2, -1}
  if type(dim) ~= "table" or #dim ~= 2 then raise("%s: dim must be a list of two dims, got %s", op, util.show(dim)) end
  local d = {}
  for i = 1, 2 do
    local v = dim[i]
    if type(v) ~= "number" or v == 0 or v > A:dim() or v < -A:dim() then
      raise("%s: dim %s out of range for a %d-D tensor", op, util.show(v), A:dim())
    end
    d[i] = v < 0 and A:dim() + 1 + v or v
  end
  if d[1] == d[2] then raise("%s: the two dims must differ, got %s", op, util.show(dim)) end
  return d[1], d[2]
end

-- accel.linalg.matrix_norm(A, [ord = "fro"], [dim = {-2, -1}], [keepdim = false], [{dtype =}])
function L.matrix_norm(A, ...)
  local a = torch_args("linalg.matrix_norm", {"ord", "dim", "keepdim:bool", "dtype"}, ...)
  if not accel.is_tensor(A) then raise("linalg.matrix_norm: expected a tensor, got %s", util.show(A)) end
  local r, c = matrix_dims("linalg.matrix_norm", A, a.dim)
  local ord, keepdim = ord_value(a.ord == nil and "fro" or a.ord), a.keepdim == true
  if ord == "fro" then return L.vector_norm(A, 2, {r, c}, keepdim, {dtype = a.dtype}) end
  if ord == "nuc" or ord == 2 or ord == -2 then
    raise("linalg.matrix_norm: ord = %s needs the singular values, which accel-lua does not compute", util.show(a.ord))
  end
  if ord ~= 1 and ord ~= -1 and ord ~= INF and ord ~= -INF then
    raise('linalg.matrix_norm: ord must be "fro", 1, -1, inf or -inf, got %s', util.show(a.ord))
  end
  if a.dtype then A = A:to(a.dtype) end
  -- 1 / -1: the largest / smallest column sum of |A|; inf / -inf: row sums
  local summed, across = r, c
  if ord == INF or ord == -INF then summed, across = c, r end
  local sums = A:abs():sum(summed, true)
  local out
  if ord > 0 and sums:size(across) == 0 then
    -- no sums: the largest of none is 0 (norms are >= 0), as torch, which
    -- returns fresh zeros (no gradient): the empty sum, detached
    out = sums:sum(across, true):detach()
  else
    out = (ord > 0) and sums:amax(across, true) or sums:amin(across, true)
  end
  if keepdim then return out end
  return out:squeeze(math.max(r, c)):squeeze(math.min(r, c))
end

-- accel.linalg.norm(A, [ord], [dim], [keepdim = false], [{dtype =}]):
-- without ord and dim, the 2-norm of A flattened; one dim (or a 1-D A): a
-- vector norm; two dims (or a 2-D A with ord): a matrix norm
function L.norm(A, ...)
  local a = torch_args("linalg.norm", {"ord", "dim", "keepdim:bool", "dtype"}, ...)
  if not accel.is_tensor(A) then raise("linalg.norm: expected a tensor, got %s", util.show(A)) end
  local dim = a.dim
  if type(dim) == "number" then dim = {dim} end
  local matrix
  if dim ~= nil then
    if #dim ~= 1 and #dim ~= 2 then raise("linalg.norm: dim must name 1 or 2 dims, got %s", util.show(a.dim)) end
    matrix = #dim == 2
  elseif a.ord ~= nil then
    if A:dim() ~= 1 and A:dim() ~= 2 then
      raise("linalg.norm: with ord and without dim the input must be 1-D or 2-D, got %d-D", A:dim())
    end
    matrix = A:dim() == 2
  end
  local o = {dtype = a.dtype}
  if matrix then return L.matrix_norm(A, a.ord == nil and "fro" or a.ord, dim, a.keepdim, o) end
  return L.vector_norm(A, a.ord == nil and 2 or a.ord, dim and dim[1], a.keepdim, o)
end

-- accel.linalg.vecdot(x, y, [{dim = -1}]): the sum of x * y along dim
function L.vecdot(x, y, ...)
  local a = torch_args("linalg.vecdot", {"dim:int"}, ...)
  return (x * y):sum(a.dim or -1)
end

-- accel.linalg.multi_dot({A, B, C, ...}): A @ B @ C ..., first and last may be 1-D
function L.multi_dot(tensors, ...)
  util.no_more("linalg.multi_dot", 1, ...)
  if type(tensors) ~= "table" or accel.is_tensor(tensors) or #tensors < 2 then
    raise("linalg.multi_dot: expected a list of at least two tensors, got %s", util.show(tensors))
  end
  for i, t in ipairs(tensors) do
    local inner = i > 1 and i < #tensors
    if not accel.is_tensor(t) or t:dim() > 2 or t:dim() == 0 or (inner and t:dim() ~= 2) then
      raise("linalg.multi_dot: tensor %d must be 2-D (the first and last may be 1-D), got %s", i, util.show(t))
    end
  end
  local r = tensors[1]
  for i = 2, #tensors do r = r:matmul(tensors[i]) end
  return r
end

function L.matmul(a, b) return a:matmul(b) end

-- accel.linalg.cross(a, b, [{dim = -1}])
function L.cross(a, b, ...)
  local o = torch_args("linalg.cross", {"dim:int"}, ...)
  return a:cross(b, o.dim or -1)
end

-- accel.linalg.diagonal(A, [{offset = 0, dim1 = -2, dim2 = -1}])
function L.diagonal(A, ...)
  local o = torch_args("linalg.diagonal", {"offset:int", "dim1:int", "dim2:int"}, ...)
  return A:diagonal(o.offset or 0, o.dim1 or -2, o.dim2 or -1)
end

local NOT_PROVIDED = {}
for name in ([[inv inv_ex det slogdet svd svdvals eig eigh eigvals eigvalsh qr cholesky cholesky_ex lstsq
  solve solve_ex solve_triangular pinv matrix_rank matrix_power matrix_exp lu lu_factor lu_factor_ex lu_solve
  cond tensorinv tensorsolve householder_product ldl_factor ldl_factor_ex ldl_solve vander]]):gmatch("%S+") do
  NOT_PROVIDED[name] = true
end

return util.not_provided(L, NOT_PROVIDED, "accel.linalg",
  "it needs a matrix decomposition; docs/api/accel.md lists what accel.linalg has")
