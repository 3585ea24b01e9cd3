#!/usr/bin/env bash
# run.sh: the benchmark suite, accel-lua against PyTorch in one run.
# From the repo root:
#   bash scripts/bench/run.sh                  # everything (~10-15 min on 2 cores)
#   bash scripts/bench/run.sh --only small,mlp --threads 1
#
# Training benchmarks (same shapes, same step, same thread and BLAS settings
# on both sides; each accel-lua run directly followed by its PyTorch run):
#   mlp    the seed MLP, 315 steps (scripts/bench/seed_mlp.lua vs
#          ../shared/anchors/bench_mlp.py): steps/s, median of the warm repeats
#   small  GPT V65 T64 L4 H4 C128 B16 (scripts/bench/gpt.lua vs bench_gpt.py)
#   gpt2   GPT-2-124M shape V50257 T256 L12 H12 C768 B4, few steps (slow)
# each with 1 and 2 threads (OMP_NUM_THREADS = OPENBLAS_NUM_THREADS =
# threads), under the environment's OpenBLAS setting ("as-is") and with
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset ("unset"; one run labelled
# "as-is = unset" when the environment sets neither). Runs with more than
# one thread are repeated with OMP_WAIT_POLICY=passive on both sides
# ("passive": idle OpenMP threads sleep instead of spinning, which is what
# counts on a machine shared with other work). PyTorch also gets the small
# GPT setting the anchors found best for it (1 torch thread + 2 OpenBLAS
# threads), so "PyTorch best" is the best of everything it ran. Peak RSS is /usr/bin/time's maximum
# resident set of each process. Micro benchmarks (start-up, per-op, matmul
# against the libraries) come first with --only micro (on by default).
#
# Prints one Markdown table (throughput, ratio, achieved GFLOP/s with
# bench_gpt.py's FLOP formula, peak RSS), the benchmark targets with
# met / missed, and draws the ratios with gnuplot (Debian gnuplot-nox) to
# docs/bench.png. Raw results: $BUILD/bench/results.tsv. Everything it prints
# also goes to a results file (--results, default docs/bench-results.md,
# which docs/performance.md links as the latest run): the tables, the
# targets and the full output, under the machine it ran on as read at run
# time (lscpu's model name, CPUs, caches and flags, the kernel, the load,
# the PyTorch version), so that no description of a machine is hand-written.
#
# Options: --only LIST (micro,mlp,small,gpt2), --threads LIST (1,2),
# --blas LIST (asis,unset), --gpt2-steps N (2) --gpt2-warmup N (1),
# --small-steps N (30) --small-warmup N (5), --mlp-reps N (3: one cold +
# two warm), --chart PATH|none (docs/bench.png), --results PATH|none
# (docs/bench-results.md), --no-make.
# Environment: ACCEL_BUILD (build dir, default build), OPTFLAGS (for make),
# ANCHORS (../shared/anchors), PYTHON (/usr/bin/python3), PER_OP_N,
# MATMUL_SIZES (the micro benchmarks).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=${ACCEL_BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
BENCH=scripts/bench
ANCHORS=${ANCHORS:-$ROOT/../shared/anchors}
PYTHON=${PYTHON:-/usr/bin/python3}
ONLY=micro,mlp,small,gpt2
THREADS="1 2"
BLAS_MODES="asis unset"
GPT2_STEPS=2 GPT2_WARMUP=1 SMALL_STEPS=30 SMALL_WARMUP=5 MLP_REPS=3
CHART=$ROOT/docs/bench.png
RESULTS_MD=$ROOT/docs/bench-results.md
MAKE=1
ARGS="$*"

while [[ $# -gt 0 ]]; do
    case $1 in
    --only) ONLY=$2; shift 2 ;;
    --threads) THREADS=${2//,/ }; shift 2 ;;
    --blas) BLAS_MODES=${2//,/ }; shift 2 ;;
    --gpt2-steps) GPT2_STEPS=$2; shift 2 ;;
    --gpt2-warmup) GPT2_WARMUP=$2; shift 2 ;;
    --small-steps) SMALL_STEPS=$2; shift 2 ;;
    --small-warmup) SMALL_WARMUP=$2; shift 2 ;;
    --mlp-reps) MLP_REPS=$2; shift 2 ;;
    --chart) CHART=$2; shift 2 ;;
    --results) RESULTS_MD=$2; shift 2 ;;
    --no-make) MAKE=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

# ---------------- the results file (the machine read at run time) ----------------

# lscpu_field NAME: one field of lscpu's output ("Model name", "CPU(s)", ...).
lscpu_field() { LC_ALL=C lscpu 2>/dev/null | awk -F: -v k="$1" '$1 == k { sub(/^[ \t]+/, "", $2); print $2; exit }'; }

# machine_md: the machine section of the results file, every value read now.
machine_md() {
    local flags f have=""
    flags=$(lscpu_field Flags)
    [[ -n $flags ]] || flags=$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
    for f in avx2 fma avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile; do
        [[ " $flags " == *" $f "* ]] && have+="$f "
    done
    echo "## Machine (read by run.sh at run time)"
    echo
    echo "| | |"
    echo "|---|---|"
    for f in "Model name" "Vendor ID" "CPU(s)" "Thread(s) per core" "L2 cache" "L3 cache" "Hypervisor vendor"; do
        printf '| %s | %s |\n' "$f" "$(lscpu_field "$f")"
    done
    printf '| kernel | %s |\n' "$(uname -srm)"
    printf '| Debian | %s |\n' "$(cat /etc/debian_version 2>/dev/null || echo unknown)"
    printf '| load average at the end | %s |\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
    have=${have% }
    printf '| SIMD / matrix extensions present | %s |\n' "${have:-none of avx2 fma avx512f avx512_bf16 amx}"
    printf '| PyTorch | %s |\n' "$([[ $HAVE_TORCH == 1 ]] && "$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not found (accel-lua only)')"
    echo
    echo "lscpu flags:"
    echo
    echo '```'
    fold -s -w 100 <<<"$flags"
    echo '```'
}

# write_results (the EXIT trap): stops copying stdout, then writes
# RESULTS_MD from the run's output: the Markdown tables and target lines it
# printed, then all of it verbatim.
write_results() {
    local rc=$?
    exec >&3 3>&-
    wait "$TEE_PID" 2>/dev/null
    mkdir -p "$(dirname "$RESULTS_MD")"
    {
        echo "# Benchmark results: the latest run"
        echo
        echo "Written by \`scripts/bench/run.sh\` at the end of a run (do not edit by hand):"
        echo "\`bash scripts/bench/run.sh${ARGS:+ $ARGS}\`, finished $(date -u '+%Y-%m-%d %H:%M UTC'), exit status $rc."
        echo "How to read and reproduce it: [performance.md](performance.md)."
        echo
        machine_md
        echo
        echo "## Tables and targets"
        echo
        awk '/^\|/ { if (!t && p) print ""; print; t = 1; p = 1; next }
             t { print ""; t = 0 }
             /^(- |Targets|\(start-up)/ { print; p = 1 }' "$LOG"
        echo
        echo "## Full output"
        echo
        echo '```'
        cat "$LOG"
        echo '```'
    } >"$RESULTS_MD.tmp" && mv "$RESULTS_MD.tmp" "$RESULTS_MD" && echo "results: $RESULTS_MD"
    rm -f "$LOG"
    exit "$rc"
}

if [[ $MAKE == 1 ]]; then
    make -j2 BUILD="$BUILD" ${OPTFLAGS:+OPTFLAGS="$OPTFLAGS"} all luajit >/dev/null ||
        { echo "run.sh: make failed (try OPTFLAGS=-O2 or --no-make)" >&2; exit 1; }
fi
ACCEL=$BUILD/accel-lua
# The LuaJIT build (make luajit; docs/luajit.md): the per-op rows are also
# measured under it when it is there.
ACCEL_JIT=$BUILD/luajit/accel-lua
[[ -x $ACCEL ]] || { echo "run.sh: $ACCEL not built" >&2; exit 1; }
HAVE_TORCH=0
"$PYTHON" -c 'import torch' 2>/dev/null && [[ -f $ANCHORS/bench_gpt.py ]] && HAVE_TORCH=1
if [[ $RESULTS_MD != none ]]; then
    [[ $RESULTS_MD = /* ]] || RESULTS_MD=$ROOT/$RESULTS_MD
    LOG=$(mktemp)
    exec 3>&1 > >(tee "$LOG")
    TEE_PID=$!
    trap write_results EXIT
fi
OUT=$BUILD/bench
mkdir -p "$OUT"
RESULTS=$OUT/results.tsv
: >"$RESULTS"

# The as-is setting equals "unset" when the environment sets neither variable.
if [[ -z ${OPENBLAS_CORETYPE:-} && -z ${OPENBLAS_L2_SIZE:-} && $BLAS_MODES == *asis* && $BLAS_MODES == *unset* ]]; then
    BLAS_MODES="same"
fi
blas_label() {
    case $1 in
    asis) echo "as-is (${OPENBLAS_CORETYPE:-unset}${OPENBLAS_L2_SIZE:+, L2 $OPENBLAS_L2_SIZE})" ;;
    unset) echo "unset (auto)" ;;
    same) echo "as-is = unset" ;;
    esac
}

echo "== machine: $(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-<unset>};" \
     "PyTorch $([[ $HAVE_TORCH == 1 ]] && "$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not found')"

# ---------------- micro benchmarks (start-up, per-op, matmul) ----------------

micro() {
    local per_op_n=${PER_OP_N:-100000} sizes=${MATMUL_SIZES:-256 512 1024 2048} direct=$OUT/bench_matmul
    gcc -std=c11 -O2 -o "$direct" "$BENCH/matmul.c" -ldnnl
    echo
    echo "== micro benchmarks, 1 thread (OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)"
    local startup per_op matmul
    startup=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 bash "$BENCH/startup.sh" "$BUILD")
    per_op=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$ACCEL" "$BENCH/per_op.lua" "$per_op_n")
    # shellcheck disable=SC2086
    matmul=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$ACCEL" "$BENCH/matmul.lua" --direct "$direct" $sizes)
    # a KEY=value field of a RESULT line; empty when absent (no PyTorch side)
    value() { grep -oE "(^| )$1=[^ ]*" <<<"$2" | tail -n 1 | cut -d= -f2 || true; }
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "n/a" }'; }
    local acc_line a t d l n
    acc_line=$(grep '^RESULT accel' <<<"$per_op")
    local jit_line="" per_op_jit
    if [[ -x $ACCEL_JIT ]]; then
        per_op_jit=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$ACCEL_JIT" "$BENCH/per_op.lua" "$per_op_n" --no-torch)
        jit_line=$(grep '^RESULT accel' <<<"$per_op_jit")
    fi
    printf '| %-46s | %12s | %12s | %8s |\n' benchmark accel-lua reference ratio
    printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..48})" "$(printf -- '-%.0s' {1..14})" \
        "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..10})"
    row() { printf '| %-46s | %12s | %12s | %8s |\n' "$@"; }
    a=$(value accel_ms "$startup"); t=$(value torch_ms "$startup")
    row "start-up ms (ref: python3 -c 'import torch')" "$a" "${t:-n/a}" "$(ratio "${t:-0}" "$a")"
    a=$(value add "$acc_line"); t=$(value torch_add "$acc_line")
    row "a + b, 16 x f32, us/op (ref: PyTorch)" "$a" "${t:-n/a}" "$(ratio "${t:-0}" "$a")"
    a=$(value fwdbwd "$acc_line"); t=$(value torch_fwdbwd "$acc_line")
    row "(a+b):sum():backward(), us/op (ref: PyTorch)" "$a" "${t:-n/a}" "$(ratio "${t:-0}" "$a")"
    if [[ -n $jit_line ]]; then
        local op
        for op in add fwdbwd; do
            a=$(value $op "$jit_line"); t=$(value $op "$acc_line")
            row "$([[ $op == add ]] && echo "a + b" || echo "(a+b):sum():backward()"), us/op, LuaJIT (ref: Lua 5.4)" \
                "$a" "$t" "$(ratio "$t" "$a")"
        done
    else
        echo "(no LuaJIT build at $ACCEL_JIT: make luajit adds the LuaJIT per-op rows)"
    fi
    for n in $sizes; do
        l=$(grep "^RESULT matmul n=$n " <<<"$matmul" || true)
        [[ -n $l ]] || continue
        a=$(value f32 "$l"); d=$(value direct_f32 "$l")
        row "matmul f32 n=$n GFLOP/s (ref: dnnl_sgemm)" "$a" "$d" "$(ratio "$a" "$d")"
        a=$(value bf16 "$l"); d=$(value direct_bf16 "$l")
        if [[ $d == 0.00 ]]; then
            d=$(value direct_bf16_widened "$l")
            row "matmul bf16 n=$n GFLOP/s (ref: widen+sgemm)" "$a" "$d" "$(ratio "$a" "$d")"
        else
            row "matmul bf16 n=$n GFLOP/s (ref: oneDNN bf16)" "$a" "$d" "$(ratio "$a" "$d")"
        fi
    done
    echo "(start-up and per-op: reference / accel-lua, >1 = accel-lua faster, for LuaJIT rows: faster than under Lua 5.4; matmul: accel-lua / library)"
}

# ---------------- training benchmarks ----------------

# jfield KEY JSON: a number field of a JSON line.
jfield() { grep -oE "\"$1\": *[-0-9.e+]+" <<<"$2" | head -n 1 | sed 's/.*: *//'; }

# The median of the numbers on stdin (one per line).
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# run BENCH IMPL THREADS BLAS LABEL ENV... -- CMD...: one process under the
# given settings; appends "bench impl threads blas label throughput gflops
# rss_kib" to the results (throughput: steps/s for mlp, tokens/s otherwise).
run() {
    local bench=$1 impl=$2 threads=$3 blas=$4 label=$5 envs=() out rss tput gf tfile
    shift 5
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    local unset_blas=()
    [[ $blas == unset ]] && unset_blas=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
    tfile=$(mktemp)
    out=$(env "${unset_blas[@]}" "${envs[@]}" /usr/bin/time -f '%M' -o "$tfile" timeout 1800 "$@" 2>/dev/null) || true
    rss=$(tail -n 1 "$tfile")
    rm -f "$tfile"
    if [[ $bench == mlp ]]; then
        tput=$(grep -oE '"steps_per_s": *[0-9.]+' <<<"$out" | tail -n +2 | sed 's/.*: *//' | median)
        gf=""
    else
        tput=$(jfield tokens_per_s "$out")
        gf=$(jfield achieved_gflops "$out")
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$bench" "$impl" "$threads" "$blas" "$label" "${tput:-}" "${gf:-}" \
        "${rss:-}" >>"$RESULTS"
    printf '  %-6s %-9s %sT %-14s %-22s %12s %8s GFLOP/s %8s KiB\n' "$bench" "$impl" "$threads" "$blas" "$label" \
        "${tput:-failed}" "${gf:--}" "${rss:-?}"
}

train_bench() {
    local bench=$1 t blas acc_cmd torch_cmd
    for blas in $BLAS_MODES; do
        for t in $THREADS; do
            local envs=(OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t")
            case $bench in
            mlp)
                acc_cmd=("$ACCEL" "$BENCH/seed_mlp.lua" "$t" manual "$MLP_REPS")
                torch_cmd=("$PYTHON" "$ANCHORS/bench_mlp.py" "$t" manual "$MLP_REPS") ;;
            small)
                acc_cmd=("$ACCEL" "$BENCH/gpt.lua" "$t" small "$SMALL_STEPS" "$SMALL_WARMUP")
                torch_cmd=("$PYTHON" "$ANCHORS/bench_gpt.py" "$t" small "$SMALL_STEPS" "$SMALL_WARMUP") ;;
            gpt2)
                acc_cmd=("$ACCEL" "$BENCH/gpt.lua" "$t" gpt2 "$GPT2_STEPS" "$GPT2_WARMUP")
                torch_cmd=("$PYTHON" "$ANCHORS/bench_gpt.py" "$t" gpt2 "$GPT2_STEPS" "$GPT2_WARMUP") ;;
            esac
            run "$bench" accel-lua "$t" "$blas" std "${envs[@]}" -- "${acc_cmd[@]}"
            [[ $HAVE_TORCH == 1 ]] && run "$bench" pytorch "$t" "$blas" std "${envs[@]}" -- "${torch_cmd[@]}"
            if (( t > 1 )); then # OpenMP threads that sleep at once instead of spinning (both sides)
                run "$bench" accel-lua "$t" "$blas" passive "${envs[@]}" OMP_WAIT_POLICY=passive -- "${acc_cmd[@]}"
                [[ $HAVE_TORCH == 1 ]] && run "$bench" pytorch "$t" "$blas" passive "${envs[@]}" OMP_WAIT_POLICY=passive \
                    -- "${torch_cmd[@]}"
            fi
        done
        # PyTorch's best small-GPT setting on the anchor machine: 1 torch thread, 2 OpenBLAS threads
        if [[ $HAVE_TORCH == 1 && $bench == small && " $THREADS " == *" 2 "* ]]; then
            run small pytorch 1 "$blas" "torch1+blas2" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=2 -- \
                "$PYTHON" "$ANCHORS/bench_gpt.py" 1 small "$SMALL_STEPS" "$SMALL_WARMUP"
        fi
    done
}

wants micro && micro
PEAK=""
# measure_peak: PEAK := the larger of PEAK and a new all-core FMA peak.
measure_peak() {
    local p
    p=$(OMP_NUM_THREADS=$(getconf _NPROCESSORS_ONLN) "$OUT/bench_peak" | grep -oE 'gflops=[0-9.]+' | cut -d= -f2)
    echo "  fp32 FMA peak, all $(getconf _NPROCESSORS_ONLN) cores: $p GFLOP/s (scripts/bench/peak.c, load $(cut -d' ' -f1 /proc/loadavg))"
    PEAK=$(awk -v a="${PEAK:-0}" -v b="${p:-0}" 'BEGIN { print (b > a ? b : a) }')
}
if wants mlp || wants small || wants gpt2; then
    echo
    echo "== training benchmarks (each accel-lua run followed by its PyTorch run)"
    gcc -O2 -march=x86-64-v3 -fopenmp -o "$OUT/bench_peak" "$BENCH/peak.c"
    measure_peak
    for b in mlp small gpt2; do wants $b && train_bench $b; done
    # measured again after the trainings: a peak taken while another job
    # held a core would make the fraction of peak look better than it is;
    # the larger of the two is the machine's
    measure_peak
fi
[[ -s $RESULTS ]] || exit 0

# ---------------- the table, the targets, the chart ----------------

echo
echo "== results (ratio = accel-lua / PyTorch throughput; RSS ratio = accel-lua / PyTorch)"
awk -F'\t' -v peak="$PEAK" -v chartdata="$OUT/chart.dat" \
    -v l_asis="$(blas_label asis)" -v l_unset="$(blas_label unset)" -v l_same="$(blas_label same)" '
function fmt(x, d) { return x == "" ? "n/a" : sprintf("%." d "f", x) }
function div(a, b) { return (a == "" || b == "" || b == 0) ? "" : a / b }
BEGIN { name["mlp"] = "seed MLP (steps/s)"; name["small"] = "small GPT (tok/s)"; name["gpt2"] = "GPT-2-124M shape (tok/s)"
        bl["asis"] = l_asis; bl["unset"] = l_unset; bl["same"] = l_same }
{
    key = $1 SUBSEP $3 SUBSEP $4 SUBSEP $5
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    tput[key, $2] = $6; gf[key, $2] = $7; rss[key, $2] = $8
    if ($6 != "" && $6 > best[$1, $2]) { best[$1, $2] = $6; bestcfg[$1, $2] = $3 "T" ($5 == "std" ? "" : ", " $5); bestgf[$1, $2] = $7 }
    if ($8 != "" && $8 + 0 > maxrss[$1, $2] + 0) maxrss[$1, $2] = $8
}
END {
    print "| benchmark | BLAS | threads | accel-lua | PyTorch | ratio | accel-lua GFLOP/s | PyTorch GFLOP/s | accel-lua RSS MiB | PyTorch RSS MiB | RSS ratio |"
    print "|---|---|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
        split(order[i], k, SUBSEP)
        a = tput[order[i], "accel-lua"]; t = tput[order[i], "pytorch"]
        thr = k[2] (k[4] == "std" ? "" : " (" k[4] ")")
        ra = div(a, t); rr = div(rss[order[i], "accel-lua"], rss[order[i], "pytorch"])
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name[k[1]], bl[k[3]], thr,
            fmt(a, 0), fmt(t, 0), ra == "" ? "n/a" : fmt(ra, 2) "x",
            fmt(gf[order[i], "accel-lua"], 1), fmt(gf[order[i], "pytorch"], 1),
            fmt(div(rss[order[i], "accel-lua"], 1024), 0), fmt(div(rss[order[i], "pytorch"], 1024), 0),
            rr == "" ? "n/a" : fmt(rr, 2) "x"
        if (ra != "") printf "\"%s %sT%s%s\" %.3f\n", k[1], k[2], k[4] == "std" ? "" : " " k[4], k[3] == "unset" ? " auto" : "", ra > chartdata
    }
    print ""
    print "Targets, this run:"
    m1 = ""; for (i = 1; i <= n; i++) { split(order[i], k, SUBSEP); if (k[1] == "mlp" && k[2] == 1 && k[4] == "std") { r = div(tput[order[i], "accel-lua"], tput[order[i], "pytorch"]); if (r != "" && (m1 == "" || r < m1)) m1 = r } }
    if (m1 != "") printf "- seed MLP, 1 thread: %.2fx PyTorch (target >= 5x): %s\n", m1, (m1 >= 5 ? "met" : "missed")
    for (b = 0; b < 2; b++) {
        s = b ? "gpt2" : "small"
        if (best[s, "accel-lua"] == "" || best[s, "pytorch"] == "") continue
        r = best[s, "accel-lua"] / best[s, "pytorch"]
        printf "- %s: best accel-lua %.0f tok/s (%s) / best PyTorch %.0f tok/s (%s) = %.2fx (target >= 1.5x): %s\n",
            name[s], best[s, "accel-lua"], bestcfg[s, "accel-lua"], best[s, "pytorch"], bestcfg[s, "pytorch"], r,
            (r >= 1.5 ? "met" : "missed")
        if (s == "gpt2" && peak > 0 && bestgf[s, "accel-lua"] != "")
            printf "- GPT-2-124M shape: %.1f GFLOP/s = %.0f%% of the measured fp32 peak %.1f GFLOP/s (target >= 60%%): %s\n",
                bestgf[s, "accel-lua"], 100 * bestgf[s, "accel-lua"] / peak, peak, (bestgf[s, "accel-lua"] >= 0.6 * peak ? "met" : "missed")
    }
    for (b = 0; b < 3; b++) {
        s = b == 0 ? "mlp" : b == 1 ? "small" : "gpt2"
        if (maxrss[s, "accel-lua"] == "" || maxrss[s, "pytorch"] == "") continue
        r = maxrss[s, "accel-lua"] / maxrss[s, "pytorch"]
        printf "- peak RSS, %s: %.0f / %.0f MiB = %.2fx PyTorch (target <= 0.6x): %s\n", name[s],
            maxrss[s, "accel-lua"] / 1024, maxrss[s, "pytorch"] / 1024, r, (r <= 0.6 ? "met" : "missed")
    }
}' "$RESULTS"

if [[ $CHART != none && -s $OUT/chart.dat ]]; then
    if command -v gnuplot >/dev/null; then
        mkdir -p "$(dirname "$CHART")"
        local_ymax=$(awk '{ if ($NF > m) m = $NF } END { print (m > 2 ? m : 2) * 1.6 }' "$OUT/chart.dat")
        gnuplot <<EOF
set terminal pngcairo size 900,420 font "DejaVu Sans,10"
set output "$CHART"
set title "accel-lua / PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null) throughput, same settings (higher is better)"
set style data histograms
set style fill solid 0.85 border -1
set boxwidth 0.7
set logscale y 2
set yrange [0.25:$local_ymax]
set ylabel "ratio (log scale)"
set grid ytics
set xtics font ",8" nomirror
set key off
set arrow from graph 0, first 1 to graph 1, first 1 nohead back dt 2 lc rgb "#555555"
set arrow from graph 0, first 1.5 to graph 1, first 1.5 nohead back dt 3 lc rgb "#aa3333"
plot "$OUT/chart.dat" using 2:xtic(1) lc rgb "#3b6ea8", \
     "" using 0:2:(sprintf("%.2fx", \$2)) with labels noenhanced offset 0,0.7 font ",8"
EOF
        echo
        echo "chart: $CHART (dashed: parity; dotted: 1.5x)"
    else
        echo "run.sh: gnuplot not found (scripts/install-deps.sh installs gnuplot-nox); no chart" >&2
    fi
fi
