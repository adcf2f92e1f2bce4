// The row kernels cut for the GPU (runtime/backend.h Cuda::run_fast, chosen by MESHTRAIN_CUDA_KERNELS or
// DeviceContext::set_cuda_kernels): LayerNorm and RMSNorm forward (a warp per row), the causal
// softmax of batched-GEMM attention and its backward (a warp or a block per row), the fused
// classifier (a block per row). On a GPU (skipped without one), for fp32 and bf16 activations, each
//   - agrees with the reference unit kernel run on the same GPU,
//   - agrees with the CPU,
//   - repeats its own bits on a second run (and in place gives the bits it gives out of place),
// over shapes with partial warps and packs (channels and rows not multiples of 8 or 32), rows past
// the launch's grid, rows of one entry (t = 0, T = 1), rows long enough for the block path, the
// GPT-2 vocabulary and small odd ones, a padded and an unpadded vocabulary, and a misaligned view.
// Entries the ops must not read (past the diagonal, the padding columns) hold NaN, and outputs
// start as NaN, so a read of the one or a missed write of the other shows.
// The residual add fused with either norm likewise (its sum the same bits on every device). On the
// CPU: the fused add and norm give the bits of kernels::binary's Add then the norm, at 1 and 2
// threads; nn::cross_entropy_fused gives cross_entropy_forward-then-backward's bits, and the
// switch's parsing and scope.
//
// Tolerances. The kernels compute the reference's function and differ only in the order of their
// fp32 sums (the reference: 8 interleaved lanes, or a plain loop; the kernels: strided lanes, a
// butterfly, warps in order). Two orders of a sum of n terms differ by about sqrt(n) 2^-24 of the sum
// of the terms' magnitudes (a random walk of roundings; the bound n 2^-24 is not approached by
// random data): sum_tol(n) = 8 sqrt(n) 2^-24 (at least 16 ulps) allows 8 times that. Each output
// is the reference's expression of those sums, so its error is sum_tol(n) times the magnitude the
// sum feeds into it (stated per op below). The CPU's exp_f and logf differ from the GPU's by an
// ulp or two (nvcc fuses multiply-adds), inside the same allowance. bf16 outputs are rounded once
// at the store: two fp32 values within the allowance may round to neighbouring bf16 values, so bf16
// adds one bf16 spacing at the element's magnitude (2^-7 of it at most, 8 significant bits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/backend.h"
#include "runtime/context.h"             // defines: DeviceContext, DeviceOptions
#include "runtime/cuda_kernel_choice.h"  // defines: CudaKernels, parse_cuda_kernels, cuda_kernels_name, kCudaKernelsEnv
#include "runtime/error.h"               // defines: EnvironmentError
#include "runtime/kernels.h"             // defines: kernels::fill, kernels::binary
#include "runtime/nn_kernels.h"          // defines: nn::layernorm_forward, nn::rmsnorm_forward, nn::add_layernorm_forward, nn::add_rmsnorm_forward, nn::cross_entropy_fused, nn::cross_entropy_forward, nn::cross_entropy_backward
#include "runtime/nn_run.h"              // defines: nn::run
#include "runtime/tensor.h"              // defines: Tensor
#include "tests/gpu_skip.h"              // defines: MT_SKIP_WITHOUT_GPU
#include "tests/dtype_values.h"

namespace mt {
namespace {

using testing::widened;

using i64 = std::int64_t;
using backend::kClassifierMaxBlocks;
using backend::kRowMaxBlocks;
using backend::kRowWarpsPerBlock;
using backend::kSoftmaxWarpMaxColumns;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int kBf16Bits = 8;  // significant bits, the implicit one included

DeviceOptions cpu_options(int threads) { return DeviceOptions{Device::cpu(), 0, threads, std::nullopt}; }
DeviceOptions gpu_options() { return DeviceOptions{Device::cuda(0), 0, 1, CudaKernels{}}; }

// The allowance the ops state for a sum in another order (runtime/ops/tolerance.h, kSumOrder).
double sum_tol(i64 n) { return nn_math::kSumOrder * std::sqrt(static_cast<double>(std::max<i64>(n, 4))); }

// The gap between neighbouring values of `bits` significant bits around |x| (0 for fp32 outputs).
double spacing(double x, int bits) {
  return bits == 0 || x == 0.0 || !std::isfinite(x) ? 0.0 : std::ldexp(1.0, std::ilogb(x) - (bits - 1));
}

template <class T>
constexpr int rounded_bits() {
  return sizeof(T) == 2 ? kBf16Bits : 0;
}

template <class T>
std::vector<T> narrowed(const std::vector<float>& v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    std::vector<T> out;
    out.reserve(v.size());
    for (float x : v) out.push_back(bf16::from_float(x));
    return out;
  }
}

// Values representable in T (so the CPU and GPU read the same inputs whatever T is).
template <class T>
std::vector<float> random_values(std::mt19937& rng, i64 n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  if constexpr (!std::is_same_v<T, float>) {
    for (float& x : v) x = bf16::from_float(x).to_float();
  }
  return v;
}

// A tensor of `shape` holding v in T; with `offset` 1 it starts one element past its allocation's
// (16-byte aligned) start, so its rows are not at 16-byte boundaries.
template <class T>
Tensor upload(DeviceContext& ctx, const std::vector<float>& v, Shape shape, int offset = 0) {
  std::vector<T> h = narrowed<T>(v);
  h.insert(h.begin(), static_cast<std::size_t>(offset), T{});
  const i64 n = static_cast<i64>(v.size());
  return Tensor::from_host(h, {n + offset}, ctx).flat_slice(offset, n).reshape(std::move(shape));
}

// An output of `shape` in `dtype`, NaN before the op runs.
Tensor nan_output(DeviceContext& ctx, Shape shape, DType dtype, int offset = 0) {
  const i64 n = shape_numel(shape);
  Tensor whole = Tensor::empty({n + offset}, dtype, ctx);
  kernels::fill(ctx, whole, std::nan(""));
  return whole.flat_slice(offset, n).reshape(std::move(shape));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// |got - want| <= allowed[i] + (bf16 outputs) one spacing at the larger of the two; NaN never passes.
void expect_within(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& allowed,
                   int bits, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(allowed.size(), want.size()) << what;
  double worst = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    const double a = allowed[i] + spacing(std::max(std::abs(g), std::abs(w)), bits);
    if (!(std::abs(g - w) <= a)) {
      ADD_FAILURE() << what << "[" << i << "]: " << g << ", reference " << w << ", allowed " << a;
      return;
    }
    if (a > 0.0) worst = std::max(worst, std::abs(g - w) / a);
  }
  std::printf("%s: worst error / allowed %.3g\n", what.c_str(), worst);
}

CudaKernels only(OpFamily f) { return CudaKernels::of({f}); }

template <class T>
class RowKernels : public ::testing::Test {};
using ActivationTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(RowKernels, ActivationTypes);

// ---- LayerNorm and RMSNorm forward ------------------------------------------------------------
// Allowances, C channels: mean within sum_tol(C) of the row's mean |x| (a sum of C terms over C);
// rstd within sum_tol(C) of itself (the variance, or mean square, is a sum of C non-negative
// terms); each output within sum_tol(C) of the row's largest |output| (the mean and rstd enter
// every element through (x - mean) * rstd).

struct NormCase {
  i64 N, C;
  int offset = 0;  // 1: rows off 16-byte boundaries (the scalar path where C alone allows packs)
};
const NormCase kNormCases[] = {
    {1, 1},  {3, 5},     {7, 31},  {5, 33},   {4, 8},
    {64, 768}, {9, 770}, {3, 4100}, {kRowWarpsPerBlock * kRowMaxBlocks + 37, 12},  // rows past the grid
    {16, 768, 1},
};

struct NormInputs {
  NormCase c;
  std::vector<float> x, weight, bias;
};

template <class T>
NormInputs norm_inputs(const NormCase& c, unsigned seed) {
  std::mt19937 rng(seed);
  NormInputs in{c, random_values<T>(rng, c.N * c.C, -2.0f, 3.0f), random_values<float>(rng, c.C, 0.5f, 1.5f),
                random_values<float>(rng, c.C, -0.2f, 0.2f)};
  return in;
}

struct NormOutputs {
  std::vector<float> out, mean, rstd;  // mean empty for RMSNorm
};

template <class T>
NormOutputs run_norm(DeviceContext& ctx, const NormInputs& in, bool rms) {
  const i64 N = in.c.N, C = in.c.C;
  const DType dt = dtype_of<T>::value;
  const Tensor x = upload<T>(ctx, in.x, {N, C}, in.c.offset);
  const Tensor w = upload<float>(ctx, in.weight, {C}, in.c.offset);
  Tensor out = nan_output(ctx, {N, C}, dt, in.c.offset), rstd = nan_output(ctx, {N}, DType::F32);
  if (rms) {
    nn::rmsnorm_forward(ctx, x, w, 1e-5f, out, rstd);
    return {widened(out), {}, widened(rstd)};
  }
  const Tensor b = upload<float>(ctx, in.bias, {C}, in.c.offset);
  Tensor mean = nan_output(ctx, {N}, DType::F32);
  nn::layernorm_forward(ctx, x, w, b, out, mean, rstd);
  return {widened(out), widened(mean), widened(rstd)};
}

template <class T>
void expect_norms_near(const NormOutputs& got, const NormOutputs& want, const NormInputs& in,
                       const std::string& what) {
  const i64 N = in.c.N, C = in.c.C;
  const double tol = sum_tol(C);
  std::vector<double> a_out(want.out.size()), a_mean(want.mean.size()), a_rstd(want.rstd.size());
  for (i64 n = 0; n < N; ++n) {
    double out_max = 0.0, x_abs = 0.0;
    for (i64 c = 0; c < C; ++c) {
      out_max = std::max(out_max, static_cast<double>(std::abs(want.out[static_cast<std::size_t>(n * C + c)])));
      x_abs += std::abs(in.x[static_cast<std::size_t>(n * C + c)]);
    }
    for (i64 c = 0; c < C; ++c) a_out[static_cast<std::size_t>(n * C + c)] = tol * out_max;
    if (!a_mean.empty()) a_mean[static_cast<std::size_t>(n)] = tol * x_abs / static_cast<double>(C);
    a_rstd[static_cast<std::size_t>(n)] = tol * std::abs(want.rstd[static_cast<std::size_t>(n)]);
  }
  expect_within(got.out, want.out, a_out, rounded_bits<T>(), what + " output");
  expect_within(got.mean, want.mean, a_mean, 0, what + " mean");
  expect_within(got.rstd, want.rstd, a_rstd, 0, what + " rstd");
}

bool same_norm_bits(const NormOutputs& a, const NormOutputs& b) {
  return same_bits(a.out, b.out) && same_bits(a.mean, b.mean) && same_bits(a.rstd, b.rstd);
}

TYPED_TEST(RowKernels, NormsOnTheGpuAgreeWithTheReferenceKernelAndTheCpuAndRepeat) {
  MT_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  DeviceContext gpu(gpu_options()), cpu(cpu_options(2));
  bool any_differs = false;  // from the reference kernel's bits, somewhere: else the switch did nothing
  for (const NormCase& c : kNormCases) {
    const NormInputs in = norm_inputs<T>(c, static_cast<unsigned>(c.N * 31 + c.C));
    for (bool rms : {false, true}) {
      const std::string what = std::string(rms ? "rmsnorm" : "layernorm") + " N " + std::to_string(c.N) + " C " +
                               std::to_string(c.C) + (c.offset != 0 ? " misaligned" : "");
      SCOPED_TRACE(what);
      gpu.set_cuda_kernels({});
      const NormOutputs reference = run_norm<T>(gpu, in, rms);
      gpu.set_cuda_kernels(only(OpFamily::Norms));
      const NormOutputs fast = run_norm<T>(gpu, in, rms);
      EXPECT_TRUE(same_norm_bits(run_norm<T>(gpu, in, rms), fast)) << what << ": a second run";
      any_differs = any_differs || !same_norm_bits(fast, reference);
      expect_norms_near<T>(fast, reference, in, what + " against the GPU reference");
      expect_norms_near<T>(fast, run_norm<T>(cpu, in, rms), in, what + " against the CPU");
    }
  }
  if (std::is_same_v<T, float>) {
    EXPECT_TRUE(any_differs) << "the warp kernels gave the unit kernel's bits everywhere";
  }
}

// ---- The residual add fused with LayerNorm or RMSNorm -----------------------------------------
// sum = x + y is one add rounded into T on every device: the same bits everywhere. The norm of the
// stored sum has the unfused norm's allowances (above), the sum in place of x.

struct AddNormOutputs {
  std::vector<float> sum;
  NormOutputs norm;
};

// into_y: the norm overwrites y (the model's lnf over the last layer's MLP output).
template <class T>
AddNormOutputs run_add_norm(DeviceContext& ctx, const NormInputs& in, const std::vector<float>& y, bool rms,
                            bool into_y = false) {
  const i64 N = in.c.N, C = in.c.C;
  const DType dt = dtype_of<T>::value;
  const Tensor x = upload<T>(ctx, in.x, {N, C}, in.c.offset), yt = upload<T>(ctx, y, {N, C}, in.c.offset);
  const Tensor w = upload<float>(ctx, in.weight, {C}, in.c.offset);
  Tensor sum = nan_output(ctx, {N, C}, dt, in.c.offset), out = into_y ? yt : nan_output(ctx, {N, C}, dt, in.c.offset);
  Tensor rstd = nan_output(ctx, {N}, DType::F32);
  if (rms) {
    nn::add_rmsnorm_forward(ctx, x, yt, w, 1e-5f, sum, out, rstd);
    return {widened(sum), {widened(out), {}, widened(rstd)}};
  }
  const Tensor b = upload<float>(ctx, in.bias, {C}, in.c.offset);
  Tensor mean = nan_output(ctx, {N}, DType::F32);
  nn::add_layernorm_forward(ctx, x, yt, w, b, sum, out, mean, rstd);
  return {widened(sum), {widened(out), widened(mean), widened(rstd)}};
}

// The unfused pair: kernels::binary's Add, then the norm of the stored sum.
template <class T>
AddNormOutputs run_add_then_norm(DeviceContext& ctx, const NormInputs& in, const std::vector<float>& y, bool rms) {
  const i64 N = in.c.N, C = in.c.C;
  const Tensor x = upload<T>(ctx, in.x, {N, C}, in.c.offset), yt = upload<T>(ctx, y, {N, C}, in.c.offset);
  Tensor sum = nan_output(ctx, {N, C}, dtype_of<T>::value, in.c.offset);
  kernels::binary(ctx, BinaryOp::Add, x, yt, sum);
  NormInputs of_sum = in;
  of_sum.x = widened(sum);
  return {of_sum.x, run_norm<T>(ctx, of_sum, rms)};
}

bool same_add_norm_bits(const AddNormOutputs& a, const AddNormOutputs& b) {
  return same_bits(a.sum, b.sum) && same_norm_bits(a.norm, b.norm);
}

TYPED_TEST(RowKernels, AddNormOnTheCpuGivesTheBitsOfTheAddThenTheNormAtAnyThreadCount) {
  using T = TypeParam;
  for (int threads : {1, 2}) {
    DeviceContext cpu(cpu_options(threads));
    for (const NormCase& c : kNormCases) {
      const NormInputs in = norm_inputs<T>(c, static_cast<unsigned>(c.N * 17 + c.C));
      std::mt19937 rng(static_cast<unsigned>(c.N + 5 * c.C));
      const std::vector<float> y = random_values<T>(rng, c.N * c.C, -1.5f, 1.5f);
      for (bool rms : {false, true}) {
        SCOPED_TRACE(std::string(rms ? "rmsnorm" : "layernorm") + " N " + std::to_string(c.N) + " C " +
                     std::to_string(c.C) + " threads " + std::to_string(threads));
        const AddNormOutputs unfused = run_add_then_norm<T>(cpu, in, y, rms);
        EXPECT_TRUE(same_add_norm_bits(run_add_norm<T>(cpu, in, y, rms), unfused));
        EXPECT_TRUE(same_add_norm_bits(run_add_norm<T>(cpu, in, y, rms, /*into_y=*/true), unfused)) << "out in y";
      }
    }
  }
}

TYPED_TEST(RowKernels, AddNormOnTheGpuAgreesWithTheReferenceKernelAndTheCpuAndRepeats) {
  MT_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  DeviceContext gpu(gpu_options()), cpu(cpu_options(2));
  for (const NormCase& c : kNormCases) {
    const NormInputs in = norm_inputs<T>(c, static_cast<unsigned>(c.N * 17 + c.C));
    std::mt19937 rng(static_cast<unsigned>(c.N + 5 * c.C));
    const std::vector<float> y = random_values<T>(rng, c.N * c.C, -1.5f, 1.5f);
    for (bool rms : {false, true}) {
      const std::string what = std::string(rms ? "add+rmsnorm" : "add+layernorm") + " N " + std::to_string(c.N) +
                               " C " + std::to_string(c.C) + (c.offset != 0 ? " misaligned" : "");
      SCOPED_TRACE(what);
      const AddNormOutputs on_cpu = run_add_norm<T>(cpu, in, y, rms);
      gpu.set_cuda_kernels({});
      const AddNormOutputs reference = run_add_norm<T>(gpu, in, y, rms);
      gpu.set_cuda_kernels(only(OpFamily::Norms));
      const AddNormOutputs fast = run_add_norm<T>(gpu, in, y, rms);
      EXPECT_TRUE(same_add_norm_bits(run_add_norm<T>(gpu, in, y, rms), fast)) << what << ": a second run";
      EXPECT_TRUE(same_add_norm_bits(run_add_norm<T>(gpu, in, y, rms, /*into_y=*/true), fast)) << what << ": out in y";
      gpu.set_cuda_kernels({});
      EXPECT_TRUE(same_add_norm_bits(run_add_norm<T>(gpu, in, y, rms, /*into_y=*/true), reference))
          << what << ": the reference kernel, out in y";
      gpu.set_cuda_kernels(only(OpFamily::Norms));
      EXPECT_TRUE(same_bits(fast.sum, on_cpu.sum) && same_bits(reference.sum, on_cpu.sum)) << what << ": the sum";
      NormInputs of_sum = in;
      of_sum.x = on_cpu.sum;
      expect_norms_near<T>(fast.norm, reference.norm, of_sum, what + " against the GPU reference");
      expect_norms_near<T>(fast.norm, on_cpu.norm, of_sum, what + " against the CPU");
      expect_norms_near<T>(reference.norm, on_cpu.norm, of_sum, what + " reference against the CPU");
    }
  }
}

// ---- Causal softmax and its backward ----------------------------------------------------------
// Allowances, n = t + 1 entries in the row: p within sum_tol(n) of itself (p = exp * (1 / sum), the
// exponentials the same, the sum of n positive terms in another order); ds within sum_tol(n) of
// |ds| + |p| * sum_k |p_k dp_k| * scale (weighted, a sum of n terms, enters as p * weighted * scale).

struct SoftmaxCase {
  i64 rows, L;
};
const SoftmaxCase kSoftmaxCases[] = {
    {1, 1},     {4, 1},  // rows of a single entry (T = 1)
    {37, 37},   {2 * 64, 64}, {3 * 33, 33}, {2 * 1024, 1024},
    {kRowWarpsPerBlock * kRowMaxBlocks + 40, 8},                              // rows past the grid
    {kSoftmaxWarpMaxColumns + 3, kSoftmaxWarpMaxColumns + 3},                 // a block per row, one by one
    {2 * (kSoftmaxWarpMaxColumns + 8) + 3, kSoftmaxWarpMaxColumns + 8},       // a block per row, in packs
};

struct SoftmaxInputs {
  SoftmaxCase c;
  float scale;
  std::vector<float> scores, p, dp;  // NaN past the diagonal: never read
};

template <class T>
SoftmaxInputs softmax_inputs(const SoftmaxCase& c, unsigned seed) {
  std::mt19937 rng(seed);
  const i64 n = c.rows * c.L;
  SoftmaxInputs in{c, 0.35f, random_values<float>(rng, n, -9.0f, 9.0f), random_values<T>(rng, n, 0.0f, 1.0f),
                   random_values<float>(rng, n, -1.0f, 1.0f)};
  for (i64 r = 0; r < c.rows; ++r)
    for (i64 j = r % c.L + 1; j < c.L; ++j) {
      const auto i = static_cast<std::size_t>(r * c.L + j);
      in.scores[i] = in.p[i] = in.dp[i] = kNaN;
    }
  return in;
}

template <class T>
void softmax_forward(DeviceContext& ctx, const SoftmaxInputs& in, const Tensor& scores, Tensor& p) {
  nn::run<nn_math::CausalSoftmaxForward>(ctx, dtype_of<T>::value, [&](auto& op) {
    using U = std::remove_pointer_t<decltype(op.p)>;
    op = {static_cast<const float*>(scores.data()), static_cast<U*>(p.data()), in.c.rows, in.c.L, in.scale};
  });
}

template <class T>
void softmax_backward(DeviceContext& ctx, const SoftmaxInputs& in, const Tensor& p, const Tensor& dp, Tensor& ds) {
  nn::run<nn_math::CausalSoftmaxBackward>(ctx, dtype_of<T>::value, [&](auto& op) {
    using U = std::remove_pointer_t<decltype(op.ds)>;
    op = {static_cast<const U*>(p.data()), static_cast<const float*>(dp.data()), static_cast<U*>(ds.data()),
          in.c.rows, in.c.L, in.scale};
  });
}

struct SoftmaxOutputs {
  std::vector<float> p, ds;
};

template <class T>
SoftmaxOutputs run_softmax(DeviceContext& ctx, const SoftmaxInputs& in) {
  const Shape shape{in.c.rows, in.c.L};
  const DType dt = dtype_of<T>::value;
  const Tensor scores = upload<float>(ctx, in.scores, shape), p_in = upload<T>(ctx, in.p, shape);
  const Tensor dp = upload<float>(ctx, in.dp, shape);
  Tensor p = nan_output(ctx, shape, dt), ds = nan_output(ctx, shape, dt);
  softmax_forward<T>(ctx, in, scores, p);
  softmax_backward<T>(ctx, in, p_in, dp, ds);
  return {widened(p), widened(ds)};
}

// fp32 only: p over the scores, ds over dp, as the attention does.
SoftmaxOutputs run_softmax_in_place(DeviceContext& ctx, const SoftmaxInputs& in) {
  const Shape shape{in.c.rows, in.c.L};
  Tensor scores = upload<float>(ctx, in.scores, shape), dp = upload<float>(ctx, in.dp, shape);
  const Tensor p_in = upload<float>(ctx, in.p, shape);
  softmax_forward<float>(ctx, in, scores, scores);
  softmax_backward<float>(ctx, in, p_in, dp, dp);
  return {widened(scores), widened(dp)};
}

template <class T>
void expect_softmax_near(const SoftmaxOutputs& got, const SoftmaxOutputs& want, const SoftmaxInputs& in,
                         const std::string& what) {
  const i64 L = in.c.L;
  std::vector<double> a_p(want.p.size(), 0.0), a_ds(want.ds.size(), 0.0);
  for (i64 r = 0; r < in.c.rows; ++r) {
    const i64 n = r % L + 1;
    const double tol = sum_tol(n);
    double weighted_abs = 0.0;
    for (i64 j = 0; j < n; ++j) {
      const auto i = static_cast<std::size_t>(r * L + j);
      weighted_abs += std::abs(static_cast<double>(in.p[i]) * in.dp[i]);
    }
    for (i64 j = 0; j < n; ++j) {  // past the diagonal the allowance stays 0: exact zeros
      const auto i = static_cast<std::size_t>(r * L + j);
      a_p[i] = tol * std::abs(want.p[i]);
      a_ds[i] = tol * (std::abs(want.ds[i]) + std::abs(in.p[i]) * weighted_abs * in.scale);
    }
  }
  expect_within(got.p, want.p, a_p, rounded_bits<T>(), what + " p");
  expect_within(got.ds, want.ds, a_ds, rounded_bits<T>(), what + " ds");
}

TYPED_TEST(RowKernels, CausalSoftmaxOnTheGpuAgreesWithTheReferenceKernelAndTheCpuAndRepeats) {
  MT_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  DeviceContext gpu(gpu_options()), cpu(cpu_options(2));
  bool any_differs = false;
  for (const SoftmaxCase& c : kSoftmaxCases) {
    const std::string what = "rows " + std::to_string(c.rows) + " T " + std::to_string(c.L);
    SCOPED_TRACE(what);
    const SoftmaxInputs in = softmax_inputs<T>(c, static_cast<unsigned>(c.rows + 7 * c.L));
    gpu.set_cuda_kernels({});
    const SoftmaxOutputs reference = run_softmax<T>(gpu, in);
    gpu.set_cuda_kernels(only(OpFamily::Attention));
    const SoftmaxOutputs fast = run_softmax<T>(gpu, in);
    const SoftmaxOutputs again = run_softmax<T>(gpu, in);
    EXPECT_TRUE(same_bits(again.p, fast.p) && same_bits(again.ds, fast.ds)) << what << ": a second run";
    if constexpr (std::is_same_v<T, float>) {
      const SoftmaxOutputs in_place = run_softmax_in_place(gpu, in);
      EXPECT_TRUE(same_bits(in_place.p, fast.p) && same_bits(in_place.ds, fast.ds)) << what << ": in place";
    }
    any_differs = any_differs || !same_bits(fast.p, reference.p) || !same_bits(fast.ds, reference.ds);
    expect_softmax_near<T>(fast, reference, in, what + " against the GPU reference");
    expect_softmax_near<T>(fast, run_softmax<T>(cpu, in), in, what + " against the CPU");
  }
  if (std::is_same_v<T, float>) {
    EXPECT_TRUE(any_differs) << "the row kernels gave the unit kernel's bits everywhere";
  }
}

// ---- The fused classifier ---------------------------------------------------------------------
// Allowances, V real columns: lse (and so the loss) within e = sum_tol(V) + 2^-20 (1 + |lse|)
// absolutely (log of a sum of V positive terms off by sum_tol(V) relative, plus a few roundings at
// lse's magnitude: the log, the add, x - lse), the loss also 2^-22 of itself; dlogits within e of
// |dlogit| (exp_f(x - lse) is off by e relative), at the target e of |dlogit| + |dloss| (its p - 1).

struct ClassifierCase {
  i64 N, V, Vp;
};
const ClassifierCase kClassifierCases[] = {
    {1, 7, 7},     {3, 7, 8},        {kClassifierMaxBlocks + 100, 11, 16},  // rows past the grid
    {4, 50257, 50304},  // GPT-2: padded, whole packs
    {3, 50257, 50257},  {2, 1000, 1003},
};

struct ClassifierInputs {
  ClassifierCase c;
  float dloss;
  std::vector<float> logits;  // NaN in the padding: never read
  std::vector<std::int32_t> targets;
};

template <class T>
ClassifierInputs classifier_inputs(const ClassifierCase& c, unsigned seed) {
  std::mt19937 rng(seed);
  ClassifierInputs in{c, 0.37f, random_values<T>(rng, c.N * c.Vp, -8.0f, 8.0f), {}};
  std::uniform_int_distribution<std::int32_t> target(0, static_cast<std::int32_t>(c.V - 1));
  for (i64 n = 0; n < c.N; ++n) {
    in.targets.push_back(n == 0 ? 0 : (n == c.N - 1 ? static_cast<std::int32_t>(c.V - 1) : target(rng)));
    for (i64 j = c.V; j < c.Vp; ++j) in.logits[static_cast<std::size_t>(n * c.Vp + j)] = kNaN;
  }
  return in;
}

struct ClassifierOutputs {
  std::vector<float> losses, lse, dlogits;
};

// in_place: dlogits over the logits (as the model runs it).
template <class T>
ClassifierOutputs run_classifier(DeviceContext& ctx, const ClassifierInputs& in, bool in_place) {
  const ClassifierCase& c = in.c;
  Tensor logits = upload<T>(ctx, in.logits, {c.N, c.Vp});
  const Tensor targets = Tensor::from_host(in.targets, {c.N}, ctx);
  Tensor losses = nan_output(ctx, {c.N}, DType::F32), lse = nan_output(ctx, {c.N}, DType::F32);
  Tensor dlogits = in_place ? logits : nan_output(ctx, {c.N, c.Vp}, dtype_of<T>::value);
  nn::cross_entropy_fused(ctx, logits, targets, static_cast<int>(c.V), in.dloss, losses, lse, dlogits);
  return {widened(losses), widened(lse), widened(dlogits)};
}

bool same_classifier_bits(const ClassifierOutputs& a, const ClassifierOutputs& b) {
  return same_bits(a.losses, b.losses) && same_bits(a.lse, b.lse) && same_bits(a.dlogits, b.dlogits);
}

template <class T>
void expect_classifier_near(const ClassifierOutputs& got, const ClassifierOutputs& want,
                            const ClassifierInputs& in, const std::string& what) {
  const ClassifierCase& c = in.c;
  std::vector<double> a_loss(want.losses.size()), a_lse(want.lse.size()), a_d(want.dlogits.size(), 0.0);
  for (i64 n = 0; n < c.N; ++n) {
    const auto r = static_cast<std::size_t>(n);
    const double e = sum_tol(c.V) + 0x1p-20 * (1.0 + std::abs(want.lse[r]));
    a_lse[r] = e;
    a_loss[r] = e + 0x1p-22 * std::abs(want.losses[r]);
    for (i64 j = 0; j < c.V; ++j) {  // the padding's allowance stays 0: exact zeros
      const auto i = static_cast<std::size_t>(n * c.Vp + j);
      a_d[i] = e * (std::abs(want.dlogits[i]) + (j == in.targets[r] ? std::abs(in.dloss) : 0.0));
    }
  }
  expect_within(got.losses, want.losses, a_loss, 0, what + " losses");
  expect_within(got.lse, want.lse, a_lse, 0, what + " lse");
  expect_within(got.dlogits, want.dlogits, a_d, rounded_bits<T>(), what + " dlogits");
}

TYPED_TEST(RowKernels, ClassifierOnTheGpuAgreesWithTheReferenceKernelAndTheCpuAndRepeats) {
  MT_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  DeviceContext gpu(gpu_options()), cpu(cpu_options(2));
  bool any_differs = false;
  for (const ClassifierCase& c : kClassifierCases) {
    const std::string what =
        "N " + std::to_string(c.N) + " V " + std::to_string(c.V) + " Vp " + std::to_string(c.Vp);
    SCOPED_TRACE(what);
    const ClassifierInputs in = classifier_inputs<T>(c, static_cast<unsigned>(c.N + c.V));
    gpu.set_cuda_kernels({});
    const ClassifierOutputs reference = run_classifier<T>(gpu, in, true);
    gpu.set_cuda_kernels(only(OpFamily::Loss));
    const ClassifierOutputs fast = run_classifier<T>(gpu, in, true);
    EXPECT_TRUE(same_classifier_bits(run_classifier<T>(gpu, in, true), fast)) << what << ": a second run";
    EXPECT_TRUE(same_classifier_bits(run_classifier<T>(gpu, in, false), fast)) << what << ": out of place";
    any_differs = any_differs || !same_classifier_bits(fast, reference);
    expect_classifier_near<T>(fast, reference, in, what + " against the GPU reference");
    expect_classifier_near<T>(fast, run_classifier<T>(cpu, in, true), in, what + " against the CPU");
  }
  EXPECT_TRUE(any_differs) << "the block kernel gave the unit kernel's bits everywhere";
}

// On the CPU (and on CUDA's unit kernels, the same functor) the fused call is forward then backward.
TYPED_TEST(RowKernels, CrossEntropyFusedOnTheCpuGivesForwardThenBackwardBits) {
  using T = TypeParam;
  const ClassifierCase cases[] = {{3, 7, 8}, {5, 1000, 1003}, {2, 50257, 50304}};
  for (const ClassifierCase& c : cases) {
    const std::string what = "N " + std::to_string(c.N) + " V " + std::to_string(c.V);
    const ClassifierInputs in = classifier_inputs<T>(c, 5);
    for (int threads : {1, 3}) {
      DeviceContext ctx(cpu_options(threads));
      const Tensor logits = upload<T>(ctx, in.logits, {c.N, c.Vp});
      const Tensor targets = Tensor::from_host(in.targets, {c.N}, ctx);
      Tensor losses = nan_output(ctx, {c.N}, DType::F32), lse = nan_output(ctx, {c.N}, DType::F32);
      Tensor dlogits = nan_output(ctx, {c.N, c.Vp}, dtype_of<T>::value);
      nn::cross_entropy_forward(ctx, logits, targets, static_cast<int>(c.V), losses, lse);
      nn::cross_entropy_backward(ctx, logits, targets, lse, static_cast<int>(c.V), in.dloss, dlogits);
      const ClassifierOutputs two_calls{widened(losses), widened(lse), widened(dlogits)};
      for (bool in_place : {false, true}) {
        EXPECT_TRUE(same_classifier_bits(run_classifier<T>(ctx, in, in_place), two_calls))
            << what << " at " << threads << " threads" << (in_place ? ", in place" : "");
      }
    }
  }
}

// ---- The switch -------------------------------------------------------------------------------

class CudaKernelsSwitch : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv(kCudaKernelsEnv); }
};

TEST_F(CudaKernelsSwitch, ParsesFamiliesAndNamesTheVariableAndTheBadValue) {
  EXPECT_EQ(parse_cuda_kernels(""), CudaKernels{});
  EXPECT_EQ(parse_cuda_kernels("reference"), CudaKernels{});
  EXPECT_EQ(parse_cuda_kernels("all"), CudaKernels::all());
  EXPECT_EQ(parse_cuda_kernels("norms"), only(OpFamily::Norms));
  EXPECT_EQ(parse_cuda_kernels("loss,attention"), CudaKernels::of({OpFamily::Attention, OpFamily::Loss}));
  EXPECT_EQ(parse_cuda_kernels("norms,attention,loss,optimizer"), CudaKernels::all());
  EXPECT_EQ(CudaKernels::all(), fast_kernel_families());
  for (const CudaKernels k : {CudaKernels{}, CudaKernels::all(), CudaKernels::of({OpFamily::Norms, OpFamily::Loss})})
    EXPECT_EQ(parse_cuda_kernels(cuda_kernels_name(k)), k) << cuda_kernels_name(k);
  // Families without fast kernels (yet) are refused too: turning them on would change nothing.
  for (const char* bad : {"flash", "norms,", "norms,bogus", " norms", "All", "softmax", "embedding", "gemm"}) {
    try {
      parse_cuda_kernels(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const EnvironmentError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("MESHTRAIN_CUDA_KERNELS"), std::string::npos) << msg;
      EXPECT_NE(msg.find(bad), std::string::npos) << msg;
    }
  }
}

TEST_F(CudaKernelsSwitch, TheCpuIgnoresIt) {
  setenv(kCudaKernelsEnv, "not-a-family", 1);
  DeviceContext ctx(cpu_options(1));  // no error: the CPU never reads it
  EXPECT_EQ(ctx.cuda_kernels(), CudaKernels{});
  ctx.set_cuda_kernels(CudaKernels::all());
  EXPECT_EQ(ctx.cuda_kernels(), CudaKernels{});
}

TEST_F(CudaKernelsSwitch, AGpuContextReadsItUnlessItsOptionsSay) {
  MT_SKIP_WITHOUT_GPU();
  {
    DeviceContext ctx(DeviceOptions{Device::cuda(0), 0, 1, std::nullopt});
    EXPECT_EQ(ctx.cuda_kernels(), CudaKernels{}) << "the default is the reference kernels";
  }
  setenv(kCudaKernelsEnv, "attention,norms", 1);
  {
    DeviceContext ctx(DeviceOptions{Device::cuda(0), 0, 1, std::nullopt});
    EXPECT_EQ(ctx.cuda_kernels(), CudaKernels::of({OpFamily::Norms, OpFamily::Attention}));
    DeviceContext asked(gpu_options());
    EXPECT_EQ(asked.cuda_kernels(), CudaKernels{}) << "options override the variable";
  }
  setenv(kCudaKernelsEnv, "fast", 1);
  const auto from_env = [] { DeviceContext ctx(DeviceOptions{Device::cuda(0), 0, 1, std::nullopt}); };
  EXPECT_THROW(from_env(), EnvironmentError);
}

}  // namespace
}  // namespace mt
