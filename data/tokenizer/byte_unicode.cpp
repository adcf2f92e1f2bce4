// defines: byte_to_unicode, unicode_to_byte (see byte_unicode.h)
#include "data/tokenizer/byte_unicode.h"

#include <array>

namespace mt::data {
namespace {

constexpr bool stands_for_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// Encoder.js's bytes_to_unicode(): the printable bytes map to themselves, the rest to 256 + n in
// increasing byte order.
constexpr std::array<char32_t, 256> make_table() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) table[b] = stands_for_itself(b) ? static_cast<char32_t>(b) : next++;
  return table;
}

constexpr std::array<char32_t, 256> kByteToUnicode = make_table();
static_assert(kByteToUnicode[' '] == 0x120 && kByteToUnicode['\n'] == 0x10A);
static_assert(kByteToUnicode[0xAD] == 0x143);  // the last one: 256 + 67

}  // namespace

char32_t byte_to_unicode(std::uint8_t byte) { return kByteToUnicode[byte]; }

int unicode_to_byte(char32_t cp) {
  if (cp < 256) return stands_for_itself(static_cast<int>(cp)) ? static_cast<int>(cp) : -1;
  if (cp > 0x143) return -1;
  for (int b = 0; b < 256; ++b) {  // only while reading the vocabulary files
    if (kByteToUnicode[b] == cp) return b;
  }
  return -1;
}

}  // namespace mt::data
