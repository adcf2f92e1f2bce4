// GPT-2's byte-pair merges on token ids, applied exactly as the reference Encoder.js (npm
// gpt-3-encoder) applies them: repeatedly take the adjacent pair of lowest rank and merge all its
// non-overlapping occurrences, left to right, until no adjacent pair has a rank.
// defines: BpeMerges
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace mt::data {

class BpeMerges {
 public:
  struct Merge {
    std::int32_t rank = 0;    // lower merges first
    std::int32_t result = 0;  // id of the merged token
  };

  // (left, right) merges at `rank` into `result`. A pair added again takes the later values.
  void add(std::int32_t left, std::int32_t right, Merge merge);
  // The merge of (left, right), or nullptr when the pair never merges.
  const Merge* find(std::int32_t left, std::int32_t right) const;
  std::size_t size() const { return merges_.size(); }

  // Merges `symbols` (token ids >= 0, initially one per byte) in place. When two different pairs
  // share the lowest rank (only Encoder.js's key collisions make that happen, see gpt2_vocab.cpp),
  // the rightmost one is merged first, as Encoder.js does. O(length log length) time; 20 bytes of
  // state a symbol besides the symbols, and 4 a pair of the largest round (one rank's pairs).
  void apply(std::vector<std::int32_t>& symbols) const;

 private:
  static std::uint64_t key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }
  std::unordered_map<std::uint64_t, Merge> merges_;
};

}  // namespace mt::data
