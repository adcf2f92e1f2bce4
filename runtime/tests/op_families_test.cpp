// The op families behind the one seam (runtime/backend.h): every op states a tolerance with its
// reason, and a bf16 output is never held tighter than an fp32 one; the families with fast CUDA
// kernels are exactly the names MESHTRAIN_CUDA_KERNELS accepts, and `all` turns on no other; each
// fast op belongs to a family that lists it, and runs on the CPU as its reference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/backend.h"             // defines: MT_CPU_UNIT_OPS, MT_FAST_OPS, FastKernelOf
#include "runtime/cuda_kernel_choice.h"  // defines: OpFamily, CudaKernels, fast_kernel_families, parse_cuda_kernels
#include "runtime/error.h"               // defines: EnvironmentError

namespace mt {
namespace {

struct Stated {
  std::string op;
  nn_math::Tolerance tolerance;
};

std::vector<Stated> every_op() {
  std::vector<Stated> ops;
#define MT_COLLECT(Op) ops.push_back({#Op, nn_math::tolerance_of<nn_math::Op>()});
  MT_CPU_UNIT_OPS(MT_COLLECT)
#undef MT_COLLECT
  return ops;
}

TEST(OpFamilies, EveryOpStatesItsToleranceWithAReason) {
  const std::vector<Stated> ops = every_op();
  EXPECT_GE(ops.size(), 30u);
  for (const Stated& s : ops) {
    EXPECT_GE(std::string(s.tolerance.why).size(), 20u) << s.op << ": say why";
    EXPECT_GE(s.tolerance.fp32, 0.0) << s.op;
    EXPECT_LT(s.tolerance.fp32, 1e-3) << s.op << ": an fp32 kernel that far from the reference is wrong";
    EXPECT_GE(s.tolerance.allowed(DType::BF16, 1024), s.tolerance.allowed(DType::F32, 1024)) << s.op;
  }
}

TEST(OpFamilies, SumOrderTolerancesGrowWithTheTerms) {
  const nn_math::Tolerance t = nn_math::tolerance_of<nn_math::CausalSoftmaxForward>();
  ASSERT_TRUE(t.per_sqrt_terms);
  EXPECT_DOUBLE_EQ(t.allowed(DType::F32, 4096), 4.0 * t.allowed(DType::F32, 256));
  EXPECT_DOUBLE_EQ(t.allowed(DType::F32, 1), t.allowed(DType::F32, 4));  // at least the allowance of 4 terms
  const nn_math::Tolerance unit = nn_math::tolerance_of<nn_math::GeluForward>();
  EXPECT_DOUBLE_EQ(unit.allowed(DType::F32, 1), unit.allowed(DType::F32, 1 << 20));
}

TEST(OpFamilies, TheSwitchNamesExactlyTheFamiliesWithFastKernels) {
  const CudaKernels fast = fast_kernel_families();
  EXPECT_EQ(CudaKernels::all(), fast);
#define MT_CHECK_FAST(Op, Family)                                                                 \
  EXPECT_TRUE(backend::FastKernelOf<nn_math::Op>::exists) << #Op;                                 \
  EXPECT_TRUE(fast.uses(OpFamily::Family)) << #Op;                                                \
  EXPECT_EQ(parse_cuda_kernels(op_family_name(OpFamily::Family)), CudaKernels::of({OpFamily::Family})) << #Op;
  MT_FAST_OPS(MT_CHECK_FAST)
#undef MT_CHECK_FAST
  EXPECT_FALSE(backend::FastKernelOf<nn_math::GeluForward>::exists);
  for (int i = 0; i < kOpFamilies; ++i) {
    const auto f = static_cast<OpFamily>(i);
    if (fast.uses(f)) continue;
    EXPECT_THROW(parse_cuda_kernels(op_family_name(f)), EnvironmentError) << op_family_name(f);
  }
}

}  // namespace
}  // namespace mt
