#include "models/head_chunks.h"

#include <algorithm>

#include "runtime/error.h"

namespace mt {

std::int64_t head_chunk_rows(std::int64_t rows, std::int64_t vocab_cols, std::int64_t elem_bytes, bool cuda,
                             std::int64_t forced) {
  MT_CHECK(rows >= 1 && vocab_cols >= 1 && elem_bytes >= 1 && forced >= 0, "head chunks of ", rows, " rows, ",
           vocab_cols, " columns of ", elem_bytes, " bytes, forced ", forced);
  const std::int64_t budget = cuda ? kHeadChunkBytesCuda : kHeadChunkBytesCpu;
  const std::int64_t fit = forced > 0 ? forced : std::max<std::int64_t>(1, budget / (vocab_cols * elem_bytes));
  if (fit >= rows) return rows;
  const std::int64_t chunks = (rows + fit - 1) / fit;
  return (rows + chunks - 1) / chunks;
}

}  // namespace mt
