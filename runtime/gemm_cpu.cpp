// OpenBLAS behind the GEMM API. cblas takes row-major directly; a batch is a loop of sgemm calls
// (each one threaded by OpenBLAS itself).
#include <cblas.h>

#include <algorithm>
#include <climits>

#include "runtime/blas_backend.h"
#include "runtime/error.h"

namespace mt::blas {

void set_cpu_threads(int threads) { openblas_set_num_threads(threads); }

void cpu_gemm(const GemmArgs& g) {
  MT_CHECK(g.m <= INT_MAX && g.n <= INT_MAX && g.k <= INT_MAX && g.lda <= INT_MAX && g.ldb <= INT_MAX &&
               g.ldc <= INT_MAX,
           "GEMM dimension exceeds the 32-bit BLAS interface");
  // BLAS wants leading dimensions of at least 1 even for empty matrices (k == 0).
  const int lda = static_cast<int>(std::max<std::int64_t>(g.lda, 1));
  const int ldb = static_cast<int>(std::max<std::int64_t>(g.ldb, 1));
  const int ldc = static_cast<int>(std::max<std::int64_t>(g.ldc, 1));
  const auto* a = static_cast<const float*>(g.a);
  const auto* b = static_cast<const float*>(g.b);
  auto* c = static_cast<float*>(g.c);
  for (std::int64_t i = 0; i < g.batch; ++i) {
    cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), g.alpha,
                a + i * g.stride_a, lda, b + i * g.stride_b, ldb, g.beta, c + i * g.stride_c, ldc);
  }
}

}  // namespace mt::blas
