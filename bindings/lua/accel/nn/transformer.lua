-- accel.nn.transformer: TransformerEncoderLayer / TransformerEncoder,
-- TransformerDecoderLayer / TransformerDecoder and Transformer, as PyTorch
-- builds them (the same submodules in the same order, so state_dict keys
-- match: layers.0.self_attn.in_proj_weight, decoder.layers.1.norm3.bias,
-- ...). The stacks hold num_layers copies of the layer they are given,
-- made by nn.deepcopy as PyTorch's copy.deepcopy (equal weights at the
-- start). Loaded on first use of one of its classes.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local util = require("accel.util")
local compat = require("accel.compat")
local containers = require("accel.nn.containers")
local layers = require("accel.nn.layers")
local attention = require("accel.nn.attention")

local raise, py, export_class = base.raise, base.pyrepr, base.export_class

local M = {}

local ACTIVATIONS = {relu = F.relu, gelu = F.gelu}
local LAYER_OPTIONS = {"dim_feedforward:int", "dropout:number", "activation:string|function", "layer_norm_eps:number",
                       "batch_first:bool", "norm_first:bool", "bias:bool", "dtype", "device"}

-- The activation option checked: a name in ACTIVATIONS or a function.
local function layer_activation(kind, a)
  local act = a.activation or "relu"
  if base.is_module(act) then return act end -- (registered as the submodule 'activation', as PyTorch)
  if type(act) ~= "function" and not ACTIVATIONS[act] then
    raise("%s: activation should be relu/gelu, a module or a function, not %s", kind, util.show(act))
  end
  return type(act) == "function" and act or ACTIVATIONS[act]
end

-- A layer's submodules in PyTorch's order: the attention blocks named in
-- attns, linear1, dropout, linear2, norm1..norm<n>, dropout1..dropout<n>.
local function build_layer(self, d_model, nhead, a, act, attns, n)
  local drop, eps = a.dropout == nil and 0.1 or a.dropout, a.layer_norm_eps or 1e-5
  local opts = {bias = a.bias ~= false, dtype = a.dtype, device = a.device}
  for _, name in ipairs(attns) do
    self[name] = attention.MultiheadAttention(d_model, nhead, {dropout = drop, bias = opts.bias,
      batch_first = a.batch_first == true, dtype = a.dtype, device = a.device})
  end
  self.linear1 = layers.Linear(d_model, a.dim_feedforward or 2048, opts)
  self.dropout = layers.Dropout(drop)
  self.linear2 = layers.Linear(a.dim_feedforward or 2048, d_model, opts)
  self.norm_first = a.norm_first == true
  for i = 1, n do
    self["norm" .. i] = layers.LayerNorm(d_model, {eps = eps, bias = opts.bias, dtype = a.dtype, device = a.device})
  end
  for i = 1, n do self["dropout" .. i] = layers.Dropout(drop) end
  if base.is_module(act) then self.activation = act end
  rawset(self, "_activation", act)
end

-- linear2(dropout(activation(linear1(x)))), then dropout<n>
local function feed_forward(self, x, n)
  return self["dropout" .. n](self.linear2(self.dropout(self._activation(self.linear1(x)))))
end

local TransformerEncoderLayer = export_class(M, "TransformerEncoderLayer")

-- TransformerEncoderLayer(d_model, nhead, [dim_feedforward = 2048], [dropout = 0.1], ...,
--   or {dim_feedforward =, dropout =, activation = "relu" | "gelu", layer_norm_eps = 1e-5,
--   batch_first = false, norm_first = false, bias = true, dtype =, device =})
function TransformerEncoderLayer:init(d_model, nhead, ...)
  local a = util.torch_args("TransformerEncoderLayer", LAYER_OPTIONS, ...)
  local act = layer_activation("TransformerEncoderLayer", a)
  build_layer(self, d_model, nhead, a, act, {"self_attn"}, 2)
end

-- x through the residual blocks (functions of x) in order: x + block(norm(x))
-- under norm_first, else norm(x + block(x)); block i uses norm<i>.
local function residual_blocks(self, x, blocks)
  for i, block in ipairs(blocks) do
    local norm = self["norm" .. i]
    if self.norm_first then x = x + block(norm(x)) else x = norm(x + block(x)) end
  end
  return x
end

-- attention block: attn(x, memory, memory) with the masks, then dropout<n>
local function attention_block(self, attn, n, memory, mask, padding_mask, is_causal)
  if is_causal == true and mask == nil then -- PyTorch's message (its hint needs the mask itself)
    util.raise("%s: Need attn_mask if specifying the is_causal hint. You may use the Transformer module method "
      .. "`generate_square_subsequent_mask` to create this mask.", self:_get_name())
  end
  return function(x)
    local kv = memory or x
    local y = self[attn](x, kv, kv, {attn_mask = mask, key_padding_mask = padding_mask, need_weights = false,
      is_causal = is_causal == true and mask ~= nil})
    return self["dropout" .. n](y)
  end
end

-- forward(src, [src_mask], [src_key_padding_mask], [is_causal = false]), the masks positionally or by name
function TransformerEncoderLayer:forward(src, ...)
  local o = util.torch_args("TransformerEncoderLayer.forward", {"src_mask:tensor", "src_key_padding_mask:tensor",
    "is_causal:bool"}, ...)
  return residual_blocks(self, src, {
    attention_block(self, "self_attn", 1, nil, o.src_mask, o.src_key_padding_mask, o.is_causal),
    function(x) return feed_forward(self, x, 2) end})
end

local TransformerDecoderLayer = export_class(M, "TransformerDecoderLayer")

-- TransformerDecoderLayer(d_model, nhead, [dim_feedforward = 2048], [dropout = 0.1], ...) with
-- TransformerEncoderLayer's options: self_attn, multihead_attn (over the memory), feed-forward
function TransformerDecoderLayer:init(d_model, nhead, ...)
  local a = util.torch_args("TransformerDecoderLayer", LAYER_OPTIONS, ...)
  local act = layer_activation("TransformerDecoderLayer", a)
  build_layer(self, d_model, nhead, a, act, {"self_attn", "multihead_attn"}, 3)
end

local DECODER_FORWARD = {"tgt_mask:tensor", "memory_mask:tensor", "tgt_key_padding_mask:tensor",
                         "memory_key_padding_mask:tensor", "tgt_is_causal:bool", "memory_is_causal:bool"}

-- forward(tgt, memory, [tgt_mask], [memory_mask], [tgt_key_padding_mask],
--   [memory_key_padding_mask], [tgt_is_causal = false], [memory_is_causal = false]),
--   positionally or by name
function TransformerDecoderLayer:forward(tgt, memory, ...)
  local o = util.torch_args("TransformerDecoderLayer.forward", DECODER_FORWARD, ...)
  if not accel.is_tensor(memory) then raise("TransformerDecoderLayer.forward: memory must be a Tensor, got %s", type(memory)) end
  return residual_blocks(self, tgt, {
    attention_block(self, "self_attn", 1, nil, o.tgt_mask, o.tgt_key_padding_mask, o.tgt_is_causal),
    attention_block(self, "multihead_attn", 2, memory, o.memory_mask, o.memory_key_padding_mask, o.memory_is_causal),
    function(x) return feed_forward(self, x, 3) end})
end

-- The stack's layers: num_layers deep copies of layer (a layer_cls or a
-- subclass; hooks, extra state and frozen parameters kept), then norm.
local function build_stack(self, kind, layer, layer_cls, num_layers, norm)
  if not base.is_module(layer) or not layer:isinstance(layer_cls) then
    raise("%s: %s must be an nn.%s", kind, kind == "TransformerEncoder" and "encoder_layer" or "decoder_layer",
      layer_cls.__name)
  end
  if type(num_layers) ~= "number" or num_layers < 1 or num_layers ~= math.floor(num_layers) then
    raise("%s: num_layers must be a positive integer, got %s", kind, util.show(num_layers))
  end
  local list = {}
  for i = 1, num_layers do list[i] = base.deepcopy(layer) end
  self.layers = containers.ModuleList(list)
  self.num_layers = num_layers
  if norm ~= nil then self.norm = norm end
end

local TransformerEncoder = export_class(M, "TransformerEncoder")

-- TransformerEncoder(encoder_layer, num_layers, [{norm =, enable_nested_tensor =, mask_check =}])
function TransformerEncoder:init(encoder_layer, num_layers, ...)
  local o = util.torch_args("TransformerEncoder", {"norm", "enable_nested_tensor:bool", "mask_check:bool"}, ...)
  build_stack(self, "TransformerEncoder", encoder_layer, TransformerEncoderLayer, num_layers, o.norm)
end

-- forward(src, [mask], [src_key_padding_mask], [is_causal]), positionally or by name
function TransformerEncoder:forward(src, ...)
  local o = util.torch_args("TransformerEncoder.forward", {"mask:tensor", "src_key_padding_mask:tensor",
    "is_causal:bool"}, ...)
  local x = src
  for _, layer in compat.ipairs(self.layers) do
    x = layer(x, {src_mask = o.mask, src_key_padding_mask = o.src_key_padding_mask, is_causal = o.is_causal})
  end
  if self.norm ~= nil then x = self.norm(x) end
  return x
end

local TransformerDecoder = export_class(M, "TransformerDecoder")

-- TransformerDecoder(decoder_layer, num_layers, [{norm =}])
function TransformerDecoder:init(decoder_layer, num_layers, ...)
  local o = util.torch_args("TransformerDecoder", {"norm"}, ...)
  build_stack(self, "TransformerDecoder", decoder_layer, TransformerDecoderLayer, num_layers, o.norm)
end

-- forward(tgt, memory, [the arguments of TransformerDecoderLayer.forward])
function TransformerDecoder:forward(tgt, memory, ...)
  local o = util.torch_args("TransformerDecoder.forward", DECODER_FORWARD, ...)
  local x = tgt
  for _, layer in compat.ipairs(self.layers) do x = layer(x, memory, o) end
  if self.norm ~= nil then x = self.norm(x) end
  return x
end

local Transformer = export_class(M, "Transformer")

local TRANSFORMER_OPTIONS = {"d_model:int", "nhead:int", "num_encoder_layers:int", "num_decoder_layers:int",
  "dim_feedforward:int", "dropout:number", "activation:string|function", "custom_encoder", "custom_decoder",
  "layer_norm_eps:number", "batch_first:bool", "norm_first:bool", "bias:bool", "dtype", "device"}

-- Transformer([d_model = 512], [nhead = 8], [num_encoder_layers = 6], [num_decoder_layers = 6], ...,
--   or those and the layers' options by name, custom_encoder / custom_decoder modules); the
--   weights of more than one dim are xavier_uniform_, as PyTorch's _reset_parameters.
function Transformer:init(...)
  local a = util.torch_args("Transformer", TRANSFORMER_OPTIONS, ...)
  local d_model, nhead = a.d_model or 512, a.nhead or 8
  local layer_opts = {dim_feedforward = a.dim_feedforward, dropout = a.dropout, activation = a.activation,
    layer_norm_eps = a.layer_norm_eps, batch_first = a.batch_first, norm_first = a.norm_first, bias = a.bias,
    dtype = a.dtype, device = a.device}
  local function norm()
    return layers.LayerNorm(d_model, {eps = a.layer_norm_eps or 1e-5, bias = a.bias ~= false, dtype = a.dtype, device = a.device})
  end
  self.encoder = a.custom_encoder or TransformerEncoder(TransformerEncoderLayer(d_model, nhead, layer_opts),
    a.num_encoder_layers or 6, {norm = norm()})
  self.decoder = a.custom_decoder or TransformerDecoder(TransformerDecoderLayer(d_model, nhead, layer_opts),
    a.num_decoder_layers or 6, {norm = norm()})
  local init = require("accel.nn.initializers")
  for _, p in ipairs(self:parameters()) do
    if p:dim() > 1 then init.xavier_uniform_(p) end
  end
  self.d_model, self.nhead, self.batch_first = d_model, nhead, a.batch_first == true
end

-- forward(src, tgt, [src_mask], [tgt_mask], [memory_mask], [src_key_padding_mask],
--   [tgt_key_padding_mask], [memory_key_padding_mask], [src_is_causal], [tgt_is_causal],
--   [memory_is_causal = false]), positionally or by name
function Transformer:forward(src, tgt, ...)
  local o = util.torch_args("Transformer.forward", {"src_mask:tensor", "tgt_mask:tensor", "memory_mask:tensor",
    "src_key_padding_mask:tensor", "tgt_key_padding_mask:tensor", "memory_key_padding_mask:tensor",
    "src_is_causal:bool", "tgt_is_causal:bool", "memory_is_causal:bool"}, ...)
  if not accel.is_tensor(src) or not accel.is_tensor(tgt) then raise("Transformer.forward: src and tgt must be Tensors") end
  local batch_dim = self.batch_first and 1 or 2
  if src:dim() == 3 and src:size(batch_dim) ~= tgt:size(batch_dim) then
    raise("Transformer.forward: the batch number of src and tgt must be equal (src %s, tgt %s)", tostring(src.shape),
      tostring(tgt.shape))
  end
  if src:size(-1) ~= self.d_model or tgt:size(-1) ~= self.d_model then
    raise("Transformer.forward: the feature number of src and tgt must be equal to d_model (%d): src %s, tgt %s",
      self.d_model, tostring(src.shape), tostring(tgt.shape))
  end
  local memory = self.encoder(src, {mask = o.src_mask, src_key_padding_mask = o.src_key_padding_mask,
    is_causal = o.src_is_causal})
  return self.decoder(tgt, memory, {tgt_mask = o.tgt_mask, memory_mask = o.memory_mask,
    tgt_key_padding_mask = o.tgt_key_padding_mask, memory_key_padding_mask = o.memory_key_padding_mask,
    tgt_is_causal = o.tgt_is_causal, memory_is_causal = o.memory_is_causal})
end

-- Transformer.generate_square_subsequent_mask(sz, [{dtype =, device =}]): (sz, sz), -inf above
-- the diagonal and 0 elsewhere (also callable on an instance, with . or :; a static
-- function as PyTorch's, so stored past the classes' method check)
local function square_subsequent_mask(sz, o, ...)
  if base.is_module(sz) then return square_subsequent_mask(o, ...) end
  o = base.check_options("generate_square_subsequent_mask", o, {"dtype", "device"})
  if type(sz) ~= "number" or sz < 0 or sz ~= math.floor(sz) then
    raise("generate_square_subsequent_mask: sz must be a non-negative integer, got %s", util.show(sz))
  end
  return accel.full({sz, sz}, -math.huge, {dtype = o.dtype, device = o.device}):triu(1)
end
rawset(Transformer, "generate_square_subsequent_mask", square_subsequent_mask)

return M
