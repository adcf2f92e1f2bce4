// The BPE tokens of pre-token pieces already encoded, shared by the BPE tokenizers so that common
// words cost one lookup. Bounded: cleared when full, and long pieces (rare) are not kept. Safe to
// use from several threads at once.
// defines: PieceCache
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mt::data {

class PieceCache {
 public:
  // Appends the cached tokens of `piece` to `out`; false (and `out` unchanged) when not cached.
  bool append(std::string_view piece, std::vector<std::int32_t>& out) const;
  // Keeps `tokens` as `piece`'s (nothing for a piece too long to be worth keeping).
  void keep(std::string_view piece, std::span<const std::int32_t> tokens);

 private:
  static constexpr std::size_t kMaxPieceBytes = 64;    // longer pieces are rare: not worth keeping
  static constexpr std::size_t kMaxEntries = 1u << 18;  // about 30 MB

  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::vector<std::int32_t>, Hash, std::equal_to<>> tokens_;
};

}  // namespace mt::data
