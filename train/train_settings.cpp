#include "train/train_settings.h"

#include <cmath>

namespace mt {

void TrainSettings::validate() const {
  MT_REQUIRE(seq_len >= 1, "--seq-len must be at least 1, got ", seq_len);
  MT_REQUIRE(steps >= 1, "--steps must be at least 1, got ", steps);
  MT_REQUIRE(grad_clip >= 0.0f && std::isfinite(grad_clip), "--grad-clip must be >= 0, got ", grad_clip);
  MT_REQUIRE(eval_every >= 0, "--eval-every must be >= 0, got ", eval_every);
  MT_REQUIRE(eval_batches >= 1, "--eval-batches must be at least 1, got ", eval_batches);
  schedule.validate();
  mt::validate(adamw);
}

void TrainSettings::record_throughput(StepRecord& r, double seconds, const GptConfig& config, std::int64_t step_tokens,
                                      int ranks) const {
  const auto tokens = static_cast<double>(step_tokens);
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

}  // namespace mt
