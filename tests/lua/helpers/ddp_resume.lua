-- ddp_resume.lua: save_state / load_state on several ranks, run by
-- ddp_test.lua as `accel-lua launch --cpu --num_processes N ddp_resume.lua MODE DIR STEPS`.
-- The training is train_resume.lua's (MLP with dropout, shuffled loader,
-- accumulation 2, StepLR, a registered object), with a per-rank seed after
-- prepare so every rank's dropout masks differ (their generator states are
-- what random_states_<rank>.json must restore).
--
--   straight  train STEPS micro-batches
--   first     train STEPS, then save_state(DIR/ckpt)
--   second    load_state(DIR/ckpt), then train STEPS
--   position  load_state(DIR/ckpt) and print "rank R: epoch E samples S step T",
--             or the load_state error as "rank R: refused: <message>"
--
-- Each training mode writes DIR/MODE_r<rank>.txt (losses as hex floats) and
-- DIR/MODE_r<rank>.safetensors (parameters and optimizer state).
local accel = require("accel")

local here = arg[0]:match("^(.*)/[^/]*$") or "."
local T = dofile(here .. "/train_resume.lua")

local mode, dir, steps = arg[1], arg[2], tonumber(arg[3] or "0")
local s = T.setup("no")
local a = s.accelerator
local rank = a.process_index
accel.set_seed(1000 + rank)

if mode == "position" then
  local ok, err = pcall(a.load_state, a, dir .. "/ckpt")
  if ok then
    local st = s.loader:state_dict()
    print(("rank %d: epoch %d samples %d step %d"):format(rank, st.epoch, st.samples, a.step))
  else
    print(("rank %d: refused: %s"):format(rank, tostring(err)))
  end
  return
end

if mode == "second" then a:load_state(dir .. "/ckpt") end
local losses = T.train(s, steps)
if mode == "first" then a:save_state(dir .. "/ckpt") end
T.write_results(s, dir, ("%s_r%d"):format(mode, rank), losses)
