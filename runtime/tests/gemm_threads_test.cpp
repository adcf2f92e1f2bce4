// The CPU GEMM gives the same bits at any thread count, on whatever kernel OpenBLAS selected: the
// tiles of C are a function of the problem (runtime/gemm_tiles.h), and each is one single-threaded
// call. ctest runs this under the native kernel and again under OPENBLAS_CORETYPE=Haswell (and
// SkylakeX where the CPU has AVX-512): Haswell's sgemm is the kernel whose bits depend on the split.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/context.h"
#include "runtime/gemm.h"
#include "runtime/gemm_tiles.h"
#include "runtime/kernels.h"
#include "runtime/tensor.h"
#include "tests/float_bits.h"
#include "tests/random_values.h"

namespace mt {
namespace {

using i64 = std::int64_t;
using blas::GemmTiles;
using blas::plan_gemm_tiles;

bool is_power_of_two(i64 x) { return x > 0 && (x & (x - 1)) == 0; }

// Shapes of the models' products (GPT-2 at 256 and 4096 tokens, its LM head, attention), odd ones
// and degenerate ones.
struct Shape {
  i64 m, n, k;
};
const std::vector<Shape> kShapes = {
    {256, 2304, 768}, {256, 768, 768},  {256, 50304, 768}, {2304, 768, 256}, {50304, 768, 256}, {256, 768, 50304},
    {4096, 3072, 768}, {64, 256, 64},   {64, 64, 64},      {1, 1, 1},        {17, 1000, 3},     {1000, 17, 3},
    {16, 100000, 8},  {100000, 16, 8}, {300, 300, 0},     {5, 7, 100000},   {129, 257, 65},    {31, 4099, 64}};

TEST(GemmTiles, CoverTheOutputExactlyOnceWithTilesOfOneShape) {
  for (const Shape& s : kShapes) {
    const GemmTiles t = plan_gemm_tiles(s.m, s.n, s.k);
    SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k));
    ASSERT_GE(t.rows, 1);
    ASSERT_GE(t.cols, 1);
    EXPECT_LE(t.rows, s.m);
    EXPECT_LE(t.cols, s.n);
    // Every row and column of C in exactly one tile: the last tile of a direction is non-empty.
    EXPECT_GE(t.along_m * t.rows, s.m);
    EXPECT_LT((t.along_m - 1) * t.rows, s.m);
    EXPECT_GE(t.along_n * t.cols, s.n);
    EXPECT_LT((t.along_n - 1) * t.cols, s.n);
  }
}

TEST(GemmTiles, BigProductsShareEvenlyAndSmallOnesStayWhole) {
  // GPT-2's products at 256 tokens: a power of two of at least 4 tiles, equal but for rounding.
  for (const Shape& s : std::vector<Shape>{{256, 2304, 768}, {256, 768, 768}, {2304, 768, 256}, {256, 768, 50304}}) {
    const GemmTiles t = plan_gemm_tiles(s.m, s.n, s.k);
    EXPECT_TRUE(is_power_of_two(t.count()) && t.count() >= 4) << s.m << "x" << s.n << ": " << t.count();
  }
  // Beyond four, no tile smaller than 1024 x 1024 in area: packing stays a small part of the work.
  for (const Shape& s : std::vector<Shape>{{256, 50304, 768}, {4096, 4096, 64}, {50304, 768, 256}}) {
    const GemmTiles t = plan_gemm_tiles(s.m, s.n, s.k);
    EXPECT_GT(t.count(), 4) << s.m << "x" << s.n;
    EXPECT_GE(t.rows * t.cols, 1024 * 1024) << s.m << "x" << s.n;
  }
  // Tiny products are one call.
  EXPECT_EQ(plan_gemm_tiles(64, 64, 8).count(), 1);
  EXPECT_EQ(plan_gemm_tiles(1, 1, 1).count(), 1);
}

Tensor as(DeviceContext& ctx, const Tensor& x, DType t) {
  Tensor y = Tensor::empty(x.shape(), t, ctx);
  kernels::cast(ctx, x, y);
  return y;
}

// C = alpha op(A) op(B) + beta C at `threads` threads, of the given dtypes, as bits.
std::vector<std::uint32_t> product_bits(int threads, bool trans_a, bool trans_b, i64 batch, i64 m, i64 n, i64 k,
                                        DType in, DType out, float beta) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, threads});
  const auto shape = [batch](i64 r, i64 c) {
    return batch == 1 ? std::vector<i64>{r, c} : std::vector<i64>{batch, r, c};
  };
  const auto make = [&](std::vector<i64> dims, unsigned seed, DType t) {
    i64 size = 1;
    for (const i64 d : dims) size *= d;
    Tensor x = Tensor::from_host(testing::random_values(static_cast<std::size_t>(size), seed), dims, ctx);
    return t == DType::F32 ? x : as(ctx, x, t);
  };
  const Tensor a = make(trans_a ? shape(k, m) : shape(m, k), 1, in);
  const Tensor b = make(trans_b ? shape(n, k) : shape(k, n), 2, in);
  Tensor c = make(shape(m, n), 3, out);
  if (batch == 1) {
    matmul(ctx, a, trans_a, b, trans_b, c, 0.75f, beta);
  } else {
    matmul_batched(ctx, a, trans_a, b, trans_b, c, 0.75f, beta);
  }
  return testing::bits(out == DType::F32 ? c : as(ctx, c, DType::F32));
}

TEST(GemmThreads, SameBitsAtOneToFourThreads) {
  struct Case {
    bool ta, tb;
    i64 batch, m, n, k;
    DType in, out;
    float beta;
  };
  const std::vector<Case> cases = {
      {false, true, 1, 64, 256, 64, DType::F32, DType::F32, 0.0f},      // the first product
      {false, true, 1, 256, 768, 768, DType::F32, DType::F32, 0.0f},    // and its second
      {false, false, 1, 256, 2304, 768, DType::F32, DType::F32, 1.0f},  // accumulating into C
      {true, false, 1, 768, 2304, 256, DType::F32, DType::F32, 1.0f},   // a weight gradient
      {false, false, 1, 256, 768, 3072, DType::F32, DType::F32, 0.0f},  // an input gradient
      {true, true, 1, 129, 257, 65, DType::F32, DType::F32, 0.5f},      // odd everything
      {false, true, 24, 64, 64, 32, DType::F32, DType::F32, 0.0f},      // attention scores
      {false, false, 3, 200, 300, 64, DType::F32, DType::F32, 0.0f},    // batched, tiled
      {true, false, 1, 64, 96, 20000, DType::F32, DType::F32, 0.0f},    // one tile, deep: OpenBLAS would thread it
      {false, true, 1, 256, 768, 768, DType::BF16, DType::F32, 1.0f},   // bf16 into fp32
      {false, true, 2, 160, 384, 96, DType::BF16, DType::BF16, 0.0f},   // bf16 into bf16
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.batch) + " x " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                 std::to_string(c.k) + (c.ta ? " A^T" : "") + (c.tb ? " B^T" : "") + " " + dtype_name(c.in) +
                 " -> " + dtype_name(c.out));
    const auto one = product_bits(1, c.ta, c.tb, c.batch, c.m, c.n, c.k, c.in, c.out, c.beta);
    for (const int threads : {2, 3, 4}) {
      const auto many = product_bits(threads, c.ta, c.tb, c.batch, c.m, c.n, c.k, c.in, c.out, c.beta);
      ASSERT_EQ(one.size(), many.size());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < one.size(); ++i) differ += one[i] != many[i];
      EXPECT_EQ(differ, 0u) << "outputs differ in their bits between 1 and " << threads << " threads";
    }
  }
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// The variants under OPENBLAS_CORETYPE prove something only if OpenBLAS took the kernel asked for.
TEST(OpenBlasKernel, IsTheOneTheEnvironmentAsksFor) {
  const std::string kernel = backend::Cpu::gemm_kernel_name();
  ASSERT_FALSE(kernel.empty());
  const char* asked = std::getenv("OPENBLAS_CORETYPE");
  if (asked == nullptr) GTEST_SKIP() << "OpenBLAS chose its kernel itself: " << kernel;
  EXPECT_EQ(lower(kernel), lower(asked));
}

}  // namespace
}  // namespace mt
