#include "perf/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "models/param_use.h"
#include "parallel/mesh.h"
#include "parallel/schedule.h"
#include "perf/comm_model.h"
#include "runtime/error.h"

namespace mt::perf {
namespace {

// The schedule's own simulation, with forward cost 1 and the backward's B (input gradients) and W
// (weight gradients) relative to it, on a grid of 1/16: times scale with the forward cost, so
// one run serves every layout with the same shape (makespan() interpolates between grid points). The fused schedules' Backward costs B + W
// whatever the split, so their key holds the sum alone; the zero-bubble ones run B and W apart
// and key on both. The layout search asks for the same shapes thousands of times; schedules with
// P = 64 and M = 1536 take milliseconds to build.
// The slots do not depend on the costs: they are kept per schedule shape alone, so the memory
// options (which change B and W) do not simulate the executor again.
struct ScheduleFacts {
  double makespan = 0;  // in forward costs, at the grid point
  std::vector<std::vector<int>> held_slots, held_slots_with_validation;  // perf/memory_model.h
};

// The facts at grid point (b, w), in sixteenths of a forward.
const ScheduleFacts& schedule_facts(const LayoutPlan& plan, long b, long w) {
  using Shape = std::tuple<int, int, int, int>;
  struct Slots {
    std::vector<std::vector<int>> train, with_validation;
  };
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int, long, long>, ScheduleFacts> cache;
  static std::map<Shape, Slots> slots_cache;
  const Layout& l = plan.layout();
  const Shape shape{static_cast<int>(l.schedule), l.pp, plan.micro_batches(), l.virtual_stages};
  const auto key = std::tuple_cat(shape, std::make_tuple(b, w));
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const Schedule schedule = plan.train_schedule();
  ScheduleFacts facts;
  facts.makespan =
      simulate(schedule, ComputeCosts{1.0, static_cast<double>(b) / 16.0, static_cast<double>(w) / 16.0}).makespan;
  auto slots = slots_cache.find(shape);
  if (slots == slots_cache.end()) {
    const Schedule eval = plan.eval_schedule();
    slots = slots_cache.emplace(shape, Slots{held_slots(schedule, nullptr), held_slots(schedule, &eval)}).first;
  }
  facts.held_slots = slots->second.train;
  facts.held_slots_with_validation = slots->second.with_validation;
  return cache.emplace(key, std::move(facts)).first->second;
}

// The schedule at the layout's own B and W: the facts of the grid point below them, and the makespan
// in forward costs. The makespan is piecewise linear in B and W, so it is interpolated between the
// grid points around them: rounding to the grid alone hid changes of up to 1/32 of a forward per
// micro-batch (selective recomputation's rerun is 3% of GPT-3's).
struct SimulatedSchedule {
  const ScheduleFacts& grid;
  double makespan;
};
SimulatedSchedule simulate_schedule(const LayoutPlan& plan, double f, double backward, double weight) {
  const bool split = splits_backward(plan.layout().schedule);
  const double b = (split ? backward - weight : backward) / f * 16.0;
  const double w = split ? weight / f * 16.0 : 0.0;
  const auto b0 = static_cast<long>(std::floor(b)), w0 = static_cast<long>(std::floor(w));
  const double tb = b - static_cast<double>(b0), tw = w - static_cast<double>(w0);
  const auto at = [&](long db, long dw, double weight_of) {
    return weight_of > 0 ? weight_of * schedule_facts(plan, b0 + db, w0 + dw).makespan : 0.0;
  };
  return {schedule_facts(plan, b0, w0),
          at(0, 0, (1 - tb) * (1 - tw)) + at(1, 0, tb * (1 - tw)) + at(0, 1, (1 - tb) * tw) + at(1, 1, tb * tw)};
}

bool any_group_crosses(const std::vector<std::vector<int>>& groups, int devices_per_node) {
  for (const auto& g : groups)
    for (int r : g)
      if (r / devices_per_node != g.front() / devices_per_node) return true;
  return false;
}

const Link& link_for(bool crosses_nodes, const Cluster& cluster) {
  return crosses_nodes ? cluster.inter : cluster.intra;
}

// Bytes of the data-parallel reduction: the flat fp32 gradients cut into buckets from the end
// (parallel/grad_buckets.h); returns {total seconds, last bucket's seconds}.
std::pair<double, double> bucketed(double bytes, double bucket_bytes, double (*op)(int, double, const Link&), int n,
                                   const Link& link) {
  if (n <= 1 || bytes <= 0) return {0.0, 0.0};
  const double full = std::floor(bytes / bucket_bytes);
  const double rest = bytes - full * bucket_bytes;
  double total = full * op(n, bucket_bytes, link), last = full > 0 ? op(n, bucket_bytes, link) : 0.0;
  if (rest > 0) {
    last = op(n, rest, link);  // the lowest bucket (embedding and remainder) goes last
    total += last;
  }
  return {total, last};
}

void check_job(const ModelShape& model, const TrainingShape& training, const Layout& layout, const Cluster& cluster) {
  model.validate();
  cluster.validate();
  MT_REQUIRE(training.seq_len >= 1 && training.seq_len <= model.max_seq_len, "sequence length ", training.seq_len,
             " must be in [1, ", model.max_seq_len, "] (the model's context)");
  MT_REQUIRE(layout.world_size() <= cluster.devices(), "layout ", describe(layout), " needs ", layout.world_size(),
             " devices, the cluster has ", cluster.devices());
}

// Which groups leave a node, in the plan's mesh order: tp, the gradient group (dp x cp), pp, cp, the
// embedding group. Kept per mesh shape and node size (the search predicts many layouts of one mesh).
struct Crossings {
  bool tp = false, dp = false, pp = false, cp = false, embedding = false;
};

const Crossings& node_crossings(const Mesh& mesh, int devices_per_node) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int, std::string, int>, Crossings> cache;
  const MeshShape& shape = mesh.shape();
  const auto key = std::make_tuple(shape.dp, shape.tp, shape.pp, shape.cp, shape.order, devices_per_node);
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  Crossings c;
  c.tp = any_group_crosses(mesh.all_tp_groups(), devices_per_node);
  c.dp = any_group_crosses(mesh.all_dp_cp_groups(), devices_per_node);
  c.pp = any_group_crosses(mesh.all_pp_groups(), devices_per_node);
  c.cp = any_group_crosses(mesh.all_cp_groups(), devices_per_node);
  c.embedding = any_group_crosses(mesh.all_embedding_groups(), devices_per_node);
  return cache.emplace(key, c).first->second;
}

void mark_node_crossings(const Mesh& mesh, int devices_per_node, Prediction& p) {
  const Crossings& c = node_crossings(mesh, devices_per_node);
  p.tp_crosses_nodes = c.tp;
  p.dp_crosses_nodes = c.dp;
  p.pp_crosses_nodes = c.pp;
  p.cp_crosses_nodes = c.cp;
}

// The achieved GEMM rate in the compute dtype. fp32 on a GPU rated for bf16 runs on the CUDA
// cores (A100: 19.5 of 312 TFLOP/s, H100: 67 of 989): 1/16. bf16 on a CPU rated for fp32 widens
// around every GEMM and runs about half as fast (docs/PERFORMANCE.md).
double achieved_rate(const Cluster& cluster, Precision precision) {
  double rate = cluster.peak_flops * cluster.achieved_fraction;
  const bool bf16 = precision == Precision::BF16;
  if (!bf16 && cluster.peak_dtype == "bf16") rate /= 16.0;
  if (bf16 && cluster.peak_dtype == "fp32") rate /= 2.0;
  return rate;
}

// What recomputation adds to a chunk's backward: full runs the layers' forward again (not the
// embedding's nor the head's), selective the attention core (scores, softmax, values; GELU is
// elementwise and not counted).
double recompute_flops(const Layout& layout, const ChunkWork& w) {
  switch (layout.recompute) {
    case Recompute::None: return 0.0;
    case Recompute::Selective: return w.attention_flops;
    case Recompute::Full: return w.layer_flops;
  }
  return 0.0;
}

// One stage's seconds per micro-batch: forward and backward of all its chunks, split into parts.
// The LM head's three GEMMs (logits, and the gradients of its tied embedding and of its input) all
// run in the forward (models/gpt.h: the logits are never kept).
// compute_w is the part of compute_b that computes weight gradients (W of the zero-bubble split):
// the weight-gradient GEMMs, half of each linear layer's backward GEMMs. The rest of
// the backward is B: the input-gradient GEMMs, attention's backward (scores and values have no
// weights), recomputation's extra forward, and every tensor-parallel allreduce of the backward
// (all on the input-gradient path). Layernorm and bias gradients are memory bound and not counted.
// gather_f and gather_b: ZeRO-3's parameter all-gathers per micro-batch that the previous unit's
// compute does not hide (zero3_exposed_gathers).
// kv_sum: llama's kv heads replicated over tp (tp not dividing them): their gradients summed over
// the tensor-parallel group once per step, before the optimizer.
// cp_f and cp_b: ring attention's transfers per micro-batch that the block attention they overlap
// does not hide (add_ring); they lie on the input-gradient path (B of the zero-bubble split).
struct StageTimes {
  double compute_f = 0, compute_b = 0, compute_w = 0, tp_f = 0, tp_b = 0, gather_f = 0, gather_b = 0, kv_sum = 0;
  double cp_f = 0, cp_b = 0;
  double params = 0;
  double gather_total = 0;  // ZeRO-3: all of one micro-batch's gathers, forward and backward
  double update_gather_bytes = 0;  // ZeRO-1/2: the full parameters all-gathered after the update
  double cast_s = 0;               // bf16: the step's one cast of the master into the compute copy
  double cp_total = 0;      // all of one micro-batch's ring transfers, hidden or not
  double cost() const { return compute_f + compute_b + tp_f + tp_b + gather_f + gather_b + cp_f + cp_b; }
};

// Ring attention over cp ranks (parallel/ring_attention.h), per micro-batch through a chunk's
// layers. Per layer the forward takes cp steps: at each of the first cp-1 it sends its kv block
// [B, T/cp, kv columns] on while it attends to the one it holds, a cp-th of the layer's attention;
// a transfer longer than that attention is exposed. The backward goes round again, each block
// travelling with its [dk | dv] accumulator (fp32) under the block's attention backward (twice the
// forward's); the last accumulator's trip home has no attention left to hide under. Full
// recomputation runs the forward's ring again in backward.
void add_ring(const ModelShape& model, const TrainingShape& training, const Layout& layout, const ChunkWork& w,
              double rate, const Link& cp_link, StageTimes& st) {
  if (layout.cp <= 1 || w.layers == 0) return;
  const double rows = layout.micro_batch * rank_seq_len(training, layout);
  const double kv = rows * kv_columns(model, layout.tp);
  const double block_f = p2p_s(kv * training.act_bytes(), cp_link);
  const double block_b = p2p_s(kv * (training.act_bytes() + 4.0), cp_link), accumulator = p2p_s(kv * 4.0, cp_link);
  const double step_attention = w.attention_flops / w.layers / layout.cp / rate;
  const double steps = layout.cp - 1.0;
  const double forward = steps * std::max(0.0, block_f - step_attention);
  const double backward = steps * std::max(0.0, block_b - 2.0 * step_attention) + accumulator;
  st.cp_f += w.layers * forward;
  st.cp_b += w.layers * (backward + (layout.recompute == Recompute::Full ? forward : 0.0));
  st.cp_total += w.layers * (steps * (block_f + block_b) + accumulator +
                             (layout.recompute == Recompute::Full ? steps * block_f : 0.0));
}

// ZeRO-3 gathers each parameter unit before its use, kPrefetchUnits ahead in the order of use
// (zero/unit_shards.h): unit i's gather is launched when unit i - kPrefetchUnits begins (those
// of the first units when the first begins), after the gathers before it (one communicator); unit
// i begins when its gather and unit i - 1's compute are done. `units` in the order of use, each
// {gather seconds, compute seconds}. Returns how long the units waited for their gathers.
double exposed_gathers(const std::vector<std::pair<double, double>>& units) {
  std::vector<double> begins(units.size());
  double comm_free = 0, compute_end = 0, exposed = 0;
  for (std::size_t i = 0; i < units.size(); ++i) {
    const std::size_t launcher = i > static_cast<std::size_t>(kPrefetchUnits) ? i - kPrefetchUnits : 0;
    comm_free = std::max(comm_free, i == 0 ? 0.0 : begins[launcher]) + units[i].first;
    begins[i] = std::max(compute_end, comm_free);
    exposed += begins[i] - compute_end;
    compute_end = begins[i] + units[i].second;
  }
  return exposed;
}

// One stage's units in forward order and their exposed gathers forward and backward (the layers in
// reverse order with backward's compute). Forward: the embedding (a lookup: no GEMM); the layers;
// lnf. The head reads lnf, then its weight (the tied wte copy, or llama's lm_head) with its three
// GEMMs; cut into vocabulary pieces, each piece is gathered twice per row chunk of the logits, once
// for them (a third of the GEMMs) and once for the gradients. Backward gathers lnf and the layers:
// the head's and the embedding's gradients need no parameters.
void zero3_exposed_gathers(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan, double rate,
                           const Link& dp_link, bool cuda, int s, StageTimes& st) {
  const Layout& layout = plan.layout();
  const ChunkWork layer = chunk_work(model, training, layout, 1, false, false);
  const ChunkWork head = chunk_work(model, training, layout, 0, false, true);
  const double layer_f = layer.forward_flops / rate, head_f = 3.0 * head.head_flops / rate;
  const double layer_b = (2.0 * layer.forward_flops + recompute_flops(layout, layer)) / rate;
  const bool bf16 = training.precision == Precision::BF16;  // the GEMM weights gathered in bf16
  const auto gather = [&](const StageUnit& u) {
    return allgather_s(gradient_ranks(layout), u.gathered_bytes(bf16), dp_link);  // over dp x cp
  };
  const auto named = [](const StageUnit& u, const char* prefix) { return u.name.rfind(prefix, 0) == 0; };
  std::vector<std::pair<double, double>> forward, backward, head_weight;
  double lnf = -1;
  const bool embedding_stage = local_chunk_of(plan.placement(), layout.pp, 0).stage == s;
  const std::vector<StageUnit>& units = stage_units(model, plan, s, bf16);
  const auto head_weight_unit = [&](const StageUnit& u) { return named(u, model.tied_head() ? "embedding" : "head"); };
  const auto head_pieces = static_cast<int>(std::count_if(units.begin(), units.end(), head_weight_unit));
  // A layer is two units, its attention then its MLP, each computing its GEMMs' share of the
  // layer's (the attention also its core) in both directions. The backward uses the MLP's, then the
  // attention's; a full recomputation begins the attention's first and holds it through the whole
  // layer, so the MLP's gather, launched then, has no compute to hide behind.
  const double layer_gemm = layer.forward_flops - layer.attention_flops;
  const double backward_per_forward = layer_b / layer_f;
  const bool full = layout.recompute == Recompute::Full;
  std::int64_t attention_numel = 0;
  double attention_g = 0;
  for (const StageUnit& u : units) {
    const double g = gather(u);
    if (named(u, "h.") && u.name.ends_with(".attn")) {
      attention_numel = u.numel();
      attention_g = g;
    } else if (named(u, "h.")) {
      const double share = static_cast<double>(attention_numel) / static_cast<double>(attention_numel + u.numel());
      const double attention_f = (layer_gemm * share + layer.attention_flops) / rate, mlp_f = layer_f - attention_f;
      forward.emplace_back(attention_g, attention_f);
      forward.emplace_back(g, mlp_f);
      if (full) {
        backward.insert(backward.begin(), {{attention_g, 0.0}, {g, layer_b}});
      } else {
        backward.insert(backward.begin(),
                        {{g, mlp_f * backward_per_forward}, {attention_g, attention_f * backward_per_forward}});
      }
    } else if (named(u, "lnf")) {
      lnf = g;
    }
    if (named(u, "embedding") && embedding_stage) forward.emplace_back(g, 0.0);
    if (head_weight_unit(u)) head_weight.emplace_back(g, head_f / head_pieces);
  }
  if (lnf >= 0) {  // the head stage
    forward.emplace_back(lnf, 0.0);
    backward.emplace(backward.begin(), lnf, 0.0);
    if (head_pieces == 1) {
      forward.push_back(head_weight.front());
    } else {
      const auto chunks = head_chunks(model, training, layout, cuda);
      for (std::int64_t c = 0; c < chunks; ++c)
        for (const double part : {1.0 / 3.0, 2.0 / 3.0})
          for (const auto& [g, f] : head_weight) forward.emplace_back(g, f * part / static_cast<double>(chunks));
    }
  }
  st.gather_f = exposed_gathers(forward);
  st.gather_b = exposed_gathers(backward);
  for (const auto& [g, c] : forward) st.gather_total += g;
  for (const auto& [g, c] : backward) st.gather_total += g;
}

StageTimes stage_times(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                       const Cluster& cluster, const Link& tp_link, const Link& dp_link, const Link& cp_link, int s) {
  const Layout& layout = plan.layout();
  const int P = layout.pp, v = layout.virtual_stages;
  const double N = layout.micro_batch * rank_seq_len(training, layout), C = model.channels;
  const double act = training.act_bytes(), rate = achieved_rate(cluster, training.precision);
  const double tp_big = allreduce_s(layout.tp, N * C * act, tp_link), tp_small = allreduce_s(layout.tp, N * 4.0, tp_link);
  StageTimes st;
  st.params = static_cast<double>(stage_parameters(model, plan, s));
  int layers = 0;
  for (int c = 0; c < v; ++c) {
    const int g = global_chunk_of(plan.placement(), P, s, c);
    const ChunkWork w = chunk_work(model, training, layout, plan.chunk_layers()[static_cast<std::size_t>(g)], g == 0,
                                   g == P * v - 1);
    layers += w.layers;
    add_ring(model, training, layout, w, rate, cp_link, st);
    st.compute_f += (w.forward_flops + 2.0 * w.head_flops) / rate;
    st.compute_b += (2.0 * (w.forward_flops - w.head_flops) + recompute_flops(layout, w)) / rate;
    st.compute_w += (w.forward_flops - w.head_flops - w.attention_flops) / rate;
    // With sequence parallelism each allreduce becomes an all-gather and a reduce-scatter: on a
    // ring the same bytes and steps, so the same time.
    st.tp_f += w.tp_allreduces_forward * tp_big + w.tp_small_allreduces * tp_small;
    st.tp_b += w.tp_allreduces_backward * tp_big;
    if (layout.recompute == Recompute::Full) st.tp_b += 2 * w.layers * tp_big;  // the layers' forward allreduces again
  }
  // bf16: the compute copy is written once per step (by AdamW's pass or one cast after the
  // gathers): charged as a cast of the stage's master, read 4 and write 2 bytes each.
  if (training.precision == Precision::BF16) st.cast_s = st.params * 6.0 / cluster.memory_bandwidth;
  if (layout.zero == 1 || layout.zero == 2) {
    // Per block, as zero/unit_shards.h gathers it (ZeRO-1's regions keep its buckets of GEMM
    // weights apart alike, zero/zero_engine.h): under bf16 the GEMM weights as their bf16 copy.
    const bool bf16 = training.precision == Precision::BF16;
    for (const StageUnit& u : stage_units(model, plan, s, bf16)) st.update_gather_bytes += u.gathered_bytes(bf16);
  }
  if (layout.zero == 3 && gradient_ranks(layout) > 1)
    zero3_exposed_gathers(model, training, plan, rate, dp_link, head_chunks_on_cuda(cluster), s, st);
  const double kv_rows = replicated_kv_rows(model, layout.tp);
  // Summed in every micro-batch's backward (models/tp_linear.cpp, the qkv weight gradient).
  if (kv_rows > 0) st.kv_sum = plan.micro_batches() * allreduce_s(layout.tp, layers * kv_rows * C * 4.0, tp_link);
  return st;
}

const StageTimes& slowest(const std::vector<StageTimes>& stages) {
  return *std::max_element(stages.begin(), stages.end(),
                           [](const StageTimes& a, const StageTimes& b) { return a.cost() < b.cost(); });
}

// The pipeline: the schedule's makespan with the slowest stage's per-chunk costs, what of it is
// compute and tensor-parallel communication, the rest bubble; and the messages between stages.
// Returns the makespan.
double add_pipeline(const LayoutPlan& plan, const StageTimes& slow, double makespan_in_forwards, double f,
                    double message, Prediction& p) {
  const Layout& layout = plan.layout();
  const int M = plan.micro_batches(), P = layout.pp, v = layout.virtual_stages;
  const double makespan = makespan_in_forwards * f;
  p.time.compute = M * (slow.compute_f + slow.compute_b);
  p.time.tp_comm = M * (slow.tp_f + slow.tp_b);
  p.time.zero_gather = M * (slow.gather_f + slow.gather_b);
  p.time.cp_comm = M * (slow.cp_f + slow.cp_b);
  p.time.cp_total = M * slow.cp_total;
  p.time.bubble = std::max(0.0, makespan - p.time.compute - p.time.tp_comm - p.time.zero_gather - p.time.cp_comm);
  if (p.time.bubble < 1e-9 * makespan) p.time.bubble = 0.0;  // the sum's rounding (no pipeline), not a bubble
  if (P > 1) {
    // Fill and drain cross every chunk boundary between two stages once each way (zb-v's turn at
    // the last stage stays on it); without overlap every send is also waited for by its sender.
    int crossings = 0;
    for (int g = 0; g + 1 < P * v; ++g)
      crossings += local_chunk_of(plan.placement(), P, g).stage != local_chunk_of(plan.placement(), P, g + 1).stage;
    p.time.pp_comm = 2.0 * crossings * message + (layout.overlap ? 0.0 : 2.0 * M * v * message);
  }
  return makespan;
}

// Data parallelism and the optimizer, for the stage holding the most parameters `params`: the
// buckets' reduction (and ZeRO-1's allgather) under the last micro-batch's backward and the optimizer.
// ZeRO-2 and 3 reduce-scatter every micro-batch's gradients (M times the bytes), each under that
// micro-batch's backward; ZeRO-3 gathers the parameters instead of all-gathering them after the update
// (its exposed part is in the pipeline's time: StageTimes::gather_f, gather_b). update_gather_bytes:
// the all-gather after the update (ZeRO-1/2; under bf16 ZeRO-2 gathers the GEMM weights in bf16).
void add_data_parallel(const Layout& layout, int micro_batches, double params, double update_gather_bytes,
                       const StageTimes& slow, const Cluster& cluster, const Link& dp_link, Prediction& p) {
  const double bucket_bytes = layout.bucket_mb * 1024.0 * 1024.0;
  const bool sharded = layout.zero >= 1, per_micro = layout.zero >= 2;
  const int n = gradient_ranks(layout);  // dp x cp: cp ranks hold the same weights
  const auto [reduce_total, reduce_last] =
      bucketed(params * 4.0, bucket_bytes, sharded ? reduce_scatter_s : allreduce_s, n, dp_link);
  const bool gathers_after_update = layout.zero == 1 || layout.zero == 2;
  const auto [gather_total, gather_last] =
      gathers_after_update ? bucketed(update_gather_bytes, bucket_bytes, allgather_s, n, dp_link) : std::pair{0.0, 0.0};
  const double updated = sharded ? params / n : params;
  // AdamW's 28 bytes per updated parameter; zeroing and the norm pass over the gradients kept.
  p.time.optimizer = (28.0 * updated + 8.0 * (per_micro ? updated : params)) / cluster.memory_bandwidth;
  const double window = layout.overlap ? slow.compute_b + slow.tp_b : 0.0;  // a micro-batch's backward
  const int reductions = per_micro ? micro_batches : 1;
  p.time.dp_total = reductions * reduce_total + gather_total + (layout.zero == 3 ? micro_batches * slow.gather_total : 0.0);
  p.time.dp_exposed = (reductions - 1) * std::max(0.0, reduce_total - window) + std::max(reduce_last, reduce_total - window);
  if (gathers_after_update)
    p.time.dp_exposed += layout.overlap ? std::max(gather_last, gather_total - p.time.optimizer) : gather_total;
}

// The tied embedding's sum and broadcast between the stages of its two copies (none where one stage
// holds the embedding and the head: zb-v's stage 0; none for llama, whose head is untied), and the
// norm's allreduce.
void add_synchronization(const ModelShape& model, const LayoutPlan& plan, const Mesh& mesh, const Cluster& cluster,
                         Prediction& p) {
  const Layout& layout = plan.layout();
  const int dpn = cluster.devices_per_node;
  if (plan.tied_across_stages() && model.tied_head()) {
    const double wte = static_cast<double>(model.vocab_rows()) * model.channels / layout.tp * 4.0;
    const Link& emb_link = link_for(node_crossings(mesh, dpn).embedding, cluster);
    p.time.embedding_sync = allreduce_s(2, wte, emb_link) + p2p_s(wte, emb_link);
  }
  p.time.norm = allreduce_s(layout.world_size(), 12.0, link_for(layout.world_size() > dpn, cluster));
}

// On CPUs whose ranks share cores, every rank's busy time (its compute, its communication, which on
// shared memory is CPU copying, and its optimizer) must pass through the node's cores; a rank that
// waits yields. Returns the busiest node's time.
double busiest_node(const LayoutPlan& plan, const Mesh& mesh, const std::vector<StageTimes>& stages, double message,
                    const Cluster& cluster, const Prediction& p) {
  const Layout& layout = plan.layout();
  const int M = plan.micro_batches(), P = layout.pp, v = layout.virtual_stages, dpn = cluster.devices_per_node;
  double busiest = 0;
  for (int node = 0; node * dpn < layout.world_size(); ++node) {
    double busy = 0;
    for (int r = node * dpn; r < std::min(layout.world_size(), (node + 1) * dpn); ++r) {
      const StageTimes& st = stages[static_cast<std::size_t>(mesh.coord_of(r).pp)];
      busy += M * st.cost() + (P > 1 ? 2.0 * M * v * message : 0.0) + p.time.dp_total + p.time.embedding_sync +
              p.time.optimizer;
    }
    busiest = std::max(busiest, busy / cluster.cores_per_node);
  }
  return busiest;
}

// Tokens per second and the model FLOPs utilization of the step.
void add_throughput(const ModelShape& model, const TrainingShape& training, const Layout& layout,
                    const Cluster& cluster, Prediction& p) {
  const int dpn = cluster.devices_per_node;
  const double tokens = static_cast<double>(training.global_batch) * training.seq_len;
  p.tokens_per_s = tokens / p.step_s;
  p.model_flops_per_step = model.training_flops_per_token(training.seq_len) * tokens;
  const double hardware = cluster.shared_cores
                              ? std::min<double>(layout.world_size(), cluster.concurrent_ranks() * std::ceil(
                                                                       static_cast<double>(layout.world_size()) / dpn))
                              : layout.world_size();
  p.mfu = p.model_flops_per_step / p.step_s / (hardware * cluster.peak_flops);
}

// The stage needing the most memory, with the slots the schedule keeps; the ranks of a CPU node
// share its memory (and what the OS keeps): each gets its share.
void add_memory(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan, const Cluster& cluster,
                const ScheduleFacts& facts, Prediction& p) {
  p.memory = estimate_memory(model, training, plan, cluster,
                             training.validation ? facts.held_slots_with_validation : facts.held_slots);
  const double sharers = cluster.shared_cores ? cluster.devices_per_node : 1;
  p.memory.reserved /= sharers;
  p.memory_capacity = cluster.memory_bytes / sharers;
  p.fits = p.memory.total() <= p.memory_capacity;
}

Prediction predict(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                   const Cluster& cluster) {
  const Layout& layout = plan.layout();
  Prediction p;
  p.layout = layout;
  p.micro_batches = plan.micro_batches();
  p.chunk_layers = plan.chunk_layers();
  const Mesh mesh(plan.mesh());
  mark_node_crossings(mesh, cluster.devices_per_node, p);

  std::vector<StageTimes> stages;
  for (int s = 0; s < layout.pp; ++s)
    stages.push_back(stage_times(model, training, plan, cluster, link_for(p.tp_crosses_nodes, cluster),
                                 link_for(p.dp_crosses_nodes, cluster), link_for(p.cp_crosses_nodes, cluster), s));
  const StageTimes& slow = slowest(stages);
  const int v = layout.virtual_stages;
  const double f = (slow.compute_f + slow.tp_f + slow.gather_f + slow.cp_f) / v;  // per chunk
  const double b = (slow.compute_b + slow.tp_b + slow.gather_b + slow.cp_b) / v;
  const SimulatedSchedule schedule = simulate_schedule(plan, f, b, slow.compute_w / v);
  // Sequence parallelism sends each stage's output split over tp: 1/tp of the bytes per rank (of a
  // cp rank's rows).
  const double N = layout.micro_batch * rank_seq_len(training, layout) / (layout.sequence_parallel ? layout.tp : 1);
  const double message =
      layout.pp > 1 ? p2p_s(N * model.channels * training.act_bytes(), link_for(p.pp_crosses_nodes, cluster)) : 0.0;
  const double makespan = add_pipeline(plan, slow, schedule.makespan, f, message, p);
  const double kv_sum =
      std::max_element(stages.begin(), stages.end(), [](const StageTimes& x, const StageTimes& y) {
        return x.kv_sum < y.kv_sum;
      })->kv_sum;
  p.time.tp_comm += kv_sum;

  // Each per-stage figure at the stage where it is largest.
  const auto most = [&](double StageTimes::*field) {
    double m = 0;
    for (const StageTimes& st : stages) m = std::max(m, st.*field);
    return m;
  };
  add_data_parallel(layout, plan.micro_batches(), most(&StageTimes::params), most(&StageTimes::update_gather_bytes),
                    slow, cluster, link_for(p.dp_crosses_nodes, cluster), p);
  p.time.optimizer += most(&StageTimes::cast_s);
  add_synchronization(model, plan, mesh, cluster, p);

  const double dedicated = makespan + kv_sum + p.time.pp_comm + p.time.dp_exposed + p.time.embedding_sync +
                           p.time.norm + p.time.optimizer;
  p.step_s = dedicated;
  if (cluster.shared_cores && cluster.cores_per_node < cluster.devices_per_node) {
    p.time.core_wait = std::max(0.0, busiest_node(plan, mesh, stages, message, cluster, p) - dedicated);
    p.step_s = dedicated + p.time.core_wait;
  }
  add_throughput(model, training, layout, cluster, p);
  add_memory(model, training, plan, cluster, schedule.grid, p);
  return p;
}

}  // namespace

Prediction predict_step(const ModelShape& model, const TrainingShape& training, const Layout& layout,
                        const Cluster& cluster) {
  check_job(model, training, layout, cluster);
  LayoutRequest request = layout;
  request.order = "tp-dp-pp";
  return predict(model, training,
                 LayoutPlan(request, layout_dims(model, training.seq_len), layout.world_size(), training.global_batch),
                 cluster);
}

Prediction predict_step(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                        const Cluster& cluster) {
  check_job(model, training, plan.layout(), cluster);
  return predict(model, training, plan, cluster);
}

std::string describe(const Prediction& p) {
  const TimeBreakdown& t = p.time;
  std::ostringstream os;
  char buf[256];
  os << "layout " << describe(p.layout) << ": " << p.micro_batches << " micro-batches per pipeline; layers per "
     << (p.layout.virtual_stages > 1 ? "chunk" : "stage");
  for (std::size_t i = 0; i < p.chunk_layers.size(); ++i) os << (i ? "," : " ") << p.chunk_layers[i];
  os << "\n";
  std::snprintf(buf, sizeof buf, "step %.4g s, %.4g tokens/s, MFU %.3f (%.4g model TFLOP per step)\n", p.step_s,
                p.tokens_per_s, p.mfu, p.model_flops_per_step / 1e12);
  os << buf;
  const auto line = [&](const char* name, double s, const std::string& note) {
    char row[128];
    std::snprintf(row, sizeof row, "  %-16s %10.4g s  %5.1f%%  ", name, s, 100.0 * s / p.step_s);
    os << row << note << "\n";
  };
  line("compute", t.compute, "GEMMs of every micro-batch on the slowest stage");
  line("tp comm", t.tp_comm, p.tp_crosses_nodes ? "tensor-parallel allreduces (ACROSS NODES)" : "tensor-parallel allreduces");
  if (p.layout.cp > 1) {
    std::snprintf(buf, sizeof buf, "ring attention's kv blocks, exposed of %.4g s%s", t.cp_total,
                  p.cp_crosses_nodes ? ", across nodes" : "");
    line("cp comm", t.cp_comm, buf);
  }
  line("pp comm", t.pp_comm, p.pp_crosses_nodes ? "activations between stages (across nodes)" : "activations between stages");
  line("bubble", t.bubble, "pipeline fill and drain (schedule simulation)");
  std::snprintf(buf, sizeof buf, "exposed of %.4g s%s", t.dp_total, p.dp_crosses_nodes ? ", across nodes" : "");
  line("dp comm", t.dp_exposed, buf);
  line("embedding sync", t.embedding_sync, "tied embedding between first and last stage");
  line("norm", t.norm, "gradient-norm allreduce");
  line("optimizer", t.optimizer, "AdamW, zeroing, norm pass (memory bound)");
  if (t.zero_gather > 0) line("zero-3 gathers", t.zero_gather, "parameter all-gathers their prefetch does not hide");
  if (t.core_wait > 0) line("core wait", t.core_wait, "ranks outnumber the cores: waiting for a core");
  os << "memory per device: " << describe(p.memory);
  std::snprintf(buf, sizeof buf, " of %.2f GiB: %s", p.memory_capacity / (1024.0 * 1024 * 1024),
                p.fits ? "fits" : "DOES NOT FIT");
  os << buf;
  return os.str();
}

}  // namespace mt::perf
