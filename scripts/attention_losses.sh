#!/usr/bin/env bash
# Losses of the two attention implementations side by side (runtime/attention.h): 20 steps of the
# tiny gpt2-shaped and llama-shaped models on 8 layouts (np 1 to 8 with dp, tp, pp), once with
# MESHTRAIN_ATTENTION=reference and once with gemm, and the largest relative difference of a step's
# loss per layout. Prints one line per model and layout; exit 1 past 1e-5 relative. About 1 minute.
# Usage: bash scripts/attention_losses.sh [BUILD_DIR]   (default build/default, from the repository root)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build/default}
meshtrain=$build/bin/meshtrain
compare=$build/commands/tests/compare_losses
. "$repo/scripts/setup.sh" >/dev/null 2>&1
meshtrain_mpi_env >/dev/null 2>&1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
words=(the a cat dog ran sat on under big small red house tree river quickly slowly)
RANDOM=7
for _ in $(seq 200); do for _ in $(seq 12); do printf '%s ' "${words[RANDOM % 16]}"; done; printf '.\n%%\n'; done >corpus
"$meshtrain" prepare --tokenizer bytes --input corpus --output data --val-fraction 0.1 >/dev/null || exit 1
failures=0
for model in tiny llama-tiny; do
  for layout in "1" "2 --dp 2" "2 --tp 2" "2 --pp 2" "4 --dp 2 --pp 2" "4 --tp 2 --pp 2" "4 --dp 2 --tp 2" \
                "8 --dp 2 --tp 2 --pp 2"; do
    np=${layout%% *}
    read -r -a extra <<<"${layout#"$np"}"
    for kernel in reference gemm; do
      rm -f "m-$kernel.jsonl"
      MESHTRAIN_ATTENTION=$kernel mpirun -np "$np" --oversubscribe -x MESHTRAIN_ATTENTION "$meshtrain" train --device cpu \
        --tokenizer bytes --data data --model "$model" --seq-len 64 --global-batch 8 --steps 20 --lr 3e-3 --warmup 2 \
        --log-every 20 --eval-every 0 --cpu-threads 1 "${extra[@]}" --metrics "m-$kernel.jsonl" >/dev/null 2>"log-$kernel" ||
        { echo "$model np $np${layout#"$np"}: $kernel failed:"; tail -3 "log-$kernel"; failures=$((failures + 1)); continue 2; }
    done
    verdict=within
    "$compare" m-reference.jsonl m-gemm.jsonl 1 20 1e-5 >/dev/null 2>&1 || { verdict=BEYOND; failures=$((failures + 1)); }
    worst=$(python3 -c '
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r and "step" in r}
a, b = losses("m-reference.jsonl"), losses("m-gemm.jsonl")
print("%.2e" % max(abs(a[s] - b[s]) / abs(a[s]) for s in a))')
    echo "$model np $np${layout#"$np"}: largest relative difference $worst ($verdict 1e-5)"
  done
done
[ "$failures" -eq 0 ]
