// The shape of a GPT-2 style model and the named presets. Pure data: no tensors, no devices.
// defines: GptConfig, gpt_preset, gpt_preset_names, padded_vocab, layout_dims
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/layout_plan.h"  // defines: ModelDims

namespace mt {

struct GptConfig {
  static constexpr int kMaxLayers = 10000;
  int layers = 4;
  int heads = 4;
  int channels = 64;      // C; must be divisible by heads
  int max_seq_len = 64;   // maxT: rows of the position embedding
  int vocab_size = 50257; // V: real tokens; logits beyond V are padding, never predicted
  int padded_vocab = 0;   // Vp >= V, rows of the token embedding; 0 means padded_vocab(V)

  int head_size() const { return channels / heads; }
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

// tiny, small, gpt2, gpt2-medium, gpt2-large, gpt2-xl. Unknown names throw Error listing the known.
GptConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

// What a LayoutPlan needs of the model: the widths tensor parallelism splits, and the stage costs
// (forward FLOPs per token of a layer, the embedding and the head at `seq_len`; backward is twice
// that everywhere, so the ratios hold for a step).
ModelDims layout_dims(const GptConfig& config, int seq_len);

}  // namespace mt
