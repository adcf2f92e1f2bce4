// The GPT-2 tokenizer: merges on a tiny synthetic vocabulary, what bad files say, and with OpenAI's
// files (assets/gpt2; skipped without them) known ids and round trips.
#include <gtest/gtest.h>

#include <thread>

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
