// ZeRO 2 and 3 (zero/zero_engine.h): each parameter unit's gradients reduce-scattered per
// micro-batch into this rank's owned shards as the model's parameter-use hooks end their use
// (zero/unit_shards.h, which with 3 also gathers each unit before its use); UnitShardedAdamW steps
// the owned shards, and 2 all-gathers every block after the step. With bf16 compute the step also
// writes the GEMM weights' owned bf16 shards, which 3's uses, or 2 after the step, gather as the
// compute copy (2 bytes an element, no cast).
// defines: UnitZeroEngine
#pragma once

#include <memory>

#include "zero/unit_sharded_adamw.h"  // defines: UnitShardedAdamW
#include "zero/unit_shards.h"         // defines: UnitShards, UnitCut
#include "zero/zero_engine.h"         // defines: ZeroEngine

namespace mt {

class UnitZeroEngine final : public ZeroEngine {
 public:
  // cut: the one the model's store was built in. params: the store's, in store order. tied: the
  // store index of the tied embedding's first vocabulary piece (-1: none on this rank), `pieces`
  // of them, each a block of its own. Installs the engine's shards as the model's hooks.
  UnitZeroEngine(DeviceContext& ctx, Communicator& dp, Communicator* tied_stages, Gpt& model, UnitCut cut,
                 const std::vector<FlatParam>& params, std::int64_t tied, int pieces, const ZeroOptions& options);
  ~UnitZeroEngine() override;

  GradReady begin_step() override;
  void finish_gradients(Tensor& norm_sq) override;
  double update(float lr, float grad_scale) override;
  void begin_evaluation() override { shards_->start_round(1); }
  void end_evaluation() override { shards_->finish_round(); }
  void for_each_resident_unit(bool gather, const std::function<void(int unit)>& use) override;
  void with_every_unit_resident(bool gather, const std::function<void()>& use) override;
  // ZeRO-3 makes each unit's compute copy at its gather (the store has none to cast between uses);
  // ZeRO-2 keeps the fp32 parameters of the blocks read in fp32 and the model casts them
  // (ParameterStore blocks); its GEMM weights' copy under bf16 is the step's gather.
  bool keeps_compute_copy() const override { return shards_->stage() == 3; }
  std::vector<OwnedPiece> owned_pieces() const override;
  std::vector<OwnedPiece> held_pieces() const override { return owned_pieces(); }
  Tensor owned_params(const OwnedPiece& piece) const override;
  Tensor moment(AdamMoment which, const OwnedPiece& piece) const override;
  std::int64_t step_count() const override { return optimizer_->step_count(); }
  void set_step_count(std::int64_t steps) override { optimizer_->set_step_count(steps); }
  std::int64_t state_bytes() const override { return optimizer_->state_bytes(); }

  const UnitShards& shards() const { return *shards_; }

 private:
  Communicator* tied_stages_;
  Gpt& model_;
  std::unique_ptr<UnitShards> shards_;
  std::unique_ptr<UnitShardedAdamW> optimizer_;
  std::vector<int> tied_blocks_;  // the tied embedding's blocks (one per vocabulary piece)
};

}  // namespace mt
