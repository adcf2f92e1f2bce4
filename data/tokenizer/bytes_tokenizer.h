// The byte tokenizer: token id = byte value (vocab 256), for tiny tests and models. Lossless for any
// bytes, valid UTF-8 or not; eot_token() is 0, the NUL byte.
// defines: BytesTokenizer
#pragma once

#include "data/tokenizer/tokenizer.h"  // defines: Tokenizer

namespace mt::data {

class BytesTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "bytes"; }
  int vocab_size() const override { return 256; }
  std::int32_t eot_token() const override { return 0; }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  void encode_to(std::string_view text, const TokenSink& sink) const override;
  std::string decode(std::span<const std::int32_t> tokens) const override;
};

}  // namespace mt::data
