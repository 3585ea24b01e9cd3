#!/usr/bin/env bash
# install-deps.sh: installs the Debian packages accel-lua needs to build and
# test (DESIGN.md section 5). Idempotent: asks dpkg-query which packages are
# missing and does nothing (quickly, quietly) when none are; otherwise runs
# one `apt-get update` and installs only the missing ones. With --fuzz it
# also installs FUZZ_PACKAGES (below).
set -euo pipefail

PACKAGES=(
    gcc make
    liblua5.4-dev lua5.4 lua-busted
    libluajit-5.1-dev luajit   # `make LUA=luajit` and the LuaJIT test pass (docs/luajit.md)
    libdnnl-dev libopenblas-dev
    libopenmpi-dev openmpi-bin
    libyaml-dev zlib1g-dev
    libsimde-dev            # SIMDe: the AVX2 intrinsics in the baseline build of the kernels (kernels/cpu/simd.h)
    libcurl4-openssl-dev    # HTTP for the MLflow tracker (bindings/http_lua.c, -lcurl)
    dataset-fashion-mnist   # the example data set (accel.data.fashion_mnist_dir(): /usr/share/datasets/fashion-mnist)
    fortunes        # the GPT example's default text corpus (/usr/share/games/fortunes)
    python3-venv    # python3 -m venv for the test set-up (scripts/setup-test-python.sh)
    gnuplot-nox     # the benchmark chart (scripts/bench/run.sh -> docs/bench.png)
    iproute2        # `ip netns` for the several-machines test (scripts/test-machines.sh)
    man-db          # `man --warnings -l` renders the man pages (scripts/test-install.sh)
    dpkg-dev        # dpkg-shlibdeps for `make deb` (scripts/make-deb.sh)
    qemu-user       # qemu-x86_64 -cpu Nehalem/Haswell: the CPU checks of scripts/test-install.sh
    libreadline-dev # the REPL's line editing and history (host/repl.c, -lreadline)
    tmux            # drives the REPL on a terminal in scripts/test-repl.sh
)

# `install-deps.sh --fuzz` installs these as well: what `make fuzz` needs
# (clang with libFuzzer, and the omp.h its -fopenmp=libgomp build reads).
# make test never needs them.
FUZZ_PACKAGES=(clang libomp-dev)

# Prints the packages from PACKAGES that are not installed (one dpkg-query
# call; unknown packages are simply absent from its output).
missing_packages() {
    local installed pkg
    installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PACKAGES[@]}" \
                2>/dev/null | awk '$2 == "installed" { print $1 }' || true)
    for pkg in "${PACKAGES[@]}"; do
        grep -qxF "$pkg" <<<"$installed" || echo "$pkg"
    done
}

# Runs a command as root: directly, or through sudo when available.
as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "install-deps: need root (or sudo) to run: $*" >&2
        exit 1
    fi
}

main() {
    if [[ ${1:-} == --fuzz ]]; then
        PACKAGES+=("${FUZZ_PACKAGES[@]}")
    elif [[ $# -gt 0 ]]; then
        echo "install-deps: unknown option $1 (the only one is --fuzz)" >&2
        exit 2
    fi
    local missing
    mapfile -t missing < <(missing_packages)
    if [[ ${#missing[@]} -eq 0 ]]; then
        return 0
    fi
    echo "install-deps: installing ${missing[*]}"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "${missing[@]}"
}

main "$@"
