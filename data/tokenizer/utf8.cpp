// defines: decode_utf8, decode_next, is_valid_utf8, to_valid_utf8, append_utf8 (see utf8.h)
#include "data/tokenizer/utf8.h"

#include <cstdint>

namespace mt::data {

std::size_t decode_next(std::string_view bytes, std::size_t at, char32_t* cp) {
  const std::size_t n = bytes.size();
  const auto lead = static_cast<std::uint8_t>(bytes[at]);
  if (lead < 0x80) {
    *cp = lead;
    return at + 1;
  }
  // The WHATWG decoder: the lead byte fixes the length and the range allowed for the second byte
  // (which rules out overlong forms, surrogates and values above U+10FFFF).
  int needed = 0;
  std::uint8_t lower = 0x80, upper = 0xBF;
  char32_t value = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    needed = 1;
    value = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    needed = 2;
    value = lead & 0x0Fu;
    if (lead == 0xE0) lower = 0xA0;
    if (lead == 0xED) upper = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    needed = 3;
    value = lead & 0x07u;
    if (lead == 0xF0) lower = 0x90;
    if (lead == 0xF4) upper = 0x8F;
  } else {
    *cp = kReplacementCharacter;  // 80..C1, F5..FF never start a sequence
    return at + 1;
  }
  std::size_t j = at + 1;
  for (int k = 0; k < needed; ++k, ++j) {
    const auto b = j < n ? static_cast<std::uint8_t>(bytes[j]) : std::uint8_t{0};
    if (j >= n || b < lower || b > upper) {
      *cp = kReplacementCharacter;  // the maximal subpart is bytes [at, j); byte j starts afresh
      return j;
    }
    value = (value << 6) | (b & 0x3Fu);
    lower = 0x80;
    upper = 0xBF;
  }
  *cp = value;
  return j;
}

std::vector<char32_t> decode_utf8(std::string_view bytes) {
  std::vector<char32_t> out;
  out.reserve(bytes.size());
  char32_t cp = 0;
  for (std::size_t i = 0; i < bytes.size();) {
    i = decode_next(bytes, i, &cp);
    out.push_back(cp);
  }
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  char32_t cp = 0;
  for (std::size_t i = 0; i < bytes.size();) {
    if (static_cast<std::uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t next = decode_next(bytes, i, &cp);
    // U+FFFD is also a character of its own (EF BF BD).
    if (cp == kReplacementCharacter && bytes.substr(i, next - i) != "\xEF\xBF\xBD") return false;
    i = next;
  }
  return true;
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  char32_t cp = 0;
  for (std::size_t i = 0; i < bytes.size();) {
    i = decode_next(bytes, i, &cp);
    append_utf8(out, cp);
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace mt::data
