#!/usr/bin/env bash
# A task SIGKILLed mid-training under SLURM (slurm/local_cluster.sh, one node): the checked-in
# slurm/train.sbatch runs 4 tasks through srun --mpi=pmix --kill-on-bad-exit; one task (not rank
# 0) is killed once the first checkpoint is saved. The whole step, and the job, must end promptly
# (bounded generously, never asserted tighter: under srun the survivors end when their stop cannot be
# agreed on, about 10 s) with srun naming the task and the signal; a second
# job with --resume must say which checkpoint it took and continue with the losses of the
# uninterrupted run (under mpirun: the same losses bit for bit, see slurm_cluster_test.sh). The
# same kill under slurm/train-mpirun.sbatch (mpirun inside the allocation) must end that job too.
# Prints a "fault:" line per kill with the seconds from the kill to the end of the tasks and of
# sbatch. Every daemon it starts is stopped, also on failure. Needs root and the SLURM packages;
# without them it skips (exit 77). About 40 s.
# Usage: slurm_fault_test.sh MESHTRAIN MPIEXEC COMPARE_LOSSES
set -u
run_timeout=120
. "$(dirname "$0")/slurm_test_lib.sh"
. "$here/../commands/tests/fault_test_lib.sh"

prepare_fault_training 19

expect_ok "uninterrupted run under mpirun" np 4 "$meshtrain" train "${fault_train_args[@]}" \
  --checkpoint-dir "$dir/c-ref" --metrics "$dir/m-ref.jsonl"
cluster_up "cluster up" 1

grep -q -E "^srun .*--kill-on-bad-exit=1" "$here/train.sbatch" &&
  echo "ok   train.sbatch runs srun with --kill-on-bad-exit=1" ||
  fail "train.sbatch lacks --kill-on-bad-exit=1: one dead task would leave the others to the PMIx error handler"

# kill_rank2 NAME SCRIPT RANK_VAR REPORT CKPT: sbatch SCRIPT (4 tasks) with a checkpoint every 2 steps
# into CKPT, SIGKILL the task whose RANK_VAR is 2 once step 2 is saved, and check that every task is
# gone promptly, the job fails, and its output holds REPORT (an extended regex). -W: sbatch waits for
# the job and returns its exit code; it polls the controller, so it returns later than the tasks end.
kill_rank2() {
  local name=$1 script=$2 var=$3 report=$4 ck=$5 job pid killed_at gone took
  MESHTRAIN="$meshtrain" timeout "$bound" sbatch -W -N1 -n4 -O -o "$dir/job.out" "$script" "${fault_train_args[@]}" \
    --checkpoint-dir "$ck" >"$out" 2>"$err" &
  job=$!
  if ! wait_for 60 eval 'pid=$(tagged_pid "$var=2"); [ -n "$pid" ]' || ! wait_for 60 test -f "$ck/latest"; then
    fail "$name: no task 2 or no checkpoint"; kill "$job" 2>/dev/null; wait "$job"; cat "$dir/job.out"; return 1
  fi
  kill -KILL "$pid"
  killed_at=$(now)
  if wait_for "$bound" eval '[ -z "$(tagged_pid MT_FAULT_TEST_TAG="$MT_FAULT_TEST_TAG")" ]'; then
    gone=$(seconds_since "$killed_at")
    echo "ok   $name: every task gone $gone s after the kill"
  else
    fail "$name: tasks still running $bound s after the kill"
  fi
  wait "$job"
  rc=$?
  took=$(seconds_since "$killed_at")
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    fail "$name: sbatch exit code $rc, expected the job to fail (124: it hung past $bound s)"; show; cat "$dir/job.out"
    return 1
  fi
  if ! grep -q -E "$report" "$dir/job.out"; then
    fail "$name: the job's output lacks /$report/"; cat "$dir/job.out"; return 1
  fi
  echo "ok   $name: task 2 (pid $pid) SIGKILLed, sbatch exit $rc: $(grep -m1 -E "$report" "$dir/job.out")"
  echo "fault: $name, SIGKILL of task 2 after $(cat "$ck/latest") was saved: tasks gone after ${gone:-?} s, sbatch -W" \
    "returned after $took s; job output: $(grep -E '^(srun|slurmstepd|mpirun)' "$dir/job.out" | tr '\n' '|')"
}

# --- job 1: srun --mpi=pmix --kill-on-bad-exit (train.sbatch); job 1b: mpirun inside the allocation.
ck=$dir/c-slurm
kill_rank2 "sbatch train.sbatch (srun)" "$here/train.sbatch" SLURM_PROCID "task 2: Killed" "$ck"
kill_rank2 "sbatch train-mpirun.sbatch" "$here/train-mpirun.sbatch" OMPI_COMM_WORLD_RANK \
  "process rank 2 with PID [0-9]+ on node .* exited on signal 9" "$dir/c-slurm-mpirun"

# --- job 2: --resume takes the checkpoint `latest` names and continues bit for bit.
latest=$(cat "$ck/latest" 2>/dev/null)
if [ -f "$ck/$latest/manifest.json" ]; then
  first=$((10#${latest#step_} + 1))
  expect_ok "job 2: sbatch --resume" env MESHTRAIN="$meshtrain" \
    sbatch -W -N1 -n4 -O -o "$dir/job2.out" "$here/train.sbatch" "${fault_train_args[@]}" --checkpoint-dir "$ck" \
    --resume --metrics "$dir/m-job2.jsonl"
  grep -q "resumed from $ck/$latest: step $((first - 1))," "$dir/job2.out" &&
    echo "ok   job 2: $(grep -o "resumed from [^:]*" "$dir/job2.out")" ||
    { fail "job 2: no resume line for $latest"; cat "$dir/job2.out"; }
  same_losses "job 2: steps $first-$steps bit for bit as the uninterrupted run" \
    "$dir/m-ref.jsonl" "$dir/m-job2.jsonl" "$first" "$steps" 0
else
  fail "job 1 left no complete checkpoint in latest ('$latest')"
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
