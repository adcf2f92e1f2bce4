#!/usr/bin/env bash
# The watchdog names the rank to blame for a hang, not the neighbour that waits for it: under
# mpirun -np 4 (tiny model, CPU, --comm-timeout 5), one world rank is stopped (kill -STOP)
# mid-training, as dp 2 x tp 2 and as dp 2 x pp 2, a rank other than 0 and rank 0. The other ranks
# block in collectives and point-to-point ops that wait on each other across groups; every report
# printed must name the stopped rank as "culprit: world rank R (host H) does not answer" (or "did
# not run for N s before it answered", when mpirun's SIGCONT as it ends the job came first), and the
# job must end by the watchdog well within the bound. Every process of a case is continued and
# killed at its end. Prints one "hang:" line per case. About 50 s on 2 cores.
# Usage: hang_culprit_test.sh MESHTRAIN MPIEXEC
set -u
meshtrain=$1
mpiexec=$2
. "$(dirname "$0")/cli_test_lib.sh"
. "$(dirname "$0")/fault_test_lib.sh"

timeout_s=5
prepare_corpus 29
train=("$meshtrain" train --device cpu --tokenizer bytes --data "$dir/data" --model tiny --seq-len 32 --global-batch 8
       --micro-batch 2 --lr 3e-3 --warmup 2 --log-every 1 --cpu-threads 1 --steps 100000 --comm-timeout "$timeout_s")

# tagged_pids: every meshtrain process of this test still there.
tagged_pids() {
  local f pid
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}
    pid=${pid%/environ}
    [ "/proc/$pid/exe" -ef "$meshtrain" ] || continue
    { tr '\0' '\n' <"$f"; } 2>/dev/null | grep -qx "MT_FAULT_TEST_TAG=$MT_FAULT_TEST_TAG" && echo "$pid"
  done
}
# Nothing stays behind, stopped or not, whatever happens to the script.
release_all() {
  local pid
  for pid in $(tagged_pids); do kill -KILL "$pid" 2>/dev/null; kill -CONT "$pid" 2>/dev/null; done
}
trap 'release_all; rm -rf "$dir"' EXIT

# stop_case NAME RANK LAYOUT...: trains with LAYOUT, stops world rank RANK after a few steps, and
# checks the job's end and its reports.
stop_case() {
  local name=$1 rank=$2 pid job rc took lines wrong
  shift 2
  local metrics=$dir/m-$name.jsonl
  timeout "$bound" "$mpiexec" -np 4 --oversubscribe "${train[@]}" "$@" --metrics "$metrics" >"$out" 2>"$err" &
  job=$!
  if ! wait_for 30 eval 'pid=$(tagged_pid OMPI_COMM_WORLD_RANK='"$rank"'); [ -n "$pid" ]' ||
     ! wait_for 60 eval '[ -f "$metrics" ] && [ "$(grep -c "\"loss\"" "$metrics")" -ge 3 ]'; then
    fail "$name: no rank $rank or no training steps"; kill "$job" 2>/dev/null; wait "$job"; release_all; show; return 1
  fi
  kill -STOP "$pid"
  local stopped_at
  stopped_at=$(now)
  wait "$job"
  rc=$?
  took=$(seconds_since "$stopped_at")
  release_all
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    fail "$name: exit code $rc, expected the watchdog to end the job (124: hung past $bound s)"; show; return 1
  fi
  lines=$(grep -h "  culprit" "$out" "$err")
  if [ -z "$lines" ]; then fail "$name: no culprit line in the watchdog's report"; show; return 1; fi
  # "did not run for ... before it answered": resumed by mpirun's SIGCONT as it ends the job.
  wrong=$(printf '%s\n' "$lines" | grep -v -E "^  culprit: world rank $rank \(host [^)]+\) (does not answer|did not run for)")
  if [ -n "$wrong" ]; then fail "$name: a report blames another rank than the stopped $rank: $wrong"; show; return 1; fi
  grep -q -E "^meshtrain: error: \[rank [0-9]+ host [^]]+\]: watchdog: " "$err" ||
    { fail "$name: no watchdog report"; show; return 1; }
  echo "ok   $name: $(printf '%s\n' "$lines" | sort -u)"
  echo "hang: $name: job ended $took s after the STOP (--comm-timeout $timeout_s)," \
    "$(grep -c "^meshtrain: error: " "$err") report(s): $(grep -h -m1 "^meshtrain: error: " "$err" | cut -c1-160)..."
}

stop_case "dp2 x tp2, rank 2 stopped" 2 --dp 2 --tp 2
stop_case "dp2 x tp2, rank 0 stopped" 0 --dp 2 --tp 2
stop_case "dp2 x pp2, rank 3 stopped" 3 --dp 2 --pp 2
stop_case "dp2 x pp2, rank 0 stopped" 0 --dp 2 --pp 2

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
