-- tests/lua/support.lua: small helpers shared by the specs and the
-- *_test.lua scripts: temporary files and folders, shell quoting, tensor
-- shapes and differences, expected errors, and running accel-lua jobs in
-- other processes with a pass / fail line per check.
--
--   local support = dofile("tests/lua/support.lua")   -- from the repository root
--
-- The assertions are luassert's (busted's assert): busted gives `assert` to
-- the spec files only, not to the modules they load with dofile.
local accel = require("accel")
local has_luassert, luassert = pcall(require, "luassert")
if not has_luassert then luassert = nil end -- the *_test.lua scripts assert nothing through it

local M = {}

-- The accel-lua under test: $ACCEL_LUA_BIN, else the interpreter running
-- this script or busted.
M.ACCEL_LUA = os.getenv("ACCEL_LUA_BIN") or arg[-1]

-- ---------------------------------------------------------------------
-- the device the suite runs on

-- The default device's type: "cpu", or what ACCEL_LUA_DEVICE names (the
-- suite runs a second time with ACCEL_LUA_DEVICE=sim).
function M.default_device() return accel.get_default_device().type end

-- For checks that are CPU-only by nature: returns `it` unchanged on the
-- CPU; under another default device, a replacement that reports each test
-- pending (counted as skipped, never as passed) with the reason.
--   it = support.cpu_only(it, pending, "reads the CPU thread team")
function M.cpu_only(it_fn, pending_fn, reason)
  if M.default_device() == "cpu" then return it_fn end
  return function(name) pending_fn(name .. " [cpu only: " .. reason .. "]") end
end

-- ---------------------------------------------------------------------
-- the interpreter (Lua 5.4, or LuaJIT 2.1 in `make test LUA=luajit`)

-- True under LuaJIT (docs/luajit.md).
M.luajit = rawget(_G, "jit") ~= nil

-- For checks that need Lua 5.4 semantics LuaJIT lacks (the integer
-- subtype, math.type, __len / __pairs on tables, <close>, 5.3+ libraries):
-- returns `it` unchanged under Lua 5.4; under LuaJIT, an `it` that reports
-- each test named in reasons pending (counted as skipped, never as passed)
-- with its reason, and runs the others. Names are the `it` names
-- (exactly); a renamed test is run again, and fails there if it still
-- needs 5.4.
--   it = support.lua54_only(it, pending, {["item returns an integer"] = "math.type"})
-- The reasons most checks need 5.4 for:
M.NO_FLOAT_SUBTYPE = "accel.tensor({1.0, ...}) gives int64 under LuaJIT (integral literals have no float subtype)"
M.NO_MATH_TYPE = "math.type (the integer subtype)"
M.NO_LEN = "# on a container or loader (LuaJIT's # ignores __len on tables)"
M.NO_IDIV = "the // operator (Lua 5.3+)"
M.NO_STRING_PACK = "string.pack / string.unpack (Lua 5.3+; support's float32 rounding uses them)"
M.NO_INT64 = "int64 values beyond 2^53 (LuaJIT numbers are doubles: tolist refuses them)"

-- A function applying a Lua 5.3+ binary operator ("//", "&", ">>", ...),
-- compiled at run time so that the spec file still parses under LuaJIT
-- (where the checks using it are skipped with lua54_only).
function M.lua54_binop(op)
  if M.luajit then return function() error("the " .. op .. " operator needs Lua 5.3+", 2) end end
  return assert(load("local a, b = ... return a " .. op .. " b"))
end

function M.lua54_only(it_fn, pending_fn, reasons)
  if not M.luajit then return it_fn end
  return function(name, ...)
    local why = reasons[name]
    if why == nil then return it_fn(name, ...) end
    return pending_fn(name .. " [Lua 5.4 only: " .. why .. "]")
  end
end

-- os.execute(cmd) with Lua 5.4's results (ok, "exit" or "signal", code)
-- also under LuaJIT, whose os.execute returns the raw wait status.
function M.execute(cmd)
  local ok, how, code = os.execute(cmd)
  if type(ok) ~= "number" then return ok, how, code end
  if ok % 256 == 0 then
    code = math.floor(ok / 256)
    return code == 0 or nil, "exit", code
  end
  return nil, "signal", ok % 128
end

-- ---------------------------------------------------------------------
-- files and folders

-- A new empty folder under the system's temporary folder.
function M.tmpdir()
  local d = os.tmpname()
  os.remove(d)
  accel._C.mkdirs(d)
  return d
end

-- A fresh temporary path ending in suffix; nothing is created there.
function M.tmpname(suffix)
  local n = os.tmpname()
  os.remove(n)
  return n .. (suffix or "")
end

-- rm -rf path (no error when it does not exist).
function M.remove_tree(path) accel._C.fs_remove_tree(path) end

function M.read_file(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- The file's contents, or "" when it cannot be read.
function M.read_if_exists(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

function M.write_file(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

-- The newline-terminated lines of s, without their newlines.
function M.lines_of(s)
  local out = {}
  for line in s:gmatch("([^\n]*)\n") do out[#out + 1] = line end
  return out
end

-- s in single quotes for /bin/sh.
function M.shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- The output of a shell command (what io.popen reads) and whether it exited 0.
function M.command_output(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  local ok = p:close()
  return out, ok == true
end

-- ---------------------------------------------------------------------
-- tensors and reference numbers

-- A tensor's sizes as a Lua list.
function M.shape_of(t)
  local s = {}
  for i = 1, t:dim() do s[i] = t:size(i) end
  return s
end

-- The numbers of a nested Lua list (:tolist() output) in row-major order.
function M.flatten(v, out)
  out = out or {}
  if type(v) ~= "table" then out[#out + 1] = v; return out end
  for i = 1, #v do M.flatten(v[i], out) end
  return out
end

-- float32 rounding of a Lua number, done by Lua's own string.pack.
function M.f32(x) return (string.unpack("<f", string.pack("<f", x))) end

-- Leaves n (default 8) freed blocks of 64 bytes, every byte 0x41, in the
-- default device's allocator cache: the next small tensors get them, so a
-- result an op forgets to write reads back non-zero (0x41414141 is 12.07
-- as a float32, 0x4141414141414141 about 2.3e6 as a float64).
function M.dirty_cache(n)
  local held = {}
  for i = 1, n or 8 do held[i] = accel.full({64}, 65, {dtype = accel.uint8}) end
  for i = 1, #held do held[i]:free() end
end

-- max |a - b| over two tensors, computed in float64 on the CPU (the
-- tensors may live on different devices: a file loads onto the CPU).
function M.max_abs_diff(a, b) return (a:to("cpu"):double() - b:to("cpu"):double()):abs():max():item() end

-- Asserts max |a - b| <= tol (default 1e-12), naming the difference.
function M.assert_close(a, b, tol)
  local d = M.max_abs_diff(a, b)
  luassert.is_true(d <= (tol or 1e-12), "max diff " .. d)
end

-- Asserts got (a tensor or a nested list) equals the list exp element by
-- element within tol (default 0): NaN matching NaN, an infinity itself.
function M.assert_values(exp, got, tol, what)
  local e, g = M.flatten(exp), M.flatten(accel.is_tensor(got) and got:tolist() or got)
  luassert.are.equal(#e, #g, (what or "values") .. ": element count")
  for i = 1, #e do
    local same = e[i] == g[i] or (e[i] ~= e[i] and g[i] ~= g[i]) or math.abs(e[i] - g[i]) <= (tol or 0)
    if not same then
      error(("%s: element %d: expected %s, got %s"):format(what or "values", i, tostring(e[i]), tostring(g[i])), 2)
    end
  end
end

-- Asserts got (a tensor or a nested list) equals the list exp element by
-- element within a relative tol (default 1e-6): |e - g| <= tol max(1, |e|),
-- NaN matching NaN.
function M.assert_near(exp, got, tol)
  local e, g = M.flatten(exp), M.flatten(accel.is_tensor(got) and got:double():tolist() or got)
  luassert.are.equal(#e, #g, "element count")
  for i = 1, #e do
    local ok = e[i] == g[i] or (e[i] ~= e[i] and g[i] ~= g[i]) or math.abs(e[i] - g[i]) <= (tol or 1e-6) * math.max(1, math.abs(e[i]))
    if not ok then error(("element %d: expected %s, got %s"):format(i, tostring(e[i]), tostring(g[i])), 2) end
  end
end

-- PyTorch's pooling output size along one dim of size n (kernel k, stride s,
-- padding p, dilation d): the floor (or ceil) of the window count; with
-- ceil_mode the last window must start inside the input or its left padding.
function M.pool_output_size(n, k, s, p, d, ceil_mode)
  local span = n + 2 * p - d * (k - 1) - 1
  local o = (ceil_mode and math.ceil(span / s) or math.floor(span / s)) + 1
  if ceil_mode and (o - 1) * s >= n + p then o = o - 1 end
  return o
end

-- Each row of x (a list of lists) normalised by its own statistics, times w
-- and plus b (lists, or nil): layer norm, or RMS norm (no mean) with rms.
function M.ref_norm_rows(x, w, b, eps, rms)
  local out = {}
  for i, row in ipairs(x) do
    local n, mean, var = #row, 0, 0
    if not rms then
      for _, v in ipairs(row) do mean = mean + v end
      mean = mean / n
    end
    for _, v in ipairs(row) do var = var + (v - mean) ^ 2 end
    var = var / n
    out[i] = {}
    for k, v in ipairs(row) do
      out[i][k] = (v - mean) / math.sqrt(var + eps) * (w and w[k] or 1) + (b and b[k] or 0)
    end
  end
  return out
end

-- ---------------------------------------------------------------------
-- expected errors (for specs: they assert with luassert). An error raised
-- by a library function passed here directly, rather than called from a
-- closure in the spec, names this file as its location.

-- f(...) must raise an error; returns its message as a string.
function M.errmsg(f, ...)
  local ok, err = pcall(f, ...)
  luassert.is_false(ok, "expected an error")
  return tostring(err)
end

-- fn()'s writes to io.stderr, as one string (the library looks io.stderr up at each write)
function M.stderr_of(fn)
  local saved, out = io.stderr, {}
  io.stderr = {write = function(self, ...) for _, v in ipairs({...}) do out[#out + 1] = v end return self end,
    flush = function(self) return self end}
  local ok, err = pcall(fn)
  io.stderr = saved
  if not ok then error(err, 0) end
  return table.concat(out)
end

-- fn() must raise an error whose message matches the Lua pattern.
function M.error_matching(pattern, fn)
  local ok, err = pcall(fn)
  luassert.is_false(ok, "expected an error matching " .. pattern)
  luassert.is_truthy(tostring(err):find(pattern), ("error %q does not match %q"):format(tostring(err), pattern))
  return err
end

-- fn (written on the line of the call) must raise one error naming the
-- calling spec's file:line once and containing each needle (plain
-- substrings); returns the message. Calls into the library must not be tail
-- calls in fn (write them as statements): a Lua tail call replaces fn's
-- frame, so no frame of the spec would be left to name.
function M.expect_error(fn, ...)
  local caller = debug.getinfo(2, "Sl")
  local spec = caller.source:gsub("^@", ""):match("[^/]*$") .. ":"
  local line = caller.currentline
  local ok, err = pcall(fn)
  luassert.is_false(ok, "expected an error, the call succeeded")
  luassert.are.equal("string", type(err), "error value is a " .. type(err))
  local where = spec .. line .. ":"
  luassert.is_truthy(err:find(where, 1, true), ("error %q does not point at %s"):format(err, where))
  local _, count = err:gsub(spec:gsub("%p", "%%%0"), "")
  luassert.are.equal(1, count, ("error %q names the location more than once"):format(err))
  for _, needle in ipairs{...} do
    luassert.is_truthy(err:find(needle, 1, true), ("error %q does not mention %q"):format(err, needle))
  end
  return err
end

-- ---------------------------------------------------------------------
-- accel-lua jobs in other processes (the *_test.lua scripts)

-- Ends the script with a FAIL line when OpenMPI's mpirun is not installed.
function M.require_mpirun()
  if not M.execute("command -v mpirun >/dev/null 2>&1") then
    print("FAIL mpirun not found (apt-get install openmpi-bin; scripts/install-deps.sh)")
    os.exit(1)
  end
end

-- "ASAN_OPTIONS=... " for the jobs of a sanitizer build, else "": MPI's own
-- leaks are suppressed (scripts/lsan.supp) only with full stacks.
function M.asan_env()
  local asan = os.getenv("ASAN_OPTIONS")
  if not asan then return "" end
  return "ASAN_OPTIONS=" .. M.shell_quote(asan .. ":fast_unwind_on_malloc=0") .. " "
end

-- The shell command running helper (a Lua script) with its arguments on 2
-- ranks under mpirun: the MPI backend, a 20 s collective watchdog, a 90 s
-- limit, and the sanitizer's options when set.
function M.mpirun_command(helper, ...)
  local args = {}
  for i, a in ipairs({...}) do args[i] = M.shell_quote(a) end
  local env = M.asan_env()
  return ("%senv -u ACCEL_LUA_DIST_BACKEND ACCEL_LUA_COLLECTIVE_TIMEOUT=20 "
    .. "timeout -k 5 90 mpirun --allow-run-as-root --oversubscribe -np 2 %s %s %s")
    :format(env ~= "" and "env " .. env or "", M.shell_quote(M.ACCEL_LUA), M.shell_quote(helper), table.concat(args, " "))
end

-- Whether s contains the plain text.
function M.has(s, plain) return s:find(plain, 1, true) ~= nil end

-- Whether every rank 0..n-1 of the job printed "ok rank R: C checks".
function M.all_ranks_ok(run, n)
  for r = 0, n - 1 do
    if not run.out:find(("ok rank %d: %%d+ checks"):format(r)) then return false end
  end
  return true
end

-- A list of checks on jobs:
--   jobs.run(cmd)     runs the shell command, stdout and stderr captured:
--                     {code, out, err, secs}
--   jobs.check(name, run, {cond, "what failed"}, ...)
--                     one "ok" or "FAIL" line (with the run's output)
--   jobs.finish()     removes the captures, prints "N passed, N failed",
--                     exits 0 when nothing failed
-- (M.launcher runs accel-lua launch jobs through it.)
function M.job_checks()
  local tmp = os.tmpname()
  local passed, failed = 0, 0
  local jobs = {}

  function jobs.run(cmd)
    local t0 = accel.clock()
    local _, how, code = M.execute(("%s >%s 2>%s"):format(cmd, M.shell_quote(tmp .. ".out"),
      M.shell_quote(tmp .. ".err")))
    local run = {secs = accel.clock() - t0, out = M.read_if_exists(tmp .. ".out"), err = M.read_if_exists(tmp .. ".err")}
    run.code = how == "exit" and code or 128 + code
    return run
  end

  function jobs.check(name, run, ...)
    local why = {}
    for _, c in ipairs({...}) do
      if not c[1] then why[#why + 1] = c[2] end
    end
    if #why == 0 then
      passed = passed + 1
      print(("ok   %s (%.1f s)"):format(name, run.secs))
      return
    end
    failed = failed + 1
    print(("FAIL %s (%.1f s, exit %d): %s"):format(name, run.secs, run.code, table.concat(why, "; ")))
    print("  stdout: " .. run.out:sub(-3000):gsub("\n", "\n  | "))
    print("  stderr: " .. run.err:sub(-3000):gsub("\n", "\n  | "))
  end

  function jobs.finish()
    os.remove(tmp)
    os.remove(tmp .. ".out")
    os.remove(tmp .. ".err")
    print(("%d passed, %d failed"):format(passed, failed))
    os.exit(failed == 0 and 0 or 1)
  end

  return jobs
end

-- For a helper run on every rank: check(cond, fmt, ...) raises "rank R: ..."
-- at the caller when cond is false, and count() tells how many ran.
function M.rank_checker(rank)
  local n = 0
  local function check(cond, fmt, ...)
    n = n + 1
    if not cond then error(("rank %d: " .. fmt):format(rank, ...), 2) end
  end
  return check, function() return n end
end

-- A clean environment for launched jobs: no config file (DIR/no-config.yaml
-- never exists), none of the settings a caller's shell may export, the
-- sanitizer options of a sanitizer build.
function M.job_env(dir)
  return "env -u ACCEL_LUA_COLLECTIVE_TIMEOUT -u ACCEL_LUA_DIST_BACKEND -u ACCEL_LUA_MIXED_PRECISION "
    .. "-u ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS -u ACCEL_LUA_USE_DEEPSPEED -u ACCEL_LUA_USE_FSDP "
    .. "-u ACCEL_LUA_DEBUG_MODE -u ACCELERATE_DEBUG_MODE -u ACCEL_LUA_TEST_RANKS_PER_NODE "
    .. "ACCEL_LUA_CONFIG=" .. M.shell_quote(dir .. "/no-config.yaml") .. " " .. M.asan_env()
end

-- launch(np, helper, args...) for jobs = M.job_checks(): runs
-- `accel-lua launch --cpu --num_processes np HELPERS/helper args...` in env
-- (limited to 120 s) -> {code, out, err, secs}.
function M.launcher(jobs, env, helpers)
  return function(np, helper, ...)
    local args = {}
    for i, a in ipairs({...}) do args[i] = M.shell_quote(tostring(a)) end
    return jobs.run(("%stimeout -k 5 120 %s launch --cpu --num_processes %d %s %s"):format(env,
      M.shell_quote(M.ACCEL_LUA), np, M.shell_quote(helpers .. helper), table.concat(args, " ")))
  end
end

-- mpirun(np, args, env) for jobs = M.job_checks(): runs `mpirun -np np
-- accel-lua args` (oversubscribed, limited to 90 s) after the environment
-- prefix base (e.g. "env -u X ") and env -> {code, out, err, secs}.
function M.mpi_runner(jobs, base)
  local asan = M.asan_env()
  return function(np, args, env)
    return jobs.run(("%s%s%stimeout -k 5 90 mpirun --allow-run-as-root --oversubscribe -np %d %s %s"):format(base,
      asan, env or "", np, M.shell_quote(M.ACCEL_LUA), args))
  end
end

-- Largest relative difference (per tensor: max |a - b| / max |b|) between
-- two safetensors files, and the name of that tensor.
function M.max_rel(path_a, path_b)
  local ok_a, a = pcall(accel.load, path_a)
  local ok_b, b = pcall(accel.load, path_b)
  if not (ok_a and ok_b) then return math.huge, "a result file is missing" end
  local worst, where = 0, "-"
  for k, t in pairs(b) do
    if not a[k] then return math.huge, "no " .. k end
    local scale = t:double():abs():max():item()
    local d = (a[k]:double() - t:double()):abs():max():item() / (scale > 0 and scale or 1)
    if d > worst then worst, where = d, k end
  end
  return worst, where
end

return M
