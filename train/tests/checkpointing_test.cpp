// The slices a checkpoint stores: a tensor-parallel shard described as boxes of the global tensor
// must cover exactly the elements the shard holds, in its order (ParamShard::full_runs is the
// model's own account of that), for every parameter of every partition; and the model's shape
// survives its trip through the manifest.
#include "train/checkpointing.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace mt {
namespace {

// The global flat index of every local element, from the runs of a slice.
std::vector<std::int64_t> elements(const ckpt::Shape& shape, const ckpt::Slice& slice) {
  std::vector<std::int64_t> out;
  for (const ckpt::Run& run : ckpt::slice_runs(shape, slice))
    for (std::int64_t i = 0; i < run.count; ++i) out.push_back(run.global + i);
  return out;
}

std::vector<std::int64_t> elements(const std::vector<std::pair<std::int64_t, std::int64_t>>& runs) {
  std::vector<std::int64_t> out;
  for (const auto& [first, count] : runs)
    for (std::int64_t i = 0; i < count; ++i) out.push_back(first + i);
  return out;
}

GptConfig small_config() {
  GptConfig c;
  c.layers = 4;
  c.heads = 4;
  c.channels = 16;
  c.max_seq_len = 8;
  c.vocab_size = 50;
  c.padded_vocab = 64;
  return c;
}

TEST(ShardSlice, CoversWhatTheShardHoldsInItsOrder) {
  const GptConfig config = small_config();
  for (int tp : {1, 2, 4}) {
    for (int rank = 0; rank < tp; ++rank) {
      GptPartition partition = GptPartition::whole(config);
      partition.tp_size = tp;
      partition.tp_rank = rank;
      for (const ParamShard& shard : gpt_param_shards(config, partition)) {
        const ckpt::Slice slice = shard_slice(shard, 0, shard.local.numel());
        ckpt::validate_slice(shard.full.shape, slice, shard.full.name);
        EXPECT_EQ(elements(shard.full.shape, slice), elements(shard.full_runs()))
            << shard.full.name << " on tp rank " << rank << " of " << tp;
      }
    }
  }
}

TEST(ShardSlice, AnElementRangeCutsTheShard) {
  const GptConfig config = small_config();
  GptPartition partition = GptPartition::whole(config);
  partition.tp_size = 2;
  partition.tp_rank = 1;
  for (const ParamShard& shard : gpt_param_shards(config, partition)) {
    const std::vector<std::int64_t> all = elements(shard.full_runs());
    const std::int64_t n = shard.local.numel(), begin = n / 3, end = n - n / 4;
    const std::vector<std::int64_t> expected(all.begin() + begin, all.begin() + end);
    EXPECT_EQ(elements(shard.full.shape, shard_slice(shard, begin, end)), expected) << shard.full.name;
  }
}

TEST(GptConfigJson, RoundTripsAndNamesWhatIsMissing) {
  const GptConfig config = small_config();
  const GptConfig back = gpt_config_from_json(gpt_config_json(config), "test");
  EXPECT_EQ(back.describe(), config.describe());
  nlohmann::json broken = gpt_config_json(config);
  broken.erase("heads");
  try {
    gpt_config_from_json(broken, "checkpoint x (model)");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("checkpoint x (model): no 'heads'"), std::string::npos) << e.message();
  }
}

// Model fields a manifest can carry that get<int>() misread: a float beyond int (undefined
// behaviour), an integer beyond int (wrapped: 4294967298 read as 2), a bool, and a vocabulary whose
// padding overflows int (found through checkpoint/tests/fuzz_full_state.cpp).
TEST(GptConfigJson, NumbersThatAreNotIntsAreErrors) {
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {1e300, "'layers' is not an integer"}, {4294967298ULL, "'layers' is out of range"},
      {-4294967298LL, "'layers' is out of range"}, {true, "'layers' is not an integer"}};
  for (const auto& [value, expected] : cases) {
    nlohmann::json model = gpt_config_json(small_config());
    model["layers"] = value;
    try {
      gpt_config_from_json(model, "checkpoint x (model)");
      FAIL() << "layers " << value.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("checkpoint x (model): " + expected), std::string::npos) << e.message();
    }
  }
  nlohmann::json model = gpt_config_json(small_config());
  model["vocab_size"] = 2147483647;
  model["padded_vocab"] = 0;
  try {
    gpt_config_from_json(model, "checkpoint x (model)");
    FAIL() << "a vocabulary whose padding overflows int was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("vocab_size (2147483647) is too large"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace mt
