// The training options of one run, whatever the layout: sequence length, steps, the learning-rate
// schedule, AdamW, clipping and evaluation; and the checks they get. The batch sizes are the
// LayoutPlan's (parallel/layout_plan.h: global_batch, micro_batch).
// defines: TrainSettings, require_finite
#pragma once

#include <cstdint>

#include "models/gpt_config.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/metrics.h"

namespace mt {

struct TrainSettings {
  int seq_len = 64;
  int steps = 100;
  LrSchedule schedule;
  AdamWConfig adamw;
  float grad_clip = 1.0f;  // max global gradient norm; 0 disables clipping
  int eval_every = 0;      // steps between validation losses; 0: only after the last step
  int eval_batches = 4;    // global batches of validation data per evaluation
  double peak_flops = 0.0; // for MFU; 0: not reported

  void validate() const;   // Error naming the first bad field
  // Fills step_ms, tokens_per_s and, with peak_flops (per rank), mfu of a step of `tokens` tokens
  // (global batch x seq_len) that took `seconds` on `ranks` ranks.
  void record_throughput(StepRecord& r, double seconds, const GptConfig& config, std::int64_t tokens,
                         int ranks = 1) const;
  bool evaluation_due(int steps_done) const;  // after the last step and every eval_every steps
};

// Error naming the step when its loss or gradient norm is not finite (the run diverged).
void require_finite(const StepRecord& r);

}  // namespace mt
