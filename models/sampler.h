// Text generation from a Gpt: the next-token distribution of the last position, softened by a
// temperature and cut to the top k, sampled with a seeded generator (same seed, same text).
// defines: SampleOptions, pick_token, generate
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "models/gpt.h"

namespace mt {

struct SampleOptions {
  int tokens = 64;          // new tokens to generate
  float temperature = 1.0f; // > 0; lower is greedier
  int top_k = 40;           // 0: the whole vocabulary
  std::uint64_t seed = 1337;
};

// A token drawn from `probs` (summing to ~1) restricted to its top_k largest entries (ties broken
// by the lower id), using one uniform draw from rng.
std::int32_t pick_token(std::span<const float> probs, int top_k, std::mt19937_64& rng);

// Continues `prompt` (at least one token); on_token sees each new token as it is chosen. The
// context fed to the model is the last max_seq_len tokens. Returns the new tokens.
std::vector<std::int32_t> generate(Gpt& model, DeviceContext& ctx, std::vector<std::int32_t> prompt,
                                   const SampleOptions& options,
                                   const std::function<void(std::int32_t)>& on_token = {});

}  // namespace mt
