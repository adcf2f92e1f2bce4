// The kernels of a GPT-2 or Llama style transformer, forward and backward, on row-major tensors, dispatched
// to the CPU (OpenMP) or CUDA backend by the context's device. The math of each op is written once
// in its family's header (runtime/ops/<family>.h) and run by both backends. Every output element is produced by one
// thread in a fixed order, so results repeat bit for bit whatever the thread count. The layernorm
// backward has CUDA kernels of its own (runtime/cuda/norms.cu: a warp per row, column
// tiles folded in a fixed order): they repeat bit for bit too, and agree with the CPU within fp32
// rounding, not bit for bit.
//
// Shapes: N = rows (batch x time), C = channels. "+=" marks outputs that accumulate (gradients
// of parameters accumulate over micro-batches; the residual stream's gradient over branches).
// Activations may be fp32 or bf16 (meant for CUDA; the CPU runs it too, for tests); parameters, their gradients and statistics are fp32.
// defines: embedding_forward, embedding_forward_slice, embedding_backward, embedding_backward_slice,
//          layernorm_forward, layernorm_backward, layernorm_backward_input, layernorm_backward_params,
//          rmsnorm_forward, rmsnorm_backward_input, rmsnorm_backward_params, add_layernorm_forward,
//          add_rmsnorm_forward,
//          broadcast_rows, bias_backward, gelu_forward, gelu_backward, rope_forward, rope_backward,
//          swiglu_forward, swiglu_backward, AttentionHeads, attention_forward, attention_backward,
//          softmax_rows, cross_entropy,
//          cross_entropy_forward, cross_entropy_backward, cross_entropy_fused, vocab_parallel_max, vocab_parallel_sum_exp,
//          vocab_parallel_target_logit, vocab_parallel_loss, vocab_parallel_cross_entropy_backward
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace mt::nn {

// out[b, t, :] = wte[tokens[b, t], :] + wpe[p(t), :]. tokens int32 [B, T], ids in [0, wte rows).
// p(t) = t, or positions[t] when `positions` (int32 [T] on the context's device, in [0, wpe rows))
// is given: the global positions of a context-parallel rank's rows (parallel/causal_split.h).
// Positions 0..T-1 give the bits of none.
void embedding_forward(DeviceContext& ctx, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out,
                       const Tensor& positions = {});
// dwte[tokens[b, t], :] += dout[b, t, :]; dwpe[p(t), :] += sum over b of dout[b, t, :]. Each row of
// dwte is summed over the positions holding its token in position order (b, then t), rows no
// token hits are left as they are; dwpe sums over b in order. Given positions must be distinct
// (one unit owns each dwpe row, no atomics): checked on the CPU, the caller's promise on a GPU.
void embedding_backward(DeviceContext& ctx, const Tensor& tokens, const Tensor& dout, Tensor& dwte, Tensor& dwpe,
                        const Tensor& positions = {});

// The same over a slice of the vocabulary, for tensor parallelism: wte_slice [rows, C] holds the
// rows [vocab_begin, vocab_begin + rows) of the table. out[b, t, :] = (wte_slice[tokens[b, t] -
// vocab_begin, :] if the slice holds the token, else 0) + (wpe[p(t), :] if wpe, else 0), added in
// fp32 and rounded once into out's dtype (fp32 or bf16). Ids outside the slice are not errors
// here (another slice holds them) and are not checked.
// With wpe given on one rank only and an allreduce-sum of fp32 outputs over the group, the result
// is embedding_forward's bit for bit: each element is the sum of e (one rank), p (one rank,
// possibly the same, which then computed e + p itself) and exact zeros, and a + b = b + a and
// x + 0 = x are exact in IEEE arithmetic whatever order the allreduce adds in (the one exception,
// -0 + +0 = +0 where the full embedding gives -0, compares equal). bf16 outputs would be rounded
// before the sum: allreduce fp32 when bit equality matters.
void embedding_forward_slice(DeviceContext& ctx, const Tensor& tokens, const Tensor& wte_slice,
                             std::int64_t vocab_begin, const Tensor* wpe, Tensor& out, const Tensor& positions = {});
// dwte_slice[tokens[b, t] - vocab_begin, :] += dout[b, t, :] for the tokens the slice holds
// (others contribute nothing), in the order of embedding_backward: the rows come out exactly as
// the corresponding rows of the full embedding_backward. dwpe (when given) and positions as
// embedding_backward.
void embedding_backward_slice(DeviceContext& ctx, const Tensor& tokens, const Tensor& dout, std::int64_t vocab_begin,
                              Tensor& dwte_slice, Tensor* dwpe, const Tensor& positions = {});

// out = (x - mean) * rstd * weight + bias per row of x [N, C]; mean, rstd [N] fp32 saved for backward.
void layernorm_forward(DeviceContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                       Tensor& mean, Tensor& rstd);
// dx += ..., dweight += ..., dbias += ...: layernorm_backward_input then layernorm_backward_params.
void layernorm_backward(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& weight,
                        const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias);
// Its two halves, for a backward split in time (zero-bubble pipelines run the input gradient
// first, the parameter gradients later): run one after the other on the same inputs, they give
// layernorm_backward's bits on either device.
// dx += s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout, per row.
void layernorm_backward_input(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& weight,
                              const Tensor& mean, const Tensor& rstd, Tensor& dx);
// dweight[c] += sum over rows of dout * norm; dbias[c] += sum over rows of dout. On the CPU the rows
// are added in order onto the gradient; on CUDA into per-tile partial sums, folded in tile order.
void layernorm_backward_params(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, Tensor& dweight, Tensor& dbias);

// RMSNorm (llama): out = x * rstd * weight per row of x [N, C], rstd [N] fp32 = 1/sqrt(mean(x^2) + eps).
// x * rstd * weight is computed in fp32 and rounded once into out's dtype (Hugging Face rounds
// x * rstd to the activation dtype before the weight: the two differ in bf16 by one rounding).
void rmsnorm_forward(DeviceContext& ctx, const Tensor& x, const Tensor& weight, float eps, Tensor& out, Tensor& rstd);
// The residual add fused with the norm after it: sum = x + y (rounded into the dtype, as
// kernels::binary's Add), then layernorm_forward / rmsnorm_forward of the stored sum into out: the
// bits of the two calls on either device. out may be y (a row's y is read whole before its out is
// written), so the norm may overwrite the branch it adds. The backward needs no fused op: the
// norms' input gradients add onto dx, the residual's gradient.
void add_layernorm_forward(DeviceContext& ctx, const Tensor& x, const Tensor& y, const Tensor& weight,
                           const Tensor& bias, Tensor& sum, Tensor& out, Tensor& mean, Tensor& rstd);
void add_rmsnorm_forward(DeviceContext& ctx, const Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                         Tensor& sum, Tensor& out, Tensor& rstd);
// dx += rstd * (w*dout - norm * mean(w*dout * norm)), norm = x*rstd, per row.
void rmsnorm_backward_input(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, Tensor& dx);
// dweight[c] += sum over rows (in row order) of dout * x * rstd.
void rmsnorm_backward_params(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& rstd,
                             Tensor& dweight);

// out[n, :] = bias (broadcast over rows): the start of y = x W^T + b before a GEMM with beta 1.
void broadcast_rows(DeviceContext& ctx, const Tensor& bias, Tensor& out);
// dbias[j] += sum over rows of dout[n, j].
void bias_backward(DeviceContext& ctx, const Tensor& dout, Tensor& dbias);

// tanh-approximated GELU, elementwise. dx may alias dout or x (each element is read before it is written).
void gelu_forward(DeviceContext& ctx, const Tensor& x, Tensor& out);
void gelu_backward(DeviceContext& ctx, const Tensor& x, const Tensor& dout, Tensor& dx);

// Rotary position embedding in Hugging Face's half-split convention (rotate_half), the layout its
// Llama checkpoints expect (their q and k weights are permuted for it): in each head of hs
// channels, channel i < hs/2 pairs with i + hs/2; at position t (the index in the sequence, or
// positions[t] when `positions`, int32 [T] on the context's device, non-negative, is given: a
// context-parallel rank's global positions; 0..T-1 give the bits of none),
// angle = t * inv_freq[i], inv_freq[i] = 1 / theta^(2i/hs) (computed in fp32 as HF does);
// (a, b) -> (a cos - b sin, b cos + a sin). Applied in place to the q block (q_heads heads) and the
// k block (kv_heads heads) of qkv [B, T, (q_heads + 2*kv_heads) * hs] laid out [q | k | v]; v untouched.
// cos and sin are fp32 library calls: CUDA's agree with the CPU's within a few ulp, not bit for bit.
void rope_forward(DeviceContext& ctx, Tensor& qkv, int q_heads, int kv_heads, float theta,
                  const Tensor& positions = {});
// The adjoint (the inverse rotation) applied in place to dqkv's q and k blocks, at the same positions.
void rope_backward(DeviceContext& ctx, Tensor& dqkv, int q_heads, int kv_heads, float theta,
                   const Tensor& positions = {});

// SwiGLU: gate_up [N, 2F] = [gate | up] per row; out [N, F] = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
void swiglu_forward(DeviceContext& ctx, const Tensor& gate_up, Tensor& out);
// dgate_up [N, 2F] = (dout * up * silu'(gate) | dout * silu(gate)); may alias gate_up (each row's
// elements read before written).
void swiglu_backward(DeviceContext& ctx, const Tensor& gate_up, const Tensor& dout, Tensor& dgate_up);

// Causal grouped-query self-attention on a fused projection qkv [B, T, (q_heads + 2*kv_heads) * hs]
// laid out [q | k | v], head h of a block owning its channels [h*hs, (h+1)*hs). Local q head i
// reads kv head (q_begin + i) / group - kv_begin (q_begin: the global index of the first local q
// head, group = global heads / global kv heads, kv_begin: the global index of the first local kv
// head; a tensor-parallel rank holding every kv head has kv_begin 0). gpt2 is {heads, heads, 0, 1, 0}.
// out [B, T, q_heads*hs]; att [B, q_heads, T, T] keeps the softmax probabilities (entries above
// the diagonal are zero) for backward. Scores are scaled by 1/sqrt(hs).
struct AttentionHeads {
  int q_heads = 1, kv_heads = 1, q_begin = 0, group = 1, kv_begin = 0;
};
void attention_forward(DeviceContext& ctx, const Tensor& qkv, const AttentionHeads& heads, Tensor& out, Tensor& att);
// dqkv = ... (overwritten, not accumulated; must not alias dout or qkv). The dk and dv of a kv
// head sum the contributions of the local q heads that read it in ascending q-head order (zero
// where none does); a kv head replicated over tensor-parallel ranks needs its gradients summed
// over them. Allocates a scratch of att's size on the context's device for the gradient of the scores.
void attention_backward(DeviceContext& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        const AttentionHeads& heads, Tensor& dqkv);
// Multi-head attention (GPT-2): qkv [B, T, 3C], `heads` heads in each block: {heads, heads, 0, 1, 0}.
void attention_forward(DeviceContext& ctx, const Tensor& qkv, int heads, Tensor& out, Tensor& att);
void attention_backward(DeviceContext& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& att, int heads,
                        Tensor& dqkv);

// Softmax cross-entropy over the first `vocab` columns of logits [N, Vp] (columns >= vocab are
// padding). losses [N] fp32 = -log p[target]. When `dlogits` is defined (it may be `logits`
// itself) it receives (p - onehot(target)) * dloss, zero in the padding columns (through
// cross_entropy_fused).
// targets int32 [N] in [0, vocab).
void cross_entropy(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, int vocab, Tensor& losses,
                   Tensor* dlogits, float dloss);

// The same in two steps, as training uses them: forward keeps lse [N] = log(sum(exp(logits)))
// per row; backward turns logits into dlogits (dlogits may be logits) from it, one exp per element.
void cross_entropy_forward(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, int vocab, Tensor& losses,
                           Tensor& lse);
void cross_entropy_backward(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            int vocab, float dloss, Tensor& dlogits);

// Both at once, as the training step needs them: losses and lse as cross_entropy_forward gives
// them and dlogits as cross_entropy_backward then gives it (dlogits may be logits), row by row while
// the row is at hand. The same bits as the two calls on the CPU and with CUDA's unit kernels; CUDA's
// fused classifier (MESHTRAIN_CUDA_KERNELS=loss: a block per row, runtime/cuda/loss.cu)
// adds each row's sum of exponentials in another order.
void cross_entropy_fused(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, int vocab, float dloss,
                         Tensor& losses, Tensor& lse, Tensor& dlogits);

// Cross-entropy with the vocabulary split over a tensor-parallel group (Megatron's vocab-parallel
// cross-entropy): each rank holds logits [N, cols], the columns [vocab_begin, vocab_begin + cols)
// of the full [N, Vp] logits; columns at or past `vocab` are padding, never read (a slice may hold
// only padding). The full logits are never gathered; the caller allreduces over the group
// between the steps:
//   vocab_parallel_max          row_max [N] = max of the slice's real logits (the lowest float
//                               if it has none)                              -> allreduce Max
//   vocab_parallel_sum_exp      sum_exp [N] = sum of exp(logit - row_max), row_max the global
//                               maximum (0 if the slice has no real column)  -> allreduce Sum
//   vocab_parallel_target_logit target_logit [N] = the target's logit where the slice holds the
//                               target, else 0                               -> allreduce Sum
//   vocab_parallel_loss         lse = row_max + log(sum_exp), losses = lse - target_logit
//   vocab_parallel_cross_entropy_backward  dlogits = (exp(logit - lse) - onehot(target)) * dloss
//                               on the real columns, 0 on padding; dlogits may be logits.
// Statistics are fp32 [N]; logits f32 or bf16; targets int32 [N] in [0, vocab) of the full
// vocabulary. With a single slice (vocab_begin 0, all columns) every result is bit for bit that
// of cross_entropy_forward / cross_entropy_backward; split, the max and the target logit are still
// exact, and sum_exp is the same sum added in another order (a few fp32 roundings apart).
void vocab_parallel_max(DeviceContext& ctx, const Tensor& logits, std::int64_t vocab_begin, int vocab,
                        Tensor& row_max);
void vocab_parallel_sum_exp(DeviceContext& ctx, const Tensor& logits, std::int64_t vocab_begin, int vocab,
                            const Tensor& row_max, Tensor& sum_exp);
void vocab_parallel_target_logit(DeviceContext& ctx, const Tensor& logits, const Tensor& targets,
                                 std::int64_t vocab_begin, Tensor& target_logit);
void vocab_parallel_loss(DeviceContext& ctx, const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                         Tensor& losses, Tensor& lse);
void vocab_parallel_cross_entropy_backward(DeviceContext& ctx, const Tensor& logits, const Tensor& targets,
                                           const Tensor& lse, std::int64_t vocab_begin, int vocab, float dloss,
                                           Tensor& dlogits);

// Softmax over the first `vocab` columns of each row with temperature, into fp32 probs [N, vocab].
void softmax_rows(DeviceContext& ctx, const Tensor& logits, int vocab, float temperature, Tensor& probs);

}  // namespace mt::nn
