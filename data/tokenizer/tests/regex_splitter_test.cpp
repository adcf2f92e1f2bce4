// RegexSplitter: tiktoken's find_iter semantics on PCRE2, Unicode's White_Space for \s (not PCRE2's
// U+180E), long runs of whitespace and capitals, and a pattern that does not compile.
#include <gtest/gtest.h>

#include "data/tokenizer/regex_splitter.h"
#include "data/tokenizer/tiktoken_encoding.h"
#include "tests/test_helpers.h"  // defines: error_of, contains

namespace mt::data {
namespace {
using mt::testing::contains;
using mt::testing::error_of;

std::vector<std::string> split(const RegexSplitter& s, std::string_view text) {
  std::vector<std::string_view> pieces;
  s.split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

TEST(RegexSplitter, PiecesAreSuccessiveMatchesAndUnmatchedTextIsDropped) {
  const RegexSplitter s("a+|b");
  EXPECT_EQ(split(s, "aabxaaa"), (std::vector<std::string>{"aa", "b", "aaa"}));
  EXPECT_TRUE(split(s, "").empty());
  const RegexSplitter empty_matches("x*");  // empty matches move on by one character, as find_iter does
  EXPECT_EQ(split(empty_matches, "éxx"), (std::vector<std::string>{"xx"}));
}

TEST(RegexSplitter, WhiteSpaceIsUnicodesNotPcre2s) {
  // \s and \S become Unicode's White_Space set, inside classes too.
  EXPECT_EQ(with_unicode_white_space(R"(\s+(?!\S)|[^\s\p{L}]+|[\]\s])").find("\\s"), std::string::npos);
  EXPECT_TRUE(contains(error_of([] { with_unicode_white_space(R"([\S])"); }), "inside a character class"));
  const RegexSplitter s(R"(\s+|\S+)");
  // U+180E MONGOLIAN VOWEL SEPARATOR is a format character now (PCRE2's \s still takes it); U+0085
  // (NEL) and U+3000 are White_Space; U+FEFF and U+200B are not.
  EXPECT_EQ(split(s, "a\u180Eb c"), (std::vector<std::string>{"a\u180Eb", " ", "c"}));
  EXPECT_EQ(split(s, "a\u0085\u3000b"), (std::vector<std::string>{"a", "\u0085\u3000", "b"}));
  EXPECT_EQ(split(s, "a\uFEFF\u200Bb"), (std::vector<std::string>{"a\uFEFF\u200Bb"}));
}

TEST(RegexSplitter, Cl100kPatternOnLongRunsAndContractions) {
  const RegexSplitter s(tiktoken_encoding("cl100k")->pattern);
  const std::string spaces(1 << 20, ' ');
  EXPECT_EQ(split(s, spaces + "x"), (std::vector<std::string>{spaces.substr(1), " x"}));
  EXPECT_EQ(split(s, "I'M 12345\r\n\r\nok"), (std::vector<std::string>{"I", "'M", " ", "123", "45", "\r\n\r\n", "ok"}));
}

TEST(RegexSplitter, O200kPatternOnARunOfTwelveMillionCapitals) {
  // Its first alternative takes the run and gives it back a letter at a time before the second
  // matches it: past PCRE2's default limit of 10^7 backtracks.
  const RegexSplitter s(tiktoken_encoding("o200k")->pattern);
  const std::string capitals(12'000'000, 'A');
  EXPECT_EQ(split(s, capitals + " x"), (std::vector<std::string>{capitals, " x"}));
}

TEST(RegexSplitter, ABadPatternIsNamed) {
  const std::string msg = error_of([] { RegexSplitter("a(b"); });
  EXPECT_TRUE(contains(msg, "a(b")) << msg;
  EXPECT_TRUE(contains(msg, "does not compile")) << msg;
}

}  // namespace
}  // namespace mt::data
