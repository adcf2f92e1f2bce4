#include "parallel/zero_optimizer.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "optim/grad_norm.h"
#include "runtime/error.h"
#include "runtime/kernels.h"  // defines: kernels::cast

namespace mt {

DistributedAdamW::DistributedAdamW(DeviceContext& ctx, Communicator& dp, const GradReducer& reducer,
                                   Tensor flat_params, AdamWConfig config, Tensor flat_compute)
    : ctx_(&ctx), dp_(&dp), reducer_(&reducer), flat_params_(std::move(flat_params)),
      flat_compute_(std::move(flat_compute)), shard_(reducer.options().shard) {
  MT_CHECK(&reducer.group() == &dp, "DistributedAdamW: the communicator is not the reducer's data-parallel group");
  MT_CHECK(&reducer.context() == &ctx, "DistributedAdamW: the context is not the reducer's");
  const Tensor& grads = reducer.flat_grads();
  MT_CHECK(flat_params_.defined() && flat_params_.dtype() == DType::F32 && flat_params_.shape() == grads.shape(),
           "DistributedAdamW: the flat parameters ", flat_params_.describe(),
           " must be fp32 and shaped like the flat gradients ", grads.describe());
  MT_CHECK(!flat_compute_.defined() || (flat_compute_.dtype() == DType::BF16 &&
                                         flat_compute_.shape() == flat_params_.shape() &&
                                         flat_compute_.device() == ctx.device()),
           "DistributedAdamW: the bf16 copy ", flat_compute_.describe(), " is not shaped like the flat parameters ",
           flat_params_.describe());
  const BucketLayout& layout = reducer.layout();
  const std::vector<FlatParam>& params = reducer.params();
  // With shard over several ranks a bucket of GEMM weights alone gathers its bf16 copy, which the
  // pass writes; the others gather fp32 and are cast after it. Unsharded (or on one rank) the pass
  // writes the copy of every element.
  const bool copy_in_pass = flat_compute_.defined() && (!shard_ || dp.size() == 1);
  for (const Bucket& bucket : layout.buckets) {
    const bool compute_only = std::all_of(bucket.params.begin(), bucket.params.end(), [&](int p) {
      return params[static_cast<std::size_t>(p)].compute_only;
    });
    gathers_compute_.push_back(flat_compute_.defined() && shard_ && dp.size() > 1 && compute_only ? 1 : 0);
  }
  const auto copy_of = [&](int bucket, std::int64_t offset, std::int64_t numel) {
    const bool in_pass = copy_in_pass || (bucket >= 0 && gathers_compute_[static_cast<std::size_t>(bucket)]);
    return in_pass ? flat_compute_.flat_slice(offset, numel) : Tensor{};
  };

  // The pieces of params in this rank's owned block of each bucket.
  for (int b = 0; b < layout.size(); ++b) {
    const auto [lo, hi] = layout.owned(b, dp.rank());
    for (int p : layout.buckets[static_cast<std::size_t>(b)].params) {
      const FlatParam& fp = params[static_cast<std::size_t>(p)];
      const std::int64_t begin = std::max(lo, fp.offset);
      const std::int64_t end = std::min(hi, fp.offset + fp.numel);
      if (begin < end) pieces_.push_back({p, b, begin, end - begin});
    }
  }
  for (const Piece& piece : pieces_) {
    const double weight = params[static_cast<std::size_t>(piece.param)].norm_weight;
    if (!norm_ranges_.empty() && norm_ranges_.back().offset + norm_ranges_.back().numel == piece.offset &&
        norm_ranges_.back().weight == weight) {
      norm_ranges_.back().numel += piece.numel;
    } else {
      norm_ranges_.push_back({piece.offset, piece.numel, weight});
    }
  }

  if (!shard_) {
    std::vector<ParamSlot> slots;
    std::vector<Tensor> copies;
    slots.reserve(params.size());
    for (const FlatParam& fp : params) {
      slots.push_back({fp.name, flat_params_.flat_slice(fp.offset, fp.numel), grads.flat_slice(fp.offset, fp.numel),
                       fp.decay});
      copies.push_back(copy_of(-1, fp.offset, fp.numel));
    }
    optimizers_.emplace_back(ctx, std::move(slots), config, std::move(copies));
    return;
  }
  optimizers_.reserve(static_cast<std::size_t>(layout.size()));
  std::size_t next = 0;
  for (int b = 0; b < layout.size(); ++b) {
    std::vector<ParamSlot> slots;
    std::vector<Tensor> copies;
    for (; next < pieces_.size() && pieces_[next].bucket == b; ++next) {
      slot_of_piece_.push_back(slots.size());
      const Piece& piece = pieces_[next];
      const FlatParam& fp = params[static_cast<std::size_t>(piece.param)];
      std::string name = fp.name;
      if (piece.numel != fp.numel) {
        const std::int64_t first = piece.offset - fp.offset;
        name += '[';
        name += std::to_string(first);
        name += ':';
        name += std::to_string(first + piece.numel);
        name += ']';
      }
      slots.push_back({std::move(name), flat_params_.flat_slice(piece.offset, piece.numel),
                       grads.flat_slice(piece.offset, piece.numel), fp.decay});
      copies.push_back(copy_of(b, piece.offset, piece.numel));
    }
    optimizers_.emplace_back(ctx, std::move(slots), config, std::move(copies));
  }
}

void DistributedAdamW::owned_grad_sum_of_squares(Tensor& out) const {
  const Tensor& grads = reducer_->flat_grads();
  std::vector<Tensor> views;
  std::vector<float> weights;
  for (const NormRange& range : norm_ranges_) {
    if (range.weight == 0.0) continue;
    views.push_back(grads.flat_slice(range.offset, range.numel));
    weights.push_back(static_cast<float>(range.weight));
  }
  kernels::sum_of_squares_tree(*ctx_, views, weights, out);  // one tree over every range, no wait
}

double DistributedAdamW::owned_grad_sum_of_squares() const {
  Tensor total = Tensor::empty({1}, DType::F32, *ctx_);
  owned_grad_sum_of_squares(total);
  return static_cast<double>(total.to_host<float>()[0]);
}

void DistributedAdamW::step(float lr, float grad_scale) {
  MT_CHECK(!reducer_->in_round(), "DistributedAdamW::step() while the gradient reduction is still open "
                                  "(call GradReducer::finish() first)");
  if (!shard_) {
    optimizers_.front().step(lr, grad_scale);
    return;
  }
  const BucketLayout& layout = reducer_->layout();
  std::vector<WorkPtr> gathers;
  gathers.reserve(optimizers_.size());
  gather_bytes_ = 0;
  for (int b = 0; b < layout.size(); ++b) {
    optimizers_[static_cast<std::size_t>(b)].step(lr, grad_scale);
    if (dp_->size() == 1) continue;
    // In place: the output (the whole bucket) holds this rank's input at its block.
    const Tensor& from = gathers_compute_[static_cast<std::size_t>(b)] ? flat_compute_ : flat_params_;
    gathers.push_back(gather_bucket(b, from));
    if (gathers_compute_[static_cast<std::size_t>(b)]) master_stale_ = true;
    gather_bytes_ += layout.buckets[static_cast<std::size_t>(b)].numel() * static_cast<std::int64_t>(dtype_size(from.dtype()));
  }
  const auto wait_start = std::chrono::steady_clock::now();
  for (const WorkPtr& work : gathers) work->wait_on(ctx_->stream());
  gather_wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  if (dp_->size() == 1 || !flat_compute_.defined()) return;
  // The buckets gathered in fp32 took the other ranks' pieces unrounded: one cast per run of them
  // (the buckets are contiguous, in decreasing address order).
  for (int b = 0; b < layout.size();) {
    if (gathers_compute_[static_cast<std::size_t>(b)]) {
      ++b;
      continue;
    }
    const std::int64_t end = layout.buckets[static_cast<std::size_t>(b)].end;
    while (b + 1 < layout.size() && !gathers_compute_[static_cast<std::size_t>(b + 1)]) ++b;
    const std::int64_t begin = layout.buckets[static_cast<std::size_t>(b)].begin;
    ++b;
    Tensor compute = flat_compute_.flat_slice(begin, end - begin);
    kernels::cast(*ctx_, flat_params_.flat_slice(begin, end - begin), compute);
  }
}

WorkPtr DistributedAdamW::gather_bucket(int b, const Tensor& flat) {
  const BucketLayout& layout = reducer_->layout();
  const Bucket& bucket = layout.buckets[static_cast<std::size_t>(b)];
  const auto [lo, hi] = layout.owned(b, dp_->rank());
  return dp_->allgather_async(flat.flat_slice(lo, hi - lo), flat.flat_slice(bucket.begin, bucket.numel()));
}

void DistributedAdamW::gather_master() {
  if (!master_stale_) return;
  std::vector<WorkPtr> gathers;
  for (int b = 0; b < reducer_->layout().size(); ++b)
    if (gathers_compute_[static_cast<std::size_t>(b)]) gathers.push_back(gather_bucket(b, flat_params_));
  for (const WorkPtr& work : gathers) work->wait_on(ctx_->stream());
  master_stale_ = false;
}

std::int64_t DistributedAdamW::updated_numel() const {
  std::int64_t total = 0;
  for (const AdamW& opt : optimizers_) {
    for (const ParamSlot& slot : opt.slots()) total += slot.param.numel();
  }
  return total;
}

std::int64_t DistributedAdamW::state_bytes() const {
  return updated_numel() * 2 * static_cast<std::int64_t>(sizeof(float));
}

Tensor DistributedAdamW::moment(Moment which, int param, std::int64_t first, std::int64_t numel) const {
  const std::vector<FlatParam>& params = reducer_->params();
  MT_CHECK(param >= 0 && static_cast<std::size_t>(param) < params.size(), "moment: no param ", param);
  const FlatParam& fp = params[static_cast<std::size_t>(param)];
  MT_CHECK(first >= 0 && numel >= 0 && first + numel <= fp.numel, "moment: elements [", first, ", ", first + numel,
           ") outside ", fp.name, " (", fp.numel, " elements)");
  const auto pick = [which](const AdamW& opt, std::size_t slot) -> const Tensor& {
    return which == Moment::First ? opt.m(slot) : opt.v(slot);
  };
  if (!shard_) return pick(optimizers_.front(), static_cast<std::size_t>(param)).flat_slice(first, numel);
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const Piece& piece = pieces_[i];
    const std::int64_t piece_first = piece.offset - fp.offset;
    if (piece.param != param || first < piece_first || first + numel > piece_first + piece.numel) continue;
    const AdamW& opt = optimizers_[static_cast<std::size_t>(piece.bucket)];
    return pick(opt, slot_of_piece_[i]).flat_slice(first - piece_first, numel);
  }
  MT_FAIL("moment: elements [", first, ", ", first + numel, ") of ", fp.name, " are not within one piece this rank owns");
}

std::int64_t DistributedAdamW::step_count() const {
  return optimizers_.empty() ? 0 : optimizers_.front().step_count();
}

void DistributedAdamW::set_step_count(std::int64_t steps) {
  for (AdamW& opt : optimizers_) opt.set_step_count(steps);
}

}  // namespace mt
