// What the performance model knows about one training job before any device is touched: the
// model's shape, the training shape (sequence, batch, precision) and a parallel layout, and what
// follows from them by counting: parameters and FLOPs per rank. The counts follow meshtrain's own
// code (models/gpt.cpp, models/gpt_sharding.h), not a textbook model. The layers per stage, the
// micro-batches per step and each stage's part of the model come from the job's LayoutPlan
// (parallel/layout_plan.h), as they do for the trainer.
// defines: ModelShape, Precision, TrainingShape, Layout, describe, LayerWidths, layer_widths,
//          rank_seq_len, gradient_ranks, kv_columns, replicated_kv_rows, ChunkWork, chunk_work, stage_parameter_tensors, stage_parameters,
//          StageUnit, stage_units, stage_parameter_units
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt_config.h"
#include "parallel/layout_plan.h"
#include "parallel/schedule_kind.h"
#include "runtime/attention_kernel.h"

namespace mt::perf {

using ModelShape = GptConfig;

enum class Precision { FP32, BF16 };  // the compute dtype of activations and GEMMs (--compute-dtype)

struct TrainingShape {
  int seq_len = 1024;
  int global_batch = 8;  // sequences per optimizer step, whole job
  Precision precision = Precision::FP32;  // meshtrain train's default (--compute-dtype)
  // Count validation's activation slots too (perf/memory_model.h held_slots): meshtrain train
  // evaluates after the last step whenever the data has a val split, and its forward-only schedule
  // may keep more slots than training does. Off: the memory of training steps (meshtrain plan).
  bool validation = false;
  // Which attention implementation runs (its saved state and scratch differ): the CUDA default
  // for plans, the run's own for meshtrain train's estimate (runtime/attention.h attention_kernel_for).
  nn::AttentionKernel attention = nn::AttentionKernel::Reference;
  int act_bytes() const { return precision == Precision::BF16 ? 2 : 4; }
};

// A candidate layout is what a user would ask for (parallel/layout_plan.h).
using Layout = LayoutRequest;

// "dp=2 tp=2 pp=2 v=1 zero=1 micro=4 schedule=1f1b" (" cp=2" after tp where cp > 1)
inline std::string describe(const Layout& layout) { return layout.describe(); }

// Context parallelism: the rows of each sequence one cp rank holds (2 of its 2 x cp chunks:
// parallel/causal_split.h). Its GEMMs, activations and share of attention scale with them; its
// attention meets the keys of the whole sequence, around the ring.
inline double rank_seq_len(const TrainingShape& training, const Layout& layout) {
  return static_cast<double>(training.seq_len) / layout.cp;
}
// The ranks gradients are reduced over and ZeRO shards over: dp x cp (cp ranks hold the same
// weights: parallel/groups.h gradient_group).
inline int gradient_ranks(const Layout& layout) { return layout.dp * layout.cp; }
// The key/value columns of one layer on one tensor-parallel rank (qkv's [k | v] part, whole where
// tp does not split llama's kv heads): what the cp ring passes per local row.
double kv_columns(const ModelShape& model, int tp);

// The columns of one layer's [N, *] activations on one tensor-parallel rank (models/gpt.cpp), by
// family: gpt2 keeps qkv [3C/tp], fch and its GELU [4C/tp] each, LayerNorm's mean and rstd; llama
// keeps qkv [(H + 2 Hkv) hs / tp] (the kv part whole where tp does not divide Hkv), SwiGLU's
// [gate | up] [2F/tp] and its output [F/tp], RMSNorm's one statistic. Attention's output is C/tp in
// both; RoPE rotates q and k inside qkv and keeps nothing.
struct LayerWidths {
  double qkv = 0, attention = 0;
  double mlp_up = 0;     // the up projection's output: fch (gpt2), [gate | up] (llama)
  double mlp_out = 0;    // the activation's output the down projection reads: GELU's, SwiGLU's
  int norm_stats = 0;    // fp32 [N] vectors each norm keeps
};
LayerWidths layer_widths(const ModelShape& model, int tp);
// Rows of attn.kv every tensor-parallel rank holds whole: 2 Hkv hs where tp > 1 does not divide
// llama's kv heads (models/gpt_sharding.h), else 0.
double replicated_kv_rows(const ModelShape& model, int tp);

// The work of one micro-batch through one model chunk on one tensor-parallel rank (and, with
// context parallelism, its cp rank's rows of the sequence: a cp-th of the GEMMs and of attention).
struct ChunkWork {
  int layers = 0;
  bool embedding = false, head = false;
  double forward_flops = 0;       // matrix FLOPs (backward does twice as many)
  double head_flops = 0;          // of which the LM head's logits GEMM: its two gradient GEMMs run in
                                  // the forward too (models/gpt.h), so its backward has none
  double layer_flops = 0;         // of which in the transformer layers (what recomputation repeats)
  double attention_flops = 0;     // of which attention's scores and values: no weights, so all of their
                                  // backward computes input gradients (B in the zero-bubble split)
  int tp_allreduces_forward = 0;  // of [b T, C] activations
  int tp_allreduces_backward = 0;
  int tp_small_allreduces = 0;    // of [b T] fp32 (the vocab-parallel loss statistics)
};
ChunkWork chunk_work(const ModelShape& model, const TrainingShape& training, const Layout& layout, int layers,
                     bool embedding, bool head);

// Elements of each parameter tensor a rank of pipeline stage `stage` holds, in the order of
// gpt_param_shards (models/gpt_sharding.h) for the plan's partition of that stage: its
// tensor-parallel shard of its chunks, the token embedding on the first stage and, tied (gpt2), on
// the last; llama's last stage holds its own lm_head instead.
// Every tensor-parallel rank holds shards of the same sizes. And their sum.
std::vector<std::int64_t> stage_parameter_tensors(const ModelShape& model, const LayoutPlan& plan, int stage);
std::int64_t stage_parameters(const ModelShape& model, const LayoutPlan& plan, int stage);
// The same elements by parameter unit (models/gpt_sharding.h gpt_param_units: what ZeRO-3 gathers
// and ZeRO-2/3 reduce-scatter as one), in store order, those the stage holds: the embedding (wte
// and wpe, or the head's tied wte copy), each layer, the final norm, llama's lm_head; with ZeRO-3's
// vocabulary pieces (gpt_vocab_pieces) "embedding.<k>" and "head.<k>". Each with its blocks as
// zero/unit_shards.h cuts them (the token embedding in one of its own, the GEMM weights apart).
struct StageUnit {
  std::string name;
  std::vector<std::int64_t> blocks;  // elements, before padding
  std::vector<char> compute_only;    // per block: read only through the compute copy (ZeRO 1-3 under bf16 gather that)
  std::int64_t numel() const;
  // What ZeRO-3 gathers of it per use (ZeRO-1/2 after each step): fp32, but the compute_only blocks in
  // bf16 under bf16 compute.
  double gathered_bytes(bool bf16) const;
};
// bf16: the compute dtype is bf16 (with ZeRO-2/3, the cut that gathers the GEMM weights in bf16).
const std::vector<StageUnit>& stage_units(const ModelShape& model, const LayoutPlan& plan, int stage, bool bf16);
std::vector<std::int64_t> stage_parameter_units(const ModelShape& model, const LayoutPlan& plan, int stage);

}  // namespace mt::perf
