#!/usr/bin/env bash
# On a lent GPU machine (torch and transformers installed, nothing downloaded), from the repository
# root after scripts/device_bundle.sh: the Hugging Face reference check of issue 22. For GPT-2 and
# for a GQA llama with an untied head, builds a random model in transformers, saves it with
# save_pretrained (scripts/hf_gpt2_reference.py, scripts/hf_llama_reference.py), loads it into
# meshtrain with --init-weights on the CPU and on CUDA, and prints HF's step-1 loss and gradient
# norm next to meshtrain's (1e-4 relative in fp32 is the bar).
#   scripts/device_hf_reference.sh OUT_DIR
set -euo pipefail
out=${1:?usage: device_hf_reference.sh OUT_DIR}
mkdir -p "$out"
run() { scripts/device_run.sh exec "$@"; }
mt=build/cuda/bin/meshtrain
for family in gpt2 llama; do
  python3 "scripts/hf_${family}_reference.py" "$out/$family" > "$out/$family.reference.txt"
  model=tiny; [ "$family" = llama ] && model=llama-tiny
  for device in cpu cuda; do
    run "$mt" train --device "$device" --tokenizer bytes --model "$model" --seq-len 64 --global-batch 4 \
      --micro-batch 4 --steps 1 --grad-clip 0 --log-every 1 --eval-every 0 --init-weights "$out/$family/hf" \
      --data "$out/$family/data" --metrics "$out/$family.$device.jsonl" > "$out/$family.$device.txt" 2>&1
  done
  python3 - "$out" "$family" <<'PY'
import json, sys
out, family = sys.argv[1], sys.argv[2]
ref = json.load(open(f"{out}/{family}/reference.json"))
for device in ("cpu", "cuda"):
    rows = [json.loads(l) for l in open(f"{out}/{family}.{device}.jsonl") if '"step"' in l]
    r = rows[0]
    rel_loss = abs(r["loss"] - ref["loss"]) / abs(ref["loss"])
    rel_norm = abs(r["grad_norm"] - ref["grad_norm"]) / abs(ref["grad_norm"])
    verdict = "PASS" if max(rel_loss, rel_norm) <= 1e-4 else "FAIL"
    print(f"{family} {device}: loss {r['loss']:.7f} (HF {ref['loss']:.7f}, rel {rel_loss:.1e}), "
          f"grad norm {r['grad_norm']:.7f} (HF {ref['grad_norm']:.7f}, rel {rel_norm:.1e}) {verdict}")
PY
done
