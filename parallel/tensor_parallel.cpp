#include "parallel/tensor_parallel.h"

#include <chrono>

#include "runtime/error.h"

namespace mt {
namespace {

// Rows of a tensor seen as [rows, last dim]; 0 for a shape that has none (refused by the checks).
std::int64_t rows_of(const Tensor& t) {
  return t.rank() == 0 || t.shape().back() == 0 ? 0 : t.numel() / t.shape().back();
}

// Adds one collective of `bytes` and the lifetime of the scope to the stats (when there are some).
class WaitClock {
 public:
  WaitClock(TensorParallelStats* stats, std::size_t bytes) : stats_(stats), start_(std::chrono::steady_clock::now()) {
    if (stats_ == nullptr) return;
    ++stats_->collectives;
    stats_->bytes += static_cast<std::int64_t>(bytes);
  }
  ~WaitClock() {
    if (stats_ != nullptr)
      stats_->wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  WaitClock(const WaitClock&) = delete;
  WaitClock& operator=(const WaitClock&) = delete;

 private:
  TensorParallelStats* stats_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

TensorParallel::TensorParallel(Communicator* group, const Stream* stream, TensorParallelStats* stats)
    : group_(group), stream_(stream), stats_(stats) {}

void TensorParallel::wait(const WorkPtr& work) const {
  if (stream_ != nullptr) {
    work->wait_on(*stream_);
  } else {
    work->wait();
  }
}

void TensorParallel::allreduce(Tensor& x, ReduceOp op) const {
  if (!active()) return;
  const WaitClock clock(stats_, x.nbytes());
  wait(group_->allreduce_async(x, x, {op}));
}

void TensorParallel::check_row_blocks(const char* what, const Tensor& local, const Tensor& full) const {
  MT_CHECK(local.rank() >= 1 && full.rank() >= 1 && local.shape().back() > 0 && local.dtype() == full.dtype() &&
               full.shape().back() == local.shape().back() && rows_of(full) == rows_of(local) * size(),
           "sequence ", what, ": ", local.describe(), " is not one of ", size(), " row blocks of ", full.describe());
}

void TensorParallel::sequence_gather_forward(DeviceContext& ctx, const Tensor& local, Tensor& full) const {
  check_row_blocks("gather", local, full);
  if (!active()) {
    full.copy_from(local, ctx.stream());
    return;
  }
  // Rank-major allgather output is the row blocks in order: the full tensor as it is laid out.
  const WaitClock clock(stats_, full.nbytes());
  wait(group_->allgather_async(local.reshape({local.numel()}), full.reshape({full.numel()})));
}

void TensorParallel::sequence_reduce_scatter_forward(DeviceContext& ctx, const Tensor& partial, Tensor& local) const {
  check_row_blocks("reduce-scatter", local, partial);
  if (!active()) {
    local.copy_from(partial, ctx.stream());
    return;
  }
  const WaitClock clock(stats_, partial.nbytes());
  wait(group_->reduce_scatter_async(partial.reshape({partial.numel()}), local.reshape({local.numel()})));
}

void TensorParallel::gather_forward(DeviceContext& ctx, const Tensor& local, Tensor& full) const {
  MT_CHECK(local.rank() >= 1 && full.rank() >= 1 && local.shape().back() > 0, "gather ", local.describe(), " into ",
           full.describe());
  const std::int64_t cols = local.shape().back(), rows = rows_of(local);
  MT_CHECK(full.shape().back() == cols * size() && rows_of(full) == rows, "gather ", local.describe(), " into ",
           full.describe(), " over ", size(), " ranks");
  if (!active()) {
    full.copy_from(local, ctx.stream());
    return;
  }
  // Allgather gives [tp, rows, cols] (rank-major); each rank's rows go to its column block. Off the
  // hot path (sampling, tests), so plain row copies.
  Tensor blocks = Tensor::empty({size(), rows, cols}, local.dtype(), ctx);
  const WaitClock clock(stats_, blocks.nbytes());
  group_->allgather(local.reshape({local.numel()}), blocks.reshape({blocks.numel()}));
  Tensor flat_full = full.reshape({full.numel()});
  for (int r = 0; r < size(); ++r)
    for (std::int64_t i = 0; i < rows; ++i)
      flat_full.flat_slice(i * cols * size() + r * cols, cols)
          .copy_from(blocks.reshape({blocks.numel()}).flat_slice((r * rows + i) * cols, cols), ctx.stream());
}

void TensorParallel::own_columns(DeviceContext& ctx, const Tensor& full, Tensor& local) const {
  MT_CHECK(local.rank() >= 1 && full.rank() >= 1 && local.shape().back() > 0, "columns of ", full.describe(),
           " into ", local.describe());
  const std::int64_t cols = local.shape().back(), rows = rows_of(local);
  MT_CHECK(full.shape().back() == cols * size() && rows_of(full) == rows, "columns of ", full.describe(), " into ",
           local.describe(), " over ", size(), " ranks");
  Tensor flat_full = full.reshape({full.numel()}), flat_local = local.reshape({local.numel()});
  for (std::int64_t i = 0; i < rows; ++i)
    flat_local.flat_slice(i * cols, cols)
        .copy_from(flat_full.flat_slice(i * cols * size() + rank() * cols, cols), ctx.stream());
}

}  // namespace mt
