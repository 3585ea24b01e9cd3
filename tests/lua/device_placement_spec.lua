-- device_placement_spec.lua: where the Accelerator puts things, as
-- Accelerate does (state.py's device choice, accelerator.py's prepare_model
-- / prepare_data_loader, data_loader.py's send_to_device): the process
-- state's device, models and loader batches moved there, optimizers made
-- before prepare following their moved parameters, data sets kept on a
-- device indexed there, checkpoints written from any device and loaded
-- onto the model's device. Each check puts things on "sim" and "cpu"
-- explicitly, so both passes of the suite (CPU, then ACCEL_LUA_DEVICE=sim)
-- move something. Expected values: the devices named here, the CPU
-- tensors the data was made from (copies are exact), and a CPU run of the
-- same steps (sim computes with the CPU kernels, bit for bit:
-- docs/devices.md).
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local nn, optim, data = accel.nn, accel.optim, accel.data
local state = require("accel.state")
local tmpdir, error_matching = support.tmpdir, support.error_matching

local function dev(t) return tostring(t.device) end

-- a and b hold the same values, bit for bit, wherever they live
local function same(a, b) return a:to("cpu"):equal(b:to("cpu")) end

-- fn() with `device` as the default device and a fresh process state (the
-- state picks its device when it is made); both are put back afterwards.
local function on_default(device, fn)
  local before = accel.get_default_device()
  accel.set_default_device(device)
  state.reset_state()
  local ok, err = pcall(fn)
  accel.set_default_device(before)
  state.reset_state()
  if not ok then error(err, 0) end
end

-- A small model built on the CPU (seeded: the same values every time).
local function cpu_mlp(seed)
  accel.set_seed(seed or 1)
  local m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
  return m:to("cpu")
end

local function all_on(list, device)
  for i, t in ipairs(list) do
    if dev(t) ~= device then return false, ("tensor %d is on %s"):format(i, dev(t)) end
  end
  return true
end

describe("accel.device_count", function()
  it("counts the devices of a type", function()
    assert.are.equal(1, accel.device_count("cpu"))
    assert.are.equal(1, accel.device_count("sim"))
    assert.are.equal(1, accel.device_count(accel.device("sim")))
    if not pcall(accel.zeros, 1, {device = "cuda"}) then -- a build or machine without a GPU
      assert.are.equal(0, accel.device_count("cuda"))
      assert.are.equal(0, accel.device_count("cuda:0"))
    end
  end)

  it("without a type counts the accelerator in use (the default device, else cuda)", function()
    local before = accel.get_default_device()
    accel.set_default_device("sim")
    local n_sim = accel.device_count()
    accel.set_default_device("cpu")
    local n_cpu = accel.device_count()
    accel.set_default_device(before)
    assert.are.equal(1, n_sim)
    assert.are.equal(accel.device_count("cuda"), n_cpu)
  end)

  it("names a bad device", function()
    error_matching("unknown device 'gpu'", function() accel.device_count("gpu") end)
    error_matching("device expected", function() accel.device_count(3) end)
  end)
end)

describe("accelerator.device", function()
  it("is the default device; cpu = true forces the CPU", function()
    on_default("sim", function()
      assert.are.equal("sim", dev(accel.PartialState()))
      assert.are.equal("sim", dev(accel.Accelerator()))
      assert.are.equal("cpu", dev(accel.Accelerator{cpu = true}))
    end)
    on_default("cpu", function()
      assert.are.equal("cpu", dev(accel.Accelerator()))
      assert.are.equal("cpu", dev(accel.PartialState()))
    end)
  end)

  it("is picked when the process state is made (Accelerate's shared state)", function()
    on_default("sim", function()
      local a = accel.Accelerator()
      accel.set_default_device("cpu")
      assert.are.equal("sim", dev(a))
      assert.are.equal("sim", dev(accel.Accelerator()))
    end)
  end)

  it("PartialState{cpu = true} made first keeps the process on the CPU", function()
    on_default("sim", function()
      assert.are.equal("cpu", dev(accel.PartialState{cpu = true}))
      assert.are.equal("cpu", dev(accel.Accelerator()))
    end)
  end)
end)

describe("prepare places the model", function()
  it("moves parameters and buffers to accelerator.device, values unchanged", function()
    on_default("sim", function()
      local a = accel.Accelerator()
      local model = cpu_mlp()
      model:register_buffer("scale", accel.tensor({2.0}, {device = "cpu"}))
      local before = {}
      for i, p in ipairs(model:parameters()) do before[i] = p:clone() end
      local m = a:prepare(model)
      assert(all_on(m:parameters(), "sim"))
      assert(all_on(m:buffers(), "sim"))
      for i, p in ipairs(m:parameters()) do
        assert.is_true(same(p, before[i]), "parameter " .. i)
        assert.is_true(p.requires_grad)
      end
    end)
  end)

  it("moves a model on the device back to the CPU for cpu = true", function()
    on_default("sim", function()
      local m = cpu_mlp():to("sim")
      accel.Accelerator{cpu = true}:prepare(m)
      assert(all_on(m:parameters(), "cpu"))
    end)
  end)

  it("names the parameter of a model without to() that is elsewhere", function()
    on_default("sim", function()
      local w = nn.Parameter(accel.ones(2, {device = "cpu"}))
      local bare = {parameters = function() return {w} end, forward = function(_, x) return x * w end}
      error_matching("prepare: parameter 1 of the model is on cpu and the model has no to%(device%) method to move "
        .. "it to sim", function() accel.Accelerator():prepare(bare) end)
      assert.are.equal(bare, accel.Accelerator{cpu = true}:prepare_model(bare)) -- already there: nothing to move
    end)
  end)

  it("leaves the model where it is with device_placement = false", function()
    on_default("sim", function()
      local m = accel.Accelerator{device_placement = false}:prepare(cpu_mlp())
      assert(all_on(m:parameters(), "cpu"))
      local m2 = accel.Accelerator():prepare_model(cpu_mlp(), {device_placement = false})
      assert(all_on(m2:parameters(), "cpu"))
      local m3 = accel.Accelerator{device_placement = false}:prepare_model(cpu_mlp(), {device_placement = true})
      assert(all_on(m3:parameters(), "sim"))
    end)
  end)

  it("follows prepare's device_placement list, one entry per object (Accelerate's prepare(*args, device_placement))",
    function()
    on_default("sim", function()
      local a, b, c = cpu_mlp(), cpu_mlp(), cpu_mlp()
      local n = select("#", accel.Accelerator():prepare(a, b, {device_placement = {false, true}}))
      assert.are.equal(2, n) -- the options table is not an object
      assert(all_on(a:parameters(), "cpu"))
      assert(all_on(b:parameters(), "sim"))
      accel.Accelerator{device_placement = false}:prepare(c, {device_placement = {true}})
      assert(all_on(c:parameters(), "sim"))
    end)
  end)
end)

-- `steps` AdamW steps of a fresh cpu_mlp on fixed data, prepared by an
-- Accelerator made on `device` in the order `order` ("model first" or
-- "optimizer first"); the parameters, their device, and the optimizer.
local function train(device, order, steps)
  local out
  on_default(device, function()
    local a = accel.Accelerator()
    local model = cpu_mlp(3)
    local opt = optim.AdamW(model:parameters(), {lr = 0.05})
    if order == "optimizer first" then
      opt, model = a:prepare(opt, model)
    else
      model, opt = a:prepare(model, opt)
    end
    accel.set_seed(4)
    local x, y = accel.randn(6, 4, {device = "cpu"}), accel.randn(6, 2, {device = "cpu"})
    x, y = x:to(a.device), y:to(a.device)
    for _ = 1, steps do
      a:backward((model(x) - y):pow(2):mean())
      opt:step()
      opt:zero_grad()
    end
    out = {params = model:parameters(), opt = opt, model = model}
  end)
  return out
end

describe("an optimizer made before prepare", function()
  it("holds the moved parameters and trains on the device as on the CPU", function()
    local ref = train("cpu", "model first", 3)
    for _, order in ipairs({"model first", "optimizer first"}) do
      local got = train("sim", order, 3)
      assert(all_on(got.params, "sim"))
      local held = got.opt.param_groups[1].params
      for i, p in ipairs(got.params) do
        assert.is_true(rawequal(p, held[i]), order .. ": the optimizer holds parameter " .. i .. " of the model")
        assert.is_true(same(p, ref.params[i]), order .. ": parameter " .. i .. " equals the CPU run")
      end
      for i, st in pairs(got.opt:state_dict().state) do
        assert.are.equal("sim", dev(st.exp_avg), "optimizer state " .. i)
      end
    end
  end)

  it("keeps its state, moved to the parameters' device (prepared in a later call)", function()
    on_default("sim", function()
      local model = cpu_mlp(5)
      local opt = optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
      model(accel.ones(2, 4, {device = "cpu"})):sum():backward()
      opt:step() -- momentum buffers on the CPU
      local bufs = {}
      for i, st in pairs(opt:state_dict().state) do bufs[i] = st.momentum_buffer:clone() end
      local a = accel.Accelerator()
      model = a:prepare(model)
      opt = a:prepare(opt) -- a later call: still switched to the moved parameters
      for i, st in pairs(opt:state_dict().state) do
        assert.are.equal("sim", dev(st.momentum_buffer))
        assert.is_true(same(st.momentum_buffer, bufs[i]), "momentum buffer " .. i)
      end
      model(accel.ones(2, 4, {device = "sim"})):sum():backward()
      opt:step() -- state and parameters agree on the device
      assert(all_on(model:parameters(), "sim"))
    end)
  end)

  it("keeps its state where it is with device_placement = false, still holding the moved parameters", function()
    on_default("sim", function()
      local model = cpu_mlp(5)
      local opt = optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
      model(accel.ones(2, 4, {device = "cpu"})):sum():backward()
      opt:step() -- momentum buffers on the CPU
      local a = accel.Accelerator()
      local prepared = a:prepare_optimizer(opt, {device_placement = false})
      assert.is_false(prepared.device_placement)
      model = a:prepare(model) -- the optimizer prepared first follows the moved parameters
      local held = opt.param_groups[1].params
      for i, p in ipairs(model:parameters()) do assert.is_true(rawequal(p, held[i]), "parameter " .. i) end
      for _, st in pairs(opt:state_dict().state) do assert.are.equal("cpu", dev(st.momentum_buffer)) end
      local m2, o2 = cpu_mlp(6), nil
      o2 = optim.SGD(m2:parameters(), {lr = 0.1, momentum = 0.9})
      m2(accel.ones(2, 4, {device = "cpu"})):sum():backward()
      o2:step()
      m2, o2 = accel.Accelerator():prepare(m2, o2, {device_placement = {true, false}})
      assert(all_on(m2:parameters(), "sim"))
      for _, st in pairs(o2:state_dict().state) do assert.are.equal("cpu", dev(st.momentum_buffer)) end
    end)
  end)
end)

describe("prepared data loaders", function()
  local function loader_of(x, o)
    return data.DataLoader(data.TensorDataset(x), o or {batch_size = 3})
  end

  it("yield batches on accelerator.device with the data set's values", function()
    on_default("sim", function()
      local x = accel.arange(7, {device = "cpu"})
      local l = accel.Accelerator():prepare(loader_of(x))
      local seen = {}
      for xb in l:iter() do
        assert.are.equal("sim", dev(xb))
        for _, v in ipairs(xb:tolist()) do seen[#seen + 1] = v end
      end
      assert.are.same({0, 1, 2, 3, 4, 5, 6}, seen)
    end)
  end)

  it("move every tensor of a table batch; other values pass through", function()
    on_default("sim", function()
      local ds = data.Dataset{len = 4, get = function(i)
        return {x = accel.full({2}, i, {device = "cpu"}), meta = {id = accel.tensor({i}, {device = "cpu"}), name = "s" .. i}}
      end}
      local collate = function(samples)
        local xs, ids, names = {}, {}, {}
        for b, s in ipairs(samples) do xs[b], ids[b], names[b] = s.x, s.meta.id, s.meta.name end
        return {x = accel.stack(xs), meta = {id = accel.cat(ids), names = names}, count = #samples}
      end
      local l = accel.Accelerator():prepare(data.DataLoader(ds, {batch_size = 2, collate_fn = collate}))
      local b = l:iter()()
      assert.are.equal("sim", dev(b.x))
      assert.are.equal("sim", dev(b.meta.id))
      assert.are.same({{1, 1}, {2, 2}}, b.x:tolist())
      assert.are.same({"s1", "s2"}, b.meta.names)
      assert.are.equal(2, b.count)
    end)
  end)

  it("move several fields; cpu = true brings a device data set's batches to the CPU", function()
    on_default("sim", function()
      local x, y = accel.arange(4, {device = "sim"}), accel.arange(4, {device = "cpu"}) * 10
      local l = accel.Accelerator{cpu = true}:prepare(data.DataLoader(data.TensorDataset(x, y), {batch_size = 4}))
      local xb, yb = l:iter()()
      assert.are.equal("cpu", dev(xb))
      assert.are.equal("cpu", dev(yb))
      assert.are.same({0, 10, 20, 30}, yb:tolist())
    end)
  end)

  it("leave batches where the data set is with device_placement = false", function()
    on_default("sim", function()
      local l = accel.Accelerator{device_placement = false}:prepare(loader_of(accel.arange(4, {device = "cpu"})))
      assert.are.equal("cpu", dev(l:iter()()))
    end)
  end)
end)

describe("a data set on a device", function()
  it("is indexed there, in the order a CPU data set gives", function()
    local function ids(device)
      local l = data.DataLoader(data.TensorDataset(accel.arange(10, {device = device}),
        accel.arange(10, {device = "cpu"})), {batch_size = 4, shuffle = true, seed = 3})
      local out = {}
      for xb, yb in l:iter() do
        assert.are.equal(device, dev(xb))
        assert.are.equal("cpu", dev(yb))
        assert.are.same(yb:tolist(), xb:tolist())
        out[#out + 1] = xb:tolist()
      end
      return out
    end
    assert.are.same(ids("cpu"), ids("sim"))
  end)

  it("reads CSV column lists on the CPU whatever the default device", function()
    local path = support.tmpname(".csv")
    support.write_file(path, "a,b,c\n1,2,3\n4,5,6\n")
    local before = accel.get_default_device()
    accel.set_default_device("sim")
    local ok, ds = pcall(data.CSV, path, {columns = {{"a", "c"}, "b"}})
    accel.set_default_device(before)
    os.remove(path)
    assert(ok, ds)
    local ab, b = ds:get(2)
    assert.are.same({4, 6}, ab:tolist())
    assert.are.equal(5, b:item())
  end)
end)

describe("checkpoints from any device", function()
  local function prepared(device, seed)
    local s = {}
    on_default(device, function()
      s.a = accel.Accelerator()
      local model = cpu_mlp(seed)
      local opt = optim.Adam(model:parameters(), {lr = 0.01})
      s.model, s.opt = s.a:prepare(model, opt)
      assert(all_on(s.model:parameters(), device))
      local x = accel.randn(3, 4, {device = "cpu"}):to(s.a.device)
      s.a:backward(s.model(x):pow(2):sum())
      s.opt:step()
      s.opt:zero_grad()
    end)
    return s
  end

  it("save_state on sim, load_state into a CPU model: equal bit for bit", function()
    local dir = tmpdir()
    local src = prepared("sim", 7)
    src.a:save_state(dir .. "/ckpt")
    local dst = prepared("cpu", 8) -- other values
    dst.a:load_state(dir .. "/ckpt")
    assert(all_on(dst.model:parameters(), "cpu"))
    for i, p in ipairs(dst.model:parameters()) do
      assert.is_true(same(p, src.model:parameters()[i]), "parameter " .. i)
    end
    local so, do_ = src.opt:state_dict().state, dst.opt:state_dict().state
    for i, st in pairs(so) do
      assert.are.equal("cpu", dev(do_[i].exp_avg))
      assert.is_true(same(st.exp_avg, do_[i].exp_avg), "exp_avg " .. i)
      assert.is_true(same(st.exp_avg_sq, do_[i].exp_avg_sq), "exp_avg_sq " .. i)
      assert.are.equal(st.step, do_[i].step)
    end
    support.remove_tree(dir)
  end)

  it("load_state onto a sim model keeps parameters and optimizer state on sim", function()
    local dir = tmpdir()
    local src = prepared("cpu", 7)
    src.a:save_state(dir .. "/ckpt")
    local dst = prepared("sim", 8)
    dst.a:load_state(dir .. "/ckpt")
    assert(all_on(dst.model:parameters(), "sim"))
    for i, p in ipairs(dst.model:parameters()) do
      assert.is_true(same(p, src.model:parameters()[i]), "parameter " .. i)
    end
    for _, st in pairs(dst.opt:state_dict().state) do assert.are.equal("sim", dev(st.exp_avg)) end
    -- and it trains on from there
    on_default("sim", function()
      dst.a:backward(dst.model(accel.ones(1, 4, {device = "sim"})):sum())
      dst.opt:step()
    end)
    support.remove_tree(dir)
  end)

  it("save_model from sim writes the values the model holds", function()
    local dir = tmpdir()
    local src = prepared("sim", 9)
    src.a:save_model(src.model, dir)
    local saved = accel.load(dir .. "/model.safetensors")
    local sd = src.model:state_dict()
    local n = 0
    for k, v in pairs(sd) do
      n = n + 1
      assert.are.equal("cpu", dev(saved[k]))
      assert.is_true(same(v, saved[k]), k)
    end
    assert.are.equal(4, n)
    support.remove_tree(dir)
  end)
end)

describe("the end of a process", function()
  it("waits for the device's queued work before the kernel libraries go", function()
    -- 20000 small GEMMs queued on sim and never read: the script ends long
    -- before they are done (without the wait, about half such runs crashed
    -- in oneDNN's JIT code freed by its exit handlers)
    local script = support.tmpname(".lua")
    support.write_file(script, [[
      local accel = require("accel")
      local a = accel.randn(64, 64, {device = "sim"}):mul(0.1)
      local b = a
      for _ = 1, 20000 do b = a:matmul(b) end
    ]])
    for run = 1, 6 do
      local ok, how, code = support.execute(support.shell_quote(support.ACCEL_LUA) .. " " .. support.shell_quote(script))
      assert.is_true(ok == true, ("run %d ended by %s %s"):format(run, tostring(how), tostring(code)))
    end
    os.remove(script)
  end)
end)

describe("Module:to with a dtype only", function()
  -- PyTorch 2.15: nn.Linear(2, 2, device="meta").half() stays on meta (float16);
  -- with torch.set_default_device("meta") a cpu Linear's double() stays on cpu.
  it("keeps every tensor on its device", function()
    local l = nn.Linear(2, 2, {device = "sim"})
    l:register_buffer("fb", accel.ones(2, {device = "sim"}))
    l:half()
    assert.are.equal("sim", dev(l.weight))
    assert.are.equal("sim", dev(l.fb))
    assert.are.equal("float16", l.weight.dtype.name)
    for _, args in ipairs({{accel.float32}, {}, {{non_blocking = true}}, {{dtype = accel.float64}}}) do
      l:to(table.unpack(args))
      assert.are.equal("sim", dev(l.weight))
      assert.are.equal("sim", dev(l.bias))
    end
    assert.are.equal("float64", l.weight.dtype.name)
    on_default("sim", function()
      local c = nn.Linear(2, 2, {device = "cpu"})
      c:double()
      assert.are.equal("cpu", dev(c.weight))
      c:float():bfloat16()
      assert.are.equal("cpu", dev(c.bias))
    end)
  end)
end)

describe("an optimizer not passed to prepare", function()
  -- Accelerate (r38): opt = SGD(m.parameters()); pm = a.prepare(m); three
  -- steps of opt: the weights change, and opt.zero_grad() clears the grads.
  it("keeps training the moved model", function()
    on_default("sim", function()
      local m = nn.Linear(3, 2, {device = "cpu"})
      local opt = optim.SGD(m:parameters(), {lr = 0.1})
      local a = accel.Accelerator()
      local pm = a:prepare(m)
      assert.are.equal("sim", dev(pm.weight))
      local w0 = pm.weight:cpu()
      for _ = 1, 3 do
        a:backward(pm(accel.ones(4, 3, {device = a.device})):pow(2):mean())
        opt:step()
        opt:zero_grad()
      end
      assert.is_false(pm.weight:cpu():equal(w0))
      assert.is_nil(pm.weight.grad)
    end)
  end)

  -- PyTorch: m.to(float64) moves in place, so opt.param_groups[0]['params'][0] is m.weight.
  it("follows Module:to outside prepare, its state kept where it is", function()
    local m = nn.Linear(3, 2, {device = "cpu"})
    local opt = optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9})
    m(accel.ones(1, 3, {device = "cpu"})):sum():backward()
    opt:step()
    m:to("sim")
    local held = opt.param_groups[1].params
    assert.is_true(rawequal(m.weight, held[1]))
    assert.is_true(rawequal(m.bias, held[2]))
    assert.are.equal("cpu", dev(opt.state[m.weight].momentum_buffer))
    m:to(accel.float64)
    assert.is_true(rawequal(m.weight, opt.param_groups[1].params[1]))
  end)
end)

describe("Accelerator{cpu = true}", function()
  it("makes the cpu the default device of creation functions", function()
    on_default("sim", function()
      local a = accel.Accelerator{cpu = true}
      assert.are.equal("cpu", dev(a))
      assert.are.equal("cpu", dev(accel.zeros(1)))
    end)
  end)
end)

describe("send_to_device", function()
  -- Accelerate: send_to_device calls obj.to(device, non_blocking=...) on
  -- anything with a to method (a dict subclass too, skip_keys not applied).
  it("sends an object by its own to method", function()
    local Batch = {}
    Batch.__index = Batch
    local calls = {}
    function Batch:to(device, o)
      calls[#calls + 1] = {tostring(device), o and o.non_blocking}
      return "moved"
    end
    local b = setmetatable({x = accel.ones(1, {device = "cpu"})}, Batch)
    local out = accel.utils.send_to_device({a = b, t = accel.ones(1, {device = "cpu"})}, "sim", {non_blocking = true})
    assert.are.equal("moved", out.a)
    assert.are.equal("sim", dev(out.t))
    assert.are.same({{"sim", true}}, calls)
    assert.are.equal("moved", accel.utils.send_to_device(b, "sim", {skip_keys = "x"}))
    assert.are.same({"sim", nil}, calls[2])
    local plain = accel.utils.send_to_device({to = accel.ones(1, {device = "cpu"})}, "sim") -- a key, not a method
    assert.are.equal("sim", dev(plain.to))
  end)
end)
