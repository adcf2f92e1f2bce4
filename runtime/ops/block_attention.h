// Attention of a query block against a key/value block, the piece context parallelism (ring
// attention) is built from: a rank's queries meet every visible kv block in turn, and the partial
// outputs are merged by their log-sum-exp, flash-attention style (nothing [Tq, Tk] is kept; the
// backward recomputes the probabilities from the final lse). The reference math: one unit per query
// row (or key row), fp32 arithmetic, the same formulas as runtime/ops/attention.h's AttentionForward.
// CUDA runs the units one thread each (runtime/cuda/block_attention.cu); the nn entry points are
// runtime/block_attention.h.
//
// Memory. Heads are those of AttentionLayout (grouped-query: q head h reads kv head heads.kv_of(h)).
//   qkv, out, dout  the rank's own tensors [B, q_seq, *] (qkv fused [q | k | v]; for the backward,
//                   the stored final output and its gradient [.., q_heads * hs]), read at rows
//                   [q_first, q_first + q_len): the query block
//   kv              [B, kv_seq, kv_width]: either a fused qkv (k heads at channel q_heads * hs) or a
//                   packed block [k | v] of the kv heads only (k at channel 0), what the ring
//                   passes; read at rows [kv_first, kv_first + kv_len). v follows k: k_channel +
//                   kv_heads * hs
//   block tensors   fp32, the block's own shape: per query row [B, q_len, q_heads * hs] (partial
//                   and running outputs, dq), per key row [B, kv_len, 2 * kv_heads * hs] ([dk | dv]),
//                   per-query statistics [B, q_heads, q_len] (lse, delta)
// defines: BlockMask, kNoKeysLse, BlockPair, BlockOperands, dot_rows, BlockAttentionForward,
//          BlockAttentionMerge, BlockAttentionBackwardDelta, BlockAttentionBackwardQuery,
//          BlockAttentionBackwardKeyValue, BlockSoftmaxForward, BlockSoftmaxBackward,
//          BlockAttentionStore, BlockAttentionPackKv, MT_BLOCK_ATTENTION_UNIT_OPS
#pragma once

#include "runtime/ops/attention.h"
#include "runtime/ops/math.h"
#include "runtime/ops/tolerance.h"

namespace mt::nn_math {

// Which keys of a block pair a query sees: Full, all of them (a kv block wholly before the query
// block); Causal, key position <= query position (the diagonal block). A block wholly after the
// queries is skipped by the caller.
enum class BlockMask : std::int32_t { Full = 0, Causal = 1 };

// The lse of a query that sees no key of the block: its weight in a merge is exactly 0.
inline constexpr float kNoKeysLse = -3.402823466e38f;

// A query block against a kv block: where their rows are (Memory above) and their global positions
// (q_start, kv_start: the positions of their first rows).
struct BlockPair {
  std::int64_t batch;
  std::int64_t q_seq, q_first, q_len, q_start;
  std::int64_t kv_seq, kv_first, kv_len, kv_start;
  BlockMask mask;
  // Query i sees the keys [0, keys_seen(i)) of the block.
  MT_HD std::int64_t keys_seen(std::int64_t i) const {
    if (mask == BlockMask::Full) return kv_len;
    const std::int64_t n = q_start + i - kv_start + 1;
    return n < 0 ? 0 : (n > kv_len ? kv_len : n);
  }
  // Key s is seen by the queries [first_query(s), q_len).
  MT_HD std::int64_t first_query(std::int64_t s) const {
    if (mask == BlockMask::Full) return 0;
    const std::int64_t i = kv_start + s - q_start;
    return i < 0 ? 0 : (i > q_len ? q_len : i);
  }
  MT_HD std::int64_t q_row(std::int64_t b, std::int64_t i) const { return b * q_seq + q_first + i; }
  MT_HD std::int64_t kv_row(std::int64_t b, std::int64_t s) const { return b * kv_seq + kv_first + s; }
};

// The operands every pass of a pair reads: queries from qkv, keys and values from kv.
template <class T>
struct BlockOperands {
  const T* qkv;
  const T* kv;
  std::int64_t kv_width, k_channel;
  BlockPair pair;
  AttentionLayout heads;
  MT_HD const T* q(std::int64_t b, std::int64_t i, std::int64_t h) const {
    return qkv + pair.q_row(b, i) * heads.row() + heads.q_offset(h);
  }
  MT_HD const T* k(std::int64_t b, std::int64_t s, std::int64_t kv_head) const {
    return kv + pair.kv_row(b, s) * kv_width + k_channel + kv_head * heads.head_size;
  }
  MT_HD const T* v(std::int64_t b, std::int64_t s, std::int64_t kv_head) const {
    return k(b, s, kv_head) + heads.kv_heads * heads.head_size;
  }
  MT_HD float scale() const { return 1.0f / ::sqrtf(static_cast<float>(heads.head_size)); }
  // The scaled score of query (b, i, h) against key s, summed over channels in order.
  MT_HD float score(const T* q_row, std::int64_t b, std::int64_t s, std::int64_t kv_head) const {
    const T* kr = k(b, s, kv_head);
    float dot = 0.0f;
    for (std::int64_t c = 0; c < heads.head_size; ++c) dot += widen(q_row[c]) * widen(kr[c]);
    return dot * scale();
  }
};

template <class T>
MT_HD float dot_rows(const T* a, const T* b, std::int64_t n) {
  float dot = 0.0f;
  for (std::int64_t c = 0; c < n; ++c) dot += widen(a[c]) * widen(b[c]);
  return dot;
}

// This pair's attention, normalised within the block: out[b, i, head] = sum over the seen keys s of
// p_s v_s with p = softmax of the scores over them, lse[b, h, i] = log of the sum of exp(score)
// (kNoKeysLse and zeros where query i sees none). One unit per (b, i, q head); keys in order: the
// maximum, then the exponentials and the weighted values summed in one pass, scaled by 1 / sum.
template <class T>
struct BlockAttentionForward {
  BlockOperands<T> in;
  float* out;
  float* lse;
  MT_HD std::int64_t count() const { return in.pair.batch * in.pair.q_len * in.heads.q_heads; }
  MT_HD void operator()(std::int64_t unit) const {
    const BlockPair& p = in.pair;
    const std::int64_t H = in.heads.q_heads, hs = in.heads.head_size;
    const std::int64_t h = unit % H, i = (unit / H) % p.q_len, b = unit / (H * p.q_len), kvh = in.heads.kv_of(h);
    const T* q = in.q(b, i, h);
    float* o = out + (b * p.q_len + i) * in.heads.out_row() + in.heads.q_offset(h);
    float* l = lse + (b * H + h) * p.q_len + i;
    for (std::int64_t c = 0; c < hs; ++c) o[c] = 0.0f;
    const std::int64_t n = p.keys_seen(i);
    if (n == 0) {
      *l = kNoKeysLse;
      return;
    }
    float max_score = -3.402823466e38f;
    for (std::int64_t s = 0; s < n; ++s) {
      const float sc = in.score(q, b, s, kvh);
      if (sc > max_score) max_score = sc;
    }
    float sum = 0.0f;
    for (std::int64_t s = 0; s < n; ++s) {
      const float e = exp_f(in.score(q, b, s, kvh) - max_score);
      sum += e;
      const T* v = in.v(b, s, kvh);
      for (std::int64_t c = 0; c < hs; ++c) o[c] += e * widen(v[c]);
    }
    const float inv = 1.0f / sum;
    for (std::int64_t c = 0; c < hs; ++c) o[c] *= inv;
    *l = max_score + ::logf(sum);
  }
};

// (out, lse) <- their merge with (block_out, block_lse), in place: with m the larger lse and
// w = exp(lse - m) of each, lse = m + log(w + w_block), out = out w / (w + w_block) + block_out
// w_block / (w + w_block). A row without keys on either side (kNoKeysLse) weighs exactly 0. Not
// associative in floating point: the caller folds the blocks in an order of its own, fixed, and
// the bits are those of that order. One unit per (b, q head, query); shapes those of the forward.
template <class T>  // unused: every op has an fp32 and a bf16 instantiation
struct BlockAttentionMerge {
  float* out;
  float* lse;
  const float* block_out;
  const float* block_lse;
  std::int64_t batch, q_len;
  AttentionLayout heads;
  MT_HD std::int64_t count() const { return batch * heads.q_heads * q_len; }
  MT_HD void operator()(std::int64_t r) const {
    const std::int64_t H = heads.q_heads, i = r % q_len, h = (r / q_len) % H, b = r / (q_len * H);
    const float l0 = lse[r], l1 = block_lse[r];
    if (l1 == kNoKeysLse) return;
    const std::int64_t o = (b * q_len + i) * heads.out_row() + heads.q_offset(h);
    if (l0 == kNoKeysLse) {
      lse[r] = l1;
      for (std::int64_t c = 0; c < heads.head_size; ++c) out[o + c] = block_out[o + c];
      return;
    }
    const float m = l0 > l1 ? l0 : l1;
    const float w0 = exp_f(l0 - m), w1 = exp_f(l1 - m), sum = w0 + w1;
    const float a = w0 / sum, c1 = w1 / sum;
    for (std::int64_t c = 0; c < heads.head_size; ++c) out[o + c] = out[o + c] * a + block_out[o + c] * c1;
    lse[r] = m + ::logf(sum);
  }
};

// The backward, flash-attention style, from the final (merged) out and lse of the query block:
//   BlockAttentionBackwardDelta     delta[b, h, i] = dout_i . out_i (the sum over keys of p dp), once
//                                   per query block; one unit per (b, q head, query)
// then per (query block, kv block) pair, with p = exp(score - lse_i), dp = dout_i . v_s and
// ds = p (dp - delta_i) / sqrt(hs):
//   BlockAttentionBackwardQuery     dq_i += sum over the seen keys s (in order) of ds k_s; one unit
//                                   per (b, q head, query), into the block's fp32 dq
//   BlockAttentionBackwardKeyValue  dk_s += sum over the q heads reading the kv head (ascending),
//                                   then the queries seeing s (in order), of ds q_i; dv_s likewise of
//                                   p dout_i; one unit per (b, kv head, key), into the block's fp32
//                                   [dk | dv]
// Each unit adds its terms one by one onto the accumulator it owns: over several pairs, the bits are
// those of the order the caller runs the pairs in. A kv head no local q head reads gets nothing.
template <class T>
struct BlockAttentionBackwardDelta {
  const T* dout;
  const T* out;
  float* delta;
  BlockPair pair;  // the query side only
  AttentionLayout heads;
  MT_HD std::int64_t count() const { return pair.batch * heads.q_heads * pair.q_len; }
  MT_HD void operator()(std::int64_t r) const {
    const std::int64_t H = heads.q_heads, i = r % pair.q_len, h = (r / pair.q_len) % H, b = r / (pair.q_len * H);
    const std::int64_t at = pair.q_row(b, i) * heads.out_row() + heads.q_offset(h);
    delta[r] = dot_rows(dout + at, out + at, heads.head_size);
  }
};

template <class T>
struct BlockAttentionBackwardQuery {
  BlockOperands<T> in;
  const T* dout;
  const float* lse;
  const float* delta;
  float* dq;
  MT_HD std::int64_t count() const { return in.pair.batch * in.heads.q_heads * in.pair.q_len; }
  MT_HD void operator()(std::int64_t r) const {
    const BlockPair& p = in.pair;
    const std::int64_t H = in.heads.q_heads, hs = in.heads.head_size;
    const std::int64_t i = r % p.q_len, h = (r / p.q_len) % H, b = r / (p.q_len * H), kvh = in.heads.kv_of(h);
    const T* q = in.q(b, i, h);
    const T* g = dout + p.q_row(b, i) * in.heads.out_row() + in.heads.q_offset(h);
    float* d = dq + (b * p.q_len + i) * in.heads.out_row() + in.heads.q_offset(h);
    const float l = lse[r], dl = delta[r], scale = in.scale();
    for (std::int64_t s = 0, n = p.keys_seen(i); s < n; ++s) {
      const float pr = exp_f(in.score(q, b, s, kvh) - l);
      const float ds = pr * (dot_rows(g, in.v(b, s, kvh), hs) - dl) * scale;
      const T* k = in.k(b, s, kvh);
      for (std::int64_t c = 0; c < hs; ++c) d[c] += ds * widen(k[c]);
    }
  }
};

template <class T>
struct BlockAttentionBackwardKeyValue {
  BlockOperands<T> in;
  const T* dout;
  const float* lse;
  const float* delta;
  float* dkv;
  MT_HD std::int64_t count() const { return in.pair.batch * in.heads.kv_heads * in.pair.kv_len; }
  MT_HD void operator()(std::int64_t r) const {
    const BlockPair& p = in.pair;
    const std::int64_t H = in.heads.q_heads, KV = in.heads.kv_heads, hs = in.heads.head_size;
    const std::int64_t s = r % p.kv_len, kvh = (r / p.kv_len) % KV, b = r / (p.kv_len * KV);
    const T* v = in.v(b, s, kvh);
    float* dk = dkv + (b * p.kv_len + s) * 2 * KV * hs + kvh * hs;
    float* dv = dk + KV * hs;
    const float scale = in.scale();
    for (std::int64_t h = in.heads.first_q(kvh), h_end = in.heads.end_q(kvh); h < h_end; ++h) {
      const float* l = lse + (b * H + h) * p.q_len;
      const float* dl = delta + (b * H + h) * p.q_len;
      for (std::int64_t i = p.first_query(s); i < p.q_len; ++i) {
        const T* q = in.q(b, i, h);
        const T* g = dout + p.q_row(b, i) * in.heads.out_row() + in.heads.q_offset(h);
        const float pr = exp_f(in.score(q, b, s, kvh) - l[i]);
        const float ds = pr * (dot_rows(g, v, hs) - dl[i]) * scale;
        for (std::int64_t c = 0; c < hs; ++c) {
          dk[c] += ds * widen(q[c]);
          dv[c] += pr * widen(g[c]);
        }
      }
    }
  }
};

// The row ops between the GEMMs of block attention by batched GEMMs (runtime/block_attention_gemm.h),
// for one sequence b and the `groups` q heads h0.. of one kv head: scores, p and ds are
// [groups, q_len, kv_len] (row r = g * q_len + i: q head h0 + g, query i), the scores fp32 Q K^T
// unscaled. One unit per row; each row's keys in a fixed order (lane_max, lane_sum: the same at
// any thread count). p and ds are 0 past the keys the row sees, so the GEMMs that read whole rows
// add nothing for them.
//   BlockSoftmaxForward   p = exp(s scale - m) / sum over the seen keys (m their maximum), lse =
//                         m + log(sum), into T (in place over the scores when T is float); a row
//                         that sees no key: lse kNoKeysLse, its out row zeroed (the GEMM that
//                         writes out skips the row blocks seeing no key)
//   BlockSoftmaxBackward  p = exp(s scale - lse), ds = p (dp - delta) scale, into T (p over the
//                         scores and ds over dp in place when T is float)
template <class T>
struct BlockSoftmaxForward {
  const float* scores;
  T* p;
  float* lse;  // [B, q_heads, q_len]
  float* out;  // [B, q_len, q_heads * hs]
  BlockPair pair;
  AttentionLayout heads;
  std::int64_t b, h0, groups;
  float scale;
  MT_HD std::int64_t count() const { return groups * pair.q_len; }
  MT_HD void operator()(std::int64_t r) const {
    const std::int64_t i = r % pair.q_len, h = h0 + r / pair.q_len, width = pair.kv_len, n = pair.keys_seen(i);
    const float* s = scores + r * width;
    T* pr = p + r * width;
    float* l = lse + (b * heads.q_heads + h) * pair.q_len + i;
    if (n == 0) {
      *l = kNoKeysLse;
      float* o = out + (b * pair.q_len + i) * heads.out_row() + heads.q_offset(h);
      for (std::int64_t c = 0; c < heads.head_size; ++c) o[c] = 0.0f;
    } else {
      const float sc = scale;
      const float m = lane_max(n, [s, sc](std::int64_t j) { return s[j] * sc; });
      const float sum = lane_sum(n, [s, sc, m](std::int64_t j) { return exp_f(s[j] * sc - m); });
      const float inv = 1.0f / sum;
      for (std::int64_t j = 0; j < n; ++j) pr[j] = narrow_to<T>(exp_f(s[j] * sc - m) * inv);
      *l = m + ::logf(sum);
    }
    for (std::int64_t j = n; j < width; ++j) pr[j] = narrow_to<T>(0.0f);
  }
};

template <class T>
struct BlockSoftmaxBackward {
  const float* scores;
  const float* dp;
  T* p;
  T* ds;
  const float* lse;
  const float* delta;
  BlockPair pair;
  AttentionLayout heads;
  std::int64_t b, h0, groups;
  float scale;
  MT_HD std::int64_t count() const { return groups * pair.q_len; }
  MT_HD void operator()(std::int64_t r) const {
    const std::int64_t i = r % pair.q_len, h = h0 + r / pair.q_len, width = pair.kv_len, n = pair.keys_seen(i);
    const std::int64_t at = (b * heads.q_heads + h) * pair.q_len + i;
    const float l = lse[at], dl = delta[at], sc = scale;
    const float* s = scores + r * width;
    const float* d = dp + r * width;
    T* pr = p + r * width;
    T* dsr = ds + r * width;
    for (std::int64_t j = 0; j < n; ++j) {
      const float pj = exp_f(s[j] * sc - l), dj = d[j];  // read before the in-place writes
      pr[j] = narrow_to<T>(pj);
      dsr[j] = narrow_to<T>(pj * (dj - dl) * sc);
    }
    for (std::int64_t j = n; j < width; ++j) {
      pr[j] = narrow_to<T>(0.0f);
      dsr[j] = narrow_to<T>(0.0f);
    }
  }
};

// dst[b, first + t, column + c] = src[b, t, c] rounded once into T: a block's fp32 result (the
// merged output, dq, [dk | dv]) into its rows and columns of a wider tensor [B, dst_seq, ld]. One unit
// per (b, t).
template <class T>
struct BlockAttentionStore {
  const float* src;
  T* dst;
  std::int64_t batch, rows, cols, dst_seq, first, ld, column;
  MT_HD std::int64_t count() const { return batch * rows; }
  MT_HD void operator()(std::int64_t u) const {
    const std::int64_t b = u / rows, t = u % rows;
    const float* from = src + u * cols;
    T* to = dst + (b * dst_seq + first + t) * ld + column;
    for (std::int64_t c = 0; c < cols; ++c) to[c] = narrow_to<T>(from[c]);
  }
};

// kv[b, t, :] = the k and v heads of qkv[b, first + t, :] (a fused qkv [B, seq, row]): a block of
// the rank's own keys and values packed [k | v], as the ring sends it. One unit per (b, t).
template <class T>
struct BlockAttentionPackKv {
  const T* qkv;
  T* kv;
  std::int64_t batch, rows, seq, first;
  AttentionLayout heads;
  MT_HD std::int64_t count() const { return batch * rows; }
  MT_HD void operator()(std::int64_t u) const {
    const std::int64_t b = u / rows, t = u % rows, width = 2 * heads.kv_heads * heads.head_size;
    const T* from = qkv + (b * seq + first + t) * heads.row() + heads.k_offset(0);
    T* to = kv + u * width;
    for (std::int64_t c = 0; c < width; ++c) to[c] = from[c];
  }
};

// The results are fp32 whatever T is (only the store rounds into T): bf16 allows what fp32 does.
MT_TOLERANCE(BlockAttentionForward, .fp32 = 1e-5,
             .why = "the same order, FMAs, exp_f contracted and logf from CUDA's libm: scale the largest |out|, |lse|")
MT_TOLERANCE(BlockAttentionMerge, .fp32 = 1e-5,
             .why = "FMAs, exp_f contracted and logf from CUDA's libm: scale the largest |out|, |lse|")
MT_TOLERANCE(BlockAttentionBackwardDelta, .fp32 = 1e-5,
             .why = "the same order, FMAs on CUDA: scale the largest |delta| of the tensor")
MT_TOLERANCE(BlockAttentionBackwardQuery, .fp32 = 1e-5,
             .why = "the same order, FMAs and exp_f contracted on CUDA: scale the largest |dq| of the tensor")
MT_TOLERANCE(BlockAttentionBackwardKeyValue, .fp32 = 1e-5,
             .why = "the same order, FMAs and exp_f contracted on CUDA: scale the largest |dk|, |dv| of the tensor")
MT_TOLERANCE(BlockSoftmaxForward, .fp32 = kSumOrder, .bf16 = kBf16Step, .per_sqrt_terms = true,
             .why = "the row maximum is exact, the sum of exponentials runs in another order on the GPU: scale p, terms n")
MT_TOLERANCE(BlockSoftmaxBackward, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "elementwise, FMAs and exp_f contracted on CUDA: scale the largest |p|, |ds|")
MT_TOLERANCE(BlockAttentionStore, .fp32 = 0, .why = "a copy rounded once into T: the same bits")
MT_TOLERANCE(BlockAttentionPackKv, .fp32 = 0, .why = "a copy of the k and v channels: the same bits")

}  // namespace mt::nn_math

// The ops the backends run unit by unit (runtime/backend.h); none has a kernel cut for the GPU yet.
#define MT_BLOCK_ATTENTION_UNIT_OPS(X)                                                                 \
  X(BlockAttentionForward) X(BlockAttentionMerge) X(BlockAttentionBackwardDelta)                     \
  X(BlockAttentionBackwardQuery) X(BlockAttentionBackwardKeyValue) X(BlockAttentionStore) X(BlockAttentionPackKv) \
  X(BlockSoftmaxForward) X(BlockSoftmaxBackward)
