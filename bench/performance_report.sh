#!/usr/bin/env bash
# Runs every measurement behind docs/PERFORMANCE.md on this machine and leaves the tables (.txt),
# JSON rows (.jsonl) and plots (.png) in OUT (default build/perf). Needs root for the parts across
# hosts (network namespaces); without it they are skipped. Takes about 35 minutes on 2 cores (the
# scaling runs are most of it; PARTS picks a subset).
#
#   bench/performance_report.sh [BUILD_DIR] [OUT]        default: build/default build/perf
#   PARTS="coll overlap pipeline scaling plan" bench/performance_report.sh   (a subset)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build/default}" && pwd)
out=${2:-$root/build/perf}
parts=${PARTS:-coll overlap pipeline scaling plan}
mkdir -p "$out"
out=$(cd "$out" && pwd)
meshbench=$build/bin/meshbench meshtrain=$build/bin/meshtrain
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_WAIT_POLICY=passive
mpi=(mpirun --oversubscribe)
cpu=(--device cpu --cpu-threads 1)
hosts_ok=$([ "$(id -u)" -eq 0 ] && command -v ip >/dev/null && echo yes || echo no)
step() { echo; echo "=== $*"; }
has() { [[ " $parts " == *" $1 "* ]]; }
cd "$root"

if has coll; then
  step "coll: one host, np 2 and np 4, ours next to raw MPI"
  rm -f "$out/coll.jsonl"
  "${mpi[@]}" -np 2 "$meshbench" coll --op allreduce --min-bytes 64K --max-bytes 64M --rounds 3 "${cpu[@]}" \
    --json "$out/coll.jsonl" | tee "$out/coll_np2.txt"
  "${mpi[@]}" -np 4 "$meshbench" coll --op all --min-bytes 64K --max-bytes 16M --step-factor 4 --rounds 3 "${cpu[@]}" \
    --json "$out/coll.jsonl" | tee "$out/coll_np4.txt"
  if [ "$hosts_ok" = yes ]; then
    step "coll: 2 hosts, links capped to 200 Mbit/s"
    bench/across_hosts.sh --hosts 2 --rate 200mbit -- "$meshbench" coll --op allreduce --min-bytes 1M --max-bytes 32M \
      "${cpu[@]}" --json "$out/coll.jsonl" | tee "$out/coll_hosts.txt"
  fi
fi

if has overlap; then
  step "overlap: one host, 2 ranks"
  rm -f "$out/overlap.jsonl"
  ov=(--model small --batch 8 --seq-len 64 --bucket-mb 2 --steps 6 "${cpu[@]}" --json "$out/overlap.jsonl")
  "${mpi[@]}" -np 2 "$meshbench" overlap "${ov[@]}" | tee "$out/overlap_1host.txt"
  if [ "$hosts_ok" = yes ]; then
    step "overlap: 2 hosts, links capped to 1 Gbit/s (communication about half the backward)"
    bench/across_hosts.sh --hosts 2 --rate 1gbit -- "$meshbench" overlap "${ov[@]}" | tee "$out/overlap_hosts.txt"
    step "overlap: 2 hosts, links capped to 500 Mbit/s (communication about as long as the backward)"
    bench/across_hosts.sh --hosts 2 --rate 500mbit -- "$meshbench" overlap "${ov[@]}" | tee "$out/overlap_hosts_500.txt"
  fi
fi

if has pipeline; then
  step "pipeline: p = 4 and p = 2"
  rm -f "$out/pipeline.jsonl"
  "${mpi[@]}" -np 4 "$meshbench" pipeline "${cpu[@]}" --json "$out/pipeline.jsonl" | tee "$out/pipeline_p4.txt"
  "${mpi[@]}" -np 2 "$meshbench" pipeline "${cpu[@]}" --json "$out/pipeline.jsonl" | tee "$out/pipeline_p2.txt"
fi

if has scaling; then
  step "scaling: small on the fortunes corpus, 1 thread per rank, with the model's prediction"
  rm -f "$out/train_cpu.jsonl"
  "$meshbench" train --models small --batch 16 --seq-len 64 --steps 3 --cpu-threads 1 --json "$out/train_cpu.jsonl" |
    tee "$out/train_cpu.txt"
  "$meshbench" scaling --layouts 1x1x1,2x1x1,1x2x1,1x1x2,4x1x1,2x2x1,2x1x2,1x2x2,2x2x2 --model small --seq-len 64 \
    --global-batch 16 --micro-batch 4 --steps 6 --skip 2 --cpu-threads 1 --predict --calibrate "$out/train_cpu.jsonl" \
    --out "$out/scaling" --json "$out/scaling.jsonl" --title "small, 16 x 64 tokens per step (weak: per rank), 2-core VM" |
    tee "$out/scaling.txt"
  if [ "$hosts_ok" = yes ]; then
    step "scaling: across 4 hosts (namespaces, uncapped), 1 rank per host"
    slurm/local_hosts.sh up mtsc 4
    trap 'slurm/local_hosts.sh down mtsc 4' EXIT
    "$meshbench" scaling --layouts 1x1x1,2x1x1,4x1x1,2x1x2,2x2x1 --model small --seq-len 64 --global-batch 16 \
      --micro-batch 4 --steps 6 --skip 2 --cpu-threads 1 --predict --calibrate "$out/train_cpu.jsonl" \
      --data "$root/assets/corpus/fortunes" --out "$out/scaling_hosts" --json "$out/scaling_hosts.jsonl" \
      --title "small across hosts (network namespaces), 1 rank per host" \
      --mpirun "ip netns exec mtsc-n1 env MT_NETNS_PREFIX=mtsc mpirun --host n1:1,n2:1,n3:1,n4:1 --oversubscribe --bind-to none --mca plm_rsh_agent $root/slurm/netns_rsh.sh --mca btl tcp,self --mca btl_tcp_if_include 10.99.0.0/24 --mca oob_tcp_if_include 10.99.0.0/24" |
      tee "$out/scaling_hosts.txt"
    slurm/local_hosts.sh down mtsc 4
    trap - EXIT
  fi
fi

if has plan; then
  step "plan: GPT-3 175B on 1024 A100 (Megatron-LM's layout and the best one), and on H100"
  "$meshtrain" plan --model gpt3-175b --seq-len 2048 --global-batch 1536 --cluster dgx-a100 --nodes 128 \
    --layout dp=8,tp=8,pp=16,micro=1 --recompute | tee "$out/plan_175b_megatron.txt"
  "$meshtrain" plan --model gpt3-175b --seq-len 2048 --global-batch 1536 --cluster dgx-a100 --nodes 128 --top 5 |
    tee "$out/plan_175b_a100.txt"
  "$meshtrain" plan --model gpt3-175b --seq-len 2048 --global-batch 1536 --cluster dgx-h100 --nodes 128 --top 5 |
    tee "$out/plan_175b_h100.txt"
fi
echo
echo "performance_report.sh: results in $out"
