// What the GPU-shaped row kernels share (runtime/cuda/norms.cu, attention.cu, loss.cu): a group
// of threads per row (a warp, or a whole block), its reductions in a fixed order, a walk over a
// row's columns in 16-byte packs where the row allows, and the launch check.
//
// Order of the sums: each thread adds its own columns in the order it visits them, then a warp adds
// its lanes by xor butterfly shuffles (the same tree whatever the data; partner lanes add the same
// two values, and a + b == b + a exactly, so every lane ends with the same bits), then a block adds
// its warps' results from shared memory in warp order. No atomics: a launch repeats its bits.
// defines: kWarp, warp_sum, warp_max, kLowest, WarpGroup, BlockGroup, Pack, load_pack, store_pack,
//          load_floats, walk, round_up, aligned16, row_blocks, check_row_launch
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/cuda/cuda_check.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"

namespace mt::backend::rows {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
// The identity of nn_math::lane_max, so an empty share of a row reduces as the reference's does.
constexpr float kLowest = -3.402823466e38f;

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// The larger of the two as nn_math::MaxF picks it (b > a ? b : a).
__device__ __forceinline__ float max_of(float a, float b) { return b > a ? b : a; }

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = max_of(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// A warp per row, kRows rows per block: rank() is the lane, slot() the row within the block.
template <int kRows>
struct WarpGroup {
  static constexpr int kThreads = kWarp, kRowsPerBlock = kRows, kBlockThreads = kRows * kWarp, kScratch = 1;
  __device__ static int rank() { return static_cast<int>(threadIdx.x) % kWarp; }
  __device__ static int slot() { return static_cast<int>(threadIdx.x) / kWarp; }
  __device__ static float sum(float v, float*) { return warp_sum(v); }
  __device__ static float max(float v, float*) { return warp_max(v); }
};

// A block of kBlock threads per row: each warp reduces, lane 0 of each warp leaves its result in
// shared memory, and every thread folds those in warp order (so all hold the same bits). The second
// barrier frees the scratch for the next reduction.
template <int kBlock>
struct BlockGroup {
  static_assert(kBlock % kWarp == 0, "a block of whole warps");
  static constexpr int kThreads = kBlock, kRowsPerBlock = 1, kBlockThreads = kBlock, kScratch = kBlock / kWarp;
  __device__ static int rank() { return static_cast<int>(threadIdx.x); }
  __device__ static int slot() { return 0; }
  template <class Combine>
  __device__ static float fold(float v, float* scratch, Combine combine) {
    if (threadIdx.x % kWarp == 0) scratch[threadIdx.x / kWarp] = v;
    __syncthreads();
    float total = scratch[0];
    for (int w = 1; w < kScratch; ++w) total = combine(total, scratch[w]);
    __syncthreads();
    return total;
  }
  __device__ static float sum(float v, float* scratch) {
    return fold(warp_sum(v), scratch, [](float a, float b) { return a + b; });
  }
  __device__ static float max(float v, float* scratch) {
    return fold(warp_max(v), scratch, [](float a, float b) { return max_of(a, b); });
  }
};

// 16 bytes of T: one vector load or store.
template <class T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / static_cast<int>(sizeof(T));
  T v[kSize];
};

template <class T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T>*>(p);
}
template <class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& v) {
  *reinterpret_cast<Pack<T>*>(p) = v;
}
// N floats (a multiple of 4) from a 16-byte aligned address, as N / 4 vector loads.
template <int N>
__device__ __forceinline__ void load_floats(const float* p, float (&out)[N]) {
  static_assert(N % 4 == 0, "whole float4s");
  for (int i = 0; i < N; i += 4) {
    const float4 f = *reinterpret_cast<const float4*>(p + i);
    out[i] = f.x;
    out[i + 1] = f.y;
    out[i + 2] = f.z;
    out[i + 3] = f.w;
  }
}

__host__ __device__ __forceinline__ std::int64_t round_up(std::int64_t n, std::int64_t m) {
  return (n + m - 1) / m * m;
}

// The columns [begin, end) of a row, shared by `threads` threads, thread `rank` taking every
// threads-th piece. With kVec (begin a multiple of P, the row 16-byte aligned there): whole packs of
// P columns by pack(j), j the pack's first column, then the last (end - begin) mod P columns one by
// one by one(j); without: every column by one(j). A row is always walked the same way, so a
// thread reads and writes the same columns in every pass over it.
template <bool kVec, int P, class PackF, class OneF>
__device__ __forceinline__ void walk(std::int64_t begin, std::int64_t end, int rank, int threads, PackF&& pack,
                                     OneF&& one) {
  std::int64_t rest = begin;
  if constexpr (kVec) {
    rest = begin + (end - begin) / P * P;
    for (std::int64_t j = begin + std::int64_t{rank} * P; j < rest; j += std::int64_t{threads} * P) pack(j);
  }
  for (std::int64_t j = rest + rank; j < end; j += threads) one(j);
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Blocks for `rows` rows at `per_block` rows each, at most `max_blocks` (the rows past them loop).
inline unsigned int row_blocks(std::int64_t rows, std::int64_t per_block, std::int64_t max_blocks) {
  return static_cast<unsigned int>(std::min<std::int64_t>((rows + per_block - 1) / per_block, max_blocks));
}

inline void check_row_launch(const char* what) {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) MT_FAIL("CUDA error launching the ", what, " kernel: ", cuda::cuda_error_text(rc));
}

}  // namespace mt::backend::rows
