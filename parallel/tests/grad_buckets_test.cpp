// The bucket layout as pure arithmetic: hand-worked layouts, the invariants over many shapes, and
// the inputs it refuses.
#include "parallel/grad_buckets.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::error_of;

std::vector<FlatParam> contiguous(const std::vector<std::int64_t>& sizes) {
  std::vector<FlatParam> params;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::string name = "p";
    name += std::to_string(i);  // (not "p" + ...: GCC 12 warns falsely about that concatenation)
    params.push_back({name, offset, sizes[i], i % 2 == 0, 1.0});
    offset += sizes[i];
  }
  return params;
}

using Range = std::pair<std::int64_t, std::int64_t>;

std::vector<Range> ranges_of(const BucketLayout& layout) {
  std::vector<Range> out;
  for (const Bucket& b : layout.buckets) out.emplace_back(b.begin, b.end);
  return out;
}

// Every invariant the layout promises, checked against brute force.
void check_invariants(const BucketLayout& layout, const std::vector<FlatParam>& params, std::int64_t flat_numel,
                      int dp, std::int64_t bucket_bytes) {
  SCOPED_TRACE(layout.describe());
  ASSERT_EQ(layout.flat_numel, flat_numel);
  ASSERT_EQ(layout.dp, dp);
  const std::int64_t piece = std::max<std::int64_t>(dp, bucket_bytes / 4 / dp * dp);
  std::int64_t hi = flat_numel;  // reduction order: from the end of the buffer down
  for (int b = 0; b < layout.size(); ++b) {
    const Bucket& bucket = layout.buckets[static_cast<std::size_t>(b)];
    EXPECT_EQ(bucket.end, hi) << "bucket " << b;
    EXPECT_GT(bucket.numel(), 0) << "bucket " << b;
    EXPECT_EQ(bucket.numel() % dp, 0) << "bucket " << b;
    if (b + 1 < layout.size()) {
      EXPECT_EQ(bucket.numel(), piece) << "bucket " << b;
    } else {
      EXPECT_LE(bucket.numel(), piece) << "the lowest bucket takes the remainder";
    }
    std::vector<int> want;
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (params[p].offset < bucket.end && params[p].offset + params[p].numel > bucket.begin) {
        want.push_back(static_cast<int>(p));
      }
    }
    EXPECT_EQ(bucket.params, want) << "bucket " << b;
    std::int64_t at = bucket.begin;
    for (int r = 0; r < dp; ++r) {
      const auto [lo, hi_r] = layout.owned(b, r);
      EXPECT_EQ(lo, at);
      EXPECT_EQ(hi_r - lo, bucket.numel() / dp);
      at = hi_r;
    }
    EXPECT_EQ(at, bucket.end) << "the owned blocks partition bucket " << b;
    hi = bucket.begin;
  }
  EXPECT_EQ(hi, 0) << "the buckets cover [0, flat_numel)";
  for (int r = 0; r < dp; ++r) EXPECT_EQ(layout.owned_numel(r), flat_numel / dp);
}

TEST(GradBuckets, HandWorkedFiveParamsDp2) {
  // Params [0,10) [10,30) [30,60) [60,100) [100,150); 64-byte buckets = 16 elements, cut from the end:
  // 150 = 9 x 16 + 6, so nine full buckets and a 6-element one at the start.
  const auto params = contiguous({10, 20, 30, 40, 50});
  const BucketLayout layout = make_bucket_layout(params, 150, 2, 64);
  const std::vector<Range> want_ranges = {{134, 150}, {118, 134}, {102, 118}, {86, 102}, {70, 86},
                                          {54, 70},   {38, 54},   {22, 38},   {6, 22},   {0, 6}};
  EXPECT_EQ(ranges_of(layout), want_ranges);
  const std::vector<std::vector<int>> want_params = {{4}, {4}, {4}, {3, 4}, {3}, {2, 3}, {2}, {1, 2}, {0, 1}, {0}};
  ASSERT_EQ(layout.size(), 10);
  for (int b = 0; b < 10; ++b) EXPECT_EQ(layout.buckets[static_cast<std::size_t>(b)].params, want_params[b]) << b;
  EXPECT_EQ(layout.owned(0, 0), Range(134, 142));
  EXPECT_EQ(layout.owned(0, 1), Range(142, 150));
  EXPECT_EQ(layout.owned(3, 0), Range(86, 94));
  EXPECT_EQ(layout.owned(3, 1), Range(94, 102));
  EXPECT_EQ(layout.owned(9, 0), Range(0, 3));
  EXPECT_EQ(layout.owned(9, 1), Range(3, 6));
  EXPECT_EQ(layout.owned_numel(0), 75);
  check_invariants(layout, params, 150, 2, 64);
}

TEST(GradBuckets, HandWorkedBucketRoundedDownToDp) {
  // 100 bytes = 25 elements, rounded down to 24 for dp 3; 60 = 2 x 24 + 12.
  const auto params = contiguous({7, 13, 40});
  const BucketLayout layout = make_bucket_layout(params, 60, 3, 100);
  EXPECT_EQ(ranges_of(layout), (std::vector<Range>{{36, 60}, {12, 36}, {0, 12}}));
  EXPECT_EQ(layout.buckets[0].params, (std::vector<int>{2}));
  EXPECT_EQ(layout.buckets[1].params, (std::vector<int>{1, 2}));
  EXPECT_EQ(layout.buckets[2].params, (std::vector<int>{0, 1}));
  EXPECT_EQ(layout.owned(0, 2), Range(52, 60));
  EXPECT_EQ(layout.owned(2, 1), Range(4, 8));
  check_invariants(layout, params, 60, 3, 100);
}

TEST(GradBuckets, BucketIsAtLeastDpElements) {
  // 4 bytes is one element, less than dp = 8: every bucket is dp elements long.
  const auto params = contiguous({5, 11});
  const BucketLayout layout = make_bucket_layout(params, 16, 8, 4);
  EXPECT_EQ(ranges_of(layout), (std::vector<Range>{{8, 16}, {0, 8}}));
  EXPECT_EQ(layout.buckets[0].params, (std::vector<int>{1}));
  EXPECT_EQ(layout.buckets[1].params, (std::vector<int>{0, 1}));
  EXPECT_EQ(layout.owned(1, 5), Range(5, 6));
  check_invariants(layout, params, 16, 8, 4);
}

TEST(GradBuckets, BucketLargerThanTheBufferGivesOneBucket) {
  const auto params = contiguous({10, 20, 30, 40, 49});  // 149 elements, padded to 152 for dp 4
  const BucketLayout layout = make_bucket_layout(params, 152, 4, 25 << 20);
  ASSERT_EQ(layout.size(), 1);
  EXPECT_EQ(layout.buckets[0].begin, 0);
  EXPECT_EQ(layout.buckets[0].end, 152);
  EXPECT_EQ(layout.buckets[0].params, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(layout.owned(0, 3), Range(114, 152));
  check_invariants(layout, params, 152, 4, 25 << 20);
}

TEST(GradBuckets, PaddingAtTheEndBelongsToNoParam) {
  // 149 elements padded to 150 (dp 2): the padding sits in buckets[0], which holds only param 4.
  const auto params = contiguous({10, 20, 30, 40, 49});
  const BucketLayout layout = make_bucket_layout(params, 150, 2, 64);
  EXPECT_EQ(layout.buckets[0].begin, 134);
  EXPECT_EQ(layout.buckets[0].params, (std::vector<int>{4}));
  check_invariants(layout, params, 150, 2, 64);
  // A buffer that is all padding past the params: the trailing buckets hold no param.
  const BucketLayout wide = make_bucket_layout(contiguous({6}), 48, 2, 64);
  EXPECT_EQ(ranges_of(wide), (std::vector<Range>{{32, 48}, {16, 32}, {0, 16}}));
  EXPECT_TRUE(wide.buckets[0].params.empty());
  EXPECT_TRUE(wide.buckets[1].params.empty());
  EXPECT_EQ(wide.buckets[2].params, (std::vector<int>{0}));
}

TEST(GradBuckets, EmptyBufferHasNoBuckets) {
  const BucketLayout layout = make_bucket_layout({}, 0, 4, 1024);
  EXPECT_EQ(layout.size(), 0);
  EXPECT_EQ(layout.owned_numel(2), 0);
}

TEST(GradBuckets, InvariantsOverManyShapes) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 400; ++trial) {
    const int dp = 1 + static_cast<int>(rng() % 8);
    const int count = 1 + static_cast<int>(rng() % 12);
    std::vector<std::int64_t> sizes;
    std::int64_t total = 0;
    for (int i = 0; i < count; ++i) {
      sizes.push_back(1 + static_cast<std::int64_t>(rng() % 200));
      total += sizes.back();
    }
    const std::int64_t flat = (total + dp - 1) / dp * dp;
    const std::int64_t bucket_bytes = 1 + static_cast<std::int64_t>(rng() % 2000);
    const auto params = contiguous(sizes);
    SCOPED_TRACE("trial " + std::to_string(trial));
    check_invariants(make_bucket_layout(params, flat, dp, bucket_bytes), params, flat, dp, bucket_bytes);
  }
}

// A store in regions (models/parameter_store.h) lists its params out of address order and asks
// that no bucket straddle a region's start: each region is cut from its own end, its lowest bucket
// taking the remainder, and each bucket lists its params in address order.
TEST(GradBuckets, RegionsAreCutApartAndParamsMayComeInAnyOrder) {
  // p0 (10) and p2 (6) in region 0 at [0, 16), p1 (20) and p3 (8) in region 1 from 16.
  std::vector<FlatParam> params{{"p0", 0, 10}, {"p1", 16, 20}, {"p2", 10, 6}, {"p3", 36, 8}};
  const std::vector<std::int64_t> boundaries{16};
  const BucketLayout layout = make_bucket_layout(params, 44, 2, 12 * 4, boundaries);
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  for (const Bucket& b : layout.buckets) ranges.emplace_back(b.begin, b.end);
  const std::vector<std::pair<std::int64_t, std::int64_t>> want{{32, 44}, {20, 32}, {16, 20}, {4, 16}, {0, 4}};
  EXPECT_EQ(ranges, want) << layout.describe();
  EXPECT_EQ(layout.buckets[0].params, (std::vector<int>{1, 3}));
  EXPECT_EQ(layout.buckets[2].params, (std::vector<int>{1}));
  EXPECT_EQ(layout.buckets[3].params, (std::vector<int>{0, 2}));
  EXPECT_EQ(layout.buckets[4].params, (std::vector<int>{0}));
  // Without the boundary the region's start falls inside a bucket.
  const BucketLayout one = make_bucket_layout(params, 44, 2, 12 * 4);
  EXPECT_EQ(one.buckets[2].begin, 8);
  EXPECT_EQ(one.buckets[2].params, (std::vector<int>{0, 2, 1}));
}

TEST(GradBuckets, RejectsBadInputs) {
  const auto params = contiguous({10, 20});
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(params, 31, 2, 64); }),
                       "flat buffer (31 elements) must be padded to a multiple of the data-parallel size 2"));
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(params, 30, 2, 0); }), "bucket size must be > 0 bytes"));
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(params, 30, 2, -4); }), "bucket size must be > 0 bytes"));
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(params, 30, 0, 64); }), "data-parallel size must be >= 1"));
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(params, 28, 2, 64); }),
                       "parameter 'p1' [10, 30) lies outside the flat buffer of 28 elements"));

  auto overlapping = params;
  overlapping[1].offset = 9;
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(overlapping, 30, 2, 64); }),
                       "parameter 'p1' at offset 9 overlaps 'p0', which ends at 10"));
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(params, 30, 2, 64, std::vector<std::int64_t>{7}); }),
                       "boundary at element 7 is not a multiple of the data-parallel size 2"));
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(params, 30, 2, 64, std::vector<std::int64_t>{32}); }),
                       "boundary at element 32"));
  auto unnamed = params;
  unnamed[1].name.clear();
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(unnamed, 30, 2, 64); }), "parameter 1 has no name"));
  auto duplicate = params;
  duplicate[1].name = "p0";
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(duplicate, 30, 2, 64); }), "name 'p0' given twice"));
  auto empty = params;
  empty[0].numel = 0;
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(empty, 30, 2, 64); }), "parameter 'p0' has 0 elements"));
  auto weighted = params;
  weighted[0].norm_weight = -1.0;
  EXPECT_TRUE(contains(error_of([&] { make_bucket_layout(weighted, 30, 2, 64); }), "norm weight -1"));

  const BucketLayout layout = make_bucket_layout(params, 30, 2, 64);
  EXPECT_TRUE(contains(error_of([&] { (void)layout.owned(layout.size(), 0); }), "bucket 2 of 2"));
  EXPECT_TRUE(contains(error_of([&] { (void)layout.owned(0, 2); }), "dp rank 2 outside a group of 2"));
}

}  // namespace
}  // namespace mt
