#!/usr/bin/env bash
# Three hosts on this machine (slurm/local_hosts.sh: network namespaces n1-n3 with their own
# hostnames and addresses): mpirun across them with slurm/netns_rsh.sh as its rsh agent, 8 ranks
# as dp 2 x tp 2 x pp 2 over n1:3, n2:3, n3:2 so that groups of every kind span hosts.
# `meshtrain devices` must show three hosts; the training's losses must equal the single-host run's;
# and the same must complete over links capped to 100 Mbit/s (tc tbf). The namespaces are deleted
# on exit, also on failure. Needs root (skips with exit 77 otherwise).
# Usage: multihost_test.sh MESHTRAIN MPIEXEC COMPARE_LOSSES
set -u
meshtrain=$1
mpiexec=$2
compare=$3
here=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "SKIP: network namespaces need root"; exit 77; }
command -v ip >/dev/null && command -v tc >/dev/null || { echo "SKIP: needs ip and tc (iproute2)"; exit 77; }
run_timeout=180
. "$here/../commands/tests/cli_test_lib.sh"
prefix=mt$$
cleanup() { "$here/local_hosts.sh" down "$prefix" 3; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 1' INT TERM  # ctest's timeout: the EXIT trap still deletes the namespaces

prepare_corpus 9
train=(train --tokenizer bytes --data "$dir/data" --model tiny --seq-len 32 --global-batch 8 --micro-batch 2
       --steps 6 --dp 2 --tp 2 --pp 2 --log-every 2 --eval-batches 1 --cpu-threads 1)

# meshtrain on 8 ranks over the three hosts: mpirun runs in n1's namespace.
across_hosts=(ip netns exec "$prefix-n1" env MT_NETNS_PREFIX="$prefix" "$mpiexec" --host n1:3,n2:3,n3:2 -np 8
              --oversubscribe --bind-to none --mca plm_rsh_agent "$here/netns_rsh.sh" --mca btl tcp,vader,self
              --mca btl_tcp_if_include 10.99.0.0/24 --mca oob_tcp_if_include 10.99.0.0/24
              --mca mpi_yield_when_idle 1 "$meshtrain")

expect_ok "three hosts up" "$here/local_hosts.sh" up "$prefix" 3 || { echo "$failures failure(s)"; exit 1; }
expect_ok "devices across three hosts" "${across_hosts[@]}" devices &&
  { grep -q "8 rank(s) on 3 host(s)" "$out" && echo "ok   devices shows 3 hosts" || { fail "devices does not show 3 hosts"; show; }; }
expect_ok "train 2x2x2 across three hosts" "${across_hosts[@]}" "${train[@]}" --metrics "$dir/hosts.jsonl"
expect_ok "train 2x2x2 on one host" np 8 "$meshtrain" "${train[@]}" --metrics "$dir/one.jsonl"
same_losses "losses across hosts equal the single-host run's, bit for bit" "$dir/one.jsonl" "$dir/hosts.jsonl" 1 6 0

"$here/local_hosts.sh" down "$prefix" 3
expect_ok "three hosts up, links capped to 100 Mbit/s" "$here/local_hosts.sh" up "$prefix" 3 100mbit ||
  { echo "$failures failure(s)"; exit 1; }
expect_ok "train 2x2x2 across capped links" "${across_hosts[@]}" "${train[@]}" --metrics "$dir/capped.jsonl"
same_losses "over capped links: the same losses" "$dir/one.jsonl" "$dir/capped.jsonl" 1 6 0

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
