// The one seam between the ops and the devices: what the CPU backend (runtime/cpu/) and the CUDA
// backend (runtime/cuda/, or runtime/cuda_stub.cpp when CUDA is not built) implement, family by
// family (runtime/ops/<family>.h: the reference math and the lists of its ops). The CPU runs the
// reference; CUDA runs every unit op one thread per unit and, for the ops a family lists as fast, a
// kernel cut for the GPU (run_fast), chosen per family by the context's CudaKernels.
//
// Adding a fast CUDA kernel for an op: write it in runtime/cuda/<family>.cu as Cuda::run_fast, list
// the op in its family's MT_<FAMILY>_FAST_OPS, and test it against the reference on the GPU and
// against the CPU within the op's tolerance (runtime/ops/tolerance.h). Nothing else changes: the entry
// point's nn::run (runtime/nn_run.h) finds it, and MESHTRAIN_CUDA_KERNELS names its family.
// defines: MT_UNIT_OPS, MT_CPU_UNIT_OPS, MT_FAST_OPS, Cpu, Cuda, FastKernelOf, kLayerNormTileRows,
//          layernorm_row_tiles, layernorm_params_workspace, bias_grad_row_tiles, bias_grad_workspace,
//          kRowWarpsPerBlock, kRowMaxBlocks, kSoftmaxWarpMaxColumns, kSoftmaxBlockThreads,
//          kClassifierThreads, kClassifierMaxBlocks
#pragma once

#include <cstdint>
#include <string>

#include "runtime/cuda_api.h"
#include "runtime/cuda_kernel_choice.h"
#include "runtime/gemm.h"
#include "runtime/ops/activations.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/block_attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/norms.h"
#include "runtime/ops/optimizer.h"

// X(op) for every op that CUDA runs as the CPU does, one thread per unit.
#define MT_UNIT_OPS(X)                                                                           \
  MT_EMBEDDING_UNIT_OPS(X) MT_NORMS_UNIT_OPS(X) MT_ACTIVATIONS_UNIT_OPS(X) MT_ATTENTION_UNIT_OPS(X) \
  MT_BLOCK_ATTENTION_UNIT_OPS(X) MT_LOSS_UNIT_OPS(X) MT_ELEMENTWISE_UNIT_OPS(X)
// X(op) for every op the CPU runs unit by unit: those, and the ones CUDA has kernels of its own for.
#define MT_CPU_UNIT_OPS(X) MT_UNIT_OPS(X) MT_NORMS_OWN_CUDA_OPS(X)
// X(op, family) for every op with a kernel cut for the GPU besides its unit kernel.
#define MT_FAST_OPS(X)                                                                           \
  MT_EMBEDDING_FAST_OPS(X) MT_NORMS_FAST_OPS(X) MT_ACTIVATIONS_FAST_OPS(X) MT_ATTENTION_FAST_OPS(X) \
  MT_LOSS_FAST_OPS(X) MT_ELEMENTWISE_FAST_OPS(X)

namespace mt::backend {

// Every op states its tolerance (an op without one is a compile error here).
#define MT_STATES_TOLERANCE(Op) static_assert(nn_math::tolerance_of<nn_math::Op>().why != nullptr);
MT_CPU_UNIT_OPS(MT_STATES_TOLERANCE)
#undef MT_STATES_TOLERANCE

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

// The GEMM's bias gradient on the cuBLASLt path: tiles of at least 64 rows, at most 512 of them,
// each tile's column sums into a workspace of bias_grad_workspace(k, m) floats, folded in tile order.
inline std::int64_t bias_grad_row_tiles(std::int64_t rows) {
  const std::int64_t tiles = (rows + 63) / 64;
  return tiles < 512 ? (tiles > 0 ? tiles : 1) : 512;
}
inline std::int64_t bias_grad_workspace(std::int64_t rows, std::int64_t cols) { return bias_grad_row_tiles(rows) * cols; }

// The launch shapes of the fast row kernels, here so that tests can size problems past them. Norms
// and the causal softmax: a warp per row, kRowWarpsPerBlock rows per block, at most kRowMaxBlocks
// blocks (more rows loop); rows of more than kSoftmaxWarpMaxColumns take a block of
// kSoftmaxBlockThreads each. The classifier: a block of kClassifierThreads per row, at most
// kClassifierMaxBlocks blocks.
inline constexpr int kRowWarpsPerBlock = 4;
inline constexpr std::int64_t kRowMaxBlocks = 2048;
inline constexpr std::int64_t kSoftmaxWarpMaxColumns = 2048;
inline constexpr int kSoftmaxBlockThreads = 256;
inline constexpr int kClassifierThreads = 512;
inline constexpr std::int64_t kClassifierMaxBlocks = 1024;

// The CPU: OpenMP loops over the reference (runtime/cpu/), OpenBLAS for the GEMM. `threads` share
// out the work; the bits never depend on their count.
struct Cpu {
  // Elementwise and reductions (runtime/cpu/elementwise.cpp).
  static void fill(void* x, DType t, std::int64_t n, double value, int threads);
  static void binary(BinaryOp op, DType t, const void* a, const void* b, void* out, std::int64_t n, int threads);
  static void scale(void* x, DType t, std::int64_t n, double alpha, int threads);
  static void cast(const void* src, DType from, void* dst, DType to, std::int64_t n, int threads);
  static double reduce(ReduceKind kind, const void* x, DType t, std::int64_t n, int threads);

  // Every unit op, unit by unit (runtime/cpu/units.cpp).
#define MT_DECLARE_CPU_RUN(Op)                              \
  static void run(const nn_math::Op<float>& op, int threads); \
  static void run(const nn_math::Op<bf16>& op, int threads);
  MT_CPU_UNIT_OPS(MT_DECLARE_CPU_RUN)
#undef MT_DECLARE_CPU_RUN

  // GEMM (runtime/cpu/gemm.cpp): tiles of C whose shape depends on the problem alone
  // (runtime/gemm_tiles.h), each one single-threaded sgemm, then g's epilogue.
  static void gemm(const GemmArgs& g, int threads);
  // The epilogue of g over the fp32 result acc [m, n] (row stride ld_acc), stored into g.c: acc may
  // be g.c itself (fp32) except for DGelu with C == aux. Rows shared by threads
  // (runtime/cpu/gemm_epilogue.cpp).
  static void store_epilogue(const GemmArgs& g, const float* acc, std::int64_t ld_acc, int threads);
  // bias_grad[m] += column sums of A as stored ([k, m], rows in order): BiasGradA.
  static void bias_grad_a(const GemmArgs& g, int threads);
  // The name of the kernel OpenBLAS selected for this CPU ("Haswell", "SkylakeX", ...).
  static std::string gemm_kernel_name();

  // AdamW over fp32 arrays in place (runtime/cpu/optimizer.cpp).
  static void adamw(const AdamWStepArgs& args, float* param, const float* grad, float* m, float* v, std::int64_t n,
                    int threads);
  // AdamW over every chunk of a table of tensors in one parallel loop (each tensor's weight decay its own).
  static void adamw_multi(const AdamWStepArgs& args, const AdamWTensor* tensors, const AdamWChunk* chunks,
                          std::int64_t num_chunks, int threads);
};

// CUDA: work queued on `stream`; the current device must be the stream's.
struct Cuda {
  // Elementwise and reductions (runtime/cuda/elementwise.cu). reduce waits for its result.
  static void fill(void* x, DType t, std::int64_t n, double value, cuda::StreamHandle s);
  static void binary(BinaryOp op, DType t, const void* a, const void* b, void* out, std::int64_t n,
                     cuda::StreamHandle s);
  static void scale(void* x, DType t, std::int64_t n, double alpha, cuda::StreamHandle s);
  static void cast(const void* src, DType from, void* dst, DType to, std::int64_t n, cuda::StreamHandle s);
  static double reduce(ReduceKind kind, const void* x, DType t, std::int64_t n, cuda::StreamHandle s);

  // The unit ops, one thread per unit (each family's .cu, through runtime/cuda/units.cuh).
#define MT_DECLARE_CUDA_RUN(Op)                                             \
  static void run(const nn_math::Op<float>& op, cuda::StreamHandle stream); \
  static void run(const nn_math::Op<bf16>& op, cuda::StreamHandle stream);
  MT_UNIT_OPS(MT_DECLARE_CUDA_RUN)
  MT_DECLARE_CUDA_RUN(LayerNormBackwardInput)  // a warp per row (runtime/cuda/norms.cu)
#undef MT_DECLARE_CUDA_RUN
  // `workspace`: layernorm_params_workspace(op.rows, op.channels) floats on the device, free until
  // the kernels are done (stream order).
  static void run(const nn_math::LayerNormBackwardParams<float>& op, float* workspace, cuda::StreamHandle stream);
  static void run(const nn_math::LayerNormBackwardParams<bf16>& op, float* workspace, cuda::StreamHandle stream);

  // The kernels cut for the GPU. Each computes its op's function (the same formulas, fp32
  // arithmetic, one rounding into T at the store) with its fp32 sums in another fixed order: a run
  // repeats its bits, and agrees with the unit kernel within the op's tolerance.
#define MT_DECLARE_FAST_RUN(Op, Family)                                          \
  static void run_fast(const nn_math::Op<float>& op, cuda::StreamHandle stream); \
  static void run_fast(const nn_math::Op<bf16>& op, cuda::StreamHandle stream);
  MT_FAST_OPS(MT_DECLARE_FAST_RUN)
#undef MT_DECLARE_FAST_RUN

  // GEMM (runtime/cuda/gemm.cu): the context's BLAS state on `stream`; use_lt: its GEMMs go through
  // cuBLASLt (gemm_lt).
  static void* create_blas(int device, cuda::StreamHandle stream, bool use_lt);
  static void destroy_blas(void* handle);
  static bool uses_lt(void* handle);
  // cuBLAS, no epilogue (gemm() runs the reference epilogues around it).
  static void gemm(void* handle, const GemmArgs& g);
  // cuBLASLt with g's Bias, BiasGelu or DGelu epilogue (None, BiasGradA: the product alone); one
  // matrix; C is not DGelu's aux (gemm() checked or made it so).
  static void gemm_lt(void* handle, const GemmArgs& g);
  // BiasGradA's sum on the cuBLASLt path: A's column sums by tiles of rows into `workspace`
  // (bias_grad_workspace(k, m) floats), folded in tile order onto bias_grad.
  static void bias_grad_tiles(void* handle, const GemmArgs& g, float* workspace);

  // AdamW over fp32 arrays in place (runtime/cuda/optimizer.cu).
  static void adamw(const AdamWStepArgs& args, float* param, const float* grad, float* m, float* v, std::int64_t n,
                    cuda::StreamHandle stream);
  // Cpu::adamw_multi in one launch, a block per chunk; tensors and chunks are device memory
  // (uploaded once with the optimizer). The optimizer family's fast kernel (MT_OPTIMIZER_FAST_OPS).
  static void adamw_multi(const AdamWStepArgs& args, const AdamWTensor* tensors, const AdamWChunk* chunks,
                          std::int64_t num_chunks, cuda::StreamHandle stream);
};

// FastKernelOf<Op>::family: the CudaKernels family of an op with a fast kernel; `exists` false for the others.
template <template <class> class Op>
struct FastKernelOf {
  static constexpr bool exists = false;
};
#define MT_FAST_KERNEL_OF(Op, Family)                           \
  template <>                                                   \
  struct FastKernelOf<nn_math::Op> {                            \
    static constexpr bool exists = true;                        \
    static constexpr OpFamily family = OpFamily::Family;        \
  };
MT_FAST_OPS(MT_FAST_KERNEL_OF)
#undef MT_FAST_KERNEL_OF

}  // namespace mt::backend
