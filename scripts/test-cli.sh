#!/usr/bin/env bash
# test-cli.sh: checks of accel-lua's CLI subcommands (host/cmd_*.c):
# `launch` flag parsing and the mpirun command it builds (--dry_run), real
# 2-rank launches over OpenMPI, the YAML config (`config`, `config
# default`, bad keys and values, menu answers), failure handling (a rank
# that raises an error or is SIGKILLed ends the job within 10 s, naming
# the rank; a rank that leaves early leaves nobody hanging; a script on
# stdin for several ranks is refused; --max_restarts), `env` and `test`.
# Run by scripts/run-tests.sh:
#
#   scripts/test-cli.sh [BUILD_DIR]     (default: build)
#
# Prints one line per check and ends with "N passed, N failed". HOME points
# into a temporary folder so no real config is read or written.
# shellcheck source=scripts/test-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh" "$@"
export HOME=$TMP/home
unset XDG_CACHE_HOME ACCEL_LUA_CONFIG ACCEL_LUA_MPIRUN ACCEL_LUA_NUM_THREADS OMP_NUM_THREADS
# Under ASan (make asan-test) the ranks load MPI's plugins: the slow
# unwinder sees through them, so scripts/lsan.supp's MPI entries match.
[[ -n ${ASAN_OPTIONS:-} ]] && export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"

ROOT_FLAG=""
[[ $(id -u) -eq 0 ]] && ROOT_FLAG="--allow-run-as-root "

write_scripts() {
    cat >"$TMP/rank.lua" <<'EOF'
print(("rank %s of %s mp=%s acc=%s threads=%d args=%s"):format(
  os.getenv("OMPI_COMM_WORLD_RANK") or "none", os.getenv("OMPI_COMM_WORLD_SIZE") or "none",
  os.getenv("ACCEL_LUA_MIXED_PRECISION"), os.getenv("ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS"),
  accel.num_threads(), table.concat({...}, ",")))
EOF
    # Lua lines for rank 1: with the argument "kill" it SIGKILLs itself.
    local kill_self='  if arg[1] == "kill" then
    local f = assert(io.open("/proc/self/stat"))
    local pid = f:read("n")
    f:close()
    os.execute("kill -9 " .. pid)
  end'
    # Rank 1 fails (error, or SIGKILL of itself); rank 0 would run 20 s.
    cat >"$TMP/fail.lua" <<EOF
if os.getenv("OMPI_COMM_WORLD_RANK") == "1" then
$kill_self
  error("boom on purpose")
end
local t = os.time()
while os.time() - t < 20 do end
EOF
    # Fails until the marker file exists (rank 0 creates it on attempt 0).
    cat >"$TMP/restart.lua" <<'EOF'
local marker = arg[1]
local rank = os.getenv("OMPI_COMM_WORLD_RANK") or "0"
local f = io.open(marker)
if not f then
  if rank == "0" then assert(io.open(marker, "w")):close() end
  error("no marker yet, failing on purpose")
end
f:close()
print("rank " .. rank .. " ok on attempt " .. os.getenv("ACCEL_LUA_RESTART_COUNT"))
EOF
    # The same inside collectives: rank 0 waits in its second all_reduce.
    cat >"$TMP/fail_dist.lua" <<EOF
local dist = accel.dist
local t = dist.all_reduce(accel.ones(1000), "sum")
assert(t[1]:item() == dist.get_world_size())
if dist.get_rank() == 1 then
$kill_self
  error("boom in training")
end
dist.all_reduce(t, "sum")
print("rank 0 passed a collective that rank 1 never joined")
EOF
    # Rank 1 leaves (status 0) before it ever uses the communicator; rank 0
    # builds its Accelerator, then (with "collective") all_reduces alone.
    cat >"$TMP/early_exit.lua" <<'EOF'
if os.getenv("RANK") == "1" then os.exit(0) end
local acc = accel.Accelerator()
print("rank 0 has its Accelerator")
if arg[1] == "collective" then acc:reduce(accel.tensor({1.0}), "sum") print("rank 0 reduced alone") end
EOF
    printf 'error("always fails")\n' >"$TMP/always_fail.lua"
    printf 'assert(io.open(arg[1], "w")):close()\n' >"$TMP/touch.lua"
}

check_flags() {
    run "$EXE" launch --help
    check "launch --help lists the flags" '(( RC == 0 )) && has "--num_processes" && has "--max_restarts" && has "--use_deepspeed"'
    check "launch --help lists the flags accepted with no effect" 'has "--same_network" && has "--deepspeed_multinode_launcher"'
    run "$EXE" launch --bogus --num_processes 2 --frob=1 -z "$TMP/rank.lua"
    check "unknown flags: exit 2, all named" '(( RC == 2 )) && has "--bogus" && has "--frob=1" && has " -z"'
    run "$EXE" launch --num_processes abc "$TMP/rank.lua"
    check "bad flag value: exit 2, flag and value named" "(( RC == 2 )) && has \"--num_processes: 'abc' is not an integer\""
    run "$EXE" launch --zero_stage 4 --use_deepspeed "$TMP/rank.lua"
    check "out-of-range flag value named" '(( RC == 2 )) && has "--zero_stage: 4 is out of range (0 to 3)"'
    run "$EXE" launch --num_processes 2
    check "no script: exit 2" '(( RC == 2 )) && has "no script given"'
    run "$EXE" launch "$TMP/missing.lua"
    check "missing script: exit 2, named" '(( RC == 2 )) && has "missing.lua"'
    run "$EXE" launch --use_fsdp --use_deepspeed "$TMP/rank.lua"
    check "--use_fsdp with --use_deepspeed refused" '(( RC == 2 )) && has "conflicts"'
    run "$EXE" launch --multi_gpu --num_processes 2 "$TMP/rank.lua"
    check "--multi_gpu without CUDA: exit 2, says why" '(( RC == 2 )) && has "without CUDA"'
}

check_dry_run() {
    run "$EXE" launch --dry_run --mixed_precision fp16 "$TMP/rank.lua" a
    check "dry run, 1 process: the script directly, settings as variables" \
        '(( RC == 0 )) && [[ $OUT != *mpirun* ]] && has "ACCEL_LUA_MIXED_PRECISION=fp16 " && has "ACCEL_LUA_DISTRIBUTED_TYPE=NO " && [[ $OUT == *" $EXE $TMP/rank.lua a" ]]'
    run "$EXE" launch --dry_run --num-processes 3 --mixed_precision=bf16 --gradient_accumulation_steps 4 "$TMP/rank.lua" a "b c"
    check "dry run, 3 ranks: mpirun -np 3, -x for each setting, the same binary" \
        '(( RC == 0 )) && [[ $OUT == "mpirun ${ROOT_FLAG}-np 3 "* ]] && has "-x ACCEL_LUA_MIXED_PRECISION=bf16 " && has "-x ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=4 " && has "-x ACCEL_LUA_NUM_THREADS=1 " && has "-x OMP_NUM_THREADS=1 " && has "-x ACCEL_LUA_DISTRIBUTED_TYPE=MULTI_CPU " && [[ $OUT == *" $EXE $TMP/rank.lua a '"'"'b c'"'"'" ]]'
    run "$EXE" launch --dry_run --num_processes 4096 "$TMP/rank.lua"
    check "dry run, more ranks than cores: --oversubscribe --bind-to none" \
        'has "-np 4096 --oversubscribe --bind-to none "'
    printf 'localhost slots=2\n' >"$TMP/hostfile"
    run "$EXE" launch --dry_run --num_machines 2 --num_processes 4 --hostfile "$TMP/hostfile" --main_process_ip 10.0.0.1 "$TMP/rank.lua"
    check "dry run, 2 machines: --hostfile, --mca rtc ^hwloc and --map-by ppr:2:node" \
        '(( RC == 0 )) && has "-np 4 --hostfile $TMP/hostfile --mca rtc '"'^hwloc'"' --map-by ppr:2:node -x" && [[ $OUT != *oversubscribe* ]]'
    run "$EXE" launch --dry_run --num_machines 2 --num_processes 4 "$TMP/rank.lua"
    check "2 machines without a hostfile: exit 2, says so" '(( RC == 2 )) && has "needs --hostfile"'
    run "$EXE" launch --num_machines 2 --num_processes 4 --hostfile "$TMP/hostfile" --machine_rank 1 "$TMP/touch.lua" "$TMP/touched"
    check "machine_rank 1: explains, exits 0, runs nothing" '(( RC == 0 )) && has "only machine 0" && [[ ! -e $TMP/touched ]]'
    run "$EXE" launch --dry_run --use_deepspeed --zero_stage 3 --offload_optimizer_device cpu --num_processes 2 "$TMP/rank.lua"
    check "dry run, DeepSpeed: its settings exported, FSDP's not" \
        'has "ACCEL_LUA_DISTRIBUTED_TYPE=DEEPSPEED " && has "ACCEL_LUA_USE_DEEPSPEED=true " && has "ACCEL_LUA_ZERO_STAGE=3 " && has "ACCEL_LUA_OFFLOAD_OPTIMIZER_DEVICE=cpu " && [[ $OUT != *FSDP_SHARDING* ]]'
    run "$EXE" launch --dry_run --use_fsdp --fsdp_sharding_strategy shard_grad_op --fsdp_offload_params true --num_processes 2 "$TMP/rank.lua"
    check "dry run, FSDP: strategy canonicalised, boolean value taken" \
        'has "ACCEL_LUA_USE_FSDP=true " && has "ACCEL_LUA_FSDP_SHARDING_STRATEGY=SHARD_GRAD_OP " && has "ACCEL_LUA_FSDP_OFFLOAD_PARAMS=true " && [[ $OUT != *ZERO_STAGE* ]]'
    local off
    for off in --use_deepspeed=false "--use_deepspeed false" --use_deepspeed=no --use_fsdp=0 "--use_fsdp off" --multi_gpu=false; do
        # shellcheck disable=SC2086  # "--flag value" is two words
        run "$EXE" launch --dry_run $off "$TMP/rank.lua"
        check "launch $off: that type is off, as for any boolean flag (distributed_type NO)" \
            '(( RC == 0 )) && has "ACCEL_LUA_DISTRIBUTED_TYPE=NO " && has "ACCEL_LUA_USE_DEEPSPEED=false " && has "ACCEL_LUA_USE_FSDP=false "'
    done
    run "$EXE" launch --dry_run --use_deepspeed=yes --use_fsdp false "$TMP/rank.lua"
    check "--use_deepspeed=yes --use_fsdp false: DeepSpeed on, no conflict" \
        '(( RC == 0 )) && has "ACCEL_LUA_DISTRIBUTED_TYPE=DEEPSPEED " && has "ACCEL_LUA_USE_DEEPSPEED=true "'
    run "$EXE" launch --dry_run --use_fsdp=maybe "$TMP/rank.lua"
    check "--use_fsdp=maybe: exit 2, flag and value named" \
        "(( RC == 2 )) && has \"--use_fsdp: 'maybe' is not a boolean\""
    printf 'distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: 3\n' >"$TMP/ds.yaml"
    run "$EXE" launch --dry_run --config_file "$TMP/ds.yaml" --use_deepspeed false "$TMP/rank.lua"
    check "--use_deepspeed false over a DEEPSPEED config file: MULTI_CPU by the count, no DeepSpeed settings" \
        '(( RC == 0 )) && has "-x ACCEL_LUA_DISTRIBUTED_TYPE=MULTI_CPU " && has "-x ACCEL_LUA_USE_DEEPSPEED=false " && [[ $OUT != *ZERO_STAGE* ]]'
    run "$EXE" launch --dry_run --zero_stage 3 --num_processes 2 "$TMP/rank.lua"
    check "--zero_stage without --use_deepspeed: exit 2, names the flag" \
        '(( RC == 2 )) && has "--zero_stage applies to DeepSpeed only; this launch is MULTI_CPU (add --use_deepspeed)"'
    run "$EXE" launch --dry_run --fsdp_sharding_strategy SHARD_GRAD_OP --num_processes 2 "$TMP/rank.lua"
    check "--fsdp_sharding_strategy without --use_fsdp: exit 2, names the flag" \
        '(( RC == 2 )) && has "--fsdp_sharding_strategy applies to FSDP only"'
    run "$EXE" launch --dry_run --use_fsdp --fsdp_sharding_strategy 2 --fsdp_backward_prefetch_policy BACKWARD_POST --num_processes 2 "$TMP/rank.lua"
    check "FSDP: a strategy by PyTorch's number, the older backward_prefetch_policy spelling" \
        'has "ACCEL_LUA_FSDP_SHARDING_STRATEGY=SHARD_GRAD_OP " && has "ACCEL_LUA_FSDP_BACKWARD_PREFETCH=BACKWARD_POST "'
    printf 'distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_sharding_strategy: 1\n  fsdp_backward_prefetch_policy: BACKWARD_PRE\n' >"$TMP/old_fsdp.yaml"
    run "$EXE" launch --dry_run --config_file "$TMP/old_fsdp.yaml" "$TMP/rank.lua"
    check "an older accelerate config: fsdp_sharding_strategy 1 is FULL_SHARD" \
        '(( RC == 0 )) && has "ACCEL_LUA_FSDP_SHARDING_STRATEGY=FULL_SHARD " && has "ACCEL_LUA_FSDP_BACKWARD_PREFETCH=BACKWARD_PRE "'
}

check_launch() {
    run "$EXE" launch --num_processes 2 --mixed_precision bf16 "$TMP/rank.lua" x
    local want="rank 0 of 2 mp=bf16 acc=1 threads=1 args=x
rank 1 of 2 mp=bf16 acc=1 threads=1 args=x"
    check "launch --num_processes 2: both ranks run, settings reach them" \
        '(( RC == 0 )) && [[ $(sort <<<"$OUT") == "$want" ]]'
    printf '%s\n' 'print(("RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s"):format(os.getenv("RANK"),' \
        '  os.getenv("WORLD_SIZE"), os.getenv("LOCAL_RANK"), os.getenv("LOCAL_WORLD_SIZE")))' >"$TMP/torchvars.lua"
    run "$EXE" launch --num_processes 2 "$TMP/torchvars.lua"
    want="RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2"
    check "launch exports RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE to each rank (as torchrun)" \
        '(( RC == 0 )) && [[ $(sort <<<"$OUT") == "$want" ]]'
    run "$EXE" launch "$TMP/rank.lua" y
    check "launch with 1 process runs the script directly" \
        '(( RC == 0 )) && [[ $OUT == "rank none of none mp=no acc=1 threads="*" args=y" ]]'
    run "$EXE" launch --num_processes 2 --num_cpu_threads_per_process 2 "$TMP/rank.lua"
    local cpus
    cpus=$(nproc)
    check "--num_cpu_threads_per_process 2 reaches the ranks" \
        '(( RC == 0 )) && [[ $(grep -c "threads=$(( cpus < 2 ? cpus : 2 ))" <<<"$OUT") == 2 ]]'
}

check_config() {
    local cfg=$HOME/.cache/accel-lua/default_config.yaml before
    run "$EXE" config default
    check "config default writes ~/.cache/accel-lua/default_config.yaml" \
        '(( RC == 0 )) && grep -qx "distributed_type: '"'"'NO'"'"'" "$cfg" && grep -qx "num_processes: 1" "$cfg" && grep -qx "mixed_precision: '"'"'no'"'"'" "$cfg"'
    sed -i -e 's/^num_processes: 1$/num_processes: 2/' -e "s/^mixed_precision: 'no'$/mixed_precision: fp16/" "$cfg"
    before=$(cat "$cfg")
    run "$EXE" config default
    check "config default leaves an existing file alone, exit 0 (as accelerate config default)" '(( RC == 0 )) && has "already exists" && [[ $(cat "$cfg") == "$before" ]]'
    run "$EXE" env --config_file="$cfg"
    check "--config_file=PATH (and the dashed spelling) outside launch" '(( RC == 0 )) && has "num_processes: 2"'
    run env ACCEL_LUA_CONFIG="$TMP/cfg/dashed.yaml" "$EXE" config default --mixed-precision=fp16
    check "config default --mixed-precision=fp16" '(( RC == 0 )) && grep -qx "mixed_precision: '"'"'fp16'"'"'" "$TMP/cfg/dashed.yaml"'
    run "$EXE" launch "$TMP/rank.lua"
    check "launch reads the YAML (num_processes 2, fp16)" \
        '(( RC == 0 )) && [[ $(grep -c "of 2 mp=fp16" <<<"$OUT") == 2 ]]'
    run "$EXE" launch examples/mlp.lua "$TMP/mlp_out"
    check "config default, then launch examples/mlp.lua on 2 ranks from the YAML" \
        '(( RC == 0 )) && has "epoch 5 loss" && [[ -e $TMP/mlp_out/model.safetensors ]]'
    run "$EXE" launch --dry_run --mixed_precision bf16 --num_processes 3 "$TMP/rank.lua"
    check "flags override the config file" 'has "-np 3 " && has "ACCEL_LUA_MIXED_PRECISION=bf16 "'
    run env ACCEL_LUA_CONFIG="$TMP/cfg/nested/c.yaml" "$EXE" config default --mixed_precision bf16
    check "config default honours ACCEL_LUA_CONFIG (folders created) and --mixed_precision" \
        '(( RC == 0 )) && grep -qx "mixed_precision: '"'"'bf16'"'"'" "$TMP/cfg/nested/c.yaml"'
    run "$EXE" test --config_file "$cfg"
    check "accel-lua test on the 2-process config: trains through the Accelerator, the ranks agree" \
        '(( RC == 0 )) && has "Test is a success!" && has "rank 0/2: loss" && has "the ranks agree on the weights"'
}

check_bad_yaml() {
    mkdir -p "$TMP/y"
    printf 'compute_environment: LOCAL_MACHINE\nnum_procesess: 2\n' >"$TMP/y/key.yaml"
    run "$EXE" launch --config_file "$TMP/y/key.yaml" "$TMP/rank.lua"
    check "bad YAML key: exit 2, key, file and line named" \
        "(( RC == 2 )) && has \"$TMP/y/key.yaml:2: unknown key 'num_procesess'\""
    printf 'deepspeed_config:\n  zero_stage: 2\n  zero_stagee: 1\n' >"$TMP/y/nested.yaml"
    run "$EXE" launch --config_file "$TMP/y/nested.yaml" "$TMP/rank.lua"
    check "bad nested key named with its section" "(( RC == 2 )) && has \"unknown key 'deepspeed_config.zero_stagee'\""
    printf 'num_processes: abc\n' >"$TMP/y/value.yaml"
    run "$EXE" launch --config_file "$TMP/y/value.yaml" "$TMP/rank.lua"
    check "bad YAML value: key and value named" "(( RC == 2 )) && has \"num_processes: 'abc' is not an integer\""
    printf 'mixed_precision: fp12\n' >"$TMP/y/enum.yaml"
    run "$EXE" launch --config_file "$TMP/y/enum.yaml" "$TMP/rank.lua"
    check "bad choice lists the allowed values" "(( RC == 2 )) && has \"mixed_precision: 'fp12' is not one of no,fp16,bf16,fp8\""
    printf 'num_processes: [2\n' >"$TMP/y/syntax.yaml"
    run "$EXE" launch --config_file "$TMP/y/syntax.yaml" "$TMP/rank.lua"
    check "invalid YAML: exit 2, file named" '(( RC == 2 )) && has "syntax.yaml:" && has "not valid YAML"'
    run "$EXE" launch --config_file "$TMP/y/none.yaml" "$TMP/rank.lua"
    check "missing --config_file: exit 2" '(( RC == 2 )) && has "none.yaml"'
    printf 'distributed_type: MULTI_GPU\nnum_processes: 2\n' >"$TMP/y/gpu.yaml"
    run "$EXE" launch --dry_run --config_file "$TMP/y/gpu.yaml" --cpu "$TMP/rank.lua"
    check "--cpu overrides the file's MULTI_GPU" '(( RC == 0 )) && has "ACCEL_LUA_DISTRIBUTED_TYPE=MULTI_CPU "'
    # What `accelerate config` writes: keys without meaning here are accepted.
    cat >"$TMP/y/accelerate.yaml" <<'EOF'
compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  gradient_accumulation_steps: 4
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
  zero_stage: 1
distributed_type: DEEPSPEED
downcast_bf16: 'no'
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
EOF
    run "$EXE" launch --dry_run --config_file "$TMP/y/accelerate.yaml" "$TMP/rank.lua"
    check "an Accelerate-written config is read" \
        '(( RC == 0 )) && has "ACCEL_LUA_ZERO_STAGE=1 " && has "ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS=4 " && has "ACCEL_LUA_MIXED_PRECISION=bf16 " && has "-np 2 "'
}

check_failures() {
    run "$EXE" launch --num_processes 2 "$TMP/fail.lua"
    check "a rank's error ends the job non-zero within 10 s, naming the rank" \
        '(( RC != 0 && MS < 10000 )) && has "accel-lua: rank 1: $TMP/fail.lua:8: boom on purpose" && has "job failed"'
    check "launch repeats the first rank's error as the reason the job failed" \
        'has "accel-lua launch: rank 1 failed first: $TMP/fail.lua:8: boom on purpose"'
    run "$EXE" launch --num_processes 2 "$TMP/fail.lua" kill
    check "a SIGKILLed rank ends the job non-zero within 10 s, naming the rank" \
        '(( RC != 0 && MS < 10000 )) && has "rank 1 " && has "signal 9" && [[ $OUT != *"boom"* ]]'
    check "launch names the killed rank, its host and the signal as the reason the job failed" \
        '[[ $OUT =~ "accel-lua launch: rank 1 (host "[^\ ]+") was killed by signal 9 (Killed)" ]]'
    run "$EXE" launch --num_processes 2 "$TMP/fail_dist.lua"
    check "an error while the other rank waits in all_reduce: job ends within 10 s, rank named" \
        '(( RC != 0 && MS < 10000 )) && has "accel-lua: rank 1: $TMP/fail_dist.lua:11: boom in training" && [[ $OUT != *"never joined"* ]]'
    run "$EXE" launch --num_processes 2 "$TMP/fail_dist.lua" kill
    check "a SIGKILL while the other rank waits in all_reduce: job ends within 10 s, rank named" \
        '(( RC != 0 && MS < 10000 )) && has "rank 1 " && has "signal 9" && [[ $OUT != *"never joined"* && $OUT != *boom* ]]'
    printf 'print("ran from stdin")\n' >"$TMP/stdin.lua"
    run timeout 30 "$EXE" launch --num_processes 2 - <"$TMP/stdin.lua"
    check "launch - (the script on stdin) with 2 processes: refused, exit 2 (mpirun gives stdin to rank 0 only)" \
        '(( RC == 2 )) && has "(standard input) reaches rank 0 only" && ! has "ran from stdin"'
    run timeout 30 "$EXE" launch --num_processes 1 - <"$TMP/stdin.lua"
    check "launch - with 1 process runs the script from stdin" '(( RC == 0 )) && has "ran from stdin"'
    run timeout 30 "$EXE" launch --num_processes 2 "$TMP/early_exit.lua"
    check "a rank that exits 0 before using the communicator: the other rank's start-up does not hang" \
        '(( RC == 0 && MS < 10000 )) && has "rank 0 has its Accelerator"'
    run timeout 30 "$EXE" launch --num_processes 2 "$TMP/early_exit.lua" collective
    check "... and a collective without it fails within 10 s, naming the rank whose script ended" \
        '(( RC != 0 && RC != 124 && MS < 10000 )) && has "not entered by rank 1 (its script has ended)" && ! has "reduced alone"'
    run "$EXE" launch --num_processes 2 --max_restarts 2 "$TMP/restart.lua" "$TMP/marker"
    check "--max_restarts relaunches; the second attempt succeeds" \
        '(( RC == 0 )) && has "accel-lua launch: job failed (exit 1), restart 1/2" && has "rank 0 ok on attempt 1" && has "rank 1 ok on attempt 1" && [[ $OUT != *"restart 2/2"* ]]'
    run "$EXE" launch --num_processes 1 --max_restarts 1 "$TMP/always_fail.lua"
    check "--max_restarts gives up after K restarts" \
        '(( RC == 1 )) && has "restart 1/1" && has "no restarts left" && [[ $(grep -c "always fails" <<<"$OUT") == 2 ]]'
    # SIGINT sent to launch alone (a scheduler or a parent process; not the terminal's group): the job ends
    printf '%s\n' 'local t0 = accel.clock()' 'while accel.clock() - t0 < 60 do end' >"$TMP/spin.lua"
    local t0=$SECONDS
    setsid "$EXE" launch --num_processes 2 "$TMP/spin.lua" >"$TMP/spin.out" 2>&1 &
    local launcher=$!
    sleep 3
    kill -INT "$launcher"
    wait "$launcher"
    RC=$?
    OUT=$(cat "$TMP/spin.out")
    check "SIGINT to launch alone ends the job (exit non-zero, no rank left running)" \
        '(( RC != 0 && SECONDS - t0 < 30 )) && has "interrupted" && ! pgrep -f "$TMP/spin.lua" >/dev/null'
    run mpirun ${ROOT_FLAG}-np 2 "$EXE" -e 'if os.getenv("OMPI_COMM_WORLD_RANK") == "0" then error("direct boom") end'
    check "mpirun -np 2 accel-lua directly: the error names the rank" \
        '(( RC != 0 )) && has "accel-lua: rank 0: (command line):1: direct boom"'
    run env SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=2 "$EXE" -e 'error("srun boom")'
    check "under srun (Slurm's variables) the error names the rank" \
        '(( RC == 1 )) && has "accel-lua: rank 1: (command line):1: srun boom"'
    run mpirun ${ROOT_FLAG}-np 2 "$EXE" -e 'print("threads", accel.num_threads())'
    check "mpirun -np 2 accel-lua directly: one compute thread per rank" \
        '(( RC == 0 )) && [[ $(grep -c "^threads	1$" <<<"$OUT") == 2 ]]'
}

check_interactive() {
    local cfg=$TMP/piped.yaml
    run bash -c "printf '0\n1\n\nyes\n3\n2\nno\nno\n4\nbf16\n' | '$EXE' config --config_file '$cfg'"
    check "config with piped answers (multi-CPU, debug, 3 ranks, 2 threads, bf16)" \
        '(( RC == 0 )) && grep -qx "distributed_type: '"'"'MULTI_CPU'"'"'" "$cfg" && grep -qx "debug: true" "$cfg" && grep -qx "num_processes: 3" "$cfg" && grep -qx "num_cpu_threads_per_process: 2" "$cfg" && grep -qx "gradient_accumulation_steps: 4" "$cfg" && grep -qx "mixed_precision: '"'"'bf16'"'"'" "$cfg" && grep -qx "num_machines: 1" "$cfg"'
    run bash -c "printf '\n1\n\n\n2\n\nyes\n3\n1\ncpu\nno\nno\n' | '$EXE' config --config_file '$cfg'"
    check "config with piped answers (DeepSpeed stage 3; end of input takes defaults)" \
        '(( RC == 0 )) && grep -qx "distributed_type: '"'"'DEEPSPEED'"'"'" "$cfg" && grep -qx "  zero_stage: 3" "$cfg" && grep -qx "  offload_param_device: '"'"'cpu'"'"'" "$cfg" && grep -qx "mixed_precision: '"'"'no'"'"'" "$cfg" && grep -qx "debug: false" "$cfg"'
    run "$EXE" launch --dry_run --config_file "$cfg" "$TMP/rank.lua"
    check "launch reads what config wrote" 'has "ACCEL_LUA_ZERO_STAGE=3 " && has "-np 2 "'
    run bash -c "printf '0\n1\nabc\n' | '$EXE' config --config_file '$TMP/never.yaml'"
    check "a bad piped answer: exit 2, answer named, nothing written" \
        "(( RC == 2 )) && has \"answer 'abc'\" && [[ ! -e $TMP/never.yaml ]]"
    run bash -c "printf '0\n5\n' | '$EXE' config --config_file '$TMP/never.yaml'"
    check "an out-of-range piped menu answer: exit 2, the valid numbers and names listed" \
        "(( RC == 2 )) && has \"answer '5': not one of the choices (0 to 2, or NO, MULTI_CPU, MULTI_GPU)\" && [[ ! -e $TMP/never.yaml ]]"
    # On a terminal (script(1) gives config one; the answers still come from the pipe).
    run bash -c "printf '0\n5\n1\n\nno\n3\n1\nno\nno\n1\nno\n' | timeout 30 script -qec \"'$EXE' config --config_file '$cfg'\" /dev/null"
    check "an out-of-range menu answer on a terminal is asked again, naming the choices" \
        '(( RC == 0 )) && has "not one of the choices (0 to 2, or NO, MULTI_CPU, MULTI_GPU); please answer again" && grep -qx "distributed_type: '"'"'MULTI_CPU'"'"'" "$cfg" && grep -qx "num_processes: 3" "$cfg"'
}

check_env() {
    local sub
    for sub in env test; do
        run "$EXE" "$sub" --config_file "$TMP/c.yaml" --bogus
        check "$sub --config_file F --bogus: exit 2, names --bogus" \
            '(( RC == 2 )) && has "accel-lua $sub: unknown flag: --bogus" && ! has "flag: --config_file"'
        run "$EXE" "$sub" --config_file
        check "$sub --config_file without a path: exit 2, says the value is missing" \
            '(( RC == 2 )) && has "accel-lua $sub: missing value: --config_file"'
    done
    run "$EXE" env
    check "env lists the versions and the config" \
        '(( RC == 0 )) && has "accel-lua version: " && has "Lua version: Lua 5.4" && has "oneDNN version: " && has "OpenBLAS: OpenBLAS " && has "OpenMPI: mpirun (Open MPI) " && has "NCCL: not built" && has "CPU features: " && has "Config file: $HOME/.cache/accel-lua/default_config.yaml" && has "num_processes: 2"'
}

main() {
    write_scripts
    check_flags
    check_dry_run
    check_launch
    check_config
    check_bad_yaml
    check_failures
    check_interactive
    check_env
    finish
}

main
