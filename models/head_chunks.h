// How many rows of the LM head's logits are made at once. The head never holds the [N, Vp/tp]
// logits of a micro-batch: it computes them, the loss and (training) their gradient in chunks of
// rows through one shared [rows, Vp/tp] buffer (models/gpt.h). One function, used by the model and
// by the memory model, of the problem and the device kind alone (never of the thread count), so the
// chunks, and with them the bits, are the same wherever it is computed.
// defines: kHeadChunkBytesCpu, kHeadChunkBytesCuda, head_chunk_rows
#pragma once

#include <cstdint>

namespace mt {

// The byte budget of one chunk's logits. The CPU: 8 MiB, a few dozen rows of a 50k vocabulary,
// already hundreds of MFLOP per GEMM (OpenBLAS is at its rate there) and small next to the layers'
// activations. CUDA: 128 MiB, so the GEMMs stay large enough to fill the GPU (hundreds of rows
// of a 50k vocabulary in bf16) while still far below the N x Vp logits of a GPT-sized micro-batch.
inline constexpr std::int64_t kHeadChunkBytesCpu = std::int64_t{8} << 20;
inline constexpr std::int64_t kHeadChunkBytesCuda = std::int64_t{128} << 20;

// Rows per chunk for `rows` rows of `vocab_cols` columns of `elem_bytes` each: as many as fit the
// budget (at least 1, at most `rows`), then evened out so that every chunk has about as many rows
// (ceil(rows / chunks)). forced > 0 replaces the budget's count (tests force several chunks).
std::int64_t head_chunk_rows(std::int64_t rows, std::int64_t vocab_cols, std::int64_t elem_bytes, bool cuda,
                             std::int64_t forced = 0);

}  // namespace mt
