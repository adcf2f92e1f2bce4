#include "parallel/grad_reducer.h"

#include <algorithm>
#include <utility>

#include "runtime/error.h"

namespace mt {

GradReducer::GradReducer(DeviceContext& ctx, Communicator& dp, Tensor flat_grads, std::vector<FlatParam> params,
                         ReducerOptions options)
    : ctx_(&ctx), dp_(&dp), flat_grads_(std::move(flat_grads)), params_(std::move(params)), options_(options) {
  MT_CHECK(flat_grads_.defined() && flat_grads_.dtype() == DType::F32 && flat_grads_.rank() == 1,
           "the flat gradient buffer must be a 1-D fp32 tensor, got ", flat_grads_.describe());
  MT_CHECK(flat_grads_.device() == ctx.device(), "the flat gradient buffer ", flat_grads_.describe(),
           " is not on the context's device ", ctx.device().str());
  layout_ = make_bucket_layout(params_, flat_grads_.numel(), dp.size(), options_.bucket_bytes, options_.boundaries);
  buckets_of_param_.resize(params_.size());
  for (int b = 0; b < layout_.size(); ++b) {
    for (int p : layout_.buckets[static_cast<std::size_t>(b)].params) {
      buckets_of_param_[static_cast<std::size_t>(p)].push_back(b);
    }
  }
  const auto nb = static_cast<std::size_t>(layout_.size());
  ready_.assign(params_.size(), 0);
  pending_.assign(nb, 0);
  works_.assign(nb, nullptr);
  launched_after_.assign(nb, -1);
}

void GradReducer::begin() {
  MT_CHECK(!in_round_, "GradReducer::begin() called again before finish() (", next_launch_, " of ",
           layout_.size(), " buckets launched)");
  in_round_ = true;
  marks_ = 0;
  next_launch_ = 0;
  launched_before_finish_ = 0;
  completed_before_finish_ = 0;
  std::fill(ready_.begin(), ready_.end(), 0);
  for (int b = 0; b < layout_.size(); ++b) {
    const auto i = static_cast<std::size_t>(b);
    pending_[i] = static_cast<int>(layout_.buckets[i].params.size());
    works_[i] = nullptr;
    launched_after_[i] = -1;
  }
  if (options_.overlap) launch_ready();
}

void GradReducer::mark_ready(int param) {
  MT_CHECK(in_round_, "GradReducer::mark_ready(", param, ") outside begin()..finish()");
  MT_CHECK(param >= 0 && param < static_cast<int>(params_.size()), "param ", param, " of ", params_.size());
  const auto p = static_cast<std::size_t>(param);
  MT_CHECK(!ready_[p], "param '", params_[p].name, "' (", param, ") marked ready twice in one backward");
  ready_[p] = 1;
  ++marks_;
  for (int b : buckets_of_param_[p]) --pending_[static_cast<std::size_t>(b)];
  if (options_.overlap) launch_ready();
}

void GradReducer::launch_ready() {
  while (next_launch_ < layout_.size() && pending_[static_cast<std::size_t>(next_launch_)] == 0) {
    launch(next_launch_);
  }
}

void GradReducer::launch(int bucket) {
  MT_CHECK(bucket == next_launch_, "bucket ", bucket, " launched out of order (next is ", next_launch_, ")");
  const auto i = static_cast<std::size_t>(bucket);
  const Bucket& b = layout_.buckets[i];
  if (dp_->size() > 1) {
    const Tensor slice = flat_grads_.flat_slice(b.begin, b.numel());
    if (options_.shard) {
      const auto [lo, hi] = layout_.owned(bucket, dp_->rank());
      works_[i] = dp_->reduce_scatter_async(slice, flat_grads_.flat_slice(lo, hi - lo), {ReduceOp::Sum});
    } else {
      works_[i] = dp_->allreduce_async(slice, slice, {ReduceOp::Sum});
    }
  }
  launched_after_[i] = marks_;
  ++next_launch_;
}

void GradReducer::finish() {
  MT_CHECK(in_round_, "GradReducer::finish() without begin()");
  for (std::size_t p = 0; p < params_.size(); ++p) {
    if (!ready_[p]) {
      MT_FAIL("GradReducer::finish(): param '", params_[p].name, "' (", p, ") was not marked ready (",
              params_.size() - static_cast<std::size_t>(marks_), " of ", params_.size(),
              " params not ready; nothing more was launched)");
    }
  }
  launched_before_finish_ = next_launch_;
  completed_before_finish_ = 0;
  for (int b = 0; b < next_launch_; ++b) completed_before_finish_ += bucket_complete(b) ? 1 : 0;
  while (next_launch_ < layout_.size()) launch(next_launch_);
  in_round_ = false;  // closed even if a wait throws: the reductions ended (or failed) either way
  for (const WorkPtr& work : works_) {
    if (work) work->wait_on(ctx_->stream());
  }
}

int GradReducer::launched_after_marks(int bucket) const {
  MT_CHECK(bucket >= 0 && bucket < layout_.size(), "bucket ", bucket, " of ", layout_.size());
  return launched_after_[static_cast<std::size_t>(bucket)];
}

bool GradReducer::bucket_complete(int bucket) const {
  MT_CHECK(bucket >= 0 && bucket < layout_.size(), "bucket ", bucket, " of ", layout_.size());
  if (bucket >= next_launch_) return false;
  const WorkPtr& work = works_[static_cast<std::size_t>(bucket)];
  return !work || work->test();
}

}  // namespace mt
