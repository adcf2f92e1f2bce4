#include "zero/unit_zero_engine.h"

#include <chrono>

namespace mt {

UnitZeroEngine::UnitZeroEngine(DeviceContext& ctx, Communicator& dp, Communicator* tied_stages, Gpt& model,
                               UnitCut cut, const std::vector<FlatParam>& params, std::int64_t tied, int pieces,
                               const ZeroOptions& options)
    : tied_stages_(tied_stages), model_(model) {
  MT_CHECK(options.stage == 2 || options.stage == 3, "UnitZeroEngine is ZeRO 2 or 3, not ", options.stage);
  shards_ = std::make_unique<UnitShards>(ctx, dp, model.parameters(), std::move(cut), options.stage, options.overlap);
  for (std::size_t b = 0; b < shards_->blocks().size(); ++b) {
    const auto first = static_cast<std::int64_t>(shards_->blocks()[b].first);
    if (tied >= 0 && first >= tied && first < tied + pieces) tied_blocks_.push_back(static_cast<int>(b));
  }
  // update() broadcasts the tied blocks' fp32 shards alone: they must have no compute shard to follow.
  for (const int b : tied_blocks_)
    MT_CHECK(!shards_->gathers_compute(b), "the tied embedding's block ", b, " gathers its compute copy");
  optimizer_ = std::make_unique<UnitShardedAdamW>(ctx, *shards_, params, options.adamw);
  model_.set_param_hooks(shards_.get());
}

UnitZeroEngine::~UnitZeroEngine() { model_.set_param_hooks(nullptr); }

ZeroEngine::GradReady UnitZeroEngine::begin_step() {
  shards_->zero_owned_grads();
  shards_->start_round(0);
  return {};  // the hooks reduce each unit as its use ends
}

void UnitZeroEngine::finish_gradients(Tensor& norm_sq) {
  shards_->finish_round();
  // Each copy of the tied embedding reduced its part over its dp group into identically cut owned
  // shards: sum the two shards.
  if (tied_stages_ != nullptr)
    for (const int b : tied_blocks_) tied_stages_->allreduce(shards_->owned_grads(b));
  optimizer_->owned_grad_sum_of_squares(norm_sq);
}

double UnitZeroEngine::update(float lr, float grad_scale) {
  optimizer_->step(lr, grad_scale);
  const auto start = std::chrono::steady_clock::now();
  // The two copies of the tied embedding: the first stage's is the one (see FlatZeroEngine), shard
  // by shard, as both stages cut it alike.
  if (tied_stages_ != nullptr)
    for (const int b : tied_blocks_) tied_stages_->broadcast(shards_->owned_params(b), {0});
  shards_->gather_after_step();  // ZeRO-2: the full parameters again; ZeRO-3 gathers at each use
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void UnitZeroEngine::for_each_resident_unit(bool gather, const std::function<void(int unit)>& use) {
  // One unit's full parameters at a time: ZeRO-3 never holds the whole stage's.
  for (std::size_t u = 0; u < shards_->units().size(); ++u) {
    const int unit = static_cast<int>(u);
    shards_->materialize(unit, gather);
    use(unit);
    shards_->keep_owned(unit);
  }
}

void UnitZeroEngine::with_every_unit_resident(bool gather, const std::function<void()>& use) {
  shards_->materialize(gather);
  use();
  shards_->keep_owned();
}

std::vector<OwnedPiece> UnitZeroEngine::owned_pieces() const {
  std::vector<OwnedPiece> out;
  for (const UnitShardedAdamW::Piece& piece : optimizer_->owned_pieces())
    out.push_back({piece.param, piece.first, piece.numel});
  return out;
}

Tensor UnitZeroEngine::owned_params(const OwnedPiece& piece) const {
  for (const UnitShardedAdamW::Piece& mine : optimizer_->owned_pieces())
    if (mine.param == piece.param && mine.first == piece.first && mine.numel == piece.numel)
      return optimizer_->param(mine);
  MT_FAIL("owned_params: elements [", piece.first, ", ", piece.first + piece.numel, ") of param ", piece.param,
          " are not a piece this rank owns");
}

Tensor UnitZeroEngine::moment(AdamMoment which, const OwnedPiece& piece) const {
  return optimizer_->moment(which, piece.param, piece.first, piece.numel);
}

}  // namespace mt
