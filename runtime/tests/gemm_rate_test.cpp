// The GEMM rate MFU is taken against: the best of timed trials within a time budget (injected
// timings), and a real measurement that stays short.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <vector>

#include "runtime/context.h"     // defines: DeviceContext, DeviceOptions
#include "runtime/gemm_rate.h"   // defines: best_rate, measure_gemm_flops

namespace mt {
namespace {

// A trial function replaying `seconds`, counting the calls.
struct Replay {
  std::vector<double> seconds;
  std::size_t calls = 0;
  double operator()() { return seconds.at(calls++ % seconds.size()); }
};

TEST(BestRate, TakesTheFastestTrialNotTheMean) {
  // A load burst slowed the first and last trials: the mean would say 3 / 0.9 = 3.3 GFLOP/s.
  Replay replay{{0.5, 0.1, 0.3}};
  EXPECT_DOUBLE_EQ(best_rate(1e9, std::ref(replay), 3, 10.0), 1e10);
  EXPECT_EQ(replay.calls, 3u);
}

TEST(BestRate, StopsAtTheBudgetAfterTheMinimumAndAtTheMaximum) {
  Replay steady{{0.1}};
  best_rate(1e9, std::ref(steady), 10, 0.25);
  EXPECT_EQ(steady.calls, 3u);  // 0.1 + 0.1 + 0.1 >= 0.25
  Replay slow{{1.0}};
  EXPECT_DOUBLE_EQ(best_rate(1e9, std::ref(slow), 10, 0.25), 1e9);
  EXPECT_EQ(slow.calls, 2u);  // at least two, however slow
  Replay fast{{1e-3}};
  best_rate(1e9, std::ref(fast), 8, 1.0);
  EXPECT_EQ(fast.calls, 8u);
}

TEST(BestRate, TrialsBelowTheClocksResolutionAreSkipped) {
  Replay some{{0.0, 0.2}};
  EXPECT_DOUBLE_EQ(best_rate(1e9, std::ref(some), 2, 10.0), 5e9);
  Replay none{{0.0}};
  EXPECT_EQ(best_rate(1e9, std::ref(none), 4, 10.0), 0.0);
}

TEST(MeasureGemmFlops, MeasuresARateQuickly) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  const auto start = std::chrono::steady_clock::now();
  const double rate = measure_gemm_flops(ctx, 256, 0.05);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(std::isfinite(rate) && rate > 0) << rate;
  EXPECT_LT(seconds, 2.0);
}

}  // namespace
}  // namespace mt
