// A layer's causal self-attention over the rows this rank holds of each sequence: the whole sequence
// (runtime/attention.h, its kernel chosen once for the device), or, with context parallelism, this
// cp rank's two chunks of the load-balanced causal split (parallel/causal_split.h) attending to
// every position they see through ring attention over the cp group (parallel/ring_attention.h).
// The model holds one for all its layers: it says what a layer's forward keeps for the backward
// (the probabilities or scores of the whole-sequence kernels; ring attention's log-sum-exp per query,
// a few bytes per row) and gives the global positions of the rank's rows, which the position
// embedding and RoPE read.
// defines: LayerAttention
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "comm/communicator.h"
#include "parallel/ring_attention.h"
#include "runtime/attention.h"
#include "runtime/nn_kernels.h"  // defines: nn::AttentionHeads

namespace mt {

class LayerAttention {
 public:
  // cp: the context-parallel group (null or of one rank: the whole sequence on this rank).
  LayerAttention(DeviceContext& ctx, const nn::AttentionHeads& heads, std::int64_t head_size, Communicator* cp);
  ~LayerAttention();
  LayerAttention(const LayerAttention&) = delete;
  LayerAttention& operator=(const LayerAttention&) = delete;

  bool split() const { return cp_ != nullptr; }
  int cp_size() const { return cp_ ? cp_->size() : 1; }
  // The positions of a whole sequence of which this rank holds `rows`.
  std::int64_t sequence_length(std::int64_t rows) const { return rows * cp_size(); }

  // What the forward of a B x T (local rows) micro-batch keeps for its backward.
  Shape saved_shape(std::int64_t B, std::int64_t T) const;
  DType saved_dtype(DType activations) const;
  // Whether selective recomputation drops it (and forward() recomputes it before the backward): the
  // whole-sequence [B, H, T, T] probabilities are; ring attention's log-sum-exp is kept.
  bool recomputed_when_selective() const { return !split(); }

  // out [B*T, q_heads x hs] from qkv [B, T, row]; saved (saved_shape) overwritten. Collective over
  // the cp group when split.
  void forward(const Tensor& qkv, Tensor& out, Tensor& saved);
  // dqkv [B, T, row] (overwritten) from dout [B*T, q_heads x hs], that forward's qkv, out and saved.
  void backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& saved, Tensor& dqkv);

  // int32 [T] on the device: the global position of each of this rank's T rows per sequence;
  // undefined when not split (row t is position t).
  const Tensor& positions(std::int64_t T);

  // Summed over every ring this object made (zero when not split).
  RingAttentionStats stats() const;
  std::int64_t workspace_bytes() const;  // the rings' buffers

 private:
  RingAttention& ring(const Tensor& qkv);

  DeviceContext& ctx_;
  nn::AttentionHeads heads_;
  std::int64_t head_size_;
  Communicator* cp_;
  nn::AttentionKernel kernel_;
  // One ring per micro-batch shape and dtype (training and validation share theirs): its buffers
  // are allocated once.
  std::map<std::pair<std::int64_t, std::int64_t>, std::unique_ptr<RingAttention>> rings_;
  std::map<std::int64_t, Tensor> positions_;
  Tensor none_;
};

}  // namespace mt
