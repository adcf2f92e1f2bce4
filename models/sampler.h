// Text generation from a Gpt: the next-token distribution of the last position, cut to the model's
// top k and softened by a temperature, sampled with a seeded generator (same seed, same text).
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
  float temperature = 1.0f; // finite, >= 0; lower is greedier, 0 always takes the most likely token
  int top_k = 40;           // 0: the whole vocabulary
  std::uint64_t seed = 1337;
};

// A token drawn from `probs` (summing to ~1) restricted to its top_k largest entries (ties broken
// by the lower id), using one uniform draw from rng.
std::int32_t pick_token(std::span<const float> probs, int top_k, std::mt19937_64& rng);
// The same, with the top_k chosen by `rank` (the model's own distribution) and the draw made by
// `probs` (the tempered one): a high temperature flattens probs into ties, but the candidates stay
// the tokens the model ranks highest.
std::int32_t pick_token(std::span<const float> probs, std::span<const float> rank, int top_k, std::mt19937_64& rng);

// Continues `prompt` (at least one token); on_token sees each new token as it is chosen. The
// context fed to the model is the last max_seq_len tokens. Returns the new tokens.
std::vector<std::int32_t> generate(Gpt& model, DeviceContext& ctx, std::vector<std::int32_t> prompt,
                                   const SampleOptions& options,
                                   const std::function<void(std::int32_t)>& on_token = {});

}  // namespace mt
