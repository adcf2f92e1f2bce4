#include "models/gpt_parameters.h"

#include <algorithm>

#include "runtime/error.h"  // defines: MT_CHECK

namespace mt {

std::int64_t ParamSpec::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::vector<std::int64_t> spec_offsets(const std::vector<ParamSpec>& specs) {
  std::vector<std::int64_t> offsets{0};
  for (const ParamSpec& s : specs) offsets.push_back(offsets.back() + s.numel());
  return offsets;
}

std::size_t spec_index(const std::vector<ParamSpec>& specs, const std::string& name) {
  const auto it = std::find_if(specs.begin(), specs.end(), [&](const ParamSpec& s) { return s.name == name; });
  MT_CHECK(it != specs.end(), "no parameter '", name, "' among the ", specs.size(), " of this model");
  return static_cast<std::size_t>(it - specs.begin());
}

namespace {

std::vector<ParamSpec> llama_parameter_specs(const GptConfig& config) {
  const std::int64_t C = config.channels, F = config.mlp_hidden();
  std::vector<ParamSpec> specs;
  specs.push_back({"wte", ParamKind::TokenEmbedding, -1, {config.vocab_rows(), C}, true});
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    specs.push_back({p + "ln1.weight", ParamKind::Ln1Weight, l, {C}, false});
    const std::int64_t kv = 2 * static_cast<std::int64_t>(config.kv_head_count()) * config.head_size();
    specs.push_back({p + "attn.q.weight", ParamKind::QueryWeight, l, {C, C}, true});
    specs.push_back({p + "attn.kv.weight", ParamKind::KeyValueWeight, l, {kv, C}, true});
    specs.push_back({p + "attn.proj.weight", ParamKind::AttnProjWeight, l, {C, C}, true});
    specs.push_back({p + "ln2.weight", ParamKind::Ln2Weight, l, {C}, false});
    specs.push_back({p + "mlp.fc.weight", ParamKind::FcWeight, l, {2 * F, C}, true});
    specs.push_back({p + "mlp.proj.weight", ParamKind::FcProjWeight, l, {C, F}, true});
  }
  specs.push_back({"lnf.weight", ParamKind::LnfWeight, -1, {C}, false});
  specs.push_back({"lm_head", ParamKind::LmHead, -1, {config.vocab_rows(), C}, true});
  return specs;
}

}  // namespace

std::vector<ParamSpec> gpt_parameter_specs(const GptConfig& config) {
  if (config.is_llama()) return llama_parameter_specs(config);
  const std::int64_t C = config.channels;
  std::vector<ParamSpec> specs;
  specs.push_back({"wte", ParamKind::TokenEmbedding, -1, {config.vocab_rows(), C}, true});
  specs.push_back({"wpe", ParamKind::PositionEmbedding, -1, {config.max_seq_len, C}, true});
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    specs.push_back({p + "ln1.weight", ParamKind::Ln1Weight, l, {C}, false});
    specs.push_back({p + "ln1.bias", ParamKind::Ln1Bias, l, {C}, false});
    specs.push_back({p + "attn.qkv.weight", ParamKind::QkvWeight, l, {3 * C, C}, true});
    specs.push_back({p + "attn.qkv.bias", ParamKind::QkvBias, l, {3 * C}, false});
    specs.push_back({p + "attn.proj.weight", ParamKind::AttnProjWeight, l, {C, C}, true});
    specs.push_back({p + "attn.proj.bias", ParamKind::AttnProjBias, l, {C}, false});
    specs.push_back({p + "ln2.weight", ParamKind::Ln2Weight, l, {C}, false});
    specs.push_back({p + "ln2.bias", ParamKind::Ln2Bias, l, {C}, false});
    specs.push_back({p + "mlp.fc.weight", ParamKind::FcWeight, l, {4 * C, C}, true});
    specs.push_back({p + "mlp.fc.bias", ParamKind::FcBias, l, {4 * C}, false});
    specs.push_back({p + "mlp.proj.weight", ParamKind::FcProjWeight, l, {C, 4 * C}, true});
    specs.push_back({p + "mlp.proj.bias", ParamKind::FcProjBias, l, {C}, false});
  }
  specs.push_back({"lnf.weight", ParamKind::LnfWeight, -1, {C}, false});
  specs.push_back({"lnf.bias", ParamKind::LnfBias, -1, {C}, false});
  return specs;
}

}  // namespace mt
