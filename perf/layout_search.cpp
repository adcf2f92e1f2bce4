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

}  // namespace

SearchResult search_layouts(const ModelShape& model, const TrainingShape& training, const Cluster& cluster,
                            const SearchOptions& options) {
  SearchResult result;
  const int devices = cluster.devices();
  for (int tp : divisors(devices)) {
    if (model.heads % tp != 0 || (4 * model.channels) % tp != 0 || model.vocab_rows() % tp != 0) continue;
    if (tp > cluster.devices_per_node && !options.allow_cross_node_tp) continue;
    for (int pp : divisors(devices / tp)) {
      if (pp > model.layers) continue;
      const int dp = devices / (tp * pp);
      if (training.global_batch % dp != 0) continue;
      const int per_pipeline = training.global_batch / dp;
      std::vector<int> micros = options.micro_batch ? std::vector<int>{*options.micro_batch} : divisors(per_pipeline);
      for (int b : micros) {
        if (per_pipeline % b != 0) continue;
        const int M = per_pipeline / b;
        struct Sched {
          ScheduleKind kind;
          int v;
        };
        std::vector<Sched> schedules;
        if (pp == 1 || M >= pp) schedules.push_back({ScheduleKind::OneFOneB, 1});
        if (pp > 1) schedules.push_back({ScheduleKind::GPipe, 1});
        for (int v : {2, 4})
          if (pp > 1 && model.layers % (pp * v) == 0 && M % pp == 0) schedules.push_back({ScheduleKind::Interleaved, v});
        for (const Sched& sched : schedules) {
          if (2L * M * pp * sched.v > kMaxTags) continue;
          for (int zero : {0, 1}) {
            if (zero == 1 && dp == 1) continue;
            Layout l;
            l.dp = dp;
            l.tp = tp;
            l.pp = pp;
            l.virtual_stages = sched.v;
            l.schedule = sched.kind;
            l.zero = zero;
            l.micro_batch = b;
            l.bucket_mb = options.bucket_mb;
            l.overlap = options.overlap;
            Prediction p;
            try {
              p = predict_step(model, training, l, cluster);
            } catch (const Error&) {
              continue;  // a layout meshtrain would refuse (parallel/layout_check.h)
            }
            ++result.considered;
            if (p.fits) {
              result.plans.push_back(std::move(p));
            } else {
              ++result.rejected_for_memory;
              if (!result.smallest_rejected || p.memory.total() < result.smallest_rejected->memory.total())
                result.smallest_rejected = std::move(p);
            }
          }
        }
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
