// AdamW over a ZeRO-2/3 rank's owned shards (zero/unit_shards.h): one slot per piece of a
// parameter inside this rank's owned piece of a block, a view of the owned parameters (stage 2: of
// the full block buffer; stage 3: of the owned parameter buffer) and of the owned gradients.
// Stage 3 with bf16 compute: a piece of a block that gathers its compute copy (UnitShards::
// gathers_compute) has its owned bf16 shard as the slot's bf16 copy, written in the same pass as
// the update (optim/adamw.h), so the step rounds each such parameter once.
// m and v exist for exactly those elements: 8 bytes x (stage params / dp + padding) per rank.
// defines: UnitShardedAdamW
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim/adamw.h"             // defines: AdamW, AdamWConfig
#include "parallel/grad_buckets.h"   // defines: FlatParam
#include "zero/unit_shards.h"    // defines: UnitShards

namespace mt {

class UnitShardedAdamW {
 public:
  // A piece of param `param`: its elements [first, first + numel), slot `slot` of the AdamW.
  struct Piece {
    int param = 0, block = 0;
    std::int64_t first = 0, numel = 0;
    std::size_t slot = 0;
  };
  // params: one per store parameter, in store order (the offset unused; norm_weight 0 leaves a
  // replica out of the global norm). shards must outlive this.
  UnitShardedAdamW(DeviceContext& ctx, const UnitShards& shards, const std::vector<FlatParam>& params,
                   AdamWConfig config = {});

  // Sum of squares of the owned reduced gradients, each piece weighted: into out (fp32 [1] on the
  // device) with no host wait, or read back (a wait).
  void owned_grad_sum_of_squares(Tensor& out) const;
  double owned_grad_sum_of_squares() const;
  void step(float lr, float grad_scale = 1.0f);

  const std::vector<Piece>& owned_pieces() const { return pieces_; }
  Tensor param(const Piece& piece) const;  // the owned parameter values of a piece
  using Moment = AdamMoment;
  // The moment of param elements [first, first + numel), inside one owned piece (Error otherwise).
  Tensor moment(Moment which, int param, std::int64_t first, std::int64_t numel) const;
  std::int64_t updated_numel() const;
  std::int64_t state_bytes() const { return updated_numel() * 8; }
  std::int64_t step_count() const { return adam_.step_count(); }
  void set_step_count(std::int64_t steps) { adam_.set_step_count(steps); }

 private:
  static AdamW make(DeviceContext& ctx, const UnitShards& shards, const std::vector<FlatParam>& params,
                    std::vector<Piece>& pieces, AdamWConfig config);
  DeviceContext* ctx_;
  std::vector<Piece> pieces_;
  std::vector<double> weights_;  // per piece
  AdamW adam_;
};

}  // namespace mt
