-- accel.tensor_view_scatter: PyTorch's select_scatter, slice_scatter and
-- diagonal_scatter, the out-of-place inverses of select / a strided slice /
-- diagonal: a copy of t with src written where that view of t lies. Each
-- finds the view's flat positions by taking the same view of t's element
-- numbers, then writes src there with index_copy, so gradients reach both t
-- (zero where src landed) and src. Dims and indices are 1-based, negative
-- from the end; a slice's end is inclusive, as Lua's string.sub.
-- Returns the methods, merged into the tensor method table by
-- accel.tensor_methods.
local accel = require("accel")
local util = require("accel.util")

local raise, torch_args = util.raise, util.torch_args
local S = {}

-- t with src written at the positions of view(element numbers of t)
local function scatter_into(op, t, src, view)
  if not accel.is_tensor(src) then raise("%s: src must be a tensor, got %s", op, util.show(src)) end
  local numbers = accel.arange(t:numel(), {device = t.device}):reshape(t.shape)
  local positions = view(numbers)
  if util.shape_str(positions) ~= util.shape_str(src) then
    raise("%s: expected src to have a size equal to the slice of self, src size = %s, slice size = %s", op,
      util.shape_str(src), util.shape_str(positions))
  end
  src = src:to(t.dtype) -- (as torch's copy into the view)
  return t:reshape({-1}):index_copy(1, positions:reshape({-1}), src:reshape({-1})):reshape(t.shape)
end

-- t:select_scatter(src, dim, index): src where t:select(dim, index) lies
function S.select_scatter(t, src, dim, index, ...)
  util.no_more("select_scatter", 3, ...)
  return scatter_into("select_scatter", t, src, function(n) return n:select(dim, index) end)
end

-- the 0-based positions start, start + step, ... up to finish of a dim of
-- size n, from 1-based start / inclusive finish (negative from the end)
local function slice_positions(op, n, start, finish, step)
  if step <= 0 or step ~= math.floor(step) then raise("%s: step must be a positive integer, got %s", op, util.show(step)) end
  local first = start < 0 and n + start or start - 1
  local last = finish < 0 and n + finish or finish - 1
  first, last = math.max(first, 0), math.min(last, n - 1)
  local list = {}
  for p = first, last, step do list[#list + 1] = p end
  return list
end

-- t:slice_scatter(src, [dim = 1], [start = 1], [end = size], [step = 1]), or
-- the same in a table {dim =, start =, ["end"] =, step =}: src where
-- elements start, start + step, ... (up to end, inclusive) of dim lie
function S.slice_scatter(t, src, ...)
  local a = torch_args("slice_scatter", {"dim:int", "start:int", "end:int", "step:int"}, ...)
  local d = a.dim or 1
  return scatter_into("slice_scatter", t, src, function(n)
    local size = n:size(d)
    local list = slice_positions("slice_scatter", size, a.start or 1, a["end"] or size, a.step or 1)
    return n:index_select(d, accel.tensor(list, {dtype = accel.int64, device = t.device}))
  end)
end

-- t:diagonal_scatter(src, [offset = 0], [dim1 = 1], [dim2 = 2]): src where
-- t:diagonal(offset, dim1, dim2) lies
function S.diagonal_scatter(t, src, ...)
  local a = torch_args("diagonal_scatter", {"offset:int", "dim1:int", "dim2:int"}, ...)
  return scatter_into("diagonal_scatter", t, src, function(n)
    return n:diagonal(a.offset or 0, a.dim1 or 1, a.dim2 or 2)
  end)
end

return S
