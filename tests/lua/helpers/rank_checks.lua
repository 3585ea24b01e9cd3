-- rank_checks.lua: checks for the helper scripts that run on every rank of
-- a job (loaded with dofile next to them):
--   local rc = dofile(HERE .. "/rank_checks.lua")(rank)
--   rc.check(cond, fmt, ...)     raises "rank R: <message>" when cond is false
--   rc.expect(want, fn, ...)     fn(...) must raise exactly want (its file:line prefix removed)
--   rc.expect_part(want, fn, ...) fn(...) must raise an error containing want
--   rc.count                      checks made so far
return function(rank)
  local rc = {count = 0}

  function rc.check(cond, fmt, ...)
    rc.count = rc.count + 1
    if not cond then error(("rank %d: " .. fmt):format(rank, ...), 2) end
  end

  local function raised(fn, ...)
    local ok, err = pcall(fn, ...)
    rc.check(not ok, "no error")
    return tostring(err)
  end

  function rc.expect(want, fn, ...)
    local err = raised(fn, ...)
    rc.check(err:gsub("^[^:]+:%d+: ", "") == want, "error %q, expected %q", err, want)
  end

  function rc.expect_part(want, fn, ...)
    local err = raised(fn, ...)
    rc.check(err:find(want, 1, true) ~= nil, "error %q does not contain %q", err, want)
  end

  return rc
end
