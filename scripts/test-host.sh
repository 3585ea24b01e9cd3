#!/usr/bin/env bash
# test-host.sh: checks of the accel-lua program itself (command line, arg
# table, stdin, -l, errors and tracebacks, `accel` loading, embedded library,
# accel.so under plain lua5.4). Run by scripts/run-tests.sh:
#
#   scripts/test-host.sh [BUILD_DIR]     (default: build)
#
# Prints one line per check and ends with "N passed, N failed". Startup time
# is printed for information only.
# shellcheck source=scripts/test-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh" "$@"

# expect NAME EXPECTED_STDOUT CMD...: exit 0 and exactly this output.
expect() {
    local name=$1 want=$2 got
    shift 2
    if got=$("$@" 2>&1) && [[ $got == "$want" ]]; then ok "$name"; else bad "$name" "$got"; fi
}

check_version() {
    local out
    out=$("$EXE" -v 2>&1)
    if [[ $out =~ ^accel-lua\ [0-9]+\.[0-9]+\.[0-9]+\ \(Lua\ 5\.4\.[0-9]+\)$ ]]; then
        ok "-v prints the version"
    else
        bad "-v prints the version" "$out"
    fi
}

check_args() {
    printf 'print(#arg, arg[-3] ~= nil, arg[-2], arg[-1], arg[0], arg[1], arg[2], ...)\n' >"$TMP/args.lua"
    expect "arg table and ... for a script" \
        "$(printf '2\ttrue\t-e\tx=1\t%s\ta\tb c\ta\tb c' "$TMP/args.lua")" \
        "$EXE" -e x=1 "$TMP/args.lua" a "b c"
    expect "- runs stdin with args" "$(printf -- '-\tp\tq')" \
        "$EXE" - p q <<<'print(arg[0], ...)'
    expect "no script, piped stdin runs it" "piped" "$EXE" <<<'print("piped")'
    printf 'print(...)\n' >"$TMP/args2.lua"
    expect "-- stops options" "$(printf -- '-e\t1')" "$EXE" -- "$TMP/args2.lua" -e 1
}

check_library() {
    mkdir -p "$TMP/lib"
    printf 'return { answer = 42, name = ... }\n' >"$TMP/lib/hostmod.lua"
    expect "-l mod sets a global" "42	hostmod" \
        env LUA_PATH="$TMP/lib/?.lua" "$EXE" -l hostmod -e 'print(hostmod.answer, hostmod.name)'
    expect "-l g=mod sets global g" "42" \
        env LUA_PATH="$TMP/lib/?.lua" "$EXE" -l hm=hostmod -e 'print(hm.answer)'
    # lua5.4 5.4.4 (the version linked): the global is the whole name, '-' and all
    printf 'return { answer = 7 }\n' >"$TMP/lib/host-mod2.lua"
    expect "-l mod-suffix sets the global of the whole name, as lua5.4 5.4.4" "7	nil" \
        env LUA_PATH="$TMP/lib/?.lua" "$EXE" -l host-mod2 -e 'print(_G["host-mod2"].answer, host)'
}

check_error() {
    local err rc
    printf 'local x = 1\nlocal function f()\n  error("host test boom")\nend\nf()\n' >"$TMP/fail.lua"
    err=$("$EXE" "$TMP/fail.lua" 2>&1 >/dev/null)
    rc=$?
    if [[ $rc -eq 1 && $err == "accel-lua: $TMP/fail.lua:3: host test boom"* &&
          $err == *"stack traceback:"* && $err == *"fail.lua:5:"* ]]; then
        ok "error: exit 1, message and traceback on stderr"
    else
        bad "error: exit 1, message and traceback on stderr" "rc=$rc $err"
    fi
    "$EXE" -e 'os.exit(3)'
    rc=$?
    if [[ $rc -eq 3 ]]; then ok "os.exit(3) gives status 3"; else bad "os.exit(3) gives status 3" "rc=$rc"; fi
    # an error object with __tostring: that string alone, no traceback (lua5.4: "lua5.4: TS")
    err=$("$EXE" -e 'error(setmetatable({}, {__tostring = function() return "TS" end}))' 2>&1)
    rc=$?
    if [[ $rc -eq 1 && $err == "accel-lua: TS" ]]; then ok "an error object's __tostring: its string, no traceback"
    else bad "an error object's __tostring: its string, no traceback" "rc=$rc $err"; fi
    err=$("$EXE" --no-such-option 2>&1)
    rc=$?
    if [[ $rc -eq 1 && $err == *"usage:"* ]]; then ok "bad option: usage, exit 1"; else bad "bad option: usage, exit 1" "rc=$rc $err"; fi
}

# -m with a missing module: the places tried one per line, as lua5.4 -l
# words it, and no traceback (no Lua code ran).
check_missing_module() {
    local err rc want
    err=$(env LUA_PATH="$TMP/mods/?.lua;$TMP/mods/?/init.lua" "$EXE" -m nope.x 2>&1)
    rc=$?
    want=$(printf "accel-lua: module 'nope.x' not found (-m looks on package.path):\n\tno file '%s'\n\tno file '%s'" \
        "$TMP/mods/nope/x.lua" "$TMP/mods/nope/x/init.lua")
    if [[ $rc -eq 1 && $err == "$want" ]]; then
        ok "-m missing module: exit 1, the places tried one per line, no traceback"
    else
        bad "-m missing module: exit 1, the places tried one per line, no traceback" "rc=$rc
$err"
    fi
}

check_accel() {
    expect 'require("accel") returns a table, also global accel' "table	true" \
        "$EXE" -e 'local a = require("accel"); print(type(a), a == accel)'
}

# Every bindings/lua file must be in package.preload under its module name.
check_embedded() {
    local names="" f m
    while IFS= read -r f; do
        m=${f#bindings/lua/}
        m=${m%.lua}
        m=${m%/init}
        names+="${m//\//.} "
    done < <(find bindings/lua -type f -name '*.lua' | sort)
    expect "embedded library in package.preload" "ok" "$EXE" -e "
        for name in ('$names'):gmatch('%S+') do
          assert(type(package.preload[name]) == 'function', 'not embedded: ' .. name)
        end
        print('ok')"
}

# The sanitizer runtime accel.so was built with (make asan-test), for
# LD_PRELOAD in the programs that load it; empty otherwise.
sanitizer_preload() {
    ldd "$BUILD/accel.so" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ { printf "%s ", $3 }'
}

# accel.so under plain lua5.4 (sanitizer builds need their runtime preloaded).
check_module() {
    local preload
    preload=$(sanitizer_preload)
    expect "accel.so loads in plain lua5.4" "table" \
        env LD_PRELOAD="$preload" lua5.4 -e "package.cpath = '$BUILD/?.so'; print(type(require('accel')))"
}

# host_check NAME SOURCE "CFLAGS LIBS" WANT ARG: a C host compiled from
# SOURCE (exporting its functions, -Wl,-E, as docs/embedding.md says), run
# with ARG and the sanitizer runtime preloaded when accel.so has one: its
# output must be WANT.
host_check() {
    local name=$1 src=$2 flags=$3 want=$4 arg=$5 exe preload
    exe=$TMP/$(basename "$src" .c)
    preload=$(sanitizer_preload)
    # shellcheck disable=SC2086  # flags is a list of flags
    if cc "$src" -o "$exe" $flags -Wl,-E 2>"$TMP/cc.err"; then
        expect "$name" "$want" env LD_PRELOAD="$preload" "$exe" "$arg"
    else
        bad "$src compiles" "$(cat "$TMP/cc.err")"
    fi
}

# Embedding (docs/embedding.md): a C host with two states in turn, one of
# its own functions named like one of accel's; coroutines that predate the
# require, or a require inside one; accel.so exports only luaopen_accel.
check_embedding() {
    local preload exports SANFLAGS_LINK=""
    [[ -n $(ldd "$BUILD/accel.so" 2>/dev/null | grep -E 'lib(asan|ubsan)') ]] && SANFLAGS_LINK="-fsanitize=address,undefined"
    # shellcheck disable=SC2086  # SANFLAGS_LINK is a list of flags
    preload=$(sanitizer_preload)
    host_check "a C host trains in two Lua states, its own crc32c kept apart" examples/embed/host.c \
        "-I/usr/include/lua5.4 -llua5.4" $'state 1: loss 0.6993 -> 0.5972\nstate 2: loss 0.6993 -> 0.5972' "$BUILD"
    expect "a coroutine made before require('accel') uses it" "true	3.0" \
        env LD_PRELOAD="$preload" lua5.4 -e "package.cpath = '$BUILD/?.so'
          local co = coroutine.create(function() return package.loaded.accel.ones({2}):sum():item() + 1 end)
          require('accel'); print(coroutine.resume(co))"
    expect "the main thread after a require inside a coroutine" "2.0" \
        env LD_PRELOAD="$preload" lua5.4 -e "package.cpath = '$BUILD/?.so'
          coroutine.wrap(function() require('accel') end)(); print(package.loaded.accel.ones({2}):sum():item())"
    if cc -Icore examples/embed/core_matmul.c "$BUILD/libaccel-core.a" -o "$TMP/core_matmul" -fopenmp $SANFLAGS_LINK \
        -ldnnl -lopenblas -lm -lz -ldl -lcurl 2>"$TMP/cc.err"; then
        expect "a C program uses the core library without Lua" \
            $'4 5 10 11 \nrefused: matmul: shapes [2, 3] and [2, 3] cannot be multiplied (3 != 2)\nlive bytes 0' \
            "$TMP/core_matmul"
    else
        bad "examples/embed/core_matmul.c links with libaccel-core.a" "$(cat "$TMP/cc.err")"
    fi
    host_check "a host's crc32, crc32c, cuda_backend_count, ... replace neither accel's nor zlib's" \
        tests/host/host_names.c "-I/usr/include/lua5.4 -llua5.4" \
        $'checkpoint saved and loaded\ncuda available\tfalse\t0\ncrc32c e3069283\ncrc32 of a file cbf43926' "$BUILD"
    exports=$(nm -D --defined-only "$BUILD/accel.so" | awk '{ print $3 }' | tr '\n' ' ')
    if [[ $exports == "luaopen_accel " ]]; then ok "accel.so exports only luaopen_accel"; else bad "accel.so exports only luaopen_accel" "$exports"; fi
}

# LuaJIT hosts (docs/luajit.md): 16 states may hold accel at once, and a
# closed state's place goes to the next one. Needs BUILD/luajit (make
# luajit, part of make test) and LuaJIT's headers; skipped otherwise.
check_luajit_states() {
    local lj=$BUILD/luajit
    if [[ ! -f $lj/accel.so || ! -f /usr/include/luajit-2.1/lua.h ]]; then
        echo "skip LuaJIT hosts: no $lj/accel.so or LuaJIT headers"
        return
    fi
    host_check "LuaJIT: 16 states at once, a 17th refused, closed states' places reused" tests/host/luajit_states.c \
        "-I/usr/include/luajit-2.1 -lluajit-5.1" \
        $'16 states open at once: ok\nerror: accel: more than 16 Lua states that loaded the bindings are open at once\none more while they are open: refused\nafter closing them, 40 states one after another: 40 loaded' \
        "$lj"
}

report_startup() {
    local n=20 t0 t1 i
    t0=$(date +%s%N)
    for ((i = 0; i < n; i++)); do "$EXE" -e '' ; done
    t1=$(date +%s%N)
    echo "info startup: $(( (t1 - t0) / n / 1000 )) us per 'accel-lua -e \"\"' (average of $n)"
}

main() {
    check_version
    expect "-e runs a statement" "2" "$EXE" -e 'print(1+1)'
    check_args
    check_library
    check_error
    check_missing_module
    check_accel
    check_embedded
    check_module
    check_embedding
    check_luajit_states
    report_startup
    finish
}

main
