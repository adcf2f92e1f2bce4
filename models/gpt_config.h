// The shape of a decoder-only transformer and the named presets. Pure data: no tensors, no devices.
// Two families share the shape and the code (models/gpt.h):
// - gpt2: learned positions, LayerNorm with biases, fused QKV with biases, a 4C GELU MLP, the LM
//   head tied to the token embedding;
// - llama: rotary positions on q and k (RoPE), RMSNorm, no biases, grouped-query attention
//   (kv_heads <= heads), a SwiGLU MLP of ffn_hidden, an untied LM head.
// defines: ModelFamily, GptConfig, gpt_preset, gpt_preset_names, padded_vocab, layout_dims,
//          model_family_name
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/layout_plan.h"  // defines: ModelDims

namespace mt {

enum class ModelFamily : std::uint8_t { Gpt2, Llama };
const char* model_family_name(ModelFamily family);  // "gpt2", "llama"

struct GptConfig {
  static constexpr int kMaxLayers = 10000;
  ModelFamily family = ModelFamily::Gpt2;
  int layers = 4;
  int heads = 4;
  int channels = 64;      // C; must be divisible by heads
  int max_seq_len = 64;   // maxT: the longest sequence (gpt2: rows of the position embedding)
  int vocab_size = 50257; // V: real tokens; logits beyond V are padding, never predicted
  int padded_vocab = 0;   // Vp >= V, rows of the token embedding; 0 means padded_vocab(V)
  // llama only (gpt2 requires the defaults):
  int kv_heads = 0;          // key/value heads, dividing heads; 0 means heads (no grouping)
  int ffn_hidden = 0;        // SwiGLU's hidden width F; 0 means 4C
  float rope_theta = 10000;  // RoPE's base
  float norm_eps = 1e-5f;    // RMSNorm's epsilon (gpt2's LayerNorm uses 1e-5 too)

  bool is_llama() const { return family == ModelFamily::Llama; }
  int head_size() const { return channels / heads; }
  int kv_head_count() const { return kv_heads == 0 ? heads : kv_heads; }
  // Outputs of the fused QKV projection: q over every head, k and v over the kv heads.
  std::int64_t qkv_width() const { return static_cast<std::int64_t>(heads + 2 * kv_head_count()) * head_size(); }
  // The MLP's hidden width: 4C for gpt2 (GELU), F for llama (SwiGLU's gate and up each F wide).
  std::int64_t mlp_hidden() const;
  // Rows of the MLP's up projection: the hidden width, twice it for SwiGLU ([gate | up]).
  std::int64_t mlp_up_rows() const { return is_llama() ? 2 * mlp_hidden() : mlp_hidden(); }
  bool tied_head() const { return !is_llama(); }   // the LM head reads the token embedding
  bool has_biases() const { return !is_llama(); }  // linear and norm biases
  bool rms_norm() const { return is_llama(); }    // RMSNorm (no mean, no bias) for LayerNorm
  int vocab_rows() const;  // Vp, resolving 0
  // Parameters in total (the tied token embedding counted once, padding rows included).
  std::int64_t parameter_count() const;
  // Parameters excluding the padding rows of the embedding: what "124M" counts.
  std::int64_t real_parameter_count() const;
  // Model FLOPs of one training step (forward + backward) per token: 6 x matmul parameters plus
  // attention (12 x layers x channels x T for causal self-attention counted in full, as PaLM).
  double training_flops_per_token(int seq_len) const;
  // Forward FLOPs per token of one transformer layer (four matrix multiplies and attention), of the
  // head (the logits and the loss over the vocabulary rows) and of the embedding's lookups; backward
  // is twice each. What pipeline stages are balanced by (the trainer, and perf/ predicting it).
  struct PartFlops {
    double layer = 0, head = 0, embedding = 0;
  };
  PartFlops forward_flops_by_part(int seq_len) const;
  // Throws Error naming the first inconsistent field.
  void validate() const;
  std::string describe() const;  // "layers=12 heads=12 channels=768 max_seq_len=1024 vocab=50257(50304)"
};

// V rounded up to a multiple of 128, as llm.c does (50257 -> 50304): keeps the LM head GEMM aligned.
int padded_vocab(int vocab_size);

// tiny, small, gpt2, gpt2-medium, gpt2-large, gpt2-xl, the GPT-3 shapes, llama-tiny, llama-125m,
// llama3-8b, llama3-70b. Unknown names throw Error listing the known.
GptConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

// What a LayoutPlan needs of the model: the widths tensor parallelism splits, and the stage costs
// (forward FLOPs per token of a layer, the embedding and the head at `seq_len`; backward is twice
// that everywhere, so the ratios hold for a step).
ModelDims layout_dims(const GptConfig& config, int seq_len);

}  // namespace mt
