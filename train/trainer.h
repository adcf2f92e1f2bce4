// The single-rank training loop: gradient accumulation over micro-batches, global-norm clipping,
// AdamW with a learning-rate schedule, periodic evaluation on the validation split.
// defines: TrainSettings, Trainer
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/loader.h"
#include "models/gpt.h"
#include "train/metrics.h"
#include "train/optim/adamw.h"
#include "train/optim/lr_schedule.h"

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

class Trainer {
 public:
  // The model's parameters must be initialized (or loaded). `val` may be null: no evaluation.
  Trainer(DeviceContext& ctx, Gpt& model, data::DataLoader& train, data::DataLoader* val, TrainSettings settings);

  // One optimizer step over global_batch sequences; evaluates when due. Throws Error when the
  // loss or the gradient norm stops being finite, naming the step.
  StepRecord step();
  // Mean loss over the first eval_batches x global_batch sequences of the validation split: always
  // the same sequences, whatever the micro-batch, so evaluations compare across runs and layouts.
  double evaluate();

  int steps_done() const { return steps_done_; }
  AdamW& optimizer() { return *optimizer_; }
  const TrainSettings& settings() const { return settings_; }

 private:
  DeviceContext& ctx_;
  Gpt& model_;
  data::DataLoader& train_;
  data::DataLoader* val_;
  TrainSettings settings_;
  std::unique_ptr<AdamW> optimizer_;
  std::vector<std::int32_t> inputs_, targets_;
  int steps_done_ = 0;
};

}  // namespace mt
