# test-lib.sh: the frame shared by scripts/test-host.sh and scripts/test-cli.sh,
# sourced with the script's arguments (`source scripts/test-lib.sh "$@"`):
# strict mode, ROOT (the repository, also the working folder), BUILD (the
# build folder given as $1, default build), EXE (its accel-lua), TMP (a
# temporary folder removed at exit), and the pass / fail counting:
#   ok NAME            one passed check
#   bad NAME [OUTPUT]  one failed check, with the last 40 lines of OUTPUT
#   finish             prints "N passed, N failed"; status 0 when none failed
#   run CMD...         OUT = its stdout+stderr, RC = exit status, MS = milliseconds
#   check NAME COND... one check: passes when the bash condition (evaluated) holds
#   has TEXT           OUT contains TEXT
# shellcheck shell=bash
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd) || exit 1
# shellcheck disable=SC2034  # used by the scripts that source this one
EXE=$BUILD/accel-lua
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT" || exit 1

PASS=0
FAIL=0

ok() { PASS=$((PASS + 1)); echo "ok   $1"; }
bad() {
    FAIL=$((FAIL + 1))
    echo "FAIL $1"
    [[ -n ${2:-} ]] && tail -n 40 <<<"$2" | sed 's/^/     > /'
}

finish() {
    echo "$PASS passed, $FAIL failed"
    (( FAIL == 0 ))
}

OUT=""
RC=0
MS=""

run() {
    local t0
    t0=$(date +%s%N)
    OUT=$("$@" 2>&1)
    RC=$?
    MS=$(( ($(date +%s%N) - t0) / 1000000 ))
}

check() {
    local name=$1
    shift
    if eval "$@"; then ok "$name"; else bad "$name" "rc=$RC (${MS:-?} ms)
$OUT"; fi
}

has() { [[ $OUT == *"$1"* ]]; }
