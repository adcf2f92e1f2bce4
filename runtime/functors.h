// Elementwise and reduction math written once for host and device. CPU loops, CUDA kernels and
// the MPI reduction of bf16 all call these, so every backend computes the same function.
// defines: BinaryOp, ReduceKind, widen, narrow_to, apply_binary, reduce_step, kReduceChunk
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/dtype.h"
#include "runtime/host_device.h"

namespace mt {

enum class BinaryOp : std::uint8_t { Add, Sub, Mul, Max, Min };
enum class ReduceKind : std::uint8_t { Sum, SumSquares, Max, Min, AbsMax };

// Arithmetic happens in a wider type: bf16 in float, int32 and float as themselves.
MT_HD float widen(bf16 v) { return v.to_float(); }
MT_HD float widen(float v) { return v; }
MT_HD std::int32_t widen(std::int32_t v) { return v; }

// Back from the wide type (or a double) to T, rounding to nearest even into bf16.
template <class T, class W>
MT_HD T narrow_to(W v) {
  if constexpr (sizeof(T) == 2) {
    return bf16::from_float(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, std::int32_t> && !std::is_same_v<W, std::int32_t>) {
    // Into int32: truncate toward zero, saturate out-of-range values, NaN becomes 0 (a plain cast
    // would be undefined behaviour, and differ between CPU and GPU).
    const double d = static_cast<double>(v);
    if (!(d == d)) return 0;
    if (d >= 2147483647.0) return 2147483647;
    if (d <= -2147483648.0) return static_cast<std::int32_t>(-2147483647 - 1);
    return static_cast<std::int32_t>(d);
  } else {
    return static_cast<T>(v);
  }
}

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
inline constexpr std::int64_t kReduceChunk = 4096;

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
