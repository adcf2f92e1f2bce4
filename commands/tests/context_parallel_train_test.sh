#!/usr/bin/env bash
# Context parallelism end to end through mpirun: `meshtrain train --cp` trains the single rank's
# model (gpt2 and llama), resumes itself bit for bit, and its checkpoints reshard onto other cp sizes
# and layouts (the weights are the same on every cp rank; ZeRO shards them over dp x cp). Tiny models,
# bytes tokenizer, generated text; 8 steps, a checkpoint every 4.
# Usage: context_parallel_train_test.sh MESHTRAIN MPIEXEC COMPARE_LOSSES
#
# Tolerances: another layout (or cp size) adds in another order, the ring's attention merged block by
# block: 1e-5 relative on the losses, as the layouts' equivalence tests. The same layout resumed: bit
# for bit.
set -u
meshtrain=$1
mpiexec=$2
compare=$3
. "$(dirname "$0")/cli_test_lib.sh"

prepare_corpus 23
data=$dir/data
train=("$meshtrain" train --device cpu --tokenizer bytes --data "$data" --model tiny --seq-len 32 --global-batch 8
       --micro-batch 2 --lr 3e-3 --warmup 2 --log-every 4 --eval-batches 1 --cpu-threads 1 --steps 8)

expect_ok "1 rank, checkpoints at 4 and 8" np 1 "${train[@]}" --checkpoint-dir "$dir/c1" --save-every 4 --metrics "$dir/m1.jsonl"

# --- cp 2 trains the single rank's model; its progress shows the ring's exposed communication.
expect_ok "cp 2, checkpoints at 4 and 8" \
  np 2 "${train[@]}" --cp 2 --checkpoint-dir "$dir/c2" --save-every 4 --metrics "$dir/m2.jsonl"
same_losses "cp 2: steps 1-8 within 1e-5 of one rank" "$dir/m1.jsonl" "$dir/m2.jsonl" 1 8 1e-5
grep -q -E '^ +time: compute [0-9]+% \| exposed comm [0-9]+% \| bubble [0-9]+%' "$out" || { fail "cp 2: no timing line"; show; }

# --- another mesh order: the cp groups strided over the world instead of consecutive ranks.
expect_ok "dp 2 x cp 2, --mesh-order dp-cp-tp-pp" \
  np 4 "${train[@]}" --dp 2 --cp 2 --mesh-order dp-cp-tp-pp --metrics "$dir/m-order.jsonl"
grep -q "cp groups.*{0,2} {1,3}" "$out" || { fail "dp-cp-tp-pp: cp groups are not {0,2} {1,3}"; show; }
same_losses "dp 2 x cp 2 in order dp-cp-tp-pp: steps 1-8 within 1e-5 of one rank" "$dir/m1.jsonl" "$dir/m-order.jsonl" 1 8 1e-5

# --- the same layout resumed: bit for bit, and the same step-8 checkpoint.
cp -r "$dir/c2" "$dir/c2-resume"
expect_ok "cp 2 resumed from step 4" \
  np 2 "${train[@]}" --cp 2 --checkpoint-dir "$dir/c2-resume" --resume "$dir/c2-resume/step_00000004" \
  --metrics "$dir/m2-resume.jsonl"
grep -q -E "resumed from .*step_00000004: step 4, 32 sequences consumed \(saved on dp 1 x tp 1 x cp 2 x pp 1" "$out" ||
  { fail "cp 2 resume line does not name cp"; show; }
same_losses "cp 2 resumed: steps 5-8 bit for bit" "$dir/m2.jsonl" "$dir/m2-resume.jsonl" 5 8 0
files() { grep -o '"xxh3": *"[0-9a-f]*"' "$1/step_00000008/manifest.json" | sort; }
if [ -n "$(files "$dir/c2")" ] && [ "$(files "$dir/c2")" = "$(files "$dir/c2-resume")" ]; then
  echo "ok   cp 2 resumed: step-8 checkpoints identical"
else
  fail "cp 2 resumed: step-8 checkpoints differ"
fi

# --- resharding across cp sizes and layouts.
expect_ok "cp 2 checkpoint -> 1 rank" np 1 "${train[@]}" --resume "$dir/c2/step_00000004" --metrics "$dir/m1-from2.jsonl"
same_losses "cp 2 -> 1 rank: steps 5-8 within 1e-5" "$dir/m1.jsonl" "$dir/m1-from2.jsonl" 5 8 1e-5
expect_ok "1 rank checkpoint -> cp 4" \
  np 4 "${train[@]}" --cp 4 --resume "$dir/c1/step_00000004" --metrics "$dir/m4-from1.jsonl"
same_losses "1 rank -> cp 4: steps 5-8 within 1e-5" "$dir/m1.jsonl" "$dir/m4-from1.jsonl" 5 8 1e-5
expect_ok "cp 2 checkpoint -> dp 2 x cp 2, ZeRO-3" \
  np 4 "${train[@]}" --dp 2 --cp 2 --zero 3 --checkpoint-dir "$dir/c22" --save-every 4 --resume "$dir/c2/step_00000004" \
  --metrics "$dir/m22-from2.jsonl"
same_losses "cp 2 -> dp 2 x cp 2 ZeRO-3: steps 5-8 within 1e-5" "$dir/m1.jsonl" "$dir/m22-from2.jsonl" 5 8 1e-5
expect_ok "dp 2 x cp 2 ZeRO-3 checkpoint -> tp 2 x cp 2 with sequence parallelism" \
  np 4 "${train[@]}" --tp 2 --cp 2 --sequence-parallel --resume "$dir/c22/step_00000008" --steps 10 \
  --metrics "$dir/m-tp-cp.jsonl"
grep -q '"step":10' "$dir/m-tp-cp.jsonl" || { fail "tp 2 x cp 2 did not reach step 10"; show; }

# --- llama (RoPE at the causal split's positions, grouped-query kv heads around the ring).
llama=("${train[@]}" --model llama-tiny)
expect_ok "llama, 1 rank" np 1 "${llama[@]}" --metrics "$dir/l1.jsonl"
expect_ok "llama, cp 2 x pp 2 zb-h1" np 4 "${llama[@]}" --cp 2 --pp 2 --schedule zb-h1 --metrics "$dir/l22.jsonl"
same_losses "llama cp 2 x pp 2: steps 1-8 within 1e-5 of one rank" "$dir/l1.jsonl" "$dir/l22.jsonl" 1 8 1e-5

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all context parallel training checks passed"
