-- accel.data.util: small helpers shared by the accel.data files: errors that
-- point at the user's file:line, option checking, lengths and varargs that
-- work in Lua 5.4 and LuaJIT alike.
local U = {}

-- error(msg) positioned at the first Lua frame outside the embedded library
-- (the user's call site), as lu_error does for C errors.
function U.fail(msg) return require("accel.util").raise("%s", msg) end

function U.failf(fmt, ...) return U.fail(string.format(fmt, ...)) end

local is_int = math.type and function(v) return math.type(v) == "integer" end
  or function(v) return v == math.floor(v) end

function U.is_integer(v) return type(v) == "number" and is_int(v) end

-- v must be an integer >= min; what names it in the error.
-- v checked to be a whole number >= min, returned as an integer where Lua
-- has them (8 / 2 is 4.0: indices made from it would print as 1.0)
function U.check_int(v, min, what)
  if not (type(v) == "number" and v == math.floor(v) and v >= min) then
    U.failf("%s must be an integer >= %d, got %s", what, min, tostring(v))
  end
  return math.tointeger and math.tointeger(v) or v
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

-- A sample index of `what`: an integer in 1..n (a string "1" is named as one).
function U.check_index(what, i, n)
  if type(i) ~= "number" then U.failf("%s: index must be a number, got %s %s", what, type(i), ("%q"):format(tostring(i))) end
  if not U.is_integer(i) or i < 1 or i > n then U.failf("%s: index %s is out of range 1..%d", what, tostring(i), n) end
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

return U
