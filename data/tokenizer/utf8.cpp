// defines: decode_utf8, append_utf8 (see utf8.h)
#include "data/tokenizer/utf8.h"

#include <cstdint>

namespace mt::data {

std::vector<char32_t> decode_utf8(std::string_view bytes) {
  std::vector<char32_t> out;
  out.reserve(bytes.size());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    const auto lead = static_cast<std::uint8_t>(bytes[i]);
    if (lead < 0x80) {
      out.push_back(lead);
      ++i;
      continue;
    }
    // The WHATWG decoder: the lead byte fixes the length and the range allowed for the second byte
    // (which rules out overlong forms, surrogates and values above U+10FFFF).
    int needed = 0;
    std::uint8_t lower = 0x80, upper = 0xBF;
    char32_t cp = 0;
    if (lead >= 0xC2 && lead <= 0xDF) {
      needed = 1;
      cp = lead & 0x1Fu;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      needed = 2;
      cp = lead & 0x0Fu;
      if (lead == 0xE0) lower = 0xA0;
      if (lead == 0xED) upper = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      needed = 3;
      cp = lead & 0x07u;
      if (lead == 0xF0) lower = 0x90;
      if (lead == 0xF4) upper = 0x8F;
    } else {
      out.push_back(kReplacementCharacter);  // 80..C1, F5..FF never start a sequence
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    bool complete = true;
    for (int k = 0; k < needed; ++k, ++j) {
      const auto b = j < n ? static_cast<std::uint8_t>(bytes[j]) : std::uint8_t{0};
      if (j >= n || b < lower || b > upper) {
        complete = false;  // the maximal subpart is bytes [i, j); byte j starts afresh
        break;
      }
      cp = (cp << 6) | (b & 0x3Fu);
      lower = 0x80;
      upper = 0xBF;
    }
    out.push_back(complete ? cp : kReplacementCharacter);
    i = j;
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
