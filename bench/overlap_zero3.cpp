#include "bench/overlap_zero3.h"

#include "bench/bench_env.h"
#include "models/gpt.h"
#include "models/gpt_sharding.h"
#include "zero/unit_shards.h"

namespace mt {
namespace {

// A whole GPT whose parameters are sharded over `dp` as `meshtrain train --zero 3` shards them.
class Zero3Model {
 public:
  Zero3Model(DeviceContext& ctx, Communicator& dp, const GptConfig& config, bool prefetch)
      : ctx_(ctx),
        cut_(gpt_unit_cut(gpt_parameter_specs(config), dp.size(), /*bf16_gathers=*/false)),
        model_(ctx, config, DType::F32, GptPartition::whole(config), TensorParallel{}, dp.size(),
               GptOptions{Recompute::None, false, cut_.store_blocks(), cut_.units}),
        shards_(ctx, dp, model_.parameters(), cut_, 3, prefetch) {
    model_.set_param_hooks(&shards_);
    for (int u = 0; u < units(); ++u) {  // one unit's full parameters at a time
      shards_.materialize(u, /*gather=*/false);
      model_.init_unit(1, u);
      shards_.keep_owned(u);
    }
  }
  Zero3Model(const Zero3Model&) = delete;
  Zero3Model& operator=(const Zero3Model&) = delete;
  ~Zero3Model() { model_.set_param_hooks(nullptr); }

  // Forward and backward: every unit gathered before each use, its gradients reduce-scattered.
  void step(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets, int B, int T) {
    shards_.zero_owned_grads();
    shards_.start_round(0);
    model_.forward(inputs, targets, B, T, 1.0f);
    model_.backward();
    shards_.finish_round();
    ctx_.synchronize();
  }
  const UnitShardStats& stats() const { return shards_.stats(); }
  int units() const { return static_cast<int>(model_.param_units().size()); }
  double gathered_bytes() const {
    double bytes = 0;
    for (const ShardBlock& b : shards_.blocks()) bytes += 4.0 * static_cast<double>(b.padded);
    return bytes;
  }

 private:
  DeviceContext& ctx_;
  UnitCut cut_;
  Gpt model_;
  UnitShards shards_;
};

GatherRun run_way(DeviceContext& ctx, Communicator& world, const GptConfig& config, bool prefetch,
                  std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets, int B, int T, int warmup,
                  int steps, Zero3Overlap& report) {
  Zero3Model model(ctx, world, config, prefetch);
  report.units = model.units();
  report.param_bytes = model.gathered_bytes();
  for (int s = 0; s < 1 + warmup; ++s) model.step(inputs, targets, B, T);  // the first learns the order
  const UnitShardStats before = model.stats();
  GatherRun run;
  for (int s = 0; s < steps; ++s) {
    const double t = time_after_barrier(world, [&] { model.step(inputs, targets, B, T); });
    run.step.add(slowest_rank_seconds(MPI_COMM_WORLD, t), steps);
  }
  const UnitShardStats& after = model.stats();
  run.gather_wait_s = slowest_rank_seconds(MPI_COMM_WORLD, (after.gather_wait_s - before.gather_wait_s) / steps);
  run.gathers = static_cast<double>(after.gathers - before.gathers) / steps;
  run.prefetched = static_cast<double>(after.prefetched - before.prefetched) / steps;
  return run;
}

}  // namespace

Zero3Overlap measure_zero3_overlap(DeviceContext& ctx, Communicator& world, const GptConfig& config,
                                   std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets, int B,
                                   int T, int warmup, int steps) {
  Zero3Overlap r;
  r.off = run_way(ctx, world, config, false, inputs, targets, B, T, warmup, steps, r);
  r.on = run_way(ctx, world, config, true, inputs, targets, B, T, warmup, steps, r);
  return r;
}

}  // namespace mt
