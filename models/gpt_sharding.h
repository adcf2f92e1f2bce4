// Which part of a GPT one rank holds, and where each of its parameters sits in the full model.
//
// Pipeline parallelism gives a rank one or more chunks of consecutive layers (several with the
// interleaved schedule); the first global chunk also holds the token and position embeddings, the
// last the final layernorm and the LM head (tied to the token embedding, so a rank with the head
// holds a copy of wte too). Tensor parallelism splits inside each layer as Megatron-LM does:
//   - column-parallel (split dim 0, the outputs): attn.qkv (its q, k and v blocks each split, so a
//     rank holds whole heads), mlp.fc, and their biases;
//   - row-parallel (split dim 1, the inputs): attn.proj and mlp.proj; their biases are replicated;
//   - vocab-parallel: wte by rows (the head's logits come out split over the vocabulary);
//   - replicated on every tp rank: layernorms, wpe, the row-parallel biases.
// llama: q, SwiGLU's gate and up (two blocks of mlp.fc) and lm_head are split as the column-parallel
// and vocab-parallel tensors above; attn.kv's k and v blocks are split when tp divides the kv heads
// (a rank's q heads then read only its kv heads) and otherwise replicated whole: every rank holds
// every kv head and its q heads read theirs; each rank's gradient is then a partial sum, which the
// model sums over the group (Megatron replicates kv heads the same way when tp exceeds them).
// Every element of a shard maps to one element of the full tensor, so initialization (a pure
// function of the full index, models/init.h) and gathering are exact for any layout.
//
// ZeRO-3 gathers one parameter unit at a time (models/param_use.h), so its largest unit sets the
// step's peak; a token embedding of 50K rows can outweigh several layers. It therefore cuts the
// token embedding and llama's lm_head into vocabulary-row pieces: parameters of their own, each one
// more part along dim 0 (part tp_rank * pieces + k of tp_size * pieces), each its own unit.
// defines: GptPartition, ParamShard, gpt_param_shards, is_primary_copy, vocab_pieces, gpt_vocab_pieces,
//          gpt_param_units
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/gpt_config.h"
#include "models/gpt_parameters.h"
#include "models/param_use.h"  // defines: ParamUnit
#include "parallel/layout_plan.h"  // defines: ModelPartition

namespace mt {

// A ModelPartition (parallel/layout_plan.h: a LayoutPlan's partition of one rank) read as a GPT's:
// the embedding is the wte slice and wpe, the head lnf, the tied head's wte slice and the loss.
struct GptPartition : ModelPartition {
  GptPartition() = default;
  GptPartition(const ModelPartition& p) : ModelPartition(p) {}  // NOLINT(google-explicit-constructor)

  static GptPartition whole(const GptConfig& config);  // one rank, everything
  // InternalError when the partition does not fit the model (tp not dividing heads, the MLP or Vp;
  // chunks empty, overlapping or outside the layers): the layout plan's checks come first.
  void validate(const GptConfig& config) const;
  std::int64_t vocab_rows_local(const GptConfig& config) const { return config.vocab_rows() / tp_size; }
  std::int64_t vocab_begin(const GptConfig& config) const { return vocab_rows_local(config) * tp_rank; }
  std::string describe() const;  // "layers 0-1, 4-5 + embedding, tp 1/2"
  // Whether tp splits llama's kv heads (else every rank holds them all; see above).
  bool splits_kv_heads(const GptConfig& config) const { return config.kv_head_count() % tp_size == 0; }
};

// One local parameter and its place in the full tensor.
struct ParamShard {
  ParamSpec full;       // the full parameter (name, kind, full shape)
  ParamSpec local;      // the same name with this rank's shape ("wte#k" for vocabulary piece k)
  int split_dim = -1;   // -1: whole (replicated over the tp group when tp > 1)
  int blocks = 1;       // blocks along split_dim, each split separately (qkv: q, k, v)
  int parts = 1, part = 0;

  bool replicated() const { return split_dim < 0; }
  // Runs {first element of the full tensor, count} covering the local tensor in its element order.
  std::vector<std::pair<std::int64_t, std::int64_t>> full_runs() const;
};

// The parameters a partition holds, in the order of gpt_parameter_specs (wte, wpe, layers, lnf, lm_head);
// wte and lm_head each as `pieces` consecutive row pieces (vocab_pieces) when pieces > 1.
std::vector<ParamShard> gpt_param_shards(const GptConfig& config, const GptPartition& partition, int pieces = 1);

// The fewest pieces that bring a rank's [local_vocab_rows, channels] table within unit_numel
// elements (1 when it is already): a divisor of local_vocab_rows, so the pieces are equal.
int vocab_pieces(std::int64_t local_vocab_rows, std::int64_t channels, std::int64_t unit_numel);
// The same for a model at tp_size against a layer's largest unit on a rank (its MLP): the pieces
// ZeRO-3 cuts wte and lm_head into (1 below stage 3), so no piece outweighs a layer's unit.
int gpt_vocab_pieces(const GptConfig& config, int tp_size, int zero_stage);

// A stage's parameter units (models/param_use.h) from its store's specs, in store order: what
// Gpt::param_units() will return, known before the model (and its store) is built. "embedding"
// (wte, and wpe where held), "h.<l>.attn" and "h.<l>.mlp" per layer, "lnf", llama's "head";
// vocabulary pieces are a unit each, "embedding.<k>" (wpe joins the last) and "head.<k>".
std::vector<ParamUnit> gpt_param_units(const std::vector<ParamSpec>& specs);

// Whether `shard`, as `partition` holds it, is the copy that counts among the copies inside one
// pipeline: not a replicated tensor on tp rank > 0, nor the tied embedding's copy on a rank without
// the embedding (the last stage's, with pp > 1). The global norm counts, and checkpoints and gathers
// take, exactly these; data-parallel replicas all answer alike.
bool is_primary_copy(const ParamShard& shard, const GptPartition& partition);

}  // namespace mt
