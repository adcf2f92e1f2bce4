#include "models/gpt_weights.h"

#include "models/llmc/llmc_weights.h"

namespace mt {

void load_llmc_weights(Gpt& model, DeviceContext& ctx, const std::filesystem::path& path) {
  check_llmc_compatible(model.config(), read_llmc_header(path), path);
  const LlmcWeights w = read_llmc_weights(path);
  ParameterStore& store = model.parameters();
  MT_CHECK(w.specs.size() == store.size(), "weights file ", path.string(), " holds ", w.specs.size(),
           " tensors, the model ", store.size());
  for (std::size_t i = 0; i < store.size(); ++i) {
    MT_CHECK(w.specs[i].name == store.spec(i).name && w.specs[i].numel() == store.spec(i).numel(),
             "weights file ", path.string(), ": tensor ", i, " is ", w.specs[i].name, ", the model expects ",
             store.spec(i).name);
    store.param(i).copy_from_host(w.values[i].data(), w.values[i].size() * sizeof(float), ctx.stream());
  }
  ctx.synchronize();
}

void save_llmc_weights(const Gpt& model, const std::filesystem::path& path, DType stored) {
  const std::vector<float> host = model.parameters().flat_params().to_host<float>();
  const ParameterStore& store = model.parameters();
  write_llmc_weights(
      path, model.config(),
      [&](const ParamSpec& spec) {
        const std::size_t i = store.index_of(spec.name);
        return std::span<const float>(host.data() + store.offset(i), static_cast<std::size_t>(spec.numel()));
      },
      stored);
}

}  // namespace mt
