// The layernorm backward in two halves (nn::layernorm_backward_input, nn::layernorm_backward_params,
// for a backward split into input and weight gradients) against the fused nn::layernorm_backward,
// fp32 and bf16 activations:
//   - on the CPU the halves give the fused bits, in either order, at 1 and 3 threads;
//   - on a GPU (skipped without one) the halves give the GPU's fused bits, a second run repeats
//     them, and they agree with the CPU within the tolerances below (the GPU sums in another order).
// Sizes leave partial warps and column tiles (C 150), and one case passes the CUDA kernel's cap on
// row tiles (N 40000: 512 tiles of 79 rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/context.h"
#include "runtime/nn_kernels.h"
#include "runtime/tensor.h"
#include "tests/gpu_skip.h"  // defines: MT_SKIP_WITHOUT_GPU

namespace mt {
namespace {

using i64 = std::int64_t;

// ---- Tolerances (GPU against CPU) -------------------------------------------------------------
// dweight and dbias: each is a start value plus N terms, summed by the CPU one row after another
// and by the GPU in 8 lanes per tile, then tile by tile. Two orders of the same fp32 sum differ by
// at most ~2 N 2^-24 of the sum of the terms' magnitudes (N 40000: 5e-3), typically by sqrt(N)
// 2^-24 of it (~1e-5). 1e-4 of (|start| + sum |term|) is ~10x the typical difference and far below
// a dropped row or tile (1/N of the scale and more: a missing tile of 79 rows is ~2e-3).
constexpr double kParamTol = 1e-4;
// dx: per row two sums of C terms in another order (lanes, then a butterfly), each off by ~C 2^-24
// relative at worst, then a few exact-order products: 1e-5 of the tensor's largest |dx| for fp32.
// bf16 dx is rounded once at the end: two fp32 values a few ulps apart may round to neighbouring
// bf16 values, one bf16 spacing apart (2^-8 to 2^-7 of the element, 8 significant bits), so bf16
// adds one spacing at the element's magnitude (seen on an H100: -0.439453125 against -0.44140625).
constexpr double kInputTol = 1e-5;
constexpr int kBf16Bits = 8;  // significant bits, the implicit one included

DeviceOptions cpu_options(int threads) { return DeviceOptions{Device::cpu(), 0, threads}; }
DeviceOptions gpu_options() { return DeviceOptions{Device::cuda(0), 0, 1}; }

template <class T>
T from_float(float x) {
  if constexpr (sizeof(T) == 2) {
    return bf16::from_float(x);
  } else {
    return x;
  }
}
template <class T>
float to_float(T x) {
  if constexpr (sizeof(T) == 2) {
    return x.to_float();
  } else {
    return x;
  }
}

template <class T>
std::vector<T> random_values(std::mt19937& rng, i64 n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (T& x : v) x = from_float<T>(dist(rng));
  return v;
}

template <class T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// One problem: the inputs on the host (mean and rstd from the forward on the CPU, so that the
// normalized values are those of a real layernorm) and the starting gradients.
template <class T>
struct Problem {
  i64 N = 0, C = 0;
  std::vector<T> x, dout, dx0;
  std::vector<float> weight, mean, rstd, dweight0, dbias0;
};

template <class T>
Problem<T> make_problem(i64 N, i64 C, unsigned seed) {
  std::mt19937 rng(seed);
  Problem<T> p;
  p.N = N;
  p.C = C;
  p.x = random_values<T>(rng, N * C, -2.0f, 3.0f);
  p.dout = random_values<T>(rng, N * C, -1.0f, 1.0f);
  p.dx0 = random_values<T>(rng, N * C, -0.5f, 0.5f);
  p.weight = random_values<float>(rng, C, 0.5f, 1.5f);
  p.dweight0 = random_values<float>(rng, C, -1.0f, 1.0f);
  p.dbias0 = random_values<float>(rng, C, -1.0f, 1.0f);
  DeviceContext ctx(cpu_options(1));
  const std::vector<float> bias = random_values<float>(rng, C, -0.1f, 0.1f);
  Tensor out = Tensor::empty({N, C}, dtype_of<T>::value, ctx), mean = Tensor::empty({N}, DType::F32, ctx),
         rstd = Tensor::empty({N}, DType::F32, ctx);
  nn::layernorm_forward(ctx, Tensor::from_host(p.x, {N, C}, ctx), Tensor::from_host(p.weight, {C}, ctx),
                        Tensor::from_host(bias, {C}, ctx), out, mean, rstd);
  p.mean = mean.to_host<float>();
  p.rstd = rstd.to_host<float>();
  return p;
}

template <class T>
struct Grads {
  std::vector<T> dx;
  std::vector<float> dweight, dbias;
};

enum class Way { Fused, InputThenParams, ParamsThenInput };

template <class T>
Grads<T> run(const Problem<T>& p, DeviceOptions options, Way way) {
  DeviceContext ctx(options);
  const Tensor x = Tensor::from_host(p.x, {p.N, p.C}, ctx), dout = Tensor::from_host(p.dout, {p.N, p.C}, ctx);
  const Tensor weight = Tensor::from_host(p.weight, {p.C}, ctx), mean = Tensor::from_host(p.mean, {p.N}, ctx),
               rstd = Tensor::from_host(p.rstd, {p.N}, ctx);
  Tensor dx = Tensor::from_host(p.dx0, {p.N, p.C}, ctx), dweight = Tensor::from_host(p.dweight0, {p.C}, ctx),
         dbias = Tensor::from_host(p.dbias0, {p.C}, ctx);
  switch (way) {
    case Way::Fused:
      nn::layernorm_backward(ctx, dout, x, weight, mean, rstd, dx, dweight, dbias);
      break;
    case Way::InputThenParams:
      nn::layernorm_backward_input(ctx, dout, x, weight, mean, rstd, dx);
      nn::layernorm_backward_params(ctx, dout, x, mean, rstd, dweight, dbias);
      break;
    case Way::ParamsThenInput:
      nn::layernorm_backward_params(ctx, dout, x, mean, rstd, dweight, dbias);
      nn::layernorm_backward_input(ctx, dout, x, weight, mean, rstd, dx);
      break;
  }
  return {dx.to_host<T>(), dweight.to_host<float>(), dbias.to_host<float>()};
}

template <class T>
void expect_same_bits(const Grads<T>& got, const Grads<T>& want, const char* what) {
  EXPECT_TRUE(bytes_of(got.dx) == bytes_of(want.dx)) << what << ": dx";
  EXPECT_TRUE(bytes_of(got.dweight) == bytes_of(want.dweight)) << what << ": dweight";
  EXPECT_TRUE(bytes_of(got.dbias) == bytes_of(want.dbias)) << what << ": dbias";
}

// The sizes: partial warps and column tiles; a row count past the CUDA kernel's 512 row tiles.
struct Size {
  i64 N, C;
};
constexpr Size kSizes[] = {{1, 8}, {50, 150}, {333, 64}, {40000, 40}};

template <class T>
class LayerNormBackwardSplit : public ::testing::Test {};
using ActivationTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(LayerNormBackwardSplit, ActivationTypes);

TYPED_TEST(LayerNormBackwardSplit, HalvesGiveTheFusedBitsOnTheCpu) {
  using T = TypeParam;
  for (const Size s : kSizes) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << ", C " << s.C);
    const Problem<T> p = make_problem<T>(s.N, s.C, 3);
    for (int threads : {1, 3}) {
      const Grads<T> fused = run(p, cpu_options(threads), Way::Fused);
      expect_same_bits(run(p, cpu_options(threads), Way::InputThenParams), fused, "input, then params");
      expect_same_bits(run(p, cpu_options(threads), Way::ParamsThenInput), fused, "params, then input");
    }
  }
}

// The gap between neighbouring values of `bits` significant bits around |x| (0: none).
double spacing(double x, int bits) {
  return bits == 0 || x == 0.0 ? 0.0 : std::ldexp(1.0, std::ilogb(x) - (bits - 1));
}

// |got - want| <= tol * scale (+ one spacing of `rounded_bits` at the larger of the two, for bf16 dx).
template <class V>
void expect_near(const std::vector<V>& got, const std::vector<V>& want, const std::vector<double>& scale, double tol,
                 int rounded_bits, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0.0;  // the largest error over its allowance
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = to_float(got[i]), w = to_float(want[i]);
    const double allowed = tol * scale[i] + spacing(std::max(std::abs(g), std::abs(w)), rounded_bits);
    worst = std::max(worst, std::abs(g - w) / allowed);
    if (std::abs(g - w) > allowed) {
      ADD_FAILURE() << what << "[" << i << "]: GPU " << g << ", CPU " << w << ", allowed " << allowed;
      return;
    }
  }
  std::printf("%s: worst error / allowed %.3g\n", what, worst);
}

TYPED_TEST(LayerNormBackwardSplit, GpuHalvesRepeatGiveTheFusedBitsAndAgreeWithTheCpu) {
  MT_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  for (const Size s : kSizes) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << ", C " << s.C);
    const Problem<T> p = make_problem<T>(s.N, s.C, 4);
    const Grads<T> gpu = run(p, gpu_options(), Way::InputThenParams);
    expect_same_bits(run(p, gpu_options(), Way::InputThenParams), gpu, "a second GPU run");
    expect_same_bits(run(p, gpu_options(), Way::Fused), gpu, "the GPU's fused backward");
    const Grads<T> cpu = run(p, cpu_options(2), Way::Fused);
    // Scales: per column |start| + the sum over rows of |term|; for dx the largest |dx| of the tensor.
    std::vector<double> sw(static_cast<std::size_t>(s.C)), sb(sw.size());
    for (i64 c = 0; c < s.C; ++c) {
      sw[static_cast<std::size_t>(c)] = std::abs(p.dweight0[static_cast<std::size_t>(c)]);
      sb[static_cast<std::size_t>(c)] = std::abs(p.dbias0[static_cast<std::size_t>(c)]);
    }
    for (i64 n = 0; n < s.N; ++n) {
      for (i64 c = 0; c < s.C; ++c) {
        const std::size_t i = static_cast<std::size_t>(n * s.C + c);
        const double g = to_float(p.dout[i]);
        const auto row = static_cast<std::size_t>(n);
        const double norm = (to_float(p.x[i]) - p.mean[row]) * p.rstd[row];
        sw[static_cast<std::size_t>(c)] += std::abs(g * norm);
        sb[static_cast<std::size_t>(c)] += std::abs(g);
      }
    }
    double dx_max = 0.0;
    for (const T v : cpu.dx) dx_max = std::max(dx_max, static_cast<double>(std::abs(to_float(v))));
    const std::vector<double> sx(cpu.dx.size(), dx_max);
    expect_near(gpu.dx, cpu.dx, sx, kInputTol, sizeof(T) == 2 ? kBf16Bits : 0, "dx");
    expect_near(gpu.dweight, cpu.dweight, sw, kParamTol, 0, "dweight");
    expect_near(gpu.dbias, cpu.dbias, sb, kParamTol, 0, "dbias");
  }
}

}  // namespace
}  // namespace mt
