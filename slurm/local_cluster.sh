#!/usr/bin/env bash
# A real SLURM cluster on this one machine, for tests and demos: slurmctld plus one slurmd per node,
# state under DIR. Needs root and Debian's slurmctld, slurmd and slurm-client.
#
#   slurm/local_cluster.sh up DIR [NODES]   start NODES (1 or 2, default 1) nodes; prints the
#                                           `export SLURM_CONF=...` the clients (sbatch, srun) need
#   slurm/local_cluster.sh down DIR         stop every daemon started under DIR (by PID), delete its
#                                           namespaces and wipe DIR
#
# One node is this host ("localhost"). Two nodes are two hosts: network namespaces n1 and n2
# (slurm/local_hosts.sh, 10.99.0.1-2) each with its own hostname and slurmd, the controller in
# n1. Clients then run in n1's namespace: `ip netns exec $(cat DIR/netns)-n1 sbatch ...`, and
# Open MPI's TCP between the nodes wants OMPI_MCA_btl_tcp_if_include=10.99.0.0/24.
# Authentication is auth/none (no munged to run: fine for a cluster that exists for one test).
set -euo pipefail
cmd=${1:-}
dir=${2:-}
nodes=${3:-1}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n 2,17p "$0" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)

down() {
  if [ -f "$dir/pids" ]; then
    while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$dir/pids"
    for _ in $(seq 50); do
      alive=0
      while read -r pid; do kill -0 "$pid" 2>/dev/null && alive=1; done <"$dir/pids"
      [ "$alive" -eq 0 ] && break
      sleep 0.1
    done
    while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done <"$dir/pids"
  fi
  [ -f "$dir/netns" ] && "$here/local_hosts.sh" down "$(cat "$dir/netns")" 2
  rm -rf "$dir"
}

up() {
  [ "$(id -u)" -eq 0 ] || { echo "local_cluster.sh: slurmd needs root" >&2; exit 1; }
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null ||
    { echo "local_cluster.sh: needs slurmctld and slurmd (apt-get install slurmctld slurmd slurm-client)" >&2; exit 1; }
  [ "$nodes" = 1 ] || [ "$nodes" = 2 ] || { echo "local_cluster.sh: NODES must be 1 or 2" >&2; exit 2; }
  # Stale state and spool (PMIx sockets of reused job ids) break steps: always start clean.
  rm -rf "$dir"
  mkdir -p "$dir"/{state,spool,run,log} "$dir"/tmp/{localhost,n1,n2}
  dir=$(cd "$dir" && pwd)
  local cpus
  cpus=$(nproc)
  local port=$((17000 + RANDOM % 2000))  # controller port; nodes take the next ones
  {
    echo "ClusterName=mt"
    if [ "$nodes" = 1 ]; then echo "SlurmctldHost=localhost"; else echo "SlurmctldHost=n1(10.99.0.1)"; fi
    echo "SlurmctldPort=$port"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/none"
    echo "CredType=cred/none"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/run/slurmctld.pid"
    echo "SlurmdPidFile=$dir/run/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "MpiDefault=pmix"
    echo "ReturnToService=2"
    echo "TmpFS=$dir/tmp/%n"  # per node: PMIx keeps its server files there
    if [ "$nodes" = 1 ]; then
      echo "NodeName=localhost CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=4000 Port=$((port + 1)) State=UNKNOWN"
    else
      echo "NodeName=n[1-2] NodeAddr=10.99.0.[1-2] Port=$((port + 1)) CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN"
    fi
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=1:00:00 State=UP OverSubscribe=YES"  # a short MaxTime, as many clusters have
  } >"$dir/slurm.conf"
  if [ "$nodes" = 1 ]; then
    slurmctld -D -f "$dir/slurm.conf" >"$dir/log/slurmctld.out" 2>&1 &
    echo $! >>"$dir/pids"
    slurmd -D -N localhost -f "$dir/slurm.conf" >"$dir/log/slurmd.out" 2>&1 &
    echo $! >>"$dir/pids"
    client=()
  else
    local prefix=mts$$
    echo "$prefix" >"$dir/netns"
    "$here/local_hosts.sh" up "$prefix" 2
    # nsenter, not `ip netns exec`: that one remounts /sys and hides the cgroups slurmd reads. Each
    # exec chain ends in the daemon itself, so $! is its PID.
    nsenter --net="/run/netns/$prefix-n1" unshare --uts sh -c \
      "hostname n1; exec slurmctld -D -f $dir/slurm.conf" >"$dir/log/slurmctld.out" 2>&1 &
    echo $! >>"$dir/pids"
    for n in n1 n2; do
      nsenter --net="/run/netns/$prefix-$n" unshare --uts sh -c \
        "hostname $n; exec slurmd -D -N $n -f $dir/slurm.conf" >"$dir/log/slurmd-$n.out" 2>&1 &
      echo $! >>"$dir/pids"
    done
    client=(ip netns exec "$prefix-n1")
  fi
  # Idle nodes within 20 s, or the logs say why not.
  export SLURM_CONF=$dir/slurm.conf
  for _ in $(seq 200); do
    if [ "$("${client[@]}" sinfo -h -N -o '%t' 2>/dev/null | grep -c idle)" -eq "$nodes" ]; then
      echo "export SLURM_CONF=$dir/slurm.conf"
      return 0
    fi
    sleep 0.1
  done
  echo "local_cluster.sh: the nodes did not come up; logs in $dir/log:" >&2
  tail -5 "$dir"/log/* >&2 || true
  return 1
}

case "$cmd" in
  up) up ;;
  down) down ;;
  *) sed -n 2,17p "$0" >&2; exit 2 ;;
esac
