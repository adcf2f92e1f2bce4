// defines: TiktokenTokenizer (see tiktoken_tokenizer.h)
#include "data/tokenizer/tiktoken_tokenizer.h"

#include <limits>

#include "data/tokenizer/utf8.h"  // defines: decode_utf8, append_utf8
#include "runtime/error.h"        // defines: MT_FAIL, MT_CHECK

namespace mt::data {
namespace {


bool is_ascii(std::string_view text) {
  for (const char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

}  // namespace

TiktokenTokenizer::TiktokenTokenizer(const TiktokenEncoding& encoding, std::vector<std::string> token_bytes)
    : name_(encoding.name), splitter_(encoding.pattern), id_bytes_(std::move(token_bytes)) {
  const auto ordinary = static_cast<std::int32_t>(id_bytes_.size());
  ranks_.reserve(id_bytes_.size());
  for (std::int32_t rank = 0; rank < ordinary; ++rank) ranks_.emplace(id_bytes_[rank], rank);
  MT_CHECK(ranks_.size() == id_bytes_.size(), "tiktoken ranks of ", name_, " repeat a token");
  is_token_.assign(id_bytes_.size(), 1);
  for (const auto& [text, id] : encoding.special_tokens) {
    MT_CHECK(id >= ordinary, name_, "'s special token ", text, " has id ", id, ", one of the ", ordinary, " ranks");
    if (static_cast<std::size_t>(id) >= id_bytes_.size()) {
      id_bytes_.resize(static_cast<std::size_t>(id) + 1);
      is_token_.resize(static_cast<std::size_t>(id) + 1, 0);
    }
    id_bytes_[id] = text;
    is_token_[id] = 1;
    if (text == "<|endoftext|>") eot_ = id;
  }
  MT_CHECK(eot_ >= 0, name_, " has no <|endoftext|> token", "");
}

std::int32_t TiktokenTokenizer::rank_of(std::string_view bytes) const {
  const auto it = ranks_.find(bytes);
  return it == ranks_.end() ? -1 : it->second;
}

void TiktokenTokenizer::merge(std::string_view piece, std::vector<std::int32_t>& out) const {
  constexpr std::int32_t kNone = std::numeric_limits<std::int32_t>::max();
  // The parts are piece[start[i], start[i+1]); rank[i] is the rank of part i joined with part i+1
  // (kNone when that is no token). Each round merges the leftmost pair of lowest rank, as tiktoken's
  // byte_pair_merge does; pieces are short, so a linear scan per round is cheaper than a heap.
  const std::size_t n = piece.size();
  std::vector<std::size_t> start(n + 1);
  for (std::size_t i = 0; i <= n; ++i) start[i] = i;
  const auto pair_rank = [&](std::size_t i) {
    if (i + 2 >= start.size()) return kNone;
    const std::int32_t r = rank_of(piece.substr(start[i], start[i + 2] - start[i]));
    return r < 0 ? kNone : r;
  };
  std::vector<std::int32_t> rank(n);
  for (std::size_t i = 0; i < n; ++i) rank[i] = pair_rank(i);
  while (rank.size() > 1) {
    std::size_t best = 0;
    for (std::size_t i = 1; i + 1 < rank.size(); ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNone) break;
    start.erase(start.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    rank.erase(rank.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    rank[best] = pair_rank(best);
    if (best > 0) rank[best - 1] = pair_rank(best - 1);
  }
  for (std::size_t i = 0; i + 1 < start.size(); ++i) {
    const std::int32_t r = rank_of(piece.substr(start[i], start[i + 1] - start[i]));
    MT_CHECK(r >= 0, name_, ": a BPE part is no token (every single byte has a rank)", "");
    out.push_back(r);
  }
}

void TiktokenTokenizer::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (const std::int32_t whole = rank_of(piece); whole >= 0) {  // tiktoken's shortcut, same result
    out.push_back(whole);
    return;
  }
  if (cache_.append(piece, out)) return;
  const std::size_t first = out.size();
  merge(piece, out);
  cache_.keep(piece, std::span<const std::int32_t>(out).subspan(first));
}

std::vector<std::int32_t> TiktokenTokenizer::encode(std::string_view text) const {
  // PCRE2 matches valid UTF-8 only: other text goes through code points (U+FFFD for what is invalid).
  std::string repaired;
  if (!is_ascii(text)) {
    repaired.reserve(text.size());
    for (const char32_t cp : decode_utf8(text)) append_utf8(repaired, cp);
    text = repaired;
  }
  std::vector<std::string_view> pieces;
  splitter_.split(text, pieces);
  std::vector<std::int32_t> tokens;
  tokens.reserve(text.size() / 4 + 1);
  for (const std::string_view piece : pieces) encode_piece(piece, tokens);
  return tokens;
}

std::string TiktokenTokenizer::decode(std::span<const std::int32_t> tokens) const {
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::int32_t id = tokens[i];
    if (id < 0 || id >= vocab_size() || !is_token_[id]) {
      MT_FAIL(name_, " tokenizer: cannot decode token id ", id, " (at position ", i, "): ids are in [0, ",
              vocab_size(), ") and ", id, " is ", (id >= 0 && id < vocab_size() ? "unused" : "outside"));
    }
    text += id_bytes_[static_cast<std::size_t>(id)];
  }
  return text;
}

}  // namespace mt::data
