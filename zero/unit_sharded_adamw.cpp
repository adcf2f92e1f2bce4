#include "zero/unit_sharded_adamw.h"

#include <algorithm>
#include <span>

#include "optim/grad_norm.h"
#include "runtime/kernels.h"
#include "runtime/error.h"

namespace mt {

AdamW UnitShardedAdamW::make(DeviceContext& ctx, const UnitShards& shards, const std::vector<FlatParam>& params,
                             std::vector<Piece>& pieces, AdamWConfig config) {
  std::vector<ParamSlot> slots;
  std::vector<Tensor> compute;  // per slot: its piece of the owned compute shard, or none
  bool any_compute = false;
  const std::vector<ShardBlock>& blocks = shards.blocks();
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const int block = static_cast<int>(b);
    const std::int64_t lo = shards.owned_begin(block), hi = lo + shards.shard_numel(block);
    const Tensor owned_params = shards.owned_params(block), owned_grads = shards.owned_grads(block);
    const Tensor owned_compute = shards.gathers_compute(block) ? shards.owned_compute(block) : Tensor();
    any_compute = any_compute || owned_compute.defined();
    std::int64_t at = 0;  // the param's first element within the block
    for (std::size_t p = blocks[b].first; p < blocks[b].first + blocks[b].count; ++p) {
      const FlatParam& info = params.at(p);
      const std::int64_t begin = std::max(lo, at), end = std::min(hi, at + info.numel);
      if (begin < end) {
        Piece piece{static_cast<int>(p), block, begin - at, end - begin, slots.size()};
        std::string name = info.name;
        if (piece.numel != info.numel)
          name += "[" + std::to_string(piece.first) + ":" + std::to_string(piece.first + piece.numel) + "]";
        slots.push_back({std::move(name), owned_params.flat_slice(begin - lo, end - begin),
                         owned_grads.flat_slice(begin - lo, end - begin), info.decay});
        compute.push_back(owned_compute.defined() ? owned_compute.flat_slice(begin - lo, end - begin) : Tensor());
        pieces.push_back(piece);
      }
      at += info.numel;
    }
  }
  if (!any_compute) compute.clear();
  return AdamW(ctx, std::move(slots), config, std::move(compute));
}

UnitShardedAdamW::UnitShardedAdamW(DeviceContext& ctx, const UnitShards& shards, const std::vector<FlatParam>& params,
                                   AdamWConfig config)
    : ctx_(&ctx), adam_(make(ctx, shards, params, pieces_, config)) {
  for (const Piece& piece : pieces_) weights_.push_back(params[static_cast<std::size_t>(piece.param)].norm_weight);
}

void UnitShardedAdamW::owned_grad_sum_of_squares(Tensor& out) const {
  std::vector<Tensor> grads;
  std::vector<float> weights;
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    if (weights_[i] == 0.0) continue;
    grads.push_back(adam_.slot(pieces_[i].slot).grad);
    weights.push_back(static_cast<float>(weights_[i]));
  }
  kernels::sum_of_squares_tree(*ctx_, grads, weights, out);  // one tree over every piece, no wait
}

double UnitShardedAdamW::owned_grad_sum_of_squares() const {
  Tensor total = Tensor::empty({1}, DType::F32, *ctx_);
  owned_grad_sum_of_squares(total);
  return static_cast<double>(total.to_host<float>()[0]);
}

void UnitShardedAdamW::step(float lr, float grad_scale) { adam_.step(lr, grad_scale); }

Tensor UnitShardedAdamW::param(const Piece& piece) const { return adam_.slot(piece.slot).param; }

Tensor UnitShardedAdamW::moment(Moment which, int param, std::int64_t first, std::int64_t numel) const {
  for (const Piece& piece : pieces_) {
    if (piece.param != param || first < piece.first || first + numel > piece.first + piece.numel) continue;
    const Tensor& m = which == Moment::First ? adam_.m(piece.slot) : adam_.v(piece.slot);
    return m.flat_slice(first - piece.first, numel);
  }
  MT_FAIL("moment: elements [", first, ", ", first + numel, ") of param ", param,
          " are not within one piece this rank owns");
}

std::int64_t UnitShardedAdamW::updated_numel() const {
  std::int64_t total = 0;
  for (const Piece& piece : pieces_) total += piece.numel;
  return total;
}

}  // namespace mt
