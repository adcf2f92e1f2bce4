// defines: TiktokenTokenizer (see tiktoken_tokenizer.h)
#include "data/tokenizer/tiktoken_tokenizer.h"

#include <deque>
#include <limits>

#include "data/tokenizer/long_piece.h"  // defines: bpe_by_windows
#include "data/tokenizer/pair_heap.h"   // defines: PairHeap
#include "data/tokenizer/utf8.h"        // defines: is_valid_utf8, to_valid_utf8
#include "runtime/error.h"        // defines: MT_FAIL, MT_CHECK

namespace mt::data {

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

void TiktokenTokenizer::merge_linear(std::string_view piece, std::vector<std::int32_t>& out) const {
  constexpr std::int32_t kNone = std::numeric_limits<std::int32_t>::max();
  // The parts are piece[start[i], start[i+1]); rank[i] is the rank of part i joined with part i+1
  // (kNone when that is no token). Each round merges the leftmost pair of lowest rank, as tiktoken's
  // byte_pair_merge does, by a linear scan: cheaper than a heap for short pieces.
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
  for (std::size_t i = 0; i + 1 < start.size(); ++i) out.push_back(part_rank(piece.substr(start[i], start[i + 1] - start[i])));
}

void TiktokenTokenizer::merge_heap(std::string_view piece, std::vector<std::int32_t>& out) const {
  // The same merges in O(n log n): the part starting at byte i ends at end[i] and follows the one
  // starting at prev[i]; the heap orders the pairs by (rank, start), tiktoken's leftmost lowest.
  const std::size_t n = piece.size();
  if (n == 0) return;
  constexpr std::uint32_t kNone = PairHeap::kNone;
  std::vector<std::uint32_t> end(n), prev(n);
  for (std::size_t i = 0; i < n; ++i) {
    end[i] = static_cast<std::uint32_t>(i + 1);
    prev[i] = i > 0 ? static_cast<std::uint32_t>(i - 1) : kNone;
  }
  const auto pair_rank = [&](std::uint32_t i) {
    if (end[i] >= n) return kNone;
    const std::int32_t r = rank_of(piece.substr(i, end[end[i]] - i));
    return r < 0 ? kNone : static_cast<std::uint32_t>(r);
  };
  PairHeap heap(n);
  for (std::uint32_t i = 0; i < n; ++i) heap.add(i, pair_rank(i));
  heap.build();
  while (!heap.empty()) {
    const std::uint32_t p = heap.pop(), q = end[p];
    end[p] = end[q];
    heap.update(q, kNone);
    if (end[p] < n) prev[end[p]] = p;
    heap.update(p, pair_rank(p));
    if (prev[p] != kNone) heap.update(prev[p], pair_rank(prev[p]));
  }
  for (std::uint32_t i = 0; i < n; i = end[i]) out.push_back(part_rank(piece.substr(i, end[i] - i)));
}

void TiktokenTokenizer::merge(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (piece.size() <= kLinearPiece) {
    merge_linear(piece, out);
  } else if (piece.size() <= windows_.window || !bpe_by_windows(piece, merge_window(), token_length(), out, windows_)) {
    merge_heap(piece, out);
  }
}

std::int32_t TiktokenTokenizer::part_rank(std::string_view part) const {
  const std::int32_t r = rank_of(part);
  MT_CHECK(r >= 0, name_, ": a BPE part is no token (every single byte has a rank)", "");
  return r;
}

void TiktokenTokenizer::encode_piece(std::string_view piece, TokenBatch& batch) const {
  std::vector<std::int32_t>& out = batch.tokens();
  if (const std::int32_t whole = rank_of(piece); whole >= 0) {  // tiktoken's shortcut, same result
    out.push_back(whole);
    return;
  }
  if (cache_.append(piece, out)) return;
  if (piece.size() > windows_.window) {
    // The piece's tokens wait for its end (windows may give way to a whole merge); a deque holds
    // them without the copies a growing vector makes.
    std::deque<std::int32_t> tokens;
    if (bpe_by_windows(piece, merge_window(), token_length(), tokens, windows_)) {
      batch.append(tokens);
    } else {
      merge_heap(piece, out);
    }
    return;
  }
  const std::size_t first = out.size();
  merge(piece, out);
  cache_.keep(piece, std::span<const std::int32_t>(out).subspan(first));
}

void TiktokenTokenizer::encode_to(std::string_view text, const TokenSink& sink) const {
  // PCRE2 matches valid UTF-8 only: other text is read as code points (U+FFFD for what is invalid).
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = to_valid_utf8(text);
    text = repaired;
  }
  // The pieces are matched a block at a time, then encoded: PCRE2 and the rank table each keep the
  // cache to themselves for a while (matching and encoding in turn is slower by a tenth).
  constexpr std::size_t kBlock = 1024;
  std::vector<std::string_view> pieces;
  TokenBatch batch(sink);
  const auto encode_pieces = [&] {
    for (const std::string_view piece : pieces) {
      encode_piece(piece, batch);
      batch.flush_if_full();
    }
    pieces.clear();
  };
  splitter_.split(text, [&](std::string_view piece) {
    pieces.push_back(piece);
    if (pieces.size() == kBlock) encode_pieces();
  });
  encode_pieces();
  batch.flush();
}

std::vector<std::int32_t> TiktokenTokenizer::encode(std::string_view text) const { return collect_tokens(*this, text); }

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
