#!/usr/bin/env bash
# scripts/device_unpack.sh, which scripts/device_run.sh runs on a (possibly warm) GPU machine: the
# same bundle twice is unpacked once; a new bundle replaces the old tree whole, even where the old
# one left bin/ behind (the warm machine's case); a real build tree is never replaced.
#   tests/device_unpack_test.sh REPOSITORY_ROOT
set -euo pipefail
root=${1:?usage: device_unpack_test.sh REPOSITORY_ROOT}
unpack=$root/scripts/device_unpack.sh
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A bundle as device_bundle.sh lays it out: tree/ (the build tree's files) and lib/.
make_bundle() {  # NAME FILES...: tree/bin/FILE holds "NAME FILE"
  local name=$1 stage=$scratch/stage-$1
  shift
  mkdir -p "$stage/tree/bin" "$stage/lib"
  for f in "$@"; do echo "$name $f" >"$stage/tree/bin/$f"; done
  echo "$name" >"$stage/lib/libextra.so"
  tar -C "$stage" -cJf "$scratch/$name.tar.xz" tree lib
}
make_bundle old meshtrain gone_in_new
make_bundle new meshtrain
build=$scratch/build/cuda

[ "$("$unpack" "$scratch/old.tar.xz" "$build")" = unpacked ] || fail "first unpack"
[ "$(cat "$build/bin/meshtrain")" = "old meshtrain" ] || fail "old bundle's file"
[ "$(cat "$build/device-lib/libextra.so")" = old ] || fail "old bundle's library"
[ "$("$unpack" "$scratch/old.tar.xz" "$build")" = "same bundle" ] || fail "the same bundle was unpacked again"

[ "$("$unpack" "$scratch/new.tar.xz" "$build")" = unpacked ] || fail "a new bundle was not unpacked"
[ "$(cat "$build/bin/meshtrain")" = "new meshtrain" ] || fail "the new bundle's file did not replace the old"
[ "$(cat "$build/device-lib/libextra.so")" = new ] || fail "the new bundle's library did not replace the old"
[ ! -e "$build/bin/gone_in_new" ] || fail "a file of the old bundle survived"

# A tree unpacked before checksums existed (bin/ present, no stamp) is replaced too.
rm "$build/.bundle-sha256"
echo stale >"$build/bin/meshtrain"
[ "$("$unpack" "$scratch/new.tar.xz" "$build")" = unpacked ] || fail "an unstamped tree was kept"
[ "$(cat "$build/bin/meshtrain")" = "new meshtrain" ] || fail "an unstamped tree's file was kept"

# A real build directory is refused and left as it is.
real=$scratch/real
mkdir -p "$real/bin"
touch "$real/CMakeCache.txt"
if "$unpack" "$scratch/new.tar.xz" "$real" 2>"$scratch/err"; then fail "a build tree was replaced"; fi
grep -q "is a build tree" "$scratch/err" || fail "no reason given: $(cat "$scratch/err")"
[ -f "$real/CMakeCache.txt" ] || fail "the build tree was touched"
echo "device bundle: unpacked once, replaced when it changes, a build tree left alone"
