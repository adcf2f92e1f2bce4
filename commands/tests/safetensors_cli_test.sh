#!/usr/bin/env bash
# Hugging Face safetensors folders end to end: llm.c weights -> safetensors -> llm.c weights byte for
# byte (fp32 and bf16, one file and sharded), a checkpoint through safetensors, training started
# from a safetensors folder with the same loss bits as from the llm.c file (1 rank and tp 2) and under
# ZeRO 1-3 (dp 2, bf16) with ZeRO-1's, and bad folders as one line from rank 0. Tiny model, bytes tokenizer, generated text. Then a llama
# folder (random weights in LlamaForCausalLM's names, made by make_hf_folder) through checkpoints of
# tp 2 x pp 2 and of tp 4 (kv heads replicated) back to the same bytes, one file or sharded bf16, and
# what llama refuses (llm.c weights either way, tied embeddings). About 25 s.
# Usage: safetensors_cli_test.sh MESHTRAIN MPIEXEC COMPARE_LOSSES MAKE_HF_FOLDER
set -u
meshtrain=$1
mpiexec=$2
compare=$3
make_hf_folder=$4
. "$(dirname "$0")/cli_test_lib.sh"

prepare_corpus 5
base=("$meshtrain" train --device cpu --tokenizer bytes --data "$dir/data" --model tiny --seq-len 32 --global-batch 4
      --micro-batch 2 --lr 3e-3 --warmup 1 --log-every 1 --eval-batches 1 --cpu-threads 1)
expect_ok "train 2 steps, save llm.c weights and a checkpoint" \
  "${base[@]}" --steps 2 --save-weights "$dir/w.bin" --checkpoint-dir "$dir/ckpt" --save-every 2

same_file() {  # same_file NAME A B
  cmp -s "$2" "$3" && echo "ok   $1" || fail "$1: $2 and $3 differ"
}

# --- llm.c -> safetensors -> llm.c, byte for byte.
expect_ok "llm.c -> safetensors (fp32)" "$meshtrain" convert --from "$dir/w.bin" --to "$dir/st" --to-format safetensors
[ -f "$dir/st/model.safetensors" ] && [ -f "$dir/st/config.json" ] && echo "ok   model.safetensors and config.json" ||
  fail "no model.safetensors or config.json in $dir/st"
grep -q '"model_type": "gpt2"' "$dir/st/config.json" || fail "config.json lacks model_type gpt2"
expect_ok "safetensors -> llm.c" "$meshtrain" convert --from "$dir/st" --to "$dir/w2.bin"
same_file "llm.c -> safetensors -> llm.c: byte-identical" "$dir/w.bin" "$dir/w2.bin"

expect_ok "llm.c -> sharded safetensors" \
  "$meshtrain" convert --from "$dir/w.bin" --to "$dir/st-sharded" --to-format safetensors --shard-size 200K
[ -f "$dir/st-sharded/model.safetensors.index.json" ] && [ -f "$dir/st-sharded/model-00002-of-00005.safetensors" ] &&
  echo "ok   five shards and the index" || { fail "no shards/index"; ls "$dir/st-sharded"; }
expect_ok "sharded safetensors -> llm.c" "$meshtrain" convert --from "$dir/st-sharded" --to "$dir/w3.bin"
same_file "llm.c -> sharded safetensors -> llm.c: byte-identical" "$dir/w.bin" "$dir/w3.bin"

expect_ok "llm.c -> bf16 llm.c" "$meshtrain" convert --from "$dir/w.bin" --to "$dir/wb.bin" --dtype bf16
expect_ok "llm.c -> bf16 safetensors" "$meshtrain" convert --from "$dir/w.bin" --to "$dir/st-bf16" --to-format safetensors --dtype bf16
expect_ok "bf16 safetensors -> bf16 llm.c" "$meshtrain" convert --from "$dir/st-bf16" --to "$dir/wb2.bin" --dtype bf16
same_file "bf16 the same either way" "$dir/wb.bin" "$dir/wb2.bin"

# --- a checkpoint through safetensors, and safetensors into a tp 2 checkpoint.
expect_ok "checkpoint -> safetensors" "$meshtrain" convert --from "$dir/ckpt" --to "$dir/st-ckpt" --to-format safetensors
expect_ok "safetensors -> llm.c (from the checkpoint)" "$meshtrain" convert --from "$dir/st-ckpt" --to "$dir/w4.bin"
same_file "checkpoint -> safetensors -> llm.c equals the saved llm.c weights" "$dir/w.bin" "$dir/w4.bin"
expect_ok "safetensors -> checkpoint for tp 2" "$meshtrain" convert --from "$dir/st" --to "$dir/ckpt-tp2" --tp 2
expect_ok "checkpoint for tp 2 -> llm.c" "$meshtrain" convert --from "$dir/ckpt-tp2" --to "$dir/w5.bin"
same_file "safetensors -> tp 2 checkpoint -> llm.c: byte-identical" "$dir/w.bin" "$dir/w5.bin"

# --- --init-weights: the same loss bits from the folder as from the llm.c file.
expect_ok "train from the llm.c file" "${base[@]}" --steps 2 --init-weights "$dir/w.bin" --metrics "$dir/m-llmc.jsonl"
expect_ok "train from the safetensors folder" "${base[@]}" --steps 2 --init-weights "$dir/st" --metrics "$dir/m-st.jsonl"
same_losses "safetensors or llm.c start: losses bit for bit" "$dir/m-llmc.jsonl" "$dir/m-st.jsonl" 1 2 0
expect_ok "tp 2 from the llm.c file" np 2 "${base[@]}" --tp 2 --steps 2 --init-weights "$dir/w.bin" --metrics "$dir/m2-llmc.jsonl"
expect_ok "tp 2 from the sharded folder" np 2 "${base[@]}" --tp 2 --steps 2 --init-weights "$dir/st-sharded" \
  --metrics "$dir/m2-st.jsonl"
same_losses "tp 2: safetensors or llm.c start: losses bit for bit" "$dir/m2-llmc.jsonl" "$dir/m2-st.jsonl" 1 2 0
# ZeRO-2 (its bf16 GEMM weights) and ZeRO-3 hold owned shards only between steps: the load holds every
# unit resident meanwhile. Step 1 is the loaded weights' loss, bit for bit; step 2 within the
# reductions' orders.
for zero in 1 2 3; do
  expect_ok "dp 2 ZeRO-$zero bf16 from the llm.c file" np 2 "${base[@]}" --dp 2 --zero $zero --compute-dtype bf16 \
    --steps 2 --init-weights "$dir/w.bin" --metrics "$dir/mz$zero.jsonl"
done
for zero in 2 3; do
  same_losses "ZeRO-$zero bf16 from the file: step 1 as ZeRO-1's" "$dir/mz1.jsonl" "$dir/mz$zero.jsonl" 1 1 0
  same_losses "ZeRO-$zero bf16 from the file: step 2 as ZeRO-1's" "$dir/mz1.jsonl" "$dir/mz$zero.jsonl" 2 2 1e-5
done

# --- bad folders and options: one line, from rank 0.
cp -r "$dir/st" "$dir/cut"
truncate -s -100 "$dir/cut/model.safetensors"
expect_rank0_error "--init-weights: a safetensors file cut short" "model.safetensors: .*run past the end of its data" \
  2 "${base[@]}" --dp 2 --steps 1 --init-weights "$dir/cut"
cp -r "$dir/st" "$dir/other"
sed -i 's/"n_layer": [0-9]*/"n_layer": 1/' "$dir/other/config.json"
expect_rank0_error "--init-weights: config.json of another shape" "has layers=1, the model wants layers=" \
  2 "${base[@]}" --dp 2 --steps 1 --init-weights "$dir/other"
mkdir "$dir/noconfig" && cp "$dir/st/model.safetensors" "$dir/noconfig/"
expect_rank0_error "--init-weights: a folder without config.json" \
  "--init-weights '$dir/noconfig' is a directory, where a file is wanted \(or a safetensors folder: config.json with" \
  2 "${base[@]}" --dp 2 --steps 1 --init-weights "$dir/noconfig"
expect_error "convert: config.json of another shape than the weights" "lacks|holds tensor 'transformer.h.1" \
  "$meshtrain" convert --from "$dir/other" --to "$dir/x.bin"
sed -i 's/"gelu_new"/"relu"/' "$dir/cut/config.json"
expect_error "convert: an activation meshtrain lacks" "activation_function \"relu\"" \
  "$meshtrain" convert --from "$dir/cut" --to "$dir/x.bin"
rm "$dir/st-sharded/model-00003-of-00005.safetensors"
expect_error "convert: an index naming a missing file" "names model-00003-of-00005.safetensors .*missing" \
  "$meshtrain" convert --from "$dir/st-sharded" --to "$dir/x.bin"
expect_error "convert: fp16 llm.c" "unknown --dtype 'fp16'.*fp16 for safetensors" \
  "$meshtrain" convert --from "$dir/w.bin" --to "$dir/x.bin" --dtype fp16
expect_error "convert: an unknown --to-format" "unknown --to-format 'hf'" \
  "$meshtrain" convert --from "$dir/w.bin" --to "$dir/x" --to-format hf
[ ! -e "$dir/x.bin" ] && echo "ok   nothing written by the failed conversions" || fail "$dir/x.bin was written"

# --- llama: safetensors -> checkpoint (any layout) -> safetensors, byte for byte.
expect_ok "a random llama-tiny folder" "$make_hf_folder" "$dir/llama" llama-tiny 256
grep -q '"model_type": "llama"' "$dir/llama/config.json" || fail "config.json lacks model_type llama"
for layout in "--tp 2 --pp 2" "--tp 4" "--dp 2 --pp 2 --virtual-stages 2"; do
  name=llama-ckpt-${layout// /}
  # shellcheck disable=SC2086  # the layout is several options
  expect_ok "llama safetensors -> checkpoint ($layout)" "$meshtrain" convert --from "$dir/llama" --to "$dir/$name" $layout
  expect_ok "llama checkpoint ($layout) -> safetensors" \
    "$meshtrain" convert --from "$dir/$name" --to "$dir/$name-st" --to-format safetensors
  same_file "llama -> checkpoint ($layout) -> safetensors: model.safetensors" "$dir/llama/model.safetensors" \
    "$dir/$name-st/model.safetensors"
  same_file "llama -> checkpoint ($layout) -> safetensors: config.json" "$dir/llama/config.json" "$dir/$name-st/config.json"
done
expect_ok "a sharded bf16 llama folder" "$make_hf_folder" "$dir/llama-bf16" llama-tiny 256 bf16 100000
expect_ok "sharded bf16 llama -> checkpoint" "$meshtrain" convert --from "$dir/llama-bf16" --to "$dir/llama-bf16-ckpt" --tp 2
expect_ok "checkpoint -> sharded bf16 llama" "$meshtrain" convert --from "$dir/llama-bf16-ckpt" --to "$dir/llama-bf16-st" \
  --to-format safetensors --dtype bf16 --shard-size 100000
for f in "$dir"/llama-bf16/*; do
  same_file "sharded bf16 llama round trip: $(basename "$f")" "$f" "$dir/llama-bf16-st/$(basename "$f")"
done
[ -f "$dir/llama-bf16/model.safetensors.index.json" ] && echo "ok   the bf16 llama is sharded" || fail "no llama index"

expect_error "convert: a llama to llm.c weights" "llm.c's weights file holds a GPT-2 only, and safetensors folder .* is a llama" \
  "$meshtrain" convert --from "$dir/llama" --to "$dir/x.bin"
expect_error "convert: a llama checkpoint to llm.c weights" "llm.c's weights file holds a GPT-2 only, and checkpoint .* is a llama" \
  "$meshtrain" convert --from "$dir/llama-ckpt---tp4" --to "$dir/x.bin"
expect_error "--init-weights: llm.c weights into a llama" "is an llm.c weights file, which holds a GPT-2 only; the model is a llama" \
  "${base[@]}" --model llama-tiny --steps 1 --init-weights "$dir/w.bin"
expect_ok "--init-weights: a llama folder trains" "${base[@]}" --model llama-tiny --steps 1 --init-weights "$dir/llama"
expect_error "--save-weights from a llama" "--save-weights writes llm.c's format, which holds a GPT-2 only; the model is a llama" \
  "${base[@]}" --model llama-tiny --steps 1 --save-weights "$dir/llama.bin"
expect_error "--kv-heads on a gpt2 preset" "--kv-heads is a llama option, and --model tiny is a gpt2" \
  "${base[@]}" --kv-heads 2 --steps 1
cp -r "$dir/llama" "$dir/llama-tied"
sed -i 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' "$dir/llama-tied/config.json"
expect_error "convert: a llama with tied embeddings" "tie_word_embeddings is true: meshtrain's llama has an LM head apart" \
  "$meshtrain" convert --from "$dir/llama-tied" --to "$dir/x"
[ ! -e "$dir/x.bin" ] && [ ! -e "$dir/x" ] && echo "ok   nothing written by the failed llama conversions" || fail "x written"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
