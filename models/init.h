// Deterministic parameter initialization. Every element's value is a pure function of (seed,
// parameter name, element index in the full tensor), so any layout that holds a slice of a tensor
// (tensor or pipeline parallel) initializes it exactly as a single rank holding all of it would.
// defines: counter_normal, init_gpt_parameters, init_values
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "models/gpt_parameters.h"
#include "models/gpt_sharding.h"
#include "models/parameter_store.h"

namespace mt {

// A standard normal sample from a counter-based generator (SplitMix64 + Box-Muller).
float counter_normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index);
std::uint64_t name_hash(const std::string& name);  // FNV-1a, stable across platforms

// GPT-2's scheme: matrices and embeddings N(0, 0.02), the residual projections (attn.proj,
// mlp.proj) N(0, 0.02 / sqrt(2 x layers)), biases 0, layernorm weights 1; padding rows of wte 0.
// llama gets the same: q, kv, gate/up and lm_head N(0, 0.02), o and down scaled, RMSNorm weights 1.
// Fills `count` elements starting at `first` (of the full tensor) of the parameter `spec`.
void init_values(const ParamSpec& spec, const GptConfig& config, std::uint64_t seed, std::int64_t first,
                 std::int64_t count, float* out);
// Initializes every stored parameter, shards[i] saying where parameter i of `store` sits in the
// full model (models/gpt_sharding.h): a shard gets exactly the values of its part of the full tensor.
// Only parameters [first_param, first_param + param_count) when given (their values depend on no
// other parameter).
void init_gpt_parameters(DeviceContext& ctx, ParameterStore& store, std::span<const ParamShard> shards,
                         const GptConfig& config, std::uint64_t seed, std::size_t first_param = 0,
                         std::size_t param_count = SIZE_MAX);

}  // namespace mt
