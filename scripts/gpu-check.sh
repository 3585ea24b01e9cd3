#!/usr/bin/env bash
# gpu-check.sh: the checks that need a GPU, as one command for a lent GPU
# machine (docs/gpu.md), fitting one 10-minute call. Built here, carried there:
#   make CUDA=1 && scripts/gpu-bundle.sh        (here)
#   scripts/gpu-check.sh [.gpu/bundle.tar.gz]   (there: run tool, carry [".gpu"],
#                                                 timeout_s 600)
# Refuses (exit 2) where no NVIDIA GPU answers. Unpacks the bundle, finds
# libcublasLt.so.13 / libnccl.so.2 of the machine (CUDA install or the
# PyTorch venv's nvidia-* wheels), then runs, in this order, what the
# bundle has:
#   test_cuda       the CUDA kernels against the CPU (ACCEL_EXPECT_GPU=1)
#   conformance     test_backend cuda (every backend entry vs the CPU)
#   busted (cuda)   every tests/lua/*_spec.lua with ACCEL_LUA_DEVICE=cuda
#                   (the working tree travels with the call), summed
#   gpt2 step       one GPT-2-124M step (T 64) on the CPU and on cuda from
#                   the same weights: loss and every gradient to float32
#                   tolerance (tests/cuda/gpt_step_vs_cpu.lua)
#   per-op          launch overhead: 16-element a + b and (a + b):sum():
#                   backward() on cuda, accel-lua against PyTorch
#                   (scripts/bench/per_op.lua / per_op.py)
#   bench rows      the GPT-2-124M step (B 16, T 1024: scripts/bench/gpt.lua
#                   gpt2_b16) in fp32, TF32, bf16 and fp8, and PyTorch's
#                   (scripts/bench/gpt_torch_gpu.py) eager fp32 / TF32 /
#                   bf16 and torch.compile bf16, in the same call; the
#                   accel bf16 row also profiles one step with every op
#                   waiting for the GPU (gpt.lua --profile): where the time goes
# and prints one row per item (result, seconds), then the benchmark table
# (tokens/s, achieved TFLOP/s, MFU against the 790 TFLOP/s bf16 dense rate
# measured on the H200). Every item has its own limit (GPU_CHECK_TIMEOUT,
# default 120 s; the busted run GPU_CHECK_BUSTED, default 210 s, whole)
# and the whole run a budget (GPU_CHECK_BUDGET, default 540 s): items that
# would start after it print "no time left". Items whose binary is not in
# the bundle print "not built". Logs go to $OUT (the device tool's folder
# that comes back) when set, else /tmp/gpu-check. Exit 1 if any item failed.
set -uo pipefail
BUNDLE=${1:-.gpu/bundle.tar.gz}
LOGS=${OUT:-/tmp/gpu-check}
ITEM_TIMEOUT=${GPU_CHECK_TIMEOUT:-120}
BUSTED_TIMEOUT=${GPU_CHECK_BUSTED:-210}
BUDGET=${GPU_CHECK_BUDGET:-540}
START=$(date +%s)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU here (nvidia-smi missing or failing); run this on the lent GPU machine" >&2
    exit 2
fi
if [[ ! -f $BUNDLE ]]; then
    echo "gpu-check: no bundle at $BUNDLE (make CUDA=1 && scripts/gpu-bundle.sh, then carry .gpu)" >&2
    exit 2
fi
mkdir -p "$LOGS"
DIR=$(mktemp -d)
tar -C "$DIR" -xzf "$BUNDLE" || { echo "gpu-check: cannot unpack $BUNDLE" >&2; exit 2; }

# the machine's cuBLASLt and NCCL: a CUDA install, else the Python wheels
cuda_lib_dirs() {
    local d
    for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu; do
        [[ -e $d/libcublasLt.so.13 || -e $d/libnccl.so.2 ]] && echo "$d"
    done
    python3 - 2>/dev/null <<'PY'
import glob, os, site
for sp in site.getsitepackages():
    for lib in glob.glob(os.path.join(sp, "nvidia", "**", "lib*.so*"), recursive=True):
        if os.path.basename(lib).startswith(("libcublasLt.so.13", "libnccl.so.2")):
            print(os.path.dirname(lib))
PY
}
LIBPATH="$DIR/lib"
while read -r d; do LIBPATH+=":$d"; done < <(cuda_lib_dirs | sort -u)
export LD_LIBRARY_PATH="$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

ROWS=()
BENCH=()
FAILED=0
row() { ROWS+=("$(printf '%-22s %-44s %8s' "$1" "$2" "$3")"); }

# the seconds item NAME may take: its limit, or what is left of the budget
limit_for() {
    local left=$((BUDGET - ($(date +%s) - START)))
    (( left < $1 )) && echo "$left" || echo "$1"
}

# item NAME NEED LIMIT CMD...: runs CMD when the file NEED came in the
# bundle and time is left; one row with its "N passed, N failed" line.
item() {
    local name=$1 need=$2 lim t0 rc out summary ms
    lim=$(limit_for "$3")
    shift 3
    if [[ ! -e $need ]]; then row "$name" "not built" "-"; return; fi
    if (( lim < 10 )); then row "$name" "no time left" "-"; return; fi
    t0=$(date +%s%N)
    if declare -F "$1" >/dev/null; then # a function of this script: run it under the limit too
        out=$(timeout "$lim" bash -c "$(declare -f "$1"); $1" 2>&1)
    else
        out=$(timeout "$lim" "$@" 2>&1)
    fi
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    printf '%s\n' "$out" >"$LOGS/${name//[^a-z0-9_]/_}.log"
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
    [[ -z $summary ]] && summary=$(grep -oE '"tokens_per_s": [0-9]+' <<<"$out" | tail -n 1)
    [[ -z $summary ]] && summary=$(grep -oE '^RESULT accel add=[0-9.]+ fwdbwd=[0-9.]+' <<<"$out" | tail -n 1)
    [[ -z $summary ]] && summary="no summary"
    grep -q "spec files not run" <<<"$out" && summary+=" (some specs not run)"
    (( rc == 124 )) && summary+=" (time limit ${lim} s)"
    (( rc != 0 )) && { FAILED=1; summary+=" (exit $rc)"; }
    row "$name" "$summary" "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
    LAST_OUT=$out
}

# busted over every spec on cuda, summed as "N passed, N failed, N skipped";
# specs that would start after its own deadline are counted as not run.
busted_cuda() {
    local f out lim pass=0 fail=0 skip=0 notrun=0 deadline=$((SECONDS + BUSTED_TIMEOUT - 15))
    local re='([0-9]+) success(es)? / ([0-9]+) failures? / ([0-9]+) errors? / ([0-9]+) pending'
    export LUA_PATH="$DIR/share/lua/?.lua;$DIR/share/lua/?/init.lua;;" LUA_CPATH="$DIR/lib/lua/?.so;;"
    for f in "$ROOT"/tests/lua/*_spec.lua; do
        lim=$((deadline - SECONDS))
        if (( lim < 5 )); then notrun=$((notrun + 1)); continue; fi
        (( lim > 90 )) && lim=90
        # a path relative to the tree, as make test runs them: specs match their own file:line in errors
        out=$(cd "$ROOT" && ACCEL_LUA_DEVICE=cuda timeout "$lim" "$B/accel-lua" "$B/busted" --output=plainTerminal \
            "tests/lua/${f##*/}" 2>&1)
        if [[ $out =~ $re ]]; then
            pass=$((pass + BASH_REMATCH[1])); fail=$((fail + BASH_REMATCH[3] + BASH_REMATCH[4]))
            skip=$((skip + BASH_REMATCH[5]))
            (( BASH_REMATCH[3] + BASH_REMATCH[4] > 0 )) && printf '== %s\n%s\n' "$f" "$(head -n 40 <<<"$out")"
        else
            fail=$((fail + 1)); printf '== %s: no busted summary\n%s\n' "$f" "$(tail -n 20 <<<"$out")"
        fi
    done
    echo "$pass passed, $fail failed, $skip skipped"
    (( notrun > 0 )) && echo "busted: $notrun spec files not run (time)"
    (( fail == 0 && notrun == 0 ))
}

# bench NAME NEED CMD...: one GPT-2 step benchmark; its JSON line goes to BENCH
bench() {
    local name=$1 need=$2 line
    shift 2
    LAST_OUT=""
    item "$name" "$need" "$ITEM_TIMEOUT" "$@"
    line=$(grep -E '^\{"bench"' <<<"$LAST_OUT" | tail -n 1)
    BENCH+=("$name|${line:-}")
}

# the benchmark table from the JSON lines (python3 is PyTorch's there)
bench_table() {
    printf '%s\n' "${BENCH[@]}" | python3 -c '
import json, sys
print("%-24s %12s %10s %8s %8s" % ("run", "tokens/s", "TFLOP/s", "MFU", "loss"))
for ln in sys.stdin:
    name, _, js = ln.rstrip("\n").partition("|")
    if not js:
        print("%-24s %12s" % (name, "failed")); continue
    r = json.loads(js)
    tf = r["achieved_gflops"] / 1e3
    print("%-24s %12d %10.1f %7.1f%% %8.3f" % (name, r["tokens_per_s"], tf, 100 * tf / 790, r["loss_last"]))
print("MFU: achieved / 790 TFLOP/s (bf16 dense, measured on the H200); FLOPs as scripts/bench/gpt.lua counts them")'
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /'
date -u +"date: %Y-%m-%d %H:%M UTC"
B=$DIR/bin
export DIR B ROOT BUSTED_TIMEOUT
LAST_OUT=""
item test_cuda "$B/test_cuda" 90 env ACCEL_EXPECT_GPU=1 "$B/test_cuda"
item conformance "$B/test_backend" 60 "$B/test_backend" cuda
item "busted (cuda)" "$B/busted" "$BUSTED_TIMEOUT" busted_cuda
item "gpt2 step vs cpu" "$B/accel-lua" 90 "$B/accel-lua" "$ROOT/tests/cuda/gpt_step_vs_cpu.lua" cuda
item "per-op (cuda)" "$B/accel-lua" 60 env ACCEL_LUA_DEVICE=cuda PYTHON=python3 OMP_NUM_THREADS=1 \
    "$B/accel-lua" "$ROOT/scripts/bench/per_op.lua" 20000 3
PER_OP=$(grep -E '^RESULT accel' <<<"$LAST_OUT" | tail -n 1)
GPT="$ROOT/scripts/bench/gpt.lua"
TORCH="$ROOT/scripts/bench/gpt_torch_gpu.py"
export ACCEL_LUA_DEVICE=cuda
bench "accel bf16" "$B/accel-lua" "$B/accel-lua" "$GPT" 1 gpt2_b16 5 2 --bf16 --profile
bench "pytorch eager bf16" "$TORCH" python3 "$TORCH" gpt2_b16 5 2 --bf16
bench "pytorch compile bf16" "$TORCH" python3 "$TORCH" gpt2_b16 5 3 --bf16 --compile
bench "accel tf32" "$B/accel-lua" "$B/accel-lua" "$GPT" 1 gpt2_b16 3 1 --tf32
bench "pytorch eager tf32" "$TORCH" python3 "$TORCH" gpt2_b16 3 1 --tf32
bench "accel fp32" "$B/accel-lua" "$B/accel-lua" "$GPT" 1 gpt2_b16 3 1
bench "pytorch eager fp32" "$TORCH" python3 "$TORCH" gpt2_b16 3 1
bench "accel fp8" "$B/accel-lua" "$B/accel-lua" "$GPT" 1 gpt2_b16 3 1 --fp8

printf '%-22s %-44s %8s\n' item result seconds
printf '%s\n' "${ROWS[@]}"
echo
bench_table | tee "$LOGS/bench_table.txt"
echo "per-op on cuda, us (accel add / fwd+bwd, PyTorch's after): ${PER_OP:-not run}"
printf '%s\n' "${BENCH[0]#*|}" | python3 -c '
import json, sys
try: r = json.loads(sys.stdin.read())
except ValueError: sys.exit(0)
print("accel bf16, one step with each op waiting for the GPU: %s ms, ops %s ms; top ops (ms): %s" % (
    r.get("profile_step_ms"), r.get("profile_ops_ms"), json.dumps(r.get("profile_top_ms"))))' | tee -a "$LOGS/bench_table.txt"
rm -rf "$DIR"
exit $FAILED
