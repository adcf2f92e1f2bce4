// The adjacent pairs of one BPE merge, least (rank, position) first: an indexed binary min-heap with
// at most one entry per position. A merge re-ranks the two pairs it changes in place, so no stale
// entries pile up and the heap's memory stays 12 bytes a position however the merge goes (the
// standard heaps cannot re-rank an entry they hold). Positions and ranks are 32-bit.
// defines: PairHeap
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace mt::data {

class PairHeap {
 public:
  static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();  // no pair, no entry

  // An empty heap over positions [0, positions). Throws Error when positions >= 2^32 - 1.
  explicit PairHeap(std::size_t positions);

  // Before the first pop: gives `position` the rank `rank` (kNone: no entry), in heap order or not.
  void add(std::uint32_t position, std::uint32_t rank);
  // After the adds: orders the heap, in linear time.
  void build();

  bool empty() const { return entries_.empty(); }
  std::uint32_t top_rank() const { return static_cast<std::uint32_t>(entries_.front() >> 32); }
  // Removes the least (rank, position) and returns its position.
  std::uint32_t pop();
  // Sets the rank of `position`'s entry, adding or (kNone) removing it.
  void update(std::uint32_t position, std::uint32_t rank);

  // Heap memory per position, for tests that bound a merge's memory.
  static constexpr std::size_t kBytesPerPosition = sizeof(std::uint64_t) + sizeof(std::uint32_t);

 private:
  static std::uint64_t key(std::uint32_t position, std::uint32_t rank) {
    return (static_cast<std::uint64_t>(rank) << 32) | position;
  }
  void place(std::size_t slot, std::uint64_t entry);
  void sift_up(std::size_t slot);
  void sift_down(std::size_t slot);
  void remove_at(std::size_t slot);

  std::vector<std::uint64_t> entries_;  // (rank << 32 | position), a binary heap
  std::vector<std::uint32_t> slot_;     // position -> its index in entries_, or kNone
};

}  // namespace mt::data
