// The optimizer family: the AdamW update of one fp32 element, written once for the CPU loop
// (runtime/cpu/optimizer.cpp) and the CUDA kernel (runtime/cuda/optimizer.cu), so both backends
// compute the same function bit for bit (its tolerance is 0; optim/tests/adamw_cuda_test.cpp).
//
//   g     = grad * grad_scale                       (global-norm clipping and loss scaling enter here)
//   m     = beta1 * m + (1 - beta1) * g
//   v     = beta2 * v + (1 - beta2) * g * g
//   m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)   (both divisors computed once per step on the host)
//   p     = p - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)   (decoupled weight decay)
//
// Every operation is a separately rounded fp32 operation in the order written above. On the device
// the explicit round-to-nearest intrinsics keep nvcc from contracting a multiply and an add into
// one FMA (it does by default) and keep -use_fast_math from replacing division and square root
// with approximations; the host compiler in ISO C++ mode contracts nothing.
//
// Many tensors in one pass (optim/adamw.h): a table of AdamWTensor entries cut into AdamWChunk
// pieces of at most kAdamWChunk elements, walked by one parallel loop (CPU) or one launch (CUDA).
// A tensor with a bf16 working copy gets it written beside the update: narrow_to<bf16> of the new
// parameter, the bits a separate fp32-to-bf16 cast of it gives.
// defines: AdamWStepArgs, AdamWElement, adamw_update, AdamWTensor, AdamWChunk, kAdamWChunk,
//          MT_OPTIMIZER_FAST_OPS
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/dtype.h"        // defines: bf16
#include "runtime/host_device.h"  // defines: MT_HD

namespace mt {

// Per-step constants of one slot's update, prepared on the host.
struct AdamWStepArgs {
  float lr = 0;
  float beta1 = 0;
  float beta2 = 0;
  float one_minus_beta1 = 0;    // 1 - beta1, rounded once on the host
  float one_minus_beta2 = 0;    // 1 - beta2
  float bias_correction1 = 1;   // 1 - beta1^t
  float bias_correction2 = 1;   // 1 - beta2^t
  float eps = 0;
  float weight_decay = 0;       // 0 for slots without decay
  float grad_scale = 1;
};

// One element's state after the update.
struct AdamWElement {
  float param;
  float m;
  float v;
};

namespace adamw_rn {
// fp32 operations rounded on their own, the same on host and device.
MT_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MT_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
MT_HD float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
MT_HD float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
MT_HD float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
}  // namespace adamw_rn

MT_HD AdamWElement adamw_update(float param, float grad, float m, float v, const AdamWStepArgs& a) {
  namespace rn = adamw_rn;
  const float g = rn::mul(grad, a.grad_scale);
  const float m_new = rn::add(rn::mul(a.beta1, m), rn::mul(a.one_minus_beta1, g));
  const float v_new = rn::add(rn::mul(a.beta2, v), rn::mul(a.one_minus_beta2, rn::mul(g, g)));
  const float m_hat = rn::div(m_new, a.bias_correction1);
  const float v_hat = rn::div(v_new, a.bias_correction2);
  const float direction =
      rn::add(rn::div(m_hat, rn::add(rn::sqrt(v_hat), a.eps)), rn::mul(a.weight_decay, param));
  return AdamWElement{rn::sub(param, rn::mul(a.lr, direction)), m_new, v_new};
}

// One tensor of a multi-tensor pass. weight_decay is the tensor's own (0 without decay); the step's
// other constants come per step in AdamWStepArgs (whose weight_decay the pass ignores).
struct AdamWTensor {
  float* param = nullptr;
  const float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  bf16* param_bf16 = nullptr;  // the bf16 working copy, or null
  std::int64_t numel = 0;
  float weight_decay = 0;
};

// Elements [begin, begin + numel) of tensor `tensor` of the table: the unit of work of a thread
// (CPU) or a block (CUDA). Fixed at the optimizer's construction, so the split never varies.
struct AdamWChunk {
  std::int64_t tensor = 0;
  std::int64_t begin = 0;
  std::int64_t numel = 0;
};

// Elements per chunk: large enough to amortize a chunk's start, small enough that GPT-2's 124M
// parameters give thousands of chunks to share out.
inline constexpr std::int64_t kAdamWChunk = 65536;

}  // namespace mt

// X(op, family) for the optimizer's kernels cut for the GPU: the multi-tensor AdamW launch (an op
// of its own, not a unit op: optim/adamw.cpp picks it by the context's CudaKernels).
#define MT_OPTIMIZER_FAST_OPS(X) X(AdamWMulti, Optimizer)
