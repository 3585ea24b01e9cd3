-- accel.nn.embedding_bag: F.embedding_bag and nn.EmbeddingBag, the sum,
-- mean or max of the embeddings of each bag: the rows of a 2-D input, or
-- the runs of a 1-D input that offsets start (0-based positions, data as
-- PyTorch takes them). Entries equal to padding_idx are left out of their
-- bag (a bag with nothing left gives zeros), per_sample_weights scale the
-- rows of a sum. Built from index_select and index_add (max: one max per
-- bag), so autograd comes with it; max_norm, scale_grad_by_freq and sparse
-- are refused, as nn.Embedding refuses max_norm. Loaded on first use.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local init = require("accel.nn.initializers")
local util = require("accel.util")

local raise, py, export_class = base.raise, base.pyrepr, base.export_class

local M = {}

local SPECS = {"offsets:tensor", "max_norm", "norm_type:number", "scale_grad_by_freq:bool", "mode:string",
               "sparse:bool", "per_sample_weights:tensor", "include_last_offset:bool", "padding_idx:int"}

local MODES = {sum = true, mean = true, max = true}

-- the flat ids and, per bag, the first position (0-based) and the count of its ids
local function bags_of(input, a)
  if input:dim() == 2 then
    if a.offsets ~= nil then raise("embedding_bag: if input is 2D, then offsets has to be None") end
    local starts, counts = {}, {}
    for b = 1, input:size(1) do starts[b], counts[b] = (b - 1) * input:size(2), input:size(2) end
    return input:reshape({-1}), starts, counts
  end
  if input:dim() ~= 1 then raise("embedding_bag: input has to be 1D or 2D Tensor, but got Tensor of dimension %d", input:dim()) end
  if a.offsets == nil or a.offsets:dim() ~= 1 then raise("embedding_bag: offsets has to be a 1D Tensor but got None") end
  local offs = a.offsets:tolist()
  if offs[1] ~= nil and offs[1] ~= 0 then
    raise("embedding_bag: offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
      .. "position 0. However, got %s", tostring(offs[1]))
  end
  local n = input:numel()
  if a.include_last_offset then
    if #offs < 1 then raise("embedding_bag: include_last_offset needs at least one offset") end
    n = math.min(n, offs[#offs])
    offs[#offs] = nil
  end
  local starts, counts = {}, {}
  for b, o in ipairs(offs) do
    local stop = b < #offs and offs[b + 1] or n
    if o < 0 or o > stop or stop > input:numel() then
      raise("embedding_bag: offsets must be increasing positions within the input (0..%d), got %s", input:numel(),
        util.show(a.offsets:tolist()))
    end
    starts[b], counts[b] = o, stop - o
  end
  return input, starts, counts
end

-- embedding_bag(input, weight, [offsets], [max_norm], [norm_type], [scale_grad_by_freq], [mode = "mean"],
--   [sparse], [per_sample_weights], [include_last_offset = false], [padding_idx]) -> (bags, embedding_dim)
function F.embedding_bag(input, weight, ...)
  local a = util.torch_args("embedding_bag", SPECS, ...)
  if not accel.is_tensor(input) or not accel.is_tensor(weight) or weight:dim() ~= 2 then
    raise("embedding_bag: expected an index tensor and a 2-D weight")
  end
  if a.max_norm ~= nil then raise("embedding_bag: max_norm is not supported (as nn.Embedding's)") end
  if a.scale_grad_by_freq or a.sparse then raise("embedding_bag: scale_grad_by_freq and sparse are not supported") end
  local mode = a.mode or "mean"
  if not MODES[mode] then raise('embedding_bag: mode has to be one of "sum", "mean" or "max", got %s', py(mode)) end
  if a.per_sample_weights ~= nil and mode ~= "sum" then
    raise("embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for mode='sum' "
      .. "(got mode='%s')", mode)
  end
  local ids, starts, counts = bags_of(input, a)
  local n_emb, dim = weight:size(1), weight:size(2)
  local pad = a.padding_idx
  if pad ~= nil and pad < 0 then pad = n_emb + pad end
  local rows = weight:index_select(1, ids) -- (M, D)
  local keep = pad ~= nil and ids:ne(pad):to(weight.dtype) or nil -- (M)
  if a.per_sample_weights ~= nil then rows = rows * a.per_sample_weights:reshape({-1, 1}) end
  if keep ~= nil then rows = rows * keep:unsqueeze(2) end
  local nb = #starts
  if mode == "max" then
    -- (0, D), connected to weight: an empty bag takes its sum, zeros with a zero gradient, so that the
    -- output needs a gradient also when every bag is empty (as PyTorch's)
    local none = weight:narrow(1, 1, 0)
    local out = {}
    for b = 1, nb do
      local bag = rows:narrow(1, starts[b] + 1, counts[b])
      if keep ~= nil then -- padding entries cannot win
        bag = bag:masked_fill(keep:narrow(1, starts[b] + 1, counts[b]):eq(0):unsqueeze(2), -math.huge)
      end
      local present = counts[b] > 0 and (keep == nil or keep:narrow(1, starts[b] + 1, counts[b]):sum():item() > 0)
      out[b] = present and (bag:max(1, true)) or none:sum(1, true)
    end
    if nb == 0 then return none:clone() end
    return accel.cat(out, 1)
  end
  local bag_of = {}
  for b = 1, nb do
    for _ = 1, counts[b] do bag_of[#bag_of + 1] = b - 1 end
  end
  local opts = {dtype = weight.dtype, device = weight.device}
  local used = rows:narrow(1, 1, #bag_of)
  local index = accel.tensor(bag_of, {dtype = accel.int64, device = weight.device})
  local sums = accel.zeros(nb, dim, opts):index_add(1, index, used)
  if mode == "sum" then return sums end
  local ones = keep ~= nil and keep:narrow(1, 1, #bag_of) or accel.ones(#bag_of, opts)
  local n = accel.zeros(nb, opts):index_add(1, index, ones):clamp(1)
  return sums / n:unsqueeze(2)
end

local EmbeddingBag = export_class(M, "EmbeddingBag")

-- EmbeddingBag(num_embeddings, embedding_dim, [max_norm], [norm_type], [scale_grad_by_freq], [mode = "mean"],
--   [sparse], [_weight], [include_last_offset = false], [padding_idx], [{dtype =, device =}])
function EmbeddingBag:init(num_embeddings, embedding_dim, ...)
  local a = util.torch_args("EmbeddingBag", {"max_norm", "norm_type:number", "scale_grad_by_freq:bool", "mode:string",
    "sparse:bool", "_weight:tensor", "include_last_offset:bool", "padding_idx:int", "dtype", "device"}, ...)
  if a.max_norm ~= nil then raise("EmbeddingBag: max_norm is not supported (as nn.Embedding's)") end
  if a.scale_grad_by_freq or a.sparse then raise("EmbeddingBag: scale_grad_by_freq and sparse are not supported") end
  self.num_embeddings = base.check_integer(num_embeddings, "EmbeddingBag", "num_embeddings", 1)
  self.embedding_dim = base.check_integer(embedding_dim, "EmbeddingBag", "embedding_dim", 1)
  self.mode = a.mode or "mean"
  if not MODES[self.mode] then raise('EmbeddingBag: mode has to be one of "sum", "mean" or "max", got %s', py(self.mode)) end
  self.include_last_offset = a.include_last_offset == true
  local pad = a.padding_idx
  if pad ~= nil then
    if pad >= num_embeddings or pad < -num_embeddings then raise("EmbeddingBag: padding_idx must be within num_embeddings") end
    if pad < 0 then pad = num_embeddings + pad end
  end
  self.padding_idx = pad
  local w = a._weight or init.normal_(accel.empty({num_embeddings, embedding_dim}, {dtype = a.dtype, device = a.device}))
  self.weight = base.Parameter(w)
  if pad ~= nil and a._weight == nil then accel.no_grad(function() self.weight[pad + 1]:zero_() end) end
end

-- forward(input, [offsets], [per_sample_weights])
function EmbeddingBag:forward(input, offsets, per_sample_weights)
  return F.embedding_bag(input, self.weight, {offsets = offsets, mode = self.mode, per_sample_weights = per_sample_weights,
    include_last_offset = self.include_last_offset, padding_idx = self.padding_idx})
end

function EmbeddingBag:extra_repr()
  local s = ("%d, %d, mode='%s'"):format(self.num_embeddings, self.embedding_dim, self.mode)
  if self.padding_idx ~= nil then s = s .. ", padding_idx=" .. self.padding_idx end
  return s
end

return M
