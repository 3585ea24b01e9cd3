-- accel.compat: the few Lua 5.2-5.4 library functions the library uses
-- that LuaJIT 2.1 lacks (docs/luajit.md). Under Lua 5.4 each one is the
-- built-in function itself; under LuaJIT, a replacement with the same
-- results for what the library passes. Nothing here changes globals.
--
--   compat.pack(...)          table.pack: {n = select("#", ...), ...}
--   compat.unpack(t, i, j)    table.unpack (LuaJIT: unpack)
--   compat.string_pack(fmt, ...)
--                             string.pack; under LuaJIT only the formats the
--                             library writes: "<d", "<f", "<I4", "<I8"
--                             (through the FFI, bit-exact); others raise
--   compat.len(obj)           #obj honouring __len, which LuaJIT's # ignores
--                             on tables
--   compat.ipairs(t)          ipairs reading t[i] through __index (5.3+),
--                             as containers (nn.ModuleList) need; LuaJIT's
--                             ipairs reads raw
local M = {}

M.unpack = table.unpack or unpack

M.pack = table.pack or function(...) return {n = select("#", ...), ...} end

function M.len(obj)
  local mt = getmetatable(obj)
  if type(obj) == "table" and mt and mt.__len then return mt.__len(obj) end
  return #obj
end

local function index_next(t, i)
  i = i + 1
  local v = t[i]
  if v ~= nil then return i, v end
end

M.ipairs = (_VERSION ~= "Lua 5.1") and ipairs or function(t) return index_next, t, 0 end

local function ffi_string_pack()
  local ffi = require("ffi")
  assert(ffi.abi("le"), "accel.compat: string.pack replacement assumes a little-endian machine")
  local ctypes = {["<d"] = "double[1]", ["<f"] = "float[1]", ["<I4"] = "uint32_t[1]", ["<I8"] = "uint64_t[1]"}
  return function(fmt, x)
    local ct = ctypes[fmt]
    if not ct then error("accel.compat: string.pack format '" .. tostring(fmt) .. "' is not available under LuaJIT", 2) end
    if type(x) ~= "number" then error("accel.compat: string.pack: number expected, got " .. type(x), 2) end
    if fmt:sub(2, 2) == "I" and (x < 0 or x ~= math.floor(x)) then
      error("accel.compat: string.pack '" .. fmt .. "': " .. tostring(x) .. " is not an unsigned integer", 2)
    end
    local buf = ffi.new(ct, x)
    return ffi.string(buf, ffi.sizeof(buf))
  end
end

M.string_pack = string.pack or ffi_string_pack()

return M
