#!/usr/bin/env bash
# startup.sh: process start-up cost, accel-lua vs PyTorch.
# Median wall time of RUNS_ACCEL (30) runs of `BUILD/accel-lua -e ''` and of
# RUNS_TORCH (5) runs of `$PYTHON -c 'import torch'` (default /usr/bin/python3);
# prints ms and the ratio (torch_ms=n/a when that Python has no torch). Uses hyperfine when installed, else a bash loop with date +%s%N.
#   bash scripts/bench/startup.sh [BUILD_DIR]     (default: $ACCEL_BUILD or build)
# Last line: "RESULT startup accel_ms=<ms> torch_ms=<ms> ratio=<torch/accel>".
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-${ACCEL_BUILD:-build}}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
ACCEL=$BUILD/accel-lua
PYTHON=${PYTHON:-/usr/bin/python3}
RUNS_ACCEL=${RUNS_ACCEL:-30}
RUNS_TORCH=${RUNS_TORCH:-5}
[[ -x $ACCEL ]] || { echo "startup.sh: $ACCEL not built" >&2; exit 1; }

# median_ms RUNS CMD...: median wall time of RUNS runs (after one warm-up run).
median_ms() {
    local runs=$1 i t0 t1
    shift
    if command -v hyperfine >/dev/null; then
        local json
        json=$(mktemp)
        hyperfine -N --warmup 1 --runs "$runs" --export-json "$json" -- "$(printf '%q ' "$@")" >/dev/null 2>&1
        "$PYTHON" -c 'import json,sys; print("%.2f" % (json.load(open(sys.argv[1]))["results"][0]["median"] * 1e3))' "$json"
        rm -f "$json"
        return
    fi
    "$@" >/dev/null 2>&1
    local times=()
    for ((i = 0; i < runs; i++)); do
        t0=$(date +%s%N)
        "$@" >/dev/null 2>&1
        t1=$(date +%s%N)
        times+=($((t1 - t0)))
    done
    printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR] = $1} END {
        m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.2f\n", m / 1e6 }'
}

tool=$(command -v hyperfine >/dev/null && echo hyperfine || echo "bash loop, date +%s%N")
accel_ms=$(median_ms "$RUNS_ACCEL" "$ACCEL" -e '')
if "$PYTHON" -c 'import torch' >/dev/null 2>&1; then
    torch_ms=$(median_ms "$RUNS_TORCH" "$PYTHON" -c 'import torch')
    ratio=$(awk -v a="$accel_ms" -v t="$torch_ms" 'BEGIN { printf "%.1f", t / a }')
else
    torch_ms=n/a ratio=n/a
fi

echo "start-up, median wall time ($tool)"
printf '  %-36s %9.2f ms  (%d runs)\n' "accel-lua -e ''" "$accel_ms" "$RUNS_ACCEL"
printf '  %-36s %9s ms  (%d runs)\n' "python3 -c 'import torch'" "$torch_ms" "$RUNS_TORCH"
printf '  ratio torch/accel-lua                %9s x\n' "$ratio"
echo "RESULT startup accel_ms=$accel_ms torch_ms=$torch_ms ratio=$ratio"
