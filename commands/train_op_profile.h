// `meshtrain train --profile-ops N`: the run's last N steps with every op timed
// (runtime/op_profile.h), then, from rank 0, where such a step goes on every rank (time in ops, time
// outside them: communication waits, the bubble, the host) and the ops that took the most, summed
// over the ranks. Made for a GPU without a profiler, and for many ranks sharing one GPU, where the
// question is what the ranks wait on. The drains make those steps slower, never different: the
// losses are the same bits as without the option.
// defines: TrainOpProfile
#pragma once

#include "train/metrics.h"

namespace mt {

class Communicator;
class DeviceContext;

class TrainOpProfile {
 public:
  // steps: the run's last step; profile_steps: how many of the last steps to time (0: none).
  TrainOpProfile(int steps, int profile_steps) : steps_(steps), profile_steps_(profile_steps) {}
  ~TrainOpProfile();  // timing stops with the loop, however it ends (a step that threw)
  TrainOpProfile(const TrainOpProfile&) = delete;
  TrainOpProfile& operator=(const TrainOpProfile&) = delete;

  // Before the step after `steps_done`: from the first of the last N on, its ops are timed.
  void before_step(int steps_done);
  // After it, timing off again: its time (validation not counted) and the progress line's split,
  // this rank's.
  void after_step(const StepRecord& step);
  // Collective: every rank's timings to rank 0, which prints them. Nothing when no step was timed.
  void report(Communicator& world, DeviceContext& ctx);

 private:
  int steps_, profile_steps_;
  bool on_ = false;  // inside a timed step
  int timed_steps_ = 0;
  double wall_s_ = 0;
  TimeBreakdown time_;
};

}  // namespace mt
