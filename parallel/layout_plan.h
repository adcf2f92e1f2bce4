// The one value that says how a job's ranks split a model: built once from the layout the user
// asked for, the model's dimensions and the job's size, with every check (each with its one
// message, parallel/layout_check.h). The CLI, the trainer, the performance model, the memory
// estimate, the checkpoint code and convert all read it; none derives any of it again.
// defines: ModelDims, LayoutRequest, LayerRange, ModelPartition, LayoutPlan, plan_chunk_layers
#pragma once

#include <string>
#include <vector>

#include "parallel/chunk_placement.h"
#include "parallel/memory_options.h"
#include "parallel/mesh.h"
#include "parallel/schedule.h"
#include "parallel/stage_partition.h"

namespace mt {

// What a layout needs to know of a model: the widths tensor parallelism splits, and the relative
// cost of its parts for balancing pipeline stages. A model family provides it (models/gpt_config.h:
// layout_dims).
struct ModelDims {
  int layers = 1;
  int heads = 1;
  int mlp_width = 4;   // the MLP's hidden width (4 x channels for GPT-2)
  int vocab_rows = 1;  // the padded vocabulary
  StageCosts costs;    // forward cost of a layer, the embedding, the head
  bool tied_embedding = true;  // the LM head reads the token embedding (gpt2; llama's is its own)
};

// The layout as asked for (options, a checkpoint's manifest, a candidate of `meshtrain plan`).
struct LayoutRequest : MeshShape {   // dp 0: the ranks tp x pp leaves
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int virtual_stages = 1;      // model chunks per pipeline stage (interleaved: >= 2; zb-v: 2, resolved)
  std::vector<int> pp_layers;  // explicit layers per stage (--pp-layers); empty: balanced by cost
  // ZeRO stage over the dp group: 0 replicated; 1 AdamW state sharded; 2 also the gradients
  // (each parameter unit reduce-scattered after its backward, only the owned shard kept); 3 also the
  // parameters (each unit gathered before its use, freed after: zero/unit_shards.h).
  int zero = 0;
  Recompute recompute = Recompute::None;  // --recompute
  bool sequence_parallel = false;         // --sequence-parallel (tp > 1)
  int micro_batch = 1;         // sequences per forward pass; 0: the largest of 4, 2, 1 dividing global/dp
                               // into micro-batches enough for the schedule (schedule_runs)
  double bucket_mb = 25.0;     // gradient bucket size
  bool overlap = true;         // buckets and pipeline transfers overlap compute

  const MeshShape& mesh() const { return *this; }
  // "dp=2 tp=2 pp=2 v=1 zero=1 micro=4 schedule=1f1b" (" cp=2" after tp when cp > 1), then
  // " recompute=full" and " sp" when set
  std::string describe() const;
};

struct LayerRange {
  int begin = 0, end = 0;  // layers [begin, end)
  int size() const { return end - begin; }
};

// The part of the model one rank holds: its layers per chunk, and its tensor-parallel shard.
struct ModelPartition {
  int tp_size = 1, tp_rank = 0;
  std::vector<LayerRange> chunks;  // this rank's chunks, in ascending layer order
  bool embedding = true;           // holds global chunk 0 (the embeddings)
  bool head = true;                // holds the last global chunk (final norm, head, loss)
};

// Layers of each global chunk g = c * pp + s (v = 1: of each stage): given (--pp-layers), uniform
// over the interleaved schedule's chunks, or balanced by the model's costs. The one place the
// stage layers are computed.
std::vector<int> plan_chunk_layers(const LayoutRequest& request, const ModelDims& model);

class LayoutPlan {
 public:
  // Throws UsageError naming the options for the first problem (the same on every rank).
  LayoutPlan(LayoutRequest request, const ModelDims& model, int world_size, int global_batch);

  const LayoutRequest& layout() const { return layout_; }  // dp and micro_batch resolved
  const MeshShape& mesh() const { return layout_; }
  const ModelDims& model() const { return model_; }
  int global_batch() const { return global_batch_; }
  int micro_batch() const { return layout_.micro_batch; }
  int micro_batches() const { return micro_batches_; }  // per pipeline and step: global / (dp x micro)
  const std::vector<int>& chunk_layers() const { return chunk_layers_; }
  // Built on each call (the performance model plans thousands of layouts and needs few schedules).
  Schedule train_schedule() const;
  // Forward only, one global batch at a time (validation).
  Schedule eval_schedule() const;
  ModelPartition partition(const MeshCoord& coord) const;
  // This plan with other memory options (they change no mesh, schedule, stage layers or micro-batch),
  // checked as the constructor checks them: throws the same UsageError. For trying many variants of
  // one structure without planning it again (`meshtrain plan --memory-options`).
  LayoutPlan with_memory_options(int zero, Recompute recompute, bool sequence_parallel) const;
  ChunkPlacement placement() const { return placement_of(layout_.schedule); }
  // The embedding and the head share the token embedding (ModelDims::tied_embedding) and sit on
  // different stages: their two copies of it are summed and kept equal over the embedding group.
  bool tied_across_stages() const;

 private:
  LayoutRequest layout_;
  ModelDims model_;
  int global_batch_ = 1;
  int micro_batches_ = 1;
  std::vector<int> chunk_layers_;
};

}  // namespace mt
