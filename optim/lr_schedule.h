// The learning rate as a function of the step: linear warmup, then a cosine or linear decay to
// max_lr * min_lr_fraction at total_steps, or constant.
//
//   step < warmup_steps:           max_lr * (step + 1) / warmup_steps
//   warmup_steps <= step < total:  r = (step - warmup_steps) / (total_steps - warmup_steps), in [0, 1)
//                                  cosine:   min + (max - min) * (1 + cos(pi r)) / 2
//                                  linear:   max - (max - min) * r
//                                  constant: max
//   step >= total_steps:           min (constant: max)
//
// Steps are 0-based (step 0 is the first update), as in llm.c's train_gpt2: the last step,
// total_steps - 1, is one decay increment above min.
// defines: LrScheduleKind, LrSchedule, parse_lr_schedule_kind, lr_schedule_kind_name
#pragma once

#include <string>
#include <string_view>

namespace mt {

enum class LrScheduleKind { Cosine, Linear, Constant };

// "cosine", "linear", "constant"; anything else throws Error listing those.
LrScheduleKind parse_lr_schedule_kind(std::string_view name);
const char* lr_schedule_kind_name(LrScheduleKind kind);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Cosine;
  float max_lr = 6e-4f;
  int warmup_steps = 0;
  int total_steps = 1;
  float min_lr_fraction = 0.1f;  // final lr = max_lr * min_lr_fraction (cosine and linear)

  // Throws Error unless max_lr is finite and >= 0, total_steps >= 1, 0 <= warmup_steps <=
  // total_steps and min_lr_fraction is in [0, 1].
  void validate() const;
  // The learning rate of the 0-based step (validates first; a negative step throws).
  float at(int step) const;
  float min_lr() const;
  // "cosine: max_lr 0.0006, warmup 700 steps, decay to 6e-05 at step 19073"
  std::string describe() const;
};

}  // namespace mt
