// CUDA side of the transformer ops: one thread per unit of work of the shared functors
// (runtime/nn_functors.h), so the GPU computes the same function as the CPU, unit by unit.
// Simple and exact rather than fast: the forward and row ops run one thread per row (RoPE one per
// rotated pair, SwiGLU one per element); the backward ops that sum over many rows (attention,
// embeddings, the column sums of parameter gradients, RMSNorm's among them) run one thread per
// output column (width 1 in runtime/nn_functors.h). The layernorm backward has kernels cut for the
// GPU instead (runtime/cuda/layernorm_backward.cu); the norms' forward, the causal softmax and the
// fused classifier have such kernels too (CudaRows), used only where the context turns them on.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/cuda/cuda_check.h"
#include "runtime/error.h"
#include "runtime/nn_backend.h"

namespace mt::backend {
namespace {

constexpr int kThreads = 128;
constexpr std::int64_t kMaxBlocks = 65535;

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
  if (rc != cudaSuccess) MT_FAIL("CUDA error launching a transformer kernel: ", cuda::cuda_error_text(rc));
}

}  // namespace

#define MT_NN_CUDA_RUN(Op)                                                                                   \
  void CudaNn::run(const nn_math::Op<float>& op, cuda::StreamHandle stream) { launch(op, stream); }           \
  void CudaNn::run(const nn_math::Op<bf16>& op, cuda::StreamHandle stream) { launch(op, stream); }
MT_NN_UNIT_OPS(MT_NN_CUDA_RUN)
#undef MT_NN_CUDA_RUN

}  // namespace mt::backend
