// defines: PieceCache (see piece_cache.h)
#include "data/tokenizer/piece_cache.h"

namespace mt::data {

bool PieceCache::append(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (piece.size() > kMaxPieceBytes) return false;
  std::lock_guard lock(mutex_);
  const auto it = tokens_.find(piece);
  if (it == tokens_.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void PieceCache::keep(std::string_view piece, std::span<const std::int32_t> tokens) {
  if (piece.size() > kMaxPieceBytes) return;
  std::lock_guard lock(mutex_);
  if (tokens_.size() >= kMaxEntries) tokens_.clear();
  tokens_.emplace(std::string(piece), std::vector<std::int32_t>(tokens.begin(), tokens.end()));
}

}  // namespace mt::data
