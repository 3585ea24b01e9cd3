#!/usr/bin/env bash
# setup-test-python.sh: the Python environment some tests need, in
# build/pyenv: a venv (python3 -m venv) with PyPI's tensorboard, whose own
# event reader checks our TensorBoard event files (tests/lua/tracking_spec.lua
# runs scripts/read-tb-events.py with it).
#
#   scripts/setup-test-python.sh        (env ACCEL_PYENV overrides the folder)
#
# Idempotent and quiet: once the environment has passed its import check a
# stamp file marks it and later runs return at once. Prefers the system
# /usr/bin/python3 (Debian's python3-venv package provides `-m venv`; see
# scripts/install-deps.sh). Needs PyPI (or a pip find-links mirror) on first
# run; on any failure prints pip's log and exits non-zero.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYENV=${ACCEL_PYENV:-$ROOT/build/pyenv}
STAMP=$PYENV/.accel-test-ok
CHECK='import tensorboard.backend.event_processing.event_accumulator'

fail() {
    echo "setup-test-python: $*" >&2
    [[ -f $PYENV/setup.log ]] && tail -n 40 "$PYENV/setup.log" | sed 's/^/    | /' >&2
    exit 1
}

base_python() {
    if [[ -x /usr/bin/python3 ]]; then echo /usr/bin/python3
    elif command -v python3 >/dev/null 2>&1; then command -v python3
    else fail "no python3 found (install Debian's python3-venv: scripts/install-deps.sh)"
    fi
}

main() {
    [[ -f $STAMP ]] && return 0
    local py
    py=$(base_python)
    if [[ ! -x $PYENV/bin/python ]]; then
        rm -rf "$PYENV"
        mkdir -p "$(dirname "$PYENV")"
        "$py" -m venv "$PYENV" >/dev/null 2>&1 ||
            fail "'$py -m venv $PYENV' failed (Debian needs the python3-venv package: scripts/install-deps.sh)"
    fi
    echo "setup-test-python: installing tensorboard into $PYENV" >&2
    "$PYENV/bin/python" -m pip install -q tensorboard >"$PYENV/setup.log" 2>&1 ||
        fail "'pip install tensorboard' failed"
    "$PYENV/bin/python" -c "$CHECK" >>"$PYENV/setup.log" 2>&1 ||
        fail "tensorboard installed but its event reader does not import"
    touch "$STAMP"
}

main "$@"
