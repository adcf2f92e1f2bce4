#!/usr/bin/env bash
# A task SIGKILLed mid-training under SLURM (slurm/local_cluster.sh, one node): the checked-in
# slurm/train.sbatch runs 4 tasks through srun --mpi=pmix --kill-on-bad-exit; one task (not rank
# 0) is killed once the first checkpoint is saved. The whole step, and the job, must end promptly
# (bounded generously, never asserted tighter: under srun the survivors end when their stop cannot be
# agreed on, about 10 s) with srun naming the task and the signal; a second
# job with --resume must say which checkpoint it took and continue with the losses of the
# uninterrupted run (under mpirun: the same losses bit for bit, see slurm_cluster_test.sh). The
# same kill under slurm/train-mpirun.sbatch (mpirun inside the allocation) must end that job too.
# Then a stop as SLURM asks it before a time limit, under each script with MESHTRAIN_REQUEUE=1 and
# no periodic checkpoint: the tasks save the step they are at and exit 3, the script requeues the
# job, and the requeued job resumes there (--resume auto) and trains to the end, bit for bit as an
# uninterrupted run, with both runs' lines in the one log.
# Prints a "fault:" line per kill with the seconds from the kill to the end of the tasks and of
# sbatch. Every daemon it starts is stopped, also on failure. Needs root and the SLURM packages;
# without them it skips (exit 77). About 60 s.
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
  local name=$1 script=$2 var=$3 report=$4 ck=$5 log=$5.out job pid killed_at gone took
  MESHTRAIN="$meshtrain" timeout "$bound" sbatch -W -N1 -n4 -O -o "$log" "$script" "${fault_train_args[@]}" \
    --checkpoint-dir "$ck" >"$out" 2>"$err" &
  job=$!
  if ! wait_for 60 eval 'pid=$(tagged_pid "$var=2"); [ -n "$pid" ]' || ! wait_for 60 test -f "$ck/latest"; then
    fail "$name: no task 2 or no checkpoint"; kill "$job" 2>/dev/null; wait "$job"; cat "$log"; return 1
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
    fail "$name: sbatch exit code $rc, expected the job to fail (124: it hung past $bound s)"; show; cat "$log"
    return 1
  fi
  if ! grep -q -E "$report" "$log"; then
    fail "$name: the job's output lacks /$report/"; cat "$log"; return 1
  fi
  echo "ok   $name: task 2 (pid $pid) SIGKILLed, sbatch exit $rc: $(grep -m1 -E "$report" "$log")"
  echo "fault: $name, SIGKILL of task 2 after $(cat "$ck/latest") was saved: tasks gone after ${gone:-?} s, sbatch -W" \
    "returned after $took s; job output: $(grep -E '^(srun|slurmstepd|mpirun)' "$log" | tr '\n' '|')"
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

# --- jobs 3 and 4: stopped as before a time limit, requeued, resumed to the end. Long enough (steps of
# 5-10 ms) that the stop comes mid-run: scancel takes a fraction of a second to reach the tasks, and
# on a loaded machine the poll for step 3 a second or more (400 steps once ended first).
requeue_steps=1000
requeue_args=()
for ((i = 0; i < ${#fault_train_args[@]}; ++i)); do  # the fault runs' options, with more steps and no periodic save
  requeue_args+=("${fault_train_args[i]}")
  case ${fault_train_args[i]} in
    --steps) requeue_args+=("$requeue_steps"); i=$((i + 1)) ;;
    --save-every) requeue_args+=(0); i=$((i + 1)) ;;
  esac
done
expect_ok "uninterrupted $requeue_steps steps under mpirun" np 4 "$meshtrain" train "${requeue_args[@]}" \
  --checkpoint-dir "$dir/c-ref-requeue" --metrics "$dir/m-ref-requeue.jsonl"

# requeue_case NAME SCRIPT SCANCEL_ARGS...: sbatch SCRIPT with MESHTRAIN_REQUEUE=1, stop it with
# `scancel SCANCEL_ARGS JOBID` once step 3 is done, start the requeued job at once (Slurm holds a
# requeued job about two minutes: its begin time), and check the log and the losses.
requeue_case() {
  local name=$1 script=$2 ck=$dir/c-$3 log=$dir/$3.out metrics=$dir/m-$3.jsonl job line stopped
  shift 3
  state() { scontrol show job "$job" 2>/dev/null | grep -o -E 'JobState=[A-Z_]+' | cut -d= -f2; }
  job=$(MESHTRAIN="$meshtrain" MESHTRAIN_REQUEUE=1 sbatch --parsable -N1 -n4 -O -o "$log" "$script" \
          "${requeue_args[@]}" --checkpoint-dir "$ck" --metrics "$metrics" 2>"$err" | cut -d';' -f1)
  if [ -z "$job" ] || ! wait_for 60 grep -q '"step":3,' "$metrics"; then
    fail "$name: did not start training"; cat "$err" "$log" 2>/dev/null; [ -n "$job" ] && scancel "$job"; return 1
  fi
  scancel "$@" "$job"
  if ! wait_for "$bound" grep -q "requeueing job $job" "$log" || ! wait_for 10 eval '[ "$(state)" = PENDING ]'; then
    fail "$name: not requeued (state $(state))"; cat "$log"; slurm_says "$job"; scancel "$job"; return 1
  fi
  # Release it once the first run's step daemons are gone and the clock has passed the second they
  # ended in. slurmd revokes the job's credential at the requeue, to the second, and refuses a
  # credential made in that same second ("Killing non-startable batch JobId=N: Job credential
  # revoked" in slurmctld's log, the job FAILED with exit 1). Slurm's own 120 s hold keeps users clear.
  wait_for "$bound" eval '! pgrep -f "slurmstepd: \[$job\." >/dev/null' ||
    fail "$name: the first run's slurmstepd still running after $bound s"
  local ended=$(date +%s)
  wait_for 5 eval '[ "$(date +%s)" -gt "$((ended + 1))" ]'
  scontrol update JobId="$job" StartTime=now
  if ! wait_for "$bound" eval '[ "$(state)" = COMPLETED ]'; then
    fail "$name: the requeued job did not complete (state $(state))"; cat "$log"; slurm_says "$job"; scancel "$job"
    return 1
  fi
  line=$(grep -m1 "^stopped by [A-Z0-9]* at step" "$log")
  stopped=$(sed -E 's/^stopped by [A-Z0-9]+ at step ([0-9]+):.*/\1/' <<<"$line")
  if [ -n "$stopped" ] && [ "$stopped" -lt "$requeue_steps" ] &&
     grep -q "^train.*sbatch: the run stopped and saved its step; requeueing job $job" "$log" &&
     grep -q "resumed from $ck/$(printf 'step_%08d' "$stopped"): step $stopped," "$log" &&
     grep -q "^saved checkpoint $ck/$(printf 'step_%08d' "$requeue_steps")" "$log"; then
    echo "ok   $name: $line; requeued, resumed there and trained to step $requeue_steps"
  else
    fail "$name: no stop line, requeue, resume of the stopped step or final checkpoint in one log"; cat "$log"
  fi
  same_losses "$name: steps 1-$requeue_steps across the stop and the requeue bit for bit as the uninterrupted run" \
    "$dir/m-ref-requeue.jsonl" "$metrics" 1 "$requeue_steps" 0
}
requeue_case "job 3: train.sbatch, scancel --signal=TERM" "$here/train.sbatch" requeue-srun --signal=TERM
requeue_case "job 4: train-mpirun.sbatch, scancel --batch --signal=USR1" "$here/train-mpirun.sbatch" requeue-mpirun \
  --batch --signal=USR1

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
