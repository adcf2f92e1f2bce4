#include "perf/memory_model.h"

#include "parallel/ring_buffers.h"

#include "models/head_chunks.h"
#include "models/param_use.h"
#include "runtime/attention_kernel.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>

namespace mt::perf {

bool head_chunks_on_cuda(const Cluster& cluster) { return cluster.peak_dtype != "fp32"; }

std::int64_t head_chunks(const ModelShape& model, const TrainingShape& training, const Layout& layout, bool cuda) {
  const auto N = static_cast<std::int64_t>(layout.micro_batch * rank_seq_len(training, layout));
  const std::int64_t rows = head_chunk_rows(N, model.vocab_rows() / layout.tp, training.act_bytes(), cuda);
  return (N + rows - 1) / rows;
}

namespace {

// runtime/allocator.cpp rounds every block up to 256 bytes.
double block(double bytes) { return std::ceil(std::max(bytes, 1.0) / 256.0) * 256.0; }

// A caching allocator may serve a request from a cached block up to twice its size (and counts
// the whole block): what a step allocates and frees again is counted at that worst.
constexpr double kCachedBlockFactor = 2.0;

// One stage's computations in order, with what the executor does around them. The list is
// computations with runs of messages between them; a run holds at most one send, at its start
// (the send of the computation before it).
struct Compute {
  ActionKind kind;
  int micro, chunk;
  std::vector<int> receive_chunks_after;  // chunks of the RecvForwards in the run after it (slots they take)
  std::optional<Action> send;             // the send directly after it
};

struct StageList {
  std::vector<int> receive_chunks_first;  // RecvForwards in the run before the first computation
  std::vector<Compute> computes;
  // (receive kind, chunk, micro) -> the computation the receive's run comes before; K: after the last.
  std::map<std::tuple<ActionKind, int, int>, long> receive_run;
};

StageList list_of(const Schedule& schedule, int stage) {
  StageList out;
  const std::vector<Action>& list = schedule.actions.at(static_cast<std::size_t>(stage));
  for (const Action& a : list) {
    if (is_compute(a.kind)) {
      out.computes.push_back({a.kind, a.micro, a.chunk, {}, std::nullopt});
      continue;
    }
    const auto next = static_cast<long>(out.computes.size());  // the run comes before this computation
    if (is_receive(a.kind)) {
      out.receive_run[{a.kind, a.chunk, a.micro}] = next;
      if (a.kind == ActionKind::RecvForward)
        (out.computes.empty() ? out.receive_chunks_first : out.computes.back().receive_chunks_after)
            .push_back(a.micro * schedule.virtual_stages + a.chunk);
    } else if (!out.computes.empty()) {
      out.computes.back().send = a;
    }
  }
  return out;
}

// Raises held[chunk] to the most slots each chunk of `stage` holds while the executor runs
// `schedule` (see held_slots in the header for the rules).
void simulate(const Schedule& schedule, int stage, std::vector<int>& held) {
  const StageList stage_list = list_of(schedule, stage);
  const std::vector<Compute>& order = stage_list.computes;
  const auto K = static_cast<long>(order.size());
  const int v = schedule.virtual_stages;
  // (chunk, micro) -> release before this computation; kNotDone: its last use is still to come;
  // kUntilWaited: validation's slot whose send the executor waits for only once `stages` are done.
  constexpr long kNotDone = LONG_MAX, kUntilWaited = LONG_MAX - 1;
  std::map<std::pair<int, int>, long> live;
  // Per slot, the earliest computation before which its sends may be taken as done: a send to
  // another stage one computation after it is known complete at the earliest (its completion is only
  // tested; the zero-bubble W may come long after B's send, and still counts it), a send to itself
  // once the run with its receive copied it.
  std::map<std::pair<int, int>, long> sends_done;
  const auto take = [&](const std::vector<int>& slots) {
    for (const int key : slots) live.emplace(std::make_pair(key % v, key / v), kNotDone);
  };
  const auto count = [&] {
    std::vector<int> per_chunk(held.size(), 0);
    for (const auto& [key, until] : live) ++per_chunk[static_cast<std::size_t>(key.first)];
    for (std::size_t c = 0; c < held.size(); ++c) held[c] = std::max(held[c], per_chunk[c]);
  };
  take(stage_list.receive_chunks_first);
  for (long k = 0; k < K; ++k) {
    const Compute& c = order[static_cast<std::size_t>(k)];
    // The receives of the run after this computation are posted (their slots taken) before it and
    // before its releases: MPI with overlap posts them one computation early; without, the run is
    // posted after this computation, still before the releases of the next (an upper bound on both).
    take(c.receive_chunks_after);
    count();
    const auto done = std::count_if(live.begin(), live.end(), [](const auto& e) { return e.second != kNotDone; });
    if (schedule.forward_only && done >= schedule.stages) {
      for (auto& entry : live) entry.second = entry.second == kUntilWaited ? k : entry.second;
    }
    std::erase_if(live, [k](const auto& entry) { return entry.second <= k; });
    // Then the computation: a forward takes its slot (from the pool) if its receive did not.
    if (c.kind == ActionKind::Forward) live.emplace(std::make_pair(c.chunk, c.micro), kNotDone);
    count();
    const std::pair<int, int> slot{c.chunk, c.micro};
    bool sends_to_others = false;
    if (c.send) {
      const ChunkRef to = schedule.peer(stage, *c.send);
      long until = k + 2;
      if (to.stage == stage) {
        const ActionKind receive =
            c.send->kind == ActionKind::SendForward ? ActionKind::RecvForward : ActionKind::RecvBackward;
        const auto it = stage_list.receive_run.find({receive, to.chunk, c.micro});
        until = it == stage_list.receive_run.end() ? K : it->second + 1;
      } else {
        sends_to_others = true;
      }
      long& at = sends_done[slot];
      at = std::max(at, until);
    }
    // The slot's last use: W or the fused Backward, or the forward when forward-only.
    const bool last_use = makes_weight_grad(c.kind) || schedule.forward_only;
    if (!last_use) continue;
    long release = k + 1;
    if (const auto it = sends_done.find(slot); it != sends_done.end()) release = std::max(release, it->second);
    // Validation: a slot that sent is held until the executor waits for its sends, once `stages`
    // slots are done.
    if (schedule.forward_only && sends_to_others) release = kUntilWaited;
    sends_done.erase(slot);
    live[slot] = release;
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

namespace {

// Rows of the regions sequence parallelism splits over tp (layernorms, residual stream, embedding
// output): [N/tp, C] per rank, the largest piece where tp does not divide the sequence.
double split_rows(const TrainingShape& training, const Layout& layout) {
  const double B = layout.micro_batch, T = rank_seq_len(training, layout);
  return layout.sequence_parallel ? B * std::ceil(T / layout.tp) : B * T;
}

// What one layer's attention keeps for its backward, as the layer allocates it (runtime/attention_kernel.h:
// the probabilities [B, H/tp, T, T], fp32 or of the activation dtype by implementation). Ring
// attention (cp > 1, parallel/ring_attention.h) keeps only the merged log-sum-exp of its rows, fp32
// [B, H/tp, T/cp]: the backward recomputes each block's scores.
double attention_saved(const ModelShape& model, const TrainingShape& training, const Layout& layout) {
  if (layout.cp > 1) return block(layout.micro_batch * (model.heads / layout.tp) * rank_seq_len(training, layout) * 4.0);
  return block(nn::attention_saved_bytes(training.attention, layout.micro_batch, model.heads / layout.tp,
                                         training.seq_len, training.act_bytes()));
}

// Of one layer's activations, what selective recomputation rebuilds in backward: attention's saved
// probabilities (not ring attention's log-sum-exp, which the slot keeps: models/gpt.cpp) and the MLP
// activation's output (GELU's [N, 4C/tp], SwiGLU's [N, F/tp]).
double selectively_recomputed_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout) {
  const double N = layout.micro_batch * rank_seq_len(training, layout);
  return (layout.cp > 1 ? 0.0 : attention_saved(model, training, layout)) +
         block(N * layer_widths(model, layout.tp).mlp_out * training.act_bytes());
}

}  // namespace

double layer_activation_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout) {
  const double B = layout.micro_batch, T = rank_seq_len(training, layout), N = B * T, C = model.channels;
  const double a = training.act_bytes(), f32 = 4.0, Ns = split_rows(training, layout);
  const LayerWidths w = layer_widths(model, layout.tp);
  // ln1, res2, ln2 [N,C] (sequence parallel: [N/tp, C]); qkv, atty, the MLP's up projection and its
  // activation's output (gpt2: fch and fch_gelu 4C/tp each; llama: [gate | up] 2F/tp, SwiGLU F/tp);
  // the norms' fp32 statistics, 2 x 2 [N] for LayerNorm, 2 x 1 for RMSNorm (split likewise);
  // attention's saved probabilities.
  return 3.0 * block(Ns * C * a) + block(N * w.qkv * a) + block(N * w.attention * a) + block(N * w.mlp_up * a) +
         block(N * w.mlp_out * a) + 2.0 * w.norm_stats * block(Ns * f32) + attention_saved(model, training, layout);
}

double layer_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout) {
  switch (layout.recompute) {
    case Recompute::None: return layer_activation_bytes(model, training, layout);
    case Recompute::Selective:
      return layer_activation_bytes(model, training, layout) - selectively_recomputed_bytes(model, training, layout);
    case Recompute::Full: return 0.0;
  }
  return 0.0;
}

double recompute_scratch_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout) {
  switch (layout.recompute) {
    case Recompute::None: return 0.0;
    case Recompute::Selective: return selectively_recomputed_bytes(model, training, layout);
    case Recompute::Full: return layer_activation_bytes(model, training, layout);
  }
  return 0.0;
}

double slot_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout, int layers,
                  bool embedding, bool head) {
  const double N = layout.micro_batch * rank_seq_len(training, layout), C = model.channels;
  const double a = training.act_bytes(), f32 = 4.0, Ns = split_rows(training, layout);
  // residual[0..layers] (the layer inputs full recomputation keeps) and what each layer keeps.
  double bytes = (layers + 1) * block(Ns * C * a);
  if (layout.recompute != Recompute::Full) bytes += layers * layer_bytes(model, training, layout);
  if (embedding) bytes += block(N * 4.0);  // the int32 tokens
  // The gradient at lnf's output the head's forward leaves [N, C] (this rank's part, every row),
  // lnf's statistics (split), the losses and log-sum-exps, the int32 targets. No logits: the head
  // makes them a chunk of rows at a time in the scratch (logits_bytes).
  if (head) bytes += block(N * C * a) + layer_widths(model, layout.tp).norm_stats * block(Ns * f32) + 3.0 * block(N * f32);
  bytes += block(Ns * C * a);  // dres: the gradient flowing through the chunk
  return bytes;
}

double weight_inputs_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout, int layers,
                           bool head, bool embedding) {
  const double N = layout.micro_batch * rank_seq_len(training, layout), C = model.channels;
  const double a = training.act_bytes(), Ns = split_rows(training, layout);
  const double qkv = layer_widths(model, layout.tp).qkv;
  // Per layer the residual gradients at the MLP's and the attention's output [N, C] (gathered with
  // sequence parallelism), the layernorms' upstream gradients [N, C] (sequence parallel: this rank's
  // [N/tp, C]), dqkv [N, qkv] (layer_widths), and with sequence parallelism the two gathered layernorm outputs
  // [N, C] the column-parallel weight gradients read; the head nothing (its dlnf is the slot's since
  // the forward) but with sequence parallelism dlnf's rows reduce-scattered [N/tp, C]; the embedding
  // nothing, but with sequence parallelism its input gradient gathered [N, C].
  const double gathered = layout.sequence_parallel ? 2.0 * block(N * C * a) : 0.0;
  const bool sp = layout.sequence_parallel;
  return layers * (2.0 * block(N * C * a) + 2.0 * block(Ns * C * a) + gathered + block(N * qkv * a)) +
         (head && sp ? block(Ns * C * a) : 0.0) + (embedding && sp ? block(N * C * a) : 0.0);
}

double recomputed_weight_inputs_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout,
                                      int layers) {
  if (layout.recompute == Recompute::None) return 0.0;
  const double B = layout.micro_batch, T = rank_seq_len(training, layout), N = B * T;
  const double a = training.act_bytes();
  // What the slot dropped and W reads: the scratch's layer less qkv and the probabilities (B's alone).
  double fields = recompute_scratch_bytes(model, training, layout) - attention_saved(model, training, layout);
  if (layout.recompute == Recompute::Full) fields -= block(N * layer_widths(model, layout.tp).qkv * a);
  return layers * (fields + weight_inputs_bytes(model, training, layout, 1, false));
}

double logits_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout, bool cuda) {
  const auto N = static_cast<std::int64_t>(layout.micro_batch * rank_seq_len(training, layout));
  const std::int64_t cols = model.vocab_rows() / layout.tp;
  const std::int64_t rows = head_chunk_rows(N, cols, training.act_bytes(), cuda);
  return block(static_cast<double>(rows) * static_cast<double>(cols) * training.act_bytes());
}

namespace {

// ZeRO-2/3's blocks of one stage (zero/unit_shards.h), per parameter unit (perf/model_shape.h
// stage_units), each padded to a multiple of dp.
struct ZeroBlocks {
  std::vector<std::vector<double>> units;  // padded elements of each unit's blocks
  std::vector<std::vector<char>> compute_only;  // per unit and block (StageUnit::compute_only)
  int dp = 1;

  // A unit's full buffers, `bytes` per element.
  double full(std::size_t u, double bytes) const {
    double sum = 0;
    for (const double padded : units[u]) sum += block(padded * bytes);
    return sum;
  }
  // A reduce-scatter's output for each of a unit's blocks: its 1/dp, fp32 (none on one rank).
  double pieces(std::size_t u) const {
    double sum = 0;
    for (const double padded : units[u]) sum += dp > 1 ? block(padded / dp * 4.0) : 0.0;
    return sum;
  }
  double every_full(double bytes) const {
    double sum = 0;
    for (std::size_t u = 0; u < units.size(); ++u) sum += full(u, bytes);
    return sum;
  }
  // The owned shards of every block, one buffer.
  double owned() const {
    double numel = 0;
    for (const auto& unit : units)
      for (const double padded : unit) numel += padded / dp;
    return block(numel * 4.0);
  }
  // ZeRO-3, bf16: a unit gathered for a use: its compute_only blocks' bf16 copy alone, the others'
  // fp32 parameters and bf16 copy.
  double gathered_bf16(std::size_t u) const {
    double sum = 0;
    for (std::size_t b = 0; b < units[u].size(); ++b)
      sum += block(units[u][b] * 2.0) + (compute_only[u][b] ? 0.0 : block(units[u][b] * 4.0));
    return sum;
  }
  // ZeRO-2: every block's buffers resident, but under bf16 a compute_only block's fp32 parameters
  // are its owned shard alone (one buffer for all of them): its bf16 copy is what it gathers.
  double resident_zero2(bool bf16) const {
    if (!bf16) return every_full(4.0);
    double sum = every_full(2.0), owned_numel = 0;
    for (std::size_t u = 0; u < units.size(); ++u)
      for (std::size_t b = 0; b < units[u].size(); ++b) {
        if (compute_only[u][b]) owned_numel += units[u][b] / dp;
        else sum += block(units[u][b] * 4.0);
      }
    return sum + (owned_numel > 0 ? block(owned_numel * 4.0) : 0.0);
  }
  // ZeRO-3, bf16: the compute_only blocks' owned bf16 shards, one buffer.
  double owned_compute() const {
    double numel = 0;
    for (std::size_t u = 0; u < units.size(); ++u)
      for (std::size_t b = 0; b < units[u].size(); ++b) numel += compute_only[u][b] ? units[u][b] / dp : 0.0;
    return numel > 0 ? block(numel * 2.0) : 0.0;
  }
  // With a full recomputation a layer's backward runs its forward again first, so its attention's
  // use spans its MLP's (models/gpt.cpp): these pairs of units are held together, beside others.
  std::vector<std::pair<std::size_t, std::size_t>> held_together;

  // The most of f(unit) for `count` units held at once: any `count`, or (held_pairs) a pair held
  // together and any count - 1 others. The gradients: the unit in use and the one being reduced
  // (2). ZeRO-3's parameters: the unit in use and the kPrefetchUnits gathered ahead (3). The head
  // too uses one unit at a time: its lnf, then its tied embedding (the embedding's gradient made in
  // the forward, lnf's in the backward). The reductions in flight stay two whatever is held (each
  // use's end waits for the one before): held_pairs false.
  double in_flight(const std::function<double(std::size_t)>& f, std::size_t count, bool held_pairs = true) const {
    std::vector<double> each;
    std::vector<std::size_t> order;
    for (std::size_t u = 0; u < units.size(); ++u) each.push_back(f(u)), order.push_back(u);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return each[a] > each[b]; });
    double most = 0;
    for (std::size_t i = 0; i < std::min(count, order.size()); ++i) most += each[order[i]];
    if (!held_pairs) return most;
    for (const auto& [a, b] : held_together) {
      double sum = each[a] + each[b];
      std::size_t others = 0;
      for (std::size_t i = 0; i < order.size() && others + 1 < count; ++i)
        if (order[i] != a && order[i] != b) sum += each[order[i]], ++others;
      most = std::max(most, sum);
    }
    return most;
  }
};

// peak_deferred_weight of the plan's training schedule, kept per schedule shape: the layout search
// asks for the same few thousands of times (once per stage of each layout).
const std::vector<int>& deferred_weights(const LayoutPlan& plan) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int>, std::vector<int>> cache;
  const Layout& l = plan.layout();
  const std::tuple<int, int, int, int> key{static_cast<int>(l.schedule), l.pp, plan.micro_batches(), l.virtual_stages};
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  return cache.emplace(key, peak_deferred_weight(plan.train_schedule())).first->second;
}

ZeroBlocks zero_blocks(const ModelShape& model, const LayoutPlan& plan, int stage, bool bf16) {
  const double dp = gradient_ranks(plan.layout());  // ZeRO shards over dp x cp
  ZeroBlocks z;
  z.dp = gradient_ranks(plan.layout());
  const std::vector<StageUnit>& units = stage_units(model, plan, stage, bf16);
  for (std::size_t u = 0; u < units.size(); ++u) {
    z.units.emplace_back();
    for (const std::int64_t numel : units[u].blocks) z.units.back().push_back(std::ceil(static_cast<double>(numel) / dp) * dp);
    z.compute_only.push_back(units[u].compute_only);
    const bool mlp = units[u].name.ends_with(".mlp");
    if (mlp && u > 0 && plan.layout().recompute == Recompute::Full) z.held_together.emplace_back(u - 1, u);
  }
  return z;
}

}  // namespace

MemoryBreakdown estimate_stage_memory(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                                      const Cluster& cluster, const std::vector<std::vector<int>>& slots, int s) {
  const Layout& layout = plan.layout();
  const std::vector<int>& chunk_layers = plan.chunk_layers();
  const double N = layout.micro_batch * rank_seq_len(training, layout), C = model.channels;
  const double a = training.act_bytes();
  const bool bf16 = training.precision == Precision::BF16;
  MemoryBreakdown m;
  m.stage = s;
  // The flat buffers, padded to a multiple of the gradient group, dp x cp (models/parameter_store.h):
  // cp ranks hold the same weights, replicated unless ZeRO shards them over dp x cp.
  const double shards = gradient_ranks(layout);
  const std::vector<std::int64_t> tensors = stage_parameter_tensors(model, plan, s);
  double numel = static_cast<double>(std::accumulate(tensors.begin(), tensors.end(), std::int64_t{0}));
  numel = std::ceil(numel / shards) * shards;
  if (layout.zero <= 1) {
    m.parameters = block(numel * 4.0) + (bf16 ? block(numel * 2.0) : 0.0);
    m.gradients = block(numel * 4.0);
  } else {
    // ZeRO-2: this rank's shard of the gradients, and the full gradients of the units in flight
    // (ZeroBlocks::in_flight) and the reduce-scatter outputs of the two being reduced; the
    // parameters in per-block buffers (ZeroBlocks::resident_zero2). ZeRO-3 likewise for the parameters: the owned shard, and the
    // gathered units in flight with their bf16 copy under bf16 compute (the GEMM weights' copy
    // alone, gathered from their owned bf16 shards).
    const ZeroBlocks z = zero_blocks(model, plan, s, bf16);
    m.gradients = z.owned() + z.in_flight([&](std::size_t u) { return z.full(u, 4.0); }, 2);
    m.gradients += z.in_flight([&](std::size_t u) { return z.pieces(u); }, 2, /*held_pairs=*/false);
    const auto gathered = [&](std::size_t u) { return bf16 ? z.gathered_bf16(u) : z.full(u, 4.0); };
    m.parameters = layout.zero == 3 ? z.owned() + (bf16 ? z.owned_compute() : 0.0) + z.in_flight(gathered, 1 + kPrefetchUnits)
                                    : z.resident_zero2(bf16);
  }
  // AdamW's m and v: a block per parameter tensor, or with ZeRO-1 and above per piece of one in this
  // rank's share of a bucket (parallel/zero_optimizer.h): at most a piece per tensor and one more per bucket.
  if (layout.zero >= 1) {
    const double bucket = std::max(1.0, std::floor(layout.bucket_mb * 1024.0 * 1024.0 / 4.0 / shards)) * shards;
    double pieces = static_cast<double>(tensors.size()) + std::ceil(numel / bucket);
    // ZeRO-3 may cut its shards per unit (what it gathers) rather than per bucket: a piece more per unit.
    if (layout.zero == 3) pieces += static_cast<double>(stage_parameter_units(model, plan, s).size());
    m.optimizer = 2.0 * (numel / shards * 4.0 + 256.0 * pieces);
  } else {
    for (const std::int64_t t : tensors) m.optimizer += 2.0 * block(static_cast<double>(t) * 4.0);
  }
  // The slots each chunk keeps. With the backward split
  // (zero-bubble), a slot gains what B keeps for W at its first B and keeps it in the pool: counted
  // for every slot, an upper bound (the pool hands its slots round, so in a long run each runs a B).
  // With recomputation the layers' part of it is a set B takes and W gives back (models/gpt_buffers.cpp
  // WeightInputs, pooled per chunk): as many per chunk as the stage defers W's at once, at most.
  const int v = layout.virtual_stages;
  const bool split = splits_backward(layout.schedule);
  const bool recompute_for_w = split && layout.recompute != Recompute::None;
  const int deferred = recompute_for_w ? deferred_weights(plan).at(static_cast<std::size_t>(s)) : 0;
  const std::vector<int>& held = slots.at(static_cast<std::size_t>(s));
  for (int c = 0; c < v; ++c) {
    const int g = global_chunk_of(plan.placement(), layout.pp, s, c);
    const bool embedding = g == 0, head = g == layout.pp * v - 1;
    const int n = held.at(static_cast<std::size_t>(c));
    const int layers = chunk_layers.at(static_cast<std::size_t>(g));
    m.in_flight += n;
    m.activations += n * slot_bytes(model, training, layout, layers, embedding, head);
    if (recompute_for_w) {
      m.deferred_weight += n * weight_inputs_bytes(model, training, layout, 0, head, embedding) +
                           std::min(n, deferred) * recomputed_weight_inputs_bytes(model, training, layout, layers);
    } else if (split) {
      m.deferred_weight += n * weight_inputs_bytes(model, training, layout, layers, head, embedding);
    }
    // One chunk of the head's logits in the scratch, whatever the slots (models/head_chunks.h).
    if (head) m.logits = logits_bytes(model, training, layout, head_chunks_on_cuda(cluster));
  }
  m.activations += m.deferred_weight;
  // Scratch (models/gpt_state.h Gpt::Scratch): branch, dln [N,C]; datty, dqkv and dfch as wide as
  // atty, qkv and fch (layer_widths; llama's also the gradient at SwiGLU's output [N, F/tp], and
// with kv heads replicated over tp a layer's kv weight gradient);
  // with tp the vocab-parallel loss statistics, 3 x [N] fp32; with sequence parallelism the
  // all-gathered layernorm output and residual gradient [N, C] the column-parallel GEMMs read and
  // write, their [N/tp, C] rows, and a layernorm's parameter gradients [2C] fp32; what recomputation
  // rebuilds of one layer at a time.
  const LayerWidths w = layer_widths(model, layout.tp);
  m.workspace = 2.0 * block(N * C * a) + block(N * w.attention * a) + block(N * w.qkv * a) + block(N * w.mlp_up * a) +
                (layout.tp > 1 ? 3.0 * block(N * 4.0) : 0.0);
  if (model.is_llama()) m.workspace += block(N * w.mlp_out * a);
  // llama's kv heads replicated over tp: one layer's partial [k | v] weight gradient, fp32.
  if (const double kv = replicated_kv_rows(model, layout.tp); kv > 0) m.workspace += block(kv * C * 4.0);
  if (layout.sequence_parallel) {
    const double Ns = split_rows(training, layout);
    m.workspace += 2.0 * block(N * C * a) + 2.0 * block(Ns * C * a) + block(2.0 * C * 4.0);
  }
  if (layout.recompute != Recompute::None) m.workspace += recompute_scratch_bytes(model, training, layout);
  // Ring attention (cp > 1, parallel/ring_attention.h): its buffers (the kv blocks in flight, the
  // fp32 accumulators of the output, dq and the travelling [dk | dv]; parallel/ring_buffers.h),
  // allocated once and shared by every layer.
  if (layout.cp > 1) {
    const RingBufferShape ring{.batch = layout.micro_batch,
                               .chunk = static_cast<std::int64_t>(rank_seq_len(training, layout)) / 2,
                               .q_cols = static_cast<std::int64_t>(w.attention),
                               .kv_cols = static_cast<std::int64_t>(kv_columns(model, layout.tp)),
                               .q_heads = model.heads / layout.tp,
                               .act_bytes = training.act_bytes()};
    for (const std::int64_t bytes : ring_attention_buffer_bytes(ring)) m.workspace += block(static_cast<double>(bytes));
  }
  // One at a time: attention's scratch (the backward's gradient of the scores, the forward's fp32
  // scores under bf16: runtime/attention_kernel.h), the embedding backward's int32 index [2, N], a
  // micro-batch's new tokens before the old are freed, the step's few floats for the norm and loss.
  const double Bm = layout.micro_batch, Tm = rank_seq_len(training, layout), Hm = model.heads / layout.tp;
  const int ab = training.act_bytes();
  const double kv_channels = (w.qkv - w.attention) / 2;  // the local [k | v] halves
  // Ring attention (cp > 1) takes no whole-sequence scratch: its pairs run by GEMMs over a kv
  // head's q heads (at most a whole group), a chunk of queries and one of keys
  // (runtime/attention_kernel.h), in the ring's own buffers otherwise.
  double attention_scratch = 0;
  if (layout.cp > 1) {
    const double group = std::min<double>(Hm, model.heads / model.kv_head_count()), chunk = Tm / 2;
    for (int i = 0; i < nn::block_attention_scratch_tensors(training.attention, ab); ++i)
      attention_scratch += block(nn::block_attention_scratch_tensor_bytes(i, group, chunk, chunk, ab));
  } else {
    attention_scratch =
        std::max(block(nn::attention_backward_scratch_bytes(training.attention, Bm, Hm, Tm, kv_channels, ab)),
                 block(nn::attention_forward_scratch_bytes(training.attention, Hm, Tm, ab)));
  }
  const bool embedding_stage = local_chunk_of(plan.placement(), layout.pp, 0).stage == s;
  const bool head_stage =
      local_chunk_of(plan.placement(), layout.pp, layout.pp * layout.virtual_stages - 1).stage == s;
  // The step's token ids on a stage that reads them (train/step_batch.h: inputs and targets of
  // every micro-batch, this rank's rows of each sequence) and, with cp, the rows' positions.
  if (embedding_stage || head_stage)
    m.workspace += block(2.0 * plan.micro_batches() * layout.micro_batch * rank_seq_len(training, layout) * 4.0);
  if (layout.cp > 1) m.workspace += block(rank_seq_len(training, layout) * 4.0);
  const double biggest =
      std::max({attention_scratch, embedding_stage ? block(2.0 * N * 4.0) : 0.0, block(N * 4.0), 256.0});
  m.transient = kCachedBlockFactor * biggest;
  m.reserved = cluster.memory_reserved;
  return m;
}

MemoryBreakdown estimate_memory(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                                const Cluster& cluster, const std::vector<std::vector<int>>& slots) {
  MemoryBreakdown worst;
  for (int s = 0; s < plan.mesh().pp; ++s) {
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
  // Sampling's forward_logits makes every position's logits [window, Vp] in the slot.
  m.logits = block(static_cast<double>(window) * model.vocab_rows() * 4.0);
  // Softmax probabilities of the last position, [1, V] fp32, kept for the whole generation.
  m.workspace += block(4.0 * model.vocab_size);
  return m;
}

std::string describe(const MemoryBreakdown& m) {
  constexpr double GiB = 1024.0 * 1024 * 1024;
  char deferred[64] = "";
  if (m.deferred_weight > 0) std::snprintf(deferred, sizeof deferred, ", %.2f of it kept by B for W", m.deferred_weight / GiB);
  char buf[600];
  std::snprintf(buf, sizeof buf,
                "%.2f GiB on stage %d = parameters %.2f + gradients %.2f + AdamW moments %.2f + activations %.2f "
                "(%d slot%s kept%s) + logits %.2f + workspace %.2f + temporary %.2f + reserved %.2f",
                m.total() / GiB, m.stage, m.parameters / GiB, m.gradients / GiB, m.optimizer / GiB,
                m.activations / GiB, m.in_flight, m.in_flight == 1 ? "" : "s", deferred, m.logits / GiB,
                m.workspace / GiB, m.transient / GiB, m.reserved / GiB);
  return buf;
}

}  // namespace mt::perf
