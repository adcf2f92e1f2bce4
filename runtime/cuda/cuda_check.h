// Error checks for CUDA runtime and cuBLAS return codes: a failure throws mt::Error naming the
// call, the error's name and text, file:line, rank and host (MT_FAIL adds the last three).
// MT_CUDA_CHECK_NOTHROW is for release paths (destructors): it logs instead of throwing, because a
// throw there would std::terminate and hide the error that started the unwinding.
// defines: MT_CUDA_CHECK, MT_CUBLAS_CHECK, MT_CUDA_CHECK_NOTHROW, cuda_error_text
#pragma once

#include <cuda_runtime_api.h>  // cudaError_t, cudaGetErrorName, cudaGetErrorString, cudaGetLastError

#include <cstdio>
#include <source_location>
#include <string>

#include "runtime/error.h"

namespace mt::cuda {

// "cudaErrorInsufficientDriver (CUDA driver version is insufficient for CUDA runtime version)"
inline std::string cuda_error_text(cudaError_t rc) {
  return std::string(cudaGetErrorName(rc)) + " (" + cudaGetErrorString(rc) + ")";
}

// Logs a failed release to stderr. cudaErrorCudartUnloading is expected when a static object
// frees device memory after the CUDA runtime has shut down at exit, and is not reported.
inline void report_release_error(cudaError_t rc, const char* call, const std::source_location& where) {
  (void)cudaGetLastError();  // do not let a later check pick this error up as its own
  if (rc == cudaErrorCudartUnloading) return;
  std::fprintf(stderr, "%s: warning: CUDA error in %s: %s\n", describe_location(where).c_str(), call,
               cuda_error_text(rc).c_str());
}

}  // namespace mt::cuda

// A failed call also leaves its code as the thread's "last error"; clear it so that the next
// cudaGetLastError (after a kernel launch) does not report this failure a second time.
#define MT_CUDA_CHECK(call)                                                                \
  do {                                                                                     \
    const cudaError_t mt_cuda_rc_ = (call);                                                \
    if (mt_cuda_rc_ != cudaSuccess) {                                                      \
      (void)cudaGetLastError();                                                            \
      MT_FAIL("CUDA error in ", #call, ": ", ::mt::cuda::cuda_error_text(mt_cuda_rc_));    \
    }                                                                                      \
  } while (0)

#define MT_CUDA_CHECK_NOTHROW(call)                                                                    \
  do {                                                                                                 \
    const cudaError_t mt_cuda_rc_ = (call);                                                            \
    if (mt_cuda_rc_ != cudaSuccess) {                                                                  \
      ::mt::cuda::report_release_error(mt_cuda_rc_, #call, std::source_location::current());           \
    }                                                                                                  \
  } while (0)

// Needs <cublas_v2.h> where it is used (cublasGetStatusName, cublasGetStatusString).
#define MT_CUBLAS_CHECK(call)                                                                         \
  do {                                                                                                \
    const cublasStatus_t mt_cublas_rc_ = (call);                                                      \
    if (mt_cublas_rc_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      MT_FAIL("cuBLAS error in ", #call, ": ", cublasGetStatusName(mt_cublas_rc_), " (",               \
              cublasGetStatusString(mt_cublas_rc_), ")");                                             \
    }                                                                                                 \
  } while (0)
