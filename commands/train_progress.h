// The progress lines of `meshtrain train` (loss, tokens/s, MFU, ETA, and where each rank's time
// went), printed by rank 0 every --log-every steps, and their timing lines in the metrics file.
// defines: ProgressReporter
#pragma once

#include "comm/communicator.h"
#include "runtime/context.h"
#include "train/metrics.h"

namespace mt {

class ProgressReporter {
 public:
  // `metrics` (rank 0's, may be null) gets every step and the timing lines.
  ProgressReporter(Communicator& world, DeviceContext& ctx, int first_step, int total_steps, int log_every,
                   MetricsWriter* metrics);
  // After every step, on every rank: collective on the steps that print a line.
  void after_step(const StepRecord& last);

 private:
  Communicator& world_;
  DeviceContext& ctx_;
  int first_step_, total_steps_, log_every_;
  MetricsWriter* metrics_;
  double elapsed_after_first_ = 0.0;
  TimeBreakdown since_log_;
  int steps_since_log_ = 0;
};

}  // namespace mt
