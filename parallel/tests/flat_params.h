// Made-up parameter lists for the data-parallel tests: named params laid one after another in a
// flat buffer, padded to a multiple of dp as a model stage pads its own.
// defines: contiguous, params_numel, padded
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/grad_buckets.h"

namespace mt::testing {

// w0, w1, ... of the given sizes, back to back; every other one decays.
inline std::vector<FlatParam> contiguous(const std::vector<std::int64_t>& sizes) {
  std::vector<FlatParam> params;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    params.push_back({"w" + std::to_string(i), offset, sizes[i], i % 2 == 0, 1.0});
    offset += sizes[i];
  }
  return params;
}

inline std::int64_t params_numel(const std::vector<FlatParam>& params) {
  return params.empty() ? 0 : params.back().offset + params.back().numel;
}

// The flat buffer's length: the params rounded up to a multiple of dp.
inline std::int64_t padded(const std::vector<FlatParam>& params, int dp) {
  return (params_numel(params) + dp - 1) / dp * dp;
}

}  // namespace mt::testing
