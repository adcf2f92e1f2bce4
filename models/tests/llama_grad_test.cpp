// The whole llama model (models/gpt.h, ModelFamily::Llama, fp32 on the CPU) against the
// double-precision reference of reference_llama.h, as gpt_grad_test.cpp does for GPT-2: on a small
// shape with grouped-query attention (2 layers, 4 query heads sharing 2 kv heads, 32 channels, so
// head size 8, SwiGLU hidden 48, V 96 padded to 128): logits and loss against the reference forward
// (also at another RoPE theta and RMSNorm eps); every parameter tensor's gradient against central
// differences of the reference loss at sampled coordinates and along one random direction over the
// whole tensor; zero gradient in the padding rows of wte and lm_head and in the wte rows no input
// uses (the head is untied); the loss weight; gradient accumulation; bitwise repeatability, also
// across CPU thread counts.
//
// The parameters come from reference_random_params, whose values are fp32 numbers, so the model
// and the reference evaluate exactly the same function at exactly the same point: every difference
// is the fp32 arithmetic of the model (or a bug).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "models/gpt.h"                    // defines: Gpt
#include "models/gpt_config.h"             // defines: GptConfig, gpt_preset
#include "models/parameter_store.h"        // defines: ParameterStore
#include "models/tests/reference_gpt.h"    // defines: reference_random_params, cross_entropy
#include "models/tests/reference_llama.h"  // defines: reference_llama_logits, reference_llama_loss
#include "runtime/context.h"               // defines: DeviceContext, DeviceOptions
#include "runtime/tensor.h"                // defines: Tensor
#include "tests/float_bits.h"              // defines: bits

namespace mt {
namespace {

using ref::RefParams;
using ref::Vec;
using testing::bits;

// ---- Tolerances -------------------------------------------------------------------------------
//
// An element passes when |got - want| <= abs * scale + rel * |want| + floor, with `scale` the
// largest magnitude of its tensor. The same reasoning as gpt_grad_test.cpp, on a shallower model
// (2 layers, GEMMs of K <= 48 but the head's K = 32): each fp32 op adds ~sqrt(K) 2^-24 ~ 4e-7 of
// the magnitudes it sums, RMSNorm renormalizes, so logits are good to ~1e-6 of the largest and
// gradients (the backward chain through 2 layers) to a few 1e-6 of each tensor's scale. RoPE's
// angles are fp32 in the model (as in transformers) and double in the reference: at positions
// t < 16 the fp32 angle t x theta^(-2i/hs) is off by ~t 2^-24 ~ 1e-6 rad, the same order.
// Seen (printed below): logits ~0.008 and gradients ~0.02 of the allowed error, i.e. errors of
// ~4e-7 of the scale. 2e-5 is ~50x above that and far below what a bug does: a rotation the
// wrong way or on the wrong half, a kv head read by the wrong query group, gate and up swapped, a
// missing residual or a dropped gradient term all move logits or gradients by 1e-3 of their scale
// or more.
struct Tol {
  double abs, rel;
};
constexpr Tol kForwardTol{2e-5, 2e-5};
constexpr double kLossRelTol = 1e-5;
constexpr Tol kGradTol{2e-5, 2e-5};
constexpr double kFdFloor = 1e-9;  // the differences' own noise (truncation and rounding, h 1e-5)
constexpr double kStep = 1e-5;
constexpr double kDirectionalRelTol = 2e-5;  // of sum |g_i u_i|

constexpr std::size_t kSamplesPerMatrix = 24;
constexpr std::size_t kSamplesPerVector = 16;  // the RMSNorm weights
constexpr std::size_t kLargestPerTensor = 4;

// ---- The model under test ---------------------------------------------------------------------

constexpr int kB = 2, kT = 16;

GptConfig test_config() {
  GptConfig c = gpt_preset("llama-tiny");  // the family, RoPE theta 1e4, eps 1e-5, max_seq_len 64
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;  // two query heads per kv head
  c.channels = 32;
  c.ffn_hidden = 48;
  c.vocab_size = 96;
  c.padded_vocab = 128;  // rows 96..127 of wte and lm_head are padding
  return c;
}

// Input tokens from [0, 48) only: rows 48..95 of wte are real but no input reads them, so (the
// head being untied) they get no gradient at all; targets from the whole vocab [0, 96).
constexpr int kInputTokens = 48;

struct Batch {
  int B = 0, T = 0;
  std::vector<std::int32_t> inputs, targets;
  std::vector<int> ref_inputs() const { return {inputs.begin(), inputs.end()}; }
  std::vector<int> ref_targets() const { return {targets.begin(), targets.end()}; }
  Batch rows(int first, int count) const {
    Batch b{count, T, {}, {}};
    b.inputs.assign(inputs.begin() + first * T, inputs.begin() + (first + count) * T);
    b.targets.assign(targets.begin() + first * T, targets.begin() + (first + count) * T);
    return b;
  }
};

Batch make_batch(int B, int T, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> input(0, kInputTokens - 1), target(0, test_config().vocab_size - 1);
  Batch b{B, T, {}, {}};
  for (int i = 0; i < B * T; ++i) {
    b.inputs.push_back(input(rng));
    b.targets.push_back(target(rng));
  }
  return b;
}

const RefParams& params() {
  static const RefParams p = ref::reference_random_params(test_config(), 4321);
  return p;
}

void load(Gpt& model, const RefParams& p, DeviceContext& ctx) {
  ParameterStore& store = model.parameters();
  ASSERT_EQ(store.size(), p.size());
  for (std::size_t i = 0; i < store.size(); ++i) {
    const ParamSpec& spec = store.spec(i);
    const Vec& values = p.at(spec.name);
    ASSERT_EQ(static_cast<std::int64_t>(values.size()), spec.numel()) << spec.name;
    std::vector<float> host(values.begin(), values.end());
    for (std::size_t j = 0; j < host.size(); ++j)
      ASSERT_EQ(static_cast<double>(host[j]), values[j]) << spec.name << "[" << j << "] is not an fp32 value";
    store.param(i).copy_from_host(host.data(), host.size() * sizeof(float), ctx.stream());
  }
  ctx.synchronize();
}

Vec doubles(const Tensor& t) {
  const std::vector<float> v = t.to_host<float>();
  return {v.begin(), v.end()};
}

double max_abs(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

std::string first_differing_tensor(const ParameterStore& store, const std::vector<std::uint32_t>& a,
                                   const std::vector<std::uint32_t>& b) {
  if (a.size() != b.size()) return "sizes differ";
  for (std::size_t i = 0; i < store.size(); ++i) {
    const auto first = static_cast<std::size_t>(store.offset(i)), n = static_cast<std::size_t>(store.spec(i).numel());
    std::size_t differ = 0;
    for (std::size_t j = first; j < first + n; ++j) differ += a[j] != b[j];
    if (differ > 0) return store.spec(i).name + " (" + std::to_string(differ) + " of " + std::to_string(n) + ")";
  }
  return "";
}

::testing::AssertionResult within(const Vec& got, const Vec& want, double scale, Tol tol, double floor,
                                  double* worst_ratio = nullptr) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: got " << got.size() << ", want " << want.size();
  std::size_t bad = 0, first = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    const double allowed = tol.abs * scale + tol.rel * std::abs(want[i]) + floor;
    worst = std::max(worst, err / allowed);
    if (!(err <= allowed) && bad++ == 0) first = i;  // NaN fails
  }
  if (worst_ratio != nullptr) *worst_ratio = std::max(*worst_ratio, worst);
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << got.size() << " differ; first at " << first << ": got " << got[first] << ", want "
     << want[first] << " (scale " << scale << "); worst error / allowed " << worst;
  return ::testing::AssertionFailure() << os.str();
}

// The rows of a [rows, C] parameter that get exactly zero gradient: wte's rows no input uses
// (padding included), lm_head's padding rows (their logits are outside the softmax).
bool unused_row(const ParamSpec& spec, std::size_t row, const GptConfig& config) {
  if (spec.kind == ParamKind::TokenEmbedding) return row >= static_cast<std::size_t>(kInputTokens);
  if (spec.kind == ParamKind::LmHead) return row >= static_cast<std::size_t>(config.vocab_size);
  return false;
}

class LlamaGrad : public ::testing::Test {
 protected:
  LlamaGrad() : ctx(DeviceOptions{Device::cpu(), 0, 1}), model(ctx, test_config()) { load(model, params(), ctx); }
  const GptConfig config = test_config();
  DeviceContext ctx;
  Gpt model;
  const Batch batch = make_batch(kB, kT, 77);

  float step(const Batch& b, float w = 1.0f) {
    model.parameters().zero_grads(ctx);
    const float loss = model.forward(b.inputs, b.targets, b.B, b.T, w);
    model.backward();
    return loss;
  }
  std::vector<float> flat_grads() { return model.parameters().flat_grads().to_host<float>(); }
};

// ---- Forward ------------------------------------------------------------------------------------

// The model's logits and losses at `config` against the reference's; returns the worst ratio.
double expect_forward_matches(const GptConfig& config, const RefParams& p, const Batch& b) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  Gpt model(ctx, config);
  load(model, p, ctx);
  const float loss = model.forward(b.inputs, b.targets, b.B, b.T, Gpt::kEvaluation);
  const Vec losses = doubles(model.losses());
  model.forward_logits(b.inputs, b.B, b.T);
  const Vec got = doubles(model.logits());
  const Vec want = ref::reference_llama_logits(config, p, b.ref_inputs(), b.B, b.T);
  double worst = 0.0;
  // All Vp columns: the padding columns are lnf(x) . (padding rows of lm_head), computed by both.
  EXPECT_TRUE(within(got, want, max_abs(want), kForwardTol, 0.0, &worst)) << "logits";
  const Vec want_losses = ref::cross_entropy(want, b.ref_targets(), b.B * b.T, config.vocab_rows(), config.vocab_size);
  EXPECT_TRUE(within(losses, want_losses, max_abs(want_losses), kForwardTol, 0.0, &worst)) << "per-position losses";
  const double want_loss = ref::reference_llama_loss(config, p, b.ref_inputs(), b.ref_targets(), b.B, b.T);
  EXPECT_NEAR(loss, want_loss, kLossRelTol * want_loss);
  std::cout << "[ info ] theta " << config.rope_theta << " eps " << config.norm_eps
            << ": logits and losses worst error / allowed " << worst << "; loss relative error "
            << std::abs(loss - want_loss) / want_loss << "\n";
  return want_loss;
}

TEST_F(LlamaGrad, LogitsAndLossMatchTheReference) {
  const double loss = expect_forward_matches(config, params(), batch);
  EXPECT_NEAR(loss, std::log(96.0), 0.5);  // a random model is close to uniform over the real tokens
}

// The config's RoPE theta and RMSNorm eps reach the kernels: at theta 5e5 (Llama 3's) and eps 1e-2
// (large enough to move the logits) the model still matches the reference, whose loss moved.
TEST_F(LlamaGrad, OtherRopeThetaAndNormEpsMatchTheReference) {
  GptConfig other = config;
  other.rope_theta = 500000.0f;
  other.norm_eps = 1e-2f;
  const double loss = expect_forward_matches(other, params(), batch);
  const double base = ref::reference_llama_loss(config, params(), batch.ref_inputs(), batch.ref_targets(), kB, kT);
  EXPECT_GT(std::abs(loss - base), 1e-4 * base) << "the test should change the function";
}

// Attention is causal: changing the last token of each sequence leaves every earlier position's
// logits the same bits. (Where RoPE turns q and k is checked by the reference above.)
TEST_F(LlamaGrad, LaterTokensDoNotChangeEarlierLogits) {
  model.forward_logits(batch.inputs, kB, kT);
  const std::vector<float> base = model.logits().to_host<float>();
  Batch changed = batch;
  for (int b = 0; b < kB; ++b) changed.inputs[static_cast<std::size_t>(b * kT + kT - 1)] = 1;
  model.forward_logits(changed.inputs, kB, kT);
  const std::vector<float> after = model.logits().to_host<float>();
  const auto Vp = static_cast<std::size_t>(config.vocab_rows());
  for (std::size_t row = 0; row < static_cast<std::size_t>(kB * kT); ++row) {
    if (row % kT == kT - 1) continue;
    for (std::size_t j = 0; j < Vp; ++j)
      ASSERT_EQ(bits(after[row * Vp + j]), bits(base[row * Vp + j])) << "row " << row << " saw a later token";
  }
}

// ---- Gradients against central differences -----------------------------------------------------

std::vector<std::size_t> sample_coordinates(const ParamSpec& spec, const Vec& grad, const GptConfig& config,
                                            std::mt19937& rng) {
  const std::size_t n = grad.size();
  std::set<std::size_t> picked;
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  const std::size_t largest = std::min(n, kLargestPerTensor);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(largest), order.end(),
                    [&](std::size_t a, std::size_t b) { return std::abs(grad[a]) > std::abs(grad[b]); });
  picked.insert(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(largest));
  const auto C = static_cast<std::size_t>(config.channels), V = static_cast<std::size_t>(config.vocab_size),
             Vp = static_cast<std::size_t>(config.vocab_rows());
  auto pick_in_rows = [&](std::size_t row_begin, std::size_t row_end, int count) {
    std::uniform_int_distribution<std::size_t> dist(row_begin * C, row_end * C - 1);
    for (int k = 0; k < count; ++k) picked.insert(dist(rng));
  };
  if (spec.kind == ParamKind::TokenEmbedding || spec.kind == ParamKind::LmHead) pick_in_rows(V, Vp, 4);  // padding
  if (spec.kind == ParamKind::TokenEmbedding) pick_in_rows(kInputTokens, V, 4);  // real, never an input
  if (spec.kind == ParamKind::LmHead) pick_in_rows(kInputTokens, V, 4);  // real targets' rows, all used
  std::uniform_int_distribution<std::size_t> any(0, n - 1);
  const std::size_t samples = spec.shape.size() == 1 ? kSamplesPerVector : kSamplesPerMatrix;
  while (picked.size() < std::min(n, samples)) picked.insert(any(rng));
  return {picked.begin(), picked.end()};
}

TEST_F(LlamaGrad, EveryTensorsGradientMatchesCentralDifferences) {
  step(batch);
  const ParameterStore& store = model.parameters();
  const std::vector<int> in = batch.ref_inputs(), tg = batch.ref_targets();
  const auto loss = [&](const RefParams& p) { return ref::reference_llama_loss(config, p, in, tg, kB, kT); };
  RefParams work = params();  // perturbed in place, one coordinate at a time
  const auto central_difference = [&](const std::string& name, std::size_t j) {
    double& v = work.at(name)[j];
    const double x0 = v;
    v = x0 + kStep;
    const double fp = loss(work);
    v = x0 - kStep;
    const double fm = loss(work);
    v = x0;
    return (fp - fm) / (2.0 * kStep);
  };
  std::mt19937 rng(5);
  double worst_sampled = 0.0, worst_directional = 0.0, smallest_scale = 1e300, largest_scale = 0.0;
  std::size_t checked = 0;
  ASSERT_EQ(store.size(), 2u + 7u * static_cast<std::size_t>(config.layers) + 1u);  // wte, layers, lnf, lm_head
  for (std::size_t i = 0; i < store.size(); ++i) {
    const ParamSpec& spec = store.spec(i);
    SCOPED_TRACE(spec.name);
    const Vec g = doubles(store.grad(i));
    const double scale = max_abs(g);
    ASSERT_GT(scale, 0.0) << "no gradient at all";
    smallest_scale = std::min(smallest_scale, scale);
    largest_scale = std::max(largest_scale, scale);

    const std::vector<std::size_t> coords = sample_coordinates(spec, g, config, rng);
    Vec got, want;
    for (std::size_t c : coords) {
      got.push_back(g[c]);
      want.push_back(central_difference(spec.name, c));
      const std::size_t row = c / static_cast<std::size_t>(config.channels);
      if (unused_row(spec, row, config)) {
        EXPECT_EQ(got.back(), 0.0) << "model gradient at unused row " << row;
        EXPECT_EQ(want.back(), 0.0) << "central difference at unused row " << row;
      }
    }
    EXPECT_TRUE(within(got, want, scale, kGradTol, kFdFloor, &worst_sampled)) << "sampled coordinates";
    checked += coords.size();

    // One random unit direction u over the whole tensor: (L(p + h u) - L(p - h u)) / 2h = <g, u>.
    Vec u(g.size());
    std::normal_distribution<double> normal;
    double norm = 0.0;
    for (double& x : u) {
      x = normal(rng);
      norm += x * x;
    }
    for (double& x : u) x /= std::sqrt(norm);
    RefParams plus = params(), minus = params();
    for (std::size_t j = 0; j < u.size(); ++j) {
      plus.at(spec.name)[j] += kStep * u[j];
      minus.at(spec.name)[j] -= kStep * u[j];
    }
    const double fd = (loss(plus) - loss(minus)) / (2.0 * kStep);
    double dot = 0.0, abs_dot = 0.0;
    for (std::size_t j = 0; j < u.size(); ++j) {
      dot += g[j] * u[j];
      abs_dot += std::abs(g[j] * u[j]);
    }
    const double allowed = kDirectionalRelTol * abs_dot + kFdFloor;
    worst_directional = std::max(worst_directional, std::abs(dot - fd) / allowed);
    EXPECT_NEAR(dot, fd, allowed) << "along a random direction";
  }
  std::cout << "[ info ] " << checked << " sampled coordinates in " << store.size()
            << " tensors; worst error / allowed: sampled " << worst_sampled << ", directional " << worst_directional
            << "; largest gradient per tensor " << smallest_scale << " .. " << largest_scale << "\n";
}

// wte's rows that no input uses (padding included) and lm_head's padding rows get exactly zero
// gradient; every real lm_head row gets some (each is a softmax column). The zero comes from those
// rows not being read, not from their values: with them set to 100 the reference loss is the same
// number and the model's gradients and real logits are the same bits.
TEST_F(LlamaGrad, UnusedAndPaddingRowsGetExactlyZeroGradient) {
  model.forward_logits(batch.inputs, kB, kT);
  const std::vector<float> logits = model.logits().to_host<float>();
  step(batch);
  const ParameterStore& store = model.parameters();
  const auto C = static_cast<std::size_t>(config.channels), V = static_cast<std::size_t>(config.vocab_size),
             Vp = static_cast<std::size_t>(config.vocab_rows());
  for (const char* name : {"wte", "lm_head"}) {
    const std::size_t i = store.index_of(name);
    const Vec g = doubles(store.grad(i));
    for (std::size_t row = 0; row < Vp; ++row) {
      double norm = 0.0;
      for (std::size_t c = 0; c < C; ++c) norm += std::abs(g[row * C + c]);
      if (unused_row(store.spec(i), row, config)) {
        EXPECT_EQ(norm, 0.0) << name << " row " << row;
      } else if (std::string(name) == "lm_head") {
        EXPECT_GT(norm, 0.0) << name << " row " << row;
      }
    }
  }
  const std::vector<std::uint32_t> grads = bits(store.flat_grads());
  RefParams changed = params();
  for (std::size_t j = kInputTokens * C; j < Vp * C; ++j) changed.at("wte")[j] = 100.0;
  for (std::size_t j = V * C; j < Vp * C; ++j) changed.at("lm_head")[j] = 100.0;
  EXPECT_EQ(ref::reference_llama_loss(config, changed, batch.ref_inputs(), batch.ref_targets(), kB, kT),
            ref::reference_llama_loss(config, params(), batch.ref_inputs(), batch.ref_targets(), kB, kT));
  load(model, changed, ctx);
  step(batch);
  EXPECT_EQ(first_differing_tensor(store, grads, bits(store.flat_grads())), "");
  model.forward_logits(batch.inputs, kB, kT);
  const std::vector<float> padded = model.logits().to_host<float>();
  double largest_padding_logit = 0.0;
  for (std::size_t j = 0; j < padded.size(); ++j) {
    if (j % Vp < V) {
      ASSERT_EQ(bits(padded[j]), bits(logits[j])) << "real logit " << j;
    } else {
      largest_padding_logit = std::max(largest_padding_logit, std::abs(static_cast<double>(padded[j])));
    }
  }
  EXPECT_GT(largest_padding_logit, 50.0) << "the padding logits should have changed";
}

// ---- Loss weight and accumulation ------------------------------------------------------------

TEST_F(LlamaGrad, LossWeightScalesTheGradient) {
  step(batch, 1.0f);
  const std::vector<float> g1 = flat_grads();
  // A power of two scales every product and sum of the backward exactly: bit for bit.
  step(batch, 0.25f);
  const std::vector<float> quarter = flat_grads();
  std::size_t inexact = 0;
  for (std::size_t j = 0; j < g1.size(); ++j) inexact += bits(quarter[j]) != bits(0.25f * g1[j]);
  EXPECT_EQ(inexact, 0u) << "of " << g1.size() << " gradients, not exactly 0.25 x the weight-1 gradient";
  // Another weight rounds differently: the gradient tolerance.
  step(batch, 0.37f);
  const ParameterStore& store = model.parameters();
  for (std::size_t i = 0; i < store.size(); ++i) {
    const Vec g = doubles(store.grad(i));
    Vec want(g.size());
    for (std::size_t j = 0; j < g.size(); ++j) want[j] = 0.37 * g1[static_cast<std::size_t>(store.offset(i)) + j];
    EXPECT_TRUE(within(g, want, max_abs(want), kGradTol, 0.0)) << store.spec(i).name;
  }
}

TEST_F(LlamaGrad, HalfBatchesAccumulateTheFullBatchGradient) {
  const float full_loss = step(batch);
  const std::vector<float> g1 = flat_grads();
  model.parameters().zero_grads(ctx);
  const Batch first = batch.rows(0, 1), second = batch.rows(1, 1);
  const float l0 = model.forward(first.inputs, first.targets, 1, kT, 0.5f);
  model.backward();
  const float l1 = model.forward(second.inputs, second.targets, 1, kT, 0.5f);
  model.backward();
  EXPECT_NEAR(0.5 * (l0 + l1), full_loss, kLossRelTol * full_loss);
  const std::vector<float> acc = flat_grads();
  const ParameterStore& store = model.parameters();
  for (std::size_t i = 0; i < store.size(); ++i) {
    const auto off = static_cast<std::size_t>(store.offset(i)), n = static_cast<std::size_t>(store.spec(i).numel());
    const Vec got(acc.begin() + static_cast<std::ptrdiff_t>(off), acc.begin() + static_cast<std::ptrdiff_t>(off + n));
    const Vec want(g1.begin() + static_cast<std::ptrdiff_t>(off), g1.begin() + static_cast<std::ptrdiff_t>(off + n));
    EXPECT_TRUE(within(got, want, max_abs(want), kGradTol, 0.0)) << store.spec(i).name;
  }
}

// ---- Determinism ---------------------------------------------------------------------------

TEST_F(LlamaGrad, ForwardAndBackwardRepeatBitForBit) {
  model.forward_logits(batch.inputs, kB, kT);
  const std::vector<std::uint32_t> logits1 = bits(model.logits());
  const float loss1 = step(batch);
  const std::vector<std::uint32_t> grads1 = bits(model.parameters().flat_grads());
  step(make_batch(1, 5, 3));  // another shape in between: reallocated activations
  const float loss2 = step(batch);
  EXPECT_EQ(bits(loss1), bits(loss2));
  EXPECT_EQ(first_differing_tensor(model.parameters(), grads1, bits(model.parameters().flat_grads())), "");
  model.forward_logits(batch.inputs, kB, kT);
  EXPECT_EQ(bits(model.logits()), logits1);
}

struct RunBits {
  std::uint32_t loss = 0;
  std::vector<std::uint32_t> logits, grads;
};

// A fresh context and model at `threads` CPU threads (a per-process setting: runs must not
// overlap), on a batch big enough (B 4, T 64: 256 rows) for OpenBLAS and the kernels to split work.
RunBits run_at(int threads) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, threads});
  Gpt model(ctx, test_config());
  load(model, params(), ctx);
  const Batch b = make_batch(4, 64, 11);
  model.parameters().zero_grads(ctx);
  RunBits r;
  model.forward_logits(b.inputs, b.B, b.T);
  r.logits = bits(model.logits());
  r.loss = bits(model.forward(b.inputs, b.targets, b.B, b.T, 1.0f));
  model.backward();
  r.grads = bits(model.parameters().flat_grads());
  return r;
}

TEST(LlamaThreads, OneAndTwoThreadsGiveIdenticalLossLogitsAndGradients) {
  const RunBits one = run_at(1), two = run_at(2);
  EXPECT_EQ(one.loss, two.loss);
  EXPECT_TRUE(one.logits == two.logits) << "logits differ in their bits";
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  Gpt names(ctx, test_config());
  EXPECT_EQ(first_differing_tensor(names.parameters(), one.grads, two.grads), "");
}

}  // namespace
}  // namespace mt
