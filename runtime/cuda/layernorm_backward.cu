// CUDA kernels of the layernorm backward (runtime/nn_kernels.h), cut for the GPU rather than run
// one thread per unit of the shared functors:
//   - input gradient: one warp per row; each lane sums a strided share of the row's columns, a
//     butterfly of shuffles adds the lanes (every lane ends with the same sums), then the lanes
//     write the row's dx;
//   - parameter gradients: a block per (32-column tile, row tile); its 8 row lanes sum every 8th
//     row of the tile, the lanes are added in shared memory in lane order, and each tile's sums go
//     to a workspace; a second kernel folds the tiles in tile order onto dweight and dbias.
// Every sum has a fixed order (no float atomics), so a run repeats bit for bit; the order is not
// the CPU's (rows one after another), so the two agree within fp32 rounding.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/cuda/cuda_check.h"
#include "runtime/error.h"
#include "runtime/nn_backend.h"

namespace mt::backend {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;       // warps (rows at a time) per block of the input kernel
constexpr int kRowLanes = 8;           // row lanes per block of the parameter kernel
constexpr std::int64_t kMaxBlocks = 65535;

__device__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <class T>
__global__ void layernorm_backward_input_rows(nn_math::LayerNormBackwardInput<T> op) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock;
  const std::int64_t C = op.channels;
  for (std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; n < op.rows;
       n += warps) {
    const T* g = op.dout + n * C;
    const T* xr = op.x + n * C;
    const float m = op.mean[n], s = op.rstd[n];
    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
    for (std::int64_t c = lane; c < C; c += kWarp) {
      const float dnorm = op.weight[c] * widen(g[c]);
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * ((widen(xr[c]) - m) * s);
    }
    const float dnorm_mean = warp_sum(dnorm_sum) / static_cast<float>(C);
    const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / static_cast<float>(C);
    T* d = op.dx + n * C;
    for (std::int64_t c = lane; c < C; c += kWarp) {
      const float norm = (widen(xr[c]) - m) * s;
      const float dnorm = op.weight[c] * widen(g[c]);
      d[c] = narrow_to<T>(widen(d[c]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
    }
  }
}

// grid (column tiles, row tiles), block (kWarp columns, kRowLanes row lanes). partial_w and
// partial_b are [row tiles, C].
template <class T>
__global__ void layernorm_params_tiles(nn_math::LayerNormBackwardParams<T> op, std::int64_t rows_per_tile,
                                       float* partial_w, float* partial_b) {
  __shared__ float sum_w[kRowLanes][kWarp], sum_b[kRowLanes][kWarp];
  const std::int64_t C = op.channels;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kWarp + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * rows_per_tile;
  const std::int64_t r1 = r0 + rows_per_tile < op.rows ? r0 + rows_per_tile : op.rows;
  float w = 0.0f, b = 0.0f;
  if (c < C) {
    for (std::int64_t n = r0 + threadIdx.y; n < r1; n += kRowLanes) {
      const float g = widen(op.dout[n * C + c]);
      w += g * ((widen(op.x[n * C + c]) - op.mean[n]) * op.rstd[n]);
      b += g;
    }
  }
  sum_w[threadIdx.y][threadIdx.x] = w;
  sum_b[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int lane = 1; lane < kRowLanes; ++lane) {
      w += sum_w[lane][threadIdx.x];
      b += sum_b[lane][threadIdx.x];
    }
    partial_w[static_cast<std::int64_t>(blockIdx.y) * C + c] = w;
    partial_b[static_cast<std::int64_t>(blockIdx.y) * C + c] = b;
  }
}

// One thread per column: the tiles' sums in tile order, then onto the gradients.
__global__ void layernorm_params_fold(const float* partial_w, const float* partial_b, std::int64_t tiles,
                                      std::int64_t C, float* dweight, float* dbias) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float w = 0.0f, b = 0.0f;
  for (std::int64_t t = 0; t < tiles; ++t) {
    w += partial_w[t * C + c];
    b += partial_b[t * C + c];
  }
  dweight[c] += w;
  dbias[c] += b;
}

void check_launch() {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) MT_FAIL("CUDA error launching a layernorm backward kernel: ", cuda::cuda_error_text(rc));
}

template <class T>
void run_input(const nn_math::LayerNormBackwardInput<T>& op, cuda::StreamHandle stream) {
  if (op.rows == 0) return;
  const auto blocks =
      static_cast<unsigned int>(std::min<std::int64_t>((op.rows + kRowsPerBlock - 1) / kRowsPerBlock, kMaxBlocks));
  layernorm_backward_input_rows<<<blocks, kRowsPerBlock * kWarp, 0, static_cast<cudaStream_t>(stream)>>>(op);
  check_launch();
}

template <class T>
void run_params(const nn_math::LayerNormBackwardParams<T>& op, float* workspace, cuda::StreamHandle stream) {
  if (op.rows == 0 || op.channels == 0) return;
  const std::int64_t tiles = layernorm_row_tiles(op.rows), C = op.channels;
  const std::int64_t rows_per_tile = (op.rows + tiles - 1) / tiles;
  const dim3 grid(static_cast<unsigned int>((C + kWarp - 1) / kWarp), static_cast<unsigned int>(tiles));
  const dim3 block(kWarp, kRowLanes);
  const auto s = static_cast<cudaStream_t>(stream);
  float* partial_w = workspace;
  float* partial_b = workspace + tiles * C;
  layernorm_params_tiles<<<grid, block, 0, s>>>(op, rows_per_tile, partial_w, partial_b);
  check_launch();
  constexpr int kFoldThreads = 128;
  const auto fold_blocks = static_cast<unsigned int>((C + kFoldThreads - 1) / kFoldThreads);
  layernorm_params_fold<<<fold_blocks, kFoldThreads, 0, s>>>(partial_w, partial_b, tiles, C, op.dweight, op.dbias);
  check_launch();
}

}  // namespace

void CudaNn::run(const nn_math::LayerNormBackwardInput<float>& op, cuda::StreamHandle stream) { run_input(op, stream); }
void CudaNn::run(const nn_math::LayerNormBackwardInput<bf16>& op, cuda::StreamHandle stream) { run_input(op, stream); }
void CudaNn::run(const nn_math::LayerNormBackwardParams<float>& op, float* workspace, cuda::StreamHandle stream) {
  run_params(op, workspace, stream);
}
void CudaNn::run(const nn_math::LayerNormBackwardParams<bf16>& op, float* workspace, cuda::StreamHandle stream) {
  run_params(op, workspace, stream);
}

}  // namespace mt::backend
