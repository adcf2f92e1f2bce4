// The slices a checkpoint stores: a tensor-parallel shard described as boxes of the global tensor
// must cover exactly the elements the shard holds, in its order (ParamShard::full_runs is the
// model's own account of that), for every parameter of every partition; and the model's shape
// survives its trip through the manifest; a resumed run keeps the checkpoint's learning-rate horizon.
#include "train/checkpointing.h"

#include <gtest/gtest.h>

#include "tests/test_helpers.h"  // defines: error_of, contains

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

// The layout section records cp and survives the manifest's round trip; a manifest written before
// context parallelism (no "cp") reads as cp 1 and is described as it was.
TEST(LayoutJson, RecordsContextParallelismAndOlderManifestsMeanOne) {
  const GptConfig config = small_config();
  LayoutRequest request;
  request.dp = 0;  // the ranks tp x cp leave: 2
  request.tp = 2;
  request.cp = 2;
  const LayoutPlan plan(request, layout_dims(config, config.max_seq_len), /*world_size=*/8, /*global_batch=*/8);
  ckpt::Manifest manifest;
  manifest.layout = layout_json(plan);
  const ckpt::Manifest back = ckpt::Manifest::parse(manifest.to_json(), "test");
  EXPECT_EQ(back.layout.at("cp"), 2);
  EXPECT_EQ(back.layout.at("dp"), 2);
  EXPECT_EQ(describe_saved_layout(back.layout), "dp 2 x tp 2 x cp 2 x pp 1, 1f1b, zero 0 on 8 rank(s)");

  nlohmann::json older = back.layout;
  older.erase("cp");
  older["dp"] = 4;
  const ckpt::Manifest old_back = [&] {
    ckpt::Manifest m;
    m.layout = older;
    return ckpt::Manifest::parse(m.to_json(), "test");
  }();
  EXPECT_FALSE(old_back.layout.contains("cp"));
  EXPECT_EQ(old_back.layout.value("cp", 1), 1);
  EXPECT_EQ(describe_saved_layout(old_back.layout), "dp 4 x tp 2 x pp 1, 1f1b, zero 0 on 8 rank(s)");
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

// The learning-rate horizon a resumed run follows (meshtrain issue 16): trained 20 steps of a
// cosine over 20, resumed with --steps 40, the options' schedule decays over 40 and step 21's
// learning rate jumped from the floor back up to mid-decay. The checkpoint's horizon is kept.
LrSchedule cosine(int decay_steps) {
  LrSchedule s;
  s.kind = LrScheduleKind::Cosine;
  s.max_lr = 3e-3f;
  s.warmup_steps = 2;
  s.total_steps = decay_steps;
  return s;
}

nlohmann::json training_of(const LrSchedule& saved) {
  return {{"optimizer_steps", 20}, {"total_steps", saved.total_steps}, {"lr", lr_schedule_json(saved)}};
}

TEST(ResumedLrSchedule, KeepsTheCheckpointsHorizonWhenStepsIsRaised) {
  std::vector<std::string> notes;
  const LrSchedule chosen = resumed_lr_schedule(training_of(cosine(20)), 20, cosine(40), false, notes, "ck");
  EXPECT_EQ(chosen.total_steps, 20);
  // 0-based step 19 was the last trained; step 20 continues at the floor, not back up the curve.
  EXPECT_LE(chosen.at(20), cosine(20).at(19));
  EXPECT_EQ(chosen.at(20), cosine(20).min_lr());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(testing::contains(notes[0], "keeps decaying over the checkpoint's 20 steps (--steps 40 trains past it"))
      << notes[0];
  EXPECT_TRUE(testing::contains(notes[0], "give --lr-decay-steps 40 to stretch it")) << notes[0];
}

TEST(ResumedLrSchedule, AnExplicitHorizonWinsAndTheNoteShowsTheJump) {
  std::vector<std::string> notes;
  const LrSchedule chosen = resumed_lr_schedule(training_of(cosine(20)), 20, cosine(40), true, notes, "ck");
  EXPECT_EQ(chosen.total_steps, 40);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(testing::contains(notes[0], "--lr-decay-steps 40 replaces the checkpoint's learning-rate horizon of 20 "
                                          "steps: the learning rate goes from 3.21e-04 at step 20 to 1.76e-03 at step 21"))
      << notes[0];
}

TEST(ResumedLrSchedule, TheSameOptionsChangeNothingAndSayNothing) {
  for (const bool given : {false, true}) {
    std::vector<std::string> notes;
    const LrSchedule chosen = resumed_lr_schedule(training_of(cosine(20)), 8, cosine(20), given, notes, "ck");
    EXPECT_EQ(lr_schedule_json(chosen), lr_schedule_json(cosine(20)));
    EXPECT_TRUE(notes.empty()) << notes[0];
  }
}

TEST(ResumedLrSchedule, OlderCheckpointsKeepTheirTotalSteps) {
  std::vector<std::string> notes;
  const nlohmann::json old = {{"optimizer_steps", 20}, {"total_steps", 20}, {"lr_schedule", cosine(20).describe()}};
  EXPECT_EQ(resumed_lr_schedule(old, 20, cosine(40), false, notes, "ck").total_steps, 20);
  EXPECT_EQ(notes.size(), 1u);
}

TEST(ResumedLrSchedule, NoRecordFallsBackToTheOptionsWithANote) {
  std::vector<std::string> notes;
  const nlohmann::json none = {{"optimizer_steps", 5}};
  EXPECT_EQ(resumed_lr_schedule(none, 5, cosine(40), false, notes, "ck").total_steps, 40);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(testing::contains(notes[0], "records no learning-rate horizon")) << notes[0];
  notes.clear();
  resumed_lr_schedule(none, 0, cosine(40), false, notes, "ck");  // converted llm.c weights: nothing to continue
  EXPECT_TRUE(notes.empty());
}

TEST(ResumedLrSchedule, OtherScheduleFieldsAreNotedAndBadRecordsAreErrors) {
  std::vector<std::string> notes;
  LrSchedule requested = cosine(20);
  requested.max_lr = 1e-3f;
  resumed_lr_schedule(training_of(cosine(20)), 20, requested, false, notes, "ck");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(testing::contains(notes[0], "(the checkpoint's: cosine: max_lr 0.003")) << notes[0];

  LrSchedule long_warmup = cosine(40);
  long_warmup.warmup_steps = 30;
  EXPECT_TRUE(testing::contains(
      testing::error_of([&] { resumed_lr_schedule(training_of(cosine(20)), 20, long_warmup, false, notes, "ck"); }),
      "--warmup 30 is beyond the checkpoint's learning-rate horizon of 20 steps"));
  nlohmann::json bad = training_of(cosine(20));
  bad["lr"]["decay_steps"] = "twenty";
  EXPECT_TRUE(testing::contains(
      testing::error_of([&] { resumed_lr_schedule(bad, 20, cosine(20), false, notes, "ck"); }),
      "ck: training.lr: 'decay_steps' is not an integer"));
}

}  // namespace
}  // namespace mt
