-- nn_sequence_spec.lua: Conv1d, the recurrent RNN / LSTM / GRU, their cells and the
-- Transformer stacks. References: tests/fixtures/recurrent.safetensors and
-- transformer.safetensors, written by PyTorch
-- (scripts/fixtures/make_recurrent_fixtures.py, make_transformer_fixtures.py:
-- outputs, states and gradients of float64 modules whose weights and inputs
-- are the closed forms rebuilt below), conv2d for conv1d, and PyTorch
-- 2.15's printed forms and parameter names quoted beside them.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local nn, F = accel.nn, accel.nn.functional

local f64 = {dtype = accel.float64}
local close, expect_error = support.assert_close, support.expect_error
local fixture = accel.load("tests/fixtures/recurrent.safetensors")

-- m with parameters scale * sin(k + i) in named_parameters() order (k: the
-- elements of the parameters before), as the fixture generators set them
local function set_weights(m, scale)
  local k = 0
  for _, p in ipairs(m:parameters()) do
    local vals = {}
    for i = 1, p:numel() do vals[i] = scale * math.sin(k + i) end
    k = k + p:numel()
    accel.no_grad(function() p:copy_(accel.tensor(vals, f64):view(p.shape)) end)
  end
  return m
end

local function fixture_module(kind)
  return set_weights(nn[kind](3, 4, 2, {bidirectional = true, dtype = accel.float64}), 0.5)
end

local function sequence(n, f)
  local vals = {}
  for i = 1, n do vals[i] = f(i) end
  return accel.tensor(vals, f64)
end

describe("RNN, LSTM and GRU", function()
  for _, kind in ipairs({"RNN", "LSTM", "GRU"}) do
    it(kind .. " matches PyTorch's outputs, final state and gradients", function()
      local m = fixture_module(kind)
      local x = sequence(30, math.cos):view(5, 2, 3):requires_grad_(true)
      local out, state = m(x)
      close(out, fixture[kind .. ".out"], 1e-12)
      if kind == "LSTM" then
        close(state[1], fixture["LSTM.h_n"], 1e-12)
        close(state[2], fixture["LSTM.c_n"], 1e-12)
      else
        close(state, fixture[kind .. ".h_n"], 1e-12)
      end
      local _ = (out * sequence(out:numel(), math.sin):view(out.shape)):sum():backward()
      close(x.grad, fixture[kind .. ".gx"], 1e-12)
      close(m.weight_hh_l0.grad, fixture[kind .. ".gw"], 1e-12)
    end)
  end

  it("takes batch_first, unbatched input and an initial state", function()
    local m = fixture_module("GRU")
    local x = sequence(30, math.cos):view(5, 2, 3)
    local out = m(x)
    local bf = nn.GRU(3, 4, 2, {bidirectional = true, batch_first = true, dtype = accel.float64})
    bf:load_state_dict(m:state_dict())
    close(bf(x:transpose(1, 2)), out:transpose(1, 2), 1e-14)
    local one = m(x:select(2, 1)) -- (T, n): unbatched
    close(one, out:select(2, 1), 1e-14)
    local lstm = fixture_module("LSTM")
    local h0 = accel.zeros(4, 2, 4, f64)
    local o1 = lstm(x)
    local o2 = lstm(x, {h0, h0:clone()})
    close(o1, o2, 0)
    expect_error(function() local _ = lstm(x, h0) end, "LSTM: the initial state must be a list {h0, c0}")
    expect_error(function() local _ = m(accel.zeros(5, 2, 7, f64)) end, "GRU: input.size(-1) must be equal to input_size. Expected 3, got 7")
  end)

  it("has PyTorch's parameter names, shapes and printed form (PyTorch 2.15)", function()
    local names = {}
    for name, p in nn.LSTM(3, 4, 2, {bidirectional = true}):named_parameters() do
      names[#names + 1] = name .. "=" .. table.concat(support.shape_of(p), "x")
    end
    assert.same({"weight_ih_l0=16x3", "weight_hh_l0=16x4", "bias_ih_l0=16", "bias_hh_l0=16", "weight_ih_l0_reverse=16x3",
      "weight_hh_l0_reverse=16x4", "bias_ih_l0_reverse=16", "bias_hh_l0_reverse=16", "weight_ih_l1=16x8", "weight_hh_l1=16x4",
      "bias_ih_l1=16", "bias_hh_l1=16", "weight_ih_l1_reverse=16x8", "weight_hh_l1_reverse=16x4", "bias_ih_l1_reverse=16",
      "bias_hh_l1_reverse=16"}, names)
    assert.are.equal("LSTM(10, 20, num_layers=2)", tostring(nn.LSTM(10, 20, 2)))
    assert.are.equal("GRU(4, 8, batch_first=True, bidirectional=True)",
      tostring(nn.GRU(4, 8, {batch_first = true, bidirectional = true})))
    assert.are.equal("Conv1d(4, 8, kernel_size=(3,), stride=(1,), padding=(1,))", tostring(nn.Conv1d(4, 8, 3, {padding = 1})))
    local b = 1 / math.sqrt(20)
    for _, p in ipairs(nn.GRU(10, 20):parameters()) do assert.is_true(p:abs():max():item() <= b) end
    expect_error(function() local _ = nn.LSTM(3, 4, {proj_size = 2}) end, "LSTM: proj_size is not supported")
    expect_error(function() local _ = nn.RNN(3, 4, {nonlinearity = "gelu"}) end, "RNN: Unknown nonlinearity 'gelu'")
  end)
end)

describe("RNNCell, LSTMCell and GRUCell", function()
  for _, kind in ipairs({"RNN", "LSTM", "GRU"}) do
    it(kind .. "Cell matches PyTorch over three steps fed back, with gradients", function()
      local m = set_weights(nn[kind .. "Cell"](3, 4, {dtype = accel.float64}), 0.5)
      local x = sequence(18, math.cos):view(3, 2, 3):requires_grad_(true)
      local h = sequence(8, function(i) return 0.3 * math.sin(i) end):view(2, 4)
      local c = sequence(8, function(i) return 0.2 * math.cos(i) end):view(2, 4)
      for t = 1, 3 do
        if kind == "LSTM" then h, c = m(x[t], {h, c}) else h = m(x[t], h) end
      end
      close(h, fixture[kind .. "Cell.h"], 1e-12)
      if kind == "LSTM" then close(c, fixture["LSTMCell.c"], 1e-12) end
      local _ = (h * sequence(8, math.sin):view(2, 4)):sum():backward()
      close(x.grad, fixture[kind .. "Cell.gx"], 1e-12)
      close(m.weight_ih.grad, fixture[kind .. "Cell.gw"], 1e-12)
    end)
  end

  it("take an unbatched input and a zero state by default, print and check as PyTorch's", function()
    local m = nn.GRUCell(3, 4, {dtype = accel.float64})
    local x = accel.randn(3, f64)
    close(m(x), m(x:unsqueeze(1), accel.zeros(1, 4, f64)):squeeze(1), 0)
    local h, c = nn.LSTMCell(3, 4)(accel.randn(2, 3))
    assert.same({2, 4}, support.shape_of(h))
    assert.same({2, 4}, support.shape_of(c))
    -- torch 2.15: str(nn.RNNCell(3, 4, bias=False, nonlinearity="relu")), str(nn.LSTMCell(3, 4))
    assert.are.equal("RNNCell(3, 4, bias=False, nonlinearity=relu)", tostring(nn.RNNCell(3, 4, false, "relu")))
    assert.are.equal("LSTMCell(3, 4)", tostring(nn.LSTMCell(3, 4)))
    assert.are.equal(4, #nn.LSTMCell(3, 4):parameters())
    assert.are.equal(2, #nn.GRUCell(3, 4, {bias = false}):parameters())
    expect_error(function() local _ = m(accel.randn(2, 5, f64)) end, "GRUCell: input has inconsistent input_size: got 5 expected 3")
    expect_error(function() local _ = nn.LSTMCell(3, 4)(accel.randn(2, 3), accel.zeros(2, 4)) end,
      "LSTMCell: the state must be a list {h, c}")
  end)
end)

describe("Conv1d", function()
  it("is conv2d over a height of 1, with its gradient", function()
    accel.manual_seed(4)
    local x, w, b = accel.randn(2, 4, 9, f64), accel.randn(6, 2, 3, f64), accel.randn(6, f64)
    local y = F.conv1d(x, w, b, {stride = 2, padding = 1, dilation = 2, groups = 2})
    local y2 = F.conv2d(x:unsqueeze(3), w:unsqueeze(3), b, {stride = {1, 2}, padding = {0, 1}, dilation = {1, 2}, groups = 2})
    close(y, y2:squeeze(3), 0)
    close(F.conv1d(x[1], w, b, {groups = 2}), F.conv1d(x, w, b, {groups = 2})[1], 0) -- unbatched
    local m = nn.Conv1d(4, 6, 3, {padding = "same", dtype = accel.float64})
    assert.same({2, 6, 9}, support.shape_of(m(x)))
    expect_error(function() local _ = F.conv1d(x, w:unsqueeze(1)) end, "conv1d: weight must be 3-D")
  end)

  it("takes kernel_size, stride, padding and dilation as lists of one, as PyTorch's (3,)", function()
    accel.manual_seed(5)
    local x, w = accel.randn(1, 2, 5, f64), accel.randn(2, 2, 3, f64)
    close(F.conv1d(x, w, nil, {2}), F.conv1d(x, w, nil, 2), 0)
    close(F.conv1d(x, w, {stride = {2}, padding = {1}, dilation = {2}}), F.conv1d(x, w, {stride = 2, padding = 1, dilation = 2}), 0)
    -- torch 2.15: output shapes (1, 2, 3) for Conv1d(2, 2, (3,)), (1, 2, 2) with stride=(2,), (1, 2, 5) with
    -- padding=(1,), (1, 2, 1) with dilation=(2,), (1, 2, 5) with stride=(1,), padding="same"
    local cases = {{{}, {1, 2, 3}}, {{stride = {2}}, {1, 2, 2}}, {{padding = {1}}, {1, 2, 5}}, {{dilation = {2}}, {1, 2, 1}},
                   {{stride = {1}, padding = "same"}, {1, 2, 5}}}
    for _, case in ipairs(cases) do
      case[1].dtype = accel.float64
      local m = nn.Conv1d(2, 2, {3}, case[1])
      assert.same(case[2], support.shape_of(m(x)))
      assert.same({2, 2, 3}, support.shape_of(m.weight))
    end
    -- torch 2.15: Conv1d(2, 2, kernel_size=(3,), stride=(2,), padding=(1,), dilation=(2,))
    assert.are.equal("Conv1d(2, 2, kernel_size=(3,), stride=(2,), padding=(1,), dilation=(2,))",
      tostring(nn.Conv1d(2, 2, {3}, {stride = {2}, padding = {1}, dilation = {2}})))
    expect_error(function() nn.Conv1d(2, 2, {3, 3}) end, "Conv1d: kernel_size must be an integer >= 1 or a list of 1 of them, got (3, 3)")
    expect_error(function() local _ = F.conv1d(x, w, nil, {1, 2}) end,
      "conv1d: stride must be an integer >= 1 or a list of 1 of them, got (1, 2)")
  end)

  it("names its own shapes in errors, not those of the conv2d it runs", function()
    local x = accel.randn(1, 3, 4)
    -- torch 2.15: "Given groups=1, weight of size [2, 2, 2], expected input[1, 3, 4] to have 2 channels, but got 3"
    expect_error(function() local _ = F.conv1d(x, accel.randn(2, 2, 2)) end,
      "conv1d: weight [2, 2, 2] with groups=1 expects input with 2 channels, but input [1, 3, 4] has 3")
    expect_error(function() local _ = F.conv1d(x, accel.randn(2, 3, 9)) end,
      "conv1d: kernel size 9 (dilation 1) is larger than the padded input length 4 of input [1, 3, 4]")
    expect_error(function() local _ = F.conv1d(x, accel.randn(2, 3, 2), accel.randn(3)) end,
      "conv1d: bias must have shape [2] (out_channels of weight [2, 3, 2]), got [3]")
    expect_error(function() local _ = F.conv1d(x, accel.randn(2, 3, 2), {stride = 0}) end, "conv1d: stride must be an integer >= 1 or a list of 1 of them, got 0")
    expect_error(function() local _ = F.conv1d(x, accel.randn(2, 3, 2), {groups = 2}) end,
      "conv1d: in_channels (3) and out_channels (2) must be divisible by groups (2)")
    expect_error(function() local _ = nn.Conv1d(4, 2, 3)(x) end, "conv1d: weight [2, 4, 3] with groups=1 expects input with 4 channels")
    -- torch 2.15 raises these in nn.Conv1d's constructor
    expect_error(function() nn.Conv1d(3, 2, 3, {stride = 2, padding = "same"}) end,
      "Conv1d: padding='same' is not supported for strided convolutions")
    expect_error(function() nn.Conv1d(3, 2, 3, {padding = "full"}) end,
      "Conv1d: invalid padding string 'full', should be one of 'valid', 'same'")
  end)
end)

describe("TransformerEncoderLayer and TransformerEncoder", function()
  local ref = accel.load("tests/fixtures/transformer.safetensors")

  it("match PyTorch's outputs and gradient (post-norm stack with a final norm; pre-norm gelu with a padding mask)", function()
    local layer = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0, dtype = accel.float64})
    local enc = set_weights(nn.TransformerEncoder(layer, 2, {norm = nn.LayerNorm(8, {dtype = accel.float64})}), 0.3)
    local x = sequence(80, math.cos):view(5, 2, 8):requires_grad_(true)
    local y = enc(x)
    close(y, ref["enc.y"], 1e-12)
    local _ = (y * y):sum():backward()
    close(x.grad, ref["enc.gx"], 1e-11)
    local pre = set_weights(nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0, norm_first = true,
      activation = "gelu", batch_first = true, dtype = accel.float64}), 0.3)
    local mask = accel.tensor({{false, false, false, false, true}, {false, false, true, true, true}})
    close(pre(x:detach():transpose(1, 2), {src_key_padding_mask = mask}), ref["pre.y"], 1e-12)
    close(pre(x:detach():transpose(1, 2), nil, mask), ref["pre.y"], 1e-12) -- (src, src_mask, src_key_padding_mask)
    local causal = nn.Transformer.generate_square_subsequent_mask(5, {dtype = accel.float64})
    close(enc(x:detach(), causal), enc(x:detach(), {mask = causal}), 0) -- TransformerEncoder's (src, mask)
  end)

  it("copies the layer num_layers times under PyTorch's state_dict keys", function()
    local layer = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16})
    local enc = nn.TransformerEncoder(layer, 3)
    local sd = enc:state_dict()
    assert.is_not_nil(sd["layers.2.self_attn.in_proj_weight"])
    assert.is_not_nil(sd["layers.0.linear1.weight"])
    close(sd["layers.1.linear2.weight"], layer.linear2.weight, 0)
    assert.are_not.equal(enc.layers[1].linear1.weight, enc.layers[2].linear1.weight) -- copies, not shared
    expect_error(function() local _ = nn.TransformerEncoder(nn.Linear(2, 2), 2) end,
      "TransformerEncoder: encoder_layer must be an nn.TransformerEncoderLayer")
    expect_error(function() local _ = nn.TransformerEncoderLayer(8, 2, {activation = "swish"}) end,
      'TransformerEncoderLayer: activation should be relu/gelu, a module or a function, not "swish"')
  end)

  -- PyTorch 2.15 deep-copies the layer: TransformerEncoder(layer.double(), 2) has float64 layers, a frozen norm
  -- stays frozen; norm may come positionally; activation=nn.GELU() is the submodule 'activation';
  -- is_causal=True without a mask: "Need attn_mask if specifying the is_causal hint. ..."
  it("copies keep the layer's dtype and frozen parameters; a positional norm; a module activation; is_causal needs the mask",
    function()
      local layer = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16}):double()
      layer.norm1:requires_grad_(false)
      local enc = nn.TransformerEncoder(layer, 2, nn.LayerNorm(8, {dtype = accel.float64}))
      assert.are.equal(accel.float64, enc.layers[2].linear1.weight.dtype)
      assert.is_false(enc.layers[2].norm1.weight.requires_grad)
      assert.is_true(enc.layers[2].norm2.weight.requires_grad)
      assert.are.equal("LayerNorm", enc.norm:_get_name())
      assert.are.equal(accel.float64, enc(accel.randn(3, 2, 8, {dtype = accel.float64})).dtype)
      local g = nn.TransformerEncoderLayer(8, 2, 16, 0.0, {activation = nn.GELU({approximate = "tanh"})})
      assert.are.equal("GELU", g.activation:_get_name())
      local x = accel.randn(5, 2, 8)
      close(g(x), g.norm2(g.norm1(x + g.self_attn(x, x, x, {need_weights = false}))
        + g.linear2(F.gelu(g.linear1(g.norm1(x + g.self_attn(x, x, x, {need_weights = false}))), {approximate = "tanh"}))), 1e-5)
      expect_error(function() local _ = nn.TransformerEncoderLayer(8, 2, 16, 0.0)(x, {is_causal = true}) end,
        "TransformerEncoderLayer: Need attn_mask if specifying the is_causal hint")
    end)
end)

-- torch 2.15 (copy.deepcopy of the layer): a TransformerEncoderLayer subclass whose forward is src * 2 stacked twice
-- gives 4.0 for ones(3, 1, 4) (the copies are the subclass); a decoder subclass with tgt + 1 gives 3.0; a layer
-- with a buffer "extra", a non-persistent buffer "scratch" (7, 7), a submodule "adapter", a plain field and a
-- frozen linear1.weight gives state_dict keys layers.0.extra, layers.0.adapter.weight, layers.0.adapter.bias,
-- layers.1.extra, ... (no scratch), new scratch tensors holding 7, 7, and its forward hook and linear2's
-- pre-hook run in the copies: pre2, post, pre2, post
describe("TransformerEncoder / TransformerDecoder copy the layer as PyTorch's deepcopy", function()
  it("keeps a subclass's forward", function()
    local My = nn.TransformerEncoderLayer:extend("DoublingLayer")
    function My:forward(src) return src * 2 end
    local enc = nn.TransformerEncoder(My(4, 2, 8, 0.0, f64), 2)
    assert.is_true(enc.layers[2]:isinstance(My))
    close(enc(accel.ones(3, 1, 4, f64)), accel.full({3, 1, 4}, 4.0, f64), 0)
    local MyD = nn.TransformerDecoderLayer:extend("PlusOneLayer")
    function MyD:forward(tgt) return tgt + 1 end
    local dec = nn.TransformerDecoder(MyD(4, 2, 8, 0.0, f64), 2)
    assert.is_true(dec.layers[1]:isinstance(MyD))
    close(dec(accel.ones(3, 1, 4, f64), accel.ones(2, 1, 4, f64)), accel.full({3, 1, 4}, 3.0, f64), 0)
  end)

  it("copies extra buffers and submodules, plain fields, frozen parameters and hooks", function()
    local layer = nn.TransformerEncoderLayer(4, 2, 8, 0.0, f64)
    layer:register_buffer("extra", accel.ones(1))
    layer:register_buffer("scratch", accel.full({2}, 7.0), {persistent = false})
    layer.adapter = nn.Linear(4, 4)
    layer.tag = "t"
    layer.linear1.weight:requires_grad_(false)
    local calls = {}
    layer:register_forward_hook(function() calls[#calls + 1] = "post" end)
    layer.linear2:register_forward_pre_hook(function() calls[#calls + 1] = "pre2" end)
    local enc = nn.TransformerEncoder(layer, 2)
    local keys = {}
    for _, k in ipairs(enc:state_dict_keys()) do
      if k:find("extra", 1, true) or k:find("adapter", 1, true) or k:find("scratch", 1, true) then keys[#keys + 1] = k end
    end
    assert.are.same({"layers.0.extra", "layers.0.adapter.weight", "layers.0.adapter.bias", "layers.1.extra",
      "layers.1.adapter.weight", "layers.1.adapter.bias"}, keys)
    local second = enc.layers[2]
    assert.are.same({7, 7}, second.scratch:tolist())
    assert.is_false(rawequal(second.scratch, layer.scratch) or rawequal(second.scratch, enc.layers[1].scratch))
    assert.are.equal("t", second.tag)
    assert.is_false(second.linear1.weight.requires_grad)
    assert.is_true(second.adapter.weight.requires_grad)
    enc(accel.ones(3, 1, 4, f64))
    assert.are.same({"pre2", "post", "pre2", "post"}, calls)
  end)
end)

describe("TransformerDecoderLayer, TransformerDecoder and Transformer", function()
  local ref = accel.load("tests/fixtures/transformer.safetensors")
  local mask = accel.tensor({{false, false, false, false, true}, {false, false, true, true, true}})

  it("the decoder stack matches PyTorch's output and gradients (causal target mask, memory padding mask)", function()
    local layer = nn.TransformerDecoderLayer(8, 2, {dim_feedforward = 16, dropout = 0, dtype = accel.float64})
    local dec = set_weights(nn.TransformerDecoder(layer, 2, {norm = nn.LayerNorm(8, {dtype = accel.float64})}), 0.3)
    local tgt = sequence(64, function(i) return 0.5 * math.sin(i) end):view(4, 2, 8):requires_grad_(true)
    local memory = sequence(80, math.cos):view(5, 2, 8):requires_grad_(true)
    local causal = nn.Transformer.generate_square_subsequent_mask(4, {dtype = accel.float64})
    local y = dec(tgt, memory, {tgt_mask = causal, memory_key_padding_mask = mask})
    close(y, ref["dec.y"], 1e-12)
    -- PyTorch's positional order: tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask
    close(dec(tgt, memory, causal, nil, nil, mask), ref["dec.y"], 1e-12)
    local _ = (y * y):sum():backward()
    close(tgt.grad, ref["dec.gt"], 1e-11)
    close(memory.grad, ref["dec.gm"], 1e-11)
  end)

  it("Transformer matches PyTorch's (pre-norm, gelu, batch first) and has its state_dict keys", function()
    local m = set_weights(nn.Transformer({d_model = 8, nhead = 2, num_encoder_layers = 2, num_decoder_layers = 1,
      dim_feedforward = 16, dropout = 0, norm_first = true, activation = "gelu", batch_first = true,
      dtype = accel.float64}), 0.3)
    local src = sequence(80, math.cos):view(5, 2, 8):transpose(1, 2)
    local tgt = sequence(64, function(i) return 0.5 * math.sin(i) end):view(4, 2, 8):transpose(1, 2)
    local causal = m:generate_square_subsequent_mask(4, {dtype = accel.float64})
    close(m(src, tgt, {src_key_padding_mask = mask, tgt_mask = causal, tgt_is_causal = true}), ref["full.y"], 1e-12)
    -- positionally: src_mask, tgt_mask, memory_mask, src_key_padding_mask, ..., tgt_is_causal by name
    close(m(src, tgt, nil, causal, nil, mask, {tgt_is_causal = true}), ref["full.y"], 1e-12)
    -- torch: "forward() got multiple values for argument 'tgt_mask'"
    expect_error(function() local _ = m(src, tgt, nil, causal, {tgt_mask = causal}) end,
      "Transformer.forward: got multiple values for argument 'tgt_mask'")
    expect_error(function() local _ = m(src, tgt, 3) end, "Transformer.forward: argument 'src_mask' must be a Tensor")
    -- torch 2.15: 46 keys, from encoder.layers.0.self_attn.in_proj_weight to decoder.norm.bias
    local sd, n = m:state_dict(), 0
    for _ in pairs(sd) do n = n + 1 end
    assert.are.equal(46, n)
    for _, k in ipairs({"encoder.layers.1.norm2.bias", "encoder.norm.weight", "decoder.layers.0.multihead_attn.in_proj_weight",
                        "decoder.layers.0.norm3.weight", "decoder.norm.bias"}) do
      assert.is_not_nil(sd[k], k)
    end
    -- torch 2.15: generate_square_subsequent_mask(3) = [[0, -inf, -inf], [0, 0, -inf], [0, 0, 0]]
    local inf = math.huge
    assert.are.same({{0, -inf, -inf}, {0, 0, -inf}, {0, 0, 0}}, nn.Transformer.generate_square_subsequent_mask(3):tolist())
  end)

  it("initializes weights of more than one dim xavier-uniform and refuses mismatched inputs", function()
    accel.manual_seed(1)
    local m = nn.Transformer({d_model = 16, nhead = 4, num_encoder_layers = 1, num_decoder_layers = 1, dim_feedforward = 32})
    local w = m.encoder.layers[1].linear1.weight -- (32, 16): bound sqrt(6 / 48)
    assert.is_true(w:abs():max():item() <= math.sqrt(6 / 48))
    assert.is_true(w:abs():max():item() > 0.9 * math.sqrt(6 / 48))
    assert.are.equal(0, m.encoder.layers[1].self_attn.in_proj_bias:abs():sum():item()) -- MHA's own init, kept
    expect_error(function() local _ = m(accel.randn(5, 2, 16), accel.randn(4, 3, 16)) end,
      "Transformer.forward: the batch number of src and tgt must be equal")
    expect_error(function() local _ = m(accel.randn(5, 2, 16), accel.randn(4, 2, 8)) end,
      "Transformer.forward: the feature number of src and tgt must be equal to d_model (16)")
    expect_error(function() local _ = nn.TransformerDecoder(nn.TransformerEncoderLayer(16, 4), 2) end,
      "TransformerDecoder: decoder_layer must be an nn.TransformerDecoderLayer")
    expect_error(function() local _ = m.decoder.layers[1](accel.randn(4, 2, 16)) end,
      "TransformerDecoderLayer.forward: memory must be a Tensor, got nil")
  end)
end)
