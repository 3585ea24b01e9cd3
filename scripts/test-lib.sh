# test-lib.sh: the frame shared by scripts/test-host.sh and scripts/test-cli.sh,
# sourced with the script's arguments (`source scripts/test-lib.sh "$@"`):
# strict mode, ROOT (the repository, also the working folder), BUILD (the
# build folder given as $1, default build), EXE (its accel-lua), TMP (a
# temporary folder removed at exit), and the pass / fail counting:
#   ok NAME            one passed check
#   bad NAME [OUTPUT]  one failed check, with the last 40 lines of OUTPUT
#   finish             prints "N passed, N failed"; status 0 when none failed
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
