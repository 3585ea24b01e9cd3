#!/usr/bin/env bash
# check-baseline.sh: checks, from the object files, that a build runs on the
# baseline x86-64: the objects linked into accel-lua and accel.so (`make
# linked-objects`), except the x86-64-v3 kernel copies (*.v3.o), hold no instruction beyond x86-64 (no VEX/EVEX-encoded SIMD, no
# BMI1/BMI2/LZCNT/MOVBE), and each *.v3.o exports only *_v3 functions, so
# its code is reached only through the dispatcher's choice
# (kernels/cpu/dispatch.h). Prints one line per check and
# "N passed, N failed"; run by scripts/test-install.sh.
#
#   scripts/check-baseline.sh [BUILD_DIR]     (default: build)
set -uo pipefail

BUILD=${1:-build}
PASS=0
FAIL=0
# Mnemonics of x86-64-v3 (and v4) that the baseline lacks: every v-prefixed
# SIMD instruction (VEX / EVEX), the BMI1/BMI2 ones, lzcnt/tzcnt, movbe.
BEYOND='^(v[a-z0-9]+|andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|lzcnt|tzcnt|movbe)$'

result() {
    if [[ -z $2 ]]; then PASS=$((PASS + 1)); echo "ok   $1"; else FAIL=$((FAIL + 1)); echo "FAIL $1"; echo "$2" | head -20 | sed 's/^/     > /'; fi
}

# beyond_baseline OBJ: "OBJ: function: mnemonic" for each such instruction.
beyond_baseline() {
    objdump -d --no-show-raw-insn "$1" | awk -v obj="$1" -v re="$BEYOND" '
        /^[0-9a-f]+ <.*>:$/ { fn = $2 }
        /^ *[0-9a-f]+:\t/ { split($0, f, "\t"); split(f[2], m, " "); if (m[1] ~ re) print obj ": " fn ": " m[1] }' | sort -u
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
linked=$(make -s --no-print-directory -C "$ROOT" linked-objects BUILD="$BUILD")
objects=$(tr ' ' '\n' <<<"$linked" | grep -v '\.v3\.o$')
v3_objects=$(tr ' ' '\n' <<<"$linked" | grep '\.v3\.o$')
if [[ -z $objects || -z $v3_objects ]]; then
    result "the build has baseline objects and *.v3.o kernel copies" "none found under $BUILD/obj"
else
    bad=""
    for o in $objects; do bad+=$(beyond_baseline "$o"); done
    result "$(wc -w <<<"$objects") baseline objects use only x86-64 instructions" "$bad"
    bad=$(for o in $v3_objects; do nm --defined-only -g "$o" | awk -v o="$o" '$2 ~ /^[TtWwi]$/ && $3 !~ /_v3$/ { print o ": " $3 }'; done)
    result "$(wc -w <<<"$v3_objects") x86-64-v3 kernel objects export only *_v3 functions" "$bad"
    bad=$(for o in $v3_objects; do beyond_baseline "$o"; done | head -1)
    result "the x86-64-v3 kernel objects do use AVX2 code (the check sees it)" "$([[ -z $bad ]] && echo 'no v3 instruction found')"
fi
echo "$PASS passed, $FAIL failed"
(( FAIL == 0 ))
