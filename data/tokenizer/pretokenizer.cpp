// defines: char_class, pretokenize, piece_end (see pretokenizer.h)
#include "data/tokenizer/pretokenizer.h"

#include <unicode/uchar.h>  // defines: U_GET_GC_MASK, U_GC_L_MASK, U_GC_N_MASK

#include <array>
#include <string>

#include "data/tokenizer/utf8.h"  // defines: append_utf8

namespace mt::data {
namespace {

// ECMAScript's WhiteSpace (TAB, VT, FF, ZWNBSP, Zs) and LineTerminator (LF, CR, LS, PS). Zs is
// listed out: it has not changed since Unicode 6.3 moved U+180E to Cf.
constexpr bool is_js_space(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

CharClass classify(char32_t cp) {
  if (is_js_space(cp)) return CharClass::kSpace;
  const auto mask = U_GET_GC_MASK(static_cast<UChar32>(cp));
  if (mask & U_GC_L_MASK) return CharClass::kLetter;
  if (mask & U_GC_N_MASK) return CharClass::kNumber;
  return CharClass::kOther;
}

const std::array<CharClass, 128>& ascii_classes() {
  static const std::array<CharClass, 128> table = [] {
    std::array<CharClass, 128> t{};
    for (char32_t c = 0; c < 128; ++c) t[c] = classify(c);
    return t;
  }();
  return table;
}

// The code point at utf8[at] (valid UTF-8) and its byte count.
char32_t code_point_at(std::string_view utf8, std::size_t at, std::size_t* length) {
  const auto byte = [&](std::size_t k) { return static_cast<char32_t>(static_cast<std::uint8_t>(utf8[at + k])); };
  const char32_t b0 = byte(0);
  if (b0 < 0x80) {
    *length = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *length = 2;
    return ((b0 & 0x1F) << 6) | (byte(1) & 0x3F);
  }
  if (b0 < 0xF0) {
    *length = 3;
    return ((b0 & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
  }
  *length = 4;
  return ((b0 & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6) | (byte(3) & 0x3F);
}

CharClass class_at(std::string_view utf8, std::size_t at, std::size_t* length) {
  return char_class(code_point_at(utf8, at, length));
}

// The length of the contraction at `at` ('s 't 're 've 'm 'll 'd, lowercase ASCII only), or 0.
std::size_t contraction_at(std::string_view text, std::size_t at) {
  if (text[at] != '\'' || at + 1 >= text.size()) return 0;
  const char a = text[at + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (at + 2 >= text.size()) return 0;
  const char b = text[at + 2];
  return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
}

}  // namespace

CharClass char_class(char32_t cp) { return cp < 128 ? ascii_classes()[cp] : classify(cp); }

std::size_t piece_end(std::string_view text, std::size_t at) {
  const std::size_t n = text.size();
  if (const std::size_t length = contraction_at(text, at)) return at + length;  // 's|'t|'re|'ve|'m|'ll|'d
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: a run of one class, after an optional U+0020.
  // Without the space, a space at `at` is \s and fails all three, so the space is taken when present.
  const std::size_t start = text[at] == ' ' ? at + 1 : at;
  std::size_t length = 0;
  if (start < n) {
    const CharClass cls = class_at(text, start, &length);
    if (cls != CharClass::kSpace) {
      std::size_t end = start + length;
      while (end < n && class_at(text, end, &length) == cls) end += length;
      return end;
    }
  }
  // Whitespace at `at`. `\s+(?!\S)`: the whole run at the end of the text, else the run less its
  // last character when that leaves one or more; otherwise `\s+` takes the single character.
  class_at(text, at, &length);
  std::size_t last = at, end = at + length, characters = 1;
  while (end < n && class_at(text, end, &length) == CharClass::kSpace) {
    last = end;
    end += length;
    ++characters;
  }
  return end < n && characters >= 2 ? last : end;
}

std::vector<PieceRange> pretokenize(std::span<const char32_t> text) {
  // Through the UTF-8 pre-tokenizer, mapping its byte offsets back to code point indices.
  std::string utf8;
  std::vector<std::size_t> index_at(1, 0);  // byte offset -> code point index (at character starts)
  for (std::size_t i = 0; i < text.size(); ++i) {
    append_utf8(utf8, text[i]);
    index_at.resize(utf8.size() + 1, i + 1);
  }
  std::vector<PieceRange> pieces;
  for (std::size_t at = 0; at < utf8.size();) {
    const std::size_t end = piece_end(utf8, at);
    pieces.push_back({index_at[at], index_at[end]});
    at = end;
  }
  return pieces;
}

}  // namespace mt::data
