#include "train/tests/trainer.h"

#include <chrono>
#include <cmath>

#include "optim/grad_norm.h"

namespace mt {

Trainer::Trainer(DeviceContext& ctx, Gpt& model, data::DataLoader& train, data::DataLoader* val,
                 TrainSettings settings, int global_batch, int micro_batch)
    : ctx_(ctx),
      model_(model),
      train_(train),
      val_(val),
      settings_(std::move(settings)),
      global_batch_(global_batch),
      micro_batch_(micro_batch) {
  settings_.validate();
  MT_REQUIRE(micro_batch_ >= 1, "--micro-batch must be at least 1, got ", micro_batch_);
  MT_REQUIRE(global_batch_ >= micro_batch_ && global_batch_ % micro_batch_ == 0, "--global-batch (", global_batch_,
             ") must be a positive multiple of --micro-batch (", micro_batch_, ")");
  MT_REQUIRE(settings_.seq_len <= model_.config().max_seq_len, "--seq-len ", settings_.seq_len,
           " exceeds the model's context of ", model_.config().max_seq_len);
  MT_CHECK(train_.seq_len() == settings_.seq_len, "the training loader yields sequences of ", train_.seq_len(),
           " tokens, the trainer wants ", settings_.seq_len);
  ParameterStore& store = model_.parameters();
  std::vector<ParamSlot> slots;
  for (std::size_t i = 0; i < store.size(); ++i)
    slots.push_back({store.spec(i).name, store.param(i), store.grad(i), store.spec(i).decay});
  optimizer_ = std::make_unique<AdamW>(ctx_, std::move(slots), settings_.adamw);
  const std::size_t n = static_cast<std::size_t>(micro_batch_) * static_cast<std::size_t>(settings_.seq_len);
  inputs_.resize(n);
  targets_.resize(n);
}

StepRecord Trainer::step() {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const int passes = micro_steps();
  ParameterStore& store = model_.parameters();
  store.zero_grads(ctx_);
  double loss_sum = 0.0;
  for (int m = 0; m < passes; ++m) {
    train_.next(micro_batch_, inputs_, targets_);
    loss_sum += model_.forward(inputs_, targets_, micro_batch_, settings_.seq_len,
                               1.0f / static_cast<float>(passes));
    model_.backward();
  }
  StepRecord r;
  r.step = steps_done_ + 1;
  r.loss = loss_sum / passes;
  const Tensor grads = store.flat_grads();
  r.grad_norm = std::sqrt(sum_of_squares(ctx_, std::span<const Tensor>(&grads, 1)));
  require_finite(r);
  r.lr = settings_.schedule.at(steps_done_);
  optimizer_->step(static_cast<float>(r.lr), static_cast<float>(clip_scale(r.grad_norm, settings_.grad_clip)));
  ctx_.synchronize();
  ++steps_done_;
  settings_.record_throughput(r, std::chrono::duration<double>(clock::now() - start).count(), model_.config(),
                              std::int64_t{global_batch_} * settings_.seq_len);
  if (val_ != nullptr && settings_.evaluation_due(steps_done_)) r.val_loss = evaluate();
  return r;
}

double Trainer::evaluate() {
  MT_CHECK(val_ != nullptr, "no validation data to evaluate on");
  // The first eval_batches x global_batch sequences, in micro-batches: the same set whatever the
  // micro-batch (the stream repeats a small validation split in order).
  const int micro_batches = settings_.eval_batches * micro_steps();
  double sum = 0.0;
  for (int b = 0; b < micro_batches; ++b) {
    val_->read(static_cast<std::int64_t>(b) * micro_batch_, micro_batch_, inputs_, targets_);
    sum += model_.forward(inputs_, targets_, micro_batch_, settings_.seq_len, Gpt::kEvaluation);
  }
  return sum / micro_batches;
}

}  // namespace mt
