-- accel.util: helpers shared by the embedded Lua library.
local util = {}

-- Raise an error (a message, or a format and its arguments) positioned at
-- the user's file:line: the first Lua frame outside the embedded library,
-- as lu_error does for errors raised in C.
function util.raise(fmt, ...)
  local msg = select("#", ...) > 0 and string.format(fmt, ...) or fmt
  local level = 2
  while true do
    local info = debug.getinfo(level, "Sl")
    if not info then return error(msg, 0) end
    if info.currentline > 0 and info.source:sub(1, 8) ~= "=[accel]" then return error(msg, level) end
    level = level + 1
  end
end

-- An __index for a class with computed properties: a key of props is read
-- as props[k](self), any other key comes from the class.
function util.property_index(class, props)
  return function(self, k)
    local get = props[k]
    if get then return get(self) end
    return class[k]
  end
end

-- The contents of the file at path, or nil and io.open's message.
function util.read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s = f:read("a")
  f:close()
  return s
end

return util
