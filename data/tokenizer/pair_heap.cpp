// defines: PairHeap (see pair_heap.h)
#include "data/tokenizer/pair_heap.h"

#include <algorithm>
#include <functional>

#include "runtime/error.h"  // defines: MT_FAIL

namespace mt::data {

PairHeap::PairHeap(std::size_t positions) {
  if (positions >= kNone) MT_FAIL("a BPE merge over ", positions, " bytes: the limit is 2^32 - 2");
  entries_.reserve(positions);
  slot_.assign(positions, kNone);
}

void PairHeap::add(std::uint32_t position, std::uint32_t rank) {
  if (rank != kNone) entries_.push_back(key(position, rank));
}

void PairHeap::build() {
  // std::make_heap lays out the same implicit tree (parent of i at (i - 1) / 2) the sifts below use.
  std::make_heap(entries_.begin(), entries_.end(), std::greater<>());
  for (std::size_t i = 0; i < entries_.size(); ++i) slot_[static_cast<std::uint32_t>(entries_[i])] = static_cast<std::uint32_t>(i);
}

std::uint32_t PairHeap::pop() {
  const auto position = static_cast<std::uint32_t>(entries_.front());
  remove_at(0);
  return position;
}

void PairHeap::update(std::uint32_t position, std::uint32_t rank) {
  const std::uint32_t slot = slot_[position];
  if (slot == kNone) {
    if (rank == kNone) return;
    entries_.push_back(key(position, rank));
    slot_[position] = static_cast<std::uint32_t>(entries_.size() - 1);
    sift_up(entries_.size() - 1);
  } else if (rank == kNone) {
    remove_at(slot);
  } else {
    const std::uint64_t old = entries_[slot];
    entries_[slot] = key(position, rank);
    if (entries_[slot] < old) {
      sift_up(slot);
    } else {
      sift_down(slot);
    }
  }
}

void PairHeap::place(std::size_t slot, std::uint64_t entry) {
  entries_[slot] = entry;
  slot_[static_cast<std::uint32_t>(entry)] = static_cast<std::uint32_t>(slot);
}

void PairHeap::sift_up(std::size_t slot) {
  const std::uint64_t entry = entries_[slot];
  while (slot > 0) {
    const std::size_t parent = (slot - 1) / 2;
    if (entries_[parent] <= entry) break;
    place(slot, entries_[parent]);
    slot = parent;
  }
  place(slot, entry);
}

void PairHeap::sift_down(std::size_t slot) {
  const std::uint64_t entry = entries_[slot];
  const std::size_t n = entries_.size();
  while (true) {
    std::size_t child = 2 * slot + 1;
    if (child >= n) break;
    if (child + 1 < n && entries_[child + 1] < entries_[child]) ++child;
    if (entry <= entries_[child]) break;
    place(slot, entries_[child]);
    slot = child;
  }
  place(slot, entry);
}

void PairHeap::remove_at(std::size_t slot) {
  slot_[static_cast<std::uint32_t>(entries_[slot])] = kNone;
  const std::uint64_t last = entries_.back();
  entries_.pop_back();
  if (slot == entries_.size()) return;
  entries_[slot] = last;
  // The moved entry may belong above or below its new place.
  if (slot > 0 && last < entries_[(slot - 1) / 2]) {
    sift_up(slot);
  } else {
    sift_down(slot);
  }
}

}  // namespace mt::data
