// Memory per device of one layout: an upper bound on the allocator's peak (runtime/allocator.h),
// counted the way meshtrain allocates, block by block: fp32 master parameters and gradients in one
// flat buffer each (plus a bf16 copy with bf16 compute), AdamW's two fp32 moments per parameter
// tensor (per owned piece with ZeRO-1), the activation slots each model chunk keeps (models/gpt_buffers.cpp
// pools a released slot for later micro-batches, so a chunk keeps the most it ever had in flight,
// in training or in validation), the scratch every chunk shares, and the buffers a step allocates
// and frees. Every block is rounded up to the allocator's 256 bytes; the step's temporary buffers
// count twice, the most a caching allocator (CUDA) hands out for a request.
// Both families (models/gpt_config.h) are counted: llama's layers keep their own widths (GQA's
// narrower qkv, SwiGLU's [gate | up] and output, RMSNorm's one statistic), and its last stage holds
// an untied lm_head (in lnf's parameter unit) instead of a copy of wte.
// The memory options (parallel/memory_options.h) change what is counted: recomputation keeps less per
// layer in a slot and rebuilds one layer's worth in the scratch; sequence parallelism splits the
// layernorm, residual and embedding-output rows over tp (the scratch gains gathered [N, C] buffers);
// ZeRO-2 keeps this rank's 1/dp of the gradients plus the full gradients of the parameter units
// (models/param_use.h) in flight (the one computed and the one reduced), ZeRO-3
// likewise for the parameters (the units in use and the one prefetched).
// Context parallelism (cp > 1) leaves each rank a cp-th of every sequence's rows: its activations and
// scratch are those of seq_len / cp rows, attention keeps only its log-sum-exp (ring attention), and
// the ring's kv blocks and dK/dV accumulators are scratch; the parameters, gradients and AdamW
// moments are replicated over cp, unless ZeRO, which shards them over dp x cp.
// With the zero-bubble schedules (backward split into B and W), each slot also keeps what B leaves
// for W (models/gpt_split_backward.cpp Gpt::backward_chunk_input), allocated at its first B and pooled with it;
// with recomputation the layers' part of it (and what W reads that the slot dropped) is a set held
// from B to W only, counted as many times per chunk as the schedule defers W's at once.
// defines: MemoryBreakdown, held_slots, layer_bytes, slot_bytes, weight_inputs_bytes,
//          recomputed_weight_inputs_bytes, layer_activation_bytes, recompute_scratch_bytes, logits_bytes,
//          head_chunks_on_cuda, head_chunks,
//          estimate_stage_memory, estimate_memory, estimate_sampling_memory, describe
#pragma once

#include <string>
#include <vector>

#include "parallel/schedule.h"
#include "perf/cluster.h"
#include "perf/model_shape.h"

namespace mt::perf {

struct MemoryBreakdown {
  int stage = 0;           // the pipeline stage this is for (the one needing the most)
  double parameters = 0;   // fp32 master, plus the bf16 copy the GEMMs read with bf16 compute
                           // (ZeRO-2: per unit block; ZeRO-3: the owned 1/dp and the gathered units)
  double gradients = 0;    // fp32 (ZeRO-2/3: the owned 1/dp, the units in flight in full, their reduced pieces)
  double optimizer = 0;    // AdamW m and v in fp32 (ZeRO-1 and above: this rank's 1/dp of them)
  double activations = 0;  // what forward keeps for backward, in the slots the stage's chunks keep
  double deferred_weight = 0;  // of activations: what B keeps in those slots for W (zero-bubble schedules)
  int in_flight = 0;       // slots the stage's chunks keep (held_slots), summed over its chunks
  double logits = 0;       // the head's logits: one row chunk [R, Vp/tp] in the scratch, whatever the
                           // slots (models/head_chunks.h); sampling: every position's [T, Vp]
  double workspace = 0;    // scratch shared by every chunk
  double transient = 0;    // what a step allocates and frees again (attention backward's score gradient, ...)
  double reserved = 0;     // the cluster's memory_reserved
  double total() const {
    return parameters + gradients + optimizer + activations + logits + workspace + transient + reserved;
  }
};

// Per stage and local chunk: how many activation slots the chunk keeps, as the pipeline executor
// (parallel/pipeline_executor.h) runs `train` and then, if given, `eval` (the forward-only
// schedule of validation). A slot lives from its forward (or the receive that fills its input)
// until its last use, W or the fused Backward (the forward in validation), and longer as the
// executor holds it: it posts each run of messages between two computations as one batch, the run
// after a computation already before that computation (MPI with overlap), so a RecvForward takes
// its slot then; it releases a slot only once the slot's sends completed (a completion it only
// tests, so a slot that sent to another stage is counted for one computation more; a send to the
// stage itself until the run with its receive copied it); and in validation, where no backward
// holds a stage back, a stage that sends keeps its done slots until `stages` of them are done, then
// waits for their sends.
std::vector<std::vector<int>> held_slots(const Schedule& train, const Schedule* eval);

// The same for the plan's schedules: training, then validation's forward-only one if asked.
std::vector<std::vector<int>> held_slots(const LayoutPlan& plan, bool validation);

// Everything one layer's forward produces that its backward reads, for one micro-batch, in 256-byte blocks.
double layer_activation_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout);
// Of that, what the layer keeps in its slot under layout.recompute: all of it (none), all but the
// attention probabilities and the MLP activation's output, GELU's or SwiGLU's (selective), nothing (full: the
// slot keeps the layer's input). The widths are the family's (perf/model_shape.h layer_widths).
double layer_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout);
// What recomputation rebuilds in the scratch, one layer at a time: the rest of layer_activation_bytes.
double recompute_scratch_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout);
// One slot's bytes (models/gpt_buffers.cpp Gpt::acquire) for a chunk of `layers` layers (the head keeps no logits).
double slot_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout, int layers,
                  bool embedding, bool head);
// The head's one chunk of logits [R, Vp/tp], R = head_chunk_rows of a micro-batch's rows with the
// budget of the device (cuda or the CPU).
double logits_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout, bool cuda);
// The LM head's chunk budget is the device's (models/head_chunks.h): CPU clusters rate their peak in
// fp32, GPUs in bf16. And the chunks a micro-batch's rows take.
bool head_chunks_on_cuda(const Cluster& cluster);
std::int64_t head_chunks(const ModelShape& model, const TrainingShape& training, const Layout& layout, bool cuda);
// What B keeps in one slot for W (the zero-bubble schedules): per layer 4 [N, C] + dqkv (gpt2
// [N, 3C/tp]) of the compute dtype; the head and the embedding nothing. With sequence parallelism the layernorms' two
// gradients are [N/tp, C], two gathered layernorm outputs [N, C] more per layer, the head's dlnf
// rows [N/tp, C], and the embedding's input gradient gathered [N, C].
double weight_inputs_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout, int layers,
                           bool head, bool embedding = false);
// With recomputation, what B keeps for W of `layers` layers in a set of its own (models/gpt_buffers.cpp
// WeightInputs, held from B to W): the layers' part of weight_inputs_bytes, and what the slot
// dropped that W reads (selective: the GELU or SwiGLU output; full: all but qkv and the probabilities).
double recomputed_weight_inputs_bytes(const ModelShape& model, const TrainingShape& training, const Layout& layout,
                                      int layers);

// One pipeline stage of the plan (its layers, its shard of the parameters, its memory options);
// slots: held_slots().
MemoryBreakdown estimate_stage_memory(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                                      const Cluster& cluster, const std::vector<std::vector<int>>& slots, int stage);
// The stage needing the most memory.
MemoryBreakdown estimate_memory(const ModelShape& model, const TrainingShape& training, const LayoutPlan& plan,
                                const Cluster& cluster, const std::vector<std::vector<int>>& slots);

// `meshtrain sample`: one whole model (fp32 parameters, and the gradient buffer its store keeps),
// one slot of a single sequence of `window` tokens with its [window, Vp] logits, the scratch, and the [1, V]
// probabilities; no optimizer. window: the longest context a forward sees.
MemoryBreakdown estimate_sampling_memory(const ModelShape& model, int window);

// "61.2 GiB on stage 0 = parameters 5.1 + gradients 5.1 + AdamW moments 1.3 + activations 44.0 (16 slots) + ..."
std::string describe(const MemoryBreakdown& memory);

}  // namespace mt::perf
