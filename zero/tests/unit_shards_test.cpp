// ZeRO-2/3 units (zero/unit_shards.h) over the world as the data-parallel group, with the hooks
// called by hand as a model calls them: per-unit gradients reduce-scattered and added into the
// owned shards equal the sums over ranks (exact: small integers), gathers and prefetches deliver
// the full parameters, full units are freed (the allocator's in_use falls back), and a freed unit
// read fails with a clear error.
#include "zero/unit_shards.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "tests/test_env.h"

namespace mt {
namespace {

using testing::test_context;
using testing::test_world;

// Three units: {wte [5] alone, wpe [3]}, {h.0 [7], [2]}, {lnf [4]}.
std::vector<ParamSpec> specs() {
  return {{"wte", ParamKind::TokenEmbedding, -1, {5}, true},
          {"wpe", ParamKind::PositionEmbedding, -1, {3}, true},
          {"h.0.a", ParamKind::QkvWeight, 0, {7}, true},
          {"h.0.b", ParamKind::QkvBias, 0, {2}, false},
          {"lnf.weight", ParamKind::LnfWeight, -1, {4}, false}};
}
std::vector<ParamUnit> units() { return {{"embedding", 0, 2}, {"h.0", 2, 2}, {"lnf", 4, 1}}; }
const std::vector<char> kAlone{1, 0, 0, 0, 0};

UnitCut cut(int dp) {
  const std::vector<std::int64_t> numels{5, 3, 7, 2, 4};
  return make_unit_cut(units(), numels, kAlone, dp);
}

// The store built in the units' blocks at the world's dp, as UnitShards needs it.
ParameterStore placed_store(DeviceContext& ctx) {
  std::vector<std::int64_t> numels;
  for (const ParamSpec& s : specs()) numels.push_back(s.numel());
  return ParameterStore(ctx, specs(), DType::F32, 1,
                        cut(test_world().size()).store_blocks());
}

// The allocator's bytes in use once the communicator's engine has dropped what it held of
// completed collectives (it lets go of their descriptors a moment after wait() returns).
std::size_t settled_in_use() {
  test_world().barrier();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  return test_context().allocator().stats().in_use;
}

// The value rank r writes into element e of parameter p's gradient.
float grad_value(int rank, std::size_t p, std::int64_t e) { return static_cast<float>((rank + 1) * 100 + p * 10 + e); }

TEST(ShardBlocks, CutsUnitsAndAloneParamsPaddedToDp) {
  const std::vector<std::int64_t> numels{5, 3, 7, 2, 4};
  const std::vector<ShardBlock> blocks = make_shard_blocks(units(), numels, kAlone, 4);
  ASSERT_EQ(blocks.size(), 4u);  // wte, wpe, h.0, lnf
  EXPECT_EQ(blocks[0].numel, 5);
  EXPECT_EQ(blocks[0].padded, 8);
  EXPECT_EQ(blocks[1].first, 1u);
  EXPECT_EQ(blocks[2].numel, 9);
  EXPECT_EQ(blocks[2].padded, 12);
  EXPECT_EQ(blocks[3].shard_offset, 2 + 1 + 3);
  EXPECT_THROW(make_shard_blocks(std::vector<ParamUnit>{{"x", 1, 1}}, numels, kAlone, 2), Error);
}

// Parameters read only through the compute copy (h.0.a, a GEMM weight) never share a block with
// the others: ZeRO-3 gathers such a block as bf16 under bf16 compute, the others as fp32.
TEST(ShardBlocks, PutsComputeOnlyParamsInBlocksApart) {
  const std::vector<std::int64_t> numels{5, 3, 7, 2, 4};
  const std::vector<char> compute_only{0, 0, 1, 0, 0};
  const std::vector<ShardBlock> blocks = make_shard_blocks(units(), numels, kAlone, 2, compute_only);
  ASSERT_EQ(blocks.size(), 5u);  // wte, wpe, h.0.a, h.0.b, lnf
  EXPECT_EQ(blocks[2].first, 2u);
  EXPECT_EQ(blocks[2].count, 1u);
  EXPECT_EQ(blocks[2].unit, 1);
  EXPECT_TRUE(blocks[2].compute_only);
  EXPECT_EQ(blocks[3].first, 3u);
  EXPECT_FALSE(blocks[3].compute_only);
  EXPECT_EQ(blocks[3].shard_offset, 3 + 2 + 4);
  EXPECT_THROW(make_shard_blocks(units(), numels, kAlone, 2, std::vector<char>{1}), Error);
}

void write_grads(ParameterStore& store, UnitShards& shards, int rank) {
  // Backward order: lnf, the layer, the embedding.
  for (int u : {2, 1, 0}) {
    shards.begin(u, ParamUse::Backward);
    const ParamUnit unit = units()[static_cast<std::size_t>(u)];
    for (std::size_t p = unit.first; p < unit.first + unit.count; ++p) {
      std::vector<float> g(static_cast<std::size_t>(store.spec(p).numel()));
      for (std::size_t e = 0; e < g.size(); ++e) g[e] = grad_value(rank, p, static_cast<std::int64_t>(e));
      store.grad(p).copy_from_host(g.data(), g.size() * sizeof(float), test_context().stream());
    }
    shards.end(u, ParamUse::Backward);
  }
}

// The store must be built in the units' blocks (nothing of the whole stage allocated): a flat one,
// or one cut for another dp, is refused.
TEST(UnitShards, NeedsTheStoreBuiltInItsBlocks) {
  DeviceContext& ctx = test_context();
  ParameterStore flat(ctx, specs());
  EXPECT_THROW(UnitShards(ctx, test_world(), flat, cut(test_world().size()), 3), Error);
  ParameterStore other(ctx, specs(), DType::F32, 1, cut(test_world().size() + 1).store_blocks());
  EXPECT_EQ(other.param(2).resident(), false);  // built without memory
  EXPECT_THROW(UnitShards(ctx, test_world(), other, cut(test_world().size() + 1), 2), Error);
  // A cut made for another dp than the group's is refused even where the blocks happen to agree.
  ParameterStore mine = placed_store(ctx);
  UnitCut wrong = cut(test_world().size());
  wrong.dp += 1;
  EXPECT_THROW(UnitShards(ctx, test_world(), mine, wrong, 2), Error);
  EXPECT_THROW(other.flat_params(), Error);
}

TEST(UnitShards, ReduceScattersEachUnitIntoTheOwnedShardAndFreesIt) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const int n = world.size();
  for (int stage : {2, 3}) {
    SCOPED_TRACE("zero " + std::to_string(stage));
    ParameterStore store = placed_store(ctx);
    UnitShards shards(ctx, world, store, cut(n), stage);
    // Gradients exist only while a unit is written or reduced.
    EXPECT_THROW(store.grad(0).to_host<float>(), Error);
    try {
      store.grad(2).to_host<float>();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
    }
    shards.zero_owned_grads();
    const std::size_t before = settled_in_use();
    for (int micro = 0; micro < 2; ++micro) {  // accumulation: the owned shard adds both
      shards.start_round(0);
      shards.begin(0, ParamUse::BackwardWeights);
      EXPECT_GE(ctx.allocator().stats().in_use, before + 2 * 256) << "the embedding unit's two blocks";
      shards.end(0, ParamUse::BackwardWeights);  // nothing written: adds zeros
      write_grads(store, shards, world.rank());
      shards.finish_round();
      EXPECT_EQ(settled_in_use(), before) << "full gradients left after the round";
      EXPECT_THROW(store.grad(4).to_host<float>(), Error);
    }
    EXPECT_LE(shards.stats().max_full_grad_units, 2);
    EXPECT_EQ(shards.stats().reductions, 8);
    // owned element i of block b is element owned_begin + i of the block: sum over ranks, twice.
    for (std::size_t b = 0; b < shards.blocks().size(); ++b) {
      const ShardBlock& block = shards.blocks()[b];
      const std::vector<float> owned = shards.owned_grads(static_cast<int>(b)).to_host<float>();
      std::vector<float> expect;
      for (std::size_t p = block.first; p < block.first + block.count; ++p) {
        for (std::int64_t e = 0; e < store.spec(p).numel(); ++e) {
          float sum = 0;
          for (int r = 0; r < n; ++r) sum += grad_value(r, p, e);
          expect.push_back(2 * sum);
        }
      }
      expect.resize(static_cast<std::size_t>(block.padded), 0.0f);
      const std::int64_t lo = shards.owned_begin(static_cast<int>(b));
      for (std::size_t i = 0; i < owned.size(); ++i)
        EXPECT_EQ(owned[i], expect[static_cast<std::size_t>(lo) + i]) << "block " << b << " element " << lo + i;
    }
  }
}

TEST(UnitShards, ZeroThreeGathersPrefetchesAndReleasesParameters) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  ParameterStore store = placed_store(ctx);
  UnitShards shards(ctx, world, store, cut(world.size()), 3);
  // Every rank writes the same full parameters; the owned shards keep their pieces.
  shards.materialize(/*gather=*/false);
  for (std::size_t p = 0; p < store.size(); ++p) {
    std::vector<float> v(static_cast<std::size_t>(store.spec(p).numel()));
    for (std::size_t e = 0; e < v.size(); ++e) v[e] = static_cast<float>(p * 10 + e) + 0.5f;
    store.param(p).copy_from_host(v.data(), v.size() * sizeof(float), ctx.stream());
  }
  shards.keep_owned();
  for (int u = 0; u < 3; ++u) EXPECT_FALSE(shards.params_resident(u));
  try {
    store.param(2).to_host<float>();
    ADD_FAILURE() << "a released unit's parameters were read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
  }
  const std::size_t idle = settled_in_use();
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    shards.start_round(0);
    for (int u = 0; u < 3; ++u) {
      shards.begin(u, ParamUse::Forward);
      // Round 1 follows the order learned in round 0: the next kPrefetchUnits units are already on
      // their way (from the first use on, both others here).
      static_assert(kPrefetchUnits == 2);
      for (int next = u + 1; next < 3; ++next) EXPECT_EQ(shards.params_resident(next), round == 1) << next;
      EXPECT_GE(ctx.allocator().stats().in_use, idle + 256);
      const ParamUnit unit = units()[static_cast<std::size_t>(u)];
      for (std::size_t p = unit.first; p < unit.first + unit.count; ++p) {
        const std::vector<float> v = store.param(p).to_host<float>();
        for (std::size_t e = 0; e < v.size(); ++e) EXPECT_EQ(v[e], static_cast<float>(p * 10 + e) + 0.5f) << p;
      }
      shards.end(u, ParamUse::Forward);
      EXPECT_FALSE(shards.params_resident(u));  // freed after use
    }
    shards.finish_round();
    EXPECT_EQ(settled_in_use(), idle);
  }
  EXPECT_EQ(shards.stats().prefetched, 2);
  EXPECT_EQ(shards.stats().max_full_param_units, 3);  // the unit in use and the two ahead
}

// The LM head's use of its tied embedding in a training forward (ParamUse::ForwardWithGradient):
// ZeRO-3 gathers the parameters for it, like a forward, and ZeRO-2/3 reduce-scatter the gradient it
// wrote when it ends, like a backward; the full gradient and parameters are freed after.
TEST(UnitShards, AForwardWithGradientGathersAndReduceScatters) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const int n = world.size();
  for (int stage : {2, 3}) {
    SCOPED_TRACE("zero " + std::to_string(stage));
    ParameterStore store = placed_store(ctx);
    UnitShards shards(ctx, world, store, cut(n), stage);
    shards.materialize(/*gather=*/false);
    std::vector<float> wte(5);
    for (std::size_t e = 0; e < wte.size(); ++e) wte[e] = static_cast<float>(e) + 0.5f;
    store.param(0).copy_from_host(wte.data(), wte.size() * sizeof(float), ctx.stream());
    shards.keep_owned();
    shards.zero_owned_grads();
    const std::size_t idle = settled_in_use();
    shards.start_round(0);
    shards.begin(0, ParamUse::ForwardWithGradient);
    EXPECT_TRUE(shards.params_resident(0));
    EXPECT_EQ(store.param(0).to_host<float>(), wte);
    EXPECT_EQ(store.grad(0).to_host<float>(), std::vector<float>(5, 0.0f));  // zeroed at begin
    std::vector<float> g(5);
    for (std::size_t e = 0; e < g.size(); ++e) g[e] = grad_value(world.rank(), 0, static_cast<std::int64_t>(e));
    store.grad(0).copy_from_host(g.data(), g.size() * sizeof(float), ctx.stream());
    shards.end(0, ParamUse::ForwardWithGradient);
    shards.finish_round();
    EXPECT_EQ(shards.stats().reductions, 1);
    EXPECT_EQ(settled_in_use(), idle) << "full gradients or parameters left after the round";
    // Block 0 is wte alone: its owned piece holds the sum over ranks.
    const std::vector<float> owned = shards.owned_grads(0).to_host<float>();
    for (std::size_t i = 0; i < owned.size(); ++i) {
      const std::int64_t e = shards.owned_begin(0) + static_cast<std::int64_t>(i);
      float sum = 0;
      for (int r = 0; r < n; ++r) sum += e < 5 ? grad_value(r, 0, e) : 0.0f;
      EXPECT_EQ(owned[i], sum) << "element " << e;
    }
  }
}

}  // namespace
}  // namespace mt
