// Sampling: pick_token honours top-k and the distribution, the same seed gives the same tokens,
// generate() feeds the model a window of at most its context, temperature 0 is greedy and a huge one
// still draws among the model's top k.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "models/gpt.h"
#include "models/sampler.h"
#include "runtime/nn_kernels.h"
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

// A flat tempered distribution (every entry tied) draws among the top k of the ranking, not the
// lowest ids.
TEST(PickToken, TheRankingChoosesTheCandidatesTheProbabilitiesTheDraw) {
  std::mt19937_64 rng(5);
  const std::vector<float> flat(6, 1.0f / 6);
  const std::vector<float> rank = {0.05f, 0.1f, 0.05f, 0.4f, 0.1f, 0.3f};
  std::map<int, int> seen;
  for (int i = 0; i < 3000; ++i) ++seen[pick_token(flat, rank, 2, rng)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_NEAR(seen[3] / 3000.0, 0.5, 0.05);
  EXPECT_NEAR(seen[5] / 3000.0, 0.5, 0.05);
}

GptConfig tiny_bytes_config() {
  GptConfig config = gpt_preset("tiny");
  config.vocab_size = 256;
  return config;
}

// The model's next-token probabilities after `prompt` (temperature 1).
std::vector<float> next_token_probs(Gpt& model, DeviceContext& ctx, const std::vector<std::int32_t>& prompt) {
  const int vocab = model.config().vocab_size;
  model.forward_logits(prompt, 1, static_cast<int>(prompt.size()));
  Tensor probs = Tensor::empty({1, vocab}, DType::F32, ctx);
  nn::softmax_rows(ctx, model.logits().narrow(static_cast<std::int64_t>(prompt.size()) - 1, 1), vocab, 1.0f, probs);
  return probs.to_host<float>();
}

TEST(Generate, TemperatureZeroAlwaysTakesTheMostLikelyToken) {
  DeviceContext ctx(DeviceOptions{});
  Gpt model(ctx, tiny_bytes_config());
  model.init(5);
  const std::vector<std::int32_t> prompt = {72, 101, 108, 108, 111};
  const std::vector<float> p = next_token_probs(model, ctx, prompt);
  const auto most_likely = static_cast<std::int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
  SampleOptions options;
  options.tokens = 6;
  options.temperature = 0.0f;
  const std::vector<std::int32_t> greedy = generate(model, ctx, prompt, options);
  EXPECT_EQ(greedy.front(), most_likely);
  options.seed = 77;  // no draw is made: any seed gives the same tokens
  EXPECT_EQ(generate(model, ctx, prompt, options), greedy);
  options.temperature = 1.0f;
  options.top_k = 1;
  EXPECT_EQ(generate(model, ctx, prompt, options), greedy);
  options.temperature = 1e-45f;  // the smallest float: as greedy, no overflow into NaN
  options.top_k = 40;
  EXPECT_EQ(generate(model, ctx, prompt, options), greedy);
}

// A temperature that flattens the float softmax into ties (--temperature 1e30) draws evenly among
// the model's top k; ranked by the tempered probabilities, it drew token ids 0..k-1 whatever the model.
TEST(Generate, AHugeTemperatureDrawsAmongTheModelsTopK) {
  DeviceContext ctx(DeviceOptions{});
  Gpt model(ctx, tiny_bytes_config());
  model.init(5);
  const std::vector<std::int32_t> prompt = {72, 101, 108, 108, 111};
  const std::vector<float> p = next_token_probs(model, ctx, prompt);
  std::vector<std::int32_t> ids(p.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + 3, ids.end(), [&](std::int32_t a, std::int32_t b) {
    return p[static_cast<std::size_t>(a)] > p[static_cast<std::size_t>(b)];
  });
  const std::set<std::int32_t> top3(ids.begin(), ids.begin() + 3);
  ASSERT_NE(top3, (std::set<std::int32_t>{0, 1, 2}));  // else the test could not tell
  SampleOptions options;
  options.tokens = 1;
  options.temperature = 1e30f;
  options.top_k = 3;
  std::set<std::int32_t> drawn;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    options.seed = seed;
    drawn.insert(generate(model, ctx, prompt, options).front());
  }
  EXPECT_EQ(drawn, top3);
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
  for (const float t : {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    options.temperature = t;
    EXPECT_TRUE(contains(error_of([&] { generate(model, ctx, {1}, options); }), "temperature must be finite and >= 0"))
        << t;
  }
}

}  // namespace
}  // namespace mt
