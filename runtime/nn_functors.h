// The math of the transformer kernels, written once for host and device. Each op is a struct of
// pointers and sizes with `count()` units of work and `operator()(i)` doing unit i; the CPU runs
// the units in an OpenMP loop, CUDA with one thread per unit (runtime/nn_kernels_cpu.cpp,
// runtime/cuda/nn_kernels.cu). A unit owns its outputs and reduces them in a fixed order, so the
// result never depends on the thread count.
//
// T is the activation type (float, or bf16: meant for CUDA, run on the CPU in tests); arithmetic is in float. Parameters, their
// gradients, norm statistics, attention probabilities and losses are float.
// defines: EmbeddingForward, EmbeddingTokenOrder, EmbeddingBackwardTokens, EmbeddingBackwardPositions,
//          LayerNormForward, LayerNormBackwardInput, LayerNormBackwardParams, RmsNormForward,
//          RmsNormBackwardInput, RmsNormBackwardParams, BroadcastRows, ColumnSum, GeluForward, GeluBackward,
//          Rope, rope_inv_freq, SwigluForward, SwigluBackward, silu, AttentionLayout, AttentionForward,
//          AttentionBackwardDots, AttentionBackwardSoftmax,
//          AttentionBackwardQuery, AttentionBackwardKeyValue, CrossEntropyForward, CrossEntropyBackward,
//          CrossEntropyFused, VocabParallelMax, VocabParallelSumExp, VocabParallelTargetLogit,
//          VocabParallelLoss, SoftmaxRow, exp_f, lane_sum, blocks_of
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/functors.h"

namespace mt::nn_math {

inline constexpr float kLayerNormEps = 1e-5f;
// Columns per unit of the column-reducing ops on the CPU: wide enough to vectorize.
inline constexpr std::int64_t kColumnBlock = 64;

MT_HD std::int64_t min64(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

// The backward ops that sum over many rows (embedding, attention, the column sums of parameter
// gradients) give each unit `width` columns (channels, or key positions), width 1 or
// kColumnBlock. The CPU takes kColumnBlock: a unit's inner loop runs over contiguous memory and
// vectorizes. CUDA takes 1: width times more threads, neighbouring threads reading neighbouring
// addresses. Each element is the same sum in the same order either way, so the results agree bit
// for bit: the width decides who computes, not how.
MT_HD std::int64_t blocks_of(std::int64_t n, std::int64_t width) { return (n + width - 1) / width; }

MT_HD float float_from_bits(std::int32_t bits) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}
MT_HD std::int32_t bits_from_float(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(f);
#else
  std::int32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

// exp(x) in plain float arithmetic, no library call, so CPU loops over it vectorize (the softmax
// over a 50k vocabulary was half of a small model's step with libm's scalar expf). x = n ln2 + r
// with |r| <= ln2/2 (n rounded by the 1.5 x 2^23 trick, ln2 split in two for an exact product),
// e^r by a degree-7 polynomial (cephes' minimax coefficients), 2^n from the exponent bits.
// Relative error about 2e-7; arguments below -87.3 give 0, above 88 are taken as 88.
MT_HD float exp_f(float x) {
  const float underflow = x < -87.3f ? 0.0f : 1.0f;
  x = x < -87.3f ? -87.3f : (x > 88.0f ? 88.0f : x);
  const float shifted = x * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const std::int32_t ni = bits_from_float(shifted) - 0x4B400000;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * float_from_bits((ni + 127) << 23) * underflow;
}

// tanh from exp_f: 1 - 2 / (e^2x + 1), which saturates cleanly to +-1 (e^2x clamps, or is 0).
// Absolute error about 1e-7: libm's tanhf (through expm1f) was a tenth of a GPT-2 step.
MT_HD float tanh_f(float x) { return 1.0f - 2.0f / (exp_f(2.0f * x) + 1.0f); }

// Row reductions in kLanes interleaved partial results, folded in a fixed order: the same result
// on every backend and thread count, and a shape the CPU compiler turns into vector code.
inline constexpr int kLanes = 8;

// f(j) for j in [0, n) folded by `combine` into kLanes partial results (element j into lane
// j % kLanes, in order), then the lanes pairwise in a fixed tree.
template <class F, class Combine>
MT_HD float lane_reduce(std::int64_t n, float identity, const F& f, const Combine& combine) {
  float acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = identity;
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = combine(acc[l], f(j + l));
  for (int l = 0; j < n; ++j, ++l) acc[l] = combine(acc[l], f(j));
  return combine(combine(combine(acc[0], acc[4]), combine(acc[1], acc[5])),
                 combine(combine(acc[2], acc[6]), combine(acc[3], acc[7])));
}

struct AddF {
  MT_HD float operator()(float a, float b) const { return a + b; }
};
struct MaxF {
  MT_HD float operator()(float a, float b) const { return b > a ? b : a; }
};

template <class F>
MT_HD float lane_sum(std::int64_t n, const F& f) {
  return lane_reduce(n, 0.0f, f, AddF{});
}

template <class F>
MT_HD float lane_max(std::int64_t n, const F& f) {
  return lane_reduce(n, -3.402823466e38f, f, MaxF{});
}

// out[n, :] = wte[tokens[n] - vocab_begin, :] + wpe[n % T, :]; one unit per row. wte holds the
// vocabulary rows [vocab_begin, vocab_begin + vocab_rows) (all of them with vocab_begin 0): a token
// outside them contributes 0, and wpe may be null (no position term). Each term is added in fp32
// and rounded once into T; a missing term is left out rather than added as 0, so the full-table
// case computes exactly e + p.
template <class T>
struct EmbeddingForward {
  const std::int32_t* tokens;
  const float* wte;
  const float* wpe;  // may be null
  T* out;
  std::int64_t rows, seq_len, channels, vocab_begin, vocab_rows;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const std::int64_t local = static_cast<std::int64_t>(tokens[n]) - vocab_begin;
    const float* e = local >= 0 && local < vocab_rows ? wte + local * channels : nullptr;
    const float* p = wpe != nullptr ? wpe + (n % seq_len) * channels : nullptr;
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

// dwpe[t, cols] += sum over b of dout[b, t, cols], b increasing; one unit per (position, block of
// `width` columns).
template <class T>
struct EmbeddingBackwardPositions {
  const T* dout;
  float* dwpe;
  std::int64_t batch, seq_len, channels, width;
  MT_HD std::int64_t count() const { return seq_len * blocks_of(channels, width); }
  MT_HD void operator()(std::int64_t unit) const {
    const std::int64_t blocks = blocks_of(channels, width);
    const std::int64_t t = unit / blocks, c0 = (unit % blocks) * width, c1 = min64(c0 + width, channels);
    float* dst = dwpe + t * channels;
    for (std::int64_t b = 0; b < batch; ++b) {
      const T* src = dout + (b * seq_len + t) * channels;
      for (std::int64_t c = c0; c < c1; ++c) dst[c] += widen(src[c]);
    }
  }
};

// One unit per row: normalize, scale and shift; keep mean and 1/std for backward.
template <class T>
struct LayerNormForward {
  const T* x;
  const float* weight;
  const float* bias;
  T* out;
  float* mean;
  float* rstd;
  std::int64_t rows, channels;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* xr = x + n * channels;
    float sum = 0.0f;
    for (std::int64_t c = 0; c < channels; ++c) sum += widen(xr[c]);
    const float m = sum / static_cast<float>(channels);
    float var = 0.0f;
    for (std::int64_t c = 0; c < channels; ++c) {
      const float d = widen(xr[c]) - m;
      var += d * d;
    }
    const float s = 1.0f / ::sqrtf(var / static_cast<float>(channels) + kLayerNormEps);
    T* o = out + n * channels;
    for (std::int64_t c = 0; c < channels; ++c) o[c] = narrow_to<T>((widen(xr[c]) - m) * s * weight[c] + bias[c]);
    mean[n] = m;
    rstd[n] = s;
  }
};

// dx[n, :] += the input gradient of row n; one unit per row.
template <class T>
struct LayerNormBackwardInput {
  const T* dout;
  const T* x;
  const float* weight;
  const float* mean;
  const float* rstd;
  T* dx;
  std::int64_t rows, channels;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* g = dout + n * channels;
    const T* xr = x + n * channels;
    const float m = mean[n], s = rstd[n];
    // d(norm) = weight * dout; dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)).
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (std::int64_t c = 0; c < channels; ++c) {
      const float dnorm = weight[c] * widen(g[c]);
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (widen(xr[c]) - m) * s;
    }
    dnorm_mean /= static_cast<float>(channels);
    dnorm_norm_mean /= static_cast<float>(channels);
    T* d = dx + n * channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      const float norm = (widen(xr[c]) - m) * s;
      const float dnorm = weight[c] * widen(g[c]);
      d[c] = narrow_to<T>(widen(d[c]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
    }
  }
};

// dweight[c] += sum_n dout[n, c] * norm[n, c]; dbias[c] += sum_n dout[n, c]; one unit per block
// of `width` columns, rows summed in order.
template <class T>
struct LayerNormBackwardParams {
  const T* dout;
  const T* x;
  const float* mean;
  const float* rstd;
  float* dweight;
  float* dbias;
  std::int64_t rows, channels, width;
  MT_HD std::int64_t count() const { return blocks_of(channels, width); }
  MT_HD void operator()(std::int64_t block) const {
    const std::int64_t c0 = block * width, c1 = min64(c0 + width, channels);
    for (std::int64_t n = 0; n < rows; ++n) {
      const T* g = dout + n * channels;
      const T* xr = x + n * channels;
      const float m = mean[n], s = rstd[n];
      for (std::int64_t c = c0; c < c1; ++c) {
        dweight[c] += widen(g[c]) * ((widen(xr[c]) - m) * s);
        dbias[c] += widen(g[c]);
      }
    }
  }
};

// RMSNorm (llama): one unit per row; out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps) kept
// for backward. The sum of squares is a lane_sum (vectorizes; the same order everywhere).
template <class T>
struct RmsNormForward {
  const T* x;
  const float* weight;
  T* out;
  float* rstd;
  std::int64_t rows, channels;
  float eps;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* xr = x + n * channels;
    const float sum_sq = lane_sum(channels, [xr](std::int64_t c) {
      const float v = widen(xr[c]);
      return v * v;
    });
    const float s = 1.0f / ::sqrtf(sum_sq / static_cast<float>(channels) + eps);
    T* o = out + n * channels;
    for (std::int64_t c = 0; c < channels; ++c) o[c] = narrow_to<T>(widen(xr[c]) * s * weight[c]);
    rstd[n] = s;
  }
};

// dx[n, :] += rstd * (w*dout - norm * mean(w*dout * norm)), norm = x * rstd; one unit per row.
template <class T>
struct RmsNormBackwardInput {
  const T* dout;
  const T* x;
  const float* weight;
  const float* rstd;
  T* dx;
  std::int64_t rows, channels;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* g = dout + n * channels;
    const T* xr = x + n * channels;
    const float s = rstd[n];
    const float dnorm_norm_mean =
        lane_sum(channels, [&](std::int64_t c) { return weight[c] * widen(g[c]) * (widen(xr[c]) * s); }) /
        static_cast<float>(channels);
    T* d = dx + n * channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      const float norm = widen(xr[c]) * s;
      const float dnorm = weight[c] * widen(g[c]);
      d[c] = narrow_to<T>(widen(d[c]) + (dnorm - norm * dnorm_norm_mean) * s);
    }
  }
};

// dweight[c] += sum_n dout[n, c] * x[n, c] * rstd[n]; one unit per block of `width` columns, rows
// summed in order.
template <class T>
struct RmsNormBackwardParams {
  const T* dout;
  const T* x;
  const float* rstd;
  float* dweight;
  std::int64_t rows, channels, width;
  MT_HD std::int64_t count() const { return blocks_of(channels, width); }
  MT_HD void operator()(std::int64_t block) const {
    const std::int64_t c0 = block * width, c1 = min64(c0 + width, channels);
    for (std::int64_t n = 0; n < rows; ++n) {
      const T* g = dout + n * channels;
      const T* xr = x + n * channels;
      const float s = rstd[n];
      for (std::int64_t c = c0; c < c1; ++c) dweight[c] += widen(g[c]) * (widen(xr[c]) * s);
    }
  }
};

// out[n, :] = bias; one unit per row.
template <class T>
struct BroadcastRows {
  const float* bias;
  T* out;
  std::int64_t rows, cols;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    T* o = out + n * cols;
    for (std::int64_t j = 0; j < cols; ++j) o[j] = narrow_to<T>(bias[j]);
  }
};

// sum[j] += sum over rows of x[n, j]; one unit per block of `width` columns, rows in order.
template <class T>
struct ColumnSum {
  const T* x;
  float* sum;
  std::int64_t rows, cols, width;
  MT_HD std::int64_t count() const { return blocks_of(cols, width); }
  MT_HD void operator()(std::int64_t block) const {
    const std::int64_t j0 = block * width, j1 = min64(j0 + width, cols);
    for (std::int64_t n = 0; n < rows; ++n) {
      const T* xr = x + n * cols;
      for (std::int64_t j = j0; j < j1; ++j) sum[j] += widen(xr[j]);
    }
  }
};

// GELU with the tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluCube = 0.044715f;

MT_HD float gelu(float x) { return 0.5f * x * (1.0f + tanh_f(kGeluScale * (x + kGeluCube * x * x * x))); }
MT_HD float gelu_grad(float x) {
  const float u = kGeluScale * (x + kGeluCube * x * x * x);
  const float th = tanh_f(u);
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
}

// One unit per element.
template <class T>
struct GeluForward {
  const T* x;
  T* out;
  std::int64_t n;
  MT_HD std::int64_t count() const { return n; }
  MT_HD void operator()(std::int64_t i) const { out[i] = narrow_to<T>(gelu(widen(x[i]))); }
};

template <class T>
struct GeluBackward {
  const T* x;
  const T* dout;
  T* dx;  // may alias dout or x: each element is read before it is written
  std::int64_t n;
  MT_HD std::int64_t count() const { return n; }
  MT_HD void operator()(std::int64_t i) const { dx[i] = narrow_to<T>(gelu_grad(widen(x[i])) * widen(dout[i])); }
};

// Rotary position embedding, Hugging Face's half-split convention: in each head of hs channels,
// channel i < hs/2 pairs with i + hs/2 and turns by angle t * inv_freq[i], inv_freq[i] =
// 1 / theta^(2i/hs) in fp32 (as transformers computes it), t = the position in the sequence:
// (a, b) -> (a cos - b sin, b cos + a sin), or by the inverse rotation (the adjoint, for the
// gradient) when `inverse`. In place on the first `heads` heads of each row of [rows, row channels]
// (the q and k blocks of a fused qkv); one unit per (row, head, pair), which reads its two
// elements before writing them.
MT_HD float rope_inv_freq(std::int64_t i, std::int64_t head_size, float theta) {
  return 1.0f / ::powf(theta, static_cast<float>(2 * i) / static_cast<float>(head_size));
}

template <class T>
struct Rope {
  T* x;
  std::int64_t rows, seq_len, row_channels, heads, head_size;
  float theta;
  bool inverse;
  MT_HD std::int64_t count() const { return rows * heads * (head_size / 2); }
  MT_HD void operator()(std::int64_t unit) const {
    const std::int64_t half = head_size / 2;
    const std::int64_t i = unit % half, h = (unit / half) % heads, n = unit / (half * heads);
    const float angle = static_cast<float>(n % seq_len) * rope_inv_freq(i, head_size, theta);
    const float c = ::cosf(angle), s = inverse ? -::sinf(angle) : ::sinf(angle);
    T* p = x + n * row_channels + h * head_size + i;
    const float a = widen(p[0]), b = widen(p[half]);
    p[0] = narrow_to<T>(a * c - b * s);
    p[half] = narrow_to<T>(b * c + a * s);
  }
};

// SwiGLU over gate_up [N, 2F] = [gate | up]: out [N, F] = silu(gate) * up, silu(g) = g / (1 + e^-g).
// One unit per element of out.
MT_HD float silu(float g) { return g / (1.0f + exp_f(-g)); }

template <class T>
struct SwigluForward {
  const T* gate_up;
  T* out;
  std::int64_t rows, hidden;  // hidden = F
  MT_HD std::int64_t count() const { return rows * hidden; }
  MT_HD void operator()(std::int64_t i) const {
    const std::int64_t n = i / hidden, f = i % hidden;
    const T* r = gate_up + n * 2 * hidden;
    out[i] = narrow_to<T>(silu(widen(r[f])) * widen(r[hidden + f]));
  }
};

// dgate = dout * up * silu'(gate), dup = dout * silu(gate), silu'(g) = s + silu(g) (1 - s) with
// s = 1 / (1 + e^-g). One unit per (row, f): it reads gate and up before writing their
// gradients, so dgate_up may alias gate_up.
template <class T>
struct SwigluBackward {
  const T* gate_up;
  const T* dout;
  T* dgate_up;
  std::int64_t rows, hidden;
  MT_HD std::int64_t count() const { return rows * hidden; }
  MT_HD void operator()(std::int64_t i) const {
    const std::int64_t n = i / hidden, f = i % hidden;
    const T* r = gate_up + n * 2 * hidden;
    const float g = widen(r[f]), u = widen(r[hidden + f]), d = widen(dout[i]);
    const float e = exp_f(-g);
    const float sig = 1.0f / (1.0f + e), act = g / (1.0f + e);
    T* o = dgate_up + n * 2 * hidden;
    o[f] = narrow_to<T>(d * u * (sig + act * (1.0f - sig)));
    o[hidden + f] = narrow_to<T>(d * act);
  }
};

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

// One unit per row of logits [N, Vp]: over the first `vocab` columns, lse = log(sum(exp(x))) and
// loss = lse - x[target]. The padding columns never enter.
template <class T>
struct CrossEntropyForward {
  const T* logits;
  const std::int32_t* targets;
  float* losses;
  float* lse;
  std::int64_t rows, vocab, padded_vocab;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* x = logits + n * padded_vocab;
    const float m = lane_max(vocab, [x](std::int64_t j) { return widen(x[j]); });
    const float sum = lane_sum(vocab, [x, m](std::int64_t j) { return exp_f(widen(x[j]) - m); });
    const float log_sum = m + ::logf(sum);
    lse[n] = log_sum;
    losses[n] = log_sum - widen(x[targets[n]]);
  }
};

// dlogits = (softmax - onehot(target)) * dloss over the first `vocab` columns, zero in the
// padding; one unit per row. dlogits may alias logits. For a vocabulary slice (tensor
// parallelism) the rows hold the columns [vocab_begin, vocab_begin + padded_vocab) of the full
// logits, `vocab` of them real; the one-hot term lands only where the slice holds the target.
template <class T>
struct CrossEntropyBackward {
  const T* logits;
  const std::int32_t* targets;
  const float* lse;
  T* dlogits;
  std::int64_t rows, vocab, padded_vocab;
  float dloss;
  std::int64_t vocab_begin;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* x = logits + n * padded_vocab;
    T* d = dlogits + n * padded_vocab;
    const float log_sum = lse[n];
    const std::int64_t target = static_cast<std::int64_t>(targets[n]) - vocab_begin;
    const bool owned = target >= 0 && target < vocab;
    // Read before the loop overwrites it (dlogits may be logits).
    const float p_target = owned ? exp_f(widen(x[target]) - log_sum) : 0.0f;
    for (std::int64_t j = 0; j < vocab; ++j) d[j] = narrow_to<T>(exp_f(widen(x[j]) - log_sum) * dloss);
    if (owned) d[target] = narrow_to<T>((p_target - 1.0f) * dloss);
    for (std::int64_t j = vocab; j < padded_vocab; ++j) d[j] = narrow_to<T>(0.0f);
  }
};

// CrossEntropyForward then CrossEntropyBackward (the whole vocabulary, vocab_begin 0) on one row in
// one unit: losses, lse and dlogits come out as the two ops give them, bit for bit, while the row is
// at hand once. dlogits may alias logits (the backward reads each element before writing it).
template <class T>
struct CrossEntropyFused {
  const T* logits;
  const std::int32_t* targets;
  float* losses;
  float* lse;
  T* dlogits;
  std::int64_t rows, vocab, padded_vocab;
  float dloss;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    CrossEntropyForward<T>{logits, targets, losses, lse, rows, vocab, padded_vocab}(n);
    CrossEntropyBackward<T>{logits, targets, lse, dlogits, rows, vocab, padded_vocab, dloss, 0}(n);
  }
};

// Cross-entropy over a vocabulary slice, in pieces between which the caller allreduces over the
// tensor-parallel group: logits [N, cols] hold the columns [vocab_begin, vocab_begin + cols) of
// the full logits, the first `vocab` of them real (the others padding, never read). One unit per
// row; the row reductions are those of CrossEntropyForward (lane_max, lane_sum).

// row_max[n] = max of the real columns; the lowest float when the slice has none (it never wins
// the allreduce-max). T is the logits type.
template <class T>
struct VocabParallelMax {
  const T* logits;
  float* row_max;
  std::int64_t rows, vocab, cols;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* x = logits + n * cols;
    row_max[n] = lane_max(vocab, [x](std::int64_t j) { return widen(x[j]); });
  }
};

// sum_exp[n] = sum over the real columns of exp(x - row_max[n]), row_max the global maximum; 0
// when the slice has none.
template <class T>
struct VocabParallelSumExp {
  const T* logits;
  const float* row_max;
  float* sum_exp;
  std::int64_t rows, vocab, cols;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* x = logits + n * cols;
    const float m = row_max[n];
    sum_exp[n] = lane_sum(vocab, [x, m](std::int64_t j) { return exp_f(widen(x[j]) - m); });
  }
};

// target_logit[n] = x[targets[n] - vocab_begin] where the slice holds the target, else 0 (so the
// allreduce-sum over slices is exactly the target's logit).
template <class T>
struct VocabParallelTargetLogit {
  const T* logits;
  const std::int32_t* targets;
  float* target_logit;
  std::int64_t rows, cols, vocab_begin;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const std::int64_t target = static_cast<std::int64_t>(targets[n]) - vocab_begin;
    target_logit[n] = target >= 0 && target < cols ? widen(logits[n * cols + target]) : 0.0f;
  }
};

// From the allreduced statistics: lse = max + log(sum_exp), loss = lse - target_logit, the same
// expressions as CrossEntropyForward. All fp32; T is unused (every op has both instantiations).
template <class T>
struct VocabParallelLoss {
  const float* row_max;
  const float* sum_exp;
  const float* target_logit;
  float* losses;
  float* lse;
  std::int64_t rows;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const float log_sum = row_max[n] + ::logf(sum_exp[n]);
    lse[n] = log_sum;
    losses[n] = log_sum - target_logit[n];
  }
};

// probs[n, :vocab] = softmax(logits[n, :vocab] / temperature); one unit per row.
template <class T>
struct SoftmaxRow {
  const T* logits;
  float* probs;
  std::int64_t rows, vocab, padded_vocab;
  float temperature;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    const T* x = logits + n * padded_vocab;
    float* p = probs + n * vocab;
    const float max_logit = lane_max(vocab, [x](std::int64_t j) { return widen(x[j]); });
    for (std::int64_t j = 0; j < vocab; ++j) p[j] = exp_f((widen(x[j]) - max_logit) / temperature);
    const float inv = 1.0f / lane_sum(vocab, [p](std::int64_t j) { return p[j]; });
    for (std::int64_t j = 0; j < vocab; ++j) p[j] *= inv;
  }
};

}  // namespace mt::nn_math
