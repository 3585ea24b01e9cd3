-- accel.data.collate: the default collate, PyTorch's default_collate rules
-- in Lua terms. A batch is a list of samples; each field is collated across
-- the samples: tensors are stacked on a new dim 1 (all must have one shape),
-- numbers become a 1-D tensor (int64 when all are Lua integers, float32
-- otherwise), booleans a bool tensor, strings stay a Lua list, and tables
-- (not tensors) are collated key by key into a table of the same keys.
local accel = require("accel")
local U = require("accel.data.util")
local strip_position = require("accel.util").strip_position

local M = {}

-- Errors name the samples by `noun` and position (items[b]): "dataset item 17".
local function where(ctx, b) return ctx.noun .. " " .. tostring(ctx.items[b]) end

local function stack(values, ctx, label)
  local ok, r = pcall(accel.stack, values)
  if ok then return r end
  local s1 = U.shape_str(values[1])
  for b = 2, #values do
    local s = U.shape_str(values[b])
    if s ~= s1 then
      U.failf("DataLoader: cannot collate %s: %s has shape %s but %s has shape %s (samples stacked into a batch need one shape; give the DataLoader a collate_fn to pad them)",
        label, where(ctx, 1), s1, where(ctx, b), s)
    end
  end
  U.failf("DataLoader: cannot collate %s: %s", label, strip_position(r))
end

local collate

local function collate_table(values, ctx, label)
  local out = {}
  local n1 = #values[1]
  for b = 2, #values do
    if #values[b] ~= n1 and (n1 > 0 or #values[b] > 0) then
      U.failf("DataLoader: cannot collate %s: each element in list of batch should be of equal size (%s has %d, %s has "
        .. "%d); pad the samples (or give the DataLoader a collate_fn)", label, where(ctx, 1), n1, where(ctx, b),
        #values[b])
    end
    for k in pairs(values[b]) do
      if values[1][k] == nil then
        U.failf("DataLoader: cannot collate %s: %s has key %s but %s does not", label, where(ctx, b), tostring(k),
          where(ctx, 1))
      end
    end
  end
  for k in pairs(values[1]) do
    local col = {}
    for b = 1, #values do
      local v = values[b][k]
      if v == nil then
        U.failf("DataLoader: cannot collate %s: %s has key %s but %s does not", label, where(ctx, 1), tostring(k), where(ctx, b))
      end
      col[b] = v
    end
    local sub = type(k) == "number" and (label .. "[" .. k .. "]") or (label .. "." .. tostring(k))
    out[k] = collate(col, ctx, sub)
  end
  return out
end

-- values: one field across the batch's samples.
collate = function(values, ctx, label)
  local v1 = values[1]
  local kind = accel.is_tensor(v1) and "tensor" or type(v1)
  for b = 2, #values do
    local v = values[b]
    local k = accel.is_tensor(v) and "tensor" or type(v)
    if k ~= kind then
      U.failf("DataLoader: cannot collate %s: %s gives a %s but %s gives a %s", label, where(ctx, 1), kind, where(ctx, b), k)
    end
  end
  if kind == "tensor" then return stack(values, ctx, label) end
  if kind == "number" or kind == "boolean" then return accel.tensor(values) end
  if kind == "string" then
    local out = {}
    for b = 1, #values do out[b] = values[b] end
    return out
  end
  if kind == "table" then return collate_table(values, ctx, label) end
  U.failf("DataLoader: cannot collate %s: %s is a %s (expected tensors, numbers, booleans, strings or tables of them)",
    label, where(ctx, 1), kind)
end

-- The loader's default: samples[b] is the list of fields of dataset item
-- items[b]; nfields > 1 returns one collated value per field.
function M.collate_fields(samples, items, nfields)
  local ctx = {noun = "dataset item", items = items}
  if nfields == 1 then
    local col = {}
    for b = 1, #samples do col[b] = samples[b][1] end
    return collate(col, ctx, "the samples")
  end
  local out = {}
  for f = 1, nfields do
    local col = {}
    for b = 1, #samples do col[b] = samples[b][f] end
    out[f] = collate(col, ctx, "field " .. f)
  end
  return U.unpack(out, 1, nfields)
end

-- data.default_collate(batch): batch is a list of samples (each a tensor,
-- number, boolean, string or table of them); returns the collated value.
function M.default_collate(batch)
  if type(batch) ~= "table" or #batch == 0 then U.fail("default_collate: expected a non-empty list of samples") end
  local items = {}
  for b = 1, #batch do items[b] = b end
  return collate(batch, {noun = "sample", items = items}, "the batch")
end

return M
