-- fashion_mnist.lua: an MLP or a small CNN on Fashion-MNIST (Debian's
-- dataset-fashion-mnist), the recipe of shared/anchors/fmnist.py: inputs
-- scaled to (x/255 - 0.2860)/0.3530, Adam(1e-3), batch 64 reshuffled every
-- epoch, test accuracy after each epoch, a progress bar on a terminal.
--   accel-lua examples/fashion_mnist.lua [mlp|cnn] [epochs] [threads]
local accel = require("accel")
local nn, optim, data = accel.nn, accel.optim, accel.data

local arch = arg[1] or "mlp"
local epochs = tonumber(arg[2]) or (arch == "mlp" and 5 or 3)
accel.num_threads(tonumber(arg[3]) or 1)

local dir = data.fashion_mnist_dir()
assert(dir, "Fashion-MNIST not found: apt-get install dataset-fashion-mnist (make deps does)")

local function load(split)
  local images = data.read_idx(dir .. "/" .. split .. "-images-idx3-ubyte.gz")  -- uint8 (N, 28, 28)
  local labels = data.read_idx(dir .. "/" .. split .. "-labels-idx1-ubyte.gz")  -- uint8 (N)
  local xs = ((images:float() / 255 - 0.2860) / 0.3530):reshape(-1, 1, 28, 28)
  return xs, labels:long()
end

-- made first, so that under `accel-lua launch` the banner prints once
local accelerator = accel.Accelerator{}
local t0 = accel.clock()
local xtr, ytr = load("train")
local xte, yte = load("t10k")
accelerator:print(("data: %d train, %d test images in %.2f s"):format(xtr:size(1), xte:size(1), accel.clock() - t0))

accel.set_seed(0)
local model
if arch == "mlp" then
  model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
elseif arch == "cnn" then
  model = nn.Sequential(nn.Conv2d(1, 32, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
    nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
else
  error("usage: fashion_mnist.lua [mlp|cnn] [epochs] [threads]")
end

local loader = data.DataLoader(data.TensorDataset(xtr, ytr), {batch_size = 64, shuffle = true})
local optimizer = optim.Adam(model:parameters(), {lr = 1e-3})
local criterion = nn.CrossEntropyLoss()
model, optimizer, loader = accelerator:prepare(model, optimizer, loader)

local function test_accuracy()
  model:eval()
  local correct = 0
  accel.no_grad(function()
    for i = 1, xte:size(1), 1000 do
      local n = math.min(1000, xte:size(1) - i + 1)
      local pred = model(xte:narrow(1, i, n)):argmax(2)
      correct = correct + pred:eq(yte:narrow(1, i, n)):sum():item()
    end
  end)
  return correct / xte:size(1)
end

for epoch = 1, epochs do
  model:train()
  local t = accel.clock()
  local loss_sum, steps = 0, 0
  for xb, yb in accel.progress.wrap(loader:iter(), loader:__len(), {desc = ("epoch %d"):format(epoch)}) do
    optimizer:zero_grad()
    local loss = criterion(model(xb), yb)
    accelerator:backward(loss)
    optimizer:step()
    loss_sum, steps = loss_sum + loss:item(), steps + 1
  end
  local train_s = accel.clock() - t
  accelerator:print(("epoch %d  train %.2f s  loss %.4f  test accuracy %.4f"):format(
    epoch, train_s, loss_sum / steps, test_accuracy()))
end
