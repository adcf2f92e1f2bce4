#!/usr/bin/env bash
# Real SIGKILLs under mpirun -np 4 (dp 2 x pp 2, tiny model, CPU): a rank killed mid-training, a
# rank killed while the others wait for it in a collective (with the default --comm-timeout of
# 600 s: mpirun, not the watchdog, must end the job), and a process killed at each point of a
# checkpoint save, pruning included (MESHTRAIN_FAULT_SAVE=kill-POINT). Each time the whole job must
# end promptly (bounded by a generous timeout, never asserted tighter), mpirun must name the killed
# rank and the signal, `latest` must name a complete checkpoint, and `--resume` must say which one
# it took, continue with the losses of the uninterrupted run bit for bit (same layout, same sums),
# and leave nothing but complete checkpoints (and the lock file) behind. Prints one "fault:" line
# per fault with the seconds from the kill to mpirun's exit. About 50 s on 2 cores.
# Usage: fault_test.sh MESHTRAIN MPIEXEC COMPARE_LOSSES
set -u
meshtrain=$1
mpiexec=$2
compare=$3
run_timeout=120
. "$(dirname "$0")/cli_test_lib.sh"
. "$(dirname "$0")/fault_test_lib.sh"

prepare_fault_training 17
train=("$meshtrain" train --device cpu "${fault_train_args[@]}")

# The job ended by a signal: non-zero (not the timeout: 124), and mpirun's report names the rank and
# the signal. (Open MPI 4.1 prints "with PID 0" for a local rank: the pid is not checked.) mpirun
# itself exits 137 (128 + 9) after a rank's SIGKILL.
check_killed() {  # check_killed NAME RANK
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    fail "$1: exit code $rc, expected the job to fail (124: it hung past $bound s)"; show; return 1
  fi
  local report
  report=$(grep -h -E "process rank $2 with PID [0-9]+ on node .* exited on signal 9" "$out" "$err")
  if [ -z "$report" ]; then fail "$1: mpirun does not report rank $2 killed by signal 9"; show; return 1; fi
  echo "ok   $1: exit $rc, mpirun: $report"
}
# check_resume NAME CKPT: --resume (latest) takes the checkpoint `latest` names, says so, and
# the losses after it equal the uninterrupted run's; afterwards only complete checkpoints remain.
check_resume() {
  local name=$1 ck=$2 latest first
  latest=$(cat "$ck/latest" 2>/dev/null)
  [ -f "$ck/$latest/manifest.json" ] || { fail "$name: latest names '$latest', not a complete checkpoint"; return 1; }
  first=$((10#${latest#step_} + 1))
  expect_ok "$name: resume" np 4 "${train[@]}" --checkpoint-dir "$ck" --resume --metrics "$dir/m-resumed.jsonl" ||
    return 1
  grep -q "resumed from $ck/$latest: step $((first - 1))," "$out" &&
    echo "ok   $name: $(grep -o "resumed from [^:]*" "$out")" || { fail "$name: no resume line for $latest"; show; }
  same_losses "$name: steps $first-$steps bit for bit as the uninterrupted run" \
    "$dir/m-ref.jsonl" "$dir/m-resumed.jsonl" "$first" "$steps" 0
  local left entry keep='^(step_[0-9]{8}|latest|\.lock)$'
  # Killed before `latest` moved: step 4 was complete but not the line's, and the resume of step 2
  # set it aside (checkpoint_dir.h, plan_run_start) rather than overwrite it.
  if [ "$name" = kill-latest:4 ]; then
    keep='^(step_[0-9]{8}|latest|\.lock|set_aside)$'
    [ -f "$(ls -d "$ck"/set_aside/*_after_step_00000002 2>/dev/null)/step_00000004/manifest.json" ] ||
      fail "$name: the complete step 4 that latest never named was not set aside"
  fi
  left=$(cd "$ck" && ls -A | grep -v -E "$keep" | tr '\n' ' ')
  for entry in "$ck"/step_*; do [ -f "$entry/manifest.json" ] || left+="$(basename "$entry") (no manifest) "; done
  [ -z "$left" ] || fail "$name: leftovers after the resumed run's saves: $left"
  [ "$(cat "$ck/latest")" = "$(printf 'step_%08d' "$steps")" ] || fail "$name: latest is $(cat "$ck/latest") at the end"
}

# --- the uninterrupted run.
expect_ok "uninterrupted run, $steps steps, a checkpoint every 2" \
  np 4 "${train[@]}" --checkpoint-dir "$dir/c-ref" --metrics "$dir/m-ref.jsonl"

# start_job CKPT ARGS...: the training in the background under mpirun (at most $bound s), into
# $out/$err; sets job.
start_job() {
  local ck=$1
  shift
  timeout "$bound" "$mpiexec" -np 4 --oversubscribe "${train[@]}" --checkpoint-dir "$ck" "$@" >"$out" 2>"$err" &
  job=$!
}
# end_job: waits for the job; sets rc and took (seconds since killed_at).
end_job() {
  wait "$job"
  rc=$?
  took=$(seconds_since "$killed_at")
}

# --- a rank other than 0 SIGKILLed mid-training (once the first checkpoint is in place).
ck=$dir/c-mid
start_job "$ck" --metrics "$dir/m-mid.jsonl"
# The pid first (a scan of /proc takes a while), then the kill as soon as step 2 is saved.
if wait_for 30 eval 'pid=$(tagged_pid OMPI_COMM_WORLD_RANK=2); [ -n "$pid" ]' && wait_for 60 test -f "$ck/latest"; then
  kill -KILL "$pid"
  killed_at=$(now)
  end_job
  check_killed "rank 2 (pid $pid) SIGKILLed mid-training" 2 &&
    echo "fault: SIGKILL of rank 2 mid-training (after $(cat "$ck/latest") was saved): job ended $took s after the kill"
  check_resume "killed mid-training" "$ck"
else
  fail "killed mid-training: no rank 2 or no checkpoint"; kill "$job" 2>/dev/null; wait "$job"; show
fi

# --- a rank SIGKILLed while the others wait for it in a collective: stopped first, so they block
# in its next collective, then killed. --comm-timeout 600 (the default, given explicitly): the
# watchdog would take ten minutes, so a prompt end is mpirun's doing.
ck=$dir/c-coll
start_job "$ck" --comm-timeout 600
if wait_for 30 eval 'pid=$(tagged_pid OMPI_COMM_WORLD_RANK=1); [ -n "$pid" ]' && wait_for 60 test -f "$ck/latest"; then
  kill -STOP "$pid"
  sleep 2  # the other ranks reach a collective that needs rank 1 and wait there
  kill -KILL "$pid"
  killed_at=$(now)
  end_job
  check_killed "rank 1 (pid $pid) SIGKILLed while the others wait in a collective" 1 &&
    echo "fault: SIGKILL of rank 1 while ranks 0, 2, 3 wait in a collective (--comm-timeout 600):" \
      "job ended $took s after the kill"
else
  fail "killed in a collective: no rank 1 or no checkpoint"; kill "$job" 2>/dev/null; wait "$job"; show
fi

# --- a process SIGKILLed at each point of the save of step 4: the step-2 checkpoint stays in force.
# And in the save of step 8 while --keep 3 removes step 2: step 8 is in force, step 2 half removed.
for fault in kill-shard:4@1 kill-sidecar:4@3 kill-manifest:4 kill-rename:4 kill-latest:4 kill-prune:8; do
  ck=$dir/c-${fault%%:*}
  expected=step_00000002
  [ "$fault" = kill-prune:8 ] && expected=step_00000008
  rank=0
  [[ $fault == *@* ]] && rank=${fault#*@}
  MESHTRAIN_FAULT_SAVE=$fault start_job "$ck"
  # The rank prints its line just before raise(SIGKILL): time from when it shows.
  if ! wait_for 60 grep -q "injected fault" "$err"; then
    fail "$fault: no injected-fault line"; kill "$job" 2>/dev/null; wait "$job"; show; continue
  fi
  killed_at=$(now)
  end_job
  check_killed "$fault" "$rank" || continue
  echo "fault: $fault: job ended $took s after: $(grep -h "injected fault" "$err")"
  [ "$(cat "$ck/latest" 2>/dev/null)" = "$expected" ] ||
    fail "$fault: latest is '$(cat "$ck/latest" 2>/dev/null)', expected $expected"
  check_resume "$fault" "$ck"
done

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
