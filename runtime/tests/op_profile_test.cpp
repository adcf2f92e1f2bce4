// The per-op profile (runtime/op_profile.h) on the CPU: off, it records nothing; on, each op call is
// timed under its name (an op family's struct, a GEMM by its shape), only the outermost of nested
// ops counts, a failed op leaves no timing behind, and the device counters read the same either way.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/context.h"          // defines: DeviceContext, DeviceOptions
#include "runtime/device_counters.h"  // defines: DeviceCounters, device_counters
#include "runtime/gemm.h"             // defines: matmul
#include "runtime/kernels.h"          // defines: kernels::fill
#include "runtime/nn_kernels.h"       // defines: nn::gelu_forward
#include "runtime/op_profile.h"       // defines: OpScope, OpTiming, set_op_profiling, op_timings, reset_op_timings, op_type_name
#include "runtime/tensor.h"           // defines: Tensor

namespace mt {
namespace {

// Profiling on for one test, off and cleared after it whatever happens.
class OpProfile : public ::testing::Test {
 protected:
  void SetUp() override { reset_op_timings(); }
  void TearDown() override {
    set_op_profiling(false);
    reset_op_timings();
  }
  static const OpTiming* find(const std::vector<OpTiming>& ops, const std::string& name) {
    auto it = std::find_if(ops.begin(), ops.end(), [&](const OpTiming& op) { return op.name == name; });
    return it == ops.end() ? nullptr : &*it;
  }
};

void some_ops(DeviceContext& ctx, Tensor& x, Tensor& y, Tensor& w) {
  kernels::fill(ctx, x, 0.5);
  kernels::fill(ctx, w, 0.25);
  nn::gelu_forward(ctx, x, y);
  matmul(ctx, x, false, w, true, y);
}

TEST_F(OpProfile, OffRecordsNothing) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  Tensor x = Tensor::empty({64, 32}, DType::F32, ctx), y = Tensor::empty({64, 32}, DType::F32, ctx);
  Tensor w = Tensor::empty({32, 32}, DType::F32, ctx);
  some_ops(ctx, x, y, w);
  EXPECT_TRUE(op_timings().empty());
}

TEST_F(OpProfile, TimesEachOpUnderItsNameAndCountsTheSame) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  Tensor x = Tensor::empty({64, 32}, DType::F32, ctx), y = Tensor::empty({64, 32}, DType::F32, ctx);
  Tensor w = Tensor::empty({32, 32}, DType::F32, ctx);
  DeviceCounters before = device_counters();
  some_ops(ctx, x, y, w);
  const DeviceCounters off = device_counters() - before;
  set_op_profiling(true);
  before = device_counters();
  some_ops(ctx, x, y, w);
  some_ops(ctx, x, y, w);
  const DeviceCounters on = device_counters() - before;
  set_op_profiling(false);
  EXPECT_EQ(on.launches, 2 * off.launches);
  EXPECT_EQ(on.host_syncs, 2 * off.host_syncs) << "the profile's drains are not counted host waits";
  EXPECT_EQ(on.allocations, 2 * off.allocations);

  const std::vector<OpTiming> ops = op_timings();
  ASSERT_EQ(ops.size(), 3u);
  const OpTiming* fill = find(ops, "fill");
  const OpTiming* gelu = find(ops, "GeluForward");
  const OpTiming* gemm = find(ops, "gemm fp32 NT 64x32x32");
  ASSERT_NE(fill, nullptr);
  ASSERT_NE(gelu, nullptr);
  ASSERT_NE(gemm, nullptr) << ops[0].name << ", " << ops[1].name << ", " << ops[2].name;
  EXPECT_EQ(fill->calls, 4u);
  EXPECT_EQ(gelu->calls, 2u);
  EXPECT_EQ(gemm->calls, 2u);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    EXPECT_GE(ops[i].seconds, 0.0);
    if (i > 0) {
      EXPECT_GE(ops[i - 1].seconds, ops[i].seconds) << "most time first";
    }
  }
  reset_op_timings();
  EXPECT_TRUE(op_timings().empty());
}

TEST_F(OpProfile, OnlyTheOutermostOfNestedOpsIsTimed) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  Tensor x = Tensor::empty({256}, DType::F32, ctx);
  set_op_profiling(true);
  const DeviceCounters before = device_counters();
  {
    const OpScope outer(ctx, "outer");
    kernels::fill(ctx, x, 1.0);
    kernels::fill(ctx, x, 2.0);
  }
  kernels::fill(ctx, x, 3.0);
  EXPECT_EQ((device_counters() - before).launches, 4u) << "every op still counts as a launch";
  const std::vector<OpTiming> ops = op_timings();
  ASSERT_EQ(ops.size(), 2u);
  ASSERT_NE(find(ops, "outer"), nullptr);
  ASSERT_NE(find(ops, "fill"), nullptr);
  EXPECT_EQ(find(ops, "outer")->calls, 1u);
  EXPECT_EQ(find(ops, "fill")->calls, 1u) << "the fills inside 'outer' are its time, not their own";
}

TEST_F(OpProfile, AFailedOpLeavesNoTiming) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  Tensor a = Tensor::empty({4}, DType::F32, ctx), b = Tensor::empty({5}, DType::F32, ctx);
  set_op_profiling(true);
  EXPECT_ANY_THROW(kernels::cast(ctx, a, b));  // 4 elements into 5: refused inside its scope
  EXPECT_TRUE(op_timings().empty());
  kernels::fill(ctx, a, 0.0);  // the failed scope left the thread's nesting as it was
  ASSERT_EQ(op_timings().size(), 1u);
  EXPECT_EQ(op_timings()[0].name, "fill");
}

struct SomeOpStruct {};

TEST(OpTypeName, DropsNamespacesAndTemplateArguments) {
  EXPECT_EQ(op_type_name(typeid(SomeOpStruct).name()), "SomeOpStruct");
  EXPECT_EQ(op_type_name(typeid(std::vector<int>).name()), "vector");
  EXPECT_EQ(op_type_name("not a mangled name"), "not a mangled name");
}

}  // namespace
}  // namespace mt
