// How far a device may sit from the CPU reference, stated by each op beside its math
// (MT_TOLERANCE in runtime/ops/<family>.h) and read by the tests that hold a device's kernels to it.
// The CPU runs the reference itself, bit for bit at any thread count; a CUDA kernel computes the same
// function, but nvcc contracts a multiply and an add into one FMA, CUDA's libm differs from glibc's
// by an ulp or two, and a kernel cut for the GPU sums in another fixed order. An op's tolerance is
// the worst of its kernels'.
// defines: Tolerance, ToleranceOf, tolerance_of, MT_TOLERANCE, kSumOrder, kBf16Step
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/dtype.h"

namespace mt::nn_math {

// Two fixed orders of an fp32 sum of n terms differ by about sqrt(n) 2^-24 of the sum of the terms'
// magnitudes (a random walk of roundings); 8 times that is the allowance per sqrt of the terms.
inline constexpr double kSumOrder = 8.0 / 16777216.0;
// A bf16 output is rounded once: values within the fp32 allowance may round to neighbouring bf16
// numbers, one spacing (2^-7 of the value at most: 8 significant bits) apart.
inline constexpr double kBf16Step = 1.0 / 128.0;

// |device - reference| <= allowed(dtype, terms) x the scale `why` names (for most ops: the largest
// magnitude of the reference's output tensor). fp32 is 0 where every device gives the same bits.
struct Tolerance {
  double fp32 = 0;
  double bf16 = 0;
  bool per_sqrt_terms = false;  // fp32 (and bf16's fp32 part) grows with sqrt of the terms an output sums
  const char* why = "";

  double allowed(DType dtype, std::int64_t terms = 1) const {
    const double growth = per_sqrt_terms ? std::sqrt(static_cast<double>(terms < 4 ? 4 : terms)) : 1.0;
    return dtype == DType::BF16 ? bf16 + fp32 * growth : fp32 * growth;
  }
};

// Every op states one: a test that asks for an op that did not is a compile error.
template <template <class> class Op>
struct ToleranceOf;

template <template <class> class Op>
constexpr Tolerance tolerance_of() {
  return ToleranceOf<Op>::value;
}

}  // namespace mt::nn_math

// Specializes ToleranceOf<Op> (inside namespace mt::nn_math).
#define MT_TOLERANCE(Op, ...)                                   \
  template <>                                                   \
  struct ToleranceOf<Op> {                                      \
    static constexpr Tolerance value{__VA_ARGS__};              \
  };
