// The optimizer family on CUDA: AdamW as a grid-stride kernel over adamw_update (runtime/ops/optimizer.h), the function the CPU loop
// runs, so the GPU update matches the CPU one bit for bit. The reference launches once per tensor;
// the multi-tensor kernel (the family's fast kernel, off unless MESHTRAIN_CUDA_KERNELS names
// `optimizer`) walks a table of every tensor's chunks in one launch, a block per chunk.
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

// Block b takes chunks b, b + gridDim.x, ...; its threads stride through the chunk. Each element is
// one thread's, so the bits are the per-tensor kernel's (and the CPU's).
__global__ void adamw_multi_kernel(AdamWStepArgs args, const AdamWTensor* tensors, const AdamWChunk* chunks,
                                   std::int64_t num_chunks) {
  for (std::int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const AdamWChunk chunk = chunks[c];
    const AdamWTensor t = tensors[chunk.tensor];
    AdamWStepArgs a = args;
    a.weight_decay = t.weight_decay;
    for (std::int64_t i = chunk.begin + threadIdx.x; i < chunk.begin + chunk.numel; i += blockDim.x) {
      const AdamWElement e = adamw_update(t.param[i], t.grad[i], t.m[i], t.v[i], a);
      t.param[i] = e.param;
      t.m[i] = e.m;
      t.v[i] = e.v;
      if (t.param_bf16 != nullptr) t.param_bf16[i] = narrow_to<bf16>(e.param);
    }
  }
}

}  // namespace

void Cuda::adamw_multi(const AdamWStepArgs& args, const AdamWTensor* tensors, const AdamWChunk* chunks,
                       std::int64_t num_chunks, cuda::StreamHandle stream) {
  if (num_chunks <= 0) return;
  const auto blocks = static_cast<unsigned int>(std::min<std::int64_t>(num_chunks, kMaxBlocks));
  adamw_multi_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args, tensors, chunks, num_chunks);
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) MT_FAIL("CUDA error launching adamw_multi_kernel: ", cuda::cuda_error_text(rc));
}

void Cuda::adamw(const AdamWStepArgs& args, float* param, const float* grad, float* m, float* v, std::int64_t n,
                  cuda::StreamHandle stream) {
  if (n <= 0) return;
  const auto blocks = static_cast<unsigned int>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
  adamw_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args, param, grad, m, v, n);
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) MT_FAIL("CUDA error launching adamw_kernel: ", cuda::cuda_error_text(rc));
}

}  // namespace mt::backend
