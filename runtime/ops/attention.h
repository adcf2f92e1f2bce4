// The attention family's math: the reference (one unit per (sequence, position, head), fp32
// probabilities) and the row ops of attention through batched GEMMs: the fused causal softmax, its
// backward, and the store of per-head results (runtime/attention.h picks the implementation; the
// GEMMs between the row ops are runtime/gemm.h's). CUDA: runtime/cuda/attention.cu, the causal
// softmax and its backward as a warp or a block per row (fast, MESHTRAIN_CUDA_KERNELS=attention).
// defines: AttentionLayout, AttentionForward, AttentionBackwardDots, AttentionBackwardSoftmax, AttentionBackwardQuery,
//          AttentionBackwardKeyValue, CausalSoftmaxForward, CausalSoftmaxBackward, StoreColumns,
//          kBatchedGemmTolerance, MT_ATTENTION_UNIT_OPS, MT_ATTENTION_FAST_OPS
#pragma once

#include "runtime/ops/math.h"
#include "runtime/ops/tolerance.h"

namespace mt::nn_math {

// Where the heads of a fused qkv [B, T, (q_heads + 2*kv_heads) * hs] = [q | k | v] sit, and which
// kv head each q head reads (grouped-query attention): local q head h reads kv head
// (q_begin + h) / group - kv_begin. Multi-head attention (GPT-2) is {hs, heads, heads, 0, 1, 0}:
// every offset below is then that of the plain [q | k | v] layout with C = heads * hs.
struct AttentionLayout {
  std::int64_t head_size, q_heads, kv_heads, q_begin, group, kv_begin;
  MT_HD std::int64_t row() const { return (q_heads + 2 * kv_heads) * head_size; }  // channels of a qkv row
  MT_HD std::int64_t out_row() const { return q_heads * head_size; }
  MT_HD std::int64_t kv_of(std::int64_t h) const { return (q_begin + h) / group - kv_begin; }
  MT_HD std::int64_t q_offset(std::int64_t h) const { return h * head_size; }
  MT_HD std::int64_t k_offset(std::int64_t kv) const { return (q_heads + kv) * head_size; }
  MT_HD std::int64_t v_offset(std::int64_t kv) const { return (q_heads + kv_heads + kv) * head_size; }
  // The local q heads [first_q(kv), end_q(kv)) that read kv head kv (possibly none).
  MT_HD std::int64_t first_q(std::int64_t kv) const {
    const std::int64_t h = (kv + kv_begin) * group - q_begin;
    return h < 0 ? 0 : (h > q_heads ? q_heads : h);
  }
  MT_HD std::int64_t end_q(std::int64_t kv) const {
    const std::int64_t h = (kv + kv_begin + 1) * group - q_begin;
    return h < 0 ? 0 : (h > q_heads ? q_heads : h);
  }
};

// Causal self-attention over qkv (AttentionLayout); one unit per (b, t, q head): softmax of the
// scaled scores against positions <= t into att[b, h, t, :] (zero beyond t), then the weighted sum
// of values into out[b, t, head channels].
template <class T>
struct AttentionForward {
  const T* qkv;
  T* out;
  float* att;
  std::int64_t batch, seq_len;
  AttentionLayout heads;
  MT_HD std::int64_t count() const { return batch * seq_len * heads.q_heads; }
  MT_HD void operator()(std::int64_t unit) const {
    const std::int64_t H = heads.q_heads;
    const std::int64_t h = unit % H, t = (unit / H) % seq_len, b = unit / (H * seq_len);
    const std::int64_t hs = heads.head_size, row = heads.row(), kv = heads.kv_of(h);
    const std::int64_t k_off = heads.k_offset(kv), v_off = heads.v_offset(kv);
    const float scale = 1.0f / ::sqrtf(static_cast<float>(hs));
    const T* q = qkv + (b * seq_len + t) * row + heads.q_offset(h);
    float* a = att + ((b * H + h) * seq_len + t) * seq_len;
    float max_score = -3.402823466e38f;
    for (std::int64_t t2 = 0; t2 <= t; ++t2) {
      const T* k = qkv + (b * seq_len + t2) * row + k_off;
      float dot = 0.0f;
      for (std::int64_t i = 0; i < hs; ++i) dot += widen(q[i]) * widen(k[i]);
      a[t2] = dot * scale;
      if (a[t2] > max_score) max_score = a[t2];
    }
    float sum = 0.0f;
    for (std::int64_t t2 = 0; t2 <= t; ++t2) {
      a[t2] = exp_f(a[t2] - max_score);
      sum += a[t2];
    }
    const float inv = 1.0f / sum;
    for (std::int64_t t2 = 0; t2 <= t; ++t2) a[t2] *= inv;
    for (std::int64_t t2 = t + 1; t2 < seq_len; ++t2) a[t2] = 0.0f;
    T* o = out + (b * seq_len + t) * heads.out_row() + heads.q_offset(h);
    for (std::int64_t i = 0; i < hs; ++i) {
      float acc = 0.0f;
      for (std::int64_t t2 = 0; t2 <= t; ++t2) acc += a[t2] * widen(qkv[(b * seq_len + t2) * row + v_off + i]);
      o[i] = narrow_to<T>(acc);
    }
  }
};

// Causal attention backward in four passes over a scratch dscore [B, q_heads, T, T] (att's shape).
// dqkv is overwritten; each unit owns its outputs and sums over positions in increasing order.
// With g_t = dout[b, t, head], q_t the head's part of qkv[b, t], k_t, v_t those of its kv head,
// p = att[b, head]:
//   AttentionBackwardDots      dscore[t, t2] = g_t . v_t2 (the gradient of p[t, t2]), t2 <= t;
//                              one unit per (b, q head, t, block of `width` key positions t2)
//   AttentionBackwardSoftmax   through the softmax and the 1/sqrt(hs) scale, in place:
//                              dscore[t, t2] = p[t, t2] (dscore[t, t2] - sum_j p[t, j] dscore[t, j])
//                              * scale; one unit per (b, q head, t)
//   AttentionBackwardQuery     dq_t = sum over t2 <= t of dscore[t, t2] k_t2;
//                              one unit per (b, q head, t, block of `width` channels)
//   AttentionBackwardKeyValue  dk_t2 = sum over the q heads reading the kv head (ascending), then
//                              over t >= t2, of dscore[t, t2] q_t, and dv_t2 likewise of p[t, t2] g_t,
//                              in one running sum; one unit per (b, kv head, t2, block of `width`
//                              channels). A kv head no local q head reads gets zeros.
// Entries of dscore above the diagonal are neither written nor read. The last two keep their
// sums in arrays of compile-time width W (1 or kColumnBlock): a GPU thread's stay in registers.
template <class T>
struct AttentionBackwardDots {
  const T* dout;
  const T* qkv;
  float* dscore;
  std::int64_t batch, seq_len;
  AttentionLayout heads;
  std::int64_t width;
  MT_HD std::int64_t count() const { return batch * heads.q_heads * seq_len * blocks_of(seq_len, width); }
  MT_HD void operator()(std::int64_t unit) const {
    const std::int64_t H = heads.q_heads, blocks = blocks_of(seq_len, width);
    const std::int64_t r = unit / blocks;  // (b * H + h) * seq_len + t
    const std::int64_t t = r % seq_len, h = (r / seq_len) % H, b = r / (seq_len * H);
    const std::int64_t hs = heads.head_size, row = heads.row(), v_off = heads.v_offset(heads.kv_of(h));
    const std::int64_t t0 = (unit % blocks) * width, t1 = min64(t0 + width, t + 1);
    const T* g = dout + (b * seq_len + t) * heads.out_row() + heads.q_offset(h);
    float* d = dscore + r * seq_len;
    for (std::int64_t t2 = t0; t2 < t1; ++t2) {
      const T* v = qkv + (b * seq_len + t2) * row + v_off;
      d[t2] = lane_sum(hs, [g, v](std::int64_t i) { return widen(g[i]) * widen(v[i]); });
    }
  }
};

template <class T>  // unused: every op has an fp32 and a bf16 instantiation
struct AttentionBackwardSoftmax {
  const float* att;
  float* dscore;
  std::int64_t batch, seq_len;
  AttentionLayout heads;
  MT_HD std::int64_t count() const { return batch * heads.q_heads * seq_len; }
  MT_HD void operator()(std::int64_t r) const {
    const std::int64_t t = r % seq_len;
    const float scale = 1.0f / ::sqrtf(static_cast<float>(heads.head_size));
    const float* p = att + r * seq_len;
    float* d = dscore + r * seq_len;
    const float weighted = lane_sum(t + 1, [p, d](std::int64_t j) { return p[j] * d[j]; });
    for (std::int64_t t2 = 0; t2 <= t; ++t2) d[t2] = p[t2] * (d[t2] - weighted) * scale;
  }
};

template <class T>
struct AttentionBackwardQuery {
  const T* qkv;
  const float* dscore;
  T* dqkv;
  std::int64_t batch, seq_len;
  AttentionLayout heads;
  std::int64_t width;  // 1 or kColumnBlock
  MT_HD std::int64_t count() const { return batch * heads.q_heads * seq_len * blocks_of(heads.head_size, width); }
  MT_HD void operator()(std::int64_t unit) const {
    if (width == 1) {
      block<1>(unit);
    } else {
      block<kColumnBlock>(unit);
    }
  }
  template <std::int64_t W>
  MT_HD void block(std::int64_t unit) const {
    const std::int64_t H = heads.q_heads, hs = heads.head_size, row = heads.row(), blocks = blocks_of(hs, W);
    const std::int64_t r = unit / blocks;  // (b * H + h) * seq_len + t
    const std::int64_t t = r % seq_len, h = (r / seq_len) % H, b = r / (seq_len * H);
    const std::int64_t i0 = (unit % blocks) * W, n = min64(W, hs - i0);
    const float* d = dscore + r * seq_len;
    const T* k = qkv + b * seq_len * row + heads.k_offset(heads.kv_of(h)) + i0;
    float acc[W];
    for (std::int64_t j = 0; j < n; ++j) acc[j] = 0.0f;
    for (std::int64_t t2 = 0; t2 <= t; ++t2) {
      const float ds = d[t2];
      const T* kr = k + t2 * row;
      for (std::int64_t j = 0; j < n; ++j) acc[j] += ds * widen(kr[j]);
    }
    T* dq = dqkv + (b * seq_len + t) * row + heads.q_offset(h) + i0;
    for (std::int64_t j = 0; j < n; ++j) dq[j] = narrow_to<T>(acc[j]);
  }
};

template <class T>
struct AttentionBackwardKeyValue {
  const T* dout;
  const T* qkv;
  const float* att;
  const float* dscore;
  T* dqkv;
  std::int64_t batch, seq_len;
  AttentionLayout heads;
  std::int64_t width;  // 1 or kColumnBlock
  MT_HD std::int64_t count() const { return batch * heads.kv_heads * seq_len * blocks_of(heads.head_size, width); }
  MT_HD void operator()(std::int64_t unit) const {
    if (width == 1) {
      block<1>(unit);
    } else {
      block<kColumnBlock>(unit);
    }
  }
  template <std::int64_t W>
  MT_HD void block(std::int64_t unit) const {
    const std::int64_t H = heads.q_heads, KV = heads.kv_heads, hs = heads.head_size, row = heads.row();
    const std::int64_t out_row = heads.out_row(), blocks = blocks_of(hs, W);
    const std::int64_t r = unit / blocks;  // (b * KV + kv) * seq_len + t2
    const std::int64_t t2 = r % seq_len, kv = (r / seq_len) % KV, b = r / (seq_len * KV);
    const std::int64_t i0 = (unit % blocks) * W, n = min64(W, hs - i0);
    float dk[W], dv[W];
    for (std::int64_t j = 0; j < n; ++j) dk[j] = dv[j] = 0.0f;
    for (std::int64_t h = heads.first_q(kv), h_end = heads.end_q(kv); h < h_end; ++h) {
      // Column t2 of q head h's [T, T] matrices: entry t at [t * seq_len].
      const std::int64_t column = (b * H + h) * seq_len * seq_len + t2;
      const float* d = dscore + column;
      const float* p = att + column;
      const T* q = qkv + b * seq_len * row + heads.q_offset(h) + i0;
      const T* g = dout + b * seq_len * out_row + heads.q_offset(h) + i0;
      for (std::int64_t t = t2; t < seq_len; ++t) {
        const float ds = d[t * seq_len], pt = p[t * seq_len];
        const T* qr = q + t * row;
        const T* gr = g + t * out_row;
        for (std::int64_t j = 0; j < n; ++j) {
          dk[j] += ds * widen(qr[j]);
          dv[j] += pt * widen(gr[j]);
        }
      }
    }
    T* o = dqkv + (b * seq_len + t2) * row + i0;
    for (std::int64_t j = 0; j < n; ++j) {
      o[heads.k_offset(kv) + j] = narrow_to<T>(dk[j]);
      o[heads.v_offset(kv) + j] = narrow_to<T>(dv[j]);
    }
  }
};

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

MT_TOLERANCE(AttentionForward, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same order, FMAs and exp_f contracted on CUDA: scale the largest |out| of the tensor")
MT_TOLERANCE(AttentionBackwardDots, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same order, FMAs on CUDA: scale the largest |dscore| of the tensor")
MT_TOLERANCE(AttentionBackwardSoftmax, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same order, FMAs on CUDA: scale the largest |dscore| of the tensor")
MT_TOLERANCE(AttentionBackwardQuery, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same order, FMAs on CUDA: scale the largest |dq| of the tensor")
MT_TOLERANCE(AttentionBackwardKeyValue, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same order, FMAs on CUDA: scale the largest |dk|, |dv| of the tensor")
MT_TOLERANCE(CausalSoftmaxForward, .fp32 = kSumOrder, .bf16 = kBf16Step, .per_sqrt_terms = true,
             .why = "the row maximum is exact, the sum of exponentials runs in another order on the GPU: scale p, terms t + 1")
MT_TOLERANCE(CausalSoftmaxBackward, .fp32 = kSumOrder, .bf16 = kBf16Step, .per_sqrt_terms = true,
             .why = "the row sum of p dp runs in another order on the GPU: scale p (|dp| + the sum of |p dp|), terms t + 1")
MT_TOLERANCE(StoreColumns, .fp32 = 0,
             .why = "a copy rounded once into T: the same bits")

// The batched-GEMM implementation against the reference (runtime/tests/attention_test.cpp), relative
// to the largest magnitude of the reference's result: fp32 2e-5, the dot products summed in the
// GEMM's order instead of position order; bf16 2e-2, the probabilities and the score gradients are
// rounded to bf16 before the GEMMs read them (the reference keeps them in fp32).
inline constexpr Tolerance kBatchedGemmTolerance{.fp32 = 2e-5, .bf16 = 2e-2,
                                                 .why = "GEMM summation order; bf16 probabilities"};

}  // namespace mt::nn_math

// The ops the backends run unit by unit (runtime/backend.h), and those with a kernel cut for the GPU.
#define MT_ATTENTION_UNIT_OPS(X)                                                                            \
  X(AttentionForward) X(AttentionBackwardDots) X(AttentionBackwardSoftmax) X(AttentionBackwardQuery)      \
  X(AttentionBackwardKeyValue) X(CausalSoftmaxForward) X(CausalSoftmaxBackward) X(StoreColumns)
#define MT_ATTENTION_FAST_OPS(X) X(CausalSoftmaxForward, Attention) X(CausalSoftmaxBackward, Attention)
