// What a training step asks of the device layer once warm (runtime/device_counters.h).
// - The single-rank Trainer (no communicator): the steps after the first two allocate nothing (every
//   tensor a step makes comes from the allocator's cached blocks).
// - ParallelTrainer on one rank (dp 1), on dp 2 x pp 2, with and without ZeRO-1 (and ZeRO-1 in bf16,
//   its GEMM weights gathered as their bf16 copy), and with context
//   parallelism (cp 2 x pp 2, dp 2 x cp 2: ring attention's buffers made once): no allocation
//   and at most one host wait per step (the read of the loss and the norm; train/step_batch.h), and
//   the counts of launches and host copies repeat from step to step (no step does extra work). A
//   finished collective's Work drops its tensors before its waiter wakes (comm/communicator.h), so
//   no block is still held by the communication threads when the next step asks for it.
// The counts of every counted step are printed per rank, as `meshbench train` prints them.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "data/loader.h"
#include "models/gpt.h"
#include "parallel/groups.h"
#include "runtime/device_counters.h"
#include "tests/test_env.h"
#include "train/parallel_trainer.h"
#include "train/tests/tiny_corpus.h"
#include "train/tests/trainer.h"

namespace mt {
namespace {

using testing::corpus;
using testing::test_context;
using testing::test_world;

constexpr int kWarmSteps = 2, kCountedSteps = 3;
constexpr std::uint64_t kSeed = 99;

struct Layout {
  int dp, tp, pp, zero, cp = 1;
  DType compute = DType::F32;
  int world_size() const { return dp * tp * pp * cp; }
};

GptConfig tiny_config() {
  GptConfig config = gpt_preset("tiny");
  config.vocab_size = 256;
  config.max_seq_len = 32;
  return config;
}

constexpr int kGlobalBatch = 8, kMicroBatch = 2;

TrainSettings tiny_settings() {
  TrainSettings s;
  s.seq_len = 32;
  s.steps = kWarmSteps + kCountedSteps;
  s.schedule.max_lr = 1e-3f;
  return s;
}

// The counts of each step after the warm ones.
template <class Step>
std::vector<DeviceCounters> counted_steps(Step&& step) {
  std::vector<DeviceCounters> counts;
  for (int i = 0; i < kWarmSteps + kCountedSteps; ++i) {
    const DeviceCounters before = device_counters();
    step();
    if (i >= kWarmSteps) counts.push_back(device_counters() - before);
  }
  return counts;
}

TEST(StepCounters, AWarmSingleRankStepAllocatesNothing) {
  if (test_world().rank() != 0) GTEST_SKIP() << "the single-rank Trainer runs on rank 0";
  DeviceContext& ctx = test_context();
  Gpt model(ctx, tiny_config());
  model.init(kSeed);
  const TrainSettings s = tiny_settings();
  data::DataLoader train = data::DataLoader::for_split(corpus().path(), "train", s.seq_len, kSeed, 256);
  Trainer trainer(ctx, model, train, nullptr, s, kGlobalBatch, kMicroBatch);
  const std::vector<DeviceCounters> counts = counted_steps([&] { trainer.step(); });
  for (std::size_t i = 0; i < counts.size(); ++i) {
    EXPECT_EQ(counts[i].allocations, 0u) << "step " << kWarmSteps + i + 1 << " reached the raw allocator";
    EXPECT_EQ(counts[i].launches, counts[0].launches) << "step " << kWarmSteps + i + 1;
  }
  EXPECT_GT(counts[0].launches, 0u) << "a step that launches nothing counted nothing";
}

std::vector<DeviceCounters> counts_per_step(const Layout& layout) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const GptConfig config = tiny_config();
  const TrainSettings s = tiny_settings();
  LayoutRequest request;
  request.dp = layout.dp;
  request.tp = layout.tp;
  request.pp = layout.pp;
  request.cp = layout.cp;
  request.zero = layout.zero;
  request.micro_batch = kMicroBatch;
  request.bucket_mb = 0.05;
  request.overlap = true;
  const LayoutPlan plan(request, layout_dims(config, s.seq_len), request.world_size(), kGlobalBatch);
  ParallelGroups groups = build_groups(world, Mesh(plan.mesh()));
  data::DataLoader train = data::DataLoader::for_split(corpus().path(), "train", s.seq_len, kSeed, 256);
  ParallelTrainer trainer(ctx, world, groups, config, layout.compute, train, nullptr, s, plan);
  trainer.init(kSeed);
  return counted_steps([&] { trainer.step(); });
}

void expect_steady(const Layout& layout) {
  const std::string what = "dp" + std::to_string(layout.dp) + (layout.cp > 1 ? " cp" + std::to_string(layout.cp) : "") +
                           " pp" + std::to_string(layout.pp) + " zero " + std::to_string(layout.zero) +
                           (layout.compute == DType::BF16 ? " bf16" : "");
  SCOPED_TRACE(what);
  const std::vector<DeviceCounters> counts = counts_per_step(layout);
  ASSERT_EQ(counts.size(), static_cast<std::size_t>(kCountedSteps));
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const int step = kWarmSteps + static_cast<int>(i) + 1;
    std::printf("rank %d, %s, step %d: %llu allocations, %llu host syncs, %llu launches, %llu bytes copied\n",
                test_world().rank(), what.c_str(), step, static_cast<unsigned long long>(counts[i].allocations),
                static_cast<unsigned long long>(counts[i].host_syncs),
                static_cast<unsigned long long>(counts[i].launches),
                static_cast<unsigned long long>(counts[i].copy_bytes));
    EXPECT_EQ(counts[i].allocations, 0u) << "step " << step << " reached the raw allocator";
    EXPECT_LE(counts[i].host_syncs, 1u) << "step " << step << ": one read of the loss and norm";
    EXPECT_EQ(counts[i].launches, counts[0].launches) << "step " << step;
    EXPECT_EQ(counts[i].copy_bytes, counts[0].copy_bytes) << "step " << step;
    // The upload of the ids the rank reads (a pipeline's first stage its inputs, its last the
    // targets, a single stage both; its own rows of each sequence under cp) and the 8-byte read of
    // the loss and norm.
    const TrainSettings s = tiny_settings();
    const std::uint64_t ids =
        std::uint64_t{kGlobalBatch} / layout.dp * (s.seq_len / layout.cp) * sizeof(std::int32_t);
    EXPECT_EQ(counts[i].copy_bytes, (layout.pp > 1 ? 1 : 2) * ids + 8) << "step " << step;
  }
  EXPECT_GT(counts[0].launches, 0u) << "a step that launches nothing counted nothing";
}

TEST(StepCounters, AWarmParallelStepRepeatsItsWork) {
  const int ranks = test_world().size();
  if (ranks == 1) {
    expect_steady({1, 1, 1, 0});
    expect_steady({1, 1, 1, 1});
  } else if (ranks == 4) {
    expect_steady({2, 1, 2, 0});
    expect_steady({2, 1, 2, 1});
    expect_steady({1, 1, 2, 0, 2});
    expect_steady({2, 1, 1, 1, 2});
    // ZeRO-1 in bf16: the GEMM weights' buckets gather their bf16 copy, the others fp32 and a cast.
    expect_steady({2, 1, 2, 1, 1, DType::BF16});
  } else {
    GTEST_SKIP() << "runs on 1 and 4 ranks";
  }
}

}  // namespace
}  // namespace mt
