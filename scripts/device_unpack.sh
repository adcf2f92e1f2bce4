#!/usr/bin/env bash
# Unpacks a bundle of scripts/device_bundle.sh into BUILD_DIR (the build tree's files, and the
# libraries the GPU machine lacks in BUILD_DIR/device-lib), unless BUILD_DIR already holds that
# very bundle: BUILD_DIR/.bundle-sha256 records the SHA-256 of the archive it was unpacked from,
# written last, so an interrupted unpack is redone. A warm machine keeps its unpacked tree between
# runs; a new bundle always replaces it, stale files included. A BUILD_DIR that is a real build
# (no stamp, but a CMakeCache.txt) is left alone: that is an error.
#
#   scripts/device_unpack.sh BUNDLE BUILD_DIR          prints "unpacked" or "same bundle"
set -euo pipefail
bundle=${1:?usage: device_unpack.sh BUNDLE BUILD_DIR}
build=${2:?usage: device_unpack.sh BUNDLE BUILD_DIR}
stamp=$build/.bundle-sha256
[ -f "$bundle" ] || { echo "device_unpack.sh: no bundle $bundle (make it with scripts/device_bundle.sh)" >&2; exit 1; }
sum=$(sha256sum "$bundle" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ]; then
  echo "same bundle"
  exit 0
fi
if [ -e "$build" ] && [ ! -f "$stamp" ] && [ -f "$build/CMakeCache.txt" ]; then
  echo "device_unpack.sh: $build is a build tree, not an unpacked bundle; not replacing it" >&2
  exit 1
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tar -C "$scratch" -xJf "$bundle"
rm -rf "$build"
mkdir -p "$build/device-lib"
cp -a "$scratch/tree/." "$build/"
if [ -d "$scratch/lib" ]; then cp -a "$scratch/lib/." "$build/device-lib/"; fi
echo "$sum" >"$stamp"
echo "unpacked"
