// The byte tokenizer: id = byte value, lossless for any bytes.
#include <gtest/gtest.h>

#include "data/tokenizer/tokenizer.h"
#include "tests/test_helpers.h"

namespace mt::data {
namespace {

using mt::testing::contains;
using mt::testing::error_of;

TEST(BytesTokenizer, Basics) {
  const auto tok = make_tokenizer("bytes", "");
  EXPECT_EQ(tok->name(), "bytes");
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->eot_token(), 0);
  EXPECT_EQ(tok->encode("Hi\xff"), (std::vector<std::int32_t>{72, 105, 255}));
  EXPECT_TRUE(tok->encode("").empty());
}

TEST(BytesTokenizer, RoundTripsEveryByte) {
  const auto tok = make_tokenizer("bytes", "");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const auto ids = tok->encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<std::size_t>(b)], b);
  EXPECT_EQ(tok->decode(ids), all);
}

TEST(BytesTokenizer, DecodeRejectsIdsOutOfRange) {
  const auto tok = make_tokenizer("bytes", "");
  const std::vector<std::int32_t> high{65, 256};
  const std::string msg = error_of([&] { tok->decode(high); });
  EXPECT_TRUE(contains(msg, "256")) << msg;
  EXPECT_TRUE(contains(msg, "position 1")) << msg;
  const std::vector<std::int32_t> negative{-1};
  EXPECT_TRUE(contains(error_of([&] { tok->decode(negative); }), "-1"));
}

TEST(MakeTokenizer, RejectsUnknownNames) {
  const std::string msg = error_of([] { make_tokenizer("gpt3", ""); });
  EXPECT_TRUE(contains(msg, "gpt3")) << msg;
}

TEST(DefaultTokenizerDir, EnvironmentOverridesTheBuiltInDirectory) {
  ::unsetenv("MESHTRAIN_TOKENIZER_DIR");
  EXPECT_EQ(default_tokenizer_dir().filename(), "gpt2");
  EXPECT_EQ(default_tokenizer_dir().parent_path().filename(), "assets");
  ::setenv("MESHTRAIN_TOKENIZER_DIR", "/somewhere/else", 1);
  EXPECT_EQ(default_tokenizer_dir(), "/somewhere/else");
  ::unsetenv("MESHTRAIN_TOKENIZER_DIR");
}

}  // namespace
}  // namespace mt::data
