#!/usr/bin/env bash
# `meshtrain train --profile-ops` end to end: the last steps timed op by op change no loss (bit for
# bit against the same run without the option, on dp 2 x pp 2), the report gives one row per rank
# and the ops' table with the time outside them, validation is left out of the timed step, and a
# count past --steps is one usage error. Tiny model, bytes tokenizer, generated text.
# Usage: profile_ops_test.sh MESHTRAIN MPIEXEC COMPARE_LOSSES
set -u
meshtrain=$1
mpiexec=$2
compare=$3
. "$(dirname "$0")/cli_test_lib.sh"

prepare_corpus 5
base=("$meshtrain" train --device cpu --tokenizer bytes --data "$dir/data" --model tiny --seq-len 32 --global-batch 8
      --micro-batch 2 --steps 4 --log-every 1 --eval-batches 1 --cpu-threads 1)

expect_ok "dp 2 x pp 2, no profile" np 4 "${base[@]}" --dp 2 --pp 2 --metrics "$dir/plain.jsonl"
if expect_ok "dp 2 x pp 2, --profile-ops 2" np 4 "${base[@]}" --dp 2 --pp 2 --profile-ops 2 --metrics "$dir/profiled.jsonl"; then
  grep -q -F "Where a step goes: the last 2 step(s)" "$out" || { fail "no report of the 2 profiled steps"; show; }
  rows=$(sed -n '/^rank  step ms/,/^ops, the mean/p' "$out" | grep -c -E '^[0-3] +[0-9.]+ +[0-9]+% +[0-9]+% ')
  [ "$rows" -eq 4 ] || { fail "$rows rank rows in the report, expected 4"; show; }
  grep -q -E '^ops, the mean of 4 rank\(s\) per step of [0-9.]+ ms:$' "$out" || { fail "no ops table"; show; }
  # One AdamW launch a step on every rank, and GEMMs named by shape.
  grep -q -E '^adamw_multi +1\.0 ' "$out" || { fail "adamw_multi is not 1 call per step"; show; }
  grep -q -E '^gemm fp32 [NT]{2} [0-9]+x[0-9]+x[0-9]+' "$out" || { fail "no GEMM row by shape"; show; }
  grep -q -E '^\(outside ops: communication waits, bubble, host\) +[0-9.]+ +[0-9.]+%$' "$out" \
    || { fail "no row for the time outside ops"; show; }
  [ "$(grep -c 'Where a step goes' "$out")" -eq 1 ] || { fail "the report is not printed once (by rank 0)"; show; }
fi
same_losses "--profile-ops changes no loss (bit for bit)" "$dir/plain.jsonl" "$dir/profiled.jsonl" 1 4 0

# One rank: the last step evaluates and saves a checkpoint, and neither validation's forward passes
# nor the save (which runs no device op today; timing is off outside trainer.step()) are the step's. What does not hang on timing (which ops make the top 20 does) must be
# the same with 1 validation batch and no checkpoint as with 3 batches and a checkpoint: the calls
# per step over every op (the top rows and the "(N more ops)" row) and how many distinct ops ran.
op_calls() {
  sed -n '/^op  /,/^(outside ops/p' "$out" | awk '
    NR > 2 && /^\(outside ops/ { next }
    NR > 2 && /^\([0-9]+ more ops\)/ { ops += substr($1, 2); calls += $(NF - 2); next }
    NR > 2 { ops += 1; calls += $(NF - 2) }
    END { printf "%d distinct ops, %.1f calls per step\n", ops, calls }'
}
if expect_ok "one rank, --profile-ops 1 on the step that evaluates 1 batch" "${base[@]}" --profile-ops 1; then
  grep -q -E '^\(outside ops: the host between them\) ' "$out" || { fail "one rank: no row outside ops"; show; }
  grep -q -E '^CausalSoftmaxForward ' "$out" || { fail "one rank: no softmax forward row"; show; }
  plain=$(op_calls)
  if expect_ok "one rank, --profile-ops 1 on the step that evaluates 3 batches and saves" "${base[@]}" --profile-ops 1 \
       --eval-batches 3 --checkpoint-dir "$dir/ck"; then
    saved=$(op_calls)
    [ "$plain" = "$saved" ] || fail "validation or the save is counted in the profiled step: $plain without, $saved with them"
  fi
fi

expect_error "--profile-ops past --steps" "--profile-ops 5 must be between 0 and --steps 4" "${base[@]}" --profile-ops 5

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all checks passed"
