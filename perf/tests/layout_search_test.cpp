// The layout search: only layouts meshtrain would run, none that does not fit, fastest first, and
// a model too large for the cluster rejected with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "perf/layout_search.h"

namespace mt::perf {
namespace {

TEST(LayoutSearch, OnlyValidLayoutsThatFitFastestFirst) {
  const ModelShape m = gpt_preset("gpt2-medium");  // 24 layers, 16 heads
  TrainingShape t;
  t.seq_len = 1024;
  t.global_batch = 32;
  t.precision = Precision::BF16;
  const Cluster c = cluster_preset("dgx-a100");  // one node of 8
  const SearchResult r = search_layouts(m, t, c);
  ASSERT_FALSE(r.plans.empty());
  EXPECT_EQ(r.considered, static_cast<int>(r.plans.size()) + r.rejected_for_memory);
  bool saw_tp = false, saw_pp = false, saw_interleaved = false, saw_zero = false;
  for (std::size_t i = 0; i < r.plans.size(); ++i) {
    const Prediction& p = r.plans[i];
    const Layout& l = p.layout;
    SCOPED_TRACE(describe(l));
    EXPECT_EQ(l.dp * l.tp * l.pp, 8);
    EXPECT_EQ(m.heads % l.tp, 0);
    EXPECT_LE(l.tp, c.devices_per_node);
    EXPECT_LE(l.pp, m.layers);
    EXPECT_EQ(t.global_batch % (l.dp * l.micro_batch), 0);
    EXPECT_EQ(p.micro_batches, t.global_batch / (l.dp * l.micro_batch));
    if (l.schedule == ScheduleKind::Interleaved) {
      EXPECT_GE(l.virtual_stages, 2);
      EXPECT_EQ(m.layers % (l.pp * l.virtual_stages), 0);
      EXPECT_EQ(p.micro_batches % l.pp, 0);
      saw_interleaved = true;
    } else if (l.schedule == ScheduleKind::ZeroBubbleV) {
      EXPECT_EQ(l.virtual_stages, 2);  // resolved by the plan
    } else {
      EXPECT_EQ(l.virtual_stages, 1);
    }
    if (l.schedule == ScheduleKind::OneFOneB) {
      EXPECT_GE(p.micro_batches, l.pp);
    }
    if (l.zero == 1) {
      EXPECT_GT(l.dp, 1);
    }
    EXPECT_TRUE(p.fits);
    EXPECT_LE(p.memory.total(), p.memory_capacity);
    if (i > 0) {
      EXPECT_LE(r.plans[i - 1].step_s, p.step_s);
    }
    saw_tp |= l.tp > 1;
    saw_pp |= l.pp > 1;
    saw_zero |= l.zero == 1;
  }
  EXPECT_TRUE(saw_tp && saw_pp && saw_interleaved && saw_zero);
}

// zb-h1 with pp > 1, zb-v (two chunks per stage in a V) with pp > 1 and the layers divisible by
// 2 pp; where the bubble is a large part of the step, zb-h1 beats 1F1B on the same mesh.
TEST(LayoutSearch, FindsZeroBubbleCandidates) {
  const ModelShape m = gpt_preset("gpt2-medium");  // 24 layers: zb-v with pp 2, 4 (not 8: 16 chunks)
  TrainingShape t;
  t.seq_len = 1024;
  t.global_batch = 32;
  t.precision = Precision::BF16;
  const SearchResult r = search_layouts(m, t, cluster_preset("dgx-a100"));
  std::map<int, int> zb_v_pp;
  double best_1f1b = 1e30, best_zb_h1 = 1e30;  // on the 4 x 1 x 2 mesh
  for (const Prediction& p : r.plans) {
    const Layout& l = p.layout;
    SCOPED_TRACE(describe(l));
    if (l.schedule == ScheduleKind::ZeroBubbleH1 || l.schedule == ScheduleKind::ZeroBubbleV) {
      EXPECT_GT(l.pp, 1);
    }
    if (l.schedule == ScheduleKind::ZeroBubbleV) {
      EXPECT_EQ(m.layers % (2 * l.pp), 0);
      ++zb_v_pp[l.pp];
    }
    if (l.dp == 4 && l.tp == 1 && l.pp == 2) {
      if (l.schedule == ScheduleKind::OneFOneB) best_1f1b = std::min(best_1f1b, p.step_s);
      if (l.schedule == ScheduleKind::ZeroBubbleH1) best_zb_h1 = std::min(best_zb_h1, p.step_s);
    }
  }
  EXPECT_TRUE(zb_v_pp.count(2) && zb_v_pp.count(4));
  EXPECT_FALSE(zb_v_pp.count(8));
  ASSERT_LT(best_zb_h1, 1e30);
  EXPECT_LT(best_zb_h1, 0.97 * best_1f1b);
}

TEST(LayoutSearch, FixedMicroBatchIsKept) {
  const ModelShape m = gpt_preset("gpt2");
  TrainingShape t;
  t.seq_len = 1024;
  t.global_batch = 16;
  t.precision = Precision::BF16;
  SearchOptions o;
  o.micro_batch = 2;
  const SearchResult r = search_layouts(m, t, cluster_preset("dgx-a100"), o);
  ASSERT_FALSE(r.plans.empty());
  for (const Prediction& p : r.plans) EXPECT_EQ(p.layout.micro_batch, 2);
}

TEST(LayoutSearch, TensorParallelStaysInANodeUnlessAllowed) {
  const ModelShape m = gpt_preset("gpt2");  // 12 heads: tp 1, 2, 3, 4, 6, 12
  TrainingShape t;
  t.seq_len = 256;
  t.global_batch = 24;
  t.precision = Precision::BF16;
  Cluster c = cluster_preset("dgx-a100");
  c.nodes = 3;
  c.devices_per_node = 4;
  const SearchResult inside = search_layouts(m, t, c);
  for (const Prediction& p : inside.plans) EXPECT_LE(p.layout.tp, 4);
  SearchOptions o;
  o.allow_cross_node_tp = true;
  const SearchResult any = search_layouts(m, t, c, o);
  bool crossing = false;
  for (const Prediction& p : any.plans) crossing |= p.layout.tp > 4 && p.tp_crosses_nodes;
  EXPECT_TRUE(crossing);
}

TEST(LayoutSearch, RejectsAModelThatFitsNowhere) {
  const ModelShape m = gpt_preset("gpt3-175b");
  TrainingShape t;
  t.seq_len = 2048;
  t.global_batch = 8;
  t.precision = Precision::BF16;
  const SearchResult r = search_layouts(m, t, cluster_preset("dgx-a100"));  // 8 GPUs of 80 GB
  EXPECT_TRUE(r.plans.empty());
  EXPECT_GT(r.rejected_for_memory, 0);
  EXPECT_EQ(r.rejected_for_memory, r.considered);
  ASSERT_TRUE(r.smallest_rejected.has_value());
  // 175B parameters x 16 bytes (fp32 master + gradients + AdamW) over 8 GPUs is 2.8 TB / 8 alone.
  EXPECT_GT(r.smallest_rejected->memory.total(), 4 * r.smallest_rejected->memory_capacity);
}

// GPT-3 175B on 64 A100s fits in no layout without the memory options; with them it does, and the
// list holds no layout that only costs time over a listed one of the same structure.
TEST(LayoutSearch, MemoryOptionsFitWhatNothingElseFits) {
  const ModelShape m = gpt_preset("gpt3-175b");
  TrainingShape t;
  t.seq_len = 2048;
  t.global_batch = 64;
  t.precision = Precision::BF16;
  Cluster c = cluster_preset("dgx-a100");
  c.nodes = 8;
  SearchOptions o;
  o.micro_batch = 1;
  EXPECT_TRUE(search_layouts(m, t, c, o).plans.empty());
  o.memory_options = true;
  const SearchResult r = search_layouts(m, t, c, o);
  ASSERT_FALSE(r.plans.empty());
  bool recompute = false, sp = false;
  for (const Prediction& p : r.plans) {
    const Layout& l = p.layout;
    EXPECT_TRUE(l.recompute != Recompute::None || l.sequence_parallel || l.zero >= 2) << describe(l);
    EXPECT_TRUE(!l.sequence_parallel || l.tp > 1);
    EXPECT_TRUE(l.zero == 0 || l.dp > 1);
    recompute |= l.recompute != Recompute::None;
    sp |= l.sequence_parallel;
    for (const Prediction& q : r.plans) {
      const Layout& k = q.layout;
      const bool same_structure = k.dp == l.dp && k.tp == l.tp && k.pp == l.pp && k.schedule == l.schedule &&
                                  k.virtual_stages == l.virtual_stages && k.micro_batch == l.micro_batch &&
                                  k.sequence_parallel == l.sequence_parallel;
      // q fits with less recomputation at the same ZeRO stage: l costs only time, and is not predicted.
      EXPECT_FALSE(same_structure && k.recompute < l.recompute && k.zero == l.zero)
          << describe(l) << " listed beside " << describe(k);
    }
  }
  EXPECT_TRUE(recompute);
  EXPECT_TRUE(sp);
}

// Fixed options apply to every candidate: recomputation everywhere, sequence parallelism where tp > 1.
TEST(LayoutSearch, FixedRecomputeAndSequenceParallelApplyToEveryLayout) {
  const ModelShape m = gpt_preset("gpt2-medium");
  TrainingShape t;
  t.seq_len = 1024;
  t.global_batch = 32;
  t.precision = Precision::BF16;
  SearchOptions o;
  o.recompute = Recompute::Selective;
  o.sequence_parallel = true;
  const SearchResult r = search_layouts(m, t, cluster_preset("dgx-a100"), o);
  ASSERT_FALSE(r.plans.empty());
  for (const Prediction& p : r.plans) {
    EXPECT_EQ(p.layout.recompute, Recompute::Selective);
    EXPECT_EQ(p.layout.sequence_parallel, p.layout.tp > 1);
    EXPECT_LE(p.layout.zero, 1);
  }
}

// Only combinations meshtrain runs are listed: sequence parallelism is refused with the schedules
// that split the backward (parallel/layout_plan.cpp), whether tried as a memory option or asked for.
TEST(LayoutSearch, ListsSequenceParallelismWithASplitBackward) {
  const ModelShape m = gpt_preset("gpt2-medium");
  TrainingShape t;
  t.seq_len = 1024;
  t.global_batch = 32;
  t.precision = Precision::BF16;
  SearchOptions every;
  every.memory_options = true;
  SearchOptions asked;
  asked.sequence_parallel = true;
  for (const SearchOptions& o : {every, asked}) {
    const SearchResult r = search_layouts(m, t, cluster_preset("dgx-a100"), o);
    bool sp = false, sp_split = false;
    for (const Prediction& p : r.plans) {
      const Layout& l = p.layout;
      sp |= l.sequence_parallel;
      sp_split |= l.sequence_parallel && splits_backward(l.schedule);
    }
    EXPECT_TRUE(sp);
    EXPECT_TRUE(sp_split);  // zb-h1 and zb-v run sequence parallel too
  }
}

}  // namespace
}  // namespace mt::perf

namespace mt::perf {
namespace {

// cp is tried in powers of two that cut the sequence into 2 x cp whole chunks, and only where each
// rank keeps at least kMinContextParallelRows rows: short sequences search what they did before.
TEST(LayoutSearch, ContextParallelSizesOnlyForLongSequences) {
  EXPECT_EQ(context_parallel_sizes(8192, 64), (std::vector<int>{1}));
  EXPECT_EQ(context_parallel_sizes(16384, 64), (std::vector<int>{1, 2}));
  EXPECT_EQ(context_parallel_sizes(131072, 64), (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_EQ(context_parallel_sizes(131072, 4), (std::vector<int>{1, 2, 4}));   // at most the devices
  EXPECT_EQ(context_parallel_sizes(131072, 12), (std::vector<int>{1, 2, 4}));  // dividing them
  EXPECT_EQ(context_parallel_sizes(3 * 8192, 8), (std::vector<int>{1, 2}));    // cp 4 would leave 6144 rows
}

// A 32K context for gpt2 on 8 GPUs: a sequence's [T, T] attention probabilities alone (12 heads x
// 32768^2 fp32 per layer) fill a device, so only layouts that split the sequence fit.
TEST(LayoutSearch, FindsContextParallelismForALongContext) {
  ModelShape m = gpt_preset("gpt2");
  m.max_seq_len = 32768;
  TrainingShape t;
  t.seq_len = 32768;
  t.global_batch = 8;
  t.precision = Precision::BF16;
  SearchOptions o;
  o.micro_batch = 1;
  const SearchResult r = search_layouts(m, t, cluster_preset("dgx-a100"), o);
  ASSERT_FALSE(r.plans.empty());
  for (const Prediction& p : r.plans) EXPECT_GT(p.layout.cp, 1) << describe(p.layout);
  EXPECT_EQ(r.plans.front().layout.world_size(), 8);
  ASSERT_TRUE(r.smallest_rejected_without_cp.has_value());
  EXPECT_EQ(r.smallest_rejected_without_cp->layout.cp, 1);
  EXPECT_FALSE(r.smallest_rejected_without_cp->fits);
}

}  // namespace
}  // namespace mt::perf
