// GEMM on the CPU against a naive triple loop: every transpose combination, odd and degenerate
// shapes, alpha/beta, k == 0, batches, submatrices through leading dimensions, and the errors for
// shapes and dtypes the CPU backend does not take.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/context.h"  // defines: DeviceContext, DeviceOptions
#include "runtime/error.h"    // defines: Error
#include "runtime/gemm.h"     // defines: GemmArgs, gemm, matmul, matmul_batched
#include "runtime/tensor.h"   // defines: Tensor
#include "tests/random_values.h"  // defines: random_values
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::error_of;
using testing::random_values;

using i64 = std::int64_t;

DeviceOptions cpu_options() { return DeviceOptions{Device::cpu(), 0, 2}; }

// One GEMM as stored in memory: op(A) is m x k, op(B) is k x n, all row-major with row strides.
struct Operands {
  bool trans_a = false, trans_b = false;
  i64 m = 0, n = 0, k = 0;
  float alpha = 1, beta = 0;
  const float* a = nullptr;
  i64 lda = 0;
  const float* b = nullptr;
  i64 ldb = 0;
  const float* c0 = nullptr;  // C before the call
  i64 ldc = 0;
};

float op_a(const Operands& g, i64 i, i64 p) { return g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p]; }
float op_b(const Operands& g, i64 p, i64 j) { return g.trans_b ? g.b[j * g.ldb + p] : g.b[p * g.ldb + j]; }

// Compares the computed C (row stride g.ldc) with the naive result accumulated in double.
// Tolerance: an fp32 dot product of length k in any order (blocked, vectorised, with FMA or not)
// is within about k * 2^-24 of the exact value, relative to the sum of the |terms|; with alpha,
// beta and the final rounding that is (k + 3) * 6e-8 <= 4.1e-6 for the k <= 65 used here, so
// 1e-5 of the sum of |terms| holds for any correct kernel and catches a wrong element at once.
::testing::AssertionResult matches_reference(const Operands& g, const float* c) {
  for (i64 i = 0; i < g.m; ++i) {
    for (i64 j = 0; j < g.n; ++j) {
      double dot = 0, magnitude = 0;
      for (i64 p = 0; p < g.k; ++p) {
        const double term = static_cast<double>(op_a(g, i, p)) * op_b(g, p, j);
        dot += term;
        magnitude += std::fabs(term);
      }
      double expected = static_cast<double>(g.alpha) * dot;
      double bound = std::fabs(static_cast<double>(g.alpha)) * magnitude;
      if (g.beta != 0.0f) {
        expected += static_cast<double>(g.beta) * g.c0[i * g.ldc + j];
        bound += std::fabs(static_cast<double>(g.beta) * g.c0[i * g.ldc + j]);
      }
      const double got = c[i * g.ldc + j];
      if (!(std::fabs(got - expected) <= 1e-5 * bound)) {
        return ::testing::AssertionFailure()
               << "C[" << i << "][" << j << "] = " << got << ", expected " << expected << " (bound " << bound
               << ") for m=" << g.m << " n=" << g.n << " k=" << g.k << " trans_a=" << g.trans_a
               << " trans_b=" << g.trans_b << " alpha=" << g.alpha << " beta=" << g.beta;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

struct Mnk {
  i64 m, n, k;
};
const Mnk kShapes[] = {{1, 1, 1},  {1, 17, 33}, {33, 1, 17}, {3, 65, 17}, {65, 3, 33},
                       {17, 33, 65}, {33, 17, 1}, {1, 1, 65},  {65, 65, 3}, {3, 1, 1}};

// Runs matmul on tensors stored as [m, k] or [k, m] (A) and [k, n] or [n, k] (B), checking C.
void check_matmul(DeviceContext& ctx, bool ta, bool tb, Mnk s, float alpha, float beta, unsigned seed) {
  const std::vector<float> a = random_values(static_cast<std::size_t>(s.m * s.k), seed);
  const std::vector<float> b = random_values(static_cast<std::size_t>(s.k * s.n), seed + 1);
  const std::vector<float> c0 = random_values(static_cast<std::size_t>(s.m * s.n), seed + 2);
  Tensor ta_t = Tensor::from_host(a, ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, ctx);
  Tensor tb_t = Tensor::from_host(b, tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, ctx);
  Tensor tc = Tensor::from_host(c0, {s.m, s.n}, ctx);
  matmul(ctx, ta_t, ta, tb_t, tb, tc, alpha, beta);
  const std::vector<float> c = tc.to_host<float>();
  Operands g{ta, tb, s.m, s.n, s.k, alpha, beta, a.data(), ta ? s.m : s.k, b.data(), tb ? s.k : s.n, c0.data(), s.n};
  EXPECT_TRUE(matches_reference(g, c.data()));
}

TEST(Gemm, AllTransposesOddShapesAlphaBeta) {
  DeviceContext ctx(cpu_options());
  unsigned seed = 1;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (Mnk s : kShapes) {
        check_matmul(ctx, ta, tb, s, 1.0f, 0.0f, seed += 3);
        check_matmul(ctx, ta, tb, s, 0.75f, 0.5f, seed += 3);
        check_matmul(ctx, ta, tb, s, -2.0f, 1.0f, seed += 3);
      }
    }
  }
}

TEST(Gemm, SmallProductExactly) {
  DeviceContext ctx(cpu_options());
  // [1 2 3; 4 5 6] @ [7 8; 9 10; 11 12] = [58 64; 139 154]; all exact in fp32.
  Tensor a = Tensor::from_host(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, ctx);
  Tensor b = Tensor::from_host(std::vector<float>{7, 8, 9, 10, 11, 12}, {3, 2}, ctx);
  Tensor c = Tensor::from_host(std::vector<float>{1, 1, 1, 1}, {2, 2}, ctx);
  matmul(ctx, a, false, b, false, c, 2.0f, 0.5f);
  EXPECT_EQ(c.to_host<float>(), (std::vector<float>{116.5f, 128.5f, 278.5f, 308.5f}));
  // a^T @ a: [1 4; 2 5; 3 6] @ [1 2 3; 4 5 6]
  Tensor ata = Tensor::empty({3, 3}, DType::F32, ctx);
  matmul(ctx, a, true, a, false, ata);
  EXPECT_EQ(ata.to_host<float>(), (std::vector<float>{17, 22, 27, 22, 29, 36, 27, 36, 45}));
  // a @ a^T
  Tensor aat = Tensor::empty({2, 2}, DType::F32, ctx);
  matmul(ctx, a, false, a, true, aat);
  EXPECT_EQ(aat.to_host<float>(), (std::vector<float>{14, 32, 32, 77}));
}

// BLAS (OpenBLAS, cuBLAS) does not read C when beta is 0, so NaN or garbage left there does not
// leak into the result; matmul's default beta = 0 on a Tensor::empty output relies on this.
TEST(Gemm, BetaZeroIgnoresWhatIsInC) {
  DeviceContext ctx(cpu_options());
  const Mnk s{17, 33, 5};
  const std::vector<float> a = random_values(static_cast<std::size_t>(s.m * s.k), 7);
  const std::vector<float> b = random_values(static_cast<std::size_t>(s.k * s.n), 8);
  const std::vector<float> garbage(static_cast<std::size_t>(s.m * s.n), std::numeric_limits<float>::quiet_NaN());
  Tensor ta = Tensor::from_host(a, {s.m, s.k}, ctx);
  Tensor tb = Tensor::from_host(b, {s.k, s.n}, ctx);
  Tensor tc = Tensor::from_host(garbage, {s.m, s.n}, ctx);
  matmul(ctx, ta, false, tb, false, tc, 1.5f, 0.0f);
  const std::vector<float> c = tc.to_host<float>();
  Operands g{false, false, s.m, s.n, s.k, 1.5f, 0.0f, a.data(), s.k, b.data(), s.n, garbage.data(), s.n};
  EXPECT_TRUE(matches_reference(g, c.data()));
}

TEST(Gemm, KZeroGivesBetaTimesC) {
  DeviceContext ctx(cpu_options());
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = Tensor::empty(ta ? Shape{0, 3} : Shape{3, 0}, DType::F32, ctx);
      Tensor b = Tensor::empty(tb ? Shape{4, 0} : Shape{0, 4}, DType::F32, ctx);
      std::vector<float> c0(12);
      for (int i = 0; i < 12; ++i) c0[static_cast<std::size_t>(i)] = static_cast<float>(i) - 5.0f;
      Tensor c = Tensor::from_host(c0, {3, 4}, ctx);
      matmul(ctx, a, ta, b, tb, c, 2.0f, 0.5f);
      std::vector<float> half(12);
      for (std::size_t i = 0; i < 12; ++i) half[i] = 0.5f * c0[i];
      EXPECT_EQ(c.to_host<float>(), half) << ta << tb;

      matmul(ctx, a, ta, b, tb, c, 2.0f, 1.0f);  // beta 1: untouched
      EXPECT_EQ(c.to_host<float>(), half) << ta << tb;

      Tensor nan = Tensor::from_host(std::vector<float>(12, std::numeric_limits<float>::quiet_NaN()), {3, 4}, ctx);
      matmul(ctx, a, ta, b, tb, nan, 2.0f, 0.0f);  // beta 0, empty sum: zeros
      EXPECT_EQ(nan.to_host<float>(), std::vector<float>(12, 0.0f)) << ta << tb;
    }
  }
}

TEST(Gemm, EmptyOutputTouchesNothing) {
  DeviceContext ctx(cpu_options());
  GemmArgs g;
  g.m = 0;
  g.n = 5;
  g.k = 3;
  g.lda = 3;
  g.ldb = 5;
  g.ldc = 5;  // null pointers: nothing may be read or written
  EXPECT_NO_THROW(gemm(ctx, g));
  g.m = 4;
  g.n = 0;
  g.ldc = 0;
  g.ldb = 0;
  EXPECT_NO_THROW(gemm(ctx, g));
}

TEST(Gemm, WrongShapesAndTypesThrowClearly) {
  DeviceContext ctx(cpu_options());
  Tensor a = Tensor::zeros({2, 3}, DType::F32, ctx);
  Tensor b = Tensor::zeros({4, 5}, DType::F32, ctx);
  Tensor c = Tensor::zeros({2, 5}, DType::F32, ctx);
  std::string msg = error_of([&] { matmul(ctx, a, false, b, false, c); });
  EXPECT_TRUE(contains(msg, "matmul shapes do not agree: fp32[2, 3] on cpu @ fp32[4, 5] on cpu -> fp32[2, 5] on cpu"))
      << msg;
  msg = error_of([&] { matmul(ctx, a, true, b, true, c); });
  EXPECT_TRUE(contains(msg, "fp32[2, 3] on cpu^T @ fp32[4, 5] on cpu^T")) << msg;

  Tensor b_ok = Tensor::zeros({3, 5}, DType::F32, ctx);
  Tensor c_wrong = Tensor::zeros({5, 2}, DType::F32, ctx);
  EXPECT_THROW(matmul(ctx, a, false, b_ok, false, c_wrong), Error);
  Tensor c_rows = Tensor::zeros({3, 5}, DType::F32, ctx);
  EXPECT_THROW(matmul(ctx, a, false, b_ok, false, c_rows), Error);
  EXPECT_NO_THROW(matmul(ctx, a, false, b_ok, false, c));

  Tensor cube = Tensor::zeros({1, 2, 3}, DType::F32, ctx);
  EXPECT_TRUE(contains(error_of([&] { matmul(ctx, cube, false, b_ok, false, c); }), "matmul wants 2-D tensors"));

  Tensor b_int = Tensor::zeros({3, 5}, DType::I32, ctx);
  EXPECT_TRUE(contains(error_of([&] { matmul(ctx, a, false, b_int, false, c); }), "matmul dtypes differ"));

  Tensor ai = Tensor::zeros({2, 3}, DType::I32, ctx);
  Tensor ci = Tensor::zeros({2, 5}, DType::I32, ctx);
  EXPECT_TRUE(contains(error_of([&] { matmul(ctx, ai, false, b_int, false, ci); }), "int32 is not supported"));
}

// bf16 products on the CPU go through fp32 (gemm_bf16_test.cpp checks their values); what is
// refused is a mix the backends do not define.
TEST(Gemm, Fp32InputsIntoABf16ResultAreRefused) {
  DeviceContext ctx(cpu_options());
  Tensor a = Tensor::zeros({2, 3}, DType::F32, ctx);
  Tensor b = Tensor::zeros({3, 4}, DType::F32, ctx);
  Tensor c = Tensor::zeros({2, 4}, DType::BF16, ctx);
  const std::string msg = error_of([&] { matmul(ctx, a, false, b, false, c); });
  EXPECT_TRUE(contains(msg, "matmul dtypes differ")) << msg;
}

TEST(Gemm, BatchedAllTransposes) {
  DeviceContext ctx(cpu_options());
  const i64 batch = 3;
  const Mnk shapes[] = {{5, 7, 3}, {1, 4, 9}, {6, 1, 2}, {17, 3, 33}};
  unsigned seed = 100;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (Mnk s : shapes) {
        const std::vector<float> a = random_values(static_cast<std::size_t>(batch * s.m * s.k), ++seed);
        const std::vector<float> b = random_values(static_cast<std::size_t>(batch * s.k * s.n), ++seed);
        const std::vector<float> c0 = random_values(static_cast<std::size_t>(batch * s.m * s.n), ++seed);
        Tensor tensor_a = Tensor::from_host(a, ta ? Shape{batch, s.k, s.m} : Shape{batch, s.m, s.k}, ctx);
        Tensor tensor_b = Tensor::from_host(b, tb ? Shape{batch, s.n, s.k} : Shape{batch, s.k, s.n}, ctx);
        Tensor tensor_c = Tensor::from_host(c0, {batch, s.m, s.n}, ctx);
        matmul_batched(ctx, tensor_a, ta, tensor_b, tb, tensor_c, 1.5f, 0.25f);
        const std::vector<float> c = tensor_c.to_host<float>();
        for (i64 i = 0; i < batch; ++i) {
          const Operands g{ta, tb, s.m, s.n, s.k, 1.5f, 0.25f,
                           a.data() + i * s.m * s.k, ta ? s.m : s.k,
                           b.data() + i * s.k * s.n, tb ? s.k : s.n,
                           c0.data() + i * s.m * s.n, s.n};
          EXPECT_TRUE(matches_reference(g, c.data() + i * s.m * s.n)) << "batch " << i;
        }
      }
    }
  }
}

TEST(Gemm, BatchedChecksItsArguments) {
  DeviceContext ctx(cpu_options());
  Tensor a = Tensor::zeros({3, 2, 4}, DType::F32, ctx);
  Tensor b = Tensor::zeros({2, 4, 5}, DType::F32, ctx);
  Tensor c = Tensor::zeros({3, 2, 5}, DType::F32, ctx);
  EXPECT_TRUE(contains(error_of([&] { matmul_batched(ctx, a, false, b, false, c); }), "batch sizes differ"));
  Tensor flat = Tensor::zeros({2, 4}, DType::F32, ctx);
  EXPECT_TRUE(contains(error_of([&] { matmul_batched(ctx, flat, false, b, false, c); }), "wants 3-D tensors"));
  Tensor b3 = Tensor::zeros({3, 5, 5}, DType::F32, ctx);
  EXPECT_TRUE(contains(error_of([&] { matmul_batched(ctx, a, false, b3, false, c); }), "matmul shapes do not agree"));
}

// The raw form on windows of bigger matrices: leading dimensions wider than the rows, and
// everything in C outside the window left as it was.
TEST(Gemm, RawSubmatricesThroughLeadingDimensions) {
  DeviceContext ctx(cpu_options());
  const i64 m = 5, n = 6, k = 7;
  const float sentinel = 12345.0f;
  unsigned seed = 500;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      // Stored sizes of the windows, placed at row 2, column 3 of matrices 3 rows and 5 columns bigger.
      const i64 rows_a = ta ? k : m, cols_a = ta ? m : k;
      const i64 rows_b = tb ? n : k, cols_b = tb ? k : n;
      const i64 lda = cols_a + 5, ldb = cols_b + 5, ldc = n + 5;
      const std::vector<float> big_a = random_values(static_cast<std::size_t>((rows_a + 3) * lda), ++seed);
      const std::vector<float> big_b = random_values(static_cast<std::size_t>((rows_b + 3) * ldb), ++seed);
      std::vector<float> big_c0(static_cast<std::size_t>((m + 3) * ldc), sentinel);
      const std::vector<float> window_c = random_values(static_cast<std::size_t>(m * n), ++seed);
      const i64 at_a = 2 * lda + 3, at_b = 2 * ldb + 3, at_c = 2 * ldc + 3;
      for (i64 i = 0; i < m; ++i) {
        for (i64 j = 0; j < n; ++j) {
          big_c0[static_cast<std::size_t>(at_c + i * ldc + j)] = window_c[static_cast<std::size_t>(i * n + j)];
        }
      }

      Tensor ta_t = Tensor::from_host(big_a, {rows_a + 3, lda}, ctx);
      Tensor tb_t = Tensor::from_host(big_b, {rows_b + 3, ldb}, ctx);
      Tensor tc_t = Tensor::from_host(big_c0, {m + 3, ldc}, ctx);
      GemmArgs g;
      g.trans_a = ta;
      g.trans_b = tb;
      g.m = m;
      g.n = n;
      g.k = k;
      g.alpha = 0.5f;
      g.beta = -1.0f;
      g.a = ta_t.data_as<float>() + at_a;
      g.lda = lda;
      g.b = tb_t.data_as<float>() + at_b;
      g.ldb = ldb;
      g.c = tc_t.data_as<float>() + at_c;
      g.ldc = ldc;
      gemm(ctx, g);

      const std::vector<float> c = tc_t.to_host<float>();
      Operands ref{ta, tb, m, n, k, 0.5f, -1.0f, big_a.data() + at_a, lda, big_b.data() + at_b, ldb,
                   big_c0.data() + at_c, ldc};
      EXPECT_TRUE(matches_reference(ref, c.data() + at_c)) << ta << tb;
      int touched = 0;
      for (i64 i = 0; i < m + 3; ++i) {
        for (i64 j = 0; j < ldc; ++j) {
          const bool inside = i >= 2 && i < 2 + m && j >= 3 && j < 3 + n;
          if (!inside && c[static_cast<std::size_t>(i * ldc + j)] != sentinel) ++touched;
        }
      }
      EXPECT_EQ(touched, 0) << "elements outside the C window changed, trans " << ta << tb;
    }
  }
}

TEST(Gemm, RawChecksSizesAndLeadingDimensions) {
  DeviceContext ctx(cpu_options());
  std::vector<float> buffer(64, 0.0f);
  GemmArgs g;
  g.m = 2;
  g.n = 3;
  g.k = 4;
  g.a = buffer.data();
  g.b = buffer.data();
  g.c = buffer.data() + 32;
  g.lda = 4;
  g.ldb = 3;
  g.ldc = 3;
  EXPECT_NO_THROW(gemm(ctx, g));

  GemmArgs bad = g;
  bad.lda = 3;  // rows of A hold k = 4
  EXPECT_TRUE(contains(error_of([&] { gemm(ctx, bad); }), "leading dimensions too small"));
  bad = g;
  bad.trans_a = true;  // A stored [k, m]: rows of m = 2 fit in 4, fine
  EXPECT_NO_THROW(gemm(ctx, bad));
  bad = g;
  bad.trans_b = true;  // B stored [n, k]: rows hold k = 4 > ldb 3
  EXPECT_THROW(gemm(ctx, bad), Error);
  bad = g;
  bad.ldc = 2;
  EXPECT_THROW(gemm(ctx, bad), Error);
  bad = g;
  bad.k = -1;
  EXPECT_TRUE(contains(error_of([&] { gemm(ctx, bad); }), "negative GEMM size"));
}

}  // namespace
}  // namespace mt
