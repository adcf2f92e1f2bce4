// Running schedules without an executor: timing with given costs and the activation counts
// (parallel/schedule.h). The grouped-batch check is in parallel/schedule_batches.cpp.
#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <sstream>
#include <utility>

#include "parallel/schedule.h"
#include "runtime/error.h"

namespace mt {

double ScheduleSimulation::bubble_fraction() const {
  if (makespan <= 0 || idle.empty()) return 0;
  return std::accumulate(idle.begin(), idle.end(), 0.0) / static_cast<double>(idle.size()) / makespan;
}

namespace {

struct SentMessage {
  int tag;
  double time;
};

std::string stuck_report(const Schedule& schedule, const std::vector<std::size_t>& next) {
  std::ostringstream out;
  for (int stage = 0; stage < schedule.stages; ++stage) {
    const auto& list = schedule.actions[stage];
    out << " s" << stage << (next[stage] < list.size() ? " waits at " + to_string(list[next[stage]], true) : " done");
  }
  return out.str();
}

double cost_of(ActionKind kind, const ComputeCosts& costs) {
  switch (kind) {
    case ActionKind::Forward: return costs.forward;
    case ActionKind::Backward: return costs.backward_input + costs.backward_weight;
    case ActionKind::BackwardInput: return costs.backward_input;
    case ActionKind::BackwardWeight: return costs.backward_weight;
    default: return 0;
  }
}

}  // namespace

ScheduleSimulation simulate(const Schedule& schedule, const ComputeCosts& costs) {
  const int stages = schedule.stages;
  std::vector<std::size_t> next(stages, 0);
  std::vector<double> clock(stages, 0.0);
  ScheduleSimulation result;
  result.busy.assign(stages, 0.0);
  std::map<std::pair<int, int>, std::deque<SentMessage>> in_transit;  // (from, to) -> in issue order
  // Each stage runs until it blocks on a receive; sweep until nothing moves. A send's time is final
  // when it is issued, so the order of the sweep does not change any clock.
  bool moved = true;
  while (moved) {
    moved = false;
    for (int stage = 0; stage < stages; ++stage) {
      const auto& list = schedule.actions[stage];
      while (next[stage] < list.size()) {
        const Action& a = list[next[stage]];
        if (is_compute(a.kind)) {
          const double cost = cost_of(a.kind, costs);
          clock[stage] += cost;
          result.busy[stage] += cost;
        } else if (is_send(a.kind)) {
          in_transit[{stage, schedule.peer(stage, a).stage}].push_back({schedule.tag(stage, a), clock[stage]});
        } else {
          auto& queue = in_transit[{schedule.peer(stage, a).stage, stage}];
          if (queue.empty()) break;
          MT_CHECK(queue.front().tag == schedule.tag(stage, a), "stage ", stage, " receives ", to_string(a, true),
                   " but the next message from stage ", schedule.peer(stage, a).stage, " has tag ", queue.front().tag);
          clock[stage] = std::max(clock[stage], queue.front().time);
          queue.pop_front();
        }
        ++next[stage];
        moved = true;
      }
    }
  }
  for (int stage = 0; stage < stages; ++stage) {
    MT_CHECK(next[stage] == schedule.actions[stage].size(), "the schedule deadlocks:", stuck_report(schedule, next));
  }
  result.makespan = *std::max_element(clock.begin(), clock.end());
  for (int stage = 0; stage < stages; ++stage) result.idle.push_back(result.makespan - result.busy[stage]);
  return result;
}

ScheduleSimulation simulate(const Schedule& schedule, double forward_cost, double backward_cost) {
  return simulate(schedule, ComputeCosts{forward_cost, backward_cost / 2, backward_cost / 2});
}

namespace {

// Per stage: the most micro-batch slots between an action that `opens` one and one that `closes` it.
template <class Opens, class Closes>
std::vector<int> peak_held(const Schedule& schedule, Opens opens, Closes closes) {
  std::vector<int> peaks;
  for (const auto& list : schedule.actions) {
    int held = 0;
    int peak = 0;
    for (const Action& a : list) {
      if (opens(a.kind)) peak = std::max(peak, ++held);
      if (closes(a.kind)) --held;
    }
    peaks.push_back(peak);
  }
  return peaks;
}

}  // namespace

std::vector<int> peak_in_flight(const Schedule& schedule) {
  return peak_held(
      schedule, [](ActionKind k) { return k == ActionKind::Forward; }, makes_weight_grad);
}

std::vector<int> peak_deferred_weight(const Schedule& schedule) {
  return peak_held(
      schedule, [](ActionKind k) { return k == ActionKind::BackwardInput; },
      [](ActionKind k) { return k == ActionKind::BackwardWeight; });
}

}  // namespace mt
