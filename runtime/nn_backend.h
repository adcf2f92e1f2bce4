// How the transformer ops of runtime/nn_functors.h reach a backend: one entry point per op and
// activation type, defined for the CPU in runtime/nn_kernels_cpu.cpp (OpenMP over units) and for
// CUDA in runtime/cuda/nn_kernels.cu or, without CUDA, in runtime/nn_cuda_stub.cpp.
#pragma once

#include "runtime/cuda_api.h"
#include "runtime/nn_functors.h"

// X(op) for every op of nn_functors.h.
#define MT_NN_OPS(X)                                                                                \
  X(EmbeddingForward) X(EmbeddingTokenOrder) X(EmbeddingBackwardTokens) X(EmbeddingBackwardPositions) \
  X(LayerNormForward) X(LayerNormBackwardInput) X(LayerNormBackwardParams) X(BroadcastRows)           \
  X(ColumnSum) X(GeluForward) X(GeluBackward) X(AttentionForward) X(AttentionBackwardDots)             \
  X(AttentionBackwardSoftmax) X(AttentionBackwardQuery) X(AttentionBackwardKeyValue)                  \
  X(CrossEntropyForward) X(CrossEntropyBackward) X(SoftmaxRow) X(VocabParallelMax)                    \
  X(VocabParallelSumExp) X(VocabParallelTargetLogit) X(VocabParallelLoss)

namespace mt::backend {

struct CpuNn {
#define MT_NN_DECLARE_CPU_RUN(Op)                           \
  static void run(const nn_math::Op<float>& op, int threads); \
  static void run(const nn_math::Op<bf16>& op, int threads);
  MT_NN_OPS(MT_NN_DECLARE_CPU_RUN)
#undef MT_NN_DECLARE_CPU_RUN
};

struct CudaNn {
#define MT_NN_DECLARE_RUN(Op)                                             \
  static void run(const nn_math::Op<float>& op, cuda::StreamHandle stream); \
  static void run(const nn_math::Op<bf16>& op, cuda::StreamHandle stream);
  MT_NN_OPS(MT_NN_DECLARE_RUN)
#undef MT_NN_DECLARE_RUN
};

}  // namespace mt::backend
