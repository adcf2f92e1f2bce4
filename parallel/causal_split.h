// The load-balanced causal split of context parallelism (Megatron's and torchtitan's): a sequence of
// `seq` positions is cut into 2 x cp chunks of seq / (2 cp), and cp rank r holds chunks r and
// 2cp-1-r, in that order, as its local rows [0, chunk) and [chunk, 2 chunk). Under a causal mask a
// chunk's work grows with its index, so pairing an early chunk with its mirror gives every rank the
// same work. Pure arithmetic: ring attention (parallel/ring_attention.h) asks it for the masks of
// its block pairs; the loader, the positions (wpe, RoPE) and the targets follow the same rows.
// defines: CausalSplit, ChunkPair
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/ops/block_attention.h"

namespace mt {

// A visible pair of a rank's query slot and a kv block's slot, and the mask between their chunks.
struct ChunkPair {
  int q_slot = 0, kv_slot = 0;
  std::int64_t q_chunk = 0, kv_chunk = 0;
  nn_math::BlockMask mask = nn_math::BlockMask::Full;
};

struct CausalSplit {
  std::int64_t seq = 0;  // positions of the whole sequence
  int cp = 1;

  // Throws unless seq divides into 2 x cp chunks (cp >= 1, seq > 0).
  CausalSplit(std::int64_t seq, int cp);

  std::int64_t chunks() const { return 2 * static_cast<std::int64_t>(cp); }
  std::int64_t chunk() const { return seq / chunks(); }  // positions per chunk
  std::int64_t local_rows() const { return 2 * chunk(); }
  // The global chunk of rank r's local slot (0: chunk r, 1: chunk 2cp-1-r).
  std::int64_t chunk_of(int rank, int slot) const { return slot == 0 ? rank : chunks() - 1 - rank; }
  // The global position of rank r's local row.
  std::int64_t position(int rank, std::int64_t local_row) const;
  // Every local row's global position, in local order (2 x chunk() of them).
  std::vector<std::int64_t> positions(int rank) const;
  // The mask of queries in chunk q_chunk against keys in chunk kv_chunk: Full when the kv chunk lies
  // wholly before, Causal on the same chunk, nullopt (skipped: nothing visible) when it lies after.
  static std::optional<nn_math::BlockMask> mask(std::int64_t q_chunk, std::int64_t kv_chunk);
  // The pairs of rank `rank`'s query slots against the kv slots of rank `source`'s block that see
  // anything, query slot then kv slot ascending: the order ring attention runs (and merges) them in.
  std::vector<ChunkPair> visible_pairs(int rank, int source) const;
};

}  // namespace mt
