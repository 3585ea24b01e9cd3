-- parity_spec.lua: accel-lua reproduces PyTorch training runs recorded by
-- scripts/fixtures/make_parity_fixtures.py (losses of every step and the
-- final parameters, to 1e-4 relative, float32).
local accel = require("accel")
local nn, optim = accel.nn, accel.optim

local function prefixed(f, prefix)
  local out = {}
  for k, v in pairs(f) do
    local name = k:sub(1, #prefix) == prefix and k:sub(#prefix + 1)
    if name then out[name] = v end
  end
  return out
end

local function assert_close(got, want, what)
  local rel = math.abs(got - want) / math.max(math.abs(want), 1e-6)
  assert(rel <= 1e-4, ("%s: got %.9g, PyTorch %.9g (relative error %.2e)"):format(what, got, want, rel))
end

local function assert_params(model, final)
  local n = 0
  for name, p in pairs(model:state_dict()) do
    local want = final[name]
    assert(want, "no PyTorch value for " .. name)
    local diff = (p:double() - want:double()):abs():max():item()
    local scale = want:double():abs():max():item()
    assert(diff <= 1e-4 * math.max(scale, 1e-3), ("%s: max difference %.3e (scale %.3e)"):format(name, diff, scale))
    n = n + 1
  end
  assert.are.equal(n, (function() local c = 0 for _ in pairs(final) do c = c + 1 end return c end)())
end

-- Runs the recorded steps; `step_extra(model)` runs between backward and step.
local function replay(f, model, opt, sched, batch, step_extra)
  model:load_state_dict(prefixed(f, "init."))
  local crit = nn.CrossEntropyLoss()
  local xs, ys = f.x:split(batch), f.y:split(batch)
  local losses = f.losses:tolist()
  for i = 1, #losses do
    opt:zero_grad()
    local loss = crit(model(xs[i]), ys[i])
    loss:backward()
    if step_extra then step_extra(model) end
    opt:step()
    if sched then sched:step() end
    assert_close(loss:item(), losses[i], ("step %d loss"):format(i))
  end
  assert_params(model, prefixed(f, "final."))
end

describe("PyTorch parity (float32)", function()
  it("MLP with LayerNorm + GELU, AdamW, cosine schedule, grad-norm clipping: 40 steps", function()
    local f = accel.load("tests/fixtures/parity_mlp.safetensors", {device = accel.get_default_device()})
    local model = nn.Sequential(nn.Linear(20, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 3))
    local opt = optim.AdamW(model:parameters(), {lr = 1e-2, weight_decay = 0.01})
    local sched = optim.lr_scheduler.CosineAnnealingLR(opt, {T_max = 40})
    replay(f, model, opt, sched, 8, function(m) nn.utils.clip_grad_norm_(m:parameters(), 1.0) end)
  end)

  it("conv net, SGD with momentum: 20 steps", function()
    local f = accel.load("tests/fixtures/parity_conv.safetensors", {device = accel.get_default_device()})
    local model = nn.Sequential(nn.Conv2d(1, 4, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 8, 3),
      nn.ReLU(), nn.Flatten(), nn.Linear(128, 5))
    local opt = optim.SGD(model:parameters(), {lr = 0.05, momentum = 0.9})
    replay(f, model, opt, nil, 4)
  end)
end)
