// The learning-rate schedule at chosen steps for each kind (warmup start and end, the first
// decay step, mid-decay, the last step, the end and beyond), without warmup, its kind names,
// its description and its validation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "runtime/error.h"            // defines: Error
#include "tests/test_helpers.h"       // defines: error_of, contains
#include "optim/lr_schedule.h"  // defines: LrSchedule, LrScheduleKind, parse_lr_schedule_kind

namespace mt {
namespace {

using testing::contains;
using testing::error_of;

// max 1.0, min 0.1, warmup over steps 0..9, decay over steps 10..109 (r = (step - 10) / 100).
LrSchedule schedule(LrScheduleKind kind) { return LrSchedule{kind, 1.0f, 10, 110, 0.1f}; }

TEST(LrSchedule, WarmupIsLinearFromOneStepToMaxForEveryKind) {
  for (LrScheduleKind kind : {LrScheduleKind::Cosine, LrScheduleKind::Linear, LrScheduleKind::Constant}) {
    const LrSchedule s = schedule(kind);
    EXPECT_FLOAT_EQ(s.at(0), 0.1f) << lr_schedule_kind_name(kind);
    EXPECT_FLOAT_EQ(s.at(4), 0.5f) << lr_schedule_kind_name(kind);
    EXPECT_EQ(s.at(9), 1.0f) << lr_schedule_kind_name(kind);
    EXPECT_EQ(s.at(10), 1.0f) << lr_schedule_kind_name(kind);  // r = 0: the first decay step is at max
  }
}

TEST(LrSchedule, CosineDecaysToMinAtTotalSteps) {
  const LrSchedule s = schedule(LrScheduleKind::Cosine);
  const auto cosine = [](double r) { return 0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * r)); };
  EXPECT_FLOAT_EQ(s.at(35), static_cast<float>(cosine(0.25)));  // 0.868198
  EXPECT_FLOAT_EQ(s.at(60), 0.55f);
  EXPECT_FLOAT_EQ(s.at(109), static_cast<float>(cosine(0.99)));
  EXPECT_GT(s.at(109), s.at(110));
  EXPECT_FLOAT_EQ(s.at(110), 0.1f);
  EXPECT_FLOAT_EQ(s.at(100000), 0.1f);
  EXPECT_FLOAT_EQ(s.min_lr(), 0.1f);
  for (int step = 10; step < 110; ++step) EXPECT_LE(s.at(step + 1), s.at(step)) << step;
}

TEST(LrSchedule, LinearDecaysToMinAtTotalSteps) {
  const LrSchedule s = schedule(LrScheduleKind::Linear);
  EXPECT_FLOAT_EQ(s.at(35), 0.775f);
  EXPECT_FLOAT_EQ(s.at(60), 0.55f);
  EXPECT_FLOAT_EQ(s.at(109), 0.109f);
  EXPECT_FLOAT_EQ(s.at(110), 0.1f);
  EXPECT_FLOAT_EQ(s.at(1000), 0.1f);
}

TEST(LrSchedule, ConstantStaysAtMaxAfterWarmup) {
  const LrSchedule s = schedule(LrScheduleKind::Constant);
  for (int step : {10, 35, 109, 110, 5000}) EXPECT_EQ(s.at(step), 1.0f) << step;
  EXPECT_EQ(s.min_lr(), 1.0f);
}

TEST(LrSchedule, WithoutWarmupStartsAtMax) {
  const LrSchedule cosine{LrScheduleKind::Cosine, 6e-4f, 0, 100, 0.0f};
  EXPECT_EQ(cosine.at(0), 6e-4f);
  EXPECT_FLOAT_EQ(cosine.at(50), 3e-4f);
  EXPECT_EQ(cosine.at(100), 0.0f);
  const LrSchedule linear{LrScheduleKind::Linear, 2.0f, 0, 4, 0.5f};
  EXPECT_EQ(linear.at(0), 2.0f);
  EXPECT_EQ(linear.at(1), 1.75f);
  EXPECT_EQ(linear.at(3), 1.25f);
  EXPECT_EQ(linear.at(4), 1.0f);
  // Warmup over every step: the schedule ends at max, then drops to min.
  const LrSchedule all_warmup{LrScheduleKind::Cosine, 1.0f, 4, 4, 0.25f};
  EXPECT_EQ(all_warmup.at(0), 0.25f);
  EXPECT_EQ(all_warmup.at(3), 1.0f);
  EXPECT_EQ(all_warmup.at(4), 0.25f);
}

TEST(LrSchedule, ParsesAndNamesTheKinds) {
  for (LrScheduleKind kind : {LrScheduleKind::Cosine, LrScheduleKind::Linear, LrScheduleKind::Constant}) {
    EXPECT_EQ(parse_lr_schedule_kind(lr_schedule_kind_name(kind)), kind);
  }
  EXPECT_EQ(parse_lr_schedule_kind("cosine"), LrScheduleKind::Cosine);
  const std::string e = error_of([] { parse_lr_schedule_kind("cos"); });
  EXPECT_TRUE(contains(e, "unknown learning-rate schedule 'cos'") && contains(e, "cosine, linear, constant")) << e;
  EXPECT_THROW(parse_lr_schedule_kind("Cosine"), Error);
}

TEST(LrSchedule, Describes) {
  EXPECT_EQ((LrSchedule{LrScheduleKind::Cosine, 6e-4f, 700, 19073, 0.1f}.describe()),
            "cosine: max_lr 0.0006, warmup 700 steps, decay to 6e-05 at step 19073");
  EXPECT_EQ((LrSchedule{LrScheduleKind::Constant, 1e-3f, 0, 50, 0.1f}.describe()),
            "constant: max_lr 0.001, warmup 0 steps, constant to step 50");
}

TEST(LrSchedule, RejectsBadSettings) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto error = [](LrSchedule s) { return error_of([&] { s.validate(); }); };
  EXPECT_TRUE(contains(error({LrScheduleKind::Cosine, 1.0f, 11, 10, 0.1f}),
                       "warmup_steps must be in [0, total_steps = 10], got 11"));
  EXPECT_TRUE(contains(error({LrScheduleKind::Cosine, 1.0f, -1, 10, 0.1f}), "warmup_steps"));
  EXPECT_TRUE(contains(error({LrScheduleKind::Linear, 1.0f, 0, 0, 0.1f}), "total_steps must be >= 1"));
  EXPECT_TRUE(contains(error({LrScheduleKind::Linear, -1.0f, 0, 10, 0.1f}), "max_lr"));
  EXPECT_TRUE(contains(error({LrScheduleKind::Linear, nan, 0, 10, 0.1f}), "max_lr"));
  EXPECT_TRUE(contains(error({LrScheduleKind::Cosine, 1.0f, 0, 10, 1.5f}), "min_lr_fraction"));
  EXPECT_TRUE(contains(error({LrScheduleKind::Cosine, 1.0f, 0, 10, nan}), "min_lr_fraction"));
  const LrSchedule bad{LrScheduleKind::Cosine, 1.0f, 20, 10, 0.1f};
  EXPECT_THROW(bad.at(0), Error);  // at() validates too
  EXPECT_TRUE(contains(error_of([] { schedule(LrScheduleKind::Cosine).at(-1); }), "step -1"));
}

}  // namespace
}  // namespace mt
