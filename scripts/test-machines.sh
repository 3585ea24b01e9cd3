#!/usr/bin/env bash
# test-machines.sh: accel-lua on several machines for real, here: each
# machine is a Linux network namespace with its own address and its own
# host name, and Open MPI reaches the others over TCP.
#
#   scripts/test-machines.sh [BUILD_DIR]      (needs root: ip netns, unshare)
#
# The network: namespaces H0, H1, H2 (one per machine) and SW (a switch: a
# bridge with no address). Each machine has one veth pair into the switch,
# its end named acc0 with 10.213.47.(k+1)/24, and `lo`. Nothing else is
# connected: the addresses exist only on these veth pairs, no namespace has
# a route anywhere else, and the root namespace is never touched, so no
# packet can leave the test's namespaces. Everything is removed at exit,
# also on failure or Ctrl-C (trap). Open MPI is told to use only that
# subnet (OMPI_MCA_oob_tcp_if_include / btl_tcp_if_include) and to start
# its remote daemons through $TMP/agent.sh instead of ssh
# (OMPI_MCA_plm_rsh_agent): `agent.sh ADDRESS command...` runs the command
# in the namespace holding ADDRESS, with that machine's host name (a UTS
# namespace: real machines do not share one, and Open MPI's shared-memory
# files are named after it). The hostfile lists the addresses.
#
# Checks: the machines have no address or route outside the subnet;
# `accel-lua launch --num_machines 2 --hostfile` (2 machines x 2 ranks)
# ends with the parameters of 1 process trained on the whole batch, and of
# 1 machine x 4 ranks (1e-5 relative); 3 machines x 1 rank the same;
# HYBRID_SHARD (accel.shard hybrid = true, stage 3) on 2 machines x 2
# ranks, its machines found by host name, == 1 process, each rank holding
# half the optimizer state; five
# 2-machine launches in a row all start; a SIGKILLed rank on machine 1
# ends the job within 10 s and launch names its host, and so does a
# SIGKILLed Open MPI daemon of machine 1; a rank's error on machine 1 is
# reported with its host; a checkpoint saved by 2 machines into the shared
# folder resumes bitwise (losses, parameters, optimizer state) like an
# unbroken run; ranks started by plain mpirun as srun starts them (SLURM_*
# and PMIx variables, no OMPI_COMM_WORLD_*) and by a bare PMIx launcher
# join one job; a progress bar on machine 0's terminal is redrawn by rank
# 0 only (machine 1's local main prints plain lines), and into a file every
# local main prints plain lines; and the namespaces are gone at the end.
#
# Prints "N passed, N failed" (", N skipped" when the kernel or the user
# cannot make network namespaces: every check is then skipped, with the
# reason). Takes about 30 s.
# The checks are strings that `check` evaluates (they use the variables set here).
# shellcheck disable=SC2016,SC2034
# shellcheck source=scripts/test-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh" "$@"

CHECKS=16
# A sanitizer build (make asan-test): the ranks are MPI processes, whose
# leak stacks need full unwinding to match scripts/lsan.supp (as the Lua
# multi-process tests do, tests/lua/support.lua asan_env).
[[ -n ${ASAN_OPTIONS:-} ]] && export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"
SUBNET=10.213.47
TAG=acl$$
SW=$TAG-sw
HOSTS=("$TAG-h0" "$TAG-h1" "$TAG-h2")
HELPERS=$ROOT/tests/lua/helpers

skip_all() {
    echo "skip: $1"
    echo "$PASS passed, $FAIL failed, $CHECKS skipped"
    exit 0
}

# Ends what still runs in our namespaces (by process id), then removes
# them; their veth pairs and addresses go with them.
remove_network() {
    local ns pid
    for ns in "${HOSTS[@]}" "$SW"; do
        ip netns list 2>/dev/null | grep -qw "^$ns" || continue
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
}
trap 'remove_network; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

# The switch, then machine k's namespace, veth pair and address.
make_network() {
    local k
    ip netns add "$SW" && ip -n "$SW" link add br0 type bridge && ip -n "$SW" link set br0 up ||
        return 1
    : >"$TMP/map"
    : >"$TMP/hosts3"
    for k in 0 1 2; do
        ip netns add "${HOSTS[k]}" &&
            ip link add acc0 netns "${HOSTS[k]}" type veth peer name "p$k" netns "$SW" &&
            ip -n "$SW" link set "p$k" master br0 up &&
            ip -n "${HOSTS[k]}" addr add "$SUBNET.$((k + 1))/24" dev acc0 &&
            ip -n "${HOSTS[k]}" link set acc0 up &&
            ip -n "${HOSTS[k]}" link set lo up || return 1
        echo "$SUBNET.$((k + 1)) ${HOSTS[k]}" >>"$TMP/map"
        echo "$SUBNET.$((k + 1)) slots=2" >>"$TMP/hosts3"
    done
    head -n 2 "$TMP/hosts3" >"$TMP/hosts2"
}

# mpirun's remote agent: "agent.sh ADDRESS cmd..." as ssh would run it.
write_agent() {
    cat >"$TMP/agent.sh" <<EOF
#!/bin/sh
host=\$1
shift
ns=\$(awk -v h="\$host" '\$1 == h { print \$2 }' "$TMP/map")
[ -n "\$ns" ] || { echo "agent.sh: no test machine has address \$host" >&2; exit 255; }
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns && \$*"
EOF
    chmod +x "$TMP/agent.sh"
}

# on_machine K CMD...: runs CMD on machine K, with that machine's host name
# and the MPI settings of the test network.
on_machine() {
    local ns=${HOSTS[$1]}
    shift
    ip netns exec "$ns" unshare --uts env ACCEL_LUA_CONFIG="$TMP/no-config.yaml" \
        OMPI_MCA_plm_rsh_agent="$TMP/agent.sh" \
        OMPI_MCA_oob_tcp_if_include="$SUBNET.0/24" OMPI_MCA_btl_tcp_if_include="$SUBNET.0/24" \
        sh -c 'hostname "$0" && exec "$@"' "$ns" timeout -k 5 60 "$@"
}

# here CMD...: a job on this machine only (loopback), for the references.
here() { env ACCEL_LUA_CONFIG="$TMP/no-config.yaml" timeout -k 5 60 "$@"; }

# close_to A B: A's parameters equal reference B's to 1e-5 (the measured
# difference is added to OUT, for the failure report).
close_to() {
    local got
    got=$("$EXE" "$HELPERS/max_rel.lua" "$1" "$2" 2>&1)
    OUT+=$'\n'"$got"
    awk -v d="$(awk '{ print $2 }' <<<"$got")" 'BEGIN { exit !(d != "" && d <= 1e-5) }'
}

if [[ $(id -u) -ne 0 ]]; then skip_all "network namespaces need root (ip netns add)"; fi
command -v ip >/dev/null || skip_all "no ip command (Debian package iproute2)"
command -v mpirun >/dev/null || skip_all "no mpirun (Debian package openmpi-bin)"
if ip -br addr | grep -q " $SUBNET\."; then skip_all "this machine already has an address in $SUBNET.0/24"; fi
if ! make_network 2>"$TMP/net.err"; then
    skip_all "the kernel refused to make network namespaces / veth pairs: $(head -c 300 "$TMP/net.err")"
fi
write_agent
run sh -c "for ns in ${HOSTS[*]} $SW; do ip -n \$ns -4 route show table all; ip -n \$ns -4 -br addr; done"
check "the test machines reach only $SUBNET.0/24 (no other address, no other route)" \
    '[[ $(grep -Eo "[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+" <<<"$OUT" | grep -Ev "^($SUBNET\.|127\.)" | sort -u) == "" ]] && ! grep -q default <<<"$OUT"'
LAUNCH=("$EXE" launch --cpu)
EQUIV=$HELPERS/ddp_equiv.lua

# ---- training across machines equals one process / one machine ----
check_equivalence() {
    run here "${LAUNCH[@]}" "$EQUIV" "$TMP/one16.st" 16 20
    local one=$RC
    run here "${LAUNCH[@]}" --num_processes 4 "$EQUIV" "$TMP/local4.st" 4 20 1 0.001
    local local4=$RC
    run on_machine 0 "${LAUNCH[@]}" --num_machines 2 --num_processes 4 --hostfile "$TMP/hosts2" \
        "$EQUIV" "$TMP/two.st" 4 20 1 0.001
    check "2 machines x 2 ranks (launch --num_machines 2 --hostfile) == 1 process x batch 16 (1e-5)" \
        '(( one == 0 && RC == 0 )) && close_to "$TMP/two.st" "$TMP/one16.st"'
    check "2 machines x 2 ranks == 1 machine x 4 ranks (1e-5)" \
        '(( local4 == 0 && RC == 0 )) && close_to "$TMP/two.st" "$TMP/local4.st"'
    run here "${LAUNCH[@]}" "$EQUIV" "$TMP/one12.st" 12 20
    one=$RC
    run on_machine 0 "${LAUNCH[@]}" --num_machines 3 --num_processes 3 --hostfile "$TMP/hosts3" \
        "$EQUIV" "$TMP/three.st" 4 20
    check "3 machines x 1 rank == 1 process x batch 12 (1e-5)" \
        '(( one == 0 && RC == 0 )) && close_to "$TMP/three.st" "$TMP/one12.st"'
}

# ---- HYBRID sharding: machines found by their host names ----
check_hybrid() {
    local sh=$HELPERS/shard_equiv.lua
    run here "$EXE" "$sh" "$TMP/hyb-one.st" stage=0 wrap=module_list
    local one=$RC
    run on_machine 0 "${LAUNCH[@]}" --num_machines 2 --num_processes 4 --hostfile "$TMP/hosts2" \
        "$sh" "$TMP/hyb-two.st" stage=3 hybrid=1 wrap=module_list
    local halves
    halves=$(grep -c "^state rank [0-3] elems 206 " <<<"$OUT")
    check "HYBRID_SHARD on 2 machines x 2 ranks == 1 process (1e-5); each rank holds half the optimizer state" \
        '(( one == 0 && RC == 0 && halves == 4 )) && close_to "$TMP/hyb-two.st" "$TMP/hyb-one.st"'
}

# ---- starts are reliable ----
check_repeated_starts() {
    local i started=0
    printf '%s\n' 'local a = require("accel").Accelerator{}' \
        'print(("up %d of %d"):format(a.process_index, require("accel").dist.all_reduce(require("accel").ones(1)):item()))' \
        >"$TMP/up.lua"
    for i in 1 2 3 4 5; do
        run on_machine 0 "${LAUNCH[@]}" --num_machines 2 --num_processes 2 --hostfile "$TMP/hosts2" "$TMP/up.lua"
        (( RC == 0 )) && has "up 0 of 2" && has "up 1 of 2" && started=$((started + 1))
    done
    check "5 two-machine launches in a row: every one starts on both machines ($started of 5)" \
        '(( started == 5 ))'
}

# ---- failures name the host ----
# spin_and_kill WHAT: a 2-machine x 2-rank job in which the test SIGKILLs,
# once every rank runs, rank 3 (WHAT=rank) or machine 1's Open MPI daemon
# (WHAT=daemon); RC, OUT, and MS = milliseconds from the kill to the end.
spin_and_kill() {
    local dir=$TMP/spin-$1 t0 waited=0 victim pid
    mkdir -p "$dir"
    on_machine 0 "${LAUNCH[@]}" --num_machines 2 --num_processes 4 --hostfile "$TMP/hosts2" \
        "$HELPERS/machines_spin.lua" "$dir" >"$TMP/kill.out" 2>&1 &
    local job=$!
    while [[ ! -e $dir/pid_r3 ]] && (( waited < 300 )); do sleep 0.1; waited=$((waited + 1)); done
    sleep 0.5
    [[ -e $dir/pid_r3 ]] && victim=$(cat "$dir/pid_r3")
    if [[ $1 == daemon ]]; then
        victim=""
        for pid in $(ip netns pids "${HOSTS[1]}"); do
            [[ $({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null) == orted\ * ]] && victim=$pid
        done
    fi
    t0=$(date +%s%N)
    [[ -n $victim ]] && kill -9 "$victim"
    wait "$job"
    RC=$?
    MS=$(( ($(date +%s%N) - t0) / 1000000 ))
    OUT=$(cat "$TMP/kill.out")
}

check_failures() {
    spin_and_kill rank
    check "a SIGKILLed rank on machine 1 ends the job within 10 s; launch names its host" \
        '(( RC != 0 && MS < 10000 )) && has "accel-lua launch: rank 3 (host $SUBNET.2, machine_rank 1) was killed by signal 9"'
    spin_and_kill daemon
    check "machine 1's Open MPI daemon SIGKILLed: the job ends within 10 s; launch names the host" \
        '(( RC != 0 && MS < 10000 )) && has "accel-lua launch: lost contact with host $SUBNET.2, machine_rank 1"'
    printf '%s\n' 'local a = require("accel").Accelerator{}' \
        'require("accel").dist.barrier()' \
        'if a.process_index == 2 then error("boom on machine 1") end' \
        'require("accel").dist.barrier()' >"$TMP/boom.lua"
    run on_machine 0 "${LAUNCH[@]}" --num_machines 2 --num_processes 4 --hostfile "$TMP/hosts2" "$TMP/boom.lua"
    check "a rank's error on machine 1: the job ends, launch names the rank, its host and the error" \
        '(( RC != 0 && MS < 10000 )) && has "accel-lua launch: rank 2 (host $SUBNET.2, machine_rank 1) failed first: $TMP/boom.lua:3: boom on machine 1"'
}

# ---- progress bars: rank 0 redraws on launch's terminal ----
# All ranks' output reaches machine 0's terminal: rank 0 redraws there, the
# local main process of machine 1 (rank 2) reports in plain lines (as
# Accelerate's local-main rule), ranks 1 and 3 print nothing.
check_progress() {
    local bar=$ROOT/tests/lua/helpers/progress_bar.lua res
    local job=("${LAUNCH[@]}" --num_machines 2 --num_processes 4 --hostfile "$TMP/hosts2" "$bar")
    res=$(on_machine 0 python3 "$ROOT/scripts/run-on-pty.py" 77 "" "$TMP/bar.out" "${job[@]}")
    OUT=$(cat "$TMP/bar.out" 2>/dev/null)
    check "2 machines on a terminal: rank 0 redraws in place, rank 2 prints plain lines, ranks 1 and 3 nothing" \
        '[[ ${res##* } == 0 ]] && has $'"'"'\rrank0: 100%|'"'"' && has $'"'"'\nrank2: 100% 10/10 ['"'"' && [[ $OUT != *$'"'"'\rrank2'"'"'* && $OUT != *rank1* && $OUT != *rank3* ]]'
    run on_machine 0 "${job[@]}"
    check "2 machines into a file: plain lines from ranks 0 and 2, no carriage return" \
        '(( RC == 0 )) && has "rank0: 100% 10/10 [" && has "rank2: 100% 10/10 [" && [[ $OUT != *$'"'"'\r'"'"'* && $OUT != *rank1* && $OUT != *rank3* ]]'
}

# ---- a checkpoint saved across machines resumes ----
check_resume() {
    local d=$TMP/resume r same=1
    mkdir -p "$d"
    local job=(on_machine 0 "${LAUNCH[@]}" --num_machines 2 --num_processes 2 --hostfile "$TMP/hosts2"
        "$HELPERS/ddp_resume.lua")
    run "${job[@]}" straight "$d" 12
    local straight=$RC
    run "${job[@]}" first "$d" 6
    local first=$RC
    run "${job[@]}" second "$d" 6
    for r in 0 1; do
        cmp -s <(head -n 6 "$d/straight_r$r.txt") <(head -n 6 "$d/first_r$r.txt") &&
            cmp -s <(tail -n +7 "$d/straight_r$r.txt") "$d/second_r$r.txt" &&
            cmp -s "$d/straight_r$r.safetensors" "$d/second_r$r.safetensors" || same=0
    done
    check "2 machines: train 6, save_state, new launch, load_state, train 6 == train 12 (bitwise, both ranks)" \
        '(( straight == 0 && first == 0 && RC == 0 && same )) && [[ -s $d/ckpt/random_states_1.json ]]'
}

# ---- ranks started by an outside launcher ----
# What `srun --mpi=pmix` gives a task: PMIx's variables and SLURM_*, and
# none of mpirun's OMPI_COMM_WORLD_*; pmix-only.sh keeps only PMIx's.
write_outside_starters() {
    cat >"$TMP/srun-like.sh" <<'EOF'
#!/bin/sh
export SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_PROCID=$OMPI_COMM_WORLD_RANK \
    SLURM_LOCALID=$OMPI_COMM_WORLD_LOCAL_RANK SLURM_NODEID=$((OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_LOCAL_SIZE)) \
    SLURM_NTASKS=$OMPI_COMM_WORLD_SIZE SLURM_STEP_NUM_TASKS=$OMPI_COMM_WORLD_SIZE
for v in $(env | sed -n 's/^\(OMPI_COMM_WORLD_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
exec "$@"
EOF
    sed -e '/^export/,/SLURM_STEP_NUM_TASKS/d' "$TMP/srun-like.sh" >"$TMP/pmix-only.sh"
    chmod +x "$TMP/srun-like.sh" "$TMP/pmix-only.sh"
}

check_outside_start() {
    local mpirun=(mpirun --allow-run-as-root --mca rtc ^hwloc --hostfile "$TMP/hosts2")
    write_outside_starters
    run on_machine 0 "${mpirun[@]}" -np 4 --map-by ppr:2:node "$TMP/srun-like.sh" "$EXE" \
        "$HELPERS/machines_who.lua"
    check "srun-style start on 2 machines: every rank knows its rank, local rank and the job's size" \
        'has "who 0 local 0 of 4 on ${HOSTS[0]} sum 4" && has "who 1 local 1 of 4 on ${HOSTS[0]} sum 4" && has "who 2 local 0 of 4 on ${HOSTS[1]} sum 4" && has "who 3 local 1 of 4 on ${HOSTS[1]} sum 4"'
    run on_machine 0 "${mpirun[@]}" -np 4 --map-by ppr:2:node "$TMP/srun-like.sh" "$EXE" "$EQUIV" \
        "$TMP/srun.st" 4 20 1 0.001
    check "srun-style start on 2 machines x 2 ranks trains like 1 process x batch 16 (1e-5)" \
        '(( RC == 0 )) && close_to "$TMP/srun.st" "$TMP/one16.st"'
    run on_machine 0 "${mpirun[@]}" -np 2 --map-by ppr:1:node "$TMP/pmix-only.sh" "$EXE" \
        "$HELPERS/machines_who.lua"
    check "a PMIx launcher exporting no size: the 2 tasks join one job (not 2 jobs of 1)" \
        '(( RC == 0 )) && has "who 0 local 0 of 2 on ${HOSTS[0]} sum 2" && has "who 1 local 0 of 2 on ${HOSTS[1]} sum 2"'
}

check_equivalence
check_hybrid
check_repeated_starts
check_failures
check_resume
check_progress
check_outside_start
remove_network
run ip netns list
check "the test's namespaces, veth pairs and addresses are gone" '[[ $OUT != *"$TAG-"* ]]'
finish
