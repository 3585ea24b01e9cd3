#!/usr/bin/env bash
# cold_start.sh: the seed MLP's COLD training loop, accel-lua against PyTorch,
# both sides in the same run. "Cold" is the first and only repeat of a fresh
# process: the 315 steps of scripts/bench/seed_mlp.lua THREADS dataloader 1
# against ANCHORS/bench_mlp.py THREADS dataloader 1 (same model, optimizer,
# batch size and shuffling DataLoader; each script times its own training
# loop, excluding start-up, imports and data creation). The two processes
# are started in turn, A B A B ..., RUNS times each, so a drift in the
# machine's speed hits both; each process's whole wall time (start-up
# included) is read too.
#
# Prints the CPU as read at run time (lscpu's model name, whether the flags
# avx512f and avx512_bf16 are present), the load average before and after,
# then min / median / max of each side's loop seconds and whole-process
# seconds (and accel-lua's CPU seconds in its loop, "loop_cpu_s", which a
# loaded machine inflates much less than wall time), the ratio PyTorch / accel-lua of the medians, the median of the
# pair-by-pair ratios, and the target (cold loop >= 5x PyTorch's): met /
# missed. Last line:
#   RESULT cold_start accel_loop_s=<median> torch_loop_s=<median> ratio=<x> pair_ratio=<x>
#
#   bash scripts/bench/cold_start.sh [--runs N] [--threads T] [--base DIR] [--no-make]
# Options: --runs N (7), --threads T (1), --no-make, --base DIR: a second
# accel-lua build (e.g. an older commit's build folder) run in the same
# rotation (A B C A B C ...), printed as "baseline" rows with its own ratio.
# Environment: ACCEL_BUILD (build dir, default build), ANCHORS
# (../shared/anchors, else /work/shared/anchors), PYTHON (the interpreter
# with torch: /work/torchenv/bin/python when present, else python3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
for ANCHORS in "${ANCHORS:-$ROOT/../shared/anchors}" /work/shared/anchors; do
    [[ -f $ANCHORS/bench_mlp.py ]] && break
done
BUILD=${ACCEL_BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
if [[ -z ${PYTHON:-} ]]; then
    PYTHON=python3
    [[ -x /work/torchenv/bin/python ]] && PYTHON=/work/torchenv/bin/python
fi
RUNS=7 THREADS=1 MAKE=1 BASE=

while [[ $# -gt 0 ]]; do
    case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --no-make) MAKE=0; shift ;;
    --base) BASE=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "cold_start.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "cold_start.sh: --runs wants a positive integer, got '$RUNS'" >&2; exit 2; }
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || { echo "cold_start.sh: --threads wants a positive integer, got '$THREADS'" >&2; exit 2; }

if [[ $MAKE == 1 ]]; then
    make -j2 BUILD="$BUILD" >/dev/null || { echo "cold_start.sh: make failed (or --no-make)" >&2; exit 1; }
fi
ACCEL=$BUILD/accel-lua
[[ -x $ACCEL ]] || { echo "cold_start.sh: $ACCEL not built" >&2; exit 1; }
[[ -f $ANCHORS/bench_mlp.py ]] || { echo "cold_start.sh: no bench_mlp.py in $ANCHORS (set ANCHORS)" >&2; exit 1; }
[[ -z $BASE || -x $BASE/accel-lua ]] || { echo "cold_start.sh: --base $BASE has no accel-lua" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null || { echo "cold_start.sh: $PYTHON cannot import torch (set PYTHON)" >&2; exit 1; }

cpu_flag() { grep -qw "$1" /proc/cpuinfo && echo yes || echo no; }
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1)" \
    "($(nproc) cores usable; avx512f $(cpu_flag avx512f), avx512_bf16 $(cpu_flag avx512_bf16))"
echo "accel-lua: $ACCEL; $("$ACCEL" env 2>/dev/null | sed -n 's/^- \(CPU kernels: .*\)/\1/p; s/^- \(OpenBLAS: OpenBLAS [0-9.]*\).*/\1/p; s/^- \(oneDNN version: [0-9.]*\).*/\1/p' | paste -sd';' | sed 's/;/; /g')"
echo "PyTorch: $("$PYTHON" -c 'import torch; print(torch.__version__)')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# field NAME JSON: the number after "NAME": (empty when absent)
field() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" <<<"$2" | head -1; }

# one CMD...: runs it once, writes "<loop_s> <process_s> <loop_cpu_s or 0>"
one() {
    local out t0 t1 loop
    t0=$(date +%s.%N)
    out=$("$@" 2>"$TMP/err") || { echo "cold_start.sh: failed: $* ($(tail -1 "$TMP/err"))" >&2; return 1; }
    t1=$(date +%s.%N)
    loop=$(field loop_s "$out")
    [[ -n $loop ]] || { echo "cold_start.sh: no loop_s in the output of $*" >&2; return 1; }
    echo "$loop $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }') $(field loop_cpu_s "$out" | sed 's/^$/0/')"
}

for ((i = 1; i <= RUNS; i++)); do
    one "$ACCEL" scripts/bench/seed_mlp.lua "$THREADS" dataloader 1 >>"$TMP/accel"
    one "$PYTHON" "$ANCHORS/bench_mlp.py" "$THREADS" dataloader 1 >>"$TMP/torch"
    if [[ -n $BASE ]]; then
        one "$BASE/accel-lua" scripts/bench/seed_mlp.lua "$THREADS" dataloader 1 >>"$TMP/base"
    else
        echo "0 0 0" >>"$TMP/base"
    fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

paste "$TMP/accel" "$TMP/torch" "$TMP/base" | awk -v base="$BASE" -v threads="$THREADS" '
function sort(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t } }
function med(a, n) { sort(a, n); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
function row(name, a, n,   m) { m = med(a, n); printf "| %-26s | %9.4f | %9.4f | %9.4f |\n", name, a[1], m, a[n]; return m }
{ al[NR] = $1; ap[NR] = $2; ac[NR] = $3; tl[NR] = $4; tp[NR] = $5; pr[NR] = $4 / $1
  bl[NR] = $6; bp[NR] = $7; bc[NR] = $8; br[NR] = $6 > 0 ? $4 / $6 : 0 }
END {
    n = NR
    printf "\nseed MLP, 315 steps, cold (one repeat per process), %d thread(s), %d runs each\n\n", threads, n
    printf "| %-26s | %9s | %9s | %9s |\n", "seconds", "min", "median", "max"
    printf "|%s|%s|%s|%s|\n", "----------------------------", "-----------", "-----------", "-----------"
    ma = row("accel-lua loop", al, n); mt = row("PyTorch loop", tl, n)
    row("accel-lua loop, CPU", ac, n)
    row("accel-lua whole process", ap, n); row("PyTorch whole process", tp, n)
    if (base != "") {
        mb = row("baseline loop", bl, n); row("baseline loop, CPU", bc, n); row("baseline whole process", bp, n)
    }
    r = mt / ma; p = med(pr, n)
    printf "\ncold loop: accel-lua %.1f steps/s, PyTorch %.1f steps/s; PyTorch / accel-lua = %.2fx (medians), %.2fx (median of pairs)\n", 315 / ma, 315 / mt, r, p
    if (base != "") printf "baseline (%s): %.1f steps/s; PyTorch / baseline = %.2fx (medians), %.2fx (median of pairs)\n", base, 315 / mb, mt / mb, med(br, n)
    printf "target: cold loop >= 5x PyTorch: %s\n", (p >= 5 ? "met" : "missed")
    printf "RESULT cold_start accel_loop_s=%.5f torch_loop_s=%.5f ratio=%.2f pair_ratio=%.2f\n", ma, mt, r, p
}'
