-- gpt_step_vs_cpu.lua: one GPT-2-124M training step (12 layers, 12 heads,
-- width 768, vocabulary 50 257; 2 sequences of 64 tokens) on the CPU and on
-- cuda from the same weights and batch: the loss and every parameter's
-- gradient must agree to float32 tolerance (TF32 off, as PyTorch's default).
-- Run by scripts/gpu-check.sh on a GPU machine:
--   accel-lua tests/cuda/gpt_step_vs_cpu.lua [DEVICE]   (default cuda; "sim"
--   runs the same comparison on any machine)
-- Prints the worst differences and "N passed, N failed".
local accel = require("accel")
local common = dofile((debug.getinfo(1, "S").source:match("^@(.*)/") or ".") .. "/../../scripts/bench/common.lua")

local LOSS_TOL = 1e-5 -- relative
local GRAD_TOL = 1e-3 -- max |g_cuda - g_cpu| over max |g_cpu|, per parameter
local cfg = {V = 50257, T = 64, L = 12, H = 12, C = 768}
local B = 2
local DEV = arg[1] or "cuda"

local pass, fail = 0, 0
local function check(ok, what)
  if ok then pass = pass + 1 else fail = fail + 1 end
  print(("%s %s"):format(ok and "ok  " or "FAIL", what))
end

accel.backends.cuda.matmul.allow_tf32 = false
accel.set_seed(0)
local cpu_model = common.gpt(cfg)
local state = cpu_model:state_dict()
accel.set_default_device(DEV) -- the model's own tensors (its position ids) on DEV too
local gpu_model = common.gpt(cfg)
accel.set_default_device("cpu")
gpu_model:load_state_dict(state)
local data = accel.randint(0, cfg.V, {B, cfg.T + 1}, {device = "cpu"})
local idx, tgt = data:narrow(2, 1, cfg.T), data:narrow(2, 2, cfg.T)

local function step(model, device)
  local loss = model(idx:to(device), tgt:to(device))
  loss:backward()
  accel.synchronize(device)
  return loss:item()
end

local l_cpu = step(cpu_model, "cpu")
local l_gpu = step(gpu_model, DEV)
local rel = math.abs(l_gpu - l_cpu) / math.abs(l_cpu)
check(rel <= LOSS_TOL, ("loss: cpu %.7f, %s %.7f (relative difference %.2e, limit %.0e)"):format(l_cpu, DEV,
  l_gpu, rel, LOSS_TOL))

local gpu_params, elsewhere = {}, 0
for name, p in gpu_model:named_parameters() do
  gpu_params[name] = p
  if p.device.type ~= DEV:match("^%a+") then elsewhere = elsewhere + 1 end
end
check(elsewhere == 0, ("every parameter of the second model is on %s (%d elsewhere)"):format(DEV, elsewhere))
local worst, worst_name, missing = 0, "-", {}
for name, p in cpu_model:named_parameters() do
  local q = gpu_params[name]
  if not (p.grad and q and q.grad) then
    missing[#missing + 1] = name
  else
    local g = p.grad
    local scale = g:abs():max():item()
    local diff = (q.grad:to("cpu") - g):abs():max():item()
    local r = scale > 0 and diff / scale or diff
    if r > worst or r ~= r then worst, worst_name = r, name end
  end
end
check(#missing == 0, "every parameter has a gradient on both devices" ..
  (#missing > 0 and (" (missing: " .. table.concat(missing, ", ") .. ")") or ""))
check(worst <= GRAD_TOL, ("gradients: worst max|diff| / max|g| = %.2e at %s (limit %.0e)"):format(worst, worst_name,
  GRAD_TOL))
print(("%d passed, %d failed"):format(pass, fail))
os.exit(fail == 0 and 0 or 1)
