#!/usr/bin/env python3
"""Reference check of meshtrain's llama against Hugging Face transformers (needs torch and
transformers; nothing is downloaded).

Builds a random LlamaForCausalLM from a config shaped like meshtrain's `--model llama-tiny` (4
layers, 4 query heads sharing 2 key/value heads, 64 channels, SwiGLU width 160, RoPE theta 10000,
RMSNorm epsilon 1e-5, an untied LM head; vocabulary 256, the bytes tokenizer's), saves it with
save_pretrained (safetensors: model.layers.N.self_attn.q_proj.weight, ..., lm_head.weight), and
writes token shards in llm.c's format whose every window of T + 1 tokens is the same sequence, so
any batch meshtrain draws is that one sequence. Prints HF's logits on it, its loss, the global
gradient norm and each tensor's gradient norm (HF's names), and the meshtrain command whose step-1
loss and norm must match (1e-4 relative in fp32):

    python3 scripts/hf_llama_reference.py OUT_DIR
    meshtrain train --device cpu --tokenizer bytes --model llama-tiny --seq-len 64 --global-batch 4 \\
        --micro-batch 4 --steps 1 --grad-clip 0 --init-weights OUT_DIR/hf --data OUT_DIR/data
"""
import json
import pathlib
import struct
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

LAYERS, HEADS, KV_HEADS, CHANNELS, FFN, POSITIONS, VOCAB, T = 4, 4, 2, 64, 160, 64, 256, 64


def write_shard(path: pathlib.Path, tokens: list[int]) -> None:
    header = [20240520, 1, len(tokens)] + [0] * 253  # llm.c token shard, version 1: uint16 tokens
    path.write_bytes(struct.pack("<256i", *header) + struct.pack(f"<{len(tokens)}H", *tokens))


def main() -> None:
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "hf_llama_reference")
    torch.manual_seed(1234)
    config = LlamaConfig(hidden_size=CHANNELS, intermediate_size=FFN, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=POSITIONS,
                         vocab_size=VOCAB, rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu",
                         tie_word_embeddings=False, attention_bias=False, mlp_bias=False, attention_dropout=0.0)
    model = LlamaForCausalLM(config).float()
    with torch.no_grad():  # RMSNorm weights away from 1, so every tensor is checked
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
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
    grads = {name: p.grad.double() for name, p in model.named_parameters() if p.grad is not None}
    norm = torch.sqrt(sum((g ** 2).sum() for g in grads.values()))
    report = {
        "loss": loss.item(),
        "grad_norm": norm.item(),
        "logits[0, 0, :8]": logits[0, 0, :8].tolist(),
        "logits[0, T-1, :8]": logits[0, -1, :8].tolist(),
        "grad_norm_by_tensor": {name: g.norm().item() for name, g in grads.items()},
    }
    (out / "reference.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "grad_norm_by_tensor"}, indent=2))
    print(f"meshtrain train --device cpu --tokenizer bytes --model llama-tiny --seq-len {T} --global-batch 4 "
          f"--micro-batch 4 --steps 1 --grad-clip 0 --log-every 1 --init-weights {out / 'hf'} --data {data}")


if __name__ == "__main__":
    main()
