// When a model reads a unit of its parameters and writes its gradients: the hooks ZeRO-3 gathers
// parameters on (and frees them after), and ZeRO-2/3 reduce-scatter gradients on. A unit is a run
// of consecutive parameters of the model's ParameterStore used together: the embeddings a rank
// holds, one half of a transformer layer (its attention or its MLP), the final layernorm.
// defines: ParamUse, ParamUnit, ParamUseHooks, reads_parameters, writes_gradients, kPrefetchUnits
#pragma once

#include <cstddef>
#include <string>

namespace mt {

// Forward reads the parameters. Backward (fused) reads them (the input gradient) and adds to the
// gradients; a split backward does the two apart: BackwardInput reads, BackwardWeights writes
// (it reads activations only). ForwardWithGradient reads them and adds to the gradients during a
// training forward: the LM head makes its tied embedding's gradient with the loss, chunk by chunk,
// so that the logits are never kept for the backward.
enum class ParamUse { Forward, Backward, BackwardInput, BackwardWeights, ForwardWithGradient };

constexpr bool reads_parameters(ParamUse use) { return use != ParamUse::BackwardWeights; }
constexpr bool writes_gradients(ParamUse use) {
  return use == ParamUse::Backward || use == ParamUse::BackwardWeights || use == ParamUse::ForwardWithGradient;
}

// How many units ahead ZeRO-3 gathers (zero/unit_shards.h) in the order of use: a layer's two
// (its attention and its MLP), so a layer's gathers hide behind about a layer's compute. The memory
// model counts the same (perf/memory_model.h).
constexpr int kPrefetchUnits = 2;

struct ParamUnit {
  std::string name;            // "embedding", "h.3.attn", "h.3.mlp", "lnf"
  std::size_t first = 0;       // the unit's parameters are [first, first + count) of the store
  std::size_t count = 0;
};

// Called by the model around each use of a unit, in the order it computes: begin before the first
// kernel that touches the unit's parameters or gradients is queued, end after the last. Uses of
// different units nest (the head reads the embedding unit's tied token embedding and the final
// layernorm's unit together); the same unit is not begun twice without an end. What the hooks
// start may run on another stream or thread; what the model queues after begin() must see it.
class ParamUseHooks {
 public:
  virtual ~ParamUseHooks() = default;
  virtual void begin(int unit, ParamUse use) = 0;
  virtual void end(int unit, ParamUse use) = 0;
};

}  // namespace mt
