// Gradient reduction over the data-parallel group and the AdamW step of what this rank owns, for
// every ZeRO stage behind one interface: the trainer holds one ZeroEngine and never asks the stage.
//   ZeRO 0/1 (zero/flat_zero_engine.h): one flat gradient buffer reduced in buckets as the backward
//            completes them (GradReducer); DistributedAdamW steps every element (0) or this rank's
//            blocks, then all-gathers them (1).
//   ZeRO 2/3 (zero/unit_zero_engine.h): per parameter unit, reduce-scattered per micro-batch from
//            the model's parameter-use hooks into owned shards (UnitShards); UnitShardedAdamW steps
//            the shards; 2 gathers the full parameters after the step, 3 before each use.
// The tied token embedding (gpt2) has a copy on the first and on the last pipeline stage: the
// engine sums their gradients before the data-parallel reduction takes them, and after the update
// the last stage's copy takes the first's bits.
// defines: OwnedPiece, ZeroOptions, ZeroEngine, zero_unit_cut, make_zero_engine
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"  // defines: Communicator
#include "models/gpt.h"         // defines: Gpt
#include "optim/adamw.h"        // defines: AdamWConfig, AdamMoment
#include "zero/unit_shards.h"   // defines: UnitCut

namespace mt {

// Elements [first, first + numel) of store parameter `param`.
struct OwnedPiece {
  int param = 0;
  std::int64_t first = 0, numel = 0;
};

struct ZeroOptions {
  int stage = 0;             // --zero
  bool overlap = true;       // --overlap: reductions and gathers run behind compute
  double bucket_mb = 25.0;   // --bucket-mb (ZeRO 0/1)
  AdamWConfig adamw;
};

class ZeroEngine {
 public:
  // Told a store parameter's index when the backward the schedule marks as its chunk's last has
  // queued its final gradient.
  using GradReady = Gpt::GradReady;
  virtual ~ZeroEngine() = default;

  // A training step's gradients. begin_step() zeroes them and opens the reduction; it returns what
  // the runner calls when a chunk's last backward completes a parameter (empty where the model's
  // parameter-use hooks drive the reduction). finish_gradients() completes the reduction, the tied
  // embedding's included, and writes the weighted sum of squares of the gradients this rank owns
  // into norm_sq (fp32 [1] on the device, no host wait): allreduced over the world, each element
  // counts once.
  virtual GradReady begin_step() = 0;
  virtual void finish_gradients(Tensor& norm_sq) = 0;
  // The AdamW step of what this rank owns (grad_scale: the clip scale); after it every copy of
  // every parameter holds the update where the next forward reads it. Returns the host seconds it
  // waited for its communication.
  virtual double update(float lr, float grad_scale) = 0;
  // Bracket an evaluation's forwards (ZeRO-3 gathers in a round of its own).
  virtual void begin_evaluation() {}
  virtual void end_evaluation() {}

  // Outside steps (initialization, checkpoints): `use` each parameter unit in turn with its full
  // parameters resident (gathered from the owned shards with `gather`, else to be overwritten),
  // then keep what use wrote into them. Collective over dp with ZeRO-3, and ZeRO-1/2 under bf16
  // (their GEMM weights keep only their owned fp32 shard current).
  virtual void for_each_resident_unit(bool gather, const std::function<void(int unit)>& use) = 0;
  // The same with every unit resident at once, for `use` (loading a file in its own order).
  virtual void with_every_unit_resident(bool gather, const std::function<void()>& use) = 0;
  // Whether update() writes the store's bf16 copy itself (the model then need not cast it).
  virtual bool keeps_compute_copy() const = 0;

  // Checkpoints. owned_pieces(): what this rank saves, each element owned by one dp rank.
  // held_pieces(): whose AdamW moments this rank holds (ZeRO 0: every parameter whole).
  virtual std::vector<OwnedPiece> owned_pieces() const = 0;
  virtual std::vector<OwnedPiece> held_pieces() const = 0;
  virtual Tensor owned_params(const OwnedPiece& piece) const = 0;  // fp32 view of an owned piece
  virtual Tensor moment(AdamMoment which, const OwnedPiece& piece) const = 0;  // view of a held piece
  virtual std::int64_t step_count() const = 0;
  virtual void set_step_count(std::int64_t steps) = 0;
  virtual std::int64_t state_bytes() const = 0;  // m and v held by this rank
};

// The cut a stage's store must be built in, known before the model: ZeRO 2/3's units at dp
// (zero/unit_shards.h); nothing for 0/1 (one flat store). specs: the stage's, gpt_param_shards';
// compute: the model's compute dtype (ZeRO-2/3 in bf16 keep the GEMM weights in blocks of their own,
// gathered in bf16).
std::optional<UnitCut> zero_unit_cut(int stage, const std::vector<ParamSpec>& specs, int dp, DType compute);
// The regions of a flat store (GptOptions::flat_regions): ZeRO-1 in bf16 over dp > 1 puts the
// parameters read in fp32 in region 0 and the GEMM weights in region 1, so that its buckets of
// GEMM weights gather their bf16 copy alone (parallel/zero_optimizer.h); empty otherwise (one
// region in the specs' order). Region 0 comes first, reduced last: it holds the embeddings, whose
// gradients complete last anyway, and the layers' norms and biases, a small part of a layer.
std::vector<int> zero_flat_regions(int stage, const std::vector<ParamSpec>& specs, int dp, DType compute);

// The engine for options.stage over `model` (built with `cut` from zero_unit_cut; its store's
// gradients belong to the engine from now on). dp: the data-parallel group; tied_stages: the
// group of the tied embedding's two copies (first and last stage), null when it has one copy.
// ctx, the groups and the model must outlive the engine.
std::unique_ptr<ZeroEngine> make_zero_engine(DeviceContext& ctx, Communicator& dp, Communicator* tied_stages,
                                             Gpt& model, std::optional<UnitCut> cut, const ZeroOptions& options);

}  // namespace mt
