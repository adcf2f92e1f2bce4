// Matrix multiply with a row-major API over OpenBLAS (CPU) and cuBLAS (CUDA):
//   C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C[m, n]
// where op(X) is X or its transpose. Strided batched: the same for `batch` matrices at fixed strides.
//
// Element types (A and B always share one):
//   fp32 x fp32 -> fp32
//   bf16 x bf16 -> fp32   (e.g. weight gradients of bf16 activations, accumulated into fp32)
//   bf16 x bf16 -> bf16   (e.g. bf16 activations)
// Products, sums, alpha and beta x C are always computed in fp32; a bf16 C is rounded (to nearest
// even) once, at the end. cuBLAS does this natively (CUBLAS_COMPUTE_32F). OpenBLAS has no bf16
// GEMM here, so the CPU widens bf16 operands (exactly) into fp32 scratch, runs sgemm and rounds:
// slow, but the same math, so the bf16 paths can be tested on a machine without a GPU.
// defines: GemmArgs, gemm, matmul, matmul_batched
#pragma once

#include <cstdint>
#include <optional>

#include "runtime/tensor.h"

namespace mt {

struct GemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* a = nullptr;
  std::int64_t lda = 0;  // row stride of A as stored (k, or m when trans_a)
  const void* b = nullptr;
  std::int64_t ldb = 0;  // row stride of B as stored (n, or k when trans_b)
  void* c = nullptr;
  std::int64_t ldc = 0;  // row stride of C (n)
  std::int64_t batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between matrices of a batch
  DType dtype = DType::F32;             // of A and B
  std::optional<DType> c_dtype;         // of C; unset: the same as A and B
  DType c_type() const { return c_dtype.value_or(dtype); }
};

// Raw form: pointers must live on ctx's device.
void gemm(DeviceContext& ctx, const GemmArgs& args);

// c = alpha * op(a) @ op(b) + beta * c for 2-D tensors, of the dtypes listed above.
void matmul(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
            float alpha = 1.0f, float beta = 0.0f);
// The same for 3-D tensors [batch, rows, cols], matrix by matrix.
void matmul_batched(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                    float alpha = 1.0f, float beta = 0.0f);

}  // namespace mt
