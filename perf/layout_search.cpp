#include "perf/layout_search.h"

#include <algorithm>
#include <optional>

#include "parallel/memory_options.h"

#include "runtime/error.h"

namespace mt::perf {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

constexpr int kMaxTags = 1 << 15;  // meshtrain refuses schedules needing more MPI tags (parallel_trainer.cpp)

// The schedules tried for a pipeline of `pp` stages (whether meshtrain accepts one for a model and
// batch is the plan's to say): 1F1B; with pp > 1 also GPipe, interleaved with 2 and 4 chunks, and
// the zero-bubble zb-h1 and zb-v (v = 2, resolved by the plan; it refuses layers not divisible by
// 2 pp). Listed last: a tie goes to the schedules listed first.
struct Sched {
  ScheduleKind kind;
  int v;
};
std::vector<Sched> schedules_for(int pp) {
  std::vector<Sched> schedules{{ScheduleKind::OneFOneB, 1}};
  if (pp > 1) {
    schedules.push_back({ScheduleKind::GPipe, 1});
    for (int v : {2, 4}) schedules.push_back({ScheduleKind::Interleaved, v});
    schedules.push_back({ScheduleKind::ZeroBubbleH1, 1});
    schedules.push_back({ScheduleKind::ZeroBubbleV, 2});
  }
  return schedules;
}

// The memory options of one candidate structure, in the order they are tried: recomputation (the
// outer loop: none, selective, full), then ZeRO 0-3 (0 and 1 only without memory_options).
struct Variant {
  Recompute recompute;
  int zero;
  bool sequence_parallel;
};
std::vector<Variant> variants(const MeshShape& mesh, const SearchOptions& options) {
  std::vector<Variant> out;
  const std::vector<Recompute> recomputes =
      options.memory_options ? std::vector<Recompute>{Recompute::None, Recompute::Selective, Recompute::Full}
                             : std::vector<Recompute>{options.recompute};
  const std::vector<bool> sps = options.memory_options && mesh.tp > 1 ? std::vector<bool>{false, true}
                                                                      : std::vector<bool>{options.sequence_parallel && mesh.tp > 1};
  const int max_zero = options.memory_options ? 3 : 1;
  for (const bool sp : sps)
    for (const Recompute r : recomputes)
      for (int zero = 0; zero <= max_zero; ++zero)
        if (zero == 0 || mesh.dp * mesh.cp > 1) out.push_back({r, zero, sp});  // ZeRO shards over dp x cp
  return out;
}

// Whether a variant only costs time over one already found to fit with the same structure, ZeRO
// stage and sequence parallelism: more recomputation never makes a step faster in the model, so it
// can only rank below. Every ZeRO stage is predicted: a higher one can be faster (ZeRO-3's gathers
// hide under compute where ZeRO-1/2's gather after the update does not, and under bf16 ZeRO-2 and 3
// gather half of ZeRO-1's bytes), so it is never skipped for a lower one that fits.
bool dominated(const Variant& v, const std::vector<Variant>& fitting) {
  return std::any_of(fitting.begin(), fitting.end(), [&](const Variant& f) {
    return f.sequence_parallel == v.sequence_parallel && f.zero == v.zero && f.recompute < v.recompute;
  });
}

// Every candidate structure of a mesh dp x tp x pp (ZeRO 0 standing for the variants), in the order
// the ranking breaks ties by.
std::vector<Layout> candidates(const MeshShape& mesh, const std::vector<int>& micros, const SearchOptions& options) {
  std::vector<Layout> out;
  for (int b : micros) {
    for (const Sched& sched : schedules_for(mesh.pp)) {
      {
        Layout l;
        l.dp = mesh.dp;
        l.tp = mesh.tp;
        l.cp = mesh.cp;
        l.pp = mesh.pp;
        l.virtual_stages = sched.v;
        l.schedule = sched.kind;
        l.micro_batch = b;
        l.bucket_mb = options.bucket_mb;
        l.overlap = options.overlap;
        out.push_back(std::move(l));
      }
    }
  }
  return out;
}

}  // namespace

std::vector<int> context_parallel_sizes(int seq_len, int devices) {
  std::vector<int> out{1};
  for (int cp = 2; cp <= devices && devices % cp == 0; cp *= 2)
    if (seq_len % (2 * cp) == 0 && seq_len / cp >= kMinContextParallelRows) out.push_back(cp);
  return out;
}

namespace {

// The meshes the search tries: tp within a node unless allowed, cp as context_parallel_sizes allows,
// dp dividing the batch.
std::vector<MeshShape> meshes(const TrainingShape& training, const Cluster& cluster, const SearchOptions& options) {
  std::vector<MeshShape> out;
  const int devices = cluster.devices();
  for (int tp : divisors(devices)) {
    if (tp > cluster.devices_per_node && !options.allow_cross_node_tp) continue;
    for (int cp : context_parallel_sizes(training.seq_len, devices / tp)) {
      for (int pp : divisors(devices / (tp * cp))) {
        const int dp = devices / (tp * cp * pp);
        MeshShape mesh;
        mesh.dp = dp;
        mesh.tp = tp;
        mesh.cp = cp;
        mesh.pp = pp;
        if (training.global_batch % dp == 0) out.push_back(mesh);
      }
    }
  }
  return out;
}

// The plan with a variant's memory options; none where meshtrain refuses them with its structure
// (sequence parallelism with zb-h1 and zb-v): the plan's own checks, not the search's.
std::optional<LayoutPlan> with_variant(const LayoutPlan& plan, const Variant& v) {
  try {
    return plan.with_memory_options(v.zero, v.recompute, v.sequence_parallel);
  } catch (const UsageError&) {
    return std::nullopt;
  }
}

// Returns whether it fits.
bool record(Prediction p, SearchResult& result) {
  ++result.considered;
  const bool fits = p.fits;
  if (fits) {
    result.plans.push_back(std::move(p));
  } else {
    ++result.rejected_for_memory;
    std::optional<Prediction>& without_cp = result.smallest_rejected_without_cp;
    if (p.layout.cp == 1 && (!without_cp || p.memory.total() < without_cp->memory.total())) without_cp = p;
    if (!result.smallest_rejected || p.memory.total() < result.smallest_rejected->memory.total())
      result.smallest_rejected = std::move(p);
  }
  return fits;
}

}  // namespace

SearchResult search_layouts(const ModelShape& model, const TrainingShape& training, const Cluster& cluster,
                            const SearchOptions& options) {
  SearchResult result;
  const ModelDims dims = layout_dims(model, training.seq_len);
  for (const MeshShape& mesh : meshes(training, cluster, options)) {
    const int per_pipeline = training.global_batch / mesh.dp;
    const std::vector<int> micros = options.micro_batch ? std::vector<int>{*options.micro_batch} : divisors(per_pipeline);
    const std::vector<Variant> tried = variants(mesh, options);
    for (const Layout& structure : candidates(mesh, micros, options)) {
      try {
        // The checks meshtrain runs, once per structure (the memory options do not change it).
        const LayoutPlan plan(structure, dims, cluster.devices(), training.global_batch);
        if (2L * plan.micro_batches() * structure.pp * plan.layout().virtual_stages > kMaxTags) continue;
        std::vector<Variant> fitting;
        for (const Variant& v : tried) {
          if (dominated(v, fitting)) continue;
          const std::optional<LayoutPlan> variant = with_variant(plan, v);
          if (variant && record(predict_step(model, training, *variant, cluster), result)) fitting.push_back(v);
        }
      } catch (const Error&) {
        continue;  // a layout meshtrain would refuse (parallel/layout_check.h)
      }
    }
  }
  std::stable_sort(result.plans.begin(), result.plans.end(), [](const Prediction& a, const Prediction& b) {
    if (a.step_s != b.step_s) return a.step_s < b.step_s;
    return a.memory.total() < b.memory.total();
  });
  return result;
}

}  // namespace mt::perf
