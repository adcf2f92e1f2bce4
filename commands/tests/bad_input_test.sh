#!/usr/bin/env bash
# Every kind of bad input to `meshtrain train` under mpirun with several ranks, each answered by ONE
# "meshtrain: error:" line, from rank 0, naming the cause, and a non-zero exit of every rank within
# 30 s: no hang, no core dump, no MPI_Abort. The "ok" lines form the table of inputs, exit codes,
# times and messages. Usage: bad_input_test.sh MESHTRAIN MPIEXEC [MESHBENCH]
#
# --device cpu --cpu-threads 1 everywhere (but the GPU case): the tiny model gains nothing from more.
set -u
meshtrain=$1
mpiexec=$2
meshbench=${3:-}
run_timeout=30
. "$(dirname "$0")/cli_test_lib.sh"

# --- a corpus, and a weights file and a checkpoint of the tiny model to spoil.
prepare_corpus 5
data=$dir/data
base=("$meshtrain" train --device cpu --tokenizer bytes --seq-len 32 --global-batch 4 --micro-batch 2 --cpu-threads 1)
tiny=("${base[@]}" --data "$data" --model tiny)
expect_ok "train 2 steps (2 layers): weights of another shape" \
  np 2 "${tiny[@]}" --layers 2 --steps 2 --save-weights "$dir/layers2.bin"
expect_ok "train 2 steps: a checkpoint" np 2 "${tiny[@]}" --steps 2 --checkpoint-dir "$dir/ckpt"

# --- the layout.
expect_rank0_error "layout: dp x tp x pp is not the rank count" "--dp 2 x --tp 2 x --pp 1 = 4 ranks, but the job has 2" \
  2 "${tiny[@]}" --steps 1 --dp 2 --tp 2
expect_rank0_error "layout: tp does not divide the heads" "--tp 3 does not divide the model.s 4 attention heads" \
  3 "${tiny[@]}" --steps 1 --tp 3
expect_rank0_error "layout: more stages than layers" "--pp 4 .*3 layer" \
  4 "${tiny[@]}" --steps 1 --pp 4 --layers 3

# --- the data.
expect_rank0_error "missing data directory" "--data '$dir/nowhere' does not exist" \
  2 "${base[@]}" --model tiny --steps 1 --data "$dir/nowhere"
shard=data_train_000000.bin
spoil() {  # spoil NAME: a copy of the corpus in $dir/NAME, to be damaged
  rm -rf "${dir:?}/$1" && cp -r "$data" "$dir/$1"
}
spoil magic
printf '\x01\x02\x03\x04' | dd of="$dir/magic/$shard" bs=1 conv=notrunc status=none
expect_rank0_error "shard with a wrong magic" "$dir/magic/$shard\"? is not an llm.c token shard: .*not the magic number 20240520" \
  2 "${base[@]}" --model tiny --steps 1 --data "$dir/magic"
spoil header
truncate -s 100 "$dir/header/$shard"  # the header is 1024 bytes
expect_rank0_error "shard cut short in its header" "token shard \"?$dir/header/$shard\"? is truncated" \
  2 "${base[@]}" --model tiny --steps 1 --data "$dir/header"
spoil tokens
truncate -s $(($(stat -c %s "$data/$shard") - 101)) "$dir/tokens/$shard"
expect_rank0_error "shard cut short in its tokens" "token shard \"?$dir/tokens/$shard\"? is truncated: its header says" \
  2 "${base[@]}" --model tiny --steps 1 --data "$dir/tokens"
spoil vocab
printf '\x2c\x01' | dd of="$dir/vocab/$shard" bs=1 seek=$((1024 + 2 * 100)) conv=notrunc status=none  # token 300
expect_rank0_error "shard with a token outside the vocabulary" \
  "token shard \"?$dir/vocab/$shard\"? holds token id 300 at position 100, outside the vocabulary of 256 tokens" \
  2 "${base[@]}" --model tiny --steps 1 --data "$dir/vocab"

# --- weights and checkpoints.
expect_rank0_error "--init-weights of another shape" "$dir/layers2.bin.*layers=2.*layers=4|$dir/layers2.bin.*2 layers.*4" \
  2 "${tiny[@]}" --steps 1 --init-weights "$dir/layers2.bin"
ckpt=$dir/ckpt/step_00000002
cp "$ckpt/rank_00001.bin" "$dir/saved.bin"
# One byte in the middle of rank 1's shard: only the ranks reading it can see it.
printf '\x5a' | dd of="$ckpt/rank_00001.bin" bs=1 seek=20000 conv=notrunc status=none
cmp -s "$ckpt/rank_00001.bin" "$dir/saved.bin" && fail "flipping a byte changed nothing"
expect_rank0_error "checkpoint shard with one flipped byte" "rank_00001\.bin.*(corrupt|checksum)" \
  2 "${tiny[@]}" --steps 4 --resume "$ckpt"
expect_rank0_error "missing --resume directory" "$dir/ckpt/step_00000099" \
  2 "${tiny[@]}" --steps 4 --resume "$dir/ckpt/step_00000099"
expect_rank0_error "sample: missing weights file" "$dir/none.bin" \
  2 "$meshtrain" sample --device cpu --tokenizer bytes --weights "$dir/none.bin" --tokens 4 --cpu-threads 1

# --- options.
expect_rank0_error "unknown option" "unrecognised option '--bogus'" 2 "${tiny[@]}" --steps 1 --bogus
expect_rank0_error "unknown --model preset" "unknown model preset 'huge' \(known: tiny," \
  2 "${base[@]}" --data "$data" --steps 1 --model huge
printf 'steps = 2\nlearning-rate = 0.1\n' >"$dir/bad.ini"
expect_rank0_error "unknown option in a --config file" "config file '$dir/bad.ini': unrecognised option 'learning-rate'" \
  2 "${tiny[@]}" --config "$dir/bad.ini"
expect_rank0_error "memory cap too small for the model" "--device-memory-limit .*too small" \
  2 "${tiny[@]}" --steps 1 --device-memory-limit 1M

# --- file and directory options: a directory where a file is wanted (and the reverse), a FIFO (must
# not block: nothing is opened before its type is known), no permission. Each is a usage error:
# one line from rank 0 naming the option and the path, every rank exiting with 2.
expect_usage_error() {  # as expect_rank0_error, and the exit status is the usage error's, 2
  expect_rank0_error "$@" || return 1
  [ "$rc" -eq 2 ] || fail "$1: exit status $rc, expected 2 (a usage error)"
}
mkfifo "$dir/fifo"
mkdir -p "$dir/folder" "$dir/folder.bin" "$dir/folder.ini"
printf 'steps = 1\n' >"$dir/secret.ini"
chmod 000 "$dir/secret.ini"
expect_usage_error "--config: a directory" "^meshtrain: error: --config '$dir/folder' is a directory, where a file is wanted$" \
  2 "${tiny[@]}" --config "$dir/folder"
expect_usage_error "--config: a FIFO" "^meshtrain: error: --config '$dir/fifo' is a FIFO, not a regular file$" \
  2 "${tiny[@]}" --config "$dir/fifo"
expect_usage_error "--init-weights: a directory" "--init-weights '$dir/folder' is a directory, where a file is wanted" \
  2 "${tiny[@]}" --steps 1 --init-weights "$dir/folder"
expect_usage_error "--data: a FIFO" "--data '$dir/fifo' is a FIFO, not a directory" 2 "${base[@]}" --steps 1 --data "$dir/fifo"
expect_usage_error "--metrics: a directory" "--metrics '$dir/folder' is a directory, where a file is wanted" \
  2 "${tiny[@]}" --steps 1 --metrics "$dir/folder"
expect_usage_error "--save-weights: a FIFO" "--save-weights '$dir/fifo' is a FIFO, not a regular file" \
  2 "${tiny[@]}" --steps 1 --save-weights "$dir/fifo"
expect_usage_error "--checkpoint-dir: a file" "--checkpoint-dir '$dir/layers2.bin' is a file, where a directory is wanted" \
  2 "${tiny[@]}" --steps 1 --checkpoint-dir "$dir/layers2.bin"
expect_usage_error "--resume: a FIFO" "--resume '$dir/fifo' is a FIFO, not a directory" 2 "${tiny[@]}" --steps 4 --resume "$dir/fifo"
expect_usage_error "sample --weights: a FIFO" "--weights '$dir/fifo' is a FIFO, not a regular file" \
  2 "$meshtrain" sample --device cpu --tokenizer bytes --weights "$dir/fifo" --tokens 4 --cpu-threads 1
expect_usage_error "convert --from: a FIFO" "--from '$dir/fifo' is a FIFO, not a regular file" \
  2 "$meshtrain" convert --from "$dir/fifo" --to "$dir/out.bin"
expect_usage_error "convert --to: a directory for a .bin" "--to '$dir/folder.bin' is a directory, where a file is wanted" \
  2 "$meshtrain" convert --from "$dir/layers2.bin" --to "$dir/folder.bin"
expect_usage_error "plot --metrics: a directory" "--metrics '$dir/folder' is a directory, where a file is wanted" \
  2 "$meshtrain" plot "$dir/folder" --out "$dir/plot.png"
expect_usage_error "plan --calibrate: a FIFO" "--calibrate '$dir/fifo' is a FIFO, not a regular file" \
  2 "$meshtrain" plan --global-batch 8 --calibrate "$dir/fifo"
expect_usage_error "plan --cluster: a directory named .ini" "--cluster '$dir/folder.ini' is a directory, where a file is wanted" \
  2 "$meshtrain" plan --global-batch 8 --cluster "$dir/folder.ini"
expect_usage_error "prepare --input: a directory" "--input '$dir/folder' is a directory, where a file is wanted" \
  2 "$meshtrain" prepare --tokenizer bytes --input "$dir/folder" --output "$dir/prepared"
expect_usage_error "--tokenizer-dir: a file" "--tokenizer-dir '$dir/layers2.bin' is a file, where a directory is wanted" \
  2 "${tiny[@]}" --steps 1 --tokenizer-dir "$dir/layers2.bin"
if [ -n "$meshbench" ]; then
  program=meshbench expect_usage_error "meshbench coll --json: a directory" "--json '$dir/folder' is a directory, where a file is wanted" \
    2 "$meshbench" coll --device cpu --json "$dir/folder"
else
  echo "skip meshbench coll --json: no MESHBENCH argument"
fi
# Permissions: root reads everything, unless it runs without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH,
# as setpriv can start it (the ranks, children of mpirun, inherit the reduced bounding set).
nocaps=()
if [ "$(id -u)" -ne 0 ]; then
  :
elif command -v setpriv >/dev/null && setpriv --bounding-set=-dac_override,-dac_read_search true 2>/dev/null &&
     ! setpriv --bounding-set=-dac_override,-dac_read_search cat "$dir/secret.ini" 2>/dev/null; then
  nocaps=(setpriv --bounding-set=-dac_override,-dac_read_search)
else
  nocaps=(skip)
fi
if [ "${nocaps[0]:-}" = skip ]; then
  echo "skip files without read permission: running as root, and setpriv cannot drop the capability to override permissions"
else
  real_mpiexec=$mpiexec
  mpiexec=("${nocaps[@]}" "$real_mpiexec")
  printf '#!/bin/sh\nexec %s "$@"\n' "${mpiexec[*]}" >"$dir/mpiexec-nocaps"
  chmod +x "$dir/mpiexec-nocaps"
  mpiexec=$dir/mpiexec-nocaps
  expect_usage_error "--config: no read permission" "^meshtrain: error: --config '$dir/secret.ini' cannot be read: permission denied$" \
    2 "${tiny[@]}" --config "$dir/secret.ini"
  chmod 500 "$dir/folder"
  expect_usage_error "--metrics: a folder without write permission" \
    "--metrics '$dir/folder/m.jsonl' cannot be created in '$dir/folder': permission denied" \
    2 "${tiny[@]}" --steps 1 --metrics "$dir/folder/m.jsonl"
  chmod 700 "$dir/folder"
  mpiexec=$real_mpiexec
fi
# Relative paths in a --config file are its folder's, whatever the current directory.
mkdir -p "$dir/cfg"
printf 'data = ../data\nmetrics = out/m.jsonl\nsteps = 1\n' >"$dir/cfg/run.ini"
expect_ok "--config with relative paths, run from /" env -C / "${base[@]}" --model tiny --config "$dir/cfg/run.ini"
[ -s "$dir/cfg/out/m.jsonl" ] && echo "ok   its metrics went next to the file" || fail "no metrics in $dir/cfg/out"

# --- a GPU requested where none exists.
if nvidia-smi -L >/dev/null 2>&1; then
  echo "skip --device cuda without a GPU: this machine has one"
else
  cuda=("${tiny[@]}")
  cuda[3]=cuda  # --device cpu -> --device cuda
  expect_rank0_error "--device cuda without a GPU" "--device cuda: no usable GPU on host " 2 "${cuda[@]}" --steps 1
  expect_rank0_error "--comm-backend nccl on CPU ranks" \
    "--comm-backend nccl needs a GPU of its own on every rank, but rank 0 has no GPU" 2 "${tiny[@]}" --steps 1 --comm-backend nccl
fi

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all checks passed"
