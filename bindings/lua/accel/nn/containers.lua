-- accel.nn.containers: Sequential, ModuleList and ModuleDict, and
-- ParameterList / ParameterDict (the same over parameters: entries
-- registered as "0", "1", ... or by name, so state_dict keys are PyTorch's
-- "pl.0"; a plain tensor given is made a Parameter, as PyTorch does).
--
-- Positions are 1-based (seq[1] is the first layer, seq[-1] the last) while
-- the registered names are PyTorch's "0", "1", ... so state_dict keys match
-- ("0.weight"). ipairs(seq), #seq and pairs(seq) work (Lua 5.4 honours
-- __index/__len/__pairs; LuaJIT has no __pairs).
-- A ModuleDict built from a hash table orders its keys by name (Lua tables
-- have no insertion order); pass a list of {name, module} pairs to choose.
local accel = require("accel")
local base = require("accel.nn.module")

local raise, is_module, export_class = base.raise, base.is_module, base.export_class

local M = {}

-- Resolve a 1-based (or negative) position in a list of n entries.
local function position(n, i, what)
  if math.floor(i) ~= i then raise("%s: index must be an integer, got %s", what, tostring(i)) end
  local j = i < 0 and n + i + 1 or i
  if i == 0 or j < 1 or j > n then
    raise("%s: index %d is out of range (%d modules; positions are 1-based)", what, i, n)
  end
  return j
end

-- Rename the children "0".."n-1" after an insertion or removal.
local function renumber(self, mods)
  for _, name in ipairs(self._modules.keys) do self._modules.vals[name] = nil end
  self._modules.keys, self._modules.pos = {}, {}
  for i, m in ipairs(mods) do base.reg_set(self._modules, tostring(i - 1), m) end
end

local function module_list(self)
  local out = {}
  for i, name in ipairs(self._modules.keys) do out[i] = self._modules.vals[name] end
  return out
end

local function check_module(m, what)
  if not is_module(m) then raise("%s: expected a Module, got %s", what, accel.is_tensor(m) and "a tensor" or type(m)) end
  return m
end

-- A ModuleDict's entries as {name, module} pairs in its order.
local function dict_pairs(dict)
  local out = {}
  for i, name in ipairs(dict._modules.keys) do out[i] = {name, dict._modules.vals[name]} end
  return out
end

-- The modules of a list container (ModuleList or Sequential) as a plain
-- list, as PyTorch iterates one passed where a list of modules fits; other
-- values unchanged.
local function list_of(src)
  if is_module(src) and (src:isinstance(M.ModuleList) or src:isinstance(M.Sequential)) then return module_list(src) end
  return src
end

-- ---- shared list behaviour (Sequential and ModuleList) ----

local function add_list_methods(cls, what)
  cls.__len = function(self) return #self._modules.keys end
  cls.__children = function(self) return ipairs(module_list(self)) end

  -- seq[i]: nil past the end (so ipairs stops), an error for 0
  cls.__getitem = function(self, i)
    local keys = self._modules.keys
    local n = #keys
    if i == 0 or math.floor(i) ~= i then position(n, i, what) end
    local j = i < 0 and n + i + 1 or i
    if j < 1 or j > n then return nil end
    return self._modules.vals[keys[j]]
  end

  cls.__setitem = function(self, i, m)
    local keys = self._modules.keys
    local j = position(#keys, i, what)
    self._modules.vals[keys[j]] = check_module(m, what)
  end

  function cls:append(m)
    base.reg_set(self._modules, tostring(#self._modules.keys), check_module(m, what .. ":append"))
    return self
  end

  function cls:extend(mods)
    mods = list_of(mods)
    if is_module(mods) or type(mods) ~= "table" then
      raise("%s:extend: expected a list of modules (or a ModuleList / Sequential), got %s", what,
        is_module(mods) and mods:_get_name() or type(mods))
    end
    for _, m in ipairs(mods) do self:append(m) end
    return self
  end

  -- insert(i, m): m becomes entry i (1-based); i = #self + 1 appends.
  function cls:insert(i, m)
    check_module(m, what .. ":insert")
    local mods = module_list(self)
    local n = #mods
    local j = (i < 0 and n + i + 1 or i)
    if math.floor(i) ~= i or j < 1 or j > n + 1 then raise("%s:insert: index %s is out of range", what, tostring(i)) end
    table.insert(mods, j, m)
    renumber(self, mods)
    return self
  end

  -- pop(i): removes and returns entry i (default: the last).
  function cls:pop(i)
    local mods = module_list(self)
    local j = position(#mods, i or -1, what .. ":pop")
    local m = table.remove(mods, j)
    renumber(self, mods)
    return m
  end
end

-- Add modules from a list, or {name, module} pairs, or a name -> module map,
-- or another ModuleDict.
local function add_from(self, src, what)
  if is_module(src) and src:isinstance(M.ModuleDict) then src = dict_pairs(src) end
  if is_module(src) then raise("%s: expected a table of modules, got a single Module", what) end
  if type(src) ~= "table" then raise("%s: expected a table of modules, got %s", what, type(src)) end
  if #src > 0 then
    for _, e in ipairs(src) do
      if type(e) == "table" and not is_module(e) then self:register_module(e[1], check_module(e[2], what))
      else self:append(check_module(e, what)) end
    end
    return
  end
  local names = {}
  for k in pairs(src) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do self:register_module(k, check_module(src[k], what)) end
end

-- ---- Sequential ----

local Sequential = export_class(M, "Sequential")
add_list_methods(Sequential, "Sequential")

-- Sequential(m1, m2, ...) or Sequential({{"name", m}, ...}) / Sequential({name = m})
function Sequential:init(...)
  local n = select("#", ...)
  local first = ...
  if n == 1 and type(first) == "table" and not is_module(first) then
    add_from(self, first, "Sequential")
    return
  end
  for i = 1, n do self:append(check_module((select(i, ...)), "Sequential")) end
end

function Sequential:forward(input)
  local r = self._modules
  for _, name in ipairs(r.keys) do input = r.vals[name](input) end
  return input
end

-- ---- ModuleList ----

local ModuleList = export_class(M, "ModuleList")
add_list_methods(ModuleList, "ModuleList")

function ModuleList:init(mods)
  mods = list_of(mods)
  if mods ~= nil then
    if type(mods) ~= "table" or is_module(mods) then raise("ModuleList: expected a list of modules") end
    for _, m in ipairs(mods) do self:append(check_module(m, "ModuleList")) end
  end
end

-- Printed as PyTorch's: a run of children that print the same is one line,
-- "(0-11): 12 x Block(...)", numbered by position from 0.
function ModuleList:_child_lines()
  local reprs, lines = {}, {}
  for i, m in ipairs(module_list(self)) do reprs[i] = tostring(m) end
  local first = 1
  while first <= #reprs do
    local last = first
    while last < #reprs and reprs[last + 1] == reprs[first] do last = last + 1 end
    local head = last > first and ("(%d-%d): %d x "):format(first - 1, last - 1, last - first + 1)
      or ("(%d): "):format(first - 1)
    lines[#lines + 1] = base.add_indent(head .. reprs[first], 2)
    first = last + 1
  end
  return lines
end

function ModuleList:forward()
  raise("ModuleList has no forward: iterate over it (for i, layer in ipairs(list) do ... end)")
end

-- ---- ModuleDict ----

local ModuleDict = export_class(M, "ModuleDict")

function ModuleDict:init(mods)
  if mods ~= nil then add_from(self, mods, "ModuleDict") end
end

ModuleDict.__len = function(self) return #self._modules.keys end
ModuleDict.__children = function(self) return self:named_children() end

function ModuleDict:keys()
  local out = {}
  for i, k in ipairs(self._modules.keys) do out[i] = k end
  return out
end

function ModuleDict:values() return module_list(self) end

-- items(): iterator of name, module in order.
function ModuleDict:items() return self:named_children() end

function ModuleDict:update(mods) add_from(self, mods, "ModuleDict:update") return self end

function ModuleDict:pop(key)
  local m = self._modules.vals[key]
  if m == nil then raise('ModuleDict:pop: no key "%s"', tostring(key)) end
  base.reg_remove(self._modules, key)
  return m
end

function ModuleDict:contains(key) return self._modules.vals[key] ~= nil end

function ModuleDict:forward()
  raise("ModuleDict has no forward: index it (dict.name or dict[name])")
end

-- ---- ParameterList / ParameterDict ----

-- t as a registered parameter: a Parameter as it is, a tensor made one.
local function as_parameter(t, what)
  if base.is_parameter(t) then return t end
  if not accel.is_tensor(t) then raise("%s: expected a Parameter or a tensor, got %s", what, type(t)) end
  return base.Parameter(t)
end

local function shape_text(t)
  local dims = {}
  for i = 1, t:dim() do dims[i] = tostring(t:size(i)) end
  return table.concat(dims, "x")
end

-- "  (key): Parameter containing: [accel.float32 of size 3x4]" per entry,
-- as PyTorch's extra_repr of these containers prints them.
local function parameter_lines(self, shown_key)
  local lines = {}
  for i, name in ipairs(self._parameters.keys) do
    local p = self._parameters.vals[name]
    lines[i] = ("  (%s): Parameter containing: [%s of size %s]"):format(shown_key(name, i), tostring(p.dtype),
      shape_text(p))
  end
  return table.concat(lines, "\n")
end

local ParameterList = export_class(M, "ParameterList")

-- ParameterList([{p1, p2, ...}])
function ParameterList:init(params)
  if params ~= nil then
    if type(params) ~= "table" or accel.is_tensor(params) or is_module(params) then
      raise("ParameterList: expected a list of parameters, got %s", accel.is_tensor(params) and "a tensor" or type(params))
    end
    for _, p in ipairs(params) do self:append(p) end
  end
end

ParameterList.__len = function(self) return #self._parameters.keys end
ParameterList.__children = function(self)
  local list = {}
  for i, name in ipairs(self._parameters.keys) do list[i] = self._parameters.vals[name] end
  return ipairs(list)
end

-- pl[i] (1-based, negative from the end): nil past the end, so ipairs stops
ParameterList.__getitem = function(self, i)
  local keys = self._parameters.keys
  if i == 0 or math.floor(i) ~= i then position(#keys, i, "ParameterList") end
  local j = i < 0 and #keys + i + 1 or i
  if j < 1 or j > #keys then return nil end
  return self._parameters.vals[keys[j]]
end

ParameterList.__setitem = function(self, i, p)
  local keys = self._parameters.keys
  self:register_parameter(keys[position(#keys, i, "ParameterList")], as_parameter(p, "ParameterList"))
end

function ParameterList:append(p)
  self:register_parameter(tostring(#self._parameters.keys), as_parameter(p, "ParameterList:append"))
  return self
end

function ParameterList:extend(params)
  if type(params) ~= "table" or accel.is_tensor(params) then
    raise("ParameterList:extend: expected a list of parameters, got %s", type(params))
  end
  for _, p in ipairs(params) do self:append(p) end
  return self
end

function ParameterList:extra_repr()
  return parameter_lines(self, function(_, i) return tostring(i - 1) end)
end

function ParameterList:forward() raise("ParameterList has no forward: index it (pl[1]) or iterate over it") end

local ParameterDict = export_class(M, "ParameterDict")

-- ParameterDict([{name = p} | {{name, p}, ...}]): a hash table's names sorted (as PyTorch sorts a dict's)
function ParameterDict:init(params)
  if params ~= nil then self:update(params) end
end

ParameterDict.__len = function(self) return #self._parameters.keys end
ParameterDict.__children = function(self) return self:items() end

function ParameterDict:update(params)
  if type(params) ~= "table" or accel.is_tensor(params) then
    raise("ParameterDict:update: expected a table of parameters, got %s", type(params))
  end
  if #params > 0 then
    for _, e in ipairs(params) do self:register_parameter(e[1], as_parameter(e[2], "ParameterDict")) end
    return self
  end
  local names = {}
  for k in pairs(params) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do self:register_parameter(k, as_parameter(params[k], "ParameterDict")) end
  return self
end

function ParameterDict:keys()
  local out = {}
  for i, k in ipairs(self._parameters.keys) do out[i] = k end
  return out
end

function ParameterDict:values()
  local out = {}
  for i, k in ipairs(self._parameters.keys) do out[i] = self._parameters.vals[k] end
  return out
end

-- items(): iterator of name, parameter in order
function ParameterDict:items()
  local keys, i = self:keys(), 0
  return function()
    i = i + 1
    if keys[i] then return keys[i], self._parameters.vals[keys[i]] end
  end
end

function ParameterDict:contains(key) return self._parameters.vals[key] ~= nil end

function ParameterDict:pop(key)
  local p = self._parameters.vals[key]
  if p == nil then raise('ParameterDict:pop: no key "%s"', tostring(key)) end
  base.reg_remove(self._parameters, key)
  return p
end

function ParameterDict:extra_repr()
  return parameter_lines(self, function(name) return name end)
end

function ParameterDict:forward() raise("ParameterDict has no forward: index it (pd.name or pd[name])") end

return M
