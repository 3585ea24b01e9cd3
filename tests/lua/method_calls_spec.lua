-- method_calls_spec.lua: a method called with `.` instead of `:` (the most
-- common slip when porting PyTorch code: opt.step(), m.parameters(),
-- loader.iter(), t.sum()) raises ONE error at the caller's file:line:
-- "<Class>.<method>: call it as obj:<method>(...), not obj.<method>(...)".
-- One case per class the library checks (accel.util.check_methods and the
-- C tensor methods' self check), that correct calls (also on subclasses)
-- still work, and that `for batch in loader do` iterates like loader:iter().
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["DataLoader, Dataset, TensorDataset, TokenFile"] = "the spec uses table.pack (Lua 5.2+)",
})
local nn, optim, data = accel.nn, accel.optim, accel.data
local util = require("accel.util")

local SRC = debug.getinfo(1, "S").short_src

-- The error of fn(); fails when fn does not raise.
local function errmsg(fn)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error")
  return tostring(err)
end

-- fn() raises the method-call error for class.method at this spec's line.
local function expect_dot_error(fn, class, method, line)
  local err = errmsg(fn)
  local want = ("%s:%d: %s.%s: call it as %s:%s(...), not %s.%s(...)"):format(SRC, line, class, method,
    class == "Tensor" and "t" or "obj", method, class == "Tensor" and "t" or "obj", method)
  assert.are.equal(want, err:sub(1, #want), "got: " .. err)
end

local function here() return debug.getinfo(2, "l").currentline end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. d))
  return d
end

describe("a method called with . instead of :", function()
  it("the Accelerator, what prepare returns, the plugins and the GradScaler", function()
    local a = accel.Accelerator{mixed_precision = "fp16"}
    expect_dot_error(function() a.print("x") end, "Accelerator", "print", here())
    expect_dot_error(function() a.wait_for_everyone() end, "Accelerator", "wait_for_everyone", here())
    local m = nn.Linear(3, 2)
    local opt, loader
    m, opt, loader = a:prepare(m, optim.SGD(m:parameters(), {lr = 0.1}),
      data.DataLoader(data.TensorDataset(accel.randn(4, 3)), {batch_size = 2}))
    expect_dot_error(function() opt.zero_grad() end, "AcceleratedOptimizer", "zero_grad", here())
    expect_dot_error(function() loader.iter() end, "DataLoaderShard", "iter", here())
    expect_dot_error(function() a.scaler.update() end, "GradScaler", "update", here())
    local ds = accel.DeepSpeedPlugin{zero_stage = 0}
    assert.are.equal(0, ds.zero_stage)
    local n = 0
    for xb in loader do n = n + xb:size(1) end -- a prepared loader iterates like loader:iter()
    assert.are.equal(4, n)
    a:print("correct calls still work")
  end)

  it("nn.Module methods (on a built-in layer and on a user class)", function()
    local m = nn.Linear(3, 2)
    expect_dot_error(function() m.parameters() end, "Module", "parameters", here())
    expect_dot_error(function() m.zero_grad() end, "Module", "zero_grad", here())
    expect_dot_error(function() m.state_dict() end, "Module", "state_dict", here())
    expect_dot_error(function() m.train(false) end, "Module", "train", here())
    local seq = nn.Sequential(nn.Linear(2, 2))
    expect_dot_error(function() seq.append(nn.ReLU()) end, "Sequential", "append", here())
    local Net = nn.Module:extend("Net")
    function Net:init() self.fc = nn.Linear(2, 2) end
    function Net:forward(x) return self.fc(x) end
    function Net:scale(k) return k * 2 end
    local net = Net()
    expect_dot_error(function() net.scale(3) end, "Net", "scale", here())
    -- correct calls: a subclass instance passes the check, inherited or own
    assert.are.equal(6, net:scale(3))
    assert.are.equal(2, #net:parameters())
    assert.are.same({2, 2}, {net(accel.ones(2, 2)):size(1), net(accel.ones(2, 2)):size(2)})
  end)

  it("optimizers (built-in and a subclass made with Optimizer:extend)", function()
    local m = nn.Linear(3, 2)
    local opt = optim.AdamW(m:parameters(), {lr = 1e-3})
    expect_dot_error(function() opt.step() end, "AdamW", "step", here())
    expect_dot_error(function() opt.zero_grad() end, "Optimizer", "zero_grad", here())
    local sgd = optim.SGD(m:parameters(), {lr = 0.1})
    expect_dot_error(function() sgd.state_dict() end, "Optimizer", "state_dict", here())
    local My = optim.Optimizer:extend("My")
    function My:init(params) optim.Optimizer.init(self, params, {lr = 1}) end
    function My:step() return "stepped" end
    local my = My(m:parameters())
    expect_dot_error(function() my.step() end, "My", "step", here())
    assert.are.equal("stepped", my:step())
    m(accel.ones(1, 3)):sum():backward()
    opt:step()
    opt:zero_grad()
  end)

  it("learning-rate schedulers", function()
    local opt = optim.SGD(nn.Linear(2, 2):parameters(), {lr = 0.1})
    local sched = optim.lr_scheduler.StepLR(opt, 2)
    expect_dot_error(function() sched.step() end, "LRScheduler", "step", here())
    expect_dot_error(function() sched.get_last_lr() end, "LRScheduler", "get_last_lr", here())
    sched:step()
    assert.are.same({0.1}, sched:get_last_lr())
  end)

  it("DataLoader, Dataset, TensorDataset, TokenFile", function()
    local ds = data.TensorDataset(accel.arange(1, 6))
    local loader = data.DataLoader(ds, {batch_size = 2})
    expect_dot_error(function() loader.iter() end, "DataLoader", "iter", here())
    expect_dot_error(function() loader.set_epoch(1) end, "DataLoader", "set_epoch", here())
    expect_dot_error(function() ds.get(1) end, "TensorDataset", "get", here())
    local fds = data.Dataset({len = 3, get = function(i) return i end})
    expect_dot_error(function() fds.get(1) end, "Dataset", "get", here())
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    f:write(string.pack("<i4i4i4", 20240520, 1, 4), string.rep("\0", 1024 - 12), string.pack("<I2I2I2I2", 1, 2, 3, 4))
    f:close()
    local tf = data.TokenFile(path, {block_size = 2})
    expect_dot_error(function() tf.get(1) end, "TokenFile", "get", here())
    assert.are.equal(1, #tf)
    os.remove(path)
  end)

  it("trackers, progress bars, PartialState, GradientState, autograd ctx, GPT2Config", function()
    local tracking = require("accel.tracking")
    local dir = tmpdir()
    local tr = tracking.create("jsonl", {project_dir = dir})
    expect_dot_error(function() tr.log({loss = 1}, 1) end, "Tracker", "log", here())
    tr:log({loss = 1}, 1)
    tr:finish()
    os.execute("rm -rf " .. dir)
    local My = tracking.GeneralTracker:extend({name = "my"})
    local mine = My:new({})
    expect_dot_error(function() mine.finish() end, "GeneralTracker", "finish", here())
    mine:finish()
    local bar = require("accel.progress").bar(10, {disable = true})
    expect_dot_error(function() bar.update(1) end, "ProgressBar", "update", here())
    bar:update(1)
    bar:close()
    local ps = accel.PartialState()
    expect_dot_error(function() ps.wait_for_everyone() end, "PartialState", "wait_for_everyone", here())
    local gs = require("accel.state").GradientState(1, {})
    expect_dot_error(function() gs.do_sync() end, "GradientState", "do_sync", here())
    local line
    local Double = accel.autograd.Function({
      forward = function(ctx, x) line = here(); ctx.save_for_backward(x) return x * 2 end,
      backward = function(_, g) return g * 2 end,
    })
    local err = errmsg(function() return Double(accel.ones(2)) end)
    assert.matches(SRC .. ":" .. line .. ": ctx.save_for_backward: call it as obj:save_for_backward", err, 1, true)
    local cfg = accel.models.gpt2.GPT2Config({n_layer = 1, n_embd = 8, n_head = 2, vocab_size = 10, n_positions = 4})
    expect_dot_error(function() cfg.to_dict() end, "GPT2Config", "to_dict", here())
    assert.are.equal(8, cfg:to_dict().n_embd)
  end)

  it("tensor methods: every one, called as t.name(x)", function()
    local methods = debug.getregistry()["accel.TensorMethods"]
    local t, count = accel.ones(2), 0
    for name in pairs(methods) do
      count = count + 1
      -- t.name(2): the method gets 2 as its tensor (t["repeat"](2): repeat is a Lua keyword)
      local call = assert(load(("local t = ...; local r = t[%q](2); return r"):format(name), "=" .. SRC))
      local err = errmsg(function() return call(t) end)
      local want = ("Tensor.%s: call it as t:%s(...), not t.%s(...)"):format(name, name, name)
      if name == "repeat" then want = 'Tensor.repeat: call it as t["repeat"](t, ...) (repeat is a Lua keyword' end
      assert.is_truthy(err:find(want, 1, true), name .. ": " .. err)
    end
    assert.is_true(count > 100)
    expect_dot_error(function() t.sum() end, "Tensor", "sum", here())
    expect_dot_error(function() t.add(1) end, "Tensor", "add", here())
    expect_dot_error(function() t.matmul() end, "Tensor", "matmul", here())
    assert.are.equal(2, t:sum():item())
  end)

  it("util.check_methods: a class of one's own, and subclasses by metatable chain", function()
    local Base = {}
    Base.__index = Base
    function Base.new() return setmetatable({}, Base) end
    function Base:hello() return "hi" end
    local Sub = setmetatable({}, {__index = Base})
    Sub.__index = Sub
    util.check_methods(Base, "Base")
    local s = setmetatable({}, Sub)
    assert.are.equal("hi", s:hello())
    assert.are.equal("hi", Base.new():hello())
    expect_dot_error(function() s.hello() end, "Base", "hello", here())
    expect_dot_error(function() s.hello({}) end, "Base", "hello", here())
  end)
end)

describe("for batch in loader do", function()
  local function batches_of(loader, via_iter)
    local out = {}
    if via_iter then
      for b in loader:iter() do out[#out + 1] = b:tolist() end
    else
      for b in loader do out[#out + 1] = b:tolist() end
    end
    return out
  end

  it("iterates one pass, as loader:iter() does, pass after pass", function()
    local ds = data.TensorDataset(accel.arange(1, 6))
    local loader = data.DataLoader(ds, {batch_size = 2})
    assert.are.same({{1, 2}, {3, 4}, {5}}, batches_of(loader, false))
    assert.are.same({{1, 2}, {3, 4}, {5}}, batches_of(loader, true))
    assert.are.same({{1, 2}, {3, 4}, {5}}, batches_of(loader, false))
  end)

  it("a loop left with break leaves its pass; the next loop starts a new one", function()
    local loader = data.DataLoader(data.TensorDataset(accel.arange(1, 6)), {batch_size = 2})
    for b in loader do
      assert.are.same({1, 2}, b:tolist())
      break
    end
    assert.are.same({{1, 2}, {3, 4}, {5}}, batches_of(loader, false))
  end)

  -- PyTorch 2.x, `for (xb,) in l: firsts.append(xb[0].item()); for (peek,) in l: break` over
  -- DataLoader(TensorDataset(torch.arange(8)), batch_size=2): firsts == [0, 2, 4, 6]; with a whole
  -- inner loop instead of the peek, every inner loop sees 4 batches
  it("a loop nested in another over the same loader has a pass of its own", function()
    local loader = data.DataLoader(data.TensorDataset(accel.arange(8)), {batch_size = 2})
    local firsts, inner, samples = {}, {}, {}
    for xb in loader do
      firsts[#firsts + 1], samples[#samples + 1] = xb[1]:item(), loader:state_dict().samples
      assert(#firsts <= 4, "the outer loop went on past its 4 batches")
      for _ in loader do break end -- a peek
      inner[#inner + 1] = #batches_of(loader, false)
    end
    assert.are.same({0, 2, 4, 6}, firsts)
    assert.are.same({4, 4, 4, 4}, inner)
    -- each batch of the outer loop has its own position (k batches of 2: 2k samples; on the last batch
    -- the start of the next epoch), and the epoch is over once, when the outer loop is
    assert.are.same({2, 4, 6, 0}, samples)
    assert.are.same({epoch = 1, samples = 0}, loader:state_dict())
    -- batches that are plain numbers (from a collate_fn, the same in both loops), with both loops on one line
    local sums = data.DataLoader(data.TensorDataset(accel.arange(8)), {batch_size = 2, collate_fn = function(b)
      return b[1]:item() + b[2]:item()
    end})
    local outer, peeks = {}, {}
    for s in sums do outer[#outer + 1] = s; assert(#outer <= 4) for p in sums do peeks[#peeks + 1] = p break end end
    assert.are.same({1, 5, 9, 13}, outer)
    assert.are.same({1, 1, 1, 1}, peeks)
    -- called other than by a for loop, it says what to use
    support.expect_error(function() local _ = sums() end, "`for batch in loader do` loop", "loader:iter()")
  end)

  it("a prepared loader: the outer loop keeps its own pass, end_of_dataloader and gradient state", function()
    local a = accel.Accelerator{cpu = true}
    local loader = a:prepare(data.DataLoader(data.TensorDataset(accel.arange(8)), {batch_size = 2}))
    for round = 1, 2 do -- with a peek, then with a whole inner loop (which ends its own pass)
      local firsts, ends, gs_ends = {}, {}, {}
      for xb in loader do
        firsts[#firsts + 1], ends[#ends + 1] = xb[1]:item(), loader.end_of_dataloader
        gs_ends[#gs_ends + 1] = a.gradient_state.end_of_dataloader
        assert(#firsts <= 4, "the outer loop went on past its 4 batches")
        for _ in loader do if round == 1 then break end end
      end
      assert.are.same({0, 2, 4, 6}, firsts)
      assert.are.same({false, false, false, true}, ends)
      assert.are.same({false, false, false, true}, gs_ends)
    end
    assert.is_false(a.gradient_state.in_dataloader)
  end)

  it("several batch values: for x, y in loader do", function()
    local ds = data.TensorDataset(accel.arange(1, 5), accel.arange(11, 15))
    local loader = data.DataLoader(ds, {batch_size = 2, shuffle = true, seed = 3})
    local xs, ys = {}, {}
    for x, y in loader do
      for i, v in ipairs(x:tolist()) do xs[#xs + 1], ys[#ys + 1] = v, y:tolist()[i] end
    end
    assert.are.equal(4, #xs)
    for i = 1, 4 do assert.are.equal(xs[i] + 10, ys[i]) end
  end)
end)
