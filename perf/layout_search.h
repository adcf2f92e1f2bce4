// Every layout meshtrain could run a model on a cluster with, predicted and ranked: dp x tp x pp
// = the cluster's devices, tp dividing the heads (whole heads per rank) and at most a node unless
// allowed, pp at most the layers, the schedules 1F1B, GPipe, interleaved (v in {2, 4}), zb-h1 and
// zb-v (v = 2) where the layers divide, micro-batches dividing
// each pipeline's share of the batch, ZeRO 0 or 1 (with memory_options also 2 and 3, recomputation and
// sequence parallelism). Layouts meshtrain would refuse are left out (the LayoutPlan's checks: each
// structure is planned once, its memory options varied with LayoutPlan::with_memory_options);
// those that do not fit in memory are counted, with the reason.
// defines: SearchOptions, SearchResult, search_layouts
#pragma once

#include <optional>
#include <vector>

#include "perf/cost_model.h"

namespace mt::perf {

struct SearchOptions {
  std::optional<int> micro_batch;  // fixed micro-batch; searched when empty
  bool allow_cross_node_tp = false;
  double bucket_mb = 25.0;
  bool overlap = true;
  // Every layout with this recomputation, and sequence parallelism where tp > 1 (layouts whose
  // schedule refuses it, zb-h1 and zb-v, are left out).
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;
  // Instead: try every memory option: recompute none, selective and full, sequence parallelism off
  // and on (tp > 1; not with zb-h1, zb-v), ZeRO 0-3 (1-3 with dp > 1). A variant that only costs time
  // over one of the same structure that already fits (more recomputation, ZeRO 2 or 3 over a lower
  // stage) is not predicted.
  bool memory_options = false;
};

struct SearchResult {
  std::vector<Prediction> plans;      // layouts that fit, fastest first
  int considered = 0;                 // valid layouts predicted
  int rejected_for_memory = 0;
  std::optional<Prediction> smallest_rejected;  // of those rejected, the one needing the least memory
};

SearchResult search_layouts(const ModelShape& model, const TrainingShape& training, const Cluster& cluster,
                            const SearchOptions& options = {});

}  // namespace mt::perf
