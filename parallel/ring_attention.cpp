#include "parallel/ring_attention.h"

#include <chrono>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "runtime/attention.h"
#include "runtime/kernels.h"

namespace mt {
namespace {

// kv blocks and dkv accumulators may be in flight together in the backward: tags keep them apart.
constexpr int kKvTag = 0, kDkvTag = 1;

}  // namespace

RingAttention::RingAttention(Communicator* cp, DeviceContext& ctx, RingAttentionShape shape)
    : group_(cp), ctx_(&ctx), shape_(shape), kernel_(nn::attention_kernel_for(ctx.device().is_cpu())) {
  const auto& h = shape_.heads;
  MT_CHECK(shape_.batch > 0 && shape_.chunk > 0 && shape_.head_size > 0 && h.q_heads > 0 && h.kv_heads > 0,
           "ring attention: batch ", shape_.batch, ", chunk ", shape_.chunk, ", head size ", shape_.head_size,
           ", ", h.q_heads, " q heads and ", h.kv_heads, " kv heads must all be positive");
  q_cols_ = h.q_heads * shape_.head_size;
  kv_cols_ = 2 * h.kv_heads * shape_.head_size;
  const std::int64_t B = shape_.batch, c = shape_.chunk, H = h.q_heads;
  auto fp32 = [&](Shape s) { return Tensor::empty(std::move(s), DType::F32, ctx); };
  for (Tensor& kv : kv_) kv = Tensor::empty({B, 2 * c, kv_cols_}, shape_.dtype, ctx);
  for (int s = 0; s < 2; ++s) {
    out_acc_[s] = fp32({B, c, q_cols_});
    delta_[s] = fp32({B, H, c});
    dq_[s] = fp32({B, c, q_cols_});
    dkv_block_[s] = fp32({B, c, kv_cols_});
    for (Slots& travel : dkv_travel_) travel[s] = fp32({B, c, kv_cols_});
  }
  lse_ = fp32(lse_shape());
  block_out_ = fp32({B, c, q_cols_});
  block_lse_ = fp32({B, H, c});
}

RingBufferShape RingAttention::buffer_shape() const {
  return {shape_.batch, shape_.chunk, q_cols_, kv_cols_, shape_.heads.q_heads,
          static_cast<std::int64_t>(dtype_size(shape_.dtype))};
}

std::int64_t RingAttention::workspace_bytes() const {
  std::int64_t bytes = 0;
  for (const std::int64_t b : ring_attention_buffer_bytes(buffer_shape())) bytes += b;
  return bytes;
}

void RingAttention::check(const Tensor& t, std::int64_t width, const char* what) const {
  MT_CHECK(t.rank() == 3 && t.dim(0) == shape_.batch && t.dim(1) == 2 * shape_.chunk && t.dim(2) == width &&
               t.dtype() == shape_.dtype,
           "ring attention: ", what, " is ", t.describe(), ", expected [", shape_.batch, ", ", 2 * shape_.chunk, ", ",
           width, "] ", dtype_name(shape_.dtype));
}

// Local slot `slot` of a rank's tensors (or of a kv block), holding global chunk `chunk_index`.
nn::SequenceBlock RingAttention::rows(int slot, std::int64_t chunk_index) const {
  return {slot * shape_.chunk, shape_.chunk, chunk_index * shape_.chunk};
}

// Slot `slot`'s [B, q_heads, chunk] of an lse [2, B, q_heads, chunk], checked: a view.
Tensor RingAttention::lse_of(const Tensor& lse, int slot) const {
  MT_CHECK(lse.dtype() == DType::F32 && lse.shape() == lse_shape(), "ring attention: lse is ", lse.describe(),
           ", expected ", shape_str(lse_shape()), " fp32");
  return lse.narrow(slot, 1).reshape({shape_.batch, shape_.heads.q_heads, shape_.chunk});
}

// Sends send[0..count) to r+1 and receives recv[0..count) from r-1, as one batch.
WorkPtr RingAttention::exchange(const Tensor* send, const Tensor* recv, int count, int tag) {
  const int right = (rank() + 1) % size(), left = (rank() + size() - 1) % size();
  std::vector<PointToPoint> batch;
  for (int i = 0; i < count; ++i) {
    batch.push_back(PointToPoint::send(send[i], right, tag));
    stats_.bytes_sent += static_cast<std::int64_t>(send[i].nbytes());
  }
  for (int i = 0; i < count; ++i) batch.push_back(PointToPoint::recv(recv[i], left, tag));
  ++stats_.transfers;
  return group_->batch_async(std::move(batch));
}

void RingAttention::wait(const WorkPtr& work) {
  const auto start = std::chrono::steady_clock::now();
  work->wait_on(ctx_->stream());
  stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void RingAttention::forward(const Tensor& qkv, Tensor& out) {
  forward(qkv, out, lse_);
  qkv_ = qkv;
  out_ = out;
}

void RingAttention::backward(const Tensor& dout, Tensor& dqkv) {
  MT_CHECK(qkv_.defined(), "ring attention: backward before any forward");
  backward(qkv_, out_, lse_, dout, dqkv);
}

void RingAttention::forward(const Tensor& qkv, Tensor& out, Tensor& lse) {
  check(qkv, q_cols_ + kv_cols_, "qkv");
  check(out, q_cols_, "output");
  std::array<Tensor, 2> lse_slot{lse_of(lse, 0), lse_of(lse, 1)};
  DeviceContext& ctx = *ctx_;
  const int P = size(), r = rank();
  const CausalSplit sp = split();
  nn::block_attention_pack_kv(ctx, qkv, shape_.heads, 0, kv_[0]);
  std::array<bool, 2> started{false, false};
  for (int k = 0; k < P; ++k) {
    const WorkPtr next = k + 1 < P ? exchange(&kv_[0], &kv_[1], 1, kKvTag) : nullptr;
    for (const ChunkPair& p : sp.visible_pairs(r, (r - k + P) % P)) {
      const auto j = static_cast<std::size_t>(p.q_slot);
      const nn::SequenceBlock q = rows(p.q_slot, p.q_chunk), kb = rows(p.kv_slot, p.kv_chunk);
      if (!started[j]) {
        nn::block_attention_forward(ctx, kernel_, qkv, q, kv_[0], kb, shape_.heads, p.mask, out_acc_[j], lse_slot[j]);
        started[j] = true;
      } else {
        nn::block_attention_forward(ctx, kernel_, qkv, q, kv_[0], kb, shape_.heads, p.mask, block_out_, block_lse_);
        nn::block_attention_merge(ctx, out_acc_[j], lse_slot[j], block_out_, block_lse_);
      }
    }
    if (next) {
      wait(next);
      std::swap(kv_[0], kv_[1]);
    }
  }
  // Step 0 is the rank's own block, where each slot sees at least its diagonal chunk.
  MT_CHECK(started[0] && started[1], "ring attention: a query chunk saw no key");
  for (int j = 0; j < 2; ++j)
    nn::block_attention_store(ctx, out_acc_[static_cast<std::size_t>(j)], out, j * shape_.chunk, 0);
}

void RingAttention::backward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
                             Tensor& dqkv) {
  check(qkv, q_cols_ + kv_cols_, "qkv");
  check(out, q_cols_, "output");
  check(dout, q_cols_, "output gradient");
  check(dqkv, q_cols_ + kv_cols_, "qkv gradient");
  const std::array<Tensor, 2> lse_slot{lse_of(lse, 0), lse_of(lse, 1)};
  DeviceContext& ctx = *ctx_;
  const int P = size(), r = rank();
  const CausalSplit sp = split();
  for (int j = 0; j < 2; ++j) {
    const auto s = static_cast<std::size_t>(j);
    nn::block_attention_delta(ctx, dout, out, rows(j, sp.chunk_of(r, j)), delta_[s]);
    kernels::fill(ctx, dq_[s], 0.0);
  }
  nn::block_attention_pack_kv(ctx, qkv, shape_.heads, 0, kv_[0]);
  WorkPtr dkv_sent;   // the accumulators' last transfer
  std::size_t at = 0;  // dkv_travel_[at]: the accumulator of the block at hand
  for (int k = 0; k < P; ++k) {
    const WorkPtr next = k + 1 < P ? exchange(&kv_[0], &kv_[1], 1, kKvTag) : nullptr;
    // The rank's own block starts its accumulator; a visiting block's contribution is added onto
    // the one that arrives meanwhile.
    Slots& into = k == 0 ? dkv_travel_[at] : dkv_block_;
    for (Tensor& t : into) kernels::fill(ctx, t, 0.0);
    for (const ChunkPair& p : sp.visible_pairs(r, (r - k + P) % P)) {
      const auto j = static_cast<std::size_t>(p.q_slot);
      nn::block_attention_backward(ctx, kernel_, qkv, rows(p.q_slot, p.q_chunk), kv_[0], rows(p.kv_slot, p.kv_chunk),
                                   shape_.heads, p.mask, dout, lse_slot[j], delta_[j], dq_[j],
                                   into[static_cast<std::size_t>(p.kv_slot)]);
    }
    if (k > 0) {
      wait(dkv_sent);
      for (std::size_t s = 0; s < 2; ++s)
        kernels::binary(ctx, BinaryOp::Add, dkv_travel_[at][s], dkv_block_[s], dkv_travel_[at][s]);
    }
    if (next) {
      wait(next);
      std::swap(kv_[0], kv_[1]);
    }
    if (P > 1) {
      // On to r+1: after the last step that is the block's owner.
      dkv_sent = exchange(dkv_travel_[at].data(), dkv_travel_[1 - at].data(), 2, kDkvTag);
      at = 1 - at;
    }
  }
  if (dkv_sent) wait(dkv_sent);
  for (int j = 0; j < 2; ++j) {
    const auto s = static_cast<std::size_t>(j);
    nn::block_attention_store(ctx, dq_[s], dqkv, j * shape_.chunk, 0);
    nn::block_attention_store(ctx, dkv_travel_[at][s], dqkv, j * shape_.chunk, q_cols_);
  }
}

}  // namespace mt
