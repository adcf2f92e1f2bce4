// How many rows of the LM head's logits are made at once. The head never holds the [N, Vp/tp]
// logits of a micro-batch: it computes them, the loss and (training) their gradient in chunks of
// rows through one shared [rows, Vp/tp] buffer (models/gpt.h). One function, used by the model and
// by the memory model, of the problem and the device kind alone (never of the thread count), so the
// chunks, and with them the bits, are the same wherever it is computed.
// defines: kHeadChunkBytesCpu, kHeadChunkBytesCuda, head_chunk_rows
#pragma once

#include <cstdint>

namespace mt {

// The byte budget of one chunk's logits. Each chunk adds its rank-R update into the embedding's
// gradient, which reads and writes all of dwte [Vp/tp, C]: that traffic, not the GEMMs' FLOPs,
// is what small chunks cost. Per chunk it is about 8 (peak FLOP/s) / (6 R memory bytes/s) of the
// chunk's head GEMMs, whatever V and C are, so a budget must keep R in the hundreds on a CPU and in
// the thousands on a GPU. Measured (small, T 256, B 4, one 2-core CPU, fp32): 8 MiB (41 rows)
// made the step 18% slower than keeping the logits, 32 MiB 4%, 64 MiB within noise. CUDA:
// 1 GiB (about 4K rows of a 128K vocabulary, 10K of a 50K one, in bf16), where an H100's
// FLOP/byte ratio makes 512-row chunks cost about half the head's GEMM time again.
inline constexpr std::int64_t kHeadChunkBytesCpu = std::int64_t{64} << 20;
inline constexpr std::int64_t kHeadChunkBytesCuda = std::int64_t{1} << 30;

// Rows per chunk for `rows` rows of `vocab_cols` columns of `elem_bytes` each: as many as fit the
// budget (at least 1, at most `rows`), then evened out so that every chunk has about as many rows
// (ceil(rows / chunks)). forced > 0 replaces the budget's count (tests force several chunks).
std::int64_t head_chunk_rows(std::int64_t rows, std::int64_t vocab_cols, std::int64_t elem_bytes, bool cuda,
                             std::int64_t forced = 0);

}  // namespace mt
