// The kernels of a GPT-2 style transformer, forward and backward, on row-major tensors, dispatched
// to the CPU (OpenMP) or CUDA backend by the context's device. The math of each op is written once
// in runtime/nn_functors.h and run by both backends. Every output element is produced by one
// thread in a fixed order, so results repeat bit for bit whatever the thread count.
//
// Shapes: N = rows (batch x time), C = channels. "+=" marks outputs that accumulate (gradients
// of parameters accumulate over micro-batches; the residual stream's gradient over branches).
// Activations may be fp32 or bf16 (meant for CUDA; the CPU runs it too, for tests); parameters, their gradients and statistics are fp32.
// defines: mt::nn kernels
#pragma once

#include "runtime/tensor.h"

namespace mt::nn {

// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]. tokens int32 [B, T], ids in [0, wte rows).
void embedding_forward(DeviceContext& ctx, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out);
// dwte[tokens[b, t], :] += dout[b, t, :]; dwpe[t, :] += sum over b of dout[b, t, :].
void embedding_backward(DeviceContext& ctx, const Tensor& tokens, const Tensor& dout, Tensor& dwte, Tensor& dwpe);

// out = (x - mean) * rstd * weight + bias per row of x [N, C]; mean, rstd [N] fp32 saved for backward.
void layernorm_forward(DeviceContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                       Tensor& mean, Tensor& rstd);
// dx += ..., dweight += ..., dbias += ...
void layernorm_backward(DeviceContext& ctx, const Tensor& dout, const Tensor& x, const Tensor& weight,
                        const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias);

// out[n, :] = bias (broadcast over rows): the start of y = x W^T + b before a GEMM with beta 1.
void broadcast_rows(DeviceContext& ctx, const Tensor& bias, Tensor& out);
// dbias[j] += sum over rows of dout[n, j].
void bias_backward(DeviceContext& ctx, const Tensor& dout, Tensor& dbias);

// tanh-approximated GELU, elementwise. dx may alias dout.
void gelu_forward(DeviceContext& ctx, const Tensor& x, Tensor& out);
void gelu_backward(DeviceContext& ctx, const Tensor& x, const Tensor& dout, Tensor& dx);

// Causal multi-head self-attention on a fused projection qkv [B, T, 3C] laid out [q | k | v], head h
// owning channels [h*hs, (h+1)*hs) of each. out [B, T, C]; att [B, heads, T, T] keeps the softmax
// probabilities (entries above the diagonal are zero) for backward.
void attention_forward(DeviceContext& ctx, const Tensor& qkv, int heads, Tensor& out, Tensor& att);
// dqkv = ... (overwritten, not accumulated).
void attention_backward(DeviceContext& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& att, int heads,
                        Tensor& dqkv);

// Softmax cross-entropy over the first `vocab` columns of logits [N, Vp] (columns >= vocab are
// padding). losses [N] fp32 = -log p[target]. When `dlogits` is defined (it may be `logits`
// itself) it receives (p - onehot(target)) * dloss, zero in the padding columns.
// targets int32 [N] in [0, vocab).
void cross_entropy(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, int vocab, Tensor& losses,
                   Tensor* dlogits, float dloss);

// The same in two steps, as training uses them: forward keeps lse [N] = log(sum(exp(logits)))
// per row; backward turns logits into dlogits (dlogits may be logits) from it, one exp per element.
void cross_entropy_forward(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, int vocab, Tensor& losses,
                           Tensor& lse);
void cross_entropy_backward(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            int vocab, float dloss, Tensor& dlogits);

// Softmax over the first `vocab` columns of each row with temperature, into fp32 probs [N, vocab].
void softmax_rows(DeviceContext& ctx, const Tensor& logits, int vocab, float temperature, Tensor& probs);

}  // namespace mt::nn
