#!/usr/bin/env bash
# gpu-bundle.sh: packs what scripts/gpu-check.sh runs on a lent GPU machine
# (which has the NVIDIA driver, CUDA 13 and PyTorch, but no Lua, OpenBLAS,
# oneDNN or MPI) into .gpu/bundle.tar.gz, for the device tool's `carry`:
#   scripts/gpu-bundle.sh [BUILD]        (default: build; run make CUDA=1 first)
# The bundle holds the CUDA build's binaries (BUILD/cuda/test_cuda, the
# backend conformance test BUILD/cuda/test_backend, the program
# BUILD/cuda/accel-lua), busted with the Lua modules it loads (bin/busted,
# share/lua, lib/lua: Debian's Lua 5.4 paths, copied with links resolved)
# and every shared library they load that is not part of the C runtime or of
# CUDA (ldd decides; libcudart is linked statically, libcublasLt and libnccl
# come from the GPU machine's own CUDA install: 540 + 220 MB, too large to
# carry). Refuses a bundle over 60 MiB (the carry limit is 64 MiB in all).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build}
cd "$ROOT"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" .gpu

bins=()
for b in "$BUILD/cuda/test_cuda" "$BUILD/cuda/test_backend" "$BUILD/cuda/accel-lua"; do
    [[ -x $b ]] && bins+=("$b")
done
if (( ${#bins[@]} == 0 )); then
    echo "gpu-bundle: nothing to bundle: $BUILD/cuda/test_cuda is missing (run make CUDA=1)" >&2
    exit 1
fi
cp "${bins[@]}" "$STAGE/bin/"
# busted for the Lua suite on cuda (run as accel-lua bin/busted, LUA_PATH /
# LUA_CPATH pointing at share/lua and lib/lua)
if [[ -f /usr/bin/busted && -d /usr/share/lua/5.4 ]]; then
    cp /usr/bin/busted "$STAGE/bin/busted"
    cp -rL /usr/share/lua/5.4 "$STAGE/share-lua"
    cp -rL /usr/lib/x86_64-linux-gnu/lua/5.4 "$STAGE/lib-lua"
    mkdir -p "$STAGE/share" && mv "$STAGE/share-lua" "$STAGE/share/lua" && mv "$STAGE/lib-lua" "$STAGE/lib/lua"
    while IFS= read -r so; do bins+=("$so"); done < <(find "$STAGE/lib/lua" -name '*.so')
fi

# the C runtime and CUDA's own libraries stay behind
SYSTEM_RE='/(libc|libm|libdl|librt|libpthread|libresolv|libutil|libnsl|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcublasLt|libcublas|libnccl|libcudart|libcuda)\.so'
for b in "${bins[@]}"; do
    ldd "$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
    [[ $lib =~ $SYSTEM_RE ]] || cp -L "$lib" "$STAGE/lib/"
done

tar -C "$STAGE" -czf .gpu/bundle.tar.gz bin lib $( [[ -d $STAGE/share ]] && echo share)
size=$(stat -c %s .gpu/bundle.tar.gz)
echo "gpu-bundle: .gpu/bundle.tar.gz, $((size / 1048576)) MiB: $(ls "$STAGE/bin" | tr '\n' ' ')+ $(ls "$STAGE/lib" | wc -l) libraries"
if (( size > 60 * 1048576 )); then
    echo "gpu-bundle: over 60 MiB; the device tool carries at most 64 MiB" >&2
    exit 1
fi
