#include "perf/memory_model.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <map>
#include <numeric>
#include <utility>

namespace mt::perf {
namespace {

// runtime/allocator.cpp rounds every block up to 256 bytes.
double block(double bytes) { return std::ceil(std::max(bytes, 1.0) / 256.0) * 256.0; }

// A caching allocator may serve a request from a cached block up to twice its size (and counts
// the whole block): what a step allocates and frees again is counted at that worst.
constexpr double kCachedBlockFactor = 2.0;

// One stage's computations in order, with what the executor does around them.
struct Compute {
  bool forward;
  int micro, chunk;
  bool receives_first = false;  // a receive comes directly before (its buffer is the slot's)
  int send_peer = -1;           // the stage its send after goes to; -1: no send
};

std::vector<Compute> computes_of(const Schedule& schedule, int stage) {
  std::vector<Compute> out;
  const std::vector<Action>& list = schedule.actions.at(static_cast<std::size_t>(stage));
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (!is_compute(a.kind)) continue;
    Compute c{a.kind == ActionKind::Forward, a.micro, a.chunk};
    c.receives_first = i > 0 && is_receive(list[i - 1].kind);
    if (i + 1 < list.size() && is_send(list[i + 1].kind)) c.send_peer = schedule.peer(stage, list[i + 1]).stage;
    out.push_back(c);
  }
  return out;
}

// Raises held[chunk] to the most slots each chunk of `stage` holds while the executor runs
// `schedule` (see held_slots in the header for the rules).
void simulate(const Schedule& schedule, int stage, std::vector<int>& held) {
  const std::vector<Compute> order = computes_of(schedule, stage);
  const auto K = static_cast<long>(order.size());
  std::map<std::pair<int, int>, long> index;  // (forward?, chunk, micro) -> position, for self-sends
  for (long k = 0; k < K; ++k) {
    const Compute& c = order[static_cast<std::size_t>(k)];
    index[{c.forward ? c.chunk : -1 - c.chunk, c.micro}] = k;
  }
  // (chunk, micro) -> release before this computation; kNotDone: its last use is still to come;
  // kUntilWaited: validation's slot whose send the executor waits for only once `stages` are done.
  constexpr long kNotDone = LONG_MAX, kUntilWaited = LONG_MAX - 1;
  std::map<std::pair<int, int>, long> live;
  const auto count = [&] {
    std::vector<int> per_chunk(held.size(), 0);
    for (const auto& [key, until] : live) ++per_chunk[static_cast<std::size_t>(key.first)];
    for (std::size_t c = 0; c < held.size(); ++c) held[c] = std::max(held[c], per_chunk[c]);
  };
  for (long k = 0; k < K; ++k) {
    const Compute& c = order[static_cast<std::size_t>(k)];
    // The next forward's receive is posted (its slot taken) before this computation's releases.
    if (k + 1 < K) {
      const Compute& next = order[static_cast<std::size_t>(k + 1)];
      if (next.forward && next.receives_first) live.emplace(std::make_pair(next.chunk, next.micro), kNotDone);
    }
    count();
    const auto done = std::count_if(live.begin(), live.end(), [](const auto& e) { return e.second != kNotDone; });
    if (schedule.forward_only && done >= schedule.stages) {
      for (auto& entry : live) entry.second = entry.second == kUntilWaited ? k : entry.second;
    }
    std::erase_if(live, [k](const auto& entry) { return entry.second <= k; });
    // Then the computation: a forward takes its slot (from the pool) if its receive did not.
    if (c.forward) live.emplace(std::make_pair(c.chunk, c.micro), kNotDone);
    count();
    const bool last_use = !c.forward || schedule.forward_only;
    if (!last_use) continue;
    long release = k + 1;
    if (c.send_peer == stage) {
      // A send to itself (one stage, several chunks) is copied at the matching receive, which comes
      // right before the next chunk's forward (or the previous chunk's backward).
      const auto it = index.find({c.forward ? c.chunk + 1 : -1 - (c.chunk - 1), c.micro});
      release = it == index.end() ? K : it->second + 1;
    } else if (c.send_peer >= 0) {
      // Validation: held until the executor waits for its sends, once `stages` slots are done.
      release = schedule.forward_only ? kUntilWaited : k + 2;
    }
    live[{c.chunk, c.micro}] = release;
  }
}

}  // namespace

std::vector<std::vector<int>> held_slots(const Schedule& train, const Schedule* eval) {
  std::vector<std::vector<int>> held;
  for (int s = 0; s < train.stages; ++s) {
    std::vector<int> per_chunk(static_cast<std::size_t>(train.virtual_stages), 0);
    simulate(train, s, per_chunk);
    if (eval != nullptr) simulate(*eval, s, per_chunk);
    held.push_back(std::move(per_chunk));
  }
  return held;
}

std::vector<std::vector<int>> held_slots(const LayoutPlan& plan, bool validation) {
  const Schedule train = plan.train_schedule();
  if (!validation) return held_slots(train, nullptr);
  const Schedule eval = plan.eval_schedule();
  return held_slots(train, &eval);
}

double layer_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout) {
  const double B = layout.micro_batch, T = training.seq_len, N = B * T, C = model.channels, tp = layout.tp;
  const double a = training.act_bytes(), f32 = 4.0, H = model.heads / layout.tp;
  // ln1, res2, ln2 [N,C]; qkv 3C/tp, atty C/tp, fch and fch_gelu 4C/tp each; fp32 layernorm
  // statistics 4 x [N] and the attention probabilities [B, H/tp, T, T].
  return 3.0 * block(N * C * a) + block(N * 3.0 * C / tp * a) + block(N * C / tp * a) +
         2.0 * block(N * 4.0 * C / tp * a) + 4.0 * block(N * f32) + block(B * H * T * T * f32);
}

double slot_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout, int layers,
                  bool embedding, bool head) {
  const double N = static_cast<double>(layout.micro_batch) * training.seq_len, C = model.channels;
  const double a = training.act_bytes(), f32 = 4.0;
  // residual[0..layers] and each layer's activations (layer_bytes).
  double bytes = (layers + 1) * block(N * C * a);
  // With recomputation only the layer inputs stay; one layer's activations are rebuilt at a time
  // (counted in the workspace by estimate_stage_memory).
  if (!training.recompute) bytes += layers * layer_bytes(model, training, layout);
  if (embedding) bytes += block(N * 4.0);  // the int32 tokens
  // lnf, its statistics, the losses and log-sum-exps, the int32 targets.
  if (head) bytes += block(N * C * a) + 5.0 * block(N * f32);
  bytes += block(N * C * a);  // dres: the gradient flowing through the chunk
  return bytes;
}

double logits_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout) {
  return block(static_cast<double>(layout.micro_batch) * training.seq_len * model.vocab_rows() / layout.tp *
               training.act_bytes());
}

MemoryBreakdown estimate_stage_memory(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                                      const Cluster& cluster, const std::vector<std::vector<int>>& slots, int s) {
  const Layout& layout = plan.layout();
  const std::vector<int>& chunk_layers = plan.chunk_layers();
  const double N = static_cast<double>(layout.micro_batch) * training.seq_len, C = model.channels;
  const double a = training.act_bytes(), tp = layout.tp;
  MemoryBreakdown m;
  m.stage = s;
  // The flat buffers, padded to a multiple of dp (models/parameter_store.h).
  const std::vector<std::int64_t> tensors = stage_parameter_tensors(model, plan, s);
  double numel = static_cast<double>(std::accumulate(tensors.begin(), tensors.end(), std::int64_t{0}));
  numel = std::ceil(numel / layout.dp) * layout.dp;
  m.parameters = block(numel * 4.0) + (training.precision == Precision::BF16 ? block(numel * 2.0) : 0.0);
  m.gradients = block(numel * 4.0);
  // AdamW's m and v: a block per parameter tensor, or with ZeRO-1 per piece of one in this rank's
  // share of a bucket (parallel/zero_optimizer.h): at most a piece per tensor and one more per bucket.
  if (layout.zero == 1) {
    const double bucket = std::max(1.0, std::floor(layout.bucket_mb * 1024.0 * 1024.0 / 4.0 / layout.dp)) * layout.dp;
    const double pieces = static_cast<double>(tensors.size()) + std::ceil(numel / bucket);
    m.optimizer = 2.0 * (numel / layout.dp * 4.0 + 256.0 * pieces);
  } else {
    for (const std::int64_t t : tensors) m.optimizer += 2.0 * block(static_cast<double>(t) * 4.0);
  }
  // The slots each chunk keeps; the head chunk's slots also hold the logits.
  const int v = layout.virtual_stages;
  const std::vector<int>& held = slots.at(static_cast<std::size_t>(s));
  for (int c = 0; c < v; ++c) {
    const int g = c * layout.pp + s;
    const bool embedding = g == 0, head = g == layout.pp * v - 1;
    const int n = held.at(static_cast<std::size_t>(c));
    m.in_flight += n;
    m.activations += n * slot_bytes(model, training, layout, chunk_layers.at(static_cast<std::size_t>(g)), embedding, head);
    if (head) m.logits = n * logits_bytes(model, training, layout);
  }
  // Scratch (models/gpt.cpp Gpt::Scratch): branch, dln [N,C]; datty C/tp, dqkv 3C/tp, dfch 4C/tp;
  // with tp the vocab-parallel loss statistics, 3 x [N] fp32.
  m.workspace = 2.0 * block(N * C * a) + block(N * C / tp * a) + block(N * 3.0 * C / tp * a) +
                block(N * 4.0 * C / tp * a) + (layout.tp > 1 ? 3.0 * block(N * 4.0) : 0.0);
  if (training.recompute) m.workspace += layer_bytes(model, training, layout);
  // One at a time: attention backward's fp32 score gradient [B, H/tp, T, T], the embedding
  // backward's int32 index [2, N], a micro-batch's new tokens before the old are freed, the step's
  // few floats for the norm and loss.
  const double Bm = layout.micro_batch, Tm = training.seq_len, Hm = model.heads / layout.tp;
  const double biggest = std::max({block(Bm * Hm * Tm * Tm * 4.0), s == 0 ? block(2.0 * N * 4.0) : 0.0,
                                   block(N * 4.0), 256.0});
  m.transient = kCachedBlockFactor * biggest;
  m.reserved = cluster.memory_reserved;
  return m;
}

MemoryBreakdown estimate_memory(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                                const Cluster& cluster, const std::vector<std::vector<int>>& slots) {
  MemoryBreakdown worst;
  for (int s = 0; s < plan.layout().pp; ++s) {
    const MemoryBreakdown m = estimate_stage_memory(model, training, plan, cluster, slots, s);
    if (s == 0 || m.total() > worst.total()) worst = m;
  }
  return worst;
}

MemoryBreakdown estimate_sampling_memory(const ModelShape& model, int window) {
  TrainingShape training;
  training.seq_len = window;
  training.global_batch = 1;
  training.validation = false;
  const LayoutPlan plan(Layout{}, layout_dims(model, window), 1, 1);  // one rank, micro-batch 1
  MemoryBreakdown m = estimate_stage_memory(model, training, plan, Cluster{}, {{1}}, 0);
  m.optimizer = 0;
  // Softmax probabilities of the last position, [1, V] fp32, kept for the whole generation.
  m.workspace += block(4.0 * model.vocab_size);
  return m;
}

std::string describe(const MemoryBreakdown& m) {
  constexpr double GiB = 1024.0 * 1024 * 1024;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%.2f GiB on stage %d = parameters %.2f + gradients %.2f + AdamW moments %.2f + activations %.2f "
                "(%d slot%s kept) + logits %.2f + workspace %.2f + temporary %.2f + reserved %.2f",
                m.total() / GiB, m.stage, m.parameters / GiB, m.gradients / GiB, m.optimizer / GiB,
                m.activations / GiB, m.in_flight, m.in_flight == 1 ? "" : "s", m.logits / GiB, m.workspace / GiB,
                m.transient / GiB, m.reserved / GiB);
  return buf;
}

}  // namespace mt::perf
