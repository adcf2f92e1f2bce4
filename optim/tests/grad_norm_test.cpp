// sum_of_squares: exact on values whose squares add exactly (fp32 and bf16 together), weighted per
// tensor, close to a long-double sum on large random gradients, the same bits with 1 and 3 threads,
// NaN/inf passed through; on a GPU (skipped without one) the CPU's bits, twice; clip_scale at and
// around max_norm, clipping off, and non-finite norms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "runtime/context.h"        // defines: DeviceContext, DeviceOptions
#include "runtime/error.h"
#include "runtime/tensor.h"         // defines: Tensor
#include "tests/gpu_skip.h"         // defines: MT_SKIP_WITHOUT_GPU
#include "tests/test_helpers.h"     // defines: error_of, contains
#include "optim/grad_norm.h"  // defines: sum_of_squares, clip_scale

namespace mt {
namespace {

using testing::contains;
using testing::error_of;
using i64 = std::int64_t;

DeviceOptions cpu_options(int threads = 2) { return DeviceOptions{Device::cpu(), 0, threads}; }

TEST(SumOfSquares, ExactOnSmallValuesOfMixedDtypes) {
  DeviceContext ctx(cpu_options());
  const std::vector<Tensor> grads = {
      Tensor::from_host(std::vector<float>{1.0f, -2.0f, 3.0f}, {3}, ctx),
      Tensor::from_host(std::vector<float>{4.0f}, {1, 1}, ctx),
      Tensor::from_host(std::vector<bf16>{bf16::from_float(0.5f), bf16::from_float(-1.5f)}, {2}, ctx),
      Tensor::zeros({0}, DType::F32, ctx),
  };
  EXPECT_EQ(sum_of_squares(ctx, grads), 32.5);
  EXPECT_EQ(sum_of_squares(ctx, {}), 0.0);
}

TEST(SumOfSquares, MatchesALongDoubleSumAndNeverDependsOnTheThreadCount) {
  // Sizes around the reduction chunk (4096) and one of many chunks.
  const std::vector<i64> sizes = {1, 4095, 4096, 4097, 250000};
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<std::vector<float>> values;
  long double want = 0;
  for (i64 n : sizes) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) {
      x = dist(rng);
      want += static_cast<long double>(x) * x;
    }
    values.push_back(std::move(v));
  }
  std::vector<double> got;
  for (int threads : {1, 3}) {
    DeviceContext ctx(cpu_options(threads));
    std::vector<Tensor> grads;
    for (const auto& v : values) grads.push_back(Tensor::from_host(v, {static_cast<i64>(v.size())}, ctx));
    got.push_back(sum_of_squares(ctx, grads));
    EXPECT_EQ(sum_of_squares(ctx, grads), got.back()) << "second call, " << threads << " threads";
  }
  EXPECT_EQ(got[0], got[1]);  // bit for bit
  // fp32 sums: each block's 8 lanes add 512 positive squares, whose rounding errors walk to about
  // sqrt(512) 2^-24 = 1.3e-6 of the sum; 1e-5 allows 8 times that, and a block left out (4096 of
  // 258193 elements: 1.6%) or counted twice fails by far.
  EXPECT_NEAR(got[0], static_cast<double>(want), 1e-5 * static_cast<double>(want));
}

TEST(SumOfSquares, WeighsEachTensor) {
  DeviceContext ctx(cpu_options());
  const std::vector<Tensor> grads = {
      Tensor::from_host(std::vector<float>{1.0f, 2.0f}, {2}, ctx),        // 5
      Tensor::from_host(std::vector<float>{3.0f}, {1}, ctx),              // 9
      Tensor::from_host(std::vector<float>(5000, 1.0f), {5000}, ctx),    // 5000, two blocks
  };
  const std::vector<float> weights{1.0f, 0.0f, 0.5f};
  EXPECT_EQ(sum_of_squares(ctx, grads, weights), 5.0 + 2500.0);
  EXPECT_EQ(sum_of_squares(ctx, grads), 5.0 + 9.0 + 5000.0);
  EXPECT_TRUE(contains(error_of([&] { sum_of_squares(ctx, grads, std::vector<float>{1.0f}); }), "1 weights for 3"));
}

// CUDA runs the same units (the squares rounded on their own, no FMA) and the same tree: the CPU's
// bits, and its own again on a second run.
TEST(SumOfSquares, AGpuGivesTheCpuBits) {
  MT_SKIP_WITHOUT_GPU();
  std::mt19937 rng(8);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> a(300000), b(4097);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  const std::vector<float> weights{1.0f, 0.5f};
  DeviceContext cpu(cpu_options());
  const std::vector<Tensor> on_cpu = {Tensor::from_host(a, {300000}, cpu), Tensor::from_host(b, {4097}, cpu)};
  DeviceContext gpu(DeviceOptions{Device::cuda(0), 0, 1});
  const std::vector<Tensor> on_gpu = {Tensor::from_host(a, {300000}, gpu), Tensor::from_host(b, {4097}, gpu)};
  const double want = sum_of_squares(cpu, on_cpu, weights);
  EXPECT_EQ(sum_of_squares(gpu, on_gpu, weights), want);
  EXPECT_EQ(sum_of_squares(gpu, on_gpu, weights), want) << "second run";
}

TEST(SumOfSquares, PassesNanAndInfThrough) {
  DeviceContext ctx(cpu_options());
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor ok = Tensor::from_host(std::vector<float>{1.0f, 2.0f}, {2}, ctx);
  const std::vector<Tensor> with_nan = {ok, Tensor::from_host(std::vector<float>{0.0f, nan}, {2}, ctx)};
  const std::vector<Tensor> with_inf = {Tensor::from_host(std::vector<float>{-inf}, {1}, ctx), ok};
  const double s_nan = sum_of_squares(ctx, with_nan), s_inf = sum_of_squares(ctx, with_inf);
  EXPECT_TRUE(std::isnan(s_nan));
  EXPECT_TRUE(std::isinf(s_inf));
  EXPECT_TRUE(std::isnan(clip_scale(std::sqrt(s_nan), 1.0)));
  EXPECT_TRUE(std::isnan(clip_scale(std::sqrt(s_inf), 0.0)));  // even with clipping off
}

TEST(SumOfSquares, RejectsUndefinedTensors) {
  DeviceContext ctx(cpu_options());
  const std::vector<Tensor> grads = {Tensor()};
  EXPECT_TRUE(contains(error_of([&] { sum_of_squares(ctx, grads); }), "undefined tensor"));
}

TEST(ClipScale, ScalesOnlyAboveMaxNorm) {
  EXPECT_EQ(clip_scale(3.0, 5.0), 1.0);
  EXPECT_EQ(clip_scale(5.0, 5.0), 1.0);
  EXPECT_EQ(clip_scale(10.0, 5.0), 0.5);
  EXPECT_DOUBLE_EQ(clip_scale(3.0, 1.0), 1.0 / 3.0);
  EXPECT_EQ(clip_scale(0.0, 1.0), 1.0);
  // max_norm <= 0 turns clipping off.
  EXPECT_EQ(clip_scale(1e9, 0.0), 1.0);
  EXPECT_EQ(clip_scale(1e9, -1.0), 1.0);
  EXPECT_EQ(clip_scale(1e9, std::numeric_limits<double>::infinity()), 1.0);
}

TEST(ClipScale, NonFiniteOrNegativeNormGivesNan) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(std::isnan(clip_scale(nan, 1.0)));
  EXPECT_TRUE(std::isnan(clip_scale(inf, 1.0)));
  EXPECT_TRUE(std::isnan(clip_scale(inf, 0.0)));
  EXPECT_TRUE(std::isnan(clip_scale(-1.0, 1.0)));
  EXPECT_TRUE(contains(error_of([&] { clip_scale(1.0, nan); }), "max_norm is NaN"));
}

}  // namespace
}  // namespace mt
