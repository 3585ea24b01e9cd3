#!/usr/bin/env bash
# shard_gpt.sh: the sharding benchmark. 2 ranks x 1 thread, the GPT of
# common.gpt: accel-lua's DDP, ZeRO-1, ZeRO-2, ZeRO-3 (scripts/bench/
# shard_gpt.lua under accel-lua launch --cpu) and PyTorch's DDP and FSDP2
# (fully_shard per block, gloo; scripts/bench/shard_gpt.py under
# torch.distributed.run) on the same model, in one run, interleaved rounds.
# From the repo root:
#   bash scripts/bench/shard_gpt.sh [options] [STEPS [WARMUP [ROUNDS]]]
# options:
#   --shape small|gpt2   gpt2 = V50257 T256 L12 H12 C768 B4 per rank (the
#                        default); small = V65 T64 L4 H4 C128 B16 (quick)
#   --ckpt               activation checkpointing of every block on BOTH
#                        sides (accel.utils.checkpoint_module /
#                        torch.utils.checkpoint); default: neither side
#   --bf16               the forward under bf16 autocast on BOTH sides
#                        (float32 master weights, gradients and collectives);
#                        default: float32
#   --via engine|accelerator
#                        accel-lua through accel.shard.Engine (and
#                        accel.ddp.Reducer for DDP; the default) or through
#                        accel.Accelerator{deepspeed_plugin =
#                        accel.DeepSpeedPlugin{zero_stage = S}} (and a plain
#                        Accelerator for DDP)
#   --no-prefetch        engine path: stage 3 without the forward / backward
#                        prefetch of the next unit (on by default)
#   --profile            accel-lua runs also profile one extra step (where
#                        its time goes: profile_* fields of their JSON lines)
#   --only LIST          a subset of ddp,zero1,zero2,zero3,torch-ddp,torch-fsdp
# STEPS / WARMUP / ROUNDS default to 20 / 3 / 3 (small) and 5 / 1 / 2 (gpt2).
# Environment: TORCH_PYTHON (a Python with PyTorch >= 2.6, which has
# torch.distributed.fsdp.fully_shard; default python3 from PATH). Without one
# the PyTorch rows say so and are left out. To make one:
#   python3 -m venv V && V/bin/pip install torch     # then TORCH_PYTHON=V/bin/python
# ACCEL_BUILD (build dir, default build), NO_MAKE=1 (skip make), TIMEOUT
# (seconds per run, default 1800).
#
# Every process runs one compute thread (OMP_NUM_THREADS=1
# OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1; accel-lua num_threads(1),
# torch.set_num_threads(1)); OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE stay as the
# environment has them, the same on both sides, and are printed with the CPU
# and the load average (read when the run starts and at each round).
# Per configuration the summary takes the best round's tokens/s (global,
# from the slowest rank's median step) and the largest peak RSS of any rank
# in any round; p+g+os is parameters + gradients + optimizer state per rank
# (accel-lua: from the engine's layout, and "held" = tensor bytes alive right
# after an optimizer step, memory_stats; PyTorch: the rank's local tensors);
# tok/CPU-s is global tokens over the larger rank's median CPU time of a
# step (what foreign load inflates least), from the best round's run.
# Raw JSON lines: $BUILD/bench/shard_gpt.jsonl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=${ACCEL_BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
SHAPE=gpt2 CKPT=0 BF16=0 VIA=engine PROFILE=0 NOPF=0
ONLY=ddp,zero1,zero2,zero3,torch-ddp,torch-fsdp
POS=()
while [[ $# -gt 0 ]]; do
    case $1 in
    --shape) SHAPE=$2; shift 2 ;;
    --ckpt) CKPT=1; shift ;;
    --bf16) BF16=1; shift ;;
    --via) VIA=$2; shift 2 ;;
    --profile) PROFILE=1; shift ;;
    --no-prefetch) NOPF=1; shift ;;
    --only) ONLY=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "shard_gpt.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) POS+=("$1"); shift ;;
    esac
done
case $SHAPE in
small) D_STEPS=20 D_WARMUP=3 D_ROUNDS=3 ;;
gpt2) D_STEPS=5 D_WARMUP=1 D_ROUNDS=2 ;;
*) echo "shard_gpt.sh: --shape must be small or gpt2, got $SHAPE" >&2; exit 2 ;;
esac
[[ $VIA == engine || $VIA == accelerator ]] || { echo "shard_gpt.sh: --via must be engine or accelerator, got $VIA" >&2; exit 2; }
STEPS=${POS[0]:-$D_STEPS} WARMUP=${POS[1]:-$D_WARMUP} ROUNDS=${POS[2]:-$D_ROUNDS}
TIMEOUT=${TIMEOUT:-1800}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

if [[ ${NO_MAKE:-0} != 1 ]]; then
    make -j2 BUILD="$BUILD" >/dev/null || { echo "shard_gpt.sh: make failed" >&2; exit 1; }
fi
ACCEL=$BUILD/accel-lua
[[ -x $ACCEL ]] || { echo "shard_gpt.sh: $ACCEL not built" >&2; exit 1; }
OUT=$BUILD/bench
mkdir -p "$OUT"
RESULTS=$OUT/shard_gpt.jsonl
: >"$RESULTS"

# PyTorch: a 2.x with fully_shard, or the reason there is none.
TORCH_PYTHON=${TORCH_PYTHON:-python3}
TORCH=1 TORCH_VERSION=
if ! wants torch-ddp && ! wants torch-fsdp; then
    TORCH=0 TORCH_VERSION="not asked for (--only)"
elif ! TORCH_VERSION=$("$TORCH_PYTHON" -c 'import torch; from torch.distributed.fsdp import fully_shard; print(torch.__version__)' 2>/dev/null); then
    TORCH=0
    found=$("$TORCH_PYTHON" -c 'import torch; print("PyTorch " + torch.__version__ + ", without fully_shard")' \
        2>/dev/null || echo "no PyTorch there")
    TORCH_VERSION="none usable (TORCH_PYTHON=$TORCH_PYTHON: $found)"
    echo "shard_gpt.sh: no PyTorch 2.x with torch.distributed.fsdp.fully_shard for TORCH_PYTHON=$TORCH_PYTHON" \
         "($found): the PyTorch rows are left out. Make one with" \
         "'python3 -m venv V && V/bin/pip install torch' and run with TORCH_PYTHON=V/bin/python" >&2
fi

load() { cut -d' ' -f1-3 /proc/loadavg; }
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
FLAGS=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' ')
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(getconf _NPROCESSORS_ONLN) cores, $CPU (${FLAGS% }); load $(load)"
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-<unset>}" \
     "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 (both sides); PyTorch: $TORCH_VERSION"
echo "== shape $SHAPE, 2 ranks x 1 thread, steps $STEPS, warmup $WARMUP, rounds $ROUNDS," \
     "activation checkpointing: $([[ $CKPT == 1 ]] && echo 'both sides' || echo 'neither side')," \
     "precision: $([[ $BF16 == 1 ]] && echo 'bf16 autocast, both sides' || echo float32), accel-lua via $VIA," \
     "stage-3 prefetch: $([[ $NOPF == 1 ]] && echo off || echo on)"

# jfield KEY JSON: a numeric field of a JSON line.
jfield() { grep -oE "\"$1\": *[-0-9.e+]+" <<<"$2" | head -n 1 | sed 's/.*: *//'; }
declare -A TOK RSS LINE LOADS
# run KEY CMD...: runs CMD; keeps its JSON line (the best tokens/s per KEY,
# the largest peak RSS per KEY); a run without one shows its error's tail.
run() {
    local key=$1 line tok rss log
    shift
    log=$OUT/shard_gpt.$key.log
    line=$(timeout -k 5 "$TIMEOUT" "$@" 2>"$log" | grep '^{"bench": "shard_gpt"' | tail -n 1) || true
    if [[ -z $line ]]; then
        echo "$key: no result; from $log:" >&2
        { grep -m1 -E '^accel-lua: rank|Error|error' "$log" || grep -v '^\s*$' "$log" | tail -n 3; } | sed 's/^/    /' >&2
        return
    fi
    echo "$line" >>"$RESULTS"
    tok=$(jfield global_tokens_per_s "$line") rss=$(jfield peak_rss_bytes_max_rank "$line")
    printf '%-10s %9s tok/s  peak RSS %6.0f MiB  (load %s)\n' "$key" "$tok" "$(awk -v b="$rss" 'BEGIN { print b / 2^20 }')" "$(load)"
    if [[ -z ${TOK[$key]:-} ]] || awk -v a="$tok" -v b="${TOK[$key]}" 'BEGIN { exit !(a > b) }'; then
        TOK[$key]=$tok LINE[$key]=$line LOADS[$key]=$(load)
    fi
    if [[ -z ${RSS[$key]:-} ]] || ((rss > RSS[$key])); then RSS[$key]=$rss; fi
}

LUA_FLAGS=(--via="$VIA")
[[ $CKPT == 1 ]] && LUA_FLAGS+=(--ckpt)
[[ $BF16 == 1 ]] && LUA_FLAGS+=(--bf16)
[[ $PROFILE == 1 ]] && LUA_FLAGS+=(--profile)
[[ $NOPF == 1 ]] && LUA_FLAGS+=(--no_prefetch)
PY_FLAGS=()
[[ $CKPT == 1 ]] && PY_FLAGS+=(ckpt)
[[ $BF16 == 1 ]] && PY_FLAGS+=(bf16)
for ((i = 1; i <= ROUNDS; i++)); do
    echo "-- round $i (load $(load))"
    for m in ddp zero1 zero2 zero3; do
        wants $m && run $m "$ACCEL" launch --cpu --num_processes 2 scripts/bench/shard_gpt.lua $m "$SHAPE" "$STEPS" "$WARMUP" "${LUA_FLAGS[@]}"
    done
    if ((TORCH)); then
        for m in ddp fsdp; do
            wants torch-$m && run torch-$m "$TORCH_PYTHON" -m torch.distributed.run --nproc_per_node 2 \
                scripts/bench/shard_gpt.py $m "$SHAPE" "$STEPS" "$WARMUP" "${PY_FLAGS[@]}"
        done
    fi
done

mib() { [[ -n ${1:-} ]] && awk -v b="$1" 'BEGIN { printf "%.0f", b / 2^20 }' || echo "n/a"; }
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
get() { if [[ -n ${LINE[$1]:-} ]]; then jfield "$2" "${LINE[$1]}"; fi; }
echo
echo "== summary ($SHAPE, 2 ranks x 1 thread, best of $ROUNDS rounds; MiB per rank, the largest rank)"
printf '| %-16s | %9s | %7s | %9s | %13s | %14s | %10s | %10s | %s |\n' run "tokens/s" "s/step" "tok/CPU-s" \
    "peak RSS MiB" "p+g+os MiB" "held MiB" "peak live" "load (1/5/15 min)"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n' ------------------ ----------- --------- ----------- --------------- \
    ---------------- ------------ ------------ -------------------
for key in ddp zero1 zero2 zero3 torch-ddp torch-fsdp; do
    wants "$key" || continue
    case $key in
    ddp) name="accel-lua DDP" ;; zero*) name="accel-lua ZeRO-${key#zero}" ;;
    torch-ddp) name="PyTorch DDP" ;; torch-fsdp) name="PyTorch FSDP2" ;;
    esac
    none=n/a
    [[ $key == torch-* && $TORCH == 0 ]] && none="no PyTorch"
    printf '| %-16s | %9s | %7s | %9s | %13s | %14s | %10s | %10s | %s |\n' "$name" "${TOK[$key]:-$none}" \
        "$(get "$key" step_s_median)" "$(get "$key" global_tokens_per_cpu_s)" "$(mib "${RSS[$key]:-}")" "$(mib "$(get "$key" pgos_bytes)")" \
        "$(mib "$(get "$key" state_live_bytes_max_rank)")" "$(mib "$(get "$key" peak_live_bytes_max_rank)")" \
        "${LOADS[$key]:-}"
done

# target NAME VALUE OP LIMIT: one line of the targets' table.
target() {
    local verdict=n/a
    if [[ $2 != n/a ]]; then
        verdict=$(awk -v v="$2" -v l="$4" -v op="$3" 'BEGIN { ok = (op == "<=") ? v <= l : v >= l; print ok ? "met" : "MISSED" }')
    fi
    printf '| %-56s | %8s | %8s | %-6s |\n' "$1" "$2" "$3 $4" "$verdict"
}
echo
printf '| %-56s | %8s | %8s | %-6s |\n' target measured limit result
printf '|%s|%s|%s|%s|\n' ---------------------------------------------------------- ---------- ---------- --------
target "ZeRO-3 p+g+os per rank / accel-lua DDP's (layout)" \
    "$(ratio "$(get zero3 pgos_bytes)" "$(get ddp pgos_bytes)")" "<=" 0.55
target "ZeRO-3 held bytes per rank / accel-lua DDP's (measured)" \
    "$(ratio "$(get zero3 state_live_bytes_max_rank)" "$(get ddp state_live_bytes_max_rank)")" "<=" 0.55
target "ZeRO-3 tokens/s / accel-lua DDP's" "$(ratio "${TOK[zero3]:-0}" "${TOK[ddp]:-0}")" ">=" 0.85
target "ZeRO-3 tokens/s / PyTorch FSDP2's" "$(ratio "${TOK[zero3]:-0}" "${TOK[torch-fsdp]:-0}")" ">=" 5
target "ZeRO-3 peak RSS per rank / PyTorch FSDP2's" "$(ratio "${RSS[zero3]:-0}" "${RSS[torch-fsdp]:-0}")" "<=" 0.6
echo "(CPU time, less sensitive to foreign load: ZeRO-3 / accel-lua DDP tokens per CPU-second" \
     "$(ratio "$(get zero3 global_tokens_per_cpu_s)" "$(get ddp global_tokens_per_cpu_s)"), ZeRO-3 / PyTorch FSDP2's" \
     "$(ratio "$(get zero3 global_tokens_per_cpu_s)" "$(get torch-fsdp global_tokens_per_cpu_s)"))"
echo "(other ratios: accel-lua DDP / PyTorch DDP tokens/s $(ratio "${TOK[ddp]:-0}" "${TOK[torch-ddp]:-0}");" \
     "PyTorch FSDP2 / PyTorch DDP $(ratio "${TOK[torch-fsdp]:-0}" "${TOK[torch-ddp]:-0}"))"
# The four accel-lua rows train the same model on the same batches: their
# losses agree to rounding when the engine trains as DDP does.
losses=
for key in ddp zero1 zero2 zero3; do
    [[ -n ${LINE[$key]:-} ]] && losses+=" $key $(get $key loss_first) -> $(get $key loss_last);"
done
[[ -n $losses ]] && echo "accel-lua losses (first -> last timed step, same data in every row):${losses%;}"
echo "raw: $RESULTS; load at the end $(load)"
