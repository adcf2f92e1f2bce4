#include "parallel/causal_split.h"

#include "runtime/error.h"

namespace mt {

CausalSplit::CausalSplit(std::int64_t seq_, int cp_) : seq(seq_), cp(cp_) {
  MT_CHECK(cp >= 1 && seq > 0 && seq % chunks() == 0, "context parallelism: a sequence of ", seq,
           " positions does not divide into 2 x cp = ", 2 * static_cast<std::int64_t>(cp), " chunks");
}

std::int64_t CausalSplit::position(int rank, std::int64_t local_row) const {
  MT_CHECK(rank >= 0 && rank < cp && local_row >= 0 && local_row < local_rows(), "context parallelism: rank ", rank,
           " row ", local_row, " is outside the split of ", seq, " positions over cp ", cp);
  const int slot = local_row < chunk() ? 0 : 1;
  return chunk_of(rank, slot) * chunk() + local_row - slot * chunk();
}

std::vector<std::int64_t> CausalSplit::positions(int rank) const {
  std::vector<std::int64_t> p;
  p.reserve(static_cast<std::size_t>(local_rows()));
  for (std::int64_t row = 0; row < local_rows(); ++row) p.push_back(position(rank, row));
  return p;
}

std::optional<nn_math::BlockMask> CausalSplit::mask(std::int64_t q_chunk, std::int64_t kv_chunk) {
  if (kv_chunk < q_chunk) return nn_math::BlockMask::Full;
  if (kv_chunk == q_chunk) return nn_math::BlockMask::Causal;
  return std::nullopt;
}

std::vector<ChunkPair> CausalSplit::visible_pairs(int rank, int source) const {
  MT_CHECK(rank >= 0 && rank < cp && source >= 0 && source < cp, "context parallelism: ranks ", rank, " and ", source,
           " are not both in a cp group of ", cp);
  std::vector<ChunkPair> pairs;
  for (int q = 0; q < 2; ++q)
    for (int kv = 0; kv < 2; ++kv)
      if (const auto m = mask(chunk_of(rank, q), chunk_of(source, kv)))
        pairs.push_back({q, kv, chunk_of(rank, q), chunk_of(source, kv), *m});
  return pairs;
}

}  // namespace mt
