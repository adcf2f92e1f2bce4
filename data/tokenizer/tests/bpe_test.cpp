// BpeMerges on made-up ids: the merge loop against a line-by-line transcription of Encoder.js's bpe().
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "data/tokenizer/bpe.h"

namespace mt::data {
namespace {

using Ids = std::vector<std::int32_t>;

Ids applied(const BpeMerges& merges, Ids symbols) {
  merges.apply(symbols);
  return symbols;
}

// Encoder.js's bpe() on ids: per round, the pairs left to right into a rank -> pair table (a later
// pair overwrites an earlier one of the same rank), the lowest rank wins, and every non-overlapping
// occurrence of that pair merges, left to right.
Ids encoder_js_bpe(const BpeMerges& merges, Ids word) {
  while (word.size() > 1) {
    std::map<std::int32_t, std::pair<std::int32_t, std::int32_t>> min_pairs;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      if (const auto* m = merges.find(word[i], word[i + 1])) min_pairs[m->rank] = {word[i], word[i + 1]};
    }
    if (min_pairs.empty()) break;
    const auto [first, second] = min_pairs.begin()->second;
    const std::int32_t merged = merges.find(first, second)->result;
    Ids next;
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        next.push_back(merged);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word = std::move(next);
  }
  return word;
}

TEST(BpeMerges, MergesByRankAllOccurrencesLeftToRight) {
  BpeMerges m;  // a=0 b=1 c=2; ab=10 (rank 1), bc=11 (rank 0), aa=12 (rank 2), ab+c... none
  m.add(0, 1, {1, 10});
  m.add(1, 2, {0, 11});
  m.add(0, 0, {2, 12});
  EXPECT_EQ(applied(m, {}), Ids{});
  EXPECT_EQ(applied(m, {0}), Ids{0});
  EXPECT_EQ(applied(m, {0, 1, 2}), (Ids{0, 11}));  // bc outranks ab
  EXPECT_EQ(applied(m, {0, 1, 0, 1}), (Ids{10, 10}));
  EXPECT_EQ(applied(m, {0, 0, 0}), (Ids{12, 0}));  // non-overlapping, from the left
  EXPECT_EQ(applied(m, {0, 0, 0, 0}), (Ids{12, 12}));
  EXPECT_EQ(applied(m, {2, 2}), (Ids{2, 2}));
}

TEST(BpeMerges, EqualRanksMergeTheRightmostPairFirst) {
  // Two pairs sharing a rank (Encoder.js's key collisions): the rightmost pair kind goes first.
  BpeMerges m;
  m.add(0, 1, {5, 10});
  m.add(1, 2, {5, 11});
  EXPECT_EQ(applied(m, {0, 1, 2}), (Ids{0, 11}));
  EXPECT_EQ(applied(m, {1, 2, 0, 1}), (Ids{11, 10}));
  EXPECT_EQ(encoder_js_bpe(m, {0, 1, 2}), (Ids{0, 11}));
}

TEST(BpeMerges, AgreesWithEncoderJsLoopOnRandomTables) {
  std::mt19937 rng(1234);
  for (int table = 0; table < 50; ++table) {
    BpeMerges m;
    const int alphabet = 4;
    std::int32_t next_id = alphabet, rank = 0;
    for (int k = 0; k < 30; ++k) {
      std::uniform_int_distribution<std::int32_t> pick(0, next_id - 1);
      const std::int32_t left = pick(rng), right = pick(rng);
      if (rng() % 4 != 0) ++rank;  // sometimes a rank shared with the previous merge
      // Results are sometimes existing ids, as colliding keys produce.
      const std::int32_t result = rng() % 5 == 0 ? pick(rng) : next_id++;
      m.add(left, right, {rank, result});
    }
    for (int word = 0; word < 100; ++word) {
      Ids symbols(1 + rng() % (word % 10 == 0 ? 400 : 40));
      for (auto& s : symbols) s = static_cast<std::int32_t>(rng() % alphabet);
      ASSERT_EQ(applied(m, symbols), encoder_js_bpe(m, symbols)) << "table " << table << " word " << word;
    }
  }
}

TEST(BpeMerges, AgreesWithEncoderJsLoopOnLongWords) {
  // Words of thousands of symbols, as a piece without whitespace gives: long rounds of one rank
  // (runs of one symbol), merges that feed later merges, and shared ranks.
  std::mt19937 rng(4321);
  for (int table = 0; table < 6; ++table) {
    BpeMerges m;
    const int alphabet = 3 + table % 3;
    std::int32_t next_id = alphabet, rank = 0;
    for (int k = 0; k < 200; ++k) {
      std::uniform_int_distribution<std::int32_t> pick(0, next_id - 1);
      const std::int32_t left = pick(rng), right = pick(rng);
      if (rng() % 8 != 0) ++rank;
      m.add(left, right, {rank, next_id++});
    }
    for (const std::size_t length : {1000u, 5000u}) {
      Ids random(length), runs;
      for (auto& s : random) s = static_cast<std::int32_t>(rng() % alphabet);
      while (runs.size() < length) runs.insert(runs.end(), 1 + rng() % 40, static_cast<std::int32_t>(rng() % alphabet));
      ASSERT_EQ(applied(m, random), encoder_js_bpe(m, random)) << "table " << table << " length " << length;
      ASSERT_EQ(applied(m, runs), encoder_js_bpe(m, runs)) << "table " << table << " length " << length;
    }
    const Ids same(20000, 0);  // one round of 10000 merges, then rounds of their merges
    ASSERT_EQ(applied(m, same), encoder_js_bpe(m, same)) << "table " << table;
  }
}

}  // namespace
}  // namespace mt::data
