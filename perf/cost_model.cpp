#include "perf/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "parallel/mesh.h"
#include "parallel/schedule.h"
#include "perf/comm_model.h"
#include "runtime/error.h"

namespace mt::perf {
namespace {

// The schedule's own simulation, with forward cost 1 and the backward's B (input gradients) and W
// (weight gradients) relative to it, each rounded to 1/16: times scale with the forward cost, so
// one run serves every layout with the same shape. The fused schedules' Backward costs B + W
// whatever the split, so their key holds the sum alone; the zero-bubble ones run B and W apart
// and key on both. The layout search asks for the same shapes thousands of times; schedules with
// P = 64 and M = 1536 take milliseconds to build.
struct ScheduleFacts {
  double makespan = 0;  // in forward costs
  std::vector<std::vector<int>> held_slots, held_slots_with_validation;  // perf/memory_model.h
};

const ScheduleFacts& schedule_facts(const LayoutPlan& plan, double f, double backward, double weight) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int, long, long>, ScheduleFacts> cache;
  const Layout& l = plan.layout();
  const bool split = splits_backward(l.schedule);
  const long b = std::lround((split ? backward - weight : backward) / f * 16.0);
  const long w = split ? std::lround(weight / f * 16.0) : 0;
  const auto key = std::make_tuple(static_cast<int>(l.schedule), l.pp, plan.micro_batches(), l.virtual_stages, b, w);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const Schedule schedule = plan.train_schedule();
  ScheduleFacts facts;
  facts.makespan =
      simulate(schedule, ComputeCosts{1.0, static_cast<double>(b) / 16.0, static_cast<double>(w) / 16.0}).makespan;
  const Schedule eval = plan.eval_schedule();
  facts.held_slots = held_slots(schedule, nullptr);
  facts.held_slots_with_validation = held_slots(schedule, &eval);
  return cache.emplace(key, std::move(facts)).first->second;
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

// Which groups leave a node, in the plan's mesh order.
void mark_node_crossings(const Mesh& mesh, int devices_per_node, Prediction& p) {
  p.tp_crosses_nodes = any_group_crosses(mesh.all_tp_groups(), devices_per_node);
  p.dp_crosses_nodes = any_group_crosses(mesh.all_dp_groups(), devices_per_node);
  p.pp_crosses_nodes = any_group_crosses(mesh.all_pp_groups(), devices_per_node);
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

// One stage's seconds per micro-batch: forward and backward of all its chunks, split into parts.
// compute_w is the part of compute_b that computes weight gradients (W of the zero-bubble split):
// the weight-gradient GEMMs, half of each linear layer's and the head's backward GEMMs. The rest of
// the backward is B: the input-gradient GEMMs, attention's backward (scores and values have no
// weights), recomputation's extra forward, and every tensor-parallel allreduce of the backward
// (all on the input-gradient path). Layernorm and bias gradients are memory bound and not counted.
struct StageTimes {
  double compute_f = 0, compute_b = 0, compute_w = 0, tp_f = 0, tp_b = 0;
  double params = 0;
  double cost() const { return compute_f + compute_b + tp_f + tp_b; }
};

StageTimes stage_times(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                       const Cluster& cluster, const Link& tp_link, int s) {
  const Layout& layout = plan.layout();
  const int P = layout.pp, v = layout.virtual_stages;
  const double N = static_cast<double>(layout.micro_batch) * training.seq_len, C = model.channels;
  const double act = training.act_bytes(), rate = achieved_rate(cluster, training.precision);
  const double tp_big = allreduce_s(layout.tp, N * C * act, tp_link), tp_small = allreduce_s(layout.tp, N * 4.0, tp_link);
  StageTimes st;
  st.params = static_cast<double>(stage_parameters(model, plan, s));
  for (int c = 0; c < v; ++c) {
    const int g = global_chunk_of(plan.placement(), P, s, c);
    const ChunkWork w = chunk_work(model, training, layout, plan.chunk_layers()[static_cast<std::size_t>(g)], g == 0,
                                   g == P * v - 1);
    st.compute_f += w.forward_flops / rate;
    st.compute_b += (2.0 * w.forward_flops + (training.recompute ? w.layer_flops : 0.0)) / rate;
    st.compute_w += (w.forward_flops - w.attention_flops) / rate;
    st.tp_f += w.tp_allreduces_forward * tp_big + w.tp_small_allreduces * tp_small;
    st.tp_b += w.tp_allreduces_backward * tp_big;
    if (training.recompute) st.tp_b += 2 * w.layers * tp_big;  // the layers' forward allreduces again
    // Gpt::forward_chunk casts the whole fp32 master to bf16 (read 4, write 2 bytes each).
    if (training.precision == Precision::BF16) st.compute_f += st.params * 6.0 / cluster.memory_bandwidth;
  }
  return st;
}

const StageTimes& slowest(const std::vector<StageTimes>& stages) {
  return *std::max_element(stages.begin(), stages.end(),
                           [](const StageTimes& a, const StageTimes& b) { return a.cost() < b.cost(); });
}

// The pipeline: the schedule's makespan with the slowest stage's per-chunk costs, what of it is
// compute and tensor-parallel communication, the rest bubble; and the messages between stages.
// Returns the makespan.
double add_pipeline(const LayoutPlan& plan, const StageTimes& slow, const ScheduleFacts& facts, double f,
                    double message, Prediction& p) {
  const Layout& layout = plan.layout();
  const int M = plan.micro_batches(), P = layout.pp, v = layout.virtual_stages;
  const double makespan = facts.makespan * f;
  p.time.compute = M * (slow.compute_f + slow.compute_b);
  p.time.tp_comm = M * (slow.tp_f + slow.tp_b);
  p.time.bubble = std::max(0.0, makespan - p.time.compute - p.time.tp_comm);
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
void add_data_parallel(const Layout& layout, double params, const StageTimes& slow, const Cluster& cluster,
                       const Link& dp_link, Prediction& p) {
  const double bucket_bytes = layout.bucket_mb * 1024.0 * 1024.0;
  const auto [reduce_total, reduce_last] =
      bucketed(params * 4.0, bucket_bytes, layout.zero == 1 ? reduce_scatter_s : allreduce_s, layout.dp, dp_link);
  const auto [gather_total, gather_last] =
      layout.zero == 1 ? bucketed(params * 4.0, bucket_bytes, allgather_s, layout.dp, dp_link) : std::pair{0.0, 0.0};
  const double updated = layout.zero == 1 ? params / layout.dp : params;
  p.time.optimizer = (28.0 * updated + 8.0 * params) / cluster.memory_bandwidth;
  const double window = layout.overlap ? slow.compute_b + slow.tp_b : 0.0;  // the last micro-batch's backward
  p.time.dp_total = reduce_total + gather_total;
  p.time.dp_exposed = std::max(reduce_last, reduce_total - window);
  if (layout.zero == 1)
    p.time.dp_exposed += layout.overlap ? std::max(gather_last, gather_total - p.time.optimizer) : gather_total;
}

// The tied embedding's sum and broadcast between the stages of its two copies (none where one stage
// holds the embedding and the head: zb-v's stage 0), and the norm's allreduce.
void add_synchronization(const ModelShape& model, const LayoutPlan& plan, const Mesh& mesh, const Cluster& cluster,
                         Prediction& p) {
  const Layout& layout = plan.layout();
  const int dpn = cluster.devices_per_node;
  if (plan.tied_across_stages()) {
    const double wte = static_cast<double>(model.vocab_rows()) * model.channels / layout.tp * 4.0;
    const Link& emb_link = link_for(any_group_crosses(mesh.all_embedding_groups(), dpn), cluster);
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
void add_memory(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                const Cluster& cluster, const ScheduleFacts& facts, Prediction& p) {
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
    stages.push_back(stage_times(model, training, plan, cluster, link_for(p.tp_crosses_nodes, cluster), s));
  const StageTimes& slow = slowest(stages);
  const int v = layout.virtual_stages;
  const double f = (slow.compute_f + slow.tp_f) / v, b = (slow.compute_b + slow.tp_b) / v;  // per chunk
  const ScheduleFacts& facts = schedule_facts(plan, f, b, slow.compute_w / v);
  const double N = static_cast<double>(layout.micro_batch) * training.seq_len;
  const double message =
      layout.pp > 1 ? p2p_s(N * model.channels * training.act_bytes(), link_for(p.pp_crosses_nodes, cluster)) : 0.0;
  const double makespan = add_pipeline(plan, slow, facts, f, message, p);

  const double params = std::max_element(stages.begin(), stages.end(), [](const StageTimes& x, const StageTimes& y) {
                          return x.params < y.params;
                        })->params;
  add_data_parallel(layout, params, slow, cluster, link_for(p.dp_crosses_nodes, cluster), p);
  add_synchronization(model, plan, mesh, cluster, p);

  const double dedicated = makespan + p.time.pp_comm + p.time.dp_exposed + p.time.embedding_sync + p.time.norm +
                           p.time.optimizer;
  p.step_s = dedicated;
  if (cluster.shared_cores && cluster.cores_per_node < cluster.devices_per_node) {
    p.time.core_wait = std::max(0.0, busiest_node(plan, mesh, stages, message, cluster, p) - dedicated);
    p.step_s = dedicated + p.time.core_wait;
  }
  add_throughput(model, training, layout, cluster, p);
  add_memory(model, training, plan, cluster, facts, p);
  return p;
}

}  // namespace

Prediction predict_step(const ModelShape& model, const TrainingShape& training, const Layout& layout,
                        const Cluster& cluster) {
  check_job(model, training, layout, cluster);
  LayoutRequest request = layout;
  request.order = "tp-dp-pp";
  const LayoutPlan plan(request, layout_dims(model, training.seq_len), layout.world_size(), training.global_batch);
  return predict(model, training, plan, cluster);
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
  line("pp comm", t.pp_comm, p.pp_crosses_nodes ? "activations between stages (across nodes)" : "activations between stages");
  line("bubble", t.bubble, "pipeline fill and drain (schedule simulation)");
  std::snprintf(buf, sizeof buf, "exposed of %.4g s%s", t.dp_total, p.dp_crosses_nodes ? ", across nodes" : "");
  line("dp comm", t.dp_exposed, buf);
  line("embedding sync", t.embedding_sync, "tied embedding between first and last stage");
  line("norm", t.norm, "gradient-norm allreduce");
  line("optimizer", t.optimizer, "AdamW, zeroing, norm pass (memory bound)");
  if (t.core_wait > 0) line("core wait", t.core_wait, "ranks outnumber the cores: waiting for a core");
  os << "memory per device: " << describe(p.memory);
  std::snprintf(buf, sizeof buf, " of %.2f GiB: %s", p.memory_capacity / (1024.0 * 1024 * 1024),
                p.fits ? "fits" : "DOES NOT FIT");
  os << buf;
  return os.str();
}

}  // namespace mt::perf
