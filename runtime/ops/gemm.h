// The GEMM family's reference math: the GEMM itself is BLAS's (OpenBLAS on the CPU, cuBLAS and
// cuBLASLt on CUDA: runtime/cpu/gemm.cpp, runtime/cuda/gemm.cu); here is what each epilogue
// (runtime/gemm.h) does to one fp32 result of the GEMM before it is stored. The CPU loops
// (runtime/cpu/gemm_epilogue.cpp) and the CUDA reference path (runtime/gemm.cpp, through the GELU
// ops) compute exactly this; cuBLASLt's epilogues compute the same functions with their own GELU and
// roundings.
// defines: gemm_math::store_bias, store_bias_gelu, store_dgelu, kGemmTolerance
#pragma once

#include "runtime/ops/activations.h"  // defines: gelu, gelu_grad, widen, narrow_to
#include "runtime/ops/tolerance.h"

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

// A GEMM on another device against the CPU's, per element, relative to the sum of the |terms| of its
// dot product (plus |bias|): fp32 1e-4, the products summed in another order (blocked, split-k) by
// each library; bf16 adds one bf16 spacing of the value, for a rounding to the neighbouring number
// (cuBLASLt also takes its GELU of the unrounded pre-activation).
inline constexpr nn_math::Tolerance kGemmTolerance{.fp32 = 1e-4, .bf16 = nn_math::kBf16Step,
                                                   .why = "BLAS summation order; one bf16 rounding"};

}  // namespace mt::gemm_math
