#include "zero/unit_shards.h"

#include <algorithm>
#include <chrono>

#include "models/gpt.h"
#include "runtime/error.h"
#include "runtime/kernels.h"

namespace mt {

std::vector<StoreBlock> store_blocks(std::span<const ShardBlock> blocks) {
  std::vector<StoreBlock> out;
  for (const ShardBlock& b : blocks) out.push_back({b.first, b.count, b.padded});
  return out;
}

UnitCut make_unit_cut(std::vector<ParamUnit> units, std::span<const std::int64_t> numels,
                      std::span<const char> alone, int dp, std::span<const char> compute_only) {
  std::vector<ShardBlock> blocks = make_shard_blocks(units, numels, alone, dp, compute_only);
  return {std::move(units), std::move(blocks), dp};
}

UnitCut gpt_unit_cut(const std::vector<ParamSpec>& specs, int dp, bool bf16_gathers) {
  return {gpt_param_units(specs), gpt_shard_blocks(specs, dp, bf16_gathers), dp};
}

UnitShards::UnitShards(DeviceContext& ctx, Communicator& dp, ParameterStore& store, UnitCut cut, int stage,
                       bool prefetch)
    : ctx_(&ctx), dp_(&dp), units_(std::move(cut.units)), stage_(stage), prefetch_(prefetch),
      bf16_(store.compute_dtype() != DType::F32), blocks_(std::move(cut.blocks)) {
  MT_CHECK(stage_ == 2 || stage_ == 3, "UnitShards is ZeRO-2 or 3, not ", stage_);
  MT_CHECK(cut.dp == dp.size() && store.blocks() == store_blocks(blocks_), "ZeRO-", stage_,
           ": the parameter store is not built in the units' blocks at dp ", dp.size(),
           " (GptOptions::store_blocks = UnitCut::store_blocks(), the cut made at dp ", cut.dp, ")");
  unit_blocks_.resize(units_.size());
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    const ShardBlock& block = blocks_[b];
    unit_blocks_[static_cast<std::size_t>(block.unit)].push_back(static_cast<int>(b));
    owned_numel_ += block.padded / dp.size();
    full_params_.push_back(store.block_params(b));
    full_compute_.push_back(store.block_compute(b));
    full_grads_.push_back(store.block_grads(b));
  }
  owned_grads_ = Tensor::zeros({owned_numel_}, DType::F32, ctx);
  // The owned fp32 shards of a buffer of their own: every block's with stage 3, the compute-gathering
  // blocks' with stage 2 (its other blocks' are slices of their resident parameters). The owned
  // compute shards of a buffer of their own: stage 3's compute-gathering blocks (stage 2's are
  // slices of the resident compute copy). Zeros, so the padding gathers as zeros; each block's are
  // written with its owned parameters (keep_owned, the optimizer's step).
  std::int64_t param_numel = 0, compute_numel = 0;
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    const bool compute = gathers_compute(static_cast<int>(b));
    const std::int64_t shard = blocks_[b].padded / dp.size();
    param_offset_.push_back(stage_ == 3 || compute ? param_numel : -1);
    param_numel += param_offset_.back() >= 0 ? shard : 0;
    compute_offset_.push_back(stage_ == 3 && compute ? compute_numel : -1);
    compute_numel += compute_offset_.back() >= 0 ? shard : 0;
  }
  if (param_numel > 0) owned_params_ = Tensor::zeros({param_numel}, DType::F32, ctx);
  if (compute_numel > 0) owned_compute_ = Tensor::zeros({compute_numel}, store.compute_dtype(), ctx);
  const std::size_t n = units_.size();
  fp32_.assign(n, 0);
  if (stage_ == 2) {
    // Every rank holds every block's compute copy and the fp32 parameters of the blocks read in
    // fp32 (the padding stays zero); their bf16 copy is cast from them before each forward. A
    // compute-gathering block's fp32 parameters exist only between materialize and keep_owned.
    std::vector<char> refresh;
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      const bool compute = gathers_compute(static_cast<int>(b));
      if (!compute) {
        full_params_[b].acquire_memory();
        kernels::fill(ctx, full_params_[b], 0.0);
      }
      full_compute_[b].acquire_memory();
      if (bf16_) kernels::fill(ctx, full_compute_[b], 0.0);
      refresh.push_back(compute ? 0 : 1);
    }
    store.set_refresh_blocks(std::move(refresh));
    for (std::size_t u = 0; u < n; ++u) fp32_[u] = gathers_compute_copy(static_cast<int>(u)) ? 0 : 1;
  }
  grads_live_.assign(n, 0);
  reducing_.assign(n, 0);
  gathered_.assign(n, stage_ == 2 ? 1 : 0);  // stage 3: nothing resident until a use gathers it
  active_reads_.assign(n, 0);
  gathers_.resize(n);
}

std::int64_t UnitShards::shard_numel(int block) const {
  return blocks_.at(static_cast<std::size_t>(block)).padded / dp_->size();
}

std::int64_t UnitShards::owned_begin(int block) const { return dp_->rank() * shard_numel(block); }

Tensor UnitShards::owned_params(int block) const {
  const auto b = static_cast<std::size_t>(block);
  if (param_offset_.at(b) < 0) return full_params_[b].flat_slice(owned_begin(block), shard_numel(block));
  return owned_params_.flat_slice(param_offset_[b], shard_numel(block));
}

bool UnitShards::gathers_compute(int block) const {
  return zero_gathers_compute_copy(stage_, bf16_) && blocks_.at(static_cast<std::size_t>(block)).compute_only;
}

bool UnitShards::gathers_compute_copy(int unit) const {
  const std::vector<int>& blocks = unit_blocks_.at(static_cast<std::size_t>(unit));
  return std::any_of(blocks.begin(), blocks.end(), [&](int b) { return gathers_compute(b); });
}

Tensor UnitShards::owned_compute(int block) const {
  MT_CHECK(gathers_compute(block), "block ", block, " has no owned compute shard (it gathers fp32)");
  const auto b = static_cast<std::size_t>(block);
  if (compute_offset_[b] < 0) return full_compute_[b].flat_slice(owned_begin(block), shard_numel(block));
  return owned_compute_.flat_slice(compute_offset_[b], shard_numel(block));
}

Tensor UnitShards::owned_grads(int block) const {
  return owned_grads_.flat_slice(blocks_.at(static_cast<std::size_t>(block)).shard_offset, shard_numel(block));
}

bool UnitShards::params_resident(int unit) const {
  const auto u = static_cast<std::size_t>(unit);
  return gathered_.at(u) != 0 || !gathers_.at(u).empty();
}

void UnitShards::zero_owned_grads() { kernels::fill(*ctx_, owned_grads_, 0.0); }

void UnitShards::count_resident() {
  int grads = 0, params = 0;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    grads += (grads_live_[u] || reducing_[u]) ? 1 : 0;
    params += (gathered_[u] || !gathers_[u].empty()) ? 1 : 0;
  }
  stats_.max_full_grad_units = std::max(stats_.max_full_grad_units, grads);
  if (stage_ == 3) stats_.max_full_param_units = std::max(stats_.max_full_param_units, params);
}

void UnitShards::begin(int unit, ParamUse use) {
  MT_CHECK(unit >= 0 && static_cast<std::size_t>(unit) < units_.size(), "unit ", unit, " of ", units_.size());
  const auto u = static_cast<std::size_t>(unit);
  if (writes_gradients(use)) {
    // Its previous reduction reads the buffer: finish it (and the older ones) first.
    while (reducing_[u]) complete_oldest_reduction();
    if (!grads_live_[u]) {
      for (int b : unit_blocks_[u]) {
        Tensor& g = full_grads_[static_cast<std::size_t>(b)];
        g.acquire_memory();
        kernels::fill(*ctx_, g, 0.0);
      }
      grads_live_[u] = 1;
    }
  }
  if (stage_ == 3 && reads_parameters(use)) {
    ++active_reads_[u];
    if (!gathered_[u]) {
      if (gathers_[u].empty()) launch_gather(unit, /*fp32=*/false);
      wait_gather(unit);
    }
    // The order of uses: recorded in the first round of a kind, followed (and prefetched) after.
    if (kind_ >= 0) {
      std::vector<int>& trace = traces_[static_cast<std::size_t>(kind_)];
      if (recording_) {
        trace.push_back(unit);
      } else if (following_ && (position_ >= trace.size() || trace[position_] != unit)) {
        following_ = false;  // another order than learned: no more prefetching this round
      }
      ++position_;
      prefetched_.clear();
      const std::size_t ahead = following_ && prefetch_ ? static_cast<std::size_t>(kPrefetchUnits) : 0;
      for (std::size_t k = position_; k < std::min(trace.size(), position_ + ahead); ++k) {
        const auto next = static_cast<std::size_t>(trace[k]);
        prefetched_.push_back(trace[k]);
        if (!gathered_[next] && gathers_[next].empty()) {
          launch_gather(trace[k], /*fp32=*/false);
          ++stats_.prefetched;
        }
      }
    }
  }
  count_resident();
}

void UnitShards::end(int unit, ParamUse use) {
  const auto u = static_cast<std::size_t>(unit);
  if (writes_gradients(use)) {
    MT_CHECK(grads_live_[u], "end of unit '", units_[u].name, "''s gradient use without its begin");
    launch_reduction(unit);
    while (reductions_.size() > 1) complete_oldest_reduction();  // the newest overlaps what follows
  }
  if (stage_ == 3 && reads_parameters(use)) {
    MT_CHECK(active_reads_[u] > 0, "end of unit '", units_[u].name, "''s use without its begin");
    if (--active_reads_[u] == 0 && std::find(prefetched_.begin(), prefetched_.end(), unit) == prefetched_.end())
      release_params(unit);
  }
}

void UnitShards::launch_reduction(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  Reduction r;
  r.unit = unit;
  for (int b : unit_blocks_[u]) {
    const Tensor& full = full_grads_[static_cast<std::size_t>(b)];
    if (dp_->size() == 1) {
      r.pieces.push_back(full);  // the reduction of one rank is the identity
      continue;
    }
    Tensor piece = Tensor::empty({shard_numel(b)}, DType::F32, *ctx_);
    r.works.push_back(dp_->reduce_scatter_async(full, piece, {ReduceOp::Sum}));
    r.pieces.push_back(std::move(piece));
  }
  grads_live_[u] = 0;
  reducing_[u] = 1;
  ++stats_.reductions;
  reductions_.push_back(std::move(r));
}

void UnitShards::complete_oldest_reduction() {
  MT_CHECK(!reductions_.empty(), "no reduction to complete");
  Reduction r = std::move(reductions_.front());
  reductions_.pop_front();
  for (const WorkPtr& work : r.works) work->wait_on(ctx_->stream());
  const std::vector<int>& blocks = unit_blocks_[static_cast<std::size_t>(r.unit)];
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    Tensor owned = owned_grads(blocks[i]);
    kernels::binary(*ctx_, BinaryOp::Add, owned, r.pieces[i], owned);
    full_grads_[static_cast<std::size_t>(blocks[i])].release_memory();
  }
  reducing_[static_cast<std::size_t>(r.unit)] = 0;
}

// A use's gather (fp32 false) brings a compute_only block's compute copy alone, from the owned
// compute shards (half the bytes in bf16): its rounding is elementwise, so the bits are those of the
// fp32 gather cast. Every other block, and every block with fp32, gathers the fp32 parameters.
void UnitShards::launch_gather(int unit, bool fp32) {
  const auto u = static_cast<std::size_t>(unit);
  for (int b : unit_blocks_[u]) {
    const bool compute = !fp32 && gathers_compute(b);
    const Tensor& full = compute ? full_compute_[static_cast<std::size_t>(b)] : full_params_[static_cast<std::size_t>(b)];
    const Tensor owned = compute ? owned_compute(b) : owned_params(b);
    full.acquire_memory();
    stats_.gathered_bytes += static_cast<std::int64_t>(full.nbytes());
    if (dp_->size() == 1) {
      Tensor out = full;
      out.copy_from(owned, ctx_->stream());
    } else {
      gathers_[u].push_back(dp_->allgather_async(owned, full));
    }
  }
  if (gathers_[u].empty()) gathers_[u].push_back(nullptr);  // launched, nothing to wait for
  fp32_[u] = fp32 ? 1 : 0;
  ++stats_.gathers;
}

void UnitShards::wait_gather(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  const auto start = std::chrono::steady_clock::now();
  for (const WorkPtr& work : gathers_[u]) {
    if (work) work->wait_on(ctx_->stream());
  }
  stats_.gather_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  gathers_[u].clear();
  if (bf16_) {
    for (int b : unit_blocks_[u]) {
      if (!fp32_[u] && gathers_compute(b)) continue;  // gathered as the compute copy itself
      Tensor& compute = full_compute_[static_cast<std::size_t>(b)];
      compute.acquire_memory();
      kernels::cast(*ctx_, full_params_[static_cast<std::size_t>(b)], compute);
    }
  }
  gathered_[u] = 1;
}

void UnitShards::release_params(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  for (int b : unit_blocks_[u]) {
    full_params_[static_cast<std::size_t>(b)].release_memory();
    full_compute_[static_cast<std::size_t>(b)].release_memory();
  }
  gathered_[u] = 0;
  fp32_[u] = 0;
}

void UnitShards::start_round(int kind) {
  MT_CHECK(kind >= 0, "round kind ", kind);
  if (traces_.size() <= static_cast<std::size_t>(kind)) traces_.resize(static_cast<std::size_t>(kind) + 1);
  kind_ = kind;
  position_ = 0;
  recording_ = traces_[static_cast<std::size_t>(kind)].empty();
  following_ = !recording_;
  prefetched_.clear();
}

void UnitShards::finish_round() {
  while (!reductions_.empty()) complete_oldest_reduction();
  for (std::size_t u = 0; u < units_.size(); ++u) {
    MT_CHECK(!grads_live_[u] && active_reads_[u] == 0, "unit '", units_[u].name, "' still in use at the end of a round");
    if (stage_ == 3) {
      if (!gathers_[u].empty()) wait_gather(static_cast<int>(u));  // a prefetch nobody used
      release_params(static_cast<int>(u));
    }
  }
  kind_ = -1;
  prefetched_.clear();
}

void UnitShards::materialize(int unit, bool gather) {
  const auto u = static_cast<std::size_t>(unit);
  if (stage_ == 2) {
    materialize_compute_gathered(unit, gather);
    return;
  }
  if (gathered_.at(u)) return;
  if (gather) {
    launch_gather(unit, /*fp32=*/true);
    wait_gather(unit);
    return;
  }
  for (int b : unit_blocks_[u]) {
    Tensor& full = full_params_[static_cast<std::size_t>(b)];
    full.acquire_memory();
    kernels::fill(*ctx_, full, 0.0);
  }
  gathered_[u] = 1;
  fp32_[u] = 1;
}

void UnitShards::keep_owned(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  if (stage_ == 2) {
    keep_owned_compute_gathered(unit);
    return;
  }
  if (!gathered_.at(u)) return;
  MT_CHECK(fp32_[u], "keep_owned of unit '", units_[u].name, "', gathered for a use without its fp32 parameters");
  for (int b : unit_blocks_[u]) {
    Tensor owned = owned_params(b);
    owned.copy_from(full_params_[static_cast<std::size_t>(b)].flat_slice(owned_begin(b), shard_numel(b)),
                    ctx_->stream());
    // The owned compute shard follows every change of the owned parameters (here, or AdamW's step).
    if (gathers_compute(b)) {
      Tensor compute = owned_compute(b);
      kernels::cast(*ctx_, owned, compute);
    }
  }
  release_params(unit);
}

void UnitShards::materialize(bool gather) {
  for (std::size_t u = 0; u < units_.size(); ++u) materialize(static_cast<int>(u), gather);
}

void UnitShards::keep_owned() {
  for (std::size_t u = 0; u < units_.size(); ++u) keep_owned(static_cast<int>(u));
}

// Stage 2, a unit's compute-gathering blocks (the others stay resident): their fp32 parameters,
// gathered from the owned shards or zeroed, until keep_owned.
void UnitShards::materialize_compute_gathered(int unit, bool gather) {
  const auto u = static_cast<std::size_t>(unit);
  if (fp32_.at(u)) return;
  std::vector<WorkPtr> works;
  for (const int b : unit_blocks_[u]) {
    if (!gathers_compute(b)) continue;
    Tensor& full = full_params_[static_cast<std::size_t>(b)];
    full.acquire_memory();
    if (!gather) {
      kernels::fill(*ctx_, full, 0.0);
    } else if (dp_->size() == 1) {
      full.copy_from(owned_params(b), ctx_->stream());
    } else {
      works.push_back(dp_->allgather_async(owned_params(b), full));
    }
  }
  for (const WorkPtr& work : works) work->wait_on(ctx_->stream());
  fp32_[u] = 1;
}

// Stage 2: the owned shards and the whole compute copy (every rank holds the same full parameters
// here) follow what was written into the fp32 parameters, which are released.
void UnitShards::keep_owned_compute_gathered(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  if (!gathers_compute_copy(unit) || !fp32_.at(u)) return;
  for (const int b : unit_blocks_[u]) {
    if (!gathers_compute(b)) continue;
    Tensor& full = full_params_[static_cast<std::size_t>(b)];
    Tensor owned = owned_params(b);
    owned.copy_from(full.flat_slice(owned_begin(b), shard_numel(b)), ctx_->stream());
    kernels::cast(*ctx_, full, full_compute_[static_cast<std::size_t>(b)]);
    full.release_memory();
  }
  fp32_[u] = 0;
}

void UnitShards::gather_after_step() {
  if (stage_ != 2 || dp_->size() == 1) return;
  std::vector<WorkPtr> works;
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    // In place: a compute-gathering block's owned bf16 shard (AdamW's step wrote it), else the fp32.
    const bool compute = gathers_compute(static_cast<int>(b));
    const Tensor& full = compute ? full_compute_[b] : full_params_[b];
    const Tensor owned = compute ? owned_compute(static_cast<int>(b)) : owned_params(static_cast<int>(b));
    stats_.gathered_bytes += static_cast<std::int64_t>(full.nbytes());
    works.push_back(dp_->allgather_async(owned, full));
  }
  for (const WorkPtr& work : works) work->wait_on(ctx_->stream());
}

}  // namespace mt
