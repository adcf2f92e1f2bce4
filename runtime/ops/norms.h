// The norms family: LayerNorm (GPT-2) and RMSNorm (Llama), forward and backward, and the forward
// fused with the residual add before it. CUDA: runtime/cuda/norms.cu: the forwards (fused or not) as
// a warp per row (fast, behind MESHTRAIN_CUDA_KERNELS=norms), the LayerNorm backward as a warp per
// row and column tiles folded in order (its only CUDA kernels), the rest one thread per unit.
// defines: kLayerNormEps, LayerNormForward, LayerNormBackwardInput, LayerNormBackwardParams, RmsNormForward,
//          RmsNormBackwardInput, RmsNormBackwardParams, AddLayerNormForward, AddRmsNormForward,
//          MT_NORMS_UNIT_OPS, MT_NORMS_FAST_OPS
#pragma once

#include "runtime/ops/math.h"
#include "runtime/ops/tolerance.h"

namespace mt::nn_math {

inline constexpr float kLayerNormEps = 1e-5f;

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

// The residual add fused with the norm after it: sum = x + y rounded into T (kernels::binary's
// Add), then the norm of the stored, rounded sum, so the bits are the unfused pair's. One unit per
// row, which reads its row of y whole before it writes its out: out may be y. The backward needs
// no fused op: the norms' input gradients already add onto dx, the residual gradient.
template <class T>
struct AddLayerNormForward {
  const T* x;
  const T* y;
  const float* weight;
  const float* bias;
  T* sum;
  T* out;
  float* mean;
  float* rstd;
  std::int64_t rows, channels;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    for (std::int64_t c = n * channels; c < (n + 1) * channels; ++c) sum[c] = narrow_to<T>(widen(x[c]) + widen(y[c]));
    LayerNormForward<T>{sum, weight, bias, out, mean, rstd, rows, channels}(n);
  }
};

template <class T>
struct AddRmsNormForward {
  const T* x;
  const T* y;
  const float* weight;
  T* sum;
  T* out;
  float* rstd;
  std::int64_t rows, channels;
  float eps;
  MT_HD std::int64_t count() const { return rows; }
  MT_HD void operator()(std::int64_t n) const {
    for (std::int64_t c = n * channels; c < (n + 1) * channels; ++c) sum[c] = narrow_to<T>(widen(x[c]) + widen(y[c]));
    RmsNormForward<T>{sum, weight, out, rstd, rows, channels, eps}(n);
  }
};

MT_TOLERANCE(LayerNormForward, .fp32 = kSumOrder, .bf16 = kBf16Step, .per_sqrt_terms = true,
             .why = "the mean and variance are sums over the C channels, in lane order on the CPU and in a butterfly on the GPU: scale |x - mean| rstd |w| + |b|, terms C")
MT_TOLERANCE(LayerNormBackwardInput, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "a warp per row sums the row terms in another order: scale the largest |dx| of the tensor")
MT_TOLERANCE(LayerNormBackwardParams, .fp32 = 1e-4, .bf16 = 1e-4,
             .why = "row tiles folded in order instead of one pass over the rows: scale |start| + the sum of |terms| of each column")
MT_TOLERANCE(RmsNormForward, .fp32 = kSumOrder, .bf16 = kBf16Step, .per_sqrt_terms = true,
             .why = "the mean square is a sum over the C channels in another order on the GPU: scale |x| rstd |w|, terms C")
MT_TOLERANCE(AddLayerNormForward, .fp32 = kSumOrder, .bf16 = kBf16Step, .per_sqrt_terms = true,
             .why = "the sum is one rounded add on every device (the same bits); the norm is LayerNormForward's: scale |r - mean| rstd |w| + |b|, terms C")
MT_TOLERANCE(AddRmsNormForward, .fp32 = kSumOrder, .bf16 = kBf16Step, .per_sqrt_terms = true,
             .why = "the sum is one rounded add on every device (the same bits); the norm is RmsNormForward's: scale |r| rstd |w|, terms C")
MT_TOLERANCE(RmsNormBackwardInput, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same order, nvcc contracts the products into FMAs: scale the largest |dx| of the tensor")
MT_TOLERANCE(RmsNormBackwardParams, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same order, FMAs on CUDA: scale the largest |dweight| of the tensor")

}  // namespace mt::nn_math

// The ops the backends run unit by unit (runtime/backend.h; on CUDA the layernorm backward has
// kernels of its own instead), and those with a kernel cut for the GPU: (op, CudaKernels family).
#define MT_NORMS_UNIT_OPS(X) \
  X(LayerNormForward) X(RmsNormForward) X(RmsNormBackwardInput) X(RmsNormBackwardParams) X(AddLayerNormForward) X(AddRmsNormForward)
#define MT_NORMS_OWN_CUDA_OPS(X) X(LayerNormBackwardInput) X(LayerNormBackwardParams)
#define MT_NORMS_FAST_OPS(X) \
  X(LayerNormForward, Norms) X(RmsNormForward, Norms) X(AddLayerNormForward, Norms) X(AddRmsNormForward, Norms)
