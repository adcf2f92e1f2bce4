#!/usr/bin/env bash
# End-to-end checks of the meshtrain executable under mpirun: the device table, --help, and the
# clear, prompt errors for bad input. Usage: cli_test.sh MESHTRAIN MPIEXEC
set -u
meshtrain=$1
mpiexec=$2
failures=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

check() {  # check NAME EXPECTED_RC PATTERN COMMAND...
  local name=$1 want_rc=$2 pattern=$3
  shift 3
  timeout 60 "$@" >"$out" 2>&1
  local rc=$?
  local rc_ok=0
  if [ "$want_rc" = nonzero ]; then
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && rc_ok=1   # 124: timed out, i.e. it hung
  else
    [ "$rc" -eq "$want_rc" ] && rc_ok=1
  fi
  if [ "$rc_ok" -ne 1 ]; then
    echo "FAIL $name: exit code $rc, expected $want_rc"; cat "$out"; failures=$((failures + 1)); return
  fi
  if ! grep -q -E -- "$pattern" "$out"; then
    echo "FAIL $name: output lacks /$pattern/"; cat "$out"; failures=$((failures + 1)); return
  fi
  echo "ok   $name"
}

check "table has one row per rank, sorted" 0 "^vm|rank" "$mpiexec" -np 4 --oversubscribe "$meshtrain" devices --device cpu
rows=$(grep -c -E '^[^ ]+ +[0-3] +[0-3] +cpu ' "$out")
[ "$rows" -eq 4 ] || { echo "FAIL expected 4 cpu rows, got $rows"; cat "$out"; failures=$((failures + 1)); }
ranks=$(grep -E '^[^ ]+ +[0-9]+ +[0-9]+ +cpu ' "$out" | awk '{print $2}' | tr '\n' ' ')
[ "$ranks" = "0 1 2 3 " ] || { echo "FAIL rows not sorted by rank: $ranks"; failures=$((failures + 1)); }
check "memory cap shown" 0 "512.0 MiB" "$mpiexec" -np 2 --oversubscribe "$meshtrain" devices --device cpu --device-memory-limit 512M
check "threads override shown" 0 "cpu .* 3 +mpi" "$mpiexec" -np 1 "$meshtrain" devices --device cpu --cpu-threads 3
check "--help explains options" 0 "--virtual-devices" "$mpiexec" -np 2 --oversubscribe "$meshtrain" devices --device cpu --help
check "no command prints usage" 2 "commands:" "$mpiexec" -np 1 "$meshtrain"
check "unknown option: one line, exit 2" 2 "unrecognised option '--bogus'" \
  "$mpiexec" -np 3 --oversubscribe "$meshtrain" devices --device cpu --bogus
lines=$(grep -c "meshtrain: error" "$out")
[ "$lines" -eq 1 ] || { echo "FAIL usage error printed $lines times, expected once (rank 0)"; failures=$((failures + 1)); }
check "unknown command" 2 "unknown command 'trian'" "$mpiexec" -np 2 --oversubscribe "$meshtrain" trian
check "bad memory size" 2 "cannot read the size '12Q'" "$mpiexec" -np 2 --oversubscribe "$meshtrain" devices --device cpu --device-memory-limit 12Q
check "absurd --comm-timeout refused" 2 "--comm-timeout must be a number of seconds" \
  "$mpiexec" -np 2 --oversubscribe "$meshtrain" devices --device cpu --comm-timeout 1e10
if nvidia-smi -L >/dev/null 2>&1; then
  echo "skip GPU requested where none exists: this machine has a GPU"
else
  check "GPU requested where none exists" nonzero "^meshtrain: error: --device cuda: no usable GPU on host [^ ]+ " \
    "$mpiexec" -np 2 --oversubscribe "$meshtrain" devices --device cuda
fi
check "nccl requested on CPU ranks" nonzero "--comm-backend nccl needs a GPU of its own on every rank" \
  "$mpiexec" -np 2 --oversubscribe "$meshtrain" devices --device cpu --comm-backend nccl

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all checks passed"
