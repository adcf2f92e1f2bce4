#include "train/trainer.h"

#include <chrono>
#include <cmath>

#include "train/optim/grad_norm.h"

namespace mt {

void TrainSettings::validate() const {
  MT_REQUIRE(micro_batch >= 1, "--micro-batch must be at least 1, got ", micro_batch);
  MT_REQUIRE(global_batch >= micro_batch && global_batch % micro_batch == 0, "--global-batch (", global_batch,
           ") must be a positive multiple of --micro-batch (", micro_batch, ")");
  MT_REQUIRE(seq_len >= 1, "--seq-len must be at least 1, got ", seq_len);
  MT_REQUIRE(steps >= 1, "--steps must be at least 1, got ", steps);
  MT_REQUIRE(grad_clip >= 0.0f && std::isfinite(grad_clip), "--grad-clip must be >= 0, got ", grad_clip);
  MT_REQUIRE(eval_every >= 0, "--eval-every must be >= 0, got ", eval_every);
  MT_REQUIRE(eval_batches >= 1, "--eval-batches must be at least 1, got ", eval_batches);
  schedule.validate();
  mt::validate(adamw);
}

void TrainSettings::record_throughput(StepRecord& r, double seconds, const GptConfig& config, int ranks) const {
  const double tokens = static_cast<double>(global_batch) * seq_len;
  r.step_ms = 1e3 * seconds;
  r.tokens_per_s = tokens / seconds;
  if (peak_flops > 0) r.mfu = tokens * config.training_flops_per_token(seq_len) / seconds / (peak_flops * ranks);
}

bool TrainSettings::evaluation_due(int steps_done) const {
  return steps_done == steps || (eval_every > 0 && steps_done % eval_every == 0);
}

void require_finite(const StepRecord& r) {
  MT_REQUIRE(std::isfinite(r.loss) && std::isfinite(r.grad_norm), "training diverged at step ", r.step, ": loss ",
             r.loss, ", gradient norm ", r.grad_norm, " (try a lower --lr or --grad-clip)");
}

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
    loss_sum += model_.forward(inputs_, targets_, settings_.micro_batch, settings_.seq_len);
    model_.backward(1.0f / static_cast<float>(micro_steps));
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
    sum += model_.forward(inputs_, targets_, settings_.micro_batch, settings_.seq_len);
  }
  return sum / micro_batches;
}

}  // namespace mt
