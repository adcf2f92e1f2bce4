#!/usr/bin/env bash
# meshbench overlap at a tiny size under mpirun: the four measurements and the efficiency line come
# out, the JSON row is complete and its numbers agree with each other (hidden = serial - overlapped,
# efficiency = hidden / min(compute, communication)), and bad options get one clear error. --zero 3:
# the prefetch off/on rows and the hidden line; off prefetches nothing, on prefetches, and the JSON
# row's hidden fraction is 1 - wait(on) / wait(off).
# Arguments: MESHBENCH MPIEXEC MESHTRAIN. No timing is asserted.
set -u
meshbench=$1 mpiexec=$2
source "$(dirname "$0")/../../commands/tests/cli_test_lib.sh"
program=meshbench

small=(--model tiny --layers 2 --batch 2 --seq-len 16 --steps 2 --warmup 1 --bucket-mb 0.1 --device cpu --cpu-threads 1)
for zero in 0 1; do
  if expect_ok "overlap np 2 zero $zero" np 2 "$meshbench" overlap "${small[@]}" --zero "$zero" --json "$dir/o.jsonl"; then
    for m in compute communication serial overlapped; do
      grep -qE "^$m +[0-9.]+ +[0-9.]+ " "$out" || { fail "zero $zero: no '$m' row"; show; }
    done
    grep -qE "overlap efficiency -?[0-9.]+" "$out" || fail "zero $zero: no efficiency line"
    grep -q "2 rank(s) on 1 host(s), dp 2, backend mpi" "$out" || fail "zero $zero: header lacks ranks/hosts/backend"
  fi
done
[ "$(grep -c '"bench":"overlap"' "$dir/o.jsonl" 2>/dev/null)" = 2 ] || fail "expected 2 JSON rows in $dir/o.jsonl"
# Every row: the derived numbers equal their definitions.
field() { grep -oE "\"$1\":-?[0-9.eE+-]+" <<<"$2" | head -1 | cut -d: -f2; }
while read -r row; do
  c=$(field compute_s "$row") m=$(field comm_s "$row") s=$(field serial_s "$row") o=$(field overlapped_s "$row")
  h=$(field hidden_s "$row") e=$(field efficiency "$row") b=$(field buckets "$row")
  awk -v c="$c" -v m="$m" -v s="$s" -v o="$o" -v h="$h" -v e="$e" -v b="$b" 'BEGIN {
    small = c < m ? c : m
    ok = c > 0 && m > 0 && s > 0 && o > 0 && b >= 2
    ok = ok && (h - (s - o)) ^ 2 < 1e-12 && (e - h / small) ^ 2 < 1e-9
    exit ok ? 0 : 1 }' && echo "ok   JSON row consistent (buckets $b, efficiency $e)" ||
    fail "JSON row inconsistent: $row"
done <"$dir/o.jsonl"

if expect_ok "overlap np 2 zero 3" np 2 "$meshbench" overlap "${small[@]}" --zero 3 --json "$dir/z3.jsonl"; then
  for m in off on; do
    grep -qE "^$m +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+" "$out" || { fail "zero 3: no prefetch '$m' row"; show; }
  done
  grep -qE "^off( +[0-9.]+){4} +0$" "$out" || fail "zero 3: prefetch off prefetched something"
  grep -qE "^on( +[0-9.]+){4} +[1-9][0-9]*$" "$out" || fail "zero 3: prefetch on prefetched nothing"
  grep -qE "of the gathering hidden" "$out" || fail "zero 3: no hidden line"
  grep -q "2 rank(s) on 1 host(s), dp 2, backend mpi" "$out" || fail "zero 3: header lacks ranks/hosts/backend"
  row=$(grep '"zero":3' "$dir/z3.jsonl")
  off=$(field gather_wait_s_no_prefetch "$row") on=$(field gather_wait_s_prefetch "$row")
  hf=$(field hidden_fraction "$row") p=$(field prefetched_per_step "$row")
  awk -v off="$off" -v on="$on" -v hf="$hf" -v p="$p" 'BEGIN {
    ok = off > 0 && on >= 0 && p >= 1 && (hf - (1 - on / off)) ^ 2 < 1e-9
    exit ok ? 0 : 1 }' && echo "ok   zero 3 JSON row consistent (hidden fraction $hf)" ||
    fail "zero 3 JSON row inconsistent: $row"
fi

expect_error "bad --zero" "--zero must be 0 or 1" np 2 "$meshbench" overlap "${small[@]}" --zero 2
expect_error "sequence longer than the model" "--seq-len is longer" np 2 "$meshbench" overlap --model tiny --seq-len 999 --device cpu
expect_error "unknown option" "bogus" np 2 "$meshbench" overlap --bogus

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all overlap smoke checks passed"
