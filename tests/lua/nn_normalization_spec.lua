-- nn_normalization_spec.lua: BatchNorm1d / 2d / 3d, GroupNorm, AvgPool2d,
-- AdaptiveAvgPool2d and Dropout2d with their functions. References: batch
-- statistics computed here in float64 loops, float64 finite differences,
-- and PyTorch 2.15's printed forms, outputs and messages quoted beside them.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local nn, F = accel.nn, accel.nn.functional

local f64 = {dtype = accel.float64}
local close, expect_error = support.assert_close, support.expect_error
it = support.lua54_only(it, pending, {
  ["modules print as PyTorch's"] = "LuaJIT has no float subtype: 1e-05 and 0.1 print alike, but 1.0 would print as 1",
})

-- per-channel mean and biased / unbiased variance of x (N, C) as Lua lists
local function column_stats(rows)
  local n, c = #rows, #rows[1]
  local mean, var, unbiased = {}, {}, {}
  for j = 1, c do
    local s = 0
    for i = 1, n do s = s + rows[i][j] end
    mean[j] = s / n
    local q = 0
    for i = 1, n do q = q + (rows[i][j] - mean[j]) ^ 2 end
    var[j], unbiased[j] = q / n, q / (n - 1)
  end
  return mean, var, unbiased
end

describe("BatchNorm", function()
  local rows = {{1, 2}, {3, 5}, {6, 1}, {-2, 0.5}}
  local x = accel.tensor(rows, f64)
  local mean, var, unbiased = column_stats(rows)

  it("training normalizes by the batch statistics and updates the running ones with momentum", function()
    local bn = nn.BatchNorm1d(2, {dtype = accel.float64})
    local want = {}
    for i, r in ipairs(rows) do
      want[i] = {}
      for j, v in ipairs(r) do want[i][j] = (v - mean[j]) / math.sqrt(var[j] + 1e-5) end
    end
    close(bn(x), accel.tensor(want, f64), 1e-12)
    close(bn.running_mean, accel.tensor({0.1 * mean[1], 0.1 * mean[2]}, f64), 1e-12)
    close(bn.running_var, accel.tensor({0.9 + 0.1 * unbiased[1], 0.9 + 0.1 * unbiased[2]}, f64), 1e-12)
    assert.are.equal(1, bn.num_batches_tracked:item())
    bn:eval() -- the running statistics now
    local rm, rv = bn.running_mean:tolist(), bn.running_var:tolist()
    local y = bn(x):tolist()
    for i, r in ipairs(rows) do
      for j, v in ipairs(r) do assert.is_true(math.abs(y[i][j] - (v - rm[j]) / math.sqrt(rv[j] + 1e-5)) < 1e-12) end
    end
  end)

  it("momentum = false (PyTorch's None) averages the batches seen; no running stats means batch stats always", function()
    local bn = nn.BatchNorm1d(2, {momentum = false, dtype = accel.float64})
    bn(x)
    bn(x * 3)
    close(bn.running_mean, accel.tensor({(mean[1] + 3 * mean[1]) / 2, (mean[2] + 3 * mean[2]) / 2}, f64), 1e-12)
    local plain = nn.BatchNorm1d(2, {track_running_stats = false, affine = false, dtype = accel.float64})
    plain:eval()
    close(plain(x), nn.BatchNorm1d(2, {dtype = accel.float64})(x), 1e-12)
    assert.is_nil(plain.running_mean)
  end)

  it("BatchNorm2d works per channel over (N, H, W), with PyTorch's state_dict keys and gradients", function()
    accel.manual_seed(5)
    local bn = nn.BatchNorm2d(3, {dtype = accel.float64})
    local keys = {}
    for k in pairs(bn:state_dict()) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.same({"bias", "num_batches_tracked", "running_mean", "running_var", "weight"}, keys)
    local img = accel.randn(2, 3, 2, 2, f64)
    local y = bn(img)
    close(y:mean({1, 3, 4}), accel.zeros(3, f64), 1e-12)
    close(y:var({1, 3, 4}, {correction = 0}), accel.ones(3, f64), 1e-4) -- 1 up to eps
    -- d/dx of sum(bn(x) * w) against float64 central differences
    local w = accel.randn(2, 3, 2, 2, f64)
    local xi = img:clone():requires_grad_(true)
    local _ = (F.batch_norm(xi, nil, nil, nil, nil, true) * w):sum():backward()
    local flat, g = img:reshape({-1}):tolist(), xi.grad:reshape({-1}):tolist()
    for _, k in ipairs({1, 7, 19}) do
      local plus, minus = {}, {}
      for i, v in ipairs(flat) do plus[i], minus[i] = v, v end
      plus[k], minus[k] = flat[k] + 1e-6, flat[k] - 1e-6
      local function loss(list)
        return (F.batch_norm(accel.tensor(list, f64):reshape({2, 3, 2, 2}), nil, nil, nil, nil, true) * w):sum():item()
      end
      assert.is_true(math.abs((loss(plus) - loss(minus)) / 2e-6 - g[k]) < 1e-6)
    end
  end)

  it("refuses the input shapes and batch sizes PyTorch refuses (PyTorch 2.15's messages)", function()
    expect_error(function() local _ = nn.BatchNorm2d(3)(accel.zeros(2, 3, 4)) end, "BatchNorm2d: expected 4D input (got 3D input)")
    expect_error(function() local _ = nn.BatchNorm1d(3)(accel.zeros(1, 3)) end,
      "Expected more than 1 value per channel when training, got input size [1, 3]")
    expect_error(function() local _ = nn.BatchNorm1d(3, {momentum = "x"}) end, "BatchNorm1d: momentum must be a number or false")
  end)

  it("modules print as PyTorch's", function()
    assert.are.equal("BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)",
      tostring(nn.BatchNorm2d(3)))
    assert.are.equal("BatchNorm1d(4, eps=1e-05, momentum=None, affine=False, bias=False, track_running_stats=True)",
      tostring(nn.BatchNorm1d(4, {momentum = false, affine = false})))
    assert.are.equal("GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)", tostring(nn.GroupNorm(2, 4)))
    assert.are.equal("AvgPool2d(kernel_size=2, stride=2, padding=0)", tostring(nn.AvgPool2d(2)))
    assert.are.equal("AdaptiveAvgPool2d(output_size=(1, 1))", tostring(nn.AdaptiveAvgPool2d({1, 1})))
    -- PyTorch 2.15: nn.AdaptiveAvgPool2d((None, 3))
    assert.are.equal("AdaptiveAvgPool2d(output_size=(None, 3))", tostring(nn.AdaptiveAvgPool2d({nil, 3})))
    assert.are.equal("Dropout2d(p=0.3, inplace=False)", tostring(nn.Dropout2d(0.3)))
  end)
end)

-- PyTorch 2.15 on one process: SyncBatchNorm runs F.batch_norm (nothing to
-- sync); convert_sync_batchnorm keeps the parameters, buffers and mode.
-- Across processes: sync_batchnorm_test.lua.
-- PyTorch 2.15: BatchNorm2d(3).load_state_dict({weight, bias, running_mean, running_var}) matches all keys
-- (num_batches_tracked, added later, keeps its value); with strict=False and only weight: missing
-- ['bias', 'running_mean', 'running_var']
describe("BatchNorm load_state_dict", function()
  it("accepts a state dict without num_batches_tracked, as PyTorch", function()
    local bn = nn.BatchNorm2d(3)
    accel.no_grad(function() bn.num_batches_tracked:fill_(5) end)
    local missing, unexpected = bn:load_state_dict({weight = accel.full({3}, 2.0), bias = accel.zeros(3),
      running_mean = accel.zeros(3), running_var = accel.ones(3)})
    assert.are.same({}, missing)
    assert.are.same({}, unexpected)
    assert.are.equal(5, bn.num_batches_tracked:item())
    assert.are.same({2, 2, 2}, bn.weight:tolist())
    missing = bn:load_state_dict({weight = accel.ones(3)}, {strict = false})
    assert.are.same({"bias", "running_mean", "running_var"}, missing)
    expect_error(function() bn:load_state_dict({weight = accel.ones(3)}) end, 'Missing key(s) in state_dict: "bias"')
  end)
end)

describe("SyncBatchNorm on one process", function()
  it("is BatchNorm: the same outputs, gradients and running statistics, any input of at least 2 dims", function()
    accel.set_seed(5)
    local x = accel.randn(6, 3, 4, 2, f64)
    local s, b = nn.SyncBatchNorm(3, f64), nn.BatchNorm2d(3, f64)
    local xs, xb = x:clone():requires_grad_(true), x:clone():requires_grad_(true)
    local ys, yb = s(xs), b(xb)
    close(ys, yb, 1e-12)
    ys:pow(2):sum():backward()
    yb:pow(2):sum():backward()
    close(xs.grad, xb.grad, 1e-12)
    close(s.running_var, b.running_var, 1e-12)
    assert.are.equal(1, s.num_batches_tracked:item())
    assert.are.same({5, 3}, support.shape_of(nn.SyncBatchNorm(3)(accel.randn(5, 3))))
    -- torch: 'SyncBatchNorm(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)'
    assert.are.equal("SyncBatchNorm(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)",
      tostring(nn.SyncBatchNorm(4)))
  end)

  it("convert_sync_batchnorm replaces every BatchNorm, keeping its tensors, options and mode", function()
    local bn = nn.BatchNorm1d(5, {momentum = 0.2, eps = 1e-3})
    local m = nn.Sequential(nn.Linear(4, 5), bn, nn.Sequential(nn.ReLU(), nn.BatchNorm1d(5, {affine = false})))
    m:eval()
    local c = nn.SyncBatchNorm.convert_sync_batchnorm(m)
    assert.are.equal(m, c) -- a container is converted in place
    local s = c[2]
    assert.are.equal("SyncBatchNorm", s:_get_name())
    assert.are.equal(bn.weight, s.weight)
    assert.are.equal(bn.running_mean, s.running_mean)
    assert.are.same({0.2, 1e-3, false}, {s.momentum, s.eps, s.training})
    assert.are.equal("SyncBatchNorm", c[3][2]:_get_name())
    assert.is_nil(c[3][2].weight)
    local lone = nn.SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm2d(2)) -- a BatchNorm itself: a new module
    assert.are.equal("SyncBatchNorm", lone:_get_name())
  end)

  it("refuses what PyTorch refuses, and a process_group that is not a group", function()
    -- torch: 'expected at least 2D input (got 1D input)'
    expect_error(function() local _ = nn.SyncBatchNorm(3)(accel.randn(3)) end,
      "SyncBatchNorm: expected at least 2D input (got 1D input)")
    expect_error(function() local _ = nn.SyncBatchNorm(3, {process_group = "world"}) end,
      "SyncBatchNorm: process_group must be an accel.dist Group")
    expect_error(function() local _ = nn.SyncBatchNorm(3, {groups = 2}) end, "SyncBatchNorm: unknown option")
  end)
end)

-- torch 2.15, x = cos(0.7 i) for i = 0..23 as (2, 3, 4) float64, InstanceNorm1d(3, affine=True,
-- track_running_stats=True): y[0, 0] = [1.1028745146089265, 0.6992233900227613, -0.3218865526200559,
-- -1.4802113520116322]; running_mean [-0.018037627884545878, 0.006860392978586056, 0.005109596824165494],
-- running_var [0.9258952420457374, 0.9198974777838085, 0.9194458095454969], num_batches_tracked 0; then in eval
-- y[1, 2] = [0.13727188667860607, -0.5617934797287939, -0.9991447648352185, -0.9690888254527784]
describe("InstanceNorm", function()
  local function input()
    local xs = {}
    for i = 0, 23 do xs[#xs + 1] = math.cos(0.7 * i) end
    return accel.tensor(xs, f64):view(2, 3, 4)
  end

  it("normalizes each (sample, channel) plane, running statistics and eval as PyTorch's", function()
    local m = nn.InstanceNorm1d(3, {affine = true, track_running_stats = true}):double()
    local y = m(input())
    close(y[1][1], accel.tensor({1.1028745146089265, 0.6992233900227613, -0.3218865526200559, -1.4802113520116322}, f64))
    close(m.running_mean, accel.tensor({-0.018037627884545878, 0.006860392978586056, 0.005109596824165494}, f64))
    close(m.running_var, accel.tensor({0.9258952420457374, 0.9198974777838085, 0.9194458095454969}, f64))
    assert.are.equal(0, m.num_batches_tracked:item())
    m:eval()
    close(m(input())[2][3], accel.tensor({0.13727188667860607, -0.5617934797287939, -0.9991447648352185,
      -0.9690888254527784}, f64))
  end)

  it("without affine or running statistics: each plane has mean 0 and variance 1; unbatched input; gradients", function()
    local x = accel.randn(2, 3, 4, 5, f64):requires_grad_(true)
    local y = nn.InstanceNorm2d(3)(x)
    close(y:mean({3, 4}), accel.zeros(2, 3, f64), 1e-12)
    close(y:var({3, 4}, {correction = 0}), accel.ones(2, 3, f64), 1e-4) -- (eps = 1e-5 in the denominator)
    close(nn.InstanceNorm2d(3)(x[1]), y[1], 1e-15)
    dofile("tests/lua/gradcheck.lua").check(function(t) return F.instance_norm(t) end,
      {accel.randn(2, 2, 3, f64):requires_grad_(true)})
  end)

  it("prints, keys its state and refuses input as PyTorch's", function()
    -- torch 2.15: "InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=False, bias=False, track_running_stats=False)";
    -- state_dict keys with track_running_stats: num_batches_tracked, running_mean, running_var
    assert.are.equal("InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=False, bias=False, track_running_stats=False)",
      tostring(nn.InstanceNorm2d(4)))
    local keys = {}
    for k in pairs(nn.InstanceNorm2d(4, {track_running_stats = true}):state_dict()) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.are.same({"num_batches_tracked", "running_mean", "running_var"}, keys)
    -- torch: "Expected more than 1 spatial element when training, got input size torch.Size([2, 3, 1])"
    expect_error(function() local _ = nn.InstanceNorm1d(3)(accel.ones(2, 3, 1)) end,
      "Expected more than 1 spatial element when training")
    expect_error(function() local _ = nn.InstanceNorm2d(3)(accel.ones(2, 3)) end, "InstanceNorm2d: expected 3D or 4D input")
  end)
end)

describe("GroupNorm, pooling and Dropout2d", function()
  it("GroupNorm normalizes each group of channels (PyTorch 2.15's values)", function()
    -- torch 2.15: nn.GroupNorm(2, 4)(torch.arange(16.).view(2, 4, 2)): each group [-1.3416, -0.4472, 0.4472, 1.3416]
    local y = nn.GroupNorm(2, 4, {dtype = accel.float64})(accel.arange(16):double():view(2, 4, 2))
    local s = 1 / math.sqrt(1.25 + 1e-5)
    local g = {{-1.5 * s, -0.5 * s}, {0.5 * s, 1.5 * s}}
    close(y, accel.tensor({{g[1], g[2], g[1], g[2]}, {g[1], g[2], g[1], g[2]}}, f64), 1e-12)
    expect_error(function() local _ = F.group_norm(accel.zeros(2, 3), 2) end,
      "group_norm: Expected number of channels in input to be divisible by num_groups")
  end)

  it("adaptive_avg_pool2d averages PyTorch's cells; AvgPool2d is avg_pool2d", function()
    -- torch 2.15: F.adaptive_avg_pool2d(torch.arange(30.).view(1, 1, 5, 6), (2, 4))
    local y = F.adaptive_avg_pool2d(accel.arange(30):double():view(1, 1, 5, 6), {2, 4})
    assert.same({{{{6.5, 7.5, 9.5, 10.5}, {18.5, 19.5, 21.5, 22.5}}}}, y:tolist())
    local img = accel.randn(2, 3, 4, 4, f64)
    close(nn.AdaptiveAvgPool2d(1)(img), img:mean({3, 4}, true), 1e-12)
    close(nn.AvgPool2d(2)(img), F.avg_pool2d(img, 2), 0)
  end)

  it("Dropout2d zeroes whole channels and scales the rest", function()
    accel.manual_seed(9)
    local x = accel.ones(8, 16, 3, 3)
    local y = F.dropout2d(x, 0.5)
    local per_channel = y:amax({3, 4})
    assert.is_true(y:eq(0):logical_or(y:eq(2)):all():item())
    close(y:amin({3, 4}), per_channel, 0) -- each channel all 0 or all 2
    local d = nn.Dropout2d(0.5)
    d:eval()
    assert.are.equal(x, d(x))
  end)

  -- torch 2.15: Dropout1d(p=0.3, inplace=False); dropout1d of a 4-D input: "Expected 2D or 3D input"
  it("Dropout1d and Dropout3d zero whole channels of 1 and 3 spatial dims", function()
    accel.manual_seed(10)
    local y1 = F.dropout1d(accel.ones(4, 16, 5), 0.5)
    close(y1:amin(3), y1:amax(3), 0)
    assert.is_true(y1:eq(0):logical_or(y1:eq(2)):all():item())
    local y3 = nn.Dropout3d(0.25)(accel.ones(2, 8, 2, 3, 2))
    close(y3:amin({3, 4, 5}), y3:amax({3, 4, 5}), 0)
    assert.are.equal("Dropout1d(p=0.3, inplace=False)", tostring(nn.Dropout1d(0.3)))
    expect_error(function() local _ = F.dropout1d(accel.ones(2, 3, 4, 5)) end, "dropout1d: expected a 2-D or 3-D input, got 4D")
  end)
end)
