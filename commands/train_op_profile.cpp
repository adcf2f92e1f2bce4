#include "commands/train_op_profile.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "comm/agreement.h"
#include "comm/communicator.h"
#include "launch/op_profile_table.h"
#include "launch/table.h"
#include "runtime/op_profile.h"

namespace mt {
namespace {

constexpr std::size_t kTopOps = 20;

// One rank's profiled steps, as rank 0 reads them.
struct RankProfile {
  double wall_s = 0, in_ops_s = 0;  // per step
  TimeBreakdown time;               // per step
  std::vector<OpPerStep> ops;       // per step
};

std::string encode(int steps, double wall_s, const TimeBreakdown& time) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpTiming& op : op_timings()) ops.push_back({op.name, op.calls, op.seconds});
  return nlohmann::json{{"steps", steps},
                        {"wall_s", wall_s},
                        {"time", {time.compute_s, time.comm_s, time.bubble_s}},
                        {"ops", std::move(ops)}}
      .dump();
}

RankProfile decode(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  const double steps = j.at("steps").get<double>();
  RankProfile r;
  r.wall_s = j.at("wall_s").get<double>() / steps;
  r.time = {j.at("time").at(0).get<double>() / steps, j.at("time").at(1).get<double>() / steps,
            j.at("time").at(2).get<double>() / steps};
  for (const nlohmann::json& op : j.at("ops")) {
    r.ops.push_back({op.at(0).get<std::string>(), op.at(1).get<double>() / steps, op.at(2).get<double>() / steps});
    r.in_ops_s += r.ops.back().seconds;
  }
  return r;
}

// The ops of every rank, by name, as the mean per rank and step, most time first.
std::vector<OpPerStep> mean_over_ranks(const std::vector<RankProfile>& ranks) {
  std::map<std::string, OpPerStep> by_name;
  for (const RankProfile& r : ranks)
    for (const OpPerStep& op : r.ops) {
      OpPerStep& sum = by_name.try_emplace(op.name, OpPerStep{op.name}).first->second;
      sum.calls += op.calls;
      sum.seconds += op.seconds;
    }
  std::vector<OpPerStep> out;
  const auto n = static_cast<double>(ranks.size());
  for (auto& [name, op] : by_name) out.push_back({name, op.calls / n, op.seconds / n});
  std::stable_sort(out.begin(), out.end(), [](const OpPerStep& a, const OpPerStep& b) { return a.seconds > b.seconds; });
  return out;
}

void print(const std::vector<RankProfile>& ranks, int steps) {
  const auto ms = [](double s) { return format_cell("%.2f", 1e3 * s); };
  const auto pct = [](double part, double whole) { return format_cell("%.0f%%", whole > 0 ? 100.0 * part / whole : 0.0); };
  TextTable per_rank({"rank", "step ms", "in ops", "outside ops", "compute", "exposed comm", "bubble"});
  double mean_wall = 0;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const RankProfile& r = ranks[i];
    mean_wall += r.wall_s / static_cast<double>(ranks.size());
    per_rank.add_row({std::to_string(i), ms(r.wall_s), pct(r.in_ops_s, r.wall_s), pct(r.wall_s - r.in_ops_s, r.wall_s),
                      pct(r.time.compute_s, r.wall_s), pct(r.time.comm_s, r.wall_s), pct(r.time.bubble_s, r.wall_s)});
  }
  std::printf("\nWhere a step goes: the last %d step(s), every op drained before and after (so slower than the steps "
              "before them; the losses are the same)\nper rank (compute, exposed comm and bubble as the progress "
              "lines split a step):\n%s",
              steps, per_rank.render().c_str());
  std::printf("ops, the mean of %zu rank(s) per step of %.2f ms:\n%s", ranks.size(), 1e3 * mean_wall,
              op_profile_table(mean_over_ranks(ranks), mean_wall, kTopOps,
                               ranks.size() > 1 ? "(outside ops: communication waits, bubble, host)"
                                                : "(outside ops: the host between them)")
                  .c_str());
  std::fflush(stdout);
}

}  // namespace

TrainOpProfile::~TrainOpProfile() {
  if (on_) set_op_profiling(false);
}

void TrainOpProfile::before_step(int steps_done) {
  if (profile_steps_ == 0 || steps_ - steps_done > profile_steps_) return;
  if (timed_steps_ == 0) reset_op_timings();
  set_op_profiling(true);
  on_ = true;
}

// Off until the next step: a checkpoint's save and the progress line's gathers are not the step's.
void TrainOpProfile::after_step(const StepRecord& step) {
  if (!on_) return;
  set_op_profiling(false);
  on_ = false;
  ++timed_steps_;
  wall_s_ += step.step_ms / 1e3;
  time_ += step.time;
}

void TrainOpProfile::report(Communicator& world, DeviceContext& ctx) {
  if (timed_steps_ == 0) return;  // the same on every rank: each times the same steps
  const std::vector<std::string> all = allgather_strings(world, ctx, encode(timed_steps_, wall_s_, time_));
  if (world.rank() != 0) return;
  std::vector<RankProfile> ranks;
  for (const std::string& text : all) ranks.push_back(decode(text));
  print(ranks, timed_steps_);
}

}  // namespace mt
