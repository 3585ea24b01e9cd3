-- Activation checkpointing (accel.utils.checkpoint, checkpoint_module) and
-- the engine features under it: a backward run inside a backward (part of
-- the outer pass, refused when it reaches the outer graph), nodes recorded
-- without saved tensors, backward from several roots, multi-output custom
-- nodes. Expected values: the same computation without checkpointing (same
-- ops in the same order: bitwise), float64 finite differences (gradcheck),
-- closed forms.
local accel = require("accel")
local gc = dofile("tests/lua/gradcheck.lua")
local support = dofile("tests/lua/support.lua")
-- Checks that need Lua 5.4 semantics are skipped (counted) under LuaJIT:
it = support.lua54_only(it, pending, {
  ["GPT-2 blocks with dropout 0.1 in train mode: the masks are replayed, gradients equal bitwise"] = support.NO_LEN,
})

local nn, F = accel.nn, accel.nn.functional
local utils = accel.utils
local f64 = accel.float64
local errmsg, expect_error = support.errmsg, support.expect_error

local function assert_same(a, b, what)
  assert(a ~= nil and b ~= nil, (what or "tensor") .. ": missing")
  local d = support.max_abs_diff(a, b)
  assert(d == 0, ("%s: max abs difference %g (expected bitwise equal)"):format(what or "tensor", d))
end

local function assert_close(a, b, tol, what)
  local d = support.max_abs_diff(a, b)
  assert(d <= tol, ("%s: max abs difference %g > %g"):format(what or "tensor", d, tol))
end

-- Gradients of every parameter, by name (cloned).
local function grads_of(model)
  local g = {}
  for name, p in model:named_parameters() do g[name] = p.grad and p.grad:clone() or false end
  return g
end

local function assert_same_grads(g1, g2)
  local n = 0
  for name, a in pairs(g1) do
    n = n + 1
    assert(a, name .. ": no gradient without checkpointing")
    assert_same(a, g2[name] or nil, name)
  end
  assert(n > 0, "no parameters compared")
end

-- An MLP block with a residual: x + W2 gelu(W1 ln(x)).
local function mlp_block(d, h)
  local b = nn.Module:extend("MLPBlock")
  function b:init()
    self.ln = nn.LayerNorm(d)
    self.fc1 = nn.Linear(d, h)
    self.fc2 = nn.Linear(h, d)
  end
  function b:forward(x) return x + self.fc2(F.gelu(self.fc1(self.ln(x)))) end
  return b()
end

describe("accel.utils.checkpoint", function()
  it("is reachable as accel.utils", function()
    assert.equal("function", type(accel.utils.checkpoint))
    assert.equal(require("accel.utils"), accel.utils)
  end)

  for _, reentrant in ipairs({false, true}) do
    it(("MLP block: input and parameter gradients equal to no checkpointing, bitwise (use_reentrant = %s)")
      :format(tostring(reentrant)), function()
      accel.set_seed(1)
      local block = mlp_block(16, 64)
      local x = accel.randn(4, 8, 16, {requires_grad = true})
      local w = accel.randn(4, 8, 16)
      ;(block(x) * w):sum():backward()
      local gx, gp = x.grad:clone(), grads_of(block)
      x.grad = nil
      block:zero_grad({set_to_none = true})
      local y = utils.checkpoint(block, x, {use_reentrant = reentrant})
      assert.equal("CheckpointFunction", y.grad_fn)
      ;(y * w):sum():backward()
      assert_same(gx, x.grad, "x.grad")
      assert_same_grads(gp, grads_of(block))
    end)
  end

  it("GPT-2 blocks with dropout 0.1 in train mode: the masks are replayed, gradients equal bitwise", function()
    local gpt2 = accel.models.gpt2
    local config = gpt2.GPT2Config{vocab_size = 64, n_positions = 16, n_embd = 32, n_layer = 3, n_head = 4, dropout = 0.1}
    accel.set_seed(7)
    local model = gpt2.GPT2LMHeadModel(config)
    model:train()
    local ids = accel.randint(0, 64, {2, 16})
    local function step()
      model:zero_grad({set_to_none = true})
      accel.set_seed(123)
      local _, loss = model(ids, {targets = ids})
      loss:backward()
      return loss:item(), grads_of(model), {accel.get_rng_state()}
    end
    local loss0, g0, rng0 = step()
    for i = 1, #model.transformer.h do utils.checkpoint_module(model.transformer.h[i]) end
    local loss1, g1, rng1 = step()
    assert.equal(loss0, loss1)
    assert_same_grads(g0, g1)
    assert.same(rng0, rng1) -- the generator is where it would be without the recompute
    -- the replay is what makes them equal: without it the recompute draws new masks
    for i = 1, #model.transformer.h do utils.checkpoint_module(model.transformer.h[i], {preserve_rng_state = false}) end
    local _, g2 = step()
    local differs = false
    for name, a in pairs(g0) do
      if support.max_abs_diff(a, g2[name]) > 1e-6 then differs = true end
    end
    assert.is_true(differs)
  end)

  it("replaying the generator state reproduces dropout masks", function()
    local x = accel.ones(1000)
    local st = {accel.get_rng_state()}
    local m1 = F.dropout(x, 0.1, {training = true})
    accel.set_rng_state(st[1], st[2])
    local m2 = F.dropout(x, 0.1, {training = true})
    assert_same(m1, m2, "mask")
    local zeros = (m1:eq(0)):sum():item()
    assert.is_true(zeros > 50 and zeros < 150) -- about 10 % dropped
  end)

  it("nested checkpoints", function()
    accel.set_seed(3)
    local b1, b2 = mlp_block(8, 16), mlp_block(8, 16)
    local x = accel.randn(5, 8, {requires_grad = true})
    local function two(h) return b2(b1(h)) end
    two(x):pow(2):sum():backward()
    local gx, g1, g2 = x.grad:clone(), grads_of(b1), grads_of(b2)
    x.grad = nil
    b1:zero_grad({set_to_none = true})
    b2:zero_grad({set_to_none = true})
    local y = utils.checkpoint(function(h)
      return utils.checkpoint(b2, utils.checkpoint(b1, h))
    end, x)
    y:pow(2):sum():backward()
    assert_same(gx, x.grad, "x.grad")
    assert_same_grads(g1, grads_of(b1))
    assert_same_grads(g2, grads_of(b2))
  end)

  it("passes float64 gradcheck (two inputs, a parameter, both variants, nested)", function()
    local w = gc.randn(3, 3)
    local function fn(a, b) return (accel.matmul(a, w) * b):tanh() + a:exp() * 0.5 end
    for _, reentrant in ipairs({false, true}) do
      gc.check(function(a, b) return utils.checkpoint(fn, a, b, {use_reentrant = reentrant}) end,
        {gc.randn(2, 3), gc.randn(2, 3), w})
    end
    gc.check(function(a, b)
      return utils.checkpoint(function(p, q) return utils.checkpoint(fn, p, q) * q end, a, b)
    end, {gc.randn(2, 3), gc.randn(2, 3)})
  end)

  it("several outputs, non-tensor arguments passed through, an output that needs no grad", function()
    local function fn(a, k, opts, b)
      local h = a * b
      return h:sin() * k, (h:cos() + opts.shift), "label", accel.tensor({1, 2}) -- the last needs no grad
    end
    local p, q, s, r = utils.checkpoint(fn, gc.randn(3), 2.5, {shift = 1}, gc.randn(3))
    assert.equal("label", s)
    assert.is_true(p.requires_grad and q.requires_grad)
    assert.is_false(r.requires_grad)
    assert.same({1, 2}, r:tolist())
    gc.check(function(a, b)
      local u, v = utils.checkpoint(fn, a, 2.5, {shift = 1}, b)
      return u * 3 + v * v
    end, {gc.randn(3), gc.randn(3)})
    -- only one of the outputs used: the other one's gradient is nil in the recompute
    gc.check(function(a, b)
      local _, v = utils.checkpoint(fn, a, 2.5, {shift = 1}, b)
      return v
    end, {gc.randn(3), gc.randn(3)})
  end)

  it("an argument returned as it is, the same result twice, an unused argument (both variants)", function()
    for _, re in ipairs({false, true}) do
      local o = {use_reentrant = re}
      gc.check(function(a)
        local p, q = utils.checkpoint(function(x) return x, x * 2 end, a, o)
        return p * q
      end, {gc.randn(3)})
      gc.check(function(a)
        local p, q = utils.checkpoint(function(x) local h = x:sin(); return h, h end, a, o)
        return p * 3 + q
      end, {gc.randn(3)})
      local a, b = gc.randn(3), gc.randn(3)
      utils.checkpoint(function(x, _) return x * 2 end, a, b, o):sum():backward()
      assert.same({2, 2, 2}, a.grad:tolist())
      assert.is_nil(b.grad)
    end
  end)

  it("an output that does not depend on anything requiring grad does not require grad", function()
    local x = gc.randn(4)
    local y, mask = utils.checkpoint(function(a) return a * 2, (a:detach():gt(0)):double() end, x)
    assert.is_true(y.requires_grad)
    assert.is_false(mask.requires_grad)
  end)

  it("inputs that do not require grad: parameters inside still get their gradients", function()
    accel.set_seed(5)
    local block = mlp_block(8, 16)
    local x = accel.randn(3, 8)
    block(x):sum():backward()
    local g = grads_of(block)
    block:zero_grad({set_to_none = true})
    local y = utils.checkpoint(block, x)
    assert.is_true(y.requires_grad)
    y:sum():backward()
    assert_same_grads(g, grads_of(block))
    assert.is_nil(x.grad)
  end)

  it("use_reentrant = true without an input requiring grad: no graph, as PyTorch's reentrant variant", function()
    local block = mlp_block(4, 8)
    local y = utils.checkpoint(block, accel.randn(2, 4), {use_reentrant = true})
    assert.is_false(y.requires_grad)
  end)

  it("one input requires grad, another does not", function()
    local a, b = gc.randn(3), accel.randn(3, {dtype = f64})
    local y = utils.checkpoint(function(p, q) return p * q end, a, b)
    y:sum():backward()
    assert_same(a.grad, b, "a.grad")
    assert.is_nil(b.grad)
  end)

  it("autocast during the recompute is the forward's, also when backward runs outside autocast", function()
    local amp = require("accel.amp")
    accel.set_seed(9)
    local block = mlp_block(16, 32)
    local x = accel.randn(4, 16, {requires_grad = true})
    local y0 = amp.run(accel.bfloat16, block, x)
    y0:float():sum():backward()
    local gx, gp = x.grad:clone(), grads_of(block)
    x.grad = nil
    block:zero_grad({set_to_none = true})
    local y1 = amp.run(accel.bfloat16, utils.checkpoint, block, x)
    assert.equal(y0.dtype, y1.dtype)
    y1:float():sum():backward() -- outside autocast
    assert_same(gx, x.grad, "x.grad")
    assert_same_grads(gp, grads_of(block))
    -- and a float32 forward is recomputed in float32 when backward runs
    -- inside autocast (whose GEMMs in backward are the same either way)
    x.grad = nil
    local y2 = utils.checkpoint(block, x)
    amp.run(accel.bfloat16, function() y2:sum():backward() end)
    local gx32 = x.grad:clone()
    x.grad = nil
    local y3 = block(x)
    amp.run(accel.bfloat16, function() y3:sum():backward() end)
    assert_same(x.grad, gx32, "x.grad (float32 forward)")
  end)

  it("under no_grad it just calls fn", function()
    local calls = 0
    local y = accel.no_grad(function()
      return utils.checkpoint(function(a) calls = calls + 1; return a * 2 end, gc.randn(2))
    end)
    assert.is_false(y.requires_grad)
    assert.equal(1, calls)
  end)

  -- retain_graph = true on the first backward: the second runs the recompute again and adds the same
  -- gradients (torch.utils.checkpoint(use_reentrant=False) allows it too); then the graph is gone
  it("a second backward after retain_graph = true recomputes and matches the plain graph's gradients", function()
    accel.set_seed(3)
    local block = mlp_block(6, 12)
    local x = accel.randn(4, 6)
    local y = utils.checkpoint(block, x):sum()
    y:backward(nil, true)
    y:backward()
    local twice = grads_of(block)
    block:zero_grad()
    local plain = block(x):sum()
    plain:backward(nil, true)
    plain:backward()
    assert_same_grads(grads_of(block), twice)
    assert.matches("a second time", errmsg(function() y:backward() end))
  end)

  it("fn runs once in forward and once more in backward", function()
    local calls = 0
    local y = utils.checkpoint(function(a) calls = calls + 1; return a * 2 end, gc.randn(2))
    assert.equal(1, calls)
    y:sum():backward()
    assert.equal(2, calls)
  end)

  it("peak live bytes lower for a deep stack of blocks whose activations dominate", function()
    accel.set_seed(11)
    local L, W, H, B = 12, 64, 256, 256
    local blocks = {}
    for i = 1, L do blocks[i] = nn.Sequential(nn.Linear(W, H), nn.GELU(), nn.Linear(H, W), nn.Tanh()) end
    local x = accel.randn(B, W, {requires_grad = true})
    local function peak(ck)
      for i = 1, L do blocks[i]:zero_grad({set_to_none = true}) end
      x.grad = nil
      collectgarbage()
      collectgarbage()
      accel.reset_peak_memory_stats()
      local base = (accel.memory_stats())
      local h = x
      for i = 1, L do
        if ck then h = utils.checkpoint(blocks[i], h) else h = blocks[i](h) end
      end
      h:sum():backward()
      local _, _, p = accel.memory_stats()
      return p - base, x.grad:clone()
    end
    local plain, g0 = peak(false)
    local ck, g1 = peak(true)
    assert_same(g0, g1, "x.grad")
    -- without: every block's 4 activations (2.6 MB in all here); with: the 12
    -- block inputs, one block's recompute, and the parameters' gradients
    assert.is_true(ck < 0.5 * plain, ("peak with checkpointing %d bytes, without %d (ratio %.2f)"):format(ck, plain, ck / plain))
  end)
end)

describe("accel.utils.checkpoint errors", function()
  it("fn not a function", function()
    expect_error(function() utils.checkpoint(42, gc.randn(2)) end, "checkpoint: fn must be a function", "number")
  end)

  it("fn that returns no tensor", function()
    expect_error(function() utils.checkpoint(function() return 1, "x" end, gc.randn(2)) end,
      "checkpoint: fn must return at least one tensor", "number")
    expect_error(function() utils.checkpoint(function(a) return {a} end, gc.randn(2)) end,
      "tables are not looked into", "table")
    expect_error(function() utils.checkpoint(function() end, gc.randn(2)) end, "got nothing")
  end)

  it("an unknown option next to a known one", function()
    expect_error(function() utils.checkpoint(function(a) return a end, gc.randn(2), {use_reentrant = false, verbose = true}) end,
      "unknown option 'verbose'")
  end)

  it("PyTorch keywords we do not support: an error unless set to what asks for nothing", function()
    local function id(a) return a * 1 end
    expect_error(function() utils.checkpoint(id, gc.randn(2), {debug = true}) end, "option 'debug' is not supported")
    expect_error(function() utils.checkpoint(id, gc.randn(2), {determinism_check = "strict"}) end,
      'determinism_check must be "default" or "none", got "strict"')
    assert.is_true(utils.checkpoint(id, gc.randn(2), {determinism_check = "none", debug = false}).requires_grad)
    assert.is_true(utils.checkpoint(id, gc.randn(2), {determinism_check = "default"}).requires_grad)
  end)

  -- torch 2.15 (use_reentrant=False): a fn whose recompute differs raises CheckpointError "Recomputed values for
  -- the following tensors have different metadata than during the forward pass"; determinism_check="none" does not
  it("a recompute that computes something else is an error, unless determinism_check = \"none\"", function()
    local function flaky(again) -- fn(a) = a * 2 in the forward, again(a) in the recompute
      local calls = 0
      return function(a)
        calls = calls + 1
        if calls == 1 then return a * 2 end
        return again(a)
      end
    end
    local x = gc.randn(3):requires_grad_(true)
    local y = utils.checkpoint(flaky(function(a) return (a * 2):sum() end), x)
    local dev = tostring(x.device)
    expect_error(function() y:sum():backward() end,
      ("checkpoint: the recompute in backward gave result 1 with shape [], float64, %s, the forward with shape [3], "
      .. "float64, %s"):format(dev, dev))
    local w = utils.checkpoint(flaky(function(a) return a * 2, a end), x)
    expect_error(function() w:sum():backward() end, "checkpoint: the recompute in backward returned 2 values, the forward 1")
    -- the same metadata passes either way (as PyTorch's check); without the check a different shape is not caught
    local z = utils.checkpoint(flaky(function(a) return a * 3 end), x, {determinism_check = "none"})
    z:sum():backward()
    assert_close(x.grad, accel.full({3}, 3, {dtype = x.dtype}), 0)
  end)

  it("a trailing table without option names is an argument of fn", function()
    local y = utils.checkpoint(function(a, t) return a * t.k end, gc.randn(2), {k = 3})
    assert.is_true(y.requires_grad)
  end)

  it("backward twice through a checkpoint", function()
    local x = gc.randn(3)
    local y = utils.checkpoint(function(a) return a:exp() end, x)
    y:backward(accel.ones(3, {dtype = f64}))
    local msg = expect_error(function() y:backward(accel.ones(3, {dtype = f64})) end,
      "backward through CheckpointFunction a second time")
    assert.truthy(msg:find("call backward once per forward", 1, true))
    -- several outputs: the same through any of them
    local p, q = utils.checkpoint(function(a) return a:exp(), a:sin() end, x)
    ;(p + q):sum():backward()
    expect_error(function() q:backward(accel.ones(3, {dtype = f64})) end, "backward through CheckpointFunction a second time")
  end)

  it("an argument modified in place between forward and backward", function()
    local x = gc.randn(3)
    local b = accel.randn(3, {dtype = f64})
    local y = utils.checkpoint(function(p, q) return p * q end, x, b)
    b:add_(1)
    expect_error(function() y:sum():backward() end,
      "checkpoint: argument 2 (shape [3]) was modified by an in-place operation")
  end)

  it("_version counts in-place writes to the storage", function()
    local t = accel.zeros(3)
    local v0 = t._version
    t:add_(1)
    assert.equal(v0 + 1, t._version)
    local view = t:narrow(1, 1, 2)
    view:mul_(2)
    assert.equal(v0 + 2, t._version)
    assert.equal(t._version, view._version)
  end)

  it("an error in fn leaves the runtime as it was (saving on, autocast and rng state kept)", function()
    local C = accel._C
    local x = gc.randn(3)
    local st = {accel.get_rng_state()}
    assert.truthy(errmsg(function() utils.checkpoint(function() error("fn failed here") end, x) end):find("fn failed here"))
    assert.is_true(C.set_keep_saved(true)) -- it was back on
    assert.is_nil(C.set_autocast(nil))
    assert.same(st, {accel.get_rng_state()})
    ;(x * x):sum():backward() -- a plain graph still keeps its tensors
    assert_same(x.grad, x:detach() * 2, "x.grad")
  end)

  it("an error in the recompute is reported by backward", function()
    local n = 0
    local y = utils.checkpoint(function(a)
      n = n + 1
      if n == 2 then error("recompute broke") end
      return a * 2
    end, gc.randn(3))
    local msg = errmsg(function() y:sum():backward() end)
    assert.truthy(msg:find("CheckpointFunction backward failed", 1, true))
    assert.truthy(msg:find("recompute broke", 1, true))
    assert.is_true(accel._C.set_keep_saved(true))
  end)

  it("backward through a tensor kept from inside the checkpoint's forward: a clear error, no crash", function()
    local inner
    local y = utils.checkpoint(function(a) inner = a:tanh(); return inner * 2 end, gc.randn(3))
    assert.is_true(inner.requires_grad)
    expect_error(function() inner:sum():backward() end, "recorded inside activation checkpointing's forward")
    y:sum():backward() -- the checkpoint itself is fine
  end)

  it("a captured non-leaf tensor that requires grad: the nested backward refuses the outer graph", function()
    local x = gc.randn(3)
    local h = x * 2 -- computed outside, captured by fn
    local y = utils.checkpoint(function(a) return a * h end, gc.randn(3))
    local msg = errmsg(function() (y + h):sum():backward() end)
    assert.truthy(msg:find("reached", 1, true) and msg:find("pass the tensors", 1, true), msg)
  end)

  it("captured leaves (parameters) are fine", function()
    local w = gc.randn(3)
    gc.check(function(a) return utils.checkpoint(function(b) return b * w end, a) + w end, {gc.randn(3), w})
  end)
end)

describe("accel.utils.checkpoint_module", function()
  it("wraps a module's forward and undoes it", function()
    accel.set_seed(2)
    local block = mlp_block(8, 16)
    local x = accel.randn(2, 8, {requires_grad = true})
    assert.is_nil(block(x).grad_fn == "CheckpointFunction" or nil)
    assert.equal(block, utils.checkpoint_module(block))
    assert.is_true(utils.is_checkpointed(block))
    assert.equal("CheckpointFunction", block(x).grad_fn)
    block(x):sum():backward()
    local g = x.grad:clone()
    x.grad = nil
    utils.checkpoint_module(block, {enabled = false})
    assert.is_false(utils.is_checkpointed(block))
    local y = block(x)
    assert.are_not.equal("CheckpointFunction", y.grad_fn)
    y:sum():backward()
    assert_same(g, x.grad, "x.grad")
    -- other instances of the class are untouched
    local other = mlp_block(8, 16)
    utils.checkpoint_module(block)
    assert.are_not.equal("CheckpointFunction", other(x).grad_fn)
  end)

  it("forward hooks still run, around the checkpointed forward", function()
    local block = mlp_block(4, 8)
    local seen = 0
    block:register_forward_hook(function(_, _, res) seen = seen + 1 end)
    utils.checkpoint_module(block)
    local y = block(gc.randn(2, 4):float():detach():requires_grad_(true))
    assert.equal(1, seen)
    assert.equal("CheckpointFunction", y.grad_fn)
  end)

  it("a forward an instance had before is kept, and comes back on undo", function()
    local block = mlp_block(4, 8)
    local own = function(self, x) return x * 3 end
    block.forward = own
    utils.checkpoint_module(block)
    local x = gc.randn(2, 4):float():detach():requires_grad_(true)
    local y = block(x)
    assert.equal("CheckpointFunction", y.grad_fn)
    assert_same(y, x * 3, "y")
    utils.checkpoint_module(block, {enabled = false})
    assert.equal(own, block.forward)
  end)

  it("undo after the forward was replaced again: a clear error", function()
    local block = utils.checkpoint_module(mlp_block(4, 8))
    block.forward = function(self, x) return x end
    expect_error(function() utils.checkpoint_module(block, {enabled = false}) end, "MLPBlock.forward was replaced")
  end)

  it("apply_activation_checkpointing wraps the modules check_fn selects", function()
    local gpt2 = accel.models.gpt2
    local model = gpt2.GPT2LMHeadModel(gpt2.GPT2Config{vocab_size = 16, n_positions = 8, n_embd = 8, n_layer = 3, n_head = 2})
    local done = utils.apply_activation_checkpointing(model, {
      check_fn = function(m) return m:_get_name() == "GPT2Block" end, use_reentrant = false})
    assert.equal(3, #done)
    for i = 1, 3 do
      assert.equal(model.transformer.h[i], done[i])
      assert.is_true(utils.is_checkpointed(model.transformer.h[i]))
    end
    assert.is_false(utils.is_checkpointed(model.transformer))
    expect_error(function() utils.apply_activation_checkpointing(model, {check_fn = 3}) end, "check_fn must be a function")
    -- without check_fn every module is wrapped (PyTorch's default check_fn)
    local small = accel.nn.Sequential(accel.nn.Linear(2, 2), accel.nn.Tanh())
    assert.equal(3, #utils.apply_activation_checkpointing(small, {}))
    assert.is_true(utils.is_checkpointed(small[2]))
    expect_error(function() utils.apply_activation_checkpointing(model, {check_fn = function() return true end, typo = 1}) end,
      "apply_activation_checkpointing: unknown option 'typo' (options: check_fn, use_reentrant, preserve_rng_state, determinism_check)")
    expect_error(function() utils.apply_activation_checkpointing(small, 5) end,
      "apply_activation_checkpointing: options must be a table, got number")
  end)

  it("bad arguments", function()
    expect_error(function() utils.checkpoint_module(42) end, "checkpoint_module: expected an nn.Module", "number")
    expect_error(function() utils.checkpoint_module(mlp_block(2, 2), {reentrant = true}) end, "unknown option 'reentrant'",
      "enabled, use_reentrant, preserve_rng_state")
    expect_error(function() utils.checkpoint_module(mlp_block(2, 2), {use_reentrant = "no"}) end,
      'use_reentrant must be true or false, got "no"')
    expect_error(function() utils.checkpoint(function(x) return x * 2 end, accel.randn(2), {preserve_rng_state = 1}) end,
      "preserve_rng_state must be true or false, got 1")
    expect_error(function() utils.checkpoint_module(mlp_block(2, 2), {enabled = "yes"}) end, "enabled must be true or false")
    expect_error(function() utils.checkpoint_module(mlp_block(2, 2), {debug = true}) end, "option 'debug' is not supported")
  end)
end)

describe("backward inside backward: one pass for leaf hooks (DDP)", function()
  local function leaf(data) return gc.leaf(accel.tensor(data, {dtype = f64})) end

  it("parameters used inside a checkpoint: each hook once, no 'two backward passes' error", function()
    local w, v = leaf({1, 2, 3}), leaf({0.5, -1, 2})
    local r = accel.ddp.Reducer({w, v})
    local x = gc.randn(3)
    local y = utils.checkpoint(function(a) return (a * w):tanh() * v end, x)
    y:sum():backward()
    assert.equal(2, r:stats().hook_calls)
    assert_same(r:slice(1), w.grad, "w slice")
    r:finalize()
    r:close()
  end)

  it("two checkpointed blocks in one step: one synchronising pass", function()
    local w1, w2 = leaf({1, 2, 3}), leaf({-1, 0.5, 2})
    local r = accel.ddp.Reducer({w1, w2})
    local h = utils.checkpoint(function(a) return (a * w1):sin() end, gc.randn(3))
    local y = utils.checkpoint(function(a) return (a * w2):cos() end, h)
    y:sum():backward()
    assert.equal(2, r:stats().hook_calls)
    r:finalize() -- raises if the hooks saw two different passes
    assert_same(r:slice(1), w1.grad, "w1 slice")
    assert_same(r:slice(2), w2.grad, "w2 slice")
    r:close()
  end)

  it("a weight used inside and outside a checkpoint is reported once, with its complete gradient", function()
    local w = leaf({1, 2, 3})
    local r = accel.ddp.Reducer({w})
    local x = gc.randn(3)
    local h = utils.checkpoint(function(a) return a * w end, x)
    ;(h * w):sum():backward()
    assert.equal(1, r:stats().hook_calls)
    assert_same(r:slice(1), w.grad, "w slice") -- not the outer part only
    assert_close(w.grad, x:detach() * w:detach() * 2, 1e-15, "w.grad")
    r:finalize()
    r:close()
  end)

  it("a custom Function whose backward runs a backward of its own", function()
    local w = leaf({2, 3})
    local Inner = accel.autograd.Function{
      forward = function(ctx, x) ctx.x = x; return x * 1 end,
      backward = function(ctx, g)
        local d = accel.enable_grad(function() return ctx.x:detach():requires_grad_(true) end)
        local out = accel.enable_grad(function() return d * w end)
        out:backward(g)
        return d.grad
      end,
    }
    local r = accel.ddp.Reducer({w})
    local x = leaf({1, 5})
    Inner(x):sum():backward()
    assert.same({2, 3}, x.grad:tolist())
    assert.same({1, 5}, w.grad:tolist())
    assert.equal(1, r:stats().hook_calls)
    r:finalize()
    r:close()
  end)
end)

describe("autograd.backward from several tensors", function()
  it("equals the sum of separate backward calls", function()
    local x = gc.randn(3)
    local a, b = x:sin(), x * x
    local ga, gb = accel.tensor({1, 2, 3}, {dtype = f64}), accel.tensor({-1, 0.5, 4}, {dtype = f64})
    accel.autograd.backward({a, b}, {ga, gb})
    local xd = x:detach()
    assert_close(x.grad, xd:cos() * ga + xd * 2 * gb, 1e-15, "x.grad")
  end)

  it("a leaf among the roots, and the same tensor twice", function()
    local x = gc.randn(2)
    local one = accel.ones(2, {dtype = f64})
    accel.autograd.backward({x, x * 3, x}, {one, one, one})
    assert.same({5, 5}, x.grad:tolist())
  end)

  it("bad input", function()
    local x = gc.randn(3)
    local y = x * 2
    expect_error(function() accel.autograd.backward({y}, {}) end, "grad can be implicitly created only for one-element")
    expect_error(function() accel.autograd.backward({y, y}, {accel.ones(3, {dtype = f64}), accel.ones(2, {dtype = f64})}) end,
      "gradient shape [2] does not match tensor 2's shape [3]")
    expect_error(function() accel.autograd.backward({y, accel.ones(3)}, {accel.ones(3), accel.ones(3)}) end,
      "tensor 2 (shape [3]) does not require grad")
  end)
end)
