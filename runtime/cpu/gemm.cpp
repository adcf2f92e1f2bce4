// OpenBLAS behind the GEMM API. cblas takes row-major directly. OpenBLAS itself always runs on one
// thread per call: the threads share out tiles of C whose shape depends on the problem alone
// (runtime/gemm_tiles.h), so the bits do not depend on the thread count on any OpenBLAS kernel.
//
// bf16 operands: this OpenBLAS has no usable bf16 GEMM, so each matrix of the batch is widened
// (exactly: a bf16 is the top half of an fp32) into compact fp32 scratch, multiplied by sgemm into
// an fp32 result that starts from C (widened too when C is bf16, so beta x C is an fp32 term),
// and a bf16 C gets that result rounded to nearest even. That is the math cuBLAS does with
// CUBLAS_COMPUTE_32F (up to the order of the fp32 sums), at the cost of the copies. An epilogue
// (runtime/gemm.h) runs on that fp32 result before it is rounded (runtime/cpu/gemm_epilogue.cpp).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/error.h"
#include "runtime/gemm_tiles.h"

namespace mt::backend {

using blas::GemmTiles;
using blas::plan_gemm_tiles;
namespace {

// One fp32 GEMM of a batch: its own strides, the shared shape and scalars of g.
struct Fp32Matrices {
  const float* a;
  std::int64_t lda;
  const float* b;
  std::int64_t ldb;
  float* c;
  std::int64_t ldc;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// OpenBLAS's own threads would split each call by their count; ours share out the tiles instead.
// The OpenMP build of OpenBLAS takes its thread count from the calling thread's OpenMP setting
// (omp_get_max_threads) unless it is already inside a parallel region, so that setting is 1 while a
// GEMM runs, in the caller and in the team that inherits it; the pthreads build has its own count.
class OneOpenBlasThread {
 public:
  OneOpenBlasThread() : saved_(omp_get_max_threads()) {
    static std::once_flag once;
    std::call_once(once, [] { openblas_set_num_threads(1); });
    omp_set_num_threads(1);
  }
  ~OneOpenBlasThread() { omp_set_num_threads(saved_); }
  OneOpenBlasThread(const OneOpenBlasThread&) = delete;
  OneOpenBlasThread& operator=(const OneOpenBlasThread&) = delete;

 private:
  int saved_;
};

// rows x cols of C at (row, col), by one single-threaded sgemm. BLAS wants leading dimensions of at
// least 1 even for empty matrices (k == 0).
void sgemm_tile(const GemmArgs& g, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                std::int64_t ldc, std::int64_t row, std::int64_t col, std::int64_t rows, std::int64_t cols) {
  const float* a_tile = g.trans_a ? a + row : a + row * lda;
  const float* b_tile = g.trans_b ? b + col * ldb : b + col;
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(g.k), g.alpha, a_tile,
              static_cast<int>(std::max<std::int64_t>(lda, 1)), b_tile,
              static_cast<int>(std::max<std::int64_t>(ldb, 1)), g.beta, c + row * ldc + col,
              static_cast<int>(std::max<std::int64_t>(ldc, 1)));
}

// Every tile of every matrix of the batch, shared out among `threads`; which thread takes a tile
// does not change its bits.
void tiled_sgemm(const GemmArgs& g, std::int64_t batch, const Fp32Matrices& x, int threads) {
  const GemmTiles tiles = plan_gemm_tiles(g.m, g.n, g.k);
  const std::int64_t per_matrix = tiles.count();
  const std::int64_t total = batch * per_matrix;
  const OneOpenBlasThread single;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (total > 1 && threads > 1)
  for (std::int64_t t = 0; t < total; ++t) {
    const std::int64_t i = t / per_matrix, tile = t % per_matrix;
    const std::int64_t row = tile / tiles.along_n * tiles.rows, col = tile % tiles.along_n * tiles.cols;
    sgemm_tile(g, x.a + i * x.stride_a, x.lda, x.b + i * x.stride_b, x.ldb, x.c + i * x.stride_c, x.ldc, row, col,
               std::min(tiles.rows, g.m - row), std::min(tiles.cols, g.n - col));
  }
}

// rows x cols of a row-major bf16 matrix with row stride ld, into compact fp32 (row stride cols).
void widen(const bf16* src, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::vector<float>& dst) {
  dst.resize(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < cols; ++j) dst[static_cast<std::size_t>(r * cols + j)] = src[r * ld + j].to_float();
}

// An epilogue that writes C from the result (runtime/gemm.h): it needs the result first, in fp32.
bool stores_through_epilogue(const GemmArgs& g) {
  return g.epilogue != GemmEpilogue::None && g.epilogue != GemmEpilogue::BiasGradA;
}

// One fp32 matrix product into an fp32 C (x's pointers, compact or not), then g's epilogue. The
// epilogues that store C start from an fp32 result with beta 0 (gemm() checked): the sgemm writes
// C itself and the epilogue rewrites it in place, unless C is DGelu's aux, which the epilogue
// still reads: then the result goes to scratch first.
void f32_gemm_with_epilogue(const GemmArgs& g, const Fp32Matrices& x, int threads) {
  if (!stores_through_epilogue(g)) {
    tiled_sgemm(g, 1, x, threads);
    return;
  }
  if (g.aux == static_cast<void*>(x.c)) {
    std::vector<float> result(static_cast<std::size_t>(g.m * g.n));
    tiled_sgemm(g, 1, {x.a, x.lda, x.b, x.ldb, result.data(), g.n}, threads);
    Cpu::store_epilogue(g, result.data(), g.n, threads);
    return;
  }
  tiled_sgemm(g, 1, x, threads);
  Cpu::store_epilogue(g, x.c, x.ldc, threads);
}

void bf16_gemm(const GemmArgs& g, int threads) {
  const std::int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const std::int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  const auto* a = static_cast<const bf16*>(g.a);
  const auto* b = static_cast<const bf16*>(g.b);
  std::vector<float> wa, wb, wc;
  for (std::int64_t i = 0; i < g.batch; ++i) {
    widen(a + i * g.stride_a, a_rows, a_cols, g.lda, wa);
    widen(b + i * g.stride_b, b_rows, b_cols, g.ldb, wb);
    if (g.c_type() == DType::F32) {
      f32_gemm_with_epilogue(
          g, {wa.data(), a_cols, wb.data(), b_cols, static_cast<float*>(g.c) + i * g.stride_c, g.ldc}, threads);
      continue;
    }
    GemmArgs one = g;  // this matrix's C, stored through the epilogue (None: rounded)
    one.c = static_cast<bf16*>(g.c) + i * g.stride_c;
    if (g.beta != 0.0f) {
      widen(static_cast<const bf16*>(one.c), g.m, g.n, g.ldc, wc);
    } else {
      wc.assign(static_cast<std::size_t>(g.m * g.n), 0.0f);  // BLAS ignores C when beta is 0: so do we
    }
    tiled_sgemm(g, 1, {wa.data(), a_cols, wb.data(), b_cols, wc.data(), g.n}, threads);
    Cpu::store_epilogue(one, wc.data(), g.n, threads);
  }
}

}  // namespace

void Cpu::gemm(const GemmArgs& g, int threads) {
  MT_CHECK(g.m <= INT_MAX && g.n <= INT_MAX && g.k <= INT_MAX && g.lda <= INT_MAX && g.ldb <= INT_MAX &&
               g.ldc <= INT_MAX,
           "GEMM dimension exceeds the 32-bit BLAS interface");
  threads = std::max(threads, 1);
  if (g.dtype == DType::BF16) {
    bf16_gemm(g, threads);
  } else {
    MT_CHECK(g.dtype == DType::F32 && g.c_type() == DType::F32, "the CPU GEMM takes fp32 or bf16 inputs, not ",
             dtype_name(g.dtype), " into ", dtype_name(g.c_type()));
    const Fp32Matrices x{static_cast<const float*>(g.a), g.lda, static_cast<const float*>(g.b), g.ldb,
                         static_cast<float*>(g.c), g.ldc, g.stride_a, g.stride_b, g.stride_c};
    if (g.epilogue == GemmEpilogue::None) {
      tiled_sgemm(g, g.batch, x, threads);
    } else {
      f32_gemm_with_epilogue(g, x, threads);  // one matrix (gemm() checked)
    }
  }
  if (g.epilogue == GemmEpilogue::BiasGradA) Cpu::bias_grad_a(g, threads);
}

std::string Cpu::gemm_kernel_name() { return openblas_get_corename(); }

}  // namespace mt::backend
