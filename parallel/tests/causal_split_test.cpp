// The load-balanced causal split (parallel/causal_split.h), pure arithmetic:
//  - rank r's local rows hold chunks r then 2cp-1-r, position by position (cp 2 written out);
//  - over the cp ranks every position is held exactly once;
//  - masks: Full before, Causal on the diagonal, skipped after;
//  - visible pairs in query slot, kv slot order, and every rank sees the same number of chunk
//    pairs over the ring (the balance the split is for);
//  - a sequence that does not divide into 2 x cp chunks is refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "parallel/causal_split.h"
#include "runtime/error.h"

namespace mt {
namespace {

using nn_math::BlockMask;

TEST(CausalSplit, RanksHoldChunkAndMirror) {
  const CausalSplit s(8, 2);
  EXPECT_EQ(s.chunk(), 2);
  EXPECT_EQ(s.local_rows(), 4);
  EXPECT_EQ(s.positions(0), (std::vector<std::int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(s.positions(1), (std::vector<std::int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(CausalSplit(6, 1).positions(0), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(CausalSplit, EveryPositionHeldOnce) {
  for (int cp : {1, 2, 3, 4, 8}) {
    const CausalSplit s(2 * cp * 3, cp);
    std::vector<int> held(static_cast<std::size_t>(s.seq), 0);
    for (int r = 0; r < cp; ++r)
      for (std::int64_t p : s.positions(r)) ++held.at(static_cast<std::size_t>(p));
    for (int n : held) EXPECT_EQ(n, 1) << "cp " << cp;
  }
}

TEST(CausalSplit, MaskByChunkOrder) {
  EXPECT_EQ(CausalSplit::mask(3, 1), BlockMask::Full);
  EXPECT_EQ(CausalSplit::mask(2, 2), BlockMask::Causal);
  EXPECT_FALSE(CausalSplit::mask(1, 3).has_value());
}

TEST(CausalSplit, VisiblePairsAreOrderedAndBalanced) {
  const CausalSplit s(16, 2);  // rank 0: chunks 0, 3; rank 1: chunks 1, 2
  const std::vector<ChunkPair> own = s.visible_pairs(0, 0);
  ASSERT_EQ(own.size(), 3u);
  EXPECT_TRUE(own[0].q_slot == 0 && own[0].kv_slot == 0 && own[0].mask == BlockMask::Causal);
  EXPECT_TRUE(own[1].q_slot == 1 && own[1].kv_slot == 0 && own[1].mask == BlockMask::Full);
  EXPECT_TRUE(own[2].q_slot == 1 && own[2].kv_slot == 1 && own[2].mask == BlockMask::Causal);
  const std::vector<ChunkPair> visiting = s.visible_pairs(0, 1);  // chunk 3 sees 1 and 2; chunk 0 nothing
  ASSERT_EQ(visiting.size(), 2u);
  EXPECT_TRUE(visiting[0].q_chunk == 3 && visiting[0].kv_chunk == 1 && visiting[1].kv_chunk == 2);
  for (int cp : {1, 2, 4, 8}) {
    const CausalSplit split(2 * cp, cp);
    for (int r = 0; r < cp; ++r) {
      std::size_t pairs = 0;
      for (int src = 0; src < cp; ++src) pairs += split.visible_pairs(r, src).size();
      EXPECT_EQ(pairs, static_cast<std::size_t>(2 * cp + 1)) << "cp " << cp << " rank " << r;
    }
  }
}

TEST(CausalSplit, RefusesUnevenSequences) {
  EXPECT_THROW(CausalSplit(10, 3), Error);
  EXPECT_THROW(CausalSplit(8, 0), Error);
  EXPECT_THROW(CausalSplit(8, 2).position(2, 0), Error);
}

}  // namespace
}  // namespace mt
