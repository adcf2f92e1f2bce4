#include "perf/model_shape.h"

#include <iterator>
#include <numeric>
#include <sstream>

#include "parallel/stage_partition.h"
#include "runtime/error.h"

namespace mt::perf {

int micro_batches(const TrainingShape& training, const Layout& layout) {
  const int per_step = layout.dp * layout.micro_batch;
  MT_REQUIRE(per_step > 0 && training.global_batch % per_step == 0, "global batch ", training.global_batch,
             " is not a multiple of dp ", layout.dp, " x micro-batch ", layout.micro_batch);
  return training.global_batch / per_step;
}

std::vector<int> chunk_layers(const ModelShape& model, int seq_len, const Layout& layout) {
  return plan_chunk_layers(layout, layout_dims(model, seq_len));
}

ChunkWork chunk_work(const ModelShape& model, const TrainingShape& training, const Layout& layout, int layers,
                     bool embedding, bool head) {
  const double N = static_cast<double>(layout.micro_batch) * training.seq_len, C = model.channels;
  const double T = training.seq_len, tp = layout.tp;
  ChunkWork w;
  w.layers = layers;
  w.embedding = embedding;
  w.head = head;
  // Per token and layer: QKV 6C^2, projection 2C^2, MLP 16C^2, attention scores and values 4TC
  // (causal, counted in full as the kernels compute it); the LM head 2 C Vp.
  w.layer_flops = N * layers * (24.0 * C * C + 4.0 * T * C) / tp;
  w.forward_flops = w.layer_flops + (head ? N * 2.0 * C * model.vocab_rows() / tp : 0.0);
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

std::vector<std::int64_t> stage_parameter_tensors(const ModelShape& model, const Layout& layout,
                                                  const std::vector<int>& chunk_layers, int stage) {
  const std::int64_t C = model.channels, tp = layout.tp;
  // Column-parallel QKV and MLP-up with their biases split; row-parallel projections split by
  // input with replicated biases; layernorms replicated (models/gpt_sharding.h).
  const std::int64_t layer[] = {C, C, 3 * C * C / tp, 3 * C / tp, C * C / tp, C, C, C, 4 * C * C / tp, 4 * C / tp,
                                4 * C * C / tp, C};
  std::vector<std::int64_t> tensors;
  const std::int64_t wte = static_cast<std::int64_t>(model.vocab_rows()) * C / tp;
  if (stage == 0) tensors.insert(tensors.end(), {wte, static_cast<std::int64_t>(model.max_seq_len) * C});
  for (int c = 0; c < layout.virtual_stages; ++c)
    for (int l = 0; l < chunk_layers.at(static_cast<std::size_t>(c * layout.pp + stage)); ++l)
      tensors.insert(tensors.end(), std::begin(layer), std::end(layer));
  if (stage == layout.pp - 1) {
    tensors.insert(tensors.end(), {C, C});
    if (layout.pp > 1) tensors.push_back(wte);
  }
  return tensors;
}

std::int64_t stage_parameters(const ModelShape& model, const Layout& layout, const std::vector<int>& chunk_layers,
                              int stage) {
  const std::vector<std::int64_t> tensors = stage_parameter_tensors(model, layout, chunk_layers, stage);
  return std::accumulate(tensors.begin(), tensors.end(), std::int64_t{0});
}

}  // namespace mt::perf
