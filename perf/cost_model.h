// The performance model of one meshtrain training step: given a model, a training shape, a layout
// and a cluster, the memory each device needs and the time a step takes, split into what it is
// spent on. It follows what ParallelTrainer::step does (train/parallel_trainer.cpp):
//  - each stage runs its micro-batches through the schedule; a chunk's forward and backward are
//    GEMM FLOPs / achieved rate plus its tensor-parallel allreduces, which block (exposed);
//  - the pipeline's fill and drain come from simulating the schedule itself (parallel/schedule.h
//    simulate()) with the slowest stage's per-chunk costs, plus the point-to-point messages on
//    the path through every stage boundary; the zero-bubble schedules' B and W get the backward's
//    input-gradient and weight-gradient parts (cost_model.cpp StageTimes says which is which);
//  - data-parallel buckets (ring or tree allreduce, or reduce-scatter + allgather for ZeRO-1) run
//    under the last micro-batch's backward; what does not fit, and always the last bucket, is
//    exposed; the allgather runs under the optimizer likewise;
//  - the tied embedding's sum and broadcast between first and last stage (where they differ: not
//    zb-v, whose stage 0 holds both; llama's head is untied: none), the norm's allreduce, llama's
//    kv-head gradients summed over tp where tp does not divide the kv heads (replicated),
//    and the optimizer (memory bound: AdamW's 28 bytes per updated parameter, plus zeroing and
//    the norm's pass over the gradients);
//  - with bf16 compute, every chunk forward casts the stage's fp32 master into its bf16 copy;
//  - context parallelism (cp > 1): each rank computes a cp-th of the rows (GEMMs and attention fall
//    by cp); per layer the forward passes cp-1 kv blocks [B, T/cp, 2 kv_heads hs / tp] around the
//    ring, each transfer overlapped with one block's attention (a cp-th of the layer's): only what
//    exceeds it is exposed; the backward the same, each block travelling with its fp32 dK/dV
//    accumulator, under the block's attention backward; the gradients reduce over dp x cp.
// On CPUs whose ranks share cores, a node cannot do more than cores_per_node ranks' work at once:
// the step is at least the node's busy time divided by its cores (waits yield the core).
// defines: TimeBreakdown, Prediction, predict_step, describe
#pragma once

#include <string>
#include <vector>

#include "perf/cluster.h"
#include "perf/memory_model.h"
#include "perf/model_shape.h"

namespace mt::perf {

// Seconds per optimizer step; the parts add up to the step.
struct TimeBreakdown {
  double compute = 0;         // GEMMs (and bf16 casts) of all micro-batches on the slowest stage
  double tp_comm = 0;         // tensor-parallel allreduces, all exposed
  double cp_comm = 0;         // ring attention's kv (and dK/dV) transfers block attention does not hide
  double pp_comm = 0;         // point-to-point messages on the critical path
  double bubble = 0;          // pipeline fill and drain
  double zero_gather = 0;     // ZeRO-3 parameter all-gathers the previous unit's compute does not hide
  double dp_exposed = 0;      // data-parallel reduction (and ZeRO-1 allgather) not hidden
  double embedding_sync = 0;  // tied embedding: allreduce and broadcast between first and last stage
  double norm = 0;            // the world allreduce of the gradient norm and loss
  double optimizer = 0;       // AdamW update, gradient zeroing and norm pass
  double core_wait = 0;       // shared cores: waiting for a core (ranks > cores)
  double dp_total = 0;        // all data-parallel communication, hidden or not (not part of the sum)
  double cp_total = 0;        // all of the ring's transfers, hidden or not (not part of the sum)
  double sum() const {
    return compute + tp_comm + cp_comm + pp_comm + bubble + zero_gather + dp_exposed + embedding_sync + norm + optimizer + core_wait;
  }
};

struct Prediction {
  Layout layout;
  int micro_batches = 0;           // M per pipeline
  std::vector<int> chunk_layers;   // per global chunk
  MemoryBreakdown memory;
  double memory_capacity = 0;      // bytes per device
  bool fits = true;
  TimeBreakdown time;
  double step_s = 0;
  double tokens_per_s = 0;
  double model_flops_per_step = 0;  // GptConfig::training_flops_per_token x tokens
  double mfu = 0;                   // model FLOPs / step / (devices x peak)
  bool tp_crosses_nodes = false, dp_crosses_nodes = false, pp_crosses_nodes = false, cp_crosses_nodes = false;
};

// The layout becomes a LayoutPlan (parallel/layout_plan.h): its checks, micro-batches, stage
// layers, partitions, schedules and memory options are the trainer's. Throws Error when the layout
// is invalid for the model and batch (the plan's UsageError), or when it needs more devices than the
// cluster has. A layout that does not fit in memory is still predicted, with fits = false.
Prediction predict_step(const ModelShape& model, const TrainingShape& training, const Layout& layout,
                        const Cluster& cluster);
// The same for a plan already made (its mesh order as given; the one above uses tp-dp-pp), such as
// one of LayoutPlan::with_memory_options.
Prediction predict_step(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                        const Cluster& cluster);

// Several lines: the layout, the time breakdown and the memory breakdown.
std::string describe(const Prediction& prediction);

}  // namespace mt::perf
