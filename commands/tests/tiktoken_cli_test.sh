#!/usr/bin/env bash
# cl100k end to end: `meshtrain prepare --tokenizer cl100k` writes version-2 shards (uint32 ids, the
# writer's vocabulary in the header), a gpt2-vocabulary model fed them stops at start with one line
# naming the shard, the token, the model's vocabulary and the tokenizer to use (also from rank 0
# alone under mpirun -np 2), and `train --tokenizer cl100k` trains a tiny GPT on them; the help
# names the tokenizers, and an unknown one lists them. Skips (exit 77) without assets/cl100k
# (scripts/fetch_tiktoken.sh).
# Usage: tiktoken_cli_test.sh MESHTRAIN MPIEXEC ASSETS
set -u
meshtrain=$1
mpiexec=$2
assets=$3
if [ ! -f "$assets/cl100k/cl100k_base.tiktoken" ]; then
  echo "skip: no $assets/cl100k/cl100k_base.tiktoken (run scripts/fetch_tiktoken.sh)"
  exit 77
fi
. "$(dirname "$0")/cli_test_lib.sh"

for k in $(seq 30); do
  printf 'Entry %d: the QUICK brown fox jumps over 12345 lazy dogs; I'"'"'M sure it'"'"'s fine. 日本語 🙂\n%%\n' "$k"
done >"$dir/corpus"
data=$dir/cl
expect_ok "prepare --tokenizer cl100k" "$meshtrain" prepare --tokenizer cl100k --input "$dir/corpus" --output "$data" \
  --val-fraction 0.1 &&
  { grep -q -E "prepared 30 document\(s\) from 1 file\(s\) with the cl100k tokenizer" "$out" || { fail "prepare summary"; show; }; }
shard=$data/cl_train_000000.bin
# Header: magic, version 2, the count, the vocabulary of 100277; the first id is <|endoftext|>.
header=$(od -An -v -td4 -N16 "$shard" | tr -s ' ' ' ' | sed 's/^ //; s/ $//')
count=$(od -An -v -td4 -j8 -N4 "$shard" | tr -d ' ')
[ "$header" = "20240520 2 $count 100277" ] && echo "ok   version-2 header: $header" || fail "header [$header]"
size=$(stat -c %s "$shard")
[ "$size" -eq $((1024 + 4 * count)) ] && echo "ok   uint32 ids: $size bytes" || fail "shard of $size bytes for $count tokens"
first=$(od -An -v -tu4 -j1024 -N4 "$shard" | tr -d ' ')
[ "$first" = 100257 ] && echo "ok   first id is cl100k's <|endoftext|>" || fail "first id $first"

line="token shard \"$shard\" holds token id 100257 at position 0, outside the vocabulary of 50257 tokens \(the shard was written by a tokenizer of 100277 tokens: --tokenizer cl100k\)"
expect_error "gpt preset (vocab 50257) on cl100k shards" "^meshtrain: error: $line\$" \
  "$meshtrain" train --device cpu --data "$data" --model tiny --steps 1 --cpu-threads 1
expect_rank0_error "the same under mpirun -np 2" "$line" 2 \
  "$meshtrain" train --device cpu --data "$data" --model tiny --steps 1 --cpu-threads 1

metrics=$dir/run/metrics.jsonl
if expect_ok "train --tokenizer cl100k" "$meshtrain" train --device cpu --tokenizer cl100k --data "$data" --model tiny \
     --steps 2 --global-batch 2 --micro-batch 2 --seq-len 32 --metrics "$metrics" --cpu-threads 1; then
  head -1 "$metrics" | grep -q '"model":"layers=4 heads=4 channels=64 max_seq_len=64 vocab=100277(100352)"' ||
    fail "metrics header: $(head -1 "$metrics")"
  [ "$(wc -l <"$metrics")" -eq 3 ] || fail "metrics: expected a header and 2 steps"
fi

run "$meshtrain" train --help
grep -q "cl100k or o200k" "$out" && echo "ok   train --help names cl100k and o200k" ||
  { fail "train --help"; show; }
expect_error "unknown tokenizer" "unknown --tokenizer 'p50k' \(known: gpt2, cl100k, o200k, bytes\)" \
  "$meshtrain" prepare --tokenizer p50k --output "$dir/x"

[ "$failures" -eq 0 ] && echo "all passed" || echo "$failures failure(s)"
exit $((failures > 0))
