// Column- and row-parallel linear layers that own their tensor-parallel communication, built from
// the conjugate forward/backward pairs of parallel/tensor_parallel.h (Megatron-LM's split). Which
// pairs a layout uses is chosen once, in a TpRegion:
//   entering the region (f, before a column-parallel layer): copy (forward identity, backward
//     allreduce), or with sequence parallelism the sequence gather (forward allgather of the ranks'
//     row blocks, backward reduce-scatter);
//   leaving it (g, after a row-parallel layer): reduce (forward allreduce, backward identity), or
//     the sequence reduce-scatter (forward reduce-scatter, backward allgather).
// A layer calls a pair's forward half in its forward and its backward half in its backward; the
// pairing is what makes the tensor-parallel gradients right.
// defines: TpRegion, ColumnParallelLinear, RowParallelLinear
#pragma once

#include <vector>

#include "models/layers.h"
#include "parallel/tensor_parallel.h"

namespace mt {

// The edges of a layout's tensor-parallel region, over the group in `tp` (a group of one: every
// operation is the identity). Rows: N, the positions of a micro-batch; with sequence parallelism
// a rank holds N/tp of them (rank r's block: rows [r N/tp, (r+1) N/tp)) outside the region.
class TpRegion {
 public:
  TpRegion() = default;
  TpRegion(const TensorParallel& tp, bool sequence_parallel) : tp_(tp), sequence_parallel_(sequence_parallel) {}
  const TensorParallel& tp() const { return tp_; }
  bool sequence_parallel() const { return sequence_parallel_; }

  // f: what the region reads of x (this rank's rows): x itself, or every rank's rows gathered into `full`.
  const Tensor& enter(DeviceContext& ctx, const Tensor& x, Tensor& full) const;
  // f's adjoint: dpartial ([N, C], this rank's partial gradient) summed over the group: in place and
  // returned, or this rank's rows of the sum into dlocal.
  Tensor& enter_backward(DeviceContext& ctx, Tensor& dpartial, Tensor& dlocal) const;
  // g: partial ([N, C], this rank's partial sum) summed over the group: in place and returned, or this
  // rank's rows of the sum into local.
  const Tensor& leave(DeviceContext& ctx, Tensor& partial, Tensor& local) const;
  // g's adjoint: the gradient at every position of the partial sum from dlocal (this rank's rows):
  // dlocal itself, or every rank's rows gathered into dfull.
  const Tensor& leave_backward(DeviceContext& ctx, Tensor& dlocal, Tensor& dfull) const;
  // The same into dfull whatever the layout (a copy where it is the identity): for a gradient kept
  // beyond the buffer it came in.
  void leave_backward_into(DeviceContext& ctx, const Tensor& dlocal, Tensor& dfull) const;
  // Where partial sums headed for `leave` or `enter_backward` go: `local` itself, or the [N, C] `full`.
  Tensor& partials(Tensor& local, Tensor& full) const { return sequence_parallel_ ? full : local; }

 private:
  TensorParallel tp_;
  bool sequence_parallel_ = false;
};

// Y = X A with A = [A_1 ... A_p] cut by columns over the p ranks of the group: rank i holds A_i (the
// rows [out/p] of its Linear's W = A^T) and computes Y_i = X A_i, its heads or hidden units, on the
// whole X the region's f gives it. Backward: dA_i = X^T dY_i needs nothing more; dX = sum_i dY_i A_i^T
// is f's adjoint over the ranks' partial products.
//
// One or more parts write their columns of one output [N, out] in order (llama's q and [k | v]
// into [q | k | v]); one part runs the plain GEMM with its bias. A part whose weight is replicated
// on every rank (llama's kv heads where tp does not split them) sees only this rank's share of its
// output gradient, so its weight gradient is the group's sum of the ranks' partial ones.
class ColumnParallelLinear {
 public:
  struct Part {
    Linear linear;
    bool replicated = false;
  };
  ColumnParallelLinear() = default;
  ColumnParallelLinear(std::vector<Part> parts, const TpRegion& region);

  std::int64_t out_features() const { return out_features_; }  // this rank's columns, all parts
  const Linear& part(std::size_t i) const { return parts_.at(i).linear; }

  // f's forward: the input the GEMMs read (x, or every rank's rows gathered into `full`).
  const Tensor& input(DeviceContext& ctx, const Tensor& x, Tensor& full) const { return region_.enter(ctx, x, full); }
  // What input() left, without communicating: for a weight gradient computed later.
  const Tensor& kept_input(const Tensor& x, const Tensor& full) const {
    return region_.sequence_parallel() ? full : x;
  }
  // y = input(x) A_i.
  void forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& y) const;
  // The same with GELU in the GEMM's epilogue (one part): pre = input(x) A_i + b, post = gelu(pre).
  void forward_gelu(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& pre, Tensor& post) const;
  // dx = f's adjoint of dy A_i^T, into dx (this rank's rows); dpartial: the [N, in] partial product
  // with sequence parallelism (unused without).
  void backward_input(DeviceContext& ctx, const Tensor& dy, Tensor& dx, Tensor& dpartial) const;
  // dA_i += input^T dy (input as input() gave it); dbias too. replicated_dweight: fp32 scratch of
  // replicated_part()'s weight shape, where there is one.
  void backward_weights(DeviceContext& ctx, const Tensor& dy, const Tensor& input, Tensor* replicated_dweight = nullptr);
  // Both from x again (f's forward repeated), the weights first: Linear::backward's order.
  void backward(DeviceContext& ctx, const Tensor& dy, const Tensor& x, Tensor& full, Tensor& dx, Tensor& dpartial,
                Tensor* replicated_dweight = nullptr);
  // The part whose weight gradient is summed over the group (null: none, or a group of one).
  const Linear* replicated_part() const;

 private:
  std::vector<Part> parts_;
  std::int64_t out_features_ = 0;
  TpRegion region_;
};

// Y = X B with B = [B_1; ...; B_p] cut by rows over the p ranks: rank i holds B_i (the columns
// [in/p] of its Linear's W = B^T) and X_i, the column-parallel layer's output, so Y = sum_i X_i B_i:
// the region's g. The bias is added on rank 0 alone, before the sum. Backward: g's adjoint gives each
// rank dY (every row it multiplies), then dB_i = X_i^T dY and dX_i = dY B_i^T need nothing more.
class RowParallelLinear {
 public:
  RowParallelLinear() = default;
  RowParallelLinear(Linear linear, const TpRegion& region);

  const Linear& linear() const { return linear_; }

  // g(x W^T): this rank's partial sum into `partial`; returns the sum (partial itself, or this rank's
  // rows of it in `local`).
  const Tensor& forward(DeviceContext& ctx, const Tensor& x, Tensor& partial, Tensor& local) const;
  // g's adjoint: dY as the GEMMs below read it, from dy (this rank's rows): dy itself, or gathered into dfull.
  const Tensor& output_grad(DeviceContext& ctx, Tensor& dy, Tensor& dfull) const {
    return region_.leave_backward(ctx, dy, dfull);
  }
  // The same into `kept` whatever the layout: what a split backward keeps for its weight gradient.
  void keep_output_grad(DeviceContext& ctx, const Tensor& dy, Tensor& kept) const {
    region_.leave_backward_into(ctx, dy, kept);
  }
  // On dY from output_grad: Linear's backward halves.
  void backward(DeviceContext& ctx, const Tensor& dY, const Tensor& x, Tensor& dx) { linear_.backward(ctx, dY, x, &dx); }
  void backward_input(DeviceContext& ctx, const Tensor& dY, Tensor& dx) const { linear_.backward_input(ctx, dY, dx); }
  // Through the GELU that made x from `pre` (Linear::backward_input_dgelu); dpre may be pre.
  void backward_input_dgelu(DeviceContext& ctx, const Tensor& dY, const Tensor& pre, Tensor& dpre) const {
    linear_.backward_input_dgelu(ctx, dY, pre, dpre);
  }
  void backward_weights(DeviceContext& ctx, const Tensor& dY, const Tensor& x) { linear_.backward_weights(ctx, dY, x); }

 private:
  Linear linear_;
  TpRegion region_;
  bool add_bias_ = true;
};

}  // namespace mt
