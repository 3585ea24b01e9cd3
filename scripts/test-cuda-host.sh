#!/usr/bin/env bash
# test-cuda-host.sh: what of the CUDA glue can be checked without a GPU
# (docs/gpu.md). Run by scripts/run-tests.sh:
#
#   scripts/test-cuda-host.sh [BUILD_DIR]     (default: build)
#
# With the CPU build (BUILD/accel-lua): device discovery says "no CUDA" and
# why, accel.device("cuda") / cuda tensors are clear errors, launch refuses
# --multi_gpu and --gpu_ids saying the build has no CUDA, bad --gpu_ids
# values are named. With the CUDA build (BUILD/cuda/accel-lua, make
# cuda-ci) on a machine without a GPU: the same discovery answers 0 with
# the driver's reason, the Accelerator falls back to the CPU with one
# warning, ACCEL_LUA_DEVICE=cuda is a clear error, launch --dry_run maps
# --gpu_ids to CUDA_VISIBLE_DEVICES and runs the ranks on their GPUs
# (use_cpu false), a real --multi_gpu launch is refused with the reason,
# and the conformance test `test_backend cuda` fails naming it. The CPU
# build also runs gpu-check.sh's GPT-2 step comparison on sim. Without a
# CUDA build (or on a machine with a GPU, where gpu-check.sh runs the GPU
# side) those checks are counted as skipped.
# shellcheck source=scripts/test-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh" "$@"

CUDA_EXE=$BUILD/cuda/accel-lua
SKIP=0
NO_GPU_RE="no usable NVIDIA driver|no CUDA GPU was found|CUDA runtime could not start"
echo 'print("rank")' >"$TMP/rank.lua"

# lua EXE CODE: runs CODE as a script under EXE (stdout+stderr in OUT).
lua() {
    printf '%s\n' "$2" >"$TMP/s.lua"
    run "$1" "$TMP/s.lua"
}

cpu_build() {
    lua "$EXE" 'local a = require("accel")
print(a.cuda.is_built(), a.cuda.is_available(), a.device_count(), a.device_count("cuda"), a.device_count("cpu"))
print(a.cuda.unavailable_reason())'
    check "cpu build: no CUDA, 0 GPUs, the reason" \
        '(( RC == 0 )) && has "false	false	0	0	1" && has "built without CUDA (make CUDA=1)"'
    lua "$EXE" 'require("accel").device("cuda:0")'
    check "cpu build: accel.device(\"cuda:0\") names the device, the reason and the script line" \
        '(( RC != 0 )) && has "s.lua:1: device cuda:0 is not available: this accel-lua is built without CUDA"'
    lua "$EXE" 'require("accel").zeros(2, {device = "cuda"})'
    check "cpu build: a tensor on cuda is the same clear error" '(( RC != 0 )) && has "device cuda:0 is not available"'
    lua "$EXE" 'local a = require("accel"); print(pcall(a.cuda.get_device_capability, "cpu")); a.cuda.get_device_capability(1)'
    check "cpu build: get_device_capability refuses a CPU device and names the missing cuda:1" \
        '(( RC != 0 )) && has "cpu is not a CUDA device" && has "s.lua:1: device cuda:1 is not available: this accel-lua is built without CUDA"'
    lua "$EXE" 'local c = require("accel").cuda; c.empty_cache(); print("emptied"); c.memory_allocated()'
    check "cpu build: cuda.empty_cache is a no-op, memory_allocated names the missing cuda:0" \
        '(( RC != 0 )) && has "emptied" && has "s.lua:1: device cuda:0 is not available: this accel-lua is built without CUDA"'
    lua "$EXE" 'require("accel").cuda.synchronize()'
    check "a torch.cuda function accel.cuda lacks is one error naming it and listing what there is" \
        '(( RC != 0 )) && has "s.lua:1: accel.cuda.synchronize does not exist here; accel.cuda has is_available"'
    lua "$EXE" 'print(require("accel").device_count("tpu"))'
    check "device_count of an unknown type names it" '(( RC != 0 )) && has "unknown device '"'"'tpu'"'"'"'
    lua "$EXE" 'local m = require("accel").backends.cuda.matmul
print(m.allow_tf32); m.allow_tf32 = true; print(m.allow_tf32)
m.allow_tf32 = 1'
    check "cpu build: allow_tf32 reads false, setting it is a no-op, a non-boolean is refused" \
        '(( RC != 0 )) && [[ $OUT == false$'"'"'\n'"'"'false* ]] && has "allow_tf32: boolean expected, got number"'
    lua "$EXE" 'require("accel").backends.cuda.matmul.allow_fp16 = true'
    check "backends.cuda.matmul: an unknown setting is named" '(( RC != 0 )) && has "no setting '"'"'allow_fp16'"'"'"'
    run "$EXE" launch --gpu_ids 0,1 "$TMP/rank.lua"
    check "cpu build: launch --gpu_ids refused, says the build has no CUDA" \
        '(( RC == 2 )) && has "--gpu_ids: this accel-lua is built without CUDA"'
    printf 'gpu_ids: 0,1\n' >"$TMP/g.yaml"
    run "$EXE" launch --config_file "$TMP/g.yaml" "$TMP/rank.lua"
    check "cpu build: gpu_ids in a config file refused the same way" \
        '(( RC == 2 )) && has "--gpu_ids: this accel-lua is built without CUDA"'
    run "$EXE" launch --dry_run --gpu_ids all "$TMP/rank.lua"
    check "cpu build: --gpu_ids all is accepted (accelerate config writes it)" \
        '(( RC == 0 )) && [[ $OUT != *CUDA_VISIBLE_DEVICES* ]] && has "ACCEL_LUA_USE_CPU=true"'
    run "$EXE" launch --gpu_ids 0,x "$TMP/rank.lua"
    check "bad --gpu_ids value named" '(( RC == 2 )) && has "--gpu_ids: '"'"'0,x'"'"' is not \"all\" or a comma-separated list"'
    run "$EXE" launch --gpu_ids 2,2 "$TMP/rank.lua"
    check "--gpu_ids naming a GPU twice refused" '(( RC == 2 )) && has "names GPU 2 twice"'
    run "$EXE" launch --multi_gpu "$TMP/rank.lua"
    check "cpu build: --multi_gpu refused, says the build has no CUDA" \
        '(( RC == 2 )) && has "MULTI_GPU (--multi_gpu): this accel-lua is built without CUDA"'
    run "$EXE" tests/cuda/gpt_step_vs_cpu.lua sim
    check "gpu-check's GPT-2 step comparison runs (on sim, bit-identical to the CPU)" \
        '(( RC == 0 )) && has "4 passed, 0 failed" && has "relative difference 0.00e+00"'
}

cuda_build() {
    lua "$CUDA_EXE" 'local a = require("accel")
print(a.cuda.is_built(), a.cuda.is_available(), a.device_count())
print(a.cuda.unavailable_reason())'
    check "cuda build, no GPU: built, 0 GPUs, the driver's reason" \
        '(( RC == 0 )) && has "true	false	0" && [[ $OUT =~ $NO_GPU_RE ]] && has "cudaGetDeviceCount"'
    lua "$CUDA_EXE" 'require("accel").device("cuda")'
    check "cuda build, no GPU: accel.device(\"cuda\") names the device and the reason" \
        '(( RC != 0 )) && has "s.lua:1: device cuda:0 is not available: " && [[ $OUT =~ $NO_GPU_RE ]]'
    lua "$CUDA_EXE" 'require("accel").cuda.get_device_capability()'
    check "cuda build, no GPU: get_device_capability() names cuda:0 and the reason" \
        '(( RC != 0 )) && has "s.lua:1: device cuda:0 is not available: " && [[ $OUT =~ $NO_GPU_RE ]]'
    lua "$CUDA_EXE" 'local c = require("accel").cuda; c.empty_cache(); print("emptied"); print(c.memory_stats("cuda:0"))'
    check "cuda build, no GPU: cuda.empty_cache is a no-op, memory_stats names cuda:0 and the reason" \
        '(( RC != 0 )) && has "emptied" && has "s.lua:1: device cuda:0 is not available: " && [[ $OUT =~ $NO_GPU_RE ]]'
    lua "$CUDA_EXE" 'local a = require("accel")
local acc = a.Accelerator(); print("device", acc.device, acc.distributed_type)
local acc2 = a.Accelerator(); print("device", acc2.device)'
    check "cuda build, no GPU: the Accelerator falls back to the CPU, warning once" \
        '(( RC == 0 )) && has "device	cpu	NO" && (( $(grep -c "no CUDA GPU is usable" <<<"$OUT") == 1 )) && has "running on the CPU"'
    lua "$CUDA_EXE" 'print(require("accel").Accelerator({cpu = true}).device)'
    check "cuda build: Accelerator{cpu = true} uses the CPU without a warning" \
        '(( RC == 0 )) && [[ $OUT == cpu ]]'
    run env ACCEL_LUA_DEVICE=cuda "$CUDA_EXE" -e 'print(require("accel").zeros(2))'
    check "cuda build, no GPU: ACCEL_LUA_DEVICE=cuda is one clear error" \
        '(( RC != 0 )) && has "ACCEL_LUA_DEVICE=cuda: device cuda:0 is not available"'
    run "$CUDA_EXE" launch --dry_run --multi_gpu --num_processes 2 --gpu_ids 1,3 "$TMP/rank.lua"
    check "cuda build: launch --dry_run maps --gpu_ids to CUDA_VISIBLE_DEVICES, ranks on their GPUs" \
        '(( RC == 0 )) && has "-x CUDA_VISIBLE_DEVICES=1,3 " && has "-x ACCEL_LUA_DISTRIBUTED_TYPE=MULTI_GPU " && has "-x ACCEL_LUA_USE_CPU=false "'
    run "$CUDA_EXE" launch --dry_run --cpu --num_processes 2 "$TMP/rank.lua"
    check "cuda build: launch --cpu keeps the ranks on the CPU" '(( RC == 0 )) && has "-x ACCEL_LUA_USE_CPU=true "'
    run "$CUDA_EXE" launch --dry_run --multi_gpu --num_processes 3 --gpu_ids 0,1 "$TMP/rank.lua"
    check "cuda build: more processes than --gpu_ids refused" \
        '(( RC == 2 )) && has "--gpu_ids 0,1 lists 2 GPUs for 3 processes per machine"'
    run "$CUDA_EXE" launch --dry_run --num_processes 2 --gpu_ids 1 "$TMP/rank.lua"
    check "cuda build: more processes than --gpu_ids refused without --multi_gpu too (the ranks run on GPUs)" \
        '(( RC == 2 )) && has "--gpu_ids 1 lists 1 GPU for 2 processes per machine"'
    run "$CUDA_EXE" launch --dry_run --cpu --num_processes 2 --gpu_ids 1 "$TMP/rank.lua"
    check "cuda build: --cpu: the ranks use no GPU, so --gpu_ids limits nothing" '(( RC == 0 ))'
    run "$CUDA_EXE" launch --multi_gpu --num_processes 2 "$TMP/rank.lua"
    check "cuda build, no GPU: launch --multi_gpu refused with the driver's reason" \
        '(( RC == 2 )) && has "MULTI_GPU (--multi_gpu): " && [[ $OUT =~ $NO_GPU_RE ]]'
    run "$BUILD/cuda/test_backend" cuda
    check "cuda build, no GPU: test_backend cuda fails, naming the reason" \
        '(( RC != 0 )) && has "test_backend: no backend cuda: device cuda:0 is not available" && has "0 passed, 1 failed"'
}

# the number of checks cuda_build makes (counted skipped when it cannot run)
CUDA_CHECKS=$(declare -f cuda_build | grep -c '^ *check ')
cpu_build
if [[ ! -x $CUDA_EXE || ! -x $BUILD/cuda/test_backend ]]; then
    echo "skip the CUDA build's checks: no $CUDA_EXE (make cuda-ci builds it)"
    SKIP=$CUDA_CHECKS
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    echo "skip the no-GPU checks: this machine has a GPU (scripts/gpu-check.sh checks that side)"
    SKIP=$CUDA_CHECKS
else
    cuda_build
fi
echo "$PASS passed, $FAIL failed, $SKIP skipped"
(( FAIL == 0 ))
