// The MLP classifier of models/tests/mlp.h (fp32 on the CPU) against a small double-precision MLP made
// of the reference ops of reference_gpt.h (linear, gelu, cross_entropy): its parameter list and
// initialization, logits and loss against the reference, every gradient against central
// differences of the reference loss (all coordinates: the model is small), what backward()
// promises about loss_weight and accumulation, plain SGD learning a separable problem, bitwise
// repeatability (also across CPU thread counts) and the errors of misuse.
//
// The parameters and features are fp32 numbers, so the model and the reference evaluate exactly the
// same function at exactly the same point: every difference is the model's fp32 arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "models/tests/mlp.h"                // defines: Mlp, MlpConfig, mlp_parameter_specs
#include "models/tests/reference_gpt.h"  // defines: ref::linear, ref::gelu, ref::cross_entropy, central_difference
#include "runtime/context.h"             // defines: DeviceContext, DeviceOptions
#include "runtime/kernels.h"             // defines: kernels::scale, kernels::binary (the SGD step)
#include "tests/float_bits.h"  // defines: bits
#include "tests/test_helpers.h"          // defines: error_of, contains

namespace mt {
namespace {

using ref::Vec;
using testing::contains;
using testing::error_of;
using Params = std::map<std::string, Vec>;

// ---- Tolerances -------------------------------------------------------------------------------
//
// An element passes when |got - want| <= abs * scale + rel * |want| + floor, with `scale` the
// largest magnitude of the tensor compared.
struct Tol {
  double abs, rel;
};
// Forward: three fp32 GEMMs of K <= 16 with GELU between and a log-sum-exp of 5 classes: each
// output's error is at most a few K * 2^-24 ~ 1e-6 of the magnitudes summed, typically ~1e-7.
// Seen: ~1e-7 of the largest logit. 1e-5 of the largest output (plus 1e-5 of each) is ~100x above
// that, and far below a wrong layer order, a missing bias or GELU, or a transposed weight (1e-2 or
// more).
constexpr Tol kForwardTol{1e-5, 1e-5};
// Gradients (fp32 backward vs double central differences of the reference loss): the differences
// are good to ~1e-10 (h 1e-5: truncation h^2 f''' / 6 ~ 1e-11, rounding ~1e-16 |L| / h ~ 1e-11);
// the backward is three more GEMMs of K <= 16 and GELU derivatives on top of the forward's error,
// ~1e-6 of each tensor's largest gradient at worst. Seen: ~5e-8 absolute, ~5e-7 of the scale.
// 3e-5 of the scale (plus 3e-5 of each) holds with a margin of ~50 and fails for a dropped GELU
// derivative, a missing 1/N, "=" for "+=" or a gradient of the wrong layer's input (all 1e-2 or
// more).
constexpr Tol kGradTol{3e-5, 3e-5};
constexpr double kFdFloor = 1e-9;
constexpr double kStep = 1e-5;

const MlpConfig kConfig{6, 16, 2, 5};  // 6 features, two hidden layers of 16, 5 classes
constexpr int kN = 12;

// ---- The reference: the same MLP in double from the reference ops ---------------------------

Vec ref_logits(const MlpConfig& c, const Params& p, const Vec& x, int N) {
  Vec h = x;
  for (int i = 0; i <= c.layers; ++i) {
    const std::string name = "fc." + std::to_string(i);
    const int in = i == 0 ? c.inputs : c.hidden, out = i == c.layers ? c.classes : c.hidden;
    h = ref::linear(h, p.at(name + ".weight"), p.at(name + ".bias"), N, in, out);
    if (i < c.layers) h = ref::gelu(h);
  }
  return h;
}

double ref_loss(const MlpConfig& c, const Params& p, const Vec& x, const std::vector<int>& labels, int N) {
  return ref::mean(ref::cross_entropy(ref_logits(c, p, x, N), labels, N, c.classes, c.classes));
}

// ---- Data -------------------------------------------------------------------------------------

// Uniform in [lo, hi), each value an fp32 number.
Vec random_vec(std::mt19937& rng, std::size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = static_cast<double>(static_cast<float>(dist(rng)));
  return v;
}

// Random parameters for every spec: weights uniform in +-1/sqrt(in) x 1.5, biases in +-0.3 (so
// the GELUs see both signs and their curved part).
Params random_params(const MlpConfig& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Params p;
  for (const ParamSpec& spec : mlp_parameter_specs(c)) {
    const double r = spec.shape.size() == 2 ? 1.5 / std::sqrt(static_cast<double>(spec.shape[1])) : 0.3;
    p[spec.name] = random_vec(rng, static_cast<std::size_t>(spec.numel()), -r, r);
  }
  return p;
}

void load(Mlp& model, const Params& p, DeviceContext& ctx) {
  ParameterStore& store = model.parameters();
  ASSERT_EQ(store.size(), p.size());
  for (std::size_t i = 0; i < store.size(); ++i) {
    const Vec& v = p.at(store.spec(i).name);
    ASSERT_EQ(static_cast<std::int64_t>(v.size()), store.spec(i).numel()) << store.spec(i).name;
    std::vector<float> host(v.begin(), v.end());
    store.param(i).copy_from_host(host.data(), host.size() * sizeof(float), ctx.stream());
  }
  ctx.synchronize();
}

struct Data {
  int N = 0;
  Vec x;                         // [N, inputs], fp32 values
  std::vector<int> labels;
  std::vector<float> features() const { return {x.begin(), x.end()}; }
  std::vector<std::int32_t> labels32() const { return {labels.begin(), labels.end()}; }
  Data rows(int first, int count, int inputs) const {
    Data d{count, Vec(x.begin() + first * inputs, x.begin() + (first + count) * inputs),
           std::vector<int>(labels.begin() + first, labels.begin() + first + count)};
    return d;
  }
};

Data random_data(const MlpConfig& c, int N, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Data d{N, random_vec(rng, static_cast<std::size_t>(N) * c.inputs, -2, 2), {}};
  std::uniform_int_distribution<int> label(0, c.classes - 1);
  for (int i = 0; i < N; ++i) d.labels.push_back(label(rng));
  return d;
}

Vec values(const Tensor& t) {
  const std::vector<float> v = t.to_host<float>();
  return {v.begin(), v.end()};
}

using testing::bits;

double max_abs(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

::testing::AssertionResult all_close(const Vec& got, const Vec& want, Tol tol, double floor = kFdFloor) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: got " << got.size() << ", want " << want.size();
  const double scale = max_abs(want);
  std::size_t bad = 0, first = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    const double allowed = tol.abs * scale + tol.rel * std::abs(want[i]) + floor;
    worst = std::max(worst, err / allowed);
    if (!(err <= allowed) && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << got.size() << " differ; first at " << first << ": got " << got[first] << ", want "
     << want[first] << " (scale " << scale << "); worst error / allowed " << worst;
  return ::testing::AssertionFailure() << os.str();
}

// ---- Parameters and initialization -------------------------------------------------------------

TEST(MlpParameters, SpecsNameEveryLinearLayerInOrder) {
  const std::vector<ParamSpec> specs = mlp_parameter_specs(kConfig);
  ASSERT_EQ(specs.size(), 6u);
  const std::vector<std::string> names = {"fc.0.weight", "fc.0.bias", "fc.1.weight",
                                          "fc.1.bias",   "fc.2.weight", "fc.2.bias"};
  const std::vector<std::vector<std::int64_t>> shapes = {{16, 6}, {16}, {16, 16}, {16}, {5, 16}, {5}};
  for (std::size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(specs[i].name, names[i]);
    EXPECT_EQ(specs[i].shape, shapes[i]) << names[i];
    EXPECT_EQ(specs[i].layer, static_cast<int>(i / 2)) << names[i];
    EXPECT_EQ(specs[i].kind, i % 2 == 0 ? ParamKind::FcWeight : ParamKind::FcBias) << names[i];
    EXPECT_EQ(specs[i].decay, i % 2 == 0) << names[i];
  }
  // No hidden layer: one Linear from the inputs to the classes.
  const std::vector<ParamSpec> logistic = mlp_parameter_specs(MlpConfig{6, 0, 0, 3});
  ASSERT_EQ(logistic.size(), 2u);
  EXPECT_EQ(logistic[0].shape, (std::vector<std::int64_t>{3, 6}));
  EXPECT_EQ(logistic[1].shape, (std::vector<std::int64_t>{3}));
}

TEST(MlpParameters, InitIsDeterministicLeCunNormalWithZeroBiases) {
  DeviceContext ctx(DeviceOptions{});
  const MlpConfig c{64, 128, 1, 10};
  Mlp a(ctx, c), b(ctx, c), other(ctx, c);
  a.init(7);
  b.init(7);
  other.init(8);
  EXPECT_EQ(bits(a.parameters().flat_params()), bits(b.parameters().flat_params()));
  EXPECT_NE(bits(a.parameters().flat_params()), bits(other.parameters().flat_params()));
  const ParameterStore& store = a.parameters();
  for (std::size_t i = 0; i < store.size(); ++i) {
    const Vec v = values(store.param(i));
    if (store.spec(i).kind == ParamKind::FcBias) {
      EXPECT_EQ(max_abs(v), 0.0) << store.spec(i).name;
      continue;
    }
    double sum = 0.0, sum2 = 0.0;
    for (double x : v) {
      sum += x;
      sum2 += x * x;
    }
    const double n = static_cast<double>(v.size());
    const double want_std = 1.0 / std::sqrt(static_cast<double>(store.spec(i).shape[1]));
    // Sample mean and standard deviation of >= 1280 normal draws: within ~4 standard errors.
    EXPECT_NEAR(sum / n, 0.0, 4.0 * want_std / std::sqrt(n)) << store.spec(i).name;
    EXPECT_NEAR(std::sqrt(sum2 / n), want_std, 4.0 * want_std / std::sqrt(2.0 * n)) << store.spec(i).name;
  }
}

// ---- Forward and gradients against the reference, at 1 and 2 threads ---------------------------

class MlpGrad : public ::testing::TestWithParam<int> {
 protected:
  MlpGrad() : ctx(DeviceOptions{Device::cpu(), 0, GetParam()}) {}
  DeviceContext ctx;
};

INSTANTIATE_TEST_SUITE_P(CpuThreads, MlpGrad, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return "threads" + std::to_string(param.param);
                         });

TEST_P(MlpGrad, LogitsAndLossMatchTheReference) {
  Mlp model(ctx, kConfig);
  const Params p = random_params(kConfig, 1);
  load(model, p, ctx);
  const Data d = random_data(kConfig, kN, 2);
  const float loss = model.forward(d.features(), d.labels32(), kN);
  EXPECT_TRUE(all_close(values(model.logits()), ref_logits(kConfig, p, d.x, kN), kForwardTol, 0.0)) << "logits";
  const Vec want_losses = ref::cross_entropy(ref_logits(kConfig, p, d.x, kN), d.labels, kN, kConfig.classes,
                                             kConfig.classes);
  EXPECT_TRUE(all_close(values(model.losses()), want_losses, kForwardTol, 0.0)) << "losses";
  const double want = ref_loss(kConfig, p, d.x, d.labels, kN);
  EXPECT_NEAR(loss, want, kForwardTol.rel * want);
}

// Every coordinate of every parameter, for MLPs with 0, 1 and 2 hidden layers.
TEST_P(MlpGrad, EveryGradientMatchesCentralDifferences) {
  for (const MlpConfig& c : {MlpConfig{6, 0, 0, 5}, MlpConfig{6, 16, 1, 5}, kConfig}) {
    SCOPED_TRACE("layers " + std::to_string(c.layers));
    Mlp model(ctx, c);
    const Params p = random_params(c, 3);
    load(model, p, ctx);
    const Data d = random_data(c, kN, 4);
    model.parameters().zero_grads(ctx);
    model.forward(d.features(), d.labels32(), kN);
    model.backward();
    const ParameterStore& store = model.parameters();
    const std::function<double(const Params&)> loss = [&](const Params& q) {
      return ref_loss(c, q, d.x, d.labels, kN);
    };
    for (std::size_t i = 0; i < store.size(); ++i) {
      const std::string& name = store.spec(i).name;
      Vec want(static_cast<std::size_t>(store.spec(i).numel()));
      for (std::size_t j = 0; j < want.size(); ++j) want[j] = ref::central_difference(loss, p, name, j, kStep);
      EXPECT_TRUE(all_close(values(store.grad(i)), want, kGradTol)) << name;
    }
  }
}

// ---- loss_weight and accumulation ----------------------------------------------------------

TEST_P(MlpGrad, LossWeightScalesAndHalfBatchesAccumulateToTheFullBatch) {
  Mlp model(ctx, kConfig);
  load(model, random_params(kConfig, 5), ctx);
  ParameterStore& store = model.parameters();
  const Data d = random_data(kConfig, kN, 6);
  store.zero_grads(ctx);
  const float full = model.forward(d.features(), d.labels32(), kN);
  model.backward();
  const Vec g1 = values(store.flat_grads());

  // A power-of-two weight scales every product and sum of the (linear) backward exactly.
  store.zero_grads(ctx);
  model.forward(d.features(), d.labels32(), kN);
  model.backward(0.25f);
  const Vec quarter = values(store.flat_grads());
  for (std::size_t j = 0; j < g1.size(); ++j) ASSERT_EQ(quarter[j], 0.25 * g1[j]) << "gradient " << j;

  // Two micro-batches of N/2 with weight 1/2: the gradient of the mean over all N (up to the
  // rounding of different GEMM shapes: the gradient tolerance).
  store.zero_grads(ctx);
  const Data a = d.rows(0, kN / 2, kConfig.inputs), b = d.rows(kN / 2, kN / 2, kConfig.inputs);
  const float la = model.forward(a.features(), a.labels32(), kN / 2);
  model.backward(0.5f);
  const float lb = model.forward(b.features(), b.labels32(), kN / 2);
  model.backward(0.5f);
  EXPECT_NEAR(0.5 * (la + lb), full, kForwardTol.rel * full);
  for (std::size_t i = 0; i < store.size(); ++i) {
    const auto off = static_cast<std::size_t>(store.offset(i));
    const Vec want(g1.begin() + static_cast<std::ptrdiff_t>(off),
                   g1.begin() + static_cast<std::ptrdiff_t>(off + static_cast<std::size_t>(store.spec(i).numel())));
    EXPECT_TRUE(all_close(values(store.grad(i)), want, kGradTol, 0.0)) << store.spec(i).name;
  }
}

// ---- Learning ----------------------------------------------------------------------------------

// A linearly separable problem: labels = argmax of a random teacher's scores, features in [-1, 1].
Data separable_data(const MlpConfig& c, int N, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const Vec teacher = random_vec(rng, static_cast<std::size_t>(c.classes) * c.inputs, -1, 1);
  Data d{N, random_vec(rng, static_cast<std::size_t>(N) * c.inputs, -1, 1), {}};
  for (int n = 0; n < N; ++n) {
    int best = 0;
    double best_score = -1e300;
    for (int k = 0; k < c.classes; ++k) {
      double s = 0.0;
      for (int i = 0; i < c.inputs; ++i)
        s += teacher[static_cast<std::size_t>(k * c.inputs + i)] * d.x[static_cast<std::size_t>(n * c.inputs + i)];
      if (s > best_score) best_score = s, best = k;
    }
    d.labels.push_back(best);
  }
  return d;
}

struct Training {
  std::vector<float> losses;
  std::vector<std::uint32_t> params;
  double accuracy = 0.0;
};

// Full-batch plain SGD from init(seed) on a fresh context at `threads` CPU threads.
Training train(int threads, int steps, float lr) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, threads});
  const MlpConfig c{4, 32, 1, 3};
  Mlp model(ctx, c);
  model.init(11);
  const Data d = separable_data(c, 128, 12);
  ParameterStore& store = model.parameters();
  Training t;
  for (int s = 0; s < steps; ++s) {
    store.zero_grads(ctx);
    t.losses.push_back(model.forward(d.features(), d.labels32(), d.N));
    model.backward();
    Tensor p = store.flat_params(), g = store.flat_grads();  // handles sharing the store's buffers
    kernels::scale(ctx, g, lr);
    kernels::binary(ctx, BinaryOp::Sub, p, g, p);
  }
  model.forward_logits(d.features(), d.N);
  const Vec logits = values(model.logits());
  int correct = 0;
  for (int n = 0; n < d.N; ++n) {
    const auto row = logits.begin() + n * c.classes;
    correct += std::max_element(row, row + c.classes) - row == d.labels[static_cast<std::size_t>(n)];
  }
  t.accuracy = static_cast<double>(correct) / d.N;
  t.params = bits(store.flat_params());
  return t;
}

TEST(MlpTraining, SgdLearnsASeparableProblem) {
  const Training t = train(1, 300, 0.5f);
  EXPECT_NEAR(t.losses.front(), std::log(3.0), 0.5);  // near uniform at init
  // Seen: 1.13 -> 0.021 with every training example right and the loss falling at every step.
  EXPECT_LT(t.losses.back(), 0.1f * t.losses.front()) << "loss " << t.losses.front() << " -> " << t.losses.back();
  EXPECT_GE(t.accuracy, 0.95);
  // Mostly downhill: full-batch SGD at a stable learning rate.
  int rises = 0;
  for (std::size_t s = 1; s < t.losses.size(); ++s) rises += t.losses[s] > t.losses[s - 1];
  EXPECT_LE(rises, 5);
}

TEST(MlpTraining, TrainingRepeatsBitForBitAtOneAndTwoThreads) {
  const Training one = train(1, 30, 0.5f), again = train(1, 30, 0.5f), two = train(2, 30, 0.5f);
  for (std::size_t s = 0; s < one.losses.size(); ++s) {
    EXPECT_EQ(bits(one.losses[s]), bits(again.losses[s])) << "step " << s;
    EXPECT_EQ(bits(one.losses[s]), bits(two.losses[s])) << "step " << s << ", 2 threads";
  }
  EXPECT_TRUE(one.params == again.params) << "parameters differ between two identical runs";
  EXPECT_TRUE(one.params == two.params) << "parameters differ between 1 and 2 threads";
}

// ---- Errors ------------------------------------------------------------------------------------

TEST(MlpErrors, RejectsBadConfigsInputsAndCallOrder) {
  DeviceContext ctx(DeviceOptions{});
  EXPECT_TRUE(contains(error_of([&] { Mlp m(ctx, MlpConfig{0, 4, 1, 3}); }), "inputs"));
  EXPECT_TRUE(contains(error_of([&] { Mlp m(ctx, MlpConfig{4, 0, 1, 3}); }), "hidden"));
  EXPECT_TRUE(contains(error_of([&] { Mlp m(ctx, MlpConfig{4, 4, -1, 3}); }), "layers"));
  EXPECT_TRUE(contains(error_of([&] { Mlp m(ctx, MlpConfig{4, 4, 1, 1}); }), "classes"));

  Mlp model(ctx, kConfig);
  model.init(1);
  const Data d = random_data(kConfig, kN, 2);
  EXPECT_TRUE(contains(error_of([&] { model.backward(); }), "needs a forward()"));
  std::vector<std::int32_t> labels = d.labels32();
  labels[3] = kConfig.classes;
  EXPECT_TRUE(contains(error_of([&] { model.forward(d.features(), labels, kN); }), "label 5 is outside [0, 5)"));
  labels[3] = -1;
  EXPECT_TRUE(contains(error_of([&] { model.forward(d.features(), labels, kN); }), "label -1"));
  EXPECT_TRUE(contains(error_of([&] { model.forward(d.features(), d.labels32(), kN + 1); }), "labels for"));
  std::vector<float> short_features = d.features();
  short_features.pop_back();
  EXPECT_TRUE(contains(error_of([&] { model.forward(short_features, d.labels32(), kN); }), "features for"));

  model.forward(d.features(), d.labels32(), kN);
  EXPECT_NO_THROW(model.backward());
  EXPECT_TRUE(contains(error_of([&] { model.backward(); }), "needs a forward()"));  // logits are gradients now
  model.forward_logits(d.features(), kN);
  EXPECT_TRUE(contains(error_of([&] { model.backward(); }), "needs a forward()"));
  model.forward(d.features(), d.labels32(), kN);
  error_of([&] { model.forward(short_features, d.labels32(), kN); });  // a failed forward
  EXPECT_TRUE(contains(error_of([&] { model.backward(); }), "needs a forward()"));
}

}  // namespace
}  // namespace mt
