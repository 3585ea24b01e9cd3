-- accel.nn.transformer: TransformerEncoderLayer and TransformerEncoder, as
-- PyTorch builds them (submodules self_attn, linear1, dropout, linear2,
-- norm1, norm2, dropout1, dropout2, so state_dict keys match: 
-- layers.0.self_attn.in_proj_weight, ...). TransformerEncoder copies the
-- layer it is given num_layers times (equal weights at the start, as
-- PyTorch's deepcopy). Loaded on first use of one of its classes.
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

local TransformerEncoderLayer = export_class(M, "TransformerEncoderLayer")

-- TransformerEncoderLayer(d_model, nhead, [dim_feedforward = 2048], [dropout = 0.1], ...,
--   or {dim_feedforward =, dropout =, activation = "relu" | "gelu", layer_norm_eps = 1e-5,
--   batch_first = false, norm_first = false, bias = true, dtype =, device =})
function TransformerEncoderLayer:init(d_model, nhead, ...)
  local a = util.torch_args("TransformerEncoderLayer", LAYER_OPTIONS, ...)
  local act = a.activation or "relu"
  if type(act) ~= "function" and not ACTIVATIONS[act] then
    raise("TransformerEncoderLayer: activation should be relu/gelu or a function, not %s", util.show(act))
  end
  local drop, eps = a.dropout == nil and 0.1 or a.dropout, a.layer_norm_eps or 1e-5
  rawset(self, "_config", {d_model, nhead, a}) -- to rebuild a copy (TransformerEncoder)
  self.self_attn = attention.MultiheadAttention(d_model, nhead, {dropout = drop, bias = a.bias ~= false,
    batch_first = a.batch_first == true, dtype = a.dtype, device = a.device})
  self.linear1 = layers.Linear(d_model, a.dim_feedforward or 2048, {bias = a.bias ~= false, dtype = a.dtype, device = a.device})
  self.dropout = layers.Dropout(drop)
  self.linear2 = layers.Linear(a.dim_feedforward or 2048, d_model, {bias = a.bias ~= false, dtype = a.dtype, device = a.device})
  self.norm_first = a.norm_first == true
  self.norm1 = layers.LayerNorm(d_model, {eps = eps, bias = a.bias ~= false, dtype = a.dtype, device = a.device})
  self.norm2 = layers.LayerNorm(d_model, {eps = eps, bias = a.bias ~= false, dtype = a.dtype, device = a.device})
  self.dropout1 = layers.Dropout(drop)
  self.dropout2 = layers.Dropout(drop)
  rawset(self, "_activation", type(act) == "function" and act or ACTIVATIONS[act])
end

-- forward(src, [{src_mask =, src_key_padding_mask =, is_causal = false}])
function TransformerEncoderLayer:forward(src, o)
  o = base.check_options("TransformerEncoderLayer.forward", o, {"src_mask", "src_key_padding_mask", "is_causal"})
  local function sa_block(x)
    local y = self.self_attn(x, x, x, {attn_mask = o.src_mask, key_padding_mask = o.src_key_padding_mask,
      need_weights = false, is_causal = o.is_causal == true and o.src_mask ~= nil})
    return self.dropout1(y)
  end
  local function ff_block(x)
    return self.dropout2(self.linear2(self.dropout(self._activation(self.linear1(x)))))
  end
  local x = src
  if self.norm_first then
    x = x + sa_block(self.norm1(x))
    return x + ff_block(self.norm2(x))
  end
  x = self.norm1(x + sa_block(x))
  return self.norm2(x + ff_block(x))
end

-- A new layer of the same configuration holding a copy of this one's state.
function TransformerEncoderLayer:_copy()
  local c = self._config
  local copy = TransformerEncoderLayer(c[1], c[2], c[3])
  copy:load_state_dict(self:state_dict())
  if not self.training then copy:eval() end
  return copy
end

local TransformerEncoder = export_class(M, "TransformerEncoder")

-- TransformerEncoder(encoder_layer, num_layers, [{norm =, enable_nested_tensor =, mask_check =}])
function TransformerEncoder:init(encoder_layer, num_layers, o)
  o = base.check_options("TransformerEncoder", o, {"norm", "enable_nested_tensor", "mask_check"})
  if not base.is_module(encoder_layer) or not encoder_layer:isinstance(TransformerEncoderLayer) then
    raise("TransformerEncoder: encoder_layer must be an nn.TransformerEncoderLayer")
  end
  if type(num_layers) ~= "number" or num_layers < 1 or num_layers ~= math.floor(num_layers) then
    raise("TransformerEncoder: num_layers must be a positive integer, got %s", util.show(num_layers))
  end
  local list = {}
  for i = 1, num_layers do list[i] = encoder_layer:_copy() end
  self.layers = containers.ModuleList(list)
  self.num_layers = num_layers
  if o.norm ~= nil then self.norm = o.norm end
end

-- forward(src, [{mask =, src_key_padding_mask =, is_causal =}])
function TransformerEncoder:forward(src, o)
  o = base.check_options("TransformerEncoder.forward", o, {"mask", "src_key_padding_mask", "is_causal"})
  local x = src
  for _, layer in compat.ipairs(self.layers) do
    x = layer(x, {src_mask = o.mask, src_key_padding_mask = o.src_key_padding_mask, is_causal = o.is_causal})
  end
  if self.norm ~= nil then x = self.norm(x) end
  return x
end

return M
