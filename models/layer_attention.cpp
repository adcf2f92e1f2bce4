#include "models/layer_attention.h"

#include <span>
#include <vector>

#include "runtime/error.h"

namespace mt {

LayerAttention::LayerAttention(DeviceContext& ctx, const nn::AttentionHeads& heads, std::int64_t head_size,
                               Communicator* cp)
    : ctx_(ctx),
      heads_(heads),
      head_size_(head_size),
      cp_(cp != nullptr && cp->size() > 1 ? cp : nullptr),
      kernel_(nn::attention_kernel_for(ctx.device().is_cpu())) {}

LayerAttention::~LayerAttention() = default;

Shape LayerAttention::saved_shape(std::int64_t B, std::int64_t T) const {
  if (!split()) return nn::attention_saved_shape(B, T, heads_);
  MT_CHECK(T % 2 == 0, "context parallelism: a rank's ", T, " rows per sequence are not its two chunks");
  return {2, B, heads_.q_heads, T / 2};
}

DType LayerAttention::saved_dtype(DType activations) const {
  return split() ? DType::F32 : nn::attention_saved_dtype(kernel_, activations);
}

RingAttention& LayerAttention::ring(const Tensor& qkv) {
  MT_CHECK(qkv.rank() == 3 && qkv.dim(1) % 2 == 0, "context parallelism: qkv ", qkv.describe(),
           " is not [B, two chunks, row]");
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1);
  // The dtype is the model's compute dtype, fixed for its life: the shape alone keys the ring.
  std::unique_ptr<RingAttention>& r = rings_[{B, T}];
  if (!r)
    r = std::make_unique<RingAttention>(cp_, ctx_, RingAttentionShape{.batch = B, .chunk = T / 2,
                                                                      .head_size = head_size_, .heads = heads_,
                                                                      .dtype = qkv.dtype()});
  return *r;
}

void LayerAttention::forward(const Tensor& qkv, Tensor& out, Tensor& saved) {
  if (!split()) {
    nn::attention_forward(ctx_, kernel_, qkv, heads_, out, saved);
    return;
  }
  Tensor rows = out.reshape({qkv.dim(0), qkv.dim(1), out.dim(1)});
  ring(qkv).forward(qkv, rows, saved);
}

void LayerAttention::backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& saved,
                              Tensor& dqkv) {
  if (!split()) {
    nn::attention_backward(ctx_, kernel_, dout, qkv, saved, heads_, dqkv);
    return;
  }
  const Shape rows{qkv.dim(0), qkv.dim(1), out.dim(1)};
  ring(qkv).backward(qkv, out.reshape(rows), saved, dout.reshape(rows), dqkv);
}

const Tensor& LayerAttention::positions(std::int64_t T) {
  if (!split()) return none_;
  Tensor& p = positions_[T];
  if (!p.defined()) {
    const CausalSplit causal(sequence_length(T), cp_size());
    std::vector<std::int32_t> host;
    for (const std::int64_t position : causal.positions(cp_->rank())) host.push_back(static_cast<std::int32_t>(position));
    p = Tensor::from_host(std::span<const std::int32_t>(host), {T}, ctx_);
  }
  return p;
}

std::int64_t LayerAttention::workspace_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [shape, r] : rings_) bytes += r->workspace_bytes();
  return bytes;
}

RingAttentionStats LayerAttention::stats() const {
  RingAttentionStats sum;
  for (const auto& [shape, r] : rings_) {
    sum.wait_seconds += r->stats().wait_seconds;
    sum.transfers += r->stats().transfers;
    sum.bytes_sent += r->stats().bytes_sent;
  }
  return sum;
}

}  // namespace mt
