#!/usr/bin/env bash
# meshbench context at a small size under mpirun: one row per cp, the JSON rows complete and
# consistent (tokens/s = batch x seq-len / step time; cp 1 sends nothing around a ring, cp > 1 does;
# cp 2 holds less memory per rank than cp 1 at the same sequence length; the memory model's
# prediction is at or above the measured peak), and bad options get one clear error. Arguments: MESHBENCH MPIEXEC MESHTRAIN. No timing is asserted.
set -u
meshbench=$1 mpiexec=$2
source "$(dirname "$0")/../../commands/tests/cli_test_lib.sh"
program=meshbench

small=(--model llama-tiny --seq-len 256 --steps 1 --warmup 1 --device cpu --cpu-threads 1)
if expect_ok "context np 2, cp 1 and 2" np 2 "$meshbench" context "${small[@]}" --cp-sizes 1,2 --json "$dir/c.jsonl"; then
  for cp in 1 2; do
    grep -qE "^$cp +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9.]+ +[0-9.]+$" "$out" ||
      { fail "no row for cp $cp"; show; }
  done
fi
[ "$(grep -c '"bench":"context"' "$dir/c.jsonl" 2>/dev/null)" = 2 ] || fail "expected 2 JSON rows in $dir/c.jsonl"
field() { grep -oE "\"$1\":-?[0-9.eE+-]+" <<<"$2" | head -1 | cut -d: -f2; }
one=$(grep '"cp":1' "$dir/c.jsonl") two=$(grep '"cp":2' "$dir/c.jsonl")
for row in "$one" "$two"; do
  s=$(field step_s "$row") t=$(field tokens_per_s "$row")
  awk -v s="$s" -v t="$t" 'BEGIN { exit (s > 0 && (t - 256 / s) ^ 2 < 1e-6 * t * t) ? 0 : 1 }' ||
    fail "tokens/s is not batch x seq-len / step time: $row"
done
awk -v a="$(field ring_bytes_per_rank "$one")" -v b="$(field ring_bytes_per_rank "$two")" \
  'BEGIN { exit (a == 0 && b > 0) ? 0 : 1 }' && echo "ok   only cp 2 passes blocks around a ring" ||
  fail "ring bytes: cp 1 should send none and cp 2 some: $one / $two"
awk -v a="$(field peak_bytes_per_rank "$one")" -v b="$(field peak_bytes_per_rank "$two")" \
  'BEGIN { exit (b > 0 && b < a) ? 0 : 1 }' && echo "ok   cp 2 peaks lower per rank than cp 1" ||
  fail "peak memory per rank: cp 2 should be below cp 1: $one / $two"

# The memory model bounds the allocator's peak from above (perf/memory_model.h), ring buffers included.
for row in "$one" "$two"; do
  awk -v p="$(field predicted_peak_bytes_per_rank "$row")" -v m="$(field peak_bytes_per_rank "$row")" \
    'BEGIN { exit (p >= m && m > 0) ? 0 : 1 }' || fail "predicted memory below the measured peak: $row"
done

expect_error "cp larger than the job" "cp 4 needs 4 ranks, the job has 2" np 2 "$meshbench" context "${small[@]}" --cp-sizes 4
expect_error "sequence not in 2 x cp chunks" "must be a multiple of 4" np 2 "$meshbench" context "${small[@]}" --seq-len 258 --cp-sizes 2
expect_error "bad size" "'x' is not a positive whole number" np 2 "$meshbench" context "${small[@]}" --cp-sizes 1,x

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all context smoke checks passed"
