// The data-parallel AdamW at 1-4 ranks: sharded (ZeRO-1) and plain give the same parameters, bit
// for bit, as one AdamW over the full buffer with the summed gradients; the sharded moments take
// 1/dp of the memory (by the optimizer's count and by the allocator's); the owned sums of squares
// add up to the full weighted sum over the ranks.
#include "parallel/zero_optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "parallel/grad_reducer.h"
#include "parallel/tests/flat_params.h"
#include "tests/test_env.h"
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::contiguous;
using testing::error_of;
using testing::padded;
using testing::params_numel;
using testing::test_context;
using testing::test_world;

Tensor load(const std::vector<float>& values, DeviceContext& ctx) {
  return Tensor::from_host(values, {static_cast<std::int64_t>(values.size())}, ctx);
}

// Rank r's gradient at step s: multiples of 1/64 small enough that every sum over ranks is exact.
float grad_value(std::int64_t i, int rank, int step) {
  return static_cast<float>((i * 7 + rank * 3 + step * 5) % 11 - 5) / 64.0f;
}

std::vector<float> initial_params(const std::vector<FlatParam>& params, std::int64_t flat) {
  std::vector<float> p(static_cast<std::size_t>(flat), 0.0f);
  for (std::int64_t i = 0; i < params_numel(params); ++i) {
    p[static_cast<std::size_t>(i)] = static_cast<float>((i * 37) % 101 - 50) / 100.0f;
  }
  return p;
}

std::vector<float> step_grads(const std::vector<FlatParam>& params, std::int64_t flat, int rank, int step) {
  std::vector<float> g(static_cast<std::size_t>(flat), 0.0f);
  for (std::int64_t i = 0; i < params_numel(params); ++i) g[static_cast<std::size_t>(i)] = grad_value(i, rank, step);
  return g;
}

std::vector<float> summed_step_grads(const std::vector<FlatParam>& params, std::int64_t flat, int ranks, int step) {
  std::vector<float> g(static_cast<std::size_t>(flat), 0.0f);
  for (std::int64_t i = 0; i < params_numel(params); ++i) {
    double sum = 0.0;
    for (int r = 0; r < ranks; ++r) sum += grad_value(i, r, step);
    g[static_cast<std::size_t>(i)] = static_cast<float>(sum);  // exact: multiples of 1/64
  }
  return g;
}

void reduce_all(GradReducer& reducer) {
  reducer.begin();
  for (int p = static_cast<int>(reducer.params().size()) - 1; p >= 0; --p) reducer.mark_ready(p);
  reducer.finish();
}

std::int64_t round256(std::int64_t bytes) { return (bytes + 255) / 256 * 256; }

std::int64_t in_use(DeviceContext& ctx) { return static_cast<std::int64_t>(ctx.allocator().stats().in_use); }

// Bytes the allocator hands out while an optimizer made by make() lives, and that optimizer's
// state_bytes(). The MPI engine thread frees the buffers of finished collectives a little after
// their Work completes (it drops its task after complete()), so in_use can drop under our feet:
// wait for it to hold still, and retry a measurement during which anything else was freed (the
// count must come back to where it started once the optimizer is gone).
template <class Make>
std::pair<std::int64_t, std::int64_t> measure(DeviceContext& ctx, Make make) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    for (int still = 0, tries = 0; still < 20 && tries < 5000; ++tries) {
      const std::int64_t a = in_use(ctx);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      still = in_use(ctx) == a ? still + 1 : 0;
    }
    const std::int64_t before = in_use(ctx);
    std::int64_t allocated = 0, state = 0;
    {
      std::unique_ptr<DistributedAdamW> opt = make();
      allocated = in_use(ctx) - before;
      state = opt->state_bytes();
    }
    if (in_use(ctx) == before) return {allocated, state};
  }
  ADD_FAILURE() << "the allocator's in_use never held still around the optimizer";
  return {-1, -1};
}

// Sum over the ranks of a small integer, exactly.
std::int64_t sum_over_ranks(Communicator& world, DeviceContext& ctx, std::int64_t value) {
  Tensor t = Tensor::from_host(std::vector<std::int32_t>{static_cast<std::int32_t>(value)}, {1}, ctx);
  world.allreduce(t);
  return t.to_host<std::int32_t>()[0];
}

void run_matches_plain_adamw(bool shard, bool overlap) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const int n = world.size();
  const auto params = contiguous({37, 100, 5, 64, 250, 1, 33});
  const std::int64_t flat = padded(params, n);
  const AdamWConfig config{0.9f, 0.95f, 1e-8f, 0.1f};

  Tensor flat_params = load(initial_params(params, flat), ctx);
  Tensor flat_grads = Tensor::zeros({flat}, DType::F32, ctx);
  GradReducer reducer(ctx, world, flat_grads, params, {96, shard, overlap});  // 24-element buckets
  DistributedAdamW opt(ctx, world, reducer, flat_params, config);
  EXPECT_EQ(opt.sharded(), shard);
  EXPECT_EQ(opt.optimizers().size(), shard ? static_cast<std::size_t>(reducer.layout().size()) : 1u);

  // The reference: one AdamW, a slot per param, over the full buffer with the summed gradients.
  Tensor ref_params = load(initial_params(params, flat), ctx);
  Tensor ref_grads = Tensor::zeros({flat}, DType::F32, ctx);
  std::vector<ParamSlot> slots;
  for (const FlatParam& p : params) {
    slots.push_back({p.name, ref_params.flat_slice(p.offset, p.numel), ref_grads.flat_slice(p.offset, p.numel), p.decay});
  }
  AdamW ref(ctx, std::move(slots), config);

  const float lrs[3] = {1e-2f, 2e-2f, 5e-3f};
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> mine = step_grads(params, flat, world.rank(), step);
    flat_grads.copy_from_host(mine.data(), flat_grads.nbytes(), ctx.stream());
    reduce_all(reducer);
    opt.step(lrs[step], 0.5f);
    const std::vector<float> summed = summed_step_grads(params, flat, n, step);
    ref_grads.copy_from_host(summed.data(), ref_grads.nbytes(), ctx.stream());
    ref.step(lrs[step], 0.5f);
  }
  EXPECT_EQ(opt.step_count(), 3);
  for (const AdamW& a : opt.optimizers()) EXPECT_EQ(a.step_count(), 3);
  const std::vector<float> got = flat_params.to_host<float>();
  const std::vector<float> want = ref_params.to_host<float>();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      ADD_FAILURE() << "element " << i << " is " << got[i] << ", plain AdamW gives " << want[i];
      break;
    }
  }
  // The padding belongs to no param: still zero.
  for (std::int64_t i = params_numel(params); i < flat; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], 0.0f);
}

TEST(DistributedAdamW, ShardedMatchesPlainAdamWBitwise) { run_matches_plain_adamw(true, true); }
TEST(DistributedAdamW, ShardedWithoutOverlapMatchesPlainAdamWBitwise) { run_matches_plain_adamw(true, false); }
TEST(DistributedAdamW, UnshardedMatchesPlainAdamWBitwise) { run_matches_plain_adamw(false, true); }

// One step of an optimizer with a bf16 copy and of the plain one beside it, on the same gradients.
void step_both(const std::vector<float>& mine, Tensor& grads, GradReducer& reducer, DistributedAdamW& opt,
               Tensor& plain_grads, GradReducer& plain_reducer, DistributedAdamW& plain) {
  DeviceContext& ctx = test_context();
  grads.copy_from_host(mine.data(), grads.nbytes(), ctx.stream());
  plain_grads.copy_from_host(mine.data(), plain_grads.nbytes(), ctx.stream());
  reduce_all(reducer);
  reduce_all(plain_reducer);
  opt.step(3e-2f, 0.5f);
  plain.step(3e-2f, 0.5f);
}

// Elements of the bf16 copy that are not `master` rounded to nearest even.
std::size_t unrounded(const Tensor& copy, const std::vector<float>& master) {
  const std::vector<bf16> bits = copy.to_host<bf16>();
  std::size_t stale = 0;
  for (std::size_t i = 0; i < master.size(); ++i) stale += bits[i].bits != bf16::from_float(master[i]).bits;
  return stale;
}

// With a bf16 working copy (a bf16 model's compute parameters), after every step the copy is the
// master rounded to nearest even, element by element, on every rank: written in the AdamW pass
// (unsharded, or one rank), cast once after the gathers (sharded over several). The master's bits
// are those of the optimizer without a copy.
void run_bf16_copy_case(bool shard) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const auto params = contiguous({37, 100, 5, 64, 250, 1, 33});
  const std::int64_t flat = padded(params, world.size());
  Tensor flat_params = load(initial_params(params, flat), ctx);
  Tensor flat_grads = Tensor::zeros({flat}, DType::F32, ctx);
  Tensor flat_copy = Tensor::zeros({flat}, DType::BF16, ctx);
  GradReducer reducer(ctx, world, flat_grads, params, {96, shard, true});
  DistributedAdamW opt(ctx, world, reducer, flat_params, AdamWConfig{}, flat_copy);
  Tensor plain_params = load(initial_params(params, flat), ctx);
  Tensor plain_grads = Tensor::zeros({flat}, DType::F32, ctx);
  GradReducer plain_reducer(ctx, world, plain_grads, params, {96, shard, true});
  DistributedAdamW plain(ctx, world, plain_reducer, plain_params, AdamWConfig{});
  for (int step = 0; step < 3; ++step) {
    step_both(step_grads(params, flat, world.rank(), step), flat_grads, reducer, opt, plain_grads, plain_reducer,
              plain);
    const std::vector<float> master = flat_params.to_host<float>();
    EXPECT_EQ(unrounded(flat_copy, master), 0u)
        << "step " << step + 1 << ": elements whose bf16 copy is not the rounded master";
    const std::vector<float> want = plain_params.to_host<float>();
    EXPECT_EQ(std::memcmp(master.data(), want.data(), master.size() * sizeof(float)), 0) << "step " << step + 1;
  }
  const std::string e = error_of([&] {
    DistributedAdamW bad(ctx, world, reducer, flat_params, AdamWConfig{}, Tensor::zeros({flat}, DType::F32, ctx));
  });
  EXPECT_TRUE(contains(e, "bf16 copy")) << e;
}

TEST(DistributedAdamW, Bf16CopyIsTheRoundedMasterAfterEveryStepUnsharded) { run_bf16_copy_case(false); }
TEST(DistributedAdamW, Bf16CopyIsTheRoundedMasterAfterEveryStepSharded) { run_bf16_copy_case(true); }

// ZeRO-1 under bf16 with the GEMM weights in a region of their own (zero_flat_regions): over
// several ranks each bucket of that region gathers the bf16 copy its AdamW pass wrote (2 bytes an
// element), the others fp32 and a cast. After every step the copy is the plain optimizer's master
// rounded, everywhere; the fp32 master agrees in region 0 and in this rank's owned blocks, and
// gather_master() makes all of it the plain optimizer's bits.
TEST(DistributedAdamW, Bf16BucketsOfGemmWeightsGatherTheCopy) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const int n = world.size();
  // Region 0: a and b, read in fp32; region 1 from a multiple of dp: c, d, e, compute_only.
  const std::int64_t region1 = (42 + n - 1) / n * n;
  const std::vector<FlatParam> params{{"a", 0, 37, true, 1.0},          {"b", 37, 5, false, 1.0},
                                      {"c", region1, 100, true, 1.0, true}, {"d", region1 + 100, 64, false, 1.0, true},
                                      {"e", region1 + 164, 250, true, 1.0, true}};
  const std::int64_t flat = (region1 + 414 + n - 1) / n * n;
  std::vector<float> initial(static_cast<std::size_t>(flat), 0.0f), grads(static_cast<std::size_t>(flat), 0.0f);
  for (const FlatParam& p : params)
    for (std::int64_t i = p.offset; i < p.offset + p.numel; ++i)
      initial[static_cast<std::size_t>(i)] = static_cast<float>((i * 37) % 101 - 50) / 100.0f;
  Tensor flat_params = load(initial, ctx);
  Tensor flat_grads = Tensor::zeros({flat}, DType::F32, ctx);
  Tensor flat_copy = Tensor::zeros({flat}, DType::BF16, ctx);
  ReducerOptions options{96, true, true};
  options.boundaries = {region1};
  GradReducer reducer(ctx, world, flat_grads, params, options);
  DistributedAdamW opt(ctx, world, reducer, flat_params, AdamWConfig{}, flat_copy);
  Tensor plain_params = load(initial, ctx);
  Tensor plain_grads = Tensor::zeros({flat}, DType::F32, ctx);
  GradReducer plain_reducer(ctx, world, plain_grads, params, {96, true, true});
  DistributedAdamW plain(ctx, world, plain_reducer, plain_params, AdamWConfig{});

  std::int64_t want_bytes = 0;
  for (int b = 0; b < reducer.layout().size(); ++b) {
    const Bucket& bucket = reducer.layout().buckets[static_cast<std::size_t>(b)];
    EXPECT_EQ(opt.gathers_compute(b), n > 1 && bucket.begin >= region1) << "bucket " << b;
    EXPECT_TRUE(bucket.end <= region1 || bucket.begin >= region1) << "bucket " << b << " straddles the regions";
    want_bytes += n > 1 ? bucket.numel() * (bucket.begin >= region1 ? 2 : 4) : 0;
  }
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step + 1));
    for (const FlatParam& p : params)
      for (std::int64_t i = p.offset; i < p.offset + p.numel; ++i)
        grads[static_cast<std::size_t>(i)] = grad_value(i, world.rank(), step);
    step_both(grads, flat_grads, reducer, opt, plain_grads, plain_reducer, plain);
    EXPECT_EQ(opt.last_gather_bytes(), want_bytes);
    EXPECT_EQ(opt.master_current(), n == 1);
    const std::vector<float> want = plain_params.to_host<float>();
    EXPECT_EQ(unrounded(flat_copy, want), 0u) << "elements whose bf16 copy is not the rounded master";
    // Region 0 and the owned blocks hold the master's bits before any gather of it.
    const std::vector<float> master = flat_params.to_host<float>();
    std::vector<char> current(static_cast<std::size_t>(flat), 0);
    std::fill(current.begin(), current.begin() + region1, 1);
    for (const DistributedAdamW::Piece& piece : opt.owned_pieces())
      std::fill(current.begin() + piece.offset, current.begin() + piece.offset + piece.numel, 1);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
      differ += current[i] && std::memcmp(&master[i], &want[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << "elements of region 0 or an owned block";
    opt.gather_master();
    EXPECT_TRUE(opt.master_current());
    const std::vector<float> gathered = flat_params.to_host<float>();
    EXPECT_EQ(std::memcmp(gathered.data(), want.data(), want.size() * sizeof(float)), 0);
  }
}

TEST(DistributedAdamW, SlotsCoverTheOwnedParamElementsWithUniqueNames) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const auto params = contiguous({37, 100, 5, 64, 250, 1, 33});
  const std::int64_t flat = padded(params, world.size());
  Tensor flat_params = Tensor::zeros({flat}, DType::F32, ctx);
  Tensor flat_grads = Tensor::zeros({flat}, DType::F32, ctx);
  GradReducer reducer(ctx, world, flat_grads, params, {96, true, true});
  DistributedAdamW opt(ctx, world, reducer, flat_params);
  const BucketLayout& layout = reducer.layout();
  std::set<std::string> names;
  std::int64_t slots_numel = 0;
  const auto* base = static_cast<const char*>(flat_params.data());
  for (int b = 0; b < layout.size(); ++b) {
    const auto [lo, hi] = layout.owned(b, world.rank());
    for (const ParamSlot& s : opt.optimizers()[static_cast<std::size_t>(b)].slots()) {
      EXPECT_TRUE(names.insert(s.name).second) << "slot name " << s.name << " twice";
      const std::int64_t at = (static_cast<const char*>(s.param.data()) - base) / 4;
      EXPECT_GE(at, lo);
      EXPECT_LE(at + s.param.numel(), std::min(hi, params_numel(params))) << s.name;
      slots_numel += s.param.numel();
    }
  }
  // Exactly the param elements of the owned blocks: flat/dp minus the padding among them.
  std::int64_t owned_padding = 0;
  for (int b = 0; b < layout.size(); ++b) {
    const auto [lo, hi] = layout.owned(b, world.rank());
    owned_padding += std::max<std::int64_t>(0, hi - std::max(lo, params_numel(params)));
  }
  EXPECT_EQ(slots_numel, flat / world.size() - owned_padding);
  EXPECT_EQ(opt.updated_numel(), slots_numel);
  EXPECT_EQ(sum_over_ranks(world, ctx, slots_numel), params_numel(params));
  if (world.size() == 1) {
    // Buckets start at 490 - 24k: w4 = [206, 456) is cut at 226, ..., 442.
    EXPECT_EQ(names.count("w4[0:20]"), 1u) << "pieces are named name[a:b]";
    EXPECT_EQ(names.count("w4[236:250]"), 1u);
    EXPECT_EQ(names.count("w2"), 1u) << "a whole param keeps its name";
  }
}

TEST(DistributedAdamW, ShardedStateIsOneDpthOfThePlainStateExactly) {
  // Every param and bucket boundary a multiple of 768 elements, and so every piece of an owned
  // block a multiple of 64 elements (768/dp for dp in 1..4): the allocator's 256-byte rounding
  // adds nothing, so its accounting must match the optimizer's count and the 1/dp share exactly.
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const int n = world.size();
  const auto params = contiguous({768 * 3, 768, 768 * 5, 768 * 2});
  const std::int64_t total = params_numel(params);  // 8448, a multiple of 1, 2, 3 and 4
  ASSERT_EQ(total % n, 0);
  const std::int64_t bucket_bytes = 1536 * 4;       // 1536 elements: 5 full buckets and one of 768
  Tensor flat_params = Tensor::zeros({total}, DType::F32, ctx);
  Tensor grads_plain = Tensor::zeros({total}, DType::F32, ctx);
  Tensor grads_shard = Tensor::zeros({total}, DType::F32, ctx);
  GradReducer plain_reducer(ctx, world, grads_plain, params, {bucket_bytes, false, true});
  GradReducer shard_reducer(ctx, world, grads_shard, params, {bucket_bytes, true, true});
  ASSERT_EQ(shard_reducer.layout().size(), 6);

  const auto [plain_alloc, plain_state] =
      measure(ctx, [&] { return std::make_unique<DistributedAdamW>(ctx, world, plain_reducer, flat_params); });
  const auto [shard_alloc, shard_state] =
      measure(ctx, [&] { return std::make_unique<DistributedAdamW>(ctx, world, shard_reducer, flat_params); });
  EXPECT_EQ(plain_state, 8 * total);
  EXPECT_EQ(plain_alloc, 8 * total);
  EXPECT_EQ(shard_state * n, plain_state);
  EXPECT_EQ(shard_alloc * n, plain_alloc);
  EXPECT_EQ(shard_alloc, shard_state);
  if (world.rank() == 0) {
    std::printf("[memory, %d ranks, %lld params] unsharded m+v: %lld B (allocator %lld B); sharded: %lld B "
                "(allocator %lld B)\n",
                n, static_cast<long long>(total), static_cast<long long>(plain_state),
                static_cast<long long>(plain_alloc), static_cast<long long>(shard_state),
                static_cast<long long>(shard_alloc));
  }
}

TEST(DistributedAdamW, ShardedStateBoundWithPaddingAndUnalignedPieces) {
  // Sizes that cut blocks anywhere, and padding: state_bytes is 8 x (flat/dp - padding owned), at
  // most 8 x ceil(N/dp), summing to exactly the unsharded 8N over the ranks; the allocator adds
  // only its rounding of each m and v tensor to 256 bytes.
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const int n = world.size();
  const auto params = contiguous({37, 100, 5, 64, 250, 1, 33});
  const std::int64_t total = params_numel(params);  // 490
  const std::int64_t flat = padded(params, n);
  Tensor flat_params = Tensor::zeros({flat}, DType::F32, ctx);
  Tensor grads = Tensor::zeros({flat}, DType::F32, ctx);
  GradReducer reducer(ctx, world, grads, params, {96, true, true});
  const std::int64_t alloc =
      measure(ctx, [&] { return std::make_unique<DistributedAdamW>(ctx, world, reducer, flat_params); }).first;
  DistributedAdamW opt(ctx, world, reducer, flat_params);

  std::int64_t owned_padding = 0, rounded = 0, slots = 0;
  for (int b = 0; b < reducer.layout().size(); ++b) {
    const auto [lo, hi] = reducer.layout().owned(b, world.rank());
    owned_padding += std::max<std::int64_t>(0, hi - std::max(lo, total));
  }
  for (const AdamW& a : opt.optimizers()) {
    for (const ParamSlot& s : a.slots()) {
      rounded += 2 * round256(4 * s.param.numel());
      ++slots;
    }
  }
  EXPECT_EQ(opt.state_bytes(), 8 * (flat / n - owned_padding));
  EXPECT_LE(opt.state_bytes(), 8 * ((total + n - 1) / n));
  EXPECT_EQ(sum_over_ranks(world, ctx, opt.state_bytes()), 8 * total);
  EXPECT_EQ(alloc, rounded);
  EXPECT_LE(alloc - opt.state_bytes(), 2 * 255 * slots);
  EXPECT_LE(slots, static_cast<std::int64_t>(params.size()) + reducer.layout().size() - 1);
  if (world.rank() == 0) {
    std::printf("[memory, %d ranks, %lld params padded to %lld] sharded m+v on rank 0: %lld B (unsharded %lld B, "
                "1/dp = %.1f B); allocator %lld B over %lld slots\n",
                n, static_cast<long long>(total), static_cast<long long>(flat),
                static_cast<long long>(opt.state_bytes()), static_cast<long long>(8 * total), 8.0 * total / n,
                static_cast<long long>(alloc), static_cast<long long>(slots));
  }
}

void run_norm_case(bool shard) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const int n = world.size();
  auto params = contiguous({37, 100, 5, 64, 250, 1, 33});
  params[0].norm_weight = 0.0;  // a replica counted elsewhere
  params[4].norm_weight = 0.5;  // straddles buckets
  const std::int64_t total = params_numel(params);
  const std::int64_t flat = padded(params, n);
  // Integers: every partial sum of squares (and their total) is exact in fp32 and in double.
  std::vector<float> mine(static_cast<std::size_t>(flat), 0.0f);
  std::vector<double> summed(static_cast<std::size_t>(flat), 0.0);
  for (std::int64_t i = 0; i < total; ++i) {
    mine[static_cast<std::size_t>(i)] = static_cast<float>((world.rank() + 1) * (i % 5 - 2));
    summed[static_cast<std::size_t>(i)] = static_cast<double>(n * (n + 1) / 2 * (i % 5 - 2));
  }
  double want = 0.0;
  for (const FlatParam& p : params) {
    double s = 0.0;
    for (std::int64_t i = p.offset; i < p.offset + p.numel; ++i) s += summed[static_cast<std::size_t>(i)] * summed[static_cast<std::size_t>(i)];
    want += p.norm_weight * s;
  }
  Tensor flat_params = Tensor::zeros({flat}, DType::F32, ctx);
  Tensor grads = load(mine, ctx);
  GradReducer reducer(ctx, world, grads, params, {96, shard, true});
  DistributedAdamW opt(ctx, world, reducer, flat_params);
  reduce_all(reducer);
  const double owned = opt.owned_grad_sum_of_squares();
  EXPECT_EQ(opt.owned_grad_sum_of_squares(), owned) << "the same gradients give the same bits";
  Tensor t = Tensor::from_host(std::vector<float>{static_cast<float>(owned)}, {1}, ctx);
  ASSERT_EQ(static_cast<double>(static_cast<float>(owned)), owned) << "test values must stay exact in fp32";
  world.allreduce(t);
  EXPECT_EQ(static_cast<double>(t.to_host<float>()[0]), want);
}

TEST(DistributedAdamW, OwnedSumsOfSquaresAddUpToTheWeightedTotal) { run_norm_case(true); }
TEST(DistributedAdamW, OwnedSumsOfSquaresAddUpToTheWeightedTotalUnsharded) { run_norm_case(false); }

TEST(DistributedAdamW, RefusesMisuse) {
  Communicator& world = test_world();
  DeviceContext& ctx = test_context();
  const auto params = contiguous({37, 100});
  const std::int64_t flat = padded(params, world.size());
  Tensor flat_params = Tensor::zeros({flat}, DType::F32, ctx);
  Tensor grads = Tensor::zeros({flat}, DType::F32, ctx);
  GradReducer reducer(ctx, world, grads, params, {96, true, false});
  Tensor wrong = Tensor::zeros({flat + world.size()}, DType::F32, ctx);
  EXPECT_TRUE(contains(error_of([&] { DistributedAdamW bad(ctx, world, reducer, wrong); }),
                       "must be fp32 and shaped like the flat gradients"));
  DistributedAdamW opt(ctx, world, reducer, flat_params);
  reducer.begin();  // overlap off: nothing launched yet
  EXPECT_TRUE(contains(error_of([&] { opt.step(1e-3f, 1.0f); }), "call GradReducer::finish() first"));
  reducer.mark_ready(1);
  reducer.mark_ready(0);
  reducer.finish();
  EXPECT_TRUE(contains(error_of([&] { opt.step(1e-3f, std::numeric_limits<float>::quiet_NaN()); }), "grad_scale must be finite"));
  EXPECT_EQ(opt.step_count(), 0);
  opt.step(1e-3f, 1.0f);
  EXPECT_EQ(opt.step_count(), 1);
}

}  // namespace
}  // namespace mt
