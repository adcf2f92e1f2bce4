// CUDA's reference kernels: one thread per unit of an op of runtime/ops/<family>.h, so the GPU
// computes the same function as the CPU, unit by unit. Simple and exact rather than fast: the
// forward and row ops run one thread per row (RoPE one per rotated pair, SwiGLU one per element);
// the backward ops that sum over many rows run one thread per output column (width 1). Each
// family's .cu instantiates its ops with MT_CUDA_UNIT_RUN.
// defines: units::launch, MT_CUDA_UNIT_RUN
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/error.h"

namespace mt::backend::units {

inline constexpr int kThreads = 128;
inline constexpr std::int64_t kMaxBlocks = 65535;

template <class Op>
__global__ void for_each_unit(Op op, std::int64_t units) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < units; i += stride)
    op(i);
}

template <class Op>
void launch(const Op& op, cuda::StreamHandle stream) {
  const std::int64_t units = op.count();
  if (units == 0) return;
  const auto blocks = static_cast<unsigned int>(std::min<std::int64_t>((units + kThreads - 1) / kThreads, kMaxBlocks));
  for_each_unit<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(op, units);
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) MT_FAIL("CUDA error launching a unit kernel: ", cuda::cuda_error_text(rc));
}

}  // namespace mt::backend::units

// Cuda::run for Op's fp32 and bf16 instantiations (inside namespace mt::backend).
#define MT_CUDA_UNIT_RUN(Op)                                                                          \
  void Cuda::run(const nn_math::Op<float>& op, cuda::StreamHandle stream) { units::launch(op, stream); } \
  void Cuda::run(const nn_math::Op<bf16>& op, cuda::StreamHandle stream) { units::launch(op, stream); }
