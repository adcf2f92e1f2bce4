#include "zero/flat_zero_engine.h"

#include <chrono>

#include "runtime/kernels.h"

namespace mt {
namespace {

ReducerOptions reducer_options(const ZeroOptions& options, const ParameterStore& store) {
  ReducerOptions ro;
  ro.bucket_bytes = static_cast<std::int64_t>(options.bucket_mb * 1024.0 * 1024.0);
  ro.shard = options.stage == 1;
  ro.overlap = options.overlap;
  // A store in regions (zero_flat_regions): no bucket mixes two.
  for (const std::int64_t start : store.region_starts())
    if (start > 0) ro.boundaries.push_back(start);
  return ro;
}

}  // namespace

FlatZeroEngine::FlatZeroEngine(DeviceContext& ctx, Communicator& dp, Communicator* tied_stages, Gpt& model,
                               std::vector<FlatParam> params, std::int64_t tied, const ZeroOptions& options)
    : ctx_(ctx), tied_stages_(tied_stages), model_(model), tied_(tied) {
  MT_CHECK(options.stage == 0 || options.stage == 1, "FlatZeroEngine is ZeRO 0 or 1, not ", options.stage);
  ParameterStore& store = model.parameters();
  reducer_ = std::make_unique<GradReducer>(ctx, dp, store.flat_grads(), std::move(params), reducer_options(options, store));
  // With bf16 compute the update writes the GEMMs' copy: the model need not cast it every step.
  Tensor compute = store.compute_dtype() == DType::F32 ? Tensor{} : store.flat_compute_params();
  optimizer_ = std::make_unique<DistributedAdamW>(ctx, dp, *reducer_, store.flat_params(), options.adamw,
                                                  std::move(compute));
}

ZeroEngine::GradReady FlatZeroEngine::begin_step() {
  model_.parameters().zero_grads(ctx_);
  reducer_->begin();
  // The tied embedding waits for the end of the run: its head and embedding parts may come from two
  // chunks whose last computations the schedule orders either way.
  return [&reducer = *reducer_, tied = tied_](std::size_t param) {
    if (static_cast<std::int64_t>(param) != tied) reducer.mark_ready(static_cast<int>(param));
  };
}

void FlatZeroEngine::finish_gradients(Tensor& norm_sq) {
  // The two copies of the tied embedding each hold part of its gradient: sum them, then let the
  // data-parallel reduction take the bucket that holds it.
  if (tied_ >= 0) {
    if (tied_stages_ != nullptr) tied_stages_->allreduce(model_.parameters().grad(static_cast<std::size_t>(tied_)));
    reducer_->mark_ready(static_cast<int>(tied_));
  }
  reducer_->finish();
  optimizer_->owned_grad_sum_of_squares(norm_sq);
}

double FlatZeroEngine::update(float lr, float grad_scale) {
  optimizer_->step(lr, grad_scale);
  double waited = optimizer_->last_gather_wait_seconds();
  if (tied_ >= 0 && tied_stages_ != nullptr) {
    // The two copies took the same update from gradients summed in other orders (each stage's dp
    // buckets are cut differently): with dp > 2 their last bits could part. The first stage's copy
    // is the one, so the last stage takes it.
    const auto start = std::chrono::steady_clock::now();
    const auto p = static_cast<std::size_t>(tied_);
    ParameterStore& store = model_.parameters();
    tied_stages_->broadcast(store.param(p), {0});
    if (store.compute_dtype() != DType::F32) {
      Tensor copy = store.compute_param(p);  // a handle to the store's bf16 copy
      kernels::cast(ctx_, store.param(p), copy);
    }
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return waited;
}

void FlatZeroEngine::for_each_resident_unit(bool gather, const std::function<void(int unit)>& use) {
  // Every parameter is resident on every rank: the units one after another.
  with_every_unit_resident(gather, [&] {
    for (std::size_t u = 0; u < model_.param_units().size(); ++u) use(static_cast<int>(u));
  });
}

void FlatZeroEngine::with_every_unit_resident(bool gather, const std::function<void()>& use) {
  // In bf16 ZeRO-1 the GEMM weights' master is current in the owned blocks alone until gathered.
  if (gather) optimizer_->gather_master();
  use();
  if (!gather) optimizer_->master_written();
}

std::vector<OwnedPiece> FlatZeroEngine::owned_pieces() const {
  const ParameterStore& store = model_.parameters();
  std::vector<OwnedPiece> out;
  for (const DistributedAdamW::Piece& piece : optimizer_->owned_pieces())
    out.push_back({piece.param, piece.offset - store.offset(static_cast<std::size_t>(piece.param)), piece.numel});
  return out;
}

std::vector<OwnedPiece> FlatZeroEngine::held_pieces() const {
  if (optimizer_->sharded()) return owned_pieces();
  const ParameterStore& store = model_.parameters();
  std::vector<OwnedPiece> out;
  for (std::size_t p = 0; p < store.size(); ++p) out.push_back({static_cast<int>(p), 0, store.spec(p).numel()});
  return out;
}

Tensor FlatZeroEngine::owned_params(const OwnedPiece& piece) const {
  return model_.parameters().param(static_cast<std::size_t>(piece.param)).flat_slice(piece.first, piece.numel);
}

Tensor FlatZeroEngine::moment(AdamMoment which, const OwnedPiece& piece) const {
  return optimizer_->moment(which, piece.param, piece.first, piece.numel);
}

}  // namespace mt
