#!/usr/bin/env bash
# test-seams.sh: checks that the device seam holds in the source tree: above
# the backends (core/ and bindings/), only the CPU backend's glue
# (backend_cpu.c) calls a CPU kernel (k_*) or includes kernels/cpu. Every
# other file reaches compute through the Backend table (core/backend/backend.h), so
# a new device adds kernels and nothing else. Run by scripts/run-tests.sh:
#
#   scripts/test-seams.sh [BUILD_DIR]     (default: build; not used)
#
# The scanner is first run on a planted tree, so a scanner that finds
# nothing because it is broken fails too. Ends with "N passed, N failed".
# shellcheck source=scripts/test-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh" "$@"

# The files allowed to reach kernels/cpu: the CPU backend's glue.
ALLOWED_RE='(^|/)backend_cpu\.c$'

# scan DIR...: prints "file:line: text" for every k_* kernel call and every
# #include of kernels/cpu in the C sources under DIR, outside ALLOWED_RE.
scan() {
    local f
    while IFS= read -r f; do
        [[ $f =~ $ALLOWED_RE ]] && continue
        grep -nHE '(^|[^A-Za-z0-9_.>])k_[a-z0-9_]+[[:space:]]*\(|#[[:space:]]*include[[:space:]]*[<"][^">]*kernels/cpu/' "$f"
    done < <(find "$@" -type f \( -name '*.c' -o -name '*.h' \) | sort)
}

check_scanner() {
    local d=$TMP/plant found
    mkdir -p "$d/core" "$d/bindings"
    printf '#include "../kernels/cpu/kernels.h"\nvoid f(void) { k_fill(1, 0, 0, 0, 0); }\n' >"$d/core/ops_x.c"
    printf 'static int x(void) { return obj->k_n(1) + bk_add(2) + mask_k_(3); }\n' >"$d/bindings/clean_lua.c"
    printf '#include "../kernels/cpu/kernels.h"\nvoid g(void) { k_fill(1, 0, 0, 0, 0); }\n' >"$d/core/backend_cpu.c"
    found=$(scan "$d/core" "$d/bindings")
    if [[ $(wc -l <<<"$found") == 2 && $found == *"ops_x.c:1:"* && $found == *"ops_x.c:2:"* ]]; then
        ok "the scanner finds a planted k_* call and kernels/cpu include, and nothing else"
    else
        bad "the scanner finds a planted k_* call and kernels/cpu include, and nothing else" "$found"
    fi
}

check_tree() {
    local found
    found=$(scan core bindings)
    if [[ -z $found ]]; then
        ok "core/ and bindings/: no k_* call or kernels/cpu include outside backend_cpu.c"
    else
        bad "core/ and bindings/: no k_* call or kernels/cpu include outside backend_cpu.c" "$found"
    fi
}

check_scanner
check_tree
finish
