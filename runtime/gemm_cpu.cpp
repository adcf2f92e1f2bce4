// OpenBLAS behind the GEMM API. cblas takes row-major directly; a batch is a loop of sgemm calls
// (each one threaded by OpenBLAS itself).
//
// bf16 operands: this OpenBLAS has no usable bf16 GEMM, so each matrix of the batch is widened
// (exactly: a bf16 is the top half of an fp32) into compact fp32 scratch, multiplied by sgemm into
// an fp32 result that starts from C (widened too when C is bf16, so beta x C is an fp32 term),
// and a bf16 C gets that result rounded to nearest even. That is the math cuBLAS does with
// CUBLAS_COMPUTE_32F (up to the order of the fp32 sums), at the cost of the copies.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "runtime/blas_backend.h"
#include "runtime/error.h"

namespace mt::blas {
namespace {

// sgemm of one matrix of the batch, on fp32 pointers.
void sgemm(const GemmArgs& g, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
           std::int64_t ldc) {
  // BLAS wants leading dimensions of at least 1 even for empty matrices (k == 0).
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), g.alpha, a,
              static_cast<int>(std::max<std::int64_t>(lda, 1)), b, static_cast<int>(std::max<std::int64_t>(ldb, 1)),
              g.beta, c, static_cast<int>(std::max<std::int64_t>(ldc, 1)));
}

// rows x cols of a row-major bf16 matrix with row stride ld, into compact fp32 (row stride cols).
void widen(const bf16* src, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::vector<float>& dst) {
  dst.resize(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < cols; ++j) dst[static_cast<std::size_t>(r * cols + j)] = src[r * ld + j].to_float();
}

void bf16_gemm(const GemmArgs& g) {
  const std::int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const std::int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  const auto* a = static_cast<const bf16*>(g.a);
  const auto* b = static_cast<const bf16*>(g.b);
  std::vector<float> wa, wb, wc;
  for (std::int64_t i = 0; i < g.batch; ++i) {
    widen(a + i * g.stride_a, a_rows, a_cols, g.lda, wa);
    widen(b + i * g.stride_b, b_rows, b_cols, g.ldb, wb);
    if (g.c_type() == DType::F32) {
      sgemm(g, wa.data(), a_cols, wb.data(), b_cols, static_cast<float*>(g.c) + i * g.stride_c, g.ldc);
      continue;
    }
    bf16* c = static_cast<bf16*>(g.c) + i * g.stride_c;
    if (g.beta != 0.0f) {
      widen(c, g.m, g.n, g.ldc, wc);
    } else {
      wc.assign(static_cast<std::size_t>(g.m * g.n), 0.0f);  // BLAS ignores C when beta is 0: so do we
    }
    sgemm(g, wa.data(), a_cols, wb.data(), b_cols, wc.data(), g.n);
    for (std::int64_t r = 0; r < g.m; ++r)
      for (std::int64_t j = 0; j < g.n; ++j)
        c[r * g.ldc + j] = bf16::from_float(wc[static_cast<std::size_t>(r * g.n + j)]);
  }
}

}  // namespace

void set_cpu_threads(int threads) { openblas_set_num_threads(threads); }

void cpu_gemm(const GemmArgs& g) {
  MT_CHECK(g.m <= INT_MAX && g.n <= INT_MAX && g.k <= INT_MAX && g.lda <= INT_MAX && g.ldb <= INT_MAX &&
               g.ldc <= INT_MAX,
           "GEMM dimension exceeds the 32-bit BLAS interface");
  if (g.dtype == DType::BF16) {
    bf16_gemm(g);
    return;
  }
  MT_CHECK(g.dtype == DType::F32 && g.c_type() == DType::F32, "the CPU GEMM takes fp32 or bf16 inputs, not ",
           dtype_name(g.dtype), " into ", dtype_name(g.c_type()));
  const auto* a = static_cast<const float*>(g.a);
  const auto* b = static_cast<const float*>(g.b);
  auto* c = static_cast<float*>(g.c);
  for (std::int64_t i = 0; i < g.batch; ++i)
    sgemm(g, a + i * g.stride_a, g.lda, b + i * g.stride_b, g.ldb, c + i * g.stride_c, g.ldc);
}

}  // namespace mt::blas
