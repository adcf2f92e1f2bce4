#include "perf/memory_model.h"

#include <algorithm>
#include <cstdio>

namespace mt::perf {

double layer_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout) {
  const double B = layout.micro_batch, T = training.seq_len, N = B * T, C = model.channels, tp = layout.tp;
  const double a = training.act_bytes(), f32 = 4.0, H = model.heads / layout.tp;
  // ln1, res2, ln2 [N,C]; qkv 3C/tp, atty C/tp, fch and fch_gelu 4C/tp each; fp32 layernorm
  // statistics 4 x [N] and the attention probabilities [B, H/tp, T, T].
  return 3.0 * N * C * a + 12.0 * N * C / tp * a + 4.0 * N * f32 + B * H * T * T * f32;
}

double slot_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout, int layers, bool head) {
  const double N = static_cast<double>(layout.micro_batch) * training.seq_len, C = model.channels;
  const double a = training.act_bytes(), f32 = 4.0;
  // residual[0..layers] and each layer's activations (layer_bytes).
  double bytes = (layers + 1) * N * C * a;
  // With recomputation only the layer inputs stay; one layer's activations are rebuilt at a time
  // (counted in the workspace by estimate_memory).
  if (!training.recompute) bytes += layers * layer_bytes(model, training, layout);
  if (head) bytes += N * C * a + 4.0 * N * f32;  // lnf and its statistics, losses, log-sum-exps
  bytes += N * C * a;                            // dres: the gradient flowing through the chunk
  return bytes;
}

double logits_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout) {
  return static_cast<double>(layout.micro_batch) * training.seq_len * model.vocab_rows() / layout.tp *
         training.act_bytes();
}

MemoryBreakdown estimate_memory(const ModelShape& model, const TrainingShape& training, const Layout& layout,
                                const Cluster& cluster, const std::vector<int>& chunk_layers,
                                const std::vector<int>& peak_in_flight) {
  const double N = static_cast<double>(layout.micro_batch) * training.seq_len, C = model.channels;
  const double a = training.act_bytes(), tp = layout.tp;
  MemoryBreakdown worst;
  for (int s = 0; s < layout.pp; ++s) {
    MemoryBreakdown m;
    m.stage = s;
    const double params = static_cast<double>(stage_parameters(model, layout, chunk_layers, s));
    m.parameters = params * (4.0 + (training.precision == Precision::BF16 ? 2.0 : 0.0));
    m.gradients = params * 4.0;
    m.optimizer = params * 8.0 / (layout.zero == 1 ? layout.dp : 1);
    m.in_flight = peak_in_flight.at(static_cast<std::size_t>(s));
    // A stage's chunks hold the same number of layers (interleaving) or it has one chunk, so the
    // mean slot over its chunks times the slots in flight is what it holds at its peak.
    double mean_slot = 0;
    const int v = layout.virtual_stages;
    for (int c = 0; c < v; ++c) {
      const int g = c * layout.pp + s;
      mean_slot += slot_bytes(model, training, layout, chunk_layers.at(static_cast<std::size_t>(g)),
                              g == layout.pp * v - 1) / v;
    }
    m.activations = m.in_flight * mean_slot;
    if (s == layout.pp - 1) {
      // The head chunk's share of the slots in flight (all of them when v = 1).
      const int head_slots = std::max(1, (m.in_flight + v - 1) / v);
      m.logits = head_slots * logits_bytes(model, training, layout);
    }
    // Scratch (models/gpt.cpp Gpt::Scratch): branch, dln [N,C]; datty C/tp, dqkv 3C/tp, dfch 4C/tp;
    // and attention backward's gradient of the scores, fp32 [B, H/tp, T, T], while it runs.
    const double Bm = layout.micro_batch, Tm = training.seq_len, Hm = model.heads / layout.tp;
    m.workspace = 2.0 * N * C * a + 8.0 * N * C / tp * a + (layout.tp > 1 ? 3.0 * N * 4.0 : 0.0) +
                  Bm * Hm * Tm * Tm * 4.0;
    if (training.recompute) m.workspace += layer_bytes(model, training, layout);
    m.reserved = cluster.memory_reserved;
    if (s == 0 || m.total() > worst.total()) worst = m;
  }
  return worst;
}

std::string describe(const MemoryBreakdown& m) {
  constexpr double GiB = 1024.0 * 1024 * 1024;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%.2f GiB on stage %d = parameters %.2f + gradients %.2f + AdamW moments %.2f + activations %.2f "
                "(%d slot%s in flight) + logits %.2f + workspace %.2f + reserved %.2f",
                m.total() / GiB, m.stage, m.parameters / GiB, m.gradients / GiB, m.optimizer / GiB,
                m.activations / GiB, m.in_flight, m.in_flight == 1 ? "" : "s", m.logits / GiB, m.workspace / GiB,
                m.reserved / GiB);
  return buf;
}

}  // namespace mt::perf
