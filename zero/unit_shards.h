// ZeRO-2 and ZeRO-3 over a model's parameter units (models/param_use.h), driven by the model's
// ParamUseHooks. Each unit is cut into blocks (models/shard_blocks.h: the tied token embedding
// alone, the GEMM weights apart under bf16); each block is padded to a multiple of dp and this dp
// rank owns the r-th of its dp equal pieces. The owned pieces of all blocks sit in one fp32
// gradient buffer (and one fp32 parameter buffer: ZeRO-3's for every block, ZeRO-2's under bf16 for
// the compute_only blocks) of about stage_params/dp elements, where the optimizer's sharded state
// lives too (zero/unit_sharded_adamw.h). With bf16 compute the compute_only blocks' owned pieces
// also have a bf16 copy (ZeRO-3: one buffer, the owned compute shards; ZeRO-2: their place in the
// resident compute copy), written by the optimizer's step in its update pass and by keep_owned
// wherever the owned parameters are set otherwise.
//
// Gradients (stage 2 and 3): a unit's full gradient exists only from the first kernel that writes
// it (begin() of a use that writes_gradients) until its reduce-scatter, launched at that use's
// end(), has completed and been ADDED into the owned shard; the reduction of one unit overlaps the
// backward of the next (each end() waits for the previous unit's reduction, not its own). Every
// micro-batch reduces its own gradients, so the communication is micro_batches x (stage gradient
// bytes) x (dp-1)/dp per rank per step (ZeRO-1: once per step), plus one more reduce-scatter of the
// embedding unit where the head's tied embedding and the embedding layer share a rank.
// Bound on full gradient units alive at once: the unit being computed and the one being reduced,
// 2 (the LM head writes its tied embedding's gradient in the forward, ParamUse::ForwardWithGradient,
// and lnf's in the backward: one unit at a time).
//
// Parameters (stage 2): every block's compute copy stays resident, and the fp32 parameters of the
// blocks read in fp32, all-gathered in place after each step. With bf16 compute a compute_only block
// has no full fp32 parameters (its owned fp32 shard lives apart) and gathers its owned bf16 shard
// into its compute copy: 2 bytes an element instead of 4 and no cast. Outside steps materialize
// gathers their fp32 (checkpoints, local_parameters want the master), keep_owned drops it again.
//
// Parameters (stage 3): the full parameters of a unit are all-gathered from the owned shards before
// a use that reads them, kept while in use, and released after its end(). With bf16 compute a
// compute_only block gathers its owned bf16 shards straight into its bf16 copy (2 bytes an element,
// and no fp32 buffer: the model never reads it), the bits its fp32 gather cast would give as
// rounding is elementwise; the other blocks gather fp32 and cast it into their copy. Outside rounds
// materialize() gathers every block in fp32 (checkpoints, local_parameters want the master). The order of uses is learned in the first round of each kind
// (a training step, an evaluation) and from then on the next kPrefetchUnits units are prefetched,
// their all-gathers running on the communicator's engine while the current unit computes: a
// layer's two units (its attention and its MLP, models/gpt_sharding.h), so that a layer's gathers
// have about a layer's compute to hide behind, as with whole layers one ahead, while the gradients
// stay at half a layer. Bound: the unit in use plus the prefetched ones (the head uses lnf, then its
// tied embedding).
//
// The store is built in these blocks from the start (ParameterStore's blocks, GptOptions::
// store_blocks): each block's parameters, compute copy and gradients have buffers of their own,
// created without memory and acquired and released here, so the whole stage's parameters or
// gradients are never allocated at once (construction, initialization and checkpoints included:
// those work unit by unit through materialize(unit)/keep_owned(unit)).
// defines: store_blocks, UnitCut, make_unit_cut, gpt_unit_cut, UnitShardStats, UnitShards
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <utility>
#include <vector>

#include "comm/communicator.h"        // defines: Communicator, WorkPtr
#include "models/param_use.h"         // defines: ParamUnit, ParamUseHooks
#include "models/shard_blocks.h"      // defines: ShardBlock
#include "models/parameter_store.h"   // defines: ParameterStore
#include "runtime/context.h"          // defines: DeviceContext

namespace mt {

// What the ParameterStore must be built in for these blocks.
std::vector<StoreBlock> store_blocks(std::span<const ShardBlock> blocks);

// A stage's parameters cut for ZeRO-2/3 at one data-parallel size: computed once, before the
// model is built, and handed to both the model (GptOptions: its store is built in store_blocks(),
// its parameter units are these) and UnitShards, which take it as it is.
struct UnitCut {
  std::vector<ParamUnit> units;
  std::vector<ShardBlock> blocks;
  int dp = 1;
  std::vector<StoreBlock> store_blocks() const { return mt::store_blocks(blocks); }
};
UnitCut make_unit_cut(std::vector<ParamUnit> units, std::span<const std::int64_t> numels,
                      std::span<const char> alone, int dp, std::span<const char> compute_only = {});
// A Gpt stage's cut (specs: its store's, from gpt_param_shards): its units (gpt_param_units) and
// their blocks (models/shard_blocks.h gpt_shard_blocks).
UnitCut gpt_unit_cut(const std::vector<ParamSpec>& specs, int dp, bool bf16_gathers);

struct UnitShardStats {
  std::int64_t gathered_bytes = 0;  // bytes of the full blocks the all-gathers of steps and uses delivered
  int max_full_grad_units = 0;   // most units with a full gradient alive at once (since construction)
  int max_full_param_units = 0;  // stage 3: most units with full parameters resident at once
  int gathers = 0, prefetched = 0;  // stage 3 gathers in rounds, and how many were prefetches
  int reductions = 0;               // unit reduce-scatters launched
  double gather_wait_s = 0;         // host time begin() waited for gathers (prefetch hides the rest)
};

class UnitShards : public ParamUseHooks {
 public:

  // stage: 2 or 3. cut: at dp's size; store: built in cut.store_blocks() (Error otherwise); its
  // parameters start at zero: stage 2 takes every block's parameters for
  // good, stage 3 only the owned shards. dp: the data-parallel group; ctx, dp and store must
  // outlive this. prefetch: stage 3 prefetches the next kPrefetchUnits units (false: every gather
  // waits at begin).
  UnitShards(DeviceContext& ctx, Communicator& dp, ParameterStore& store, UnitCut cut, int stage,
             bool prefetch = true);
  UnitShards(const UnitShards&) = delete;
  UnitShards& operator=(const UnitShards&) = delete;

  void begin(int unit, ParamUse use) override;
  void end(int unit, ParamUse use) override;

  // A round is one executor run's worth of uses (a step, an evaluation); `kind` names its order
  // for prefetching (the same kind must use units in the same order). finish_round() completes
  // every reduction (the owned gradients then hold the round's sums added to what they held) and
  // releases every gathered unit.
  void start_round(int kind);
  void finish_round();
  void zero_owned_grads();

  // A unit's full parameters outside rounds (initialization, checkpoints, gathering), one unit at
  // a time. Stage 3: materialize(unit) makes them resident, all-gathered from the owned shards
  // (gather, collective over dp) or zeroed; keep_owned(unit) copies the owned shards back out of
  // them and releases them. Stage 2 keeps them resident anyway, but for the compute-gathering
  // blocks' (bf16), which it treats likewise (keep_owned also casts their whole compute copy). Without a unit:
  // every unit at once (the whole stage's parameters resident: for small tests). The full fp32
  // parameters of every block, and their compute copy, whatever the uses would gather; keep_owned
  // also rounds the owned shards into the owned bf16 shards.
  void materialize(int unit, bool gather);
  void keep_owned(int unit);
  void materialize(bool gather);
  void keep_owned();
  // Stage 2, after the optimizer updated the owned shards: all-gathers every block in place (a
  // compute-gathering block its bf16 copy). Stage 3: nothing (the next use gathers).
  void gather_after_step();

  int stage() const { return stage_; }
  const std::vector<ShardBlock>& blocks() const { return blocks_; }
  const std::vector<ParamUnit>& units() const { return units_; }
  std::int64_t shard_numel(int block) const;                  // padded / dp
  std::int64_t owned_begin(int block) const;                  // first owned element of the block
  Tensor owned_params(int block) const;                       // fp32 [shard_numel]
  Tensor owned_grads(int block) const;                        // fp32 [shard_numel]
  // Stage 2 or 3 with bf16 compute, a compute_only block: a use (3) or the step's end (2) gathers
  // its owned bf16 shard (the owned parameters rounded) straight into the compute copy, no fp32.
  // Else the fp32 shard, then a cast. gathers_compute_copy(unit): one of its blocks does.
  bool gathers_compute(int block) const;
  bool gathers_compute_copy(int unit) const;
  Tensor owned_compute(int block) const;                      // bf16 [shard_numel]; gathers_compute only
  std::int64_t owned_numel() const { return owned_numel_; }   // all blocks' shards
  bool params_resident(int unit) const;                       // full params held: gathered or being gathered
  const UnitShardStats& stats() const { return stats_; }

 private:
  struct Reduction {
    int unit = 0;
    std::vector<WorkPtr> works;
    std::vector<Tensor> pieces;  // per block: where its reduced piece lands
  };
  void launch_reduction(int unit);
  void complete_oldest_reduction();
  void launch_gather(int unit, bool fp32);
  void materialize_compute_gathered(int unit, bool gather);
  void keep_owned_compute_gathered(int unit);
  void wait_gather(int unit);
  void release_params(int unit);
  void count_resident();

  DeviceContext* ctx_;
  Communicator* dp_;
  std::vector<ParamUnit> units_;
  int stage_;
  bool prefetch_;
  bool bf16_;
  std::vector<ShardBlock> blocks_;
  std::vector<std::vector<int>> unit_blocks_;
  std::int64_t owned_numel_ = 0;
  std::vector<Tensor> full_params_, full_compute_, full_grads_;  // per block, padded
  Tensor owned_params_, owned_grads_;
  Tensor owned_compute_;                     // stage 3: the gathers_compute blocks' owned bf16 shards
  std::vector<std::int64_t> param_offset_;    // per block: its shard's in owned_params_ (-1: in full_params_)
  std::vector<std::int64_t> compute_offset_;  // per block: its shard's in owned_compute_ (-1: none or in full_compute_)

  // Per unit.
  std::vector<char> grads_live_, reducing_, gathered_;
  // Stage 3: its gather (pending or done) brings every block's fp32 parameters. Stage 2: its
  // compute-gathering blocks' fp32 parameters are resident (materialized).
  std::vector<char> fp32_;
  std::vector<int> active_reads_;
  std::vector<std::vector<WorkPtr>> gathers_;  // pending all-gathers (empty when none)
  std::deque<Reduction> reductions_;

  // Prefetch order per round kind.
  std::vector<std::vector<int>> traces_;
  int kind_ = -1;
  std::size_t position_ = 0;
  bool recording_ = false, following_ = false;
  std::vector<int> prefetched_;  // the next units in the learned order, gathered ahead
  UnitShardStats stats_;
};

}  // namespace mt
