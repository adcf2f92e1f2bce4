// The data-parallel gradient reduction, overlapped with backward. The gradients of a model stage
// live in one flat fp32 buffer (see grad_buckets.h); it is cut into buckets, and as soon as every
// param of a bucket has its final gradient (mark_ready) the bucket's reduction is launched
// asynchronously, while backward goes on computing the gradients of earlier layers. Buckets are
// launched strictly in reduction order (buckets[0] first), so every dp rank submits the same
// collectives in the same order whatever order its params become ready in.
//
// Reduction op: Sum (the trainer pre-scales the loss by 1/dp). Without shard each bucket is
// allreduced; with shard (ZeRO-1) each bucket is reduce-scattered in place, so only this rank's
// owned block of the bucket (BucketLayout::owned) holds the sum afterwards.
// defines: ReducerOptions, GradReducer
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"     // defines: Communicator, WorkPtr
#include "parallel/grad_buckets.h" // defines: FlatParam, BucketLayout
#include "runtime/context.h"       // defines: DeviceContext
#include "runtime/tensor.h"        // defines: Tensor

namespace mt {

struct ReducerOptions {
  std::int64_t bucket_bytes = 25 << 20;  // --bucket-mb * 2^20
  bool shard = false;    // ZeRO-1: reduce-scatter instead of allreduce
  bool overlap = true;   // launch buckets from mark_ready; false: all at once from finish()
  std::vector<std::int64_t> boundaries = {};  // flat offsets no bucket straddles (make_bucket_layout)
};

class GradReducer {
 public:
  // dp: the data-parallel group (size 1 allowed: then nothing is communicated but the bookkeeping
  // still runs). flat_grads: fp32 [flat_numel] on ctx's device, flat_numel a multiple of dp.size().
  // The context and the communicator must outlive the reducer.
  GradReducer(DeviceContext& ctx, Communicator& dp, Tensor flat_grads, std::vector<FlatParam> params,
              ReducerOptions options);
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Start of the backward whose gradients are final (the last micro-batch): no param is ready.
  // Buckets holding no param at all (padding only) are ready at once. Error while a round is open.
  void begin();
  // This param's gradient is final (its backward has been queued on ctx's stream). With overlap,
  // launches (async) every bucket that is ready and whose predecessors in reduction order are
  // launched. Errors: outside begin()..finish(), a param out of range, a param marked twice.
  void mark_ready(int param);
  // Launches the rest, then waits for all (Work::wait_on(ctx.stream()): on CUDA later work on the
  // compute stream is ordered after the reductions without blocking the host; MPI blocks). After
  // it, without shard: every rank holds the SUM over the dp group of every gradient; with shard:
  // only this rank's owned block of each bucket holds the sum, the rest of flat_grads is undefined.
  // Error naming the first param (in param order) not marked ready: the round then stays open and
  // nothing more was launched, so the caller can still mark it and call finish() again.
  void finish();

  const BucketLayout& layout() const { return layout_; }
  const std::vector<FlatParam>& params() const { return params_; }
  const ReducerOptions& options() const { return options_; }
  const Tensor& flat_grads() const { return flat_grads_; }
  DeviceContext& context() const { return *ctx_; }
  Communicator& group() const { return *dp_; }
  bool in_round() const { return in_round_; }

  // Observability of the last (or current) begin()..finish() round, for tests and logs.
  // Buckets launched so far (in reduction order: buckets [0, n) are launched).
  int buckets_launched() const { return next_launch_; }
  // How many buckets were already launched when finish() was called (0 with overlap off).
  int buckets_launched_before_finish() const { return launched_before_finish_; }
  // How many of those had already completed when finish() was called, before it waited: a
  // reduction that ran to completion while the caller was still computing backward.
  int buckets_completed_before_finish() const { return completed_before_finish_; }
  // How many mark_ready calls of the round had been made when bucket b was launched (0: at
  // begin()); -1 while not launched.
  int launched_after_marks(int bucket) const;
  // Non-blocking: has bucket b's reduction finished? False while not launched; true at once
  // after launch when dp has one rank (nothing to communicate).
  bool bucket_complete(int bucket) const;

 private:
  void launch_ready();
  void launch(int bucket);

  DeviceContext* ctx_;
  Communicator* dp_;
  Tensor flat_grads_;
  std::vector<FlatParam> params_;
  ReducerOptions options_;
  BucketLayout layout_;
  std::vector<std::vector<int>> buckets_of_param_;  // the buckets each param overlaps

  // The round.
  bool in_round_ = false;
  int marks_ = 0;
  std::vector<char> ready_;          // per param
  std::vector<int> pending_;         // per bucket: params not yet ready
  std::vector<WorkPtr> works_;       // per bucket; null when not launched or nothing to communicate
  std::vector<int> launched_after_;  // per bucket
  int next_launch_ = 0;
  int launched_before_finish_ = 0;
  int completed_before_finish_ = 0;
};

}  // namespace mt
