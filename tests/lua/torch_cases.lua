-- tests/lua/torch_cases.lua: runs functions against the cases a
-- scripts/fixtures/make_*_fixtures.py script recorded with PyTorch in one
-- safetensors file, in that format: for each case NAME, NAME.in1, NAME.in2,
-- ... the inputs (those with a recorded gradient made to require grad),
-- NAME.y (or NAME.y1, NAME.y2, ... for a list or several
-- returns) the outputs, and for a differentiable case NAME.w1, ... a weight
-- of each output's shape and NAME.g1, ... the gradients of sum(y_i * w_i)
-- with respect to the floating inputs.
--
--   local torch_cases = dofile("tests/lua/torch_cases.lua")
--   torch_cases.describe(describe, it, "what matches PyTorch", ref, CASES, tol)
--     CASES: name -> function(inputs...) returning the output(s); describe
--     and it are busted's (they live in the spec's environment)
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local assert = require("luassert") -- (busted's assert lives in the spec's environment)

local M = {}
local unpack = table.unpack or unpack -- (LuaJIT)

-- the fixture's inputs of a case, those with a recorded gradient requiring grad
local function inputs(ref, name)
  local xs, differentiable = {}, ref[name .. ".w1"] ~= nil
  while ref[("%s.in%d"):format(name, #xs + 1)] do
    local i = #xs + 1
    local x = ref[("%s.in%d"):format(name, i)]:clone()
    if ref[("%s.g%d"):format(name, i)] ~= nil then x:requires_grad_(true) end
    xs[i] = x
  end
  return xs, differentiable
end

-- the outputs of f as a list (a list result, or several returns)
local function outputs(...)
  local first = ...
  if select("#", ...) == 1 and type(first) == "table" and not accel.is_tensor(first) then return first end
  return {...}
end

-- a tensor compared with a torch one: same shape and values within tol (NaN
-- where torch has NaN); bool and integer results exactly, of the same dtype
function M.same(got, want, tol, what)
  got = got:to("cpu") -- (a file loads onto the CPU; the sim device makes new tensors on sim)
  assert.are.same(want.shape, got.shape, what .. " shape")
  if not want:is_floating_point() then
    assert.are.equal(want.dtype, got.dtype, what .. " dtype")
    assert.are.same(want:tolist(), got:tolist(), what)
    return
  end
  local nan = want:isnan()
  assert.is_true(got:isnan():equal(nan), what .. ": NaN positions")
  support.assert_close(accel.where(nan, 0, got:double()), accel.where(nan, 0, want), tol)
end

-- one busted `it` per case, in name order: outputs and input gradients within tol
function M.describe(describe, it, title, ref, cases, tol)
  describe(title, function()
    local names = {}
    for name in pairs(cases) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      it(name, function()
        local xs, differentiable = inputs(ref, name)
        local ys = outputs(cases[name](unpack(xs)))
        local single = ref[name .. ".y"] ~= nil
        assert.are.equal(single and 1 or #ys, #ys, name .. ": number of outputs")
        local loss
        for i, y in ipairs(ys) do
          M.same(y, ref[single and name .. ".y" or ("%s.y%d"):format(name, i)], tol, name)
          if differentiable then
            local term = (y * ref[("%s.w%d"):format(name, i)]:to(y.device)):sum()
            loss = loss and loss + term or term
          end
        end
        if differentiable then
          loss:backward()
          for i, x in ipairs(xs) do
            if x.requires_grad then support.assert_close(x.grad, ref[("%s.g%d"):format(name, i)], tol) end
          end
        end
      end)
    end
  end)
end

return M
