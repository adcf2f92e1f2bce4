#!/usr/bin/env bash
# A scaling study on a SLURM cluster: one job per node count, the same training on each, every
# job's metrics in its own file for `meshtrain plot` (and the benchmarks' tables).
#
#   slurm/scaling_study.sh "1 2 4 8" --ntasks-per-node=8 --gpus-per-node=8 -- --config my.ini --steps 200
#
# Arguments: the node counts (quoted, space-separated), then sbatch options up to `--`, then
# `meshtrain train` options. Runs land in scaling/NODES.jsonl and scaling/NODES.out (under the
# current directory, or SCALING_DIR). Data parallelism absorbs the extra ranks (--dp is inferred
# from the rank count unless given), so weak scaling means raising --global-batch with the nodes.
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,12p "$0" >&2; exit 2; }
counts=$1
shift
sbatch_options=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sbatch_options+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
out=${SCALING_DIR:-scaling}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
for nodes in $counts; do
  job=$(sbatch --parsable --nodes="$nodes" --job-name="scaling-$nodes" --output="$out/$nodes.out" \
    "${sbatch_options[@]}" "$here/train.sbatch" "$@" --metrics "$out/$nodes.jsonl")
  echo "submitted $nodes node(s): job $job -> $out/$nodes.jsonl"
done
echo "when they are done: meshtrain plot $out/*.jsonl --out $out/scaling.png"
