// The optimizer family on CUDA: AdamW as a grid-stride kernel over adamw_update (runtime/ops/optimizer.h), the function the CPU loop
// runs, so the GPU update matches the CPU one bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/backend.h"  // defines: Cuda::adamw
#include "runtime/cuda/cuda_check.h"    // defines: cuda_error_text

namespace mt::backend {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 4096;  // larger inputs loop (grid stride)

__global__ void adamw_kernel(AdamWStepArgs args, float* param, const float* grad, float* m, float* v,
                             std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const AdamWElement e = adamw_update(param[i], grad[i], m[i], v[i], args);
    param[i] = e.param;
    m[i] = e.m;
    v[i] = e.v;
  }
}

}  // namespace

void Cuda::adamw(const AdamWStepArgs& args, float* param, const float* grad, float* m, float* v, std::int64_t n,
                  cuda::StreamHandle stream) {
  if (n <= 0) return;
  const auto blocks = static_cast<unsigned int>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
  adamw_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args, param, grad, m, v, n);
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) MT_FAIL("CUDA error launching adamw_kernel: ", cuda::cuda_error_text(rc));
}

}  // namespace mt::backend
