// What `meshtrain train` shows while it runs: the progress lines with where the time went on every
// rank, and the timing lines of the metrics file.
#include "commands/train_progress.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "runtime/tensor.h"

namespace mt {
namespace {

// Every rank's time breakdown since the last progress line, per step, and a line for the terminal.
struct TimingSummary {
  std::vector<TimeBreakdown> ranks;  // per step, in rank order
  int steps = 0;
  std::string line;
};

TimingSummary gather_timing(Communicator& world, DeviceContext& ctx, const TimeBreakdown& mine, int steps) {
  const std::vector<float> local{static_cast<float>(mine.compute_s / steps), static_cast<float>(mine.comm_s / steps),
                                 static_cast<float>(mine.bubble_s / steps)};
  Tensor all = Tensor::empty({3 * static_cast<std::int64_t>(world.size())}, DType::F32, ctx);
  world.allgather(Tensor::from_host(local, {3}, ctx), all);
  const std::vector<float> values = all.to_host<float>();
  TimingSummary t;
  t.steps = steps;
  TimeBreakdown mean;
  std::size_t most_bubble = 0, most_comm = 0;
  for (std::size_t r = 0; r < static_cast<std::size_t>(world.size()); ++r) {
    t.ranks.push_back({values[3 * r], values[3 * r + 1], values[3 * r + 2]});
    mean += t.ranks.back();
    if (t.ranks[r].bubble_s > t.ranks[most_bubble].bubble_s) most_bubble = r;
    if (t.ranks[r].comm_s > t.ranks[most_comm].comm_s) most_comm = r;
  }
  const double total = mean.compute_s + mean.comm_s + mean.bubble_s;
  const auto pct = [total](double x) { return total > 0 ? 100.0 * x / total : 0.0; };
  const auto rank_pct = [](const TimeBreakdown& b, double x) {
    const double sum = b.compute_s + b.comm_s + b.bubble_s;
    return sum > 0 ? 100.0 * x / sum : 0.0;
  };
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "     time: compute %.0f%% | exposed comm %.0f%% | bubble %.0f%% (mean of %d ranks; most comm: rank %zu "
                "%.0f%%, most bubble: rank %zu %.0f%%)",
                pct(mean.compute_s), pct(mean.comm_s), pct(mean.bubble_s), world.size(), most_comm,
                rank_pct(t.ranks[most_comm], t.ranks[most_comm].comm_s), most_bubble,
                rank_pct(t.ranks[most_bubble], t.ranks[most_bubble].bubble_s));
  t.line = buf;
  return t;
}

// {"timing": {"step": N, "steps": k, "ranks": [{"rank": 0, "compute_ms": .., "comm_ms": .., "bubble_ms": ..}]}}:
// each rank's mean per step over the k steps up to step N.
nlohmann::ordered_json timing_json(int step, const TimingSummary& t) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (std::size_t r = 0; r < t.ranks.size(); ++r)
    ranks.push_back({{"rank", r},
                     {"compute_ms", 1e3 * t.ranks[r].compute_s},
                     {"comm_ms", 1e3 * t.ranks[r].comm_s},
                     {"bubble_ms", 1e3 * t.ranks[r].bubble_s}});
  nlohmann::ordered_json j;
  j["timing"] = {{"step", step}, {"steps", t.steps}, {"ranks", ranks}};
  return j;
}

}  // namespace

ProgressReporter::ProgressReporter(Communicator& world, DeviceContext& ctx, int first_step, int total_steps,
                                   int log_every, MetricsWriter* metrics)
    : world_(world), ctx_(ctx), first_step_(first_step), total_steps_(total_steps), log_every_(log_every),
      metrics_(metrics) {}

void ProgressReporter::after_step(const StepRecord& last) {
  if (last.step > first_step_) elapsed_after_first_ += last.step_ms / 1e3;
  since_log_ += last.time;
  ++steps_since_log_;
  if (metrics_) metrics_->write(last);
  const bool show = last.step == first_step_ || last.step == total_steps_ || last.step % log_every_ == 0 || last.val_loss;
  if (!show) return;
  // Collective: every rank reaches the same decision.
  const TimingSummary timing = gather_timing(world_, ctx_, since_log_, steps_since_log_);
  since_log_ = {};
  steps_since_log_ = 0;
  if (world_.rank() != 0) return;
  // ETA from the mean step time so far, leaving out the first (warm-up) step when possible.
  const double mean = last.step > first_step_ ? elapsed_after_first_ / (last.step - first_step_) : last.step_ms / 1e3;
  std::printf("%s\n", format_progress(last, total_steps_, mean * (total_steps_ - last.step)).c_str());
  // One rank has no communication or bubble to show.
  if (world_.size() > 1) {
    std::printf("%s\n", timing.line.c_str());
    if (metrics_) metrics_->write_json(timing_json(last.step, timing).dump());
  }
  std::fflush(stdout);
}

}  // namespace mt
