-- autocast_lists_spec.lua: which ops autocast runs in float32, which in the
-- half dtype and which it leaves alone, against PyTorch 2.15's CPU autocast
-- (tests/fixtures/autocast_dtypes.lua, written by
-- scripts/fixtures/make_autocast_fixtures.py): the result dtype of each op
-- under bf16 and fp16 autocast, from half and from float32 inputs.
local accel = require("accel")
local amp = require("accel.amp")
local F = accel.nn.functional

local ref = dofile("tests/fixtures/autocast_dtypes.lua")

-- name -> the op on inputs of dtype lp; must match cases() in the fixture script
local function cases(lp)
  local x = accel.linspace(-2, 2, 32):reshape({4, 8}):to(lp)
  local v = accel.linspace(-1, 1, 128):reshape({1, 2, 4, 4, 4}):to(lp)
  local ones, img = accel.ones(4, 8), v[1][1]
  local pooled, idx = F.max_pool2d(accel.linspace(-1, 1, 32):reshape({1, 2, 4, 4}), 2, {return_indices = true})
  local pooled3, idx3 = F.max_pool3d(accel.linspace(-1, 1, 128):reshape({1, 2, 4, 4, 4}), 2, {return_indices = true})
  return {
    matmul = function() return accel.matmul(x, x:t()) end,
    linear = function() return F.linear(x, x) end,
    prelu = function() return F.prelu(x, accel.ones(1)) end,
    softmax = function() return F.softmax(x, 2) end,
    layer_norm = function() return F.layer_norm(x, {8}) end,
    sum = function() return x:sum() end,
    exp = function() return x:exp() end,
    mse_loss = function() return F.mse_loss(x, x * 2) end,
    cross_entropy = function() return F.cross_entropy(x, accel.tensor({0, 1, 2, 3})) end,
    prod = function() return x:prod() end,
    cdist = function() return accel.cdist(x, x) end,
    hinge_embedding_loss = function() return F.hinge_embedding_loss(x, ones) end,
    cosine_embedding_loss = function() return F.cosine_embedding_loss(x, x * 2, accel.ones(4)) end,
    triplet_margin_loss = function() return F.triplet_margin_loss(x, x * 2, x * 3) end,
    multi_margin_loss = function() return F.multi_margin_loss(x, accel.tensor({0, 1, 2, 3})) end,
    multilabel_margin_loss = function() return F.multilabel_margin_loss(x, accel.zeros({4, 8}, {dtype = accel.int64})) end,
    poisson_nll_loss = function() return F.poisson_nll_loss(x, x:abs()) end,
    gaussian_nll_loss = function() return F.gaussian_nll_loss(x, x * 2, x:abs() + 1) end,
    ctc_loss = function()
      return F.ctc_loss(x:reshape({4, 1, 8}):log_softmax(3), accel.tensor({{1, 2}}), accel.tensor({4}), accel.tensor({2}))
    end,
    avg_pool3d = function() return F.avg_pool3d(v, 2) end,
    max_pool3d = function() return F.max_pool3d(v, 2) end,
    adaptive_avg_pool3d = function() return F.adaptive_avg_pool3d(v, 1) end,
    adaptive_max_pool3d = function() return F.adaptive_max_pool3d(v, 1) end,
    adaptive_max_pool2d = function() return F.adaptive_max_pool2d(img, 2) end,
    lp_pool3d = function() return F.lp_pool3d(v, 2, 2) end,
    fractional_max_pool2d = function() return F.fractional_max_pool2d(img, 2, {output_size = 2}) end,
    fractional_max_pool3d = function() return F.fractional_max_pool3d(v, 2, {output_size = 2}) end,
    max_unpool2d = function() return F.max_unpool2d(pooled:to(lp), idx, 2) end,
    max_unpool3d = function() return F.max_unpool3d(pooled3:to(lp), idx3, 2) end,
    pad_reflect_2d = function() return F.pad(img, {1, 1, 1, 1}, "reflect") end,
    pad_reflect_3d = function() return F.pad(v, {1, 1, 1, 1, 1, 1}, "reflect") end,
    pad_replicate_3d = function() return F.pad(v, {1, 1, 1, 1, 1, 1}, "replicate") end,
    pad_circular = function() return F.pad(img, {1, 1, 1, 1}, "circular") end,
    grid_sample = function() return F.grid_sample(img:unsqueeze(1), accel.zeros(1, 2, 2, 2), {align_corners = false}) end,
    local_response_norm_4d = function() return F.local_response_norm(img:unsqueeze(1), 2) end,
    local_response_norm_3d = function() return F.local_response_norm(x:reshape({1, 4, 8}), 2) end,
    avg_pool2d = function() return F.avg_pool2d(img, 2) end,
  }
end

for _, mode in ipairs({"bf16", "fp16"}) do
  local dtype = amp.dtype_of(mode)
  for _, inputs in ipairs({"lp", "f32"}) do
    describe(("under %s autocast, from %s inputs"):format(mode, inputs == "lp" and "half" or "float32"), function()
      local ops = cases(inputs == "lp" and dtype or accel.float32)
      local names = {}
      for name in pairs(ref[mode][inputs]) do names[#names + 1] = name end
      table.sort(names)
      for _, name in ipairs(names) do
        it(name .. " gives PyTorch's dtype", function()
          assert.is_function(ops[name], "no case " .. name)
          local got = amp.run(dtype, ops[name])
          assert.are.equal(ref[mode][inputs][name], got.dtype.name)
        end)
      end
    end)
  end
end
