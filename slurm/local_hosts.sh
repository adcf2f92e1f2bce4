#!/usr/bin/env bash
# Several "hosts" on this one machine, for tests and demos: network namespaces PREFIX-n1..nN with
# their own addresses (10.99.0.K/24) on a bridge (in namespace PREFIX-sw), optionally each link
# capped to RATE (tc tbf: a slower interconnect). Needs root. With netns_rsh.sh as mpirun's rsh
# agent, each host's ranks run in its namespace under its own hostname (nK).
#
#   slurm/local_hosts.sh up PREFIX N [RATE]   e.g. up mt 3 200mbit
#   slurm/local_hosts.sh down PREFIX N        delete them (also what a failed `up` left)
#   ip netns exec PREFIX-n1 env MT_NETNS_PREFIX=PREFIX mpirun --host n1:2,n2:2,n3:2 \
#     --mca plm_rsh_agent slurm/netns_rsh.sh --mca btl tcp,self \
#     --mca btl_tcp_if_include 10.99.0.0/24 --mca oob_tcp_if_include 10.99.0.0/24 ... PROGRAM
set -euo pipefail
cmd=${1:-}
prefix=${2:-}
n=${3:-}
rate=${4:-}
[ -n "$cmd" ] && [ -n "$prefix" ] && [ -n "$n" ] || { sed -n 2,13p "$0" >&2; exit 2; }

down() {
  for i in $(seq "$n"); do ip netns del "$prefix-n$i" 2>/dev/null || true; done
  ip netns del "$prefix-sw" 2>/dev/null || true
}

up() {
  [ "$(id -u)" -eq 0 ] || { echo "local_hosts.sh: network namespaces need root" >&2; exit 1; }
  down
  ip netns add "$prefix-sw"
  ip -n "$prefix-sw" link add br0 type bridge
  ip -n "$prefix-sw" link set br0 up
  for i in $(seq "$n"); do
    ip netns add "$prefix-n$i"
    ip link add eth0 netns "$prefix-n$i" type veth peer name "p$i" netns "$prefix-sw"
    ip -n "$prefix-sw" link set "p$i" master br0
    ip -n "$prefix-sw" link set "p$i" up
    ip -n "$prefix-n$i" link set lo up
    ip -n "$prefix-n$i" addr add "10.99.0.$i/24" dev eth0
    ip -n "$prefix-n$i" link set eth0 up
    # This kernel has no netem: a bandwidth cap works, added delay does not.
    [ -z "$rate" ] || ip netns exec "$prefix-n$i" tc qdisc replace dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
  done
}

case "$cmd" in
  up) up || { down; exit 1; } ;;
  down) down ;;
  *) sed -n 2,13p "$0" >&2; exit 2 ;;
esac
