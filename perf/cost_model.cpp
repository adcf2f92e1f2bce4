#include "perf/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "parallel/layout_check.h"
#include "parallel/mesh.h"
#include "parallel/schedule.h"
#include "perf/comm_model.h"
#include "runtime/error.h"

namespace mt::perf {
namespace {

// The schedule's own simulation, with forward cost 1 and backward cost `ratio` (rounded to 1/16):
// times scale with the forward cost, so one run serves every layout with the same shape. The
// layout search asks for the same shapes thousands of times; schedules with P = 64 and M = 1536
// take milliseconds to build.
struct ScheduleFacts {
  double makespan = 0;  // in forward costs
  std::vector<std::vector<int>> held_slots, held_slots_with_validation;  // perf/memory_model.h
};

const ScheduleFacts& schedule_facts(ScheduleKind kind, int stages, int micro, int v, double ratio) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int, long>, ScheduleFacts> cache;
  const long r = std::lround(ratio * 16.0);
  const auto key = std::make_tuple(static_cast<int>(kind), stages, micro, v, r);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const Schedule schedule = make_schedule(kind, stages, micro, v);
  ScheduleFacts facts;
  facts.makespan = simulate(schedule, 1.0, static_cast<double>(r) / 16.0).makespan;
  const Schedule eval = make_forward_only_schedule(stages, micro, v);
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

}  // namespace

Prediction predict_step(const ModelShape& model, const TrainingShape& training, const Layout& layout,
                        const Cluster& cluster) {
  model.validate();
  cluster.validate();
  MT_REQUIRE(training.seq_len >= 1 && training.seq_len <= model.max_seq_len, "sequence length ", training.seq_len,
             " must be in [1, ", model.max_seq_len, "] (the model's context)");
  MT_REQUIRE(layout.world_size() <= cluster.devices(), "layout ", describe(layout), " needs ", layout.world_size(),
             " devices, the cluster has ", cluster.devices());
  MT_REQUIRE(layout.zero == 0 || layout.zero == 1, "zero must be 0 or 1, got ", layout.zero);
  MT_REQUIRE(layout.bucket_mb > 0, "bucket size must be positive, got ", layout.bucket_mb);
  LayoutRequest request = layout;
  request.order = "tp-dp-pp";
  const LayoutPlan plan(request, layout_dims(model, training.seq_len), layout.world_size(), training.global_batch);

  Prediction p;
  p.layout = layout;
  p.micro_batches = plan.micro_batches();
  p.chunk_layers = plan.chunk_layers();
  const int M = p.micro_batches, P = layout.pp, v = layout.virtual_stages;
  const double N = static_cast<double>(layout.micro_batch) * training.seq_len, C = model.channels;
  const double act = training.act_bytes();

  // Which groups leave a node (mesh order tp-dp-pp: tp fastest, then dp, then pp).
  const Mesh mesh(plan.mesh());
  const int dpn = cluster.devices_per_node;
  p.tp_crosses_nodes = any_group_crosses(mesh.all_tp_groups(), dpn);
  p.dp_crosses_nodes = any_group_crosses(mesh.all_dp_groups(), dpn);
  p.pp_crosses_nodes = any_group_crosses(mesh.all_pp_groups(), dpn);
  const Link& tp_link = p.tp_crosses_nodes ? cluster.inter : cluster.intra;
  const Link& dp_link = p.dp_crosses_nodes ? cluster.inter : cluster.intra;
  const Link& pp_link = p.pp_crosses_nodes ? cluster.inter : cluster.intra;
  const Link& world_link = layout.world_size() > dpn ? cluster.inter : cluster.intra;

  // The achieved GEMM rate in the compute dtype. fp32 on a GPU rated for bf16 runs on the CUDA
  // cores (A100: 19.5 of 312 TFLOP/s, H100: 67 of 989): 1/16. bf16 on a CPU rated for fp32 widens
  // around every GEMM and runs about half as fast (docs/PERFORMANCE.md).
  double rate = cluster.peak_flops * cluster.achieved_fraction;
  const bool bf16 = training.precision == Precision::BF16;
  if (!bf16 && cluster.peak_dtype == "bf16") rate /= 16.0;
  if (bf16 && cluster.peak_dtype == "fp32") rate /= 2.0;

  // Per stage and micro-batch: forward and backward of all its chunks, split into parts.
  struct StageTimes {
    double compute_f = 0, compute_b = 0, tp_f = 0, tp_b = 0;
    double params = 0;
  };
  std::vector<StageTimes> stages(static_cast<std::size_t>(P));
  const double tp_big = allreduce_s(layout.tp, N * C * act, tp_link), tp_small = allreduce_s(layout.tp, N * 4.0, tp_link);
  for (int s = 0; s < P; ++s) {
    StageTimes& st = stages[static_cast<std::size_t>(s)];
    st.params = static_cast<double>(stage_parameters(model, layout, p.chunk_layers, s));
    for (int c = 0; c < v; ++c) {
      const int g = c * P + s;
      const ChunkWork w = chunk_work(model, training, layout, p.chunk_layers[static_cast<std::size_t>(g)], g == 0,
                                     g == P * v - 1);
      st.compute_f += w.forward_flops / rate;
      st.compute_b += (2.0 * w.forward_flops + (training.recompute ? w.layer_flops : 0.0)) / rate;
      st.tp_f += w.tp_allreduces_forward * tp_big + w.tp_small_allreduces * tp_small;
      st.tp_b += w.tp_allreduces_backward * tp_big;
      if (training.recompute) st.tp_b += 2 * w.layers * tp_big;  // the layers' forward allreduces again
      // Gpt::forward_chunk casts the whole fp32 master to bf16 (read 4, write 2 bytes each).
      if (bf16) st.compute_f += st.params * 6.0 / cluster.memory_bandwidth;
    }
  }
  const auto stage_cost = [](const StageTimes& st) { return st.compute_f + st.compute_b + st.tp_f + st.tp_b; };
  const StageTimes& slow = *std::max_element(stages.begin(), stages.end(), [&](const StageTimes& a, const StageTimes& b) {
    return stage_cost(a) < stage_cost(b);
  });
  const double f = (slow.compute_f + slow.tp_f) / v, b = (slow.compute_b + slow.tp_b) / v;  // per chunk

  // The pipeline: the schedule's makespan with the slowest stage's per-chunk costs.
  const ScheduleFacts& facts = schedule_facts(layout.schedule, P, M, v, b / f);
  const double makespan = facts.makespan * f;
  p.time.compute = M * (slow.compute_f + slow.compute_b);
  p.time.tp_comm = M * (slow.tp_f + slow.tp_b);
  p.time.bubble = std::max(0.0, makespan - p.time.compute - p.time.tp_comm);
  const double message = P > 1 ? p2p_s(N * C * act, pp_link) : 0.0;
  if (P > 1) {
    // Fill and drain cross every chunk boundary once each way; without overlap every send is
    // also waited for by its sender.
    p.time.pp_comm = 2.0 * (P * v - 1) * message + (layout.overlap ? 0.0 : 2.0 * M * v * message);
  }

  // Data parallelism, tied embedding, norm, optimizer: for the stage holding the most parameters.
  const double params = std::max_element(stages.begin(), stages.end(), [](const StageTimes& x, const StageTimes& y) {
                          return x.params < y.params;
                        })->params;
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
  if (P > 1) {
    const double wte = static_cast<double>(model.vocab_rows()) * C / layout.tp * 4.0;
    const Link& emb_link = any_group_crosses(mesh.all_embedding_groups(), dpn) ? cluster.inter : cluster.intra;
    p.time.embedding_sync = allreduce_s(2, wte, emb_link) + p2p_s(wte, emb_link);
  }
  p.time.norm = allreduce_s(layout.world_size(), 12.0, world_link);

  const double dedicated = makespan + p.time.pp_comm + p.time.dp_exposed + p.time.embedding_sync + p.time.norm +
                           p.time.optimizer;
  p.step_s = dedicated;
  if (cluster.shared_cores && cluster.cores_per_node < dpn) {
    // Every rank's busy time (its compute, its communication, which on shared memory is CPU
    // copying, and its optimizer) must pass through the node's cores; a rank that waits yields.
    double busiest_node = 0;
    for (int node = 0; node * dpn < layout.world_size(); ++node) {
      double busy = 0;
      for (int r = node * dpn; r < std::min(layout.world_size(), (node + 1) * dpn); ++r) {
        const StageTimes& st = stages[static_cast<std::size_t>(mesh.coord_of(r).pp)];
        busy += M * stage_cost(st) + (P > 1 ? 2.0 * M * v * message : 0.0) + p.time.dp_total +
                p.time.embedding_sync + p.time.optimizer;
      }
      busiest_node = std::max(busiest_node, busy / cluster.cores_per_node);
    }
    p.time.core_wait = std::max(0.0, busiest_node - dedicated);
    p.step_s = dedicated + p.time.core_wait;
  }

  const double tokens = static_cast<double>(training.global_batch) * training.seq_len;
  p.tokens_per_s = tokens / p.step_s;
  p.model_flops_per_step = model.training_flops_per_token(training.seq_len) * tokens;
  const double hardware = cluster.shared_cores
                              ? std::min<double>(layout.world_size(), cluster.concurrent_ranks() * std::ceil(
                                                                       static_cast<double>(layout.world_size()) / dpn))
                              : layout.world_size();
  p.mfu = p.model_flops_per_step / p.step_s / (hardware * cluster.peak_flops);

  p.memory = estimate_memory(model, training, layout, cluster, p.chunk_layers,
                             training.validation ? facts.held_slots_with_validation : facts.held_slots);
  // The ranks of a CPU node share its memory (and what the OS keeps): each gets its share.
  const double sharers = cluster.shared_cores ? dpn : 1;
  p.memory.reserved /= sharers;
  p.memory_capacity = cluster.memory_bytes / sharers;
  p.fits = p.memory.total() <= p.memory_capacity;
  return p;
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
