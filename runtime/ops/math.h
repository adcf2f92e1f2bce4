// How the ops of every family (runtime/ops/*.h) are written, and the arithmetic they share.
//
// Each op is a struct of pointers and sizes with `count()` units of work and `operator()(i)` doing
// unit i, written once for host and device. The CPU runs the units in an OpenMP loop
// (runtime/cpu/units.cpp) and is the reference every device is tested against; CUDA runs them one
// thread per unit (runtime/cuda/units.cuh) or, for the ops its family lists as fast, with a kernel
// cut for the GPU. A unit owns its outputs and reduces them in a fixed order, so the result never
// depends on the thread count.
//
// T is the activation type (float, or bf16: meant for CUDA, run on the CPU in tests); arithmetic is
// in float. Parameters, their gradients, norm statistics, attention probabilities and losses are
// float.
// defines: widen, narrow_to, kColumnBlock, min64, blocks_of, position_of, float_from_bits, bits_from_float, exp_f,
//          tanh_f, kLanes, lane_reduce, lane_sum, lane_max, AddF, MaxF
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "runtime/dtype.h"
#include "runtime/host_device.h"

namespace mt {

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

}  // namespace mt

namespace mt::nn_math {

// Columns per unit of the column-reducing ops on the CPU: wide enough to vectorize.
inline constexpr std::int64_t kColumnBlock = 64;

MT_HD std::int64_t min64(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

// The backward ops that sum over many rows (embedding, attention, the column sums of parameter
// gradients) give each unit `width` columns (channels, or key positions), width 1 or
// kColumnBlock. The CPU takes kColumnBlock: a unit's inner loop runs over contiguous memory and
// vectorizes. CUDA takes 1: width times more threads, neighbouring threads reading neighbouring
// addresses. Each element is the same sum in the same order either way, so the results agree bit
// for bit: the width decides who computes, not how.
MT_HD std::int64_t blocks_of(std::int64_t n, std::int64_t width) { return (n + width - 1) / width; }

// The position of a sequence's row t for the position ops (wpe, RoPE): positions[t] where a
// context-parallel rank holds rows at other global positions, t itself when positions is null.
MT_HD std::int64_t position_of(const std::int32_t* positions, std::int64_t t) {
  return positions != nullptr ? static_cast<std::int64_t>(positions[t]) : t;
}

MT_HD float float_from_bits(std::int32_t bits) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}
MT_HD std::int32_t bits_from_float(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(f);
#else
  std::int32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

// exp(x) in plain float arithmetic, no library call, so CPU loops over it vectorize (the softmax
// over a 50k vocabulary was half of a small model's step with libm's scalar expf). x = n ln2 + r
// with |r| <= ln2/2 (n rounded by the 1.5 x 2^23 trick, ln2 split in two for an exact product),
// e^r by a degree-7 polynomial (cephes' minimax coefficients), 2^n from the exponent bits.
// Relative error about 2e-7; arguments below -87.3 give 0, above 88 are taken as 88.
MT_HD float exp_f(float x) {
  const float underflow = x < -87.3f ? 0.0f : 1.0f;
  x = x < -87.3f ? -87.3f : (x > 88.0f ? 88.0f : x);
  const float shifted = x * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const std::int32_t ni = bits_from_float(shifted) - 0x4B400000;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * float_from_bits((ni + 127) << 23) * underflow;
}

// tanh from exp_f: 1 - 2 / (e^2x + 1), which saturates cleanly to +-1 (e^2x clamps, or is 0).
// Absolute error about 1e-7: libm's tanhf (through expm1f) was a tenth of a GPT-2 step.
MT_HD float tanh_f(float x) { return 1.0f - 2.0f / (exp_f(2.0f * x) + 1.0f); }

// Row reductions in kLanes interleaved partial results, folded in a fixed order: the same result
// on every backend and thread count, and a shape the CPU compiler turns into vector code.
inline constexpr int kLanes = 8;

// f(j) for j in [0, n) folded by `combine` into kLanes partial results (element j into lane
// j % kLanes, in order), then the lanes pairwise in a fixed tree.
template <class F, class Combine>
MT_HD float lane_reduce(std::int64_t n, float identity, const F& f, const Combine& combine) {
  float acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = identity;
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = combine(acc[l], f(j + l));
  for (int l = 0; j < n; ++j, ++l) acc[l] = combine(acc[l], f(j));
  return combine(combine(combine(acc[0], acc[4]), combine(acc[1], acc[5])),
                 combine(combine(acc[2], acc[6]), combine(acc[3], acc[7])));
}

struct AddF {
  MT_HD float operator()(float a, float b) const { return a + b; }
};
struct MaxF {
  MT_HD float operator()(float a, float b) const { return b > a ? b : a; }
};

template <class F>
MT_HD float lane_sum(std::int64_t n, const F& f) {
  return lane_reduce(n, 0.0f, f, AddF{});
}

template <class F>
MT_HD float lane_max(std::int64_t n, const F& f) {
  return lane_reduce(n, -3.402823466e38f, f, MaxF{});
}

}  // namespace mt::nn_math
