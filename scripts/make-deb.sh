#!/usr/bin/env bash
# make-deb.sh: builds BUILD/accel-lua_VERSION_ARCH.deb from an already built
# BUILD (run by `make deb`). The package tree is `make install PREFIX=/usr`
# staged in BUILD/deb/root (so the program is /usr/bin/accel-lua, accel.so
# is in /usr/lib/x86_64-linux-gnu/lua/5.4 where Debian's lua5.4 finds it,
# the man pages are gzipped as Debian's policy asks); Depends comes from
# dpkg-shlibdeps (the shared libraries the binaries link), plus
# libopenmpi3, which the communicator opens at run time (dlopen), and
# openmpi-bin, whose mpirun `launch` runs. The version is host/host.h's.
#
#   scripts/make-deb.sh [BUILD_DIR [OUT_DIR]]   (defaults: build, BUILD_DIR)
#
# The .deb and its work folder (OUT_DIR/deb) go to OUT_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
cd "$ROOT"
VERSION=$(sed -n 's/^#define ACCEL_LUA_VERSION "\(.*\)"$/\1/p' host/host.h)
ARCH=$(dpkg --print-architecture)
OUTDIR=$(mkdir -p "${2:-$BUILD}" && cd "${2:-$BUILD}" && pwd)
WORK=$OUTDIR/deb
PKG=$WORK/root
DEB=$OUTDIR/accel-lua_${VERSION}_${ARCH}.deb

# Depends: of the staged binaries, as dpkg-shlibdeps reads them (it wants
# a debian/control to exist, so a minimal one is written in WORK).
shlib_depends() {
    mkdir -p "$WORK/debian"
    printf 'Source: accel-lua\n\nPackage: accel-lua\nArchitecture: any\n' >"$WORK/debian/control"
    (cd "$WORK" && dpkg-shlibdeps -O -e "$PKG/usr/bin/accel-lua" \
        -e "$PKG/usr/lib/x86_64-linux-gnu/lua/5.4/accel.so" 2>/dev/null) |
        sed -n 's/^shlibs:Depends=//p'
}

write_control() {
    local size
    size=$(du -sk --exclude=DEBIAN "$PKG" | cut -f1)
    mkdir -p "$PKG/DEBIAN"
    cat >"$PKG/DEBIAN/control" <<CONTROL
Package: accel-lua
Version: $VERSION
Architecture: $ARCH
Maintainer: accel-lua developers <accel-lua@localhost>
Installed-Size: $size
Depends: $(shlib_depends), libopenmpi3, openmpi-bin
Recommends: lua5.4
Section: science
Priority: optional
Description: Lua 5.4 with tensors, autograd and distributed training
 accel-lua is HuggingFace Accelerate rebuilt as a C program that embeds
 Lua 5.4: tensors, automatic differentiation, CPU kernels, optimizers,
 OpenMPI collectives, data-parallel and sharded training, and an
 Accelerator object. It installs the accel-lua program (with its launch,
 config and env commands), the accel module for plain lua5.4, and manual
 pages.
CONTROL
}

main() {
    rm -rf "$WORK"
    make -s --no-print-directory -o "$BUILD/accel-lua" -o "$BUILD/accel.so" BUILD="$BUILD" \
        install PREFIX=/usr DESTDIR="$PKG"
    gzip -9n "$PKG"/usr/share/man/man1/*.1
    write_control
    dpkg-deb --root-owner-group --build "$PKG" "$DEB" >/dev/null
    echo "$DEB"
}

main
