// defines: BpeMerges (see bpe.h)
#include "data/tokenizer/bpe.h"

#include "data/tokenizer/pair_heap.h"  // defines: PairHeap

namespace mt::data {

void BpeMerges::add(std::int32_t left, std::int32_t right, Merge merge) {
  merges_[key(left, right)] = merge;
}

const BpeMerges::Merge* BpeMerges::find(std::int32_t left, std::int32_t right) const {
  const auto it = merges_.find(key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeMerges::apply(std::vector<std::int32_t>& symbols) const {
  const std::size_t n = symbols.size();
  if (n < 2) return;
  constexpr std::uint32_t kEnd = PairHeap::kNone;
  constexpr std::int32_t kGone = -1;  // a symbol merged into the one on its left

  // A linked list over the symbols (a merge keeps the left node and drops the right one, so list
  // order is index order) and a heap holding, for each node, the rank of the pair it starts.
  std::vector<std::uint32_t> next(n), prev(n);
  for (std::size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? static_cast<std::uint32_t>(i + 1) : kEnd;
    prev[i] = i > 0 ? static_cast<std::uint32_t>(i - 1) : kEnd;
  }
  const auto rank_at = [&](std::uint32_t i) {
    if (next[i] == kEnd) return PairHeap::kNone;
    const Merge* m = find(symbols[i], symbols[next[i]]);
    return m == nullptr ? PairHeap::kNone : static_cast<std::uint32_t>(m->rank);
  };
  PairHeap heap(n);
  for (std::uint32_t i = 0; i < n; ++i) heap.add(i, rank_at(i));
  heap.build();

  // One round of Encoder.js's loop: the lowest rank among the current pairs; of the pairs with it,
  // the rightmost one's kind (several kinds share a rank only through Encoder.js's key
  // collisions); then every non-overlapping occurrence of that kind, left to right. The pairs this
  // round changes are ranked again only after it, as Encoder.js recomputes its pairs only then.
  std::vector<std::uint32_t> round;  // the round's pairs, in position order (the heap's tie order)
  while (!heap.empty()) {
    const std::uint32_t rank = heap.top_rank();
    round.clear();
    while (!heap.empty() && heap.top_rank() == rank) round.push_back(heap.pop());
    const std::int32_t first = symbols[round.back()], second = symbols[next[round.back()]];
    const std::int32_t merged = find(first, second)->result;
    for (const std::uint32_t p : round) {
      // Gone: the right half of a merge just made on its left (an overlapping occurrence).
      if (symbols[p] == kGone || symbols[p] != first || symbols[next[p]] != second) continue;
      const std::uint32_t q = next[p];
      symbols[p] = merged;
      symbols[q] = kGone;
      heap.update(q, PairHeap::kNone);
      next[p] = next[q];
      if (next[q] != kEnd) prev[next[q]] = p;
    }
    // A merge changes the pair it starts and the one before it; the round's other kinds wait as
    // they are. All of them are among the round's nodes and their predecessors.
    for (const std::uint32_t p : round) {
      if (symbols[p] == kGone) continue;
      heap.update(p, rank_at(p));
      if (prev[p] != kEnd) heap.update(prev[p], rank_at(prev[p]));
    }
  }

  std::size_t out = 0;
  for (std::uint32_t i = 0; i != kEnd; i = next[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

}  // namespace mt::data
