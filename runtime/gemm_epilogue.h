// The per-element math of the GEMM epilogues (runtime/gemm.h): what each does to one fp32 result
// of the GEMM before it is stored. The CPU loops (runtime/gemm_epilogue_cpu.cpp) and the CUDA
// reference path (runtime/gemm.cpp, through the GELU functors) compute exactly this; cuBLASLt's
// epilogues compute the same functions with their own GELU and roundings (runtime/cuda/gemm_lt.cu).
// defines: gemm_math::store_bias, store_bias_gelu, store_dgelu
#pragma once

#include "runtime/nn_functors.h"  // defines: gelu, gelu_grad, widen, narrow_to

namespace mt::gemm_math {

template <class T>
MT_HD T store_bias(float acc, float bias) {
  return narrow_to<T>(acc + bias);
}

// The GELU is taken of the pre-activation as stored (rounded to T), as gelu_forward would take it
// from the saved tensor: a recomputation from `pre` repeats `out` bit for bit.
template <class T>
MT_HD void store_bias_gelu(float acc, float bias, T& pre, T& out) {
  const T stored = narrow_to<T>(acc + bias);
  pre = stored;
  out = narrow_to<T>(nn_math::gelu(widen(stored)));
}

// gelu'(pre) * acc, in the order gelu_backward multiplies (the same bits in fp32).
template <class T>
MT_HD T store_dgelu(float acc, T pre) {
  return narrow_to<T>(nn_math::gelu_grad(widen(pre)) * acc);
}

}  // namespace mt::gemm_math
