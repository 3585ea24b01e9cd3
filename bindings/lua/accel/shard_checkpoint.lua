-- accel.shard_checkpoint: checkpoints of models held by a sharding engine
-- (accel.shard; user guide: docs/sharded-checkpoints.md). Called by the
-- Accelerator's save_state / load_state / save_model / get_state_dict for a
-- prepared model with an open engine (accel.shard.engine_of(model)), and by
-- `accel-lua merge-weights`.
--
-- Folder layout (inside save_state's atomic folder, next to the usual
-- files): for model i (base "model", "model_1", ...) every rank r writes
--   <base>_shard_<r>.safetensors       its pieces of the float32 master
--                                      parameters, one 1-D tensor per
--                                      parameter it holds a part of, named
--                                      after the parameter; rank 0 also puts
--                                      the replicated entries (buffers,
--                                      frozen parameters) there in full
--   <optimizer base>_shard_<r>.safetensors   the same pieces of every
--                                      optimizer state, "<param>.<state>"
-- and rank 0 records the layout in checkpoint_index.json (written last,
-- with every file's size and crc32) as models[i].sharded:
--   {world, stage, files = [...], replicated = [...], aliases = {alias = name},
--    params = [{name, shape, pieces = [[rank, begin, len], ...]}],
--    optimizer = {index, files = [...], state_names = [...], steps = {name = n}}}
-- (begin/len in elements of the flattened parameter; the pieces of one
-- parameter cover it exactly once; the states share the parameter's pieces).
--
-- Loading reads, one tensor at a time, only the pieces of each parameter /
-- state this rank needs (a ranged read of the saved files, never a whole
-- file), builds that one tensor and hands it to the engine
-- (load_full_state_dict / load_full_optim_state, through tables that build
-- each entry when it is asked for), so a checkpoint saved on any number of
-- ranks at any stage loads on any other, into a run without sharding, and an
-- unsharded checkpoint into a sharded run. Every file, header, piece and
-- shape is checked before anything changes (plan), then applied (apply).
--
-- Decisions: the optimizer's own optimizer.json (param_groups: lr, betas...,
-- what schedulers change) is written as without sharding, with an empty
-- state; a run without sharding gets its optimizer state built in full (its
-- optimizer holds it in full anyway). save_model under an engine gathers one
-- tensor at a time into a file written incrementally (accel._C.st_writer),
-- so rank 0 never holds more than one full tensor beyond the model's shards.
local accel = require("accel")
local json = require("accel.json")
local shard = require("accel.shard")
local checkpoint = require("accel.checkpoint")
local raise = require("accel.nn.module").raise
local util = require("accel.util")
local C = accel._C

local M = {}

local join = checkpoint.join

function M.engine_of(model) return shard.engine_of(model) end

function M.shard_file(base, rank) return ("%s_shard_%d.safetensors"):format(base, rank) end

local function numel_of(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

local function copy_list(t)
  local out = json.array()
  for i, v in ipairs(t) do out[i] = v end
  return out
end

local DTYPE_BYTES = {F32 = 4, F64 = 8, BF16 = 2, F16 = 2, F8_E4M3 = 1, F8_E5M2 = 1, I64 = 8, I32 = 4, U8 = 1, BOOL = 1}

-- The safetensors tag of a tensor's dtype ("F32", ...).
local TAGS = {float32 = "F32", float64 = "F64", bfloat16 = "BF16", float16 = "F16", float8_e4m3fn = "F8_E4M3",
  float8_e5m2 = "F8_E5M2", int64 = "I64", int32 = "I32", uint8 = "U8", bool = "BOOL"}
local function tag_of(t) return TAGS[(tostring(t.dtype):gsub("^accel%.", ""))] end

-- ---------------------------------------------------------------- the model's entries

-- The model's state_dict entries (no data read: works while stage 3 has
-- released the parameters): order, {name = tensor}, and for the engine's
-- parameters name -> position in eng.names (an alias of a tied parameter
-- maps to its engine name in aliases).
local function entries(model, eng)
  local order = model:state_dict_keys()
  local sd = model:state_dict({keep_vars = true})
  local pos, by_tensor, aliases, replicated = {}, {}, {}, {}
  if eng then
    for i, name in ipairs(eng.names) do
      pos[name] = i
      by_tensor[eng.params[i]] = name
    end
  end
  for _, name in ipairs(order) do
    local owner = by_tensor[sd[name]]
    if owner and owner ~= name then aliases[name] = owner
    elseif not owner then replicated[#replicated + 1] = name end
  end
  return {order = order, sd = sd, pos = pos, aliases = aliases, replicated = replicated}
end

-- load_state's model identity ("name dtype [shape]" of every state entry,
-- sorted), from the tensors' metadata only (released parameters included).
function M.fingerprint(model) return checkpoint.fingerprint(model:state_dict({keep_vars = true})) end

-- ---------------------------------------------------------------- save_state

-- This rank's shard files for model `eng.model` (bases: the model's and its
-- optimizer's file names without extension; optim_base nil: no optimizer
-- prepared for it; model_base nil: the optimizer's only, for a model a
-- save_state pre-hook kept out of the checkpoint) -> the layout for the
-- index (the same on every rank).
function M.write_shards(w, eng, model_base, optim_base, optim_index)
  local ss = eng:shard_state()
  local params, pieces = json.array(), {}
  for i, name in ipairs(eng.names) do
    pieces[name] = json.array()
    params[i] = {name = name, shape = copy_list(eng.params[i].shape), pieces = pieces[name]}
  end
  local mine, mine_state = {}, {}
  for _, x in ipairs(ss.index) do
    if x.state == "param" then
      local list = pieces[x.param]
      list[#list + 1] = json.array({x.rank, x.begin, x.len})
    end
    local t = x.rank == ss.rank and ss.tensors[("unit%d.%s"):format(x.unit, x.state)] or nil
    if t and x.state == "param" then mine[x.param] = t:narrow(1, x.at + 1, x.len)
    elseif t then mine_state[x.param .. "." .. x.state] = t:narrow(1, x.at + 1, x.len) end
  end
  local layout = {world = ss.world, stage = ss.stage, params = params}
  if model_base then
    local e = entries(eng.model, eng)
    if ss.rank == 0 then
      for _, name in ipairs(e.replicated) do mine[name] = e.sd[name]:detach() end
    end
    layout.files = json.array()
    for r = 0, ss.world - 1 do layout.files[r + 1] = M.shard_file(model_base, r) end
    w:tensors(layout.files[ss.rank + 1], mine)
    layout.replicated, layout.aliases = copy_list(e.replicated), e.aliases
  end
  if optim_base and #ss.state_names > 0 then
    local ofiles = json.array()
    for r = 0, ss.world - 1 do ofiles[r + 1] = M.shard_file(optim_base, r) end
    w:tensors(ofiles[ss.rank + 1], mine_state)
    layout.optimizer = {index = optim_index, files = ofiles, state_names = copy_list(ss.state_names), steps = ss.steps}
  end
  return layout
end

-- What save_state puts in `weights` (the list its pre-hooks see) for a
-- model held by an engine: a marker, since the full weights are never
-- gathered; the shards are written by save_all.
local Marker = {__name = "ShardedWeights"}
function M.weights_marker(model) return setmetatable({model = model, eng = M.engine_of(model)}, Marker) end
function M.is_marker(x) return getmetatable(x) == Marker end

local optimizer_for

-- Every rank: the shard files of each marked model (weights[i]) ->
-- {models = {i = layout}, optimizers = {layout, ...}}; a prepared model
-- with an engine that a pre-hook removed from weights still gets its
-- optimizer's shards (as Accelerate saves the optimizer state regardless).
function M.save_all(self, w, weights, numbered)
  local out, saved = {models = {}, optimizers = json.array()}, {}
  for i, sd in ipairs(weights) do
    if M.is_marker(sd) then
      saved[sd.eng] = true
      local k = optimizer_for(self, sd.model, sd.eng)
      out.models[i] = M.write_shards(w, sd.eng, numbered("model", i), k and numbered("optimizer", k), k)
    end
  end
  for _, m in ipairs(self._models) do
    local eng = M.engine_of(m)
    local k = eng and not saved[eng] and optimizer_for(self, m, eng)
    if k then
      saved[eng] = true
      local layout = M.write_shards(w, eng, nil, numbered("optimizer", k), k)
      if layout.optimizer then out.optimizers[#out.optimizers + 1] = layout end
    end
  end
  return out
end

-- The index's models[i] of the sharded models get their layout (and no
-- whole file); the optimizer shards of models left out, optimizer_shards.
function M.annotate(idx, layouts)
  for i, layout in pairs(layouts.models) do
    idx.models[i].sharded = layout
    idx.models[i].file = nil
  end
  if #layouts.optimizers > 0 then idx.optimizer_shards = layouts.optimizers end
  return idx
end

-- ---------------------------------------------------------------- sources

-- A source gives, for a parameter name, the elements [lo, hi) of the full
-- parameter (which = "param") or of one of its optimizer states, written
-- into a flat float32 tensor; replicated(name) an entry in full. A
-- parameter frozen when saved (a replicated entry) and trainable now, or
-- the reverse, loads either way; a tied alias reads the entry it was saved
-- under; has_state(name) tells whether the optimizer state of a parameter
-- was saved (a parameter frozen then has none).

-- elements [lo, hi) of the full tensor t into flat.
local function copy_range(flat, t, lo, hi)
  flat:narrow(1, lo + 1, hi - lo):copy_(t:reshape(-1):narrow(1, lo + 1, hi - lo))
end

local Sharded = {}
Sharded.__index = Sharded

function Sharded:saved_name(name) return (self.layout.aliases or {})[name] or name end

local function open_cached(self, file)
  local f = self.open[file]
  if not f then
    f = C.st_open(join(self.dir, file))
    self.open[file] = f
  end
  return f
end

function Sharded:fill(name, which, lo, hi, flat)
  name = self:saved_name(name)
  local p = self.params[name]
  if not p then return copy_range(flat, self:replicated(name), lo, hi) end
  local files = which == "param" and self.layout.files or self.layout.optimizer.files
  local key = which == "param" and name or name .. "." .. which
  for _, pc in ipairs(p.pieces) do
    local rank, b, len = pc[1], pc[2], pc[3]
    local from, to = math.max(lo, b), math.min(hi, b + len)
    if to > from then
      local piece = open_cached(self, files[rank + 1]):read(key, from - b, to - from)
      flat:narrow(1, from + 1, to - from):copy_(piece)
    end
  end
end

function Sharded:replicated(name)
  name = self:saved_name(name)
  local p = self.params[name]
  if not p then return open_cached(self, self.layout.files[1]):read(name) end
  local t = accel.zeros(p.shape)
  self:fill(name, "param", 0, numel_of(p.shape), t:view(-1))
  return t
end

function Sharded:has_states() return self.layout.optimizer ~= nil end
function Sharded:has_state(name) return self.layout.optimizer ~= nil and self.params[self:saved_name(name)] ~= nil end
function Sharded:step(name) return self.layout.optimizer.steps[name] or 0 end
function Sharded:state_names() return self.layout.optimizer and self.layout.optimizer.state_names or {} end

function Sharded:close()
  for _, f in pairs(self.open) do f:close() end
  self.open = {}
end

-- A checkpoint saved without sharding: model.safetensors read one tensor at
-- a time; the optimizer state from its optimizer files (state by position).
local Dense = {}
Dense.__index = Dense

function Dense:fill(name, which, lo, hi, flat)
  if which == "param" then
    flat:narrow(1, lo + 1, hi - lo):copy_(self.file:read(name, lo, hi - lo))
  else
    copy_range(flat, self.states[name][which], lo, hi)
  end
end

function Dense:replicated(name) return self.file:read(name) end
function Dense:has_states() return next(self.states) ~= nil end
function Dense:has_state(name) return self.states[name] ~= nil end
-- The steps a parameter's state has seen; SGD's state has no step (as PyTorch's), and
-- its momentum buffer means at least one (the engine's count 0 would restart the buffer)
function Dense:step(name)
  local s = self.states[name]
  if not s then return 0 end
  return s.step or (s.momentum_buffer ~= nil and 1 or 0)
end

function Dense:state_names()
  local seen, out = {}, {}
  for _, st in pairs(self.states) do
    for k, v in pairs(st) do
      if accel.is_tensor(v) and not seen[k] then
        seen[k] = true
        out[#out + 1] = k
      end
    end
  end
  table.sort(out)
  return out
end

function Dense:close()
  if self.file then self.file:close() end
  self.file = nil
end

-- ---------------------------------------------------------------- checks (load_state, before any change)

local OPTIM_STATES = {SGD = {momentum_buffer = true},
  Adam = {exp_avg = true, exp_avg_sq = true, max_exp_avg_sq = true}}
OPTIM_STATES.AdamW = OPTIM_STATES.Adam

local function optimizer_states_of(opt)
  local raw = opt.optimizer or opt
  for name, cls in pairs({SGD = accel.optim.SGD, Adam = accel.optim.Adam, AdamW = accel.optim.AdamW}) do
    if getmetatable(raw) == cls then return OPTIM_STATES[name], name end
  end
  return nil
end

local function is_count(v) return type(v) == "number" and v >= 0 and v % 1 == 0 end

-- The pieces of a parameter p ({rank, start, length} each) name ranks of
-- the world and cover its elements exactly once; refuse(fmt, ...) raises.
local function check_pieces(p, world, refuse)
  local numel = numel_of(p.shape)
  local sorted = {}
  for i, pc in ipairs(p.pieces) do
    if type(pc) ~= "table" or not (is_count(pc[1]) and pc[1] < world and is_count(pc[2]) and is_count(pc[3])) then
      refuse("%s is corrupted: piece %d of %s is not {rank < %d, start, length}", checkpoint.INDEX, i, p.name, world)
    end
    sorted[#sorted + 1] = pc
  end
  table.sort(sorted, function(a, b) return a[2] < b[2] end)
  local at = 0 -- the end of the pieces so far; -1 once one overlaps or leaves a gap
  for _, pc in ipairs(sorted) do
    if pc[3] > 0 and at >= 0 then at = pc[2] == at and at + pc[3] or -1 end
  end
  if at ~= numel then
    refuse("%s is corrupted: the pieces of %s do not cover its %d elements exactly once", checkpoint.INDEX, p.name, numel)
  end
end

-- The layout's shape: a world size, one file per rank, each parameter a
-- name, a shape and pieces covering it; refuse(fmt, ...) raises.
local function check_layout(layout, refuse)
  local function bad(what) refuse("%s is corrupted (bad shard layout: %s)", checkpoint.INDEX, what) end
  if not is_count(layout.world) or layout.world < 1 then bad("world") end
  if type(layout.params) ~= "table" then bad("params") end
  if type(layout.files) ~= "table" and not layout.optimizer then bad("files") end
  local lists = {layout.files or false, layout.optimizer and (layout.optimizer.files or 0) or false}
  for _, files in ipairs(lists) do
    if files and (type(files) ~= "table" or #files ~= layout.world) then
      bad(("%d files listed for %d processes"):format(type(files) == "table" and #files or 0, layout.world))
    end
  end
  for i, p in ipairs(layout.params) do
    if type(p) ~= "table" or type(p.name) ~= "string" then bad(("params[%d]"):format(i)) end
    if type(p.shape) ~= "table" or type(p.pieces) ~= "table" then bad(p.name) end
    for _, n in ipairs(p.shape) do
      if not is_count(n) then bad(p.name .. " shape") end
    end
    check_pieces(p, layout.world, refuse)
  end
end

-- Every file of the layout present, every piece in its file with the
-- right dtype and length; refuse(fmt, ...) raises.
local function check_files(r, layout, refuse)
  local function check(files, key_of, what)
    local want = {}
    for rank = 0, layout.world - 1 do want[rank] = {} end
    for _, p in ipairs(layout.params) do
      for _, pc in ipairs(p.pieces) do
        for _, key in ipairs(key_of(p)) do want[pc[1]][key] = pc[3] end
      end
    end
    for rank = 0, layout.world - 1 do
      local file = files[rank + 1]
      if type(file) ~= "string" or not r:has(file) then
        refuse("%s is missing: the checkpoint was saved on %d processes and rank %d's %s shard is not there",
          tostring(file), layout.world, rank, what)
      end
      local ok, f = pcall(C.st_open, join(r.dir, file))
      if not ok then refuse("%s cannot be read: %s", file, tostring(f)) end
      local have = {}
      for _, e in ipairs(f:entries()) do have[e.name] = e end
      f:close()
      for key, len in pairs(want[rank]) do
        local e = have[key]
        if not e or e.dtype ~= "F32" or #e.shape ~= 1 or e.shape[1] ~= len then
          refuse("%s does not hold %s as %d float32 elements (the index says rank %d holds them)", file, key, len, rank)
        end
      end
    end
  end
  check_layout(layout, refuse)
  if layout.files then check(layout.files, function(p) return {p.name} end, "parameter") end
  local o = layout.optimizer
  if o then
    check(o.files, function(p)
      local keys = {}
      for i, s in ipairs(o.state_names) do keys[i] = p.name .. "." .. s end
      return keys
    end, "optimizer")
  end
end

local function shape_text(shape) return "[" .. table.concat(shape, ",") .. "]" end

-- Every entry of the model (e: entries) is in the checkpoint with its
-- shape: as a parameter's pieces or whole in rank 0's file (a buffer, a
-- parameter frozen when saved), a tied alias as the entry it was saved
-- under; refuse(fmt, ...) raises naming the file and the entry. strict =
-- false (a model without an engine): an entry the checkpoint lacks keeps
-- its value -> {name = true} of those.
local function check_entries(r, layout, params, e, refuse, model_index, strict)
  local whole = {}
  for _, name in ipairs(layout.replicated or {}) do whole[name] = true end
  local f = C.st_open(join(r.dir, layout.files[1]))
  local have = {}
  for _, x in ipairs(f:entries()) do have[x.name] = x end
  f:close()
  local skip = {}
  for _, name in ipairs(e.order) do
    if not e.aliases[name] then
      local saved = (layout.aliases or {})[name] or name
      local p, x = params[saved], whole[saved] and have[saved]
      local shape = p and p.shape or x and x.shape
      local want = shape_text(e.sd[name].shape)
      if not shape and strict == false then
        skip[name] = true
      elseif not shape or shape_text(shape) ~= want then
        refuse("%s does not hold %s of model %d as %s (%s)", layout.files[1], name, model_index or 1, want,
          shape and "it is " .. shape_text(shape) or "missing")
      end
    end
  end
  return skip
end

-- The optimizer (prepared position k) that steps this model's parameters.
optimizer_for = function(self, model, eng)
  local raw = eng and eng.optimizer
  local first = model:parameters()[1]
  for k, opt in ipairs(self._optimizers) do
    local o = opt.optimizer or opt
    if raw and rawequal(o, raw) then return k, opt end
    if not raw then
      for _, g in ipairs(o.param_groups) do
        for _, p in ipairs(g.params) do
          if rawequal(p, first) then return k, opt end
        end
      end
    end
  end
  return nil
end

-- {param = id}: the 1-based position of each parameter across the
-- optimizer's groups (the keys of its state_dict's state).
local function param_ids(opt)
  local by_id, n = {}, 0
  for _, g in ipairs((opt.optimizer or opt).param_groups) do
    for _, p in ipairs(g.params) do
      if by_id[p] == nil then
        n = n + 1
        by_id[p] = n
      end
    end
  end
  return by_id
end

-- {name = {step, state = tensor}} of a full optimizer state_dict.
local function states_by_name(saved, opt, names_of)
  local out = {}
  for p, id in pairs(param_ids(opt)) do
    local st = saved.state[id] or saved.state[tostring(id)]
    if st and names_of[p] then out[names_of[p]] = st end
  end
  return out
end

local function names_of_params(model)
  local out = {}
  for name, p in model:named_parameters() do out[p] = out[p] or name end
  return out
end

-- Does model i take part (a sharded checkpoint entry, or a model with an engine)?
function M.involved(entry, model)
  return type(entry) == "table" and entry.sharded ~= nil or M.engine_of(model) ~= nil
end

-- Everything load_state needs for model i, checked: -> plan (its open
-- files are closed by apply or close_plans). dense_file: the model's file
-- in an unsharded checkpoint. strict = false: see check_entries.
function M.plan(self, r, entry, model, refuse, model_index, dense_file, strict)
  local eng = M.engine_of(model)
  local e = entries(model, eng)
  local plan = {model = model, eng = eng, e = e}
  local layout = entry.sharded
  if layout then
    check_files(r, layout, refuse)
    local params = {}
    for _, p in ipairs(layout.params) do params[p.name] = p end
    plan.skip = check_entries(r, layout, params, e, refuse, model_index, strict or eng ~= nil)
    plan.src = setmetatable({dir = r.dir, layout = layout, params = params, open = {}}, Sharded)
    if layout.optimizer then
      local k = layout.optimizer.index
      local mine = optimizer_for(self, model, eng)
      if mine == nil or k ~= mine then
        refuse("the optimizer state of model %d was saved with optimizer %s; this Accelerator prepared its optimizer "
          .. "as number %s", model_index or 1, tostring(k), tostring(mine))
      end
      local allowed, kind = optimizer_states_of(self._optimizers[k])
      for _, s in ipairs(layout.optimizer.state_names) do
        if allowed and not allowed[s] then
          refuse("%s holds optimizer state %q, which %s does not keep", layout.optimizer.files[1], s, kind)
        end
      end
      plan.optimizer = k
    end
  else
    local path = r:require(dense_file)
    local ok, f = pcall(C.st_open, path)
    if not ok then refuse("%s cannot be read: %s", dense_file, tostring(f)) end
    plan.src = setmetatable({file = f, states = {}}, Dense)
    local have = {}
    for _, x in ipairs(f:entries()) do have[x.name] = x end
    for _, name in ipairs(e.order) do
      local x, t = have[name], e.sd[name]
      if not x or table.concat(x.shape, ",") ~= table.concat(t.shape, ",") or x.dtype ~= tag_of(t) then
        refuse("%s does not match model %d: %s is %s", dense_file, model_index or 1, name,
          x and (x.dtype .. " [" .. table.concat(x.shape, ",") .. "]") or "missing")
      end
    end
  end
  return plan
end

-- After load_state read the optimizers (data.optimizers[k], full
-- state_dicts): the state of an optimizer whose model is held by an engine
-- moves into that model's plan (the optimizer itself keeps an empty state).
function M.take_optimizer_states(self, data, r, refuse)
  M.plan_optimizer_shards(self, r, data, refuse)
  for _, plan in pairs(data.sharded) do
    local k = plan.eng and optimizer_for(self, plan.model, plan.eng)
    if getmetatable(plan.src) == Dense and k and data.optimizers[k] then
      plan.src.states = states_by_name(data.optimizers[k], self._optimizers[k], names_of_params(plan.model))
      data.optimizers[k] = {state = {}, param_groups = data.optimizers[k].param_groups}
      plan.optimizer = k
    end
  end
end

-- The optimizer shards of models a save_state pre-hook kept out
-- (index.optimizer_shards), checked, as plans that load only the optimizer
-- state of the prepared model optimizer k steps (data.sharded["optimizer<k>"]).
function M.plan_optimizer_shards(self, r, data, refuse)
  for _, layout in ipairs(type(r.index.optimizer_shards) == "table" and r.index.optimizer_shards or {}) do
    check_files(r, layout, refuse)
    local k = type(layout.optimizer) == "table" and layout.optimizer.index
    local model
    for _, m in ipairs(self._models) do
      if k and optimizer_for(self, m, M.engine_of(m)) == k then model = m end
    end
    if not model then
      refuse("%s holds optimizer %s's shards, which steps no prepared model", checkpoint.INDEX, tostring(k))
    end
    local params = {}
    for _, p in ipairs(layout.params) do params[p.name] = p end
    local eng = M.engine_of(model)
    data.sharded["optimizer" .. k] = {model = model, eng = eng, e = entries(model, eng), optimizer = k,
      states_only = true, src = setmetatable({dir = r.dir, layout = layout, params = params, open = {}}, Sharded)}
    if data.optimizers[k] then data.optimizers[k].state = {} end
  end
end

-- ---------------------------------------------------------------- apply

-- Per parameter i: the range [lo, hi) of its elements this rank keeps in
-- its shards, and full = true when it must be given in full (stages 1-2
-- keep every parameter in full; a stage 3 unit that is gathered right now
-- gets the full tensor copied in too).
local function ranges(eng)
  local c = eng:_live()
  local out, rank = {}, c:info().rank
  for u, unit in ipairs(eng:units()) do
    local whole = eng.stage ~= 3 or c:gathered(u)
    for k, i in ipairs(unit.params) do
      local n = numel_of(eng.params[i].shape)
      local off = unit.offsets[k]
      local lo = math.min(n, math.max(0, rank * unit.shard - off))
      local hi = math.max(lo, math.min(n, (rank + 1) * unit.shard - off))
      out[i] = {lo = lo, hi = hi, n = n, full = whole}
    end
  end
  return out
end

-- One full-shaped float32 tensor with elements [lo, hi) from the source
-- (the rest zero); the previous one is collected first, so only one is live.
local function build(src, name, which, shape, lo, hi)
  collectgarbage()
  local t = accel.zeros(shape)
  if hi > lo then src:fill(name, which, lo, hi, t:view(-1)) end
  return t
end

local function lazy(fn) return setmetatable({}, {__index = function(_, k) return fn(k) end}) end

local function apply_engine(plan)
  local eng, src, e = plan.eng, plan.src, plan.e
  local range = ranges(eng)
  local replicated = {}
  for _, name in ipairs(e.replicated) do replicated[name] = true end
  if not plan.states_only then
    eng:load_full_state_dict(lazy(function(name)
      local i = e.pos[name]
      if i then
        local g = range[i]
        return build(src, name, "param", eng.params[i].shape, g.full and 0 or g.lo, g.full and g.n or g.hi)
      end
      if replicated[name] then return src:replicated(name) end
      return nil
    end))
  end
  if not (plan.optimizer and src:has_states()) then return end
  local have = {}
  for _, s in ipairs(src:state_names()) do have[s] = true end
  eng:load_full_optim_state(lazy(function(name)
    local i = e.pos[name]
    if not i then return nil end
    local shape = eng.params[i].shape
    if not src:has_state(name) then -- frozen when saved: a fresh state, as an optimizer that never stepped it
      return setmetatable({step = 0}, {__index = function(_, s) return have[s] and accel.zeros(shape) or nil end})
    end
    return setmetatable({step = src:step(name)}, {__index = function(_, s)
      if not have[s] then return nil end
      return build(src, name, s, shape, range[i].lo, range[i].hi)
    end})
  end))
end

local function apply_plain(self, plan)
  local src, e, model = plan.src, plan.e, plan.model
  local params = {}
  for name, p in model:named_parameters() do params[name] = p end
  accel.no_grad(function()
    for _, name in ipairs(plan.states_only and {} or e.order) do
      local t = e.sd[name]
      if e.aliases[name] == nil and not (plan.skip and plan.skip[name]) then
        collectgarbage()
        t:copy_(src:replicated(name))
      end
    end
  end)
  if not (plan.optimizer and src:has_states()) then return end
  -- One parameter's state at a time through the optimizer's own
  -- load_state_dict (which checks and copies it), collected into its state
  -- table: never the whole optimizer state twice.
  local raw = self._optimizers[plan.optimizer].optimizer or self._optimizers[plan.optimizer]
  local groups = raw:state_dict().param_groups
  local by_id, kept = param_ids(raw), {}
  for name, p in pairs(params) do
    local id = by_id[p]
    if id and src:has_state(name) then
      local st = {step = src:step(name)}
      for _, s in ipairs(src:state_names()) do st[s] = build(src, name, s, p.shape, 0, numel_of(p.shape)) end
      raw:load_state_dict({state = {[id] = st}, param_groups = groups})
      kept[p] = raw.state[p]
    end
  end
  raw.state = kept
end

-- Applies every plan (after the optimizers' own state_dicts are loaded).
function M.apply(self, plans)
  for _, plan in pairs(plans) do
    local ok, err = pcall(function()
      if plan.eng then apply_engine(plan) else apply_plain(self, plan) end
    end)
    plan.src:close()
    if not ok then error(err, 0) end
  end
end

function M.close_plans(plans)
  for _, plan in pairs(plans) do plan.src:close() end
end

-- ---------------------------------------------------------------- full weights (save_model, get_state_dict)

-- Parameter i of the engine in full (collective under stage 3).
-- Parameter i gathered in full (cast to dtype when given).
local function full_param(eng, i, dtype)
  local t = eng:_live():full_tensor(i, 0)
  if dtype and t.dtype ~= dtype then return t:to(dtype) end
  return t
end

-- {name = full tensor} (gathered one tensor at a time; the whole model once).
-- dtype (optional): the parameters' dtype in the result (DeepSpeed's
-- 16-bit consolidated state dict); buffers keep theirs.
function M.full_state_dict(model, dtype)
  local eng = M.engine_of(model)
  local e = entries(model, eng)
  eng:finalize()
  local out = {}
  for _, name in ipairs(e.order) do
    local i = e.pos[e.aliases[name] or name]
    out[name] = i and full_param(eng, i, dtype) or e.sd[name]:detach():clone()
  end
  return out
end

-- save_model for a model with an engine: the same files as
-- checkpoint.save_model of the full state dict, each tensor gathered (every
-- rank, same order) just before it is written by rank 0; dtype as
-- full_state_dict's.
function M.save_model(model, dir, max_bytes, main, dtype)
  local eng = M.engine_of(model)
  local e = entries(model, eng)
  eng:finalize()
  local param_tag = dtype and TAGS[dtype.name] or "F32"
  local function spec(name)
    local i = e.pos[e.aliases[name] or name]
    if i then return {dtype = param_tag, shape = copy_list(eng.params[i].shape)} end
    return e.sd[name]
  end
  local order, removed = checkpoint.untied_order(e.order, e.sd) -- tied weights written once, as Accelerate
  if main then checkpoint.warn_removed_shared(removed) end
  local shards, total = checkpoint.plan_model_files(order, function(name)
    local s = spec(name)
    local tag = accel.is_tensor(s) and tag_of(s) or s.dtype
    return numel_of(s.shape) * DTYPE_BYTES[tag]
  end, max_bytes)
  if main then C.mkdirs(dir) end
  for k, names in ipairs(shards) do
    local sorted = {}
    for j, name in ipairs(names) do sorted[j] = name end
    table.sort(sorted)
    local w
    if main then
      local specs = {}
      for _, name in ipairs(names) do specs[name] = spec(name) end
      w = C.st_writer(join(dir, checkpoint.model_file(k, #shards)), specs, {format = "pt"})
    end
    local ok, err = pcall(function()
      for j, name in ipairs(sorted) do
        if w and w:names()[j] ~= name then raise("save_model: tensor order differs (%s)", name) end
        collectgarbage()
        local i = e.pos[e.aliases[name] or name]
        local t = i and full_param(eng, i, dtype) or e.sd[name]:detach()
        if w then w:put(t) end
      end
    end)
    if not ok then
      if w then w:abort() end
      error(err, 0)
    end
    if w then w:finish() end
  end
  if main then checkpoint.finish_model_dir(dir, shards, total) end
  return #shards
end

-- ---------------------------------------------------------------- merge-weights

-- merge(ckpt, out): the full weights of a sharded save_state folder as one
-- safetensors file (the names, order and bytes save_model writes for the
-- same model without sharding), one tensor in memory at a time.
-- before_write(): called once the checkpoint is verified, before anything
-- is written (merge-weights creates the output folder there, so a refused
-- checkpoint leaves none behind).
function M.merge(ckpt, out, model_index, before_write)
  local r = checkpoint.open(ckpt)
  local i = model_index or 1
  local entry = type(r.index.models) == "table" and r.index.models[i] or nil
  if type(entry) ~= "table" then
    error(("merge-weights: %s has no model %d in %s"):format(r.dir, i, checkpoint.INDEX), 0)
  end
  local layout = entry.sharded
  if not layout then
    error(("merge-weights: %s is not a sharded checkpoint (model %d is saved whole as %s; copy that file instead)")
      :format(r.dir, i, tostring(entry.file)), 0)
  end
  local function refuse(fmt, ...) error(("merge-weights: refusing %s: " .. fmt):format(r.dir, ...), 0) end
  check_files(r, layout, refuse)
  local params = {}
  for _, p in ipairs(layout.params) do params[p.name] = p end
  local src = setmetatable({dir = r.dir, layout = layout, params = params, open = {}}, Sharded)
  local first = C.st_open(join(r.dir, layout.files[1]))
  local rep = {}
  for _, e in ipairs(first:entries()) do rep[e.name] = e end
  first:close()
  local specs = {}
  for _, p in ipairs(layout.params) do specs[p.name] = {dtype = "F32", shape = copy_list(p.shape)} end
  for _, name in ipairs(layout.replicated or {}) do
    if not rep[name] then refuse("%s does not hold %s", layout.files[1], name) end
    specs[name] = {dtype = rep[name].dtype, shape = rep[name].shape}
  end
  -- a tied parameter's other names are left out, as save_model leaves them out
  local removed = {}
  for alias in pairs(layout.aliases or {}) do removed[#removed + 1] = alias end
  local ok, err = pcall(function()
    local message = checkpoint.removed_shared_message(removed) -- (no process state here: plain stderr)
    if message then io.stderr:write("WARNING:accelerate.utils.other:" .. message .. "\n") end
    if before_write then before_write() end
    local w = C.st_writer(out, specs, {format = "pt"})
    local wrote_ok, werr = pcall(function()
      for _, name in ipairs(w:names()) do
        local p = params[(layout.aliases or {})[name] or name]
        w:put(p and build(src, p.name, "param", p.shape, 0, numel_of(p.shape)) or src:replicated(name))
      end
    end)
    if not wrote_ok then
      w:abort()
      error(werr, 0)
    end
    w:finish()
  end)
  src:close()
  if not ok then error(("merge-weights: %s"):format(tostring(err)), 0) end
  return out
end

-- The `accel-lua merge-weights` command line (host/cmd_merge.c) -> exit status.
M.USAGE = [[
usage: accel-lua merge-weights CHECKPOINT_DIR OUTPUT [--model N] [--remove_checkpoint_dir]
]]

M.HELP = M.USAGE .. [[

Turns a save_state folder written under a sharding engine (ZeRO stages 1-3 /
FSDP; one model_shard_<rank>.safetensors per rank) into one safetensors file
of the full model weights: the names and bytes Accelerator:save_model writes
for the same model without sharding. The folder is verified first (index,
sizes, crc32), and one tensor at a time is held in memory.
  OUTPUT                    a folder (created if needed) that gets model.safetensors,
                            as accelerate merge-weights; a path ending in
                            .safetensors is the file itself (its folders are
                            created if needed); it must not be
                            inside CHECKPOINT_DIR (refused, exit 2)
  --model N                 the N-th prepared model (default 1)
  --remove_checkpoint_dir   remove CHECKPOINT_DIR after a successful merge;
                            true/false may follow it or an = (also yes/no, 1/0, on/off)
  --unsafe_serialization    refused: only safetensors is written
  -h, --help                this help
Flags may be written with dashes (--remove-checkpoint-dir) and as --model=N.

Example:
  accel-lua merge-weights ckpt/checkpoint_3 merged/
]]

local function usage_error(msg)
  io.stderr:write("accel-lua merge-weights: " .. msg .. "\n" .. M.USAGE)
  return 2
end

local MERGE_FLAGS = {model = "int", remove_checkpoint_dir = "bool", unsafe_serialization = "bool", help = "bool"}

-- args -> {ckpt, out, model, remove_checkpoint_dir}; raises {usage = message}.
local function parse_merge_args(args)
  local function fail(fmt, ...) error({usage = fmt:format(...)}, 0) end
  -- the flag reader of the subcommands written in Lua (launch's boolean words)
  local o, pos = util.parse_flags(args, MERGE_FLAGS, fail)
  o.model = o.model or 1
  if o.model < 1 then fail("--model needs a positive integer, got %d", o.model) end
  if o.unsafe_serialization then fail("--unsafe_serialization is not supported: only safetensors is written") end
  if #pos ~= 2 then
    fail("expected CHECKPOINT_DIR and OUTPUT, got %d argument(s)%s", #pos, #pos > 0 and ": " .. table.concat(pos, " ") or "")
  end
  o.ckpt, o.out = pos[1], pos[2]
  return o
end

-- The file merge-weights writes for OUTPUT: OUTPUT itself when it ends in
-- .safetensors, else OUTPUT/model.safetensors.
local function output_file(out)
  if out:find("%.safetensors$") then return out end
  return join(out, "model.safetensors")
end

-- An error message when the file merge-weights would write (or a folder it
-- would create) is inside the checkpoint folder, or is it: writing there
-- would overwrite a shard or add a file to the checkpoint, and
-- --remove_checkpoint_dir would delete the output. resolve(path) is the
-- absolute path with symbolic links resolved (realpath, as far as the path
-- exists; host/cmd_merge.c); the file's folder is resolved, so a link named
-- OUTPUT inside the checkpoint counts as inside. nil when OUTPUT is elsewhere.
local function output_inside_checkpoint(ckpt, out, resolve)
  resolve = resolve or function(p) return p end
  local file = output_file(out)
  local dir, base = file:match("^(.*)/([^/]*)$")
  if not dir then dir, base = ".", file end
  if dir == "" then dir = "/" end
  local ck, where = resolve(ckpt), resolve(dir)
  if not ck or not where then return nil end
  where = where == "/" and "/" .. base or where .. "/" .. base
  local prefix = ck == "/" and "/" or ck .. "/"
  if where ~= ck and where:sub(1, #prefix) ~= prefix then return nil end
  return ("OUTPUT %s is inside CHECKPOINT_DIR %s (%s is in %s): refusing to write into the checkpoint folder; "
    .. "choose an OUTPUT outside it"):format(out, ckpt, where, ck)
end

-- An error message when OUTPUT cannot be written as asked: a folder the
-- command would create (OUTPUT, or one above the file) is an existing
-- file, or the file to write is an existing folder. nil when it can be.
local function output_blocked(out)
  local file = output_file(out)
  if C.fs_stat(file) == "dir" then
    return ("OUTPUT %s is an existing folder, not a file (a path ending in .safetensors names the file to write)")
      :format(out)
  end
  local dir = file:match("^(.*)/[^/]*$")
  while dir and dir ~= "" and not C.fs_stat(dir) do dir = dir:match("^(.*)/[^/]*$") end -- the part that exists
  if not dir or dir == "" or C.fs_stat(dir) == "dir" then return nil end
  if dir == out:gsub("/+$", "") then
    return ("OUTPUT %s is an existing file, not a folder (name a folder, or a path ending in .safetensors)"):format(out)
  end
  return ("OUTPUT %s: %s is an existing file, not a folder"):format(out, dir)
end

-- main(args, host): host.resolve is the path resolver host/cmd_merge.c
-- passes (without it paths are compared as written).
function M.main(args, host)
  if util.help_asked(args) then
    io.stdout:write(M.HELP)
    return 0
  end
  local parsed, o = pcall(parse_merge_args, args)
  if not parsed then
    if type(o) ~= "table" then error(o, 0) end
    return usage_error(o.usage)
  end
  local refused = output_inside_checkpoint(o.ckpt, o.out, host and host.resolve) or output_blocked(o.out)
  if refused then
    io.stderr:write(("accel-lua merge-weights: %s\n"):format(refused))
    return 2
  end
  local out = output_file(o.out)
  local ok, err = pcall(function()
    M.merge(o.ckpt, out, o.model, function()
      local dir = out:match("^(.*)/[^/]*$")
      if dir and dir ~= "" then C.mkdirs(dir) end -- OUTPUT's folders, parents included
    end)
  end)
  if not ok then
    io.stderr:write(("accel-lua %s\n"):format((tostring(err):gsub("^load_state: ", "merge-weights: "))))
    return 1
  end
  if o.remove_checkpoint_dir then C.fs_remove_tree(o.ckpt) end
  io.stdout:write(("wrote %s\n"):format(out))
  return 0
end

return M
