// The data-parallel gradient reduction at 1-4 ranks: exact sums (small integers, so fp32 sums are
// exact whatever order the backend adds in), owned blocks with shard, launch order, the overlap of
// the first bucket's reduction with the rest of backward, and the misuse it refuses.
#include "parallel/grad_reducer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/gemm.h"
#include "runtime/kernels.h"
#include "parallel/tests/flat_params.h"
#include "tests/test_env.h"
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::contiguous;
using testing::error_of;
using testing::padded;
using testing::test_context;
using testing::test_world;

// Rank r's gradient at element i of a param: (r + 1) * (i % 7 + 1); padding 0. Summed over n ranks:
// n(n+1)/2 * (i % 7 + 1), exact in fp32.
std::vector<float> rank_grads(const std::vector<FlatParam>& params, std::int64_t flat, int rank) {
  std::vector<float> g(static_cast<std::size_t>(flat), 0.0f);
  for (const FlatParam& p : params) {
    for (std::int64_t i = p.offset; i < p.offset + p.numel; ++i) {
      g[static_cast<std::size_t>(i)] = static_cast<float>((rank + 1) * (i % 7 + 1));
    }
  }
  return g;
}

std::vector<float> summed_grads(const std::vector<FlatParam>& params, std::int64_t flat, int n) {
  std::vector<float> g = rank_grads(params, flat, 0);
  for (float& x : g) x *= static_cast<float>(n * (n + 1) / 2);
  return g;
}

Tensor load(const std::vector<float>& values, DeviceContext& ctx) {
  return Tensor::from_host(values, {static_cast<std::int64_t>(values.size())}, ctx);
}

// Every element of [lo, hi) equals the expected sum; reports the first difference only.
void expect_range(const std::vector<float>& got, const std::vector<float>& want, std::int64_t lo, std::int64_t hi,
                  const std::string& what) {
  for (std::int64_t i = lo; i < hi; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (got[k] != want[k]) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[k] << ", want " << want[k];
      return;
    }
  }
}

void mark_all_reverse(GradReducer& reducer) {
  for (int p = static_cast<int>(reducer.params().size()) - 1; p >= 0; --p) reducer.mark_ready(p);
}

struct Case {
  std::vector<std::int64_t> sizes;
  std::int64_t bucket_bytes;
};

const std::vector<Case> kCases = {
    {{10, 20, 30, 40, 50}, 64},         // many small buckets, params straddling them
    {{1000, 3, 517, 2048, 77}, 4096},   // a few buckets
    {{10, 20, 30, 40, 49}, 25 << 20},   // one bucket larger than the buffer
    {{5}, 4},                           // buckets of dp elements, mostly padding-free
};

void run_sum_case(bool shard, bool overlap) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const int n = world.size();
  for (const Case& c : kCases) {
    const auto params = contiguous(c.sizes);
    const std::int64_t flat = padded(params, n);
    SCOPED_TRACE("sizes " + std::to_string(c.sizes.size()) + " bucket bytes " + std::to_string(c.bucket_bytes));
    Tensor grads = load(rank_grads(params, flat, world.rank()), ctx);
    GradReducer reducer(ctx, world, grads, params, {c.bucket_bytes, shard, overlap});
    const std::uint64_t issued = world.collectives_issued();
    // Two rounds: the bookkeeping resets at begin().
    for (int round = 0; round < 2; ++round) {
      if (round == 1) grads.copy_from_host(rank_grads(params, flat, world.rank()).data(), grads.nbytes(), ctx.stream());
      reducer.begin();
      mark_all_reverse(reducer);
      reducer.finish();
      const std::vector<float> got = grads.to_host<float>();
      const std::vector<float> want = summed_grads(params, flat, n);
      const BucketLayout& layout = reducer.layout();
      if (shard) {
        for (int b = 0; b < layout.size(); ++b) {
          const auto [lo, hi] = layout.owned(b, world.rank());
          expect_range(got, want, lo, hi, "owned block of bucket " + std::to_string(b));
        }
      } else {
        expect_range(got, want, 0, flat, "reduced gradients");
      }
      EXPECT_EQ(reducer.buckets_launched(), layout.size());
      EXPECT_EQ(reducer.buckets_launched_before_finish(), overlap ? layout.size() : 0);
      for (int b = 0; b < layout.size(); ++b) EXPECT_TRUE(reducer.bucket_complete(b));
    }
    // One collective per bucket per round, none at all for one rank.
    EXPECT_EQ(world.collectives_issued() - issued,
              n == 1 ? 0u : 2u * static_cast<std::uint64_t>(reducer.layout().size()));
  }
}

TEST(GradReducer, AllreduceSumsEveryGradient) { run_sum_case(false, true); }
TEST(GradReducer, AllreduceSumsEveryGradientWithoutOverlap) { run_sum_case(false, false); }
TEST(GradReducer, ShardSumsTheOwnedBlocks) { run_sum_case(true, true); }
TEST(GradReducer, ShardSumsTheOwnedBlocksWithoutOverlap) { run_sum_case(true, false); }

TEST(GradReducer, BucketsLaunchInReductionOrderAsTheirParamsBecomeReady) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const auto params = contiguous({10, 20, 30, 40, 50});
  const std::int64_t flat = padded(params, world.size());
  Tensor grads = load(rank_grads(params, flat, world.rank()), ctx);
  GradReducer reducer(ctx, world, grads, params, {64, false, true});
  const BucketLayout& layout = reducer.layout();
  ASSERT_GT(layout.size(), 4);

  // Reverse order (as backward produces them): bucket b launches once its lowest param is marked,
  // i.e. after (5 - lowest param) marks; never before the buckets ahead of it.
  reducer.begin();
  EXPECT_EQ(reducer.buckets_launched(), 0);
  mark_all_reverse(reducer);
  for (int b = 0; b < layout.size(); ++b) {
    const int lowest = layout.buckets[static_cast<std::size_t>(b)].params.front();
    EXPECT_EQ(reducer.launched_after_marks(b), 5 - lowest) << "bucket " << b;
    if (b > 0) {
      EXPECT_GE(reducer.launched_after_marks(b), reducer.launched_after_marks(b - 1));
    }
  }
  reducer.finish();

  // Forward order: the first bucket in reduction order holds the last param, so nothing may launch
  // until it is marked; then every bucket launches at once, in order.
  grads.copy_from_host(rank_grads(params, flat, world.rank()).data(), grads.nbytes(), ctx.stream());
  reducer.begin();
  for (int p = 0; p < 4; ++p) {
    reducer.mark_ready(p);
    EXPECT_EQ(reducer.buckets_launched(), 0) << "after marking param " << p;
  }
  reducer.mark_ready(4);
  EXPECT_EQ(reducer.buckets_launched(), layout.size());
  for (int b = 0; b < layout.size(); ++b) EXPECT_EQ(reducer.launched_after_marks(b), 5);
  reducer.finish();
  expect_range(grads.to_host<float>(), summed_grads(params, flat, world.size()), 0, flat, "forward order");
}

TEST(GradReducer, EachRankMayMarkInItsOwnOrder) {
  // The launch order is fixed by the layout, not by the marking order: ranks marking in different
  // orders still submit matching collectives.
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const auto params = contiguous({13, 200, 7, 64, 91, 1, 300, 44});
  const std::int64_t flat = padded(params, world.size());
  for (bool shard : {false, true}) {
    Tensor grads = load(rank_grads(params, flat, world.rank()), ctx);
    GradReducer reducer(ctx, world, grads, params, {128, shard, true});
    std::vector<int> order(params.size());
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(static_cast<unsigned>(77 + world.rank()));
    std::shuffle(order.begin(), order.end(), rng);
    reducer.begin();
    for (int p : order) reducer.mark_ready(p);
    reducer.finish();
    const std::vector<float> got = grads.to_host<float>();
    const std::vector<float> want = summed_grads(params, flat, world.size());
    for (int b = 0; b < reducer.layout().size(); ++b) {
      const auto [lo, hi] = shard ? reducer.layout().owned(b, world.rank())
                                  : std::pair<std::int64_t, std::int64_t>(reducer.layout().buckets[b].begin,
                                                                          reducer.layout().buckets[b].end);
      expect_range(got, want, lo, hi, "bucket " + std::to_string(b));
    }
  }
}

// The overlap proof. A simulated backward: for each param from the last to the first, real compute
// (GEMMs, results checked), then mark_ready. Several buckets of 1 MiB.
//  * Deterministic: bucket 0 is launched while backward still has params to go (launched after
//    the marks of its own params only), and every bucket is launched before finish().
//  * Progress while computing: right after bucket 0 is launched the test keeps computing (it never
//    enters MPI or waits) until bucket 0's Work reports completion, with a 120 s deadline; then
//    backward goes on. So at finish() bucket 0 has completed - buckets_completed_before_finish()
//    >= 1 - only if the communication thread drove the reduction while this thread computed. This
//    cannot be flaky the way "not done right after launch" could be (a fast network or a rank that
//    launched late can make a small reduction look instantaneous): it waits for completion rather
//    than racing it, and fails only if progress needs the caller to wait.
void run_overlap_case(bool shard) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const int n = world.size();
  const std::int64_t per_param = 1 << 18;  // 1 MiB of fp32
  const auto params = contiguous(std::vector<std::int64_t>(8, per_param));
  const std::int64_t flat = padded(params, n);
  Tensor grads = load(rank_grads(params, flat, world.rank()), ctx);
  GradReducer reducer(ctx, world, grads, params, {1 << 20, shard, true});  // 1 MiB buckets
  const BucketLayout& layout = reducer.layout();
  ASSERT_GE(layout.size(), 8);
  const int in_first_bucket = static_cast<int>(layout.buckets[0].params.size());

  Tensor a = Tensor::empty({128, 128}, DType::F32, ctx);
  Tensor c = Tensor::empty({128, 128}, DType::F32, ctx);
  kernels::fill(ctx, a, 1.0);
  int gemms = 0;
  const auto compute = [&] {
    matmul(ctx, a, false, a, true, c);
    ++gemms;
  };

  reducer.begin();
  bool done_at_launch = false;
  bool completed_while_computing = false;
  int gemms_waiting = 0;
  for (int p = static_cast<int>(params.size()) - 1; p >= 0; --p) {
    for (int k = 0; k < 4; ++k) compute();  // this param's backward
    const int before = reducer.buckets_launched();
    reducer.mark_ready(p);
    if (before == 0 && reducer.buckets_launched() > 0) {
      done_at_launch = reducer.bucket_complete(0);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (std::chrono::steady_clock::now() < deadline) {
        if (reducer.bucket_complete(0)) {
          completed_while_computing = true;
          break;
        }
        compute();
        ++gemms_waiting;
      }
    }
  }
  EXPECT_EQ(reducer.buckets_launched(), layout.size());
  reducer.finish();

  EXPECT_EQ(reducer.launched_after_marks(0), in_first_bucket)
      << "the first bucket launched once its own params were ready, not at the end of backward";
  EXPECT_LT(reducer.launched_after_marks(0), static_cast<int>(params.size()));
  EXPECT_EQ(reducer.buckets_launched_before_finish(), layout.size());
  EXPECT_TRUE(completed_while_computing) << "bucket 0's reduction only finished once the caller waited";
  EXPECT_GE(reducer.buckets_completed_before_finish(), 1);
  EXPECT_EQ(kernels::reduce(ctx, ReduceKind::Sum, c), 128.0 * 128 * 128);
  if (world.rank() == 0) {
    std::printf("[overlap %s, %d ranks] %d buckets; bucket 0 done at launch: %s; %d GEMMs until it completed; "
                "%d of %d buckets complete at finish()\n",
                shard ? "reduce-scatter" : "allreduce", n, layout.size(), done_at_launch ? "yes" : "no",
                gemms_waiting, reducer.buckets_completed_before_finish(), layout.size());
  }
  const std::vector<float> got = grads.to_host<float>();
  const std::vector<float> want = summed_grads(params, flat, n);
  for (int b = 0; b < layout.size(); ++b) {
    const auto [lo, hi] = shard ? layout.owned(b, world.rank())
                                : std::pair<std::int64_t, std::int64_t>(layout.buckets[b].begin, layout.buckets[b].end);
    expect_range(got, want, lo, hi, "bucket " + std::to_string(b));
  }
}

TEST(GradReducer, FirstBucketReducesWhileBackwardComputes) { run_overlap_case(false); }
TEST(GradReducer, FirstBucketReduceScattersWhileBackwardComputes) { run_overlap_case(true); }

TEST(GradReducer, WithoutOverlapNothingLaunchesBeforeFinish) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const auto params = contiguous({10, 20, 30, 40, 50});
  const std::int64_t flat = padded(params, world.size());
  Tensor grads = load(rank_grads(params, flat, world.rank()), ctx);
  GradReducer reducer(ctx, world, grads, params, {64, false, false});
  const std::uint64_t issued = world.collectives_issued();
  reducer.begin();
  for (int p = 4; p >= 0; --p) {
    reducer.mark_ready(p);
    EXPECT_EQ(reducer.buckets_launched(), 0);
  }
  EXPECT_EQ(world.collectives_issued(), issued);
  reducer.finish();
  EXPECT_EQ(reducer.buckets_launched_before_finish(), 0);
  EXPECT_EQ(reducer.buckets_completed_before_finish(), 0);
  EXPECT_EQ(reducer.buckets_launched(), reducer.layout().size());
  for (int b = 0; b < reducer.layout().size(); ++b) {
    EXPECT_EQ(reducer.launched_after_marks(b), 5);
  }
  expect_range(grads.to_host<float>(), summed_grads(params, flat, world.size()), 0, flat, "reduced gradients");
}

TEST(GradReducer, RefusesMisuse) {
  // Every rank makes the same mistakes, so the collectives launched before each one still match.
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const auto params = contiguous({10, 20, 30, 40, 50});
  const std::int64_t flat = padded(params, world.size());
  Tensor grads = load(rank_grads(params, flat, world.rank()), ctx);
  GradReducer reducer(ctx, world, grads, params, {64, false, true});

  EXPECT_TRUE(contains(error_of([&] { reducer.mark_ready(0); }), "mark_ready(0) outside begin()..finish()"));
  EXPECT_TRUE(contains(error_of([&] { reducer.finish(); }), "finish() without begin()"));
  reducer.begin();
  EXPECT_TRUE(contains(error_of([&] { reducer.begin(); }), "begin() called again before finish()"));
  reducer.mark_ready(4);
  EXPECT_TRUE(contains(error_of([&] { reducer.mark_ready(4); }), "param 'w4' (4) marked ready twice"));
  EXPECT_TRUE(contains(error_of([&] { reducer.mark_ready(5); }), "param 5 of 5"));
  EXPECT_TRUE(contains(error_of([&] { reducer.mark_ready(-1); }), "param -1 of 5"));
  reducer.mark_ready(3);
  reducer.mark_ready(1);  // 2 and 0 missing: the buckets holding param 2 or below stay unlaunched
  const int launched = reducer.buckets_launched();
  EXPECT_LT(launched, reducer.layout().size());
  EXPECT_TRUE(contains(error_of([&] { reducer.finish(); }),
                       "param 'w0' (0) was not marked ready (2 of 5 params not ready"));
  EXPECT_EQ(reducer.buckets_launched(), launched) << "a refused finish() launches nothing";
  // The round is still open: completing it gives the right sums.
  reducer.mark_ready(2);
  EXPECT_TRUE(contains(error_of([&] { reducer.finish(); }), "param 'w0' (0) was not marked ready (1 of 5"));
  reducer.mark_ready(0);
  reducer.finish();
  expect_range(grads.to_host<float>(), summed_grads(params, flat, world.size()), 0, flat, "after the errors");

  // Inputs the constructor refuses.
  Tensor ints = Tensor::zeros({flat}, DType::I32, ctx);
  EXPECT_TRUE(contains(error_of([&] { GradReducer bad(ctx, world, ints, params, ReducerOptions{}); }), "1-D fp32 tensor"));
  if (world.size() > 1) {
    Tensor odd = Tensor::zeros({flat + 1}, DType::F32, ctx);
    EXPECT_TRUE(contains(error_of([&] { GradReducer bad(ctx, world, odd, params, ReducerOptions{}); }),
                         "must be padded to a multiple of the data-parallel size"));
  }
  Tensor short_grads = Tensor::zeros({world.size() * 10}, DType::F32, ctx);
  EXPECT_TRUE(contains(error_of([&] { GradReducer bad(ctx, world, short_grads, params, ReducerOptions{}); }),
                       "lies outside the flat buffer"));
}

}  // namespace
}  // namespace mt
