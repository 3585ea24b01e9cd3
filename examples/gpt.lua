-- gpt.lua: a GPT-2-style byte-level language model (accel.models.gpt2)
-- trained on real text: any text files given on the command line, by
-- default Debian's `fortunes` package (/usr/share/games/fortunes).
--
--   accel-lua examples/gpt.lua [--name=value ...] [files ...]
--   accel-lua examples/gpt.lua --steps=600 --bf16 --out_dir=runs/gpt2 README.md
--   accel-lua launch --num_processes 2 examples/gpt.lua     (data parallel)
--   tensorboard --logdir runs/gpt                           (if you have TensorBoard)
--
-- Tokens are bytes (256 ids, no tokenizer). Each file's first 90 % goes to
-- the training split, the rest to validation; both are written once as
-- llm.c token files (out_dir/data/*.bin) and read through data.TokenFile.
-- Training: AdamW (no weight decay on biases / LayerNorm), linear warmup +
-- cosine decay, gradient clipping, optional bf16 autocast; the validation
-- loss (on fixed held-out windows) is printed every --eval_interval steps,
-- checkpoints go to out_dir/checkpoints (the newest 2 kept; --resume
-- continues from the newest), TensorBoard + JSONL logs to out_dir/gpt.
-- At the end the model is written in Hugging Face's GPT-2 layout
-- (out_dir/model/model.safetensors + config.json: transformers'
-- GPT2LMHeadModel.from_pretrained loads it, see
-- scripts/load_gpt2_in_transformers.py) and a sample is printed.
local accel = require("accel")
local gpt2 = accel.models.gpt2
local data, optim = accel.data, accel.optim
local compat = require("accel.compat") -- string.pack, also under LuaJIT

-- ---------------------------------------------------------------- options

local DEFAULTS = {
  steps = 600, batch_size = 16, block_size = 128, grad_accum = 1,
  n_layer = 4, n_head = 4, n_embd = 128, dropout = 0.0,
  lr = 3e-3, beta2 = 0.95, warmup = 30, weight_decay = 0.1, grad_clip = 1.0, bf16 = false,
  eval_interval = 50, eval_batches = 8, log_interval = 10, save_interval = 100,
  out_dir = "runs/gpt", resume = false, seed = 1337, threads = 0,
  sample_tokens = 400, temperature = 0.8, top_k = 40, prompt = "\n",
}
local FORTUNES = "/usr/share/games/fortunes"

local function usage()
  local names = {}
  for k in pairs(DEFAULTS) do names[#names + 1] = k end
  table.sort(names)
  io.write("usage: accel-lua examples/gpt.lua [--name=value ...] [text files ...]\noptions (default):\n")
  for _, k in ipairs(names) do io.write(("  --%s=%s\n"):format(k, tostring(DEFAULTS[k]):gsub("\n", "\\n"))) end
  io.write("files: default every text file in " .. FORTUNES .. " (Debian's fortunes package)\n")
end

-- --name=value (or --flag for true, --no-flag for false) and file names.
local function parse_args(argv)
  local o, files = {}, {}
  for k, v in pairs(DEFAULTS) do o[k] = v end
  for _, a in ipairs(argv) do
    if a == "--help" or a == "-h" then usage() os.exit(0) end
    local name, value = a:match("^%-%-([%w_]+)=(.*)$")
    if not name and a:match("^%-%-no%-[%w_]+$") then name, value = a:sub(6), "false" end
    if not name and a:match("^%-%-[%w_]+$") then name, value = a:sub(3), "true" end
    if name then
      local d = DEFAULTS[name]
      if d == nil then io.stderr:write("gpt.lua: unknown option --" .. name .. "\n") usage() os.exit(2) end
      if type(d) == "number" then
        value = tonumber(value) or error(("--%s: expected a number, got %q"):format(name, value), 0)
      elseif type(d) == "boolean" then
        value = value == "true" or value == "1" or value == "yes"
      else
        value = value:gsub("\\n", "\n")
      end
      o[name] = value
    else
      files[#files + 1] = a
    end
  end
  return o, files
end

local opt, files = parse_args(arg)
if opt.threads > 0 then accel.num_threads(opt.threads) end

-- ---------------------------------------------------------------- data

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a") -- nil for a directory
  f:close()
  return s
end

-- Every file of Debian's fortunes package except the .dat indexes and the
-- .u8 links to the same text.
local function fortune_files()
  local list = {}
  local p = io.popen('ls -1 "' .. FORTUNES .. '" 2>/dev/null')
  for name in p:lines() do
    if not name:find("%.dat$") and not name:find("%.u8$") then list[#list + 1] = FORTUNES .. "/" .. name end
  end
  p:close()
  return list
end

-- uint16 little-endian ids of the bytes of s, as an llm.c token file.
local LE16 = {}
for b = 0, 255 do LE16[string.char(b)] = string.char(b, 0) end

local function write_tokens(path, s)
  local f = assert(io.open(path, "wb"))
  for _, v in ipairs({20240520, 1, #s}) do f:write(compat.string_pack("<I4", v)) end -- magic, version, count
  f:write(string.rep("\0", 1024 - 12))
  f:write((s:gsub(".", LE16)))
  f:close()
end

-- text with fortune's "%" separator lines made blank (every one: the
-- first line, and several in a row, too).
local function blank_separators(text)
  local lines = {}
  for line in (text .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line == "%" and "" or line end
  return table.concat(lines, "\n")
end

-- out_dir/data/{train,val}.bin from the files (each file split 90 / 10).
local function prepare_data(paths, dir)
  local train, val, used = {}, {}, 0
  for _, path in ipairs(paths) do
    local text = read_file(path)
    if text and #text > 0 then
      text = blank_separators(text)
      local cut = math.floor(#text * 0.9)
      train[#train + 1], val[#val + 1] = text:sub(1, cut), text:sub(cut + 1)
      used = used + 1
    end
  end
  if used == 0 then
    error("gpt.lua: no readable text files (give some on the command line, or install Debian's fortunes package: "
      .. "bash scripts/install-deps.sh)", 0)
  end
  os.execute('mkdir -p "' .. dir .. '"')
  local tr, va = table.concat(train), table.concat(val)
  write_tokens(dir .. "/train.bin", tr)
  write_tokens(dir .. "/val.bin", va)
  return used, #tr, #va
end

if #files == 0 then files = fortune_files() end

local accelerator = accel.Accelerator{
  mixed_precision = opt.bf16 and "bf16" or nil, -- nil: launch's --mixed_precision or "no"
  gradient_accumulation_steps = opt.grad_accum,
  project_dir = opt.out_dir,
  project_config = accel.ProjectConfiguration{project_dir = opt.out_dir, automatic_checkpoint_naming = true, total_limit = 2},
  log_with = {"tensorboard", "jsonl"},
}

local data_dir = opt.out_dir .. "/data"
if accelerator.is_main_process then
  local n, ntr, nva = prepare_data(files, data_dir)
  accelerator:print(("data: %d files, %d training bytes, %d validation bytes"):format(n, ntr, nva))
end
accelerator:wait_for_everyone()

local T, B = opt.block_size, opt.batch_size
local train_set = data.TokenFile(data_dir .. "/train.bin", {block_size = T, stride = 1})
local val_set = data.TokenFile(data_dir .. "/val.bin", {block_size = T, stride = 1})
local n_train, n_val = train_set:__len(), val_set:__len() -- #set, which LuaJIT reads raw (docs/luajit.md)
if n_train < B or n_val < 1 then error("gpt.lua: not enough text for block_size " .. T, 0) end

-- ---------------------------------------------------------------- model

accel.set_seed(opt.seed)
local config = gpt2.GPT2Config{vocab_size = 256, n_positions = T, n_embd = opt.n_embd, n_layer = opt.n_layer,
                                n_head = opt.n_head, dropout = opt.dropout}
local model = gpt2.GPT2LMHeadModel(config)
accelerator:print(("model: %s, %.2fM parameters"):format(tostring(config), model:num_parameters() / 1e6))

-- weight decay on matrices only (GPT-2 / nanoGPT practice)
local decay, no_decay = {}, {}
for _, p in ipairs(model:parameters()) do
  if p:dim() >= 2 then decay[#decay + 1] = p else no_decay[#no_decay + 1] = p end
end
local optimizer = optim.AdamW({{params = decay, weight_decay = opt.weight_decay}, {params = no_decay, weight_decay = 0}},
  {lr = opt.lr, betas = {0.9, opt.beta2}})
-- a prepared scheduler steps once per process per optimizer step (Accelerate's
-- rule), so the schedule is given in those units, as HF's examples do
local N = accelerator.num_processes
local scheduler = optim.lr_scheduler.get_cosine_schedule_with_warmup(optimizer, opt.warmup * N, opt.steps * N)
local loader = data.DataLoader(train_set, {batch_size = B, shuffle = true, drop_last = true})

model, optimizer, loader, scheduler = accelerator:prepare(model, optimizer, loader, scheduler)
accelerator:init_trackers("gpt", {config = opt})

-- held-out windows, the same at every evaluation (drawn once, from the seed)
local val_starts = accel.randperm(n_val):narrow(1, 1, math.min(n_val, opt.eval_batches * B))

local function evaluate()
  model:eval()
  local total, count = 0, 0
  accel.no_grad(function()
    for first = 1, val_starts:size(1), B do
      local idx = val_starts:narrow(1, first, math.min(B, val_starts:size(1) - first + 1))
      local x, y = val_set:get_batch(idx) -- not a prepared loader: its batches are moved by hand
      local _, loss = model(x:to(accelerator.device), {targets = y:to(accelerator.device)})
      total, count = total + loss:item() * idx:size(1), count + idx:size(1)
    end
  end)
  model:train()
  return total / count
end

-- ---------------------------------------------------------------- training

local progress = {step = 0}
accelerator:register_for_checkpointing({
  state_dict = function() return {step = progress.step} end,
  load_state_dict = function(s) progress.step = s.step end,
})
if opt.resume then
  local f = io.open(opt.out_dir .. "/checkpoints") -- a directory opens on POSIX systems
  if f then
    f:close()
    accelerator:load_state() -- the newest checkpoint_<i>
    accelerator:print(("resumed from the newest checkpoint after step %d"):format(progress.step))
  else
    accelerator:print("no checkpoint in " .. opt.out_dir .. "/checkpoints, starting from step 0")
  end
end

-- endless stream of batches: the loader's epochs one after another
local batches = coroutine.wrap(function()
  while true do
    for x, y in loader:iter() do coroutine.yield(x, y) end
  end
end)

local tokens_per_step = B * T * opt.grad_accum * N
local t_last, step_last = accel.clock(), progress.step
local loss_sum, loss_n = 0, 0
local first_val, last_val
if progress.step == 0 then
  first_val = evaluate()
  accelerator:print(("step %5d | val loss %.4f"):format(0, first_val))
  accelerator:log({val_loss = first_val}, {step = 0})
end
model:train()
while progress.step < opt.steps do
  for _ = 1, opt.grad_accum do
    local x, y = batches()
    accelerator:accumulate(model, function()
      local _, loss = model(x, {targets = y})
      accelerator:backward(loss)
      if accelerator.sync_gradients then accelerator:clip_grad_norm_(model:parameters(), opt.grad_clip) end
      optimizer:step()
      scheduler:step()
      optimizer:zero_grad()
      loss_sum, loss_n = loss_sum + loss:item(), loss_n + 1
    end)
  end
  progress.step = progress.step + 1
  local step = progress.step
  if step % opt.log_interval == 0 or step == opt.steps then
    local now = accel.clock()
    local tok_s = (step - step_last) * tokens_per_step / (now - t_last)
    local lr = scheduler:get_last_lr()[1]
    accelerator:print(("step %5d | loss %.4f | lr %.2e | %6.0f tok/s"):format(step, loss_sum / loss_n, lr, tok_s))
    accelerator:log({train_loss = loss_sum / loss_n, lr = lr, tokens_per_s = tok_s}, {step = step})
    loss_sum, loss_n = 0, 0
    t_last, step_last = now, step
  end
  if step % opt.eval_interval == 0 or step == opt.steps then
    last_val = evaluate()
    accelerator:print(("step %5d | val loss %.4f"):format(step, last_val))
    accelerator:log({val_loss = last_val}, {step = step})
    t_last = accel.clock() -- evaluation time is not training speed
  end
  if step % opt.save_interval == 0 or step == opt.steps then
    accelerator:save_state()
    t_last = accel.clock()
  end
end
if first_val and last_val then
  accelerator:print(("validation loss %.4f -> %.4f"):format(first_val, last_val))
end

-- ---------------------------------------------------------------- export and sample

local model_dir = opt.out_dir .. "/model"
accelerator:wait_for_everyone()
accelerator:save_model(model, model_dir)              -- HF GPT-2 names and layouts
if accelerator.is_main_process then config:save_pretrained(model_dir) end
accelerator:print("saved " .. model_dir .. "/model.safetensors and config.json (transformers' GPT2LMHeadModel)")

-- The well-formed UTF-8 sequences (RFC 3629), anchored: utf8.len's check,
-- which LuaJIT (no utf8 library) runs too.
local UTF8_SEQUENCES = {"^[\1-\127]", "^[\194-\223][\128-\191]", "^\224[\160-\191][\128-\191]",
  "^[\225-\236\238\239][\128-\191][\128-\191]", "^\237[\128-\159][\128-\191]",
  "^\240[\144-\191][\128-\191][\128-\191]", "^[\241-\243][\128-\191][\128-\191][\128-\191]",
  "^\244[\128-\143][\128-\191][\128-\191]"}

local function is_utf8(s)
  local i = 1
  while i <= #s do
    local last
    for _, seq in ipairs(UTF8_SEQUENCES) do last = last or select(2, s:find(seq, i)) end
    if not last then return false end
    i = last + 1
  end
  return true
end

-- bytes outside printable ASCII / valid UTF-8 shown as '?'
local function printable(s)
  s = s:gsub("[%z\1-\8\11-\31\127]", "?")
  if is_utf8(s) then return s end
  return (s:gsub("[\128-\255]", "?"))
end

if accelerator.is_main_process and opt.sample_tokens > 0 then
  local prompt = {}
  for i = 1, #opt.prompt do prompt[i] = opt.prompt:byte(i) end
  local ids = accelerator:unwrap_model(model):generate(accel.tensor({prompt}, {dtype = accel.int64, device = accelerator.device}),
    {max_new_tokens = opt.sample_tokens, temperature = opt.temperature,
     top_k = opt.top_k >= 1 and math.floor(opt.top_k) or nil})
  local bytes = {}
  for i, id in ipairs(ids[1]:tolist()) do bytes[i] = string.char(id) end
  print(("---- sample (temperature %.2f, top-k %d) ----"):format(opt.temperature, opt.top_k))
  print(printable(table.concat(bytes)))
  print("----")
end
accelerator:end_training()
