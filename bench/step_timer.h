// Timing a region the way every multi-rank meshbench command reports it: after a barrier, on a
// steady clock, and over the timed steps the mean and the best of the slowest rank's time.
// defines: Stopwatch, StepTimes, time_after_barrier
#pragma once

#include <algorithm>
#include <chrono>
#include <utility>

#include "comm/communicator.h"

namespace mt {

class Stopwatch {
 public:
  double seconds() const { return std::chrono::duration<double>(clock::now() - start_).count(); }
  void restart() { start_ = clock::now(); }

 private:
  using clock = std::chrono::steady_clock;
  clock::time_point start_ = clock::now();
};

// The mean (each step adds seconds / steps, in step order) and the best of `steps` timed steps.
struct StepTimes {
  double mean_s = 0, min_s = 1e30;
  void add(double seconds, int steps) {
    mean_s += seconds / steps;
    min_s = std::min(min_s, seconds);
  }
};

// Collective over `world`: a barrier, then `region` timed on this rank; returns this rank's seconds.
template <typename Region>
double time_after_barrier(Communicator& world, Region&& region) {
  world.barrier();
  const Stopwatch watch;
  std::forward<Region>(region)();
  return watch.seconds();
}

}  // namespace mt
