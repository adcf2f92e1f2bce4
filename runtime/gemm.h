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
//
// Epilogues: what a linear layer does around its GEMM, done on the GEMM's fp32 result before it is
// stored (and rounded, for a bf16 C) instead of as passes of their own. The CPU runs them as loops
// over the result after the sgemm (runtime/cpu/gemm.cpp, math in runtime/ops/gemm.h); CUDA
// through cuBLASLt's epilogues (runtime/cuda/gemm.cu) or, by default until a GPU has validated
// that path, as the separate kernels they replace (runtime/gemm.cpp).
// defines: GemmEpilogue, gemm_epilogue_name, GemmArgs, CudaGemmPath, cuda_gemm_path_from_env, gemm,
//          MatmulEpilogue, matmul, matmul_batched
#pragma once

#include <cstdint>
#include <optional>

#include "runtime/tensor.h"

namespace mt {

// C's rows are the GEMM's m, its columns n; `acc` is op(A) op(B) in fp32, `round` rounding to C's dtype.
enum class GemmEpilogue {
  None,
  Bias,      // C = round(acc + bias[n])
  BiasGelu,  // aux = round(acc + bias[n]) (bias optional), C = round(gelu(aux)): the GELU of the
             // stored pre-activation, so gelu_forward on aux later (a recomputation) repeats C
  DGelu,     // C = round(gelu'(aux) * acc): aux the pre-activation; C may be aux itself
  BiasGradA, // C as with None, and bias_grad[m] += sum over k of op(A)[m, k] (A stored [k, m],
             // trans_a: its column sums, rows in order): a linear layer's dbias next to its dweight
};
const char* gemm_epilogue_name(GemmEpilogue e);

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
  // An epilogue takes one matrix (batch 1). Bias, BiasGelu and DGelu want beta 0 and a compact C
  // (ldc == n); aux is a compact [m, n] of C's dtype; bias and bias_grad are fp32.
  GemmEpilogue epilogue = GemmEpilogue::None;
  const float* bias = nullptr;   // [n]: Bias, BiasGelu
  void* aux = nullptr;           // [m, n]: written by BiasGelu, read by DGelu
  float* bias_grad = nullptr;    // [m]: BiasGradA
};

// How CUDA runs GEMMs: cuBLAS with the epilogues as kernels of their own (the default), or
// cuBLASLt with its fused epilogues. MESHTRAIN_GEMM=cublas|cublaslt, read when a CUDA context
// makes its BLAS handle; anything else is an error naming the variable. The CPU ignores it.
enum class CudaGemmPath { Cublas, CublasLt };
CudaGemmPath cuda_gemm_path_from_env();

// Raw form: pointers must live on ctx's device.
void gemm(DeviceContext& ctx, const GemmArgs& args);

// An epilogue for matmul, with its tensors (see GemmEpilogue).
struct MatmulEpilogue {
  GemmEpilogue kind = GemmEpilogue::None;
  const Tensor* bias = nullptr;
  Tensor* aux = nullptr;
  Tensor* bias_grad = nullptr;

  static MatmulEpilogue with_bias(const Tensor& bias) { return {GemmEpilogue::Bias, &bias, nullptr, nullptr}; }
  // bias may be null: the GELU alone.
  static MatmulEpilogue bias_gelu(const Tensor* bias, Tensor& pre) { return {GemmEpilogue::BiasGelu, bias, &pre, nullptr}; }
  static MatmulEpilogue dgelu(Tensor& pre) { return {GemmEpilogue::DGelu, nullptr, &pre, nullptr}; }
  static MatmulEpilogue bias_grad_of_a(Tensor& dbias) { return {GemmEpilogue::BiasGradA, nullptr, nullptr, &dbias}; }
};

// c = alpha * op(a) @ op(b) + beta * c for 2-D tensors, of the dtypes listed above, then the epilogue.
void matmul(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
            float alpha = 1.0f, float beta = 0.0f, const MatmulEpilogue& epilogue = {});
// The same for 3-D tensors [batch, rows, cols], matrix by matrix.
void matmul_batched(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                    float alpha = 1.0f, float beta = 0.0f);

}  // namespace mt
