// What the kernel gradient tests share (nn_kernels_grad_test.cpp, llama_kernels_grad_test.cpp):
// tolerances and their reasoning, an element-wise closeness check, fp32 tensors from double
// values, random fp32-exact inputs and central-difference gradients of L = sum(dout * f(x)).
// defines: Tol, kForwardTol, kBackwardTol, kFdFloor, kStep, all_close, values_of, bits_of, f32, i32,
//          random_vec, plus, fd_grad, kGarbage, idx
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <vector>

#include "models/tests/reference_gpt.h"  // defines: ref::Vec, ref::add, ref::dot, ref::central_difference_gradient
#include "runtime/context.h"             // defines: DeviceContext
#include "runtime/tensor.h"              // defines: Tensor

namespace mt::kernel_checks {

using ref::Vec;
using i64 = std::int64_t;

// ---- Tolerances -------------------------------------------------------------------------------
//
// An element passes when |got - want| <= abs * max_j |want_j| + rel * |want_i| + kFdFloor.
struct Tol {
  double abs, rel;
};

// Forward (fp32 kernel vs double reference at the same fp32 inputs): every output is one fp32
// reduction of at most K = 64 terms (C, T * hs or V here) of magnitude <= ~4, plus exp, tanh and
// sqrt within 2 ulp: the error is at most about K * 2^-24 ~ 4e-6 relative to the sum of |terms|,
// typically sqrt(K) * 2^-24 ~ 5e-7. 1e-5 of the largest output plus 1e-5 of each holds for any
// correct order of summation, while each bug these tests aim at (a missing term, a wrong scale,
// eps or variance, an unmasked position) moves outputs by 1e-3 or more of their scale.
constexpr Tol kForwardTol{1e-5, 1e-5};
// Backward (fp32 analytic vs double central differences): the differences are good to ~1e-9
// (truncation h^2 f'''/6 ~ 1e-12 with h 1e-6, rounding 2^-53 |L| / h ~ 1e-9 for |L| ~ 10), so the
// error is the kernel's: two or three chained fp32 reductions of length <= 64, each at most
// ~K * 2^-24 ~ 4e-6 of the magnitudes summed, ~1.2e-5 in all. The layernorm and softmax backward
// subtract means (dnorm - mean(dnorm) - ...), so an element can be small where its terms are not:
// the bound is relative to the largest gradient of the tensor. 3e-5 of it plus 3e-5 of each
// element is above that worst case (errors seen on these inputs are ~1e-7 relative), and orders
// of magnitude below the bugs aimed at (a term of a 1/C = 1/12 share, a dropped 1/sqrt(hs), a
// "+=" written "=", eps 1e-6 for 1e-5 in the small-variance row: all fail with 1e-3 or more).
constexpr Tol kBackwardTol{3e-5, 3e-5};
constexpr double kFdFloor = 1e-8;  // absolute noise of the differences themselves
constexpr double kStep = 1e-6;     // central-difference step, inputs being O(0.01 .. 4)

inline ::testing::AssertionResult all_close(const Vec& got, const Vec& want, Tol tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: got " << got.size() << ", want " << want.size();
  double scale = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  std::size_t bad = 0, first = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    const double allowed = tol.abs * scale + tol.rel * std::abs(want[i]) + kFdFloor;
    worst = std::max(worst, err);
    if (!(err <= allowed)) {  // NaN fails
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << got.size() << " elements differ; first at " << first << ": got " << got[first]
     << ", want " << want[first] << "; max |error| " << worst << ", max |want| " << scale;
  return ::testing::AssertionFailure() << os.str();
}

// ---- Data -------------------------------------------------------------------------------------

inline Vec values_of(const Tensor& t) {
  const std::vector<float> v = t.to_host<float>();
  return Vec(v.begin(), v.end());
}

inline std::vector<std::uint32_t> bits_of(const Tensor& t) {
  const std::vector<float> v = t.to_host<float>();
  std::vector<std::uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

inline Tensor f32(const Vec& values, Shape shape, DeviceContext& ctx) {
  std::vector<float> v(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) v[i] = static_cast<float>(values[i]);
  return Tensor::from_host(v, std::move(shape), ctx);
}

inline Tensor i32(const std::vector<int>& values, Shape shape, DeviceContext& ctx) {
  std::vector<std::int32_t> v(values.begin(), values.end());
  return Tensor::from_host(v, std::move(shape), ctx);
}

// Uniform in [lo, hi), each value an fp32 number.
inline Vec random_vec(std::mt19937& rng, std::size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = static_cast<double>(static_cast<float>(dist(rng)));
  return v;
}

inline Vec plus(const Vec& a, const Vec& b) { return ref::add(a, b); }

// d/dx of L(x) = sum(dout * f(x)), by central differences in double.
inline Vec fd_grad(const std::function<Vec(const Vec&)>& f, const Vec& dout, const Vec& x) {
  return ref::central_difference_gradient([&](const Vec& v) { return ref::dot(dout, f(v)); }, x, kStep);
}

constexpr float kGarbage = 777.0f;  // prefill of outputs the kernel must overwrite

inline std::size_t idx(i64 i) { return static_cast<std::size_t>(i); }

}  // namespace mt::kernel_checks
