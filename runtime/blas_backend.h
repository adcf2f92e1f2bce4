// What each BLAS backend implements: runtime/gemm_cpu.cpp (OpenBLAS) and runtime/cuda/gemm.cu
// (cuBLAS), or runtime/cuda_stub.cpp where CUDA is not built.
#pragma once

#include <string>

#include "runtime/cuda_api.h"
#include "runtime/gemm.h"

namespace mt::blas {

// threads: how many share out the tiles of C (runtime/gemm_tiles.h); the bits do not depend on it.
void cpu_gemm(const GemmArgs& args, int threads);
// The name of the kernel OpenBLAS selected for this CPU ("Haswell", "SkylakeX", ...).
std::string cpu_gemm_kernel();

void* create_cuda_handle(int device, cuda::StreamHandle stream);
void destroy_cuda_handle(void* handle);
void cuda_gemm(void* handle, const GemmArgs& args);

}  // namespace mt::blas
