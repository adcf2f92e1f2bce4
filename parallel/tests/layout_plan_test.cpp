// LayoutPlan: what it resolves once (dp, the default micro-batch, micro-batches per step, the stage
// layers, each rank's partition) and that it refuses what cannot run with one UsageError.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/layout_check.h"  // defines: schedule_runs
#include "parallel/layout_plan.h"
#include "runtime/error.h"

namespace mt {
namespace {

// GPT-2 small's widths; a layer costs 10, the embedding 1 and the head 6 (any unit).
ModelDims dims(int layers = 12) {
  return ModelDims{.layers = layers, .heads = 12, .mlp_width = 3072, .vocab_rows = 50304,
                   .costs = StageCosts{10.0, 1.0, 6.0}};
}

LayoutRequest request(int dp, int tp, int pp) {
  LayoutRequest r;
  r.dp = dp;
  r.tp = tp;
  r.pp = pp;
  return r;
}

std::string usage_error(const LayoutRequest& r, int world, int global_batch) {
  try {
    LayoutPlan(r, dims(), world, global_batch);
  } catch (const UsageError& e) {
    return e.message();
  }
  return "";
}

TEST(LayoutPlan, DataParallelTakesTheRanksLeft) {
  const LayoutPlan plan(request(0, 2, 2), dims(), 8, 16);
  EXPECT_EQ(plan.mesh().dp, 2);
  EXPECT_EQ(plan.layout().dp, 2);
  EXPECT_EQ(plan.mesh().world_size(), 8);
}

// Context parallelism is a fourth dimension: dp takes what tp x cp x pp leave, the micro-batches
// count sequences per dp rank (cp ranks share theirs), and a mesh that misses the job names --cp.
TEST(LayoutPlan, ContextParallelIsAMeshDimension) {
  LayoutRequest r = request(0, 2, 2);
  r.cp = 2;
  const LayoutPlan plan(r, dims(), 16, 16);
  EXPECT_EQ(plan.mesh().dp, 2);
  EXPECT_EQ(plan.mesh().cp, 2);
  EXPECT_EQ(plan.mesh().world_size(), 16);
  EXPECT_EQ(plan.micro_batches() * plan.micro_batch() * plan.mesh().dp, 16);
  EXPECT_NE(plan.layout().describe().find("tp=2 cp=2 pp=2"), std::string::npos) << plan.layout().describe();
  EXPECT_EQ(LayoutPlan(request(0, 2, 2), dims(), 16, 16).layout().describe().find("cp="), std::string::npos);

  EXPECT_NE(usage_error(r, 12, 16).find("--tp 2 x --cp 2 x --pp 2 = 8 does not divide the job's 12 ranks"),
            std::string::npos) << usage_error(r, 12, 16);
  r.dp = 1;
  EXPECT_NE(usage_error(r, 16, 16).find("--dp 1 x --tp 2 x --cp 2 x --pp 2 = 8 ranks, but the job has 16"),
            std::string::npos) << usage_error(r, 16, 16);
}

TEST(LayoutPlan, ChoosesTheMicroBatchOnceWhenAskedTo) {
  for (const auto& [ranks, micro] : std::vector<std::pair<int, int>>{{1, 4}, {2, 4}, {4, 2}, {8, 1}}) {
    LayoutRequest r = request(0, 1, 1);
    r.micro_batch = 0;
    const LayoutPlan plan(r, dims(), ranks, 8);
    EXPECT_EQ(plan.micro_batch(), micro) << ranks << " ranks";
    EXPECT_EQ(plan.micro_batches(), 8 / (ranks * micro)) << ranks << " ranks";
  }
  LayoutRequest given = request(1, 1, 1);
  given.micro_batch = 2;
  EXPECT_EQ(LayoutPlan(given, dims(), 1, 8).micro_batch(), 2);
}

// Chosen, the micro-batch leaves the schedule micro-batches enough: 1F1B and zb-h1 one per stage,
// interleaved a multiple of the stages, GPipe any number; the largest of 4, 2, 1 that does.
TEST(LayoutPlan, ChoosesAMicroBatchTheScheduleRuns) {
  const auto chosen = [](int dp, int pp, ScheduleKind schedule, int global_batch, int virtual_stages = 1) {
    LayoutRequest r = request(dp, 1, pp);
    r.schedule = schedule;
    r.virtual_stages = virtual_stages;
    r.micro_batch = 0;
    return LayoutPlan(r, dims(), dp * pp, global_batch).micro_batch();
  };
  EXPECT_EQ(chosen(1, 4, ScheduleKind::OneFOneB, 8), 2);  // 4 left 2 micro-batches for 4 stages
  EXPECT_EQ(chosen(2, 2, ScheduleKind::OneFOneB, 8), 2);
  EXPECT_EQ(chosen(1, 2, ScheduleKind::OneFOneB, 8), 4);
  EXPECT_EQ(chosen(1, 4, ScheduleKind::ZeroBubbleH1, 8), 2);
  EXPECT_EQ(chosen(1, 4, ScheduleKind::GPipe, 8), 4);
  EXPECT_EQ(chosen(1, 2, ScheduleKind::Interleaved, 12, 2), 2);  // 4 gives 3, no multiple of 2
  EXPECT_EQ(chosen(1, 4, ScheduleKind::OneFOneB, 4), 1);
  EXPECT_TRUE(schedule_runs(ScheduleKind::GPipe, 4, 1));
  EXPECT_FALSE(schedule_runs(ScheduleKind::OneFOneB, 4, 3));
  EXPECT_FALSE(schedule_runs(ScheduleKind::Interleaved, 2, 3));
}

TEST(LayoutPlan, StageLayersBalancedGivenOrUniform) {
  LayoutRequest r = request(1, 1, 4);
  r.micro_batch = 1;
  // The first stage carries the embedding, the last the head: a head as heavy as 2.5 layers leaves
  // the last stage one layer.
  const LayoutPlan balanced(r, dims(), 4, 8);
  EXPECT_EQ(balanced.chunk_layers(), plan_chunk_layers(balanced.layout(), dims()));
  EXPECT_EQ(balanced.chunk_layers(), (std::vector<int>{3, 3, 3, 3}));
  const LayoutPlan heavy_head(r, ModelDims{.layers = 12, .heads = 12, .mlp_width = 3072, .vocab_rows = 50304,
                                           .costs = StageCosts{10.0, 1.0, 25.0}}, 4, 8);
  EXPECT_EQ(heavy_head.chunk_layers(), (std::vector<int>{3, 4, 4, 1}));  // stage costs 31, 40, 40, 35
  r.pp_layers = {5, 3, 2, 2};
  EXPECT_EQ(LayoutPlan(r, dims(), 4, 8).chunk_layers(), (std::vector<int>{5, 3, 2, 2}));
  LayoutRequest interleaved = request(1, 1, 2);
  interleaved.schedule = ScheduleKind::Interleaved;
  interleaved.virtual_stages = 3;
  interleaved.micro_batch = 1;
  EXPECT_EQ(LayoutPlan(interleaved, dims(), 2, 8).chunk_layers(), (std::vector<int>(6, 2)));
}

TEST(LayoutPlan, PartitionOfEachCoordinate) {
  LayoutRequest r = request(1, 2, 2);
  r.schedule = ScheduleKind::Interleaved;
  r.virtual_stages = 2;
  r.micro_batch = 1;
  const LayoutPlan plan(r, dims(), 4, 8);  // chunks of 3 layers: stage 0 holds 0-2 and 6-8
  const ModelPartition first = plan.partition(MeshCoord{.dp = 0, .tp = 1, .pp = 0});
  EXPECT_EQ(first.tp_size, 2);
  EXPECT_EQ(first.tp_rank, 1);
  ASSERT_EQ(first.chunks.size(), 2u);
  EXPECT_EQ(first.chunks[0].begin, 0);
  EXPECT_EQ(first.chunks[0].end, 3);
  EXPECT_EQ(first.chunks[1].begin, 6);
  EXPECT_EQ(first.chunks[1].end, 9);
  EXPECT_TRUE(first.embedding);
  EXPECT_FALSE(first.head);
  const ModelPartition last = plan.partition(MeshCoord{.dp = 0, .tp = 0, .pp = 1});
  EXPECT_EQ(last.chunks[1].end, 12);
  EXPECT_FALSE(last.embedding);
  EXPECT_TRUE(last.head);
}

TEST(LayoutPlan, SchedulesFollowTheResolvedLayout) {
  LayoutRequest r = request(2, 1, 2);
  r.micro_batch = 1;
  const LayoutPlan plan(r, dims(), 4, 8);
  EXPECT_EQ(plan.micro_batches(), 4);
  EXPECT_EQ(plan.train_schedule().micro_batches, 4);
  EXPECT_EQ(plan.eval_schedule().micro_batches, 4);
}

// Recomputation fits every layout, zero-bubble schedules included (B recomputes what W reads).
TEST(LayoutPlan, RecomputeIsAcceptedOnEveryScheduleAndDescribed) {
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1}) {
    for (Recompute recompute : {Recompute::Selective, Recompute::Full}) {
      LayoutRequest r = request(1, 2, 2);
      r.schedule = kind;
      r.micro_batch = 1;
      r.recompute = recompute;
      EXPECT_EQ(usage_error(r, 4, 8), "");
      const LayoutPlan plan(r, dims(), 4, 8);
      EXPECT_EQ(plan.layout().recompute, recompute);
      EXPECT_NE(plan.layout().describe().find(std::string(" recompute=") + recompute_name(recompute)),
                std::string::npos);
    }
  }
}

TEST(LayoutPlan, EveryCheckIsAUsageErrorNamingTheOption) {
  EXPECT_EQ(usage_error(request(3, 1, 1), 4, 12).rfind("--dp 3 x --tp 1 x --pp 1 = 3 ranks", 0), 0u);
  EXPECT_EQ(usage_error(request(0, 3, 1), 4, 12).rfind("--tp 3 x --pp 1 = 3 does not divide", 0), 0u);
  EXPECT_EQ(usage_error(request(1, 5, 1), 5, 10).rfind("--tp 5 does not divide the model's 12", 0), 0u);
  LayoutRequest zero = request(1, 1, 1);
  zero.zero = 4;
  EXPECT_EQ(usage_error(zero, 1, 8), "--zero must be 0, 1, 2 or 3, got 4");
  LayoutRequest sp = request(1, 1, 1);
  sp.sequence_parallel = true;
  EXPECT_EQ(usage_error(sp, 1, 8).rfind("--sequence-parallel splits the sequence over the tensor-parallel ranks: "
                                        "it needs --tp of at least 2, got 1", 0), 0u);
  LayoutRequest bucket = request(1, 1, 1);
  bucket.bucket_mb = 0;
  EXPECT_EQ(usage_error(bucket, 1, 8), "--bucket-mb must be positive, got 0");
  EXPECT_EQ(usage_error(request(1, 1, 1), 1, 8), "");
}

// Varying the memory options of a built plan keeps its structure and checks the options as the
// constructor does: the same plan as one built with them, or the same UsageError.
TEST(LayoutPlan, WithMemoryOptionsIsThePlanBuiltWithThem) {
  LayoutRequest r = request(2, 2, 2);
  r.micro_batch = 1;
  const LayoutPlan plain(r, dims(), 8, 16);
  const LayoutPlan varied = plain.with_memory_options(3, Recompute::Full, true);
  r.zero = 3;
  r.recompute = Recompute::Full;
  r.sequence_parallel = true;
  const LayoutPlan built(r, dims(), 8, 16);
  EXPECT_EQ(varied.layout().describe(), built.layout().describe());
  EXPECT_EQ(varied.chunk_layers(), built.chunk_layers());
  EXPECT_EQ(varied.micro_batches(), built.micro_batches());
  EXPECT_EQ(plain.layout().zero, 0);  // the plan it came from is unchanged
  const auto refused = [](const LayoutPlan& plan, int zero, bool sp) {
    try {
      (void)plan.with_memory_options(zero, Recompute::None, sp);
    } catch (const UsageError& e) {
      return e.message();
    }
    return std::string();
  };
  EXPECT_EQ(refused(plain, 4, false), "--zero must be 0, 1, 2 or 3, got 4");
  EXPECT_EQ(refused(LayoutPlan(request(4, 1, 2), dims(), 8, 16), 0, true)
                .rfind("--sequence-parallel splits the sequence over the tensor-parallel ranks", 0), 0u);
  LayoutRequest zb = request(2, 2, 2);
  zb.schedule = ScheduleKind::ZeroBubbleH1;
  const LayoutPlan zb_plan(zb, dims(), 8, 16);
  EXPECT_EQ(refused(zb_plan, 1, true), "");  // the split backward runs sequence parallel too
  EXPECT_EQ(refused(zb_plan, 1, false), "");
}

}  // namespace
}  // namespace mt
