// The device layer's counters (runtime/device_counters.h) on the CPU: each op call is a launch, a
// reduction and a copy to or from host memory are host waits (an upload from pinned memory is not),
// host copies count their bytes, and an allocation counts only when it reaches malloc (a freed block
// of the size is reused).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "runtime/context.h"          // defines: DeviceContext, DeviceOptions
#include "runtime/device_counters.h"  // defines: DeviceCounters, device_counters
#include "runtime/gemm.h"             // defines: matmul
#include "runtime/kernels.h"          // defines: kernels::fill, kernels::reduce
#include "runtime/nn_kernels.h"       // defines: nn::gelu_forward
#include "runtime/pinned_buffer.h"    // defines: PinnedHostBuffer
#include "runtime/tensor.h"           // defines: Tensor
#include "tests/test_helpers.h"        // defines: error_of, contains

namespace mt {
namespace {

using testing::contains;
using testing::error_of;

// What `work` added to the counters.
template <class F>
DeviceCounters counted(F&& work) {
  const DeviceCounters before = device_counters();
  work();
  return device_counters() - before;
}

TEST(DeviceCounters, OpCallsAreLaunchesAndReductionsWait) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 2});
  Tensor x = Tensor::empty({64, 32}, DType::F32, ctx);
  Tensor y = Tensor::empty({64, 32}, DType::F32, ctx);
  Tensor w = Tensor::empty({32, 32}, DType::F32, ctx);
  EXPECT_EQ(counted([&] { kernels::fill(ctx, x, 0.5); }), (DeviceCounters{0, 0, 1, 0}));
  EXPECT_EQ(counted([&] { nn::gelu_forward(ctx, x, y); }), (DeviceCounters{0, 0, 1, 0}));
  kernels::fill(ctx, w, 0.25);
  EXPECT_EQ(counted([&] { matmul(ctx, x, false, w, false, y); }), (DeviceCounters{0, 0, 1, 0}));
  double sum = 0;
  EXPECT_EQ(counted([&] { sum = kernels::reduce(ctx, ReduceKind::Sum, y); }), (DeviceCounters{0, 1, 1, 0}));
  EXPECT_DOUBLE_EQ(sum, 64 * 32 * 32 * 0.5 * 0.25);
  EXPECT_EQ(counted([&] { ctx.synchronize(); }), (DeviceCounters{0, 1, 0, 0}));
}

TEST(DeviceCounters, HostCopiesCountTheirBytesAndAWait) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  const std::vector<float> host(1000, 2.0f);
  Tensor t;
  const DeviceCounters up = counted([&] { t = Tensor::from_host(host, {1000}, ctx); });
  EXPECT_EQ(up.copy_bytes, 4000u);
  EXPECT_EQ(up.host_syncs, 1u);
  std::vector<float> back;
  const DeviceCounters down = counted([&] { back = t.to_host<float>(); });
  EXPECT_EQ(down.copy_bytes, 4000u);
  EXPECT_EQ(down.host_syncs, 1u) << "one wait: the device drains, then the copy";
  EXPECT_EQ(back, host);
  Tensor u = Tensor::empty({1000}, DType::F32, ctx);
  EXPECT_EQ(counted([&] { u.copy_from(t, ctx.stream()); }), DeviceCounters{}) << "device to device: no host memory";
}

TEST(DeviceCounters, AnUploadFromPinnedMemoryCopiesWithoutAWait) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  PinnedHostBuffer pinned(3 * sizeof(float), ctx.device());
  const float values[3] = {1.5f, -2.0f, 4.0f};
  std::memcpy(pinned.data(), values, sizeof values);
  Tensor t = Tensor::empty({2}, DType::F32, ctx);
  EXPECT_EQ(counted([&] { t.upload(pinned, sizeof(float), ctx.stream()); }), (DeviceCounters{0, 0, 0, 8}));
  EXPECT_EQ(t.to_host<float>(), (std::vector<float>{-2.0f, 4.0f}));
  EXPECT_TRUE(contains(error_of([&] { t.upload(pinned, 2 * sizeof(float), ctx.stream()); }), "of a 12-byte host buffer"));
}

TEST(DeviceCounters, AMeanAccumulatesOnTheDeviceWithoutAWait) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 2});
  std::vector<float> values(10000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.001f * static_cast<float>(i % 97) - 0.03f;
  const Tensor x = Tensor::from_host(values, {10000}, ctx);
  Tensor acc = Tensor::zeros({1}, DType::F32, ctx);
  Tensor sums = Tensor::empty({kernels::mean_workspace(x.numel())}, DType::F32, ctx);
  EXPECT_EQ(counted([&] { kernels::accumulate_mean(ctx, x, acc, sums); }), (DeviceCounters{0, 0, 2, 0}))
      << "two launches, and no allocation nor wait";
  const auto mean = static_cast<float>(kernels::reduce(ctx, ReduceKind::Sum, x) / 10000.0);
  EXPECT_EQ(acc.to_host<float>()[0], mean) << "into zero: exactly the mean reduce() gives";
  kernels::accumulate_mean(ctx, x, acc, sums);
  EXPECT_EQ(acc.to_host<float>()[0], static_cast<float>(static_cast<double>(mean) + static_cast<double>(mean)));
}

TEST(DeviceCounters, OnlyAllocationsThatReachMallocCount) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  EXPECT_EQ(counted([&] { Tensor a = Tensor::empty({12345}, DType::F32, ctx); }).allocations, 1u);
  EXPECT_EQ(counted([&] { Tensor a = Tensor::empty({12345}, DType::F32, ctx); }).allocations, 0u) << "reused";
  EXPECT_EQ(counted([&] {
              Tensor a = Tensor::empty({12345}, DType::F32, ctx);
              Tensor b = Tensor::empty({12345}, DType::F32, ctx);
            }).allocations,
            1u);
}

}  // namespace
}  // namespace mt
