#include "models/tp_linear.h"

#include "runtime/kernels.h"

namespace mt {

const Tensor& TpRegion::enter(DeviceContext& ctx, const Tensor& x, Tensor& full) const {
  if (!sequence_parallel_) return x;  // copy_forward: the identity
  tp_.sequence_gather_forward(ctx, x, full);
  return full;
}

Tensor& TpRegion::enter_backward(DeviceContext& ctx, Tensor& dpartial, Tensor& dlocal) const {
  if (!sequence_parallel_) {
    tp_.copy_backward(dpartial);
    return dpartial;
  }
  tp_.sequence_gather_backward(ctx, dpartial, dlocal);
  return dlocal;
}

const Tensor& TpRegion::leave(DeviceContext& ctx, Tensor& partial, Tensor& local) const {
  if (!sequence_parallel_) {
    tp_.reduce_forward(partial);
    return partial;
  }
  tp_.sequence_reduce_scatter_forward(ctx, partial, local);
  return local;
}

const Tensor& TpRegion::leave_backward(DeviceContext& ctx, Tensor& dlocal, Tensor& dfull) const {
  if (!sequence_parallel_) return dlocal;  // reduce_backward: the identity
  tp_.sequence_reduce_scatter_backward(ctx, dlocal, dfull);
  return dfull;
}

void TpRegion::leave_backward_into(DeviceContext& ctx, const Tensor& dlocal, Tensor& dfull) const {
  if (!sequence_parallel_) {
    dfull.copy_from(dlocal, ctx.stream());
    return;
  }
  tp_.sequence_reduce_scatter_backward(ctx, dlocal, dfull);
}

ColumnParallelLinear::ColumnParallelLinear(std::vector<Part> parts, const TpRegion& region)
    : parts_(std::move(parts)), region_(region) {
  MT_CHECK(!parts_.empty(), "a column-parallel linear needs a part");
  for (const Part& p : parts_) out_features_ += p.linear.out_features();
}

void ColumnParallelLinear::forward(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& y) const {
  const Tensor& in = input(ctx, x, full);
  if (parts_.size() == 1) {
    parts_[0].linear.forward(ctx, in, y);
    return;
  }
  std::int64_t col = 0;
  for (const Part& p : parts_) {
    p.linear.forward_columns(ctx, in, y, col);
    col += p.linear.out_features();
  }
}

void ColumnParallelLinear::forward_gelu(DeviceContext& ctx, const Tensor& x, Tensor& full, Tensor& pre,
                                        Tensor& post) const {
  MT_CHECK(parts_.size() == 1, "GELU in the epilogue of a ", parts_.size(), "-part linear");
  parts_[0].linear.forward_gelu(ctx, input(ctx, x, full), pre, post);
}

void ColumnParallelLinear::backward_input(DeviceContext& ctx, const Tensor& dy, Tensor& dx, Tensor& dpartial) const {
  Tensor& partial = region_.partials(dx, dpartial);
  if (parts_.size() == 1) {
    parts_[0].linear.backward_input(ctx, dy, partial);
  } else {
    std::int64_t col = 0;
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      parts_[i].linear.backward_input_columns(ctx, dy, col, partial, /*accumulate_dx=*/i > 0);
      col += parts_[i].linear.out_features();
    }
  }
  region_.enter_backward(ctx, partial, dx);
}

void ColumnParallelLinear::backward_weights(DeviceContext& ctx, const Tensor& dy, const Tensor& input,
                                            Tensor* replicated_dweight) {
  if (parts_.size() == 1) {
    parts_[0].linear.backward_weights(ctx, dy, input);
    return;
  }
  std::int64_t col = 0;
  for (Part& p : parts_) {
    if (p.replicated && region_.tp().active()) {
      // One allreduce of the weight's shape per layer and micro-batch.
      MT_CHECK(replicated_dweight != nullptr, "a replicated part's weight gradient needs a scratch to sum over tp");
      p.linear.backward_weights_columns(ctx, dy, col, input, replicated_dweight, /*accumulate=*/false);
      region_.tp().allreduce(*replicated_dweight, ReduceOp::Sum);
      kernels::binary(ctx, BinaryOp::Add, p.linear.dweight, *replicated_dweight, p.linear.dweight);
    } else {
      p.linear.backward_weights_columns(ctx, dy, col, input);
    }
    col += p.linear.out_features();
  }
}

void ColumnParallelLinear::backward(DeviceContext& ctx, const Tensor& dy, const Tensor& x, Tensor& full, Tensor& dx,
                                    Tensor& dpartial, Tensor* replicated_dweight) {
  backward_weights(ctx, dy, input(ctx, x, full), replicated_dweight);
  backward_input(ctx, dy, dx, dpartial);
}

const Linear* ColumnParallelLinear::replicated_part() const {
  if (!region_.tp().active()) return nullptr;
  for (const Part& p : parts_)
    if (p.replicated) return &p.linear;
  return nullptr;
}

RowParallelLinear::RowParallelLinear(Linear linear, const TpRegion& region)
    : linear_(std::move(linear)), region_(region), add_bias_(region.tp().rank() == 0) {}

const Tensor& RowParallelLinear::forward(DeviceContext& ctx, const Tensor& x, Tensor& partial, Tensor& local) const {
  linear_.forward(ctx, x, partial, add_bias_);
  return region_.leave(ctx, partial, local);
}

}  // namespace mt
