// Byte-level BPE over tiktoken's ranks (cl100k_base, o200k_base), token for token what tiktoken
// gives (the npm package tiktoken 1.0.22, OpenAI's Rust core built to WASM, is the reference in the
// tests). encode() is tiktoken's encode_ordinary: the text, read as UTF-8 (invalid sequences as
// U+FFFD per maximal subpart, as gpt2 does), is split by the encoding's pattern (RegexSplitter);
// a piece that is a token is that token, otherwise its bytes start as one-byte tokens and the
// adjacent pair whose concatenation has the lowest rank merges, leftmost first, until no pair has
// a rank. Special tokens are never produced from text ("<|endoftext|>" in a document is ordinary
// text); eot_token() is <|endoftext|>'s id, and decode() spells the special tokens. Pieces' tokens
// are cached, so common words cost one lookup; long pieces merge through a heap in O(n log n), and
// those longer than one window are merged window by window (long_piece.h), so a text without
// whitespace needs no more memory than one with it. encode and decode may run on several threads
// at once.
// defines: TiktokenTokenizer
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer/long_piece.h"         // defines: WindowSizes
#include "data/tokenizer/piece_cache.h"        // defines: PieceCache
#include "data/tokenizer/regex_splitter.h"     // defines: RegexSplitter
#include "data/tokenizer/tiktoken_encoding.h"  // defines: TiktokenEncoding
#include "data/tokenizer/tokenizer.h"          // defines: Tokenizer

namespace mt::data {

class TiktokenTokenizer final : public Tokenizer {
 public:
  // `token_bytes`: by rank (load_tiktoken_ranks). The special tokens' ids must lie at or above
  // token_bytes.size(), and one of them must be <|endoftext|>.
  TiktokenTokenizer(const TiktokenEncoding& encoding, std::vector<std::string> token_bytes);

  std::string name() const override { return name_; }
  int vocab_size() const override { return static_cast<int>(id_bytes_.size()); }
  std::int32_t eot_token() const override { return eot_; }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  void encode_to(std::string_view text, const TokenSink& sink) const override;
  std::string decode(std::span<const std::int32_t> tokens) const override;

  // The BPE of one piece's bytes, without the whole-piece lookup or the cache: merge_linear for
  // short pieces, merge_heap up to a window, windows beyond. Exposed for tests.
  void merge(std::string_view piece, std::vector<std::int32_t>& out) const;
  // tiktoken's loop as it reads: a linear scan for the pair of lowest rank, O(n^2). The reference.
  void merge_linear(std::string_view piece, std::vector<std::int32_t>& out) const;
  // The same merges through a heap, O(n log n), with 20 bytes of state a byte of the piece.
  void merge_heap(std::string_view piece, std::vector<std::int32_t>& out) const;
  // The window sizes for long pieces; tests set small ones to exercise many windows.
  void set_window_sizes(WindowSizes sizes) { windows_ = sizes; }

 private:
  static constexpr std::size_t kLinearPiece = 100;  // longer pieces merge through a heap (as tiktoken)

  // The rank of `bytes`, or -1 when they are no token.
  std::int32_t rank_of(std::string_view bytes) const;
  // The rank of a part of a finished merge, which is always a token.
  std::int32_t part_rank(std::string_view part) const;
  void encode_piece(std::string_view piece, TokenBatch& batch) const;
  // What bpe_by_windows needs: the merge of a window and a token's byte count.
  auto merge_window() const {
    return [this](std::string_view bytes, std::vector<std::int32_t>& tokens) { merge_heap(bytes, tokens); };
  }
  auto token_length() const {
    return [this](std::int32_t token) { return id_bytes_[static_cast<std::size_t>(token)].size(); };
  }

  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::string name_;
  RegexSplitter splitter_;
  std::unordered_map<std::string, std::int32_t, Hash, std::equal_to<>> ranks_;
  std::vector<std::string> id_bytes_;  // id -> bytes (empty for ids that are no token)
  std::vector<char> is_token_;         // id -> whether decode() accepts it
  std::int32_t eot_ = -1;
  WindowSizes windows_;
  mutable PieceCache cache_;
};

}  // namespace mt::data
