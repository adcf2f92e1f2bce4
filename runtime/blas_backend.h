// What each BLAS backend implements: runtime/gemm_cpu.cpp and runtime/gemm_epilogue_cpu.cpp
// (OpenBLAS), runtime/cuda/gemm.cu, gemm_lt.cu and bias_grad.cu (cuBLAS, cuBLASLt), or
// runtime/cuda_stub.cpp where CUDA is not built.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/cuda_api.h"
#include "runtime/gemm.h"

namespace mt::blas {

// threads: how many share out the tiles of C (runtime/gemm_tiles.h); the bits do not depend on it.
void cpu_gemm(const GemmArgs& args, int threads);
// The epilogue of g (runtime/gemm.h) over the fp32 result acc [m, n] (row stride ld_acc), stored
// into g.c: acc may be g.c itself (fp32) except for DGelu with C == aux. Rows shared by threads.
void cpu_store_epilogue(const GemmArgs& g, const float* acc, std::int64_t ld_acc, int threads);
// bias_grad[m] += column sums of A as stored ([k, m], rows in order): BiasGradA.
void cpu_bias_grad_a(const GemmArgs& g, int threads);
// The name of the kernel OpenBLAS selected for this CPU ("Haswell", "SkylakeX", ...).
std::string cpu_gemm_kernel();

// The context's BLAS state on `stream`; use_lt: its GEMMs go through cuBLASLt (cuda_lt_gemm).
void* create_cuda_handle(int device, cuda::StreamHandle stream, bool use_lt);
void destroy_cuda_handle(void* handle);
// cuBLAS, no epilogue (gemm() runs the reference epilogues around it).
void cuda_gemm(void* handle, const GemmArgs& args);
bool cuda_uses_lt(void* handle);
// cuBLASLt with g's Bias, BiasGelu or DGelu epilogue (None, BiasGradA: the product alone); one
// matrix; C is not DGelu's aux (gemm() checked or made it so).
void cuda_lt_gemm(void* handle, const GemmArgs& args);
// BiasGradA's sum on the cuBLASLt path (runtime/cuda/bias_grad.cu): A's column sums by tiles of
// rows into a workspace of bias_grad_workspace(k, m) floats, folded in tile order onto bias_grad.
void cuda_bias_grad_tiles(void* handle, const GemmArgs& args, float* workspace);
// Tiles of at least 64 rows, at most 512 of them.
inline std::int64_t bias_grad_row_tiles(std::int64_t rows) {
  const std::int64_t tiles = (rows + 63) / 64;
  return tiles < 512 ? (tiles > 0 ? tiles : 1) : 512;
}
inline std::int64_t bias_grad_workspace(std::int64_t rows, std::int64_t cols) { return bias_grad_row_tiles(rows) * cols; }

}  // namespace mt::blas
