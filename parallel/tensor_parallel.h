// Tensor-parallel communication as Megatron-LM's conjugate forward/backward pairs, over the tp
// group passed in (size 1: every operation is the identity, and nothing is sent):
//   copy:    forward identity,                 backward allreduce   (input of a column-parallel layer)
//   reduce:  forward allreduce,                backward identity    (output of a row-parallel layer)
//   gather:  forward allgather (last dim),     backward keep own columns
//   scatter: forward keep own columns,         backward allgather (last dim)
// and, for sequence parallelism, over the rows of [N, C] cut into tp contiguous blocks (rank r's
// block: rows [r N/tp, (r+1) N/tp)):
//   sequence gather:         forward allgather of the blocks,       backward reduce-scatter
//   sequence reduce-scatter: forward reduce-scatter of partial sums, backward allgather
// They replace copy and reduce around the column- and row-parallel layers: the same bytes on a
// ring, and what lies between them (layernorms, residual adds) is held once per rank, not tp times.
// A layer calls the forward half in its forward and the backward half in its backward; keeping
// them paired here is what makes the tp gradients right.
// defines: TensorParallelStats, TensorParallel
#pragma once

#include "comm/communicator.h"

namespace mt {

// What a tensor-parallel group's collectives cost the host, accumulated over its life: the step
// reads the difference (its exposed tp communication).
struct TensorParallelStats {
  double wait_seconds = 0;     // host time inside (or blocked on) the group's collectives
  std::int64_t collectives = 0;
  std::int64_t bytes = 0;      // payload of those collectives
};

class TensorParallel {
 public:
  TensorParallel() = default;  // a group of one
  // stream: the compute stream later kernels run on; each allreduce is ordered before them on it
  // (on CUDA without blocking the host). Null: the host waits for each. stats, when given,
  // accumulates what this group's collectives cost.
  explicit TensorParallel(Communicator* group, const Stream* stream = nullptr, TensorParallelStats* stats = nullptr);

  int size() const { return group_ ? group_->size() : 1; }
  int rank() const { return group_ ? group_->rank() : 0; }
  bool active() const { return size() > 1; }
  Communicator* group() const { return group_; }

  void copy_forward(Tensor&) const {}
  void copy_backward(Tensor& grad) const { allreduce(grad, ReduceOp::Sum); }
  void reduce_forward(Tensor& partial) const { allreduce(partial, ReduceOp::Sum); }
  void reduce_backward(Tensor&) const {}
  // local [rows, cols/tp] of every rank -> full [rows, cols], rank r's block at columns r*cols/tp.
  void gather_forward(DeviceContext& ctx, const Tensor& local, Tensor& full) const;
  void gather_backward(DeviceContext& ctx, const Tensor& dfull, Tensor& dlocal) const { own_columns(ctx, dfull, dlocal); }
  void scatter_forward(DeviceContext& ctx, const Tensor& full, Tensor& local) const { own_columns(ctx, full, local); }
  void scatter_backward(DeviceContext& ctx, const Tensor& dlocal, Tensor& dfull) const {
    gather_forward(ctx, dlocal, dfull);
  }

  // local [N/tp, C] of every rank -> full [N, C] (rank r's rows at r N/tp), on every rank.
  void sequence_gather_forward(DeviceContext& ctx, const Tensor& local, Tensor& full) const;
  // dfull [N, C] of every rank -> dlocal [N/tp, C], this rank's rows of the sum over the group.
  void sequence_gather_backward(DeviceContext& ctx, const Tensor& dfull, Tensor& dlocal) const {
    sequence_reduce_scatter_forward(ctx, dfull, dlocal);
  }
  // partial [N, C] of every rank -> local [N/tp, C]: this rank's rows of the sum.
  void sequence_reduce_scatter_forward(DeviceContext& ctx, const Tensor& partial, Tensor& local) const;
  void sequence_reduce_scatter_backward(DeviceContext& ctx, const Tensor& dlocal, Tensor& dfull) const {
    sequence_gather_forward(ctx, dlocal, dfull);
  }

  // In place over the group (the loss statistics of the vocab-parallel cross-entropy use Max).
  void allreduce(Tensor& x, ReduceOp op) const;

 private:
  void own_columns(DeviceContext& ctx, const Tensor& full, Tensor& local) const;
  void check_row_blocks(const char* what, const Tensor& local, const Tensor& full) const;
  void wait(const WorkPtr& work) const;  // ordered before later kernels on stream_, or the host waits
  Communicator* group_ = nullptr;
  const Stream* stream_ = nullptr;
  TensorParallelStats* stats_ = nullptr;
};

}  // namespace mt
