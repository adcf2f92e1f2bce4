#include "train/tests/trainer.h"

#include <chrono>
#include <cmath>

#include "optim/grad_norm.h"

namespace mt {

Trainer::Trainer(DeviceContext& ctx, Gpt& model, data::DataLoader& train, data::DataLoader* val,
                 TrainSettings settings)
    : ctx_(ctx), model_(model), train_(train), val_(val), settings_(std::move(settings)) {
  settings_.validate();
  MT_REQUIRE(settings_.seq_len <= model_.config().max_seq_len, "--seq-len ", settings_.seq_len,
           " exceeds the model's context of ", model_.config().max_seq_len);
  MT_CHECK(train_.seq_len() == settings_.seq_len, "the training loader yields sequences of ", train_.seq_len(),
           " tokens, the trainer wants ", settings_.seq_len);
  ParameterStore& store = model_.parameters();
  std::vector<ParamSlot> slots;
  for (std::size_t i = 0; i < store.size(); ++i)
    slots.push_back({store.spec(i).name, store.param(i), store.grad(i), store.spec(i).decay});
  optimizer_ = std::make_unique<AdamW>(ctx_, std::move(slots), settings_.adamw);
  const std::size_t n = static_cast<std::size_t>(settings_.micro_batch) * static_cast<std::size_t>(settings_.seq_len);
  inputs_.resize(n);
  targets_.resize(n);
}

StepRecord Trainer::step() {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const int micro_steps = settings_.micro_steps();
  ParameterStore& store = model_.parameters();
  store.zero_grads(ctx_);
  double loss_sum = 0.0;
  for (int m = 0; m < micro_steps; ++m) {
    train_.next(settings_.micro_batch, inputs_, targets_);
    loss_sum += model_.forward(inputs_, targets_, settings_.micro_batch, settings_.seq_len,
                               1.0f / static_cast<float>(micro_steps));
    model_.backward();
  }
  StepRecord r;
  r.step = steps_done_ + 1;
  r.loss = loss_sum / micro_steps;
  const Tensor grads = store.flat_grads();
  r.grad_norm = std::sqrt(sum_of_squares(ctx_, std::span<const Tensor>(&grads, 1)));
  require_finite(r);
  r.lr = settings_.schedule.at(steps_done_);
  optimizer_->step(static_cast<float>(r.lr), static_cast<float>(clip_scale(r.grad_norm, settings_.grad_clip)));
  ctx_.synchronize();
  ++steps_done_;
  settings_.record_throughput(r, std::chrono::duration<double>(clock::now() - start).count(), model_.config());
  if (val_ != nullptr && settings_.evaluation_due(steps_done_)) r.val_loss = evaluate();
  return r;
}

double Trainer::evaluate() {
  MT_CHECK(val_ != nullptr, "no validation data to evaluate on");
  // The first eval_batches x global_batch sequences, in micro-batches: the same set whatever the
  // micro-batch (the stream repeats a small validation split in order).
  const int micro_batches = settings_.eval_batches * settings_.micro_steps();
  double sum = 0.0;
  for (int b = 0; b < micro_batches; ++b) {
    val_->read(static_cast<std::int64_t>(b) * settings_.micro_batch, settings_.micro_batch, inputs_, targets_);
    sum += model_.forward(inputs_, targets_, settings_.micro_batch, settings_.seq_len, Gpt::kEvaluation);
  }
  return sum / micro_batches;
}

}  // namespace mt
