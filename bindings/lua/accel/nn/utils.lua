-- accel.nn.utils: torch.nn.utils' gradient clipping and flat-vector helpers.
--
--   local total = nn.utils.clip_grad_norm_(model:parameters(), 1.0)        -- {norm_type = 2}
--   nn.utils.clip_grad_value_(model:parameters(), 0.5)
--   local v = nn.utils.parameters_to_vector(model:parameters())
--   nn.utils.vector_to_parameters(v, model:parameters())
--
-- `parameters` is a list of tensors or one tensor; parameters whose grad is
-- nil are skipped. clip_grad_norm_ computes the total norm of all gradients
-- in one C pass (accel._C.grads_total_norm, in double; norm_type may be math.huge
-- or "inf", negative as in PyTorch (-math.huge: the smallest |element|; an
-- empty gradient is then an error, as PyTorch's), and may come positionally:
-- clip_grad_norm_(ps, 1.0, 2)) and
-- returns it as a 0-dim tensor of the gradients' promoted dtype (float64 when
-- any gradient is); as PyTorch it is the norm of the per-gradient norms, each
-- rounded to its gradient's dtype (norm_type 0: the number of gradients with
-- a nonzero element) and it multiplies every gradient by
-- clamp(max_norm / (total + 1e-6), max = 1) in that dtype (skipped when the
-- factor is exactly 1). `foreach` only picks PyTorch's implementation: it is
-- accepted and ignored, as by accel.optim.
local accel = require("accel")
local C = accel._C

local utils = {}

local util = require("accel.util")
local raise = util.raise

local function param_list(name, parameters)
  if accel.is_tensor(parameters) then return {parameters} end
  if type(parameters) ~= "table" then
    raise("%s: parameters must be a list of tensors or a tensor, got %s", name, type(parameters))
  end
  util.check_list(parameters, name, "parameters")
  if parameters[1] == nil and next(parameters) ~= nil then
    raise("%s: parameters must be a list of tensors, got a table that is not a list (for a module, pass "
      .. "model:parameters())", name)
  end
  for i, p in ipairs(parameters) do
    if not accel.is_tensor(p) then raise("%s: parameters[%d] is a %s, not a tensor", name, i, type(p)) end
  end
  return parameters
end

local function grads_of(params)
  local grads = {}
  for _, p in ipairs(params) do
    local g = p.grad
    if g ~= nil then grads[#grads + 1] = g end
  end
  return grads
end

-- The dtype of a norm of norms of dtypes a (nil: none yet) and b, as
-- PyTorch's type promotion: float64 if either is, else the common one, else
-- float32 (float16 with bfloat16 too).
local function promoted(a, b)
  if a == nil or a == b then return b end
  if a == accel.float64 or b == accel.float64 then return accel.float64 end
  return accel.float32
end

-- norm_type as a number: any but NaN (negative too, as PyTorch: -math.huge
-- gives the smallest |element|), or "inf" / "-inf".
local INF_NAMES = {inf = math.huge, Inf = math.huge, ["-inf"] = -math.huge, ["-Inf"] = -math.huge}
local function norm_type_of(name, v)
  if v == nil then return 2.0 end
  if INF_NAMES[v] then return INF_NAMES[v] end
  if type(v) ~= "number" or v ~= v then
    raise("%s: norm_type must be a number (+-math.huge / \"inf\" / \"-inf\" too), got %s", name, tostring(v))
  end
  return v
end
utils._norm_type = norm_type_of -- (shard.Engine:clip_grad_norm_ reads norm_type the same way)

local check_options = require("accel.nn.module").check_options

-- clip_grad_norm_'s options: PyTorch's positional norm_type,
-- error_if_nonfinite, foreach, or one options table.
local function clip_options(name, opts, error_if_nonfinite, foreach)
  if opts == nil or type(opts) == "number" or type(opts) == "string" then
    return {norm_type = opts, error_if_nonfinite = error_if_nonfinite, foreach = foreach}
  end
  if error_if_nonfinite ~= nil or foreach ~= nil then
    raise("%s: error_if_nonfinite / foreach given positionally after the options table (put them in it)", name)
  end
  return check_options(name, opts, {"norm_type", "error_if_nonfinite", "foreach"})
end

-- clip_grad_norm_(parameters, max_norm, [norm_type = 2], [error_if_nonfinite = false], [foreach])
-- or clip_grad_norm_(parameters, max_norm, {norm_type =, error_if_nonfinite =, foreach =})
-- -> total norm (0-dim tensor)
function utils.clip_grad_norm_(parameters, max_norm, opts, error_if_nonfinite, foreach)
  local name = "clip_grad_norm_"
  local params = param_list(name, parameters)
  if type(max_norm) ~= "number" then raise("%s: max_norm must be a number, got %s", name, type(max_norm)) end
  opts = clip_options(name, opts, error_if_nonfinite, foreach)
  local norm_type = norm_type_of(name, opts.norm_type)
  -- the gradients stay in C (no Lua handles that would keep them alive past
  -- zero_grad(), see bindings/optim_lua.c)
  local norm = C.grads_total_norm(params, norm_type)
  if norm == nil then return accel.tensor(0.0) end
  local has, dtype, device = C.has_grads(params), nil, nil
  for i = 1, #params do
    if has[i] then
      dtype, device = promoted(dtype, params[i].dtype), device or params[i].device
    end
  end
  local total = accel.tensor(norm, {dtype = dtype, device = device})
  local t = total:item()
  if opts.error_if_nonfinite and (t ~= t or t == math.huge) then
    raise("%s: The total norm of order %s for gradients from `parameters` is non-finite, so it cannot be clipped. "
      .. "To disable this error and scale the gradients by the non-finite norm anyway, set "
      .. "`error_if_nonfinite=false`", name, tostring(norm_type))
  end
  local coef = (max_norm / (total + 1e-6)):clamp(nil, 1.0)
  local c = coef:item() -- the factor rounded to the gradients' dtype, as PyTorch multiplies by it
  if c ~= 1 then C.grads_mul_(params, c) end
  return total
end

-- get_total_norm(tensors, [norm_type = 2], [error_if_nonfinite = false], [foreach])
-- or (tensors, {...}): torch 2.6's norm of the tensors' norms (tensors: a
-- tensor or a list, e.g. the gradients), a 0-D tensor (0 for none), no
-- gradient recorded
function utils.get_total_norm(tensors, opts, error_if_nonfinite, foreach)
  local name = "get_total_norm"
  local list = param_list(name, tensors)
  opts = clip_options(name, opts, error_if_nonfinite, foreach)
  local p = norm_type_of(name, opts.norm_type)
  if #list == 0 then return accel.tensor(0.0) end
  local L = require("accel.linalg")
  local total = accel.no_grad(function()
    local norms = {}
    for i, t in ipairs(list) do norms[i] = L.vector_norm(t, p) end
    return L.vector_norm(accel.stack(norms), p)
  end)
  local v = total:item()
  if opts.error_if_nonfinite and (v ~= v or v == math.huge or v == -math.huge) then
    raise("%s: The total norm of order %s for gradients from `parameters` is non-finite, so it cannot be clipped. "
      .. "To disable this error and scale the gradients by the non-finite norm anyway, set `error_if_nonfinite=false`",
      name, tostring(p))
  end
  return total
end

-- clip_grads_with_norm_(parameters, max_norm, total_norm, [{foreach =}]):
-- torch 2.6's second half of clip_grad_norm_: every gradient scaled by
-- clamp(max_norm / (total_norm + 1e-6), max = 1)
function utils.clip_grads_with_norm_(parameters, max_norm, total_norm, opts)
  local name = "clip_grads_with_norm_"
  local params = param_list(name, parameters)
  if type(max_norm) ~= "number" then raise("%s: max_norm must be a number, got %s", name, type(max_norm)) end
  if type(total_norm) == "number" then total_norm = accel.tensor(total_norm)
  elseif not accel.is_tensor(total_norm) then
    raise("%s: total_norm must be a tensor or a number, got %s", name, type(total_norm))
  end
  check_options(name, opts, {"foreach"})
  local c = (max_norm / (total_norm + 1e-6)):clamp(nil, 1.0):item()
  if c ~= 1 then C.grads_mul_(params, c) end
end

-- clip_grad_value_(parameters, clip_value, [{foreach =}]): every gradient clamped to [-v, v] in place
function utils.clip_grad_value_(parameters, clip_value, opts)
  local name = "clip_grad_value_"
  local params = param_list(name, parameters)
  if type(clip_value) ~= "number" then raise("%s: clip_value must be a number, got %s", name, type(clip_value)) end
  check_options(name, opts, {"foreach"})
  accel.no_grad(function()
    for _, g in ipairs(grads_of(params)) do g:clamp_(-clip_value, clip_value) end
  end)
end

-- parameters_to_vector(parameters) -> 1-D tensor of all parameters, in order
function utils.parameters_to_vector(parameters)
  local params = param_list("parameters_to_vector", parameters)
  local flat = {}
  for i, p in ipairs(params) do flat[i] = p:reshape(-1) end
  return accel.cat(flat)
end

-- vector_to_parameters(vec, parameters): copies consecutive slices of vec into the parameters
function utils.vector_to_parameters(vec, parameters)
  local name = "vector_to_parameters"
  if not accel.is_tensor(vec) then raise("%s: expected a tensor, got %s", name, type(vec)) end
  local params = param_list(name, parameters)
  local total = 0
  for _, p in ipairs(params) do total = total + p:numel() end
  if vec:dim() ~= 1 or vec:numel() ~= total then
    raise("%s: vector has %d elements (%d dims) but the parameters hold %d", name, vec:numel(), vec:dim(), total)
  end
  accel.no_grad(function()
    local at = 1
    for _, p in ipairs(params) do
      local n = p:numel()
      p:copy_(vec:narrow(1, at, n):view_as(p))
      at = at + n
    end
  end)
end

-- nn.utils.rnn: padding a list of variable-length sequences into one
-- tensor and back. PackedSequence (pack_padded_sequence, ...) is not
-- provided: the recurrent modules take padded batches.
local rnn = {}
utils.rnn = rnn

-- rnn.pad_sequence(sequences, [batch_first = false], [padding_value = 0],
-- [padding_side = "right"]) or (sequences, {...}): tensors (L_i, *...) of
-- one trailing shape stacked into (max L, B, *...), or (B, max L, *...)
-- with batch_first, the missing steps padding_value (after each sequence,
-- or before it with padding_side = "left"); gradients reach each sequence
function rnn.pad_sequence(sequences, ...)
  local a = util.torch_args("pad_sequence", {"batch_first:bool", "padding_value:number", "padding_side:string"}, ...)
  local side = a.padding_side or "right"
  if side ~= "right" and side ~= "left" then
    raise('pad_sequence: padding_side must be "left" or "right", got %s', util.show(side))
  end
  if accel.is_tensor(sequences) then sequences = sequences:unbind(1) end
  if type(sequences) ~= "table" or #sequences == 0 then
    raise("pad_sequence: received an empty list of sequences")
  end
  local longest, trailing = 0, nil
  for i, s in ipairs(sequences) do
    if not accel.is_tensor(s) or s:dim() == 0 then
      raise("pad_sequence: sequence %d must be a tensor with at least one dim, got %s", i, util.show(s))
    end
    local dims = {}
    for d = 2, s:dim() do dims[#dims + 1] = s:size(d) end
    local rest = "[" .. table.concat(dims, ", ") .. "]"
    if trailing and rest ~= trailing then
      raise("pad_sequence: sequence %d has trailing shape %s, sequence 1 has %s", i, rest, trailing)
    end
    trailing, longest = rest, math.max(longest, s:size(1))
  end
  local padded = {}
  for i, s in ipairs(sequences) do
    local missing = longest - s:size(1)
    if missing > 0 then
      local shape = {missing}
      for d = 2, s:dim() do shape[d] = s:size(d) end
      local fill = accel.full(shape, a.padding_value or 0, {dtype = s.dtype, device = s.device})
      s = accel.cat(side == "right" and {s, fill} or {fill, s}, 1)
    end
    padded[i] = s
  end
  return accel.stack(padded, a.batch_first and 1 or 2)
end

-- rnn.unpad_sequence(padded, lengths, [batch_first = false]): the list of
-- sequences padded holds, sequence i cut to lengths[i] (a list or tensor)
function rnn.unpad_sequence(padded, lengths, ...)
  local a = util.torch_args("unpad_sequence", {"batch_first:bool"}, ...)
  if not accel.is_tensor(padded) or padded:dim() < 2 then
    raise("unpad_sequence: padded must be a tensor of at least 2 dims, got %s", util.show(padded))
  end
  if accel.is_tensor(lengths) then lengths = lengths:tolist() end
  local batch = a.batch_first and padded or padded:transpose(1, 2)
  if type(lengths) ~= "table" or #lengths ~= batch:size(1) then
    raise("unpad_sequence: lengths must hold one length per sequence (%d)", batch:size(1))
  end
  local out = {}
  for i, n in ipairs(lengths) do out[i] = batch[i]:narrow(1, 1, n) end
  return out
end

util.not_provided(rnn, {pack_padded_sequence = true, pad_packed_sequence = true, pack_sequence = true,
  unpack_sequence = true, PackedSequence = true}, "accel.nn.utils.rnn",
  "PackedSequence is not provided: pass the padded batch (nn.utils.rnn.pad_sequence) to the recurrent module")

-- torch.nn.utils names accel-lua does not have: reading one is an error naming it
local NOT_PROVIDED = {}
for name in ([[weight_norm spectral_norm remove_weight_norm remove_spectral_norm parametrize parametrizations
  prune stateless fusion convert_conv2d_weight_memory_format skip_init clip_grad_norm]]):gmatch("%S+") do
  NOT_PROVIDED[name] = true
end

return util.not_provided(utils, NOT_PROVIDED, "accel.nn.utils", "docs/api/nn.md lists what accel.nn.utils has")
