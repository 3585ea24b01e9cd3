-- Keyword options of the nn constructors, nn.functional, nn.init and
-- nn.utils.clip_grad_norm_: a key the function does not know is an error
-- "<Name>: unknown option '<key>' (options: a, b, c)" at the caller's
-- file:line (PyTorch's TypeError for an unexpected keyword), and every key
-- the message lists is accepted with a value that works.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local nn = accel.nn
local F = nn.functional
local shape_of = support.shape_of

local f64, dev = accel.float64, accel.get_default_device()
local x34 = accel.randn(3, 4)
local img = accel.randn(1, 2, 5, 5)
local ids = accel.tensor({0, 1, 3}, {dtype = accel.int64})
local q = accel.randn(1, 2, 3, 4)
local seq = accel.randn(3, 2, 8)
local mha = nn.MultiheadAttention(8, 2)
local w = accel.empty(4, 3)
local p = accel.ones(3, {requires_grad = true})
p:sum():backward()

-- One case per function: call(o) passes the options table o to it (written
-- on one line, so the error must point at that line); good holds a value
-- that works for every key it accepts; more.required: the keys every call
-- needs; more.refused maps a listed key that no value can have yet
-- (PyTorch's, not supported) to its error.
local CASES = {}
local function case(name, good, call, more)
  more = more or {}
  CASES[#CASES + 1] = {name = name, good = good, call = call, required = more.required, refused = more.refused}
end

case("nn.Parameter", {requires_grad = false}, function(o) local _ = nn.Parameter(accel.ones(2), o) end)
case("register_buffer", {persistent = false}, function(o) nn.Module():register_buffer("b", accel.zeros(1), o) end)
case("Linear", {bias = false, dtype = f64, device = dev}, function(o) local _ = nn.Linear(3, 4, o) end)
case("Embedding", {padding_idx = 0, max_norm = false, norm_type = 2.0, scale_grad_by_freq = false, sparse = false,
  _weight = accel.randn(10, 3), _freeze = true, dtype = f64, device = dev}, function(o) local _ = nn.Embedding(10, 3, o) end)
case("Embedding.from_pretrained", {freeze = false, padding_idx = 1, max_norm = false, scale_grad_by_freq = false,
  sparse = false}, function(o) local _ = nn.Embedding.from_pretrained(accel.randn(4, 3), o) end)
case("LayerNorm", {eps = 1e-6, elementwise_affine = false, bias = false, dtype = f64, device = dev},
  function(o) local _ = nn.LayerNorm(4, o) end)
case("RMSNorm", {eps = 1e-6, elementwise_affine = false, dtype = f64, device = dev}, function(o) local _ = nn.RMSNorm(4, o) end)
case("Dropout", {p = 0.2, inplace = true}, function(o) local _ = nn.Dropout(o) end)
case("Conv2d", {stride = 2, padding = 1, dilation = 2, groups = 2, bias = false, padding_mode = "zeros", dtype = f64,
  device = dev}, function(o) local _ = nn.Conv2d(2, 4, 3, o) end)
case("MaxPool2d", {stride = 1, padding = 1, dilation = 2, return_indices = true, ceil_mode = true},
  function(o) local _ = nn.MaxPool2d(2, o) end)
case("Flatten", {start_dim = 1, end_dim = 2}, function(o) local _ = nn.Flatten(o) end)
case("ReLU", {inplace = true}, function(o) local _ = nn.ReLU(o) end)
case("SiLU", {inplace = true}, function(o) local _ = nn.SiLU(o) end)
case("GELU", {approximate = "tanh"}, function(o) local _ = nn.GELU(o) end)
case("LeakyReLU", {negative_slope = 0.2, inplace = true}, function(o) local _ = nn.LeakyReLU(o) end)
case("Softmax", {dim = 2}, function(o) local _ = nn.Softmax(o) end, {required = {"dim"}})
case("LogSoftmax", {dim = 2}, function(o) local _ = nn.LogSoftmax(o) end, {required = {"dim"}})
case("MultiheadAttention", {dropout = 0.1, bias = false, add_bias_kv = false, add_zero_attn = false, kdim = 8, vdim = 8,
  batch_first = true, dtype = f64, device = dev}, function(o) local _ = nn.MultiheadAttention(8, 2, o) end)
case("MultiheadAttention.forward", {key_padding_mask = accel.zeros(2, 3, {dtype = accel.bool}), need_weights = false,
  attn_mask = accel.zeros(3, 3), average_attn_weights = false, is_causal = true}, function(o) local _ = mha(seq, seq, seq, o) end)
case("CrossEntropyLoss", {weight = accel.ones(4), ignore_index = 1, reduction = "sum", label_smoothing = 0.1},
  function(o) local _ = nn.CrossEntropyLoss(o) end)
case("NLLLoss", {weight = accel.ones(4), ignore_index = 1, reduction = "sum"}, function(o) local _ = nn.NLLLoss(o) end)
case("MSELoss", {reduction = "sum"}, function(o) local _ = nn.MSELoss(o) end)
case("L1Loss", {reduction = "sum"}, function(o) local _ = nn.L1Loss(o) end)
case("BCEWithLogitsLoss", {weight = accel.ones(3), pos_weight = accel.ones(3), reduction = "none"},
  function(o) local _ = nn.BCEWithLogitsLoss(o) end)

case("relu", {inplace = true}, function(o) local _ = F.relu(accel.randn(3, 4), o) end)
case("silu", {inplace = true}, function(o) local _ = F.silu(accel.randn(3, 4), o) end)
case("gelu", {approximate = "tanh"}, function(o) local _ = F.gelu(x34, o) end)
case("leaky_relu", {negative_slope = 0.2, inplace = true}, function(o) local _ = F.leaky_relu(accel.randn(3, 4), o) end)
case("leaky_relu", {inplace = true}, function(o) local _ = F.leaky_relu(accel.randn(3, 4), 0.2, o) end)
case("softmax", {dim = 2, dtype = f64}, function(o) local _ = F.softmax(x34, o) end, {required = {"dim"}})
case("softmax", {dtype = f64}, function(o) local _ = F.softmax(x34, 2, o) end)
case("log_softmax", {dim = 2, dtype = f64}, function(o) local _ = F.log_softmax(x34, o) end, {required = {"dim"}})
case("cross_entropy", {weight = accel.ones(4), ignore_index = 1, label_smoothing = 0.1, reduction = "sum"},
  function(o) local _ = F.cross_entropy(x34, ids, o) end)
case("nll_loss", {weight = accel.ones(4), ignore_index = 1, reduction = "sum"}, function(o) local _ = F.nll_loss(x34, ids, o) end)
case("mse_loss", {reduction = "sum"}, function(o) local _ = F.mse_loss(x34, x34, o) end)
case("l1_loss", {reduction = "sum"}, function(o) local _ = F.l1_loss(x34, x34, o) end)
case("binary_cross_entropy_with_logits", {weight = accel.ones(4), pos_weight = accel.ones(4), reduction = "none"},
  function(o) local _ = F.binary_cross_entropy_with_logits(x34, accel.rand(3, 4), o) end)
case("dropout", {p = 0.2, training = false, inplace = false}, function(o) local _ = F.dropout(x34, o) end)
case("embedding", {padding_idx = 0, norm_type = 2.0}, function(o) local _ = F.embedding(ids, accel.randn(4, 3), o) end,
  {refused = {max_norm = "argument 'max_norm' must be a number", scale_grad_by_freq = "must be a boolean",
              sparse = "must be a boolean"}})
case("layer_norm", {weight = accel.ones(4), bias = accel.zeros(4), eps = 1e-6}, function(o) local _ = F.layer_norm(x34, 4, o) end)
case("rms_norm", {weight = accel.ones(4), eps = 1e-6}, function(o) local _ = F.rms_norm(x34, 4, o) end)
case("normalize", {p = 1, dim = 1, eps = 1e-6}, function(o) local _ = F.normalize(x34, o) end)
case("scaled_dot_product_attention", {attn_mask = accel.ones(3, 3, {dtype = accel.bool}), dropout_p = 0.1,
  is_causal = true, scale = 0.5, enable_gqa = true}, function(o) local _ = F.scaled_dot_product_attention(q, q, q, o) end)
case("conv2d", {bias = accel.zeros(4), stride = 2, padding = 1, dilation = 2, groups = 1},
  function(o) local _ = F.conv2d(img, accel.randn(4, 2, 3, 3), o) end)
case("conv2d", {bias = accel.zeros(4), stride = 2, padding = 1, dilation = 2, groups = 1},
  function(o) local _ = F.conv2d(img, accel.randn(4, 2, 3, 3), nil, o) end)
case("max_pool2d", {stride = 1, padding = 1, dilation = 2, ceil_mode = true, return_indices = true},
  function(o) local _ = F.max_pool2d(img, 2, o) end)
case("avg_pool2d", {stride = 1, padding = 1, ceil_mode = true, count_include_pad = false, divisor_override = 3},
  function(o) local _ = F.avg_pool2d(img, 2, o) end)

case("nn.init.uniform_", {a = -2, b = 2}, function(o) local _ = nn.init.uniform_(w, o) end)
case("nn.init.uniform_", {b = 2}, function(o) local _ = nn.init.uniform_(w, -2, o) end)
case("nn.init.normal_", {mean = 1, std = 2}, function(o) local _ = nn.init.normal_(w, o) end)
case("nn.init.trunc_normal_", {mean = 0.5, std = 2, a = -1, b = 1}, function(o) local _ = nn.init.trunc_normal_(w, o) end)
case("nn.init.xavier_uniform_", {gain = 2}, function(o) local _ = nn.init.xavier_uniform_(w, o) end)
case("nn.init.xavier_normal_", {gain = 2}, function(o) local _ = nn.init.xavier_normal_(w, o) end)
case("nn.init.kaiming_uniform_", {a = 0.1, mode = "fan_out", nonlinearity = "relu"},
  function(o) local _ = nn.init.kaiming_uniform_(w, o) end)
case("nn.init.kaiming_normal_", {a = 0.1, mode = "fan_out", nonlinearity = "relu"},
  function(o) local _ = nn.init.kaiming_normal_(w, o) end)
case("nn.init.orthogonal_", {gain = 2}, function(o) local _ = nn.init.orthogonal_(w, o) end)
case("clip_grad_norm_", {norm_type = 1, error_if_nonfinite = true, foreach = false},
  function(o) local _ = nn.utils.clip_grad_norm_({p}, 10, o) end)

local function sorted_keys(t)
  local out = {}
  for k in pairs(t or {}) do out[#out + 1] = k end
  table.sort(out)
  return out
end

describe("nn options", function()
  it("an unknown key is an error naming the function, the key and the options, at the caller's line", function()
    for _, c in ipairs(CASES) do
      local ok, err = pcall(c.call, {misspelled = true})
      assert.is_false(ok, c.name .. " accepted an unknown option")
      local line = debug.getinfo(c.call, "S").linedefined
      local head = ("%s: unknown option 'misspelled' (options: "):format(c.name)
      assert.is_truthy(err:find(head, 1, true), ("%q lacks %q"):format(err, head))
      assert.is_truthy(err:find("nn_options_spec.lua:" .. line .. ":", 1, true), ("%q does not point at line %d"):format(err, line))
      -- the listed options are exactly the keys this spec checks below
      local listed = {}
      for k in err:match("%(options: ([^)]*)%)"):gmatch("[%w_]+") do listed[#listed + 1] = k end
      table.sort(listed)
      local want = sorted_keys(c.good)
      for _, k in ipairs(sorted_keys(c.refused)) do want[#want + 1] = k end
      table.sort(want)
      assert.are.same(want, listed, c.name)
    end
  end)

  -- PyTorch's F.embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse):
  -- positional or by name; the options it cannot honour are refused, never dropped
  it("F.embedding takes PyTorch's positional arguments and refuses max_norm, scale_grad_by_freq and sparse", function()
    local w = accel.full({4, 3}, 2.0)
    assert.are.same({3, 3}, shape_of(F.embedding(ids, w, nil, nil, 2.0)))
    support.expect_error(function() local _ = F.embedding(ids, w, nil, 1.0) end,
      "embedding: max_norm is not supported (the weight is not renormalised)")
    support.expect_error(function() local _ = F.embedding(ids, w, {scale_grad_by_freq = true}) end,
      "embedding: scale_grad_by_freq = true is not supported")
    support.expect_error(function() local _ = F.embedding(ids, w, nil, nil, 2.0, false, true) end,
      "embedding: sparse = true is not supported (gradients are dense)")
    support.expect_error(function() local _ = F.embedding(ids, w, 0, nil, 2.0, false, false, 9) end,
      "embedding: 6 arguments given where at most 5 are taken")
  end)

  it("every listed option works", function()
    accel.set_seed(0)
    for _, c in ipairs(CASES) do
      for _, k in ipairs(sorted_keys(c.good)) do
        local o = {[k] = c.good[k]}
        for _, r in ipairs(c.required or {}) do o[r] = c.good[r] end
        local ok, err = pcall(c.call, o)
        assert.is_true(ok, ("%s {%s = ...}: %s"):format(c.name, k, tostring(err)))
      end
      for _, k in ipairs(sorted_keys(c.refused)) do
        local ok, err = pcall(c.call, {[k] = accel.ones(4)})
        assert.is_false(ok)
        assert.is_truthy(tostring(err):find(c.refused[k], 1, true), tostring(err))
      end
    end
  end)

  it("the audit's misspellings are refused", function()
    support.expect_error(function() local _ = F.scaled_dot_product_attention(q, q, q, {is_casual = true}) end,
      "scaled_dot_product_attention: unknown option 'is_casual' (options: attn_mask, dropout_p, is_causal, scale, "
        .. "enable_gqa)")
    support.expect_error(function() local _ = F.cross_entropy(x34, ids, {reduce = "sum"}) end,
      "cross_entropy: unknown option 'reduce' (options: weight, ignore_index, label_smoothing, reduction)")
    support.expect_error(function() local _ = nn.Linear(3, 4, {biass = false}) end,
      "Linear: unknown option 'biass' (options: bias, device, dtype)")
    support.expect_error(function() local _ = nn.CrossEntropyLoss({label_smothing = 0.1}) end,
      "CrossEntropyLoss: unknown option 'label_smothing'")
    support.expect_error(function() local _ = nn.Conv2d(3, 4, 3, {strides = 2}) end, "Conv2d: unknown option 'strides'")
    support.expect_error(function() nn.Module():register_buffer("mask", accel.ones(2), {persistant = false}) end,
      "register_buffer: unknown option 'persistant' (options: persistent)")
  end)

  it("the correctly spelled options take effect", function()
    local causal = F.scaled_dot_product_attention(q, q, q, {is_causal = true})
    local full = F.scaled_dot_product_attention(q, q, q)
    -- the first query sees only the first key under the causal mask
    assert.is_true((causal:select(3, 1) - q:select(3, 1)):abs():max():item() < 1e-5)
    assert.is_true((causal - full):abs():max():item() > 1e-4)
    local mean = F.cross_entropy(x34, ids)
    local sum = F.cross_entropy(x34, ids, {reduction = "sum"})
    assert.is_true(math.abs(sum:item() - 3 * mean:item()) < 1e-4)
    assert.is_nil(nn.Linear(3, 4, {bias = false}).bias)
    local plain, smooth = nn.CrossEntropyLoss(), nn.CrossEntropyLoss({label_smoothing = 0.1})
    assert.is_true(math.abs(plain(x34, ids):item() - smooth(x34, ids):item()) > 1e-6)
    assert.are.same({1, 4, 3, 3}, shape_of(nn.Conv2d(2, 4, 3, {stride = 2, padding = 1})(img)))
  end)

  -- PyTorch's positional arguments are read in its order; the printed forms are PyTorch 2.15's
  -- str() of the same calls (nn.Conv2d(3, 6, 3, 2, 1), ...), dims 1-based where they are dims
  it("PyTorch's positional arguments of the layers take effect, in PyTorch's order", function()
    local cases = {
      {nn.Conv2d(3, 6, 3, 2, 1), "Conv2d(3, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))"},
      {nn.Conv2d(3, 6, 3, 1, 0, 2, 3, false),
       "Conv2d(3, 6, kernel_size=(3, 3), stride=(1, 1), dilation=(2, 2), groups=3, bias=False)"},
      {nn.Conv1d(4, 6, 3, 2, 1, 1, 2, false), "Conv1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,), groups=2, bias=False)"},
      {nn.MaxPool2d(2, 2), "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"},
      {nn.MaxPool2d(3, 1, 1, 2, false, true), "MaxPool2d(kernel_size=3, stride=1, padding=1, dilation=2, ceil_mode=True)"},
      {nn.AvgPool2d(3, 1, 1), "AvgPool2d(kernel_size=3, stride=1, padding=1)"},
      {nn.Dropout(0.2, true), "Dropout(p=0.2, inplace=True)"},
      {nn.LayerNorm(8, 1e-6, true, false), "LayerNorm((8,), eps=1e-06, elementwise_affine=True, bias=False)"},
      {nn.RMSNorm(8, 1e-6, false), "RMSNorm((8,), eps=1e-06, elementwise_affine=False)"},
      {nn.GroupNorm(2, 4, 1e-3, false), "GroupNorm(2, 4, eps=0.001, affine=False, bias=False)"},
      {nn.BatchNorm1d(4, 1e-3, 0.2, false, false),
       "BatchNorm1d(4, eps=0.001, momentum=0.2, affine=False, bias=False, track_running_stats=False)"},
      {nn.BatchNorm2d(3, 1e-3, 0.2), "BatchNorm2d(3, eps=0.001, momentum=0.2, affine=True, bias=True, track_running_stats=True)"},
      {nn.Embedding(10, 3, 0), "Embedding(10, 3, padding_idx=0)"},
      {nn.LeakyReLU(0.2, true), "LeakyReLU(negative_slope=0.2, inplace=True)"},
      {nn.RNN(4, 8, 2, "relu", false, true), "RNN(4, 8, num_layers=2, bias=False, batch_first=True)"},
      {nn.MultiheadAttention(8, 2, 0.1, false),
       "MultiheadAttention(\n  (out_proj): NonDynamicallyQuantizableLinear(in_features=8, out_features=8, bias=False)\n)"},
    }
    for _, c in ipairs(cases) do assert.are.equal(c[2], tostring(c[1])) end
    -- nn.Linear(3, 4, True, None, torch.float64): device and dtype are its 4th and 5th
    assert.are.equal(accel.float64, nn.Linear(3, 4, true, nil, accel.float64).weight.dtype)
    assert.are.equal("sim", nn.Linear(3, 4, false, "sim").weight.device.type)
    assert.are.equal("GELU(approximate='tanh')", tostring(nn.GELU("tanh")))
    assert.are.equal("ReLU(inplace=True)", tostring(nn.ReLU(true)))
    assert.are.equal("Softmax(dim=-1)", tostring(nn.Softmax(-1)))
    -- more than PyTorch takes: its TypeError ("Sigmoid.__init__() takes 1 positional argument but 2 were given")
    support.expect_error(function() local _ = nn.Linear(3, 4, true, "cpu", accel.float32, 5) end,
      "Linear: 4 arguments given where at most 3 are taken (bias, device, dtype")
    support.expect_error(function() local _ = nn.ReLU(false, 1) end, "ReLU: 2 arguments given where at most 1 are taken")
    support.expect_error(function() local _ = nn.GELU("tanh", 1) end, "GELU: 2 arguments given where at most 1 are taken")
    support.expect_error(function() local _ = nn.Softmax(1, 2) end, "Softmax: 2 arguments given where at most 1 are taken")
    for _, name in ipairs({"Sigmoid", "Tanh", "LogSigmoid"}) do
      support.expect_error(function() local _ = nn[name](1) end, name .. ": takes no arguments, got 1")
    end
    assert.are.equal("relu", nn.RNN(4, 8, 2, "relu").nonlinearity)
    assert.are.equal(0.1, nn.MultiheadAttention(8, 2, 0.1).dropout)
    -- a value given both ways, or one too many, is PyTorch's TypeError
    support.expect_error(function() local _ = nn.MaxPool2d(2, 2, {stride = 3}) end,
      "MaxPool2d: got multiple values for argument 'stride'")
    support.expect_error(function() local _ = nn.MaxPool2d(2, 2, 0, 1, false, false, 7) end,
      "MaxPool2d: 6 arguments given where at most 5 are taken")
    support.expect_error(function() local _ = nn.LayerNorm(4, "1e-6") end, "LayerNorm: argument 'eps' must be a number, got string")
    support.expect_error(function() local _ = nn.LSTM(4, 8, {nonlinearity = "relu"}) end, "LSTM: unknown option 'nonlinearity'")
    -- PyTorch's keyword form of a positional argument, put in the table, is named as such
    support.expect_error(function() local _ = nn.Conv2d(1, 16, {kernel_size = 3, stride = 2}) end,
      "Conv2d: kernel_size is a positional argument (Conv2d(..., 3, ...)); only the arguments after it may go in the "
        .. "options table")
    support.expect_error(function() local _ = nn.Linear({in_features = 784, out_features = 20}) end,
      "Linear: in_features is a positional argument")
    support.expect_error(function() local _ = nn.LayerNorm({normalized_shape = 3}) end,
      "LayerNorm: normalized_shape is a positional argument")
    support.expect_error(function() local _ = F.cross_entropy(x34, ids, "sum") end,
      "cross_entropy: options must be a table, got string")
  end)

  -- F.max_pool2d's order (..., dilation, ceil_mode, return_indices) is not MaxPool2d's
  it("F.conv2d / conv1d / max_pool2d / avg_pool2d read PyTorch's positional arguments as their options", function()
    local x, w, b = accel.randn(1, 4, 7, 7), accel.randn(6, 2, 3, 3), accel.randn(6)
    local function same(a, o) assert.are.equal(0, (a - o):abs():max():item()) end
    same(F.conv2d(x, w, b, 2, 1, 1, 2), F.conv2d(x, w, b, {stride = 2, padding = 1, groups = 2}))
    same(F.conv2d(x, w, nil, 1, 0, 2, 2), F.conv2d(x, w, {dilation = 2, groups = 2}))
    local x1, w1 = accel.randn(1, 4, 9), accel.randn(6, 4, 3)
    same(F.conv1d(x1, w1, nil, 2, 1), F.conv1d(x1, w1, {stride = 2, padding = 1}))
    local v, i = F.max_pool2d(x, 3, 2, 1, 1, true, true)
    local vo, io = F.max_pool2d(x, 3, {stride = 2, padding = 1, ceil_mode = true, return_indices = true})
    same(v, vo)
    assert.are.same(io:tolist(), i:tolist())
    same(F.avg_pool2d(x, 3, 2, 1, true, false), F.avg_pool2d(x, 3, {stride = 2, padding = 1, ceil_mode = true,
      count_include_pad = false}))
    support.expect_error(function() local _ = F.max_pool2d(x, 2, 2, {stride = 2}) end,
      "max_pool2d: got multiple values for argument 'stride'")
    support.expect_error(function() local _ = F.conv2d(x, w, b, 1, 0, 1, 2, 9) end,
      "conv2d: 6 arguments given where at most 5 are taken")
  end)

  it("arguments past the ones PyTorch's function takes are errors (its TypeError), not dropped", function()
    local w4 = accel.randn(2, 4)
    support.expect_error(function() local _ = F.sigmoid(x34, 1) end, "sigmoid: takes 1 positional argument but 2 were given")
    support.expect_error(function() local _ = F.tanh(x34, true) end, "tanh: takes 1 positional argument but 2 were given")
    support.expect_error(function() local _ = F.linear(x34, w4, nil, 1) end,
      "linear: takes from 2 to 3 positional arguments but 4 were given")
    support.expect_error(function() local _ = F.relu(x34, false, 1) end, "relu: takes from 1 to 2 positional arguments but 3 were given")
    support.expect_error(function() local _ = F.silu(x34, false, 1) end, "silu: takes from 1 to 2 positional arguments but 3 were given")
    support.expect_error(function() local _ = F.leaky_relu(x34, 0.2, false, 1) end,
      "leaky_relu: takes from 1 to 3 positional arguments but 4 were given")
    support.expect_error(function() local _ = F.leaky_relu(x34, {negative_slope = 0.2}, true) end,
      "leaky_relu: an argument (true) after the options table")
    support.expect_error(function() local _ = F.relu(x34, "yes") end, "relu: options must be a table, got string")
    -- the losses: PyTorch's (input, target, size_average, reduce, reduction) layout is refused, not read as the mean
    local t34, cls = accel.zeros(3, 4), accel.tensor({0, 1, 3}, {dtype = accel.int64})
    support.expect_error(function() local _ = F.mse_loss(x34, t34, nil, nil, "sum") end,
      "mse_loss: takes from 2 to 3 positional arguments but 5 were given")
    support.expect_error(function() local _ = F.l1_loss(x34, t34, {reduction = "sum"}, 9) end, "l1_loss: takes from 2 to 3")
    support.expect_error(function() local _ = F.cross_entropy(x34, cls, nil, nil, 1) end, "cross_entropy: takes from 2 to 3")
    support.expect_error(function() local _ = F.nll_loss(x34, cls, nil, nil, 0) end, "nll_loss: takes from 2 to 3")
    support.expect_error(function() local _ = F.binary_cross_entropy_with_logits(x34, t34, nil, nil, nil, "sum") end,
      "binary_cross_entropy_with_logits: takes from 2 to 3")
    for _, name in ipairs({"MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss"}) do
      support.expect_error(function() local _ = nn[name](nil, nil, "sum") end,
        name .. ": takes 1 argument (options in one table) but 3 were given")
    end
    support.expect_error(function() local _ = nn.MSELoss()(x34, t34, 5) end, "MSELoss: takes 2 arguments")
    -- weight is PyTorch's third positional argument of the weighted losses: read as {weight = w}
    local p34, w34 = accel.full({3, 4}, 0.25), accel.full({3, 4}, 2.0)
    local bce = F.binary_cross_entropy(p34, t34, w34) -- -2 log(0.75) each, mean (PyTorch: tensor(0.5754))
    assert.is_true(math.abs(bce:item() - (-2 * math.log(0.75))) < 1e-6, tostring(bce))
    assert.are.equal(bce:item(), F.binary_cross_entropy(p34, t34, {weight = w34}):item())
    local sum = F.binary_cross_entropy_with_logits(x34, t34, w34, {reduction = "sum"})
    assert.are.equal(F.binary_cross_entropy_with_logits(x34, t34, {weight = w34, reduction = "sum"}):item(), sum:item())
    support.expect_error(function() local _ = F.binary_cross_entropy(p34, t34, w34, {weight = w34}) end,
      "binary_cross_entropy: got multiple values for argument 'weight'")
    -- the per-class weight positionally: all ones is the unweighted loss
    assert.is_true(math.abs(F.cross_entropy(x34, cls, accel.ones(4)):item() - F.cross_entropy(x34, cls):item()) < 1e-6)
    assert.is_true(math.abs(F.nll_loss(x34, cls, accel.ones(4)):item() - F.nll_loss(x34, cls):item()) < 1e-6)
    support.expect_error(function() local _ = F.nll_loss(x34, cls, accel.ones(4), {weight = accel.ones(4)}) end,
      "nll_loss: got multiple values for argument 'weight'")
  end)

  it("PyTorch's positional forms still work", function()
    assert.is_nil(nn.Linear(3, 4, false).bias)
    local m = nn.Module()
    m:register_buffer("b", accel.ones(1), false)
    assert.same({}, m:state_dict_keys())
    assert.are.equal(0.2, nn.LeakyReLU(0.2).negative_slope)
    assert.is_true(nn.ReLU(true).inplace)
    assert.are.equal("tanh", nn.GELU("tanh").approximate)
    assert.are.equal(2, nn.Softmax(2).dim)
    assert.are.equal(0, nn.Embedding(4, 3, {padding_idx = 0}).padding_idx)
    assert.are.same({3, 4}, shape_of(F.dropout(x34, 0.5, {training = false})))
    assert.are.same({3, 3}, shape_of(F.embedding(ids, accel.randn(4, 3), 0)))
    assert.are.same({3, 4}, shape_of(F.layer_norm(x34, 4, accel.ones(4), accel.zeros(4), 1e-6)))
    assert.are.same({3, 4}, shape_of(F.rms_norm(x34, {4}, accel.ones(4), 1e-6)))
    local bce = nn.BCEWithLogitsLoss(accel.ones(4) * 2) -- PyTorch's first positional argument is weight
    assert.are.same({4}, shape_of(bce.weight))
  end)
end)
