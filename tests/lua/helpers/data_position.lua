-- data_position.lua: a prepared loader saved mid-epoch and resumed, run by
-- data_position_test.lua as
--   accel-lua launch --cpu --num_processes N data_position.lua MODE DIR CKPT OUT [key=value ...]
-- over a TensorDataset of the ids 0..n-1 (so every batch shows which
-- samples of the order it holds), shuffled with a fixed seed. Options:
-- n (23), bs (2), k (batches before saving), seed (5), split (0|1),
-- drop_last (0|1), legacy (0|1: write the older {epoch, batches} position).
--
--   save    take k batches on every rank, save_state(DIR/CKPT) inside the
--           loop, stop; writes DIR/OUT_r<rank>.txt
--   resume  load_state(DIR/CKPT), run the rest of the epoch, then one more
--           epoch; writes DIR/OUT_r<rank>.txt (the rest, this rank's
--           batches), DIR/OUT_gathered.txt and DIR/OUT_next.txt (rank 0:
--           gather_for_metrics of each batch of the rest / of the next
--           epoch). A refused load_state prints "rank R: refused: <message>".
-- Each file has one line per batch: the ids, space-separated.
local accel = require("accel")
local data = accel.data

local mode, dir, ckpt, out = arg[1], arg[2], arg[3], arg[4]
local o = {n = 23, bs = 2, k = 0, seed = 5, split = 0, drop_last = 0, legacy = 0}
for i = 5, #arg do
  local key, v = arg[i]:match("^([%w_]+)=(%d+)$")
  assert(key and o[key], "bad option " .. arg[i])
  o[key] = tonumber(v)
end

local a = accel.Accelerator{split_batches = o.split == 1}
local rank = a.process_index
local loader = a:prepare(data.DataLoader(data.TensorDataset(accel.arange(o.n)),
  {batch_size = o.bs, shuffle = true, seed = o.seed, drop_last = o.drop_last == 1}))

-- put(batch) appends a line to path (only_main: on rank 0 only), and the file.
local function writer(path, only_main)
  if only_main and rank ~= 0 then return function() end, {close = function() end} end
  local f = assert(io.open(path, "w"))
  return function(t)
    local ids = {}
    for i, v in ipairs(t:tolist()) do ids[i] = tostring(v) end
    f:write(table.concat(ids, " "), "\n")
    f:flush()
  end, f
end

local ck = dir .. "/" .. ckpt
if mode == "save" then
  if o.legacy == 1 then -- what save_state wrote before positions were samples
    local base = loader.base
    rawset(loader, "state_dict", function() return {epoch = base._state.epoch, batches = base._state.batches} end)
  end
  local put, f = writer(("%s/%s_r%d.txt"):format(dir, out, rank))
  local j = 0
  for xb in loader:iter() do
    put(xb)
    j = j + 1
    if j == o.k then
      a:save_state(ck)
      break
    end
  end
  f:close()
  return
end

assert(mode == "resume", "mode must be save or resume")
local ok, err = pcall(a.load_state, a, ck)
if not ok then
  print(("rank %d: refused: %s"):format(rank, tostring(err)))
  return
end
local st = loader:state_dict()
print(("rank %d: epoch %d samples %d"):format(rank, st.epoch, st.samples))
local put, f = writer(("%s/%s_r%d.txt"):format(dir, out, rank))
local gput, gf = writer(("%s/%s_gathered.txt"):format(dir, out), true)
for xb in loader:iter() do
  put(xb)
  gput(a:gather_for_metrics(xb))
end
f:close()
gf:close()
local nput, nf = writer(("%s/%s_next.txt"):format(dir, out), true)
for xb in loader:iter() do nput(a:gather_for_metrics(xb)) end
nf:close()
