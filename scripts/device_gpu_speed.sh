#!/usr/bin/env bash
# A GPU session's work in one call (issue "Fast on a GPU"), on a lent machine, from the repository
# root, after scripts/device_bundle.sh here and with the PyTorch peer copied into .device/peers/
# (git-ignored; name .device in the device tool's carry):
#   mkdir -p .device/peers && cp ../shared/peers/torch_gpt.py .device/peers/
#   OUT=$OUT scripts/device_gpu_speed.sh [STEPS]
# 1. the CUDA tests of every op family (ctest -L cuda), then their GPU cases once under
#    compute-sanitizer memcheck, with the MPI backend's async staging of device tensors
#    (comm/tests/comm_device_staging_test, MESHTRAIN_MPI_DEVICE_COMM=async) at 2 ranks sharing the GPU;
# 2. meshbench train for gpt2 and llama-125m at B=16 T=1024 in bf16 on the defaults, and on the
#    fast paths still behind switches (MESHTRAIN_GEMM=cublaslt MESHTRAIN_ATTENTION=gemm
#    MESHTRAIN_CUDA_KERNELS=all);
# 3. the PyTorch peer on the same GPU and shapes, its settings untouched;
# 4. where the step goes: after each run's timed steps, 2 more with every op timed
#    (meshbench train --profile-ops; the lent machines have no Nsight Systems);
# 5. a short table last, with the top ops of each run. Full logs under $OUT. Within 8
#    minutes after the machine is up.
# The MPI backend's staging on device tensors is measured apart (scripts/device_mpi_staging.sh),
# in a second call when the lease has time left.
set -u
OUT=${OUT:?set OUT to a folder for the findings}
STEPS=${1:-10}
R=scripts/device_run.sh
B=/work/main/build/cuda
MB=$B/bin/meshbench
PEER=.device/peers/torch_gpt.py
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$OUT/progress.txt"; }

stamp "CUDA tests (ctest -L cuda)"
timeout 180 $R ctest -L cuda -j4 > "$OUT/cuda_tests.txt" 2>&1
tail -25 "$OUT/cuda_tests.txt"

# The op-family tests' GPU cases, once each under memcheck.
stamp "compute-sanitizer memcheck"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in runtime/tests/gemm_epilogue_test runtime/tests/attention_test runtime/tests/layernorm_backward_test \
         runtime/tests/gemm_bf16_test runtime/tests/nn_backward_units_test runtime/tests/cuda_backend_test \
         runtime/tests/row_kernels_test runtime/tests/block_attention_test optim/tests/optim_cuda_test \
         parallel/tests/ring_attention_test; do
  echo "=== $t"
  timeout 90 $R exec "$SAN" --tool memcheck --error-exitcode 9 "$B/$t" --gtest_filter='*Cuda*:*Gpu*:*GPU*' 2>&1 |
    grep -E "ERROR SUMMARY|PASSED|FAILED|SKIPPED|Invalid|Failure" | head -12
  echo "exit ${PIPESTATUS[0]}"
done > "$OUT/memcheck.txt" 2>&1
# The MPI backend's async path on device tensors: 2 ranks on the one GPU, each under memcheck.
{
  echo "=== comm/tests/comm_device_staging_test np 2 MESHTRAIN_MPI_DEVICE_COMM=async"
  MESHTRAIN_MPI_DEVICE_COMM=async timeout 120 $R exec mpirun -np 2 --oversubscribe -x MESHTRAIN_MPI_DEVICE_COMM \
    "$SAN" --tool memcheck --error-exitcode 9 "$B/comm/tests/comm_device_staging_test" --gtest_filter='*Gpu*' 2>&1 |
    grep -E "ERROR SUMMARY|PASSED|FAILED|SKIPPED|Invalid|Failure" | head -12
  echo "exit ${PIPESTATUS[0]}"
} >> "$OUT/memcheck.txt" 2>&1
cat "$OUT/memcheck.txt"

train() {  # label model env...
  local label=$1 model=$2; shift 2
  env "$@" timeout 150 $R exec "$MB" train --device cuda:0 --dtype bf16 --models "$model" --batch 16 --seq-len 1024 \
    --steps "$STEPS" --warmup 3 --profile-ops 2 --json "$OUT/bench_${label}_${model}.jsonl" > "$OUT/train_${label}_${model}.txt" 2>&1
  echo "exit $?" >> "$OUT/train_${label}_${model}.txt"
}
for model in gpt2 llama-125m; do
  stamp "meshbench $model: defaults"
  train default "$model" MESHTRAIN_GEMM=cublas
  stamp "meshbench $model: fast paths (cublaslt, gemm attention, every fast kernel)"
  train fast "$model" MESHTRAIN_GEMM=cublaslt MESHTRAIN_ATTENTION=gemm MESHTRAIN_CUDA_KERNELS=all
  stamp "PyTorch peer $model"
  timeout 240 python3 "$PEER" --model "$model" --batch 16 --seq 1024 > "$OUT/peer_${model}.txt" 2>&1
  echo "exit $?" >> "$OUT/peer_${model}.txt"
done

stamp "summary"
python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
peak = 989e12  # H100 SXM bf16 dense, the peer's own MFU convention
rows = []
for model in ("gpt2", "llama-125m"):
    for label in ("default", "fast"):
        path = os.path.join(out, f"bench_{label}_{model}.jsonl")
        for line in open(path) if os.path.exists(path) else []:
            rows.append((label, json.loads(line)))
peers = {}
for model in ("gpt2", "llama-125m"):
    path = os.path.join(out, f"peer_{model}.txt")
    for line in open(path) if os.path.exists(path) else []:
        if line.startswith("{"):
            peers[model] = json.loads(line)
print(f"{'model':<11} {'path':<8} {'ours tok/s':>11} {'peer tok/s':>11} {'ratio':>6} {'MFU':>6} {'peer MFU':>8} {'act GiB':>8}")
for label, r in rows:
    tps = r["tokens_per_step"] / r["step_s"]
    p = peers.get(r["model"], {})
    ptps = p.get("tokens_per_s", float("nan"))
    mfu = r["model_flops_per_step"] / r["step_s"] / peak
    print(f"{r['model']:<11} {label:<8} {tps:>11.0f} {ptps:>11.0f} {tps / ptps:>6.3f} {mfu:>6.3f} "
          f"{p.get('mfu', float('nan')):>8.3f} {r['activation_peak_bytes'] / 2**30:>8.2f}")
for label, r in rows:
    ops = r.get("op_profile", [])
    if not ops:
        continue
    print(f"\ntop ops of a {r['model']} step ({label}; {len(ops)} ops, profiled step "
          f"{1e3 * r['profiled_step_s']:.0f} ms against {1e3 * r['step_s']:.0f} ms unprofiled):")
    for op in ops[:12]:
        print(f"  {100 * op['share_of_step']:5.1f}%  {1e3 * op['s_per_step']:8.2f} ms  "
              f"{op['calls_per_step']:6.1f} calls  {op['op'][:70]}")
EOF
stamp "done"
