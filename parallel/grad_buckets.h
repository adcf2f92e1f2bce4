// The gradient buckets of data parallelism as pure arithmetic: a model stage's parameters live in
// one flat fp32 buffer (and its gradients in another) at fixed offsets, the buffer padded at the
// end to a multiple of the data-parallel size; the buckets cut that buffer into contiguous element
// ranges, each reduced by one collective, each split into dp equal blocks (ZeRO-1 ownership).
// defines: FlatParam, Bucket, BucketLayout, make_bucket_layout
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mt {

// One parameter's place in the flat buffer.
struct FlatParam {
  std::string name;
  std::int64_t offset = 0, numel = 0;
  bool decay = false;
  // 1: counts in the global gradient norm; 0: not (a replica counted elsewhere: tp-replicated
  // layernorm/bias on tp rank != 0, the tied embedding's copy on the last pipeline stage).
  double norm_weight = 1.0;
  // Read only through the bf16 compute copy (read_only_as_compute_copy: the GEMM weights): ZeRO-1
  // under bf16 gathers a bucket of such parameters as its copy (parallel/zero_optimizer.h).
  bool compute_only = false;
};

struct Bucket {
  std::int64_t begin = 0, end = 0;  // element range [begin, end) of the flat buffer
  std::vector<int> params;          // indices of the params overlapping it, in address order

  std::int64_t numel() const { return end - begin; }
};

struct BucketLayout {
  std::int64_t flat_numel = 0;  // padded, a multiple of dp
  int dp = 1;
  // In REDUCTION order: buckets[0] holds the END of the flat buffer (the last layers, whose
  // gradients backward produces first); the last bucket starts at element 0.
  std::vector<Bucket> buckets;

  int size() const { return static_cast<int>(buckets.size()); }
  // This dp rank's block of bucket b: [begin + r*len/dp, begin + (r+1)*len/dp).
  std::pair<std::int64_t, std::int64_t> owned(int bucket, int dp_rank) const;
  // Elements of [0, flat_numel) that dp_rank owns over all buckets: always flat_numel / dp.
  std::int64_t owned_numel(int dp_rank) const;
  std::string describe() const;  // "10 buckets over 150 elements (dp 2): [134, 150) ... [0, 6)"
};

// Buckets are contiguous element ranges covering [0, flat_numel) exactly, each a multiple of dp
// elements long, cut from the END of the buffer in pieces of bucket_bytes/4 elements rounded down
// to a multiple of dp (at least dp); the lowest bucket (starting at 0) takes the remainder, so it
// may be shorter. A param may straddle buckets. Requires dp >= 1, flat_numel >= 0 and a multiple of
// dp, bucket_bytes > 0, and params with unique non-empty names, numel > 0, finite norm_weight >= 0,
// inside flat_numel without overlap, in any order (gaps belong to no param).
// bucket_bytes is --bucket-mb * 2^20. boundaries: flat offsets no bucket straddles (the regions of
// a store, models/parameter_store.h), each a multiple of dp inside [0, flat_numel]: the cutting
// starts again from each, so the lowest bucket of every region takes that region's remainder.
BucketLayout make_bucket_layout(std::span<const FlatParam> params, std::int64_t flat_numel, int dp,
                                std::int64_t bucket_bytes, std::span<const std::int64_t> boundaries = {});

}  // namespace mt
