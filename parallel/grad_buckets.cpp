#include "parallel/grad_buckets.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <unordered_set>

#include "runtime/error.h"

namespace mt {

std::pair<std::int64_t, std::int64_t> BucketLayout::owned(int bucket, int dp_rank) const {
  MT_CHECK(bucket >= 0 && bucket < size(), "bucket ", bucket, " of ", size());
  MT_CHECK(dp_rank >= 0 && dp_rank < dp, "dp rank ", dp_rank, " outside a group of ", dp);
  const Bucket& b = buckets[static_cast<std::size_t>(bucket)];
  const std::int64_t block = b.numel() / dp;
  return {b.begin + dp_rank * block, b.begin + (dp_rank + 1) * block};
}

std::int64_t BucketLayout::owned_numel(int dp_rank) const {
  std::int64_t total = 0;
  for (int b = 0; b < size(); ++b) {
    const auto [lo, hi] = owned(b, dp_rank);
    total += hi - lo;
  }
  return total;
}

std::string BucketLayout::describe() const {
  std::ostringstream text;
  text << buckets.size() << (buckets.size() == 1 ? " bucket" : " buckets") << " over " << flat_numel
       << " elements (dp " << dp << "):";
  for (const Bucket& b : buckets) text << " [" << b.begin << ", " << b.end << ")";
  return text.str();
}

BucketLayout make_bucket_layout(std::span<const FlatParam> params, std::int64_t flat_numel, int dp,
                                std::int64_t bucket_bytes, std::span<const std::int64_t> boundaries) {
  MT_REQUIRE(dp >= 1, "gradient buckets: the data-parallel size must be >= 1, got ", dp);
  MT_REQUIRE(flat_numel >= 0 && flat_numel % dp == 0, "gradient buckets: the flat buffer (", flat_numel,
             " elements) must be padded to a multiple of the data-parallel size ", dp);
  MT_REQUIRE(bucket_bytes > 0, "gradient buckets: the bucket size must be > 0 bytes, got ", bucket_bytes);

  std::unordered_set<std::string> names;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const FlatParam& p = params[i];
    MT_REQUIRE(!p.name.empty(), "gradient buckets: parameter ", i, " has no name");
    MT_REQUIRE(names.insert(p.name).second, "gradient buckets: parameter name '", p.name, "' given twice");
    MT_REQUIRE(p.numel > 0, "gradient buckets: parameter '", p.name, "' has ", p.numel, " elements");
    MT_REQUIRE(p.offset >= 0 && p.offset + p.numel <= flat_numel, "gradient buckets: parameter '", p.name, "' [",
               p.offset, ", ", p.offset + p.numel, ") lies outside the flat buffer of ", flat_numel, " elements");
    MT_REQUIRE(std::isfinite(p.norm_weight) && p.norm_weight >= 0.0, "gradient buckets: parameter '", p.name,
               "' has norm weight ", p.norm_weight, " (must be finite and >= 0)");
  }
  // The params in address order (a store laid out in regions lists them in another).
  std::vector<int> by_offset(params.size());
  std::iota(by_offset.begin(), by_offset.end(), 0);
  std::stable_sort(by_offset.begin(), by_offset.end(), [&](int a, int b) {
    return params[static_cast<std::size_t>(a)].offset < params[static_cast<std::size_t>(b)].offset;
  });
  for (std::size_t k = 1; k < by_offset.size(); ++k) {
    const FlatParam& prev = params[static_cast<std::size_t>(by_offset[k - 1])];
    const FlatParam& p = params[static_cast<std::size_t>(by_offset[k])];
    MT_REQUIRE(p.offset >= prev.offset + prev.numel, "gradient buckets: parameter '", p.name, "' at offset ",
               p.offset, " overlaps '", prev.name, "', which ends at ", prev.offset + prev.numel);
  }

  for (const std::int64_t at : boundaries)
    MT_REQUIRE(at >= 0 && at <= flat_numel && at % dp == 0, "gradient buckets: the boundary at element ", at,
               " is not a multiple of the data-parallel size ", dp, " inside the flat buffer of ", flat_numel,
               " elements");

  BucketLayout layout;
  layout.flat_numel = flat_numel;
  layout.dp = dp;
  const std::int64_t piece = std::max<std::int64_t>(dp, bucket_bytes / 4 / dp * dp);
  for (std::int64_t hi = flat_numel; hi > 0;) {
    // The highest boundary below hi: a bucket ends there.
    std::int64_t floor = 0;
    for (const std::int64_t at : boundaries)
      if (at < hi) floor = std::max(floor, at);
    const std::int64_t lo = std::max<std::int64_t>(floor, hi - piece);
    Bucket bucket;
    bucket.begin = lo;
    bucket.end = hi;
    layout.buckets.push_back(std::move(bucket));
    hi = lo;
  }
  // Params overlapping each bucket, in address order: the buckets are in decreasing address
  // order, so walk the params from the highest one down.
  int k = static_cast<int>(by_offset.size()) - 1;
  const auto at = [&](int q) -> const FlatParam& { return params[static_cast<std::size_t>(by_offset[static_cast<std::size_t>(q)])]; };
  for (Bucket& bucket : layout.buckets) {
    while (k >= 0 && at(k).offset >= bucket.end) --k;
    for (int q = k; q >= 0; --q) {
      if (at(q).offset + at(q).numel <= bucket.begin) break;
      bucket.params.push_back(by_offset[static_cast<std::size_t>(q)]);
    }
    std::reverse(bucket.params.begin(), bucket.params.end());
  }
  return layout;
}

}  // namespace mt
