// The attention family (runtime/attention.h): the batched-GEMM implementation against the
// Reference one, in fp32 and bf16, for multi-head attention and for a tensor-parallel slice of
// grouped-query heads (a local kv head no local q head reads gets zero gradients); its bits at any
// CPU thread count; the choice of implementation; and, where a GPU is usable, the same
// implementation on the GPU against the CPU and against itself (the same bits twice).
//
// Tolerances, relative to the largest magnitude of the reference's result (plus the same of each
// element):
//   fp32  2e-5: the same math, the dot products summed in the GEMM's order instead of position order.
//   bf16  2e-2: the probabilities and the score gradients are rounded to bf16 before the GEMMs read
//         them (Reference keeps them in fp32); a bf16 rounding is 2^-9 relative, and each output sums
//         such terms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/attention.h"  // defines: nn::attention_forward, nn::attention_backward, nn::attention_saved, nn::attention_kernel_for
#include "runtime/context.h"    // defines: DeviceContext, DeviceOptions
#include "runtime/error.h"      // defines: Error
#include "runtime/kernels.h"    // defines: kernels::fill
#include "runtime/ops/attention.h"  // defines: nn_math::kBatchedGemmTolerance
#include "runtime/tensor.h"     // defines: Tensor
#include "tests/gpu_skip.h"     // defines: MT_SKIP_WITHOUT_GPU
#include "tests/test_helpers.h"  // defines: expect_near
#include "tests/dtype_values.h"

namespace mt {
namespace {

using testing::widened;

using testing::expect_near;

using i64 = std::int64_t;
using nn::AttentionHeads;
using nn::AttentionKernel;

DeviceOptions cpu_options(int threads) { return DeviceOptions{Device::cpu(), 0, threads}; }
DeviceOptions gpu_options() { return DeviceOptions{Device::cuda(0), 0, 1}; }

struct Case {
  std::string name;
  i64 B, T, head_size;
  AttentionHeads heads;
  i64 width() const { return (heads.q_heads + 2 * heads.kv_heads) * head_size; }
  i64 out_width() const { return heads.q_heads * head_size; }
};

// gpt2-like multi-head; llama-like groups of 3 q heads per kv head (each GEMM spans the kv heads,
// dK and dV summed over three batches); a llama-like tensor-parallel rank holding q heads 2-5 of 8
// (groups of 2) and all 4 kv heads, of which it reads kv heads 1 and 2 only (a GEMM per kv head);
// a sequence long enough for the causal row blocks.
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"multi_head", 2, 37, 16, {3, 3, 0, 1, 0}},
      {"grouped", 2, 33, 8, {6, 2, 0, 3, 0}},
      {"long_causal_blocks", 1, 300, 8, {2, 1, 0, 2, 0}},  // rows in blocks of 128, 128 and 44
      {"grouped_slice", 2, 29, 8, {4, 4, 2, 2, 0}},
  };
  return all;
}

// The outputs of one forward and backward, widened to float.
struct Result {
  std::vector<float> out, saved, dqkv;
};

Tensor input(DeviceContext& ctx, std::mt19937& rng, Shape shape, DType dtype, float range) {
  std::uniform_real_distribution<float> dist(-range, range);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (float& x : v) x = dist(rng);
  const Tensor f = Tensor::from_host(v, shape, ctx);
  if (dtype == DType::F32) return f;
  std::vector<bf16> b;
  for (float x : v) b.push_back(bf16::from_float(x));
  return Tensor::from_host(b, shape, ctx);
}

Result run_attention(const DeviceOptions& options, AttentionKernel kernel, const Case& c, DType dtype) {
  DeviceContext ctx(options);
  std::mt19937 rng(11);
  const Tensor qkv = input(ctx, rng, {c.B, c.T, c.width()}, dtype, 1.5f);
  const Tensor dout = input(ctx, rng, {c.B, c.T, c.out_width()}, dtype, 1.0f);
  Tensor out = Tensor::empty({c.B, c.T, c.out_width()}, dtype, ctx);
  Tensor saved = nn::attention_saved(ctx, kernel, c.B, c.T, c.heads, dtype);
  nn::attention_forward(ctx, kernel, qkv, c.heads, out, saved);
  Tensor dqkv = Tensor::empty({c.B, c.T, c.width()}, dtype, ctx);
  kernels::fill(ctx, dqkv, 777.0);  // overwritten, never accumulated into
  nn::attention_backward(ctx, kernel, dout, qkv, saved, c.heads, dqkv);
  return {widened(out), widened(saved), widened(dqkv)};
}

// The implementation's tolerance, stated with its reasons beside the math (runtime/ops/attention.h).
double tolerance(DType dtype) { return nn_math::kBatchedGemmTolerance.allowed(dtype); }

void expect_results_near(const Result& got, const Result& want, DType dtype, const std::string& what) {
  const double tol = tolerance(dtype);
  expect_near(got.out, want.out, tol, what + " output");
  expect_near(got.saved, want.saved, tol, what + " probabilities");
  expect_near(got.dqkv, want.dqkv, tol, what + " dqkv");
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class AttentionKernels : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionKernels, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

TEST_P(AttentionKernels, BatchedGemmAgreesWithTheReferenceOnTheCpu) {
  for (const Case& c : cases()) {
    const Result ref = run_attention(cpu_options(2), AttentionKernel::Reference, c, GetParam());
    const Result gemm = run_attention(cpu_options(2), AttentionKernel::BatchedGemm, c, GetParam());
    expect_results_near(gemm, ref, GetParam(), c.name);
  }
}

// The grouped slice's kv head 0 and 3 are read by no local q head: their gradients are zero, and
// the probabilities above the diagonal are zero.
TEST_P(AttentionKernels, UnreadKvHeadsGetZeroGradientsAndTheMaskHolds) {
  const Case& c = cases()[3];
  const Result r = run_attention(cpu_options(2), AttentionKernel::BatchedGemm, c, GetParam());
  const i64 row = c.width(), hs = c.head_size, H = c.heads.q_heads, KV = c.heads.kv_heads;
  for (i64 n = 0; n < c.B * c.T; ++n)
    for (i64 kv : {i64{0}, i64{3}})
      for (i64 i = 0; i < hs; ++i) {
        ASSERT_EQ(r.dqkv[static_cast<std::size_t>(n * row + (H + kv) * hs + i)], 0.0f) << "dk of kv head " << kv;
        ASSERT_EQ(r.dqkv[static_cast<std::size_t>(n * row + (H + KV + kv) * hs + i)], 0.0f) << "dv of kv head " << kv;
      }
  for (i64 r0 = 0; r0 < c.B * H * c.T; ++r0)
    for (i64 t2 = r0 % c.T + 1; t2 < c.T; ++t2) ASSERT_EQ(r.saved[static_cast<std::size_t>(r0 * c.T + t2)], 0.0f);
}

TEST_P(AttentionKernels, BatchedGemmIsBitwiseTheSameAtAnyThreadCount) {
  for (const Case& c : cases()) {
    const Result first = run_attention(cpu_options(1), AttentionKernel::BatchedGemm, c, GetParam());
    for (int threads : {2, 3, 7}) {
      const Result r = run_attention(cpu_options(threads), AttentionKernel::BatchedGemm, c, GetParam());
      EXPECT_TRUE(same_bits(r.out, first.out) && same_bits(r.saved, first.saved) && same_bits(r.dqkv, first.dqkv))
          << c.name << " at " << threads << " threads";
    }
  }
}

// On a GPU: the batched-GEMM implementation against the CPU's, and against the Reference on the
// same GPU, within the tolerances above; twice on the GPU, the same bits.
TEST_P(AttentionKernels, BatchedGemmOnTheGpuAgreesAndRepeats) {
  MT_SKIP_WITHOUT_GPU();
  for (const Case& c : cases()) {
    const Result gpu = run_attention(gpu_options(), AttentionKernel::BatchedGemm, c, GetParam());
    expect_results_near(gpu, run_attention(cpu_options(2), AttentionKernel::BatchedGemm, c, GetParam()), GetParam(),
                        c.name + " GPU vs CPU");
    expect_results_near(gpu, run_attention(gpu_options(), AttentionKernel::Reference, c, GetParam()), GetParam(),
                        c.name + " GPU gemm vs GPU reference");
    const Result again = run_attention(gpu_options(), AttentionKernel::BatchedGemm, c, GetParam());
    EXPECT_TRUE(same_bits(again.out, gpu.out) && same_bits(again.saved, gpu.saved) && same_bits(again.dqkv, gpu.dqkv))
        << c.name << ": a second run on the GPU";
  }
}

// What the memory model counts is what the layer allocates.
TEST(AttentionSaved, BytesAreTheTensorsTheLayerAllocates) {
  DeviceContext ctx(cpu_options(1));
  const AttentionHeads heads{4, 2, 0, 2, 0};
  for (AttentionKernel k : {AttentionKernel::Reference, AttentionKernel::BatchedGemm})
    for (DType d : {DType::F32, DType::BF16}) {
      const Tensor saved = nn::attention_saved(ctx, k, 3, 16, heads, d);
      EXPECT_EQ(static_cast<double>(saved.nbytes()),
                nn::attention_saved_bytes(k, 3, heads.q_heads, 16, static_cast<int>(dtype_size(d))))
          << nn::attention_kernel_name(k) << " " << dtype_name(d);
    }
}

class AttentionChoice : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("MESHTRAIN_ATTENTION"); }
};

TEST_F(AttentionChoice, DefaultsPerDeviceAndTheSwitch) {
  unsetenv("MESHTRAIN_ATTENTION");
  EXPECT_EQ(nn::attention_kernel_for(true), AttentionKernel::BatchedGemm);
  EXPECT_EQ(nn::attention_kernel_for(false), AttentionKernel::Reference);  // until validated on a GPU
  setenv("MESHTRAIN_ATTENTION", "gemm", 1);
  EXPECT_EQ(nn::attention_kernel_for(false), AttentionKernel::BatchedGemm);
  setenv("MESHTRAIN_ATTENTION", "reference", 1);
  EXPECT_EQ(nn::attention_kernel_for(true), AttentionKernel::Reference);
  setenv("MESHTRAIN_ATTENTION", "flash", 1);
  try {
    nn::attention_kernel_for(true);
    ADD_FAILURE() << "MESHTRAIN_ATTENTION=flash was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MESHTRAIN_ATTENTION=flash is not an attention implementation"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mt
