#!/usr/bin/env bash
# Checkpoints across ZeRO stages: --zero 3 (and 2) save their owned shards as global tensors like
# 0/1, so a checkpoint moves between every stage and data-parallel size. Same layout and stage:
# losses bit for bit and identical step-8 files; another stage or layout: 1e-5 relative (sums in
# another order, as checkpoint_cli_test.sh; 1e-4 in bf16). Tiny model, 8 steps, a checkpoint every 4.
# About 50 s.
# Usage: zero_checkpoint_cli_test.sh MESHTRAIN MPIEXEC COMPARE_LOSSES
set -u
meshtrain=$1
mpiexec=$2
compare=$3
. "$(dirname "$0")/cli_test_lib.sh"

prepare_corpus 12
data=$dir/data
train=("$meshtrain" train --device cpu --tokenizer bytes --data "$data" --model tiny --seq-len 32 --global-batch 8
       --micro-batch 2 --lr 3e-3 --warmup 2 --log-every 4 --eval-batches 1 --cpu-threads 1 --steps 8)
files() { grep -o '"xxh3": *"[0-9a-f]*"' "$1/step_00000008/manifest.json" | sort; }

# --- zero 3 on dp 2 x pp 2 (the tied embedding's two copies): exact resume, then other stages.
expect_ok "train dp 2 x pp 2 zero 3, checkpoints at 4 and 8" \
  np 4 "${train[@]}" --dp 2 --pp 2 --zero 3 --checkpoint-dir "$dir/c3" --save-every 4 --metrics "$dir/m3.jsonl"
cp -r "$dir/c3" "$dir/c3-resume"
expect_ok "resume dp 2 x pp 2 zero 3 from step 4" \
  np 4 "${train[@]}" --dp 2 --pp 2 --zero 3 --checkpoint-dir "$dir/c3-resume" --resume "$dir/c3-resume/step_00000004" \
  --metrics "$dir/m3-resume.jsonl"
grep -q "saved on dp 2 x tp 1 x pp 2, 1f1b, zero 3 on 4 rank(s)" "$out" || { fail "no resume line naming zero 3"; show; }
same_losses "zero 3, same layout: losses of steps 5-8 bit for bit" "$dir/m3.jsonl" "$dir/m3-resume.jsonl" 5 8 0
if [ "$(files "$dir/c3")" = "$(files "$dir/c3-resume")" ] && [ -n "$(files "$dir/c3")" ]; then
  echo "ok   zero 3, same layout: step-8 checkpoints identical (parameters and optimizer state)"
else
  fail "zero 3, same layout: step-8 checkpoints differ"
fi
for to in "--dp 2 --pp 2 --zero 2" "--dp 2 --pp 2 --zero 1" "--dp 4 --zero 0" "--dp 4 --zero 2"; do
  tag=${to//[- ]/}
  expect_ok "resume zero 3 dp 2 x pp 2 -> $to" \
    np 4 "${train[@]}" $to --resume "$dir/c3/step_00000004" --metrics "$dir/m-$tag.jsonl"
  same_losses "zero 3 -> $to: steps 5-8 within 1e-5" "$dir/m3.jsonl" "$dir/m-$tag.jsonl" 5 8 1e-5
done

# --- the reverse: zero 0 and 1 checkpoints into zero 3 and 2, on another dp.
expect_ok "train dp 4 zero 0, checkpoints at 4 and 8" \
  np 4 "${train[@]}" --dp 4 --zero 0 --checkpoint-dir "$dir/c0" --save-every 4 --metrics "$dir/m0.jsonl"
expect_ok "resume zero 0 dp 4 -> dp 2 x tp 2 zero 3" \
  np 4 "${train[@]}" --dp 2 --tp 2 --zero 3 --resume "$dir/c0/step_00000004" --metrics "$dir/m0-3.jsonl"
same_losses "zero 0 dp 4 -> zero 3 dp 2 x tp 2: steps 5-8 within 1e-5" "$dir/m0.jsonl" "$dir/m0-3.jsonl" 5 8 1e-5
expect_ok "train dp 2 zero 2, checkpoints at 4 and 8" \
  np 2 "${train[@]}" --dp 2 --zero 2 --checkpoint-dir "$dir/c2" --save-every 4 --metrics "$dir/m2.jsonl"
expect_ok "resume dp 2 zero 2 from step 4" \
  np 2 "${train[@]}" --dp 2 --zero 2 --resume "$dir/c2/step_00000004" --metrics "$dir/m2-resume.jsonl"
same_losses "zero 2, same layout: losses of steps 5-8 bit for bit" "$dir/m2.jsonl" "$dir/m2-resume.jsonl" 5 8 0
expect_ok "resume zero 2 dp 2 -> dp 4 zero 3" \
  np 4 "${train[@]}" --dp 4 --zero 3 --resume "$dir/c2/step_00000004" --metrics "$dir/m2-3.jsonl"
same_losses "zero 2 dp 2 -> zero 3 dp 4: steps 5-8 within 1e-5" "$dir/m2.jsonl" "$dir/m2-3.jsonl" 5 8 1e-5

# --- zero 3 with vocabulary pieces (2048 embedding rows: 4 pieces of 512, each a parameter of its
# own): the pieces save as rows of the one global tensor, resume bit for bit and reshard to zero 0.
pieces=("${train[@]}" --padded-vocab 2048)
expect_ok "train dp 2 x pp 2 zero 3 with vocabulary pieces, checkpoints at 4 and 8" \
  np 4 "${pieces[@]}" --dp 2 --pp 2 --zero 3 --checkpoint-dir "$dir/cv" --save-every 4 --metrics "$dir/mv.jsonl"
expect_ok "resume it on the same layout from step 4" \
  np 4 "${pieces[@]}" --dp 2 --pp 2 --zero 3 --resume "$dir/cv/step_00000004" --metrics "$dir/mv-resume.jsonl"
same_losses "zero 3 pieces, same layout: losses of steps 5-8 bit for bit" "$dir/mv.jsonl" "$dir/mv-resume.jsonl" 5 8 0
expect_ok "resume zero 3 pieces dp 2 x pp 2 -> dp 4 zero 0" \
  np 4 "${pieces[@]}" --dp 4 --zero 0 --resume "$dir/cv/step_00000004" --metrics "$dir/mv-0.jsonl"
same_losses "zero 3 pieces -> zero 0 dp 4: steps 5-8 within 1e-5" "$dir/mv.jsonl" "$dir/mv-0.jsonl" 5 8 1e-5

# --- zero 2 and zero 1 in bf16 over dp 2 x pp 2: the GEMM weights keep only owned fp32 shards
# (zero 2) or a master current only in the owned blocks (zero 1), their bf16 copy gathered after
# each step; saved as global tensors, resumed bit for bit; zero 2's then resharded to zero 1 dp 4.
for zero in 2 1; do
  expect_ok "train dp 2 x pp 2 zero $zero bf16, checkpoints at 4 and 8" \
    np 4 "${train[@]}" --dp 2 --pp 2 --zero $zero --compute-dtype bf16 --checkpoint-dir "$dir/c${zero}b" \
    --save-every 4 --metrics "$dir/m${zero}b.jsonl"
  expect_ok "resume it on the same layout from step 4" \
    np 4 "${train[@]}" --dp 2 --pp 2 --zero $zero --compute-dtype bf16 --resume "$dir/c${zero}b/step_00000004" \
    --metrics "$dir/m${zero}b-resume.jsonl"
  same_losses "zero $zero bf16, same layout: losses of steps 5-8 bit for bit" "$dir/m${zero}b.jsonl" \
    "$dir/m${zero}b-resume.jsonl" 5 8 0
done
expect_ok "resume zero 2 bf16 dp 2 x pp 2 -> dp 4 zero 1 bf16" \
  np 4 "${train[@]}" --dp 4 --zero 1 --compute-dtype bf16 --resume "$dir/c2b/step_00000004" --metrics "$dir/m2b-1.jsonl"
same_losses "zero 2 bf16 -> zero 1 bf16 dp 4: steps 5-8 within 1e-4" "$dir/m2b.jsonl" "$dir/m2b-1.jsonl" 5 8 1e-4

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
