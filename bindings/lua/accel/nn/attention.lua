-- accel.nn.attention: nn.MultiheadAttention with PyTorch's parameters
-- (in_proj_weight {3E, E}, in_proj_bias {3E}, out_proj.weight, out_proj.bias),
-- initialisation (xavier_uniform in_proj_weight, zero biases) and forward:
--
--   local mha = nn.MultiheadAttention(E, H, {batch_first = false, bias = true, dropout = 0})
--   local out, weights = mha(query, key, value, {attn_mask =, key_padding_mask =,
--                            need_weights = true, average_attn_weights = true, is_causal = false})
--
-- Shapes: query {L, N, E} ({N, L, E} with batch_first, {L, E} unbatched),
-- key / value {S, N, E}. attn_mask {L, S} or {N*H, L, S}: a bool mask is true
-- where attention is NOT allowed (PyTorch's MHA convention), a float mask is
-- added to the scores. key_padding_mask {N, S}: true marks keys to ignore.
-- weights: {N, L, S} averaged over heads (or {N, H, L, S}), nil when
-- need_weights is false.
-- Decision: is_causal = true without attn_mask applies the causal mask
-- (PyTorch 2 requires the mask too and treats is_causal as a hint); with an
-- attn_mask, the mask given is used. kdim / vdim other than embed_dim and
-- add_bias_kv / add_zero_attn are not supported (a clear error).
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local init = require("accel.nn.initializers")
local layers = require("accel.nn.layers")

local Parameter, raise, check_options = base.Parameter, base.raise, base.check_options

local M = {}

-- PyTorch's class name for the output projection (a plain Linear).
local NonDynamicallyQuantizableLinear = layers.Linear:extend("NonDynamicallyQuantizableLinear")
M.NonDynamicallyQuantizableLinear = NonDynamicallyQuantizableLinear

local MultiheadAttention = base.export_class(M, "MultiheadAttention")

-- MultiheadAttention(embed_dim, num_heads, [dropout = 0], [bias = true], [add_bias_kv = false],
--   [add_zero_attn = false], [kdim], [vdim], [batch_first = false], [device], [dtype]), the optional
-- ones positionally or in an options table
function MultiheadAttention:init(embed_dim, num_heads, ...)
  local o = require("accel.util").torch_args("MultiheadAttention", {"dropout:number", "bias:bool",
    "add_bias_kv:bool", "add_zero_attn:bool", "kdim", "vdim", "batch_first:bool", "device", "dtype"}, ...)
  if type(embed_dim) ~= "number" or embed_dim <= 0 or type(num_heads) ~= "number" or num_heads <= 0 then
    raise("MultiheadAttention: embed_dim and num_heads must be positive integers, got %s and %s",
      tostring(embed_dim), tostring(num_heads))
  end
  if embed_dim % num_heads ~= 0 then
    raise("MultiheadAttention: embed_dim (%d) must be divisible by num_heads (%d)", embed_dim, num_heads)
  end
  if (o.kdim and o.kdim ~= embed_dim) or (o.vdim and o.vdim ~= embed_dim) then
    raise("MultiheadAttention: kdim / vdim different from embed_dim are not supported")
  end
  if o.add_bias_kv or o.add_zero_attn then raise("MultiheadAttention: add_bias_kv / add_zero_attn are not supported") end
  self.embed_dim, self.kdim, self.vdim = embed_dim, embed_dim, embed_dim
  self.num_heads = num_heads
  self.head_dim = math.floor(embed_dim / num_heads)
  self.dropout = o.dropout or 0.0
  self.batch_first = o.batch_first == true
  local factory = {dtype = o.dtype, device = o.device}
  self.in_proj_weight = Parameter(accel.empty({3 * embed_dim, embed_dim}, factory))
  self:register_parameter("q_proj_weight", nil)
  self:register_parameter("k_proj_weight", nil)
  self:register_parameter("v_proj_weight", nil)
  if o.bias ~= false then self.in_proj_bias = Parameter(accel.empty({3 * embed_dim}, factory))
  else self:register_parameter("in_proj_bias", nil) end
  self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim,
    {bias = o.bias ~= false, dtype = o.dtype, device = o.device})
  self:_reset_parameters()
end

function MultiheadAttention:_reset_parameters()
  init.xavier_uniform_(self.in_proj_weight)
  if self.in_proj_bias ~= nil then
    init.constant_(self.in_proj_bias, 0)
    init.constant_(self.out_proj.bias, 0)
  end
end

-- {N, T, E} -> {N, H, T, hd}
local function heads(x, n, t, h, hd) return x:reshape(n, t, h, hd):transpose(2, 3) end

local function check_input(self, x, name, batched)
  local want = batched and 3 or 2
  if not accel.is_tensor(x) then raise("MultiheadAttention: %s must be a tensor, got %s", name, type(x)) end
  if x:dim() ~= want or x:size(-1) ~= self.embed_dim then
    raise("MultiheadAttention: %s must be %s with last dim embed_dim=%d, got shape %s", name,
      batched and "3-D" or "2-D (unbatched)", self.embed_dim, tostring(x.shape))
  end
end

-- mask (true = masked) added to acc as -inf where true, or added as it is
-- when floating point
local function add_mask(acc, mask, like)
  if mask.dtype == accel.bool then
    mask = accel.zeros(mask.shape, {dtype = like.dtype, device = like.device}):masked_fill(mask, -math.huge)
  end
  if acc == nil then return mask end
  return acc + mask
end

-- attn_mask / is_causal / key_padding_mask as one additive mask that
-- broadcasts to the scores {N, H, L, S} (like: the query heads), or nil
local function attention_mask(self, like, o, n, l, s, batched)
  local h = self.num_heads
  local am = o.attn_mask
  if am == nil and o.is_causal then
    am = accel.ones(l, s, {dtype = accel.bool, device = like.device}):triu(1)
  end
  local mask
  if am ~= nil then
    F._check_mask("MultiheadAttention", "attn_mask", am, like)
    if am:dim() == 3 then
      if am:size(1) ~= n * h or am:size(2) ~= l or am:size(3) ~= s then
        raise("MultiheadAttention: attn_mask of shape %s, expected {%d, %d, %d} or {%d, %d}", tostring(am.shape), n * h, l, s, l, s)
      end
      am = am:reshape(n, h, l, s)
    elseif am:dim() ~= 2 or am:size(1) ~= l or am:size(2) ~= s then
      raise("MultiheadAttention: attn_mask of shape %s, expected {%d, %d} or {%d, %d, %d}", tostring(am.shape), l, s, n * h, l, s)
    end
    mask = add_mask(nil, am, like)
  end
  local kpm = o.key_padding_mask
  if kpm ~= nil then
    F._check_mask("MultiheadAttention", "key_padding_mask", kpm, like)
    if not batched and kpm:dim() == 1 then kpm = kpm:unsqueeze(1) end -- unbatched input: shape (S)
    if kpm:dim() ~= 2 or kpm:size(1) ~= n or kpm:size(2) ~= s then
      raise("MultiheadAttention: key_padding_mask of shape %s, expected {%d, %d}%s", tostring(kpm.shape), n, s,
        batched and "" or (" or {%d}"):format(s))
    end
    mask = add_mask(mask, kpm:reshape(n, 1, 1, s), like)
  end
  return mask
end

-- {N, H, L, hd} outputs and, when need_weights, the {N, H, L, S} weights.
-- Without weights it is F.scaled_dot_product_attention, as PyTorch's (a
-- query whose keys are all masked gets 0, not NaN).
local function attend(self, q, k, v, mask, need_weights)
  local p = self.training and self.dropout or 0
  if not need_weights then return F.scaled_dot_product_attention(q, k, v, {attn_mask = mask, dropout_p = p}) end
  -- q scaled before the product, as PyTorch's: q k^T itself may overflow a half dtype
  local scores = (q * math.sqrt(1 / self.head_dim)):matmul(k:transpose(-2, -1))
  if mask ~= nil then scores = scores + mask end
  local attn = F.softmax(scores, -1)
  if p > 0 then attn = F.dropout(attn, p) end
  return attn:matmul(v), attn
end

function MultiheadAttention:forward(query, key, value, ...)
  -- PyTorch's positional order, then (or instead) an options table
  local o = require("accel.util").torch_args("MultiheadAttention.forward", {"key_padding_mask:tensor",
    "need_weights:bool", "attn_mask:tensor", "average_attn_weights:bool", "is_causal:bool"}, ...)
  local batched = accel.is_tensor(query) and query:dim() == 3
  check_input(self, query, "query", batched)
  check_input(self, key, "key", batched)
  check_input(self, value, "value", batched)
  local self_attn = rawequal(query, key) and rawequal(key, value)
  -- to {N, T, E}
  local function bf(x)
    if not batched then return x:unsqueeze(1) end
    return self.batch_first and x or x:transpose(1, 2)
  end
  local q_in, k_in, v_in = bf(query), bf(key), bf(value)
  local n, l, s = q_in:size(1), q_in:size(2), k_in:size(2)
  if k_in:size(1) ~= n or v_in:size(1) ~= n or v_in:size(2) ~= s then
    raise("MultiheadAttention: query %s, key %s and value %s do not agree in batch / sequence sizes",
      tostring(query.shape), tostring(key.shape), tostring(value.shape))
  end
  local E, h, hd = self.embed_dim, self.num_heads, self.head_dim
  local w, b = self.in_proj_weight, self.in_proj_bias
  local q, k, v
  if self_attn then
    local qkv = F.linear(q_in, w, b):chunk(3, -1)
    q, k, v = qkv[1], qkv[2], qkv[3]
  else
    local function part(i) return w:narrow(1, i * E + 1, E), b and b:narrow(1, i * E + 1, E) end
    local wq, bq = part(0)
    local wk, bk = part(1)
    local wv, bv = part(2)
    q, k, v = F.linear(q_in, wq, bq), F.linear(k_in, wk, bk), F.linear(v_in, wv, bv)
  end
  q, k, v = heads(q, n, l, h, hd), heads(k, n, s, h, hd), heads(v, n, s, h, hd)
  local mask = attention_mask(self, q, o, n, l, s, batched)
  local heads_out, attn = attend(self, q, k, v, mask, o.need_weights ~= false)
  local out = self.out_proj(heads_out:transpose(2, 3):reshape(n, l, E))
  if not batched then out = out:squeeze(1)
  elseif not self.batch_first then out = out:transpose(1, 2) end
  if attn == nil then return out, nil end
  local weights = attn
  if o.average_attn_weights ~= false then weights = weights:mean(2) end
  if not batched then weights = weights:squeeze(1) end
  return out, weights
end

return M
