// The zero-bubble schedules (make_schedule in parallel/schedule.h states the rules): a greedy list
// scheduler over a unit-cost simulation of every stage gives each stage's timed computations; ZB-V
// then places its messages by that simulation's clock. Internal to the schedules.
// defines: TimedCompute, Timelines, zero_bubble_timelines, place_messages_by_clock
#pragma once

#include <vector>

#include "parallel/schedule.h"

namespace mt {

// One computation of the simulation: F, B (BackwardInput) or W (BackwardWeight) of (micro, local chunk).
struct TimedCompute {
  ActionKind kind;
  int micro;
  int chunk;
  double start;
  double end;
};
using Timelines = std::vector<std::vector<TimedCompute>>;  // per stage, in time order

// The ZB-H1 or ZB-V computations of `shape` (its kind, sizes and placement; its actions unused).
Timelines zero_bubble_timelines(const Schedule& shape);

// Every stage's actions: each send directly after its computation, each receive in the run of
// messages on the receiver that the simulated send time falls in (before the receiver's first
// computation starting at or after it), receives in a run ordered by send time. A send and its
// receive sit at the same simulated moment, so per-pair order holds and every run completes as a
// batch with no stage waiting longer than in the simulation. The timelines must be unit-cost.
std::vector<std::vector<Action>> place_messages_by_clock(const Schedule& shape, const Timelines& timelines);

}  // namespace mt
