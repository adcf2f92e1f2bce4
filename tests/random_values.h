// Random test inputs that repeat from run to run: n floats uniform in [lo, hi) from a seeded
// mt19937, the same numbers for the same seed on every platform this project builds on.
// defines: random_values
#pragma once

#include <cstddef>
#include <random>
#include <vector>

namespace mt::testing {

inline std::vector<float> random_values(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

}  // namespace mt::testing
