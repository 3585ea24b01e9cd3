#!/usr/bin/env bash
# run-fuzz.sh BUILD SECONDS: runs each libFuzzer target BUILD/fuzz_NAME
# (built by `make fuzz`) for SECONDS seconds, starting from the committed
# seed corpus tests/fuzz/corpus/NAME; new interesting inputs go to
# BUILD/corpus/NAME (not committed), a crashing input to
# BUILD/findings/NAME/. Exits non-zero, after running every target, if any
# target found a crash, a leak, a UBSan report or an allocation over the
# malloc limit (every reader checks sizes against the file before
# allocating, so a large allocation is a finding too).
set -uo pipefail

build=${1:?usage: run-fuzz.sh BUILD SECONDS}
seconds=${2:?usage: run-fuzz.sh BUILD SECONDS}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for bin in "$build"/fuzz_*; do
    [[ -x $bin ]] || continue
    name=${bin##*/fuzz_}
    mkdir -p "$build/corpus/$name" "$build/findings/$name"
    echo "== fuzz $name: ${seconds}s"
    if ! "$bin" -max_total_time="$seconds" -max_len=4096 -malloc_limit_mb=512 \
            -artifact_prefix="$build/findings/$name/" -print_final_stats=1 \
            "$build/corpus/$name" "tests/fuzz/corpus/$name" >"$build/fuzz_$name.log" 2>&1; then
        failed+=("$name")
    fi
    grep -E '^stat::(number_of_executed_units|new_units_added)' "$build/fuzz_$name.log"
done
if [[ ${#failed[@]} -gt 0 ]]; then
    for name in "${failed[@]}"; do
        echo "FAIL fuzz $name: see $build/fuzz_$name.log and $build/findings/$name/"
        grep -m5 -E 'ERROR|runtime error|SUMMARY' "$build/fuzz_$name.log"
    done
    exit 1
fi
echo "fuzz: every target ran ${seconds}s without a finding"
