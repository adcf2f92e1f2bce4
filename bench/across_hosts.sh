#!/usr/bin/env bash
# Runs one command under mpirun across N "hosts" on this machine: network namespaces with their own
# hostnames and addresses on a bridge (slurm/local_hosts.sh), each host's link optionally capped to
# RATE (tc tbf), R ranks per host, MPI over TCP between hosts (shared memory within one). The
# namespaces are always deleted on exit, also when the command fails or the script is interrupted.
# Needs root, ip and tc.
#
#   bench/across_hosts.sh [--hosts N] [--rate RATE|none] [--ranks-per-host R] [--mpirun PATH] -- COMMAND...
#   e.g. bench/across_hosts.sh --hosts 2 --rate 200mbit --ranks-per-host 1 -- \
#          build/default/bin/meshbench coll --op allreduce --min-bytes 1M --max-bytes 64M
#
# Defaults: 2 hosts, 100mbit, 1 rank per host, mpirun from PATH ($MPIEXEC if set). The exit code is
# the command's. A rate is a tc rate: 100mbit, 1gbit, 50mbps (bytes), ...; `none` leaves links uncapped.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
slurm=$(cd "$here/../slurm" && pwd)
hosts=2
rate=100mbit
per_host=1
mpirun=${MPIEXEC:-mpirun}
usage() { sed -n 8,14p "$0" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --hosts) hosts=${2:?--hosts needs a count}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --ranks-per-host) per_host=${2:?--ranks-per-host needs a count}; shift 2 ;;
    --mpirun) mpirun=${2:?--mpirun needs a path}; shift 2 ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) echo "across_hosts.sh: unknown option '$1' (the command goes after --)" >&2; usage ;;
  esac
done
[ $# -gt 0 ] || { echo "across_hosts.sh: no command given (after --)" >&2; usage; }
[[ $hosts =~ ^[1-9][0-9]*$ ]] || { echo "across_hosts.sh: --hosts must be a positive count, not '$hosts'" >&2; exit 2; }
[[ $per_host =~ ^[1-9][0-9]*$ ]] ||
  { echo "across_hosts.sh: --ranks-per-host must be a positive count, not '$per_host'" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "across_hosts.sh: network namespaces need root" >&2; exit 1; }
command -v ip >/dev/null && command -v tc >/dev/null || { echo "across_hosts.sh: needs ip and tc (iproute2)" >&2; exit 1; }
[ "$rate" = none ] && rate=

# mpirun starts the remote ranks through the rsh agent, from this directory: give it an absolute
# program path when the command names a file.
program=$1
shift
[ -e "$program" ] && program=$(realpath "$program")
mpirun=$(command -v "$mpirun" || echo "$mpirun")

prefix=mtx$$
cleanup() { "$slurm/local_hosts.sh" down "$prefix" "$hosts"; }
trap cleanup EXIT
trap 'exit 130' INT TERM  # the EXIT trap still runs
"$slurm/local_hosts.sh" up "$prefix" "$hosts" $rate

host_list=
for i in $(seq "$hosts"); do host_list+="${host_list:+,}n$i:$per_host"; done
echo "across_hosts.sh: $hosts host(s) x $per_host rank(s), links ${rate:-uncapped}: $program $*" >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
set +e
ip netns exec "$prefix-n1" env MT_NETNS_PREFIX="$prefix" "$mpirun" --host "$host_list" -np $((hosts * per_host)) \
  --oversubscribe --bind-to none --mca plm_rsh_agent "$slurm/netns_rsh.sh" --mca btl tcp,vader,self \
  --mca btl_tcp_if_include 10.99.0.0/24 --mca oob_tcp_if_include 10.99.0.0/24 --mca mpi_yield_when_idle 1 \
  "$program" "$@"
rc=$?
set -e
exit $rc
