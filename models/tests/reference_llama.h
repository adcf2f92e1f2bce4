// A double-precision reference of the llama family's whole forward pass, for tests, composed from
// the ops of reference_gpt.h (written independently of runtime/ops/) on parameters named
// as models/gpt_parameters.h names llama's. Test-only: slow, clear, exact to ~1e-15.
// defines: reference_llama_logits, reference_llama_loss
#pragma once

#include <vector>

#include "models/gpt_config.h"           // defines: GptConfig
#include "models/tests/reference_gpt.h"  // defines: Vec, RefParams

namespace mt::ref {

// Logits [B*T, Vp] of a llama config (config.is_llama()) for inputs [B*T] (row b*T + t):
//   x = wte[tok]                                        (no position embedding: RoPE below)
//   per layer:
//     h = rmsnorm(x, ln1)
//     qkv = [h attn.q^T | h attn.kv^T]                  ([q | k | v], H + 2 KV heads of hs)
//     x += attention(rope(qkv)) attn.proj^T              (grouped: q head i reads kv head i / (H/KV))
//     h = rmsnorm(x, ln2)
//     x += swiglu(h mlp.fc^T) mlp.proj^T                 (mlp.fc = [gate | up], [2F, C])
//   logits = rmsnorm(x, lnf) lm_head^T                   (untied head, all Vp rows)
// No biases anywhere; RMSNorm's eps and RoPE's theta are the config's (as doubles).
// Throws Error if a parameter is missing or has the wrong size, a token is out of range or
// T > max_seq_len.
Vec reference_llama_logits(const GptConfig& config, const RefParams& params, const std::vector<int>& inputs, int B,
                           int T);
// Mean over the B*T positions of the cross-entropy of those logits (first V of Vp columns).
double reference_llama_loss(const GptConfig& config, const RefParams& params, const std::vector<int>& inputs,
                            const std::vector<int>& targets, int B, int T);

}  // namespace mt::ref
