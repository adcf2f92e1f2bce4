#!/usr/bin/env bash
# End-to-end checks of `meshtrain plan`: the help, a search for gpt2 on a DGX A100, one --layout in
# full, a cluster file with calibration rows, and clear single-line errors for a bad option, a bad
# layout and a model that fits nowhere. Usage: plan_cli_test.sh MESHTRAIN [MPIEXEC]
set -u
meshtrain=$1
mpiexec=${2:-mpirun}
run_timeout=60
. "$(dirname "$0")/cli_test_lib.sh"

if expect_ok "plan --help" "$meshtrain" plan --help; then
  for option in --model --global-batch --micro-batch --cluster --layout --calibrate --set --top --dtype \
                --recompute --sequence-parallel --memory-options --largest --kv-heads --ffn-hidden; do
    grep -q -- "$option" "$out" || fail "plan --help does not explain $option"
  done
fi

if expect_ok "plan gpt2 on dgx-a100" "$meshtrain" plan --model gpt2 --cluster dgx-a100 --global-batch 64 --top 5; then
  grep -q '^cluster dgx-a100: 1 node(s) x 8 device(s)' "$out" || { fail "plan: no cluster line"; show; }
  rows=$(grep -c -E '^[1-5] +[0-9]+x[0-9]+x[0-9]+ ' "$out")
  [ "$rows" -eq 5 ] || { fail "plan: $rows plan rows, expected 5 (--top 5)"; show; }
  # Every listed layout uses the 8 GPUs.
  grep -E '^[1-5] +[0-9]+x[0-9]+x[0-9]+ ' "$out" | awk '{ split($2, d, "x"); if (d[1] * d[2] * d[3] != 8) bad = 1 } END { exit bad }' \
    || fail "plan: a listed layout does not use 8 devices"
  grep -q '^best plan:' "$out" || fail "plan: no best plan breakdown"
  grep -q -E 'layouts rejected for memory|no layout was rejected for memory' "$out" || fail "plan: no rejection count"
fi

if expect_ok "plan one --layout" "$meshtrain" plan --model gpt2 --cluster dgx-a100 --global-batch 64 \
     --layout dp=2,tp=2,pp=2,zero=1,micro=4,schedule=1f1b; then
  grep -q '^layout dp=2 tp=2 pp=2 v=1 zero=1 micro=4 schedule=1f1b: 8 micro-batches per pipeline' "$out" \
    || { fail "--layout: no layout line"; show; }
  for part in compute "tp comm" "pp comm" bubble "dp comm" optimizer "memory per device"; do
    grep -q "$part" "$out" || fail "--layout: the breakdown lacks '$part'"
  done
fi

# The memory options of one layout: the layout line names them, and ZeRO-3's exposed gathers show.
if expect_ok "plan one --layout with memory options" "$meshtrain" plan --model gpt2 --cluster dgx-a100 --global-batch 64 \
     --layout dp=2,tp=2,pp=2,zero=3,micro=4,recompute=full,sp=1; then
  grep -q '^layout dp=2 tp=2 pp=2 v=1 zero=3 micro=4 schedule=1f1b recompute=full sp: ' "$out" \
    || { fail "--layout with memory options: no layout line"; show; }
  grep -q 'zero-3 gathers' "$out" || { fail "--layout zero=3: no line for the exposed gathers"; show; }
fi

# Every memory option searched: a column says each row's recomputation and sequence parallelism.
if expect_ok "plan --memory-options" "$meshtrain" plan --model gpt3-175b --cluster dgx-a100 --nodes 8 \
     --global-batch 64 --micro-batch 1 --memory-options --top 3; then
  grep -q -E '^#  +dpxtpxpp +schedule +zero +memory ' "$out" || { fail "--memory-options: no memory column"; show; }
  [ "$(grep -c -E '^[1-3] +[0-9]+x[0-9]+x[0-9]+ ' "$out")" -eq 3 ] || { fail "--memory-options: not 3 rows"; show; }
fi

# The largest model of a family that fits: gpt3 on one DGX A100 is 13B, not 175B.
if expect_ok "plan --largest gpt3" "$meshtrain" plan --largest gpt3 --cluster dgx-a100 --global-batch 64; then
  grep -q -E '^gpt3-175b +174.6 B +2048 +no ' "$out" || { fail "--largest: gpt3-175b should not fit"; show; }
  grep -q '^largest that fits: gpt3-13b, its fastest layout:' "$out" || { fail "--largest: not gpt3-13b"; show; }
fi
# The llama family: every llama-shaped preset, Llama 3 70B too large for one DGX H100.
if expect_ok "plan --largest llama" "$meshtrain" plan --largest llama --cluster dgx-h100 --global-batch 16; then
  for name in llama-tiny llama-125m llama3-8b; do
    grep -q -E "^$name +[0-9.]+ B +[0-9]+ +yes " "$out" || { fail "--largest llama: $name should fit"; show; }
  done
  grep -q -E '^llama3-70b +70.55 B +8192 +no ' "$out" || { fail "--largest llama: llama3-70b should not fit"; show; }
  grep -q '^largest that fits: llama3-8b, its fastest layout:' "$out" || { fail "--largest llama: not llama3-8b"; show; }
fi
# Llama 3 8B FSDP-like on 8 H100s (docs/PERFORMANCE.md): no tied embedding to sync, and it fits.
if expect_ok "plan llama3-8b --layout" "$meshtrain" plan --model llama3-8b --cluster dgx-h100 --global-batch 16 \
     --layout dp=8,zero=3,recompute=full; then
  grep -q '^model family=llama layers=32 heads=32 channels=4096 .* kv_heads=8 ffn_hidden=14336 ' "$out" \
    || { fail "llama3-8b: no model line"; show; }
  grep -q -E '^  embedding sync +0 s ' "$out" || { fail "llama3-8b: an embedding sync for an untied head"; show; }
  grep -q ': fits$' "$out" || { fail "llama3-8b dp=8 zero=3 recompute=full should fit"; show; }
fi
expect_error "kv heads not dividing heads" "model: kv_heads \(5\) must divide heads \(32\)" \
  "$meshtrain" plan --model llama3-8b --kv-heads 5 --global-batch 8
expect_error "unknown family" "--largest: unknown model family 'gpt9'" \
  "$meshtrain" plan --global-batch 8 --largest gpt9
expect_error "--largest with --layout" "--largest searches every layout of a family's models; --layout predicts one" \
  "$meshtrain" plan --global-batch 8 --largest gpt2 --layout tp=2
expect_error "sp without tp" "--layout sp=1: sp=1 .sequence parallelism. splits the sequence over tp: it needs tp of at least 2" \
  "$meshtrain" plan --global-batch 8 --layout sp=1
# Sequence parallelism runs with the split backward (zb-h1, zb-v) too: plan predicts it.
expect_ok "sp with zb-h1" "$meshtrain" plan --global-batch 8 --layout tp=2,pp=2,sp=1,schedule=zb-h1
expect_error "bad recompute in --layout" "--layout tp=2,recompute=half: unknown --recompute 'half'" \
  "$meshtrain" plan --global-batch 8 --layout tp=2,recompute=half

# A cluster file (preset + override) and calibration rows fitted into it.
printf 'preset = cpu-2core\ndevices_per_node = 2\n' >"$dir/vm.ini"
{
  for bytes in 1024 1048576 67108864; do
    t=$(awk -v b="$bytes" 'BEGIN { printf "%.9g", 2e-6 + b / 2e9 }')
    printf '{"bench":"coll","op":"allreduce","ranks":2,"hosts":1,"bytes":%s,"time_s":%s}\n' "$bytes" "$t"
  done
  echo '{"bench":"pipeline","ranks":2}'
} >"$dir/calib.jsonl"
if expect_ok "plan with a cluster file and --calibrate" "$meshtrain" plan --model small --cluster "$dir/vm.ini" \
     --global-batch 16 --seq-len 64 --calibrate "$dir/calib.jsonl"; then
  grep -q 'calibration: intra-node link 2 GB/s, 1 us (3 allreduce rows); 1 row(s) skipped' "$out" \
    || { fail "--calibrate: fitted link not printed"; show; }
  grep -q "^cluster vm: 1 node(s) x 2 device(s)" "$out" || { fail "cluster file: not used"; show; }
fi

# Under mpirun: one report, from rank 0.
if expect_ok "plan under mpirun -np 2" np 2 "$meshtrain" plan --model tiny --global-batch 8 --cluster cpu-2core \
     --seq-len 64; then
  [ "$(grep -c '^best plan:' "$out")" -eq 1 ] || fail "plan under mpirun: not exactly one report"
fi

expect_error "unknown option" "unrecognised option '--frobnicate'" "$meshtrain" plan --global-batch 8 --frobnicate
expect_error "missing --global-batch" "the option '--global-batch' is required" "$meshtrain" plan --model gpt2
expect_error "unknown cluster" "unknown cluster preset 'dgx-z'" "$meshtrain" plan --global-batch 8 --cluster dgx-z
expect_error "bad --set" "unknown cluster field 'speed'" "$meshtrain" plan --global-batch 8 --set speed=3
expect_error "bad --layout" "--layout dp=3,tp=2: dp x tp x pp = 6, but the cluster has 8 devices" \
  "$meshtrain" plan --global-batch 8 --layout dp=3,tp=2
expect_error "layout tp not dividing heads" "--tp 8 does not divide the model's 12 attention heads" \
  "$meshtrain" plan --model gpt2 --global-batch 8 --layout tp=8
printf '{"bench":"coll","op":"allreduce","ranks":2\n' >"$dir/broken.jsonl"
expect_error "malformed calibration line" "$dir/broken.jsonl:1: not a JSON line" \
  "$meshtrain" plan --global-batch 8 --calibrate "$dir/broken.jsonl"
expect_error "model that fits nowhere" "the model fits in no layout of 8 devices with 79.3 GiB each" \
  "$meshtrain" plan --model gpt3-175b --cluster dgx-a100 --global-batch 8

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all checks passed"
