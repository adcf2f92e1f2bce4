// Causal grouped-query self-attention as one op with two implementations (runtime/attention_kernel.h):
// the layer holds an AttentionKernel, asks attention_saved for the tensor the forward keeps, and
// hands that tensor back to the backward; it never reads it. qkv, heads and the outputs are those of
// runtime/nn_kernels.h attention_forward / attention_backward (the Reference implementation).
//
// BatchedGemm, per sequence and kv head, over the local q heads that read it (strided batches, the
// kv head's k and v reached through a zero stride, never copied):
//   forward   S = Q K^T (fp32), P = causal_softmax(S / sqrt(hs)) in the activation dtype, O = P V
//   backward  dP = dO V^T (fp32), dS = P (dP - rowsum(P dP)) / sqrt(hs) in the activation dtype,
//             dQ = dS K, dK = sum over the q heads of dS^T Q, dV = sum of P^T dO
// dK and dV sum the q heads in ascending order in fp32 and are rounded once. Every GEMM is the
// tiled one of runtime/cpu/gemm.cpp on the CPU (the same bits at any thread count) and cuBLAS on CUDA.
// Tolerances against Reference (runtime/tests/attention_test.cpp): fp32 within 2e-5 relative (the
// same sums in another order); bf16 within 2e-2 (P and dS are rounded to bf16 before the GEMMs
// that read them, as cuBLAS and cuDNN paths do, where Reference keeps them in fp32).
// defines: attention_layout, attention_kernel_for, attention_saved, attention_forward, attention_backward
#pragma once

#include "runtime/attention_kernel.h"
#include "runtime/nn_kernels.h"
#include "runtime/ops/attention.h"
#include "runtime/tensor.h"

namespace mt::nn {

// Where the heads of qkv [B, T, (q_heads + 2 x kv_heads) x hs] sit, checked: the head size divides
// the row, and every local q head reads a local kv head.
nn_math::AttentionLayout attention_layout(const Tensor& qkv, const AttentionHeads& heads);

// The implementation for a device: BatchedGemm on the CPU, Reference on CUDA, unless
// MESHTRAIN_ATTENTION is `reference` or `gemm` (anything else is an error naming the variable).
AttentionKernel attention_kernel_for(bool cpu);

// The tensor the forward fills and the backward reads, for qkv [B, T, *] and `heads`.
Tensor attention_saved(DeviceContext& ctx, AttentionKernel kernel, std::int64_t batch, std::int64_t seq_len,
                       const AttentionHeads& heads, DType activations);
// Its shape and dtype without allocating (for buffers laid out by the caller).
Shape attention_saved_shape(std::int64_t batch, std::int64_t seq_len, const AttentionHeads& heads);
DType attention_saved_dtype(AttentionKernel kernel, DType activations);

void attention_forward(DeviceContext& ctx, AttentionKernel kernel, const Tensor& qkv, const AttentionHeads& heads,
                       Tensor& out, Tensor& saved);
void attention_backward(DeviceContext& ctx, AttentionKernel kernel, const Tensor& dout, const Tensor& qkv,
                        const Tensor& saved, const AttentionHeads& heads, Tensor& dqkv);

}  // namespace mt::nn
