// Which implementation computes causal self-attention, and what each keeps from the forward for
// the backward. Pure arithmetic, so the memory model (perf/memory_model.cpp) asks the same function
// the layer does (models/gpt.cpp) without touching a device.
//
//   Reference    one unit per (sequence, position, head), fp32 probabilities [B, H, T, T]
//                (runtime/nn_kernels.h attention_forward). The default on CUDA until the
//                batched-GEMM path has passed its tests on a GPU.
//   BatchedGemm  scores and outputs by strided-batched GEMMs (runtime/gemm.h), a fused causal
//                softmax per row between them; the probabilities are kept in the activation
//                dtype (bf16 under bf16). The default on the CPU.
//
// MESHTRAIN_ATTENTION=reference|gemm picks one for every device (runtime/attention.h).
// defines: AttentionKernel, attention_kernel_name, attention_saved_dtype_bytes,
//          attention_saved_bytes, attention_forward_scratch_bytes, attention_backward_scratch_bytes,
//          block_attention_scratch_tensors, block_attention_scratch_tensor_bytes
#pragma once

#include <cstdint>

namespace mt::nn {

enum class AttentionKernel { Reference, BatchedGemm };

inline const char* attention_kernel_name(AttentionKernel k) {
  return k == AttentionKernel::Reference ? "reference" : "gemm";
}

// Bytes per element of the saved probabilities, for activations of `act_bytes` (4 fp32, 2 bf16).
inline int attention_saved_dtype_bytes(AttentionKernel k, int act_bytes) {
  return k == AttentionKernel::Reference ? 4 : act_bytes;
}

// What the forward keeps for the backward: the probabilities [B, q_heads, T, T].
inline double attention_saved_bytes(AttentionKernel k, double batch, double q_heads, double seq_len, int act_bytes) {
  return batch * q_heads * seq_len * seq_len * attention_saved_dtype_bytes(k, act_bytes);
}

// The scratch the forward allocates while it runs: BatchedGemm under bf16 computes one sequence's
// fp32 scores [q_heads, T, T] before the softmax rounds them into the saved bf16 probabilities
// (under fp32 the scores are computed in place).
inline double attention_forward_scratch_bytes(AttentionKernel k, double q_heads, double seq_len, int act_bytes) {
  return k == AttentionKernel::BatchedGemm && act_bytes != 4 ? q_heads * seq_len * seq_len * 4.0 : 0.0;
}

// The scratch the backward allocates while it runs. Reference: the fp32 gradient of the scores of
// the whole micro-batch. BatchedGemm, one sequence at a time: the fp32 gradient of its probabilities
// [q_heads, T, T], under bf16 the bf16 gradient of its scores beside it, and the fp32 sums of every
// local kv head's dK and dV [2, T, kv_channels] (kv_channels: the local kv heads x head size).
inline double attention_backward_scratch_bytes(AttentionKernel k, double batch, double q_heads, double seq_len,
                                               double kv_channels, int act_bytes) {
  if (k == AttentionKernel::Reference) return batch * q_heads * seq_len * seq_len * 4.0;
  const double scores = q_heads * seq_len * seq_len;
  return scores * 4.0 + (act_bytes == 4 ? 0.0 : scores * act_bytes) + 2.0 * seq_len * kv_channels * 4.0;
}

// Block attention (context parallelism's pairs, runtime/block_attention.h) allocates scratch under
// BatchedGemm only (runtime/block_attention_gemm.h), per pair, one kv head's `group` q heads at a
// time: the backward's fp32 scores and their gradient [group, q_len, kv_len], and under bf16 P and dS
// in the activation dtype beside them (the forward's is less). The sizes of its tensors, each a
// block of its own; none for the unit ops (Reference).
inline int block_attention_scratch_tensors(AttentionKernel k, int act_bytes) {
  return k == AttentionKernel::Reference ? 0 : (act_bytes == 4 ? 2 : 4);
}
inline double block_attention_scratch_tensor_bytes(int i, double group, double q_len, double kv_len, int act_bytes) {
  return group * q_len * kv_len * (i < 2 ? 4.0 : act_bytes);
}

}  // namespace mt::nn
