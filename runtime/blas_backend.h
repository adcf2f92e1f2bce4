// What each BLAS backend implements: runtime/gemm_cpu.cpp (OpenBLAS) and runtime/cuda/gemm.cu
// (cuBLAS), or runtime/cuda_stub.cpp where CUDA is not built.
#pragma once

#include "runtime/cuda_api.h"
#include "runtime/gemm.h"

namespace mt::blas {

void set_cpu_threads(int threads);
void cpu_gemm(const GemmArgs& args);

void* create_cuda_handle(int device, cuda::StreamHandle stream);
void destroy_cuda_handle(void* handle);
void cuda_gemm(void* handle, const GemmArgs& args);

}  // namespace mt::blas
