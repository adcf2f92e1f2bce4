// Block attention by strided-batched GEMMs (runtime/block_attention.h's entry points run it for
// AttentionKernel::BatchedGemm, the CPU's default; attention_kernel_for picks): per sequence and kv
// head, over the local q heads that read it (a batch of G q heads, the kv head reached through a
// zero stride, never copied), with the block's mask applied between the GEMMs:
//   forward   S = Q K^T (fp32), P = softmax of S / sqrt(hs) over the keys each query sees (in the
//             activation dtype), lse = max + log(sum), O = P V into the fp32 block output
//   backward  S again, dP = dO V^T (fp32), P = exp(S / sqrt(hs) - lse), dS = P (dP - delta) /
//             sqrt(hs) (both in the activation dtype), dq += dS K, dk += dS^T Q and dv += P^T dO
//             per q head in ascending order, all into the fp32 block tensors
// Causal pairs skip the score blocks no query of a row block sees (rows in blocks of kBlockRows, a
// constant: the bits do not depend on the thread count). The GEMMs are runtime/cpu/gemm.cpp's tiled
// ones on the CPU (the same bits at any thread count), cuBLAS on CUDA (only where
// MESHTRAIN_ATTENTION=gemm asks: not yet run on a GPU). Scratch per call, from the caching
// allocator: [G, q_len, kv_len] fp32 scores and (backward) their gradient, plus the activation-dtype
// P and dS under bf16 (runtime/attention_kernel.h block_attention_scratch_tensor_bytes, which the
// memory model counts for cp > 1).
// Against the unit ops (runtime/ops/block_attention.h): fp32 within 2e-5 relative (the dot products
// summed in the GEMM's order), bf16 within 2e-2 (P and dS rounded to bf16 before the GEMMs read them,
// as BatchedGemm's whole-sequence attention does; runtime/tests/block_attention_test.cpp).
// defines: BlockGemmPair, block_attention_gemm_forward, block_attention_gemm_backward
#pragma once

#include <cstdint>

#include "runtime/ops/block_attention.h"
#include "runtime/tensor.h"

namespace mt::nn {

// A checked pair (runtime/block_attention.cpp): heads, rows and positions, and where kv's k heads sit.
struct BlockGemmPair {
  nn_math::AttentionLayout heads;
  nn_math::BlockPair pair;
  std::int64_t kv_width, k_channel;
};

void block_attention_gemm_forward(DeviceContext& ctx, const BlockGemmPair& p, const Tensor& qkv, const Tensor& kv,
                                  Tensor& out, Tensor& lse);
void block_attention_gemm_backward(DeviceContext& ctx, const BlockGemmPair& p, const Tensor& qkv, const Tensor& kv,
                                   const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor& dq,
                                   Tensor& dkv);

}  // namespace mt::nn
