// Every layout meshtrain could run a model on a cluster with, predicted and ranked: dp x tp x pp
// = the cluster's devices, tp dividing the heads (whole heads per rank) and at most a node unless
// allowed, pp at most the layers, the schedules 1F1B, GPipe, interleaved (v in {2, 4}), zb-h1 and
// zb-v (v = 2) where the layers divide, micro-batches dividing
// each pipeline's share of the batch, ZeRO 0 or 1. Layouts meshtrain would refuse are left out;
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
