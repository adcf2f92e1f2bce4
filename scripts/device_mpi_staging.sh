#!/usr/bin/env bash
# The MPI backend on device tensors, ranks sharing one GPU (issue "Many ranks on one GPU"): a
# second call of a GPU session, after scripts/device_gpu_speed.sh, from the repository root:
#   OUT=$OUT scripts/device_mpi_staging.sh
# 1. comm_device_staging_test's GPU cases at np 2 under each MESHTRAIN_MPI_DEVICE_COMM (async against
#    the sync path bit for bit, staging allocations stopping after warm-up, kernels ordered by events);
# 2. meshbench coll on device tensors at np 2, 4 and 8 with sync (the default) and async;
# 3. the demo of ./run (configs/demo-2x2x2.ini: 8 ranks, dp 2 x tp 2 x pp 2) on the one GPU with each
#    MESHTRAIN_MPI_DEVICE_COMM, against the same model and batch on 1 rank of it, 20 steps each, the
#    last 3 timed op by op (--profile-ops: where the 8 ranks' step goes). Needs the fortunes corpus:
#    carry assets/corpus/fortunes (1.4 MiB) beside .device;
# 4. a table last: microseconds per op, sync -> async, and the demo's tokens/s against 1 rank. Full
#    logs under $OUT. About 5-8 minutes.
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

# The demo on one GPU: tokens/s from the metrics, steps 4-17 (after warm-up, before the profiled ones).
demo() {  # label np env... -- train args...
  local label=$1 np=$2; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  stamp "demo $label: $np rank(s) on the GPU"
  rm -rf "/tmp/demo_$label"
  env "${envs[@]}" timeout 150 $R exec mpirun -np "$np" --oversubscribe -x MESHTRAIN_MPI_DEVICE_COMM \
    "$B/bin/meshtrain" train --config configs/demo-2x2x2.ini --device cuda --virtual-devices --steps 20 --warmup 3 \
    --log-every 1 --profile-ops 3 --checkpoint-dir "/tmp/demo_$label" --save-every 0 \
    --metrics "$OUT/demo_$label.jsonl" "$@" > "$OUT/demo_$label.txt" 2>&1
  echo "exit $?" >> "$OUT/demo_$label.txt"
}
if [ -d assets/corpus/fortunes ]; then
  demo 8ranks_sync 8 MESHTRAIN_MPI_DEVICE_COMM=sync --
  demo 8ranks_async 8 MESHTRAIN_MPI_DEVICE_COMM=async --
  demo 1rank 1 MESHTRAIN_MPI_DEVICE_COMM=sync -- --dp 1 --tp 1 --pp 1
else
  stamp "demo skipped: assets/corpus/fortunes was not carried"
fi

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
demo = {}
for label in ("1rank", "8ranks_sync", "8ranks_async"):
    path = os.path.join(out, f"demo_{label}.jsonl")
    steps = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    rates = sorted(r["tokens_per_s"] for r in steps if "tokens_per_s" in r and 4 <= r["step"] <= 17)
    if rates:
        demo[label] = rates[len(rates) // 2]
print("the demo (small GPT, dp 2 x tp 2 x pp 2) on one GPU, median tokens/s of steps 4-17:")
for label, rate in demo.items():
    ratio = rate / demo["1rank"] if "1rank" in demo else float("nan")
    print(f"  {label:<13} {rate:10.0f} tok/s  {ratio:5.2f} x 1 rank (goal for 8 ranks: >= 0.70)")
PY
stamp "done"
