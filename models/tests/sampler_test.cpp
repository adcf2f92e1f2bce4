// Sampling: pick_token honours top-k and the distribution, the same seed gives the same tokens,
// and generate() feeds the model a window of at most its context.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "models/gpt.h"
#include "models/sampler.h"
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::error_of;

TEST(PickToken, TopOneIsTheMostLikelyTokenAndTiesGoToTheLowerId) {
  std::mt19937_64 rng(1);
  const std::vector<float> probs = {0.1f, 0.3f, 0.2f, 0.3f, 0.1f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_token(probs, 1, rng), 1);
}

TEST(PickToken, TopKNeverLeavesTheKMostLikely) {
  std::mt19937_64 rng(2);
  const std::vector<float> probs = {0.05f, 0.4f, 0.05f, 0.3f, 0.2f};
  for (int i = 0; i < 2000; ++i) {
    const std::int32_t t = pick_token(probs, 3, rng);
    EXPECT_TRUE(t == 1 || t == 3 || t == 4) << t;
  }
}

// Frequencies over 20000 draws match the renormalized top-k probabilities within 5 standard
// errors (sqrt(p(1-p)/n) <= 0.0035 here), a bound a wrong weighting (e.g. uniform) misses by far.
TEST(PickToken, FrequenciesFollowTheRenormalizedDistribution) {
  std::mt19937_64 rng(3);
  const std::vector<float> probs = {0.1f, 0.5f, 0.1f, 0.3f};
  const int draws = 20000;
  std::map<int, int> seen;
  for (int i = 0; i < draws; ++i) ++seen[pick_token(probs, 0, rng)];
  for (int id = 0; id < 4; ++id)
    EXPECT_NEAR(static_cast<double>(seen[id]) / draws, probs[static_cast<std::size_t>(id)], 5 * 0.0035) << id;
  std::mt19937_64 rng2(4);
  std::map<int, int> top2;
  for (int i = 0; i < draws; ++i) ++top2[pick_token(probs, 2, rng2)];
  EXPECT_NEAR(static_cast<double>(top2[1]) / draws, 0.5 / 0.8, 5 * 0.0035);
  EXPECT_NEAR(static_cast<double>(top2[3]) / draws, 0.3 / 0.8, 5 * 0.0035);
}

TEST(Generate, SameSeedSameTokensAndTheWindowSlides) {
  DeviceContext ctx(DeviceOptions{});
  GptConfig config = gpt_preset("tiny");
  config.vocab_size = 256;
  config.max_seq_len = 8;  // shorter than prompt + tokens: the context window must slide
  Gpt model(ctx, config);
  model.init(5);
  SampleOptions options;
  options.tokens = 12;
  options.seed = 9;
  const std::vector<std::int32_t> prompt = {72, 101, 108, 108, 111};
  std::vector<std::int32_t> streamed;
  const auto first = generate(model, ctx, prompt, options, [&](std::int32_t t) { streamed.push_back(t); });
  const auto again = generate(model, ctx, prompt, options);
  EXPECT_EQ(first.size(), 12u);
  EXPECT_EQ(first, again);
  EXPECT_EQ(first, streamed);
  for (std::int32_t t : first) EXPECT_TRUE(t >= 0 && t < 256) << t;
  options.seed = 10;
  EXPECT_NE(generate(model, ctx, prompt, options), first);
}

TEST(Generate, BadOptionsAreErrors) {
  DeviceContext ctx(DeviceOptions{});
  GptConfig config = gpt_preset("tiny");
  config.vocab_size = 256;
  Gpt model(ctx, config);
  model.init(5);
  SampleOptions options;
  EXPECT_TRUE(contains(error_of([&] { generate(model, ctx, {}, options); }), "at least one prompt token"));
  options.temperature = 0.0f;
  EXPECT_TRUE(contains(error_of([&] { generate(model, ctx, {1}, options); }), "temperature must be positive"));
}

}  // namespace
}  // namespace mt
