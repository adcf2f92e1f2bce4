// defines: Gpt2Tokenizer (see gpt2_tokenizer.h)
#include "data/tokenizer/gpt2_tokenizer.h"

#include <cstdint>

#include "data/tokenizer/pretokenizer.h"  // defines: pretokenize
#include "data/tokenizer/utf8.h"          // defines: decode_utf8, append_utf8
#include "runtime/error.h"                // defines: MT_FAIL

namespace mt::data {
namespace {


}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Vocab vocab) : vocab_(std::move(vocab)) {}

void Gpt2Tokenizer::encode_piece(const std::string& piece, std::vector<std::int32_t>& out) const {
  if (cache_.append(piece, out)) return;
  std::vector<std::int32_t> symbols;
  symbols.reserve(piece.size());
  for (const char c : piece) symbols.push_back(vocab_.byte_token[static_cast<std::uint8_t>(c)]);
  vocab_.merges.apply(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  cache_.keep(piece, symbols);
}

std::vector<std::int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  const std::vector<char32_t> code_points = decode_utf8(text);
  std::vector<std::int32_t> tokens;
  tokens.reserve(text.size() / 3 + 1);
  std::string piece;
  for (const PieceRange& range : pretokenize(code_points)) {
    piece.clear();
    for (std::size_t i = range.begin; i < range.end; ++i) append_utf8(piece, code_points[i]);
    encode_piece(piece, tokens);
  }
  return tokens;
}

std::string Gpt2Tokenizer::decode(std::span<const std::int32_t> tokens) const {
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::int32_t id = tokens[i];
    if (id < 0 || id >= vocab_size()) {
      MT_FAIL("gpt2 tokenizer: cannot decode token id ", id, " (at position ", i,
              "): ids are in [0, ", vocab_size(), ")");
    }
    text += vocab_.token_bytes[static_cast<std::size_t>(id)];
  }
  return text;
}

}  // namespace mt::data
