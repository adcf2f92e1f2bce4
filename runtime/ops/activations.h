// The activations family: GELU (GPT-2's MLP), SwiGLU (Llama's) and the rotary position embedding
// (Llama's q and k). CUDA: runtime/cuda/activations.cu.
// defines: gelu, gelu_grad, kGeluScale, kGeluCube, GeluForward, GeluBackward, rope_inv_freq, Rope, silu,
//          SwigluForward, SwigluBackward, MT_ACTIVATIONS_UNIT_OPS, MT_ACTIVATIONS_FAST_OPS
#pragma once

#include "runtime/ops/math.h"
#include "runtime/ops/tolerance.h"

namespace mt::nn_math {

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
// 1 / theta^(2i/hs) in fp32 (as transformers computes it), t = the position in the sequence
// (positions[row % seq_len] when positions is given, a context-parallel rank's global positions):
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
  const std::int32_t* positions = nullptr;  // [seq_len] or null: position t
  MT_HD std::int64_t count() const { return rows * heads * (head_size / 2); }
  MT_HD void operator()(std::int64_t unit) const {
    const std::int64_t half = head_size / 2;
    const std::int64_t i = unit % half, h = (unit / half) % heads, n = unit / (half * heads);
    const float angle = static_cast<float>(position_of(positions, n % seq_len)) * rope_inv_freq(i, head_size, theta);
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

MT_TOLERANCE(GeluForward, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "tanh_f through exp_f; nvcc contracts its polynomial into FMAs: scale the largest |out| of the tensor")
MT_TOLERANCE(GeluBackward, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same, for the derivative: scale the largest |dx| of the tensor")
MT_TOLERANCE(Rope, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "CUDA's powf, cosf and sinf are within 2 ulp of glibc's: scale the largest |x| of the tensor")
MT_TOLERANCE(SwigluForward, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "silu through exp_f, FMAs on CUDA: scale the largest |out| of the tensor")
MT_TOLERANCE(SwigluBackward, .fp32 = 1e-5, .bf16 = kBf16Step,
             .why = "the same, for the derivative: scale the largest |dgate_up| of the tensor")

}  // namespace mt::nn_math

// The ops the backends run unit by unit (runtime/backend.h), and those with a kernel cut for the GPU.
#define MT_ACTIVATIONS_UNIT_OPS(X) X(GeluForward) X(GeluBackward) X(Rope) X(SwigluForward) X(SwigluBackward)
#define MT_ACTIVATIONS_FAST_OPS(X)
