#include "models/gpt_weights.h"

#include <functional>
#include <string>

#include "models/hf/hf_model.h"
#include "models/llmc/llmc_weights.h"

namespace mt {

namespace {

// Copies shard `i`'s elements out of its full tensor into the store: straight from `tensor` when
// the shard is the whole tensor, through `scratch` (reused, so at most one shard) when it is a
// tensor-parallel part.
void copy_shard(Gpt& model, DeviceContext& ctx, std::size_t i, const float* tensor, std::vector<float>& scratch) {
  const ParamShard& s = model.shards()[i];
  Tensor& param = model.parameters().param(i);
  const auto runs = s.full_runs();
  if (runs.size() == 1 && runs[0].first == 0 && runs[0].second == s.full.numel()) {
    param.copy_from_host(tensor, static_cast<std::size_t>(s.full.numel()) * sizeof(float), ctx.stream());
    return;
  }
  scratch.clear();
  for (const auto& [first, count] : runs) scratch.insert(scratch.end(), tensor + first, tensor + first + count);
  param.copy_from_host(scratch.data(), scratch.size() * sizeof(float), ctx.stream());
}

// Copies each streamed tensor into this rank's shards of it; `source` names the file in errors.
void load_streamed(Gpt& model, DeviceContext& ctx, const std::string& source,
                   const std::function<void(const HfParamVisitor&)>& stream) {
  std::vector<float> scratch;
  std::vector<bool> loaded(model.shards().size(), false);
  stream([&](const ParamSpec& spec, std::span<const float> values) {
    for (std::size_t i = 0; i < model.shards().size(); ++i) {
      if (model.shards()[i].full.name != spec.name) continue;
      MT_CHECK(values.size() == static_cast<std::size_t>(model.shards()[i].full.numel()), spec.name, ": ",
               values.size(), " values for a tensor of ", model.shards()[i].full.numel());
      copy_shard(model, ctx, i, values.data(), scratch);
      // The host buffers are reused for the next tensor: on a GPU, the copy must have read them.
      ctx.synchronize();
      loaded[i] = true;
    }
  });
  for (std::size_t i = 0; i < loaded.size(); ++i)
    MT_CHECK(loaded[i], source, " holds no ", model.shards()[i].full.name);
}

}  // namespace

void load_llmc_weights(Gpt& model, DeviceContext& ctx, const std::filesystem::path& path) {
  // Tensor by tensor into this rank's shards: the whole file was held twice over before (per-tensor
  // vectors and a concatenated copy: 124M parameters peaked 0.86 GB above the steady state).
  load_streamed(model, ctx, "llm.c weights file " + path.string(),
                [&](const HfParamVisitor& visit) { read_llmc_tensors(path, model.config(), visit); });
}

void load_safetensors_weights(Gpt& model, DeviceContext& ctx, const std::filesystem::path& dir) {
  load_streamed(model, ctx, "safetensors folder " + dir.string(),
                [&](const HfParamVisitor& visit) { read_hf_safetensors(dir, model.config(), visit); });
}

void load_init_weights(Gpt& model, DeviceContext& ctx, const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) {
    load_safetensors_weights(model, ctx, path);
  } else {
    load_llmc_weights(model, ctx, path);
  }
  // The bf16 copy follows now: a trainer's model may cast it only in the optimizer's update.
  model.parameters().refresh_compute_params(ctx);
}

void load_full_parameters(Gpt& model, DeviceContext& ctx, std::span<const float> full) {
  const std::vector<ParamSpec> specs = gpt_parameter_specs(model.config());
  const std::vector<std::int64_t> offsets = spec_offsets(specs);
  MT_CHECK(static_cast<std::int64_t>(full.size()) == offsets.back(), full.size(), " values for a model of ",
           offsets.back());
  std::vector<float> scratch;
  for (std::size_t i = 0; i < model.shards().size(); ++i) {
    const std::size_t f = spec_index(specs, model.shards()[i].full.name);
    copy_shard(model, ctx, i, full.data() + offsets[f], scratch);
    ctx.synchronize();  // scratch is reused for the next shard
  }
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
  // In the specs' order, whatever the store's flat order.
  const ParameterStore& store = model.parameters();
  std::vector<float> host;
  host.reserve(static_cast<std::size_t>(store.param_numel()));
  for (std::size_t i = 0; i < store.size(); ++i) {
    const std::vector<float> values = store.param(i).to_host<float>();
    host.insert(host.end(), values.begin(), values.end());
  }
  save_llmc_weights(model.config(), std::span<const float>(host), path, stored);
}

}  // namespace mt
