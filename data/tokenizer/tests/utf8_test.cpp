// UTF-8 decoding with U+FFFD per maximal subpart; the expected values are what node's
// Buffer.toString('utf8') gives for the same bytes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/tokenizer/utf8.h"

namespace mt::data {
namespace {

constexpr char32_t R = kReplacementCharacter;

std::vector<char32_t> cps(std::u32string_view s) { return {s.begin(), s.end()}; }

TEST(Utf8, DecodesValidText) {
  EXPECT_EQ(decode_utf8(""), cps(U""));
  EXPECT_EQ(decode_utf8("abc"), cps(U"abc"));
  EXPECT_EQ(decode_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), cps(U"caf\u00e9 \u20ac \U0001F600"));
  EXPECT_EQ(decode_utf8("\xef\xbf\xbf\xf4\x8f\xbf\xbf"), cps(U"\uFFFF\U0010FFFF"));
}

TEST(Utf8, ReplacesEachMaximalSubpartOnce) {
  EXPECT_EQ(decode_utf8("\xc0\x80"), cps(U"\uFFFD\uFFFD"));              // overlong NUL: C0 never leads
  EXPECT_EQ(decode_utf8("\xed\xa0\x80"), cps(U"\uFFFD\uFFFD\uFFFD"));    // a surrogate
  EXPECT_EQ(decode_utf8("\xe0\x80\x80"), cps(U"\uFFFD\uFFFD\uFFFD"));    // overlong 3-byte form
  EXPECT_EQ(decode_utf8("\xf0\x90\x80" "a"), cps(U"\uFFFDa"));            // truncated 4-byte form
  EXPECT_EQ(decode_utf8("\xf4\x90\x80\x80"), cps(U"\uFFFD\uFFFD\uFFFD\uFFFD"));  // above U+10FFFF
  EXPECT_EQ(decode_utf8("\xe2\x82"), cps(U"\uFFFD"));                     // cut at the end
  EXPECT_EQ(decode_utf8("\xe2\x82\xe2\x82\xac"), cps(U"\uFFFD\u20ac"));   // cut, then whole
  EXPECT_EQ(decode_utf8("\xff\xfe" "a"), cps(U"\uFFFD\uFFFDa"));
  EXPECT_EQ(decode_utf8("\xf8\x88\x80\x80\x80"), std::vector<char32_t>(5, R));  // 5-byte forms are gone
  EXPECT_EQ(decode_utf8("\x80\x81"), cps(U"\uFFFD\uFFFD"));               // stray continuations
}

TEST(Utf8, KeepsTheByteOrderMark) {
  EXPECT_EQ(decode_utf8("\xef\xbb\xbf" "a"), cps(U"\uFEFFa"));
}

TEST(Utf8, EncodesEveryLength) {
  std::string out;
  for (const char32_t cp : {U'a', U'\u00e9', U'\u20ac', U'\U0001F600', U'\U0010FFFF'}) append_utf8(out, cp);
  EXPECT_EQ(out, "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf");
  EXPECT_EQ(decode_utf8(out), cps(U"a\u00e9\u20ac\U0001F600\U0010FFFF"));
}

TEST(Utf8, ValidityAndRepairAgreeWithTheDecoder) {
  for (const std::string bytes : {"", "abc", "caf\xc3\xa9", "\xef\xbf\xbd", "\xf0\x9f\x98\x80!", "\xc0\x80",
                                  "\xed\xa0\x80", "\xe2\x82", "a\xff" "b", "\xf4\x90\x80\x80", "\x80"}) {
    std::string utf8;
    for (const char32_t cp : decode_utf8(bytes)) append_utf8(utf8, cp);
    EXPECT_EQ(to_valid_utf8(bytes), utf8);
    EXPECT_EQ(is_valid_utf8(bytes), utf8 == bytes) << bytes;
    std::size_t at = 0, count = 0;
    char32_t cp = 0;
    while (at < bytes.size()) {
      at = decode_next(bytes, at, &cp);
      EXPECT_EQ(cp, decode_utf8(bytes)[count++]);
    }
    EXPECT_EQ(count, decode_utf8(bytes).size());
  }
}

}  // namespace
}  // namespace mt::data
