#!/usr/bin/env bash
# Packs a CUDA build for a lent GPU machine (Ubuntu 24.04 with CUDA, NCCL, Open MPI and OpenBLAS,
# but without Boost or Debian 12's ICU): the build tree's executables (stripped) and CTest files,
# plus the shared libraries that machine lacks, into one compressed archive that travels with the
# working tree. scripts/device_run.sh unpacks and runs it there.
#
#   scripts/device_bundle.sh [BUILD_DIR] [OUT_DIR]     default: build/cuda .device
set -euo pipefail
build=${1:-build/cuda}
out=${2:-.device}
root=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$build/CTestTestfile.cmake" ] || { echo "device_bundle.sh: $build is not a configured build" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
tree=$stage/tree
mkdir -p "$tree" "$stage/lib"
# Executables and test manifests, at their paths relative to the build directory.
(cd "$build" && find . -path ./CMakeFiles -prune -o -type f \( -name CTestTestfile.cmake -o -perm -u+x \) -print) |
  grep -v '/CMakeFiles/' | while read -r f; do
    mkdir -p "$tree/$(dirname "$f")"
    if file -b "$build/$f" | grep -q ELF; then strip -o "$tree/$f" "$build/$f"; else cp "$build/$f" "$tree/$f"; fi
  done
# Libraries the GPU machine's image does not have (checked there: Boost, ICU 72 are missing).
for bin in "$tree"/bin/meshtrain; do
  ldd "$bin" | awk '/=> \//{print $3}' | grep -E 'boost_program_options|libicu' | sort -u | while read -r lib; do
    cp -L "$lib" "$stage/lib/"
  done
done
mkdir -p "$root/$out"
tar -C "$stage" -cJf "$root/$out/bundle.tar.xz" tree lib
echo "$root/$out/bundle.tar.xz: $(du -h "$root/$out/bundle.tar.xz" | cut -f1) ($(find "$tree" -type f | wc -l) files)"
