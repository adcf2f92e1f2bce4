// GEMM epilogues (runtime/gemm.h): bias, bias + GELU keeping the pre-activation, the GELU's
// gradient, and the bias gradient next to a weight gradient.
//
// On the CPU an epilogue runs on the very fp32 result the plain GEMM would store, so each is
// checked bit for bit against that plain GEMM (fp32 C) and the per-element math of
// runtime/ops/gemm.h applied on the host, in fp32 and bf16, at several thread counts. The
// promises the layers lean on are checked against the kernels they replace: gelu_forward of the
// kept pre-activation repeats the GELU output (a recomputation), and the bias gradient has
// bias_backward's bits. Then the argument errors, MESHTRAIN_GEMM, and on a GPU (skipped without
// one) both CUDA paths against the CPU and repeating their own bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/context.h"         // defines: DeviceContext, DeviceOptions
#include "runtime/gemm.h"            // defines: GemmArgs, gemm, matmul, MatmulEpilogue, cuda_gemm_path_from_env
#include "runtime/nn_kernels.h"      // defines: nn::gelu_forward, nn::bias_backward
#include "runtime/ops/elementwise.h"
#include "runtime/ops/gemm.h"
#include "runtime/tensor.h"          // defines: Tensor
#include "tests/gpu_skip.h"          // defines: MT_SKIP_WITHOUT_GPU
#include "tests/test_helpers.h"      // defines: error_of, contains

namespace mt {
namespace {

using testing::contains;
using testing::error_of;
using i64 = std::int64_t;

DeviceOptions cpu_options(int threads) { return DeviceOptions{Device::cpu(), 0, threads}; }

// n random values in [-scale, scale) that are exact bf16 numbers, as fp32.
std::vector<float> random_bf16_values(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = bf16::from_float(dist(rng)).to_float();
  return v;
}

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// A tensor of dtype `dt` holding `values` (exact in bf16), and back as fp32.
Tensor make(const std::vector<float>& values, Shape shape, DType dt, DeviceContext& ctx) {
  if (dt == DType::F32) return Tensor::from_host(values, std::move(shape), ctx);
  std::vector<bf16> narrow;
  for (float x : values) narrow.push_back(bf16::from_float(x));
  return Tensor::from_host(narrow, std::move(shape), ctx);
}

std::vector<float> host(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.to_host<float>();
  std::vector<float> out;
  for (bf16 x : t.to_host<bf16>()) out.push_back(x.to_float());
  return out;
}

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  for (std::size_t i = 0; i < got.size(); ++i)
    if (bits(got[i]) != bits(want[i]))
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << got[i] << ", expected " << want[i];
  return ::testing::AssertionSuccess();
}

// The layer shapes: x [rows, in] times W [out, in]^T (forward), dy [rows, out] times W (the input
// gradient), dy^T x (the weight gradient, whose A is dy stored [k, m]). Sizes cross the CPU's
// 64-column blocks of the bias gradient and leave remainders everywhere.
struct Shapes {
  i64 rows = 37, in = 29, out = 130;
};

// What the CPU computes for one dtype at one thread count: every epilogue's outputs, and the
// plain-GEMM-plus-host-loop expectation for each.
struct Inputs {
  Shapes s;
  std::vector<float> x, w, dy, bias, pre;  // pre: a pre-activation [rows, in] for DGelu
  explicit Inputs(unsigned seed, Shapes shapes = {})
      : s(shapes),
        x(random_bf16_values(static_cast<std::size_t>(s.rows * s.in), seed)),
        w(random_bf16_values(static_cast<std::size_t>(s.out * s.in), seed + 1)),
        dy(random_bf16_values(static_cast<std::size_t>(s.rows * s.out), seed + 2)),
        bias(random_bf16_values(static_cast<std::size_t>(s.out), seed + 3)),
        pre(random_bf16_values(static_cast<std::size_t>(s.rows * s.in), seed + 4, 4.0f)) {}
};


// The plain GEMM's result in fp32: the value every epilogue starts from.
std::vector<float> plain_fp32(DeviceContext& ctx, const Tensor& a, bool ta, const Tensor& b, bool tb, i64 m, i64 n) {
  Tensor c = Tensor::empty({m, n}, DType::F32, ctx);
  matmul(ctx, a, ta, b, tb, c);
  return host(c);
}

template <class T>
void check_cpu_epilogues(DType dt, int threads) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " at " + std::to_string(threads) + " threads");
  DeviceContext ctx(cpu_options(threads));
  const Inputs in(11);
  const Shapes& s = in.s;
  const Tensor x = make(in.x, {s.rows, s.in}, dt, ctx);
  const Tensor w = make(in.w, {s.out, s.in}, dt, ctx);
  const Tensor dy = make(in.dy, {s.rows, s.out}, dt, ctx);
  const Tensor bias = Tensor::from_host(in.bias, {s.out}, ctx);
  const std::vector<float> forward = plain_fp32(ctx, x, false, w, true, s.rows, s.out);
  const std::vector<float> input_grad = plain_fp32(ctx, dy, false, w, false, s.rows, s.in);

  {  // Bias
    Tensor y = Tensor::empty({s.rows, s.out}, dt, ctx);
    matmul(ctx, x, false, w, true, y, 1.0f, 0.0f, MatmulEpilogue::with_bias(bias));
    std::vector<float> want(forward.size());
    for (i64 r = 0; r < s.rows; ++r)
      for (i64 j = 0; j < s.out; ++j) {
        const auto i = static_cast<std::size_t>(r * s.out + j);
        want[i] = widen(gemm_math::store_bias<T>(forward[i], in.bias[static_cast<std::size_t>(j)]));
      }
    EXPECT_TRUE(same_bits(host(y), want, "bias"));
  }
  for (bool with_bias : {true, false}) {  // BiasGelu, and the GELU alone
    SCOPED_TRACE(with_bias ? "bias+gelu" : "gelu");
    Tensor pre = Tensor::empty({s.rows, s.out}, dt, ctx);
    Tensor post = Tensor::empty({s.rows, s.out}, dt, ctx);
    matmul(ctx, x, false, w, true, post, 1.0f, 0.0f, MatmulEpilogue::bias_gelu(with_bias ? &bias : nullptr, pre));
    std::vector<float> want_pre(forward.size()), want_post(forward.size());
    for (i64 r = 0; r < s.rows; ++r)
      for (i64 j = 0; j < s.out; ++j) {
        const auto i = static_cast<std::size_t>(r * s.out + j);
        T p{}, o{};
        gemm_math::store_bias_gelu<T>(forward[i], with_bias ? in.bias[static_cast<std::size_t>(j)] : 0.0f, p, o);
        want_pre[i] = widen(p);
        want_post[i] = widen(o);
      }
    EXPECT_TRUE(same_bits(host(pre), want_pre, "pre-activation"));
    EXPECT_TRUE(same_bits(host(post), want_post, "gelu"));
    Tensor again = Tensor::empty({s.rows, s.out}, dt, ctx);  // what a recomputation gives
    nn::gelu_forward(ctx, pre, again);
    EXPECT_TRUE(same_bits(host(again), host(post), "gelu_forward of the kept pre-activation"));
  }
  {  // DGelu, into a tensor of its own and into the pre-activation itself
    const Tensor pre = make(in.pre, {s.rows, s.in}, dt, ctx);
    std::vector<float> want(input_grad.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      want[i] = widen(gemm_math::store_dgelu<T>(input_grad[i], narrow_to<T>(in.pre[i])));
    Tensor dpre = Tensor::empty({s.rows, s.in}, dt, ctx);
    matmul(ctx, dy, false, w, false, dpre, 1.0f, 0.0f, MatmulEpilogue::dgelu(const_cast<Tensor&>(pre)));
    EXPECT_TRUE(same_bits(host(dpre), want, "dgelu"));
    Tensor in_place = make(in.pre, {s.rows, s.in}, dt, ctx);
    matmul(ctx, dy, false, w, false, in_place, 1.0f, 0.0f, MatmulEpilogue::dgelu(in_place));
    EXPECT_TRUE(same_bits(host(in_place), want, "dgelu into the pre-activation"));
  }
  {  // BiasGradA: dW += dy^T x as without it; dbias += dy's column sums, bias_backward's bits
    const std::vector<float> w0 = random_bf16_values(static_cast<std::size_t>(s.out * s.in), 21);
    const std::vector<float> b0 = random_bf16_values(static_cast<std::size_t>(s.out), 22);
    Tensor dw = Tensor::from_host(w0, {s.out, s.in}, ctx), dw_plain = Tensor::from_host(w0, {s.out, s.in}, ctx);
    Tensor db = Tensor::from_host(b0, {s.out}, ctx), db_kernel = Tensor::from_host(b0, {s.out}, ctx);
    matmul(ctx, dy, true, x, false, dw, 1.0f, 1.0f, MatmulEpilogue::bias_grad_of_a(db));
    matmul(ctx, dy, true, x, false, dw_plain, 1.0f, 1.0f);
    nn::bias_backward(ctx, dy, db_kernel);
    EXPECT_TRUE(same_bits(host(dw), host(dw_plain), "weight gradient"));
    EXPECT_TRUE(same_bits(host(db), host(db_kernel), "bias gradient"));
    std::vector<float> sums = b0;  // and in plain words: rows in order, in fp32
    for (i64 r = 0; r < s.rows; ++r)
      for (i64 j = 0; j < s.out; ++j) sums[static_cast<std::size_t>(j)] += in.dy[static_cast<std::size_t>(r * s.out + j)];
    EXPECT_TRUE(same_bits(host(db), sums, "bias gradient against the ordered loop"));
  }
}

TEST(GemmEpilogueCpu, Fp32IsThePlainGemmThenTheLoopBitForBit) {
  for (int threads : {1, 2, 3}) check_cpu_epilogues<float>(DType::F32, threads);
}

TEST(GemmEpilogueCpu, Bf16IsThePlainGemmThenTheLoopBitForBit) {
  for (int threads : {1, 2, 3}) check_cpu_epilogues<bf16>(DType::BF16, threads);
}

// bf16 inputs into an fp32 C (how the weight gradients accumulate) with the bias gradient of a bf16 dy.
TEST(GemmEpilogueCpu, BiasGradientOfBf16IntoFp32) {
  DeviceContext ctx(cpu_options(2));
  const Inputs in(31);
  const Shapes& s = in.s;
  const Tensor dy = make(in.dy, {s.rows, s.out}, DType::BF16, ctx);
  const Tensor x = make(in.x, {s.rows, s.in}, DType::BF16, ctx);
  Tensor dw = Tensor::zeros({s.out, s.in}, DType::F32, ctx), db = Tensor::zeros({s.out}, DType::F32, ctx);
  Tensor db_kernel = Tensor::zeros({s.out}, DType::F32, ctx);
  matmul(ctx, dy, true, x, false, dw, 1.0f, 1.0f, MatmulEpilogue::bias_grad_of_a(db));
  nn::bias_backward(ctx, dy, db_kernel);
  EXPECT_TRUE(same_bits(host(db), host(db_kernel), "bias gradient"));
}

TEST(GemmEpilogueCpu, BadArgumentsAreOneClearError) {
  DeviceContext ctx(cpu_options(1));
  const Tensor a = Tensor::zeros({4, 3}, DType::F32, ctx), b = Tensor::zeros({5, 3}, DType::F32, ctx);
  const Tensor bias = Tensor::zeros({5}, DType::F32, ctx);
  Tensor c = Tensor::zeros({4, 5}, DType::F32, ctx);
  EXPECT_TRUE(contains(error_of([&] { matmul(ctx, a, false, b, true, c, 1.0f, 1.0f, MatmulEpilogue::with_bias(bias)); }),
                       "wants beta 0"));
  const Tensor short_bias = Tensor::zeros({4}, DType::F32, ctx);
  EXPECT_TRUE(contains(error_of([&] { matmul(ctx, a, false, b, true, c, 1.0f, 0.0f, MatmulEpilogue::with_bias(short_bias)); }),
                       "the bias"));
  Tensor bf16_pre = Tensor::zeros({4, 5}, DType::BF16, ctx);
  EXPECT_TRUE(contains(error_of([&] { matmul(ctx, a, false, b, true, c, 1.0f, 0.0f, MatmulEpilogue::bias_gelu(&bias, bf16_pre)); }),
                       "pre-activation"));
  EXPECT_TRUE(contains(error_of([&] { matmul(ctx, a, false, b, true, c, 1.0f, 0.0f, MatmulEpilogue::bias_gelu(&bias, c)); }),
                       "must be two tensors"));
  Tensor db = Tensor::zeros({4}, DType::F32, ctx);
  EXPECT_TRUE(contains(error_of([&] { matmul(ctx, a, false, b, true, c, 1.0f, 0.0f, MatmulEpilogue::bias_grad_of_a(db)); }),
                       "stored compact as [k, m]"));
  GemmArgs g;  // a batch with an epilogue
  g.trans_b = true;
  g.m = 4, g.n = 5, g.k = 3, g.a = a.data(), g.lda = 3, g.b = b.data(), g.ldb = 3, g.c = c.data(), g.ldc = 5;
  g.batch = 2, g.stride_a = 0, g.stride_b = 0, g.stride_c = 0;
  g.epilogue = GemmEpilogue::Bias, g.bias = static_cast<const float*>(bias.data());
  EXPECT_TRUE(contains(error_of([&] { gemm(ctx, g); }), "takes one matrix, not a batch of 2"));
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? ::setenv(name_, old_.c_str(), 1) : ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(GemmEpilogue, CudaPathComesFromTheEnvironment) {
  {
    const ScopedEnv env("MESHTRAIN_GEMM", "");
    EXPECT_EQ(cuda_gemm_path_from_env(), CudaGemmPath::Cublas);
  }
  {
    const ScopedEnv env("MESHTRAIN_GEMM", "cublaslt");
    EXPECT_EQ(cuda_gemm_path_from_env(), CudaGemmPath::CublasLt);
  }
  {
    const ScopedEnv env("MESHTRAIN_GEMM", "cublas");
    EXPECT_EQ(cuda_gemm_path_from_env(), CudaGemmPath::Cublas);
  }
  const ScopedEnv env("MESHTRAIN_GEMM", "lt");
  const std::string message = error_of([] { cuda_gemm_path_from_env(); });
  EXPECT_TRUE(contains(message, "MESHTRAIN_GEMM=lt")) << message;
  EXPECT_TRUE(contains(message, "cublaslt")) << message;
}

// ---------------------------------------------------------------------------------------------
// On a GPU, both CUDA paths (cuBLAS with the epilogues as kernels of their own, cuBLASLt with its
// fused epilogues and the bias gradient by row tiles) against the CPU, each repeating its own bits.
//
// Tolerances, per element, relative to the sum of the |terms| of its dot product (plus |bias|):
// - the products sum in another order: 1e-4 of that, as gemm_bf16_test allows;
// - a bf16 result may round to the neighbouring bf16 number: 2^-7 of the value (fp32: 1e-6 of it,
//   for the two sides' own tanh and GELU-gradient math);
// - the GELU carries its input's error on by at most its slope, |gelu'| <= 1.13: the GEMM's (the
//   first term times 1.13) and the pre-activation's own rounding, which cuBLASLt does not apply
//   before its GELU: 1.13 spacings of the pre-activation. dgelu's pre-activation is an input, exact
//   on both sides, so only the product's error counts (|gelu'| <= 1.13 again).
struct Sides {
  std::vector<float> out, pre;  // pre: bias+gelu's kept pre-activation
};

Sides run_epilogue(DeviceContext& ctx, GemmEpilogue kind, DType dt, const Inputs& in) {
  const Shapes& s = in.s;
  const Tensor x = make(in.x, {s.rows, s.in}, dt, ctx), w = make(in.w, {s.out, s.in}, dt, ctx);
  const Tensor dy = make(in.dy, {s.rows, s.out}, dt, ctx);
  const Tensor bias = Tensor::from_host(in.bias, {s.out}, ctx);
  Sides r;
  switch (kind) {
    case GemmEpilogue::None:
    case GemmEpilogue::Bias: {
      Tensor y = Tensor::empty({s.rows, s.out}, dt, ctx);
      matmul(ctx, x, false, w, true, y, 1.0f, 0.0f, MatmulEpilogue::with_bias(bias));
      r.out = host(y);
      break;
    }
    case GemmEpilogue::BiasGelu: {
      Tensor pre = Tensor::empty({s.rows, s.out}, dt, ctx), post = Tensor::empty({s.rows, s.out}, dt, ctx);
      matmul(ctx, x, false, w, true, post, 1.0f, 0.0f, MatmulEpilogue::bias_gelu(&bias, pre));
      r.out = host(post);
      r.pre = host(pre);
      break;
    }
    case GemmEpilogue::DGelu: {
      Tensor pre = make(in.pre, {s.rows, s.in}, dt, ctx);
      matmul(ctx, dy, false, w, false, pre, 1.0f, 0.0f, MatmulEpilogue::dgelu(pre));  // in place, as the layers do
      r.out = host(pre);
      break;
    }
    case GemmEpilogue::BiasGradA: {
      Tensor dw = Tensor::zeros({s.out, s.in}, DType::F32, ctx), db = Tensor::zeros({s.out}, DType::F32, ctx);
      matmul(ctx, dy, true, x, false, dw, 1.0f, 1.0f, MatmulEpilogue::bias_grad_of_a(db));
      r.out = host(dw);
      r.pre = host(db);
      break;
    }
  }
  ctx.synchronize();
  return r;
}

// `pre`: the pre-activation a GELU output was taken of, whose own rounding (and cuBLASLt's use of it
// unrounded) moves the output by up to 1.13 spacings of the pre-activation.
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double magnitude, double spacings,
                  DType dt, const char* what, const std::vector<float>* pre = nullptr) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  const double spacing = dt == DType::BF16 ? std::ldexp(1.0, -7) : 1e-6;  // fp32: the two sides' own GELU math
  int reported = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    double allowed = 1.13 * gemm_math::kGemmTolerance.fp32 * magnitude + spacings * spacing * std::fabs(cpu[i]);
    if (pre != nullptr) allowed += 1.13 * spacing * std::fabs((*pre)[i]);
    if (!(std::fabs(gpu[i] - cpu[i]) <= allowed) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: cpu " << cpu[i] << ", gpu " << gpu[i] << " (allowed " << allowed << ")";
  }
}

TEST(GemmEpilogueCuda, BothPathsMatchTheCpuAndRepeat) {
  MT_SKIP_WITHOUT_GPU();
  DeviceContext cpu(cpu_options(2));
  // The second shape is one cuBLASLt's GELU epilogues take (widths divisible by 8), with rows for
  // five tiles of the bias gradient; the first sends the GELU epilogues to the reference path.
  for (const Shapes& shapes : {Shapes{}, Shapes{300, 96, 256}}) {
  for (const char* path : {"cublas", "cublaslt"}) {
    const Inputs in(41, shapes);
    const Shapes& s = in.s;
    const ScopedEnv env("MESHTRAIN_GEMM", path);
    DeviceContext gpu(DeviceOptions{Device::cuda(0), 0, 1});
    for (DType dt : {DType::F32, DType::BF16}) {
      for (GemmEpilogue kind :
           {GemmEpilogue::Bias, GemmEpilogue::BiasGelu, GemmEpilogue::DGelu, GemmEpilogue::BiasGradA}) {
        SCOPED_TRACE(std::string(path) + " " + gemm_epilogue_name(kind) + " " + dtype_name(dt));
        const Sides want = run_epilogue(cpu, kind, dt, in);
        const Sides got = run_epilogue(gpu, kind, dt, in);
        const Sides again = run_epilogue(gpu, kind, dt, in);
        EXPECT_TRUE(same_bits(again.out, got.out, "repeat"));
        EXPECT_TRUE(same_bits(again.pre, got.pre, "repeat (second output)"));
        // Inputs in [-1, 1): a forward dot product's |terms| sum to at most `in`, the input
        // gradient's to `out`, the weight gradient's to `rows`; the bias adds 1, the bias
        // gradient's sum is over `rows` values of at most 1.
        switch (kind) {
          case GemmEpilogue::None:
          case GemmEpilogue::Bias:
            expect_close(got.out, want.out, static_cast<double>(s.in + 1), 1, dt, "y");
            break;
          case GemmEpilogue::BiasGelu:
            expect_close(got.pre, want.pre, static_cast<double>(s.in + 1), 1, dt, "pre-activation");
            expect_close(got.out, want.out, static_cast<double>(s.in + 1), 1, dt, "gelu", &want.pre);
            break;
          case GemmEpilogue::DGelu:
            expect_close(got.out, want.out, static_cast<double>(s.out), 1, dt, "dgelu");
            break;
          case GemmEpilogue::BiasGradA:
            expect_close(got.out, want.out, static_cast<double>(s.rows), 0, dt, "weight gradient");
            expect_close(got.pre, want.pre, static_cast<double>(s.rows), 0, dt, "bias gradient");
            break;
        }
      }
    }
  }
  }
}

}  // namespace
}  // namespace mt
