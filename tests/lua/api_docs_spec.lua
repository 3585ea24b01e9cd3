-- api_docs_spec.lua: every public name of the live API has an entry in its
-- docs/api/*.md page. The names come from the running library (accel's
-- fields with the lazily loaded exports forced, a tensor's method table
-- behind its metatable's __index, nn's classes and their methods,
-- nn.functional/init/utils, optim and lr_scheduler, data, the Accelerator
-- and its configuration classes, tracking, progress, utils, models.gpt2,
-- dist/comm/ddp/shard), so a function added without documentation fails
-- here. A name is "documented" when its page has a heading naming it or an
-- inline code span that calls it (`accel.zeros(`, `t:view(`, `name(`, `name{`) or
-- names it as a field (`t.shape`, `accel.float32`, `__add`). Fenced code
-- blocks do not count. The check is per page: a name documented once on
-- its page covers every class of that page that has it.
-- Three lists are not tables the library exposes, so they are read where
-- they are defined: accel.c's lazy exports table (accel.Accelerator, ...,
-- each forced to load), accelerator.lua's computed fields (props), and the
-- tensor properties of tensor_lua.c's push_property (listed below and
-- checked to exist on a tensor).
-- Names starting with "_" are private; ALLOW below lists the few public
-- names that are internals, each with its reason.
-- Also: no markdown table in docs/ or docs/api/ is split by a line between
-- its rows (the rows after it would lose their header).
local accel = require("accel")
local support = dofile("tests/lua/support.lua")

local DOCS = "docs/api/"

-- page -> name -> reason it needs no entry
local ALLOW = {
  ["progress.md"] = {
    draw_bar = "drawing helper of the bar (called by refresh)",
    emit = "drawing helper of the bar (writes one rendered line)",
    plain_due = "drawing helper: whether plain mode prints now",
    plain_line = "drawing helper: renders the plain-mode line",
    terminal_line = "drawing helper: renders the terminal line",
    prefix = "drawing helper: renders the description prefix",
  },
  ["accelerator.md"] = {
    REFUSED_MEMBERS = "the table behind the refusal errors, listed in docs/accelerator.md's prose",
  },
}

-- The set of names a markdown page documents.
local function documented(path)
  local text = support.read_file(path)
  text = text:gsub("\n```.-\n```", "\n") -- fenced examples do not count
  local names = {}
  local function add_span(span)
    for name in span:gmatch("([%a_][%w_]*)%s*[%({]") do names[name] = true end
    local last = span:match("([%a_][%w_]*)%s*$")
    if last then names[last] = true end
  end
  for line in (text .. "\n"):gmatch("(.-)\n") do
    if line:match("^#+%s") then
      for word in line:gmatch("[%a_][%w_]*") do names[word] = true end
    end
  end
  for span in text:gmatch("`([^`\n]+)`") do add_span(span) end
  return names
end

-- The public string keys of t (functions and other values alike).
local function public_keys(t, out, skip)
  for k in pairs(t) do
    if type(k) == "string" and k:sub(1, 1) ~= "_" and not (skip and skip[k]) then out[k] = true end
  end
  return out
end

-- Methods a class table offers itself (not those it inherits).
local function class_methods(cls, out)
  for k, v in pairs(cls) do
    if type(k) == "string" and k:sub(1, 1) ~= "_" and type(v) == "function" then out[k] = true end
  end
  return out
end

local CTOR_HOOKS = {init = true, super = true, new = true, extend = true}

local function classes_and_methods(mod, out)
  for name, v in pairs(mod) do
    if type(name) == "string" and name:sub(1, 1) ~= "_" then
      out[name] = true
      if type(v) == "table" and rawget(v, "__name") then
        for m in pairs(class_methods(v, {})) do
          if not CTOR_HOOKS[m] then out[m] = true end
        end
      end
    end
  end
  return out
end

local function metamethods_of(mt, out)
  for k in pairs(mt) do
    if type(k) == "string" and k:match("^__") and k ~= "__index" and k ~= "__name" then out[k] = true end
  end
  return out
end

-- page -> function returning the set of names it must document
local PAGES = {}

PAGES["accel.md"] = function()
  local names = {}
  for k, v in pairs(accel) do
    local dtype = type(v) == "table" and rawget(v, "__dtype") ~= nil
    if type(k) == "string" and k:sub(1, 1) ~= "_" and (type(v) ~= "table" or dtype) then names[k] = true end
  end
  -- the names accel.c's exports table loads on first use (accel.Accelerator, ...)
  local src = support.read_file("bindings/accel.c")
  local n = 0
  for name, module in src:gmatch('{"([%w_]+)", "(accel%.[%w_.]+)"}') do
    assert(accel[name] ~= nil, "accel." .. name .. " (from " .. module .. ") loads")
    names[name] = true
    n = n + 1
  end
  assert(n > 0, "accel.c's exports table was found")
  return names
end

PAGES["tensor.md"] = function()
  local t = accel.zeros(2)
  local mt = getmetatable(t)
  local _, methods = debug.getupvalue(mt.__index, 1)
  assert(type(methods) == "table", "the tensor method table is __index's first upvalue")
  local names = public_keys(methods, {})
  metamethods_of(mt, names)
  -- properties answered by __index itself (bindings/tensor_lua.c push_property)
  for _, p in ipairs({"shape", "dtype", "device", "data", "grad", "grad_fn", "requires_grad", "is_leaf",
                      "is_cuda", "ndim", "T"}) do
    assert(t[p] ~= nil or p == "grad" or p == "grad_fn", "tensor property " .. p)
    names[p] = true
  end
  metamethods_of(getmetatable(t.shape), names)
  return names
end

PAGES["autograd.md"] = function()
  local names = public_keys(accel.autograd, {})
  for _, k in ipairs({"no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "inference_mode",
                      "is_inference_mode_enabled"}) do names[k] = true end
  return names
end

PAGES["nn.md"] = function()
  local nn = accel.nn
  local names = classes_and_methods(nn, {})
  class_methods(nn.Module, names)
  names.init = nil -- the constructor body a subclass defines (shown in the class idiom)
  public_keys(nn.functional, names)
  public_keys(nn.init, names)
  public_keys(nn.utils, names)
  return names
end

PAGES["optim.md"] = function()
  local names = classes_and_methods(accel.optim, {})
  classes_and_methods(accel.optim.lr_scheduler, names)
  return names
end

PAGES["data.md"] = function()
  local data = accel.data
  local names = classes_and_methods(data, {})
  class_methods(data.DataLoader, names)
  for k in pairs(CTOR_HOOKS) do names[k] = nil end
  names.new = true -- DataLoader.new is public API (DataLoader(...) calls it)
  local ds = data.TensorDataset(accel.zeros(3))
  class_methods(getmetatable(ds), names) -- (its __index is a function: ds[i] is an error)
  return names
end

PAGES["accelerator.md"] = function()
  local acc = require("accel.accelerator")
  local names = {}
  for k in pairs(acc) do
    if type(k) == "string" and k:sub(1, 1) ~= "_" and not k:match("_class$") then names[k] = true end
  end
  class_methods(acc.Accelerator_class, names)
  names.extend = nil
  -- the fields its __index computes (accelerator.lua's props table, read
  -- from the source since the table is local to the module)
  local src = support.read_file("bindings/lua/accel/accelerator.lua")
  local n = 0
  for name in src:gmatch("\nfunction props%.([%w_]+)") do names[name], n = true, n + 1 end
  local list = src:match("for _, k in ipairs%((%b{})%) do%s+props%[k%]")
  assert(list and n > 0, "accelerator.lua's props definitions were found")
  for name in list:gmatch('"([%w_]+)"') do names[name] = true end
  for k, cls in pairs(require("accel.plugins")) do
    if type(k) == "string" and k:match("_class$") then class_methods(cls, names) end
  end
  local prepared = require("accel.prepared")
  for _, cls in ipairs({"AcceleratedOptimizer", "AcceleratedScheduler", "DataLoaderShard"}) do
    names[cls] = true
    class_methods(prepared[cls], names)
  end
  names.LocalSGD = true
  class_methods(require("accel.local_sgd").LocalSGD_class, names)
  assert(require("accel.state").GradientState, "accel.state.GradientState exists")
  names.GradientState = true
  return names
end

PAGES["tracking.md"] = function()
  local tracking = require("accel.tracking")
  local names = public_keys(tracking, {})
  class_methods(tracking.GeneralTracker, names)
  names.extend = true
  return names
end

PAGES["progress.md"] = function()
  local progress = require("accel.progress")
  local names = public_keys(progress, {})
  local f = assert(io.open("/dev/null", "w"))
  local bar = progress.bar(1, {file = f, disable = true})
  class_methods(getmetatable(bar).__index, names)
  metamethods_of(getmetatable(bar), names)
  f:close()
  return names
end

PAGES["utils.md"] = function() return public_keys(require("accel.utils"), {}) end

PAGES["models.md"] = function()
  local gpt2 = require("accel.models.gpt2")
  local names = classes_and_methods(gpt2, {})
  class_methods(getmetatable(gpt2.GPT2Config()).__index, names)
  names.gpt2 = true
  return names
end

PAGES["distributed.md"] = function()
  local names = public_keys(require("accel.dist"), {})
  public_keys(require("accel.dist").ReduceOp, names)
  local comm = require("accel.comm")
  public_keys(comm, names)
  class_methods(getmetatable(comm.create()).__index, names)
  local ddp = require("accel.ddp")
  public_keys(ddp, names)
  local reducer = ddp.Reducer({accel.nn.Parameter(accel.ones(2))})
  class_methods(getmetatable(reducer).__index, names)
  reducer:close()
  local shard = require("accel.shard")
  public_keys(shard, names)
  class_methods(shard.Engine_class, names)
  for _, k in ipairs({"DistributedDataParallelKwargs_class", "Engine_class"}) do names[k] = nil end
  return names
end

-- Every embedded module accel.X is listed in the index.
local function modules_in_index()
  local names = {}
  for k in pairs(package.preload) do
    local top = k:match("^accel%.([%w_]+)$")
    if top then names[top] = true end
  end
  return names
end

local function missing(page, names)
  local have = documented(DOCS .. page)
  local allow = ALLOW[page] or {}
  local out = {}
  for name in pairs(names) do
    if not have[name] and not allow[name] then out[#out + 1] = name end
  end
  table.sort(out)
  return out
end

-- "file:line" of each table row of a markdown page that follows other text
-- (outside fenced blocks) without a header of its own: a paragraph or a
-- blank line between two rows splits the table, and the rows after it lose
-- their header (they render as plain text).
local function headless_rows(path)
  local out, fenced, prev = {}, false, "text"
  local lines = {}
  for line in (support.read_file(path) .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
  for i, line in ipairs(lines) do
    if line:match("^```") then fenced = not fenced end
    local row = not fenced and line:match("^%s*|") ~= nil
    local header = row and (lines[i + 1] or ""):match("^%s*|%s*:?%-%-%-") ~= nil
    if row and prev == "gap" and not header then out[#out + 1] = path .. ":" .. i end
    if row then prev = "row" elseif prev == "row" or prev == "gap" then prev = "gap" end
    if line:match("^#") then prev = "text" end
  end
  return out
end

describe("docs/api", function()
  it("no table's rows are split by other lines (docs/*.md, docs/api/*.md)", function()
    local out = {}
    for path in support.command_output("ls docs/*.md docs/api/*.md"):gmatch("[^\n]+") do
      for _, where in ipairs(headless_rows(path)) do out[#out + 1] = where end
    end
    assert(#out == 0, "table rows after a break in their table, without a header: " .. table.concat(out, ", "))
  end)

  for page, collect in pairs(PAGES) do
    it(page .. " documents every public name", function()
      local out = missing(page, collect())
      assert(#out == 0, DOCS .. page .. " lacks entries for: " .. table.concat(out, ", "))
    end)
  end

  it("README.md indexes every accel module", function()
    local text = support.read_file(DOCS .. "README.md")
    local out = {}
    for name in pairs(modules_in_index()) do
      if not text:find("`accel." .. name .. "`", 1, true) then out[#out + 1] = name end
    end
    table.sort(out)
    assert(#out == 0, DOCS .. "README.md does not list: accel." .. table.concat(out, ", accel."))
  end)

  it("every allow-listed name still exists (no stale exemptions)", function()
    for page, allow in pairs(ALLOW) do
      local names = PAGES[page]()
      for name in pairs(allow) do
        assert(names[name], page .. ": allow-listed name " .. name .. " is no longer in the API")
      end
    end
  end)

  it("a name the pages do not mention is reported", function()
    local out = missing("utils.md", {checkpoint = true, surely_not_documented_fn = true})
    assert.same({"surely_not_documented_fn"}, out)
  end)
end)
