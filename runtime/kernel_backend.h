// The kernels each backend implements on raw pointers: runtime/kernels_cpu.cpp and
// runtime/cuda/kernels.cu (or runtime/cuda_stub.cpp when CUDA is not built).
#pragma once

#include <cstdint>

#include "runtime/cuda_api.h"
#include "runtime/functors.h"

namespace mt::backend {

struct Cpu {
  static void fill(void* x, DType t, std::int64_t n, double value, int threads);
  static void binary(BinaryOp op, DType t, const void* a, const void* b, void* out, std::int64_t n, int threads);
  static void scale(void* x, DType t, std::int64_t n, double alpha, int threads);
  static void cast(const void* src, DType from, void* dst, DType to, std::int64_t n, int threads);
  static double reduce(ReduceKind kind, const void* x, DType t, std::int64_t n, int threads);
};

struct Cuda {
  static void fill(void* x, DType t, std::int64_t n, double value, cuda::StreamHandle s);
  static void binary(BinaryOp op, DType t, const void* a, const void* b, void* out, std::int64_t n,
                     cuda::StreamHandle s);
  static void scale(void* x, DType t, std::int64_t n, double alpha, cuda::StreamHandle s);
  static void cast(const void* src, DType from, void* dst, DType to, std::int64_t n, cuda::StreamHandle s);
  static double reduce(ReduceKind kind, const void* x, DType t, std::int64_t n, cuda::StreamHandle s);
};

}  // namespace mt::backend
