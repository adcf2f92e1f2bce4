// GPT-2's pre-tokenizer; every expected split here is what node gives for
// Array.from(text.matchAll(pat)) with Encoder.js's pattern.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "data/tokenizer/pretokenizer.h"

namespace mt::data {
namespace {

std::vector<std::u32string> split(std::u32string_view text) {
  std::vector<std::u32string> pieces;
  std::size_t covered = 0;
  for (const PieceRange& p : pretokenize({text.data(), text.size()})) {
    EXPECT_EQ(p.begin, covered) << "pieces must cover the text in order";
    EXPECT_LT(p.begin, p.end);
    pieces.emplace_back(text.substr(p.begin, p.end - p.begin));
    covered = p.end;
  }
  EXPECT_EQ(covered, text.size());
  return pieces;
}

using Pieces = std::vector<std::u32string>;

TEST(Pretokenizer, WordsTakeOneLeadingSpace) {
  EXPECT_EQ(split(U""), Pieces{});
  EXPECT_EQ(split(U"Hello world"), (Pieces{U"Hello", U" world"}));
  EXPECT_EQ(split(U"abc123 456!!! ..."), (Pieces{U"abc", U"123", U" 456", U"!!!", U" ..."}));
  EXPECT_EQ(split(U"3.14"), (Pieces{U"3", U".", U"14"}));
  EXPECT_EQ(split(U"<|endoftext|>"), (Pieces{U"<|", U"endoftext", U"|>"}));
}

TEST(Pretokenizer, WhitespaceRunsLeaveTheirLastCharacter) {
  EXPECT_EQ(split(U"a   b"), (Pieces{U"a", U"  ", U" b"}));
  EXPECT_EQ(split(U"   leading"), (Pieces{U"  ", U" leading"}));
  EXPECT_EQ(split(U"trailing   "), (Pieces{U"trailing", U"   "}));
  EXPECT_EQ(split(U"a \t b"), (Pieces{U"a", U" \t", U" b"}));
  EXPECT_EQ(split(U"a\n\nb"), (Pieces{U"a", U"\n", U"\n", U"b"}));
  EXPECT_EQ(split(U"a\t\tb"), (Pieces{U"a", U"\t", U"\t", U"b"}));
  EXPECT_EQ(split(U"a\r\n\r\nb"), (Pieces{U"a", U"\r\n\r", U"\n", U"b"}));
  EXPECT_EQ(split(U" "), (Pieces{U" "}));
}

TEST(Pretokenizer, OnlyU0020IsTheOptionalSpace) {
  EXPECT_EQ(split(U"x\u00a0y"), (Pieces{U"x", U"\u00a0", U"y"}));
  EXPECT_EQ(split(U"x \u00a0y"), (Pieces{U"x", U" ", U"\u00a0", U"y"}));
  EXPECT_EQ(split(U"\ufeffhi"), (Pieces{U"\ufeff", U"hi"}));
}

TEST(Pretokenizer, ContractionsAreLowercaseAndGreedy) {
  EXPECT_EQ(split(U"I'm you'RE it's 'S"),
            (Pieces{U"I", U"'m", U" you", U"'", U"RE", U" it", U"'s", U" '", U"S"}));
  EXPECT_EQ(split(U"don't we'll they've she'd"),
            (Pieces{U"don", U"'t", U" we", U"'ll", U" they", U"'ve", U" she", U"'d"}));
  EXPECT_EQ(split(U"'sun"), (Pieces{U"'s", U"un"}));
  EXPECT_EQ(split(U"'''s"), (Pieces{U"'''", U"s"}));
}

TEST(Pretokenizer, UnicodeCategories) {
  EXPECT_EQ(split(U"e\u0301t\u00e9"), (Pieces{U"e", U"\u0301", U"t\u00e9"}));  // a mark is no letter
  EXPECT_EQ(split(U"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8"),
            (Pieces{U"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8"}));
  EXPECT_EQ(split(U"\U0001F600\U0001F600 ok"), (Pieces{U"\U0001F600\U0001F600", U" ok"}));
  EXPECT_EQ(split(U"\u216b\u00bd \u0663\u0664"), (Pieces{U"\u216b\u00bd", U" \u0663\u0664"}));  // Nl No Nd
  EXPECT_EQ(split(U"a\u0085b"), (Pieces{U"a", U"\u0085", U"b"}));  // NEL is not JavaScript's \s
}

// The pre-tokenizer as it was written over code points (before it moved to UTF-8): the reference
// for the one that walks the UTF-8 bytes.
std::vector<PieceRange> code_point_pretokenize(std::u32string_view text) {
  const std::size_t n = text.size();
  std::vector<PieceRange> pieces;
  std::size_t i = 0;
  while (i < n) {
    if (text[i] == U'\'' && i + 1 < n) {
      const char32_t a = text[i + 1], b = i + 2 < n ? text[i + 2] : 0;
      std::size_t length = 0;
      if (a == U's' || a == U't' || a == U'm' || a == U'd') length = 2;
      if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) length = 3;
      if (length > 0) {
        pieces.push_back({i, i + length});
        i += length;
        continue;
      }
    }
    const std::size_t start = text[i] == U' ' ? i + 1 : i;
    if (start < n && char_class(text[start]) != CharClass::kSpace) {
      std::size_t end = start + 1;
      while (end < n && char_class(text[end]) == char_class(text[start])) ++end;
      pieces.push_back({i, end});
      i = end;
      continue;
    }
    std::size_t end = i + 1;
    while (end < n && char_class(text[end]) == CharClass::kSpace) ++end;
    if (end < n && end - i >= 2) --end;
    pieces.push_back({i, end});
    i = end;
  }
  return pieces;
}

TEST(Pretokenizer, TheUtf8WalkSplitsAsTheCodePointOneDid) {
  const std::u32string alphabet = U"aZ'srevltmd 09\t\n\r!.,\u00a0\u3000\u2028\ufeff\u00e9\u0301\u65e5\u0663\U0001F600\u0085";
  std::mt19937 rng(17);
  for (int trial = 0; trial < 2000; ++trial) {
    std::u32string text;
    const std::size_t length = rng() % 40;
    for (std::size_t k = 0; k < length; ++k) text += alphabet[rng() % alphabet.size()];
    const auto got = pretokenize({text.data(), text.size()});
    const auto expected = code_point_pretokenize(text);
    ASSERT_EQ(got.size(), expected.size()) << trial;
    for (std::size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].begin, expected[k].begin) << trial;
      ASSERT_EQ(got[k].end, expected[k].end) << trial;
    }
  }
}

TEST(Pretokenizer, PieceEndWalksUtf8Bytes) {
  const std::string text = "caf\xc3\xa9  \xe6\x97\xa5\xe6\x9c\xac'll";
  std::vector<std::string> pieces;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = piece_end(text, at);
    pieces.push_back(text.substr(at, end - at));
    at = end;
  }
  EXPECT_EQ(pieces, (std::vector<std::string>{"caf\xc3\xa9", " ", " \xe6\x97\xa5\xe6\x9c\xac", "'ll"}));
}

TEST(Pretokenizer, CharClasses) {
  EXPECT_EQ(char_class(U'a'), CharClass::kLetter);
  EXPECT_EQ(char_class(U'\u02b0'), CharClass::kLetter);  // Lm
  EXPECT_EQ(char_class(U'7'), CharClass::kNumber);
  EXPECT_EQ(char_class(U'\u2167'), CharClass::kNumber);  // Nl
  for (const char32_t s : {U'\t', U'\n', U'\v', U'\f', U'\r', U' ', U'\u00a0', U'\u1680', U'\u2000',
                           U'\u200a', U'\u2028', U'\u2029', U'\u202f', U'\u205f', U'\u3000', U'\ufeff'}) {
    EXPECT_EQ(char_class(s), CharClass::kSpace) << static_cast<std::uint32_t>(s);
  }
  for (const char32_t o : {U'\u001c', U'\u001f', U'\u0085', U'\u180e', U'\u200b', U'\u0301', U'!',
                           U'\U0001F600', U'\uFFFD'}) {
    EXPECT_EQ(char_class(o), CharClass::kOther) << static_cast<std::uint32_t>(o);
  }
}

}  // namespace
}  // namespace mt::data
