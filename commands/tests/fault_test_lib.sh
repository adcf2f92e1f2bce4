# Shared by the tests that SIGKILL a training (commands/tests/fault_test.sh under mpirun,
# slurm/tests/slurm_fault_test.sh under SLURM), sourced after cli_test_lib.sh: the training they
# interrupt, and how they find its processes, wait for them and time their end. Needs $meshtrain.
# defines: bound, steps, fault_train_args, prepare_fault_training, MT_FAULT_TEST_TAG, tagged_pid,
#          wait_for, now, seconds_since

bound=60  # seconds a killed job may take to end before it counts as hung
steps=40  # tens of ms each: a kill after step 2's checkpoint comes well before the end

# prepare_fault_training SEED: the corpus (prepare_corpus SEED) and fault_train_args, the meshtrain
# train options for 4 ranks as dp 2 x pp 2 with a checkpoint every 2 steps (add --checkpoint-dir).
prepare_fault_training() {
  prepare_corpus "$1"
  fault_train_args=(--tokenizer bytes --data "$dir/data" --model tiny --seq-len 32 --global-batch 8 --micro-batch 2
                    --dp 2 --pp 2 --lr 3e-3 --warmup 2 --log-every 1 --eval-batches 1 --cpu-threads 1
                    --steps "$steps" --save-every 2)
}

# Marks this test's processes (mpirun and sbatch pass the environment on), so that one is found in
# /proc whatever launched it, and no other test's.
export MT_FAULT_TEST_TAG="fault-$$-$RANDOM"

# tagged_pid VAR=VALUE: the pid of a meshtrain process of this test whose environment sets
# VAR=VALUE (e.g. OMPI_COMM_WORLD_RANK=2, or MT_FAULT_TEST_TAG=... for any), or nothing.
tagged_pid() {
  local f pid
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}
    pid=${pid%/environ}
    [ "/proc/$pid/exe" -ef "$meshtrain" ] || continue  # by the binary: it may re-execute as /proc/self/exe
    { tr '\0' '\n' <"$f"; } 2>/dev/null | grep -qx "MT_FAULT_TEST_TAG=$MT_FAULT_TEST_TAG" || continue  # gone: skip
    { tr '\0' '\n' <"$f"; } 2>/dev/null | grep -qx "$1" && { echo "$pid"; return; }
  done
}

# wait_for SECONDS COMMAND...: polls COMMAND every 0.05 s until it succeeds; false after SECONDS.
wait_for() {
  local until=$(($(date +%s) + $1))
  shift
  until "$@"; do
    [ "$(date +%s)" -lt "$until" ] || return 1
    sleep 0.05
  done
}

now() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }  # seconds_since TIME (of now)
