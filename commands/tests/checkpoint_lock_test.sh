#!/usr/bin/env bash
# One job per checkpoint directory, under mpirun with 2 ranks (dp 2, tiny model, CPU):
# - a second job given a --checkpoint-dir in use is refused at start with one line naming the
#   directory and the holder (host, rank 0's pid, start time), writes nothing there, and the first
#   job finishes with its `latest` and step directories intact; `meshtrain convert` into it is
#   refused the same way;
# - a SIGKILLed job's lock blocks nothing: --resume on its directory takes its `latest`, and the
#   start removes the partial saves a failed save left;
# - a save that fails as on a full disk (MESHTRAIN_FAULT_SAVE=full-shard) removes its partial
#   directory and leaves the previous checkpoint in force.
# About 25 s on 2 cores.
# Usage: checkpoint_lock_test.sh MESHTRAIN MPIEXEC
set -u
meshtrain=$1
mpiexec=$2
run_timeout=120
. "$(dirname "$0")/cli_test_lib.sh"
. "$(dirname "$0")/fault_test_lib.sh"  # tagged_pid, wait_for (and MT_FAULT_TEST_TAG, marking our processes)

prepare_corpus 23
train=("$meshtrain" train --device cpu --tokenizer bytes --data "$dir/data" --model tiny --seq-len 32 --global-batch 8
       --micro-batch 2 --dp 2 --lr 3e-3 --warmup 2 --log-every 10 --eval-batches 1 --cpu-threads 1)
iso_time='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z'

# start_job CKPT OUT ARGS...: the training of 100 steps in the background (at most 120 s), its output
# in OUT.out and OUT.err; sets job, and pid0/pid1 (its ranks' pids) once both run.
start_job() {
  local ck=$1 name=$2
  shift 2
  timeout 120 "$mpiexec" -np 2 --oversubscribe "${train[@]}" --steps 100 --checkpoint-dir "$ck" "$@" \
    >"$name.out" 2>"$name.err" &
  job=$!
  wait_for 60 eval 'pid0=$(tagged_pid OMPI_COMM_WORLD_RANK=0); pid1=$(tagged_pid OMPI_COMM_WORLD_RANK=1);
                    [ -n "$pid0" ] && [ -n "$pid1" ]'
}
listing() { (cd "$1" && ls -A | sort | tr '\n' ' '); }

# --- job A saves into ck; stopped (both ranks) once its first checkpoint is in place, so it surely
# holds the directory while job B starts on it; then it goes on to its end.
ck=$dir/ck
if start_job "$ck" "$dir/a" --save-every 4 --keep 2 && wait_for 60 test -f "$ck/latest"; then
  kill -STOP "$pid0" "$pid1"
  before=$(listing "$ck")
  expect_rank0_error "a second job on the directory in use is refused" \
    "^meshtrain: error: checkpoint directory '$ck' is in use by another job: host $(hostname), pid $pid0, started $iso_time \(lock file $ck/\.lock\)$" \
    2 "${train[@]}" --steps 6 --save-every 3 --keep 1 --checkpoint-dir "$ck"
  grep -q "saved checkpoint" "$out" && fail "the refused job saved a checkpoint"
  [ "$(listing "$ck")" = "$before" ] || fail "the refused job changed $ck: '$before' -> '$(listing "$ck")'"
  # convert takes the lock too: writing into the directory in use is refused, naming the holder.
  "$meshtrain" convert --from "$ck" --to "$ck" --dp 1 >"$out" 2>"$err"
  rc=$?
  if [ "$rc" -ne 0 ] && grep -q "checkpoint directory '$ck' is in use by another job: host $(hostname), pid $pid0" "$err" &&
     [ "$(listing "$ck")" = "$before" ]; then
    echo "ok   convert into the directory in use is refused and writes nothing"
  else
    fail "convert into the directory in use: exit code $rc, $(listing "$ck"): $(cat "$err")"
  fi
  kill -CONT "$pid0" "$pid1"
  wait "$job"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "ok   the holder finishes its 100 steps"
  else
    fail "the holder: exit code $rc"; tail -20 "$dir/a.out" "$dir/a.err"
  fi
  [ "$(cat "$ck/latest" 2>/dev/null)" = step_00000100 ] || fail "latest is '$(cat "$ck/latest" 2>/dev/null)', not step_00000100"
  intact=$([ "$(listing "$ck")" = ".lock latest step_00000096 step_00000100 " ] && echo yes)
  for step in 96 100; do
    grep -q "\"step\": *$step," "$ck/$(printf 'step_%08d' $step)/manifest.json" 2>/dev/null || intact=
  done
  [ -n "$intact" ] && echo "ok   the holder's latest and step directories: $(listing "$ck")" ||
    fail "the holder's directory holds $(listing "$ck") (expected .lock, latest, step_00000096 and step_00000100 with manifests)"
else
  fail "job A: no ranks or no first checkpoint"; kill "$job" 2>/dev/null; wait "$job"; tail -20 "$dir/a.out" "$dir/a.err"
fi

# --- a job SIGKILLed mid-run leaves its lock file naming it; with a partial save left beside it
# (as a full disk leaves one), --resume starts, takes `latest`, and removes the partial directory.
ck=$dir/ck-killed
if start_job "$ck" "$dir/k" --save-every 2 && wait_for 60 test -f "$ck/latest"; then
  kill -KILL "$pid0"
  wait "$job"
  grep -q "pid $pid0," "$ck/.lock" && echo "ok   the killed job's lock file is left behind: $(cat "$ck/.lock")" ||
    fail "the killed job's lock file does not name pid $pid0: $(cat "$ck/.lock" 2>/dev/null)"
  mkdir -p "$ck/.step_00000200.partial" && echo x >"$ck/.step_00000200.partial/rank_00000.bin"
  latest=$(cat "$ck/latest")
  until=$((10#${latest#step_} + 2))
  expect_ok "resume after a SIGKILL: the dead job's lock blocks nothing" \
    np 2 "${train[@]}" --steps "$until" --checkpoint-dir "$ck" --resume &&
    { grep -q "resumed from $ck/$latest:" "$out" || { fail "the resume took no $latest"; show; }; }
  [ "$(cat "$ck/latest")" = "$(printf 'step_%08d' "$until")" ] || fail "latest is $(cat "$ck/latest") after the resume"
  [ -z "$(cd "$ck" && ls -A | grep partial)" ] && echo "ok   the start removed the partial saves" ||
    fail "partial saves left after the resume: $(cd "$ck" && ls -A | grep partial | tr '\n' ' ')"
  grep -q "pid $pid0," "$ck/.lock" && fail "the lock file still names the killed pid $pid0"
else
  fail "the job to kill: no ranks or no first checkpoint"; kill "$job" 2>/dev/null; wait "$job"; tail -20 "$dir/k.out" "$dir/k.err"
fi

# --- a save that fails on rank 1 as on a full disk (its shard half written): the job ends with one
# agreed error, `latest` stays on step 4, and the partial directory of step 8 is gone.
ck=$dir/ck-full
MESHTRAIN_FAULT_SAVE=full-shard:8@1 expect_rank0_error "a save failing for a full disk" \
  "^meshtrain: error: rank 1: cannot write the checkpoint of step 8 at 'shard': No space left on device" \
  2 "${train[@]}" --steps 12 --save-every 4 --checkpoint-dir "$ck"
[ "$(cat "$ck/latest" 2>/dev/null)" = step_00000004 ] || fail "latest is '$(cat "$ck/latest" 2>/dev/null)', not step_00000004"
[ "$(listing "$ck")" = ".lock latest step_00000004 " ] && echo "ok   the failed save left no partial directory" ||
  fail "after the failed save $ck holds $(listing "$ck")"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
