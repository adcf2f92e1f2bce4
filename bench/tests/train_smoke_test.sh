#!/usr/bin/env bash
# meshbench train at a small size: its table and JSON row come out, the device work per step is
# counted (no allocation after warm-up), and --profile-ops adds a table and a JSON list of where a
# step's time went, op by op: GEMMs by shape, every op's calls and time, the ops' shares summing to at
# most the profiled step. Bad options get one clear error. Arguments: MESHBENCH MPIEXEC MESHTRAIN.
# No timing is asserted.
set -u
meshbench=$1
source "$(dirname "$0")/../../commands/tests/cli_test_lib.sh"
program=meshbench

small=(--models tiny --batch 2 --seq-len 32 --steps 2 --warmup 1 --device cpu --cpu-threads 1)
if expect_ok "train, timed only" "$meshbench" train "${small[@]}" --json "$dir/plain.jsonl"; then
  grep -qE "^tiny +none " "$out" || { fail "no row for tiny"; show; }
  ! grep -q "Where a step goes" "$out" || fail "a profile table without --profile-ops"
fi
row=$(head -1 "$dir/plain.jsonl" 2>/dev/null)
[ "$(jq -r '.allocations_per_step' <<<"$row")" = 0 ] && echo "ok   no allocation per step after warm-up" ||
  fail "allocations per step: $(jq -c '{allocations_per_step}' <<<"$row")"
[ "$(jq -r 'has("op_profile")' <<<"$row")" = false ] || fail "an op profile without --profile-ops: $row"

if expect_ok "train --profile-ops 2" "$meshbench" train "${small[@]}" --profile-ops 2 --json "$dir/prof.jsonl"; then
  grep -q "^Where a step goes, tiny none (2 profiled step(s)" "$out" || { fail "no profile table"; show; }
  grep -qE "^gemm fp32 [NT]{2} [0-9]+x[0-9]+x[0-9]+" "$out" || { fail "no GEMM by shape in the profile table"; show; }
  grep -q "^(outside ops: the host between them)" "$out" || { fail "no line for the time outside ops"; show; }
fi
row=$(head -1 "$dir/prof.jsonl" 2>/dev/null)
# Every op has calls and time, most time first, and the shares sum to at most the step (the rest is
# the host's). That the drains are not counted as host waits is runtime/tests/op_profile_test.cpp's.
if jq -e '(.op_profile | length) > 5 and all(.op_profile[]; .calls_per_step > 0 and .s_per_step >= 0)
          and ([.op_profile[].share_of_step] | add) <= 1.0 and ([.op_profile[].share_of_step] | add) > 0.5
          and (.op_profile[0].s_per_step >= .op_profile[-1].s_per_step) and .profiled_step_s > 0
          and any(.op_profile[]; .op | startswith("gemm "))' <<<"$row" >/dev/null; then
  echo "ok   op profile: $(jq -r '.op_profile | length' <<<"$row") ops, the top $(jq -r '.op_profile[0].op' <<<"$row")" \
    "at $(jq -r '.op_profile[0].share_of_step * 100 | floor' <<<"$row")% of a profiled step"
else
  fail "the JSON op profile is incomplete or inconsistent: $(jq -c '{profiled_step_s, op_profile}' <<<"$row" | cut -c1-600)"
fi
expect_error "negative profile steps" "--profile-ops must be >= 0" "$meshbench" train "${small[@]}" --profile-ops -1

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all train smoke checks passed"
