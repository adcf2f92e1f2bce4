#!/usr/bin/env bash
# What a user reads when the system refuses a file, and when `meshtrain sample` gets numbers out of
# range. A full disk while writing --metrics, --save-weights, convert --to or plot --out is one plain
# line naming the file and the system's reason, without a source location (file.cpp:N belongs to our
# bugs), naming the rank and host under mpirun. The disk is a real always-full device: writes to it
# fail with ENOSPC. Usage: messages_test.sh MESHTRAIN MPIEXEC
set -u
meshtrain=$1
mpiexec=$2
run_timeout=60
. "$(dirname "$0")/cli_test_lib.sh"

# Every expected error here is the user's or the system's, never ours.
extra_error_checks() {
  if grep -q -E '\.(cpp|h):[0-9]+' "$err"; then fail "$1: the message shows a source location"; show; fi
}

prepare_corpus 11
train=("$meshtrain" train --device cpu --tokenizer bytes --data "$dir/data" --model tiny --steps 1 --seq-len 32
  --global-batch 4 --micro-batch 2 --cpu-threads 1)
weights=$dir/tiny.bin
expect_ok "train 1 step: weights to sample from" "${train[@]}" --save-weights "$weights" --metrics "$dir/m.jsonl"
host=$(hostname)
enospc="No space left on device"

# --- a full disk. /dev/full for the files written in place (metrics). The atomic writers (weights,
# PNG) are given a copy of the device made here, so that a writer that renamed over its target would
# replace only this copy: checked below, the node must still be a device.
expect_error "--metrics on a full disk" "^meshtrain: error: cannot write metrics file /dev/full: $enospc$" \
  "${train[@]}" --metrics /dev/full
expect_error "--metrics on a full disk, 2 ranks: rank and host" \
  "^meshtrain: error: rank 0 \(host $host\): cannot write metrics file /dev/full: $enospc$" \
  np 2 "${train[@]}" --metrics /dev/full
full=$dir/full
if mknod "$full" c 1 7 2>/dev/null && ! (printf x >"$full") 2>/dev/null; then
  expect_error "--save-weights on a full disk" "^meshtrain: error: cannot write llm.c weights file $full: $enospc$" \
    "${train[@]}" --save-weights "$full"
  expect_error "--save-weights on a full disk, 2 ranks: rank and host" \
    "^meshtrain: error: rank 0 \(host $host\): cannot write llm.c weights file $full: $enospc$" \
    np 2 "${train[@]}" --save-weights "$full"
  expect_error "convert --to on a full disk" "^meshtrain: error: cannot write llm.c weights file $full: $enospc$" \
    "$meshtrain" convert --from "$weights" --to "$full" --to-format llmc
  if command -v gnuplot >/dev/null; then
    expect_error "plot --out on a full disk" "^meshtrain: error: cannot write PNG file $full: $enospc$" \
      "$meshtrain" plot "$dir/m.jsonl" --out "$full"
  else
    echo "skip plot --out on a full disk: no gnuplot"
  fi
  [ -c "$full" ] && echo "ok   the device is still a device" || fail "a writer replaced the device $full with a file"
else
  echo "skip --save-weights, convert and plot on a full disk: cannot make a device node here (not root, or nodev)"
fi

# --- sample: --temperature is a finite number >= 0; 0 and values too small for a float are greedy.
sample=("$meshtrain" sample --device cpu --tokenizer bytes --weights "$weights" --prompt "The " --tokens 16 --cpu-threads 1)
for t in inf nan -1; do
  expect_error "sample --temperature $t" \
    "^meshtrain: error: --temperature must be a finite number >= 0 \(0: always the most likely token\), got $t$" \
    "${sample[@]}" --temperature "$t"
done
expect_ok "sample --top-k 1 (the most likely token each time)" "${sample[@]}" --top-k 1 && cp "$out" "$dir/top1"
for t in 0 1e-300; do
  if expect_ok "sample --temperature $t" "${sample[@]}" --temperature "$t" --seed 5; then
    cmp -s "$out" "$dir/top1" && echo "ok   --temperature $t is greedy" ||
      { fail "--temperature $t: not the --top-k 1 text"; show; }
  fi
done
expect_error "sample --top-k -1" "^meshtrain: error: --top-k must be >= 0 \(0: the whole vocabulary\), got -1$" \
  "${sample[@]}" --top-k -1
expect_error "sample --tokens -1" "^meshtrain: error: --tokens must be >= 0, got -1$" "${sample[@]}" --tokens -1

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all checks passed"
