// PairHeap against a std::set of (rank, position) under random adds, pops and re-rankings.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <utility>
#include <vector>

#include "data/tokenizer/pair_heap.h"

namespace mt::data {
namespace {

TEST(PairHeap, PopsTheLeastRankThenTheLeftmostPosition) {
  PairHeap heap(5);
  heap.add(0, 7);
  heap.add(1, 3);
  heap.add(2, PairHeap::kNone);
  heap.add(3, 3);
  heap.add(4, 9);
  heap.build();
  EXPECT_EQ(heap.top_rank(), 3u);
  EXPECT_EQ(heap.pop(), 1u);
  heap.update(4, 1);               // re-ranked down
  heap.update(0, PairHeap::kNone);  // removed
  heap.update(2, 3);               // added
  EXPECT_EQ(heap.pop(), 4u);
  EXPECT_EQ(heap.pop(), 2u);
  EXPECT_EQ(heap.pop(), 3u);
  EXPECT_TRUE(heap.empty());
}

TEST(PairHeap, AgreesWithAnOrderedSetUnderRandomUpdates) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 20; ++trial) {
    const std::uint32_t n = 1 + rng() % 300;
    PairHeap heap(n);
    std::set<std::pair<std::uint32_t, std::uint32_t>> reference;  // (rank, position)
    std::vector<std::uint32_t> rank(n, PairHeap::kNone);
    const auto random_rank = [&] { return rng() % 4 == 0 ? PairHeap::kNone : static_cast<std::uint32_t>(rng() % 20); };
    for (std::uint32_t p = 0; p < n; ++p) {
      rank[p] = random_rank();
      heap.add(p, rank[p]);
      if (rank[p] != PairHeap::kNone) reference.insert({rank[p], p});
    }
    heap.build();
    for (int step = 0; step < 2000; ++step) {
      ASSERT_EQ(heap.empty(), reference.empty());
      if (!reference.empty() && rng() % 3 == 0) {
        const auto [least_rank, least_position] = *reference.begin();
        ASSERT_EQ(heap.top_rank(), least_rank);
        ASSERT_EQ(heap.pop(), least_position);
        reference.erase(reference.begin());
        rank[least_position] = PairHeap::kNone;
        continue;
      }
      const std::uint32_t p = rng() % n, r = random_rank();
      if (rank[p] != PairHeap::kNone) reference.erase({rank[p], p});
      if (r != PairHeap::kNone) reference.insert({r, p});
      rank[p] = r;
      heap.update(p, r);
    }
  }
}

}  // namespace
}  // namespace mt::data
