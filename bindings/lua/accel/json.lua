-- accel.json: strict JSON (RFC 8259) for checkpoint indexes, state files
-- and model index files.
--
--   json.encode(value, {indent = 2}) -> string   (object keys sorted: output is deterministic)
--   json.decode(text)               -> value     (errors name the offending byte position)
--
-- Mapping: Lua tables whose keys are exactly 1..n are arrays (an empty table
-- is {} unless marked with json.array(t)), tables with string keys are
-- objects; integers print as integers and floats always with a '.' or an
-- exponent (17 significant digits when needed), so a decode gives back the
-- same number of the same kind. json.null stands for JSON's null. Encoding
-- refuses what JSON cannot hold (NaN, infinities, functions, mixed or sparse
-- keys, cycles) with an error naming the path inside the value; decoding
-- refuses trailing data, duplicate keys, bad escapes and invalid numbers.
local json = {}

json.null = setmetatable({}, {__tostring = function() return "json.null" end})
local array_mt = {__jsontype = "array"}

-- Marks t so that it encodes as an array even when empty.
function json.array(t) return setmetatable(t or {}, array_mt) end

local function is_integer(v)
  if math.type then return math.type(v) == "integer" end
  return v == math.floor(v) and v >= -2 ^ 53 and v <= 2 ^ 53
end

-- ---------------------------------------------------------------- encode

local escapes = {['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t"}

local function encode_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return escapes[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function encode_number(v, path)
  if v ~= v or v == math.huge or v == -math.huge then
    error(("json.encode: %s is %s, which JSON cannot represent"):format(path, tostring(v)), 0)
  end
  if is_integer(v) then return string.format("%d", v) end
  local s
  for digits = 15, 17 do
    s = string.format("%." .. digits .. "g", v)
    if tonumber(s) == v then break end
  end
  if not s:find("[%.eEn]") then s = s .. ".0" end
  return s
end

-- "array", "object" or nil (an error) for a table's key set.
local function table_kind(t)
  local n, count, all_strings = #t, 0, true
  for k in pairs(t) do
    count = count + 1
    if type(k) ~= "string" then all_strings = false end
  end
  if count == 0 then return getmetatable(t) == array_mt and "array" or "object" end
  if all_strings then return "object" end
  if n == count then return "array" end
  return nil
end

local encode_value

local function encode_table(t, path, opts, depth, seen)
  if seen[t] then error(("json.encode: %s contains itself (a cycle)"):format(path), 0) end
  local kind = table_kind(t)
  if not kind then
    error(("json.encode: %s mixes non-string keys with others or is a sparse list; JSON objects need string keys"):format(path), 0)
  end
  seen[t] = true
  local nl, pad, pad_in, colon = "", "", "", ":"
  if opts.indent then
    nl, pad, pad_in, colon = "\n", string.rep(" ", opts.indent * depth), string.rep(" ", opts.indent * (depth + 1)), ": "
  end
  local parts = {}
  if kind == "array" then
    for i = 1, #t do parts[i] = pad_in .. encode_value(t[i], path .. "[" .. i .. "]", opts, depth + 1, seen) end
  else
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    table.sort(keys)
    for i, k in ipairs(keys) do
      parts[i] = pad_in .. encode_string(k) .. colon .. encode_value(t[k], path .. "." .. k, opts, depth + 1, seen)
    end
  end
  seen[t] = nil
  local open, close = "[", "]"
  if kind == "object" then open, close = "{", "}" end
  if #parts == 0 then return open .. close end
  return open .. nl .. table.concat(parts, "," .. nl) .. nl .. pad .. close
end

encode_value = function(v, path, opts, depth, seen)
  local t = type(v)
  if v == nil or v == json.null then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then return encode_number(v, path) end
  if t == "string" then return encode_string(v) end
  if t == "table" then return encode_table(v, path, opts, depth, seen) end
  error(("json.encode: %s is a %s, which JSON cannot represent"):format(path, t), 0)
end

function json.encode(value, opts)
  return encode_value(value, "value", opts or {}, 0, {})
end

-- ---------------------------------------------------------------- decode

local MAX_DEPTH = 200

local function decode_error(s, pos, what)
  error(("json.decode: %s at byte %d (near %q)"):format(what, pos, s:sub(pos, pos + 15)), 0)
end

local function skip_ws(s, pos)
  return s:find("[^ \t\r\n]", pos) or #s + 1
end

local function utf8_char(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return string.char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return string.char(0xF0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64,
    0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
end

local simple_escapes = {['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t"}

local function decode_hex4(s, pos)
  local hex = s:sub(pos, pos + 3)
  if not hex:find("^%x%x%x%x$") then decode_error(s, pos, "bad \\u escape") end
  return tonumber(hex, 16)
end

local function decode_string(s, pos) -- pos at the opening quote
  local parts, i = {}, pos + 1
  while true do
    local j = s:find('["\\%c]', i)
    if not j then decode_error(s, pos, "unterminated string") end
    parts[#parts + 1] = s:sub(i, j - 1)
    local c = s:sub(j, j)
    if c == '"' then return table.concat(parts), j + 1 end
    if c ~= "\\" then decode_error(s, j, "control character in string") end
    local e = s:sub(j + 1, j + 1)
    if simple_escapes[e] then
      parts[#parts + 1] = simple_escapes[e]
      i = j + 2
    elseif e == "u" then
      local cp = decode_hex4(s, j + 2)
      i = j + 6
      if cp >= 0xD800 and cp <= 0xDBFF then
        if s:sub(i, i + 1) ~= "\\u" then decode_error(s, j, "unpaired surrogate in \\u escape") end
        local lo = decode_hex4(s, i + 2)
        if lo < 0xDC00 or lo > 0xDFFF then decode_error(s, j, "unpaired surrogate in \\u escape") end
        cp = 0x10000 + (cp - 0xD800) * 1024 + (lo - 0xDC00)
        i = i + 6
      elseif cp >= 0xDC00 and cp <= 0xDFFF then
        decode_error(s, j, "unpaired surrogate in \\u escape")
      end
      parts[#parts + 1] = utf8_char(cp)
    else
      decode_error(s, j, "bad escape")
    end
  end
end

-- -?(0|[1-9]digits)(.digits)?([eE][-+]?digits)?
local function decode_number(s, pos)
  local i = pos
  if s:sub(i, i) == "-" then i = i + 1 end
  local int = s:match("^%d+", i)
  if not int or (#int > 1 and int:sub(1, 1) == "0") then decode_error(s, pos, "invalid number") end
  i = i + #int
  local is_float = false
  if s:sub(i, i) == "." then
    local frac = s:match("^%d+", i + 1)
    if not frac then decode_error(s, pos, "invalid number") end
    i, is_float = i + 1 + #frac, true
  end
  if s:find("^[eE]", i) then
    local exp = s:match("^[-+]?%d+", i + 1)
    if not exp then decode_error(s, pos, "invalid number") end
    i, is_float = i + 1 + #exp, true
  end
  local text = s:sub(pos, i - 1)
  local v = tonumber(text)
  if is_float then
    v = v + 0.0
  elseif math.type and math.type(v) ~= "integer" then
    v = tonumber(text .. ".0") -- beyond the integer range
  end
  return v, i
end

local decode_value

-- After an array item or object member: the closing bracket (true and the
-- position past it) or a comma (false and the position of the next item).
local function after_item(s, pos, close, what)
  pos = skip_ws(s, pos)
  local c = s:sub(pos, pos)
  if c == close then return true, pos + 1 end
  if c ~= "," then decode_error(s, pos, ("expected ',' or '%s' in %s"):format(close, what)) end
  return false, skip_ws(s, pos + 1)
end

local function decode_array(s, pos, depth)
  local out, n = {}, 0
  pos = skip_ws(s, pos + 1)
  if s:sub(pos, pos) == "]" then return json.array(out), pos + 1 end
  repeat
    local v, closed
    v, pos = decode_value(s, pos, depth + 1)
    n = n + 1
    out[n] = v
    closed, pos = after_item(s, pos, "]", "array")
  until closed
  return out, pos
end

local function decode_object(s, pos, depth)
  local out = {}
  pos = skip_ws(s, pos + 1)
  if s:sub(pos, pos) == "}" then return out, pos + 1 end
  repeat
    if s:sub(pos, pos) ~= '"' then decode_error(s, pos, "expected a string key in object") end
    local k, v, closed
    k, pos = decode_string(s, pos)
    if out[k] ~= nil then decode_error(s, pos, ("duplicate key %q in object"):format(k)) end
    pos = skip_ws(s, pos)
    if s:sub(pos, pos) ~= ":" then decode_error(s, pos, "expected ':' after object key") end
    v, pos = decode_value(s, skip_ws(s, pos + 1), depth + 1)
    out[k] = v
    closed, pos = after_item(s, pos, "}", "object")
  until closed
  return out, pos
end

local literals = {["true"] = true, ["false"] = false, ["null"] = json.null}

decode_value = function(s, pos, depth)
  if depth > MAX_DEPTH then decode_error(s, pos, "nesting too deep") end
  local c = s:sub(pos, pos)
  if c == "{" then return decode_object(s, pos, depth) end
  if c == "[" then return decode_array(s, pos, depth) end
  if c == '"' then return decode_string(s, pos) end
  if c == "-" or c:find("%d") then return decode_number(s, pos) end
  for word, v in pairs(literals) do
    if s:sub(pos, pos + #word - 1) == word then return v, pos + #word end
  end
  if c == "" then decode_error(s, pos, "unexpected end of input") end
  decode_error(s, pos, "unexpected character")
end

function json.decode(s)
  if type(s) ~= "string" then error("json.decode: expected a string, got " .. type(s), 2) end
  local v, pos = decode_value(s, skip_ws(s, 1), 0)
  pos = skip_ws(s, pos)
  if pos <= #s then decode_error(s, pos, "trailing data after the JSON value") end
  return v
end

return json
