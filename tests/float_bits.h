// The bit patterns of floats, for tests that demand bitwise equality (memcmp-like, NaN-safe).
// defines: bits, same_bits
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/tensor.h"

namespace mt::testing {

inline std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Every element of an fp32 tensor (read back from its device).
inline std::vector<std::uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = t.to_host<float>();
  std::vector<std::uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

// Equal sizes and equal bits, element by element.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace mt::testing
