#!/usr/bin/env bash
# meshbench scaling on a generated corpus with the tiny model: strong and weak runs of two layouts,
# the CSV and JSON rows complete, the weak runs' global batch grown with the ranks, the strong runs'
# losses equal across layouts (the same training on any layout), the prediction column filled, the
# PNG drawn (where gnuplot is installed), and bad options refused. Arguments: MESHBENCH MPIEXEC
# MESHTRAIN. No timing is asserted.
set -u
meshbench=$1 mpiexec=$2 meshtrain=$3
run_timeout=240
source "$(dirname "$0")/../../commands/tests/cli_test_lib.sh"
program=meshbench
prepare_corpus 7

args=(--data "$dir/data" --tokenizer bytes --model tiny --seq-len 16 --global-batch 4 --micro-batch 2 --skip 1
      --cpu-threads 1 --train-args "--device cpu" --mpirun "$mpiexec --oversubscribe")
if expect_ok "scaling 1x1x1,2x1x1,1x1x2 strong and weak" "$meshbench" scaling "${args[@]}" --steps 3 \
     --layouts 1x1x1,2x1x1,1x1x2 --predict --out "$dir/s" --json "$dir/s.jsonl"; then
  csv=$dir/s/scaling.csv
  [ "$(head -1 "$csv")" = "mode,layout,ranks,dp,tp,pp,v,global_batch,micro_batch,step_s,tokens_per_s,efficiency,final_loss,predicted_s" ] ||
    fail "CSV header: $(head -1 "$csv")"
  [ "$(tail -n +2 "$csv" | wc -l)" = 6 ] || fail "expected 6 CSV rows, got $(tail -n +2 "$csv" | wc -l)"
  awk -F, 'NR > 1 && NF != 14 { bad = 1 } END { exit bad }' "$csv" || fail "a CSV row without 14 fields"
  # Weak scaling grows the global batch with the ranks; strong keeps it.
  awk -F, 'NR > 1 && $1 == "weak" && $8 != 4 * $3 { bad = 1 } NR > 1 && $1 == "strong" && $8 != 4 { bad = 1 } END { exit bad }' "$csv" &&
    echo "ok   global batch: strong fixed, weak x ranks" || fail "global batch column wrong"
  # Efficiency of the baseline is 1, every step time and prediction positive.
  awk -F, 'NR > 1 && $2 == "1x1x1" && ($12 < 0.9999 || $12 > 1.0001) { bad = 1 } NR > 1 && ($10 <= 0 || $14 <= 0) { bad = 1 } END { exit bad }' "$csv" &&
    echo "ok   baseline efficiency 1, times and predictions positive" || fail "efficiency/time/prediction columns wrong"
  # The same training on every layout: the strong runs' final losses agree (fp32 sums in another order).
  awk -F, 'NR > 1 && $1 == "strong" { if (ref == "") ref = $13; d = $13 - ref; if (d < 0) d = -d; if (d > 1e-4 * ref) bad = 1 } END { exit bad }' "$csv" &&
    echo "ok   strong runs reach the same loss on every layout" || fail "strong-scaling losses differ: $(cut -d, -f1,2,13 "$csv" | tr '\n' ' ')"
  [ "$(grep -c '"bench":"scaling"' "$dir/s.jsonl")" = 6 ] || fail "expected 6 JSON rows"
  grep -q '"predicted_s":' "$dir/s.jsonl" || fail "JSON rows lack predicted_s"
  if command -v gnuplot >/dev/null; then
    [ "$(head -c 8 "$dir/s/scaling.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
      echo "ok   scaling.png is a PNG" || fail "scaling.png is not a PNG"
  fi
fi

expect_error "bad layout" "--layouts: '2x2' is not" "$meshbench" scaling "${args[@]}" --steps 3 --layouts 2x2 --out "$dir/bad"
expect_error "steps not above skip" "--steps must be larger than --skip" "$meshbench" scaling "${args[@]}" --steps 1 --out "$dir/bad"
expect_error "a failing run names its layout" "for strong-1x3x1" "$meshbench" scaling "${args[@]}" --steps 3 --layouts 1x3x1 --mode strong --out "$dir/bad"

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all scaling smoke checks passed"
