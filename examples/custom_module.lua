-- custom_module.lua: a model written as a Lua nn.Module subclass (a residual
-- MLP block), trained with checkpoints every epoch (automatic naming, the
-- newest 2 kept) and TensorBoard / JSONL logs; run it twice to see it resume
-- from the newest checkpoint instead of starting over.
--   accel-lua examples/custom_module.lua [project_dir] [epochs]
--   tensorboard --logdir <project_dir>     (if you have TensorBoard)
local accel = require("accel")
local nn, optim, data, F = accel.nn, accel.optim, accel.data, accel.nn.functional

local project_dir = arg[1] or "runs/custom_module"
local epochs = tonumber(arg[2]) or 6

-- The class idiom: extend nn.Module, set up children in init, compute in forward.
local ResidualBlock = nn.Module:extend("ResidualBlock")

function ResidualBlock:init(dim, hidden)
  self.norm = nn.LayerNorm(dim)          -- assigning a Module registers a submodule
  self.up = nn.Linear(dim, hidden)
  self.down = nn.Linear(hidden, dim)
  self.scale = nn.Parameter(accel.ones(dim) * 0.5)  -- and a Parameter registers a parameter
end

function ResidualBlock:forward(x)
  return x + self.down(F.gelu(self.up(self.norm(x)))) * self.scale
end

local Net = nn.Module:extend("Net")

function Net:init(n_in, dim, n_blocks, n_out)
  self.embed = nn.Linear(n_in, dim)
  self.blocks = nn.ModuleList{}
  for _ = 1, n_blocks do self.blocks:append(ResidualBlock(dim, 4 * dim)) end
  self.head = nn.Linear(dim, n_out)
end

function Net:forward(x)
  x = self.embed(x)
  -- self.blocks:__len() is #self.blocks; LuaJIT's # and ipairs read a table raw (docs/luajit.md)
  for i = 1, self.blocks:__len() do x = self.blocks[i](x) end
  return self.head(x)
end

accel.set_seed(0)
-- a toy task: which of 4 Gaussian blobs a point came from
local centers = accel.randn(4, 8) * 3
local labels = accel.randint(0, 4, {4000})
local points = centers:index_select(1, labels) + accel.randn(4000, 8)
local loader = data.DataLoader(data.TensorDataset(points, labels), {batch_size = 64, shuffle = true})

local model = Net(8, 32, 2, 4)
local optimizer = optim.AdamW(model:parameters(), {lr = 3e-3})
-- loader:__len() is #loader, which LuaJIT reads raw (docs/luajit.md)
local scheduler = optim.lr_scheduler.get_cosine_schedule_with_warmup(optimizer, 20, epochs * loader:__len())
local accelerator = accel.Accelerator{
  project_dir = project_dir,
  project_config = accel.ProjectConfiguration{project_dir = project_dir, automatic_checkpoint_naming = true, total_limit = 2},
  log_with = {"tensorboard", "jsonl"},
}
accelerator:print(model) -- once, on the main process, under `accel-lua launch` too
model, optimizer, loader, scheduler = accelerator:prepare(model, optimizer, loader, scheduler)
accelerator:init_trackers("custom_module", {config = {lr = 3e-3, epochs = epochs}})

-- resume from the newest checkpoint if there is one
local start_epoch = 1
local progress = {epoch = 0}
accelerator:register_for_checkpointing({
  state_dict = function() return {epoch = progress.epoch} end,
  load_state_dict = function(s) progress.epoch = s.epoch end,
})
if accel._C.file_size and accel._C.file_size(project_dir .. "/checkpoints") then
  local ok, err = pcall(function() accelerator:load_state() end)
  if ok then
    start_epoch = progress.epoch + 1
    accelerator:print(("resumed after epoch %d"):format(progress.epoch))
  else
    accelerator:print("no usable checkpoint (" .. tostring(err) .. "), starting over")
  end
end

local criterion = nn.CrossEntropyLoss()
local step = (start_epoch - 1) * loader:__len()
for epoch = start_epoch, epochs do
  model:train()
  local loss
  for xb, yb in loader:iter() do
    loss = criterion(model(xb), yb)
    accelerator:backward(loss)
    accelerator:clip_grad_norm_(model:parameters(), 1.0)
    optimizer:step()
    scheduler:step()
    optimizer:zero_grad()
    step = step + 1
    if step % 20 == 0 then accelerator:log({loss = loss:item(), lr = scheduler:get_last_lr()[1]}, {step = step}) end
  end
  progress.epoch = epoch
  accelerator:save_state()
  accelerator:print(("epoch %d  loss %.4f"):format(epoch, loss:item()))
end
accelerator:end_training()
