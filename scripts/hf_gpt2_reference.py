#!/usr/bin/env python3
"""Reference check of meshtrain's safetensors reading against Hugging Face transformers (needs torch
and transformers; nothing is downloaded).

Builds a random GPT2LMHeadModel from a config shaped like meshtrain's `--model tiny` (4 layers, 4
heads, 64 channels, 64 positions; vocabulary 256, the bytes tokenizer's), saves it with
save_pretrained (safetensors: `transformer.` names, no lm_head: tied), and writes token shards in
llm.c's format whose every window of T + 1 tokens is the same sequence, so any batch meshtrain draws
is that one sequence. Prints HF's logits on it, its loss and the global gradient norm, and the
meshtrain command whose step-1 loss and norm must match (1e-4 relative in fp32):

    python3 scripts/hf_gpt2_reference.py OUT_DIR
    meshtrain train --device cpu --tokenizer bytes --model tiny --seq-len 64 --global-batch 4 \\
        --micro-batch 4 --steps 1 --grad-clip 0 --init-weights OUT_DIR/hf --data OUT_DIR/data
"""
import json
import pathlib
import struct
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

LAYERS, HEADS, CHANNELS, POSITIONS, VOCAB, T = 4, 4, 64, 64, 256, 64


def write_shard(path: pathlib.Path, tokens: list[int]) -> None:
    header = [20240520, 1, len(tokens)] + [0] * 253  # llm.c token shard, version 1: uint16 tokens
    path.write_bytes(struct.pack("<256i", *header) + struct.pack(f"<{len(tokens)}H", *tokens))


def main() -> None:
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "hf_reference")
    torch.manual_seed(1234)
    config = GPT2Config(n_layer=LAYERS, n_head=HEADS, n_embd=CHANNELS, n_positions=POSITIONS, vocab_size=VOCAB,
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config).float()
    with torch.no_grad():  # random biases and layernorm weights too, so every tensor is checked
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight")
                                                     or name.endswith("ln_f.weight") else 0.0))
    model.save_pretrained(out / "hf", safe_serialization=True)

    # One sequence of T tokens; the stream repeats it with period T, so every window [wT, wT + T]
    # holds it and its first token again: input seq, target seq[1:] + seq[0].
    seq = [(7 * i * i + 3 * i + 1) % VOCAB for i in range(T)]
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    write_shard(data / "data_train_000000.bin", seq * 64 + seq[:1])
    write_shard(data / "data_val_000000.bin", seq * 8 + seq[:1])

    model.eval()  # no dropout (all zero anyway)
    x = torch.tensor([seq])
    y = torch.tensor([seq[1:] + seq[:1]])
    logits = model(x).logits
    loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
    report = {
        "loss": loss.item(),
        "grad_norm": norm.item(),
        "logits[0, 0, :8]": logits[0, 0, :8].tolist(),
        "logits[0, T-1, :8]": logits[0, -1, :8].tolist(),
    }
    (out / "reference.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"meshtrain train --device cpu --tokenizer bytes --model tiny --seq-len {T} --global-batch 4 "
          f"--micro-batch 4 --steps 1 --grad-clip 0 --log-every 1 --init-weights {out / 'hf'} --data {data}")


if __name__ == "__main__":
    main()
