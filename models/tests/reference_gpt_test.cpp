// The double-precision GPT-2 reference against values worked out by hand (or with Python's math
// module), and properties of the whole model that hold exactly: the loss of a model with a zero
// embedding is log V, logits at position t ignore every later token and every other sequence, a
// model whose blocks are zero is lnf(embedding) wte^T. The finite-difference helpers against
// derivatives known in closed form.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/gpt_config.h"           // defines: GptConfig
#include "models/gpt_parameters.h"       // defines: gpt_parameter_specs, spec_index
#include "models/tests/reference_gpt.h"  // defines: ref::embedding, ref::layernorm, ref::linear,
//          ref::gelu, ref::attention, ref::cross_entropy, ref::softmax_rows, ref::mean, ref::reference_gpt_logits,
//          ref::reference_gpt_loss, ref::reference_random_params, ref::central_difference, ref::central_difference_gradient
#include "runtime/error.h"
#include "tests/test_helpers.h"          // defines: error_of, contains

namespace mt {
namespace {

using ref::RefParams;
using ref::Vec;
using testing::contains;
using testing::error_of;

// Exact arithmetic on small numbers in double: allow a few ulps of the values involved.
constexpr double kExact = 1e-14;

void expect_near_all(const Vec& got, const Vec& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(ReferenceOps, GeluMatchesTheTanhFormula) {
  // 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) evaluated with Python's math module.
  EXPECT_EQ(ref::gelu(0.0), 0.0);
  EXPECT_NEAR(ref::gelu(1.0), 0.8411919906082768, kExact);
  EXPECT_NEAR(ref::gelu(-2.0), -0.04540230591222494, kExact);
  EXPECT_NEAR(ref::gelu(0.5), 0.34571400982514394, kExact);
  expect_near_all(ref::gelu(Vec{1.0, 0.5}), {0.8411919906082768, 0.34571400982514394}, kExact);
}

TEST(ReferenceOps, LayerNormUsesBiasedVarianceAndEps) {
  // Row [1 2 3 4]: mean 2.5, biased variance 1.25, rstd 1/sqrt(1.25 + 1e-5).
  Vec mean, rstd;
  const Vec out = ref::layernorm({1, 2, 3, 4, 5, 5, 5, 5}, {1, 1, 2, 1}, {0, 0, 0, 0.5}, 2, 4, &mean, &rstd);
  const double s = 1.0 / std::sqrt(1.25 + 1e-5);
  expect_near_all(mean, {2.5, 5.0}, kExact);
  expect_near_all(rstd, {s, 1.0 / std::sqrt(1e-5)}, 1e-12);
  expect_near_all(out, {-1.5 * s, -0.5 * s, 2 * 0.5 * s, 1.5 * s + 0.5, 0, 0, 0, 0.5}, kExact);
  EXPECT_NEAR(out[0], -1.3416354199689269, kExact);
}

TEST(ReferenceOps, LinearIsXTimesWeightTransposedPlusBias) {
  // W [3, 2] = [[1, 0], [0, 1], [1, 1]]: y = [x0 + 0.5, x1, x0 + x1 - 1].
  const Vec y = ref::linear({1, 2, -3, 4}, {1, 0, 0, 1, 1, 1}, {0.5, 0, -1}, 2, 2, 3);
  expect_near_all(y, {1.5, 2, 2, -2.5, 4, 0}, kExact);
  expect_near_all(ref::linear({1, 2}, {1, 0, 0, 1, 1, 1}, {}, 1, 2, 3), {1, 2, 3}, kExact);
}

TEST(ReferenceOps, EmbeddingAddsTokenAndPositionRows) {
  const Vec wte = {0, 0, 10, 20, 30, 40};  // 3 tokens x C 2
  const Vec wpe = {1, 2, 3, 4, 5, 6};      // 3 positions x C 2
  expect_near_all(ref::embedding({2, 1, 2, 2}, wte, wpe, 2, 2, 2), {31, 42, 13, 24, 31, 42, 33, 44}, kExact);
  EXPECT_TRUE(contains(error_of([&] { ref::embedding({3, 0}, wte, wpe, 1, 2, 2); }), "token 3"));
}

TEST(ReferenceOps, AttentionIsCausalSoftmaxOfScaledDots) {
  // One sequence, T 2, C 4, two heads of size 2. qkv rows are [q | k | v].
  const Vec qkv = {
      // t 0: q            k             v
      1, 0, 0, 0,    2, 0, 1, 1,    1, 2, 3, 4,
      // t 1
      1, 0, 0, 1,    4, 0, 0, 3,    5, 6, 7, 8,
  };
  Vec att;
  const Vec out = ref::attention(qkv, 1, 2, 4, 2, &att);
  // Position 0 sees only itself: out = v0 in both heads.
  // Position 1, head 0: q = (1, 0), scores (2, 4) / sqrt(2); head 1: q = (0, 1), scores (1, 3) / sqrt(2).
  const double r = 1.0 / std::sqrt(2.0);
  const double p0 = 1.0 / (1.0 + std::exp(2 * r));  // weight of position 0 in both heads
  const Vec want = {1, 2, 3, 4, p0 * 1 + (1 - p0) * 5, p0 * 2 + (1 - p0) * 6, p0 * 3 + (1 - p0) * 7,
                    p0 * 4 + (1 - p0) * 8};
  expect_near_all(out, want, kExact);
  // att [B 1, heads 2, T 2, T 2]; above the diagonal is zero.
  expect_near_all(att, {1, 0, p0, 1 - p0, 1, 0, p0, 1 - p0}, kExact);
}

TEST(ReferenceOps, CrossEntropyIgnoresPaddingColumns) {
  // Row [0, ln 3 | 100]: V 2 of Vp 3, target 1: -log(3/4); target 0: -log(1/4).
  const Vec logits = {0, std::log(3.0), 100, 0, std::log(3.0), -7};
  expect_near_all(ref::cross_entropy(logits, {1, 0}, 2, 3, 2), {-std::log(0.75), -std::log(0.25)}, kExact);
  // Equal logits: log V.
  EXPECT_NEAR(ref::cross_entropy(Vec(8, 0.3), {4}, 1, 8, 5)[0], std::log(5.0), kExact);
  EXPECT_TRUE(contains(error_of([&] { ref::cross_entropy(logits, {2, 0}, 2, 3, 2); }), "target 2"));
}

TEST(ReferenceOps, SoftmaxRowsWithTemperature) {
  const Vec logits = {0, std::log(2.0), 50};  // V 2 of Vp 3
  expect_near_all(ref::softmax_rows(logits, 1, 3, 2, 1.0), {1.0 / 3, 2.0 / 3}, kExact);
  expect_near_all(ref::softmax_rows(logits, 1, 3, 2, 0.5), {1.0 / 5, 4.0 / 5}, kExact);
}

GptConfig tiny_config() {
  GptConfig config;
  config.layers = 2;
  config.heads = 2;
  config.channels = 8;
  config.max_seq_len = 6;
  config.vocab_size = 11;
  config.padded_vocab = 16;
  return config;
}

TEST(ReferenceModel, ZeroEmbeddingGivesUniformPrediction) {
  const GptConfig config = tiny_config();
  RefParams params = ref::reference_random_params(config, 7);
  for (double& v : params.at("wte")) v = 0.0;  // every logit 0 whatever the blocks do
  const double loss = ref::reference_gpt_loss(config, params, {1, 2, 3, 4, 5, 6}, {0, 1, 2, 3, 4, 10}, 2, 3);
  EXPECT_NEAR(loss, std::log(11.0), kExact);
}

TEST(ReferenceModel, ZeroBlocksReduceToEmbeddingNormAndTiedHead) {
  GptConfig config = tiny_config();
  RefParams params = ref::reference_random_params(config, 11, 0.5);
  // Zero output projections make both residual branches zero.
  for (int l = 0; l < config.layers; ++l)
    for (const char* name : {"attn.proj.weight", "attn.proj.bias", "mlp.proj.weight", "mlp.proj.bias"})
      for (double& v : params.at("h." + std::to_string(l) + "." + name)) v = 0.0;
  const std::vector<int> inputs = {3, 9, 0, 3};
  const int B = 1, T = 4, C = config.channels, Vp = config.vocab_rows();
  const Vec x = ref::embedding(inputs, params.at("wte"), params.at("wpe"), B, T, C);
  const Vec xf = ref::layernorm(x, params.at("lnf.weight"), params.at("lnf.bias"), B * T, C);
  Vec want(static_cast<std::size_t>(B * T * Vp), 0.0);
  for (int n = 0; n < B * T; ++n)
    for (int v = 0; v < Vp; ++v)
      for (int c = 0; c < C; ++c)
        want[static_cast<std::size_t>(n * Vp + v)] +=
            xf[static_cast<std::size_t>(n * C + c)] * params.at("wte")[static_cast<std::size_t>(v * C + c)];
  expect_near_all(ref::reference_gpt_logits(config, params, inputs, B, T), want, 1e-12);
}

TEST(ReferenceModel, LogitsAtPositionTIgnoreLaterTokensAndOtherSequences) {
  const GptConfig config = tiny_config();
  const RefParams params = ref::reference_random_params(config, 3, 0.3);
  const int B = 2, T = 5, Vp = config.vocab_rows();
  std::vector<int> inputs = {1, 4, 2, 8, 5, 0, 10, 3, 3, 7};
  const Vec before = ref::reference_gpt_logits(config, params, inputs, B, T);
  inputs[3] = 9;  // sequence 0, position 3
  const Vec after = ref::reference_gpt_logits(config, params, inputs, B, T);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      bool same = true;
      for (int v = 0; v < Vp; ++v) {
        const auto i = static_cast<std::size_t>((b * T + t) * Vp + v);
        same = same && before[i] == after[i];
      }
      EXPECT_EQ(same, !(b == 0 && t >= 3)) << "sequence " << b << " position " << t;
    }
}

TEST(ReferenceModel, LossIsTheMeanCrossEntropyOfTheRealColumns) {
  const GptConfig config = tiny_config();
  const RefParams params = ref::reference_random_params(config, 5, 0.4);
  const std::vector<int> inputs = {1, 4, 2, 8, 5, 0}, targets = {4, 2, 8, 5, 0, 10};
  const Vec logits = ref::reference_gpt_logits(config, params, inputs, 2, 3);
  const Vec losses = ref::cross_entropy(logits, targets, 6, config.vocab_rows(), config.vocab_size);
  EXPECT_NEAR(ref::reference_gpt_loss(config, params, inputs, targets, 2, 3), ref::mean(losses), kExact);
  // Random weights of scale 0.4 give a loss near, but not at, log V.
  EXPECT_GT(std::abs(ref::mean(losses) - std::log(11.0)), 1e-3);
  EXPECT_LT(std::abs(ref::mean(losses) - std::log(11.0)), 2.0);
}

TEST(ReferenceModel, RandomParamsCoverEverySpecAndAreFp32Values) {
  const GptConfig config = tiny_config();
  const RefParams params = ref::reference_random_params(config, 1);
  const auto specs = gpt_parameter_specs(config);
  ASSERT_EQ(params.size(), specs.size());
  for (const ParamSpec& spec : specs) {
    const Vec& v = params.at(spec.name);
    ASSERT_EQ(static_cast<std::int64_t>(v.size()), spec.numel()) << spec.name;
    for (double x : v) ASSERT_EQ(x, static_cast<double>(static_cast<float>(x))) << spec.name;
  }
  EXPECT_NEAR(ref::mean(params.at("h.1.ln2.weight")), 1.0, 0.1);
  EXPECT_NEAR(ref::mean(params.at("h.1.ln2.bias")), 0.0, 0.1);
}

TEST(ReferenceModel, MissingOrMisshapedParametersAndLongSequencesThrow) {
  const GptConfig config = tiny_config();
  RefParams params = ref::reference_random_params(config, 1);
  const std::vector<int> six = {0, 1, 2, 3, 4, 5};
  EXPECT_TRUE(contains(error_of([&] { ref::reference_gpt_logits(config, params, {0, 1, 2, 3, 4, 5, 6}, 1, 7); }),
                       "max_seq_len"));
  params.at("h.1.mlp.fc.bias").pop_back();
  EXPECT_TRUE(contains(error_of([&] { ref::reference_gpt_logits(config, params, six, 1, 6); }), "h.1.mlp.fc.bias"));
  params.at("h.1.mlp.fc.bias").push_back(0.0);
  params.erase("lnf.bias");
  EXPECT_TRUE(contains(error_of([&] { ref::reference_gpt_logits(config, params, six, 1, 6); }), "lnf.bias"));
}

TEST(CentralDifference, MatchesClosedFormDerivatives) {
  // f(x) = sum x^3 + x0 x1: df/dx0 = 3 x0^2 + x1. Central differences are exact for cubics up to
  // the h^2 f'''/6 = h^2 term and rounding of f / h ~ 1e-16 / 1e-5.
  auto f = [](const Vec& x) {
    double s = x[0] * x[1];
    for (double v : x) s += v * v * v;
    return s;
  };
  const Vec x = {0.5, -1.25, 2.0};
  const double h = 1e-5;
  EXPECT_NEAR(ref::central_difference(f, x, 0, h), 3 * 0.25 - 1.25, 1e-9);
  const Vec g = ref::central_difference_gradient(f, x, h);
  expect_near_all(g, {3 * 0.25 - 1.25, 3 * 1.5625 + 0.5, 12.0}, 1e-9);

  RefParams params = {{"a", {2.0, 3.0}}, {"b", {-1.0}}};
  auto fp = [](const RefParams& p) { return p.at("a")[0] * p.at("a")[1] * p.at("b")[0]; };
  EXPECT_NEAR(ref::central_difference(fp, params, "a", 1, h), -2.0, 1e-9);
  EXPECT_NEAR(ref::central_difference(fp, params, "b", 0, h), 6.0, 1e-9);
  EXPECT_EQ(params.at("a")[1], 3.0);  // untouched
  EXPECT_TRUE(contains(error_of([&] { ref::central_difference(fp, params, "c", 0, h); }), "no parameter c"));
}

TEST(GptParameters, SpecIndexFindsEveryNameAndRejectsAnUnknownOne) {
  // The trainer, the weights loader and checkpoint conversion map a shard to its full tensor by
  // name; a name of another model must stop there, not read past the list.
  const std::vector<ParamSpec> specs = gpt_parameter_specs(tiny_config());
  for (std::size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(spec_index(specs, specs[i].name), i) << specs[i].name;
  const std::string message = error_of([&] { spec_index(specs, "h.99.attn.qkv.weight"); });
  EXPECT_TRUE(contains(message, "no parameter 'h.99.attn.qkv.weight' among the " + std::to_string(specs.size())))
      << message;
}

}  // namespace
}  // namespace mt
