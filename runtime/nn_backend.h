// How the transformer ops of runtime/nn_functors.h and runtime/attention_functors.h reach a
// backend: one entry point per op and activation type, defined for the CPU in
// runtime/nn_kernels_cpu.cpp (OpenMP over units) and for CUDA in runtime/cuda/nn_kernels.cu and runtime/cuda/layernorm_backward.cu or, without CUDA, in
// runtime/nn_cuda_stub.cpp. A few ops also have GPU-shaped CUDA kernels (CudaRows), used in place of
// the unit kernels where the context's CudaKernels turn their family on (runtime/nn_run.h).
// defines: MT_NN_UNIT_OPS, MT_NN_OPS, MT_NN_ROW_OPS, CpuNn, CudaNn, CudaRows, RowKernelOf,
//          kLayerNormTileRows, layernorm_row_tiles, layernorm_params_workspace,
//          kRowWarpsPerBlock, kRowMaxBlocks, kSoftmaxWarpMaxColumns, kSoftmaxBlockThreads,
//          kClassifierThreads, kClassifierMaxBlocks
#pragma once

#include "runtime/attention_functors.h"
#include "runtime/cuda_api.h"
#include "runtime/cuda_kernel_choice.h"
#include "runtime/nn_functors.h"

// X(op) for every op of nn_functors.h and attention_functors.h that CUDA runs as the CPU does, one thread per unit.
#define MT_NN_UNIT_OPS(X)                                                                           \
  X(EmbeddingForward) X(EmbeddingTokenOrder) X(EmbeddingBackwardTokens) X(EmbeddingBackwardPositions) \
  X(LayerNormForward) X(RmsNormForward) X(RmsNormBackwardInput) X(RmsNormBackwardParams)              \
  X(BroadcastRows) X(ColumnSum) X(GeluForward) X(GeluBackward) X(Rope) X(SwigluForward)                \
  X(SwigluBackward) X(AttentionForward) X(AttentionBackwardDots)                                      \
  X(AttentionBackwardSoftmax) X(AttentionBackwardQuery) X(AttentionBackwardKeyValue)                  \
  X(CrossEntropyForward) X(CrossEntropyBackward) X(CrossEntropyFused) X(SoftmaxRow) X(VocabParallelMax) \
  X(VocabParallelSumExp) X(VocabParallelTargetLogit) X(VocabParallelLoss)                             \
  X(CausalSoftmaxForward) X(CausalSoftmaxBackward) X(StoreColumns)
// X(op) for every op of nn_functors.h: the CPU runs them all unit by unit.
#define MT_NN_OPS(X) MT_NN_UNIT_OPS(X) X(LayerNormBackwardInput) X(LayerNormBackwardParams)

namespace mt::backend {

// The layernorm parameter gradients on CUDA: rows cut into tiles of at most kLayerNormTileRows
// (more per tile past kLayerNormMaxTiles tiles), each tile's column sums of dout * norm and dout
// written to a workspace, then folded over the tiles in order.
inline constexpr std::int64_t kLayerNormTileRows = 64, kLayerNormMaxTiles = 512;
inline std::int64_t layernorm_row_tiles(std::int64_t rows) {
  const std::int64_t tiles = (rows + kLayerNormTileRows - 1) / kLayerNormTileRows;
  return tiles < kLayerNormMaxTiles ? (tiles > 0 ? tiles : 1) : kLayerNormMaxTiles;
}
// Floats of that workspace: two partial sums per tile and column.
inline std::int64_t layernorm_params_workspace(std::int64_t rows, std::int64_t channels) {
  return 2 * layernorm_row_tiles(rows) * channels;
}

// X(op, family) for every op with a GPU-shaped kernel (CudaRows) besides its unit kernel.
#define MT_NN_ROW_OPS(X)                                                                        \
  X(LayerNormForward, Norms) X(RmsNormForward, Norms) X(CausalSoftmaxForward, Softmax)          \
  X(CausalSoftmaxBackward, Softmax) X(CrossEntropyFused, Classifier)

// The launch shapes of those kernels, here so that tests can size problems past them. Norms and the
// causal softmax: a warp per row, kRowWarpsPerBlock rows per block, at most kRowMaxBlocks blocks
// (more rows loop); rows of more than kSoftmaxWarpMaxColumns take a block of kSoftmaxBlockThreads
// each. The classifier: a block of kClassifierThreads per row, at most kClassifierMaxBlocks blocks.
inline constexpr int kRowWarpsPerBlock = 4;
inline constexpr std::int64_t kRowMaxBlocks = 2048;
inline constexpr std::int64_t kSoftmaxWarpMaxColumns = 2048;
inline constexpr int kSoftmaxBlockThreads = 256;
inline constexpr int kClassifierThreads = 512;
inline constexpr std::int64_t kClassifierMaxBlocks = 1024;

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
  MT_NN_UNIT_OPS(MT_NN_DECLARE_RUN)
  MT_NN_DECLARE_RUN(LayerNormBackwardInput)  // a warp per row (runtime/cuda/layernorm_backward.cu)
#undef MT_NN_DECLARE_RUN
  // `workspace`: layernorm_params_workspace(op.rows, op.channels) floats on the device, free until
  // the kernels are done (stream order).
  static void run(const nn_math::LayerNormBackwardParams<float>& op, float* workspace, cuda::StreamHandle stream);
  static void run(const nn_math::LayerNormBackwardParams<bf16>& op, float* workspace, cuda::StreamHandle stream);
};

// The GPU-shaped kernels: a warp per row for the norms (runtime/cuda/norms.cu), a warp or a block
// per row for the causal softmax and its backward (runtime/cuda/softmax.cu), a block per row for the
// fused classifier (runtime/cuda/classifier.cu). Each computes its op's function (the same formulas,
// fp32 arithmetic, one rounding into T at the store), only its fp32 sums in another fixed order: a
// run repeats its bits, and agrees with the unit kernel within the rounding of those sums.
struct CudaRows {
#define MT_NN_DECLARE_ROWS(Op, Family)                                    \
  static void run(const nn_math::Op<float>& op, cuda::StreamHandle stream); \
  static void run(const nn_math::Op<bf16>& op, cuda::StreamHandle stream);
  MT_NN_ROW_OPS(MT_NN_DECLARE_ROWS)
#undef MT_NN_DECLARE_ROWS
};

// RowKernelOf<Op>::family: the CudaKernels family of an op that CudaRows runs; `exists` false for the others.
template <template <class> class Op>
struct RowKernelOf {
  static constexpr bool exists = false;
};
#define MT_NN_ROW_KERNEL_OF(Op, Family)                                 \
  template <>                                                           \
  struct RowKernelOf<nn_math::Op> {                                     \
    static constexpr bool exists = true;                                \
    static constexpr CudaKernelFamily family = CudaKernelFamily::Family; \
  };
MT_NN_ROW_OPS(MT_NN_ROW_KERNEL_OF)
#undef MT_NN_ROW_KERNEL_OF

}  // namespace mt::backend
