#!/usr/bin/env bash
# A real SLURM cluster on this machine (slurm/local_cluster.sh): `sbatch` the checked-in
# slurm/train.sbatch with 4 tasks (srun --mpi=pmix) running a short tiny training, on one node and
# then on two nodes that are hosts of their own (network namespaces); each job must complete and
# its losses equal, bit for bit, those of the same run under mpirun. Every daemon the
# test starts is stopped and its directory removed, also on failure. Needs root and the SLURM
# packages (./test installs them); without them it skips (exit 77) saying why.
# Usage: slurm_cluster_test.sh MESHTRAIN MPIEXEC COMPARE_LOSSES
set -u
run_timeout=180
. "$(dirname "$0")/slurm_test_lib.sh"

prepare_corpus 5
train=(--tokenizer bytes --data "$dir/data" --model tiny --seq-len 32 --global-batch 8 --micro-batch 2 --steps 6
       --dp 2 --pp 2 --log-every 2 --eval-batches 1 --cpu-threads 1)

cluster_up "cluster up" 1
# -O (overcommit): 4 tasks on a node of 2 cores; -W waits for the job and returns its exit code.
expect_ok "sbatch slurm/train.sbatch, 4 tasks" env MESHTRAIN="$meshtrain" \
  sbatch -W -N1 -n4 -O -o "$dir/job.out" "$here/train.sbatch" "${train[@]}" --metrics "$dir/slurm.jsonl"
grep -q "^final validation loss" "$dir/job.out" 2>/dev/null && echo "ok   the job trained to the end" ||
  { fail "the job did not finish training"; cat "$dir/job.out"; }
# A CPU-only node the way docs/LAUNCHING.md says, with meshtrain's defaults: -n4 -O on 2 cores, no
# --time (the partition's MaxTime is 1 hour: a fixed 24 hours in the script was refused), the default
# global batch 8 on dp 4 (the micro-batch defaults to 2), and a relative --data taken from
# MESHTRAIN_HOME, not from the spool directory sbatch runs the script from.
expect_ok "sbatch -n4 -O with the defaults, from MESHTRAIN_HOME" env MESHTRAIN="$meshtrain" MESHTRAIN_HOME="$dir" \
  sbatch -W -N1 -n4 -O -o "$dir/defaults.out" "$here/train.sbatch" --device cpu --tokenizer bytes --data data \
  --model tiny --seq-len 32 --steps 2 --cpu-threads 1
grep -q "^step 2/2" "$dir/defaults.out" 2>/dev/null && echo "ok   the job with the defaults trained" ||
  { fail "the job with the defaults did not train"; cat "$dir/defaults.out"; }
# What docs/LAUNCHING.md says: more tasks per node than CPUs is refused even with --overcommit.
if sbatch --test-only -N1 --ntasks-per-node=$(($(nproc) * 2)) -O --wrap true >"$dir/test-only.out" 2>&1; then
  fail "sbatch accepted --ntasks-per-node above the CPUs with -O (docs/LAUNCHING.md says it refuses)"
else
  echo "ok   --ntasks-per-node above the CPUs is refused even with -O: $(tail -1 "$dir/test-only.out")"
fi
expect_ok "the same under mpirun" np 4 "$meshtrain" train "${train[@]}" --metrics "$dir/mpirun.jsonl"
same_losses "losses under sbatch/srun equal those under mpirun, bit for bit" \
  "$dir/slurm.jsonl" "$dir/mpirun.jsonl" 1 6 0
expect_ok "meshtrain devices under srun" env MESHTRAIN="$meshtrain" \
  sbatch -W -N1 -n4 -O -o "$dir/devices.out" --wrap "srun --mpi=pmix $meshtrain devices"
grep -q "launched by srun (SLURM), PMIx in SLURM job" "$dir/devices.out" && echo "ok   devices names the launcher" ||
  { fail "devices does not name srun"; cat "$dir/devices.out"; }
grep -q "^warning:" "$dir/devices.out" && { fail "devices warns under a consistent launch"; cat "$dir/devices.out"; }

# Two nodes, each a host of its own (network namespace, hostname, slurmd): 2 tasks on each.
cluster_down
cluster_up "two-node cluster up" 2
in_n1=(ip netns exec "$(cat "$cluster/netns")-n1" env MESHTRAIN="$meshtrain" OMPI_MCA_btl=tcp,vader,self
       OMPI_MCA_btl_tcp_if_include=10.99.0.0/24 OMPI_MCA_oob_tcp_if_include=10.99.0.0/24)
expect_ok "sbatch slurm/train.sbatch on 2 nodes x 2 tasks" "${in_n1[@]}" \
  sbatch -W -N2 -n4 --ntasks-per-node=2 -o "$dir/job2.out" "$here/train.sbatch" "${train[@]}" --metrics "$dir/slurm2.jsonl"
grep -q "^  rank 3: " "$dir/job2.out" 2>/dev/null || { fail "the 2-node job did not start 4 ranks"; cat "$dir/job2.out"; }
same_losses "2 nodes: losses equal those under mpirun on one host, bit for bit" \
  "$dir/slurm2.jsonl" "$dir/mpirun.jsonl" 1 6 0
expect_ok "meshtrain devices on 2 nodes" "${in_n1[@]}" \
  sbatch -W -N2 -n4 --ntasks-per-node=2 -o "$dir/devices2.out" --wrap "srun --mpi=pmix $meshtrain devices"
grep -q "4 rank(s) on 2 host(s)" "$dir/devices2.out" && echo "ok   devices shows 2 hosts" ||
  { fail "devices does not show 2 hosts"; cat "$dir/devices2.out"; }

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
