// The training options of one run, whatever the layout: batch and sequence sizes, steps, the
// learning-rate schedule, AdamW, clipping and evaluation; and the checks they get.
// defines: TrainSettings, require_finite
#pragma once

#include "models/gpt_config.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/metrics.h"

namespace mt {

struct TrainSettings {
  int global_batch = 8;  // sequences per optimizer step
  int micro_batch = 4;   // sequences per forward pass; divides global_batch
  int seq_len = 64;
  int steps = 100;
  LrSchedule schedule;
  AdamWConfig adamw;
  float grad_clip = 1.0f;  // max global gradient norm; 0 disables clipping
  int eval_every = 0;      // steps between validation losses; 0: only after the last step
  int eval_batches = 4;    // global batches of validation data per evaluation
  double peak_flops = 0.0; // for MFU; 0: not reported

  void validate() const;   // Error naming the first bad field
  int micro_steps() const { return global_batch / micro_batch; }
  // Fills step_ms, tokens_per_s and, with peak_flops (per rank), mfu of a step that took `seconds`
  // on `ranks` ranks.
  void record_throughput(StepRecord& r, double seconds, const GptConfig& config, int ranks = 1) const;
  bool evaluation_due(int steps_done) const;  // after the last step and every eval_every steps
};

// Error naming the step when its loss or gradient norm is not finite (the run diverged).
void require_finite(const StepRecord& r);

}  // namespace mt
