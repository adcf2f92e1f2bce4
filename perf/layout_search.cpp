#include "perf/layout_search.h"

#include <algorithm>

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

// Every candidate of a mesh dp x tp x pp, in the order the ranking breaks ties by.
std::vector<Layout> candidates(const MeshShape& mesh, const std::vector<int>& micros, const SearchOptions& options) {
  std::vector<Layout> out;
  for (int b : micros) {
    for (const Sched& sched : schedules_for(mesh.pp)) {
      for (int zero : {0, 1}) {
        if (zero == 1 && mesh.dp == 1) continue;
        Layout l;
        l.dp = mesh.dp;
        l.tp = mesh.tp;
        l.pp = mesh.pp;
        l.virtual_stages = sched.v;
        l.schedule = sched.kind;
        l.zero = zero;
        l.micro_batch = b;
        l.bucket_mb = options.bucket_mb;
        l.overlap = options.overlap;
        out.push_back(std::move(l));
      }
    }
  }
  return out;
}

// The meshes the search tries: tp within a node unless allowed, dp dividing the batch.
std::vector<MeshShape> meshes(const TrainingShape& training, const Cluster& cluster, const SearchOptions& options) {
  std::vector<MeshShape> out;
  const int devices = cluster.devices();
  for (int tp : divisors(devices)) {
    if (tp > cluster.devices_per_node && !options.allow_cross_node_tp) continue;
    for (int pp : divisors(devices / tp)) {
      const int dp = devices / (tp * pp);
      if (training.global_batch % dp == 0) out.push_back({dp, tp, pp});
    }
  }
  return out;
}

void record(Prediction p, SearchResult& result) {
  ++result.considered;
  if (p.fits) {
    result.plans.push_back(std::move(p));
  } else {
    ++result.rejected_for_memory;
    if (!result.smallest_rejected || p.memory.total() < result.smallest_rejected->memory.total())
      result.smallest_rejected = std::move(p);
  }
}

}  // namespace

SearchResult search_layouts(const ModelShape& model, const TrainingShape& training, const Cluster& cluster,
                            const SearchOptions& options) {
  SearchResult result;
  const ModelDims dims = layout_dims(model, training.seq_len);
  for (const MeshShape& mesh : meshes(training, cluster, options)) {
    const int per_pipeline = training.global_batch / mesh.dp;
    const std::vector<int> micros = options.micro_batch ? std::vector<int>{*options.micro_batch} : divisors(per_pipeline);
    for (const Layout& l : candidates(mesh, micros, options)) {
      try {
        const LayoutPlan plan(l, dims, cluster.devices(), training.global_batch);  // the checks meshtrain runs
        if (2L * plan.micro_batches() * l.pp * plan.layout().virtual_stages > kMaxTags) continue;
        record(predict_step(model, training, plan, cluster), result);
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
