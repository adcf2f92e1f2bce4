// GPT-2's bytes_to_unicode: the 256 byte values as 256 printable code points, so that encoder.json
// and vocab.bpe can spell byte strings as text. Bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF
// stand for themselves; the other 68 (controls, space, DEL, U+0080..U+00A0, soft hyphen) become
// U+0100.. in byte order (space -> U+0120 'Ġ', newline -> U+010A 'Ċ').
// defines: byte_to_unicode, unicode_to_byte
#pragma once

#include <cstdint>

namespace mt::data {

char32_t byte_to_unicode(std::uint8_t byte);

// The byte `cp` stands for, or -1 when it is none of the 256 code points above.
int unicode_to_byte(char32_t cp);

}  // namespace mt::data
