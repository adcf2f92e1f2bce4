// What a context's opaque BLAS handle is on CUDA (runtime/blas_backend.h): the cuBLAS handle on the
// context's stream and, when the context takes the cuBLASLt path, its cuBLASLt state, made on the
// first GEMM that needs it. Shared by runtime/cuda/gemm.cu and runtime/cuda/gemm_lt.cu only.
// defines: CudaBlas, LtGemm
#pragma once

#include <cublas_v2.h>

#include <memory>

#include "runtime/gemm.h"

namespace mt::blas {

// cuBLASLt with a 32 MiB workspace and one heuristic answer cached per problem (runtime/cuda/gemm_lt.cu).
class LtGemm {
 public:
  LtGemm(int device, cudaStream_t stream);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  void run(const GemmArgs& g);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct CudaBlas {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  bool use_lt = false;
  std::unique_ptr<LtGemm> lt;
};

}  // namespace mt::blas
