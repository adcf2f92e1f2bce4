// The embedding family: the token (and position) lookup and its backward, the token table's rows
// summed per token in position order. CUDA: runtime/cuda/embedding.cu.
// defines: EmbeddingForward, EmbeddingTokenOrder, EmbeddingBackwardTokens, EmbeddingBackwardPositions,
//          MT_EMBEDDING_UNIT_OPS, MT_EMBEDDING_FAST_OPS
#pragma once

#include "runtime/ops/math.h"
#include "runtime/ops/tolerance.h"

namespace mt::nn_math {

// out[n, :] = wte[tokens[n] - vocab_begin, :] + wpe[pos(n % T), :]; one unit per row. wte holds the
// vocabulary rows [vocab_begin, vocab_begin + vocab_rows) (all of them with vocab_begin 0): a token
// outside them contributes 0, and wpe may be null (no position term). Each term is added in fp32
// and rounded once into T; a missing term is left out rather than added as 0, so the full-table
// case computes exactly e + p. pos(t) = positions[t] (the global positions of the rows of a
// context-parallel rank), or t when positions is null.
template <class T>
struct EmbeddingForward {
  const std::int32_t* tokens;
  const float* wte;
  const float* wpe;  // may be null
  T* out;
  std::int64_t rows, seq_len, channels, vocab_begin, vocab_rows;
  const std::int32_t* positions = nullptr;  // [seq_len] or null: position t
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const std::int64_t local = static_cast<std::int64_t>(tokens[n]) - vocab_begin;
    const float* e = local >= 0 && local < vocab_rows ? wte + local * channels : nullptr;
    const float* p = wpe != nullptr ? wpe + position_of(positions, n % seq_len) * channels : nullptr;
    T* o = out + n * channels;
    if (e != nullptr && p != nullptr) {
      for (std::int64_t c = 0; c < channels; ++c) o[c] = narrow_to<T>(e[c] + p[c]);
    } else if (e != nullptr) {
      for (std::int64_t c = 0; c < channels; ++c) o[c] = narrow_to<T>(e[c]);
    } else if (p != nullptr) {
      for (std::int64_t c = 0; c < channels; ++c) o[c] = narrow_to<T>(p[c]);
    } else {
      for (std::int64_t c = 0; c < channels; ++c) o[c] = narrow_to<T>(0.0f);
    }
  }
};

// The index of the token-row gradient (EmbeddingBackwardTokens): the positions [0, rows) sorted
// stably by key(n) = tokens[n] - vocab_begin, where a token outside the rows [vocab_begin,
// vocab_begin + vocab_rows) that the table holds (another slice's) takes the key vocab_rows and
// so sorts last. One unit per position n: it counts the positions before it in that order (its
// rank r) and writes order[r] = n, sorted_key[r] = key(n). Ranks are a permutation, so each slot
// is written by one unit. O(rows^2) comparisons in all, with rows one micro-batch's tokens (B x
// T): simpler than a parallel sort, and cheap on a GPU. The CPU builds the same index by a stable
// sort over key() (runtime/nn_kernels.cpp).
template <class T>  // unused: every op has an fp32 and a bf16 instantiation
struct EmbeddingTokenOrder {
  const std::int32_t* tokens;
  std::int32_t* order;
  std::int32_t* sorted_key;
  std::int64_t rows, vocab_begin, vocab_rows;
  MT_HD std::int64_t key(std::int64_t n) const {
    const std::int64_t local = static_cast<std::int64_t>(tokens[n]) - vocab_begin;
    return local >= 0 && local < vocab_rows ? local : vocab_rows;
  }
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const std::int64_t k = key(n);
    std::int64_t rank = 0;
    for (std::int64_t m = 0; m < rows; ++m) {
      const std::int64_t km = key(m);
      rank += (km < k || (km == k && m < n)) ? 1 : 0;
    }
    order[rank] = static_cast<std::int32_t>(n);
    sorted_key[rank] = static_cast<std::int32_t>(k);
  }
};

// dwte[key, cols] += dout[n, cols] over the positions n holding that key, n increasing (the sums
// of a plain loop over positions, in its order), for the keys of the rows dwte holds; other
// tokens contribute nothing. Over EmbeddingTokenOrder's index: one unit per (sorted position s,
// block of `width` columns). The unit at the first position of a key's run owns that row's block
// and sums the run; the others return at once. So no two units write one element, and rows no
// token hits are not touched.
template <class T>
struct EmbeddingBackwardTokens {
  const std::int32_t* order;
  const std::int32_t* sorted_key;
  const T* dout;
  float* dwte;
  std::int64_t rows, channels, vocab_rows, width;
  MT_HD std::int64_t count() const { return rows * blocks_of(channels, width); }
  MT_HD void operator()(std::int64_t unit) const {
    const std::int64_t blocks = blocks_of(channels, width);
    const std::int64_t s = unit / blocks, c0 = (unit % blocks) * width, c1 = min64(c0 + width, channels);
    const std::int32_t key = sorted_key[s];
    if (key >= vocab_rows || (s > 0 && sorted_key[s - 1] == key)) return;
    float* dst = dwte + static_cast<std::int64_t>(key) * channels;
    for (std::int64_t r = s; r < rows && sorted_key[r] == key; ++r) {
      const T* src = dout + static_cast<std::int64_t>(order[r]) * channels;
      for (std::int64_t c = c0; c < c1; ++c) dst[c] += widen(src[c]);
    }
  }
};

// dwpe[pos(t), cols] += sum over b of dout[b, t, cols], b increasing, pos as EmbeddingForward's;
// one unit per (local row t, block of `width` columns). The positions must be distinct (a rank's
// rows of one sequence are): then each dwpe element is written by one unit, without atomics.
template <class T>
struct EmbeddingBackwardPositions {
  const T* dout;
  float* dwpe;
  std::int64_t batch, seq_len, channels, width;
  const std::int32_t* positions = nullptr;  // [seq_len] or null: position t
  MT_HD std::int64_t count() const { return seq_len * blocks_of(channels, width); }
  MT_HD void operator()(std::int64_t unit) const {
    const std::int64_t blocks = blocks_of(channels, width);
    const std::int64_t t = unit / blocks, c0 = (unit % blocks) * width, c1 = min64(c0 + width, channels);
    float* dst = dwpe + position_of(positions, t) * channels;
    for (std::int64_t b = 0; b < batch; ++b) {
      const T* src = dout + (b * seq_len + t) * channels;
      for (std::int64_t c = c0; c < c1; ++c) dst[c] += widen(src[c]);
    }
  }
};

MT_TOLERANCE(EmbeddingForward, .fp32 = 0,
             .why = "e + p added in fp32 and rounded once, on every device: the same bits")
MT_TOLERANCE(EmbeddingTokenOrder, .fp32 = 0,
             .why = "integer keys and a stable order: the same on every device")
MT_TOLERANCE(EmbeddingBackwardTokens, .fp32 = 0,
             .why = "fp32 additions in position order, nothing to contract: the same bits")
MT_TOLERANCE(EmbeddingBackwardPositions, .fp32 = 0,
             .why = "fp32 additions over the batch in order: the same bits")

}  // namespace mt::nn_math

// The ops the backends run unit by unit (runtime/backend.h), and those with a kernel cut for the GPU.
#define MT_EMBEDDING_UNIT_OPS(X) X(EmbeddingForward) X(EmbeddingTokenOrder) X(EmbeddingBackwardTokens) X(EmbeddingBackwardPositions)
#define MT_EMBEDDING_FAST_OPS(X)
