-- safetensors_stream_spec.lua: safetensors one tensor at a time
-- (core/io/safetensors.c's safetensors_open / _read / _writer_*, as
-- accel._C.st_open / st_writer), the I/O under sharded checkpoints: the
-- streamed file is byte-identical to accel.save's, ranged reads return the
-- elements asked for, and misuse is one clear error that leaves no file.
local accel = require("accel")
local support = dofile("tests/lua/support.lua")
local C = accel._C

describe("safetensors one tensor at a time", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() support.remove_tree(dir) end)

  local function tensors()
    return {w = accel.arange(12):float():reshape(3, 4), b = accel.tensor({1.5, -2}),
      ["a.idx"] = accel.tensor({7, 8, 9}):long()}
  end

  it("writes the bytes accel.save writes, from tensors or {dtype, shape} specs", function()
    local t = tensors()
    accel.save(t, dir .. "/ref.safetensors", {format = "pt"})
    local specs = {w = {dtype = "F32", shape = {3, 4}}, b = t.b, ["a.idx"] = {dtype = "I64", shape = {3}}}
    local w = C.st_writer(dir .. "/new.safetensors", specs, {format = "pt"})
    assert.are.same({"a.idx", "b", "w"}, w:names())
    for _, name in ipairs(w:names()) do w:put(t[name]) end
    w:finish()
    assert.are.equal(support.read_file(dir .. "/ref.safetensors"), support.read_file(dir .. "/new.safetensors"))
  end)

  it("has no fixed limit on tensors or metadata entries: 5000 tensors and 300 entries, streamed or not", function()
    local t, specs, meta = {}, {}, {}
    for i = 1, 5000 do
      t["w" .. i] = accel.full({1}, i)
      specs["w" .. i] = {dtype = "I64", shape = {1}}
    end
    for i = 1, 300 do meta["k" .. i] = "v" .. i end
    accel.save(t, dir .. "/many.safetensors", meta)
    local w = C.st_writer(dir .. "/many2.safetensors", specs, meta)
    for _, name in ipairs(w:names()) do w:put(t[name]) end
    w:finish()
    assert.are.equal(support.read_file(dir .. "/many.safetensors"), support.read_file(dir .. "/many2.safetensors"))
    local back = accel.load(dir .. "/many.safetensors")
    assert.are.equal(4999, back.w4999:item())
    local r = C.st_open(dir .. "/many.safetensors")
    assert.are.equal(5000, #r:entries())
    r:close()
  end)

  it("writes tensors from any device: sim tensors (strided too) give the CPU file's bytes", function()
    local t = tensors()
    local cpu, sim = {}, {}
    for name, v in pairs(t) do cpu[name], sim[name] = v:to("cpu"), v:to("sim") end
    sim.w = cpu.w:t():contiguous():to("sim"):t() -- w again, as a strided view of its transpose
    assert.is_false(sim.w:is_contiguous())
    accel.save(cpu, dir .. "/ref.safetensors")
    local w = C.st_writer(dir .. "/new.safetensors", sim)
    for _, name in ipairs(w:names()) do w:put(sim[name]) end
    w:finish()
    assert.are.equal(support.read_file(dir .. "/ref.safetensors"), support.read_file(dir .. "/new.safetensors"))
  end)

  it("reads one tensor, or a range of its elements, and lists the header", function()
    accel.save(tensors(), dir .. "/f.safetensors")
    local f = C.st_open(dir .. "/f.safetensors")
    local e = f:entries()
    assert.are.same({name = "a.idx", dtype = "I64", shape = {3}}, e[1])
    assert.are.same({name = "w", dtype = "F32", shape = {3, 4}}, e[3])
    assert.are.same({{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}}, f:read("w"):tolist())
    assert.are.same({5, 6, 7}, f:read("w", 5, 3):tolist())
    assert.are.same({}, f:read("w", 12, 0):tolist())
    support.error_matching("elements %[10, 13%) are outside tensor 'w' of 12 elements", function() f:read("w", 10, 3) end)
    support.error_matching("the file has no tensor 'nope'", function() f:read("nope") end)
    f:close()
    support.error_matching("the file was closed", function() f:read("w") end)
  end)

  it("refuses a put that does not match the header and leaves no file", function()
    local path = dir .. "/bad.safetensors"
    local w = C.st_writer(path, {x = {dtype = "F32", shape = {4}}})
    support.error_matching("tensor 1 is F32 with 3 elements, the header says F32 with 4", function()
      w:put(accel.zeros(3))
    end)
    support.error_matching("the writer was finished or aborted", function() w:put(accel.zeros(4)) end)
    assert.is_nil(C.fs_stat(path))
    assert.are.same({}, C.fs_listdir(dir))
  end)

  it("will not rename a file over a FIFO (or a device such as /dev/null): one error, the FIFO kept", function()
    local fifo = dir .. "/pipe"
    local made = os.execute("mkfifo '" .. fifo .. "'")
    assert.is_true(made == true or made == 0) -- Lua 5.4 / LuaJIT
    support.error_matching("pipe' is a FIFO; a save writes a whole new file", function()
      accel.save({x = accel.zeros(2)}, fifo)
    end)
    support.error_matching("pipe' is a FIFO", function() C.st_writer(fifo, {x = {dtype = "F32", shape = {2}}}) end)
    support.error_matching("pipe is a FIFO", function() C.fs_write(fifo, "text") end)
    local p = io.popen("stat -c %F '" .. fifo .. "'")
    assert.are.equal("fifo", p:read("l"))
    p:close()
    assert.are.same({"pipe"}, C.fs_listdir(dir)) -- no temporary file left either
  end)

  it("refuses to finish before every tensor is put, and abort removes the temporary file", function()
    local path = dir .. "/short.safetensors"
    local w = C.st_writer(path, {x = {dtype = "F32", shape = {2}}, y = {dtype = "F32", shape = {2}}})
    w:put(accel.zeros(2))
    support.error_matching("1 of 2 tensors were written", function() w:finish() end)
    assert.are.same({}, C.fs_listdir(dir))
    local w2 = C.st_writer(path, {x = {dtype = "F32", shape = {2}}})
    w2:abort()
    assert.are.same({}, C.fs_listdir(dir))
  end)

  it("names a bad spec and a file that is not safetensors", function()
    support.error_matching("'x': dtype must be one of", function() C.st_writer(dir .. "/s", {x = {dtype = "F33", shape = {1}}}) end)
    support.error_matching("'x': shape must be a list", function() C.st_writer(dir .. "/s", {x = {dtype = "F32"}}) end)
    support.error_matching("'x' is neither a tensor nor {dtype, shape}", function() C.st_writer(dir .. "/s", {x = 3}) end)
    support.write_file(dir .. "/junk", "not a safetensors file at all")
    support.error_matching("junk.*is not a safetensors file", function() C.st_open(dir .. "/junk") end)
    support.error_matching("cannot open", function() C.st_open(dir .. "/missing") end)
  end)
end)
