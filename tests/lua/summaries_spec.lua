-- summaries_spec.lua: what print() shows for the objects a PyTorch user
-- prints while porting: an optimizer (PyTorch's Optimizer.__repr__: the
-- class name, "Parameter Group i", then "    key: value" for each option
-- in sorted order, booleans as True/False, ")"; our group numbers are
-- 1-based like opt.param_groups), a state_dict (one line per entry in
-- state_dict order with shape and dtype, still a plain table for pairs
-- and indexing), and a model (PyTorch's module tree).
local accel = require("accel")
local nn, optim = accel.nn, accel.optim

-- Expected texts: PyTorch 2.15's str(optimizer) on the same groups, "Parameter Group 0" ... written 1-based.
describe("print(optimizer)", function()
  it("AdamW has PyTorch's shape, booleans as True/False, PyTorch's keys we take and ignore", function()
    local opt = optim.AdamW(nn.Linear(3, 2):parameters(), {lr = 1e-3})
    assert.are.equal(table.concat({
      "AdamW (",
      "Parameter Group 1",
      "    amsgrad: False",
      "    betas: (0.9, 0.999)",
      "    capturable: False",
      "    decoupled_weight_decay: True",
      "    differentiable: False",
      "    eps: 1e-08",
      "    foreach: None",
      "    fused: None",
      "    lr: 0.001",
      "    maximize: False",
      "    weight_decay: 0.01",
      ")"}, "\n"), tostring(opt))
  end)

  it("Adam with two groups and foreach / fused given: printed as given, the groups apart by a blank line", function()
    local m = nn.Linear(2, 2)
    local opt = optim.Adam({{params = {m.weight}}, {params = {m.bias}, lr = 0.5}}, {foreach = true, fused = false})
    local function group(n, lr)
      return table.concat({"Parameter Group " .. n, "    amsgrad: False", "    betas: (0.9, 0.999)",
        "    capturable: False", "    decoupled_weight_decay: False", "    differentiable: False", "    eps: 1e-08",
        "    foreach: True", "    fused: False", "    lr: " .. lr, "    maximize: False", "    weight_decay: 0"}, "\n")
    end
    assert.are.equal("Adam (\n" .. group(1, "0.001") .. "\n\n" .. group(2, "0.5") .. "\n)", tostring(opt))
  end)

  it("SGD with two groups", function()
    local m = nn.Linear(2, 2)
    local opt = optim.SGD({{params = {m.weight}}, {params = {m.bias}, lr = 0.5}}, {lr = 0.1, momentum = 0.9})
    assert.are.equal(table.concat({
      "SGD (",
      "Parameter Group 1",
      "    dampening: 0",
      "    differentiable: False",
      "    foreach: None",
      "    fused: None",
      "    lr: 0.1",
      "    maximize: False",
      "    momentum: 0.9",
      "    nesterov: False",
      "    weight_decay: 0",
      "",
      "Parameter Group 2",
      "    dampening: 0",
      "    differentiable: False",
      "    foreach: None",
      "    fused: None",
      "    lr: 0.5",
      "    maximize: False",
      "    momentum: 0.9",
      "    nesterov: False",
      "    weight_decay: 0",
      ")"}, "\n"), tostring(opt))
  end)
end)

describe("print(module:state_dict())", function()
  local function model()
    return nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2), nn.Embedding(5, 4))
  end

  it("one line per entry, in state_dict order, with shape and dtype", function()
    assert.are.equal(table.concat({
      "OrderedDict(",
      "  0.weight  [2, 3]  float32",
      "  0.bias    [2]     float32",
      "  1.weight  [2]     float32",
      "  1.bias    [2]     float32",
      "  2.weight  [5, 4]  float32",
      ")"}, "\n"), tostring(model():state_dict()))
    assert.are.equal("OrderedDict()", tostring(nn.ReLU():state_dict()))
  end)

  it("stays a plain table: pairs, indexing, assignment, load_state_dict, operations", function()
    local m = model()
    local sd = m:state_dict()
    local n = 0
    for k, v in pairs(sd) do
      n = n + 1
      assert.is_true(accel.is_tensor(v), k)
    end
    assert.are.equal(5, n)
    assert.are.same({2, 3}, {sd["0.weight"]:size(1), sd["0.weight"]:size(2)})
    sd["extra"] = accel.zeros(1)
    assert.matches("\n  extra     %[1%]     float32\n%)$", tostring(sd))
    sd["extra"] = nil
    local m2 = model()
    m2:load_state_dict(sd)
    assert.is_true(m2:state_dict()["2.weight"]:equal(sd["2.weight"]))
    local copied = require("accel.operations").map_tensors(sd, function(t) return t:clone() end)
    assert.are.equal(5, #(function() local l = {} for k in pairs(copied) do l[#l + 1] = k end return l end)())
    assert.is_true(copied["0.bias"]:equal(sd["0.bias"]))
  end)

  it("saves and loads with accel.save / accel.load", function()
    local sd = model():state_dict()
    local path = os.tmpname() .. ".safetensors"
    accel.save(sd, path)
    local back = accel.load(path)
    assert.is_true(back["0.weight"]:equal(sd["0.weight"]:to("cpu"))) -- accel.load gives cpu tensors
    os.remove(path)
  end)
end)

describe("print(model)", function()
  it("is PyTorch's module tree", function()
    assert.are.equal(table.concat({
      "Sequential(",
      "  (0): Linear(in_features=3, out_features=2, bias=True)",
      "  (1): LayerNorm((2,), eps=1e-05, elementwise_affine=True, bias=True)",
      "  (2): Embedding(5, 4)",
      ")"}, "\n"), tostring(nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2), nn.Embedding(5, 4))))
  end)
end)
