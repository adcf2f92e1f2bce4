// The training loop for any dp x tp x cp x pp layout (one rank included): each pipeline of tp x pp
// ranks runs its share of the global batch through the schedule, the cp ranks of a dp rank each
// holding their chunks of every sequence (parallel/causal_split.h; ring attention between them); a
// ZeroEngine (zero/zero_engine.h, whatever the ZeRO stage) reduces the gradients over the ranks that
// hold the same weights (dp x cp) overlapped with the backward, sums the tied embedding's two copies between first and last stage, gives the sum of
// squares of what this rank owns for the global norm (each parameter counted once over the world)
// and steps AdamW. The same options give the same model on every layout: the batch sizes are
// global (the plan's), each dp rank reads global_batch/dp sequences per step.
// defines: ParallelTrainer
#pragma once

#include <filesystem>
#include <functional>

#include <memory>
#include <optional>
#include <vector>

#include "data/loader.h"
#include "models/gpt.h"
#include "parallel/groups.h"
#include "parallel/layout_plan.h"
#include "parallel/pipeline_executor.h"
#include "parallel/schedule.h"
#include "zero/zero_engine.h"
#include "train/metrics.h"
#include "train/step_batch.h"
#include "train/train_settings.h"

namespace mt {

class ParallelTrainer {
 public:
  // Collective over world. The model is created here (initialize with init() or load_weights()
  // before the first step), holding the part `plan` gives this rank; `groups` are the plan's
  // mesh's. `val` may be null. The batch sizes are the plan's.
  ParallelTrainer(DeviceContext& ctx, Communicator& world, ParallelGroups& groups, const GptConfig& config,
                  DType compute, data::DataLoader& train, data::DataLoader* val, TrainSettings settings,
                  const LayoutPlan& plan);
  ~ParallelTrainer();

  void init(std::uint64_t seed);
  // --init-weights (models/gpt_weights.h load_init_weights): this rank's shards from the file, with
  // every parameter resident meanwhile (ZeRO-3 and ZeRO-2's bf16 GEMM weights hold only owned
  // shards between steps: the stage's fp32 parameters for the load's duration).
  void load_weights(const std::filesystem::path& path);
  // One optimizer step; collective. Every rank returns the same loss, norm and validation loss.
  StepRecord step();
  double evaluate();  // collective; the same validation sequences as the tests' single-rank Trainer (train/tests/trainer.h)
  // The full model's parameters in gpt_parameter_specs order, on every rank (collective).
  std::vector<float> gather_parameters();

  // Where a resumed run stands: optimizer steps done and training sequences consumed (the data
  // stream continues there, whatever the global batch was before).
  void restore_progress(int steps_done, std::int64_t sequences_done);
  std::int64_t sequences_done() const { return sequences_done_; }
  // A resumed run's learning-rate schedule (train/checkpointing.h: resumed_lr_schedule); validated.
  void set_lr_schedule(const LrSchedule& schedule);

  Gpt& model() { return *model_; }
  const Gpt& model() const { return *model_; }
  DeviceContext& context() { return ctx_; }
  Communicator& world() { return world_; }
  const ParallelGroups& groups() const { return groups_; }
  const TrainSettings& settings() const { return settings_; }
  const data::DataLoader& train_data() const { return train_; }
  // mt::is_primary_copy (models/gpt_sharding.h) of this rank's shard of local param `param`.
  bool is_primary_copy(std::size_t param) const;
  // Gradient reduction and the optimizer, whatever the ZeRO stage.
  ZeroEngine& zero() { return *zero_; }
  const ZeroEngine& zero() const { return *zero_; }
  // This rank's parameters in its store's flat order (padding zero), whatever the ZeRO stage
  // (3 gathers them: collective over dp).
  std::vector<float> local_parameters();
  // Writes this rank's parameters (store flat order, as local_parameters) into the model: every
  // replica and, with ZeRO 3, the owned shards.
  void set_local_parameters(const std::vector<float>& values);
  const LayoutPlan& plan() const { return plan_; }
  int micro_batches() const { return plan_.micro_batches(); }
  int steps_done() const { return steps_done_; }
  const ExecutorStats& last_pipeline_stats() const { return pipeline_stats_; }
  std::string describe_rank() const;  // this rank's coordinates, layers and shard sizes


 private:
  // Adds its pipeline's loss to the world's sum: tp rank 0 of the stage holding the head.
  bool reports_loss() const;

  DeviceContext& ctx_;
  Communicator& world_;
  ParallelGroups& groups_;
  TrainSettings settings_;
  LayoutPlan plan_;
  Schedule train_schedule_, eval_schedule_;
  data::DataLoader& train_;
  data::DataLoader* val_;
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<ZeroEngine> zero_;  // after the model: it unhooks itself from the model first
  std::unique_ptr<PipelineExecutor> executor_;
  int rows_ = 1;  // positions of each sequence this rank holds: seq_len / cp
  bool reads_data_ = false;  // holds the embedding (inputs) or the head (targets): middle stages read none
  std::optional<StepBatch> batch_;  // the step's token ids (a rank that reads data)
  // On the device, read once per step: [the owned gradients' sum of squares, the loss sum this rank
  // reports, the loss sum of a head that reports none (tp ranks > 0), never read].
  Tensor step_sums_;
  Tensor eval_sum_;  // evaluation's loss sum, [1]
  ExecutorStats pipeline_stats_;
  int steps_done_ = 0;
  std::int64_t sequences_done_ = 0;
  TensorParallelStats tp_stats_;  // what the tensor-parallel collectives cost (TensorParallel adds to it)
};

}  // namespace mt
