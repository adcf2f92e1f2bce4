#!/usr/bin/env bash
# Checkpoints end to end, through mpirun: exact resume on the same layout, resharded resume onto other
# layouts and rank counts, a run killed while saving, every kind of bad checkpoint, and conversion to
# llm.c weights and back, the learning rate's horizon across a resume that raises --steps, one run's line
# of checkpoints per directory (a relaunch without --resume refused, newer steps set aside). Tiny model,
# bytes tokenizer, generated text; 8 steps, a checkpoint every 4.
# Usage: checkpoint_cli_test.sh MESHTRAIN MPIEXEC COMPARE_LOSSES
#
# Tolerances: the same layout resumed must give the same losses bit for bit (every state that shapes
# a step is restored: parameters, AdamW moments and step count, data position). Another layout sums
# in another order, so its losses may differ in the last bits of fp32, growing over a few steps:
# 1e-5 relative, as the equivalence tests of the layouts themselves.
set -u
meshtrain=$1
mpiexec=$2
compare=$3
. "$(dirname "$0")/cli_test_lib.sh"

# Every rank exits on its own after an agreed error: no MPI_Abort.
extra_error_checks() {
  grep -q "MPI_ABORT was invoked" "$err" && { fail "$1: the job was aborted instead of every rank exiting"; show; }
  return 0
}

# --- a corpus of generated sentences.
prepare_corpus 11
data=$dir/data

base=("$meshtrain" train --device cpu --tokenizer bytes --data "$data" --model tiny --seq-len 32 --global-batch 8 --micro-batch 2
      --lr 3e-3 --warmup 2 --log-every 4 --eval-batches 1 --cpu-threads 1)
train=("${base[@]}" --steps 8)

# --- exact resume, 2 x 2 x 2 with ZeRO-1 on 8 ranks.
L222=(--dp 2 --tp 2 --pp 2 --zero 1)
expect_ok "train 2x2x2 zero 1, checkpoints at 4 and 8" \
  np 8 "${train[@]}" "${L222[@]}" --checkpoint-dir "$dir/c222" --save-every 4 --metrics "$dir/m222.jsonl"
grep -q "saved checkpoint $dir/c222/step_00000004" "$out" || { fail "no save line for step 4"; show; }
[ "$(cat "$dir/c222/latest" 2>/dev/null)" = "step_00000008" ] || fail "latest does not name step_00000008"
grep -q '"timing":{"step":4,"steps":' "$dir/m222.jsonl" || fail "no per-rank timing in the metrics"
grep '"timing":{"step":8' "$dir/m222.jsonl" | grep -q '"rank":7,"compute_ms"' || fail "timing lacks rank 7"
grep -q -E '^ +time: compute [0-9]+% \| exposed comm [0-9]+% \| bubble [0-9]+%' "$out" || { fail "no timing line"; show; }
# A copy of the run, resumed from its own step 4: its step 8 is set aside, and saved again.
cp -r "$dir/c222" "$dir/c222-resume"
expect_ok "resume 2x2x2 from step 4" \
  np 8 "${train[@]}" "${L222[@]}" --checkpoint-dir "$dir/c222-resume" --resume "$dir/c222-resume/step_00000004" \
  --metrics "$dir/m222-resume.jsonl"
grep -q -E "resumed from $dir/c222-resume/step_00000004: step 4, 32 sequences consumed \(saved on dp 2 x tp 2 x pp 2, 1f1b, zero 1 on 8 rank\(s\)\)" "$out" ||
  { fail "no resume line"; show; }
same_losses "same layout: losses of steps 5-8 bit for bit" "$dir/m222.jsonl" "$dir/m222-resume.jsonl" 5 8 0
# Bit-exact state: the resumed run's step-8 shard files hash like the uninterrupted run's.
files() { grep -o '"xxh3": *"[0-9a-f]*"' "$1/step_00000008/manifest.json" | sort; }
if [ "$(files "$dir/c222")" = "$(files "$dir/c222-resume")" ] && [ -n "$(files "$dir/c222")" ]; then
  echo "ok   same layout: step-8 checkpoints identical (parameters and optimizer state)"
else
  fail "same layout: step-8 checkpoints differ"
fi

# --- resharding: 2x2x2 -> 1x1x1.
expect_ok "resume 2x2x2 -> 1 rank" \
  np 1 "${train[@]}" --resume "$dir/c222/step_00000004" --metrics "$dir/m111-from222.jsonl"
same_losses "2x2x2 -> 1x1x1: steps 5-8 within 1e-5" "$dir/m222.jsonl" "$dir/m111-from222.jsonl" 5 8 1e-5

# --- 1x1x1 -> dp 2 x pp 2 (2,1,2), 4 ranks.
expect_ok "train 1 rank, checkpoints at 4 and 8" \
  np 1 "${train[@]}" --checkpoint-dir "$dir/c111" --save-every 4 --metrics "$dir/m111.jsonl"
expect_ok "resume 1 rank -> dp 2 x pp 2" \
  np 4 "${train[@]}" --dp 2 --pp 2 --resume "$dir/c111/step_00000004" --metrics "$dir/m212-from111.jsonl"
same_losses "1x1x1 -> 2x1x2: steps 5-8 within 1e-5" "$dir/m111.jsonl" "$dir/m212-from111.jsonl" 5 8 1e-5

# --- 1x1x1 -> pp 2 interleaved with 2 chunks per stage: the layers cut into 4 chunks, 2 ranks.
expect_ok "resume 1 rank -> pp 2 interleaved v2" \
  np 2 "${train[@]}" --pp 2 --schedule interleaved --virtual-stages 2 --resume "$dir/c111/step_00000004" \
  --metrics "$dir/m-v2-from111.jsonl"
same_losses "1x1x1 -> pp 2 v 2: steps 5-8 within 1e-5" "$dir/m111.jsonl" "$dir/m-v2-from111.jsonl" 5 8 1e-5

# --- zero-bubble schedules: zb-v resumes itself bit for bit; checkpoints move between zb-v (the
# V puts the embedding and the head on stage 0), 1F1B and zb-h1.
expect_ok "train pp 2 zb-v, checkpoints at 4 and 8" \
  np 2 "${train[@]}" --pp 2 --schedule zb-v --checkpoint-dir "$dir/czbv" --save-every 4 --metrics "$dir/mzbv.jsonl"
expect_ok "resume pp 2 zb-v from step 4" \
  np 2 "${train[@]}" --pp 2 --schedule zb-v --resume "$dir/czbv/step_00000004" --metrics "$dir/mzbv-resume.jsonl"
same_losses "zb-v, same layout: losses of steps 5-8 bit for bit" "$dir/mzbv.jsonl" "$dir/mzbv-resume.jsonl" 5 8 0
expect_ok "resume pp 2 zb-v -> pp 2 1f1b" \
  np 2 "${train[@]}" --pp 2 --resume "$dir/czbv/step_00000004" --metrics "$dir/m1f1b-from-zbv.jsonl"
same_losses "zb-v -> 1f1b: steps 5-8 within 1e-5" "$dir/mzbv.jsonl" "$dir/m1f1b-from-zbv.jsonl" 5 8 1e-5
expect_ok "resume 1 rank -> pp 2 zb-h1" \
  np 2 "${train[@]}" --pp 2 --schedule zb-h1 --resume "$dir/c111/step_00000004" --metrics "$dir/mzbh1-from111.jsonl"
same_losses "1x1x1 -> pp 2 zb-h1: steps 5-8 within 1e-5" "$dir/m111.jsonl" "$dir/mzbh1-from111.jsonl" 5 8 1e-5
expect_ok "convert 1 rank -> pp 2 zb-v shards offline" \
  "$meshtrain" convert --from "$dir/c111/step_00000004" --to "$dir/c111-as-zbv" --pp 2 --schedule zb-v
expect_ok "resume the converted zb-v shards" \
  np 2 "${train[@]}" --pp 2 --schedule zb-v --resume "$dir/c111-as-zbv/step_00000004" --metrics "$dir/mzbv-conv.jsonl"
same_losses "1x1x1 -> zb-v converted offline: steps 5-8 within 1e-5" "$dir/m111.jsonl" "$dir/mzbv-conv.jsonl" 5 8 1e-5

# --- dp 2 x tp 2 with ZeRO-1 -> dp 4 without, 4 ranks.
expect_ok "train dp 2 x tp 2 zero 1" \
  np 4 "${train[@]}" --dp 2 --tp 2 --zero 1 --checkpoint-dir "$dir/c221" --save-every 4 --metrics "$dir/m221.jsonl"
expect_ok "resume dp2 tp2 zero1 -> dp 4 zero 0" \
  np 4 "${train[@]}" --dp 4 --zero 0 --resume "$dir/c221/step_00000004" --metrics "$dir/m411-from221.jsonl"
same_losses "2x2x1 zero 1 -> 4x1x1 zero 0: steps 5-8 within 1e-5" "$dir/m221.jsonl" "$dir/m411-from221.jsonl" 5 8 1e-5

# --- the learning rate's decay horizon is kept by the checkpoint (issue 16): trained 20 steps,
# resumed with --steps 40, step 21 continues at the cosine's floor instead of jumping back up to the
# middle of a 40-step decay; --lr-decay-steps 40 stretches it deliberately.
lr_at() { grep "^{\"step\":$2," "$1" | tail -1 | sed 's/.*"lr":\([^,]*\),.*/\1/'; }
below() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }
expect_ok "train 20 steps, a checkpoint at 20" \
  np 1 "${base[@]}" --steps 20 --checkpoint-dir "$dir/c20" --metrics "$dir/m20.jsonl"
expect_ok "resume it with --steps 40" \
  np 1 "${base[@]}" --steps 40 --resume "$dir/c20/step_00000020" --metrics "$dir/m20-40.jsonl" &&
  { grep -q "note: the learning rate keeps decaying over the checkpoint's 20 steps (--steps 40 trains past it" "$out" ||
      { fail "no note naming both horizons"; show; }; }
lr20=$(lr_at "$dir/m20.jsonl" 20) lr21=$(lr_at "$dir/m20-40.jsonl" 21) lr40=$(lr_at "$dir/m20-40.jsonl" 40)
if [ -n "$lr20" ] && [ -n "$lr21" ] && below "$lr21" "$lr20" && [ "$lr21" = "$lr40" ]; then
  echo "ok   --steps raised on resume: lr $lr20 at step 20, $lr21 (the floor) at 21 and 40"
else
  fail "--steps raised on resume: lr ${lr20:-?} at step 20, ${lr21:-?} at 21, ${lr40:-?} at 40 (expected no jump up)"
fi
expect_ok "resume it with --steps 40 --lr-decay-steps 40" \
  np 1 "${base[@]}" --steps 40 --lr-decay-steps 40 --resume "$dir/c20/step_00000020" --metrics "$dir/m20-stretch.jsonl" &&
  { grep -q "note: --lr-decay-steps 40 replaces the checkpoint's learning-rate horizon of 20 steps" "$out" ||
      { fail "no note on the replaced horizon"; show; }; }
lr21=$(lr_at "$dir/m20-stretch.jsonl" 21)
[ -n "$lr21" ] && ! below "$lr21" "$lr20" && echo "ok   --lr-decay-steps 40: lr $lr21 at step 21, the stretched decay" ||
  fail "--lr-decay-steps 40: lr ${lr21:-?} at step 21, expected above step 20's $lr20"

# --- a run killed while saving: the previous checkpoint stays in force, resume takes it.
L212=(--dp 2 --pp 2)
for point in shard@1 sidecar@3 manifest rename latest; do
  ck=$dir/crash-${point%@*}
  MESHTRAIN_FAULT_SAVE="${point%@*}:4${point#${point%@*}}" run np 4 "${train[@]}" "${L212[@]}" \
    --checkpoint-dir "$ck" --save-every 2 --metrics "$dir/m-crash.jsonl"
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then fail "fault at '$point': exit code $rc, expected a crash"; show; continue; fi
  grep -q "injected fault" "$err" || { fail "fault at '$point': no injected-fault line"; show; }
  [ "$(cat "$ck/latest")" = "step_00000002" ] || fail "fault at '$point': latest is $(cat "$ck/latest"), expected step_00000002"
  expect_ok "fault at '$point' during the save of step 4: resume" \
    np 4 "${train[@]}" "${L212[@]}" --checkpoint-dir "$ck" --save-every 2 --resume --metrics "$dir/m-after-crash.jsonl" &&
    { grep -q "resumed from $ck/step_00000002: step 2" "$out" || { fail "fault at '$point': did not resume from step 2"; show; }; }
  same_losses "fault at '$point': steps 3-8 as the uninterrupted run within 1e-5" "$dir/m111.jsonl" "$dir/m-after-crash.jsonl" 3 8 1e-5
done

# --- bad checkpoints: one clear message, every rank exits, nothing written.
bad=$dir/bad
cp -r "$dir/c111" "$bad"
# Every run takes the directory's lock (.lock, naming the run): that file aside, nothing may change.
snapshot() { (cd "$bad" && find . -type f ! -path ./.lock -exec md5sum {} + | sort); }
before=$(snapshot)
expect_error "another model shape" "holds another model: layers=4 .* the options ask for layers=2" \
  np 2 "${train[@]}" --layers 2 --resume "$bad/step_00000004" --checkpoint-dir "$bad" --save-every 2
mv "$bad/step_00000004/rank_00000.bin" "$dir/saved.bin"
expect_error "missing shard" "rank_00000\.bin.*missing|missing.*rank_00000\.bin" \
  np 2 "${train[@]}" --dp 2 --resume "$bad/step_00000004" --checkpoint-dir "$bad" --save-every 2
mv "$dir/saved.bin" "$bad/step_00000004/rank_00000.bin"
cp "$bad/step_00000004/rank_00000.bin" "$dir/saved.bin"
printf '\x5a' | dd of="$bad/step_00000004/rank_00000.bin" bs=1 seek=5000 conv=notrunc status=none
expect_error "corrupt shard (one byte)" "rank_00000\.bin.*(corrupt|checksum)" \
  np 2 "${train[@]}" --dp 2 --resume "$bad/step_00000004" --checkpoint-dir "$bad" --save-every 2
cp "$dir/saved.bin" "$bad/step_00000004/rank_00000.bin"
cp "$bad/step_00000004/manifest.json" "$dir/saved.json"
sed -i 's/"format_version": *1/"format_version": 2/' "$bad/step_00000004/manifest.json"
expect_error "manifest of a newer format" "newer meshtrain: format 2" \
  np 2 "${train[@]}" --dp 2 --resume "$bad/step_00000004" --checkpoint-dir "$bad" --save-every 2
cp "$dir/saved.json" "$bad/step_00000004/manifest.json"
expect_error "resume with nothing saved" "no checkpoint yet|no .*latest" \
  np 2 "${train[@]}" --resume --checkpoint-dir "$dir/empty"

# --- one run's line of checkpoints per directory: a relaunch without --resume is refused; a resume
# of an older step sets the newer ones aside (a checkpoint directory of their own) and --keep prunes
# only the running line; --overwrite-checkpoints starts afresh; a resume from elsewhere is refused.
line=$dir/c-line
expect_ok "a run saving at 2, 4, 6 and 8" np 2 "${train[@]}" --dp 2 --checkpoint-dir "$line" --save-every 2 --keep 0
expect_error "a relaunch without --resume into its directory" \
  "^meshtrain: error: --checkpoint-dir $line already holds the checkpoints of an earlier run \(step_00000002 to step_00000008 \(4 checkpoints\)\): continue that run with --resume, start this one in another --checkpoint-dir, or add --overwrite-checkpoints to delete them$" \
  np 2 "${train[@]}" --dp 2 --checkpoint-dir "$line" --save-every 2
steps_in() { (cd "$1" && ls -d step_* 2>/dev/null | tr '\n' ' '); }
[ "$(steps_in "$line")" = "step_00000002 step_00000004 step_00000006 step_00000008 " ] &&
  [ "$(cat "$line/latest")" = step_00000008 ] && echo "ok   the refused relaunch left every checkpoint and latest" ||
  fail "the refused relaunch changed the directory: $(steps_in "$line"), latest $(cat "$line/latest")"
expect_ok "resume step 4 of 8 with --save-every 1 --keep 2 to step 7" \
  np 2 "${train[@]}" --dp 2 --checkpoint-dir "$line" --resume "$line/step_00000004" --steps 7 --save-every 1 --keep 2
aside=$(ls -d "$line"/set_aside/*_after_step_00000004 2>/dev/null)
grep -q -F "note: resuming step_00000004 of $line, which held newer checkpoints of a run that went further (step_00000006 to step_00000008 (2 checkpoints)): moved to $aside, a checkpoint directory of its own (--checkpoint-dir $aside --resume continues that run); \`latest\` names step_00000004" "$out" &&
  echo "ok   the newer steps are set aside, said at start" || { fail "no set-aside note"; show; }
[ "$(steps_in "$line")" = "step_00000006 step_00000007 " ] && [ "$(cat "$line/latest")" = step_00000007 ] &&
  echo "ok   --keep 2 pruned the running line only: $(steps_in "$line")" ||
  fail "after the resumed run: $(steps_in "$line"), latest $(cat "$line/latest")"
[ -n "$aside" ] && [ "$(steps_in "$aside")" = "step_00000006 step_00000008 " ] && [ "$(cat "$aside/latest")" = step_00000008 ] &&
  echo "ok   the earlier run's steps 6 and 8 kept in $aside" || fail "set aside: '$aside' holds $(steps_in "$aside")"
expect_ok "continue the set-aside run" np 2 "${train[@]}" --dp 2 --checkpoint-dir "$aside" --resume --steps 9
grep -q "resumed from $aside/step_00000008: step 8," "$out" && echo "ok   it resumed its step 8" || { fail "no resume of step 8"; show; }
expect_error "a resume from another directory into this one" \
  "^meshtrain: error: --checkpoint-dir $line holds the checkpoints of another run \(step_00000006 to step_00000007 \(2 checkpoints\)\), and --resume takes $dir/c111/step_00000004 from outside it" \
  np 2 "${train[@]}" --dp 2 --checkpoint-dir "$line" --resume "$dir/c111/step_00000004"
expect_ok "--overwrite-checkpoints" np 2 "${train[@]}" --dp 2 --checkpoint-dir "$line" --overwrite-checkpoints --steps 2
grep -q -F "note: --overwrite-checkpoints: deleted the earlier run's checkpoints in $line (step_00000006 to step_00000007 (2 checkpoints))" "$out" &&
  [ "$(steps_in "$line")" = "step_00000002 " ] && [ "$(cat "$line/latest")" = step_00000002 ] &&
  echo "ok   --overwrite-checkpoints deleted the earlier line, said so, and saved its own" ||
  { fail "--overwrite-checkpoints: $(steps_in "$line"), latest $(cat "$line/latest")"; show; }
[ -n "$before" ] && [ "$before" = "$(snapshot)" ] && echo "ok   nothing written into the checkpoint directory by the failed runs" ||
  fail "the failed runs changed $bad"

# --- convert: checkpoint -> llm.c -> checkpoint for tp 2 -> resume on tp 2 (weights only) and sample.
expect_ok "convert checkpoint -> llm.c" "$meshtrain" convert --from "$dir/c111/step_00000008" --to "$dir/w.bin"
size=$(stat -c %s "$dir/w.bin" 2>/dev/null || echo 0)
[ "$size" -eq $((1024 + 220544 * 4)) ] && echo "ok   llm.c file of $size bytes" || fail "llm.c file has $size bytes"
expect_ok "sample from the checkpoint" "$meshtrain" sample --device cpu --tokenizer bytes --weights "$dir/c111" --prompt "the " \
  --tokens 8 --seed 3 --cpu-threads 1 && cp "$out" "$dir/s-ckpt"
expect_ok "sample from the llm.c file" "$meshtrain" sample --device cpu --tokenizer bytes --weights "$dir/w.bin" --prompt "the " \
  --tokens 8 --seed 3 --cpu-threads 1 && cp "$out" "$dir/s-llmc"
cmp -s "$dir/s-ckpt" "$dir/s-llmc" && echo "ok   same text from checkpoint and llm.c file" || fail "samples differ"
expect_ok "convert llm.c -> checkpoint for tp 2" "$meshtrain" convert --from "$dir/w.bin" --to "$dir/conv" --tp 2
expect_ok "train from the converted checkpoint on tp 2" \
  np 2 "${base[@]}" --tp 2 --steps 10 --resume --checkpoint-dir "$dir/conv" &&
  { grep -q "weights only" "$out" || { fail "no weights-only note"; show; }; }
expect_ok "convert checkpoint 2x2x2 -> 1x1x1 offline" "$meshtrain" convert --from "$dir/c222" --to "$dir/c222-as-111"
expect_ok "resume the converted checkpoint on 1 rank" \
  np 1 "${base[@]}" --resume "$dir/c222-as-111/step_00000008" --steps 9 --metrics "$dir/m-conv.jsonl"
expect_ok "resume the original on 1 rank" \
  np 1 "${base[@]}" --resume "$dir/c222/step_00000008" --steps 9 --metrics "$dir/m-orig.jsonl"
same_losses "converted offline or not: step 9 bit for bit" "$dir/m-orig.jsonl" "$dir/m-conv.jsonl" 9 9 0

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
