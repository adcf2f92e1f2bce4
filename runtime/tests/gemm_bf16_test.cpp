// GEMM with bf16 operands (runtime/gemm.h): bf16 x bf16 -> fp32 (how weight gradients accumulate
// under bf16 compute) and bf16 x bf16 -> bf16 (activations), on the CPU, against the fp32 GEMM of
// the widened inputs: every transpose combination, alpha and beta (accumulation), batches,
// submatrices through leading dimensions, k == 0, beta == 0 with garbage in C, and the errors for
// the dtype mixes GEMM does not take. Then the same on a GPU against the CPU, skipped without one.
//
// The CPU computes a bf16 GEMM as sgemm on the widened values (a bf16 widens to fp32 exactly), so
// with compact operands it is the very sgemm call of the fp32 reference on the very same numbers:
// an fp32 C must come out bit for bit equal, a bf16 C bit for bit the reference rounded to nearest
// even. Any difference is a wrong widening, stride, beta term or rounding, not arithmetic noise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/context.h"  // defines: DeviceContext, DeviceOptions
#include "runtime/error.h"
#include "runtime/gemm.h"     // defines: GemmArgs, gemm, matmul, matmul_batched
#include "runtime/tensor.h"   // defines: Tensor
#include "tests/test_helpers.h"
#include "tests/gpu_skip.h"  // defines: MT_SKIP_WITHOUT_GPU

namespace mt {
namespace {

using testing::contains;
using testing::error_of;

using i64 = std::int64_t;

DeviceOptions cpu_options() { return DeviceOptions{Device::cpu(), 0, 2}; }

// n random values in [-1, 1) that are exact bf16 numbers: as bf16, and widened to fp32.
struct Values {
  std::vector<bf16> narrow;
  std::vector<float> wide;
};

Values random_bf16(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Values v;
  for (std::size_t i = 0; i < n; ++i) {
    v.narrow.push_back(bf16::from_float(dist(rng)));
    v.wide.push_back(v.narrow.back().to_float());
  }
  return v;
}

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

struct Case {
  bool trans_a, trans_b;
  i64 m, n, k;
  float alpha = 1.0f, beta = 0.0f;
  i64 batch = 0;  // 0: matmul on 2-D tensors; otherwise matmul_batched on 3-D ones
};

std::string describe(const Case& c, DType out) {
  return std::string(c.trans_a ? "A^T" : "A") + (c.trans_b ? " B^T" : " B") + " m=" + std::to_string(c.m) +
         " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " alpha=" + std::to_string(c.alpha) +
         " beta=" + std::to_string(c.beta) + " batch=" + std::to_string(c.batch) + " -> " + dtype_name(out);
}

Shape shape(i64 batch, i64 rows, i64 cols) { return batch == 0 ? Shape{rows, cols} : Shape{batch, rows, cols}; }

void run(DeviceContext& ctx, const Case& c, const Tensor& a, const Tensor& b, Tensor& out) {
  if (c.batch == 0) {
    matmul(ctx, a, c.trans_a, b, c.trans_b, out, c.alpha, c.beta);
  } else {
    matmul_batched(ctx, a, c.trans_a, b, c.trans_b, out, c.alpha, c.beta);
  }
}

// bf16 A and B into a C of dtype `out` that starts from bf16-representable values, against the
// fp32 GEMM of the widened A, B and C.
void check_against_widened(DeviceContext& ctx, const Case& c, DType out, unsigned seed) {
  SCOPED_TRACE(describe(c, out));
  const i64 batches = c.batch == 0 ? 1 : c.batch;
  const Values a = random_bf16(static_cast<std::size_t>(batches * c.m * c.k), seed);
  const Values b = random_bf16(static_cast<std::size_t>(batches * c.k * c.n), seed + 1);
  const Values c0 = random_bf16(static_cast<std::size_t>(batches * c.m * c.n), seed + 2);
  const Shape a_shape = c.trans_a ? shape(c.batch, c.k, c.m) : shape(c.batch, c.m, c.k);
  const Shape b_shape = c.trans_b ? shape(c.batch, c.n, c.k) : shape(c.batch, c.k, c.n);
  const Shape c_shape = shape(c.batch, c.m, c.n);

  Tensor want = Tensor::from_host(c0.wide, c_shape, ctx);
  run(ctx, c, Tensor::from_host(a.wide, a_shape, ctx), Tensor::from_host(b.wide, b_shape, ctx), want);
  const std::vector<float> w = want.to_host<float>();

  Tensor got = out == DType::F32 ? Tensor::from_host(c0.wide, c_shape, ctx)
                                 : Tensor::from_host(c0.narrow, c_shape, ctx);
  run(ctx, c, Tensor::from_host(a.narrow, a_shape, ctx), Tensor::from_host(b.narrow, b_shape, ctx), got);

  std::size_t differ = 0, first = 0;
  if (out == DType::F32) {
    const std::vector<float> g = got.to_host<float>();
    for (std::size_t i = 0; i < g.size(); ++i)
      if (bits(g[i]) != bits(w[i]) && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0u) << "of " << g.size() << "; first at " << first << ": " << g[first] << " vs " << w[first];
  } else {
    const std::vector<bf16> g = got.to_host<bf16>();
    for (std::size_t i = 0; i < g.size(); ++i)
      if (g[i].bits != bf16::from_float(w[i]).bits && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0u) << "of " << g.size() << "; first at " << first << ": " << g[first].to_float()
                          << " vs round(" << w[first] << ")";
  }
}

TEST(GemmBf16, IntoFp32AndBf16MatchTheWidenedFp32GemmForEveryTranspose) {
  DeviceContext ctx(cpu_options());
  unsigned seed = 100;
  for (DType out : {DType::F32, DType::BF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        check_against_widened(ctx, {ta, tb, 37, 29, 53}, out, seed += 3);               // odd shapes
        check_against_widened(ctx, {ta, tb, 64, 48, 256, 1.0f, 1.0f}, out, seed += 3);  // accumulate, as dW +=
        check_against_widened(ctx, {ta, tb, 5, 7, 3, -0.75f, 0.5f}, out, seed += 3);
        check_against_widened(ctx, {ta, tb, 1, 1, 1, 2.0f, 1.0f}, out, seed += 3);
      }
    }
  }
}

TEST(GemmBf16, BatchedMatchesTheWidenedFp32Gemm) {
  DeviceContext ctx(cpu_options());
  unsigned seed = 300;
  for (DType out : {DType::F32, DType::BF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        check_against_widened(ctx, {ta, tb, 9, 11, 13, 1.5f, 0.25f, 3}, out, seed += 3);
        check_against_widened(ctx, {ta, tb, 16, 16, 8, 1.0f, 0.0f, 1}, out, seed += 3);
      }
    }
  }
}

// Accumulating into fp32 keeps what bf16 cannot hold: adding 2^-12 to 1.0 survives in an fp32 C,
// and is rounded away in a bf16 one (whose spacing near 1 is 2^-7).
TEST(GemmBf16, Fp32OutputKeepsSmallIncrementsThatBf16RoundsAway) {
  DeviceContext ctx(cpu_options());
  const float tiny = std::ldexp(1.0f, -12);
  Tensor a = Tensor::from_host(std::vector<bf16>{bf16::from_float(tiny)}, {1, 1}, ctx);
  Tensor b = Tensor::from_host(std::vector<bf16>{bf16::from_float(1.0f)}, {1, 1}, ctx);
  Tensor c32 = Tensor::from_host(std::vector<float>{1.0f}, {1, 1}, ctx);
  Tensor c16 = Tensor::from_host(std::vector<bf16>{bf16::from_float(1.0f)}, {1, 1}, ctx);
  matmul(ctx, a, false, b, false, c32, 1.0f, 1.0f);
  matmul(ctx, a, false, b, false, c16, 1.0f, 1.0f);
  EXPECT_EQ(c32.to_host<float>()[0], 1.0f + tiny);
  EXPECT_EQ(c16.to_host<bf16>()[0].to_float(), 1.0f);
}

// Rounding happens once, at the end, to nearest even: a sum that lands exactly halfway between two
// bf16 numbers goes to the even one, and partial sums are not rounded on the way.
TEST(GemmBf16, Bf16OutputIsRoundedOnceToNearestEven) {
  DeviceContext ctx(cpu_options());
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even is 1 (rounding half up would give 1 + 2^-7).
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6, while rounding each
  // partial sum 1 + 2^-8 to bf16 would give 1. Built from four terms that are each exact in bf16.
  const float q = std::ldexp(1.0f, -10);
  const std::pair<std::vector<float>, float> cases[] = {{{1.0f, q, q, 2 * q}, 1.0f},
                                                       {{1.0f, 4 * q, 4 * q, 4 * q}, 1.0f + std::ldexp(1.0f, -6)}};
  for (const auto& [terms, want] : cases) {
    std::vector<bf16> a;
    for (float t : terms) a.push_back(bf16::from_float(t));
    const std::vector<bf16> ones(terms.size(), bf16::from_float(1.0f));
    Tensor ta = Tensor::from_host(a, {1, static_cast<i64>(a.size())}, ctx);
    Tensor tb = Tensor::from_host(ones, {static_cast<i64>(ones.size()), 1}, ctx);
    Tensor c = Tensor::zeros({1, 1}, DType::BF16, ctx);
    matmul(ctx, ta, false, tb, false, c);
    EXPECT_EQ(c.to_host<bf16>()[0].to_float(), want);
  }
}

// Raw GemmArgs on submatrices: padded leading dimensions and gaps between the matrices of a batch.
// Only the m x n elements of each C may change; they are checked against a double-precision sum
// of the (exact) products: fp32 accumulation error (k * 2^-24 of the sum of |terms|, as in
// gemm_test.cpp: 1e-5 for k <= 65) plus, for a bf16 C, one rounding to 8 significant bits (at most
// 2^-8 of the value).
TEST(GemmBf16, RawSubmatricesLeaveThePaddingAlone) {
  DeviceContext ctx(cpu_options());
  for (DType out : {DType::F32, DType::BF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const i64 m = 6, n = 5, k = 7, pad = 3, batch = 2, gap = 4;
        const float alpha = 1.25f, beta = 0.5f;
        SCOPED_TRACE(describe({ta, tb, m, n, k, alpha, beta, batch}, out) + " (raw, padded)");
        const i64 a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
        const i64 lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
        const i64 sa = a_rows * lda + gap, sb = b_rows * ldb + gap, sc = m * ldc + gap;
        const Values a = random_bf16(static_cast<std::size_t>(sa * batch), 7);
        const Values b = random_bf16(static_cast<std::size_t>(sb * batch), 8);
        const Values c0 = random_bf16(static_cast<std::size_t>(sc * batch), 9);
        Tensor tA = Tensor::from_host(a.narrow, {sa * batch}, ctx);
        Tensor tB = Tensor::from_host(b.narrow, {sb * batch}, ctx);
        Tensor tC = out == DType::F32 ? Tensor::from_host(c0.wide, {sc * batch}, ctx)
                                      : Tensor::from_host(c0.narrow, {sc * batch}, ctx);
        GemmArgs g;
        g.trans_a = ta;
        g.trans_b = tb;
        g.m = m;
        g.n = n;
        g.k = k;
        g.alpha = alpha;
        g.beta = beta;
        g.a = tA.data();
        g.lda = lda;
        g.b = tB.data();
        g.ldb = ldb;
        g.c = tC.data();
        g.ldc = ldc;
        g.batch = batch;
        g.stride_a = sa;
        g.stride_b = sb;
        g.stride_c = sc;
        g.dtype = DType::BF16;
        g.c_dtype = out;
        gemm(ctx, g);
        std::vector<float> got;
        if (out == DType::F32) {
          got = tC.to_host<float>();
        } else {
          for (bf16 x : tC.to_host<bf16>()) got.push_back(x.to_float());
        }
        for (i64 at = 0; at < sc * batch; ++at) {
          const i64 bi = at / sc, in = at % sc, i = in / ldc, j = in % ldc;
          const auto u = static_cast<std::size_t>(at);
          if (bi >= batch || i >= m || j >= n) {
            ASSERT_EQ(bits(got[u]), bits(c0.wide[u])) << "padding element " << at << " changed";
            continue;
          }
          double exact = 0, magnitude = 0;
          for (i64 p = 0; p < k; ++p) {
            const double x = a.wide[static_cast<std::size_t>(bi * sa + (ta ? p * lda + i : i * lda + p))];
            const double y = b.wide[static_cast<std::size_t>(bi * sb + (tb ? j * ldb + p : p * ldb + j))];
            exact += x * y;
            magnitude += std::fabs(x * y);
          }
          exact = alpha * exact + beta * static_cast<double>(c0.wide[u]);
          magnitude = std::fabs(alpha) * magnitude + std::fabs(beta * static_cast<double>(c0.wide[u]));
          const double rounding = out == DType::BF16 ? std::ldexp(1.0, -8) * std::fabs(exact) : 0.0;
          const double allowed = 1e-5 * magnitude + rounding;
          ASSERT_LE(std::fabs(got[u] - exact), allowed) << "C[" << bi << "][" << i << "][" << j << "]";
        }
      }
    }
  }
}

TEST(GemmBf16, KZeroGivesBetaTimesCAndBetaZeroIgnoresC) {
  DeviceContext ctx(cpu_options());
  Tensor a = Tensor::zeros({3, 0}, DType::BF16, ctx), b = Tensor::zeros({0, 2}, DType::BF16, ctx);
  const Values c0 = random_bf16(6, 5);
  Tensor c32 = Tensor::from_host(c0.wide, {3, 2}, ctx);
  Tensor c16 = Tensor::from_host(c0.narrow, {3, 2}, ctx);
  matmul(ctx, a, false, b, false, c32, 2.0f, 0.75f);
  matmul(ctx, a, false, b, false, c16, 2.0f, 0.75f);
  const std::vector<float> g32 = c32.to_host<float>();
  const std::vector<bf16> g16 = c16.to_host<bf16>();
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(bits(g32[i]), bits(0.75f * c0.wide[i])) << i;
    EXPECT_EQ(g16[i].bits, bf16::from_float(0.75f * c0.wide[i]).bits) << i;
  }

  // beta 0: whatever is in C (NaN here) does not leak into the result, as with sgemm.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Values x = random_bf16(12, 6), y = random_bf16(8, 7);
  Tensor ta = Tensor::from_host(x.narrow, {3, 4}, ctx), tb = Tensor::from_host(y.narrow, {4, 2}, ctx);
  Tensor n32 = Tensor::from_host(std::vector<float>(6, nan), {3, 2}, ctx);
  Tensor n16 = Tensor::from_host(std::vector<bf16>(6, bf16::from_float(nan)), {3, 2}, ctx);
  matmul(ctx, ta, false, tb, false, n32);
  matmul(ctx, ta, false, tb, false, n16);
  for (float v : n32.to_host<float>()) EXPECT_TRUE(std::isfinite(v));
  for (bf16 v : n16.to_host<bf16>()) EXPECT_TRUE(std::isfinite(v.to_float()));
}

TEST(GemmBf16, UnsupportedDtypeMixesThrowClearly) {
  DeviceContext ctx(cpu_options());
  Tensor a32 = Tensor::zeros({2, 3}, DType::F32, ctx), b32 = Tensor::zeros({3, 4}, DType::F32, ctx);
  Tensor a16 = Tensor::zeros({2, 3}, DType::BF16, ctx), b16 = Tensor::zeros({3, 4}, DType::BF16, ctx);
  Tensor c32 = Tensor::zeros({2, 4}, DType::F32, ctx), c16 = Tensor::zeros({2, 4}, DType::BF16, ctx);
  EXPECT_NO_THROW(matmul(ctx, a16, false, b16, false, c32));
  EXPECT_NO_THROW(matmul(ctx, a16, false, b16, false, c16));

  // fp32 inputs into bf16: no backend rounds an fp32 GEMM into bf16.
  std::string msg = error_of([&] { matmul(ctx, a32, false, b32, false, c16); });
  EXPECT_TRUE(contains(msg, "matmul dtypes differ: fp32[2, 3] on cpu @ fp32[3, 4] on cpu -> bf16[2, 4] on cpu"))
      << msg;
  EXPECT_TRUE(contains(msg, "fp32 for bf16 inputs")) << msg;
  // A and B of different dtypes.
  msg = error_of([&] { matmul(ctx, a16, false, b32, false, c32); });
  EXPECT_TRUE(contains(msg, "matmul dtypes differ: bf16[2, 3] on cpu, fp32[3, 4] on cpu")) << msg;
  EXPECT_TRUE(contains(msg, "share one dtype")) << msg;
  Tensor a3 = Tensor::zeros({1, 2, 3}, DType::BF16, ctx), b3 = Tensor::zeros({1, 3, 4}, DType::F32, ctx);
  Tensor c3 = Tensor::zeros({1, 2, 4}, DType::F32, ctx);
  EXPECT_TRUE(contains(error_of([&] { matmul_batched(ctx, a3, false, b3, false, c3); }), "matmul dtypes differ"));

  // The raw API checks the same.
  GemmArgs g;
  g.m = 2;
  g.n = 4;
  g.k = 3;
  g.a = a32.data();
  g.lda = 3;
  g.b = b32.data();
  g.ldb = 4;
  g.c = c16.data();
  g.ldc = 4;
  g.dtype = DType::F32;
  g.c_dtype = DType::BF16;
  msg = error_of([&] { gemm(ctx, g); });
  EXPECT_TRUE(contains(msg, "GEMM of fp32 inputs into bf16 is not supported")) << msg;
  g.dtype = DType::BF16;
  g.c_dtype = DType::I32;
  EXPECT_TRUE(contains(error_of([&] { gemm(ctx, g); }), "int32 is not supported"));
  g.c_dtype.reset();  // unset: C is of A's and B's dtype
  EXPECT_EQ(g.c_type(), DType::BF16);
}

// ---------------------------------------------------------------------------------------------
// On a GPU: cuBLAS (CUBLAS_COMPUTE_32F) against the CPU's widened sgemm, the same inputs. The two
// sum in different orders, each within ~k * 2^-24 of the exact value relative to the sum of the
// |terms|: 1e-4 of that, as cuda_backend_test.cpp allows fp32 GEMMs; a bf16 C may in addition round
// to the neighbouring bf16 number when the fp32 results straddle a rounding boundary: one bf16
// spacing, at most 2^-7 of the value.

TEST(CudaGemmBf16, MatchesTheCpuIntoFp32AndBf16) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext cpu(cpu_options());
  DeviceContext gpu(DeviceOptions{Device::cuda(0), 0, 1});
  unsigned seed = 500;
  for (DType out : {DType::F32, DType::BF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (const Case& c : {Case{ta, tb, 37, 29, 53, 1.25f, 0.5f}, Case{ta, tb, 64, 96, 256, 1.0f, 1.0f},
                              Case{ta, tb, 9, 11, 13, 1.5f, 0.25f, 3}}) {
          SCOPED_TRACE(describe(c, out));
          const i64 batches = c.batch == 0 ? 1 : c.batch;
          const Values a = random_bf16(static_cast<std::size_t>(batches * c.m * c.k), seed += 3);
          const Values b = random_bf16(static_cast<std::size_t>(batches * c.k * c.n), seed + 1);
          const Values c0 = random_bf16(static_cast<std::size_t>(batches * c.m * c.n), seed + 2);
          const Shape a_shape = c.trans_a ? shape(c.batch, c.k, c.m) : shape(c.batch, c.m, c.k);
          const Shape b_shape = c.trans_b ? shape(c.batch, c.n, c.k) : shape(c.batch, c.k, c.n);
          std::vector<float> results[2];
          DeviceContext* sides[2] = {&cpu, &gpu};
          for (int s = 0; s < 2; ++s) {
            DeviceContext& ctx = *sides[s];
            Tensor tc = out == DType::F32 ? Tensor::from_host(c0.wide, shape(c.batch, c.m, c.n), ctx)
                                          : Tensor::from_host(c0.narrow, shape(c.batch, c.m, c.n), ctx);
            run(ctx, c, Tensor::from_host(a.narrow, a_shape, ctx), Tensor::from_host(b.narrow, b_shape, ctx), tc);
            ctx.synchronize();
            if (out == DType::F32) {
              results[s] = tc.to_host<float>();
            } else {
              for (bf16 x : tc.to_host<bf16>()) results[s].push_back(x.to_float());
            }
          }
          // |terms| <= 1: the sum of |terms| is at most k + |beta|.
          const double magnitude = std::fabs(c.alpha) * static_cast<double>(c.k) + std::fabs(c.beta);
          int reported = 0;
          for (std::size_t i = 0; i < results[0].size(); ++i) {
            const double spacing = out == DType::BF16 ? std::ldexp(1.0, -7) * std::fabs(results[0][i]) : 0.0;
            const double allowed = 1e-4 * magnitude + spacing;
            if (std::fabs(results[1][i] - results[0][i]) > allowed && reported++ < 5)
              ADD_FAILURE() << "element " << i << ": cpu " << results[0][i] << ", gpu " << results[1][i];
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mt
