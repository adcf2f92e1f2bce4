// GPT-2's byte-level BPE, token for token what the reference Encoder.js (npm gpt-3-encoder 1.1.4)
// produces: bytes -> code points (U+FFFD for invalid UTF-8) -> GPT-2's pre-tokenizer -> each piece's
// UTF-8 bytes as one-byte tokens -> merges by rank. The text "<|endoftext|>" is ordinary text here;
// only eot_token() is the separator. BPE results are cached per piece, so common words cost one
// lookup; pieces longer than a window are merged window by window (long_piece.h), so a text without
// whitespace needs no more memory than one with it. encode and decode may be called from several
// threads at once.
// defines: Gpt2Tokenizer
#pragma once

#include <string>
#include <vector>

#include "data/tokenizer/gpt2_vocab.h"  // defines: Gpt2Vocab
#include "data/tokenizer/long_piece.h"  // defines: WindowSizes
#include "data/tokenizer/piece_cache.h" // defines: PieceCache
#include "data/tokenizer/tokenizer.h"   // defines: Tokenizer

namespace mt::data {

class Gpt2Tokenizer final : public Tokenizer {
 public:
  explicit Gpt2Tokenizer(Gpt2Vocab vocab);

  std::string name() const override { return "gpt2"; }
  int vocab_size() const override { return static_cast<int>(vocab_.token_bytes.size()); }
  std::int32_t eot_token() const override { return vocab_.eot_token; }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  void encode_to(std::string_view text, const TokenSink& sink) const override;
  std::string decode(std::span<const std::int32_t> tokens) const override;

  // Appends the BPE of `bytes`, merged whole (no windows, no cache), to `out`. Exposed for tests.
  void merge(std::string_view bytes, std::vector<std::int32_t>& out) const;
  // The window sizes for long pieces; tests set small ones to exercise many windows.
  void set_window_sizes(WindowSizes sizes) { windows_ = sizes; }

 private:
  // Appends the BPE tokens of one piece (its UTF-8 bytes) to `batch`.
  void encode_piece(std::string_view piece, TokenBatch& batch) const;

  Gpt2Vocab vocab_;
  WindowSizes windows_;
  mutable PieceCache cache_;
};

}  // namespace mt::data
