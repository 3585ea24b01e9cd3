-- nn_pooling1d_spec.lua: 1-D pooling and the distances (accel.nn.pooling1d)
-- against PyTorch 2.15: outputs, input gradients and max indices from
-- tests/fixtures/pooling1d.safetensors (scripts/fixtures/
-- make_pooling1d_fixtures.py), the modules' printed forms quoted beside them.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local nn, F = accel.nn, accel.nn.functional
local close, expect_error = support.assert_close, support.expect_error
local f64 = {dtype = accel.float64}

local ref = accel.load("tests/fixtures/pooling1d.safetensors")

local function seq(n, f)
  local v = {}
  for i = 1, n do v[i] = f(i) end
  return accel.tensor(v, f64)
end
local function input() return seq(60, function(i) return math.sin(1.3 * i) end):view(2, 3, 10) end
local X2 = seq(60, function(i) return 0.5 * math.cos(i) end):view(2, 3, 10)

-- Must match CASES in the fixture script (dims 1-based here).
local CASES = {
  max_pool1d = function(x) return F.max_pool1d(x, 3) end,
  max_pool1d_args = function(x) return F.max_pool1d(x, 3, {stride = 2, padding = 1, dilation = 2, ceil_mode = true}) end,
  avg_pool1d = function(x) return F.avg_pool1d(x, 3, 2, 1) end,
  avg_pool1d_nopad = function(x) return F.avg_pool1d(x, 4, {stride = 3, padding = 2, ceil_mode = true, count_include_pad = false}) end,
  adaptive_avg_pool1d = function(x) return F.adaptive_avg_pool1d(x, 4) end,
  pairwise_distance = function(x) return F.pairwise_distance(x, X2) end,
  pairwise_distance_p1 = function(x) return F.pairwise_distance(x, X2, 1.0, 1e-3, true) end,
  cosine_similarity = function(x) return F.cosine_similarity(x, X2, 2) end,
}

describe("1-D pooling and distances match PyTorch", function()
  local names = {}
  for name in pairs(CASES) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    it(name .. ": output and input gradient", function()
      local x = input():requires_grad_(true)
      local y = CASES[name](x)
      close(y, ref[name .. ".y"], 1e-12, name)
      local _ = (y * seq(y:numel(), math.cos):view(y.shape)):sum():backward()
      close(x.grad, ref[name .. ".gx"], 1e-12, name .. " gradient")
    end)
  end

  it("max_pool1d's indices are positions along the length, as PyTorch's", function()
    local _, idx = F.max_pool1d(input(), 3, {stride = 2, return_indices = true})
    assert.are.same(ref["max_pool1d_idx.i"]:tolist(), idx:tolist())
    local y2, idx2 = F.max_pool1d(input()[1], 3, 2, 0, 1, false, true) -- unbatched (C, L), positional
    assert.are.same(ref["max_pool1d_idx.i"][1]:tolist(), idx2:tolist())
    assert.are.equal(2, y2:dim())
  end)
end)

describe("1-D pooling and distance modules", function()
  it("print as PyTorch's and forward as the functions", function()
    -- torch 2.15's str() of the same modules
    assert.are.equal("MaxPool1d(kernel_size=3, stride=3, padding=0, dilation=1, ceil_mode=False)", tostring(nn.MaxPool1d(3)))
    assert.are.equal("MaxPool1d(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)",
      tostring(nn.MaxPool1d(3, 2, 1, 2, {ceil_mode = true})))
    assert.are.equal("AvgPool1d(kernel_size=(3,), stride=(3,), padding=(0,))", tostring(nn.AvgPool1d(3)))
    assert.are.equal("AvgPool1d(kernel_size=(3,), stride=(2,), padding=(1,))", tostring(nn.AvgPool1d(3, 2, 1)))
    assert.are.equal("AdaptiveAvgPool1d(output_size=4)", tostring(nn.AdaptiveAvgPool1d(4)))
    assert.are.equal("PairwiseDistance()", tostring(nn.PairwiseDistance()))
    assert.are.equal("CosineSimilarity()", tostring(nn.CosineSimilarity()))
    local x = input()
    close(nn.MaxPool1d(3, {stride = 2, padding = 1, dilation = 2, ceil_mode = true})(x), ref["max_pool1d_args.y"], 1e-12)
    close(nn.AvgPool1d(4, 3, 2, true, false)(x), ref["avg_pool1d_nopad.y"], 1e-12)
    close(nn.AdaptiveAvgPool1d(4)(x), ref["adaptive_avg_pool1d.y"], 1e-12)
    close(nn.PairwiseDistance(1.0, 1e-3, true)(x, X2), ref["pairwise_distance_p1.y"], 1e-12)
    close(nn.CosineSimilarity()(x, X2), ref["cosine_similarity.y"], 1e-12)
  end)

  it("refuse inputs and arguments PyTorch refuses", function()
    expect_error(function() local _ = F.max_pool1d(accel.zeros(2, 3, 4, 5), 2) end,
      "max_pool1d: expected input of shape (N, C, L) or (C, L), got")
    expect_error(function() local _ = F.avg_pool1d(input(), 2.5) end, "avg_pool1d: kernel_size must be an integer")
    expect_error(function() local _ = nn.MaxPool1d(2, {ceil_mode = 1}) end, "MaxPool1d: argument 'ceil_mode' must be a boolean")
    expect_error(function() local _ = F.pairwise_distance(input(), 3) end, "pairwise_distance: x2 must be a Tensor, got number")
  end)
end)
