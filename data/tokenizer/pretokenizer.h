// GPT-2's pre-tokenizer: splits text into the pieces that BPE encodes one by one, exactly as
// JavaScript's regex engine (with the `u` flag, as in Encoder.js) matches OpenAI's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// What that means, alternative by alternative (the first one that matches at a position wins):
//  - the seven contractions are lowercase ASCII only ("'S" is "'" then "S"), matched even inside a
//    word ("'sun" is "'s" + "un");
//  - the optional prefix is U+0020 only, never a tab, newline or no-break space;
//  - \p{L} and \p{N} are general categories L* and N*: combining marks (Mn, Mc) are neither, so
//    "e" + U+0301 splits after the "e";
//  - \s is ECMAScript's WhiteSpace and LineTerminator: TAB LF VT FF CR, Zs (U+0020, U+00A0, U+1680,
//    U+2000..U+200A, U+202F, U+205F, U+3000), U+2028, U+2029 and U+FEFF (BOM), but not U+0085
//    (NEL), U+180E or U+001C..U+001F, which Python's \s would take;
//  - a whitespace run followed by more text leaves its last character to the next piece
//    (\s+(?!\S) backtracks one), so "a   b" is "a", "  ", " b" and "a\n\nb" is "a", "\n", "\n", "b";
//    a run at the end of the text stays whole.
// Every code point falls in some alternative, so the pieces cover the text without gaps.
// defines: CharClass, char_class, PieceRange, pretokenize, piece_end
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace mt::data {

enum class CharClass : std::uint8_t { kLetter, kNumber, kSpace, kOther };

// \p{L}, \p{N} (from ICU's general categories), JavaScript's \s, or none of them.
CharClass char_class(char32_t cp);

// Code point indices [begin, end) of one piece.
struct PieceRange {
  std::size_t begin = 0;
  std::size_t end = 0;
};

// The pieces of `text`, in order; they cover it exactly.
std::vector<PieceRange> pretokenize(std::span<const char32_t> text);

// Where the piece that starts at byte `at` of `utf8` (valid UTF-8; at < size) ends: the pieces are
// found one after the other, with no memory beyond the text, however long they are.
std::size_t piece_end(std::string_view utf8, std::size_t at);

}  // namespace mt::data
