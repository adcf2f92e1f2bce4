#include "models/init.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace mt {
namespace {
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Uniform in (0, 1], from the top 53 bits.
double unit_interval(std::uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * 0x1.0p-53; }
}  // namespace

std::uint64_t name_hash(const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

float counter_normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const std::uint64_t key = splitmix64(splitmix64(seed) ^ stream) ^ index;
  const double u1 = unit_interval(splitmix64(key * 2));
  const double u2 = unit_interval(splitmix64(key * 2 + 1));
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

void init_values(const ParamSpec& spec, const GptConfig& config, std::uint64_t seed, std::int64_t first,
                 std::int64_t count, float* out) {
  float std_dev = 0.02f;
  switch (spec.kind) {
    case ParamKind::Ln1Weight:
    case ParamKind::Ln2Weight:
    case ParamKind::LnfWeight:
      for (std::int64_t i = 0; i < count; ++i) out[i] = 1.0f;
      return;
    case ParamKind::Ln1Bias:
    case ParamKind::Ln2Bias:
    case ParamKind::LnfBias:
    case ParamKind::QkvBias:
    case ParamKind::AttnProjBias:
    case ParamKind::FcBias:
    case ParamKind::FcProjBias:
      for (std::int64_t i = 0; i < count; ++i) out[i] = 0.0f;
      return;
    case ParamKind::AttnProjWeight:
    case ParamKind::FcProjWeight:
      std_dev = 0.02f / std::sqrt(2.0f * static_cast<float>(config.layers));
      break;
    default:
      break;
  }
  const std::uint64_t stream = name_hash(spec.name);
  // Padding rows of the token embedding and the LM head stay zero: their logits are never used.
  const std::int64_t real_end =
      spec.kind == ParamKind::TokenEmbedding || spec.kind == ParamKind::LmHead ? static_cast<std::int64_t>(config.vocab_size) * config.channels : count + first;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t g = first + i;
    out[i] = g < real_end ? std_dev * counter_normal(seed, stream, static_cast<std::uint64_t>(g)) : 0.0f;
  }
}

void init_gpt_parameters(DeviceContext& ctx, ParameterStore& store, std::span<const ParamShard> shards,
                         const GptConfig& config, std::uint64_t seed, std::size_t first_param, std::size_t param_count) {
  MT_CHECK(shards.size() == store.size(), shards.size(), " shards for ", store.size(), " parameters");
  MT_CHECK(first_param <= shards.size(), "parameters from ", first_param, " of ", shards.size());
  const std::size_t end = first_param + std::min(param_count, shards.size() - first_param);
  std::vector<float> host;
  for (std::size_t i = first_param; i < end; ++i) {
    const ParamShard& shard = shards[i];
    host.resize(static_cast<std::size_t>(shard.local.numel()));
    std::size_t at = 0;
    for (const auto& [first, count] : shard.full_runs()) {
      init_values(shard.full, config, seed, first, count, host.data() + at);
      at += static_cast<std::size_t>(count);
    }
    store.param(i).copy_from_host(host.data(), host.size() * sizeof(float), ctx.stream());
  }
  ctx.synchronize();
}

}  // namespace mt
