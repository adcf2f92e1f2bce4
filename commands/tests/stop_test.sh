#!/usr/bin/env bash
# A training stopped on request under mpirun (tiny model, CPU), at np 2 (dp 2) and np 4 (dp 2 x
# pp 2), with no periodic checkpoint: each stop must save the step the job is at, so nothing since
# the last save is lost. One checkpoint directory per layout carries a chain of runs, each resuming
# the last and stopped another way:
#   1. SIGTERM to mpirun (what SLURM or a user sends it): mpirun's SIGCONT starts the stop at once;
#   2. SIGTERM to every rank (what srun and scancel send);
#   3. SIGINT to mpirun (Ctrl-C in a terminal: the ranks have process groups of their own);
#   4. SIGINT to mpirun twice, the second while the stop's save is under way (a pause injected at
#      its manifest): mpirun ends at once, so must every rank, and the save is discarded;
#   5. SIGUSR1 to mpirun, which forwards it to the ranks (how a batch script asks for a stop);
#   6. to the end.
# After each stop: mpirun has ended within a bound, no rank outlived it, rank 0 said what it saved in
# one line ("stopped by SIGTERM at step N: saved DIR/step_N; resume with --resume"), `latest` names
# that step (case 4: the one before, untouched), and the next run resumes there and trains on with
# the losses of an uninterrupted run, bit for bit.
# Usage: stop_test.sh MESHTRAIN MPIEXEC COMPARE_LOSSES
set -u
meshtrain=$1
mpiexec=$2
compare=$3
run_timeout=120
# mpirun's SIGTERM comes this long after it is signalled, its SIGKILL twice as long. A stop that
# mpirun's SIGCONT started is said as "mpirun's stop" (a SIGTERM would be said as such). mpirun
# itself waits out this timer whenever it ends a job (signalled, or a rank's non-zero exit such as
# the stop's 3): kept short, that is at most 4 s a case.
export OMPI_MCA_odls_base_sigkill_timeout=2
. "$(dirname "$0")/cli_test_lib.sh"
. "$(dirname "$0")/fault_test_lib.sh"

steps=60
prepare_corpus 23
train=("$meshtrain" train --device cpu --tokenizer bytes --data "$dir/data" --model tiny --seq-len 32
       --global-batch 16 --micro-batch 2 --lr 3e-3 --warmup 2 --lr-decay-steps "$steps" --log-every 1
       --eval-every 0 --eval-batches 1 --cpu-threads 1 --keep 0)

# The highest step in a metrics file (0 when none yet).
last_step() { grep -o -E '"step":[0-9]+' "$1" 2>/dev/null | tail -1 | cut -d: -f2 || true; }
# The meshtrain processes of this test still running.
ranks_left() { tagged_pid "MT_FAULT_TEST_TAG=$MT_FAULT_TEST_TAG"; }

# start_run NP LAYOUT... : the chain's next run in the background (resuming unless it is the first),
# metrics into $metrics; waits until it has trained two steps. Sets job, first.
start_run() {
  local np=$1
  shift
  local resume=()
  [ -f "$ck/latest" ] && resume=(--resume)
  first=$(( $(cat "$ck/latest" 2>/dev/null | sed 's/step_0*//;s/^$/0/') + 1 ))
  timeout "$bound" "$mpiexec" -np "$np" --oversubscribe "${train[@]}" "$@" --steps "$steps" --checkpoint-dir "$ck" \
    "${resume[@]}" --metrics "$metrics" >"$out" 2>"$err" &
  job=$!
  wait_for 60 eval '[ "$(last_step "$metrics")" -ge $((first + 1)) ] 2>/dev/null'
}

# finish_run NAME: waits for the ranks to end (sets took, from signalled_at) and for mpirun (sets rc),
# then checks that no rank outlived mpirun.
finish_run() {
  wait_for "$bound" eval '[ -z "$(ranks_left)" ] || ! kill -0 "$job" 2>/dev/null'
  took=$(seconds_since "$signalled_at")
  wait "$job"
  rc=$?
  if ! wait_for 1 eval '[ -z "$(ranks_left)" ]'; then
    fail "$1: meshtrain processes outlived mpirun: $(ranks_left)"
    pkill -KILL -f "$MT_FAULT_TEST_TAG" 2>/dev/null
  fi
}

# check_stop NAME RC_PATTERN WHY: the job ended with an exit code matching RC_PATTERN (a regex), rank 0
# said "stopped by WHY at step N: saved ...", `latest` names step N, and the losses of this run's steps
# equal the uninterrupted run's.
check_stop() {
  local name=$1 rc_pattern=$2 why=$3 line stopped
  if [[ ! $rc =~ ^($rc_pattern)$ ]]; then fail "$name: exit code $rc, expected $rc_pattern"; show; return 1; fi
  line=$(grep -E "^stopped by $why at step [0-9]+: " "$out")
  stopped=$(sed -E 's/^stopped by .* at step ([0-9]+): .*/\1/' <<<"$line")
  if [ -z "$line" ] || [ "$(grep -c '^stopped by' "$out")" -ne 1 ]; then
    fail "$name: no single 'stopped by $why' line"; show; return 1
  fi
  local saved
  saved=$(printf 'step_%08d' "$stopped")
  [[ $line =~ ^stopped\ by\ $why\ at\ step\ $stopped:\ saved\ $ck/$saved\;\ resume\ with\ --resume$ ]] ||
    { fail "$name: the stop line reads: $line"; return 1; }
  [ "$(cat "$ck/latest")" = "$saved" ] && [ -f "$ck/$saved/manifest.json" ] ||
    { fail "$name: latest is '$(cat "$ck/latest")', not a complete $saved"; return 1; }
  awk -v t="$took" 'BEGIN { exit !(t < 8) }' || fail "$name: the ranks took $took s after the signal to end"
  same_losses "$name: steps $first-$stopped as the uninterrupted run's, bit for bit" \
    "$dir/m-ref-$np.jsonl" "$metrics" "$first" "$stopped" 0
  echo "ok   $name: ranks gone $took s after the signal, mpirun exit $rc: $line"
}

# signal_ranks SIGNAL NP: the signal to every rank of the job, as srun sends it.
signal_ranks() {
  local r pid
  for r in $(seq 0 $(($2 - 1))); do
    pid=$(tagged_pid "OMPI_COMM_WORLD_RANK=$r")
    [ -n "$pid" ] && kill "-$1" "$pid"
  done
}

# The launcher under `timeout` (mpirun or mpiexec, as MPIEXEC names it).
mpirun_pid() { pgrep -P "$job" | head -1; }

signal_mpirun() { kill "-$1" "$(mpirun_pid)"; }

# stop_case NAME RC_PATTERN WHY ACTION...: the chain's next run, stopped by the command ACTION once
# it has trained two steps, then check_stop. mpirun exits 1 when it was itself signalled (3 when its
# ranks beat it to the end).
mpirun_stop="mpirun's stop \(SIGINT or SIGTERM to mpirun\)"
stop_case() {
  local name=$1 rc_pattern=$2 why=$3
  shift 3
  metrics=$dir/m-$np-$((++cases)).jsonl
  start_run "$np" "${L[@]}"
  "$@"
  signalled_at=$(now)
  finish_run "$name"
  check_stop "$name" "$rc_pattern" "$why"
}

cases=0
for layout in "2 --dp 2" "4 --dp 2 --pp 2"; do
  read -r -a args <<<"$layout"
  np=${args[0]}
  L=("${args[@]:1}")
  ck=$dir/c-$np
  expect_ok "np $np: the uninterrupted run, $steps steps" \
    np "$np" "${train[@]}" "${L[@]}" --steps "$steps" --metrics "$dir/m-ref-$np.jsonl"

  stop_case "np $np: SIGTERM to mpirun" "1|3" "$mpirun_stop" signal_mpirun TERM
  stop_case "np $np: SIGTERM to every rank" 3 SIGTERM signal_ranks TERM "$np"
  stop_case "np $np: SIGINT to mpirun (Ctrl-C)" "1|3" "$mpirun_stop" signal_mpirun INT

  metrics=$dir/m-$np-int-twice.jsonl
  before=$(cat "$ck/latest")
  MESHTRAIN_FAULT_SAVE=pause-manifest start_run "$np" "${L[@]}"
  mpirun=$(mpirun_pid)
  kill -INT "$mpirun"
  # The save is under way once rank 0 has its sidecar (it then pauses before the manifest). mpirun
  # forwards no output while it runs its kill timer, so the files tell, not the fault's line.
  if wait_for 30 eval 'ls "$ck"/.step_*.partial/rank_00000.json >/dev/null 2>&1'; then
    kill -INT "$mpirun"
    signalled_at=$(now)
    finish_run "np $np: SIGINT twice, the second during the save"
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then fail "np $np: SIGINT twice: exit code $rc"; show; fi
    [ "$(cat "$ck/latest")" = "$before" ] && [ -f "$ck/$before/manifest.json" ] &&
      ls -d "$ck"/.step_*.partial >/dev/null 2>&1 && ! grep -q "^stopped by" "$out" &&
      echo "ok   np $np: SIGINT twice: every rank gone $took s after the second, mpirun exit $rc, the save discarded, latest still $before" ||
      { fail "np $np: SIGINT twice: latest '$(cat "$ck/latest")', expected $before, and a partial save left"; show; }
  else
    fail "np $np: SIGINT twice: the stop's save never began"; show; kill -KILL "$job"; wait "$job"
  fi

  stop_case "np $np: SIGUSR1 to mpirun" 3 SIGUSR1 signal_mpirun USR1

  metrics=$dir/m-$np-end.jsonl
  first=$(( $(sed 's/step_0*//' "$ck/latest") + 1 ))
  expect_ok "np $np: resumed to the end" \
    np "$np" "${train[@]}" "${L[@]}" --steps "$steps" --checkpoint-dir "$ck" --resume --metrics "$metrics" &&
    same_losses "np $np: steps $first-$steps after five stops as the uninterrupted run's, bit for bit" \
      "$dir/m-ref-$np.jsonl" "$metrics" "$first" "$steps" 0
done

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
