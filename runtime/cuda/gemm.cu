// cuBLAS behind the row-major GEMM API (runtime/gemm.h).
//
// cuBLAS is column-major. A row-major matrix X[r, c] with row stride ld is, read column-major,
// X^T[c, r] with the same ld. So the row-major C = op(A) op(B) is the column-major
//   C^T[n, m] = op(B)^T[n, k] * op(A)^T[k, m],
// i.e. cuBLAS called with the operands swapped: (op_b, op_a, n, m, k, B, ldb, A, lda, C, ldc),
// each op being "transpose" exactly when the row-major API asked for it.
//
// One call covers every case: cublasGemmStridedBatchedEx (batch 1 included). fp32 computes with
// CUBLAS_COMPUTE_32F and the default math mode, which never down-converts to TF32, so results are
// comparable to the CPU's sgemm; bf16 inputs and outputs also accumulate in fp32 (reductions of
// partial results included: CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION). bf16 A and B may
// write a bf16 C or accumulate into an fp32 C (Ctype CUDA_R_32F), both with CUBLAS_COMPUTE_32F and
// fp32 alpha and beta; gemm() has checked the combination.
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <memory>

#include "runtime/blas_backend.h"
#include "runtime/cuda/cuda_blas.h"
#include "runtime/cuda/cuda_check.h"

namespace mt::blas {
namespace {
CudaBlas& to_blas(void* h) {
  MT_CHECK(h != nullptr, "CUDA GEMM without a BLAS handle");
  return *static_cast<CudaBlas*>(h);
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::I32: break;
  }
  MT_FAIL("cuBLAS GEMM on ", dtype_name(t), " is not supported (fp32 and bf16 only)");
}
}  // namespace

void* create_cuda_handle(int device, cuda::StreamHandle stream, bool use_lt) {
  MT_CUDA_CHECK(cudaSetDevice(device));  // the handle belongs to the current device
  auto blas = std::make_unique<CudaBlas>();
  blas->stream = static_cast<cudaStream_t>(stream);
  blas->device = device;
  blas->use_lt = use_lt;
  MT_CUBLAS_CHECK(cublasCreate(&blas->handle));
  try {
    MT_CUBLAS_CHECK(cublasSetStream(blas->handle, blas->stream));
    // Stated rather than inherited: no TF32 or emulated fp32 paths, and split-k partial sums of
    // a bf16 GEMM are added in fp32, not rounded to bf16 first.
    MT_CUBLAS_CHECK(cublasSetMathMode(
        blas->handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  } catch (...) {
    cublasDestroy(blas->handle);
    throw;
  }
  return blas.release();
}

void destroy_cuda_handle(void* handle) {
  // Runs in DeviceContext's destructor: report, never throw.
  std::unique_ptr<CudaBlas> blas(static_cast<CudaBlas*>(handle));
  blas->lt.reset();
  const cublasStatus_t rc = cublasDestroy(blas->handle);
  if (rc != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: warning: cuBLAS error in cublasDestroy: %s (%s)\n",
                 describe_location(std::source_location::current()).c_str(), cublasGetStatusName(rc),
                 cublasGetStatusString(rc));
  }
}

bool cuda_uses_lt(void* handle) { return to_blas(handle).use_lt; }

void cuda_lt_gemm(void* handle, const GemmArgs& g) {
  CudaBlas& blas = to_blas(handle);
  if (!blas.lt) blas.lt = std::make_unique<LtGemm>(blas.device, blas.stream);
  blas.lt->run(g);
}

void cuda_gemm(void* handle, const GemmArgs& g) {
  MT_CHECK(g.m <= INT_MAX && g.n <= INT_MAX && g.k <= INT_MAX && g.lda <= INT_MAX && g.ldb <= INT_MAX &&
               g.ldc <= INT_MAX && g.batch <= INT_MAX,
           "GEMM dimension exceeds the 32-bit cuBLAS interface: m=", g.m, " n=", g.n, " k=", g.k,
           " batch=", g.batch);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const cudaDataType_t ab_type = cuda_type(g.dtype);
  const cudaDataType_t c_type = cuda_type(g.c_type());
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // cuBLAS checks ld >= max(1, rows) even when a matrix is empty (k == 0); with k == 0 it then
  // computes C = beta * C, as BLAS does.
  const int lda = static_cast<int>(std::max<std::int64_t>(g.lda, 1));
  const int ldb = static_cast<int>(std::max<std::int64_t>(g.ldb, 1));
  const int ldc = static_cast<int>(std::max<std::int64_t>(g.ldc, 1));
  const float alpha = g.alpha;  // host scalars (the default pointer mode), fp32 for COMPUTE_32F
  const float beta = g.beta;
  MT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      to_blas(handle).handle, op_b, op_a, static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k), &alpha,
      g.b, ab_type, ldb, static_cast<long long>(g.stride_b),  //
      g.a, ab_type, lda, static_cast<long long>(g.stride_a),  //
      &beta, g.c, c_type, ldc, static_cast<long long>(g.stride_c), static_cast<int>(g.batch), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace mt::blas
