#!/usr/bin/env bash
# setup-test-python.sh: the Python environment some tests need, in
# build/pyenv: a venv (python3 -m venv) with PyPI's
#   tensorboard  whose own event reader checks our TensorBoard event files
#                (tests/lua/tracking_spec.lua runs scripts/read-tb-events.py);
#   mlflow       the tracking server the MLflow tracker talks to, and the
#                client that reads the runs back (tests/lua/trackers_spec.lua
#                runs `mlflow server` and scripts/read-mlflow-run.py). A big
#                install: about a minute and 0.85 GB (measured: 65 s).
#
#   scripts/setup-test-python.sh [tensorboard|mlflow ...]   (default: both)
#   (env ACCEL_PYENV overrides the folder)
#
# Idempotent and quiet: once a package has passed its import check a stamp
# file marks it and later runs return at once. Prefers the system
# /usr/bin/python3 (Debian's python3-venv package provides `-m venv`; see
# scripts/install-deps.sh). Needs PyPI (or a pip find-links mirror) on first
# run; on any failure prints pip's log and exits non-zero.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYENV=${ACCEL_PYENV:-$ROOT/build/pyenv}

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

# The import that shows a package works, and its stamp file.
check_of() {
    case $1 in
        tensorboard) echo 'import tensorboard.backend.event_processing.event_accumulator' ;;
        mlflow) echo 'import mlflow.server, mlflow.tracking; mlflow.tracking.MlflowClient' ;;
        *) fail "unknown package '$1' (tensorboard or mlflow)" ;;
    esac
}
stamp_of() {
    case $1 in
        tensorboard) echo "$PYENV/.accel-test-ok" ;; # the name earlier versions wrote
        *) echo "$PYENV/.accel-test-$1-ok" ;;
    esac
}

make_venv() {
    local py
    [[ -x $PYENV/bin/python ]] && return 0
    py=$(base_python)
    rm -rf "$PYENV"
    mkdir -p "$(dirname "$PYENV")"
    "$py" -m venv "$PYENV" >/dev/null 2>&1 ||
        fail "'$py -m venv $PYENV' failed (Debian needs the python3-venv package: scripts/install-deps.sh)"
}

install() {
    local pkg=$1 check stamp
    check=$(check_of "$pkg")
    stamp=$(stamp_of "$pkg")
    [[ -f $stamp ]] && return 0
    make_venv
    echo "setup-test-python: installing $pkg into $PYENV" >&2
    "$PYENV/bin/python" -m pip install -q "$pkg" >"$PYENV/setup.log" 2>&1 ||
        fail "'pip install $pkg' failed"
    "$PYENV/bin/python" -c "$check" >>"$PYENV/setup.log" 2>&1 ||
        fail "$pkg installed but '$check' fails"
    touch "$stamp"
}

main() {
    local pkg
    [[ $# -gt 0 ]] || set -- tensorboard mlflow
    for pkg in "$@"; do install "$pkg"; done
}

main "$@"
