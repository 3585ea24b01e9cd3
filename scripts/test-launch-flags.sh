#!/usr/bin/env bash
# test-launch-flags.sh: checks of `accel-lua launch`'s Accelerate flags
# (docs/launch.md): every flag of `accelerate launch` (the list taken from
# Accelerate's source, tests/fixtures/accelerate_launch_flags.txt) is
# supported or refused naming itself, never "unknown"; the refused config
# keys; every sharding flag and key reaches the ranks, and the plugin the
# ranks build from launch's defaults and an Accelerate-written FSDP file;
# real 2-rank launches for --log_dir / --tee / --redirects, --debug,
# --num_cpu_threads_per_process, -m, --no_python, -q; --monitor_interval;
# `config update`. Run by
# scripts/run-tests.sh:
#
#   scripts/test-launch-flags.sh [BUILD_DIR]     (default: build)
# shellcheck source=scripts/test-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh" "$@"
export HOME=$TMP/home
unset XDG_CACHE_HOME ACCEL_LUA_CONFIG ACCEL_LUA_MPIRUN ACCEL_LUA_NUM_THREADS OMP_NUM_THREADS
unset ACCEL_LUA_LOG_DIR ACCEL_LUA_TEE ACCEL_LUA_REDIRECTS
[[ -n ${ASAN_OPTIONS:-} ]] && export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"

write_scripts() {
    # Each rank prints what it was given on stdout and a line on stderr;
    # with "fail" rank 1 raises after printing; with "nested EXE" each
    # rank runs `EXE -e ...` (an accel-lua started by the script).
    cat >"$TMP/rank.lua" <<'EOF'
local r = os.getenv("OMPI_COMM_WORLD_RANK") or "none"
print(("out %s debug=%s omp=%s threads=%d args=%s"):format(r, os.getenv("ACCEL_LUA_DEBUG_MODE"),
  os.getenv("OMP_NUM_THREADS"), accel.num_threads(), table.concat({...}, ",")))
io.stderr:write("err " .. r .. "\n")
if arg[1] == "nested" then io.stdout:flush() os.execute(arg[2] .. [[ -e 'print("nested child")']]) end
if arg[1] == "fail" and r == "1" then error("boom on purpose") end
EOF
    # Fails on attempt 0, succeeds on attempt 1.
    cat >"$TMP/retry.lua" <<'EOF'
local r = os.getenv("OMPI_COMM_WORLD_RANK")
print("attempt " .. os.getenv("ACCEL_LUA_RESTART_COUNT") .. " rank " .. r)
if os.getenv("ACCEL_LUA_RESTART_COUNT") == "0" and r == "1" then error("first attempt fails") end
EOF
    mkdir -p "$TMP/mods/pkg"
    printf 'print("module", os.getenv("OMPI_COMM_WORLD_RANK"), arg[0], ...)\n' >"$TMP/mods/pkg/train.lua"
    printf '#!/bin/sh\necho "program rank=$OMPI_COMM_WORLD_RANK debug=$ACCEL_LUA_DEBUG_MODE args=$* torchrun=$RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE"\n' \
        >"$TMP/prog.sh"
    chmod +x "$TMP/prog.sh"
    # The plugin an Accelerator built from launch's settings, as the shared
    # state (Accelerate's AcceleratorState) shows it.
    cat >"$TMP/plugin.lua" <<'EOF'
local acc = accel.Accelerator()
local p = acc.state.fsdp_plugin or acc.state.deepspeed_plugin
print("plugin", acc.distributed_type, p.sharding_strategy, p.zero_stage, p.state_dict_type,
  p == (acc.fsdp_plugin or acc.deepspeed_plugin))
EOF
    # What Accelerate 1.15's `accelerate config` writes for FSDP1
    # (ClusterConfig.to_yaml_file): the strategy as fsdp_reshard_after_forward.
    cat >"$TMP/accelerate_fsdp1.yaml" <<'EOF'
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: FSDP
downcast_bf16: 'no'
enable_cpu_affinity: false
fsdp_config:
  fsdp_activation_checkpointing: false
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_cpu_ram_efficient_loading: true
  fsdp_forward_prefetch: false
  fsdp_offload_params: false
  fsdp_reshard_after_forward: SHARD_GRAD_OP
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_transformer_layer_cls_to_wrap: Block
  fsdp_use_orig_params: true
  fsdp_version: 1
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 1
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
EOF
}

# Every flag of `accelerate launch` is either taken (its value "1" may
# still be wrong for it: "--mixed_precision: '1' is not one of ...") or
# refused with a message naming it ("--tpu: not supported: ..."); never
# "unknown flag".
check_every_accelerate_flag() {
    local flag takes bad_flags="" accepted=0 refused=0
    while read -r flag takes; do
        [[ -z $flag || $flag == \#* ]] && continue
        local args=("$flag")
        (( takes )) && args+=(1)
        run "$EXE" launch --dry_run "${args[@]}" "$TMP/rank.lua"
        if has "unknown flag" || { has "not supported" && ! has "$flag"; }; then
            bad_flags+=" $flag(rc=$RC: ${OUT%%$'\n'*})"
        elif has "not supported"; then
            refused=$((refused + 1))
        else
            accepted=$((accepted + 1))
        fi
    done <"$ROOT/tests/fixtures/accelerate_launch_flags.txt"
    OUT="accepted $accepted, refused $refused; wrong:$bad_flags"
    check "every accelerate launch flag is taken or refused by name ($accepted taken, $refused refused)" \
        '[[ -z $bad_flags ]] && (( refused > 50 && accepted > 40 ))'
}

check_refusals() {
    run "$EXE" launch --dynamo_backend inductor --use_megatron_lm --tpu "$TMP/rank.lua"
    check "refusals: exit 2, each flag named with its reason" \
        '(( RC == 2 )) && has "--dynamo_backend inductor: not supported: torch.compile does not exist here" && has "--use_megatron_lm: not supported: there is no Megatron-LM" && has "--tpu: not supported: there is no TPU backend" && ! has "unknown flag"'
    run "$EXE" launch --rdzv_conf --tpu --env --use_megatron_lm "$TMP/rank.lua"
    check "a refused flag missing its value does not swallow the next flag: all four named" \
        '(( RC == 2 )) && has "--rdzv_conf: not supported" && has "--tpu: not supported" && has "--env: not supported" && has "--use_megatron_lm: not supported"'
    run "$EXE" launch --dry_run --dynamo_backend no --rdzv_backend static --gpu_ids all --same_network "$TMP/rank.lua"
    check "values that ask for nothing (--dynamo_backend no, --gpu_ids all) are accepted" '(( RC == 0 ))'
    run "$EXE" launch --use_fsdp --fsdp_activation_checkpointing_offload true "$TMP/rank.lua"
    check "--fsdp_activation_checkpointing_offload true: refused with its reason" \
        '(( RC == 2 )) && has "--fsdp_activation_checkpointing_offload true: not supported: checkpointed activations are not offloaded to host memory" && ! has "unknown"'
    run "$EXE" launch --dry_run --use_fsdp --fsdp_activation_checkpointing_offload false "$TMP/rank.lua"
    check "--fsdp_activation_checkpointing_offload false asks for nothing: accepted" '(( RC == 0 ))'
    run "$EXE" launch --bogus "$TMP/rank.lua"
    check "a flag Accelerate lacks is still unknown" '(( RC == 2 )) && has "unknown flag: --bogus"'
}

# key: value lines that must each be refused, naming the key.
check_refused_keys() {
    local line key missing=""
    while IFS= read -r line; do
        key=${line%%:*}
        printf '%s\n' "$line" | sed 's/\\n/\n/g' >"$TMP/k.yaml"
        run "$EXE" launch --dry_run --config_file "$TMP/k.yaml" "$TMP/rank.lua"
        (( RC == 2 )) && has "not supported" && has "$key" || missing+=" [$line: $OUT]"
    done <<'EOF'
tpu_use_cluster: true
tpu_name: my-pod
tpu_env: [A=1]
downcast_bf16: 'yes'
use_mps_device: true
enable_cpu_affinity: true
rdzv_backend: c10d
main_training_function: train
dynamo_config:\n  dynamo_backend: INDUCTOR
dynamo_backend: INDUCTOR
ipex_config:\n  ipex: true
megatron_lm_config:\n  megatron_lm_tp_degree: 2
fp8_config:\n  backend: TE
parallelism_config:\n  parallelism_config_tp_size: 2
deepspeed_config:\n  deepspeed_inclusion_filter: host1
fsdp_config:\n  fsdp_activation_checkpointing_offload: true
fsdp_config:\n  fsdp_ignored_modules: Embedding
EOF
    OUT=$missing
    check "config keys for what does not exist here are refused, key named" '[[ -z $missing ]]'
    cat >"$TMP/neutral.yaml" <<'EOF'
distributed_type: MULTI_CPU
num_processes: 2
downcast_bf16: 'no'
dynamo_config:
  dynamo_backend: 'NO'
enable_cpu_affinity: false
gpu_ids: all
ipex_config:
  ipex: false
main_training_function: main
megatron_lm_config: {}
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_mps_device: false
EOF
    run "$EXE" launch --dry_run --config_file "$TMP/neutral.yaml" "$TMP/rank.lua"
    check "the neutral values accelerate config writes are accepted" '(( RC == 0 )) && has "-np 2 "'
    # older accelerate config files, as Accelerate's process_config still reads them:
    # file contents (\n for newlines) | exit status | what the output must hold | what is checked
    local yaml rc want what
    while IFS='|' read -r yaml rc want what; do
        printf '%b' "$yaml" >"$TMP/old.yaml"
        run "$EXE" launch --dry_run --config_file "$TMP/old.yaml" "$TMP/rank.lua"
        OLD_RC=$rc OLD_WANT=$want check "older config keys: $what" '(( RC == OLD_RC )) && has "$OLD_WANT"'
    done <<'EOF'
distributed_type: 'NO'\ndynamo_backend: 'NO'\nfp16: true\nnum_processes: 1\n|0|ACCEL_LUA_MIXED_PRECISION=fp16|dynamo_backend: 'NO' asks for nothing, fp16: true is mixed_precision fp16
fp16: true\nmixed_precision: bf16\n|0|ACCEL_LUA_MIXED_PRECISION=bf16|fp16: true beside mixed_precision: the file's mixed_precision wins
fp16: yes\n|0|ACCEL_LUA_MIXED_PRECISION=fp16|fp16: yes (YAML's true, as the other boolean keys take it) is fp16
fp16: true\nfp16: false\n|2|old.yaml:2: 'fp16' given twice|fp16 given twice: exit 2, named
fp16: maybe\n|2|old.yaml:1: fp16: 'maybe' is not a boolean|fp16: maybe: exit 2, file:line and the value named
EOF
}

# Flag, value, and the NAME=VALUE the ranks must get.
check_sharding_forwarded() {
    local flag value want args=() wants=() missing=""
    while read -r flag value want; do
        args+=("--$flag" "$value")
        wants+=("$want")
    done <<'EOF'
zero_stage 3 ACCEL_LUA_ZERO_STAGE=3
offload_optimizer_device nvme ACCEL_LUA_OFFLOAD_OPTIMIZER_DEVICE=nvme
offload_param_device cpu ACCEL_LUA_OFFLOAD_PARAM_DEVICE=cpu
offload_optimizer_nvme_path /nvme/o ACCEL_LUA_OFFLOAD_OPTIMIZER_NVME_PATH=/nvme/o
offload_param_nvme_path /nvme/p ACCEL_LUA_OFFLOAD_PARAM_NVME_PATH=/nvme/p
gradient_clipping 0.5 ACCEL_LUA_GRADIENT_CLIPPING=0.5
zero3_init_flag true ACCEL_LUA_ZERO3_INIT_FLAG=true
zero3_save_16bit_model true ACCEL_LUA_ZERO3_SAVE_16BIT_MODEL=true
deepspeed_config_file ds.json ACCEL_LUA_DEEPSPEED_CONFIG_FILE=ds.json
deepspeed_moe_layer_cls_names Expert ACCEL_LUA_DEEPSPEED_MOE_LAYER_CLS_NAMES=Expert
gradient_accumulation_steps 4 ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=4
EOF
    run "$EXE" launch --dry_run --num_processes 2 --use_deepspeed "${args[@]}" "$TMP/rank.lua"
    for want in "${wants[@]}"; do has "-x $want " || missing+=" $want"; done
    check "every DeepSpeed flag reaches the ranks (missing:${missing:- none})" '(( RC == 0 )) && [[ -z $missing ]]'
    cat >"$TMP/fsdp.yaml" <<'EOF'
distributed_type: FSDP
num_processes: 2
fsdp_config:
  fsdp_version: 2
  fsdp_sharding_strategy: HYBRID_SHARD
  fsdp_offload_params: true
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: Block
  fsdp_backward_prefetch: BACKWARD_POST
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_reshard_after_forward: false
  fsdp_forward_prefetch: true
  fsdp_use_orig_params: false
  fsdp_cpu_ram_efficient_loading: false
  fsdp_sync_module_states: false
  fsdp_activation_checkpointing: true
  fsdp_min_num_params: 1000
EOF
    run "$EXE" launch --dry_run --config_file "$TMP/fsdp.yaml" "$TMP/rank.lua"
    missing=""
    local key val
    while read -r key val; do
        [[ $key == fsdp_* && -n $val ]] || continue
        key=${key%:}
        want="ACCEL_LUA_${key^^}="
        [[ $key == fsdp_transformer_layer_cls_to_wrap ]] && want="ACCEL_LUA_FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP="
        has "-x $want$val " || missing+=" $want$val"
    done <"$TMP/fsdp.yaml"
    check "every fsdp_config key reaches the ranks (missing:${missing:- none})" '(( RC == 0 )) && [[ -z $missing ]]'
    run "$EXE" launch --dry_run --mpirun_hostfile "$TMP/hf" --num_processes 2 "$TMP/rank.lua"
    check "--mpirun_hostfile is Accelerate's spelling of --hostfile" '(( RC == 0 )) && has "--hostfile $TMP/hf "'
    check "a hostfile start passes --mca rtc ^hwloc (orted's hwloc_shmem_topology_write crashes)" \
        '(( RC == 0 )) && has "--mca rtc '"'^hwloc'"' "'
    run env OMPI_MCA_rtc=hwloc "$EXE" launch --dry_run --hostfile "$TMP/hf" --num_processes 2 "$TMP/rank.lua"
    # " rtc " (an option word), not "rtc": the temporary folder's random name may hold those letters
    check "OMPI_MCA_rtc set by the user: launch leaves rtc to it" '(( RC == 0 )) && ! has " rtc "'
    run "$EXE" launch --dry_run --num_processes 2 "$TMP/rank.lua"
    check "one machine without a hostfile: no rtc setting" '(( RC == 0 )) && ! has " rtc "'
    run "$EXE" launch --num_machines 2 --num_processes 2 --hostfile "$TMP/no-such-hostfile" "$TMP/rank.lua"
    check "a hostfile that cannot be read: exit 2, one line naming it" \
        '(( RC == 2 )) && [[ $OUT == "accel-lua launch: --hostfile $TMP/no-such-hostfile: cannot read it: No such file or directory" ]]'
    printf '# the machines\n\nlocalhost slots=2  # only one\n' >"$TMP/hf1"
    run "$EXE" launch --num_machines 2 --num_processes 2 --hostfile "$TMP/hf1" "$TMP/rank.lua"
    check "a hostfile with fewer machines than --num_machines: exit 2, both counts named" \
        '(( RC == 2 )) && has "--hostfile $TMP/hf1 lists 1 machine, num_machines is 2" && ! has "ORTE"'
}

# The plugin the ranks build from launch's defaults, flags and an
# Accelerate-written file: a launch default never counts as the user's
# choice (fsdp_sharding_strategy and fsdp_reshard_after_forward have none).
check_sharding_defaults() {
    run "$EXE" launch --config_file "$TMP/accelerate_fsdp1.yaml" "$TMP/plugin.lua"
    check "accelerate config's FSDP1 file (fsdp_reshard_after_forward: SHARD_GRAD_OP) launches as SHARD_GRAD_OP" \
        '(( RC == 0 )) && has "plugin	FSDP	SHARD_GRAD_OP	2	SHARDED_STATE_DICT	true"'
    run "$EXE" launch --use_fsdp --fsdp_reshard_after_forward SHARD_GRAD_OP "$TMP/plugin.lua"
    check "--use_fsdp --fsdp_reshard_after_forward SHARD_GRAD_OP: SHARD_GRAD_OP (stage 2)" \
        '(( RC == 0 )) && has "plugin	FSDP	SHARD_GRAD_OP	2	"'
    run "$EXE" launch --config_file "$TMP/accelerate_fsdp1.yaml" --fsdp_sharding_strategy FULL_SHARD "$TMP/plugin.lua"
    check "both spellings given and disagreeing: an error naming both" \
        '(( RC != 0 )) && has "reshard_after_forward = \"SHARD_GRAD_OP\" disagrees with sharding_strategy = \"FULL_SHARD\""'
    run "$EXE" launch --use_fsdp "$TMP/plugin.lua"
    check "--use_fsdp alone: FULL_SHARD (stage 3) and FULL_STATE_DICT, Accelerate's defaults" \
        '(( RC == 0 )) && has "plugin	FSDP	FULL_SHARD	3	FULL_STATE_DICT	true"'
    run "$EXE" launch --use_fsdp --fsdp_version 2 "$TMP/plugin.lua"
    check "--use_fsdp --fsdp_version 2 alone: SHARDED_STATE_DICT, Accelerate's FSDP2 default (launch exports none)" \
        '(( RC == 0 )) && has "plugin	FSDP	FULL_SHARD	3	SHARDED_STATE_DICT	true"'
    run "$EXE" launch --dry_run --use_fsdp "$TMP/rank.lua"
    check "--use_fsdp without --fsdp_state_dict_type exports no state dict type" '(( RC == 0 )) && ! has "STATE_DICT_TYPE"'
    run "$EXE" launch --dry_run --use_fsdp --fsdp_reshard_after_forward no_shard "$TMP/rank.lua"
    check "fsdp_reshard_after_forward takes every strategy accelerate config offers (NO_SHARD)" \
        '(( RC == 0 )) && has "ACCEL_LUA_FSDP_RESHARD_AFTER_FORWARD=NO_SHARD " && ! has "FSDP_SHARDING_STRATEGY"'
    run "$EXE" launch --use_deepspeed "$TMP/plugin.lua"
    check "--use_deepspeed: accelerator.state.deepspeed_plugin is the Accelerator's (stage 2)" \
        '(( RC == 0 )) && has "plugin	DEEPSPEED	nil	2	nil	true"'
    run "$EXE" launch --use_fsdp --fsdp_sharding_strategy FULL_SHARD --fsdp_reshard_after_forward false "$TMP/plugin.lua"
    check "FSDP1 FULL_SHARD with reshard_after_forward false: Accelerate's FSDP1 error" \
        '(( RC != 0 )) && has "reshard_after_forward set to false. This is not supported with FSDP1"'
    # A DeepSpeed file with bf16 and accumulation 4: launch's other values are errors naming both
    # (Accelerate: "`--mixed_precision` arg cannot be set to `fp16` when `bf16` is set in the DeepSpeed config file.")
    printf '{"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}, "gradient_accumulation_steps": 4}\n' \
        >"$TMP/ds_bf16.json"
    run "$EXE" launch --use_deepspeed --deepspeed_config_file "$TMP/ds_bf16.json" --mixed_precision fp16 "$TMP/plugin.lua"
    check "--mixed_precision fp16 with bf16 in the DeepSpeed file: an error" \
        '(( RC != 0 )) && has "cannot be set to fp16 when bf16 is set in the DeepSpeed config"'
    printf 'distributed_type: DEEPSPEED\nnum_processes: 1\nuse_cpu: true\ndeepspeed_config:\n  deepspeed_config_file: %s\n  gradient_accumulation_steps: 2\n' \
        "$TMP/ds_bf16.json" >"$TMP/ds_gas.yaml"
    run "$EXE" launch --config_file "$TMP/ds_gas.yaml" "$TMP/plugin.lua"
    check "a YAML gradient_accumulation_steps 2 against the DeepSpeed file's 4: an error naming both" \
        '(( RC != 0 )) && has "ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=2 (launch" && has "gradient_accumulation_steps = 4"'
}

# One 2-rank launch: --debug, 2 threads, rank 0 tees both streams, rank 1
# only stdout (torchrun's per-rank form).
check_debug_threads_tee() {
    local logs=$TMP/logs1 cpus
    cpus=$(nproc)
    local t=$(( cpus < 2 ? cpus : 2 ))
    run "$EXE" launch --num_processes 2 --debug --num_cpu_threads_per_process 2 --log_dir "$logs" --tee 0:3,1:1 "$TMP/rank.lua" a
    check "--debug sets ACCEL_LUA_DEBUG_MODE=true in every rank" \
        '(( RC == 0 )) && has "out 0 debug=true" && has "out 1 debug=true"'
    check "--num_cpu_threads_per_process 2: OMP_NUM_THREADS=2 and accel.num_threads() in every rank" \
        '[[ $(grep -c "omp=2 threads=$t args=a" <<<"$OUT") == 2 ]]'
    check "--tee 0:3,1:1: the console still gets every stream" \
        'has "out 0 " && has "out 1 " && has "err 0" && has "err 1"'
    check "--tee 0:3,1:1: rank 0 both files, rank 1 stdout only" \
        'grep -q "^out 0 " "$logs/attempt_0/rank_0/stdout.log" && grep -qx "err 0" "$logs/attempt_0/rank_0/stderr.log" && grep -q "^out 1 " "$logs/attempt_0/rank_1/stdout.log" && [[ ! -e $logs/attempt_0/rank_1/stderr.log ]]'
    run "$EXE" launch --num_processes 2 "$TMP/rank.lua"
    check "without --debug the ranks get ACCEL_LUA_DEBUG_MODE=false" \
        '(( RC == 0 )) && has "out 0 debug=false" && has "out 1 debug=false"'
    printf 'debug: true\nnum_processes: 2\n' >"$TMP/debug.yaml"
    run "$EXE" launch --dry_run --config_file "$TMP/debug.yaml" "$TMP/rank.lua"
    check "debug: true in the config file sets it too" 'has "-x ACCEL_LUA_DEBUG_MODE=true "'
}

check_log_dir() {
    local logs=$TMP/logs2
    run "$EXE" launch --num_processes 2 --log_dir "$logs" --max_restarts 1 "$TMP/retry.lua"
    check "--log_dir alone: every rank's streams in DIR/attempt_K/rank_R, console too" \
        '(( RC == 0 )) && has "attempt 1 rank 0" && grep -qx "attempt 0 rank 1" "$logs/attempt_0/rank_1/stdout.log" && grep -q "rank 1: .*first attempt fails" "$logs/attempt_0/rank_1/stderr.log" && grep -qx "attempt 1 rank 0" "$logs/attempt_1/rank_0/stdout.log" && grep -qx "attempt 1 rank 1" "$logs/attempt_1/rank_1/stdout.log"'
    logs=$TMP/logs3
    run "$EXE" launch --num_processes 2 --log_dir "$logs" --redirects 3 "$TMP/rank.lua" fail
    check "--redirects 3: the ranks' output only in the files, the failing rank's error too" \
        '(( RC != 0 )) && ! has "out 0" && ! has "boom" && grep -q "^out 1 " "$logs/attempt_0/rank_1/stdout.log" && grep -q "rank 1: .*boom on purpose" "$logs/attempt_0/rank_1/stderr.log"'
    logs=$TMP/logs4
    run "$EXE" launch --num_processes 2 --log_dir "$logs" "$TMP/rank.lua" nested "$EXE"
    check "an accel-lua started by a rank writes into that rank's log, not over it" \
        '(( RC == 0 )) && grep -q "^out 0 " "$logs/attempt_0/rank_0/stdout.log" && grep -qx "nested child" "$logs/attempt_0/rank_0/stdout.log"'
    run "$EXE" launch --tee 3 "$TMP/rank.lua"
    check "--tee without --log_dir: exit 2, says what is missing" '(( RC == 2 )) && has "--tee 3 needs --log_dir"'
    local spec
    for spec in 4 0:1,x 1:5 "0:1,"; do
        run "$EXE" launch --tee "$spec" --log_dir "$logs" "$TMP/rank.lua"
        check "--tee $spec: exit 2, spec named" "(( RC == 2 )) && has \"--tee: '$spec' is not 0-3\""
    done
    printf 'x\n' >"$TMP/a_file"
    run "$EXE" launch --num_processes 2 --log_dir "$TMP/a_file/logs" "$TMP/rank.lua"
    check "--log_dir that cannot be made: exit 2, one error naming it, nothing run" \
        '(( RC == 2 )) && has "--log_dir $TMP/a_file/logs: cannot create" && ! has "out 0"'
    run "$EXE" launch --dry_run --tee 0 "$TMP/rank.lua"
    check "--tee 0 (Accelerate's default) needs no --log_dir" '(( RC == 0 ))'
}

check_module_and_program() {
    run env LUA_PATH="$TMP/mods/?.lua;;" "$EXE" launch --num_processes 2 -m pkg.train a b
    check "-m pkg.train: every rank runs the module's file as the script, with arg" \
        '(( RC == 0 )) && has "module	0	$TMP/mods/pkg/train.lua	a	b" && has "module	1	$TMP/mods/pkg/train.lua	a	b"'
    run "$EXE" launch --module no.such_mod
    check "-m with a missing module: fails, module and places named" \
        '(( RC != 0 )) && has "module '"'"'no.such_mod'"'"' not found" && has "no/such_mod.lua"'
    run env LUA_PATH="$TMP/mods/?.lua;;" "$EXE" -m pkg.train z
    check "accel-lua -m runs a module like lua runs a script" '(( RC == 0 )) && has "module	nil	$TMP/mods/pkg/train.lua	z"'
    run "$EXE" launch --num_processes 2 --no_python --debug "$TMP/prog.sh" q
    check "--no_python runs the program itself on every rank, settings and RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE in its environment" \
        '(( RC == 0 )) && has "program rank=0 debug=true args=q torchrun=0/2/0/2" && has "program rank=1 debug=true args=q torchrun=1/2/1/2"'
}

check_program_in_cwd() {
    local n
    for n in 1 2; do
        run bash -c 'cd "$1" && "$2" launch --num_processes "$3" --no_python prog.sh q' _ "$TMP" "$EXE" "$n"
        check "--no_python prog.sh (no slash) on $n rank(s): the file in the current folder runs, as launch checked it" \
            '(( RC == 0 )) && has "program rank=" && has "args=q"'
    done
}

check_quiet_and_monitor() {
    run "$EXE" launch -q --num_processes 2 "$TMP/rank.lua" fail
    check "-q: the rank's error shown, no mpirun banner nor \"job failed\" line" \
        '(( RC != 0 )) && has "boom on purpose" && ! has "job failed" && ! has "Primary job"'
    local bad_value
    for bad_value in 0 -1 abc; do
        run "$EXE" launch --monitor_interval "$bad_value" "$TMP/rank.lua"
        check "--monitor_interval $bad_value: exit 2, named" '(( RC == 2 )) && has "--monitor_interval: "'
    done
    run "$EXE" launch -q --num_processes 2 --max_restarts 1 --log_dir "$TMP/logs_q" "$TMP/retry.lua"
    check "-q with a restart: the job restarts, no \"job failed\" line about it" \
        '(( RC == 0 )) && grep -qx "attempt 1 rank 0" "$TMP/logs_q/attempt_1/rank_0/stdout.log" && ! has "job failed"'
    run "$EXE" launch --monitor_interval 2 "$TMP/rank.lua"
    local slow=$MS
    run "$EXE" launch "$TMP/rank.lua"
    OUT="--monitor_interval 2: $slow ms; default 0.1: $MS ms"
    check "--monitor_interval is how often launch checks the job ($slow ms vs $MS ms)" \
        '(( slow >= 2000 && MS < 1500 ))'
}

check_config_update() {
    local cfg=$TMP/upd.yaml before
    cat >"$cfg" <<'EOF'
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_CPU
num_processes: 2
mixed_precision: bf16
tpu_use_cluster: false
downcast_bf16: 'no'
EOF
    run "$EXE" config update --config_file "$cfg"
    check "config update: keeps the values, adds the missing keys, drops the no-op ones" \
        '(( RC == 0 )) && has "added with their defaults: num_machines, machine_rank, gradient_accumulation_steps, use_cpu, debug" && has "removed (Accelerate keys that ask for nothing here): tpu_use_cluster, downcast_bf16" && grep -qx "num_processes: 2" "$cfg" && grep -qx "mixed_precision: '"'"'bf16'"'"'" "$cfg" && grep -qx "debug: false" "$cfg" && grep -qx "num_machines: 1" "$cfg" && ! grep -q tpu_use_cluster "$cfg"'
    run "$EXE" config update --config_file "$cfg"
    check "config update again: nothing to add or remove" '(( RC == 0 )) && has "added with their defaults: none" && has "removed (Accelerate keys that ask for nothing here): none"'
    printf 'num_processes: 2\nnum_procesess: 3\n' >"$cfg"
    before=$(cat "$cfg")
    run "$EXE" config update --config_file "$cfg"
    check "config update of a file with a bad key: exit 2, key named, file untouched" \
        "(( RC == 2 )) && has \"unknown key 'num_procesess'\" && [[ \$(cat \"\$cfg\") == \"\$before\" ]]"
    printf '{"num_processes": 2}\n' >"$TMP/c.json"
    run "$EXE" config update --config_file "$TMP/c.json"
    check "config update of a .json file: refused (it writes YAML), file untouched" \
        '(( RC == 2 )) && has "update writes YAML" && [[ $(cat "$TMP/c.json") == "{\"num_processes\": 2}" ]]'
    run "$EXE" config update --config_file "$TMP/none.yaml"
    check "config update of a missing file: exit 1, named" '(( RC == 1 )) && has "none.yaml does not exist"'
    cp "$TMP/accelerate_fsdp1.yaml" "$cfg"
    run "$EXE" config update --config_file "$cfg"
    check "config update of accelerate config's FSDP1 file: no fsdp_sharding_strategy added beside its fsdp_reshard_after_forward" \
        '(( RC == 0 )) && ! grep -q fsdp_sharding_strategy "$cfg" && grep -qx "  fsdp_reshard_after_forward: '"'"'SHARD_GRAD_OP'"'"'" "$cfg"'
    run "$EXE" launch --config_file "$cfg" "$TMP/plugin.lua"
    check "... and it still launches as SHARD_GRAD_OP" '(( RC == 0 )) && has "plugin	FSDP	SHARD_GRAD_OP	2	"'
    run "$EXE" config default
    mv "$HOME/.cache/accel-lua/default_config.yaml" "$TMP/d.yaml"
    grep -v '^debug:' "$TMP/d.yaml" >"$HOME/.cache/accel-lua/default_config.yaml"
    run "$EXE" config update
    check "config update without --config_file updates the default file" \
        '(( RC == 0 )) && has "added with their defaults: debug" && grep -qx "debug: false" "$HOME/.cache/accel-lua/default_config.yaml"'
}

# What Accelerate's launcher keeps from the caller: ACCELERATE_DEBUG_MODE (and
# ACCEL_LUA_DEBUG_MODE) and
# ACCELERATE_GRADIENT_ACCUMULATION_STEPS reach the ranks when no flag or key
# sets them, OMP_NUM_THREADS is the default thread count; --cpu with
# --multi_gpu is refused; --cpu leaves the default config file out; a
# DeepSpeed section's gradient_accumulation_steps stays out of other jobs.
check_caller_environment() {
    run env ACCELERATE_DEBUG_MODE=true ACCELERATE_GRADIENT_ACCUMULATION_STEPS=4 "$EXE" launch --dry_run "$TMP/rank.lua"
    check "the caller's ACCELERATE_DEBUG_MODE / _GRADIENT_ACCUMULATION_STEPS are not overridden by launch's defaults" \
        '(( RC == 0 )) && ! has "ACCEL_LUA_DEBUG_MODE=" && ! has "ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS="'
    printf 'local a = accel.Accelerator()\nprint("gas", a.gradient_accumulation_steps, a.state.debug)\n' >"$TMP/gas.lua"
    run env ACCELERATE_DEBUG_MODE=true ACCELERATE_GRADIENT_ACCUMULATION_STEPS=4 "$EXE" launch --num_processes 2 "$TMP/gas.lua"
    check "... so the ranks' Accelerator reads them (gradient_accumulation_steps 4, state.debug true)" \
        '(( RC == 0 )) && [[ $(grep -c "^gas	4	true" <<<"$OUT") == 2 ]]'
    run env ACCEL_LUA_DEBUG_MODE=true "$EXE" launch --num_processes 2 "$TMP/gas.lua"
    check "the caller's ACCEL_LUA_DEBUG_MODE too (state.debug true on both ranks)" \
        '(( RC == 0 )) && [[ $(grep -c "^gas	1	true" <<<"$OUT") == 2 ]]'
    run env ACCEL_LUA_DEBUG_MODE=maybe "$EXE" launch --num_processes 2 "$TMP/gas.lua"
    check "... and a bad value of it is the ranks' error, naming it" \
        '(( RC != 0 )) && has "ACCEL_LUA_DEBUG_MODE=maybe is not a boolean"'
    run env OMP_NUM_THREADS=2 "$EXE" launch --num_processes 2 "$TMP/rank.lua"
    check "the caller's OMP_NUM_THREADS is the ranks' thread count, as Accelerate's default" \
        '(( RC == 0 )) && [[ $(grep -c "omp=2 " <<<"$OUT") == 2 ]]'
    run "$EXE" launch --dry_run --cpu --multi_gpu "$TMP/rank.lua"
    check "--cpu with --multi_gpu is refused (Accelerate: only one of them at a time)" \
        '(( RC == 2 )) && has "you can only use one of --cpu and --multi_gpu at a time"'
    mkdir -p "$HOME/.cache/accel-lua"
    printf 'num_processes: 2\nmixed_precision: bf16\n' >"$HOME/.cache/accel-lua/default_config.yaml"
    run "$EXE" launch --dry_run --cpu "$TMP/rank.lua"
    check "--cpu without --config_file leaves the default config file out, as Accelerate" \
        '(( RC == 0 )) && has "ACCEL_LUA_MIXED_PRECISION=no" && has "ACCEL_LUA_NUM_PROCESSES=1"'
    run "$EXE" launch --dry_run "$TMP/rank.lua"
    check "... and without --cpu the default config file is read" '(( RC == 0 )) && has "ACCEL_LUA_MIXED_PRECISION=bf16"'
    rm -f "$HOME/.cache/accel-lua/default_config.yaml"
    printf 'distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_accumulation_steps: 4\n' >"$TMP/dsga.yaml"
    run "$EXE" launch --dry_run --config_file "$TMP/dsga.yaml" --use_fsdp "$TMP/rank.lua"
    check "deepspeed_config's gradient_accumulation_steps stays out of an FSDP job" \
        '(( RC == 0 )) && has "ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=1 "'
    run "$EXE" launch --dry_run --config_file "$TMP/dsga.yaml" "$TMP/rank.lua"
    check "... and reaches a DeepSpeed one" '(( RC == 0 )) && has "ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=4 "'
    # without launch: the variables Accelerate's own launcher sets for its plugins
    run env ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=3 "$EXE" "$TMP/plugin.lua"
    check "Accelerate's ACCELERATE_DEEPSPEED_ZERO_STAGE reaches the DeepSpeed plugin" '(( RC == 0 )) && has "plugin	DEEPSPEED	nil	3	"'
    run env ACCELERATE_USE_FSDP=true FSDP_SHARDING_STRATEGY=SHARD_GRAD_OP "$EXE" "$TMP/plugin.lua"
    check "Accelerate's FSDP_SHARDING_STRATEGY reaches the FSDP plugin" '(( RC == 0 )) && has "plugin	FSDP	SHARD_GRAD_OP	"'
}

main() {
    write_scripts
    check_every_accelerate_flag
    check_refusals
    check_refused_keys
    check_sharding_forwarded
    check_sharding_defaults
    check_debug_threads_tee
    check_log_dir
    check_module_and_program
    check_program_in_cwd
    check_quiet_and_monitor
    check_caller_environment
    check_config_update
    finish
}

main
