-- collectives_spec.lua: the Accelerator's collectives on one process:
-- values that are not tensors are refused by gather / reduce / broadcast /
-- pad_across_processes (naming the op, the type, where it is and the
-- caller's file:line), broadcast_object_list, gather_for_metrics of several
-- values (and how its options table is told from data), the arguments of
-- the collectives and of the scoped methods (no_sync, main_process_first,
-- ...), and join_uneven_inputs' arguments. The multi-process behaviour is in
-- collectives_test.lua and dist_mpi_test.lua.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local expect_error = support.expect_error
local data, nn = accel.data, accel.nn

describe("collectives of values that are not tensors", function()
  local a = accel.Accelerator()
  local t = accel.ones(2)

  it("gather, reduce, broadcast and pad_across_processes raise, naming the type and where it is", function()
    expect_error(function() a:gather(3) end,
      "gather: unsupported type number; only tensors and nested tables of tensors can be passed (use gather_object "
        .. "for other Lua values)")
    expect_error(function() a:gather({x = t, y = {t, "label"}}) end, "gather: unsupported type string at data.y[2]")
    expect_error(function() a:gather({[1.5] = true}) end, "gather: unsupported type boolean at data[1.5]")
    expect_error(function() a:reduce({loss = 0.5}, "mean") end, "reduce: unsupported type number at data.loss")
    expect_error(function() a:reduce("x", "none") end, "reduce: unsupported type string")
    expect_error(function() a:broadcast({["a key"] = 1}) end,
      'broadcast: unsupported type number at data["a key"]', "use broadcast_object_list")
    expect_error(function() a:broadcast(nn.Linear(1, 1)) end, "broadcast: unsupported type table with a metatable (Linear)")
    expect_error(function() a:pad_across_processes({t, 7}) end, "pad_across_processes: unsupported type number at data[2]")
  end)

  it("tensors and nested tables of tensors still pass", function()
    assert.is_true(a:gather({x = t, y = {t}}).y[1]:equal(t))
    assert.is_true(a:reduce({t}, "sum")[1]:equal(t))
    assert.is_true(a:broadcast({t})[1]:equal(t))
    assert.are.same({}, a:gather({}))
  end)

  it('reduce "none" is the sum (Accelerate: unchanged on one process)', function()
    local v = accel.tensor({1.5, -2})
    local none = a:reduce(v, "none")
    assert.are_not.equal(v, none)
    assert.are.same({1.5, -2}, none:tolist())
    assert.are.same({1.5, -2}, a:reduce({v}, {reduction = "none", scale = 1})[1]:tolist())
  end)

  it("pad_across_processes leaves a tensor without the dim as it is (Accelerate's rule)", function()
    local v = accel.tensor{1, 2, 3}
    assert.are.equal(v, a:pad_across_processes(v, {dim = 3}))
    assert.are.equal(v, a:pad_across_processes(v, {dim = -2}))
  end)

  it("refuses invalid arguments naming the op, also on one process", function()
    expect_error(function() a:pad_across_processes(t, {dim = 1.5}) end, "pad_across_processes: dim must be an integer, got 1.5")
    expect_error(function() a:pad_across_processes({t}, "1") end, 'pad_across_processes: dim must be an integer, got "1"')
    expect_error(function() a:reduce(t, "sum", "2") end, 'reduce: scale must be a number, got "2"')
    expect_error(function() a:reduce({t}, {reduction = "avg"}) end, 'reduce: reduction must be "sum", "mean", "max", '
      .. '"min" or "none", got "avg"')
    expect_error(function() a:broadcast({t}, {from_process = "0"}) end,
      'broadcast: from_process must be a process index in 0..0, got "0"')
  end)
end)

describe("scoped methods and their arguments", function()
  local a = accel.Accelerator()
  local model = a:prepare(nn.Linear(1, 1))

  it("a body that is not a function is an error naming the method, at the caller's line", function()
    local want = "expected a function to run (or none, for a handle to close), got number"
    expect_error(function() a:main_process_first(5) end, "main_process_first: " .. want)
    expect_error(function() a:local_main_process_first(5) end, "local_main_process_first: " .. want)
    expect_error(function() a:no_sync(model, 5) end, "no_sync: " .. want)
    expect_error(function() a:trigger_sync_in_backward(model, 5) end, "trigger_sync_in_backward: " .. want)
    -- a callable table is a body
    assert.are.equal(7, a:no_sync(model, setmetatable({}, {__call = function() return 7 end})))
  end)

  it("a missing model is named", function()
    expect_error(function() a:no_sync(nil, function() end) end, "no_sync: expected the model, got nil")
    expect_error(function() a:trigger_sync_in_backward(5) end, "trigger_sync_in_backward: expected the model, got number")
  end)
end)

describe("broadcast_object_list", function()
  local a = accel.Accelerator()

  it("returns the list itself, unchanged on one process", function()
    local list = {1, "two", {three = 3}}
    assert.are.equal(list, a:broadcast_object_list(list))
    assert.are.same({1, "two", {three = 3}}, list)
    assert.are.equal(list, a:broadcast_object_list(list, 0))
  end)

  it("refuses what is not a list and processes that do not exist", function()
    expect_error(function() a:broadcast_object_list("x") end, "broadcast_object_list: expected a list, got string")
    expect_error(function() a:broadcast_object_list({1}, 1) end,
      "broadcast_object_list: from_process must be a process index in 0..0, got 1")
    expect_error(function() a:broadcast_object_list({1}, 0.5) end, "got 0.5")
  end)

  it("takes from_process in an options table, as broadcast does", function()
    local list = {"x"}
    assert.are.equal(list, a:broadcast_object_list(list, {from_process = 0}))
    expect_error(function() a:broadcast_object_list({1}, {from_process = 1}) end,
      "broadcast_object_list: from_process must be a process index in 0..0, got 1")
    expect_error(function() a:broadcast_object_list({1}, {from_proces = 0}) end,
      "broadcast_object_list: unknown option from_proces")
  end)

  -- accelerate 1.16 pickles tensors in objects: gather_object([tensor, "tag"]) gives them back, any dtype or shape
  it("carries tensors inside objects, with their dtype, shape, device and non-finite values", function()
    local list = {accel.tensor({1.5, 0 / 0, math.huge, -math.huge}), "tag", {x = accel.tensor(3, {dtype = accel.int64})},
      accel.zeros({2, 0}, {dtype = accel.bfloat16}), accel.tensor({{true}, {false}})}
    local got = a:gather_object(list)
    assert.are.equal(5, #got)
    local f = got[1]:tolist()
    assert.are.same({1.5, math.huge, -math.huge}, {f[1], f[3], f[4]})
    assert.is_true(f[2] ~= f[2])
    assert.are.equal("tag", got[2])
    assert.are.equal(accel.int64, got[3].x.dtype)
    assert.are.same({0, 3}, {got[3].x:dim(), got[3].x:item()})
    assert.are.same({2, 0}, {got[4]:size(1), got[4]:size(2)})
    assert.are.equal(accel.bfloat16, got[4].dtype)
    assert.are.same({{true}, {false}}, got[5]:tolist())
    assert.are.equal(tostring(list[1].device), tostring(got[1].device))
    local b = {accel.full({2}, 0.1, {dtype = accel.float64})}
    a:broadcast_object_list(b)
    assert.are.equal(0.1, b[1][1]:item())
    local m = a:gather_for_metrics(accel.ones(2, 3):half(), {use_gather_object = true})
    assert.are.same({accel.float16, 2, 3}, {m.dtype, m:size(1), m:size(2)})
  end)

  -- what two processes refuse (collectives_test.lua), one refuses too, naming broadcast_object_list
  it("encodes the list on one process too", function()
    local cannot = "broadcast_object_list: rank 0's value cannot be sent: json.encode: "
    expect_error(function() a:broadcast_object_list({print}) end, cannot .. "value[1] is a function")
    expect_error(function() a:broadcast_object_list({1, nil, 3}) end, cannot, "sparse list")
  end)
end)

describe("gather_for_metrics of several values", function()
  local a = accel.Accelerator()

  it("returns every value gathered, in order, each cut at the end of the loader", function()
    local loader = a:prepare(data.DataLoader(data.TensorDataset(accel.arange(5), accel.arange(5) * 2), {batch_size = 2}))
    local xs, ys, names = {}, {}, {}
    for xb, yb in loader:iter() do
      local gx, gy, gn = a:gather_for_metrics(xb, yb, {"n" .. xb[1]:item()})
      for _, v in ipairs(gx:tolist()) do xs[#xs + 1] = v end
      for _, v in ipairs(gy:tolist()) do ys[#ys + 1] = v end
      for _, v in ipairs(gn) do names[#names + 1] = v end
    end
    assert.are.same({0, 1, 2, 3, 4}, xs)
    assert.are.same({0, 2, 4, 6, 8}, ys)
    assert.are.same({"n0", "n2", "n4"}, names)
  end)

  it("tells the options from data: the last of two or more, a boolean or booleans under string keys", function()
    local t = accel.tensor({1.0, 2.0})
    local g, l = a:gather_for_metrics({3}, {1, 2}, {use_gather_object = true})
    assert.are.same({3}, g)
    assert.are.same({1, 2}, l)
    assert.are.equal(2, select("#", a:gather_for_metrics(t, {1, 2})))
    local one, two = a:gather_for_metrics({use_gather_object = true}, {ok = true, n = 1})
    -- (one process: gather_object gives each value back, as Accelerate's)
    assert.are.same({use_gather_object = true}, one) -- a single argument is always data
    assert.are.same({ok = true, n = 1}, two)         -- not all booleans: data
    assert.are.equal(1, select("#", a:gather_for_metrics(t, {use_gather_object = false})))
    -- Accelerate's positional form gather_for_metrics(input_data, use_gather_object)
    assert.are.equal("x", a:gather_for_metrics("x", true))
    assert.are.equal(1, select("#", a:gather_for_metrics(t, false)))
  end)

  it("refuses unknown options, nil arguments and nothing at all", function()
    local t = accel.tensor({1.0})
    expect_error(function() a:gather_for_metrics(t, {use_gather_objct = true}) end,
      "gather_for_metrics: unknown option 'use_gather_objct' (use_gather_object)")
    expect_error(function() a:gather_for_metrics(t, nil, t) end, "gather_for_metrics: argument 2 is nil")
    expect_error(function() a:gather_for_metrics(t, nil) end, "gather_for_metrics: argument 2 is nil")
    expect_error(function() a:gather_for_metrics() end, "gather_for_metrics: expected the data to gather")
    expect_error(function() a:gather_for_metrics(t, {use_gather_object = 1}) end,
      "gather_for_metrics: use_gather_object must be a boolean, got 1")
  end)
end)

describe("join_uneven_inputs on one process", function()
  local a = accel.Accelerator()
  local model = a:prepare(nn.Linear(2, 1))

  it("runs fn and returns its results", function()
    local x, y = a:join_uneven_inputs({model}, {even_batches = false}, function() return 1, "two" end)
    assert.are.equal(1, x)
    assert.are.equal("two", y)
    assert.are.equal(3, a:join_uneven_inputs(model, function() return 3 end))
  end)

  it("restores the loaders' even_batches after fn, also when fn raises", function()
    local b = accel.Accelerator()
    local loader = b:prepare(data.DataLoader(data.TensorDataset(accel.arange(4)), {batch_size = 2}))
    local inside
    b:join_uneven_inputs({model}, {even_batches = false}, function() inside = loader.even_batches end)
    assert.is_true(inside) -- one process: never uneven
    assert.is_true(loader.even_batches)
    assert.has_error(function() b:join_uneven_inputs(model, {}, function() error("boom") end) end)
  end)

  it("checks its arguments", function()
    expect_error(function() a:join_uneven_inputs({model}, {even_batches = false}) end,
      "join_uneven_inputs: expected (models, {even_batches = ...}, fn) with fn a function, got nil")
    expect_error(function() a:join_uneven_inputs({model}, {evenbatches = false}, function() end) end,
      "join_uneven_inputs: unknown option 'evenbatches' (even_batches)")
    expect_error(function() a:join_uneven_inputs({model}, {even_batches = 1}, function() end) end,
      "join_uneven_inputs: even_batches must be a boolean, got number")
    expect_error(function() a:join_uneven_inputs({5}, function() end) end,
      "join_uneven_inputs: joinable 1 must be a prepared model, got number")
    expect_error(function() a:join_uneven_inputs({}, function() end) end,
      "join_uneven_inputs: expected a model or a list of models (the joinables)")
  end)
end)
