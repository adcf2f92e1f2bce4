// TiktokenTokenizer and load_tiktoken_ranks on a small ranks file written here (no downloaded files):
// the merge order (lowest rank, leftmost first), tiktoken's whole-piece shortcut, special tokens,
// decode, and every error of a bad ranks file.
#include <gtest/gtest.h>

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
