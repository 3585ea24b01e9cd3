-- luajit_spec.lua: what the LuaJIT build (docs/luajit.md) does differently
-- from Lua 5.4, checked under both interpreters (make test runs the specs
-- under each): accel.compat's stand-ins give the built-in functions'
-- results, integers beyond 2^53 raise instead of being rounded under
-- LuaJIT, non-integral numbers are refused where an integer is needed, a
-- shuffling DataLoader's drawn seed is one the interpreter holds exactly,
-- library errors raised from Lua point at the caller's line, grad-mode
-- handles close with h:close(), the shipped examples run (examples/gpt.lua:
-- gpt_spec.lua), and the REPL reads an unfinished statement on.
-- Written in the LuaJIT subset (no <close>, //, math.type) so that it runs
-- under both.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local compat = require("accel.compat")
local nn = accel.nn

local here = debug.getinfo(1, "S").short_src:match("[^/]*$")

-- "file:line:" of the line calling this function
local function line_of_caller() return here .. ":" .. debug.getinfo(2, "l").currentline .. ":" end

describe("accel.compat", function()
  it("pack / unpack keep nils and the count", function()
    local t = compat.pack(1, nil, 3, nil)
    assert.are.equal(4, t.n)
    local a, b, c, d = compat.unpack(t, 1, t.n)
    assert.are.same({1, "nil", 3, "nil"}, {a, tostring(b), c, tostring(d)})
  end)

  it("string_pack writes IEEE-754 and little-endian integers bit for bit", function()
    -- 1.5 = 0x3FF8000000000000 (double), 0x3FC00000 (float)
    assert.are.equal("\0\0\0\0\0\0\248\63", compat.string_pack("<d", 1.5))
    assert.are.equal("\0\0\192\63", compat.string_pack("<f", 1.5))
    assert.are.equal("\4\3\2\1", compat.string_pack("<I4", 0x01020304))
    assert.are.equal("\7\6\5\4\3\2\1\0", compat.string_pack("<I8", 0x0001020304050607))
  end)

  it("len and ipairs see a container's __len / __index", function()
    local seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert.are.equal(3, compat.len(seq))
    local names = {}
    for i, m in compat.ipairs(seq) do names[i] = tostring(m):match("^%a+") end
    assert.are.same({"Linear", "ReLU", "Linear"}, names)
    assert.are.equal(2, compat.len({5, 6}))
  end)
end)

describe("integers", function()
  it("a non-integral number where an integer is needed is refused", function()
    local ok, err = pcall(accel.manual_seed, 1.5)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("number has no integer representation", 1, true), err)
  end)

  it("an int64 value beyond 2^53 is exact under Lua 5.4, an error at the caller's line under LuaJIT", function()
    local big = accel.tensor({2^60}, {dtype = accel.int64})
    if not support.luajit then
      assert.are.equal("1152921504606846976", tostring(big:item()))
      return
    end
    local where
    local ok, err = pcall(function()
      where = line_of_caller(); local v = big:item(); return v
    end)
    assert.is_false(ok)
    assert.truthy(err:find("item: integer 1152921504606846976 does not fit a LuaJIT number", 1, true), err)
    assert.truthy(err:find(where, 1, true), err .. " does not point at " .. where)
  end)

  it("values up to 2^53 come out exactly under both", function()
    assert.are.equal(2^53, accel.tensor({2^53}, {dtype = accel.int64}):item())
    assert.are.equal(-2^53, accel.tensor({-2^53}, {dtype = accel.int64}):item())
  end)

  it("a shuffling DataLoader without a seed draws one the interpreter holds exactly", function()
    local loader = accel.data.DataLoader(accel.data.TensorDataset(accel.randn(8, 2)), {batch_size = 2, shuffle = true})
    local limit = support.luajit and 2^53 or 2^62
    assert.is_true(loader.seed >= 0 and loader.seed < limit, tostring(loader.seed))
    assert.are.equal(loader.seed, math.floor(loader.seed))
  end)
end)

describe("grad-mode handles (no <close> under LuaJIT)", function()
  it("h:close() restores the previous modes once; a second close changes nothing", function()
    for _, name in ipairs({"no_grad", "enable_grad", "inference_mode"}) do
      accel.set_grad_enabled(name == "enable_grad" and false or true)
      local before, inf_before = accel.is_grad_enabled(), accel.is_inference_mode_enabled()
      local h = accel[name]()
      assert.are.equal(name == "enable_grad", accel.is_grad_enabled(), name)
      assert.are.equal(name == "inference_mode", accel.is_inference_mode_enabled(), name)
      h:close()
      assert.are.same({before, inf_before}, {accel.is_grad_enabled(), accel.is_inference_mode_enabled()}, name)
      accel.set_grad_enabled(not before)
      h:close()
      assert.are.equal(not before, accel.is_grad_enabled(), name)
    end
    accel.set_grad_enabled(true)
  end)

  it("h.close() is an error at the caller's line", function()
    local h = accel.no_grad()
    h:close()
    local where
    local ok, err = pcall(function()
      where = line_of_caller(); h.close()
    end)
    assert.is_false(ok)
    assert.truthy(err:find(where .. " close: call it as h:close()", 1, true), err)
  end)
end)

describe("errors raised by the Lua library", function()
  it("point at the caller's line (no frame lost to a tail call)", function()
    local where
    local ok, err = pcall(function()
      where = line_of_caller(); local o = accel.Accelerator{no_such_option = 1}; return o
    end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find(where, 1, true), tostring(err) .. " does not point at " .. where)
  end)
end)

describe("the shipped examples under this interpreter", function()
  -- output of `accel-lua examples/NAME args...` (stderr too) and whether it exited 0
  local function run_example(name, args, exe)
    local out = support.tmpname(".out")
    local ok = support.execute(("%s examples/%s %s >%s 2>&1"):format(
      support.shell_quote(exe or support.ACCEL_LUA), name, args, support.shell_quote(out)))
    local text = support.read_file(out)
    os.remove(out)
    return ok, text
  end

  -- the accel-lua of the other interpreter next to this one (build/accel-lua
  -- and build/luajit/accel-lua), or nil when it was not built
  local function other_interpreter()
    local exe = support.ACCEL_LUA
    local other = jit and exe:gsub("luajit/accel%-lua$", "accel-lua") or exe:gsub("accel%-lua$", "luajit/accel-lua")
    local f = other ~= exe and io.open(other)
    if not f then return nil end
    f:close()
    return other
  end

  it("regression.lua fits the true weights 3, -2 and bias 0.5", function()
    local ok, out = run_example("regression.lua", "300")
    assert(ok, out)
    local w1, w2, b = out:match("learned w = %(([-%d.]+), ([-%d.]+)%), b = ([-%d.]+)")
    assert(w1, out)
    assert.is_true(math.abs(w1 - 3) < 0.05 and math.abs(w2 + 2) < 0.05 and math.abs(b - 0.5) < 0.05, out)
  end)

  it("mlp.lua and custom_module.lua train and save; the schedule spans the loader's length", function()
    local dir = support.tmpdir()
    local ok, out = run_example("mlp.lua", support.shell_quote(dir .. "/mlp"))
    assert(ok and out:find("epoch 5 loss", 1, true), out)
    assert.is_not_nil(accel._C.file_size(dir .. "/mlp/model.safetensors"))
    ok, out = run_example("custom_module.lua", support.shell_quote(dir .. "/custom") .. " 1")
    assert(ok and out:find("epoch 1  loss", 1, true), out)
    -- HF's cosine schedule with 20 warmup steps over 1 epoch of ceil(4000 / 64) = 63 batches, at step 60
    local lr = support.read_file(dir .. "/custom/custom_module/metrics.jsonl"):match('"step": 60,[^\n]*"lr": ([-%d.e]+)')
    assert.is_true(math.abs(tonumber(lr) - 3e-3 * 0.5 * (1 + math.cos(math.pi * 40 / 43))) < 1e-9, lr)
    support.remove_tree(dir)
  end)

  it("custom_module.lua trains the same weights under Lua 5.4 and LuaJIT (its loop visits every block)", function()
    local other = other_interpreter()
    if not other then return pending("the other interpreter's accel-lua is not built (make luajit)") end
    local dir = support.tmpdir()
    local ok, out = run_example("custom_module.lua", support.shell_quote(dir .. "/here") .. " 1")
    assert(ok, out)
    ok, out = run_example("custom_module.lua", support.shell_quote(dir .. "/there") .. " 1", other)
    assert(ok, out)
    local ckpt = "/checkpoints/checkpoint_0/model.safetensors"
    local here, there = accel.load(dir .. "/here" .. ckpt), accel.load(dir .. "/there" .. ckpt)
    assert.is_not_nil(here["blocks.1.down.weight"])
    for name, t in pairs(here) do
      assert(accel.equal(t, there[name]), name .. " differs between " .. support.ACCEL_LUA .. " and " .. other)
    end
    support.remove_tree(dir)
  end)
end)

describe("the REPL of this interpreter", function()
  it("reads an unfinished statement on the next lines (the parser's end-of-input message)", function()
    local out = support.tmpname(".out")
    local cmd = ("printf 'for i = 1, 2 do\\nprint(i * 10)\\nend\\n' | %s -i >%s 2>&1"):format(
      support.shell_quote(support.ACCEL_LUA), support.shell_quote(out))
    support.execute(cmd)
    local text = support.read_file(out)
    os.remove(out)
    assert.truthy(text:find("10\n20\n", 1, true), text)
    assert.falsy(text:find("expected", 1, true), text)
  end)
end)
