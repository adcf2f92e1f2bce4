// Ring attention over the cp group: causal self-attention of a sequence split by CausalSplit
// (parallel/causal_split.h), each cp rank holding chunks r and 2cp-1-r as its 2 x chunk local rows,
// built from block attention (runtime/block_attention.h, whose header states the fold protocol).
//
// Forward. The rank packs the k and v heads of both its chunks into one block [B, 2 chunk,
// 2 kv_heads hs] (grouped-query heads send only the kv heads). At step k = 0 .. cp-1 it holds the
// block of rank (r - k) mod cp; before attending to it, it starts one grouped send/recv (the block
// to r+1, the next from r-1 into a second buffer), so the next block's transfer overlaps this
// block's attention; then waits and swaps the buffers. Each query slot meets the block's visible
// chunks (CausalSplit::visible_pairs: Full before, Causal on the diagonal, later ones skipped), the
// partial outputs merged by log-sum-exp in the fixed order step, query slot, kv slot: the same
// bits on every run and at any thread count. The merged lse of each slot is what the backward needs
// besides qkv and out: the explicit form takes it from the caller (a layer's activations, one per
// microbatch in flight, a few bytes per query beside the [T, T] scores of whole-sequence attention),
// so that one object (its buffers a workspace) serves every layer and microbatch; the short form
// keeps it, and handles to qkv and out (unchanged until the backward), for one forward at a time.
//
// Backward (ring flash attention). delta once per slot; dq accumulates locally over the steps. The
// kv blocks go round again as in the forward; each block's [dk | dv] accumulator (fp32) travels one
// step behind it: at step k the rank computes its contribution to the block at hand, adds it onto
// the accumulator received from r-1 (sent at the end of r-1's previous step, so that transfer
// overlapped this step's attention), and sends the sum on to r+1. After cp steps every accumulator
// is back at its owner, the sum over the ranks owner, owner+1, ... in that order: deterministic.
//
// Every buffer is allocated by the constructor; a call allocates nothing on the device. On CUDA the
// waits order the compute stream after the transfers (Work::wait_on) without blocking the host
// (NCCL); the host time they take is the exposed communication, in RingAttentionStats.
// defines: RingAttentionShape, RingAttentionStats, RingAttention
#pragma once

#include <array>
#include <cstdint>

#include "comm/communicator.h"
#include "parallel/causal_split.h"
#include "parallel/ring_buffers.h"
#include "runtime/block_attention.h"

namespace mt {

struct RingAttentionShape {
  std::int64_t batch = 1;
  std::int64_t chunk = 1;      // positions per chunk: the rank holds 2 x chunk rows
  std::int64_t head_size = 1;
  nn::AttentionHeads heads;    // qkv rows are [q heads | k heads | v heads] x head_size
  DType dtype = DType::F32;    // of qkv, out and their gradients
};

// Accumulated over the object's life: a step reads the difference.
struct RingAttentionStats {
  double wait_seconds = 0;       // host time waiting for the ring's transfers (exposed communication)
  std::int64_t transfers = 0;    // grouped send/recv batches
  std::int64_t bytes_sent = 0;
};

class RingAttention {
 public:
  // cp: the cp communicator (null: a group of one, plain causal attention of the two chunks).
  RingAttention(Communicator* cp, DeviceContext& ctx, RingAttentionShape shape);

  int size() const { return group_ ? group_->size() : 1; }
  int rank() const { return group_ ? group_->rank() : 0; }
  CausalSplit split() const { return CausalSplit(2 * size() * shape_.chunk, size()); }
  const RingAttentionStats& stats() const { return stats_; }
  // Bytes of the buffers the constructor allocated (the blocks in flight, the fp32 accumulators):
  // the sum of ring_attention_buffer_bytes (parallel/ring_buffers.h) for its shape.
  std::int64_t workspace_bytes() const;
  RingBufferShape buffer_shape() const;

  // fp32 [2, B, q_heads, chunk]: each local chunk's log-sum-exp, left by forward for backward.
  Shape lse_shape() const { return {2, shape_.batch, shape_.heads.q_heads, shape_.chunk}; }

  // out [B, 2 chunk, q_heads hs] = causal attention of the local rows of qkv [B, 2 chunk, row]
  // against every visible position of the sequence; lse (lse_shape) overwritten. Collective over
  // the cp group.
  void forward(const Tensor& qkv, Tensor& out, Tensor& lse);
  // dqkv [B, 2 chunk, row] (overwritten) from dout [B, 2 chunk, q_heads hs] and that forward's qkv,
  // out and lse. Collective over the cp group.
  void backward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dqkv);
  // The same, the object keeping lse and the handles between them: one forward at a time.
  void forward(const Tensor& qkv, Tensor& out);
  void backward(const Tensor& dout, Tensor& dqkv);

 private:
  using Slots = std::array<Tensor, 2>;  // one tensor per local chunk
  void check(const Tensor& t, std::int64_t width, const char* what) const;
  nn::SequenceBlock rows(int slot, std::int64_t chunk_index) const;
  Tensor lse_of(const Tensor& lse, int slot) const;
  WorkPtr exchange(const Tensor* send, const Tensor* recv, int count, int tag);
  void wait(const WorkPtr& work);

  Communicator* group_;
  DeviceContext* ctx_;
  RingAttentionShape shape_;
  nn::AttentionKernel kernel_;  // block attention's implementation, chosen once (not per pair)
  std::int64_t q_cols_, kv_cols_;
  RingAttentionStats stats_;
  Tensor qkv_, out_, lse_;         // the short form's last forward, for its backward
  std::array<Tensor, 2> kv_;       // the block at hand, the one arriving
  Slots out_acc_;                  // fp32 running (then final) output per query slot
  Tensor block_out_, block_lse_;   // one pair's, before its merge
  Slots delta_, dq_, dkv_block_;   // dkv_block_: this step's contribution to the visiting block
  std::array<Slots, 2> dkv_travel_;  // the travelling accumulator at hand, the one arriving
};

}  // namespace mt
