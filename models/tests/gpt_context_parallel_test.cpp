// Context parallelism in the model (the world is one cp group): what a rank holds of a sequence's
// activations. Training equivalence across layouts is train/tests/parallel_equivalence_test.cpp's.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "parallel/causal_split.h"
#include "tests/test_env.h"  // defines: test_world, test_context

namespace mt {
namespace {

constexpr int kB = 2, kSeq = 64;

GptConfig config_of(ModelFamily family) {
  GptConfig c = gpt_preset(family == ModelFamily::Llama ? "llama-tiny" : "tiny");
  c.vocab_size = 256;
  c.max_seq_len = kSeq;
  return c;
}

// The activations a rank holds after a training forward of kB sequences of kSeq positions, of which
// it holds `rows` each (ids: any valid tokens; only the sizes matter here).
std::int64_t activations_after_forward(const GptConfig& config, Communicator* cp, int rows) {
  DeviceContext& ctx = testing::test_context();
  GptOptions options;
  options.context_parallel = cp;
  Gpt model(ctx, config, DType::F32, {}, {}, 1, options);
  model.init(7);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(kB) * rows);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37) % 256);
  model.forward(ids, ids, kB, rows, 1.0f);
  return model.activation_bytes();
}

// cp 2 holds half the rows of each sequence: every per-row activation halves, and attention keeps a
// log-sum-exp per query instead of the [T, T] scores, so a rank's whole activation memory (ring
// buffers included) is at most half of cp 1's at the same sequence length.
TEST(GptContextParallel, TwoRanksHalveEachRanksActivations) {
  Communicator& world = testing::test_world();
  if (world.size() != 2) GTEST_SKIP() << "runs on 2 ranks";
  for (const ModelFamily family : {ModelFamily::Gpt2, ModelFamily::Llama}) {
    SCOPED_TRACE(model_family_name(family));
    const GptConfig config = config_of(family);
    const std::int64_t whole = activations_after_forward(config, nullptr, kSeq);
    const std::int64_t split = activations_after_forward(config, &world, kSeq / 2);
    if (world.rank() == 0)
      std::printf("[ cp activations ] %s: cp 1 %lld bytes, cp 2 %lld bytes per rank (%.2f)\n",
                  model_family_name(family), static_cast<long long>(whole), static_cast<long long>(split),
                  static_cast<double>(split) / static_cast<double>(whole));
    EXPECT_LE(2 * split, whole);
    EXPECT_GT(4 * split, whole) << "more than a halving: the rows per rank are half, not a quarter";
  }
}

// A sequence longer than the model's context is refused on the global length, not the rank's rows.
TEST(GptContextParallel, RefusesASequenceBeyondTheContextByItsWholeLength) {
  Communicator& world = testing::test_world();
  if (world.size() != 2) GTEST_SKIP() << "runs on 2 ranks";
  GptConfig config = config_of(ModelFamily::Gpt2);
  config.max_seq_len = kSeq / 2;
  GptOptions options;
  options.context_parallel = &world;
  Gpt model(testing::test_context(), config, DType::F32, {}, {}, 1, options);
  model.init(7);
  const std::vector<std::int32_t> ids(static_cast<std::size_t>(kB) * kSeq / 2, 1);
  try {
    model.forward(ids, ids, kB, kSeq / 2, 1.0f);
    ADD_FAILURE() << "a " << kSeq << "-position sequence ran on a context of " << kSeq / 2;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence length 64 exceeds the model's context of 32"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mt
