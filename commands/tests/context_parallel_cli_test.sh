#!/usr/bin/env bash
# Context parallelism (--cp) around the trainer, end to end: train --help explains it, a --seq-len
# that does not cut into 2 x cp chunks is one UsageError from every rank's same check (no hang),
# `meshtrain plan` takes cp in --layout and chooses it for a 128K context, `meshtrain devices`
# shows the cp coordinates and groups. No training runs with --cp > 1 here.
# Usage: context_parallel_cli_test.sh MESHTRAIN [MPIEXEC]
set -u
meshtrain=$1
mpiexec=${2:-mpirun}
run_timeout=60
. "$(dirname "$0")/cli_test_lib.sh"

if expect_ok "train --help" "$meshtrain" train --help; then
  grep -q -- "--cp" "$out" || fail "train --help does not explain --cp"
  grep -q "chunks r and 2cp-1-r" "$out" || { fail "train --help: --cp does not say how it splits"; show; }
  grep -q "dp x tp x cp x pp must equal the number of ranks" "$out" || fail "train --help: the layout heading lacks cp"
fi

# --- the sequence must cut into 2 x cp chunks: checked before any data or device, on every rank alike.
train=(train --device cpu --cpu-threads 1 --tokenizer bytes --model tiny --data "$dir" --global-batch 4)
expect_error "--seq-len not a multiple of 2 x cp (2 ranks)" \
  "--cp 2 cuts each sequence into 4 chunks: --seq-len 30 must be a multiple of 4" \
  np 2 "$meshtrain" "${train[@]}" --cp 2 --seq-len 30
expect_error "--seq-len not a multiple of 2 x cp (4 ranks)" \
  "--cp 4 cuts each sequence into 8 chunks: --seq-len 20 must be a multiple of 8" \
  np 4 "$meshtrain" "${train[@]}" --cp 4 --seq-len 20
expect_error "--cp that does not fit the ranks" "--dp 0 x --tp 1 x --cp 4 x --pp 1|--tp 1 x --cp 4 x --pp 1 = 4 does not divide" \
  np 2 "$meshtrain" "${train[@]}" --cp 4 --seq-len 32
expect_error "--cp 0" "--tp, --cp and --pp must be at least 1" np 2 "$meshtrain" "${train[@]}" --cp 0

# --- plan: one layout with cp, and the search at a 128K context.
if expect_ok "plan --layout with cp" "$meshtrain" plan --model gpt2 --cluster dgx-a100 --global-batch 8 \
     --layout dp=4,cp=2,micro=1; then
  grep -q '^layout dp=4 tp=1 cp=2 pp=1 v=1 zero=0 micro=1 schedule=1f1b: ' "$out" || { fail "plan --layout cp: no layout line"; show; }
  grep -q "cp comm .*ring attention's kv blocks" "$out" || { fail "plan --layout cp: no cp comm line"; show; }
fi
expect_error "plan --layout cp not using the devices" "--layout cp=3: dp x tp x cp x pp = 6, but the cluster has 8 devices" \
  "$meshtrain" plan --model gpt2 --cluster dgx-a100 --global-batch 8 --layout cp=3
expect_error "plan --layout cp not cutting the sequence" "--layout cp=4: cp=4 cuts each sequence into 8 chunks: --seq-len 1020 must be a multiple of 8" \
  "$meshtrain" plan --model gpt2 --cluster dgx-a100 --global-batch 8 --seq-len 1020 --layout cp=4
if expect_ok "plan llama3-8b at 128K on 64 H100s" "$meshtrain" plan --model llama3-8b --max-seq-len 131072 \
     --seq-len 131072 --cluster dgx-h100 --nodes 8 --global-batch 8 --memory-options --top 3; then
  grep -q -E '^# +dpxtpxcpxpp ' "$out" || { fail "plan 128K: no cp in the table's mesh column"; show; }
  grep -q -E '^layout dp=[0-9]+ tp=[0-9]+ cp=([2-9]|[1-9][0-9]+) ' "$out" || { fail "plan 128K: the best layout has no cp"; show; }
  grep -q '^why cp [0-9]*: it splits each sequence' "$out" || { fail "plan 128K: no line saying why cp"; show; }
fi

# --- convert: a checkpoint cut for a cp layout (one copy of each shard over dp x cp), its manifest's cp.
prepare_corpus 3
if expect_ok "train 1 step: weights to convert" "$meshtrain" train --device cpu --cpu-threads 1 --tokenizer bytes \
     --model tiny --data "$dir/data" --seq-len 32 --global-batch 2 --micro-batch 2 --steps 1 --save-weights "$dir/w.bin"; then
  if expect_ok "convert --cp 2" "$meshtrain" convert --from "$dir/w.bin" --to "$dir/cp2" --dp 2 --cp 2 --seq-len 32; then
    grep -q "for dp 2 x tp 1 x cp 2 x pp 1" "$out" || { fail "convert --cp 2: the layout line lacks cp"; show; }
    grep -q '"cp": 2' "$dir/cp2/step_00000000/manifest.json" || { fail "convert --cp 2: the manifest lacks cp 2"; show; }
  fi
  expect_error "convert --cp not cutting --seq-len" "--cp 2 cuts each sequence into 4 chunks: --seq-len 30 must be a multiple of 4" \
    "$meshtrain" convert --from "$dir/w.bin" --to "$dir/cp2-bad" --cp 2 --seq-len 30
fi

# --- devices: each rank's coordinates, and the cp groups.
if expect_ok "devices --cp 2 on 4 ranks" np 4 "$meshtrain" devices --device cpu --cp 2; then
  grep -q -E '^.* 1 +.* dp 0 tp 0 cp 1 pp 0 *$' "$out" || { fail "devices --cp: rank 1 is not cp 1 of dp 0"; show; }
  grep -q '^cp groups (one sequence each): {0,1} {2,3}$' "$out" || { fail "devices --cp: no cp groups"; show; }
fi

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all checks passed"
