// defines: BpeMerges (see bpe.h)
#include "data/tokenizer/bpe.h"

#include <algorithm>

namespace mt::data {

void BpeMerges::add(std::int32_t left, std::int32_t right, Merge merge) {
  merges_[key(left, right)] = merge;
}

const BpeMerges::Merge* BpeMerges::find(std::int32_t left, std::int32_t right) const {
  const auto it = merges_.find(key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeMerges::apply(std::vector<std::int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;
  constexpr int kEnd = -1;

  // A linked list over the symbols (a merge keeps the left node and drops the right one, so list
  // order is index order), and a heap of the pairs that have a rank. Heap entries go stale when a
  // merge changes a pair; they are checked when they come out instead of being removed.
  std::vector<int> next(n), prev(n);
  std::vector<char> alive(n, 1);
  for (int i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : kEnd;
    prev[i] = i - 1;
  }
  struct Pair {
    std::int32_t rank;
    int pos;  // of the left symbol
    std::int32_t left, right;
  };
  const auto later = [](const Pair& x, const Pair& y) { return x.rank > y.rank; };
  std::vector<Pair> heap;
  const auto push = [&](int i) {
    if (next[i] == kEnd) return;
    if (const Merge* m = find(symbols[i], symbols[next[i]])) {
      heap.push_back({m->rank, i, symbols[i], symbols[next[i]]});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  const auto pop = [&] {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Pair p = heap.back();
    heap.pop_back();
    return p;
  };
  const auto current = [&](const Pair& p) {
    return alive[p.pos] && symbols[p.pos] == p.left && next[p.pos] != kEnd &&
           symbols[next[p.pos]] == p.right;
  };
  for (int i = 0; i < n; ++i) push(i);

  // One round of Encoder.js's loop: the lowest rank among the current pairs; of the pairs with it,
  // the rightmost one's kind (several kinds share a rank only through Encoder.js's key
  // collisions); then every non-overlapping occurrence of that kind, left to right. Pairs made by
  // this round's merges wait for the next round, as Encoder.js recomputes its pairs only then.
  std::vector<Pair> round, deferred;
  std::vector<int> touched;
  while (!heap.empty()) {
    if (!current(heap.front())) {
      pop();
      continue;
    }
    const std::int32_t rank = heap.front().rank;
    round.clear();
    while (!heap.empty() && heap.front().rank == rank) {
      const Pair p = pop();
      if (current(p)) round.push_back(p);
    }
    std::sort(round.begin(), round.end(), [](const Pair& x, const Pair& y) { return x.pos < y.pos; });
    const std::int32_t first = round.back().left, second = round.back().right;
    const std::int32_t merged = find(first, second)->result;
    deferred.clear();
    touched.clear();
    int last_pos = kEnd;
    for (const Pair& p : round) {
      if (p.left != first || p.right != second) {
        deferred.push_back(p);
      } else if (p.pos != last_pos && current(p)) {  // not a duplicate, not overlapped
        const int j = next[p.pos];
        symbols[p.pos] = merged;
        alive[j] = 0;
        next[p.pos] = next[j];
        if (next[j] != kEnd) prev[next[j]] = p.pos;
        touched.push_back(p.pos);
      }
      last_pos = p.pos;
    }
    for (const Pair& p : deferred) {
      heap.push_back(p);
      std::push_heap(heap.begin(), heap.end(), later);
    }
    for (const int t : touched) {
      push(t);
      if (prev[t] != kEnd) push(prev[t]);
    }
  }

  int out = 0;
  for (int i = 0; i != kEnd; i = next[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

}  // namespace mt::data
