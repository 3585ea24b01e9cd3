-- accel.nn.adaptive_max_pool: F.adaptive_max_pool1d / 2d / 3d and
-- AdaptiveMaxPool1d / 2d / 3d, PyTorch's cells (cell i of n
-- over a size S covers [floor(i S / n), ceil((i + 1) S / n))), indices and
-- gradients. The maximum of a cell is taken along the width first, then
-- along the height (and the depth), each by t:max(dim), which keeps the first of equal
-- values: together the first maximum in row-major order, the element
-- PyTorch's kernel picks (and the one its gradient goes to). Loaded on
-- first use of one of its names.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local util = require("accel.util")

local raise, py, export_class = base.raise, base.pyrepr, base.export_class

local M = {}
local FUNCTIONS = {}

-- the bounds [lo, hi) of cell c (0-based) of n over a size s
local function cell(c, n, s) return math.floor(c * s / n), math.ceil((c + 1) * s / n) end

-- y reduced to n cells along dim d by max: values, and the 0-based positions along d they came from
local function cell_max(y, d, n)
  local s, values, where = y:size(d), {}, {}
  for c = 0, n - 1 do
    local lo, hi = cell(c, n, s)
    local v, i = y:narrow(d, lo + 1, hi - lo):max(d, true)
    values[c + 1], where[c + 1] = v, i + lo
  end
  return accel.cat(values, d), accel.cat(where, d)
end

-- the output sizes of output_size (an integer, or a list whose nil entries keep the input's size) for the
-- input sizes `dims` ({h, w} or {d, h, w})
local function output_sizes(op, output_size, dims)
  local out = type(output_size) == "table" and output_size or {output_size, output_size, output_size}
  local sizes = {}
  for i, len in ipairs(dims) do sizes[i] = out[i] == nil and len or out[i] end
  for _, n in ipairs(sizes) do
    if type(n) ~= "number" or n < 1 or n ~= math.floor(n) then
      raise("%s: output_size must be positive integers, got %s", op, py(output_size))
    end
  end
  return sizes
end

-- y's maxima reduced to n cells along dim d (positions `inner`: where along the later dims each entry of y
-- came from): the values, and the position of each maximum counting dim d and the later ones (row-major)
local function cell_max_outer(y, inner, d, n, inner_size)
  local len = y:size(d)
  local values, chosen = cell_max(y, d, n)
  local inner_of = {}
  for c = 0, n - 1 do
    local lo, hi = cell(c, n, len)
    inner_of[c + 1] = inner:narrow(d, lo + 1, hi - lo):gather(d, chosen:narrow(d, c + 1, 1) - lo)
  end
  return values, chosen * inner_size + accel.cat(inner_of, d)
end

-- the maxima of x's last #out dims in out cells, and their flat positions in those dims
local function max_pool_cells(x, out)
  local k, nd = #out, x:dim()
  local values, where = cell_max(x, nd, out[k]) -- along the last dim: positions are columns
  local inner_size = x:size(nd)
  for i = k - 1, 1, -1 do
    local d = nd - k + i
    values, where = cell_max_outer(values, where, d, out[i], inner_size)
    inner_size = inner_size * x:size(d)
  end
  return values, where
end

-- adaptive_max_pool2d / 3d (nd spatial dims) of x (N, C, ...) or (C, ...) -> values[, indices (int64 flat
-- positions in each plane or volume, 0-based: h W + w, d H W + h W + w)]
local SPATIAL = {[2] = {"H", "W"}, [3] = {"D", "H", "W"}}
local function adaptive_max_pool(op, nd, x, output_size, ...)
  local a = util.torch_args(op, {"return_indices:bool"}, ...)
  local names = table.concat(SPATIAL[nd], ", ")
  if not accel.is_tensor(x) or (x:dim() ~= nd + 1 and x:dim() ~= nd + 2) then
    raise("%s: expected input of shape (N, C, %s) or (C, %s), got %s", op, names, names,
      accel.is_tensor(x) and tostring(x.shape) or type(x))
  end
  local sizes = {}
  for i = 1, nd do
    sizes[i] = x:size(x:dim() - nd + i)
    if sizes[i] == 0 then raise("%s: expected non-empty %s, got input %s", op, names, tostring(x.shape)) end
  end
  local values, indices = max_pool_cells(x, output_sizes(op, output_size, sizes))
  if a.return_indices then return values, indices end
  return values
end

function FUNCTIONS.adaptive_max_pool2d(x, output_size, ...)
  return adaptive_max_pool("adaptive_max_pool2d", 2, x, output_size, ...)
end
function FUNCTIONS.adaptive_max_pool3d(x, output_size, ...)
  return adaptive_max_pool("adaptive_max_pool3d", 3, x, output_size, ...)
end

-- adaptive_max_pool1d(x (N, C, L) or (C, L), output_size, [return_indices = false]) -> values[, indices]
function FUNCTIONS.adaptive_max_pool1d(x, output_size, ...)
  local a = util.torch_args("adaptive_max_pool1d", {"return_indices:bool"}, ...)
  if not accel.is_tensor(x) or (x:dim() ~= 2 and x:dim() ~= 3) then
    raise("adaptive_max_pool1d: expected input of shape (N, C, L) or (C, L), got %s",
      accel.is_tensor(x) and tostring(x.shape) or type(x))
  end
  if type(output_size) == "table" then output_size = output_size[1] end
  local values, indices = FUNCTIONS.adaptive_max_pool2d(x:unsqueeze(-2), {1, output_size}, true)
  if a.return_indices then return values:squeeze(-2), indices:squeeze(-2) end
  return values:squeeze(-2)
end

-- on torch's autocast float32 list (CPU): half inputs widened under autocast
require("accel.amp").fp32_ops(FUNCTIONS, {"adaptive_max_pool3d"})

for name, f in pairs(FUNCTIONS) do F[name] = f end

-- AdaptiveMaxPool2d(output_size, [return_indices = false]), AdaptiveMaxPool1d / 3d(...)
for n = 1, 3 do
  local name, fn = ("AdaptiveMaxPool%dd"):format(n), FUNCTIONS[("adaptive_max_pool%dd"):format(n)]
  local cls = export_class(M, name)
  function cls:init(output_size, ...)
    local a = util.torch_args(name, {"return_indices:bool"}, ...)
    self.output_size, self.return_indices = output_size, a.return_indices == true
  end
  function cls:forward(x) return fn(x, self.output_size, self.return_indices) end
  function cls:extra_repr() return "output_size=" .. base.size_repr(self.output_size, n) end
end

return M
