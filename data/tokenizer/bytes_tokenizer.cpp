// defines: BytesTokenizer (see bytes_tokenizer.h)
#include "data/tokenizer/bytes_tokenizer.h"

#include <cstdint>

#include "runtime/error.h"  // defines: MT_FAIL

namespace mt::data {

std::vector<std::int32_t> BytesTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<std::uint8_t>(text[i]);
  return tokens;
}

void BytesTokenizer::encode_to(std::string_view text, const TokenSink& sink) const {
  TokenBatch batch(sink);
  for (const char c : text) {
    batch.tokens().push_back(static_cast<std::uint8_t>(c));
    batch.flush_if_full();
  }
  batch.flush();
}

std::string BytesTokenizer::decode(std::span<const std::int32_t> tokens) const {
  std::string text(tokens.size(), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 255) {
      MT_FAIL("bytes tokenizer: cannot decode token id ", tokens[i], " (at position ", i,
              "): ids are in [0, 256)");
    }
    text[i] = static_cast<char>(static_cast<std::uint8_t>(tokens[i]));
  }
  return text;
}

}  // namespace mt::data
