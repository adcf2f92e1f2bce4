#include "zero/unit_shards.h"

#include <algorithm>
#include <chrono>

#include "models/gpt.h"
#include "runtime/error.h"
#include "runtime/kernels.h"

namespace mt {

std::vector<ShardBlock> make_shard_blocks(std::span<const ParamUnit> units, std::span<const std::int64_t> numels,
                                          std::span<const char> alone, int dp, std::span<const char> compute_only) {
  MT_REQUIRE(dp >= 1, "ZeRO units: the data-parallel size must be >= 1, got ", dp);
  MT_REQUIRE(alone.size() == numels.size(), "ZeRO units: ", alone.size(), " 'alone' flags for ", numels.size(),
             " parameters");
  MT_REQUIRE(compute_only.empty() || compute_only.size() == numels.size(), "ZeRO units: ", compute_only.size(),
             " 'compute only' flags for ", numels.size(), " parameters");
  const auto only = [&](std::size_t p) { return !compute_only.empty() && compute_only[p] != 0; };
  std::vector<ShardBlock> blocks;
  std::size_t next = 0;
  std::int64_t shard_offset = 0;
  const auto add = [&](int unit, std::size_t first, std::size_t count) {
    ShardBlock b;
    b.unit = unit;
    b.first = first;
    b.count = count;
    for (std::size_t p = first; p < first + count; ++p) b.numel += numels[p];
    b.padded = (b.numel + dp - 1) / dp * dp;
    b.shard_offset = shard_offset;
    b.compute_only = only(first);
    shard_offset += b.padded / dp;
    blocks.push_back(b);
  };
  for (std::size_t u = 0; u < units.size(); ++u) {
    const ParamUnit& unit = units[u];
    MT_REQUIRE(unit.count >= 1 && unit.first == next && unit.first + unit.count <= numels.size(), "ZeRO units: unit '",
               unit.name, "' [", unit.first, ", ", unit.first + unit.count, ") does not follow the previous one at ",
               next, " within ", numels.size(), " parameters");
    std::size_t run = unit.first;
    for (std::size_t p = unit.first; p < unit.first + unit.count; ++p) {
      if (alone[p]) {
        if (run < p) add(static_cast<int>(u), run, p - run);
        add(static_cast<int>(u), p, 1);
        run = p + 1;
      } else if (run < p && only(p) != only(run)) {
        add(static_cast<int>(u), run, p - run);  // homogeneous blocks: one kind of gather each
        run = p;
      }
    }
    if (run < unit.first + unit.count) add(static_cast<int>(u), run, unit.first + unit.count - run);
    next = unit.first + unit.count;
  }
  MT_REQUIRE(next == numels.size(), "ZeRO units cover ", next, " of ", numels.size(), " parameters");
  return blocks;
}

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
  std::vector<std::int64_t> numels;
  std::vector<char> alone, compute_only;
  for (const ParamSpec& spec : specs) {
    numels.push_back(spec.numel());
    alone.push_back(spec.kind == ParamKind::TokenEmbedding ? 1 : 0);
    if (bf16_gathers) compute_only.push_back(read_only_as_compute_copy(spec.kind) ? 1 : 0);
  }
  return make_unit_cut(gpt_param_units(specs), numels, alone, dp, compute_only);
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
  if (stage_ == 3) owned_params_ = Tensor::zeros({owned_numel_}, DType::F32, ctx);
  // The owned compute shards: zeros, so the padding gathers as zeros; each block's are written with
  // its owned parameters (keep_owned, the optimizer's step).
  std::int64_t compute_numel = 0;
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    compute_offset_.push_back(gathers_compute(static_cast<int>(b)) ? compute_numel : -1);
    if (compute_offset_.back() >= 0) compute_numel += blocks_[b].padded / dp.size();
  }
  if (compute_numel > 0) owned_compute_ = Tensor::zeros({compute_numel}, store.compute_dtype(), ctx);
  if (stage_ == 2) {
    // Every rank holds every block's parameters (the padding stays zero); the bf16 copy is cast
    // from them before each forward.
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      full_params_[b].acquire_memory();
      kernels::fill(ctx, full_params_[b], 0.0);
      full_compute_[b].acquire_memory();
      if (bf16_) kernels::fill(ctx, full_compute_[b], 0.0);
    }
    store.set_refresh_blocks(true);
  }
  const std::size_t n = units_.size();
  grads_live_.assign(n, 0);
  reducing_.assign(n, 0);
  gathered_.assign(n, stage_ == 2 ? 1 : 0);  // stage 3: nothing resident until a use gathers it
  fp32_.assign(n, stage_ == 2 ? 1 : 0);
  active_reads_.assign(n, 0);
  gathers_.resize(n);
}

std::int64_t UnitShards::shard_numel(int block) const {
  return blocks_.at(static_cast<std::size_t>(block)).padded / dp_->size();
}

std::int64_t UnitShards::owned_begin(int block) const { return dp_->rank() * shard_numel(block); }

Tensor UnitShards::owned_params(int block) const {
  const ShardBlock& b = blocks_.at(static_cast<std::size_t>(block));
  if (stage_ == 2) return full_params_[static_cast<std::size_t>(block)].flat_slice(owned_begin(block), shard_numel(block));
  return owned_params_.flat_slice(b.shard_offset, shard_numel(block));
}

bool UnitShards::gathers_compute(int block) const {
  return stage_ == 3 && bf16_ && blocks_.at(static_cast<std::size_t>(block)).compute_only;
}

Tensor UnitShards::owned_compute(int block) const {
  MT_CHECK(gathers_compute(block), "block ", block, " has no owned compute shard (it gathers fp32)");
  return owned_compute_.flat_slice(compute_offset_[static_cast<std::size_t>(block)], shard_numel(block));
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
  if (stage_ != 3 || gathered_.at(u)) return;
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
  if (stage_ != 3 || !gathered_.at(u)) return;
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

void UnitShards::gather_after_step() {
  if (stage_ != 2 || dp_->size() == 1) return;
  std::vector<WorkPtr> works;
  for (std::size_t b = 0; b < blocks_.size(); ++b)
    works.push_back(dp_->allgather_async(owned_params(static_cast<int>(b)), full_params_[b]));  // in place
  for (const WorkPtr& work : works) work->wait_on(ctx_->stream());
}

}  // namespace mt
