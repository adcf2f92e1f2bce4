// UTF-8 the way JavaScript reads it: decoding per the WHATWG Encoding Standard (Node's
// fs.readFileSync(file, 'utf8'), TextDecoder), where each maximal subpart of an ill-formed sequence
// becomes one U+FFFD; and encoding of code points back to bytes.
// defines: kReplacementCharacter, decode_utf8, decode_next, is_valid_utf8, to_valid_utf8, append_utf8
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mt::data {

inline constexpr char32_t kReplacementCharacter = 0xFFFD;

// Code points of `bytes`. Never fails: overlong forms, surrogates (ED A0..BF ..), values above
// U+10FFFF, stray continuation bytes and truncated sequences each give U+FFFD per maximal subpart
// (e.g. E2 82 41 -> U+FFFD 'A'; C0 80 -> U+FFFD U+FFFD). A leading byte order mark is kept as U+FEFF
// (as Buffer.toString does; TextDecoder's default would drop it).
std::vector<char32_t> decode_utf8(std::string_view bytes);

// The code point at bytes[at] (at < size), as decode_utf8 reads it, and where the next one starts.
std::size_t decode_next(std::string_view bytes, std::size_t at, char32_t* cp);

// Whether `bytes` is well-formed UTF-8 (decode_utf8 would replace nothing).
bool is_valid_utf8(std::string_view bytes);

// The UTF-8 of decode_utf8(bytes): `bytes` with each maximal subpart of an ill-formed sequence
// replaced by U+FFFD.
std::string to_valid_utf8(std::string_view bytes);

// Appends the UTF-8 form of `cp` (a Unicode scalar value) to `out`.
void append_utf8(std::string& out, char32_t cp);

}  // namespace mt::data
