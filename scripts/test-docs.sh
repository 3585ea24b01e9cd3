#!/usr/bin/env bash
# test-docs.sh: the README and docs/ stay true. Run by scripts/run-tests.sh:
#
#   scripts/test-docs.sh [BUILD_DIR]     (default: build)
#
# Checks:
#  - the training script printed in README.md (the first ```lua block under
#    "## A training script") runs as printed, on one process and through
#    `accel-lua launch --num_processes 2`: it learns (accuracy >= 0.9 in
#    its last epoch), prints each epoch once, gather_for_metrics covers the
#    4096 samples, and it writes out/model.safetensors;
#  - README.md is a first page (150-250 lines) and names every Debian
#    package of scripts/install-deps.sh;
#  - every relative link in README.md and docs/**.md points at a file that
#    exists, and a #fragment at a heading of that file (GitHub's slugs);
#  - no issue numbers in README.md or docs/;
#  - scripts/bench/run.sh writes its results file with the machine read at
#    run time (lscpu's model name, CPU count and flags), replacing a stale
#    one, and its micro benchmarks run (and write that file) without PyTorch.
# Prints one line per check and ends with "N passed, N failed[, N skipped]".
# shellcheck source=scripts/test-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh" "$@"
SKIP=0
skip() { SKIP=$((SKIP + 1)); echo "skip $1"; }
# Under ASan (make asan-test) the launched ranks load MPI's plugins: the slow
# unwinder sees through them, so scripts/lsan.supp's MPI entries match.
[[ -n ${ASAN_OPTIONS:-} ]] && export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"

# The README's training script, extracted as printed.
extract_train() {
    awk '/^## A training script/ { s = 1; next } s && /^```lua/ { c = 1; next } c && /^```/ { exit } c { print }' \
        README.md >"$TMP/train/train.lua"
}

# check_train NAME CMD...: runs CMD in $TMP/train and checks what the script prints.
check_train() {
    local name=$1 epochs acc
    shift
    rm -rf "$TMP/train/out"
    run bash -c 'cd "$1" && shift && "$@"' _ "$TMP/train" "$@"
    epochs=$(grep -c '^epoch [0-9]: accuracy' <<<"$OUT")
    acc=$(grep '^epoch 4: accuracy' <<<"$OUT" | awk '{ print $4 }')
    check "README script, $name: exits 0" '(( RC == 0 ))'
    check "README script, $name: four epoch lines, each printed once" '(( epochs == 4 ))'
    check "README script, $name: gather_for_metrics covers all 4096 samples" \
        '(( $(grep -c "on 4096 samples$" <<<"$OUT") == 4 ))'
    check "README script, $name: accuracy >= 0.9 in the last epoch (got ${acc:-none})" \
        '[[ -n $acc ]] && awk -v a="$acc" "BEGIN { exit !(a >= 0.9) }"'
    check "README script, $name: writes out/model.safetensors" '[[ -s $TMP/train/out/model.safetensors ]]'
}

check_readme_script() {
    mkdir -p "$TMP/train"
    extract_train
    check "README has a training script of 15-30 lines" \
        '(( $(wc -l <"$TMP/train/train.lua") >= 15 && $(wc -l <"$TMP/train/train.lua") <= 30 ))'
    check_train "one process" "$EXE" train.lua
    check_train "launch --num_processes 2" "$EXE" launch --num_processes 2 train.lua
}

check_readme_shape() {
    local n pkg missing=""
    n=$(wc -l <README.md)
    check "README.md is a first page: 150-250 lines (has $n)" '(( n >= 150 && n <= 250 ))'
    for pkg in $(sed -n '/^PACKAGES=(/,/^)/p' scripts/install-deps.sh | sed '1d; $d; s/#.*//'); do
        grep -qE "(^|[ \`])$pkg([ \`,.]|$)" README.md || missing+=" $pkg"
    done
    check "README.md names every package of scripts/install-deps.sh (missing:${missing:- none})" '[[ -z $missing ]]'
    check "README.md names the Debian version" 'grep -q "Debian 12 (bookworm)" README.md'
    run grep -rnE '[Ii]ssues? ?#?[0-9]+' README.md docs --include='*.md'
    check "no issue numbers in README.md or docs/" '[[ -z $OUT ]]'
}

# slugs FILE: GitHub's anchor of every heading of a Markdown file, one a line.
slugs() {
    awk '/^```/ { f = !f } !f && /^#+ / { sub(/^#+ +/, ""); print }' "$1" |
        tr 'A-Z' 'a-z' | sed 's/[^a-z0-9 _-]//g; s/ /-/g'
}

check_links() {
    local f link target frag bad_links="" n=0
    while IFS= read -r f; do
        while IFS= read -r link; do
            [[ $link == http* || $link == mailto:* ]] && continue
            n=$((n + 1))
            target=${link%%#*}
            frag=""
            [[ $link == *#* ]] && frag=${link#*#}
            if [[ -z $target ]]; then target=$f; else target=$(dirname "$f")/$target; fi
            target=$(realpath -m --relative-to="$ROOT" "$target")
            if [[ ! -e $target ]]; then
                bad_links+=" $f->$link"
            elif [[ -n $frag && $target == *.md ]] && ! slugs "$target" | grep -qxF "$frag"; then
                bad_links+=" $f->$link(no such heading)"
            fi
        done < <(sed 's/`[^`]*`//g' "$f" | grep -oE '\]\([^)]+\)' | sed 's/^](//; s/)$//') # inline code is no link
    done < <(ls README.md docs/*.md docs/api/*.md)
    check "every relative link of README.md and docs/ resolves ($n links; broken:${bad_links:- none})" \
        '[[ -z $bad_links ]]'
}

check_bench_results() {
    local md=$TMP/bench-results.md model cpus flag
    echo "STALE hand-written text" >"$md"
    run env PYTHON=/nonexistent ACCEL_BUILD="$BUILD" bash scripts/bench/run.sh --no-make --only none --chart none --results "$md"
    model=$(LC_ALL=C lscpu | sed -n 's/^Model name: *//p' | head -n 1)
    cpus=$(getconf _NPROCESSORS_ONLN)
    flag=$(grep -m1 '^flags' /proc/cpuinfo | awk '{ print $NF }')
    check "bench run.sh --results: exits 0 and says where it wrote" '(( RC == 0 )) && has "results: $md"'
    check "bench results file: the stale text is replaced" '! grep -q STALE "$md"'
    check "bench results file: lscpu's model name, read at run time ($model)" \
        'grep -qF "| Model name | $model |" "$md"'
    check "bench results file: the CPU count ($cpus)" 'grep -qF "| CPU(s) | $cpus |" "$md"'
    check "bench results file: the CPU flags (last: $flag)" 'grep -qw -- "$flag" "$md"'
}

# Without PyTorch the micro benchmarks still measure accel-lua and the
# results file still gets written (the reference columns say n/a).
check_bench_micro_without_torch() {
    local md=$TMP/bench-micro.md
    run env PYTHON=/bin/false PER_OP_N=2000 MATMUL_SIZES=64 RUNS_ACCEL=3 ACCEL_BUILD="$BUILD" \
        bash scripts/bench/run.sh --no-make --only micro --chart none --results "$md"
    check "bench run.sh --only micro without PyTorch: exits 0" '(( RC == 0 ))'
    check "bench results file without PyTorch: the per-op row has accel-lua's time and n/a for PyTorch" \
        'grep -qE "^\| a \+ b, 16 x f32, us/op \(ref: PyTorch\) +\| +[0-9.]+ +\| +n/a +\| +n/a +\|$" "$md"'
    check "bench results file without PyTorch: the matmul rows" 'grep -q "matmul f32 n=64" "$md"'
}

check_readme_script
check_readme_shape
check_links
check_bench_results
check_bench_micro_without_torch
echo "$PASS passed, $FAIL failed, $SKIP skipped"
(( FAIL == 0 ))
