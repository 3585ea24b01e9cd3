-- accelerator_parity_spec.lua: places where the Accelerator used to accept
-- a call and then do something else, checked against Accelerate's
-- documented behaviour, plus the Accelerate methods added with them
-- (one process; the cross-process parts are in accelerator_parity_test.lua):
--   * fp16: gradients are unscaled once per optimizer step, on the sync
--     step; clip_grad_norm_ / clip_grad_value_ on a non-sync micro-step
--     clip the still-scaled gradients against a scaled threshold and never
--     mark them unscaled, so an overflow on the sync step is still found
--     and the step skipped;
--   * split_between_processes pads with the input's last item (Accelerate's
--     inputs[-1]) at every world size, also a rank whose part is empty;
--   * find_executable_batch_size halves on the allocator's out-of-memory
--     error; state hooks; clear / free_memory release what was prepared;
--     on_local_process / on_last_process; trigger_sync_in_backward;
--   * accelerate.utils' set_seed (device_specific), find_batch_size and
--     send_to_device (values from accelerate 1.15; synchronize_rng_states and
--     device_specific on several processes: collectives_test.lua).
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local tmpdir, max_abs_diff, error_matching = support.tmpdir, support.max_abs_diff, support.error_matching
local nn, optim = accel.nn, accel.optim
local split = require("accel.operations").split

local function mlp(seed)
  accel.set_seed(seed)
  return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
end

local function all_finite(model)
  for _, p in ipairs(model:parameters()) do
    local s = p:sum():item()
    if s ~= s or s == math.huge or s == -math.huge then return false end
  end
  return true
end

local function params_of(model)
  local out = {}
  for i, p in ipairs(model:parameters()) do out[i] = p:clone() end
  return out
end

describe("fp16 with clip_grad_norm_ on every micro-step", function()
  -- One accumulation window of #factors micro-batches, clipping on each.
  local function window(a, model, opt, x, factors, clip)
    local norms = {}
    for i, f in ipairs(factors) do
      a:accumulate(model, function()
        a:backward(model(x):pow(2):mean() * f)
        norms[i] = clip(a, model)
        opt:step()
        opt:zero_grad()
      end)
    end
    return norms
  end
  local function by_norm(a, model) return a:clip_grad_norm_(model:parameters(), 0.05) end
  local function by_value(a, model) return a:clip_grad_value_(model:parameters(), 0.01) end

  for name, clip in pairs({clip_grad_norm_ = by_norm, clip_grad_value_ = by_value}) do
    it(name .. ": an overflow on the sync step is found and the step skipped; weights stay finite", function()
      local a = accel.Accelerator{mixed_precision = "fp16", gradient_accumulation_steps = 2}
      local model = mlp(3)
      local opt
      model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 0.1}))
      accel.set_seed(4)
      local x = accel.randn(5, 4)
      local before = params_of(model)
      window(a, model, opt, x, {1, 1e38}, clip) -- the sync micro-batch overflows (times 2^16: inf)
      assert.is_true(a.optimizer_step_was_skipped)
      assert.is_true(all_finite(model))
      for i, p in ipairs(model:parameters()) do assert.is_true(p:equal(before[i])) end
      assert.are.equal(32768, a.scaler:get_scale())
      window(a, model, opt, x, {1, 1}, clip) -- a clean window steps again
      assert.is_false(a.optimizer_step_was_skipped)
      assert.is_true(all_finite(model))
      assert.is_false(model:parameters()[1]:equal(before[1]))
    end)
  end

  it("a clip on a non-sync micro-step acts as on the unscaled gradients (fp16 matches fp32)", function()
    local function run(mp)
      local a = accel.Accelerator{mixed_precision = mp, gradient_accumulation_steps = 3}
      local model = mlp(5)
      local opt
      model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 1.0}))
      accel.set_seed(6)
      local x = accel.randn(8, 4)
      local norms = window(a, model, opt, x, {1, 1, 1}, by_norm)
      return params_of(model), norms
    end
    local p32, n32 = run("no")
    local p16, n16 = run("fp16")
    for i = 1, 3 do
      assert.is_true(n32[i]:item() > 0.05, "the threshold clips on every micro-step")
      assert.is_true(math.abs(n16[i]:item() - n32[i]:item()) < 1e-2 * n32[i]:item(),
        ("micro-step %d: norm %g (fp16) vs %g (fp32)"):format(i, n16[i]:item(), n32[i]:item()))
    end
    for i = 1, #p32 do
      local scale = p32[i]:abs():max():item()
      assert.is_true(max_abs_diff(p16[i], p32[i]) < 1e-2 * scale, "parameter " .. i)
    end
  end)

  it("unscale_gradients on a non-sync step leaves the gradients scaled", function()
    local a = accel.Accelerator{mixed_precision = "fp16", gradient_accumulation_steps = 2}
    local model = mlp(7)
    local opt
    model, opt = a:prepare(model, optim.SGD(model:parameters(), {lr = 0.1}))
    local x = accel.randn(3, 4)
    a:accumulate(model, function()
      a:backward(model(x):sum())
      local g = model:parameters()[1].grad:clone()
      a:unscale_gradients()
      assert.is_true(model:parameters()[1].grad:equal(g))
    end)
  end)

  it("the GradScaler skips when any process found an inf (the agreement decides)", function()
    local amp = require("accel.amp")
    local model = mlp(8)
    local opt = optim.SGD(model:parameters(), {lr = 0.1})
    local scaler = amp.GradScaler{agree = function(found) return not found end} -- another rank overflowed
    model(accel.randn(2, 4)):sum():backward()
    local before = params_of(model)
    assert.is_false(scaler:step(opt))
    assert.is_true(model:parameters()[1]:equal(before[1]))
  end)
end)

describe("split_between_processes", function()
  -- Accelerate's documented rule: rank r of N gets items
  -- [r*q + min(r, e), +q + (r < e)) of n = q*N + e; with apply_padding each
  -- part is filled up to q + (e > 0) with the input's last item.
  local function expected(n, r, N, pad)
    local q, e = n // N, n % N
    local first = r * q + math.min(r, e)
    local count = q + (r < e and 1 or 0)
    local out = {}
    for i = 1, count do out[i] = first + i end
    if pad and n > 0 then
      for i = count + 1, q + (e > 0 and 1 or 0) do out[i] = n end
    end
    return out
  end

  it("lists: every world size 1..7 and length 0..9, with and without padding", function()
    for N = 1, 7 do
      for n = 0, 9 do
        local items = {}
        for i = 1, n do items[i] = i end
        for r = 0, N - 1 do
          for _, pad in ipairs({false, true}) do
            assert.are.same(expected(n, r, N, pad), split(items, r, N, pad),
              ("n = %d, rank %d of %d, padding %s"):format(n, r, N, tostring(pad)))
          end
        end
      end
    end
  end)

  it("pads an empty part with the input's last item (Accelerate's inputs[-1])", function()
    assert.are.same({"C"}, split({"A", "B", "C"}, 3, 4, true))
    assert.are.same({"C", "C"}, split({"A", "B", "C"}, 1, 2, true))
    assert.are.same({"A", "B"}, split({"A", "B", "C"}, 0, 2, true))
    assert.are.same({}, split({"A", "B", "C"}, 3, 4, false))
  end)

  it("tensors along dim 1, padded with the last row", function()
    local t = accel.arange(10):view(5, 2)
    for N = 2, 7 do
      for r = 0, N - 1 do
        local want = expected(5, r, N, true)
        local part = split(t, r, N, true)
        assert.are.equal(#want, part:size(1))
        for i, row in ipairs(want) do
          assert.are.same({2 * (row - 1), 2 * (row - 1) + 1}, part[i]:tolist())
        end
        assert.are.equal(#expected(5, r, N, false), split(t, r, N, false):size(1))
      end
    end
  end)

  it("a table of lists / tensors: each value split at the same positions; lengths must agree", function()
    local inputs = {ids = {1, 2, 3}, x = accel.tensor({10, 20, 30}), nested = {names = {"a", "b", "c"}}}
    local part = split(inputs, 2, 4, true)
    assert.are.same({3}, part.ids)
    assert.are.same({30}, part.x:tolist())
    assert.are.same({"c"}, part.nested.names)
    error_matching("same length", function() split({a = {1, 2}, b = {1, 2, 3}}, 0, 2) end)
    error_matching("value s is a string", function() split({s = "abc", b = {1, 2, 3}}, 0, 2) end)
  end)

  it("one process gets the input itself (Accelerate yields it unchanged)", function()
    local items = {1, 2, 3}
    assert.are.equal(items, split(items, 0, 1, true))
    local a = accel.Accelerator()
    assert.are.equal(items, a:split_between_processes(items, {apply_padding = true}))
    error_matching("unknown option apply_pading", function() a:split_between_processes(items, {apply_pading = true}) end)
  end)
end)

describe("find_executable_batch_size", function()
  local HUGE = 2 ^ 40 -- floats: 4 TiB, which no allocator here can satisfy

  it("the allocator's out-of-memory error is recognisable", function()
    local ok, err = pcall(accel.empty, HUGE)
    assert.is_false(ok)
    assert.is_true(accel.accelerator.is_out_of_memory_error(err), tostring(err))
    assert.is_false(accel.accelerator.is_out_of_memory_error("shape mismatch"))
  end)

  it("halves the batch size on out-of-memory until fn runs, and keeps it", function()
    local tried = {}
    local run = accel.find_executable_batch_size(function(bs, extra)
      tried[#tried + 1] = bs
      if bs > 16 then accel.empty(HUGE) end
      return bs * extra
    end, {starting_batch_size = 128})
    assert.are.equal(160, run(10))
    assert.are.same({128, 64, 32, 16}, tried)
    assert.are.equal(32, run(2))
    assert.are.same({128, 64, 32, 16, 16}, tried)
  end)

  it("is also accel.utils.find_executable_batch_size (Accelerate's import path)", function()
    local tried = {}
    assert.are.equal(24, accel.utils.find_executable_batch_size(function(bs, extra)
      tried[#tried + 1] = bs
      if bs > 8 then accel.empty(HUGE) end
      return bs * extra
    end, {starting_batch_size = 32})(3))
    assert.are.same({32, 16, 8}, tried)
  end)

  it("passes other errors through, raises at zero, takes reduce_batch_size_fn", function()
    error_matching("not an oom", function()
      accel.find_executable_batch_size(function() error("not an oom") end)()
    end)
    local tried = 0
    error_matching("no executable batch size found, reached zero", function()
      accel.find_executable_batch_size(function()
        tried = tried + 1
        accel.empty(HUGE)
      end, {starting_batch_size = 8})()
    end)
    assert.are.equal(4, tried) -- 8, 4, 2, 1
    local seen = {}
    local bs = 100
    local run = accel.find_executable_batch_size(function(b)
      seen[#seen + 1] = b
      if b > 80 then accel.empty(HUGE) end
      return b
    end, {starting_batch_size = bs, reduce_batch_size_fn = function() bs = math.floor(bs * 0.9) return bs end})
    assert.are.equal(72, run())
    assert.are.same({100, 90, 81, 72}, seen)
    error_matching("starting_batch_size must be a positive integer", function()
      accel.find_executable_batch_size(function() end, {starting_batch_size = 0})
    end)
  end)
end)

describe("save / load state pre-hooks", function()
  it("run with (models, weights, dir) / (models, dir); a hook can take a model over; remove() stops them", function()
    local a = accel.Accelerator()
    local m1, m2 = mlp(1), mlp(2)
    m1, m2 = a:prepare(m1, m2)
    local dir = tmpdir()
    local calls = {}
    local h = a:register_save_state_pre_hook(function(models, weights, out)
      calls[#calls + 1] = {n = #models, w = #weights, dir = out}
      assert.are.equal(m1, models[1])
      assert.is_true(accel.is_tensor(weights[2]["0.weight"]))
      support.write_file(out .. "/extra.txt", "mine") -- part of the checkpoint
      table.remove(weights, 2) -- the hook saves model 2 itself
      accel.save(m2:state_dict(), out .. "/m2_by_hook.safetensors")
    end)
    local saved = a:save_state(dir .. "/ck")
    assert.are.equal(1, #calls)
    assert.are.equal(2, calls[1].n)
    assert.are.equal("mine", support.read_file(saved .. "/extra.txt"))
    assert.are_not.equal("", support.read_if_exists(saved .. "/model.safetensors"))
    assert.are.equal("", support.read_if_exists(saved .. "/model_1.safetensors"))
    -- loading without a hook refuses (one model in the checkpoint, two prepared)
    error_matching("holds 1 model, this Accelerator prepared 2", function() a:load_state(saved) end)
    local loaded = {}
    local lh = a:register_load_state_pre_hook(function(models, input_dir)
      loaded[#loaded + 1] = input_dir
      m2:load_state_dict(accel.load(input_dir .. "/m2_by_hook.safetensors"))
      table.remove(models, 2)
    end)
    accel.no_grad(function() m1:parameters()[1]:fill_(0) end)
    a:load_state(saved)
    assert.are.same({saved}, loaded)
    assert.is_false(m1:parameters()[1]:equal(accel.zeros_like(m1:parameters()[1])))
    h:remove()
    lh:remove()
    a:save_state(dir .. "/ck2")
    assert.are.equal(1, #calls)
    error_matching("expected a function", function() a:register_save_state_pre_hook(42) end)
    support.remove_tree(dir)
  end)
end)

describe("clear / free_memory", function()
  for _, name in ipairs({"clear", "free_memory"}) do
    it(name .. " releases the prepared objects (they are collected)", function()
      local a = accel.Accelerator()
      local alive = setmetatable({}, {__mode = "v"})
      do
        local model = mlp(1)
        local opt = optim.SGD(model:parameters(), {lr = 0.1})
        local sched = optim.lr_scheduler.StepLR(opt, {step_size = 1})
        local loader = accel.data.DataLoader(accel.data.TensorDataset(accel.randn(6, 4)), {batch_size = 2})
        model, opt, sched, loader = a:prepare(model, opt, sched, loader)
        for _ in loader:iter() do break end -- leaves the loader registered as active
        alive.model, alive.opt, alive.sched, alive.loader = model, opt, sched, loader
        model, opt, sched, loader = a[name](a, model, opt, sched, loader)
        assert.is_nil(model)
        assert.is_nil(loader)
      end
      collectgarbage()
      collectgarbage()
      assert.is_nil(alive.model)
      assert.is_nil(alive.opt)
      assert.is_nil(alive.sched)
      assert.is_nil(alive.loader)
    end)
  end
end)

describe("process decorators and trigger_sync_in_backward", function()
  it("on_local_process / on_process / on_last_process: on one process every body runs (Accelerate's rule)", function()
    local a = accel.Accelerator()
    local ran = {}
    a:on_local_process(function(v) ran[#ran + 1] = "local0:" .. v end, 0)("x")
    a:on_local_process(function() ran[#ran + 1] = "local1" end, 1)()
    a:on_local_process(2, function() ran[#ran + 1] = "local2" end)()
    a:on_process(function() ran[#ran + 1] = "p0" end, 0)()
    a:on_last_process(function() ran[#ran + 1] = "last" end)()
    assert.are.same({"local0:x", "local1", "local2", "p0", "last"}, ran)
    assert.are.equal(1, select("#", a:on_process(function() return 5 end, 0)()))
    error_matching("on_local_process: expected a process index", function() a:on_local_process(function() end) end)
  end)

  it("trigger_sync_in_backward runs the body, returns its results and restores no_sync", function()
    local a = accel.Accelerator()
    local model = a:prepare(mlp(1))
    a:no_sync(model, function()
      assert.are.equal(false, a._grad_sync[model])
      local r1, r2 = a:trigger_sync_in_backward(model, function()
        assert.are.equal(true, a._grad_sync[model])
        return 1, 2
      end)
      assert.are.same({1, 2}, {r1, r2})
      assert.are.equal(false, a._grad_sync[model])
    end)
    assert.are.equal(true, a._grad_sync[model])
  end)
end)

describe("Accelerate's utilities", function()
  local utils = accel.utils

  it("set_seed(seed, device_specific) seeds with seed + process index (0 here)", function()
    accel.manual_seed(42)
    local want = accel.rand(3):tolist()
    accel.set_seed(42, true)
    assert.are.same(want, accel.rand(3):tolist())
    assert.are.equal(42, accel.initial_seed())
    error_matching("manual_seed: expected only the seed", function() accel.manual_seed(42, true) end)
    error_matching("set_seed: seed must be an integer", function() accel.set_seed(1.5) end)
  end)

  -- accelerate: find_batch_size({"a": [torch.ones(3, 2)]}) == 3, find_batch_size([torch.ones(4)]) == 4;
  -- an empty dict / list is a ValueError, 5 and {"a": 5} TypeErrors, a 0-dim tensor an IndexError
  it("find_batch_size: the first dim of the first tensor, nested", function()
    assert.are.equal(3, utils.find_batch_size({a = {accel.ones(3, 2)}}))
    assert.are.equal(4, utils.find_batch_size({accel.ones(4)}))
    assert.are.equal(2, utils.find_batch_size({b = accel.ones(5), a = accel.ones(2)})) -- first key in sorted order
    error_matching("find_batch_size: cannot find the batch size of an empty table", function() utils.find_batch_size({}) end)
    error_matching("find_batch_size: can only find the batch size of tensors, got number", function()
      utils.find_batch_size({a = 5})
    end)
    error_matching("find_batch_size: a 0%-dim tensor has no batch dimension", function()
      utils.find_batch_size(accel.tensor(1.0))
    end)
  end)

  -- accelerate.utils: release_memory(m, o) == [None, None] (after gc.collect and the cache cleared);
  -- convert_bytes(89076941) == "84.95 MB"; should_reduce_batch_size is true for out-of-memory errors only
  it("release_memory / clear_device_cache / should_reduce_batch_size / convert_bytes", function()
    local t = accel.zeros(1000000)
    local n, a, b = select("#", utils.release_memory(t, {})), utils.release_memory(t, {})
    assert.are.equal(2, n)
    assert.is_nil(a)
    assert.is_nil(b)
    t = nil -- luacheck: ignore
    accel.zeros(1000000, {device = "cpu"}):free() -- its block goes to the host allocator's cache
    assert.is_true(select(2, accel.memory_stats()) > 0)
    utils.clear_device_cache(true)
    assert.are.equal(0, select(2, accel.memory_stats()))
    error_matching("clear_device_cache: garbage_collection must be true or false", function()
      utils.clear_device_cache(1)
    end)
    local _, oom = pcall(accel.empty, 2 ^ 42)
    assert.is_true(utils.should_reduce_batch_size(oom))
    assert.is_false(utils.should_reduce_batch_size("shape mismatch"))
    assert.are.equal("84.95 MB", utils.convert_bytes(89076941))
    -- accelerate 1.16: convert_bytes(512) "512 bytes", (999.999) "1000.0 bytes", (1024**5) "1.0 PB", (2048) "2.0 KB"
    assert.are.same({"512 bytes", "1000.0 bytes", "1.0 PB", "2.0 KB"}, {utils.convert_bytes(512),
      utils.convert_bytes(999.999), utils.convert_bytes(1024 ^ 5), utils.convert_bytes(2048)})
    assert.are.equal("512 bytes", utils.convert_bytes(512))
  end)

  -- accelerate: send_to_device({"a": [torch.ones(2), 5, "x"]}, "cpu") == {"a": [tensor([1., 1.]), 5, "x"]}
  it("send_to_device moves every tensor, passes other values, skips skip_keys", function()
    local w = accel.ones(2, {requires_grad = true})
    local out = utils.send_to_device({a = {w, 5, "x"}, b = w}, "sim", {skip_keys = "b"})
    assert.are.equal("sim", out.a[1].device.type)
    assert.are.same({1, 1}, out.a[1]:cpu():tolist())
    assert.are.same({5, "x"}, {out.a[2], out.a[3]})
    assert.are.equal(w, out.b)
    assert.is_true(out.a[1].requires_grad) -- t:to(device), recorded by autograd
    error_matching("send_to_device: skip_keys%[1%] must be a string, got number", function()
      utils.send_to_device({}, "cpu", {skip_keys = {1}})
    end)
  end)
end)
