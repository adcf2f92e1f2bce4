#!/usr/bin/env bash
# The repository's `defines:` indices are true (scripts/check_defines_index.sh), and the check does
# catch a name that is not there, naming the file, the line and the name.
#   tests/defines_index_test.sh REPOSITORY_ROOT
set -euo pipefail
root=${1:?usage: defines_index_test.sh REPOSITORY_ROOT}
check=$root/scripts/check_defines_index.sh

"$check" "$root"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/lib"
index="// ""defines:"  # split, or the check would read this script's fixtures as indices
printf '%s\n' '// A header whose index names a function it lost.' \
  "$index Kept, lost_function" '#pragma once' 'struct Kept {};' >"$scratch/lib/drift.h"
printf '%s\n' "#include \"lib/drift.h\"  $index Kept, never_there" 'Kept k;' >"$scratch/lib/use.cpp"
if "$check" "$scratch" >"$scratch/out"; then
  echo "FAIL: the check passed a drifting index" >&2
  exit 1
fi
for want in 'lib/drift.h:2: lost_function' 'lib/use.cpp:1: never_there'; do
  grep -qF "$want" "$scratch/out" || { echo "FAIL: no '$want' in:" >&2; cat "$scratch/out" >&2; exit 1; }
done
[ "$(wc -l <"$scratch/out")" -eq 2 ] || { echo "FAIL: expected two findings:" >&2; cat "$scratch/out" >&2; exit 1; }
echo "defines indices: true; a drifting one is caught"
