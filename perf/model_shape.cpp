#include "perf/model_shape.h"

#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <utility>

#include "models/gpt_sharding.h"
#include "models/shard_blocks.h"

namespace mt::perf {
namespace {

// gpt_param_shards lists the whole model's tensors, by name; the layout search asks for the same
// few partitions thousands of times, so their sizes are kept per (model, partition, vocabulary pieces).
using ShardKey = std::tuple<ModelFamily, int, int, int, int, int, int, int, int, int, std::vector<std::pair<int, int>>,
                            bool, bool, int, bool>;

// Per tensor its elements; the parameter units (gpt_param_units) with their ZeRO blocks.
struct Shards {
  std::vector<std::int64_t> tensors;
  std::vector<StageUnit> units;
};

// bf16_gathers: ZeRO-2/3 with bf16 compute, whose cut keeps the GEMM weights in blocks of their own.
const Shards& shard_sizes(const ModelShape& model, const GptPartition& partition, int pieces, bool bf16_gathers) {
  static std::mutex mutex;
  static std::map<ShardKey, Shards> cache;
  std::vector<std::pair<int, int>> chunks;
  for (const LayerRange& r : partition.chunks) chunks.emplace_back(r.begin, r.end);
  ShardKey key{model.family,       model.layers,       model.heads,         model.kv_heads, model.ffn_hidden,
               model.channels,     model.max_seq_len,  model.vocab_size,    model.padded_vocab,
               partition.tp_size,  std::move(chunks),  partition.embedding, partition.head, pieces,
               bf16_gathers};
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  Shards sizes;
  std::vector<ParamSpec> specs;
  for (const ParamShard& shard : gpt_param_shards(model, partition, pieces)) {
    sizes.tensors.push_back(shard.local.numel());
    specs.push_back(shard.local);
  }
  // A unit's blocks as zero/unit_shards.h cuts them (models/shard_blocks.h), before padding.
  const std::vector<ShardBlock> blocks = gpt_shard_blocks(specs, /*dp=*/1, bf16_gathers);
  for (const ParamUnit& unit : gpt_param_units(specs)) sizes.units.push_back(StageUnit{unit.name, {}, {}});
  for (const ShardBlock& b : blocks) {
    StageUnit& u = sizes.units.at(static_cast<std::size_t>(b.unit));
    u.blocks.push_back(b.numel);
    u.compute_only.push_back(b.compute_only ? 1 : 0);
  }
  return cache.emplace(std::move(key), std::move(sizes)).first->second;
}

const Shards& stage_shards(const ModelShape& model, const LayoutPlan& plan, int stage, bool bf16 = false) {
  MeshCoord coord;
  coord.pp = stage;  // tensor-parallel rank 0: every rank of the group holds shards of the same sizes
  const Layout& layout = plan.layout();
  return shard_sizes(model, plan.partition(coord), gpt_vocab_pieces(model, layout.tp, layout.zero),
                     zero_gathers_compute_copy(layout.zero, bf16));
}

}  // namespace

double replicated_kv_rows(const ModelShape& model, int tp) {
  GptPartition partition;  // only its tp size matters
  partition.tp_size = tp;
  if (!model.is_llama() || tp == 1 || partition.splits_kv_heads(model)) return 0.0;
  return 2.0 * model.kv_head_count() * model.head_size();
}

LayerWidths layer_widths(const ModelShape& model, int tp) {
  const double C = model.channels, kv = replicated_kv_rows(model, tp);
  LayerWidths w;
  w.attention = C / tp;
  if (!model.is_llama()) {
    w.qkv = 3.0 * C / tp;
    w.mlp_up = w.mlp_out = 4.0 * C / tp;
    w.norm_stats = 2;
    return w;
  }
  // Where tp splits the kv heads, every part of qkv is split; else q is and [k | v] is whole.
  w.qkv = kv > 0 ? C / tp + kv : static_cast<double>(model.qkv_width()) / tp;
  w.mlp_up = static_cast<double>(model.mlp_up_rows()) / tp;
  w.mlp_out = static_cast<double>(model.mlp_hidden()) / tp;
  w.norm_stats = 1;
  return w;
}

double kv_columns(const ModelShape& model, int tp) {
  const LayerWidths w = layer_widths(model, tp);
  return w.qkv - w.attention;
}

ChunkWork chunk_work(const ModelShape& model, const TrainingShape& training, const Layout& layout, int layers,
                     bool embedding, bool head) {
  // A cp rank's rows; attention still spans the whole sequence T (the ring brings the other
  // ranks' keys), so its FLOPs per rank fall by cp with the rows.
  const double N = layout.micro_batch * rank_seq_len(training, layout), C = model.channels;
  const double T = training.seq_len, tp = layout.tp;
  ChunkWork w;
  w.layers = layers;
  w.embedding = embedding;
  w.head = head;
  // Per token and layer: 2 FLOPs per matrix weight (gpt2: QKV 6C^2, projection 2C^2, MLP 16C^2;
  // llama: q and the projection 2C^2 each, [k | v] 4 Hkv hs C, SwiGLU 6FC), attention scores and
  // values 4TC (causal, counted in full as the kernels compute it); the LM head 2 C Vp. Every rank
  // computes llama's kv heads in full where tp does not split them.
  const double replicated = 2.0 * replicated_kv_rows(model, layout.tp) * C * (tp - 1.0);
  w.layer_flops = N * layers * (model.forward_flops_by_part(training.seq_len).layer + replicated) / tp;
  w.attention_flops = N * layers * 4.0 * T * C / tp;
  w.head_flops = head ? N * 2.0 * C * model.vocab_rows() / tp : 0.0;
  w.forward_flops = w.layer_flops + w.head_flops;
  if (layout.tp > 1) {
    // Two allreduces per layer each way (copy/reduce pairs); the vocab-parallel embedding sums its
    // lookups (forward); the head's copy sums its input gradient (backward); the loss combines
    // three [N] statistics (forward).
    w.tp_allreduces_forward = 2 * layers + (embedding ? 1 : 0);
    w.tp_allreduces_backward = 2 * layers + (head ? 1 : 0);
    w.tp_small_allreduces = head ? 3 : 0;
  }
  return w;
}

std::vector<std::int64_t> stage_parameter_tensors(const ModelShape& model, const LayoutPlan& plan, int stage) {
  return stage_shards(model, plan, stage).tensors;
}

std::int64_t StageUnit::numel() const { return std::accumulate(blocks.begin(), blocks.end(), std::int64_t{0}); }

double StageUnit::gathered_bytes(bool bf16) const {
  double bytes = 0;
  for (std::size_t b = 0; b < blocks.size(); ++b)
    bytes += static_cast<double>(blocks[b]) * (bf16 && compute_only[b] ? 2.0 : 4.0);
  return bytes;
}

const std::vector<StageUnit>& stage_units(const ModelShape& model, const LayoutPlan& plan, int stage, bool bf16) {
  return stage_shards(model, plan, stage, bf16).units;
}

std::vector<std::int64_t> stage_parameter_units(const ModelShape& model, const LayoutPlan& plan, int stage) {
  std::vector<std::int64_t> numels;
  for (const StageUnit& u : stage_units(model, plan, stage, false)) numels.push_back(u.numel());
  return numels;
}

std::int64_t stage_parameters(const ModelShape& model, const LayoutPlan& plan, int stage) {
  const std::vector<std::int64_t> tensors = stage_parameter_tensors(model, plan, stage);
  return std::accumulate(tensors.begin(), tensors.end(), std::int64_t{0});
}

}  // namespace mt::perf
