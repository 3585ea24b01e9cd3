-- accel.json: strict JSON (RFC 8259) for checkpoint indexes, state files,
-- model index files and the objects gather_object / broadcast_object send.
--
--   json.encode(value, {indent = 2}) -> string   (object keys sorted: output is deterministic)
--   json.decode(text)               -> value     (errors name the offending byte position)
--   json.try_encode(value, opts)    -> string, or nil and the reason
--   json.try_decode(text)           -> value, or nil and the reason
--   json.MAX_DEPTH                  the nesting limit both sides enforce (256)
--
-- Mapping: Lua tables whose keys are exactly 1..n are arrays (an empty table
-- is {} unless marked with json.array(t)), tables with string keys are
-- objects; integers print as integers and floats always with a '.' or an
-- exponent (17 significant digits when needed), so a decode gives back the
-- same number of the same kind. json.null stands for JSON's null.
--
-- Writer and reader agree on the limits, so whatever encode writes, decode
-- reads back unchanged, and whatever one refuses the other refuses too:
-- - nesting: at most MAX_DEPTH arrays/objects inside each other (the top
--   level container is depth 1); encode checks it before recursing further
--   and decode before descending, so a 10^6-deep table or "[[[[..." text is
--   one error, never a Lua or C stack overflow;
-- - numbers: NaN and infinities are refused on encode (with the key path);
--   on decode a literal that overflows a double (1e400) is refused rather
--   than read as inf, and an integer literal (no '.' or exponent) must fit a
--   Lua integer exactly (64-bit on Lua 5.4, |n| <= 2^53 on LuaJIT), else it
--   is refused rather than rounded; a float literal that underflows reads as
--   0 or a subnormal, as in every JSON reader;
-- - strings (and object keys) must be valid UTF-8 (RFC 8259 section 8.1: no
--   overlong forms, surrogates or code points above U+10FFFF) on both
--   sides; encode escapes the control characters U+0000-U+001F (and DEL),
--   decode refuses them raw (DEL is allowed raw, as the RFC says);
-- - functions, userdata (tensors included: send them with gather /
--   broadcast or save them as safetensors), threads, cycles, mixed or sparse
--   keys are refused with the path inside the value ("value.opt[3].lr").
--
-- Errors: json.encode / json.decode called from a script raise at the
-- script's file:line; called from the library (or through pcall) the
-- message carries no position. The library uses try_encode / try_decode and
-- raises its own message (naming the file, collective or rank).
local json = {}

json.MAX_DEPTH = 256
json.null = setmetatable({}, {__tostring = function() return "json.null" end})
local array_mt = {__jsontype = "array"}

-- Marks t so that it encodes as an array even when empty.
function json.array(t) return setmetatable(t or {}, array_mt) end

local HAS_INT64 = math.type ~= nil
local MAX_EXACT = 2 ^ 53

local function is_integer(v)
  if HAS_INT64 then return math.type(v) == "integer" end
  return v == math.floor(v) and v >= -MAX_EXACT and v <= MAX_EXACT
end

-- Thrown inside encode/decode; carries the message to the public entry.
local function fail(fmt, ...) error({json_error = fmt:format(...)}, 0) end

-- Runs f(...) and returns its result, or nil and the message of a fail().
local function protected(f, ...)
  local ok, v = pcall(f, ...)
  if ok then return v end
  if type(v) == "table" and v.json_error then return nil, v.json_error end
  error(v, 0)
end

-- Raises msg at the caller of the public function when that caller is a
-- script, else without a position (library code wraps the message).
local function throw(msg)
  local info = debug.getinfo(3, "S")
  if info and info.what ~= "C" and info.source:sub(1, 8) ~= "=[accel]" then error(msg, 3) end
  error(msg, 0)
end

-- ---------------------------------------------------------------- UTF-8

-- The byte position of the first invalid UTF-8 sequence in s, or nil.
local function utf8_error(s)
  local i, n = s:find("[\128-\255]"), #s
  while i do
    local c, need, min = s:byte(i), 0, 0
    if c >= 0xC2 and c <= 0xDF then need, min = 1, 0x80
    elseif c >= 0xE0 and c <= 0xEF then need, min = 2, 0x800
    elseif c >= 0xF0 and c <= 0xF4 then need, min = 3, 0x10000
    else return i end
    if i + need > n then return i end
    local cp = c % (2 ^ (6 - need))
    for k = 1, need do
      local b = s:byte(i + k)
      if b < 0x80 or b > 0xBF then return i end
      cp = cp * 64 + b % 64
    end
    if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then return i end
    i = s:find("[\128-\255]", i + need + 1)
  end
  return nil
end

json.utf8_error = utf8_error

-- ---------------------------------------------------------------- encode

local escapes = {['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t"}

local function encode_string(s, path)
  local bad = utf8_error(s)
  if bad then fail("%s is not valid UTF-8 (byte %d of %d); JSON text must be UTF-8", path, bad, #s) end
  return '"' .. s:gsub('[%c"\\]', function(c)
    return escapes[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function encode_number(v, path)
  if v ~= v or v == math.huge or v == -math.huge then
    fail("%s is %s, which JSON cannot represent", path, v ~= v and "NaN" or tostring(v))
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
  if seen[t] then fail("%s contains itself (a cycle)", path) end
  if depth >= json.MAX_DEPTH then
    local where = #path > 60 and path:sub(1, 40) .. "..." .. path:sub(-12) or path
    fail("%s nests tables deeper than %d levels (json.MAX_DEPTH)", where, json.MAX_DEPTH)
  end
  local kind = table_kind(t)
  if not kind then
    fail("%s mixes non-string keys with others or is a sparse list; JSON objects need string keys", path)
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
      local at = path .. "." .. k
      parts[i] = pad_in .. encode_string(k, "the key of " .. at) .. colon .. encode_value(t[k], at, opts, depth + 1, seen)
    end
  end
  seen[t] = nil
  local open, close = "[", "]"
  if kind == "object" then open, close = "{", "}" end
  if #parts == 0 then return open .. close end
  return open .. nl .. table.concat(parts, "," .. nl) .. nl .. pad .. close
end

local function describe(v)
  local mt = getmetatable(v)
  local name = type(mt) == "table" and rawget(mt, "__name")
  if type(name) == "string" then return ("a %s (%s)"):format(type(v), name) end
  return "a " .. type(v)
end

encode_value = function(v, path, opts, depth, seen)
  local t = type(v)
  if v == nil or v == json.null then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then return encode_number(v, path) end
  if t == "string" then return encode_string(v, path) end
  if t == "table" then return encode_table(v, path, opts, depth, seen) end
  fail("%s is %s, which JSON cannot represent", path, describe(v))
end

function json.try_encode(value, opts)
  local text, err = protected(encode_value, value, "value", opts or {}, 0, {})
  if text then return text end
  return nil, "json.encode: " .. err
end

function json.encode(value, opts)
  local text, err = json.try_encode(value, opts)
  if not text then throw(err) end
  return text
end

-- ---------------------------------------------------------------- decode

local function decode_error(s, pos, what)
  fail("%s at byte %d (near %q)", what, pos, s:sub(pos, pos + 15))
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

-- A \uXXXX escape (and its low surrogate) at j -> the character, next position.
local function decode_u_escape(s, j)
  local cp, i = decode_hex4(s, j + 2), j + 6
  if cp >= 0xD800 and cp <= 0xDBFF then
    if s:sub(i, i + 1) ~= "\\u" then decode_error(s, j, "unpaired surrogate in \\u escape") end
    local lo = decode_hex4(s, i + 2)
    if lo < 0xDC00 or lo > 0xDFFF then decode_error(s, j, "unpaired surrogate in \\u escape") end
    cp = 0x10000 + (cp - 0xD800) * 1024 + (lo - 0xDC00)
    i = i + 6
  elseif cp >= 0xDC00 and cp <= 0xDFFF then
    decode_error(s, j, "unpaired surrogate in \\u escape")
  end
  return utf8_char(cp), i
end

-- Raw text of a string between escapes: valid UTF-8 only.
local function raw_part(s, i, j)
  local part = s:sub(i, j - 1)
  local bad = utf8_error(part)
  if bad then decode_error(s, i + bad - 1, "invalid UTF-8 in string") end
  return part
end

-- The next quote, backslash or control character U+0000-U+001F at or after
-- i (DEL, which %c also matches, is plain text). No NUL in the pattern, for
-- LuaJIT.
local function next_special(s, i)
  local j = s:find('["\\%c]', i)
  while j and s:byte(j) == 127 do j = s:find('["\\%c]', j + 1) end
  return j
end

local function decode_string(s, pos) -- pos at the opening quote
  local parts, i = {}, pos + 1
  while true do
    local j = next_special(s, i)
    if not j then decode_error(s, pos, "unterminated string") end
    parts[#parts + 1] = raw_part(s, i, j)
    local c = s:sub(j, j)
    if c == '"' then return table.concat(parts), j + 1 end
    if c ~= "\\" then decode_error(s, j, "control character in string (escape it)") end
    local e = s:sub(j + 1, j + 1)
    if simple_escapes[e] then
      parts[#parts + 1] = simple_escapes[e]
      i = j + 2
    elseif e == "u" then
      parts[#parts + 1], i = decode_u_escape(s, j)
    else
      decode_error(s, j, "bad escape")
    end
  end
end

-- Whether v, read from the integer literal text, is that integer exactly.
local function exact_integer(v, text)
  if HAS_INT64 then return math.type(v) == "integer" end
  return string.format("%.0f", v) == text
end

-- The number a checked literal stands for, refusing what would change it.
local function number_value(s, pos, text, is_float)
  local v = tonumber(text)
  if is_float then
    if v == math.huge or v == -math.huge then
      decode_error(s, pos, "number out of range (beyond the largest double, it would read as inf)")
    end
    return v -- a float already (tonumber of a literal with '.' or an exponent); keeps -0.0
  end
  if not exact_integer(v, text) then
    decode_error(s, pos, ("integer out of range (a Lua integer holds %s exactly); write it with a '.' or an "
      .. "exponent to accept a rounded float"):format(HAS_INT64 and "-2^63 .. 2^63-1" or "up to 2^53"))
  end
  return v
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
  return number_value(s, pos, s:sub(pos, i - 1), is_float), i
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
    v, pos = decode_value(s, pos, depth)
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
    v, pos = decode_value(s, skip_ws(s, pos + 1), depth)
    out[k] = v
    closed, pos = after_item(s, pos, "}", "object")
  until closed
  return out, pos
end

local literals = {["true"] = true, ["false"] = false, ["null"] = json.null}

-- depth: how many arrays/objects enclose the value at pos.
decode_value = function(s, pos, depth)
  local c = s:sub(pos, pos)
  if (c == "{" or c == "[") and depth >= json.MAX_DEPTH then
    decode_error(s, pos, ("nesting deeper than %d levels (json.MAX_DEPTH)"):format(json.MAX_DEPTH))
  end
  if c == "{" then return decode_object(s, pos, depth + 1) end
  if c == "[" then return decode_array(s, pos, depth + 1) end
  if c == '"' then return decode_string(s, pos) end
  if c == "-" or c:find("%d") then return decode_number(s, pos) end
  for word, v in pairs(literals) do
    if s:sub(pos, pos + #word - 1) == word then return v, pos + #word end
  end
  if c == "" then decode_error(s, pos, "unexpected end of input") end
  decode_error(s, pos, "unexpected character")
end

local function decode_text(s)
  local v, pos = decode_value(s, skip_ws(s, 1), 0)
  pos = skip_ws(s, pos)
  if pos <= #s then decode_error(s, pos, "trailing data after the JSON value") end
  return {v}
end

function json.try_decode(s)
  if type(s) ~= "string" then return nil, "json.decode: expected a string, got " .. type(s) end
  local box, err = protected(decode_text, s)
  if box then return box[1] end
  return nil, "json.decode: " .. err
end

function json.decode(s)
  local box = {json.try_decode(s)}
  if box[2] then throw(box[2]) end
  return box[1]
end

return json
