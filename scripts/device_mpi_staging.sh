#!/usr/bin/env bash
# The MPI backend on device tensors, ranks sharing one GPU (issue "Many ranks on one GPU"): a
# second call of a GPU session, after scripts/device_gpu_speed.sh, from the repository root:
#   OUT=$OUT scripts/device_mpi_staging.sh
# 1. comm_device_staging_test's GPU cases at np 2 under each MESHTRAIN_MPI_DEVICE_COMM (async against
#    the sync path bit for bit, staging allocations stopping after warm-up, kernels ordered by events);
# 2. meshbench coll on device tensors at np 2, 4 and 8 with sync (the default) and async;
# 3. a table last: microseconds per op, sync -> async. Full logs under $OUT. About 4-6 minutes.
set -u
OUT=${OUT:?set OUT to a folder for the findings}
R=scripts/device_run.sh
B=/work/main/build/cuda
MB=$B/bin/meshbench
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$OUT/progress.txt"; }

for mode in sync async; do
  stamp "comm_device_staging_test np 2, MESHTRAIN_MPI_DEVICE_COMM=$mode"
  MESHTRAIN_MPI_DEVICE_COMM=$mode timeout 120 $R exec mpirun -np 2 --oversubscribe -x MESHTRAIN_MPI_DEVICE_COMM \
    "$B/comm/tests/comm_device_staging_test" > "$OUT/staging_test_$mode.txt" 2>&1
  echo "exit $?" >> "$OUT/staging_test_$mode.txt"
  grep -E "PASSED|FAILED|SKIPPED|exit" "$OUT/staging_test_$mode.txt" | head -8
done

for np in 2 4 8; do
  for mode in sync async; do
    stamp "meshbench coll np $np: MPI backend, device tensors, MESHTRAIN_MPI_DEVICE_COMM=$mode"
    MESHTRAIN_MPI_DEVICE_COMM=$mode timeout 90 $R exec mpirun -np $np --oversubscribe -x MESHTRAIN_MPI_DEVICE_COMM \
      "$MB" coll --device cuda --virtual-devices --comm-backend mpi --op all --min-bytes 1K --max-bytes 4M \
      --step-factor 64 --iters 10 --warmup 2 --check --json "$OUT/coll_${mode}_np${np}.jsonl" > "$OUT/coll_${mode}_np${np}.txt" 2>&1
    echo "exit $?" >> "$OUT/coll_${mode}_np${np}.txt"
  done
done

stamp "summary"
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
coll = {}  # (np, op, bytes) -> {mode: out-of-place seconds}
for np in (2, 4, 8):
    for mode in ("sync", "async"):
        path = os.path.join(out, f"coll_{mode}_np{np}.jsonl")
        for line in open(path) if os.path.exists(path) else []:
            r = json.loads(line)
            if r.get("out_of_place_time_s"):
                coll.setdefault((np, r["op"], r["bytes"]), {})[mode] = r["out_of_place_time_s"]
print("MPI backend on device tensors, out of place, us per op: sync -> async (MESHTRAIN_MPI_DEVICE_COMM)")
for (np, op, size), t in sorted(coll.items()):
    s, a = t.get("sync", float("nan")), t.get("async", float("nan"))
    print(f"  np {np} {op:<15} {size:>9} B  {s * 1e6:10.1f} -> {a * 1e6:10.1f}  x{s / a:5.2f}")
PY
stamp "done"
