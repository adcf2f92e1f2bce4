// The elementwise and reduction family: fill, binary ops, scale, cast and whole-tensor reductions
// (runtime/kernels.h), the row ops of a bias (BroadcastRows, ColumnSum) and the gradient norm's tree
// of squares (SquaresByBlock, FoldPartials) and the device-side loss sum (ChunkSums, AddMeanOfChunks). CPU loops, CUDA
// kernels (runtime/cuda/elementwise.cu) and the MPI reduction of bf16 all call these functions, so
// every backend computes the same one.
// defines: BinaryOp, ReduceKind, apply_binary, scale_one, reduce_step, kReduceChunk, BroadcastRows, ColumnSum,
//          kNormBlock, square_rounded, SquaresByBlock, fold_tree, FoldPartials, ChunkSums, AddMeanOfChunks,
//          MT_ELEMENTWISE_UNIT_OPS,
//          MT_ELEMENTWISE_FAST_OPS
#pragma once

#include "runtime/ops/math.h"
#include "runtime/ops/tolerance.h"

namespace mt::nn_math {

// out[n, :] = bias; one unit per row.
template <class T>
struct BroadcastRows {
  const float* bias;
  T* out;
  std::int64_t rows, cols;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    T* o = out + n * cols;
    for (std::int64_t j = 0; j < cols; ++j) o[j] = narrow_to<T>(bias[j]);
  }
};

// sum[j] += sum over rows of x[n, j]; one unit per block of `width` columns, rows in order.
template <class T>
struct ColumnSum {
  const T* x;
  float* sum;
  std::int64_t rows, cols, width;
  MT_HD std::int64_t count() const { return blocks_of(cols, width); }
  MT_HD void operator()(std::int64_t block) const {
    const std::int64_t j0 = block * width, j1 = min64(j0 + width, cols);
    for (std::int64_t n = 0; n < rows; ++n) {
      const T* xr = x + n * cols;
      for (std::int64_t j = j0; j < j1; ++j) sum[j] += widen(xr[j]);
    }
  }
};

// The gradient norm's sum of squares as a tree, in fp32: blocks of kNormBlock elements, each summed
// in lane order (lane_sum) and scaled by its tensor's weight into partial[first_block + b]
// (SquaresByBlock, a unit per block), then every tensor's blocks folded at once by FoldPartials (one
// unit: fold_tree). The shape depends on the sizes alone, so a result repeats bit for bit at any
// thread count and on every device. Against an exact sum: each block's lanes sum 512 squares
// (relative error about sqrt(512) 2^-24 = 1.3e-6, 3e-5 at worst), the fold at most 64 levels.
inline constexpr std::int64_t kNormBlock = 4096;
// The chunk of every double-precision reduction (kReduceChunk below is the same value).
inline constexpr std::int64_t kReduceChunkElements = 4096;

// x * x rounded on its own: nvcc would contract it with the sum's addition into an FMA (one
// rounding instead of two), which the host compiler never does.
MT_HD float square_rounded(float v) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(v, v);
#else
  return v * v;
#endif
}

template <class T>
struct SquaresByBlock {
  const T* x;
  float* partial;  // partial[b] for block b of x
  std::int64_t n;
  float weight;
  MT_HD std::int64_t count() const { return blocks_of(n, kNormBlock); }
  MT_HD void operator()(std::int64_t b) const {
    const T* xb = x + b * kNormBlock;
    const std::int64_t len = min64(kNormBlock, n - b * kNormBlock);
    partial[b] = weight * lane_sum(len, [xb](std::int64_t j) { return square_rounded(widen(xb[j])); });
  }
};

// The sum of p[0, count) by a fixed binary tree: elements are merged as a binary counter merges
// (two partial sums of 2^k elements each become one of 2^(k+1)), then what is left is added from the
// smallest run up. No scratch beyond 64 floats, the same order on host and device.
MT_HD float fold_tree(const float* p, std::int64_t count) {
  float run[64];
  std::int64_t size[64];
  int top = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    float v = p[i];
    std::int64_t s = 1;
    while (top > 0 && size[top - 1] == s) {
      v = run[--top] + v;
      s *= 2;
    }
    run[top] = v;
    size[top++] = s;
  }
  float total = 0.0f;
  while (top > 0) total = run[--top] + total;
  return total;
}

// out[0] = fold_tree(partial, count); T is unused (every op has an fp32 and a bf16 instantiation).
template <class T>
struct FoldPartials {
  const float* partial;
  float* out;
  std::int64_t blocks;
  MT_HD std::int64_t count() const { return 1; }
  MT_HD void operator()(std::int64_t) const { out[0] = fold_tree(partial, blocks); }
};

// A mean added into a running fp32 sum on the device (the training loss of each micro-batch,
// read once per step): ChunkSums sums chunks of kReduceChunk elements in index order in double (a
// unit per chunk), then AddMeanOfChunks folds them in order and adds sum / divisor, rounded once
// into acc[0]. Into a zero acc that is exactly fp32(reduce(Sum) / divisor) (runtime/kernels.h).
template <class T>
struct ChunkSums {
  const T* x;
  double* partial;  // partial[c] for chunk c of x
  std::int64_t n;
  MT_HD std::int64_t count() const { return blocks_of(n, kReduceChunkElements); }
  MT_HD void operator()(std::int64_t c) const {
    const std::int64_t begin = c * kReduceChunkElements, end = min64(begin + kReduceChunkElements, n);
    double acc = 0.0;
    for (std::int64_t i = begin; i < end; ++i) acc += static_cast<double>(widen(x[i]));
    partial[c] = acc;
  }
};

// acc[0] = fp32(acc[0] + (partial[0] + ... + partial[chunks - 1]) / divisor); T is unused.
template <class T>
struct AddMeanOfChunks {
  const double* partial;
  float* acc;
  std::int64_t chunks;
  double divisor;
  MT_HD std::int64_t count() const { return 1; }
  MT_HD void operator()(std::int64_t) const {
    double sum = 0.0;
    for (std::int64_t c = 0; c < chunks; ++c) sum += partial[c];
    acc[0] = static_cast<float>(static_cast<double>(acc[0]) + sum / divisor);
  }
};

}  // namespace mt::nn_math

namespace mt {

enum class BinaryOp : std::uint8_t { Add, Sub, Mul, Max, Min };
enum class ReduceKind : std::uint8_t { Sum, SumSquares, Max, Min, AbsMax };

template <class W>
MT_HD W binary_wide(BinaryOp op, W a, W b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Max: return a > b ? a : b;
    case BinaryOp::Min: return a < b ? a : b;
  }
  return a;
}

// out = a (op) b for one element of type T.
template <class T>
MT_HD T apply_binary(BinaryOp op, T a, T b) {
  return narrow_to<T>(binary_wide(op, widen(a), widen(b)));
}

// x * alpha computed in double, then rounded back (truncated for int32).
template <class T>
MT_HD T scale_one(T x, double alpha) {
  return narrow_to<T>(static_cast<double>(widen(x)) * alpha);
}

// Reductions accumulate in double, element by element in index order: one thread owns each
// chunk of kReduceChunk elements, then one thread folds the chunk results in order. The result
// therefore never depends on the thread count or on the device.
inline constexpr std::int64_t kReduceChunk = nn_math::kReduceChunkElements;

MT_HD double reduce_identity(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::Max: return -1.0 / 0.0;
    case ReduceKind::Min: return 1.0 / 0.0;
    default: return 0.0;
  }
}

MT_HD double reduce_combine(ReduceKind kind, double acc, double v) {
  switch (kind) {
    case ReduceKind::Sum:
    case ReduceKind::SumSquares: return acc + v;
    case ReduceKind::Max: return v > acc ? v : acc;
    case ReduceKind::Min: return v < acc ? v : acc;
    case ReduceKind::AbsMax: return (v < 0 ? -v : v) > acc ? (v < 0 ? -v : v) : acc;
  }
  return acc;
}

// A product rounded on its own. nvcc contracts a multiply followed by an add into one FMA by
// default (-fmad=true), which rounds once instead of twice; the host compiler does not (ISO C++
// mode, no FMA in the x86-64 baseline). __dmul_rn is never contracted, so both round alike.
MT_HD double mul_rounded(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// Folds one element into a running result.
template <class T>
MT_HD double reduce_step(ReduceKind kind, double acc, T x) {
  double v = static_cast<double>(widen(x));
  if (kind == ReduceKind::SumSquares) v = mul_rounded(v, v);
  return reduce_combine(kind, acc, v);
}

}  // namespace mt

// The ops the backends run unit by unit (runtime/backend.h), and those with a kernel cut for the GPU.
#define MT_ELEMENTWISE_UNIT_OPS(X) \
  X(BroadcastRows) X(ColumnSum) X(SquaresByBlock) X(FoldPartials) X(ChunkSums) X(AddMeanOfChunks)
#define MT_ELEMENTWISE_FAST_OPS(X)

namespace mt::nn_math {
// fill, binary, scale and cast are exact on every device (one rounding of the same double or float
// value); the reductions sum in double in one fixed order everywhere. BroadcastRows copies.
MT_TOLERANCE(BroadcastRows, .why = "a copy rounded once into T: the same bits")
MT_TOLERANCE(ColumnSum, .why = "the same fp32 additions, rows in order, on every device (nothing to contract into an FMA): the same bits")
MT_TOLERANCE(SquaresByBlock, .why = "each square rounded on its own (square_rounded: no FMA on CUDA), then the same lane sums: the same bits")
MT_TOLERANCE(FoldPartials, .why = "the same fp32 additions in the same tree on every device: the same bits")
MT_TOLERANCE(ChunkSums, .why = "double additions in index order on every device (nothing to contract): the same bits")
MT_TOLERANCE(AddMeanOfChunks, .why = "the same double additions and one division, rounded once: the same bits")
}  // namespace mt::nn_math
