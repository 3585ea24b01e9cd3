#!/usr/bin/env bash
# ddp_gpt.sh: DDP scaling on the small GPT shape (V65 T64 L4 H4 C128,
# per-rank batch 16): accel-lua 1 rank x 1 thread, accel-lua 2 ranks x 1
# thread (accel-lua launch --cpu), and PyTorch (Debian's 1.13, gloo) the
# same two ways through shared/anchors/ddp_gpt.py, in one run. From the
# repo root:
#   bash scripts/bench/ddp_gpt.sh [STEPS [WARMUP [REPEATS]]]
# Environment: ACCEL_BUILD (build dir, default build), NO_MAKE=1 (skip
# make), ANCHORS (default ../shared/anchors), NO_TORCH=1 (skip PyTorch).
# Every process runs one compute thread (OMP_NUM_THREADS=1
# OPENBLAS_NUM_THREADS=1); OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are left as
# the environment has them and printed. Each configuration runs REPEATS
# times (default 3), interleaved; the summary takes each one's best run
# (global tokens/s from rank 0's median step, as ddp_gpt.py reports it) and
# prints the scaling factors (2 ranks / 1 rank) and accel-lua / PyTorch.
# It also runs two independent 1-rank processes at once ("2 x 1 rank", no
# communication): their summed tokens/s is what this machine gives two
# concurrent single-thread trainings, the ceiling DDP's 2 ranks can reach
# here, so 2 ranks / that figure is DDP's own efficiency.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=${ACCEL_BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
ANCHORS=${ANCHORS:-$ROOT/../shared/anchors}
STEPS=${1:-30}
WARMUP=${2:-5}
REPEATS=${3:-3}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

if [[ ${NO_MAKE:-0} != 1 ]]; then
    make -j2 BUILD="$BUILD" >/dev/null || { echo "ddp_gpt.sh: make failed" >&2; exit 1; }
fi
ACCEL=$BUILD/accel-lua
[[ -x $ACCEL ]] || { echo "ddp_gpt.sh: $ACCEL not built" >&2; exit 1; }
TORCH=1
if [[ ${NO_TORCH:-0} = 1 ]] || ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    TORCH=0
    echo "ddp_gpt.sh: no PyTorch for /usr/bin/python3 (or NO_TORCH=1): PyTorch columns skipped" >&2
fi

echo "== machine: $(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-<unset>}" \
     "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1; steps $STEPS, warmup $WARMUP, repeats $REPEATS"

# field NAME JSON: a numeric field of a JSON line.
field() { grep -oE "\"$1\": [0-9.e+-]+" <<<"$2" | head -n 1 | sed 's/.*: //'; }
declare -A BEST
# run KEY CMD...: runs CMD, prints its JSON line, keeps the best tokens/s per KEY.
run() {
    local key=$1 line tok
    shift
    line=$("$@" 2>/dev/null | grep '^{"bench": "ddp_gpt"' | tail -n 1) || true
    if [[ -z $line ]]; then
        echo "$key: no result" >&2
        return
    fi
    echo "$key: $line"
    tok=$(field global_tokens_per_s "$line")
    if [[ -z ${BEST[$key]:-} ]] || awk -v a="$tok" -v b="${BEST[$key]}" 'BEGIN { exit !(a > b) }'; then
        BEST[$key]=$tok
    fi
}

# pair: two independent 1-rank runs started together; their tokens/s summed.
pair() {
    local a b ta tb
    a=$(mktemp) b=$(mktemp)
    "$ACCEL" scripts/bench/ddp_gpt.lua "$STEPS" "$WARMUP" >"$a" 2>/dev/null &
    "$ACCEL" scripts/bench/ddp_gpt.lua "$STEPS" "$WARMUP" >"$b" 2>/dev/null
    wait
    ta=$(field global_tokens_per_s "$(cat "$a")") tb=$(field global_tokens_per_s "$(cat "$b")")
    rm -f "$a" "$b"
    [[ -n $ta && -n $tb ]] && echo "{\"bench\": \"ddp_gpt\", \"impl\": \"2 x accel-lua 1 rank\", \"global_tokens_per_s\": $(awk -v a="$ta" -v b="$tb" 'BEGIN { print a + b }'), \"each\": [$ta, $tb]}"
}

for ((i = 1; i <= REPEATS; i++)); do
    echo "-- round $i (load $(cut -d' ' -f1 /proc/loadavg))"
    run accel1 "$ACCEL" scripts/bench/ddp_gpt.lua "$STEPS" "$WARMUP"
    run accel2 "$ACCEL" launch --cpu --num_processes 2 scripts/bench/ddp_gpt.lua "$STEPS" "$WARMUP"
    run pair pair
    if ((TORCH)); then
        run torch1 timeout -k 5 600 /usr/bin/python3 "$ANCHORS/ddp_gpt.py" single 1 16 "$STEPS" "$WARMUP"
        run torch2 timeout -k 5 600 /usr/bin/python3 "$ANCHORS/ddp_gpt.py" spawn 2 16 "$STEPS" "$WARMUP"
    fi
done

ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo
echo "== summary (best of $REPEATS, global tokens/s, 1 thread per rank)"
printf '| %-10s | %12s | %12s | %8s |\n' "" "1 rank" "2 ranks" scaling
printf '| %-10s | %12s | %12s | %8s |\n' accel-lua "${BEST[accel1]:-n/a}" "${BEST[accel2]:-n/a}" \
    "$(ratio "${BEST[accel2]:-0}" "${BEST[accel1]:-0}")x"
printf '| %-10s | %12s | %12s | %8s |\n' "2 x 1 rank" "" "${BEST[pair]:-n/a}" \
    "$(ratio "${BEST[pair]:-0}" "${BEST[accel1]:-0}")x"
echo "DDP efficiency (2 ranks / two independent 1-rank runs at once): $(ratio "${BEST[accel2]:-0}" "${BEST[pair]:-0}")"
if ((TORCH)); then
    printf '| %-10s | %12s | %12s | %8s |\n' PyTorch "${BEST[torch1]:-n/a}" "${BEST[torch2]:-n/a}" \
        "$(ratio "${BEST[torch2]:-0}" "${BEST[torch1]:-0}")x"
    echo "accel-lua / PyTorch: 1 rank $(ratio "${BEST[accel1]:-0}" "${BEST[torch1]:-0}")x," \
         "2 ranks (DDP) $(ratio "${BEST[accel2]:-0}" "${BEST[torch2]:-0}")x"
fi
