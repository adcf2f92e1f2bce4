// The single-rank training loop, the reference the parallel trainer is tested against (tests only):
// gradient accumulation over micro-batches, global-norm clipping, AdamW with a learning-rate schedule,
// periodic evaluation on the validation split.
// defines: Trainer
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/loader.h"
#include "models/gpt.h"
#include "optim/adamw.h"
#include "train/train_settings.h"

namespace mt {

class Trainer {
 public:
  // The model's parameters must be initialized (or loaded). `val` may be null: no evaluation. Each
  // step reads global_batch sequences in micro-batches of micro_batch (a divisor of it).
  Trainer(DeviceContext& ctx, Gpt& model, data::DataLoader& train, data::DataLoader* val, TrainSettings settings,
          int global_batch, int micro_batch);

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
  int micro_steps() const { return global_batch_ / micro_batch_; }

  DeviceContext& ctx_;
  Gpt& model_;
  data::DataLoader& train_;
  data::DataLoader* val_;
  TrainSettings settings_;
  int global_batch_, micro_batch_;
  std::unique_ptr<AdamW> optimizer_;
  std::vector<std::int32_t> inputs_, targets_;
  int steps_done_ = 0;
};

}  // namespace mt
