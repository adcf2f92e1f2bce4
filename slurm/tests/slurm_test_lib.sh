# Shared by the tests that run a real SLURM cluster on this machine (slurm_cluster_test.sh,
# slurm_fault_test.sh), sourced right after `set -u`: takes the tests' arguments
# (MESHTRAIN MPIEXEC COMPARE_LOSSES), skips (exit 77, saying why) without root or the SLURM packages,
# sources commands/tests/cli_test_lib.sh, and brings the local cluster (slurm/local_cluster.sh) up and
# down; its daemons are stopped on every exit, ctest's timeout included.
# Optional before sourcing: run_timeout (seconds per command, as for cli_test_lib.sh).
# defines: meshtrain, mpiexec, compare, here (slurm/), cluster, cluster_up, cluster_down, slurm_says
meshtrain=$1
mpiexec=$2
compare=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "SKIP: slurmd needs root"; exit 77; }
for tool in slurmctld slurmd sbatch; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (apt-get install slurmctld slurmd slurm-client)"; exit 77; }
done
. "$here/../commands/tests/cli_test_lib.sh"
cluster=$dir/cluster

cluster_down() { "$here/local_cluster.sh" down "$cluster"; }
trap 'cluster_down; rm -rf "$dir"' EXIT
trap 'exit 1' INT TERM  # ctest's timeout: the EXIT trap still stops the daemons

# cluster_up NAME NODES: starts the cluster with NODES nodes (1, or 2 hosts of their own) and points
# the SLURM clients at it; a cluster that does not come up ends the test.
cluster_up() {
  expect_ok "$1" "$here/local_cluster.sh" up "$cluster" "$2" || { echo "$failures failure(s)"; exit 1; }
  export SLURM_CONF=$cluster/slurm.conf
}

# slurm_says JOB: what Slurm itself knows of JOB (its record and the daemons' log lines naming it),
# printed where a test fails on a job, so the cause is in the CI log and not only on the machine.
slurm_says() {
  echo "--- scontrol show job $1:"
  scontrol show job "$1" 2>&1 | grep -E 'JobState|Reason|ExitCode|Restarts|BatchHost|StartTime' | sed 's/^ */  /'
  echo "--- the daemons' log lines for job $1:"
  grep -h -E "JobId=$1([^0-9]|$)|job[_ ]?$1([^0-9]|$)|StepId=$1\\.|\\[$1\\." "$cluster"/log/*.log 2>/dev/null | tail -40
}
