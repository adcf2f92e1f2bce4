// The row ops of attention through batched GEMMs (runtime/attention.h, AttentionKernel::BatchedGemm):
// the reference math, run unit by unit by the CPU (OpenMP) and by CUDA's generic launcher
// (runtime/nn_backend.h). The GEMMs between them are runtime/gemm.h's.
//
// Shapes: `rows` rows of `seq_len` entries, row r at query position t = r % seq_len, laid out
// [heads, T, T] per sequence. Every entry of a row is written, the ones above the diagonal (key
// positions t2 > t) as zeros, so the GEMMs that read whole rows see the causal mask.
// defines: CausalSoftmaxForward, CausalSoftmaxBackward, StoreColumns
#pragma once

#include "runtime/nn_functors.h"

namespace mt::nn_math {

// p[r, t2] = softmax over t2 <= t of scores[r, t2] * scale, rounded once into T; 0 for t2 > t. The
// maximum and the sum run in lane order (lane_max, lane_sum): the same bits on any thread count.
// p may alias scores when T is float (each row is read before it is written).
template <class T>
struct CausalSoftmaxForward {
  const float* scores;
  T* p;
  std::int64_t rows, seq_len;
  float scale;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t r) const {
    const std::int64_t t = r % seq_len, n = t + 1;
    const float* s = scores + r * seq_len;
    T* out = p + r * seq_len;
    const float sc = scale;
    const float max_score = lane_max(n, [s, sc](std::int64_t j) { return s[j] * sc; });
    const float sum = lane_sum(n, [s, sc, max_score](std::int64_t j) { return exp_f(s[j] * sc - max_score); });
    const float inv = 1.0f / sum;
    for (std::int64_t j = 0; j < n; ++j) out[j] = narrow_to<T>(exp_f(s[j] * sc - max_score) * inv);
    for (std::int64_t j = n; j < seq_len; ++j) out[j] = narrow_to<T>(0.0f);
  }
};

// ds[r, t2] = p[r, t2] * (dp[r, t2] - sum over j <= t of p[r, j] dp[r, j]) * scale, rounded once into
// T; 0 for t2 > t. p is the saved softmax (in T), dp the fp32 gradient of p. ds may alias dp when
// T is float.
template <class T>
struct CausalSoftmaxBackward {
  const T* p;
  const float* dp;
  T* ds;
  std::int64_t rows, seq_len;
  float scale;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t r) const {
    const std::int64_t t = r % seq_len, n = t + 1;
    const T* pr = p + r * seq_len;
    const float* d = dp + r * seq_len;
    T* out = ds + r * seq_len;
    const float weighted = lane_sum(n, [pr, d](std::int64_t j) { return widen(pr[j]) * d[j]; });
    for (std::int64_t j = 0; j < n; ++j) out[j] = narrow_to<T>(widen(pr[j]) * (d[j] - weighted) * scale);
    for (std::int64_t j = n; j < seq_len; ++j) out[j] = narrow_to<T>(0.0f);
  }
};

// dst[r * ld + j * cols + c] = src[(j * rows + r) * cols + c] rounded into T: `blocks` compact fp32
// blocks [rows, cols] (the kv heads' summed gradients) into neighbouring column blocks of a wider
// row-major tensor. One unit per (block, row).
template <class T>
struct StoreColumns {
  const float* src;
  T* dst;
  std::int64_t blocks, rows, cols, ld;
  MT_HD std::int64_t count() const { return blocks * rows; }
  MT_HD void operator()(std::int64_t u) const {
    const std::int64_t j = u / rows, r = u % rows;
    const float* from = src + u * cols;
    T* to = dst + r * ld + j * cols;
    for (std::int64_t c = 0; c < cols; ++c) to[c] = narrow_to<T>(from[c]);
  }
};

}  // namespace mt::nn_math
