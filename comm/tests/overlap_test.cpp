// Proof that asynchronous operations progress while the caller computes: a large allreduce is
// launched, is not complete right after launch, and completes while this thread only computes
// (it never enters MPI or waits) - the communication thread drove it. Then both results are checked.
#include <gtest/gtest.h>

#include <chrono>

#include "comm/communicator.h"
#include "runtime/gemm.h"
#include "runtime/kernels.h"
#include "tests/test_env.h"

namespace mt {
namespace {

using testing::test_context;
using testing::test_world;

TEST(Overlap, AllreduceProgressesWhileTheCallerComputes) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const int n = world.size();
  const std::int64_t count = 16 << 20;  // 64 MiB of fp32
  Tensor grad = Tensor::empty({count}, DType::F32, ctx);
  kernels::fill(ctx, grad, world.rank() + 1);

  // The compute: repeated 128x128 GEMMs, each checked (all-ones inputs give k in every cell).
  Tensor a = Tensor::empty({128, 128}, DType::F32, ctx);
  Tensor c = Tensor::empty({128, 128}, DType::F32, ctx);
  kernels::fill(ctx, a, 1.0);

  const auto started = std::chrono::steady_clock::now();
  WorkPtr work = world.allreduce_async(grad, grad);
  const bool done_at_launch = work->test();
  int gemms = 0;
  bool completed_while_computing = false;
  const auto deadline = started + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    matmul(ctx, a, false, a, true, c);
    ++gemms;
    if (work->test()) {
      completed_while_computing = true;
      break;
    }
  }
  work->wait();
  if (n > 1) {
    EXPECT_FALSE(done_at_launch) << "a 64 MiB allreduce over " << n << " ranks finished during its own launch";
  }
  EXPECT_TRUE(completed_while_computing) << "the allreduce only finished once the caller waited";
  EXPECT_GT(gemms, 0);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Sum, c), 128.0 * 128 * 128);
  const double want = n * (n + 1) / 2.0;
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Min, grad), want);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Max, grad), want);
}

TEST(Overlap, SeveralBucketsInFlightWithCompute) {
  // Like a backward pass: a bucket's reduction starts, compute continues, the next bucket starts;
  // all are waited for at the end.
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const int n = world.size();
  std::vector<Tensor> buckets;
  std::vector<WorkPtr> works;
  Tensor a = Tensor::empty({64, 64}, DType::F32, ctx);
  Tensor c = Tensor::empty({64, 64}, DType::F32, ctx);
  kernels::fill(ctx, a, 0.5);
  for (int b = 0; b < 8; ++b) {
    matmul(ctx, a, false, a, false, c);
    buckets.push_back(Tensor::empty({(1 << 18) + b}, DType::F32, ctx));
    kernels::fill(ctx, buckets.back(), b + world.rank());
    works.push_back(world.allreduce_async(buckets.back(), buckets.back(), {ReduceOp::Avg}));
  }
  for (std::size_t b = 0; b < works.size(); ++b) {
    works[b]->wait();
    const double want = static_cast<double>(b) + (n - 1) / 2.0;
    EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Max, buckets[b]), want);
    EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Min, buckets[b]), want);
  }
}

}  // namespace
}  // namespace mt
