// TiktokenTokenizer and load_tiktoken_ranks on a small ranks file written here (no downloaded files):
// the merge order (lowest rank, leftmost first), tiktoken's whole-piece shortcut, special tokens,
// decode, and every error of a bad ranks file.
#include <gtest/gtest.h>

#include <random>

#include "data/tokenizer/long_piece.h"  // defines: bpe_by_windows, WindowSizes
#include "data/tokenizer/tests/reference_test_support.h"  // defines: base64
#include "data/tokenizer/tests/tokenizer_test_support.h"  // defines: ScratchDir, write_file
#include "data/tokenizer/tiktoken_encoding.h"
#include "data/tokenizer/tiktoken_tokenizer.h"
#include "data/tokenizer/tokenizer.h"
#include "tests/test_helpers.h"  // defines: error_of, contains

namespace mt::data {
namespace {
using mt::testing::contains;
using mt::testing::error_of;
using testing::ScratchDir;
using Ids = std::vector<std::int32_t>;

// Every byte b has rank b; then the given tokens, from rank 256 on.
std::string ranks_text(const std::vector<std::string>& merged) {
  std::string text;
  for (int b = 0; b < 256; ++b) text += testing::base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  for (std::size_t i = 0; i < merged.size(); ++i) text += testing::base64(merged[i]) + " " + std::to_string(256 + i) + "\n";
  return text;
}

TiktokenEncoding tiny_encoding(std::int32_t ranks) {
  TiktokenEncoding e = *tiktoken_encoding("cl100k");
  e.name = "tiny";
  e.ranks = ranks;
  e.special_tokens = {{"<|endoftext|>", ranks + 1}};  // ranks itself stays unused
  return e;
}

TiktokenTokenizer tiny(const std::vector<std::string>& merged) {
  ScratchDir dir;
  testing::write_file(dir.path() / "tiny.tiktoken", ranks_text(merged));
  auto ranks = load_tiktoken_ranks(dir.path() / "tiny.tiktoken", 256 + static_cast<std::int32_t>(merged.size()));
  const TiktokenEncoding encoding = tiny_encoding(static_cast<std::int32_t>(ranks.size()));
  return TiktokenTokenizer(encoding, std::move(ranks));
}

Ids merged(const TiktokenTokenizer& tok, std::string_view piece) {
  Ids out;
  tok.merge(piece, out);
  return out;
}

TEST(TiktokenTokenizer, MergesTheLowestRankedPairLeftmostFirst) {
  const auto ab_first = tiny({"ab", "bc"});
  EXPECT_EQ(merged(ab_first, "abc"), (Ids{256, 'c'}));
  const auto bc_first = tiny({"bc", "ab"});
  EXPECT_EQ(merged(bc_first, "abc"), (Ids{'a', 256}));
  // "aa" occurs twice in "aaa": the left one merges (GPT-2's Encoder.js would too, but tiktoken
  // decides pair by pair).
  const auto aa = tiny({"aa", "aaaa"});
  EXPECT_EQ(merged(aa, "aaa"), (Ids{256, 'a'}));
  EXPECT_EQ(merged(aa, "aaaa"), (Ids{257}));
  EXPECT_EQ(merged(aa, "aaaaaaa"), (Ids{257, 256, 'a'}));
  EXPECT_EQ(merged(aa, ""), Ids{});
}

TEST(TiktokenTokenizer, APieceThatIsATokenIsThatToken) {
  // BPE cannot reach "xyz" (no "xy" or "yz"), but tiktoken looks the whole piece up first.
  const auto tok = tiny({"xyz"});
  EXPECT_EQ(merged(tok, "xyz"), (Ids{'x', 'y', 'z'}));
  EXPECT_EQ(tok.encode("xyz"), (Ids{256}));
  EXPECT_EQ(tok.encode("xyz xyz"), (Ids{256, ' ', 'x', 'y', 'z'}));  // " xyz" is no token: BPE
}

TEST(TiktokenTokenizer, SpecialTokensAreDecodedButNeverEncoded) {
  const auto tok = tiny({"ab"});
  EXPECT_EQ(tok.name(), "tiny");
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.eot_token(), 258);
  EXPECT_EQ(tok.decode(Ids{258, 256}), "<|endoftext|>ab");
  const Ids eot_text = tok.encode("<|endoftext|>");
  EXPECT_EQ(std::find(eot_text.begin(), eot_text.end(), 258), eot_text.end());
  EXPECT_EQ(tok.decode(eot_text), "<|endoftext|>");
  EXPECT_TRUE(contains(error_of([&] { tok.decode(Ids{257}); }), "257 is unused"));
  EXPECT_TRUE(contains(error_of([&] { tok.decode(Ids{1, 259}); }), "at position 1"));
  // Invalid UTF-8 reads as U+FFFD, as in gpt2.
  EXPECT_EQ(tok.decode(tok.encode("a\xff")), "a\xEF\xBF\xBD");
}

// ---- long pieces: the heap and the windows against tiktoken's loop as it reads ----

Ids merged_linear(const TiktokenTokenizer& tok, std::string_view piece) {
  Ids out;
  tok.merge_linear(piece, out);
  return out;
}

Ids merged_heap(const TiktokenTokenizer& tok, std::string_view piece) {
  Ids out;
  tok.merge_heap(piece, out);
  return out;
}

// Long pieces of the kinds a text without whitespace makes: one class of characters, a few, runs
// of one character, multi-byte UTF-8.
std::vector<std::string> long_pieces(std::mt19937& rng) {
  const std::vector<std::vector<std::string>> kinds = {
      {"a", "b", "c", "d", "e", "f"}, {"a"}, {"0", "1", "2"}, {"!", "?", "-"}, {"\xc3\xa9", "\xc3\x9f", "e"},
      {"\xe6\x97\xa5", "\xe6\x9c\xac"}, {"\xf0\x9f\x99\x82", "a"},
      {"a", "b", "c", "d", "e", "f", "0", "1", "2", "!", "?", "-", "\xc3\xa9", "\xe6\x97\xa5"}};
  std::vector<std::string> pieces;
  for (const auto& kind : kinds) {
    for (const std::size_t length : {101u, 500u, 3000u}) pieces.push_back(testing::random_run(kind, length, rng));
  }
  std::string runs;  // runs of one character, of random lengths
  while (runs.size() < 4000) runs += std::string(1 + rng() % 60, "abc"[rng() % 3]);
  pieces.push_back(runs);
  return pieces;
}

TEST(TiktokenTokenizer, LongPiecesMergeAsTheLinearLoopDoes) {
  const std::vector<std::string> characters = {"a", "b", "c", "d", "e", "f", "0", "1", "2", "!", "?", "-",
                                               "\xc3\xa9", "\xc3\x9f", "\xe6\x97\xa5", "\xe6\x9c\xac", "\xf0\x9f\x99\x82"};
  std::vector<std::string> tokens;
  for (const auto& [left, right] : testing::random_merges(characters, 1500, 11)) tokens.push_back(left + right);
  auto tok = tiny(tokens);
  const auto heap = [&](std::string_view bytes, Ids& out) { tok.merge_heap(bytes, out); };
  const auto length = [&](std::int32_t token) { return tok.decode(Ids{token}).size(); };
  std::mt19937 rng(5);
  int stitched = 0, tries = 0;
  for (const std::string& piece : long_pieces(rng)) {
    const Ids expected = merged_linear(tok, piece);
    ASSERT_EQ(merged_heap(tok, piece), expected) << piece.size() << " bytes: " << piece.substr(0, 40);
    for (const WindowSizes sizes : {WindowSizes{64, 8}, WindowSizes{65, 16}, WindowSizes{300, 100}, WindowSizes{1000, 64}}) {
      tok.set_window_sizes(sizes);
      ASSERT_EQ(merged(tok, piece), expected) << piece.size() << " bytes in windows of " << sizes.window << ": "
                                              << piece.substr(0, 40);
      Ids windowed;
      ++tries;
      if (bpe_by_windows(piece, heap, length, windowed, sizes)) {
        ++stitched;
        ASSERT_EQ(windowed, expected);
      }
    }
  }
  EXPECT_GT(stitched, tries * 9 / 10) << "windows gave way to the whole piece too often: the test would not test them";
}

TEST(TiktokenTokenizer, WindowsThatShareNoTokenGiveWayToTheWholePiece) {
  // Bytes 1..200, the pair (b, b+1) ranked lower the further right it is: pairs merge from the right
  // end, so where a window ends decides the pairing all through it.
  std::string piece;
  for (int b = 1; b <= 200; ++b) piece += static_cast<char>(b);
  std::vector<std::string> tokens;
  for (int b = 199; b >= 1; --b) tokens.push_back(piece.substr(static_cast<std::size_t>(b) - 1, 2));
  auto tok = tiny(tokens);
  const Ids expected = merged_linear(tok, piece);
  ASSERT_EQ(expected.size(), 100u);
  const auto heap = [&](std::string_view bytes, Ids& out) { tok.merge_heap(bytes, out); };
  const auto length = [](std::int32_t token) { return token < 256 ? std::size_t{1} : std::size_t{2}; };
  Ids out = {7};
  EXPECT_TRUE(bpe_by_windows(piece, heap, length, out, {64, 16}));  // even windows pair as the whole does
  EXPECT_EQ(Ids(out.begin() + 1, out.end()), expected);
  out = {7};
  EXPECT_FALSE(bpe_by_windows(piece, heap, length, out, {65, 16}));  // odd ones never meet it
  EXPECT_EQ(out, Ids{7});
  tok.set_window_sizes({65, 16});
  EXPECT_EQ(merged(tok, piece), expected);
}

// OpenAI's ranks (assets/cl100k, assets/o200k; skipped without them): long runs in windows of 4 KiB
// and by default against one merge of the whole piece, and the heap against the loop.
TEST(TiktokenTokenizer, LongRunsWithOpenAIsRanksMergeAsTheWholePiece) {
  int tested = 0;
  for (const std::string name : {"cl100k", "o200k"}) {
    const TiktokenEncoding& encoding = *tiktoken_encoding(name);
    const auto file = default_tokenizer_dir(name) / encoding.ranks_file;
    if (!std::filesystem::exists(file)) continue;
    ++tested;
    TiktokenTokenizer tok(encoding, load_tiktoken_ranks(file, encoding.ranks));
    std::mt19937 rng(9);
    std::vector<std::string> letters, mixed;
    for (char c = 'a'; c <= 'z'; ++c) letters.emplace_back(1, c);
    for (char c = 'A'; c <= 'Z'; ++c) mixed.emplace_back(1, c);
    mixed.insert(mixed.end(), {"0", "7", "!", "-", "=", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x99\x82"});
    const std::vector<std::string> pieces = {
        testing::random_run(letters, 40000, rng), std::string(30000, 'a'),
        testing::random_run({"\xe7\x9a\x84", "\xe6\x98\xaf", "\xe4\xb8\x8d", "\xe4\xba\x86", "\xe4\xba\xba"}, 30000, rng),
        testing::random_run({"!", "?", "-", "=", "+", "*", "/"}, 20000, rng), testing::random_run(mixed, 30000, rng)};
    ASSERT_EQ(merged_heap(tok, pieces[0].substr(0, 12000)), merged_linear(tok, pieces[0].substr(0, 12000))) << name;
    const auto heap = [&](std::string_view bytes, Ids& out) { tok.merge_heap(bytes, out); };
    const auto length = [&](std::int32_t token) { return tok.decode(Ids{token}).size(); };
    for (const std::string& piece : pieces) {
      const Ids whole = merged_heap(tok, piece);
      tok.set_window_sizes({4096, 512});
      ASSERT_EQ(merged(tok, piece), whole) << name << ": " << piece.substr(0, 40);
      Ids windowed;  // and not by giving way to the whole piece
      ASSERT_TRUE(bpe_by_windows(piece, heap, length, windowed, {4096, 512})) << name << ": " << piece.substr(0, 40);
      ASSERT_EQ(windowed, whole) << name;
    }
    tok.set_window_sizes({});
    std::string long_run = testing::random_run(letters, 300000, rng);
    ASSERT_EQ(merged(tok, long_run), merged_heap(tok, long_run)) << name;
  }
  if (tested == 0) GTEST_SKIP() << "no cl100k or o200k ranks: run scripts/fetch_tiktoken.sh";
}

TEST(TiktokenRanks, BadFilesAreNamedWithTheLine) {
  ScratchDir dir;
  const auto file = dir.path() / "r.tiktoken";
  const auto error_for = [&](const std::string& text, std::int32_t expected = 0) {
    testing::write_file(file, text);
    return error_of([&] { load_tiktoken_ranks(file, expected); });
  };
  const std::string good = ranks_text({"ab"});
  EXPECT_TRUE(contains(error_for(good + "YWI 300\n"), "r.tiktoken:258: \"YWI\" is not base64")) << error_for(good + "YWI 300\n");
  EXPECT_TRUE(contains(error_for(good + "YWJj 256\n"), "r.tiktoken:258: rank 256 is given twice"));
  EXPECT_TRUE(contains(error_for(good + "YWI= 257\n"), "token YWI= is given twice (first at line 257)"));
  EXPECT_TRUE(contains(error_for(good + "YWJj x\n"), "is not an integer"));
  EXPECT_TRUE(contains(error_for(good + "YWJj 1 2\n"), "expected \"BASE64-TOKEN RANK\""));
  EXPECT_TRUE(contains(error_for(good + "YWJj 258\n"), "rank 257 is missing"));
  EXPECT_TRUE(contains(error_for(good, 300), "holds 257 ranks, expected 300"));
  EXPECT_TRUE(contains(error_for(good, 100), "rank 100 is outside [0, 100)"));
  EXPECT_TRUE(contains(error_for("YWI= 1\n"), "rank 0 is missing"));
  EXPECT_TRUE(contains(error_for("YQ== 0\n"), "the single byte 0 has no rank"));
  const std::string msg = error_of([&] { make_tokenizer("cl100k", dir.path() / "nowhere"); });
  EXPECT_TRUE(contains(msg, "cl100k_base.tiktoken does not exist: run scripts/fetch_tiktoken.sh")) << msg;
}

TEST(TiktokenEncodings, NamesAndVocabularySizes) {
  EXPECT_EQ(tiktoken_encoding_names(), (std::vector<std::string>{"cl100k", "o200k"}));
  EXPECT_EQ(known_vocab_size("cl100k"), 100277);
  EXPECT_EQ(known_vocab_size("o200k"), 200019);
  EXPECT_EQ(known_vocab_size("gpt2"), 50257);
  EXPECT_EQ(known_vocab_size("bytes"), 256);
  EXPECT_EQ(known_vocab_size("gpt3"), 0);
  EXPECT_EQ(default_tokenizer_dir("cl100k").filename(), "cl100k");
  EXPECT_EQ(default_tokenizer_dir("o200k").parent_path().filename(), "assets");
}

}  // namespace
}  // namespace mt::data
