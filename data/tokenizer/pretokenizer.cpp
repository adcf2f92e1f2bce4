// defines: char_class, pretokenize (see pretokenizer.h)
#include "data/tokenizer/pretokenizer.h"

#include <unicode/uchar.h>  // defines: U_GET_GC_MASK, U_GC_L_MASK, U_GC_N_MASK

#include <array>

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

bool is_contraction(std::span<const char32_t> text, std::size_t i, std::size_t* length) {
  if (text[i] != U'\'' || i + 1 >= text.size()) return false;
  const char32_t a = text[i + 1];
  if (a == U's' || a == U't' || a == U'm' || a == U'd') {
    *length = 2;
    return true;
  }
  if (i + 2 >= text.size()) return false;
  const char32_t b = text[i + 2];
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) {
    *length = 3;
    return true;
  }
  return false;
}

}  // namespace

CharClass char_class(char32_t cp) { return cp < 128 ? ascii_classes()[cp] : classify(cp); }

std::vector<PieceRange> pretokenize(std::span<const char32_t> text) {
  const std::size_t n = text.size();
  std::vector<CharClass> cls(n);
  for (std::size_t i = 0; i < n; ++i) cls[i] = char_class(text[i]);

  std::vector<PieceRange> pieces;
  std::size_t i = 0;
  while (i < n) {
    std::size_t length = 0;
    if (is_contraction(text, i, &length)) {  // 's|'t|'re|'ve|'m|'ll|'d
      pieces.push_back({i, i + length});
      i += length;
      continue;
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: a run of one class, after an optional U+0020.
    // Without the space, a space at i is \s and fails all three, so the space is taken when present.
    const std::size_t start = text[i] == U' ' ? i + 1 : i;
    if (start < n && cls[start] != CharClass::kSpace) {
      std::size_t end = start + 1;
      while (end < n && cls[end] == cls[start]) ++end;
      pieces.push_back({i, end});
      i = end;
      continue;
    }
    // Whitespace at i. `\s+(?!\S)`: the whole run at the end of the text, else the run less its last
    // character when that leaves one or more; otherwise `\s+` takes the single character.
    std::size_t end = i + 1;
    while (end < n && cls[end] == CharClass::kSpace) ++end;
    if (end < n && end - i >= 2) --end;
    pieces.push_back({i, end});
    i = end;
  }
  return pieces;
}

}  // namespace mt::data
