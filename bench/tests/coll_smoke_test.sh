#!/usr/bin/env bash
# Smoke test of `meshbench coll`: every op at small sizes with --check, at 2 ranks and at 3 (an odd
# count, where sizes must round to what splits evenly). Checks the tables (every op, the nccl-tests
# column order, the right number of cells), the JSON rows (they parse, carry the documented fields,
# one per table row, busbw / algbw = the op's bus factor) and that bad options give one clear error.
# No timing is asserted.
# Usage: coll_smoke_test.sh MESHBENCH MPIEXEC MESHTRAIN
set -u
meshbench=$1
mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
run_timeout=240
. "$here/../../commands/tests/cli_test_lib.sh"
program=meshbench

ops=(allreduce reduce_scatter allgather broadcast alltoall sendrecv)
header="bytes count type oop_us oop_algbw oop_busbw ip_us ip_algbw ip_busbw mpi_us mpi_busbw ours/mpi"
small=(--min-bytes 8 --max-bytes 64K --iters 3 --warmup 1 --rounds 2 --cpu-threads 1 --device cpu)

# The bus factor nccl-tests gives each op at N ranks.
factor() {
  case $1 in
    allreduce) echo "2 * ($2 - 1) / $2" ;;
    reduce_scatter | allgather | alltoall) echo "($2 - 1) / $2" ;;
    *) echo 1 ;;
  esac
}

# check_tables NP DTYPE: every op's heading, header line and rows in $out.
check_tables() {
  local np=$1 dtype=$2 op rows bad
  for op in "${ops[@]}"; do
    # The op's block: from its "# op:" heading to the next blank line.
    awk -v op="$op" '$0 ~ "^# " op ":" {on=1; next} on && /^$/ {exit} on {print}' "$out" >"$dir/block"
    if [ ! -s "$dir/block" ]; then fail "np $np: no table for $op"; show; continue; fi
    if [ "$(head -1 "$dir/block" | tr -s ' ')" != "$header" ]; then
      fail "np $np $op: header is '$(head -1 "$dir/block")', expected '$header'"; continue
    fi
    rows=$(tail -n +3 "$dir/block" | wc -l)
    # 12 cells; bytes and count are integers; the type is the dtype; a number or "-" elsewhere.
    bad=$(tail -n +3 "$dir/block" | awk -v t="$dtype" 'NF != 12 || $1 !~ /^[0-9]+$/ || $2 !~ /^[0-9]+$/ || $3 != t {print}
      { for (i = 4; i <= 12; ++i) if ($i !~ /^([0-9]+\.[0-9]+|-)$/) { print; break } }')
    if [ "$rows" -lt 1 ] || [ -n "$bad" ]; then fail "np $np $op: $rows row(s), malformed: $bad"; continue; fi
    echo "ok   np $np $op: $rows row(s) with the 12 columns"
  done
}

# check_json FILE NP DTYPE: fields, one row per table row, the factors, the placements of each op.
check_json() {
  local file=$1 np=$2 dtype=$3 op n_json n_table f
  if ! command -v jq >/dev/null; then echo "SKIP json checks: no jq"; return; fi
  if ! jq -e . "$file" >/dev/null 2>&1; then fail "np $np: $file does not parse as JSON lines"; return; fi
  local fields='["bench","op","ranks","hosts","device","backend","dtype","bytes","count","bus_factor","iters","warmup",
    "in_flight","rounds","out_of_place_time_s","out_of_place_algbw_bytes_per_s","out_of_place_busbw_bytes_per_s",
    "in_place_time_s","in_place_algbw_bytes_per_s","in_place_busbw_bytes_per_s","raw","raw_placement",
    "raw_host_buffers","raw_time_s","raw_busbw_bytes_per_s","ratio"]'
  if ! jq -e --argjson f "$fields" 'keys_unsorted == $f' "$file" >/dev/null; then
    fail "np $np: JSON rows lack the documented fields in order: $(head -1 "$file")"; return
  fi
  if ! jq -e --arg d "$dtype" --argjson n "$np" \
      '.bench == "coll" and .ranks == $n and .hosts == 1 and .device == "cpu" and .backend == "mpi" and .dtype == $d
       and .raw == "mpi" and .raw_time_s > 0 and .ratio > 0' "$file" >/dev/null; then
    fail "np $np: a JSON row has wrong context or values"; return
  fi
  for op in "${ops[@]}"; do
    n_json=$(jq -c --arg op "$op" 'select(.op == $op)' "$file" | wc -l)
    n_table=$(awk -v op="$op" '$0 ~ "^# " op ":" {on=1; next} on && /^$/ {exit} on {print}' "$out" | tail -n +3 | wc -l)
    [ "$n_json" -eq "$n_table" ] || fail "np $np $op: $n_json JSON rows, $n_table table rows"
    f=$(awk "BEGIN { printf \"%.12f\", $(factor "$op" "$np") }")
    # busbw / algbw within rounding of the factor, for every placement that ran.
    if ! jq -e --arg op "$op" --argjson f "$f" 'select(.op == $op) |
        [(.out_of_place_busbw_bytes_per_s // empty) / .out_of_place_algbw_bytes_per_s,
         (.in_place_busbw_bytes_per_s // empty) / .in_place_algbw_bytes_per_s,
         .raw_busbw_bytes_per_s * .raw_time_s / .bytes, .bus_factor] | all(. - $f | fabs < 1e-9)' "$file" |
        grep -qv true; then
      echo "ok   np $np $op: busbw / algbw = $f in every JSON row"
    else
      fail "np $np $op: busbw / algbw differs from the factor $f"
    fi
  done
  # Placements: broadcast runs in place only, alltoall and sendrecv out of place only.
  jq -e 'select(.op == "broadcast") | .out_of_place_time_s == null and .in_place_time_s > 0
         and .raw_placement == "in-place"' "$file" | grep -qv true && fail "np $np: broadcast placements"
  jq -e 'select(.op == "alltoall" or .op == "sendrecv") | .in_place_time_s == null and .out_of_place_time_s > 0
         and .raw_placement == "out-of-place"' "$file" | grep -qv true && fail "np $np: alltoall/sendrecv placements"
  jq -e 'select(.op == "allreduce") | .in_place_time_s > 0 and .out_of_place_time_s > 0' "$file" | grep -qv true &&
    fail "np $np: allreduce lacks a placement"
  # np 3: sizes are whole multiples of what the op splits (count x ranks x 4 bytes).
  jq -e --argjson n "$np" 'select(.op == "reduce_scatter" or .op == "allgather" or .op == "alltoall") |
         .bytes == .count * $n * 4' "$file" | grep -qv true && fail "np $np: split ops' sizes are not count x ranks x 4"
  echo "ok   np $np: JSON fields, placements and sizes"
}

for np in 2 3; do
  if expect_ok "coll --op all --check at np $np" np "$np" "$meshbench" coll --op all --check "${small[@]}" \
      --json "$dir/np$np.jsonl"; then
    grep -q "^meshbench coll: $np rank(s) on 1 host(s), backend mpi" "$out" || { fail "np $np: no header line"; show; }
    check_tables "$np" fp32
    check_json "$dir/np$np.jsonl" "$np" fp32
  fi
done

# bf16 and one placement: only the in-place columns are filled.
if expect_ok "coll allreduce bf16 in place --check" np 2 "$meshbench" coll --op allreduce --dtype bf16 --in-place \
    --check "${small[@]}"; then
  awk '/^# allreduce:/ {on=1; next} on && /^$/ {exit} on {print}' "$out" | tail -n +3 |
    awk '$3 != "bf16" || $4 != "-" || $7 == "-" {bad=1} END {exit bad}' &&
    echo "ok   bf16 rows, in-place columns only" || { fail "bf16 in-place rows"; show; }
fi

expect_error "unknown op" "unknown --op 'allsum'" np 2 "$meshbench" coll --device cpu --op allsum
expect_error "bad size" "--min-bytes: cannot read the size '12Q'" np 2 "$meshbench" coll --device cpu --min-bytes 12Q
expect_error "max below min" "--max-bytes \(1024\) is below --min-bytes" np 2 "$meshbench" coll --device cpu --min-bytes 4K --max-bytes 1K
expect_error "bad dtype" "--dtype must be fp32 or bf16" np 2 "$meshbench" coll --device cpu --dtype int32
expect_error "sendrecv alone" "--op sendrecv needs at least 2 ranks" np 1 "$meshbench" coll --device cpu --op sendrecv

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
