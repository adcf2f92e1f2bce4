// Every layout meshtrain could run a model on a cluster with, predicted and ranked: dp x tp x cp x pp
// = the cluster's devices, tp dividing the heads (whole heads per rank) and at most a node unless
// allowed, cp as context_parallel_sizes allows for long sequences, pp at most the layers, the schedules 1F1B, GPipe, interleaved (v in {2, 4}), zb-h1 and
// zb-v (v = 2) where the layers divide, micro-batches dividing
// each pipeline's share of the batch, ZeRO 0 or 1 (with memory_options also 2 and 3, recomputation and
// sequence parallelism). Layouts meshtrain would refuse are left out (the LayoutPlan's checks: each
// structure is planned once, its memory options varied with LayoutPlan::with_memory_options);
// those that do not fit in memory are counted, with the reason.
// defines: kMinContextParallelRows, context_parallel_sizes, SearchOptions, SearchResult, search_layouts
#pragma once

#include <optional>
#include <vector>

#include "perf/cost_model.h"

namespace mt::perf {

// Context parallelism is tried only where each cp rank keeps at least this many rows of a sequence.
// Its ring passes a kv block per step whose bytes grow with a rank's rows R while the block attention
// that hides it grows with R^2: for llama3-8b in bf16 on H100s the transfer outlasts the block's
// attention below about 2.5K rows across nodes (a few hundred over NVLink), and below 8K rows a
// sequence's activations fit on one device anyway (sequences up to 8192 train without it), so cp
// there could only cost. It also keeps the search of short sequences what it was.
inline constexpr int kMinContextParallelRows = 8192;

// The cp sizes the search tries for sequences of seq_len on `devices` ranks (after tp): 1, and the
// powers of two dividing devices that cut the sequence into 2 x cp whole chunks
// (parallel/causal_split.h) of at least kMinContextParallelRows / 2 rows.
std::vector<int> context_parallel_sizes(int seq_len, int devices);

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
  // Of those rejected without context parallelism (cp 1), the one needing the least memory: what a
  // cp layout is compared with where no layout without it fits.
  std::optional<Prediction> smallest_rejected_without_cp;
};

SearchResult search_layouts(const ModelShape& model, const TrainingShape& training, const Cluster& cluster,
                            const SearchOptions& options = {});

}  // namespace mt::perf
