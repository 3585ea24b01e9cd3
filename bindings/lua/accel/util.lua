-- accel.util: helpers shared by the embedded Lua library.
local util = {}

-- A value as a message shows it: strings quoted, anything else tostring'd.
function util.show(v)
  if type(v) == "string" then return '"' .. v .. '"' end
  if v ~= v then return "nan" end -- tostring(0/0) is "-nan" on glibc
  return tostring(v)
end

-- The stack level (counted from this function) of the user's frame, the
-- first Lua frame outside the embedded library, and its debug info; nil
-- when there is none.
local function user_frame()
  local level = 2
  while true do
    local info = debug.getinfo(level, "Sl")
    if not info then return nil end
    if info.currentline > 0 and info.source:sub(1, 8) ~= "=[accel]" then return level, info end
    level = level + 1
  end
end

-- An error message without the "file:line: " its first line starts with
-- (to raise it again under another op's name, at the caller's line).
function util.strip_position(msg) return (tostring(msg):gsub("^[^\n]-:%d+: ", "")) end

-- Raise an error (a message, or a format and its arguments) positioned at
-- the user's file:line, as lu_error does for errors raised in C.
function util.raise(fmt, ...)
  local msg = select("#", ...) > 0 and string.format(fmt, ...) or fmt
  local level = user_frame()
  -- error() is called as a statement: a tail call would drop this frame
  -- under LuaJIT and shift the level by one.
  error(msg, level and level - 1 or 0)
end

-- The "file:line: " prefix raise (and lu_error) put before a message, or "".
function util.where()
  local _, info = user_frame()
  return info and ("%s:%d: "):format(info.short_src, info.currentline) or ""
end

local TRUTH = {["1"] = true, yes = true, y = true, ["true"] = true, t = true, on = true,
  ["0"] = false, no = false, n = false, ["false"] = false, f = false, off = false}

-- The boolean a truth word names (1/yes/y/true/t/on, 0/no/n/false/f/off,
-- any case), or nil for another string.
function util.truth(s)
  return TRUTH[s:lower()]
end

-- The boolean of the environment setting var = s, as Accelerate's
-- str_to_bool; any other word is an error naming the variable.
function util.str_to_bool(s, var)
  local b = util.truth(s)
  if b == nil then
    util.raise("%s=%s: invalid truth value (expected 1, yes, y, true, t, on or 0, no, n, false, f, off)", var, s)
  end
  return b
end

-- A launch setting (host/settings.c exports it as ACCEL_LUA_<name>;
-- Accelerate's variable, ACCELERATE_<name> unless accelerate_var names
-- another, is read too): its value and variable, or nil when neither is
-- set or both are empty.
function util.launch_setting(name, accelerate_var)
  for _, var in ipairs({"ACCEL_LUA_" .. name, accelerate_var or "ACCELERATE_" .. name}) do
    local v = os.getenv(var)
    if v ~= nil and v ~= "" then return v, var end
  end
  return nil
end

-- The boolean environment variable var (false when unset or empty).
function util.env_flag(var)
  local s = os.getenv(var)
  return s ~= nil and s ~= "" and util.str_to_bool(s, var)
end

-- A callable value: a function, or a table / userdata whose metatable has __call.
function util.callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil
end

-- The position of the first nil inside list t (a nil before its largest
-- positive integer key: ipairs and # silently stop at or around it, which
-- would drop the items after it), or nil when t has none.
function util.list_hole(t)
  local n = 0
  while t[n + 1] ~= nil do n = n + 1 end
  for k in pairs(t) do
    if type(k) == "number" and k > n and k < math.huge and k == math.floor(k) then return n + 1 end
  end
  return nil
end

-- The error "<name>: <what>[i] is nil ..." when list t has a hole (list_hole).
function util.check_list(t, name, what)
  local i = util.list_hole(t)
  if i then
    util.raise("%s: %s[%d] is nil (a nil inside the list would silently drop the items after it)", name, what, i)
  end
end

-- The error for an option key k that name does not take, listing the keys
-- it does take (as PyTorch's "unexpected keyword argument").
function util.unknown_option(name, k, keys)
  util.raise("%s: unknown option '%s' (options: %s)", name, tostring(k), table.concat(keys, ", "))
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

-- ---- method calls with `.` instead of `:` ----
--
-- util.check_methods(class, name, [o]) wraps each public method of class
-- (a function field whose name has no leading "_" and is not in
-- o.skip / the constructors new, extend, init, from_pretrained,
-- from_config) so that its first argument
-- must be an instance: `opt.step()` raises "SGD.step: call it as
-- obj:step(...), not obj.step(...)" at the user's file:line instead of a
-- confusing error inside the method. o.is_instance(x) decides what an
-- instance is (default: x's metatable is class or a subclass of it, found
-- through the metatables' _super / super fields or their __index chain).
-- The cost is one extra call, a getmetatable and a table read per call
-- (about 60 ns; the class walk runs once per metatable); hot paths
-- (a module's forward, tensor methods) are left out or checked in C.

local CONSTRUCTORS = {new = true, extend = true, init = true, from_pretrained = true, from_config = true}

-- The parent class of class table c, or nil.
local function parent_of(c)
  local p = rawget(c, "_super") or rawget(c, "super")
  if p ~= nil then return p end
  local mt = getmetatable(c)
  if type(mt) ~= "table" then return nil end
  local idx = rawget(mt, "__index")
  if type(idx) == "table" and idx ~= c then return idx end
  return nil
end

function util.instance_of(x, class)
  if type(x) ~= "table" and type(x) ~= "userdata" then return false end
  local c = getmetatable(x)
  local hops = 0
  while type(c) == "table" and hops < 64 do
    if rawequal(c, class) then return true end
    c = parent_of(c)
    hops = hops + 1
  end
  return false
end

-- The error for name.method called without an instance, at the user's line.
function util.method_call_error(name, method, got)
  util.raise("%s.%s: call it as obj:%s(...), not obj.%s(...) (the object itself must come first; got %s)",
    name, method, method, method, got)
end

local function describe(x)
  if x == nil then return "nil" end
  local mt = getmetatable(x)
  local n = type(mt) == "table" and rawget(mt, "__name")
  if type(n) == "string" then return "a " .. n end
  return "a " .. type(x)
end

-- wrapper -> the function it checks (a method copied to another class,
-- `Conv2d.reset_parameters = Linear.reset_parameters`, is checked afresh for
-- the class it lands in)
local unchecked = setmetatable({}, {__mode = "k"})

-- f wrapped so that its first argument must pass is_instance. What passes
-- depends only on the metatable, so each metatable seen to pass is
-- remembered: the usual call costs a getmetatable and a table read.
-- A method of up to three fixed parameters gets a wrapper of the same
-- arity (a vararg function costs a copy of its arguments per call; a
-- method without varargs cannot tell the difference).
function util.checked_method(f, name, method, is_instance)
  f = unchecked[f] or f
  local passed = setmetatable({}, {__mode = "k"})
  local function check(self) -- the slow path: a metatable not seen yet
    if not is_instance(self) then util.method_call_error(name, method, describe(self)) end
    local mt = getmetatable(self)
    if mt ~= nil then passed[mt] = true end
  end
  local info = debug.getinfo(f, "u")
  local n = not info.isvararg and info.nparams or nil
  local w
  if n == 1 then
    w = function(self) if not passed[getmetatable(self)] then check(self) end return f(self) end
  elseif n == 2 then
    w = function(self, a) if not passed[getmetatable(self)] then check(self) end return f(self, a) end
  elseif n == 3 then
    w = function(self, a, b) if not passed[getmetatable(self)] then check(self) end return f(self, a, b) end
  else
    w = function(self, ...) if not passed[getmetatable(self)] then check(self) end return f(self, ...) end
  end
  unchecked[w] = f
  return w
end

local function is_public_method(k, f, skip)
  return type(k) == "string" and type(f) == "function" and k:sub(1, 1) ~= "_" and not CONSTRUCTORS[k]
    and not skip[k]
end

-- Field k = f of class name: f checked if it is a public method, else f.
function util.method_field(k, f, name, is_instance, skip)
  if is_public_method(k, f, skip or {}) then return util.checked_method(f, name, k, is_instance) end
  return f
end

function util.check_methods(class, name, o)
  o = o or {}
  local is_instance = o.is_instance or function(x) return util.instance_of(x, class) end
  local keys = {}
  for k in pairs(class) do keys[#keys + 1] = k end
  for _, k in ipairs(keys) do
    rawset(class, k, util.method_field(k, rawget(class, k), name, is_instance, o.skip))
  end
  return class
end

-- A table that accel.operations walks into as a container: no metatable,
-- or one that only adds printing and marks itself __container = true (a
-- module's state_dict).
function util.is_container(t)
  if type(t) ~= "table" then return false end
  local mt = getmetatable(t)
  return mt == nil or (type(mt) == "table" and rawget(mt, "__container") == true)
end

-- The contents of the file at path, or nil and io.open's message.
-- A copy of a plain value: tables (lists, configs) are copied recursively,
-- everything else (tensors are userdata) is shared.
function util.copy_plain(v)
  if type(v) ~= "table" then return v end
  local c = {}
  for k, x in pairs(v) do c[k] = util.copy_plain(x) end
  return c
end

function util.read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s = f:read("a")
  f:close()
  return s
end

-- the sizes of a tensor's dims, as a list
function util.sizes_of(t)
  local d = {}
  for i = 1, t:dim() do d[i] = t:size(i) end
  return d
end

-- "[2, 3]": a tensor's shape, for messages
function util.shape_str(t) return "[" .. table.concat(util.sizes_of(t), ", ") .. "]" end

-- In-place ops refuse a leaf that requires grad while grad mode is on; hint
-- (optional) ends the message.
function util.check_inplace_leaf(op, t, hint)
  if require("accel").is_grad_enabled() and t.requires_grad and t.is_leaf then
    util.raise("%s: a leaf tensor that requires grad (shape %s) cannot be modified in place; use accel.no_grad%s", op,
      util.shape_str(t), hint or "")
  end
end

-- Arguments past the positional ones op takes are PyTorch's TypeError.
function util.no_more(op, taken, ...)
  if select("#", ...) > 0 then util.raise("%s: takes %d argument%s, got more", op, taken, taken == 1 and "" or "s") end
end

-- Makes reading one of names (a set) from tbl an error "<where>.<name> is not
-- provided (<hint>)"; other missing keys behave as before (the metatable's
-- own __index, else nil). For PyTorch / Accelerate names a module lacks.
function util.not_provided(tbl, names, where, hint)
  local mt = getmetatable(tbl) or {}
  local index = mt.__index
  mt.__index = function(t, k)
    if names[k] then util.raise("%s.%s is not provided (%s)", where, tostring(k), hint) end
    if type(index) == "function" then return index(t, k) end
    if type(index) == "table" then return index[k] end
  end
  return setmetatable(tbl, mt)
end

-- check_options(name, o, keys): o (nil or a table of keyword options) with
-- every key in the list keys, else "<name>: unknown option '<key>'
-- (options: a, b, c)" at the user's line (PyTorch's TypeError for an
-- unexpected keyword). Returns o, or one shared empty table for nil.
local NO_OPTIONS = setmetatable({}, {__newindex = function() error("check_options: the empty options are read-only", 2) end})

function util.check_options(name, o, keys)
  if o == nil then return NO_OPTIONS end -- shared: no table made per call
  if type(o) ~= "table" then util.raise("%s: options must be a table, got %s", name, type(o)) end
  for k in pairs(o) do
    local known = false
    for _, key in ipairs(keys) do known = known or k == key end
    if not known then util.unknown_option(name, k, keys) end
  end
  return o
end

-- A plain options table: not a tensor (a userdata), a dtype or a list.
function util.is_options(v)
  if type(v) ~= "table" or rawget(v, "__dtype") ~= nil then return false end
  local mt = getmetatable(v)
  if type(mt) == "table" and rawget(mt, "__class") ~= nil then return false end -- a module is an argument
  return v[1] == nil
end

-- The kinds of value an argument spec "name:kind" names (kinds joined by
-- "|" take any of them); a spec without ":" takes anything.
local ARG_KINDS = {
  number = function(v) return type(v) == "number" end,
  int = function(v) return type(v) == "number" and v == math.floor(v) end,
  bool = function(v) return type(v) == "boolean" end,
  string = function(v) return type(v) == "string" end,
  table = function(v) return type(v) == "table" and rawget(v, "__dtype") == nil end,
  tensor = function(v) return require("accel").is_tensor(v) end,
  ["function"] = function(v) return util.callable(v) end,
}
local ARG_KIND_TEXT = {number = "a number", int = "an integer", bool = "a boolean", string = "a string",
  table = "a table", tensor = "a Tensor", ["function"] = "a function"}

-- spec -> {name, kinds or false}, parsed once per spec string.
local arg_specs = setmetatable({}, {__index = function(cache, spec)
  local name, kinds = spec:match("^([^:]+):(.+)$")
  local parsed = {name or spec, false}
  if kinds then
    parsed[2] = {}
    for kind in kinds:gmatch("[^|]+") do parsed[2][#parsed[2] + 1] = assert(ARG_KINDS[kind] and kind, kind) end
  end
  cache[spec] = parsed
  return parsed
end})

-- v (not nil) is of one of the kinds of spec, else PyTorch's TypeError
-- ("<op>: argument 'beta' must be a number, got string").
local function check_arg_kind(op, spec, v)
  local kinds = spec[2]
  if not kinds then return end
  for _, kind in ipairs(kinds) do if ARG_KINDS[kind](v) then return end end
  local texts = {}
  for i, kind in ipairs(kinds) do texts[i] = ARG_KIND_TEXT[kind] end
  local got = require("accel").is_tensor(v) and "Tensor" or type(v)
  util.raise("%s: argument '%s' must be %s, got %s", op, spec[1], table.concat(texts, " or "), got)
end

-- PyTorch's call op(..., names[1], names[2], ...) as Lua arguments: those
-- positionally, then at most one options table holding any of them by
-- name. A name may carry the kinds of value it takes ("eps:number",
-- "dim:int|table"; see ARG_KINDS); a value of another kind is an error.
-- Returns {name = value}; an argument given both ways, or more
-- positional ones than names, is PyTorch's TypeError.
function util.torch_args(op, names, ...)
  local specs, plain = {}, {}
  for i, spec in ipairs(names) do specs[i] = arg_specs[spec]; plain[i] = specs[i][1] end
  local n = select("#", ...)
  local o = {}
  if n > 0 and util.is_options(select(n, ...)) then o, n = util.check_options(op, select(n, ...), plain), n - 1 end
  if n > #names and #names == 0 then util.raise("%s: takes no arguments, got %d", op, n) end
  if n > #names then
    util.raise("%s: %d arguments given where at most %d are taken (%s, then an options table)", op, n, #names,
      table.concat(plain, ", "))
  end
  local v = {}
  for k, x in pairs(o) do v[k] = x end
  for i = 1, n do
    local x = select(i, ...)
    if x ~= nil then
      if o[plain[i]] ~= nil then util.raise("%s: got multiple values for argument '%s'", op, plain[i]) end
      v[plain[i]] = x
    end
  end
  for _, spec in ipairs(specs) do
    if v[spec[1]] ~= nil then check_arg_kind(op, spec, v[spec[1]]) end
  end
  return v
end

-- PyTorch's TypeError for positional arguments: each of ... (up to #specs)
-- against specs[i] ("name:kind", kinds as torch_args's; a trailing "?"
-- makes nil acceptable: "dim:int?"); a missing one is "missing argument".
function util.check_positional(op, specs, ...)
  for i, raw in ipairs(specs) do
    local optional = raw:sub(-1) == "?"
    local spec = arg_specs[optional and raw:sub(1, -2) or raw]
    local v = select(i, ...)
    if v == nil then
      if not optional then util.raise("%s: missing argument '%s' (position %d)", op, spec[1], i) end
    else
      check_arg_kind(op, spec, v)
    end
  end
end

-- fn with its positional arguments after self checked by check_positional;
-- exact: nothing may follow them (PyTorch's "takes N arguments")
function util.with_positional_checks(op, specs, fn, exact)
  return function(self, ...)
    util.check_positional(op, specs, ...)
    if exact then
      for i = #specs + 1, select("#", ...) do
        if select(i, ...) ~= nil then
          util.raise("%s: takes %d argument%s but %d were given", op, #specs, #specs == 1 and "" or "s", select("#", ...))
        end
      end
    end
    return fn(self, ...)
  end
end

-- A method's options: nil, a table of the keys listed (else an error naming
-- the method and the key), or PyTorch's positional values, bound in order to
-- positional ({{key, type}, ...}; a value of another type is an error).
-- The arguments after a state dict with accel.load's metadata table (its
-- second return, so load_state_dict(accel.load(path)) passes it on) left
-- out: that table alone is no options; anything else is kept.
function util.without_load_metadata(o, ...)
  local accel = package.loaded.accel
  if select("#", ...) == 0 and type(o) == "table" and accel and rawequal(getmetatable(o), accel._C.load_metadata) then
    return
  end
  return o, ...
end

function util.opts_of(name, keys, positional, o, ...)
  local n = select("#", ...)
  if positional and type(o) ~= "table" and (o ~= nil or n > 0) then
    if n + 1 > #positional then
      util.raise("%s: takes at most %d positional argument%s, got %d", name, #positional, #positional == 1 and "" or "s", n + 1)
    end
    local args, out = {o, ...}, {}
    for i, spec in ipairs(positional) do
      local v = args[i]
      if v ~= nil and type(v) ~= spec[2] then
        util.raise("%s: argument '%s' (position %d) must be %s, not %s", name, spec[1], i, spec[2], type(v))
      end
      out[spec[1]] = v
    end
    return out
  end
  if n > 0 then util.raise("%s: %d argument(s) after the options table", name, n) end
  return util.check_options(name, o, keys)
end

-- Words a boolean flag takes after it or after `=`, as `accel-lua launch`
-- reads them (host/cmd_launch.c): true/false, yes/no, 1/0, on/off, any case.
local BOOL_WORDS = {["true"] = true, yes = true, ["1"] = true, on = true,
  ["false"] = false, no = false, ["0"] = false, off = false}

-- A flag's name (dashes read as underscores, -h as help) and its inline
-- value (--name=VALUE); nil when `a` is no flag spelling.
local function flag_name(a)
  if a == "-h" then return "help" end
  local name, inline = a:match("^%-%-([%w_%-]+)=(.*)$")
  name = name or a:match("^%-%-([%w_%-]+)$")
  return name and (name:gsub("%-", "_")), inline
end

-- A boolean flag at argv[i]: alone it is true; a boolean word inline or as
-- the next argument (then used up) sets it. -> value, last index used.
local function bool_value(argv, i, name, inline, fail)
  local word = inline
  if word == nil and BOOL_WORDS[(argv[i + 1] or ""):lower()] ~= nil then i, word = i + 1, argv[i + 1] end
  if word == nil then return true, i end
  local b = BOOL_WORDS[word:lower()]
  if b == nil then fail("--%s: '%s' is not a boolean (true or false)", name, word) end
  return b, i
end

-- A flag with a value (inline or the next argument) -> value, last index used.
local function flag_value(argv, i, name, kind, inline, fail)
  if kind == "bool" then return bool_value(argv, i, name, inline, fail) end
  local v = inline
  if v == nil then i, v = i + 1, argv[i + 1] end
  if v == nil then fail("missing value: --%s", name) end
  if kind == "int" then
    local n = tonumber(v)
    if n == nil or n ~= math.floor(n) then fail("--%s: expected an integer, got %q", name, v) end
    v = n
  end
  return v, i
end

-- The command line of a subcommand written in Lua (estimate-memory,
-- merge-weights): argv -> {name = value}, the
-- positional arguments in order. kinds[name] = "bool" | "int" | "string";
-- --name VALUE and --name=VALUE alike, dashes read as underscores, -h as
-- --help (give kinds.help). fail(fmt, ...) reports a usage error in
-- docs/cli.md's words ("unknown flag: --x", "missing value: --x") and must
-- not return.
function util.parse_flags(argv, kinds, fail)
  local o, pos, i = {}, {}, 1
  while i <= #argv do
    local a = argv[i]
    local name, inline = flag_name(a)
    if name and kinds[name] then
      o[name], i = flag_value(argv, i, name, kinds[name], inline, fail)
    elseif a:sub(1, 1) == "-" then
      fail("unknown flag: %s", a)
    else
      pos[#pos + 1] = a
    end
    i = i + 1
  end
  return o, pos
end

-- -h or --help anywhere on the command line (as argparse takes it).
function util.help_asked(argv)
  for _, a in ipairs(argv) do
    if a == "-h" or a == "--help" then return true end
  end
  return false
end

-- The keys of t, in the order of their tostring (a stable order for
-- messages and files whatever the key types).
function util.sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

-- A float as Python's repr writes it: the fewest digits that read back as
-- the same double ("0.30000000000000004", "0.1"), positional from 1e-4 up
-- to 1e16 with ".0" when whole ("1.0"), scientific otherwise ("1e-05",
-- "1.5e+16"); integers (Lua 5.4's integer subtype) as they are.
function util.py_repr_number(v)
  if math.type and math.type(v) == "integer" then return ("%d"):format(v) end
  -- LuaJIT has no integer subtype: a whole number there prints as an integer
  if not math.type and v == math.floor(v) and math.abs(v) < 2 ^ 53 then return ("%d"):format(v) end
  if v ~= v then return "nan" end
  if v == math.huge or v == -math.huge then return v > 0 and "inf" or "-inf" end
  if v == 0 then return 1 / v < 0 and "-0.0" or "0.0" end
  local digits, exp
  for d = 1, 17 do
    local e = ("%." .. (d - 1) .. "e"):format(v)
    if tonumber(e) == v then
      digits, exp = e:match("^-?(%d[%.%d]*)e([-+]%d+)$")
      break
    end
  end
  digits, exp = digits:gsub("%.", ""), tonumber(exp)
  local sign = v < 0 and "-" or ""
  if exp < -4 or exp >= 16 then
    local mant = #digits > 1 and (digits:sub(1, 1) .. "." .. digits:sub(2)) or digits
    return ("%s%se%s%02d"):format(sign, mant, exp < 0 and "-" or "+", math.abs(exp))
  end
  if exp < 0 then return sign .. "0." .. ("0"):rep(-exp - 1) .. digits end
  if #digits <= exp + 1 then return sign .. digits .. ("0"):rep(exp + 1 - #digits) .. ".0" end
  return sign .. digits:sub(1, exp + 1) .. "." .. digits:sub(exp + 2)
end

return util
