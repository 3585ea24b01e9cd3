-- device_sim_spec.lua: the simulated device "sim" from Lua. Its memory is
-- not host-addressable and its work runs on a worker thread, so every value
-- read here went through the backend's host copies and synchronisation.
-- Expected values are the same computation on the CPU (the sim backend runs
-- the CPU kernels, so results agree to the bit), or closed forms.
local accel = require("accel")
local F = accel.nn.functional

local function same(a, b) return a.device.type == b.device.type end

-- One forward/backward/step of a small classifier on device dev, from the
-- same host values; returns loss, logits, the updated weights (on the cpu).
local function train_step(dev)
  accel.manual_seed(7)
  local x = accel.randn(6, 5):to(dev)
  local target = accel.tensor({0, 2, 1, 3, 3, 0}, {device = dev})
  local w1 = accel.randn(8, 5):mul(0.3):to(dev):requires_grad_()
  local b1 = accel.zeros(8, {device = dev, requires_grad = true})
  local w2 = accel.randn(4, 8):mul(0.3):to(dev):requires_grad_()
  local h = F.layer_norm(F.gelu(F.linear(x, w1, b1)), {8})
  local logits = F.linear(h, w2)
  local loss = F.cross_entropy(logits, target, {label_smoothing = 0.1})
  loss:backward()
  local opt = accel.optim.AdamW({w1, b1, w2}, {lr = 0.01})
  opt:step()
  return loss:item(), logits:detach():to("cpu"), w1:detach():to("cpu"), w2.grad:to("cpu")
end

describe("the sim device", function()
  it("creates tensors, prints them and reads values back", function()
    local t = accel.tensor({{1.5, 2}, {3, 4}}, {device = "sim"})
    assert.are.equal("sim", t.device.type)
    assert.are.same({{1.5, 2}, {3, 4}}, t:tolist())
    assert.are.equal(4, t[2][2]:item())
    assert.truthy(tostring(t):find("device='sim'", 1, true))
    assert.truthy((t * 2):equal(accel.tensor({{3, 4}, {6, 8}}, {device = "sim"})))
    assert.truthy(t:gt(2):any():item())
    assert.is_false(t:gt(5):all():item())
  end)

  it("moves tensors between devices with :to", function()
    local c = accel.arange(12):view(3, 4):t()
    local s = c:to("sim")
    assert.are.equal("sim", s.device.type)
    assert.are.same(c:tolist(), s:tolist())
    assert.are.same(c:tolist(), s:to("cpu"):tolist())
    assert.are.equal("cpu", s:to("cpu").device.type)
    assert.are.equal("sim", accel.tensor(s).device.type) -- a copy where its data is, as torch.tensor(t)
    assert.are.equal("cpu", accel.tensor(s, {device = "cpu"}).device.type)
    local z = accel.zeros(2, 3, {device = "sim"})
    z:copy_(accel.tensor({1, 2, 3})) -- broadcast from the cpu
    assert.are.same({{1, 2, 3}, {1, 2, 3}}, z:tolist())
  end)

  it(":to is recorded by autograd: the gradient goes back to the source device", function()
    local x = accel.tensor({1, 2, 3}, {dtype = accel.float64, device = "cpu", requires_grad = true})
    local y = x:to("sim")
    assert.are.equal("ToCopyBackward", y.grad_fn)
    assert.is_false(y.is_leaf)
    ;(y * y):sum():backward() -- d/dx sum(x^2) = 2x
    assert.are.equal("cpu", x.grad.device.type)
    assert.are.same({2, 4, 6}, x.grad:tolist())
    local w = accel.tensor({1.0, -2.0}, {dtype = accel.float32, device = "sim", requires_grad = true})
    local c = w:to({device = "cpu", dtype = accel.float64}) -- device and dtype in one call
    ;(c * accel.tensor({3, 5}, {dtype = accel.float64, device = "cpu"})):sum():backward()
    assert.are.equal("sim", w.grad.device.type)
    assert.are.equal(accel.float32, w.grad.dtype)
    assert.are.same({3, 5}, w.grad:tolist())
    assert.is_true(rawequal(w, w:to("sim"))) -- already there: the tensor itself, as PyTorch
    local n = accel.no_grad(function() return x:to("sim") end)
    assert.is_nil(n.grad_fn)
  end)

  it("trains a step exactly as the CPU does", function()
    local l_cpu, y_cpu, w_cpu, g_cpu = train_step("cpu")
    local l_sim, y_sim, w_sim, g_sim = train_step("sim")
    assert.are.equal(l_cpu, l_sim)
    assert.truthy(y_cpu:equal(y_sim))
    assert.truthy(w_cpu:equal(w_sim))
    assert.truthy(g_cpu:equal(g_sim))
  end)

  it("runs conv, pooling, attention, reductions and indexing", function()
    accel.manual_seed(3)
    local x, w = accel.randn(2, 3, 7, 6), accel.randn(4, 3, 3, 3)
    local q, k, v = accel.randn(2, 2, 5, 4), accel.randn(2, 2, 6, 4), accel.randn(2, 2, 6, 4)
    local function run(dev)
      local y = F.max_pool2d(F.conv2d(x:to(dev), w:to(dev), nil, {padding = 1}), 2)
      local a = F.scaled_dot_product_attention(q:to(dev), k:to(dev), v:to(dev), {is_causal = true})
      local m, i = y:max(2)
      local g = y:flatten():index_select(1, accel.tensor({0, 5, 7}, {device = dev}))
      return y:to("cpu"), a:to("cpu"), m:to("cpu"), i:to("cpu"), g:to("cpu"), y:sum():item()
    end
    local c, s = {run("cpu")}, {run("sim")}
    for j = 1, 5 do assert.truthy(c[j]:equal(s[j]), "result " .. j) end
    assert.are.equal(c[6], s[6])
  end)

  it("rejects operands on different devices, naming both", function()
    local s, c = accel.ones(3, {device = "sim"}), accel.ones(3, {device = "cpu"})
    local ok, err = pcall(function() return s + c end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("sim and cpu", 1, true))
    ok, err = pcall(function() return c:matmul(accel.ones(3, 2, {device = "sim"})) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("sim", 1, true))
    -- equal and allclose too (torch.equal / torch.allclose raise), even on equal values
    for _, op in ipairs({"equal", "allclose"}) do
      ok, err = pcall(function() return c[op](c, s) end)
      assert.is_false(ok, op .. " of a cpu and a sim tensor returned " .. tostring(err))
      assert.truthy(tostring(err):find(op .. ": tensors are on different devices (cpu and sim)", 1, true), err)
      ok, err = pcall(function() return s[op](s, c) end)
      assert.is_false(ok, op .. " of a sim and a cpu tensor returned " .. tostring(err))
      assert.truthy(tostring(err):find("(sim and cpu)", 1, true), err)
    end
    assert.is_true(s:equal(accel.ones(3, {device = "sim"})))
    assert.is_true(s:allclose(accel.ones(3, {device = "sim"})))
  end)

  -- PyTorch reads a 0-dim CPU tensor in an op on another device as a scalar
  -- (x_cuda * torch.tensor(0.5) is on cuda); any other CPU tensor is refused
  it("takes a 0-dim CPU tensor as a scalar operand, the result and its gradient where they belong", function()
    local s = accel.tensor({1, 2, 3}, {dtype = accel.float32}):to("sim")
    local cpu = {dtype = accel.float32, device = "cpu"} -- explicit: ACCEL_LUA_DEVICE=sim runs this spec too
    local half = accel.tensor(0.5, cpu)
    local function host(t) assert.are.equal("sim", t.device.type); return t:to("cpu"):tolist() end
    assert.are.same({0.5, 1, 1.5}, host(s * half))
    assert.are.same({1.5, 2.5, 3.5}, host(half + s))
    assert.are.same({0.5, 0.5, 3}, host(accel.where(s:gt(2.5), s, half)))
    assert.are.same({1, 4, 9}, host(s:pow(accel.tensor(2.0, cpu))))
    assert.are.same({false, false, true}, host(s:gt(accel.tensor(2.5, cpu))))
    local t = s:clone()
    t:add_(half)
    assert.are.same({1.5, 2.5, 3.5}, host(t))
    -- the scalar's gradient comes back to the CPU: d/dk sum(s * k) = sum(s) = 6
    local k = accel.tensor(2.0, {dtype = accel.float32, device = "cpu", requires_grad = true})
    local w = s:clone():requires_grad_()
    local loss = (w * k):sum()
    loss:backward()
    assert.are.equal("cpu", k.grad.device.type)
    assert.are.equal(6, k.grad:item())
    assert.are.same({2, 2, 2}, host(w.grad))
    -- not 0-dim, or the 0-dim one on the device: refused, as PyTorch does
    for _, bad in ipairs({
      function() return s * accel.tensor({0.5}, cpu) end,
      function() return accel.ones(3, cpu) * accel.tensor(0.5, cpu):to("sim") end,
      function() local c = accel.tensor(1.0, cpu); c:add_(s:sum()); return c end,
    }) do
      local ok, err = pcall(bad)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("tensors are on different devices", 1, true), err)
    end
  end)

  -- PyTorch's engine checks each gradient against its input's device
  -- ("returned an invalid gradient at index 0 - expected device cuda:0 but got cpu")
  it("refuses a gradient on another device than its tensor: from a custom Function, given to backward, assigned", function()
    local ToCpu = accel.autograd.Function{
      forward = function(_, x) return x * 2 end,
      backward = function(_, g) return g:to("cpu") * 2 end,
    }
    local w = accel.ones(3, {device = "sim", requires_grad = true})
    local ok, err = pcall(function() ToCpu.apply(w):sum():backward() end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("returned an invalid gradient for input 1: expected device sim but got cpu", 1, true), err)
    assert.is_nil(w.grad)
    local y = w * 2
    ok, err = pcall(function() y:backward(accel.ones(3, {device = "cpu"})) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("backward: the gradient is on cpu but the tensor is on sim", 1, true), err)
    ok, err = pcall(function() w.grad = accel.zeros(3, {device = "cpu"}) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("assigned grad is on cpu but the tensor is on sim", 1, true), err)
    assert.is_nil(w.grad)
  end)

  it("names both devices when the optimizer's state stayed behind a moved model", function()
    local m = accel.nn.Linear(3, 2):to("sim")
    local opt = accel.optim.Adam(m:parameters(), {lr = 0.1})
    m(accel.ones(4, 3, {device = "sim"})):sum():backward()
    opt:step()
    m:to("cpu")
    m(accel.ones(4, 3, {device = "cpu"})):sum():backward()
    local ok, err = pcall(function() opt:step() end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("Adam: state 'exp_avg' of parameter 1 is on sim but the parameter is on cpu", 1, true), err)
  end)

  -- torch.device("cuda", 1) is cuda:1; "cpu:0" and "sim:0" are cpu and sim;
  -- cpu and sim have one device, index 0.
  it("accel.device(type, index) and \"type:N\" strings, as torch.device", function()
    local function err_of(...)
      local ok, err = pcall(accel.device, ...)
      assert.is_false(ok, "no error: " .. tostring(err))
      return tostring(err)
    end
    assert.are.equal("cpu", tostring(accel.device("cpu:0")))
    assert.are.equal(accel.device("cpu"), accel.device("cpu", 0))
    assert.are.equal("sim", tostring(accel.device("sim:0")))
    assert.are.equal(accel.device("sim"), accel.device("sim", 0))
    assert.are.equal("cpu", accel.zeros(1, {device = "cpu:0"}).device.type)
    assert.are.equal("sim", accel.zeros(1, {device = "sim:0"}).device.type)
    if accel.device_count("cuda") >= 2 then
      assert.are.equal("cuda:1", tostring(accel.device("cuda", 1)))
    else -- no second GPU: the error names the device asked for
      local err = err_of("cuda", 1)
      assert.truthy(err:find("cuda:1", 1, true) and not err:find("cuda:0", 1, true), err)
    end
    local err = err_of("sim", 5)
    assert.truthy(err:find("sim has one device, index 0", 1, true), err)
    err = err_of("cpu", 1)
    assert.truthy(err:find("cpu has one device, index 0", 1, true), err)
    err = err_of("sim:1")
    assert.truthy(err:find("sim has one device, index 0", 1, true), err)
    for _, bad in ipairs({-1, 1.5, "1", true}) do
      err = err_of("cuda", bad)
      assert.truthy(err:find("index must be an integer >= 0", 1, true), err)
    end
    err = err_of("cuda:0", 1)
    assert.truthy(err:find("without an index", 1, true) and err:find("cuda:0", 1, true), err)
    for _, bad in ipairs({"cpu:", "cuda:-1", "cuda:x", "cpux", "cuda:01"}) do
      err = err_of(bad)
      assert.truthy(err:find("unknown device '" .. bad .. "'", 1, true), err)
    end
  end)

  it("is the default device after set_default_device", function()
    local before = accel.get_default_device()
    local ok, err = pcall(function()
      accel.set_default_device("sim")
      local z = accel.zeros(2, 2)
      assert.are.equal("sim", z.device.type)
      assert.are.equal("sim", accel.randn(3).device.type)
      assert.are.equal("sim", accel.arange(4).device.type)
      assert.are.same({0, 1, 2, 3}, accel.arange(4):tolist())
      accel.set_default_device("cpu")
      assert.are.equal("cpu", accel.zeros(1).device.type)
    end)
    accel.set_default_device(before) -- the suite's own default (cpu, or sim on its second pass)
    assert(ok, err)
    assert.are.equal(before.type, accel.zeros(1).device.type) -- back to the suite's default
  end)

  it("reads ACCEL_LUA_DEVICE for the default, and refuses an unknown one", function()
    local exe = arg and arg[-1] or "build/accel-lua"
    local p = io.popen("ACCEL_LUA_DEVICE=sim " .. exe .. " -e 'print(require(\"accel\").zeros(1).device.type)' 2>&1")
    assert.are.equal("sim", p:read("*l"))
    p:close()
    p = io.popen("ACCEL_LUA_DEVICE=tpu " .. exe .. " -e 'print(require(\"accel\").zeros(1).device.type)' 2>&1")
    local out = p:read("*a")
    p:close()
    assert.truthy(out:find("ACCEL_LUA_DEVICE=tpu", 1, true), out)
  end)

  it("saves sim tensors to safetensors (their bytes come through the host)", function()
    local path = os.tmpname()
    local s = accel.arange(6, {dtype = accel.float32}):view(2, 3):to("sim"):t() -- a strided sim view
    accel.save({w = s}, path)
    local back = accel.load(path)
    local on_sim = accel.load(path, {device = "sim"}) -- safetensors' load_file(device=)
    local bad_key = select(2, pcall(accel.load, path, {devcie = "sim"}))
    local bad_dev = select(2, pcall(accel.load, path, {device = "tpu"}))
    os.remove(path)
    assert.are.equal("cpu", back.w.device.type) -- the cpu by default, whatever the default device
    assert.are.same({{0, 3}, {1, 4}, {2, 5}}, back.w:tolist())
    assert.are.equal("sim", on_sim.w.device.type)
    assert.are.same({{0, 3}, {1, 4}, {2, 5}}, on_sim.w:tolist())
    assert.truthy(tostring(bad_key):find("accel.load: unknown option 'devcie'", 1, true), bad_key)
    assert.truthy(tostring(bad_dev):find("unknown device 'tpu'", 1, true), bad_dev)
  end)

  -- The sim backend's rng_fill draws from the state (seed, offset) the host
  -- hands it, so a tensor made on sim holds the CPU's draws bit for bit
  -- and the generator ends in the same state. Expected: the same calls on
  -- the cpu.
  it("draws random tensors on the device with the CPU's values, bit for bit", function()
    local function draws(dev, dtype)
      accel.manual_seed(1234)
      local o = {device = dev, dtype = dtype}
      local ts = {accel.randn(7, 3, o), accel.rand(5, o), accel.randn(1, o), accel.rand(9, 3, o),
                  F.dropout(accel.ones(17, o), {p = 0.3, training = true}), accel.randint(-5, 100, {11}, {device = dev}),
                  accel.randn_like(accel.zeros(3, 5, o))}
      local vals = {}
      for i, t in ipairs(ts) do
        assert.are.equal(dev, t.device.type)
        vals[i] = t:to("cpu"):reshape({-1}):tolist()
      end
      local seed, offset = accel.get_rng_state()
      return vals, seed, offset
    end
    for _, dtype in ipairs({"float32", "float64"}) do
      local cv, cs, co = draws("cpu", dtype)
      local sv, ss, so = draws("sim", dtype)
      assert.are.same(cv, sv)
      assert.are.equal(cs, ss)
      assert.are.equal(co, so)
    end
  end)

  it("synchronize waits for queued work", function()
    local t = accel.ones(1000, {device = "sim"}) * 3
    accel.synchronize("sim")
    assert.are.equal(3000, t:sum():item())
  end)
  it("has the machine's memory (or ACCEL_LUA_SIM_MEMORY): past it, an out-of-memory error", function()
    local exe = arg and arg[-1] or "build/accel-lua"
    local function run(env, n)
      local p = io.popen(env .. " " .. exe .. " -e 'local a = require(\"accel\") print(pcall(a.empty, " .. n
        .. ", {device = \"sim\", dtype = a.uint8}))' 2>&1")
      local out = p:read("*a")
      p:close()
      return out
    end
    assert.truthy(run("ACCEL_LUA_SIM_MEMORY=4096", 8192):find("out of memory: cannot allocate 8192 bytes on sim", 1,
      true))
    assert.truthy(run("ACCEL_LUA_SIM_MEMORY=4096", 2048):find("^true"))
    -- a bad setting is an ordinary error at the first allocation (the process, maybe a host's, lives on)
    local bad = run("ACCEL_LUA_SIM_MEMORY=4k", 1)
    assert.truthy(bad:find("^false\t%(command line%):1: cannot allocate 1 bytes on sim: sim: ACCEL_LUA_SIM_MEMORY=4k is "
      .. "not a number of bytes > 0"), bad)
    local f = io.open("/proc/meminfo")
    local kib = tonumber(f:read("*a"):match("MemTotal:%s*(%d+) kB"))
    f:close()
    local n = kib * 1024 + 2 ^ 20 -- more than the machine has
    local ok, err = pcall(accel.empty, n, {device = "sim", dtype = accel.uint8})
    assert.is_false(ok)
    assert.truthy(err:find(("out of memory: cannot allocate %d bytes on sim"):format(n), 1, true), err)
  end)

  it("says a string that is neither a dtype nor a device is neither", function()
    -- PyTorch 2.15, t.to("gpu"): "Expected one of cpu, cuda, ... device type at start of device string: gpu"
    local err = select(2, pcall(function() return accel.zeros(2):to("gpu") end))
    assert.truthy(err:find("to: 'gpu' is neither a dtype nor a device", 1, true), err)
    assert.truthy(err:find('"cpu", "cuda", "cuda:N" or "sim"', 1, true), err)
    err = select(2, pcall(function() return accel.nn.Linear(2, 2):to("gpu") end))
    assert.truthy(err:find("Module.to: to: 'gpu' is neither a dtype nor a device", 1, true), err)
  end)

  it("refuses a non-boolean non_blocking", function()
    -- PyTorch 2.15: t.to("cpu", non_blocking="yes") is a TypeError (bool non_blocking expected)
    local err = select(2, pcall(function() return accel.zeros(2):to({non_blocking = "yes"}) end))
    assert.truthy(err:find("to: option 'non_blocking' must be a boolean, got string", 1, true), err)
    assert.are.equal("sim", accel.zeros(2):to({device = "sim", non_blocking = true}).device.type)
  end)

  it("set_default_device(nil) resets the default", function()
    -- PyTorch 2.15: torch.set_default_device(None) -> torch.zeros(1).device is cpu (the start's default)
    local before = accel.get_default_device()
    accel.set_default_device("sim")
    accel.set_default_device(nil)
    local after = accel.get_default_device()
    accel.set_default_device(before)
    assert.are.equal(os.getenv("ACCEL_LUA_DEVICE") == "sim" and "sim" or "cpu", after.type)
  end)
end)

-- Library functions that make helper tensors (kernels, masks, divisors,
-- norms, sampled tokens) make them on their input's device, not on the
-- default one: on the CPU pass the inputs are on sim, on the sim pass on
-- the cpu. Expected: the same call with every tensor on the cpu (the sim
-- backend runs the CPU kernels, so results agree to the bit).
describe("helper tensors follow their input's device", function()
  local other = accel.get_default_device().type == "cpu" and "sim" or "cpu"

  it("avg_pool2d (its ones kernel and divisors)", function()
    accel.manual_seed(5)
    local x = accel.randn(2, 3, 7, 6, {device = "cpu"})
    local o = {stride = 2, padding = 1, ceil_mode = true, count_include_pad = false}
    local y = F.avg_pool2d(x:to(other), 3, o)
    assert.are.equal(other, y.device.type)
    assert.truthy(y:to("cpu"):equal(F.avg_pool2d(x, 3, o)))
  end)

  it("MultiheadAttention's causal mask", function()
    accel.manual_seed(6)
    local mha = accel.nn.MultiheadAttention(4, 2)
    local x = accel.randn(3, 2, 4, {device = "cpu"})
    local want = mha:to("cpu")(x, x, x, {is_causal = true})
    mha:to(other)
    local xo = x:to(other)
    local got = mha(xo, xo, xo, {is_causal = true})
    assert.are.equal(other, got.device.type)
    assert.truthy(got:to("cpu"):equal(want))
  end)

  it("nn.init.eye_, normal_ and orthogonal_ on a tensor of the other device", function()
    local e = accel.empty(2, 3, {device = other})
    accel.nn.init.eye_(e)
    assert.are.same({{1, 0, 0}, {0, 1, 0}}, e:tolist())
    accel.manual_seed(8)
    local n = accel.nn.init.normal_(accel.empty(5, {device = other}))
    accel.manual_seed(8)
    assert.truthy(n:to("cpu"):equal(accel.nn.init.normal_(accel.empty(5, {device = "cpu"}))))
    accel.manual_seed(9)
    local q = accel.nn.init.orthogonal_(accel.empty(3, 4, {device = other}))
    accel.manual_seed(9)
    assert.truthy(q:to("cpu"):equal(accel.nn.init.orthogonal_(accel.empty(3, 4, {device = "cpu"}))))
  end)

  it("clip_grad_norm_ returns the norm on the gradients' device", function()
    local w = accel.tensor({3.0, 4.0}, {dtype = accel.float32, device = other, requires_grad = true})
    ;(w * w):sum():backward() -- grad 2w = {6, 8}: norm 10
    local total = accel.nn.utils.clip_grad_norm_({w}, 1.0)
    assert.are.equal(other, total.device.type)
    assert.are.equal(10, total:item())
  end)

  it("GPT2LMHeadModel:generate appends tokens on the prompt's device", function()
    local gpt2 = accel.models.gpt2
    accel.manual_seed(4)
    local cfg = gpt2.GPT2Config{vocab_size = 11, n_positions = 8, n_embd = 8, n_layer = 1, n_head = 2, dropout = 0}
    local model = gpt2.GPT2LMHeadModel(cfg):to(other)
    local ids = model:generate(accel.tensor({{1, 2}}, {device = other}), {max_new_tokens = 3})
    assert.are.equal(other, ids.device.type)
    assert.are.same({1, 5}, {ids:size(1), ids:size(2)})
  end)
end)
