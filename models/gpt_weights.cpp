#include "models/gpt_weights.h"

#include "models/llmc/llmc_weights.h"

namespace mt {

void load_llmc_weights(Gpt& model, DeviceContext& ctx, const std::filesystem::path& path) {
  check_llmc_compatible(model.config(), read_llmc_header(path), path);
  const LlmcWeights w = read_llmc_weights(path);
  std::vector<float> full;  // the file's tensors are in gpt_parameter_specs order
  for (const std::vector<float>& values : w.values) full.insert(full.end(), values.begin(), values.end());
  load_full_parameters(model, ctx, full);
}

void load_full_parameters(Gpt& model, DeviceContext& ctx, std::span<const float> full) {
  const std::vector<ParamSpec> specs = gpt_parameter_specs(model.config());
  const std::vector<std::int64_t> offsets = spec_offsets(specs);
  MT_CHECK(static_cast<std::int64_t>(full.size()) == offsets.back(), full.size(), " values for a model of ",
           offsets.back());
  ParameterStore& store = model.parameters();
  std::vector<float> shard;
  for (std::size_t i = 0; i < store.size(); ++i) {
    const ParamShard& s = model.shards()[i];
    const std::size_t f = spec_index(specs, s.full.name);
    const float* tensor = full.data() + offsets[f];
    shard.clear();
    for (const auto& [first, count] : s.full_runs()) shard.insert(shard.end(), tensor + first, tensor + first + count);
    store.param(i).copy_from_host(shard.data(), shard.size() * sizeof(float), ctx.stream());
  }
  ctx.synchronize();
}

void save_llmc_weights(const GptConfig& config, std::span<const float> full, const std::filesystem::path& path,
                       DType stored) {
  const std::vector<ParamSpec> specs = gpt_parameter_specs(config);
  const std::vector<std::int64_t> offsets = spec_offsets(specs);
  MT_CHECK(static_cast<std::int64_t>(full.size()) == offsets.back(), full.size(), " values for a model of ",
           offsets.back());
  write_llmc_weights(
      path, config,
      [&](const ParamSpec& spec) {
        const std::size_t i = spec_index(specs, spec.name);
        return full.subspan(static_cast<std::size_t>(offsets[i]), static_cast<std::size_t>(spec.numel()));
      },
      stored);
}

void save_llmc_weights(const Gpt& model, const std::filesystem::path& path, DType stored) {
  const GptPartition& p = model.partition();
  MT_CHECK(p.tp_size == 1 && p.embedding && p.head && p.chunks.size() == 1 &&
               p.chunks[0].size() == model.config().layers,
           "saving a shard alone: gather the full parameters first");
  const std::vector<float> host = model.parameters().flat_params().to_host<float>();
  save_llmc_weights(model.config(), std::span<const float>(host.data(), static_cast<std::size_t>(model.parameters().param_numel())),
                    path, stored);
}

}  // namespace mt
