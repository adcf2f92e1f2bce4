// LayerNorm and RMSNorm forward cut for the GPU (CudaRows, family `norms`): a warp per row in place
// of a thread per row. The reference is the op's unit (runtime/nn_functors.h LayerNormForward,
// RmsNormForward), which CUDA runs one thread per row (runtime/cuda/nn_kernels.cu) unless the
// context turns this family on. The function is the reference's, expression for expression: the
// mean, then the sum of squared deviations about it (LayerNorm) or the sum of squares (RMSNorm),
// 1/sqrtf of the mean plus eps, then each output computed in fp32 and rounded once into T; only the
// order of the two row sums differs (each lane's strided share, then the butterfly: rows.cuh).
// Where the rows, weight and bias are 16-byte aligned and a row is whole packs (C * sizeof(T) a
// multiple of 16), the lanes move 16 bytes at a time; otherwise one element at a time.
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "runtime/cuda/rows.cuh"
#include "runtime/nn_backend.h"

namespace mt::backend {
namespace {

using rows::kWarp;
using rows::Pack;
using Warps = rows::WarpGroup<kRowWarpsPerBlock>;

template <class T, bool kVec>
__global__ void __launch_bounds__(Warps::kBlockThreads) layernorm_rows(nn_math::LayerNormForward<T> op) {
  constexpr int P = Pack<T>::kSize;
  const int lane = Warps::rank();
  const std::int64_t C = op.channels, stride = static_cast<std::int64_t>(gridDim.x) * Warps::kRowsPerBlock;
  for (std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * Warps::kRowsPerBlock + Warps::slot(); n < op.rows;
       n += stride) {
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
}

template <class T, bool kVec>
__global__ void __launch_bounds__(Warps::kBlockThreads) rmsnorm_rows(nn_math::RmsNormForward<T> op) {
  constexpr int P = Pack<T>::kSize;
  const int lane = Warps::rank();
  const std::int64_t C = op.channels, stride = static_cast<std::int64_t>(gridDim.x) * Warps::kRowsPerBlock;
  for (std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * Warps::kRowsPerBlock + Warps::slot(); n < op.rows;
       n += stride) {
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

}  // namespace

void CudaRows::run(const nn_math::LayerNormForward<float>& op, cuda::StreamHandle s) { run_layernorm(op, s); }
void CudaRows::run(const nn_math::LayerNormForward<bf16>& op, cuda::StreamHandle s) { run_layernorm(op, s); }
void CudaRows::run(const nn_math::RmsNormForward<float>& op, cuda::StreamHandle s) { run_rmsnorm(op, s); }
void CudaRows::run(const nn_math::RmsNormForward<bf16>& op, cuda::StreamHandle s) { run_rmsnorm(op, s); }

}  // namespace mt::backend
