#!/usr/bin/env bash
# Smoke test of `meshbench pipeline`: tiny compute times at 2 ranks (one pipeline) and at 4 (one
# pipeline of 4, and two side by side of 2), with and without overlap, sleep and gemm work, every
# schedule (zb-h1 and zb-v included). Checks the table (one row per configuration, the theory column
# is the formula (zb-v: its simulation), the simulate() column equals it for 1F1B and ZB-H1, the
# bubble lies in [0, 1), peak activations are GPipe's m, 1F1B's and ZB-H1's min(p, m), ZB-V's at most 2p),
# the JSON rows (the documented fields, the same numbers as the table, bubble = 1 - ideal / step),
# the summary, and that bad options give one clear error and exit 2. No timing is asserted.
# Usage: pipeline_smoke_test.sh MESHBENCH MPIEXEC MESHTRAIN
set -u
meshbench=$1
mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
run_timeout=180
program=meshbench
. "$here/../../commands/tests/cli_test_lib.sh"

tiny=(--forward-ms 0.4 --steps 2 --warmup 1 --activation-bytes 4K --cpu-threads 1 --device cpu)
fields=(bench ranks hosts device backend pipelines stages schedule virtual_stages micro_batches work overlap forward_s
        backward_s weight_share activation_bytes steps warmup step_s step_min_s ideal_s bubble bubble_best_step theory simulated ratio within_10pct
        model_step_s excess_s receive_wait_s other_s forward_call_s backward_call_s weight_call_s one_way_s peak_in_flight held_slots_peak
        rank_step_s rank_compute_s rank_receive_wait_s)

# The configuration rows of the table in $out: p, schedule, v, m, then 10 numbers.
table_rows() { awk '$1 ~ /^[0-9]+$/ && $2 ~ /^(gpipe|1f1b|interleaved|zb-h1|zb-v)$/ && NF == 14' "$out"; }

# check_table NAME ROWS: the row count, the cells, the theory formula, sim = theory for 1F1B, the
# bubble's range and the peak activations of GPipe and 1F1B.
check_table() {
  local name=$1 rows=$2 n bad
  n=$(table_rows | wc -l)
  if [ "$n" -ne "$rows" ]; then fail "$name: $n table row(s), expected $rows"; show; return; fi
  bad=$(table_rows | awk '
    NF != 14 { print "cells: " $0; next }
    { p = $1; v = $3; m = $4; idle = (p - 1) / v
      theory = sprintf("%.4f", idle / (m + idle))
      if ($2 == "zb-h1") theory = sprintf("%.4f", (p - 1) / (3 * m + p - 1))  # F = B = W: idle p-1 of 3m+p-1
      if ($2 == "zb-v") theory = $9                                          # its simulation
      if ($8 != theory) print "theory " $8 " != formula " theory ": " $0
      if (($2 == "1f1b" || $2 == "zb-h1") && $9 != $8) print "sim " $9 " != theory " $8 ": " $0
      if ($2 != "interleaved" && $2 != "zb-v" && v != 1) print "v must be 1: " $0
      if ($2 == "zb-v" && v != 2) print "zb-v has v = 2: " $0
      if ($2 == "zb-h1" && $14 != (m < p ? m : p)) print "zb-h1 peak " $14 " != min(p, m): " $0
      if ($2 == "zb-v" && $14 > 2 * p) print "zb-v peak " $14 " > 2p: " $0
      if (!($7 >= 0 && $7 < 1)) print "bubble outside [0, 1): " $0
      if ($2 == "gpipe" && $14 != m) print "gpipe peak " $14 " != m: " $0
      if ($2 == "1f1b" && $14 != (m < p ? m : p)) print "1f1b peak " $14 " != min(p, m): " $0
      if ($10 != "-" && (theory == 0 || $10 + 0 <= 0)) print "ratio: " $0
      for (i = 5; i <= 13; ++i) if ($i !~ /^-?[0-9]+\.[0-9]+$/ && !(i == 10 && $i == "-")) { print "cell " i ": " $0; break } }')
  if [ -n "$bad" ]; then fail "$name: $bad"; show; return; fi
  echo "ok   $name: $rows row(s), theory = formula, sim = theory for 1f1b, bubble in [0, 1)"
}

# check_json NAME FILE ROWS RANKS OVERLAP: fields, the table's numbers, and the relations between them.
check_json() {
  local name=$1 file=$2 rows=$3 ranks=$4 overlap=$5 n f bad
  n=$(wc -l <"$file")
  if [ "$n" -ne "$rows" ]; then fail "$name: $n JSON row(s), expected $rows"; return; fi
  for f in "${fields[@]}"; do
    bad=$(jq -c "select(has(\"$f\") | not)" "$file" | head -1)
    if [ -n "$bad" ]; then fail "$name: a JSON row lacks \"$f\": $bad"; return; fi
  done
  bad=$(jq -c --argjson ranks "$ranks" --argjson overlap "$overlap" '
    ((.stages - 1) / .virtual_stages) as $idle |
    (if .schedule == "zb-h1" then (.stages - 1) / (3 * .micro_batches + .stages - 1)
     elif .schedule == "zb-v" then .simulated
     else $idle / (.micro_batches + $idle) end) as $theory |
    select(.bench != "pipeline" or .ranks != $ranks or .overlap != $overlap
      or .pipelines * .stages != .ranks
      or ((.theory - $theory) | fabs) > 1e-12
      or (.schedule == "1f1b" and ((.simulated - .theory) | fabs) > 1e-9)
      or .bubble < 0 or .bubble >= 1 or ((.bubble - (1 - .ideal_s / .step_s)) | fabs) > 1e-9
      or .step_min_s > .step_s or .ideal_s <= 0 or .forward_call_s <= 0 or .backward_call_s <= 0
      or (.theory > 0 and (((.ratio - .bubble / .theory) | fabs) > 1e-9
                           or .within_10pct != (((.ratio - 1) | fabs) <= 0.1)))
      or (.rank_compute_s | length) != .ranks or (.rank_step_s | length) != .ranks
      or (.rank_receive_wait_s | length) != .ranks
      or ((.backward_s - 2 * .forward_s) | fabs) > 1e-15 or .weight_share != 0.5
      or .weight_call_s < 0 or .weight_call_s > .backward_call_s
      or .held_slots_peak < 1)' "$file" | head -1)
  if [ -n "$bad" ]; then fail "$name: inconsistent JSON row: $bad"; return; fi
  # The table prints the JSON's numbers, row for row.
  diff <(table_rows | awk '{print $1, $2, $3, $4, $5, $7, $8, $9, $14}') \
       <(jq -r '[.stages, .schedule, .virtual_stages, .micro_batches, .step_s, .bubble, .theory, .simulated,
                 .peak_in_flight] | @tsv' "$file" |
         awk '{printf "%s %s %s %s %.2f %.4f %.4f %.4f %s\n", $1, $2, $3, $4, 1e3 * $5, $6, $7, $8, $9}') >"$dir/diff"
  if [ -s "$dir/diff" ]; then fail "$name: table and JSON differ:"; cat "$dir/diff"; return; fi
  echo "ok   $name: $rows JSON row(s), every field, the table's numbers, bubble = 1 - ideal / step"
}

# check_summary NAME PAIRS ZB: the interleaved-vs-1F1B table has PAIRS rows, the zero-bubble one ZB
# rows, and the 10% line is there.
check_summary() {
  local name=$1 pairs=$2 zb=$3 n
  n=$(awk '/^summary: interleaved/ {on = 1; next} on && $1 ~ /^[0-9]+$/ && NF == 7 && $7 ~ /^(yes|no)$/' "$out" | wc -l)
  if [ "$n" -ne "$pairs" ]; then fail "$name: $n summary row(s), expected $pairs"; show; return; fi
  n=$(awk '/^zero bubble against 1f1b/ {on = 1; next} on && $1 ~ /^[0-9]+$/ && NF == 8 && $3 ~ /^zb-(h1|v)$/' "$out" | wc -l)
  if [ "$n" -ne "$zb" ]; then fail "$name: $n zero-bubble summary row(s), expected $zb"; show; return; fi
  if ! grep -q -E '^measured bubble within 10% of theory \(relative\): [0-9]+ of [0-9]+ configuration' "$out"; then
    fail "$name: no 'within 10% of theory' line"; show; return
  fi
  echo "ok   $name: summary with $pairs interleaved-vs-1f1b row(s), $zb zero-bubble row(s) and the 10% line"
}

# One pipeline of 2: gpipe, 1f1b, zb-h1 and zb-v at m = 2, 4; interleaved v = 2 at m = 2, 4.
if expect_ok "np 2" np 2 "$meshbench" pipeline "${tiny[@]}" --micro-batches 2,4 --virtual 2 --json "$dir/p2.json"; then
  grep -q 'executor overlap on' "$out" || fail "np 2: the header does not say overlap is on"
  grep -q '((p-1)/v)/(m+(p-1)/v)' "$out" || fail "np 2: the formula is not stated"
  grep -q 'zb-h1 (p-1)(F+B-W)/(m(F+B+W)+(p-1)(F+B-W))' "$out" || fail "np 2: the zb-h1 formula is not stated"
  check_table "np 2 table" 10
  check_json "np 2 json" "$dir/p2.json" 10 2 true
  check_summary "np 2 summary" 2 4
fi

# Four ranks: p = 4 (one pipeline) and p = 2 (two side by side), m = 4, 8, v = 2, 4.
if expect_ok "np 4" np 4 "$meshbench" pipeline "${tiny[@]}" --stages 4,2 --micro-batches 4,8 --virtual 2,4 \
     --json "$dir/p4.json"; then
  check_table "np 4 table" 24
  check_json "np 4 json" "$dir/p4.json" 24 4 true
  check_summary "np 4 summary" 4 8
  [ "$(jq -c 'select(.stages == 2) | .pipelines' "$dir/p4.json" | sort -u)" = 2 ] ||
    fail "np 4: p = 2 rows do not say 2 pipelines"
fi

# Without overlap, and with gemm work (the note on cores must be there).
if expect_ok "np 2 --no-overlap --work gemm" np 2 "$meshbench" pipeline "${tiny[@]}" --micro-batches 2 \
     --virtual 2 --no-overlap --work gemm --json "$dir/gemm.json"; then
  grep -q 'executor overlap off' "$out" || fail "--no-overlap: the header does not say overlap is off"
  grep -q 'honest only when ranks <= cores' "$out" || fail "--work gemm: no note on ranks and cores"
  check_table "--no-overlap table" 5
  check_json "--no-overlap json" "$dir/gemm.json" 5 2 false
  [ "$(jq -r '.work' "$dir/gemm.json" | sort -u)" = gemm ] || fail "--work gemm: JSON rows do not say gemm"
fi

# Regression: without overlap, an interleaved pipeline with messages above MPI's eager limit used to
# deadlock (each stage waited for a send whose receive its neighbour posts only after its own next
# computation). The communication timeout turns a hang into a failure. The zero-bubble lists
# (receives placed early, ZB-V's turn a message to itself) run the same way.
expect_ok "np 4 --no-overlap interleaved, zb-h1, zb-v with 256 KiB messages (no deadlock)" np 4 "$meshbench" pipeline \
  --forward-ms 0.4 --steps 1 --warmup 0 --cpu-threads 1 --device cpu --activation-bytes 256K --no-overlap \
  --schedules interleaved,zb-h1,zb-v --micro-batches 8 --virtual 2 --comm-timeout 20

# Bad options: one error line from rank 0, exit 2 (a usage error), nothing run.
extra_error_checks() { [ "$rc" -eq 2 ] || fail "$1: exit code $rc, expected 2 (usage error)"; }
expect_error "interleaved m not a multiple of p" 'interleaved.*multiple of the pipeline stages' \
  np 4 "$meshbench" pipeline "${tiny[@]}" --schedules interleaved --micro-batches 4,6
expect_error "unknown schedule" "unknown pipeline schedule 'zigzag'" \
  np 2 "$meshbench" pipeline "${tiny[@]}" --schedules 1f1b,zigzag
expect_error "stages not dividing the ranks" '--stages 3 does not divide the 4 ranks' \
  np 4 "$meshbench" pipeline "${tiny[@]}" --stages 3
expect_error "one virtual stage for interleaved" 'interleaved.*2 or more virtual stages' \
  np 2 "$meshbench" pipeline "${tiny[@]}" --virtual 1
expect_error "unknown work" "unknown --work 'spin'" np 2 "$meshbench" pipeline "${tiny[@]}" --work spin
expect_error "weight share out of range" "--weight-share must be in \\[0, 1\\)" \
  np 2 "$meshbench" pipeline "${tiny[@]}" --weight-share 1

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all pipeline smoke checks passed"
