-- accel.data.util: small helpers shared by the accel.data files: errors that
-- point at the user's file:line, option checking, lengths and varargs that
-- work in Lua 5.4 and LuaJIT alike.
local U = {}

-- error(msg) positioned at the first Lua frame outside the embedded library
-- (the user's call site), as lu_error does for C errors.
function U.fail(msg) return require("accel.util").raise("%s", msg) end

function U.failf(fmt, ...) return U.fail(string.format(fmt, ...)) end

-- The largest integer the interpreter holds exactly (LuaJIT's numbers are doubles).
local MAX_INT = math.maxinteger or 2 ^ 53
local MAX_TEXT = math.maxinteger and "2^63 - 1" or "2^53"

-- v as an integer when it is a whole number the interpreter holds exactly
-- (4.0 and 8 / 2 give 4), else nil: not a number, a fraction, inf, NaN or
-- beyond MAX_INT.
function U.to_int(v)
  if type(v) ~= "number" or v ~= math.floor(v) or v > MAX_INT or v < -MAX_INT then return nil end
  return math.tointeger and math.tointeger(v) or v
end

-- "got v" for an error message: a string quoted as one, a whole number too
-- large to be an integer (inf, 2^63) said so.
function U.got(v)
  if type(v) == "string" then return ("got string %q"):format(v) end
  if type(v) == "number" and v == math.floor(v) and U.to_int(v) == nil then
    return ("got %s (integers go up to %s)"):format(tostring(v), MAX_TEXT)
  end
  return "got " .. require("accel.util").show(v)
end

-- v checked to be a whole number in min..max (max: the largest integer),
-- returned as an integer where Lua has them (8 / 2 is 4.0: indices made
-- from it would print as 1.0); what names it in the error.
function U.check_int(v, min, what, max)
  local i = U.to_int(v)
  if i ~= nil and i >= min and (max == nil or i <= max) then return i end
  if max then U.failf("%s must be an integer in %d..%d, %s", what, min, max, U.got(v)) end
  U.failf("%s must be an integer >= %d, %s", what, min, U.got(v))
end

-- Rejects keys of opts not in known (a set); ignored is a set of PyTorch
-- options accepted and ignored.
function U.check_opts(opts, known, ignored, what)
  if opts == nil then return {} end
  if type(opts) ~= "table" then U.failf("%s: options must be a table, got %s", what, type(opts)) end
  for k in pairs(opts) do
    if not known[k] and not (ignored and ignored[k]) then
      local names = {}
      for name in pairs(known) do names[#names + 1] = name end
      for name in pairs(ignored or {}) do names[#names + 1] = name end -- accepted too
      table.sort(names)
      U.failf("%s: unknown option '%s' (known: %s)", what, tostring(k), table.concat(names, ", "))
    end
  end
  return opts
end

-- A sample index of `what`: a whole number in 1..n (2.0 too, as t:select
-- takes it; a string "1" is named as one), returned as an integer.
function U.check_index(what, i, n)
  if type(i) ~= "number" then U.failf("%s: index must be a number, got %s %s", what, type(i), ("%q"):format(tostring(i))) end
  local k = U.to_int(i)
  if k == nil then U.failf("%s: index must be an integer, got %s", what, tostring(i)) end
  if k < 0 then k = n + 1 + k end -- negative: from the end, as every position here
  if k < 1 or k > n then U.failf("%s: index %s is out of range 1..%d (or -%d..-1)", what, tostring(i), n, n) end
  return k
end

-- #obj through __len, also where the interpreter (LuaJIT) ignores __len on tables.
function U.len(obj)
  local mt = getmetatable(obj)
  if mt and mt.__len then return mt.__len(obj) end
  return #obj
end

-- "[2, 3]" for a tensor of that shape.
function U.shape_str(t)
  local dims = {}
  for d = 1, t:dim() do dims[d] = tostring(t:size(d)) end
  return "[" .. table.concat(dims, ", ") .. "]"
end

function U.pack(...) return {n = select("#", ...), ...} end

U.unpack = table.unpack or unpack

-- class.__index for a dataset class: its methods, and for ds[i] (a
-- number) an error pointing at ds:get(i): a PyTorch port's `ds[i]` would
-- otherwise be nil, silently (a sample's several fields cannot be one
-- value of an index).
function U.dataset_index(class, name)
  return function(_, k)
    local v = class[k]
    if v == nil and type(k) == "number" then
      U.failf("%s: a dataset has no ds[%s]; read sample i with ds:get(i) (1-based; several fields come back as "
        .. "several values)", name, tostring(k))
    end
    return v
  end
end

return U
