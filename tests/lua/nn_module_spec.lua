-- nn.Module: the class idiom, registration (order and PyTorch key names),
-- state_dict / load_state_dict (round trip and strict errors), train/eval,
-- apply, zero_grad, to(), hooks, containers and printing.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["Sequential is indexable (1-based), has a length, appends and inserts"] = support.NO_LEN,
  ["ModuleList holds modules without a forward"] = support.NO_LEN,
  ["ModuleDict keeps the order given as pairs, sorts a hash table"] = support.NO_LEN,
  ["ModuleList, extend, ModuleDict and update take another container, as PyTorch's"] = support.NO_LEN,
  ["extend / init / forward / __call"] = support.NO_FLOAT_SUBTYPE,
  ["pairs() over a container gives its children in order; over a layer, its raw fields"] =
    "__pairs (LuaJIT without 5.2 compatibility ignores it)",
})
local nn = accel.nn

local f64 = accel.float64
local shape_of, max_abs_diff = support.shape_of, support.max_abs_diff

local function keys_of(iter)
  local out = {}
  for name in iter do out[#out + 1] = name end
  return out
end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- the GPT-2-like tree used for key names: h.<i>.attn.c_attn.{weight,bias}
local Attn = nn.Module:extend("Attn")
function Attn:init(d) self.c_attn = nn.Linear(d, 3 * d) end
function Attn:forward(x) return self.c_attn(x) end

local Block = nn.Module:extend("Block")
function Block:init(d)
  self.ln_1 = nn.LayerNorm(d)
  self.attn = Attn(d)
end
function Block:forward(x) return self.attn(self.ln_1(x)) end

local GPT = nn.Module:extend("GPT")
function GPT:init(d, n)
  self.wte = nn.Embedding(10, d)
  local blocks = {}
  for i = 1, n do blocks[i] = Block(d) end
  self.h = nn.ModuleList(blocks)
  self.ln_f = nn.LayerNorm(d)
end

describe("nn.Module class idiom", function()
  before_each(function() accel.set_seed(0) end)

  it("extend / init / forward / __call", function()
    local Net = nn.Module:extend("Net")
    function Net:init(d_in, d_out)
      self.fc = nn.Linear(d_in, d_out)
      self.scale = nn.Parameter(accel.full({1}, 2.0))
      self.note = "plain"
    end
    function Net:forward(x) return self.fc(x) * self.scale end
    local net = Net(4, 2)
    assert.equals("plain", net.note)
    assert.is_true(net:isinstance(Net))
    assert.is_true(net:isinstance(nn.Module))
    assert.is_false(net:isinstance(nn.Linear))
    assert.is_true(nn.is_module(net))
    assert.is_false(nn.is_module({}))
    local x = accel.randn(3, 4)
    local y = net(x)
    local ref = (x:matmul(net.fc.weight:t()) + net.fc.bias) * 2
    assert.is_true(max_abs_diff(y, ref) < 1e-6)
    assert.equals(2, #net:parameters() - 1) -- fc.weight, fc.bias, scale
  end)

  it("a subclass of a subclass calls its parent's init", function()
    local Base = nn.Module:extend("Base")
    function Base:init(d) self.fc = nn.Linear(d, d) end
    function Base:forward(x) return self.fc(x) end
    local Child = Base:extend("Child")
    function Child:init(d)
      Child.super.init(self, d)
      self.extra = nn.Linear(d, 1)
    end
    function Child:forward(x) return self.extra(Base.forward(self, x)) end
    local c = Child(3)
    assert.same({"fc.weight", "fc.bias", "extra.weight", "extra.bias"}, keys_of(c:named_parameters()))
    assert.is_true(c:isinstance(Base))
    assert.same({2, 1}, shape_of(c(accel.randn(2, 3))))
    assert.equals("Child", c:_get_name())
  end)

  it("an instance's forward can be replaced and restored (plain field over the class method)", function()
    local l = nn.Linear(2, 2)
    local x = accel.randn(1, 2)
    local plain = l(x)
    local orig = l.forward
    l.forward = function(self, a) return orig(self, a) * 0 end
    assert.equals(0, l(x):abs():max():item())
    l.forward = nil
    assert.equals(0, max_abs_diff(l(x), plain))
    assert.is_true(rawequal(l.forward, nn.Linear.forward))
  end)

  it("a module without forward says so", function()
    local Empty = nn.Module:extend("Empty")
    local ok, err = pcall(function() return Empty()(1) end)
    assert.is_false(ok)
    assert.matches('Module %[Empty%] is missing the required "forward" function', err)
  end)

  it("nn.Parameter is a leaf sharing storage and requiring grad", function()
    local t = accel.zeros(3)
    local p = nn.Parameter(t)
    assert.is_true(p.requires_grad)
    assert.is_true(p.is_leaf)
    assert.is_false(t.requires_grad)
    assert.is_true(nn.is_parameter(p))
    assert.is_false(nn.is_parameter(t))
    t:fill_(5)
    assert.equals(5, p[2]:item())
    assert.is_false(nn.Parameter(t, false).requires_grad)
    assert.is_false(nn.Parameter(t, {requires_grad = false}).requires_grad)
  end)
end)

describe("nn.Module registration", function()
  before_each(function() accel.set_seed(0) end)

  it("keeps registration order for parameters, buffers and submodules", function()
    local M = nn.Module:extend("M")
    function M:init()
      self.z = nn.Parameter(accel.zeros(1))
      self.b = nn.Linear(2, 2)
      self.a = nn.Parameter(accel.zeros(2))
      self:register_buffer("running", accel.zeros(3))
      self:register_buffer("cache", accel.zeros(1), {persistent = false})
      self.c = nn.Linear(2, 1, {bias = false})
    end
    local m = M()
    assert.same({"z", "a", "b.weight", "b.bias", "c.weight"}, keys_of(m:named_parameters()))
    assert.same({"running", "cache"}, keys_of(m:named_buffers()))
    assert.same({"b", "c"}, keys_of(m:named_children()))
    assert.same({"", "b", "c"}, keys_of(m:named_modules()))
    -- state_dict: own parameters, persistent buffers, then children
    assert.same({"z", "a", "running", "b.weight", "b.bias", "c.weight"}, m:state_dict_keys())
    assert.same({"a", "b.bias", "b.weight", "c.weight", "running", "z"}, sorted_keys(m:state_dict()))
    assert.equals(5, #m:parameters())
    assert.equals(2, #m:buffers())
    assert.equals(2, #m:children())
    assert.equals(3, #m:modules())
    assert.is_nil(m.c.bias)
  end)

  it("uses PyTorch key names for Sequential and ModuleList", function()
    local seq = nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 3))
    assert.same({"0.weight", "0.bias", "2.weight", "2.bias"}, keys_of(seq:named_parameters()))
    local gpt = GPT(4, 4)
    local names = keys_of(gpt:named_parameters())
    assert.equals("wte.weight", names[1])
    assert.equals("h.0.ln_1.weight", names[2])
    assert.equals("h.3.attn.c_attn.bias", names[#names - 2])
    assert.equals("ln_f.bias", names[#names])
    assert.equals(1 + 4 * 4 + 2, #names)
    assert.is_true(rawequal(gpt:get_parameter("h.3.attn.c_attn.bias"), gpt.h[4].attn.c_attn.bias))
    assert.is_true(rawequal(gpt:get_submodule("h.3.attn"), gpt.h[4].attn))
    assert.is_true(nn.is_module(gpt.h["3"]))
  end)

  it("takes PyTorch's positional recurse / prefix / remove_duplicate (torch 2.15 lists)", function()
    local net = nn.Sequential(nn.Linear(2, 2), nn.BCEWithLogitsLoss({pos_weight = accel.ones(2)}))
    net.own = nn.Parameter(accel.ones(1))
    net:register_buffer("b", accel.zeros(1))
    -- torch: len(parameters(False)) 1, len(buffers(False)) 1, 3 and 2 recursively
    assert.equals(1, #net:parameters(false))
    assert.is_true(rawequal(net.own, net:parameters(false)[1]))
    assert.equals(1, #net:buffers(false))
    assert.equals(3, #net:parameters(true))
    assert.equals(2, #net:buffers(true))
    assert.same({"own"}, keys_of(net:named_parameters("", false)))
    assert.same({"m.b", "m.1.pos_weight"}, keys_of(net:named_buffers("m", true)))
    assert.same({"m.b"}, keys_of(net:named_buffers("m", false)))
    net[1].tied = net.own
    assert.same({"own", "0.weight", "0.bias", "0.tied"}, keys_of(net:named_parameters("", true, false)))
    assert.equals(1, #net:parameters({recurse = false}))
  end)

  it("refuses a positional value of the wrong type or too many, naming the method and the argument", function()
    local net = nn.Sequential(nn.Linear(2, 2))
    support.expect_error(function() net:parameters("no") end, "parameters: argument 'recurse' (position 1) must be boolean, not string")
    support.expect_error(function() net:named_parameters(false) end,
      "named_parameters: argument 'prefix' (position 1) must be string, not boolean")
    support.expect_error(function() net:named_buffers("", 0) end,
      "named_buffers: argument 'recurse' (position 2) must be boolean, not number")
    support.expect_error(function() net:buffers(false, true) end, "buffers: takes at most 1 positional argument, got 2")
    support.expect_error(function() net:parameters({recurse = false}, true) end, "parameters: 1 argument(s) after the options table")
    support.expect_error(function() net:parameters({prefix = "x"}) end, "parameters: unknown option 'prefix' (options: recurse)")
  end)

  it("lists a shared parameter once in parameters() but under every key in state_dict", function()
    local Tied = nn.Module:extend("Tied")
    function Tied:init()
      self.emb = nn.Embedding(5, 3)
      self.head = nn.Linear(3, 5, {bias = false})
      self.head.weight = self.emb.weight
    end
    local t = Tied()
    assert.same({"emb.weight"}, keys_of(t:named_parameters()))
    assert.equals(1, #t:parameters())
    assert.same({"emb.weight", "head.weight"}, t:state_dict_keys())
    assert.same({"emb.weight", "head.weight"}, keys_of(t:named_parameters({remove_duplicate = false})))
  end)

  it("refuses what it cannot register, with the reason", function()
    local m = nn.Linear(2, 2)
    local ok, err = pcall(function() m.weight = accel.zeros(2, 2) end)
    assert.is_false(ok)
    assert.matches('cannot assign a plain tensor as parameter "weight"', err)
    assert.matches("nn_module_spec.lua", err)
    ok, err = pcall(function() m.layers = {nn.Linear(2, 2)} end)
    assert.is_false(ok)
    assert.matches("plain table of modules", err)
    ok, err = pcall(function() m:register_parameter("a.b", nn.Parameter(accel.zeros(1))) end)
    assert.is_false(ok)
    assert.matches('can\'t contain "%."', err)
    ok, err = pcall(function() m.forward = nil; m.to = nn.Linear(1, 1) end)
    assert.is_false(ok)
    assert.matches('"to" is a method of Linear', err)
    ok, err = pcall(function() m:register_buffer("buf", 3) end)
    assert.is_false(ok)
    assert.matches("tensor or nil expected", err)
  end)

  it("plain tensors are plain fields; assignments move names between kinds", function()
    local m = nn.Module()
    m.t = accel.zeros(2)
    assert.equals(0, #m:parameters())
    assert.is_nil(m:state_dict().t)
    m.t = nn.Parameter(accel.ones(2)) -- now a parameter
    assert.same({"t"}, keys_of(m:named_parameters()))
    m.t = nn.Linear(1, 1) -- now a submodule
    assert.same({"t.weight", "t.bias"}, keys_of(m:named_parameters()))
    m:register_buffer("b", accel.zeros(1))
    m.b = accel.ones(1) -- a registered buffer is updated
    assert.equals(1, m:state_dict().b:item())
    m.t = nil
    assert.equals(0, #m:parameters())
    m.b = nn.ReLU() -- assignment replaces a buffer by a submodule (PyTorch's setattr)
    assert.same({}, keys_of(m:named_buffers()))
    assert.same({"b"}, keys_of(m:named_children()))
  end)

  it("register_* refuse a name registered as another kind; the same kind is replaced (PyTorch)", function()
    local function mk()
      local m = nn.Module()
      m.a = nn.Linear(2, 2)
      m:register_buffer("buf", accel.zeros(1))
      m:register_module("none", nil)
      return m
    end
    -- torch 2.15: KeyError "attribute 'a' already exists"; nothing is changed
    local m = mk()
    support.expect_error(function() m:register_buffer("a", accel.zeros(1)) end, 'attribute "a" already exists')
    support.expect_error(function() m:register_parameter("a", nn.Parameter(accel.zeros(1))) end,
      'attribute "a" already exists')
    support.expect_error(function() m:register_parameter("buf", nn.Parameter(accel.zeros(1))) end,
      'attribute "buf" already exists')
    support.expect_error(function() m:register_module("buf", nn.ReLU()) end, 'attribute "buf" already exists')
    support.expect_error(function() m:add_module("buf", nn.ReLU()) end, 'attribute "buf" already exists')
    support.expect_error(function() m:register_buffer("none", accel.zeros(1)) end, 'attribute "none" already exists')
    assert.same({"buf", "a.weight", "a.bias"}, m:state_dict_keys())
    -- the same kind again replaces the entry (torch: state_dict keys buf, a.weight, a.bias; buf = [1, 1])
    m:register_buffer("buf", accel.ones(2))
    assert.same({"buf", "a.weight", "a.bias"}, m:state_dict_keys())
    assert.same({1, 1}, m.buf:tolist())
    m:register_module("a", nn.Linear(2, 3))
    assert.equals(3, m.a.out_features)
  end)

  it("get_buffer of a buffer set to nil is nil; get_parameter of a nil parameter is refused (PyTorch)", function()
    -- torch 2.15: after m.b = None on a registered buffer, get_buffer("b") is None (the slot stays);
    -- after m.p = None, get_parameter("p") raises "`p` is not an nn.Parameter"
    local m = nn.Module()
    m.p = nn.Parameter(accel.zeros(2))
    m:register_buffer("b", accel.zeros(2))
    m.child = nn.Module()
    m.child:register_buffer("c", accel.ones(1))
    m.b, m.p, m.child.c = nil, nil, nil
    assert.is_nil(m:get_buffer("b"))
    assert.is_nil(m:get_buffer("child.c"))
    support.expect_error(function() m:get_parameter("p") end, 'Module has no parameter "p"')
    support.expect_error(function() m:get_buffer("zz") end, 'Module has no buffer "zz"')
    m.b = accel.ones(1) -- still the buffer slot
    assert.same({"b"}, m:state_dict_keys()) -- (child.c, still nil, is left out)
  end)
end)

describe("state_dict / load_state_dict", function()
  before_each(function() accel.set_seed(0) end)

  it("round-trips through a table and through a file", function()
    local a, b = GPT(4, 2), GPT(4, 2)
    assert.is_true(max_abs_diff(a.ln_f.weight, b.ln_f.weight) == 0) -- ones
    assert.is_true(max_abs_diff(a.wte.weight, b.wte.weight) > 0)
    local missing, unexpected = b:load_state_dict(a:state_dict())
    assert.same({}, missing)
    assert.same({}, unexpected)
    for name, p in a:named_parameters() do
      assert.equals(0, max_abs_diff(p, b:get_parameter(name)), name)
    end
    -- load copies in place: b's parameters are still its own leaves
    assert.is_false(rawequal(a.wte.weight, b.wte.weight))
    assert.is_true(b.wte.weight.is_leaf and b.wte.weight.requires_grad)
    local path = os.tmpname() .. ".safetensors"
    accel.save(a:state_dict(), path)
    local c = GPT(4, 2)
    c:load_state_dict(accel.load(path))
    os.remove(path)
    for name, p in a:named_parameters() do
      assert.equals(0, max_abs_diff(p, c:get_parameter(name)), name)
    end
  end)

  it("state_dict tensors are detached and share storage", function()
    local l = nn.Linear(2, 2)
    local sd = l:state_dict()
    assert.is_false(sd.weight.requires_grad)
    accel.no_grad(function() l.weight:fill_(3) end)
    assert.equals(3, sd.weight[1][1]:item())
    assert.is_true(rawequal(l:state_dict({keep_vars = true}).weight, l.weight))
  end)

  it("names every missing, unexpected and mis-shaped key and copies nothing", function()
    local a = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    local before = a[1].weight:clone()
    local sd = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2)):state_dict()
    sd["2.bias"] = nil
    sd["extra.weight"] = accel.zeros(7)
    local ok, err = pcall(function() a:load_state_dict(sd) end)
    assert.is_false(ok)
    assert.matches("nn_module_spec.lua:%d+: Error%(s%) in loading state_dict for Sequential", err)
    assert.matches('Missing key%(s%) in state_dict: "2.bias" %(shape accel.Size%({2}%)%)', err)
    assert.matches('Unexpected key%(s%) in state_dict: "extra.weight" %(shape accel.Size%({7}%)%)', err)
    assert.matches("size mismatch for 0.weight: copying a param with shape accel.Size%({5, 4}%) from checkpoint, "
      .. "the shape in current model is accel.Size%({3, 4}%)", err)
    assert.matches("size mismatch for 0.bias", err)
    assert.matches("size mismatch for 2.weight", err)
    assert.equals(0, max_abs_diff(before, a[1].weight)) -- untouched
  end)

  it("strict = false returns missing and unexpected keys but still refuses wrong shapes", function()
    local a = nn.Linear(3, 2)
    local missing, unexpected = a:load_state_dict({weight = accel.ones(2, 3), foo = accel.zeros(1)}, {strict = false})
    assert.same({"bias"}, missing)
    assert.same({"foo"}, unexpected)
    assert.equals(1, a.weight:min():item())
    local ok, err = pcall(function() a:load_state_dict({weight = accel.ones(3, 2)}, {strict = false}) end)
    assert.is_false(ok)
    assert.matches("size mismatch for weight", err)
    ok, err = pcall(function() a:load_state_dict({weight = 1, bias = accel.zeros(2)}) end)
    assert.is_false(ok)
    assert.matches("value for weight is a number, not a tensor", err)
  end)

  it("includes persistent buffers only and converts dtypes on load", function()
    local m = nn.Module()
    m:register_buffer("keep", accel.zeros(2))
    m:register_buffer("skip", accel.zeros(2), {persistent = false})
    assert.same({"keep"}, sorted_keys(m:state_dict()))
    m:load_state_dict({keep = accel.tensor({1.5, 2.5}, {dtype = f64})})
    assert.equals(accel.float32, m.keep.dtype)
    assert.equals(2.5, m.keep[2]:item())
  end)
end)

describe("train / eval / apply / zero_grad / requires_grad_", function()
  before_each(function() accel.set_seed(0) end)

  it("train and eval reach every submodule", function()
    local g = GPT(4, 3)
    assert.is_true(g.training)
    assert.equals(g, g:eval())
    for _, m in ipairs(g:modules()) do assert.is_false(m.training) end
    g.h:train()
    assert.is_false(g.training)
    assert.is_true(g.h[2].attn.c_attn.training)
    g:train()
    for _, m in ipairs(g:modules()) do assert.is_true(m.training) end
    local ok, err = pcall(function() g:train("yes") end)
    assert.is_false(ok)
    assert.matches("boolean", err)
  end)

  it("Dropout follows the mode", function()
    local seq = nn.Sequential(nn.Dropout(0.5))
    local x = accel.ones(1000)
    assert.is_true(seq(x):eq(0):sum():item() > 300)
    seq:eval()
    assert.equals(0, max_abs_diff(seq(x), x))
  end)

  it("apply visits children before their parent", function()
    local g = GPT(4, 2)
    local order = {}
    g:apply(function(m) order[#order + 1] = m:_get_name() end)
    assert.same({"Embedding", "LayerNorm", "Linear", "Attn", "Block", "LayerNorm", "Linear", "Attn", "Block",
                 "ModuleList", "LayerNorm", "GPT"}, order)
    g:apply(function(m)
      if m:isinstance(nn.Linear) then nn.init.zeros_(m.weight) end
    end)
    assert.equals(0, g.h[1].attn.c_attn.weight:abs():max():item())
  end)

  it("zero_grad sets grads to nil, or zeros them in place", function()
    local l = nn.Linear(3, 2)
    l(accel.randn(4, 3)):sum():backward()
    assert.is_not_nil(l.weight.grad)
    local g = l.weight.grad
    l:zero_grad({set_to_none = false})
    assert.is_true(rawequal(g, l.weight.grad))
    assert.equals(0, g:abs():max():item())
    l:zero_grad()
    assert.is_nil(l.weight.grad)
    assert.is_nil(l.bias.grad)
    l(accel.randn(4, 3)):sum():backward()
    l:zero_grad(false) -- PyTorch's positional set_to_none
    assert.equals(0, l.weight.grad:abs():max():item())
    local ok, err = pcall(function() l:zero_grad({set_to_nonee = false}) end)
    assert.truthy(not ok and tostring(err):find("zero_grad: unknown option 'set_to_nonee'", 1, true))
  end)

  it("load_state_dict takes strict positionally; an unknown option or assign = true is an error", function()
    local l = nn.Linear(2, 2)
    local sd = l:state_dict()
    sd.extra = accel.zeros(1)
    local missing, unexpected = l:load_state_dict(sd, false)
    assert.same({}, missing)
    assert.same({"extra"}, unexpected)
    local ok, err = pcall(function() l:load_state_dict(sd, {strikt = false}) end)
    assert.truthy(not ok and tostring(err):find("load_state_dict: unknown option 'strikt'", 1, true))
    ok, err = pcall(function() l:load_state_dict(l:state_dict(), {assign = true}) end)
    assert.truthy(not ok and tostring(err):find("assign = true is not supported", 1, true))
  end)

  it("load_state_dict(accel.load(path)) of a file with metadata loads (PyTorch: load_state_dict(load_file(p)))", function()
    -- torch 2.15: b.load_state_dict(load_file(p)) of save_file(a.state_dict(), p, metadata={"format": "pt"})
    -- -> <All keys matched successfully>, b's weights == a's
    local a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    local path = os.tmpname() .. ".safetensors"
    accel.save(a:state_dict(), path, {format = "pt"})
    local missing, unexpected = b:load_state_dict(accel.load(path))
    assert.same({}, missing)
    assert.same({}, unexpected)
    assert.equals(0, max_abs_diff(a.weight, b.weight))
    -- a plain table with the same keys is still read as options, and refused
    local ok, err = pcall(function() b:load_state_dict(a:state_dict(), {format = "pt"}) end)
    assert.truthy(not ok and tostring(err):find("unknown option 'format'", 1, true), tostring(err))
    -- the metadata table followed by another argument is not taken for nothing either
    local _, meta = accel.load(path)
    ok, err = pcall(function() b:load_state_dict(a:state_dict(), meta, true) end)
    os.remove(path)
    assert.is_false(ok, tostring(err))
  end)

  it("requires_grad_(false) freezes every parameter", function()
    local g = GPT(4, 1):requires_grad_(false)
    for _, p in ipairs(g:parameters()) do assert.is_false(p.requires_grad) end
  end)

  it("requires_grad_ refuses a flag that is not a boolean (torch 2.15: must be bool, not int / str)", function()
    local g = GPT(4, 1):requires_grad_(false)
    support.expect_error(function() g:requires_grad_(0) end,
      "requires_grad_: argument 'requires_grad' (position 1) must be boolean, not number")
    support.expect_error(function() g:requires_grad_("false") end, "must be boolean, not string")
    for _, p in ipairs(g:parameters()) do assert.is_false(p.requires_grad) end
  end)
end)

describe("Module:to", function()
  before_each(function() accel.set_seed(0) end)

  it("converts floating parameters and buffers to float64, keeping integer buffers", function()
    local Net = nn.Module:extend("Net")
    function Net:init()
      self.fc = nn.Linear(3, 2)
      self.head = nn.Linear(2, 2)
      self.tied = nn.Linear(3, 2)
      self.tied.weight = self.fc.weight
      self:register_buffer("count", accel.zeros(1, {dtype = accel.int64}))
      self:register_buffer("mean", accel.zeros(2))
    end
    function Net:forward(x) return self.head(self.fc(x)) end
    local net = Net()
    local w32 = net.fc.weight:clone()
    net.fc(accel.randn(1, 3)):sum():backward()
    assert.equals(net, net:to(f64))
    for name, p in net:named_parameters() do
      assert.equals(f64, p.dtype, name)
      assert.is_true(p.is_leaf and p.requires_grad, name)
      assert.is_true(nn.is_parameter(p), name)
    end
    assert.equals(f64, net.mean.dtype)
    assert.equals(accel.int64, net.count.dtype)
    assert.is_true(rawequal(net.fc.weight, net.tied.weight)) -- still shared
    assert.equals(f64, net.fc.weight.grad.dtype)
    assert.equals(0, max_abs_diff(w32, net.fc.weight))
    assert.equals(f64, net(accel.randn(4, 3, {dtype = f64})).dtype)
    net:float()
    assert.equals(accel.float32, net.fc.weight.dtype)
    net:to({device = "cpu"})
    assert.equals("cpu", tostring(net.fc.weight.device))
    local ok, err = pcall(function() net:to(accel.int32) end)
    assert.is_false(ok)
    assert.matches("floating point", err)
  end)

  it("moves between devices: the moved parameters are leaves there, the input's gradient goes back to its device", function()
    -- expected: the same forward/backward with everything on the cpu
    local other = accel.get_default_device().type == "cpu" and "sim" or "cpu"
    local net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)):to("cpu")
    local x = accel.randn(5, 3, {device = "cpu", requires_grad = true})
    net(x):pow(2):sum():backward()
    local want_x, want_w = x.grad:clone(), net[1].weight.grad:clone()
    x.grad, net[1].weight.grad = nil, nil
    net:zero_grad()
    assert.equals(net, net:to(other))
    for name, p in net:named_parameters() do
      assert.equals(other, p.device.type, name)
      assert.is_true(p.is_leaf and p.requires_grad and nn.is_parameter(p), name)
    end
    net(x:to(other)):pow(2):sum():backward()
    assert.equals("cpu", x.grad.device.type)
    assert.is_true(x.grad:equal(want_x))
    assert.equals(other, net[1].weight.grad.device.type)
    assert.is_true(net[1].weight.grad:to("cpu"):equal(want_w))
  end)

  it("keeps the same tensors when nothing changes", function()
    local l = nn.Linear(2, 2)
    local w = l.weight
    l:to(w.device) -- where it already is (cpu, or sim on the suite's second pass)
    l:to(accel.float32)
    assert.is_true(rawequal(w, l.weight))
  end)
end)

describe("forward hooks", function()
  it("pre-hooks can replace the arguments, hooks the results; handles remove them", function()
    local l = nn.Identity()
    local seen
    local h1 = l:register_forward_pre_hook(function(_, args) return table.pack(args[1] * 2) end)
    local h2 = l:register_forward_hook(function(_, args, res) seen = args[1]; return table.pack(res[1] + 1) end)
    local y = l(accel.ones(2))
    assert.equals(3, y[1]:item())
    assert.equals(2, seen[1]:item())
    h1:remove()
    h2:remove()
    assert.equals(1, l(accel.ones(2))[1]:item())
  end)

  it("a hook returning a tensor replaces the one value (not its rows); prepend runs first; options checked", function()
    local l = nn.Linear(3, 4)
    local h = l:register_forward_hook(function() return accel.zeros(2, 5) end)
    assert.same({2, 5}, shape_of(l(accel.ones(2, 3))))
    h:remove()
    h = l:register_forward_pre_hook(function() return accel.ones(2, 3) end)
    assert.same({2, 4}, shape_of(l(accel.zeros(1, 3))))
    h:remove()
    local order = {}
    l:register_forward_hook(function() order[#order + 1] = "A" end)
    l:register_forward_hook(function() order[#order + 1] = "B" end, {prepend = true})
    l(accel.ones(1, 3))
    assert.same({"B", "A"}, order)
    local ok, err = pcall(function() l:register_forward_hook(function() end, {with_kwargs = true}) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("with_kwargs = true is not supported", 1, true))
    ok, err = pcall(function() l:register_forward_hook(function() end, {prepnd = true}) end)
    assert.truthy(tostring(err):find("unknown option 'prepnd'", 1, true))
  end)

  it("a hook returning a string-keyed table gives that one value; a list or {n=} gives several", function()
    -- torch 2.15: a forward hook returning {'logits': out['logits'] + 1} makes the output that dict
    -- (logits[0] = 3.0 for x = [1, 2] and forward {'logits': 2 x}); a pre-hook returning {'scale': 5}
    -- makes it forward's one argument
    local DictOut = nn.Module:extend("DictOut")
    function DictOut:forward(x) return {logits = x * 2} end
    local m = DictOut()
    m:register_forward_hook(function(_, _, res) return {logits = res[1].logits + 1} end)
    local out = m(accel.tensor({1, 2}, {dtype = f64}))
    assert.same({3, 5}, out.logits:tolist())
    local TakesTable = nn.Module:extend("TakesTable")
    function TakesTable:forward(cfg, extra) return cfg.scale, extra end
    local p = TakesTable()
    local h = p:register_forward_pre_hook(function() return {scale = 5} end)
    local scale, extra = p({scale = 1}, "x")
    assert.equals(5, scale)
    assert.is_nil(extra)
    h:remove()
    p:register_forward_pre_hook(function() return {{scale = 2}, "y"} end) -- a list: the arguments
    scale, extra = p({scale = 1})
    assert.equals(2, scale)
    assert.equals("y", extra)
    local n = nn.Identity()
    n:register_forward_hook(function() return {n = 0} end) -- {n = 0}: no results
    assert.equals(0, select("#", n(accel.ones(1))))
  end)
end)

describe("nn.deepcopy", function()
  -- torch 2.15's copy.deepcopy of a module: shared submodules stay shared in the copy, every tensor is
  -- new; a Parameter stays one with requires_grad kept and no grad, a plain tensor attribute keeps
  -- requires_grad and its grad; non-persistent buffers are copied; hooks are copied (removing the
  -- original's handle leaves the copy's); a module holding a non-leaf tensor raises "Only Tensors created
  -- explicitly by the user (graph leaves) support the deepcopy protocol"
  local Net = nn.Module:extend("DeepNet")
  function Net:init()
    self.a = nn.Linear(2, 2)
    self.b = self.a
    self.w = nn.Parameter(accel.ones(2, {dtype = f64}))
    self.frozen = nn.Parameter(accel.ones(1, {dtype = f64}), false)
    self:register_buffer("nb", accel.zeros(1), false)
    self.t = accel.ones(1, {dtype = f64}):requires_grad_(true)
    self.tag = {name = "n", sizes = {1, 2}}
  end
  function Net:forward(x) return self.a(x) end

  it("copies the class, tensors, shared submodules, plain fields and hooks as PyTorch's copy.deepcopy", function()
    local n = Net()
    n.w.grad = accel.full({2}, 3.0, {dtype = f64})
    n.t.grad = accel.full({1}, 5.0, {dtype = f64})
    local h = n:register_forward_hook(function(_, _, res) return res[1] * 0 end)
    n:eval()
    local c = nn.deepcopy(n)
    h:remove()
    assert.is_true(c:isinstance(Net))
    assert.is_true(rawequal(c.a, c.b))
    assert.is_false(rawequal(c.a, n.a))
    assert.is_false(rawequal(c.a.weight, n.a.weight))
    assert.equals(0, max_abs_diff(c.a.weight, n.a.weight))
    assert.is_true(nn.is_parameter(c.w) and c.w.requires_grad and c.w.grad == nil)
    assert.is_true(nn.is_parameter(c.frozen) and not c.frozen.requires_grad)
    assert.is_true(c.t.requires_grad and c.t.is_leaf and not nn.is_parameter(c.t))
    assert.same({5}, c.t.grad:tolist())
    -- torch 2.15's lists for the copy: named_parameters w, frozen, a.weight, a.bias; named_buffers nb;
    -- state_dict w, frozen, a.weight, a.bias, b.weight, b.bias
    assert.same({"w", "frozen", "a.weight", "a.bias"}, keys_of(c:named_parameters()))
    assert.same({"nb"}, keys_of(c:named_buffers()))
    assert.same({"w", "frozen", "a.weight", "a.bias", "b.weight", "b.bias"}, c:state_dict_keys())
    assert.same({name = "n", sizes = {1, 2}}, c.tag)
    assert.is_false(rawequal(c.tag, n.tag))
    assert.is_false(c.training)
    local x = accel.ones(2)
    assert.same({0, 0}, c(x):tolist()) -- the hook was copied
    assert.is_false(n(x):abs():sum():item() == 0) -- and removed from n only
    c.w:detach():fill_(7) -- independent storage
    assert.same({1, 1}, n.w:tolist())
    n.cache = n.a(x)
    support.expect_error(function() nn.deepcopy(n) end, "nn.deepcopy: only tensors created explicitly by the user")
    support.expect_error(function() nn.deepcopy(accel.ones(1)) end, "nn.deepcopy: expected a Module, got a tensor")
  end)
end)

describe("containers", function()
  before_each(function() accel.set_seed(0) end)

  it("pairs() over a container gives its children in order; over a layer, its raw fields", function()
    local a, b = nn.Linear(2, 3), nn.ReLU()
    local got = {}
    for i, m in pairs(nn.ModuleList{a, b}) do got[#got + 1] = {i, m} end
    assert.equals(2, #got)
    assert.equals(1, got[1][1]); assert.is_true(rawequal(a, got[1][2]))
    assert.equals(2, got[2][1]); assert.is_true(rawequal(b, got[2][2]))
    got = {}
    for i, m in pairs(nn.Sequential(b, a)) do got[#got + 1] = {i, m} end
    assert.is_true(rawequal(b, got[1][2])); assert.is_true(rawequal(a, got[2][2]))
    got = {}
    for k, m in pairs(nn.ModuleDict{{"z", a}, {"y", b}}) do got[#got + 1] = {k, m} end
    assert.same({"z", "y"}, {got[1][1], got[2][1]})
    assert.is_true(rawequal(a, got[1][2]))
    local fields = {}
    for k in pairs(nn.Linear(1, 1)) do fields[k] = true end
    assert.is_true(fields._parameters)
  end)

  it("Sequential is indexable (1-based), has a length, appends and inserts", function()
    local a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    local seq = nn.Sequential(a, b)
    assert.equals(2, #seq)
    assert.is_true(rawequal(seq[1], a))
    assert.is_true(rawequal(seq[-1], b))
    assert.is_nil(seq[3])
    seq:append(c)
    assert.is_true(rawequal(seq[3], c))
    local n = 0
    for i, m in ipairs(seq) do n = i; assert.is_true(nn.is_module(m)) end
    assert.equals(3, n)
    seq:insert(1, nn.Identity())
    assert.same({"1.weight", "1.bias", "3.weight", "3.bias"}, keys_of(seq:named_parameters()))
    assert.equals("Identity", seq[1]:_get_name())
    assert.same({4, 1}, shape_of(seq(accel.randn(4, 2))))
    local ok, err = pcall(function() return seq[0] end)
    assert.is_false(ok)
    assert.matches("1%-based", err)
    seq[1] = nn.Linear(2, 2)
    assert.same({"0.weight", "0.bias"}, {keys_of(seq:named_parameters())[1], keys_of(seq:named_parameters())[2]})
    assert.is_true(rawequal(seq:pop(), c))
    assert.equals(3, #seq)
  end)

  it("Sequential accepts named layers in order", function()
    local seq = nn.Sequential({{"fc1", nn.Linear(2, 2)}, {"act", nn.ReLU()}, {"fc2", nn.Linear(2, 1)}})
    assert.same({"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}, keys_of(seq:named_parameters()))
    assert.is_true(rawequal(seq[3], seq.fc2))
  end)

  it("ModuleList holds modules without a forward", function()
    local ml = nn.ModuleList({nn.Linear(1, 1)})
    ml:extend({nn.Linear(1, 2), nn.Linear(2, 3)})
    assert.equals(3, #ml)
    assert.same({"0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"}, keys_of(ml:named_parameters()))
    local ok, err = pcall(function() ml(accel.ones(1)) end)
    assert.is_false(ok)
    assert.matches("ModuleList has no forward", err)
    ok, err = pcall(function() ml:append(accel.ones(1)) end)
    assert.is_false(ok)
    assert.matches("expected a Module, got a tensor", err)
  end)

  it("ModuleDict keeps the order given as pairs, sorts a hash table", function()
    local md = nn.ModuleDict({{"zeta", nn.Linear(1, 1)}, {"alpha", nn.ReLU()}})
    assert.same({"zeta", "alpha"}, md:keys())
    local md2 = nn.ModuleDict({dec = nn.Linear(1, 1), enc = nn.Linear(1, 1)})
    assert.same({"dec", "enc"}, md2:keys())
    assert.equals(2, #md2)
    md2.mid = nn.Tanh()
    assert.same({"dec", "enc", "mid"}, md2:keys())
    assert.equals("Tanh", md2["mid"]:_get_name())
    local seen = {}
    for k, m in md2:items() do seen[#seen + 1] = k .. "=" .. m:_get_name() end
    assert.same({"dec=Linear", "enc=Linear", "mid=Tanh"}, seen)
    assert.is_true(md2:contains("enc"))
    md2:pop("enc")
    assert.same({"dec.weight", "dec.bias"}, keys_of(md2:named_parameters()))
  end)

  it("ModuleList, extend, ModuleDict and update take another container, as PyTorch's", function()
    local ml = nn.ModuleList({nn.Linear(1, 2), nn.Linear(2, 3)})
    local copy = nn.ModuleList(ml)
    assert.equals(2, #copy)
    assert.is_true(rawequal(ml[2], copy[2]))
    copy:extend(nn.Sequential(nn.ReLU(), nn.Tanh()))
    assert.equals(4, #copy)
    assert.equals("Tanh", copy[4]:_get_name())
    local md = nn.ModuleDict({{"zeta", nn.Linear(1, 1)}, {"alpha", nn.ReLU()}})
    local md2 = nn.ModuleDict(md)
    assert.same({"zeta", "alpha"}, md2:keys())
    md2:update(nn.ModuleDict({{"mid", nn.Tanh()}}))
    assert.same({"zeta", "alpha", "mid"}, md2:keys())
    local ok, err = pcall(function() nn.ModuleDict(nn.Linear(1, 1)) end)
    assert.is_false(ok)
    assert.matches("expected a table of modules, got a single Module", err)
    ok, err = pcall(function() copy:extend(md) end) -- torch: TypeError (a ModuleDict iterates over its names)
    assert.is_false(ok)
    assert.matches("ModuleList:extend: expected a list of modules %(or a ModuleList / Sequential%), got ModuleDict", err)
  end)
end)

describe("printing", function()
  it("prints the module tree like PyTorch", function()
    local model = nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 3))
    assert.equals([[
Sequential(
  (0): Linear(in_features=20, out_features=128, bias=True)
  (1): ReLU()
  (2): Linear(in_features=128, out_features=64, bias=True)
  (3): ReLU()
  (4): Linear(in_features=64, out_features=3, bias=True)
)]], tostring(model))
  end)

  it("collapses a ModuleList's runs of identical children, as PyTorch's", function()
    local l = function() return nn.Linear(2, 2) end
    assert.equals([[
ModuleList(
  (0-2): 3 x Linear(in_features=2, out_features=2, bias=True)
  (3): ReLU()
  (4): Linear(in_features=2, out_features=2, bias=True)
  (5): Linear(in_features=2, out_features=3, bias=True)
)]], tostring(nn.ModuleList({l(), l(), l(), nn.ReLU(), l(), nn.Linear(2, 3)})))
    assert.equals("ModuleList()", tostring(nn.ModuleList()))
    local g = nn.Sequential(nn.ModuleList({nn.Sequential(l(), nn.ReLU()), nn.Sequential(l(), nn.ReLU())}))
    assert.equals([[
Sequential(
  (0): ModuleList(
    (0-1): 2 x Sequential(
      (0): Linear(in_features=2, out_features=2, bias=True)
      (1): ReLU()
    )
  )
)]], tostring(g))
  end)

  it("indents nested modules and prints each layer's options", function()
    local g = GPT(4, 1)
    g.drop = nn.Dropout(0.1)
    g.act = nn.GELU({approximate = "tanh"})
    g.lrelu = nn.LeakyReLU(0.2)
    g.norm = nn.RMSNorm(4, {eps = 1e-6})
    g.out = nn.Linear(4, 2, {bias = false})
    assert.equals([[
GPT(
  (wte): Embedding(10, 4)
  (h): ModuleList(
    (0): Block(
      (ln_1): LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)
      (attn): Attn(
        (c_attn): Linear(in_features=4, out_features=12, bias=True)
      )
    )
  )
  (ln_f): LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)
  (drop): Dropout(p=0.1, inplace=False)
  (act): GELU(approximate='tanh')
  (lrelu): LeakyReLU(negative_slope=0.2)
  (norm): RMSNorm((4,), eps=1e-06, elementwise_affine=True)
  (out): Linear(in_features=4, out_features=2, bias=False)
)]], tostring(g))
    assert.equals("MultiheadAttention(\n  (out_proj): NonDynamicallyQuantizableLinear(in_features=8, out_features=8, bias=True)\n)",
      tostring(nn.MultiheadAttention(8, 2)))
    assert.equals("Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))",
      tostring(nn.Conv2d(1, 32, 3, {padding = 1})))
    assert.equals("MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)", tostring(nn.MaxPool2d(2)))
    assert.equals("Embedding(10, 3, padding_idx=0)", tostring(nn.Embedding(10, 3, {padding_idx = 0})))
    assert.equals("Flatten(start_dim=2, end_dim=-1)", tostring(nn.Flatten()))
    assert.equals("Softmax(dim=-1)", tostring(nn.Softmax(-1)))
    assert.equals("CrossEntropyLoss()", tostring(nn.CrossEntropyLoss()))
  end)
end)

describe("ParameterList and ParameterDict", function()
  it("register their entries under PyTorch's keys, index and iterate, and train", function()
    local pl = nn.ParameterList({nn.Parameter(accel.zeros(3, 4)), accel.zeros(5)})
    assert.is_true(nn.is_parameter(pl[2])) -- a plain tensor is made a Parameter, as PyTorch's
    assert.same({5}, shape_of(pl[-1]))
    assert.is_nil(pl[3])
    pl:append(accel.ones(2))
    assert.same({2}, shape_of(pl[3]))
    local pd = nn.ParameterDict({b = accel.zeros(3), a = nn.Parameter(accel.zeros(2, 2))})
    assert.same({"a", "b"}, pd:keys()) -- a hash table's names sorted, as PyTorch sorts a dict's
    assert.is_true(pd:contains("a"))
    local M = nn.Module:extend("HoldsParams")
    function M:init() self.pl, self.pd = nn.ParameterList({accel.ones(2)}), pd end
    function M:forward(x) return x * self.pl[1] + self.pd.b:sum() end
    local m = M()
    -- torch 2.15: the state_dict keys of the same module
    assert.same({"pd.a", "pd.b", "pl.0"}, sorted_keys(m:state_dict()))
    assert.equals(3, #m:parameters())
    local opt = accel.optim.SGD(m:parameters(), {lr = 0.1})
    m(accel.ones(2)):sum():backward()
    opt:step()
    assert.is_true(m.pl[1]:detach():allclose(accel.full({2}, 0.9), 0, 1e-7))
    assert.has_error(function() nn.ParameterList({"x"}) end)
    assert.has_error(function() pd:pop("zz") end)
  end)

  it("print as PyTorch's", function()
    -- torch 2.15's str() (dtype named accel.float32 where PyTorch writes torch.float32)
    assert.equals("ParameterList(\n    (0): Parameter containing: [accel.float32 of size 3x4]\n"
      .. "    (1): Parameter containing: [accel.float32 of size 5]\n)",
      tostring(nn.ParameterList({accel.zeros(3, 4), accel.zeros(5)})))
    assert.equals("ParameterList(  (0): Parameter containing: [accel.float64 of size 3x4])",
      tostring(nn.ParameterList({accel.zeros(3, 4, {dtype = f64})})))
    assert.equals("ParameterDict(\n    (a): Parameter containing: [accel.float32 of size 2x2]\n"
      .. "    (b): Parameter containing: [accel.float32 of size 3]\n)",
      tostring(nn.ParameterDict({b = accel.zeros(3), a = accel.zeros(2, 2)})))
  end)
end)
