#!/usr/bin/env bash
# On a lent GPU machine, from the repository root, after scripts/device_bundle.sh here: the CUDA
# tests, nccl_test at 2 and 4 ranks, and `meshtrain train` with every pipeline schedule on NCCL
# against MPI, several ranks sharing the one GPU. NCCL refuses two ranks on one GPU; a different
# NCCL_HOSTID per rank makes them separate hosts to it, joined by its socket transport. Findings
# go to $OUT (the device tool's folder that comes back).
#   OUT=$OUT scripts/device_nccl_pipelines.sh
set -u
OUT=${OUT:?set OUT to a folder for the findings}
R=scripts/device_run.sh
B=/work/main/build/cuda
MT=$B/bin/meshtrain
cat > /tmp/hostid.sh <<'E'
#!/bin/bash
export NCCL_HOSTID=fakehost$OMPI_COMM_WORLD_RANK NCCL_SOCKET_IFNAME=lo
exec "$@"
E
chmod +x /tmp/hostid.sh
$R exec $B/runtime/tests/layernorm_backward_test 2>&1 | grep -v "^\[ *OK\|^\[ RUN" | tail -40 > $OUT/layernorm.txt
$R ctest -L cuda -j4 2>&1 | tail -15 >> $OUT/layernorm.txt
for n in 2 4; do
  echo "=== nccl_test np $n"
  timeout 150 $R exec mpirun -np $n --oversubscribe /tmp/hostid.sh $B/comm/tests/nccl_test 2>&1 | grep -E "PASSED|FAILED|SKIPPED|Failure|tests ran" | head -20
done > $OUT/nccl_test.txt 2>&1
python3 - > /tmp/corpus <<'E'
import random
random.seed(1)
w = "the a cat dog ran sat on under big small red house tree river quickly slowly".split()
for i in range(400):
    print(" ".join(random.choice(w) for _ in range(12)) + ".\n%")
E
$R exec $MT prepare --tokenizer bytes --input /tmp/corpus --output /tmp/data --val-fraction 0.1 > /dev/null
run() {  # np backend extra-args...
  local n=$1 backend=$2; shift 2
  local wrap=""; [ $backend = nccl ] && wrap=/tmp/hostid.sh
  timeout 150 $R exec mpirun -np $n --oversubscribe $wrap $MT train --device cuda --virtual-devices \
    --comm-backend $backend --data /tmp/data --tokenizer bytes --model tiny --seq-len 32 --global-batch 16 \
    --micro-batch 1 --steps 4 --eval-every 2 "$@" 2>&1 | grep -E "^step|error|final" | sed 's/|[^|]*tok\/s.*//'
}
{
for cfg in "2 --pp 2 --schedule 1f1b" "2 --pp 2 --schedule interleaved --virtual-stages 2" "2 --pp 2 --schedule zb-h1" \
           "2 --pp 2 --schedule zb-v" "4 --pp 4 --schedule zb-h1" "4 --pp 2 --tp 2 --schedule zb-v" "4 --pp 2 --dp 2 --schedule 1f1b"; do
  set -- $cfg; n=$1; shift
  echo "=== np $n $*"
  run $n nccl "$@" > /tmp/a.txt; run $n mpi "$@" > /tmp/b.txt
  cat /tmp/a.txt; if cmp -s /tmp/a.txt /tmp/b.txt; then echo "NCCL == MPI (same lines)"; else echo "MPI:"; cat /tmp/b.txt; fi
done
} > $OUT/nccl_train.txt 2>&1
tail -60 $OUT/nccl_train.txt; cat $OUT/layernorm.txt | tail -30; cat $OUT/nccl_test.txt
