// The mesh's communicators at 1, 2, 4 and 8 ranks: every factorization of the world in two orders,
// each group checked against the mesh's lists and by an exact allreduce of world ranks over it.
#include <gtest/gtest.h>

#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "parallel/groups.h"
#include "tests/test_env.h"
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::error_of;
using testing::test_context;
using testing::test_world;

// Every (dp, tp, pp) with dp x tp x pp == n.
std::vector<MeshShape> factorizations(int n, const std::string& order) {
  std::vector<MeshShape> shapes;
  for (int dp = 1; dp <= n; ++dp)
    for (int tp = 1; dp * tp <= n; ++tp)
      if (n % (dp * tp) == 0) shapes.push_back(MeshShape{.dp = dp, .tp = tp, .pp = n / (dp * tp), .order = order});
  return shapes;
}

// The sum of the members' world ranks, computed through the group: exact in int32.
int allreduced_world_rank(Communicator& group) {
  Tensor t = Tensor::from_host(std::vector<std::int32_t>{test_world().rank()}, {1}, test_context());
  group.allreduce(t);
  return t.to_host<std::int32_t>()[0];
}

void expect_group(Communicator* comm, const std::vector<int>& members, const std::string& what) {
  ASSERT_NE(comm, nullptr) << what;
  const int me = test_world().rank();
  EXPECT_EQ(comm->size(), static_cast<int>(members.size())) << what;
  EXPECT_EQ(comm->world_ranks(), members) << what;
  ASSERT_LT(comm->rank(), static_cast<int>(members.size())) << what;
  EXPECT_EQ(members[static_cast<std::size_t>(comm->rank())], me) << what;
  EXPECT_EQ(allreduced_world_rank(*comm), std::accumulate(members.begin(), members.end(), 0)) << what;
}

std::string bracketed(const std::vector<int>& v) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < v.size(); ++i) out << (i ? "," : "") << v[i];
  out << "]";
  return out.str();
}

TEST(Groups, EveryFactorizationMatchesTheMesh) {
  Communicator& world = test_world();
  const int me = world.rank();
  for (const std::string& order : {std::string("tp-dp-pp"), std::string("pp-dp-tp")}) {
    for (const MeshShape& shape : factorizations(world.size(), order)) {
      const Mesh mesh(shape);
      const std::string what = shape.describe() + " rank " + std::to_string(me);
      ParallelGroups g = build_groups(world, mesh);
      EXPECT_EQ(g.world_rank, me) << what;
      EXPECT_EQ(g.coord, mesh.coord_of(me)) << what;
      expect_group(g.tp.get(), mesh.tp_group(me), what + " tp");
      expect_group(g.dp.get(), mesh.dp_group(me), what + " dp");
      expect_group(g.pp.get(), mesh.pp_group(me), what + " pp");
      EXPECT_EQ(g.first_stage(), g.coord.pp == 0) << what;
      EXPECT_EQ(g.last_stage(), g.coord.pp == shape.pp - 1) << what;
      const bool middle = !g.first_stage() && !g.last_stage();
      EXPECT_EQ(g.embedding == nullptr, middle) << what;
      if (!middle) expect_group(g.embedding.get(), mesh.embedding_group(me), what + " embedding");
      EXPECT_EQ(describe_rank(g), "rank " + std::to_string(me) + ": dp " + std::to_string(g.coord.dp) + " tp " +
                                      std::to_string(g.coord.tp) + " stage " + std::to_string(g.coord.pp) +
                                      " (tp group " + bracketed(mesh.tp_group(me)) + ", dp group " +
                                      bracketed(mesh.dp_group(me)) + ", pp group " + bracketed(mesh.pp_group(me)) +
                                      ")")
          << what;
    }
  }
}

// With cp > 1: a cp group and the dp x cp group of the same weights, each checked by an allreduce.
TEST(Groups, ContextParallelGroupsMatchTheMesh) {
  Communicator& world = test_world();
  const int n = world.size(), me = world.rank();
  if (n < 2) GTEST_SKIP() << "cp 2 needs two ranks";
  for (const MeshShape& base : factorizations(n / 2, "tp-dp-pp")) {
    MeshShape shape = base;
    shape.cp = 2;
    const Mesh mesh(shape);
    const std::string what = shape.describe() + " rank " + std::to_string(me);
    ParallelGroups g = build_groups(world, mesh);
    expect_group(g.cp.get(), mesh.cp_group(me), what + " cp");
    expect_group(g.dp_cp.get(), mesh.dp_cp_group(me), what + " dp x cp");
    expect_group(g.dp.get(), mesh.dp_group(me), what + " dp");
    EXPECT_EQ(&g.gradient_group(), g.dp_cp.get()) << what;
    EXPECT_TRUE(contains(describe_rank(g), " cp " + std::to_string(g.coord.cp) + " stage ")) << describe_rank(g);
  }
  ParallelGroups plain = build_groups(world, Mesh(MeshShape{.dp = n}));
  EXPECT_EQ(plain.cp, nullptr);
  EXPECT_EQ(&plain.gradient_group(), plain.dp.get());
}

TEST(Groups, DescribeRankOfTheDefault2x2x2Mesh) {
  Communicator& world = test_world();
  if (world.size() != 8) GTEST_SKIP() << "needs 8 ranks";
  ParallelGroups g = build_groups(world, Mesh(MeshShape{.dp = 2, .tp = 2, .pp = 2}));
  if (world.rank() == 5) {
    EXPECT_EQ(describe_rank(g), "rank 5: dp 0 tp 1 stage 1 (tp group [4,5], dp group [5,7], pp group [1,5])");
  }
}

TEST(Groups, WorldSizeMismatchFailsOnEveryRank) {
  Communicator& world = test_world();
  const int n = world.size();
  const Mesh mesh(MeshShape{.dp = 1, .tp = n + 1, .pp = 1});
  const std::string msg = error_of([&] { build_groups(world, mesh); });
  EXPECT_TRUE(contains(msg, "needs " + std::to_string(n + 1) + " ranks, but the job has " + std::to_string(n))) << msg;
  EXPECT_TRUE(contains(msg, "-np " + std::to_string(n + 1))) << msg;
  world.barrier();  // every rank got here: none is left waiting in a split
}

}  // namespace
}  // namespace mt
