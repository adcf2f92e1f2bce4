// The norms family on CUDA (runtime/ops/norms.h). The unit ops one thread per unit
// (runtime/cuda/units.cuh), and these kernels cut for the GPU:
//
// LayerNorm and RMSNorm forward cut for the GPU (Cuda::run_fast, family `norms`): a warp per row in place
// of a thread per row. The reference is the op's unit (runtime/ops/norms.h LayerNormForward,
// RmsNormForward), which CUDA runs one thread per row (runtime/cuda/units.cuh) unless the
// context turns this family on. The function is the reference's, expression for expression: the
// mean, then the sum of squared deviations about it (LayerNorm) or the sum of squares (RMSNorm),
// 1/sqrtf of the mean plus eps, then each output computed in fp32 and rounded once into T; only the
// order of the two row sums differs (each lane's strided share, then the butterfly: rows.cuh).
// Where the rows, weight and bias are 16-byte aligned and a row is whole packs (C * sizeof(T) a
// multiple of 16), the lanes move 16 bytes at a time; otherwise one element at a time. The residual
// add fused with either norm (AddLayerNormForward, AddRmsNormForward) is the same warp writing the
// row's sum first, then normalizing it.
//
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
#include <initializer_list>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/rows.cuh"
#include "runtime/cuda/units.cuh"
#include "runtime/error.h"

namespace mt::backend {
namespace {

using rows::kWarp;
using rows::Pack;
using Warps = rows::WarpGroup<kRowWarpsPerBlock>;

// Row n of a LayerNormForward by one warp.
template <class T, bool kVec>
__device__ __forceinline__ void layernorm_row(const nn_math::LayerNormForward<T>& op, std::int64_t n, int lane) {
  constexpr int P = Pack<T>::kSize;
  const std::int64_t C = op.channels;
  const T* xr = op.x + n * C;
  float sum = 0.0f;
  rows::walk<kVec, P>(
      0, C, lane, kWarp,
      [&](std::int64_t j) {
        const Pack<T> v = rows::load_pack(xr + j);
        for (int i = 0; i < P; ++i) sum += widen(v.v[i]);
      },
      [&](std::int64_t j) { sum += widen(xr[j]); });
  const float m = rows::warp_sum(sum) / static_cast<float>(C);
  float var = 0.0f;
  rows::walk<kVec, P>(
      0, C, lane, kWarp,
      [&](std::int64_t j) {
        const Pack<T> v = rows::load_pack(xr + j);
        for (int i = 0; i < P; ++i) {
          const float d = widen(v.v[i]) - m;
          var += d * d;
        }
      },
      [&](std::int64_t j) {
        const float d = widen(xr[j]) - m;
        var += d * d;
      });
  const float s = 1.0f / ::sqrtf(rows::warp_sum(var) / static_cast<float>(C) + nn_math::kLayerNormEps);
  T* o = op.out + n * C;
  rows::walk<kVec, P>(
      0, C, lane, kWarp,
      [&](std::int64_t j) {
        const Pack<T> v = rows::load_pack(xr + j);
        float w[P], b[P];
        rows::load_floats(op.weight + j, w);
        rows::load_floats(op.bias + j, b);
        Pack<T> out;
        for (int i = 0; i < P; ++i) out.v[i] = narrow_to<T>((widen(v.v[i]) - m) * s * w[i] + b[i]);
        rows::store_pack(o + j, out);
      },
      [&](std::int64_t j) { o[j] = narrow_to<T>((widen(xr[j]) - m) * s * op.weight[j] + op.bias[j]); });
  if (lane == 0) {
    op.mean[n] = m;
    op.rstd[n] = s;
  }
}

template <class T, bool kVec>
__global__ void __launch_bounds__(Warps::kBlockThreads) layernorm_rows(nn_math::LayerNormForward<T> op) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * Warps::kRowsPerBlock;
  for (std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * Warps::kRowsPerBlock + Warps::slot(); n < op.rows;
       n += stride)
    layernorm_row<T, kVec>(op, n, Warps::rank());
}

// Row n of an RmsNormForward by one warp.
template <class T, bool kVec>
__device__ __forceinline__ void rmsnorm_row(const nn_math::RmsNormForward<T>& op, std::int64_t n, int lane) {
  constexpr int P = Pack<T>::kSize;
  const std::int64_t C = op.channels;
  const T* xr = op.x + n * C;
  float sum_sq = 0.0f;
  rows::walk<kVec, P>(
      0, C, lane, kWarp,
      [&](std::int64_t j) {
        const Pack<T> v = rows::load_pack(xr + j);
        for (int i = 0; i < P; ++i) {
          const float x = widen(v.v[i]);
          sum_sq += x * x;
        }
      },
      [&](std::int64_t j) {
        const float x = widen(xr[j]);
        sum_sq += x * x;
      });
  const float s = 1.0f / ::sqrtf(rows::warp_sum(sum_sq) / static_cast<float>(C) + op.eps);
  T* o = op.out + n * C;
  rows::walk<kVec, P>(
      0, C, lane, kWarp,
      [&](std::int64_t j) {
        const Pack<T> v = rows::load_pack(xr + j);
        float w[P];
        rows::load_floats(op.weight + j, w);
        Pack<T> out;
        for (int i = 0; i < P; ++i) out.v[i] = narrow_to<T>(widen(v.v[i]) * s * w[i]);
        rows::store_pack(o + j, out);
      },
      [&](std::int64_t j) { o[j] = narrow_to<T>(widen(xr[j]) * s * op.weight[j]); });
  if (lane == 0) op.rstd[n] = s;
}

template <class T, bool kVec>
__global__ void __launch_bounds__(Warps::kBlockThreads) rmsnorm_rows(nn_math::RmsNormForward<T> op) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * Warps::kRowsPerBlock;
  for (std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * Warps::kRowsPerBlock + Warps::slot(); n < op.rows;
       n += stride)
    rmsnorm_row<T, kVec>(op, n, Warps::rank());
}

// The residual add fused with the norm (AddLayerNormForward, AddRmsNormForward): a warp writes
// its row's sum = x + y, rounded into T as the reference does, then normalizes the stored sum as
// layernorm_row / rmsnorm_row. The sum has the reference's bits; the norm differs from it only in
// the order of the row sums, as the unfused fast kernel does.
template <class T, bool kVec>
__device__ __forceinline__ void add_row(const T* x, const T* y, T* sum, std::int64_t n, std::int64_t C, int lane) {
  constexpr int P = Pack<T>::kSize;
  const T* xr = x + n * C;
  const T* yr = y + n * C;
  T* r = sum + n * C;
  rows::walk<kVec, P>(
      0, C, lane, kWarp,
      [&](std::int64_t j) {
        const Pack<T> a = rows::load_pack(xr + j), b = rows::load_pack(yr + j);
        Pack<T> out;
        for (int i = 0; i < P; ++i) out.v[i] = narrow_to<T>(widen(a.v[i]) + widen(b.v[i]));
        rows::store_pack(r + j, out);
      },
      [&](std::int64_t j) { r[j] = narrow_to<T>(widen(xr[j]) + widen(yr[j])); });
  // The norm's walk reads back the same columns per lane; this makes it not matter, and puts every
  // lane's reads of y before any write of out (which may be y).
  __syncwarp();
}

template <class T, bool kVec>
__global__ void __launch_bounds__(Warps::kBlockThreads) add_layernorm_rows(nn_math::AddLayerNormForward<T> op) {
  const nn_math::LayerNormForward<T> norm{op.sum, op.weight, op.bias, op.out, op.mean, op.rstd, op.rows, op.channels};
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * Warps::kRowsPerBlock;
  for (std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * Warps::kRowsPerBlock + Warps::slot(); n < op.rows;
       n += stride) {
    add_row<T, kVec>(op.x, op.y, op.sum, n, op.channels, Warps::rank());
    layernorm_row<T, kVec>(norm, n, Warps::rank());
  }
}

template <class T, bool kVec>
__global__ void __launch_bounds__(Warps::kBlockThreads) add_rmsnorm_rows(nn_math::AddRmsNormForward<T> op) {
  const nn_math::RmsNormForward<T> norm{op.sum, op.weight, op.out, op.rstd, op.rows, op.channels, op.eps};
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * Warps::kRowsPerBlock;
  for (std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * Warps::kRowsPerBlock + Warps::slot(); n < op.rows;
       n += stride) {
    add_row<T, kVec>(op.x, op.y, op.sum, n, op.channels, Warps::rank());
    rmsnorm_row<T, kVec>(norm, n, Warps::rank());
  }
}

// Whole 16-byte packs per row, and every row pointer at a 16-byte boundary.
template <class T>
bool packable(std::int64_t channels, std::initializer_list<const void*> pointers) {
  if ((channels * static_cast<std::int64_t>(sizeof(T))) % 16 != 0) return false;
  for (const void* p : pointers)
    if (!rows::aligned16(p)) return false;
  return true;
}

template <class T>
void run_layernorm(const nn_math::LayerNormForward<T>& op, cuda::StreamHandle stream) {
  if (op.rows == 0) return;
  const unsigned int blocks = rows::row_blocks(op.rows, Warps::kRowsPerBlock, kRowMaxBlocks);
  const auto s = static_cast<cudaStream_t>(stream);
  if (packable<T>(op.channels, {op.x, op.out, op.weight, op.bias})) {
    layernorm_rows<T, true><<<blocks, Warps::kBlockThreads, 0, s>>>(op);
  } else {
    layernorm_rows<T, false><<<blocks, Warps::kBlockThreads, 0, s>>>(op);
  }
  rows::check_row_launch("layernorm forward");
}

template <class T>
void run_rmsnorm(const nn_math::RmsNormForward<T>& op, cuda::StreamHandle stream) {
  if (op.rows == 0) return;
  const unsigned int blocks = rows::row_blocks(op.rows, Warps::kRowsPerBlock, kRowMaxBlocks);
  const auto s = static_cast<cudaStream_t>(stream);
  if (packable<T>(op.channels, {op.x, op.out, op.weight})) {
    rmsnorm_rows<T, true><<<blocks, Warps::kBlockThreads, 0, s>>>(op);
  } else {
    rmsnorm_rows<T, false><<<blocks, Warps::kBlockThreads, 0, s>>>(op);
  }
  rows::check_row_launch("rmsnorm forward");
}

template <class T>
void run_add_layernorm(const nn_math::AddLayerNormForward<T>& op, cuda::StreamHandle stream) {
  if (op.rows == 0) return;
  const unsigned int blocks = rows::row_blocks(op.rows, Warps::kRowsPerBlock, kRowMaxBlocks);
  const auto s = static_cast<cudaStream_t>(stream);
  if (packable<T>(op.channels, {op.x, op.y, op.sum, op.out, op.weight, op.bias})) {
    add_layernorm_rows<T, true><<<blocks, Warps::kBlockThreads, 0, s>>>(op);
  } else {
    add_layernorm_rows<T, false><<<blocks, Warps::kBlockThreads, 0, s>>>(op);
  }
  rows::check_row_launch("residual add and layernorm forward");
}

template <class T>
void run_add_rmsnorm(const nn_math::AddRmsNormForward<T>& op, cuda::StreamHandle stream) {
  if (op.rows == 0) return;
  const unsigned int blocks = rows::row_blocks(op.rows, Warps::kRowsPerBlock, kRowMaxBlocks);
  const auto s = static_cast<cudaStream_t>(stream);
  if (packable<T>(op.channels, {op.x, op.y, op.sum, op.out, op.weight})) {
    add_rmsnorm_rows<T, true><<<blocks, Warps::kBlockThreads, 0, s>>>(op);
  } else {
    add_rmsnorm_rows<T, false><<<blocks, Warps::kBlockThreads, 0, s>>>(op);
  }
  rows::check_row_launch("residual add and rmsnorm forward");
}

}  // namespace

void Cuda::run_fast(const nn_math::AddLayerNormForward<float>& op, cuda::StreamHandle s) { run_add_layernorm(op, s); }
void Cuda::run_fast(const nn_math::AddLayerNormForward<bf16>& op, cuda::StreamHandle s) { run_add_layernorm(op, s); }
void Cuda::run_fast(const nn_math::AddRmsNormForward<float>& op, cuda::StreamHandle s) { run_add_rmsnorm(op, s); }
void Cuda::run_fast(const nn_math::AddRmsNormForward<bf16>& op, cuda::StreamHandle s) { run_add_rmsnorm(op, s); }
void Cuda::run_fast(const nn_math::LayerNormForward<float>& op, cuda::StreamHandle s) { run_layernorm(op, s); }
void Cuda::run_fast(const nn_math::LayerNormForward<bf16>& op, cuda::StreamHandle s) { run_layernorm(op, s); }
void Cuda::run_fast(const nn_math::RmsNormForward<float>& op, cuda::StreamHandle s) { run_rmsnorm(op, s); }
void Cuda::run_fast(const nn_math::RmsNormForward<bf16>& op, cuda::StreamHandle s) { run_rmsnorm(op, s); }
}  // namespace mt::backend

namespace mt::backend {
namespace {

constexpr int kRowsPerBlock = 4;       // warps (rows at a time) per block of the input kernel
constexpr int kRowLanes = 8;           // row lanes per block of the parameter kernel
constexpr std::int64_t kMaxBlocks = 65535;

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
    const float dnorm_mean = rows::warp_sum(dnorm_sum) / static_cast<float>(C);
    const float dnorm_norm_mean = rows::warp_sum(dnorm_norm_sum) / static_cast<float>(C);
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

void Cuda::run(const nn_math::LayerNormBackwardInput<float>& op, cuda::StreamHandle stream) { run_input(op, stream); }
void Cuda::run(const nn_math::LayerNormBackwardInput<bf16>& op, cuda::StreamHandle stream) { run_input(op, stream); }
void Cuda::run(const nn_math::LayerNormBackwardParams<float>& op, float* workspace, cuda::StreamHandle stream) {
  run_params(op, workspace, stream);
}
void Cuda::run(const nn_math::LayerNormBackwardParams<bf16>& op, float* workspace, cuda::StreamHandle stream) {
  run_params(op, workspace, stream);
}
}  // namespace mt::backend

namespace mt::backend {

MT_NORMS_UNIT_OPS(MT_CUDA_UNIT_RUN)

}  // namespace mt::backend
