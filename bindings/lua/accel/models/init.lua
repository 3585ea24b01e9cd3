-- accel.models: ready-made model definitions written with accel.nn, one
-- file each (accel/models/<name>.lua, loaded on first use of
-- accel.models.<name>):
--   gpt2.lua   GPT-2 with Hugging Face's module names and weight layouts
--              (accel.models.gpt2.GPT2LMHeadModel, GPT2Config, ...)
return setmetatable({}, {
  __index = function(t, k)
    if type(k) ~= "string" or package.preload["accel.models." .. k] == nil then return nil end
    local m = require("accel.models." .. k)
    rawset(t, k, m)
    return m
  end,
})
