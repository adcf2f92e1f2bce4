// The GPT-2 tokenizer: merges on a tiny synthetic vocabulary, what bad files say, and with OpenAI's
// files (assets/gpt2; skipped without them) known ids and round trips.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/gpt2_vocab.h"
#include "data/tokenizer/tests/tokenizer_test_support.h"
#include "data/tokenizer/tokenizer.h"
#include "tests/test_helpers.h"

namespace mt::data {
namespace {

using mt::testing::contains;
using mt::testing::error_of;
using testing::ScratchDir;
using testing::TinyVocab;
using testing::write_file;
using Ids = std::vector<std::int32_t>;

// ---- a tiny vocabulary: no downloaded files needed ----

TEST(Gpt2TinyVocab, MergesByRank) {
  ScratchDir dir;
  const TinyVocab v;
  testing::write_tiny_vocab(dir.path(), v);
  const auto tok = make_tokenizer("gpt2", dir.path());
  EXPECT_EQ(tok->name(), "gpt2");
  EXPECT_EQ(tok->vocab_size(), v.eot() + 1);
  EXPECT_EQ(tok->eot_token(), v.eot());
  EXPECT_EQ(tok->encode("hello world"), (Ids{v.id("hello"), v.id(" wor"), 'l', 'd'}));
  EXPECT_EQ(tok->encode("hell"), (Ids{v.id("hell")}));
  EXPECT_EQ(tok->encode("helo"), (Ids{v.id("he"), 'l', 'o'}));
  EXPECT_EQ(tok->encode("aaaaaaa"), (Ids{v.id("aaaa"), v.id("aa"), 'a'}));
  EXPECT_EQ(tok->encode("\n\xff"), (Ids{'\n', 0xEF, 0xBF, 0xBD}));  // invalid byte -> U+FFFD's bytes
  EXPECT_EQ(tok->decode(tok->encode("hello world")), "hello world");
  EXPECT_EQ(tok->decode(Ids{v.eot()}), "<|endoftext|>");
}

// ---- long pieces: windows against one merge of the whole piece ----

Ids merged_whole(const Gpt2Tokenizer& tok, std::string_view piece) {
  Ids out;
  tok.merge(piece, out);
  return out;
}

// Runs of one class, each one pre-token piece: letters (one, several, multi-byte), digits,
// punctuation (with commas: merged whole, see long_piece.h).
std::vector<std::vector<std::string>> one_class_runs() {
  return {{"a", "b", "c", "d", "e", "f"}, {"a"}, {"\xc3\xa9", "a", "\xe6\x97\xa5", "\xe6\x9c\xac"},
          {"0", "1", "2"}, {"!", "?", "-"}, {"!", "?", ",", "\""}};
}

TEST(Gpt2LongPieces, WindowsGiveTheTokensOfTheWholePiece) {
  ScratchDir dir;
  TinyVocab v;
  v.merges = testing::random_merges({"a", "b", "c", "d", "e", "f", "0", "1", "2", "!", "?", "-", ",", "\"",
                                     "\xc3\xa9", "\xe6\x97\xa5", "\xe6\x9c\xac"},
                                    1500, 21);
  testing::write_tiny_vocab(dir.path(), v);
  Gpt2Tokenizer tok(load_gpt2_vocab(dir.path()));
  const auto merge = [&](std::string_view bytes, Ids& out) { tok.merge(bytes, out); };
  const auto token_length = [&](std::int32_t token) { return tok.decode(Ids{token}).size(); };
  std::mt19937 rng(3);
  int stitched = 0, tries = 0;
  for (const auto& characters : one_class_runs()) {
    for (const std::size_t length : {500u, 5000u}) {
      const std::string piece = testing::random_run(characters, length, rng);
      const Ids whole = merged_whole(tok, piece);
      for (const WindowSizes sizes : {WindowSizes{64, 8}, WindowSizes{65, 16}, WindowSizes{1000, 100}}) {
        tok.set_window_sizes(sizes);
        ASSERT_EQ(tok.encode(piece), whole) << length << " bytes in windows of " << sizes.window << ": "
                                            << piece.substr(0, 40);
        if (piece.find(',') != std::string::npos) continue;
        Ids windowed;
        ++tries;
        if (bpe_by_windows(piece, merge, token_length, windowed, sizes)) {
          ++stitched;
          ASSERT_EQ(windowed, whole);
        }
      }
    }
  }
  EXPECT_GT(stitched, tries * 9 / 10) << "windows gave way to the whole piece too often: the test would not test them";
}

// ---- bad files ----

TEST(Gpt2Files, MissingFilesSayHowToFetchThem) {
  ScratchDir dir;
  std::string msg = error_of([&] { make_tokenizer("gpt2", dir.path() / "nowhere"); });
  EXPECT_TRUE(contains(msg, "encoder.json")) << msg;
  EXPECT_TRUE(contains(msg, "scripts/fetch_tokenizer.sh")) << msg;

  testing::write_tiny_vocab(dir.path(), TinyVocab{});
  std::filesystem::remove(dir.path() / "vocab.bpe");
  msg = error_of([&] { make_tokenizer("gpt2", dir.path()); });
  EXPECT_TRUE(contains(msg, "vocab.bpe")) << msg;
  EXPECT_TRUE(contains(msg, "scripts/fetch_tokenizer.sh")) << msg;
}

TEST(Gpt2Files, EncoderJsonMustBeAnObjectOfDenseIds) {
  ScratchDir dir;
  testing::write_tiny_vocab(dir.path(), TinyVocab{});
  const auto json = dir.path() / "encoder.json";
  const auto message_for = [&](const std::string& text) {
    write_file(json, text);
    return error_of([&] { make_tokenizer("gpt2", dir.path()); });
  };
  std::string msg = message_for("{\"a\": 0, ");
  EXPECT_TRUE(contains(msg, "encoder.json") && contains(msg, "not valid JSON")) << msg;
  msg = message_for("[1, 2]");
  EXPECT_TRUE(contains(msg, "encoder.json") && contains(msg, "object")) << msg;
  msg = message_for("{\"a\": \"zero\"}");
  EXPECT_TRUE(contains(msg, "not an integer")) << msg;
  msg = message_for("{\"a\": 0, \"b\": 5}");
  EXPECT_TRUE(contains(msg, "id 5") && contains(msg, "outside")) << msg;
  msg = message_for("{\"a\": 0, \"b\": 1}");
  EXPECT_TRUE(contains(msg, "no token for byte")) << msg;
  msg = message_for("{\"a b\": 0}");  // U+0020 is spelled U+0120 in GPT-2's files
  EXPECT_TRUE(contains(msg, "U+0020")) << msg;
}

TEST(Gpt2Files, TruncatedOrMalformedVocabBpe) {
  ScratchDir dir;
  const TinyVocab v;
  testing::write_tiny_vocab(dir.path(), v);
  const auto bpe_path = dir.path() / "vocab.bpe";
  const std::string good = testing::read_file(bpe_path);
  const auto message_for = [&](const std::string& text) {
    write_file(bpe_path, text);
    return error_of([&] { make_tokenizer("gpt2", dir.path()); });
  };
  // Cut inside a line.
  std::string msg = message_for(good.substr(0, good.size() - 3));
  EXPECT_TRUE(contains(msg, "vocab.bpe") && contains(msg, "truncated")) << msg;
  // Cut at a line boundary: merges missing.
  msg = message_for(good.substr(0, good.rfind('\n', good.size() - 2) + 1));
  EXPECT_TRUE(contains(msg, "vocab.bpe") && contains(msg, "truncated")) << msg;
  msg = message_for("");
  EXPECT_TRUE(contains(msg, "empty")) << msg;
  msg = message_for("h e\n" + good.substr(good.find('\n') + 1));
  EXPECT_TRUE(contains(msg, "line 1") && contains(msg, "#version")) << msg;
  std::string one_sided = good;
  one_sided.replace(one_sided.find("l l\n"), 4, "ll\n");
  msg = message_for(one_sided);
  EXPECT_TRUE(contains(msg, "line 3") && contains(msg, "\"left right\"")) << msg;
  std::string unknown = good;
  unknown.replace(unknown.find("he ll\n"), 6, "hx ll\n");
  msg = message_for(unknown);
  EXPECT_TRUE(contains(msg, "line 4") && contains(msg, "\"hx\"") && contains(msg, "not a token")) << msg;
}

// ---- OpenAI's files ----

class Gpt2 : public ::testing::Test {
 protected:
  void SetUp() override {
    MT_SKIP_WITHOUT_GPT2_ASSETS();
    if (!tok_) tok_ = make_tokenizer("gpt2", testing::gpt2_asset_dir());
  }
  static void TearDownTestSuite() { tok_.reset(); }
  static std::unique_ptr<Tokenizer> tok_;
};
std::unique_ptr<Tokenizer> Gpt2::tok_;

TEST_F(Gpt2, KnownIds) {
  EXPECT_EQ(tok_->name(), "gpt2");
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->eot_token(), 50256);
  EXPECT_EQ(tok_->encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(tok_->encode(" Hello world!\n"), (Ids{18435, 995, 0, 198}));
  EXPECT_EQ(tok_->decode(Ids{50256}), "<|endoftext|>");
  // In text, <|endoftext|> is no separator: Encoder.js gives "<|", "end", "of", "text", "|>".
  EXPECT_EQ(tok_->encode("<|endoftext|>"), (Ids{27, 91, 437, 1659, 5239, 91, 29}));
  EXPECT_TRUE(tok_->encode("").empty());
}

TEST_F(Gpt2, RoundTrips) {
  for (const std::string text : {
           "", "Hello world", "The quick brown fox jumps over the lazy dog.",
           "na\u00efve caf\u00e9 \u00dcber stra\u00dfe e\u0301", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440",
           "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u4e2d\u6587",
           "\U0001F600\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1EB\U0001F1F7",
           "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
           "a  b   c\t\td\n\n\ne \r\n", "   \t \n", "trailing   ", "it's I'm we'll 'S",
           "x = [1, 2, 3]; // \"quoted\" {}", "<|endoftext|>", "\xef\xbb\xbf" "bom"}) {
    EXPECT_EQ(tok_->decode(tok_->encode(text)), text) << text;
  }
}

TEST_F(Gpt2, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(tok_->decode(tok_->encode("a\xff" "b\xe2\x82" "c\xc0\x80")),
            "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd");
}

TEST_F(Gpt2, DecodeKeepsBytesSplitAcrossTokens) {
  const Ids ids = tok_->encode("\u65e5\u672c");  // not every CJK character is one token
  std::string joined;
  for (const std::int32_t id : ids) joined += tok_->decode(Ids{id});
  EXPECT_EQ(joined, "\u65e5\u672c");
}

TEST_F(Gpt2, DecodeNamesIdsOutOfRange) {
  std::string msg = error_of([&] { tok_->decode(Ids{15496, 50257}); });
  EXPECT_TRUE(contains(msg, "50257") && contains(msg, "position 1")) << msg;
  msg = error_of([&] { tok_->decode(Ids{-7}); });
  EXPECT_TRUE(contains(msg, "-7")) << msg;
}

TEST_F(Gpt2, LongRunsInWindowsGiveTheTokensOfTheWholePiece) {
  Gpt2Tokenizer tok(load_gpt2_vocab(testing::gpt2_asset_dir()));
  std::mt19937 rng(8);
  std::vector<std::string> letters;
  for (char c = 'a'; c <= 'z'; ++c) letters.emplace_back(1, c);
  for (char c = 'A'; c <= 'Z'; ++c) letters.emplace_back(1, c);
  const std::vector<std::string> pieces = {
      testing::random_run(letters, 40000, rng), std::string(30000, 'a'),
      testing::random_run({"\xe7\x9a\x84", "\xe6\x98\xaf", "\xe4\xb8\x8d", "\xe4\xba\x86", "\xc3\xa9"}, 30000, rng),
      testing::random_run({"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}, 20000, rng),
      testing::random_run({"!", "?", "-", "=", "+", "*", "/"}, 20000, rng),
      testing::random_run({"\"", ",", "]", "}"}, 20000, rng)};
  const auto merge = [&](std::string_view bytes, Ids& out) { tok.merge(bytes, out); };
  const auto length = [&](std::int32_t token) { return tok.decode(Ids{token}).size(); };
  for (const std::string& piece : pieces) {
    const Ids whole = merged_whole(tok, piece);
    tok.set_window_sizes({4096, 512});
    ASSERT_EQ(tok.encode(piece), whole) << piece.substr(0, 40);
    if (piece.find(',') != std::string::npos) continue;  // merged whole (long_piece.h)
    Ids windowed;  // and not by giving way to the whole piece
    ASSERT_TRUE(bpe_by_windows(piece, merge, length, windowed, {4096, 512})) << piece.substr(0, 40);
    ASSERT_EQ(windowed, whole);
  }
  tok.set_window_sizes({});
  const std::string long_run = testing::random_run(letters, 300000, rng);
  EXPECT_EQ(tok.encode(long_run), merged_whole(tok, long_run));
}

TEST_F(Gpt2, EncodesFromSeveralThreads) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "Thread number " + std::to_string(i) + " says hello, w\u00f6rld! ";
  const Ids expected = tok_->encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) threads.emplace_back([&] { g = tok_->encode(text); });
  for (auto& t : threads) t.join();
  for (const Ids& g : got) EXPECT_EQ(g, expected);
}

}  // namespace
}  // namespace mt::data
