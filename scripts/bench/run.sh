#!/usr/bin/env bash
# run.sh: runs the accel-lua benchmarks (startup.sh, per_op.lua + per_op.py,
# matmul.lua + matmul.c) and prints one summary table. From the repo root:
#   bash scripts/bench/run.sh
# Environment: ACCEL_BUILD (build dir, default build), NO_MAKE=1 (skip
# `make`), OPTFLAGS (passed to make), PER_OP_N (100000), MATMUL_SIZES
# ("256 512 1024 2048"). Everything runs single-threaded
# (OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1); the OpenBLAS settings
# (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE) are left as the environment has them
# and printed, so both sides run under the same one. Needs /usr/bin/python3
# with torch for the PyTorch columns, gcc and libdnnl for the direct GEMM.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=${ACCEL_BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
BENCH=scripts/bench
PER_OP_N=${PER_OP_N:-100000}
MATMUL_SIZES=${MATMUL_SIZES:-256 512 1024 2048}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

if [[ ${NO_MAKE:-0} != 1 ]]; then
    make -j2 BUILD="$BUILD" ${OPTFLAGS:+OPTFLAGS="$OPTFLAGS"} >/dev/null ||
        { echo "run.sh: make failed (try OPTFLAGS=-O2 or NO_MAKE=1)" >&2; exit 1; }
fi
ACCEL=$BUILD/accel-lua
[[ -x $ACCEL ]] || { echo "run.sh: $ACCEL not built" >&2; exit 1; }
DIRECT=$BUILD/bench_matmul
gcc -std=c11 -O2 -o "$DIRECT" "$BENCH/matmul.c" -ldnnl

# value KEY TEXT: the KEY=value field of the last RESULT line carrying it.
value() { grep -oE "(^| )$1=[^ ]*" <<<"$2" | tail -n 1 | cut -d= -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

echo "== machine: $(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-<unset>}" \
     "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1"
echo
startup=$(bash "$BENCH/startup.sh" "$BUILD")
echo "$startup"
echo
per_op=$("$ACCEL" "$BENCH/per_op.lua" "$PER_OP_N")
echo "$per_op"
echo
# shellcheck disable=SC2086
matmul=$("$ACCEL" "$BENCH/matmul.lua" --direct "$DIRECT" $MATMUL_SIZES)
echo "$matmul"
echo

acc_line=$(grep '^RESULT accel' <<<"$per_op")
echo "== summary (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, 1 thread)"
printf '| %-46s | %12s | %12s | %8s |\n' benchmark accel-lua reference "ratio"
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..48})" "$(printf -- '-%.0s' {1..14})" \
    "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..10})"
row() { printf '| %-46s | %12s | %12s | %8s |\n' "$@"; }
a=$(value accel_ms "$startup"); t=$(value torch_ms "$startup")
row "start-up ms (ref: python3 -c 'import torch')" "$a" "$t" "$(ratio "$t" "$a")x"
a=$(value add "$acc_line"); t=$(value torch_add "$acc_line")
row "a + b, 16 x f32, us/op (ref: PyTorch)" "$a" "${t:-n/a}" "$(ratio "${t:-0}" "$a")x"
a=$(value fwdbwd "$acc_line"); t=$(value torch_fwdbwd "$acc_line")
row "(a+b):sum():backward(), us/op (ref: PyTorch)" "$a" "${t:-n/a}" "$(ratio "${t:-0}" "$a")x"
row "accel-lua VmRSS before/after per-op, KiB" "$(value rss_before_kib "$acc_line")/$(value rss_after_kib "$acc_line")" "" ""
for n in $MATMUL_SIZES; do
    l=$(grep "^RESULT matmul n=$n " <<<"$matmul" || true)
    [[ -n $l ]] || continue
    a=$(value f32 "$l"); d=$(value direct_f32 "$l")
    row "matmul f32 n=$n GFLOP/s (ref: dnnl_sgemm)" "$a" "$d" "$(ratio "$a" "$d")x"
    a=$(value bf16 "$l"); d=$(value direct_bf16 "$l")
    if [[ $d == 0.00 ]]; then
        d=$(value direct_bf16_widened "$l")
        row "matmul bf16 n=$n GFLOP/s (ref: widen+sgemm)" "$a" "$d" "$(ratio "$a" "$d")x"
    else
        row "matmul bf16 n=$n GFLOP/s (ref: oneDNN bf16)" "$a" "$d" "$(ratio "$a" "$d")x"
    fi
done
echo "(ratios: start-up and per-op = reference/accel-lua, >1 means accel-lua is faster;"
echo " matmul = accel-lua/direct, 1.00 means no overhead)"
