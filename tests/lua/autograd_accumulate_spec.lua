-- The backward engine's accumulation paths (core/autograd.c, core/view.c):
-- a gradient held by nothing else is added into in place or adopted as a
-- leaf's .grad without a copy, and narrow / select (split, chunk, indexing)
-- write their slices straight into the producer's accumulated gradient.
-- Each case is checked against central finite differences in float64 and,
-- where sharing could go wrong, against gradients computed without the
-- shared paths; a .grad must never alias another tensor the user holds.
local accel = require("accel")
local gc = dofile("tests/lua/gradcheck.lua")
local check = gc.check

describe("engine accumulation", function()
  before_each(function() accel.set_seed(11) end)

  it("split parts all used: one gradient built from the slices", function()
    check(function(x)
      local p = (x * 2):split(2, 2)
      return p[1] * 3 + p[2]:exp() + p[3]:sin()
    end, {gc.randn(3, 6)})
  end)

  it("split parts used unevenly, some twice, one not at all", function()
    check(function(x)
      local p = (x + 1):split(2, 2)
      return (p[1] * p[1]):sum(2) + p[3]:sum(2) * 2 + p[1]:sum(2)
    end, {gc.randn(3, 6)})
  end)

  it("a split tensor also used whole, before and after its parts", function()
    check(function(x)
      local y = x:tanh()
      local p = y:split(3, 2)
      return y:sum() * 0.5 + (p[1] * p[2]):sum() + y:pow(2):sum()
    end, {gc.randn(2, 6)})
  end)

  it("a full-size narrow next to the same tensor (one gradient reaching it twice)", function()
    check(function(x)
      local y = x * 1.5
      return (y:narrow(2, 1, 4) + y):pow(2):sum()
    end, {gc.randn(3, 4)})
  end)

  it("select and narrow along different dims of one tensor", function()
    check(function(x)
      local y = x:exp()
      return y:select(1, 2):sum() + y:narrow(2, 2, 2):pow(2):sum() + y[3]:sum() * 3
    end, {gc.randn(3, 4)})
  end)

  it("narrow of a leaf keeps the plain path (gradient into .grad)", function()
    check(function(x) return x:narrow(1, 2, 2):pow(3):sum() + x:select(2, 1):sum() end, {gc.randn(4, 3)})
  end)

  it("slices of a bfloat16 tensor accumulate in its dtype", function()
    local x = accel.randn(2, 8, {requires_grad = true})
    local y = x:bfloat16()
    local p = y:split(4, 2)
    local loss = (p[1]:float() * 2):sum() + (p[2]:float() * 3):sum()
    loss:backward()
    local want = accel.cat({accel.full({2, 4}, 2), accel.full({2, 4}, 3)}, 2)
    assert.is_true(x.grad:equal(want))
  end)

  it("a leaf's .grad never aliases a tensor the user holds", function()
    local w = accel.randn(3, 3, {requires_grad = true})
    local ctx_holder
    local F2 = accel.autograd.Function{
      forward = function(ctx, x) ctx_holder = ctx; return x * 1 end,
      backward = function(ctx, g) ctx.kept = g * 2; return ctx.kept end,
    }
    F2(w):sum():backward()
    local kept = ctx_holder.kept
    assert.is_true(w.grad:equal(accel.full({3, 3}, 2)))
    w.grad:add_(1) -- must not change the tensor the backward kept
    assert.is_true(kept:equal(accel.full({3, 3}, 2)))
  end)

  it("gradients accumulated in place match out-of-place sums over steps", function()
    local x = gc.randn(4, 5)
    for _ = 1, 2 do
      local y = x * 2
      local p = y:split(2, 2) -- parts of 2, 2, 1
      local z = (y * 3):sum() + (p[1] * y:narrow(2, 1, 2)):sum() + p[3]:exp():sum()
      z:backward()
    end
    local xd = x:detach()
    local want = (accel.full({4, 5}, 6, {dtype = accel.float64})
      + accel.cat({xd:narrow(2, 1, 2) * 8, accel.zeros(4, 2, {dtype = accel.float64}),
                   (xd:narrow(2, 5, 1) * 2):exp() * 2}, 2)) * 2
    assert.is_true((x.grad - want):abs():max():item() < 1e-10)
  end)
end)
