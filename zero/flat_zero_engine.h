// ZeRO 0 and 1 (zero/zero_engine.h): the store's one flat gradient buffer reduced over dp in
// buckets as the backward completes them (parallel/grad_reducer.h), and DistributedAdamW
// (parallel/zero_optimizer.h) stepping every element (0) or this rank's block of each bucket and
// all-gathering them (1). With bf16 compute the optimizer writes the store's bf16 copy itself; over
// dp > 1 ZeRO-1's store is laid out in regions (zero_flat_regions) and its buckets of GEMM weights
// gather that copy alone, their fp32 master current in the owned blocks until a gathering
// for_each_resident_unit or with_every_unit_resident (collective over dp then).
// defines: FlatZeroEngine
#pragma once

#include <memory>

#include "parallel/grad_reducer.h"    // defines: GradReducer
#include "parallel/zero_optimizer.h"  // defines: DistributedAdamW
#include "zero/zero_engine.h"         // defines: ZeroEngine

namespace mt {

class FlatZeroEngine final : public ZeroEngine {
 public:
  // params: the store's, in store order (FlatParam: offset, numel, decay, norm weight). tied: the
  // store index of the tied embedding (-1: none on this rank); its gradient is reduced at the
  // step's end, after tied_stages sums its two copies.
  FlatZeroEngine(DeviceContext& ctx, Communicator& dp, Communicator* tied_stages, Gpt& model,
                 std::vector<FlatParam> params, std::int64_t tied, const ZeroOptions& options);

  GradReady begin_step() override;
  void finish_gradients(Tensor& norm_sq) override;
  double update(float lr, float grad_scale) override;
  void for_each_resident_unit(bool gather, const std::function<void(int unit)>& use) override;
  void with_every_unit_resident(bool gather, const std::function<void()>& use) override;
  bool keeps_compute_copy() const override { return true; }
  std::vector<OwnedPiece> owned_pieces() const override;
  std::vector<OwnedPiece> held_pieces() const override;
  Tensor owned_params(const OwnedPiece& piece) const override;
  Tensor moment(AdamMoment which, const OwnedPiece& piece) const override;
  std::int64_t step_count() const override { return optimizer_->step_count(); }
  void set_step_count(std::int64_t steps) override { optimizer_->set_step_count(steps); }
  std::int64_t state_bytes() const override { return optimizer_->state_bytes(); }

  const GradReducer& reducer() const { return *reducer_; }
  const DistributedAdamW& optimizer() const { return *optimizer_; }

 private:
  DeviceContext& ctx_;
  Communicator* tied_stages_;
  Gpt& model_;
  std::int64_t tied_;
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<DistributedAdamW> optimizer_;
};

}  // namespace mt
