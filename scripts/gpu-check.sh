#!/usr/bin/env bash
# gpu-check.sh: the checks that need a GPU, as one command for a lent GPU
# machine (docs/gpu.md). Built here, carried there:
#   scripts/gpu-bundle.sh                       (here, after make CUDA=1)
#   scripts/gpu-check.sh [.gpu/bundle.tar.gz]   (there: run tool, carry [".gpu"])
# Refuses (exit 2) where no NVIDIA GPU answers. Unpacks the bundle, finds
# libcublasLt.so.13 / libnccl.so.2 of the machine (CUDA install or the
# PyTorch venv's nvidia-* wheels), then runs what the bundle has:
#   test_cuda       the CUDA kernels against the CPU (ACCEL_EXPECT_GPU=1)
#   conformance     test_backend_ops cuda (every backend entry vs the CPU)
#   busted (cuda)   the Lua suite with ACCEL_LUA_DEVICE=cuda
#   bench gpt2      the GPT-2-124M step benchmark against PyTorch
# and prints one row per item: result, seconds. Items whose binary is not
# in the bundle print "not built". Logs go to $OUT (the device tool's
# folder that comes back) when set, else /tmp/gpu-check. Exit 1 if any
# item failed.
set -uo pipefail
BUNDLE=${1:-.gpu/bundle.tar.gz}
LOGS=${OUT:-/tmp/gpu-check}
ITEM_TIMEOUT=${GPU_CHECK_TIMEOUT:-240}

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
FAILED=0
# item NAME NEED CMD...: runs CMD when the file NEED came in the bundle; one row.
item() {
    local name=$1 need=$2 t0 rc out summary ms
    shift 2
    if [[ ! -e $need ]]; then
        ROWS+=("$(printf '%-16s %-34s %8s' "$name" "not built" "-")")
        return
    fi
    t0=$(date +%s%N)
    out=$(timeout "$ITEM_TIMEOUT" "$@" 2>&1)
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    printf '%s\n' "$out" >"$LOGS/${name//[^a-z0-9_]/_}.log"
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
    [[ -z $summary ]] && summary="no summary"
    (( rc != 0 )) && { FAILED=1; summary+=" (exit $rc)"; }
    ROWS+=("$(printf '%-16s %-34s %4d.%03d' "$name" "$summary" $((ms / 1000)) $((ms % 1000)))")
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /'
B=$DIR/bin
item test_cuda "$B/test_cuda" env ACCEL_EXPECT_GPU=1 "$B/test_cuda"
item conformance "$B/test_backend_ops" "$B/test_backend_ops" cuda
# busted and its Lua modules travel in share/busted (not bundled yet)
item "busted (cuda)" "$DIR/share/busted/run.sh" env ACCEL_LUA_DEVICE=cuda "$DIR/share/busted/run.sh" "$B/accel-lua"
item "bench gpt2" "$DIR/bench/run.sh" "$DIR/bench/run.sh" "$B/accel-lua"

printf '%-16s %-34s %8s\n' item result seconds
printf '%s\n' "${ROWS[@]}"
rm -rf "$DIR"
exit $FAILED
