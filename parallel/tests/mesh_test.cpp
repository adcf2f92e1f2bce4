// The mesh arithmetic against hand-derived group lists, then properties over every shape with up to
// 16 ranks in all six orders; the layout checks, one test per message.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "parallel/layout_check.h"
#include "parallel/mesh.h"
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::error_of;
using Groups = std::vector<std::vector<int>>;

const std::vector<std::string> kOrders = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"};

Mesh make_mesh(int dp, int tp, int pp, std::string order = "tp-dp-pp") {
  return Mesh(MeshShape{.dp = dp, .tp = tp, .pp = pp, .order = std::move(order)});
}

// ---- hand-derived cases ----

TEST(Mesh, Dp2Tp2Pp2DefaultOrder) {
  // rank = tp + 2 * (dp + 2 * pp)
  const Mesh m = make_mesh(2, 2, 2);
  EXPECT_EQ(m.world_size(), 8);
  EXPECT_EQ(m.all_tp_groups(), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.all_dp_groups(), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.all_pp_groups(), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.all_embedding_groups(), m.all_pp_groups());
  EXPECT_EQ(m.coord_of(5), (MeshCoord{.dp = 0, .tp = 1, .pp = 1}));
  EXPECT_EQ(m.coord_of(6), (MeshCoord{.dp = 1, .tp = 0, .pp = 1}));
  EXPECT_EQ(m.tp_group(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(m.dp_group(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(m.pp_group(5), (std::vector<int>{1, 5}));
  EXPECT_EQ(m.embedding_group(5), (std::vector<int>{1, 5}));
}

TEST(Mesh, Dp1Tp2Pp3MiddleStageHasNoEmbedding) {
  // rank = tp + 2 * pp: stages {0,1}, {2,3}, {4,5}
  const Mesh m = make_mesh(1, 2, 3);
  EXPECT_EQ(m.all_tp_groups(), (Groups{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(m.all_dp_groups(), (Groups{{0}, {1}, {2}, {3}, {4}, {5}}));
  EXPECT_EQ(m.all_pp_groups(), (Groups{{0, 2, 4}, {1, 3, 5}}));
  EXPECT_EQ(m.all_embedding_groups(), (Groups{{0, 4}, {1, 5}}));
  EXPECT_EQ(m.embedding_group(0), (std::vector<int>{0, 4}));
  EXPECT_EQ(m.embedding_group(5), (std::vector<int>{1, 5}));
  EXPECT_TRUE(m.embedding_group(2).empty());
  EXPECT_TRUE(m.embedding_group(3).empty());
}

TEST(Mesh, Dp2Tp1Pp4DefaultOrder) {
  // rank = dp + 2 * pp
  const Mesh m = make_mesh(2, 1, 4);
  EXPECT_EQ(m.all_tp_groups(), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(m.all_dp_groups(), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.all_pp_groups(), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(m.all_embedding_groups(), (Groups{{0, 6}, {1, 7}}));
  EXPECT_TRUE(m.embedding_group(4).empty());
}

TEST(Mesh, PipelineOfOneHoldsItsOwnEmbedding) {
  const Mesh m = make_mesh(2, 2, 1);
  EXPECT_EQ(m.all_tp_groups(), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(m.all_dp_groups(), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(m.all_pp_groups(), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(m.all_embedding_groups(), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(m.embedding_group(3), (std::vector<int>{3}));
}

TEST(Mesh, DpTpPpOrder) {
  // rank = dp + 2 * (tp + 2 * pp)
  const Mesh m = make_mesh(2, 2, 2, "dp-tp-pp");
  EXPECT_EQ(m.all_dp_groups(), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.all_tp_groups(), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.all_pp_groups(), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.coord_of(2), (MeshCoord{.dp = 0, .tp = 1, .pp = 0}));
  EXPECT_EQ(m.rank_of({.dp = 1, .tp = 1, .pp = 1}), 7);
}

TEST(Mesh, PpTpDpOrderWithUnequalSizes) {
  // dp=2 tp=3 pp=2, rank = pp + 2 * (tp + 3 * dp)
  const Mesh m = make_mesh(2, 3, 2, "pp-tp-dp");
  EXPECT_EQ(m.world_size(), 12);
  EXPECT_EQ(m.all_pp_groups(), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}}));
  EXPECT_EQ(m.all_tp_groups(), (Groups{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}));
  EXPECT_EQ(m.all_dp_groups(), (Groups{{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}}));
  EXPECT_EQ(m.coord_of(9), (MeshCoord{.dp = 1, .tp = 1, .pp = 1}));
  EXPECT_EQ(m.embedding_group(9), (std::vector<int>{8, 9}));
}

TEST(Mesh, DpPpTpOrderWithThreeStages) {
  // dp=2 tp=2 pp=3, rank = dp + 2 * (pp + 3 * tp)
  const Mesh m = make_mesh(2, 2, 3, "dp-pp-tp");
  EXPECT_EQ(m.all_dp_groups(), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}}));
  EXPECT_EQ(m.all_pp_groups(), (Groups{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}));
  EXPECT_EQ(m.all_tp_groups(), (Groups{{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}}));
  EXPECT_EQ(m.all_embedding_groups(), (Groups{{0, 4}, {1, 5}, {6, 10}, {7, 11}}));
  EXPECT_TRUE(m.embedding_group(8).empty());
}

TEST(Mesh, Describe) {
  EXPECT_EQ(make_mesh(2, 2, 2).shape().describe(), "dp=2 tp=2 pp=2 (order tp-dp-pp)");
  EXPECT_EQ(make_mesh(4, 1, 2, "pp-dp-tp").shape().describe(), "dp=4 tp=1 pp=2 (order pp-dp-tp)");
}

TEST(Mesh, RejectsBadSizesAndOrders) {
  EXPECT_TRUE(contains(error_of([] { make_mesh(0, 1, 1); }), "--dp must be at least 1, got 0"));
  EXPECT_TRUE(contains(error_of([] { make_mesh(1, -2, 1); }), "--tp must be at least 1, got -2"));
  EXPECT_TRUE(contains(error_of([] { make_mesh(1, 1, 0); }), "--pp must be at least 1, got 0"));
  EXPECT_TRUE(contains(error_of([] { Mesh(MeshShape{.cp = 0}); }), "--cp must be at least 1, got 0"));
  for (const char* bad : {"tp-dp", "tp-dp-dp", "tp-dp-pp-cp-cp", "tp-cp-dp-cp", "tp-dp-xx", "tpdppp", "", "tp-dp-pp-",
                          "TP-DP-PP"}) {
    const std::string msg = error_of([&] { make_mesh(1, 1, 1, bad); });
    EXPECT_TRUE(contains(msg, "--mesh-order '" + std::string(bad) + "'")) << msg;
    EXPECT_TRUE(contains(msg, "tp-dp-pp")) << msg;
  }
}

// ---- context parallelism: a fourth dimension ----

TEST(Mesh, ContextParallelFollowsTpByDefault) {
  // dp=2 tp=2 cp=2 pp=1, order tp-cp-dp-pp: rank = tp + 2 * (cp + 2 * dp)
  const Mesh m(MeshShape{.dp = 2, .tp = 2, .pp = 1, .cp = 2});
  EXPECT_EQ(m.world_size(), 8);
  EXPECT_EQ(m.shape().describe(), "dp=2 tp=2 cp=2 pp=1 (order tp-cp-dp-pp)");
  EXPECT_EQ(m.all_tp_groups(), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.all_cp_groups(), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.all_dp_groups(), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // The same weights: every rank of one tp position and stage.
  EXPECT_EQ(m.all_dp_cp_groups(), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(m.coord_of(6), (MeshCoord{.dp = 1, .tp = 0, .pp = 0, .cp = 1}));
  EXPECT_EQ(m.rank_of({.dp = 1, .tp = 1, .pp = 0, .cp = 1}), 7);
  EXPECT_EQ(m.embedding_group(6), (std::vector<int>{6}));
}

TEST(Mesh, ContextParallelInAnExplicitOrderAndAcrossStages) {
  // dp=1 tp=1 cp=2 pp=2, order cp-pp-dp-tp: rank = cp + 2 * pp
  const Mesh m(MeshShape{.dp = 1, .tp = 1, .pp = 2, .cp = 2, .order = "cp-pp-dp-tp"});
  EXPECT_EQ(m.all_cp_groups(), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(m.all_pp_groups(), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(m.all_dp_cp_groups(), (Groups{{0, 1}, {2, 3}}));
  // The tied embedding's two copies hold the same sequence piece: the same cp coordinate.
  EXPECT_EQ(m.all_embedding_groups(), (Groups{{0, 2}, {1, 3}}));
  // Without context parallelism the order needs no cp, and describe() does not show it.
  EXPECT_EQ(Mesh(MeshShape{.dp = 2, .order = "dp-tp-cp-pp"}).shape().describe(), "dp=2 tp=1 pp=1 (order dp-tp-cp-pp)");
}

TEST(Mesh, ContextParallelPropertiesUpTo16Ranks) {
  int shapes = 0;
  for (int cp = 2; cp <= 16; cp *= 2)
    for (int dp = 1; dp * cp <= 16; ++dp)
      for (int tp = 1; dp * tp * cp <= 16; ++tp)
        for (int pp = 1; dp * tp * pp * cp <= 16; ++pp)
          for (const std::string& order : {std::string("tp-dp-pp"), std::string("pp-dp-cp-tp")}) {
            ++shapes;
            const Mesh m(MeshShape{.dp = dp, .tp = tp, .pp = pp, .cp = cp, .order = order});
            const std::string what = m.shape().describe();
            ASSERT_EQ(m.world_size(), dp * tp * pp * cp) << what;
            for (int r = 0; r < m.world_size(); ++r) ASSERT_EQ(m.rank_of(m.coord_of(r)), r) << what;
            for (const std::vector<int>& g : m.all_cp_groups()) {
              ASSERT_EQ(g.size(), static_cast<std::size_t>(cp)) << what;
              for (std::size_t i = 0; i < g.size(); ++i) {
                MeshCoord c = m.coord_of(g[i]), first = m.coord_of(g.front());
                EXPECT_EQ(c.cp, static_cast<int>(i)) << what;
                c.cp = first.cp;
                EXPECT_EQ(c, first) << what << ": cp members differ in another dimension";
              }
            }
            std::size_t covered = 0;
            for (const std::vector<int>& g : m.all_dp_cp_groups()) {
              ASSERT_EQ(g.size(), static_cast<std::size_t>(dp * cp)) << what;
              covered += g.size();
              for (const int r : g) {
                EXPECT_EQ(m.coord_of(r).tp, m.coord_of(g.front()).tp) << what;
                EXPECT_EQ(m.coord_of(r).pp, m.coord_of(g.front()).pp) << what;
              }
            }
            EXPECT_EQ(covered, static_cast<std::size_t>(m.world_size())) << what;
          }
  EXPECT_GT(shapes, 40);
}

// ---- properties over every shape with up to 16 ranks, in all six orders ----

// Each kind of group covers every rank exactly once, every member lists the same group, the size is
// the dimension's, and members differ only in that dimension, ordered by it.
void expect_partition(const Mesh& m, const Groups& groups, std::vector<int> (Mesh::*group_of)(int) const,
                      std::size_t size, int MeshCoord::*dim, const std::string& what) {
  std::vector<int> seen(static_cast<std::size_t>(m.world_size()), 0);
  for (const std::vector<int>& g : groups) {
    ASSERT_EQ(g.size(), size) << what;
    const MeshCoord first = m.coord_of(g.front());
    for (std::size_t i = 0; i < g.size(); ++i) {
      ++seen[static_cast<std::size_t>(g[i])];
      EXPECT_EQ((m.*group_of)(g[i]), g) << what << " member " << g[i];
      MeshCoord c = m.coord_of(g[i]);
      EXPECT_EQ(c.*dim, static_cast<int>(i)) << what;
      c.*dim = first.*dim;
      EXPECT_EQ(c, first) << what << ": members differ in another dimension";
    }
  }
  for (int r = 0; r < m.world_size(); ++r) EXPECT_EQ(seen[static_cast<std::size_t>(r)], 1) << what << " rank " << r;
}

TEST(Mesh, PropertiesOfEveryShapeUpTo16Ranks) {
  int shapes = 0;
  for (int dp = 1; dp <= 16; ++dp) {
    for (int tp = 1; dp * tp <= 16; ++tp) {
      for (int pp = 1; dp * tp * pp <= 16; ++pp) {
        for (const std::string& order : kOrders) {
          ++shapes;
          const Mesh m = make_mesh(dp, tp, pp, order);
          const std::string what = m.shape().describe();
          ASSERT_EQ(m.world_size(), dp * tp * pp);
          std::set<int> ranks;
          for (int r = 0; r < m.world_size(); ++r) {
            const MeshCoord c = m.coord_of(r);
            ASSERT_TRUE(c.dp >= 0 && c.dp < dp && c.tp >= 0 && c.tp < tp && c.pp >= 0 && c.pp < pp) << what;
            ASSERT_EQ(m.rank_of(c), r) << what;
          }
          for (int d = 0; d < dp; ++d)
            for (int t = 0; t < tp; ++t)
              for (int p = 0; p < pp; ++p) ranks.insert(m.rank_of({.dp = d, .tp = t, .pp = p}));
          EXPECT_EQ(static_cast<int>(ranks.size()), m.world_size()) << what;

          expect_partition(m, m.all_tp_groups(), &Mesh::tp_group, static_cast<std::size_t>(tp), &MeshCoord::tp,
                           what + " tp");
          expect_partition(m, m.all_dp_groups(), &Mesh::dp_group, static_cast<std::size_t>(dp), &MeshCoord::dp,
                           what + " dp");
          expect_partition(m, m.all_pp_groups(), &Mesh::pp_group, static_cast<std::size_t>(pp), &MeshCoord::pp,
                           what + " pp");

          // The fastest dimension's groups are consecutive ranks.
          const std::string fastest = order.substr(0, 2);
          const Groups fast = fastest == "tp" ? m.all_tp_groups() : fastest == "dp" ? m.all_dp_groups()
                                                                                    : m.all_pp_groups();
          for (const std::vector<int>& g : fast)
            for (std::size_t i = 1; i < g.size(); ++i) EXPECT_EQ(g[i], g[i - 1] + 1) << what;

          // Embedding: the ends of each pipeline, or each rank alone when pp == 1; middle stages none.
          for (int r = 0; r < m.world_size(); ++r) {
            const std::vector<int> e = m.embedding_group(r);
            const std::vector<int> line = m.pp_group(r);
            const int stage = m.coord_of(r).pp;
            if (pp == 1) EXPECT_EQ(e, std::vector<int>{r}) << what;
            else if (stage == 0 || stage == pp - 1) EXPECT_EQ(e, (std::vector<int>{line.front(), line.back()})) << what;
            else EXPECT_TRUE(e.empty()) << what << " rank " << r;
          }
          EXPECT_EQ(m.all_embedding_groups().size(), static_cast<std::size_t>(pp == 1 ? dp * tp * 1 : dp * tp))
              << what;
        }
      }
    }
  }
  EXPECT_GT(shapes, 6 * 40);
}

// ---- layout checks ----

// 12 layers, 16 heads, C = 1024 (MLP 4096), vocabulary padded to 50304, 8 ranks, batch 32 x 2.
LayoutLimits limits8() {
  return LayoutLimits{.world_size = 8, .layers = 12, .heads = 16, .mlp_width = 4096, .vocab_rows = 50304,
                      .global_batch = 32, .micro_batch = 2};
}

LayoutRequest request(int dp, int tp, int pp, ScheduleKind schedule = ScheduleKind::OneFOneB, int v = 1) {
  LayoutRequest r;
  r.dp = dp;
  r.tp = tp;
  r.pp = pp;
  r.schedule = schedule;
  r.virtual_stages = v;
  return r;
}

std::string layout_error(const LayoutRequest& r, const LayoutLimits& l) {
  return error_of([&] { check_layout(r, l); });
}

TEST(LayoutCheck, ValidLayoutsPass) {
  const LayoutLimits l = limits8();
  for (int dp : {1, 2, 4, 8})
    for (int tp : {1, 2, 4, 8})
      for (int pp : {1, 2, 4, 8}) {
        if (dp * tp * pp != 8) continue;
        for (ScheduleKind s : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
          EXPECT_NO_THROW(check_layout(request(dp, tp, pp, s), l)) << dp << " " << tp << " " << pp;
        }
      }
  EXPECT_NO_THROW(check_layout(request(1, 4, 2, ScheduleKind::Interleaved, 2), l));  // 16 micro-batches, 4 chunks
  EXPECT_NO_THROW(check_layout(request(1, 2, 4, ScheduleKind::Interleaved, 3), l));  // 12 chunks of 1 layer
  LayoutRequest split = request(2, 2, 2);
  split.pp_layers = {5, 7};
  EXPECT_NO_THROW(check_layout(split, l));
  EXPECT_NO_THROW(check_layout(request(1, 1, 1), LayoutLimits{}));
}

// The answers MpiCommunicator and NcclCommunicator give (comm/tests checks them), and a backend
// that could only send single messages in order.
constexpr CommCapabilities kMpi{.early_receives = true, .unordered_point_to_point = true, .grouped_point_to_point = true};
constexpr CommCapabilities kNccl{.unordered_point_to_point = false, .grouped_point_to_point = true};
constexpr CommCapabilities kSingleMessagesOnly{};

// Every schedule runs on NCCL since the executor sends each run of messages as one batch.
TEST(LayoutCheck, PipelinesRunOnEveryBackendWithBatches) {
  EXPECT_NO_THROW(check_pipeline_backend(4, kMpi, "mpi"));
  EXPECT_NO_THROW(check_pipeline_backend(4, kNccl, "nccl"));
  EXPECT_NO_THROW(check_pipeline_backend(1, kSingleMessagesOnly, "nccl"));
}

// The check asks what the backend can do, not what it is called: the name only labels the message.
TEST(LayoutCheck, PipelineBackendIsJudgedByCapabilityNotName) {
  const std::string message = error_of([] { check_pipeline_backend(2, kSingleMessagesOnly, "nccl"); });
  EXPECT_EQ(message, "--pp 2 needs batches of sends and receives that the NCCL backend does not offer: use "
                     "--comm-backend mpi");
  EXPECT_TRUE(contains(error_of([] { check_pipeline_backend(2, kSingleMessagesOnly, "mpi"); }), "the MPI backend"));
}

TEST(LayoutCheck, MicroBatchesPerStep) {
  EXPECT_EQ(micro_batches_per_step(request(2, 2, 2), limits8()), 8);  // 32 / (2 x 2)
  EXPECT_EQ(micro_batches_per_step(request(8, 1, 1), limits8()), 2);
}

TEST(LayoutCheck, WorldSizeMismatch) {
  const std::string msg = layout_error(request(2, 2, 3), limits8());
  EXPECT_EQ(msg, "--dp 2 x --tp 2 x --pp 3 = 12 ranks, but the job has 8 (launch with -np 12 or change the layout)");
}

TEST(LayoutCheck, BadMeshComesFirst) {
  LayoutRequest r = request(8, 1, 1);
  r.order = "tp-tp-pp";
  EXPECT_TRUE(contains(layout_error(r, limits8()), "--mesh-order 'tp-tp-pp'"));
  EXPECT_TRUE(contains(layout_error(request(0, 8, 1), limits8()), "--dp must be at least 1"));
}

TEST(LayoutCheck, TensorParallelMustDivideHeads) {
  LayoutLimits l = limits8();
  l.heads = 6;
  const std::string msg = layout_error(request(2, 4, 1), l);
  EXPECT_TRUE(contains(msg, "--tp 4 does not divide the model's 6 attention heads")) << msg;
}

TEST(LayoutCheck, TensorParallelMustDivideMlpWidth) {
  LayoutLimits l = limits8();
  l.mlp_width = 36;
  l.heads = 8;
  const std::string msg = layout_error(request(1, 8, 1), l);
  EXPECT_TRUE(contains(msg, "--tp 8 does not divide the MLP width 36")) << msg;
}

TEST(LayoutCheck, TensorParallelMustDividePaddedVocabulary) {
  LayoutLimits l = limits8();
  l.vocab_rows = 50257;
  const std::string msg = layout_error(request(4, 2, 1), l);
  EXPECT_TRUE(contains(msg, "--tp 2 does not divide the padded vocabulary of 50257 rows")) << msg;
}

TEST(LayoutCheck, MoreStagesThanLayers) {
  LayoutLimits l = limits8();
  l.layers = 4;
  const std::string msg = layout_error(request(1, 1, 8), l);
  EXPECT_TRUE(contains(msg, "--pp 8 is more than the model's 4 layers")) << msg;
}

TEST(LayoutCheck, GlobalBatchMustSplitOverDataParallelMicroBatches) {
  LayoutLimits l = limits8();
  l.global_batch = 20;
  l.micro_batch = 4;
  std::string msg = layout_error(request(2, 4, 1), l);
  EXPECT_TRUE(contains(msg, "--global-batch 20 must be a positive multiple of --dp 2 x --micro-batch 4 = 8")) << msg;
  EXPECT_TRUE(contains(msg, "global-batch/dp sequences in micro-batches of --micro-batch")) << msg;
  l.global_batch = 4;  // divisible by nothing larger: fewer sequences than one micro-batch per rank
  msg = layout_error(request(2, 4, 1), l);
  EXPECT_TRUE(contains(msg, "--global-batch 4 must be a positive multiple of --dp 2 x --micro-batch 4 = 8")) << msg;
  l.micro_batch = 0;
  EXPECT_TRUE(contains(layout_error(request(2, 4, 1), l), "--micro-batch must be at least 1, got 0"));
}

TEST(LayoutCheck, OneFOneBNeedsAMicroBatchPerStage) {
  LayoutLimits l = limits8();
  l.global_batch = 6;  // 6 / (1 x 2) = 3 micro-batches for 4 stages
  const std::string msg = layout_error(request(1, 2, 4), l);
  EXPECT_TRUE(contains(msg, "--schedule 1f1b needs at least --pp 4 micro-batches per step")) << msg;
  EXPECT_TRUE(contains(msg, "--global-batch 6 / (--dp 1 x --micro-batch 2) = 3")) << msg;
  EXPECT_TRUE(contains(msg, "--schedule gpipe")) << msg;
  EXPECT_NO_THROW(check_layout(request(1, 2, 4, ScheduleKind::GPipe), l));
  l.global_batch = 2;  // GPipe runs a single micro-batch
  EXPECT_NO_THROW(check_layout(request(1, 2, 4, ScheduleKind::GPipe), l));
}

TEST(LayoutCheck, VirtualStagesAtLeastOne) {
  const std::string msg = layout_error(request(1, 4, 2, ScheduleKind::OneFOneB, 0), limits8());
  EXPECT_TRUE(contains(msg, "--virtual-stages must be at least 1, got 0")) << msg;
}

TEST(LayoutCheck, VirtualStagesNeedInterleaved) {
  const std::string msg = layout_error(request(1, 4, 2, ScheduleKind::GPipe, 2), limits8());
  EXPECT_TRUE(contains(msg, "--virtual-stages 2 needs --schedule interleaved, not --schedule gpipe")) << msg;
}

TEST(LayoutCheck, InterleavedNeedsTwoVirtualStages) {
  const std::string msg = layout_error(request(1, 4, 2, ScheduleKind::Interleaved, 1), limits8());
  EXPECT_TRUE(contains(msg, "--schedule interleaved needs --virtual-stages 2 or more")) << msg;
  EXPECT_TRUE(contains(msg, "got 1")) << msg;
}

TEST(LayoutCheck, InterleavedLayersDivideIntoChunks) {
  const std::string msg = layout_error(request(2, 1, 4, ScheduleKind::Interleaved, 2), limits8());  // 12 % 8
  EXPECT_TRUE(contains(msg, "--pp 4 x --virtual-stages 2 = 8 model chunks")) << msg;
  EXPECT_TRUE(contains(msg, "12 layers divisible by 8")) << msg;
}

TEST(LayoutCheck, InterleavedMicroBatchesMultipleOfStages) {
  LayoutLimits l = limits8();
  l.global_batch = 10;  // 5 micro-batches, 4 stages
  const std::string msg = layout_error(request(1, 2, 4, ScheduleKind::Interleaved, 3), l);
  EXPECT_TRUE(contains(msg, "--schedule interleaved needs the micro-batches per step")) << msg;
  EXPECT_TRUE(contains(msg, "= 5, to be a multiple of --pp 4")) << msg;
  l.global_batch = 6;  // 3 micro-batches: fewer than the stages comes first
  EXPECT_TRUE(contains(layout_error(request(1, 2, 4, ScheduleKind::Interleaved, 3), l),
                       "--schedule interleaved needs at least --pp 4 micro-batches"));
}

TEST(LayoutCheck, PpLayersLengthMatchesStages) {
  LayoutRequest r = request(2, 2, 2);
  r.pp_layers = {4, 4, 4};
  const std::string msg = layout_error(r, limits8());
  EXPECT_TRUE(contains(msg, "--pp-layers 4,4,4 lists 3 stages but --pp is 2")) << msg;
}

TEST(LayoutCheck, PpLayersEveryStageHasALayer) {
  LayoutRequest r = request(2, 1, 4);
  r.pp_layers = {6, 0, 3, 3};
  const std::string msg = layout_error(r, limits8());
  EXPECT_TRUE(contains(msg, "--pp-layers 6,0,3,3 gives stage 1 0 layers")) << msg;
}

TEST(LayoutCheck, PpLayersSumToTheModel) {
  LayoutRequest r = request(2, 2, 2);
  r.pp_layers = {5, 6};
  const std::string msg = layout_error(r, limits8());
  EXPECT_TRUE(contains(msg, "--pp-layers 5,6 sums to 11 layers but the model has 12")) << msg;
}

TEST(LayoutCheck, PpLayersNotWithInterleaving) {
  LayoutRequest r = request(1, 4, 2, ScheduleKind::Interleaved, 2);
  r.pp_layers = {6, 6};
  const std::string msg = layout_error(r, limits8());
  EXPECT_TRUE(contains(msg, "--pp-layers 6,6 cannot be combined with --schedule interleaved")) << msg;
}

}  // namespace
}  // namespace mt
