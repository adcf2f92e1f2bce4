// Memory per device of one layout, counted the way meshtrain allocates it: fp32 master
// parameters and gradients in one flat buffer each (a bf16 copy of the parameters with bf16
// compute), AdamW's two fp32 moments (sharded over dp with ZeRO-1), and one activation slot per
// (micro-batch, chunk) the schedule holds at once (models/gpt.cpp's Slot: no recomputation, the
// attention probabilities kept in fp32), plus the scratch buffers every chunk shares.
// defines: MemoryBreakdown, layer_bytes, slot_bytes, logits_bytes, estimate_memory, describe
#pragma once

#include <string>
#include <vector>

#include "perf/cluster.h"
#include "perf/model_shape.h"

namespace mt::perf {

struct MemoryBreakdown {
  int stage = 0;           // the pipeline stage this is for (the one needing the most)
  double parameters = 0;   // fp32 master, plus the bf16 copy the GEMMs read with bf16 compute
  double gradients = 0;    // fp32
  double optimizer = 0;    // AdamW m and v in fp32 (ZeRO-1: this rank's 1/dp of them)
  double activations = 0;  // what forward keeps for backward, in_flight slots of this stage's chunks
  int in_flight = 0;       // peak (micro-batch, chunk) slots held at once (parallel/schedule.h)
  double logits = 0;       // [b T, Vp/tp] logits of the head chunk's slots in flight
  double workspace = 0;    // scratch shared by every chunk
  double reserved = 0;     // the cluster's memory_reserved
  double total() const { return parameters + gradients + optimizer + activations + logits + workspace + reserved; }
};

// What one layer keeps for backward for one micro-batch.
double layer_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout);
// One slot's bytes (models/gpt.cpp Gpt::acquire) for a chunk of `layers` layers, without the logits.
double slot_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout, int layers, bool head);
double logits_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout);

// The stage needing the most memory. chunk_layers: per global chunk (perf/model_shape.h);
// peak_in_flight: per stage (parallel/schedule.h).
MemoryBreakdown estimate_memory(const ModelShape& model, const TrainingShape& training, const Layout& layout,
                                const Cluster& cluster, const std::vector<int>& chunk_layers,
                                const std::vector<int>& peak_in_flight);

// "61.2 GiB = params 5.1 + grads 5.1 + AdamW 1.3 + activations 44.0 (16 micro-batches in flight) + ..."
std::string describe(const MemoryBreakdown& memory);

}  // namespace mt::perf
