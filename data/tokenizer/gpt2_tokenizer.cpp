// defines: Gpt2Tokenizer (see gpt2_tokenizer.h)
#include "data/tokenizer/gpt2_tokenizer.h"

#include <cstdint>
#include <deque>

#include "data/tokenizer/long_piece.h"    // defines: bpe_by_windows
#include "data/tokenizer/pretokenizer.h"  // defines: piece_end
#include "data/tokenizer/utf8.h"          // defines: is_valid_utf8, to_valid_utf8
#include "runtime/error.h"                // defines: MT_FAIL

namespace mt::data {

Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Vocab vocab) : vocab_(std::move(vocab)) {}

void Gpt2Tokenizer::merge(std::string_view bytes, std::vector<std::int32_t>& out) const {
  std::vector<std::int32_t> symbols;
  symbols.reserve(bytes.size());
  for (const char c : bytes) symbols.push_back(vocab_.byte_token[static_cast<std::uint8_t>(c)]);
  vocab_.merges.apply(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, TokenBatch& batch) const {
  std::vector<std::int32_t>& out = batch.tokens();
  if (cache_.append(piece, out)) return;
  // Windows only where no pair kinds can share a rank (long_piece.h): pieces without a comma.
  if (piece.size() > windows_.window && piece.find(',') == std::string_view::npos) {
    const auto length = [&](std::int32_t token) { return vocab_.token_bytes[static_cast<std::size_t>(token)].size(); };
    const auto merge_window = [&](std::string_view bytes, std::vector<std::int32_t>& tokens) { merge(bytes, tokens); };
    // The piece's tokens wait for its end (windows may give way to a whole merge); a deque holds
    // them without the copies a growing vector makes.
    std::deque<std::int32_t> tokens;
    if (bpe_by_windows(piece, merge_window, length, tokens, windows_)) {
      batch.append(tokens);
      return;
    }
  }
  const std::size_t first = out.size();
  merge(piece, out);
  cache_.keep(piece, std::span<const std::int32_t>(out).subspan(first));
}

void Gpt2Tokenizer::encode_to(std::string_view text, const TokenSink& sink) const {
  // Encoder.js reads the bytes as code points (U+FFFD for what is invalid) and BPE encodes the
  // pieces' UTF-8: the same as pre-tokenizing the repaired UTF-8.
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = to_valid_utf8(text);
    text = repaired;
  }
  TokenBatch batch(sink);
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = piece_end(text, at);
    encode_piece(text.substr(at, end - at), batch);
    batch.flush_if_full();
    at = end;
  }
  batch.flush();
}

std::vector<std::int32_t> Gpt2Tokenizer::encode(std::string_view text) const { return collect_tokens(*this, text); }

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
