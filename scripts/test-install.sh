#!/usr/bin/env bash
# test-install.sh: checks of `make install` / `make uninstall` and the man
# pages (man/*.1). Installs the given build into a temporary DESTDIR with
# PREFIX=/usr/local, compares the installed files with the list below
# (written here, not read from the Makefile), runs the installed program,
# loads the installed accel.so into plain lua5.4, renders each man page
# with `man --warnings` (no warning allowed), checks that the pages name
# every option, command and launch flag the program's own --help lists,
# then uninstalls and checks that only files of others are left. Under
# qemu-x86_64 (Debian's qemu-user) it runs the program on an emulated CPU
# without AVX2 (Nehalem: it starts, picks the baseline kernels, and the
# fixture-checked specs of the kernels pass) and on one with AVX2 (Haswell:
# it picks the x86-64-v3 kernels), and scripts/check-baseline.sh checks the
# objects' instructions; without qemu-x86_64 the emulated-CPU checks
# are skipped and counted as skipped. Last, `make deb`'s package
# (scripts/make-deb.sh): its file list, its dependencies (each one a
# package installed here), and `dpkg --root` install, run and remove in an
# empty root. Run by scripts/run-tests.sh:
#
#   scripts/test-install.sh [BUILD_DIR]     (default: build)
#
# Prints one line per check and ends with "N passed, N failed[, N skipped]".
# shellcheck source=scripts/test-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh" "$@"
export HOME=$TMP/home
unset LUA_INIT LUA_INIT_5_4 LUA_PATH LUA_CPATH LUA_PATH_5_4 LUA_CPATH_5_4

STAGE=$TMP/stage
LUADIR=/usr/local/lib/lua/5.4
LUA_BIN=$(command -v lua5.4)
EXPECTED="usr/local/bin/accel-lua
usr/local/lib/lua/5.4/accel.so
usr/local/share/man/man1/accel-lua-config.1
usr/local/share/man/man1/accel-lua-launch.1
usr/local/share/man/man1/accel-lua.1"
VERSION=$(sed -n 's/^#define ACCEL_LUA_VERSION "\(.*\)"$/\1/p' host/host.h)

# make_in TARGET VAR=VALUE...: runs make TARGET on this build without
# rebuilding it (-o: the program and the module count as up to date).
make_in() {
    run make -s --no-print-directory -o "$BUILD/accel-lua" -o "$BUILD/accel.so" \
        BUILD="$BUILD" "$@"
}

# The files (and links) under a folder, relative to it, sorted.
files_under() { (cd "$1" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort); }

check_install() {
    make_in install PREFIX=/usr/local DESTDIR="$STAGE"
    check "make install PREFIX=/usr/local DESTDIR=... succeeds" '(( RC == 0 ))'
    OUT=$(files_under "$STAGE")
    check "install puts exactly the program, accel.so and 3 man pages there" '[[ $OUT == "$EXPECTED" ]]'
    check "the installed program is executable" '[[ -x $STAGE/usr/local/bin/accel-lua ]]'
    run "$STAGE/usr/local/bin/accel-lua" -e 'print(accel.__version__)'
    check "the installed program prints accel.__version__ ($VERSION, host/host.h)" \
        '(( RC == 0 )) && [[ $OUT == "$VERSION" ]]'
}

check_plain_lua() {
    run lua5.4 -e 'print(package.cpath)'
    check "plain lua5.4 searches $LUADIR for C modules by default" "has '$LUADIR/?.so;'"
    # a sanitizer build's accel.so needs the ASan runtime loaded first; leaks
    # of Debian's lua5.4 itself (not ours) are not checked there
    local preload="" asan=${ASAN_OPTIONS:-}
    [[ -n $asan ]] && preload=$(gcc -print-file-name=libasan.so) asan+=":detect_leaks=0"
    ASAN_OPTIONS=$asan LD_PRELOAD=$preload LUA_CPATH="$STAGE$LUADIR/?.so" run lua5.4 -e '
        local accel = require("accel")
        local t = accel.ones({2, 3}) * 2
        print(package.searchpath("accel", package.cpath), t:sum():item(), t.shape[1], t.shape[2])'
    check "plain lua5.4 requires the installed accel.so and makes a tensor (sum 12, 2x3)" \
        '(( RC == 0 )) && [[ $OUT == "$STAGE$LUADIR/accel.so	12.0	2	3" ]]'
    run make -s --no-print-directory install-files PREFIX=/usr
    check "PREFIX=/usr puts accel.so on Debian's lua5.4 path" \
        "has /usr/lib/x86_64-linux-gnu/lua/5.4/accel.so && [[ \$(lua5.4 -e 'print(package.cpath)') == */usr/lib/x86_64-linux-gnu/lua/5.4/?.so* ]]"
}

# render PAGE: TEXT (and OUT) = the page as text, ERR = man's and groff's
# warnings.
render() {
    ERR=$(MANWIDTH=80 man --warnings -l "$1" 2>&1 >/dev/null)
    TEXT=$(MANWIDTH=80 man --warnings -l "$1" 2>/dev/null)
    OUT=$TEXT
}

# missing WORD...: prints the words the rendered page (TEXT) lacks.
missing() {
    local w
    for w in "$@"; do grep -qF -- "$w" <<<"$TEXT" || printf '%s ' "$w"; done
}

# none_missing NAME: one check that the words missing() found (gone) are none.
none_missing() {
    OUT="missing: $gone"
    check "$1" '[[ -z $gone ]]'
}

# The ACCEL_LUA_* variables launch gives the ranks: the settings table of
# host/settings.c and the ones host/cmd_launch.c adds.
rank_variables() {
    { grep -ohE '"ACCEL_LUA_[A-Z0-9_]+"' host/settings.c | tr -d '"'
      grep -ohE '"ACCEL_LUA_[A-Z0-9_]+=' host/cmd_launch.c | tr -d '"='; } | sort -u
}

check_man_pages() {
    local page name gone
    for page in "$STAGE"/usr/local/share/man/man1/*.1; do
        name=$(basename "$page" .1)
        render "$page"
        OUT=$ERR
        check "man --warnings renders $name(1) without warnings" '[[ -z $ERR ]]'
        render "$page"
        check "$name(1) has NAME, SYNOPSIS, ENVIRONMENT, FILES, EXIT STATUS, EXAMPLES" \
            "has 'NAME' && has 'SYNOPSIS' && has 'ENVIRONMENT' && has 'FILES' && has 'EXIT STATUS' && has 'EXAMPLES'"
    done
    render man/accel-lua-launch.1
    # shellcheck disable=SC2046  # one word per flag
    # the flags of launch --help, not the script arguments of its examples
    gone=$(missing $("$EXE" launch --help | grep -v '^  accel-lua launch ' \
        | grep -oE -- '(^|[ ,])--?[a-z][a-z0-9_]*\*?' | sed 's/^[ ,]*//' | sort -u))
    none_missing "accel-lua-launch(1) names every flag of launch --help"
    # shellcheck disable=SC2046
    gone=$(missing $(rank_variables))
    none_missing "accel-lua-launch(1) names every ACCEL_LUA_* variable launch sets in the ranks"
    render man/accel-lua.1
    # shellcheck disable=SC2046
    gone=$(missing $("$EXE" --help | sed -n 's/^  \(-[a-zA-Z-]*\) .*/\1/p; s/^  \([a-z][a-z-]*\)  .*/\1/p'))
    none_missing "accel-lua(1) names every option and command of accel-lua --help"
    render man/accel-lua-config.1
    # shellcheck disable=SC2046
    gone=$(missing "config default" "config update" $("$EXE" config --no-such-flag 2>&1 | grep 'usage\|^  ' | grep -oE -- '--[a-z_]+' | sort -u))
    none_missing "accel-lua-config(1) names the forms and flags of config's usage"
}

check_uninstall() {
    mkdir -p "$STAGE/usr/local/bin" && echo keep >"$STAGE/usr/local/bin/other-tool"
    make_in uninstall PREFIX=/usr/local DESTDIR="$STAGE"
    check "make uninstall succeeds" '(( RC == 0 ))'
    OUT=$(files_under "$STAGE")
    check "uninstall removes every installed file and leaves another program's" \
        '[[ $OUT == "usr/local/bin/other-tool" ]]'
    check "uninstall removes the emptied Lua module folders" '[[ ! -e $STAGE/usr/local/lib/lua ]]'
    make_in uninstall PREFIX=/usr/local DESTDIR="$STAGE"
    check "a second uninstall (nothing installed) succeeds" '(( RC == 0 ))'
}

# on_cpu MODEL CMD...: runs CMD on qemu's emulated CPU MODEL (OUT without
# qemu's own notes about host features TCG does not emulate). The emulated
# CPU runs without OPENBLAS_CORETYPE: that variable names the host's core
# (Haswell forces OpenBLAS's AVX2 kernels), which the emulated CPU may not
# have; OpenBLAS then reads the emulated CPU's own features, as it would on
# such a machine. OPENBLAS_L2_SIZE stays as the environment sets it.
on_cpu() {
    local model=$1
    shift
    run timeout 600 env -u OPENBLAS_CORETYPE qemu-x86_64 -cpu "$model" "$@"
    OUT=$(grep -v "^qemu-x86_64: warning: TCG doesn't support" <<<"$OUT")
}

SKIP=0
# Specs with expected values from PyTorch fixtures or closed forms that
# cover the dispatched kernels (elementwise, reductions, softmax, f16/bf16
# casts, optimizers, attention, convolution and pooling).
BASELINE_SPECS="tensor_ops parity optim attention conv"

check_old_cpu() {
    local exe=$STAGE/usr/local/bin/accel-lua so_path="$STAGE$LUADIR/?.so" spec
    local why=""
    command -v qemu-x86_64 >/dev/null || why="no qemu-x86_64 (Debian package qemu-user)"
    # a sanitizer build under emulation needs tens of GB and proves nothing more
    [[ -n ${ASAN_OPTIONS:-} ]] && why="a sanitizer build (make asan-test); make test runs them"
    if [[ -n $why ]]; then
        echo "skip the emulated-CPU checks: $why"
        SKIP=$((SKIP + 4 + $(wc -w <<<"$BASELINE_SPECS")))
        return
    fi
    on_cpu Nehalem "$exe" env
    check "on a CPU without AVX2 (qemu Nehalem) the program starts and picks the baseline kernels" \
        '(( RC == 0 )) && has "CPU kernels: x86-64 (baseline, SSE2)"'
    on_cpu Haswell "$exe" env
    check "on an AVX2 CPU (qemu Haswell) it picks the x86-64-v3 kernels" \
        '(( RC == 0 )) && has "CPU kernels: x86-64-v3 (AVX2, FMA, F16C)"'
    LUA_CPATH=$so_path on_cpu Nehalem "$LUA_BIN" -e 'print(require("accel").ones({4}):sum():item())'
    check "on a CPU without AVX2 plain lua5.4 runs accel.so" '(( RC == 0 )) && [[ $OUT == 4.0 ]]'
    for spec in $BASELINE_SPECS; do
        on_cpu Nehalem "$EXE" /usr/bin/busted --output=plainTerminal "tests/lua/${spec}_spec.lua"
        check "${spec}_spec passes on a CPU without AVX2 (the baseline kernels)" \
            '(( RC == 0 )) && [[ $OUT =~ [1-9][0-9]*\ successes?\ /\ 0\ failures\ /\ 0\ errors ]]'
    done
}

check_objects() {
    run scripts/check-baseline.sh "$BUILD"
    check "scripts/check-baseline.sh: only the dispatched kernel copies use x86-64-v3 instructions" '(( RC == 0 ))'
}

DEB_FILES="./usr/bin/accel-lua
./usr/lib/x86_64-linux-gnu/lua/5.4/accel.so
./usr/share/man/man1/accel-lua-config.1.gz
./usr/share/man/man1/accel-lua-launch.1.gz
./usr/share/man/man1/accel-lua.1.gz"

# The Depends field's package names, one a line.
deb_depends() {
    dpkg-deb --field "$1" Depends | tr ',' '\n' | sed 's/(.*)//; s/|.*//; s/ //g' | grep .
}

check_deb() {
    local deb droot pkg absent=""
    run scripts/make-deb.sh "$BUILD" "$TMP/debout"
    deb=$TMP/debout/accel-lua_${VERSION}_$(dpkg --print-architecture).deb
    check "make-deb.sh builds accel-lua_${VERSION}_ARCH.deb" '(( RC == 0 )) && [[ -f $deb ]]'
    [[ -f $deb ]] || return
    OUT=$(dpkg-deb --contents "$deb" | awk '$1 !~ /^d/ { print $6 }' | sort)
    check "the package holds the program, accel.so on lua5.4's path, 3 gzipped man pages" '[[ $OUT == "$DEB_FILES" ]]'
    for pkg in $(deb_depends "$deb"); do
        dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null | grep -qx installed || absent+="$pkg "
    done
    OUT="Depends: $(dpkg-deb --field "$deb" Depends); not installed: $absent"
    check "every package the .deb depends on is a Debian package installed here" '[[ -z $absent ]] && has libdnnl2 && has liblua5.4-0'
    droot=$TMP/dpkgroot
    mkdir -p "$droot/var/lib/dpkg/info" "$droot/var/lib/dpkg/updates" && : >"$droot/var/lib/dpkg/status"
    run dpkg --root="$droot" --force-depends --log=/dev/null -i "$deb"
    check "dpkg --root installs the package into an empty root" '(( RC == 0 )) && [[ -x $droot/usr/bin/accel-lua ]]'
    run "$droot/usr/bin/accel-lua" -e 'print(accel.__version__)'
    check "the packaged program runs" '(( RC == 0 )) && [[ $OUT == "$VERSION" ]]'
    run dpkg --root="$droot" --log=/dev/null -r accel-lua
    OUT="$OUT
left: $(cd "$droot" && find . ! -type d ! -path './var/lib/dpkg/*')"
    check "dpkg -r removes every file of the package" '(( RC == 0 )) && [[ $OUT == *"left: " ]]'
}

check_install
check_plain_lua
check_man_pages
check_objects
check_old_cpu
check_uninstall
check_deb
if (( SKIP > 0 )); then
    echo "$PASS passed, $FAIL failed, $SKIP skipped"
    (( FAIL == 0 ))
else
    finish
fi
