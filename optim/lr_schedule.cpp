#include "optim/lr_schedule.h"

#include <cmath>
#include <numbers>
#include <sstream>

#include "runtime/error.h"  // defines: MT_REQUIRE, MT_FAIL_AS

namespace mt {

LrScheduleKind parse_lr_schedule_kind(std::string_view name) {
  for (LrScheduleKind k : {LrScheduleKind::Cosine, LrScheduleKind::Linear, LrScheduleKind::Constant}) {
    if (name == lr_schedule_kind_name(k)) return k;
  }
  MT_FAIL_AS(UsageError, "unknown learning-rate schedule '", name, "' (known: cosine, linear, constant)");
}

const char* lr_schedule_kind_name(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::Cosine: return "cosine";
    case LrScheduleKind::Linear: return "linear";
    case LrScheduleKind::Constant: return "constant";
  }
  return "unknown";
}

void LrSchedule::validate() const {
  MT_REQUIRE(std::isfinite(max_lr) && max_lr >= 0.0f, "learning rate max_lr must be finite and >= 0, got ", max_lr);
  MT_REQUIRE(total_steps >= 1, "learning-rate schedule total_steps must be >= 1, got ", total_steps);
  MT_REQUIRE(warmup_steps >= 0 && warmup_steps <= total_steps, "learning-rate warmup_steps must be in [0, total_steps = ",
           total_steps, "], got ", warmup_steps);
  MT_REQUIRE(min_lr_fraction >= 0.0f && min_lr_fraction <= 1.0f, "learning-rate min_lr_fraction must be in [0, 1], got ",
           min_lr_fraction);
}

float LrSchedule::min_lr() const {
  if (kind == LrScheduleKind::Constant) return max_lr;
  return static_cast<float>(static_cast<double>(max_lr) * static_cast<double>(min_lr_fraction));
}

float LrSchedule::at(int step) const {
  validate();
  MT_REQUIRE(step >= 0, "learning rate asked for step ", step, " (steps count from 0)");
  const double max = max_lr;
  if (step < warmup_steps) return static_cast<float>(max * (static_cast<double>(step) + 1.0) / warmup_steps);
  if (kind == LrScheduleKind::Constant) return max_lr;
  const double min = static_cast<double>(min_lr());
  if (step >= total_steps) return static_cast<float>(min);
  const double r = static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  if (kind == LrScheduleKind::Cosine) {
    return static_cast<float>(min + (max - min) * 0.5 * (1.0 + std::cos(std::numbers::pi * r)));
  }
  return static_cast<float>(max - (max - min) * r);
}

std::string LrSchedule::describe() const {
  std::ostringstream out;
  out << lr_schedule_kind_name(kind) << ": max_lr " << max_lr << ", warmup " << warmup_steps << " steps";
  if (kind == LrScheduleKind::Constant) {
    out << ", constant to step " << total_steps;
  } else {
    out << ", decay to " << min_lr() << " at step " << total_steps;
  }
  return out.str();
}

}  // namespace mt
