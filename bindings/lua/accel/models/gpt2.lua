-- accel.models.gpt2: GPT-2 written with accel.nn, with Hugging Face's
-- module names and weight layouts, so model:state_dict() (and therefore
-- accelerator:save_model) is already a transformers GPT2LMHeadModel file:
--
--   transformer.wte.weight            (vocab_size, n_embd)
--   transformer.wpe.weight            (n_positions, n_embd)
--   transformer.h.<i>.ln_1.weight / .bias                 (n_embd)
--   transformer.h.<i>.attn.c_attn.weight (n_embd, 3 n_embd)  .bias (3 n_embd)
--   transformer.h.<i>.attn.c_proj.weight (n_embd, n_embd)    .bias (n_embd)
--   transformer.h.<i>.ln_2.weight / .bias                 (n_embd)
--   transformer.h.<i>.mlp.c_fc.weight    (n_embd, n_inner)   .bias (n_inner)
--   transformer.h.<i>.mlp.c_proj.weight  (n_inner, n_embd)   .bias (n_embd)
--   transformer.ln_f.weight / .bias                         (n_embd)
--   lm_head.weight (vocab_size, n_embd): only when tie_word_embeddings is false
--
-- c_attn / c_proj / c_fc are HF's Conv1D: weight stored (in, out), y = x W + b.
--
--   local gpt2 = accel.models.gpt2
--   local config = gpt2.GPT2Config{vocab_size = 256, n_positions = 128, n_embd = 128, n_layer = 4, n_head = 4}
--   local model = gpt2.GPT2LMHeadModel(config)
--   local logits, loss = model(x, {targets = y})     -- x, y int64 (B, T); loss nil without targets
--   local ids = model:generate(prompt, {max_new_tokens = 200, temperature = 0.8, top_k = 40})
--   model:save_pretrained("out/model")               -- config.json + model.safetensors
--   local again = gpt2.GPT2LMHeadModel.from_pretrained("out/model")
--
-- Decisions (where HF and this Lua API differ or HF is silent):
--  * forward(input_ids, {targets =, labels =, ignore_index = -100}) returns
--    logits (B, T, vocab) and the mean cross-entropy loss (or nil; from the logits in
--    float32, as transformers). targets are
--    aligned with input_ids (nanoGPT's convention: targets[t] follows
--    input_ids[t]); labels are HF's (shifted inside: logits[:, t] predicts
--    labels[:, t + 1]).
--  * With tie_word_embeddings (the default, as HF) there is no lm_head
--    module: logits = ln_f(h) @ wte.weight^T, and the state_dict has no
--    lm_head.weight, as the files HF writes. Untied, forward calls the
--    lm_head Linear (so mixed_precision = "fp8" converts it, as Accelerate
--    converts HF's); the tied projection is a plain product (bf16 autocast).
--  * Attention goes through F.scaled_dot_product_attention(q, k, v,
--    {is_causal = true}) with q, k, v (B, n_head, T, head_dim) views of
--    c_attn's output; HF's attention-mask and past-key-value inputs are not
--    supported (generate recomputes the whole window each token).
--  * GPT2Config(opts) refuses unknown keys (typos) and, as HF's strict
--    config, non-boolean values of its boolean keys; config_from_dict (used
--    by from_pretrained for a config.json) ignores keys it does not use.
--    `dropout = p` sets resid_pdrop, embd_pdrop and attn_pdrop at once.
--  * Initialisation as HF's _init_weights: Conv1D / Embedding weights
--    N(0, initializer_range), biases 0, LayerNorm 1 / 0, every
--    c_proj.weight N(0, initializer_range / sqrt(2 n_layer)). As in
--    transformers, GPT2Model does it (alone too), GPT2LMHeadModel then
--    initialises only its lm_head.
--  * generate samples with accel's generator (accel.rand), so accel.set_seed
--    makes it reproducible; temperature 0 (or do_sample = false) is greedy
--    (the first maximal index, as torch.argmax; no random draw).
--  * from_pretrained loads a file with weights this model has no place for
--    (another head's) as transformers does: they are left out and named, as
--    in the file, on stderr; a missing weight is an error.
local accel = require("accel")
local checkpoint = require("accel.checkpoint")
local compat = require("accel.compat")
local nn = require("accel.nn")
local json = require("accel.json")
local util = require("accel.util")
local raise, read_file = util.raise, util.read_file

local F, init, Module, Parameter = nn.functional, nn.init, nn.Module, nn.Parameter

local M = {}

-- ---------------------------------------------------------------- config

-- HF GPT2Config's defaults (transformers/models/gpt2/configuration_gpt2.py).
local DEFAULTS = {
  vocab_size = 50257, n_positions = 1024, n_embd = 768, n_layer = 12, n_head = 12,
  activation_function = "gelu_new", resid_pdrop = 0.1, embd_pdrop = 0.1, attn_pdrop = 0.1,
  layer_norm_epsilon = 1e-5, initializer_range = 0.02, scale_attn_weights = true,
  scale_attn_by_inverse_layer_idx = false, reorder_and_upcast_attn = false,
  tie_word_embeddings = true, bos_token_id = 50256, eos_token_id = 50256,
}
local OPTIONAL = {n_inner = true, dropout = true}
-- HF GPT2Config keys that change nothing an LM-head model computes here
-- (use_cache: generate recomputes the window; pad_token_id; the summary_*
-- keys of GPT2DoubleHeadsModel's head), kept on the config as given.
local INERT = {use_cache = true, pad_token_id = true, summary_type = true, summary_use_proj = true,
  summary_activation = true, summary_proj_to_labels = true, summary_first_dropout = true}
-- HF's attribute_map: other names of four keys.
local ALIASES = {hidden_size = "n_embd", num_attention_heads = "n_head", num_hidden_layers = "n_layer",
  max_position_embeddings = "n_positions"}
local INTEGER_KEYS = {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head"}
-- true / false only, as HF's strict config (nil: the inert ones left out).
local BOOLEAN_KEYS = {"scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
  "tie_word_embeddings", "use_cache", "summary_use_proj", "summary_proj_to_labels"}

local ACTIVATIONS = {
  gelu_new = function(x) return F.gelu(x, {approximate = "tanh"}) end,
  gelu_pytorch_tanh = function(x) return F.gelu(x, {approximate = "tanh"}) end,
  gelu = function(x) return F.gelu(x) end,
  relu = function(x) return F.relu(x) end,
  silu = function(x) return F.silu(x) end,
}

local Config = {}
Config.__index = Config
Config.__name = "GPT2Config"

local function is_posint(v) return type(v) == "number" and v >= 1 and v == math.floor(v) end

-- v is true, false or nil ("0" or 0 would read as true in Lua).
local function check_boolean(k, v, what)
  if v ~= nil and type(v) ~= "boolean" then
    raise("%s: %s must be true or false, got %s %s", what or "GPT2Config", k, type(v),
      type(v) == "string" and ("%q"):format(v) or tostring(v))
  end
end

local function validate(c)
  for _, k in ipairs(INTEGER_KEYS) do
    if not is_posint(c[k]) then raise("GPT2Config: %s must be a positive integer, got %s", k, tostring(c[k])) end
  end
  for _, k in ipairs(BOOLEAN_KEYS) do check_boolean(k, c[k]) end
  if c.n_inner ~= nil and not is_posint(c.n_inner) then
    raise("GPT2Config: n_inner must be a positive integer or nil, got %s", tostring(c.n_inner))
  end
  if c.n_embd % c.n_head ~= 0 then
    raise("GPT2Config: n_embd (%d) must be divisible by n_head (%d)", c.n_embd, c.n_head)
  end
  if not ACTIVATIONS[c.activation_function] then
    raise("GPT2Config: activation_function %q is not supported (gelu_new, gelu_pytorch_tanh, gelu, relu, silu)",
      tostring(c.activation_function))
  end
  for _, k in ipairs({"resid_pdrop", "embd_pdrop", "attn_pdrop"}) do
    if type(c[k]) ~= "number" or c[k] < 0 or c[k] >= 1 then raise("GPT2Config: %s must be in [0, 1), got %s", k, tostring(c[k])) end
  end
  for _, k in ipairs({"layer_norm_epsilon", "initializer_range"}) do
    if type(c[k]) ~= "number" or not (c[k] > 0) then raise("GPT2Config: %s must be a positive number, got %s", k, tostring(c[k])) end
  end
  if c.reorder_and_upcast_attn then raise("GPT2Config: reorder_and_upcast_attn = true is not supported") end
  return c
end

-- GPT2Config{...}: HF's keys and defaults (also its aliases hidden_size,
-- num_attention_heads, num_hidden_layers, max_position_embeddings, and the
-- keys that change nothing here); unknown keys are an error.
function M.GPT2Config(o)
  if o ~= nil and type(o) ~= "table" then raise("GPT2Config: expected a table of options, got %s", type(o)) end
  o = o or {}
  local c = setmetatable({}, Config)
  for k, v in pairs(DEFAULTS) do c[k] = v end
  for k, v in pairs(o) do
    if k == "add_cross_attention" then
      check_boolean(k, v)
      if v then raise("GPT2Config: add_cross_attention = true is not supported (no encoder-decoder GPT-2 here)") end
    else
      local key = ALIASES[k] or k
      if DEFAULTS[key] == nil and not OPTIONAL[key] and not INERT[key] then
        raise("GPT2Config: unknown option %q", tostring(k))
      end
      if ALIASES[k] and o[key] ~= nil and o[key] ~= v then
        raise("GPT2Config: %s = %s disagrees with %s = %s", k, tostring(v), key, tostring(o[key]))
      end
      c[key] = v
    end
  end
  if c.dropout ~= nil then
    for _, k in ipairs({"resid_pdrop", "embd_pdrop", "attn_pdrop"}) do
      if o[k] ~= nil and o[k] ~= c.dropout then
        raise("GPT2Config: dropout = %s disagrees with %s = %s (dropout sets all three)", tostring(c.dropout), k,
          tostring(o[k]))
      end
      c[k] = c.dropout
    end
    c.dropout = nil
  end
  return validate(c)
end

-- A config from a decoded config.json: the keys used here, the rest ignored.
function M.config_from_dict(d)
  if type(d) ~= "table" then raise("GPT2Config: expected a decoded config.json table, got %s", type(d)) end
  if d.model_type ~= nil and d.model_type ~= "gpt2" then
    raise("GPT2Config: config.json has model_type %q, expected \"gpt2\"", tostring(d.model_type))
  end
  local o = {}
  for k in pairs(DEFAULTS) do
    if d[k] ~= nil and d[k] ~= json.null then o[k] = d[k] end
  end
  for alias, key in pairs(ALIASES) do
    if o[key] == nil and d[alias] ~= nil and d[alias] ~= json.null then o[key] = d[alias] end
  end
  if d.n_inner ~= nil and d.n_inner ~= json.null then o.n_inner = d.n_inner end
  for k in pairs(INERT) do
    if d[k] ~= nil and d[k] ~= json.null then o[k] = d[k] end
  end
  return M.GPT2Config(o)
end

function Config:inner() return self.n_inner or 4 * self.n_embd end

-- The config.json fields transformers writes for GPT2LMHeadModel
-- (torch_dtype: the weights' dtype name, "float32" unless given).
function Config:to_dict(torch_dtype)
  local d = {model_type = "gpt2", architectures = json.array({"GPT2LMHeadModel"}), n_ctx = self.n_positions,
             torch_dtype = torch_dtype or "float32"}
  for k in pairs(DEFAULTS) do d[k] = self[k] end
  for k in pairs(INERT) do d[k] = self[k] end -- kept as given (nil: left out)
  d.n_inner = self.n_inner
  return d
end

-- dir/config.json (dir is created) of config, torch_dtype as to_dict's.
local function write_config(config, dir, torch_dtype, what)
  if type(dir) ~= "string" then raise("%s: expected a directory, got %s", what, type(dir)) end
  accel._C.mkdirs(dir)
  local path = dir:gsub("/+$", "") .. "/config.json"
  local f, err = io.open(path, "w")
  if not f then raise("%s: cannot write %s (%s)", what, path, tostring(err)) end
  f:write(json.encode(config:to_dict(torch_dtype), {indent = 2}), "\n")
  f:close()
  return path
end

-- config:save_pretrained(dir): dir/config.json (dir is created).
function Config:save_pretrained(dir) return write_config(self, dir, nil, "GPT2Config:save_pretrained") end

function Config:__tostring()
  return ("GPT2Config(vocab_size=%d, n_positions=%d, n_embd=%d, n_layer=%d, n_head=%d, n_inner=%d)"):format(
    self.vocab_size, self.n_positions, self.n_embd, self.n_layer, self.n_head, self:inner())
end

M.Config = Config

-- ---------------------------------------------------------------- layers

-- HF's Conv1D(nf, nx): a linear layer whose weight is stored (nx, nf) =
-- (in, out); y = x @ weight + bias.
local Conv1D = Module:extend("Conv1D")
M.Conv1D = Conv1D

function Conv1D:init(nf, nx)
  if not is_posint(nf) or not is_posint(nx) then
    raise("Conv1D: nf and nx must be positive integers, got %s and %s", tostring(nf), tostring(nx))
  end
  self.nf, self.nx = nf, nx
  self.weight = Parameter(accel.empty({nx, nf}))
  self.bias = Parameter(accel.zeros({nf}))
  init.normal_(self.weight, 0, 0.02)
end

-- linear(x, W^T, b): the transposed view goes to GEMM with a flag, no copy.
function Conv1D:forward(x) return F.linear(x, self.weight:t(), self.bias) end

function Conv1D:extra_repr() return ("nf=%d, nx=%d"):format(self.nf, self.nx) end

local GPT2Attention = Module:extend("GPT2Attention")
M.GPT2Attention = GPT2Attention

function GPT2Attention:init(config, layer_idx)
  local C = config.n_embd
  self.n_embd, self.n_head = C, config.n_head
  self.head_dim = math.floor(C / config.n_head)
  local scale = config.scale_attn_weights and 1 / math.sqrt(self.head_dim) or 1
  if config.scale_attn_by_inverse_layer_idx then scale = scale / ((layer_idx or 0) + 1) end
  self.scale = scale
  self.attn_pdrop = config.attn_pdrop
  self.c_attn = Conv1D(3 * C, C)
  self.c_proj = Conv1D(C, C)
  self.attn_dropout = nn.Dropout(config.attn_pdrop)
  self.resid_dropout = nn.Dropout(config.resid_pdrop)
end

-- x (B, T, C) -> (B, T, C), causal self-attention over T.
function GPT2Attention:forward(x)
  local B, T, C = x:size(1), x:size(2), x:size(3)
  local H, hd = self.n_head, self.head_dim
  local qkv = self.c_attn(x):split(C, 3)                       -- 3 x (B, T, C)
  local q = qkv[1]:view(B, T, H, hd):transpose(2, 3)           -- (B, H, T, hd)
  local k = qkv[2]:view(B, T, H, hd):transpose(2, 3)
  local v = qkv[3]:view(B, T, H, hd):transpose(2, 3)
  local y = F.scaled_dot_product_attention(q, k, v, {is_causal = true, scale = self.scale,
    dropout_p = self.training and self.attn_pdrop or 0})
  y = y:transpose(2, 3):reshape(B, T, C)                       -- heads side by side again
  return self.resid_dropout(self.c_proj(y))
end

local GPT2MLP = Module:extend("GPT2MLP")
M.GPT2MLP = GPT2MLP

function GPT2MLP:init(intermediate_size, config)
  self.c_fc = Conv1D(intermediate_size, config.n_embd)
  self.c_proj = Conv1D(config.n_embd, intermediate_size)
  self.activation_function = config.activation_function
  self.dropout = nn.Dropout(config.resid_pdrop)
end

function GPT2MLP:forward(x)
  local act = ACTIVATIONS[self.activation_function]
  return self.dropout(self.c_proj(act(self.c_fc(x))))
end

local GPT2Block = Module:extend("GPT2Block")
M.GPT2Block = GPT2Block

function GPT2Block:init(config, layer_idx)
  local C, eps = config.n_embd, config.layer_norm_epsilon
  self.ln_1 = nn.LayerNorm(C, {eps = eps})
  self.attn = GPT2Attention(config, layer_idx)
  self.ln_2 = nn.LayerNorm(C, {eps = eps})
  self.mlp = GPT2MLP(config:inner(), config)
end

-- pre-LayerNorm residual block
function GPT2Block:forward(x)
  x = x + self.attn(self.ln_1(x))
  return x + self.mlp(self.ln_2(x))
end

-- ---------------------------------------------------------------- models

local function check_config(config, what)
  if getmetatable(config) ~= Config then
    if type(config) == "table" then return M.GPT2Config(config) end
    raise("%s: expected a GPT2Config (or a table of its options), got %s", what, type(config))
  end
  return config
end

-- HF's _init_weights on module and its submodules, then the scaled c_proj
-- init of the GPT-2 paper. As in transformers, GPT2Model initialises itself
-- and GPT2LMHeadModel then only its lm_head.
local function init_weights(model, config)
  local std = config.initializer_range
  for _, m in ipairs(model:modules()) do
    if m:isinstance(Conv1D) or m:isinstance(nn.Linear) then
      init.normal_(m.weight, 0, std)
      if m.bias ~= nil then init.zeros_(m.bias) end
    elseif m:isinstance(nn.Embedding) then
      init.normal_(m.weight, 0, std)
    elseif m:isinstance(nn.LayerNorm) then
      init.ones_(m.weight)
      init.zeros_(m.bias)
    end
  end
  for name, p in model:named_parameters() do
    if name:find("c_proj%.weight$") then init.normal_(p, 0, std / math.sqrt(2 * config.n_layer)) end
  end
end

local GPT2Model = Module:extend("GPT2Model")
M.GPT2Model = GPT2Model

function GPT2Model:init(config)
  config = check_config(config, "GPT2Model")
  self.config = config
  self.wte = nn.Embedding(config.vocab_size, config.n_embd)
  self.wpe = nn.Embedding(config.n_positions, config.n_embd)
  self.drop = nn.Dropout(config.embd_pdrop)
  self.h = nn.ModuleList()
  for i = 1, config.n_layer do self.h:append(GPT2Block(config, i - 1)) end
  self.ln_f = nn.LayerNorm(config.n_embd, {eps = config.layer_norm_epsilon})
  init_weights(self, config)
end

local function check_ids(ids, config, what)
  if not accel.is_tensor(ids) or ids:dim() ~= 2 then
    raise("%s: input_ids must be a 2-D tensor (batch, time) of token ids, got %s", what,
      accel.is_tensor(ids) and tostring(ids.shape) or type(ids))
  end
  if ids.dtype ~= accel.int64 and ids.dtype ~= accel.int32 then
    raise("%s: input_ids must be an integer tensor, got %s", what, tostring(ids.dtype))
  end
  if ids:size(2) > config.n_positions then
    raise("%s: sequence length %d is longer than n_positions (%d)", what, ids:size(2), config.n_positions)
  end
end

-- input_ids (B, T) int64 -> final hidden states ln_f(h) (B, T, n_embd)
function GPT2Model:forward(input_ids)
  check_ids(input_ids, self.config, "GPT2Model")
  local T = input_ids:size(2)
  local pos = accel.arange(0, T, {dtype = accel.int64, device = input_ids.device})
  local x = self.drop(self.wte(input_ids) + self.wpe(pos))
  for _, block in compat.ipairs(self.h) do x = block(x) end
  return self.ln_f(x)
end

local GPT2LMHeadModel = Module:extend("GPT2LMHeadModel")
M.GPT2LMHeadModel = GPT2LMHeadModel

function GPT2LMHeadModel:init(config)
  config = check_config(config, "GPT2LMHeadModel")
  self.config = config
  self.transformer = GPT2Model(config)
  if not config.tie_word_embeddings then
    self.lm_head = nn.Linear(config.n_embd, config.vocab_size, {bias = false})
    init_weights(self.lm_head, config)
  end
end

-- The output projection's weight (vocab, n_embd): the token embedding when tied.
function GPT2LMHeadModel:output_weight()
  if self.config.tie_word_embeddings then return self.transformer.wte.weight end
  return self.lm_head.weight
end

local FORWARD_OPTS = {targets = true, labels = true, ignore_index = true}

-- forward(input_ids, [{targets =, labels =, ignore_index = -100}]) -> logits (B, T, V), loss or nil
function GPT2LMHeadModel:forward(input_ids, o)
  if o ~= nil and type(o) ~= "table" then raise("GPT2LMHeadModel: options must be a table, got %s", type(o)) end
  o = o or {}
  for k in pairs(o) do
    if not FORWARD_OPTS[k] then raise("GPT2LMHeadModel: unknown option %q (targets, labels, ignore_index)", tostring(k)) end
  end
  local h = self.transformer(input_ids)
  -- untied: the lm_head module itself (so its hooks and the fp8 recipe reach it, as HF calls self.lm_head)
  local logits = self.config.tie_word_embeddings and F.linear(h, self:output_weight()) or self.lm_head(h)
  local V, ignore = self.config.vocab_size, o.ignore_index or -100
  local loss -- from float32 logits for any model dtype, as transformers' ForCausalLMLoss (made only for a loss)
  if o.targets ~= nil and o.labels ~= nil then
    raise("GPT2LMHeadModel: give targets (already shifted) or labels (shifted here), not both")
  end
  if o.targets ~= nil then
    if not accel.is_tensor(o.targets) or o.targets:numel() ~= input_ids:numel() then
      raise("GPT2LMHeadModel: targets must have the shape of input_ids %s", tostring(input_ids.shape))
    end
    loss = F.cross_entropy(logits:float():reshape(-1, V), o.targets:reshape(-1), {ignore_index = ignore})
  elseif o.labels ~= nil then
    local T = input_ids:size(2)
    if not accel.is_tensor(o.labels) or o.labels:numel() ~= input_ids:numel() then
      raise("GPT2LMHeadModel: labels must have the shape of input_ids %s", tostring(input_ids.shape))
    end
    -- the labels shifted, as transformers' ForCausalLMLoss: pad with ignore_index, drop the first (no copy
    -- of the logits)
    local labels = o.labels:reshape(input_ids.shape)
    local pad = accel.full({labels:size(1), 1}, ignore, {dtype = labels.dtype, device = labels.device})
    local shifted = accel.cat({labels:narrow(2, 2, T - 1), pad}, 2)
    loss = F.cross_entropy(logits:float():reshape(-1, V), shifted:reshape(-1), {ignore_index = ignore})
  end
  return logits, loss
end

local NUM_PARAMETERS_ARGS = {{"only_trainable", "boolean"}, {"exclude_embeddings", "boolean"}}

-- Parameters counted once (the tied embedding once); {only_trainable =,
-- exclude_embeddings =} or HF's positional (only_trainable, exclude_embeddings).
function GPT2LMHeadModel:num_parameters(...)
  local o = util.opts_of("num_parameters", {"only_trainable", "exclude_embeddings"}, NUM_PARAMETERS_ARGS, ...)
  local skip = {}
  if o.exclude_embeddings then skip[self.transformer.wte.weight], skip[self.transformer.wpe.weight] = true, true end
  local n = 0
  for _, p in ipairs(self:parameters()) do
    if not skip[p] and (p.requires_grad or not o.only_trainable) then n = n + p:numel() end
  end
  return n
end

-- ---------------------------------------------------------------- sampling

-- heap[i..n] made a min-heap again after heap[i] changed (its subtrees are heaps).
local function sift_down(heap, i, n)
  local v = heap[i]
  while 2 * i <= n do
    local c = 2 * i
    if c < n and heap[c + 1] < heap[c] then c = c + 1 end
    if not (heap[c] < v) then break end
    heap[i] = heap[c]
    i = c
  end
  heap[i] = v
end

-- The k-th largest number of list (k <= #list): one pass that keeps the k
-- largest in a min-heap, no sort of the list.
local function kth_largest(list, k)
  local heap = {}
  for i = 1, k do heap[i] = list[i] end
  for i = math.floor(k / 2), 1, -1 do sift_down(heap, i, k) end
  for i = k + 1, #list do
    if list[i] > heap[1] then
      heap[1] = list[i]
      sift_down(heap, 1, k)
    end
  end
  return heap[1]
end

-- Next ids (B) from the last position's logits (B, V). Greedy
-- (temperature 0): the first maximal index, as torch.argmax. Otherwise a
-- draw from softmax(logits / temperature), restricted to the scores >= the
-- top_k-th largest (ties kept, as HF's top-k), by the Gumbel-max trick:
-- argmax(scores + G) with G = -log(-log U), U ~ U(0, 1) from accel's
-- generator (B x V draws, float64).
local function next_tokens(logits, temperature, top_k)
  if temperature <= 0 then return logits:argmax(2) end
  local B, V = logits:size(1), logits:size(2)
  local scores = logits:double() / temperature
  if top_k and top_k < V then
    local thresholds = {}
    for b, row in ipairs(scores:tolist()) do thresholds[b] = {kth_largest(row, top_k)} end
    local below = scores:lt(accel.tensor(thresholds, {dtype = accel.float64, device = scores.device}))
    scores = scores:masked_fill(below, -math.huge)
  end
  local u = accel.rand(B, V, {dtype = accel.float64, device = scores.device})
  return (scores - u:log():neg():log()):argmax(2)
end

local GENERATE_OPTS = {"max_new_tokens", "temperature", "top_k", "do_sample"}

-- generate(input_ids (B, T0), {max_new_tokens = 20, temperature = 1, top_k = nil, do_sample = true})
-- -> int64 (B, T0 + max_new_tokens): the prompt followed by sampled ids.
function GPT2LMHeadModel:generate(input_ids, o)
  o = util.check_options("generate", o, GENERATE_OPTS)
  check_boolean("do_sample", o.do_sample, "generate")
  check_ids(input_ids, {n_positions = math.huge}, "generate")
  local n = o.max_new_tokens or 20
  if not is_posint(n) then raise("generate: max_new_tokens must be a positive integer, got %s", tostring(n)) end
  if o.temperature ~= nil and not (type(o.temperature) == "number" and o.temperature >= 0) then
    raise("generate: temperature (=%s) must be a number >= 0 (0, or do_sample = false, is greedy)",
      tostring(o.temperature))
  end
  local temperature = o.do_sample == false and 0 or (o.temperature or 1.0)
  if o.top_k ~= nil and not is_posint(o.top_k) then raise("generate: top_k must be a positive integer, got %s", tostring(o.top_k)) end
  local was_training = self.training
  self:eval()
  local ids = input_ids:to(accel.int64)
  accel.no_grad(function()
    local B, ctx = ids:size(1), self.config.n_positions
    for _ = 1, n do
      local T = ids:size(2)
      local window = T > ctx and ids:narrow(2, T - ctx + 1, ctx) or ids
      local logits = self(window)
      local next_ids = next_tokens(logits:select(2, -1), temperature, o.top_k)
      ids = accel.cat({ids, next_ids:reshape(B, 1)}, 2)
    end
  end)
  self:train(was_training)
  return ids
end

-- ---------------------------------------------------------------- files

local function join(dir, name) return dir:gsub("/+$", "") .. "/" .. name end

-- Tensors of dir's model.safetensors, or of the shards its
-- model.safetensors.index.json lists.
local function read_weights(dir)
  local single = join(dir, "model.safetensors")
  if accel._C.file_size(single) then return (accel.load(single)) end
  local index = read_file(join(dir, "model.safetensors.index.json"))
  if not index then raise("from_pretrained: %s has no model.safetensors (nor model.safetensors.index.json)", dir) end
  local out, seen = {}, {}
  for _, file in pairs(json.decode(index).weight_map) do
    if not seen[file] then
      seen[file] = true
      for k, v in pairs((accel.load(join(dir, file)))) do out[k] = v end
    end
  end
  return out
end

-- The file's tensors under this model's names. HF checkpoints may carry
-- entries this model does not have: the causal mask buffers of older
-- transformers (attn.bias, attn.masked_bias) and a tied lm_head.weight are
-- dropped; GPT2Model's names get "transformer."; any other name (another
-- head's weights, as GPT2DoubleHeadsModel's multiple_choice_head.*) is left
-- out and returned in a sorted list, under its name in the file.
local function normalise_keys(sd, model)
  local own, out, unexpected = model:state_dict(), {}, {}
  for k, v in pairs(sd) do
    local drop = k:find("%.attn%.bias$") or k:find("%.attn%.masked_bias$")
      or (k == "lm_head.weight" and model.config.tie_word_embeddings)
    local name = own[k] == nil and own["transformer." .. k] ~= nil and "transformer." .. k or k
    if own[name] ~= nil then
      out[name] = v
    elseif not drop then
      unexpected[#unexpected + 1] = k
    end
  end
  table.sort(unexpected)
  return out, unexpected
end

local FLOAT_DTYPES = {accel.float32, accel.float16, accel.bfloat16, accel.float64}

-- v if it is a floating dtype or the name of one ("bfloat16", "half"), else nil.
local function float_dtype(v)
  if type(v) == "string" then v = accel[v] end
  for _, dt in ipairs(FLOAT_DTYPES) do
    if v == dt then return dt end
  end
end

-- The dtype from_pretrained's dtype / torch_dtype option asks for (nil: the
-- model's float32). "auto": config.json's dtype (or torch_dtype) entry, else
-- the dtype of the first floating weight (by name), as transformers.
local function load_dtype(o, d, sd)
  if o.dtype ~= nil and o.torch_dtype ~= nil and o.dtype ~= o.torch_dtype then
    raise("from_pretrained: dtype = %s disagrees with torch_dtype = %s", tostring(o.dtype), tostring(o.torch_dtype))
  end
  local want = o.dtype or o.torch_dtype
  if want ~= "auto" then
    if want ~= nil and not float_dtype(want) then
      raise("from_pretrained: torch_dtype must be \"auto\" or a floating dtype (accel.bfloat16, \"float16\", ...), got %s",
        util.show(want))
    end
    return float_dtype(want)
  end
  local named = (d.dtype ~= json.null and d.dtype) or (d.torch_dtype ~= json.null and d.torch_dtype)
  if named then
    if not float_dtype(named) then raise("from_pretrained: config.json has dtype %s, not a floating dtype", util.show(named)) end
    return float_dtype(named)
  end
  local names = {}
  for k, v in pairs(sd) do
    if v.dtype.is_floating_point then names[#names + 1] = k end
  end
  table.sort(names)
  return names[1] and sd[names[1]].dtype
end

-- GPT2LMHeadModel.from_pretrained(dir, {torch_dtype =}): config.json +
-- model.safetensors (ours, or one written by transformers' save_pretrained).
-- As transformers, weights the model has no place for are reported (one
-- line on stderr) and not loaded; a missing or mis-shaped weight is an
-- error. torch_dtype (or dtype): the weights' dtype (default float32), an
-- accel dtype, its name, or "auto" (see load_dtype).
function GPT2LMHeadModel.from_pretrained(dir, o)
  o = util.check_options("from_pretrained", o, {"torch_dtype", "dtype"})
  if type(dir) ~= "string" then raise("from_pretrained: expected a directory, got %s", type(dir)) end
  local text = read_file(join(dir, "config.json"))
  if not text then raise("from_pretrained: %s has no config.json", dir) end
  local d = json.decode(text)
  local model = GPT2LMHeadModel(M.config_from_dict(d))
  local sd, unexpected = normalise_keys(read_weights(dir), model)
  if #unexpected > 0 then
    io.stderr:write(("from_pretrained: %s: weights not used by GPT2LMHeadModel (unexpected keys): %s\n"):format(dir,
      table.concat(unexpected, ", ")))
  end
  local dtype = load_dtype(o, d, sd)
  if dtype then model:to(dtype) end
  model:load_state_dict(sd)
  return model:eval() -- as transformers' from_pretrained: call model:train() to fine-tune
end

-- model:save_pretrained(dir, {max_shard_size = "50GB", safe_serialization = true}):
-- config.json (torch_dtype: the weights') and the weights as
-- accelerator:save_model writes them: model.safetensors, or shards of at
-- most max_shard_size plus model.safetensors.index.json (HF's names, format
-- "pt" metadata). Under an Accelerator use accelerator:save_model plus
-- model.config:save_pretrained(dir).
function GPT2LMHeadModel:save_pretrained(dir, o)
  o = util.check_options("save_pretrained", o, {"max_shard_size", "safe_serialization"})
  check_boolean("safe_serialization", o.safe_serialization, "save_pretrained")
  if o.safe_serialization == false then raise("save_pretrained: only safetensors is written (safe_serialization = true)") end
  local max_bytes = checkpoint.parse_size(o.max_shard_size or "50GB", "save_pretrained: max_shard_size")
  local dtype_name = tostring(self:output_weight().dtype):gsub("^accel%.", "")
  write_config(self.config, dir, dtype_name, "save_pretrained")
  checkpoint.save_model(self:state_dict(), self:state_dict_keys(), dir, max_bytes)
end

-- config.to_dict(): "GPT2Config.to_dict: call it as obj:to_dict(...)"
require("accel.util").check_methods(Config, "GPT2Config")

return M
