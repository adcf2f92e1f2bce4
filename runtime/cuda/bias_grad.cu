// The bias gradient of a BiasGradA GEMM (runtime/gemm.h) on the cuBLASLt path: the column sums of
// A stored [rows, cols], added onto an fp32 dbias. One thread per column over every row (the
// reference, ColumnSum) leaves most of a GPU idle at 768 columns and reads 8192 rows one after
// another; here a block takes 32 columns of a tile of rows, its 8 row lanes sum every 8th row of
// the tile, the lanes are added in shared memory in lane order and each tile's sums go to a
// workspace, which a second kernel folds in tile order onto dbias. Fixed order throughout (no
// float atomics): a run repeats bit for bit; the order is not the CPU's (rows one after another),
// so the two agree within fp32 rounding (runtime/tests/gemm_epilogue_test.cpp).
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/blas_backend.h"
#include "runtime/cuda/cuda_blas.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/functors.h"  // defines: widen

namespace mt::blas {
namespace {

constexpr int kColumns = 32;  // a warp across the columns: coalesced reads of a row
constexpr int kRowLanes = 8;

template <class T>
__global__ void column_sum_tiles(const T* a, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                 std::int64_t rows_per_tile, float* partial) {
  __shared__ float lanes[kRowLanes][kColumns];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * rows_per_tile;
  const std::int64_t r1 = r0 + rows_per_tile < rows ? r0 + rows_per_tile : rows;
  float sum = 0.0f;
  if (c < cols)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) sum += widen(a[r * ld + c]);
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int lane = 1; lane < kRowLanes; ++lane) sum += lanes[lane][threadIdx.x];
  partial[static_cast<std::int64_t>(blockIdx.y) * cols + c] = sum;
}

__global__ void fold_tiles(const float* partial, std::int64_t tiles, std::int64_t cols, float* dbias) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.0f;
  for (std::int64_t t = 0; t < tiles; ++t) sum += partial[t * cols + c];
  dbias[c] += sum;
}

void check_launch() {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) MT_FAIL("CUDA error launching the bias gradient kernel: ", cuda::cuda_error_text(rc));
}

template <class T>
void run(const GemmArgs& g, float* workspace, cudaStream_t stream) {
  const std::int64_t rows = g.k, cols = g.m;  // A stored [k, m] (gemm() checked)
  const std::int64_t tiles = bias_grad_row_tiles(rows);
  const std::int64_t rows_per_tile = (rows + tiles - 1) / tiles;
  const dim3 grid(static_cast<unsigned int>((cols + kColumns - 1) / kColumns), static_cast<unsigned int>(tiles));
  column_sum_tiles<<<grid, dim3(kColumns, kRowLanes), 0, stream>>>(static_cast<const T*>(g.a), rows, cols, g.lda,
                                                                     rows_per_tile, workspace);
  check_launch();
  constexpr int kFoldThreads = 128;
  fold_tiles<<<static_cast<unsigned int>((cols + kFoldThreads - 1) / kFoldThreads), kFoldThreads, 0, stream>>>(
      workspace, tiles, cols, g.bias_grad);
  check_launch();
}

}  // namespace

void cuda_bias_grad_tiles(void* handle, const GemmArgs& g, float* workspace) {
  if (g.m == 0 || g.k == 0) return;
  const cudaStream_t stream = static_cast<CudaBlas*>(handle)->stream;
  if (g.dtype == DType::BF16) {
    run<bf16>(g, workspace, stream);
  } else {
    run<float>(g, workspace, stream);
  }
}

}  // namespace mt::blas
