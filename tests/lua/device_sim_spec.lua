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
  end)

  it("is the default device after set_default_device", function()
    local before = accel.get_default_device()
    accel.set_default_device("sim")
    local ok, err = pcall(function()
      local z = accel.zeros(2, 2)
      assert.are.equal("sim", z.device.type)
      assert.are.equal("sim", accel.randn(3).device.type)
      assert.are.equal("sim", accel.arange(4).device.type)
      assert.are.same({0, 1, 2, 3}, accel.arange(4):tolist())
    end)
    accel.set_default_device(before)
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
    os.remove(path)
    assert.are.same({{0, 3}, {1, 4}, {2, 5}}, back.w:tolist())
  end)

  it("synchronize waits for queued work", function()
    local t = accel.ones(1000, {device = "sim"}) * 3
    accel.synchronize("sim")
    assert.are.equal(3000, t:sum():item())
  end)
end)
