#include "models/hf/gpt2_hf.h"

#include <cmath>

#include "models/hf/hf_json.h"
#include "runtime/error.h"

namespace mt {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "transformer.";

}  // namespace

GptConfig gpt2_config_from_hf(const nlohmann::json& config, const std::string& where) {
  MT_REQUIRE(config.is_object(), where, " is not a JSON object");
  const nlohmann::json type = hf_value_or(config, "model_type", "gpt2");
  MT_REQUIRE(type == "gpt2", where, ": model_type ", type.dump(), " is not gpt2 (meshtrain reads GPT-2 weights)");
  const nlohmann::json act = hf_value_or(config, "activation_function", "gelu_new");
  MT_REQUIRE(act == "gelu_new" || act == "gelu_pytorch_tanh", where, ": activation_function ", act.dump(),
             ": meshtrain's GPT-2 computes gelu_new (GELU's tanh approximation) only");
  MT_REQUIRE(hf_value_or(config, "tie_word_embeddings", true) == true, where,
             ": tie_word_embeddings is false: meshtrain's GPT-2 ties the LM head to wte");
  MT_REQUIRE(hf_value_or(config, "scale_attn_by_inverse_layer_idx", false) == false, where,
             ": scale_attn_by_inverse_layer_idx is true: meshtrain's attention scales by 1/sqrt(head size) only");
  MT_REQUIRE(hf_value_or(config, "scale_attn_weights", true) == true, where,
             ": scale_attn_weights is false: meshtrain's attention scales by 1/sqrt(head size)");
  MT_REQUIRE(hf_value_or(config, "add_cross_attention", false) == false, where,
             ": add_cross_attention is true: meshtrain's GPT-2 is a decoder alone");
  const nlohmann::json eps = hf_value_or(config, "layer_norm_epsilon", 1e-5);
  MT_REQUIRE(eps.is_number() && std::abs(eps.get<double>() - 1e-5) < 1e-12, where, ": layer_norm_epsilon ",
             eps.dump(), ": meshtrain's layernorms use 1e-5");
  GptConfig c;
  c.channels = hf_required_int(config, "n_embd", where);
  c.layers = hf_required_int(config, "n_layer", where);
  c.heads = hf_required_int(config, "n_head", where);
  c.vocab_size = hf_required_int(config, "vocab_size", where);
  const bool has_positions = config.contains("n_positions"), has_ctx = config.contains("n_ctx");
  MT_REQUIRE(has_positions || has_ctx, where, " has neither n_positions nor n_ctx");
  c.max_seq_len = hf_required_int(config, has_positions ? "n_positions" : "n_ctx", where);
  if (has_positions && has_ctx) {
    MT_REQUIRE(hf_required_int(config, "n_ctx", where) == c.max_seq_len, where, ": n_ctx ", config["n_ctx"].dump(),
               " differs from n_positions ", c.max_seq_len);
  }
  const nlohmann::json inner = hf_value_or(config, "n_inner", 4LL * c.channels);
  MT_REQUIRE(inner == 4LL * c.channels, where, ": n_inner ", inner.dump(), " is not 4 x n_embd (",
             4LL * c.channels, "), the only MLP width meshtrain's GPT-2 has");
  // Far beyond any real GPT-2, and small enough that no size computed from them overflows.
  constexpr int kMaxWidth = 1 << 24;
  MT_REQUIRE(c.channels <= kMaxWidth && c.vocab_size <= kMaxWidth && c.max_seq_len <= kMaxWidth, where,
             ": n_embd, vocab_size and n_positions must be at most ", kMaxWidth);
  MT_REQUIRE(c.channels % c.heads == 0, where, ": n_embd ", c.channels, " is not divisible by n_head ", c.heads);
  MT_REQUIRE(c.layers <= GptConfig::kMaxLayers, where, ": n_layer ", c.layers, " is beyond ", GptConfig::kMaxLayers);
  return c;
}

nlohmann::ordered_json gpt2_hf_config_json(const GptConfig& c, StDtype stored) {
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = c.vocab_size;
  j["n_positions"] = c.max_seq_len;
  j["n_embd"] = c.channels;
  j["n_layer"] = c.layers;
  j["n_head"] = c.heads;
  j["n_inner"] = nullptr;
  j["activation_function"] = "gelu_new";
  j["layer_norm_epsilon"] = 1e-5;
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = hf_torch_dtype(stored);
  return j;
}

std::vector<HfTensor> gpt2_hf_tensors(const GptConfig& config) {
  const std::int64_t C = config.channels;
  std::vector<HfTensor> out;
  for (const ParamSpec& spec : gpt_parameter_specs(config)) {
    HfPart part{"", spec.shape};
    HfLayout layout = HfLayout::Same;
    const std::string l = "h." + std::to_string(spec.layer) + ".";
    switch (spec.kind) {
      case ParamKind::TokenEmbedding: part = {"wte.weight", {config.vocab_size, C}}; break;  // unpadded
      case ParamKind::PositionEmbedding: part.name = "wpe.weight"; break;
      case ParamKind::Ln1Weight: part.name = l + "ln_1.weight"; break;
      case ParamKind::Ln1Bias: part.name = l + "ln_1.bias"; break;
      case ParamKind::QkvWeight: part.name = l + "attn.c_attn.weight"; break;
      case ParamKind::QkvBias: part.name = l + "attn.c_attn.bias"; break;
      case ParamKind::AttnProjWeight: part.name = l + "attn.c_proj.weight"; break;
      case ParamKind::AttnProjBias: part.name = l + "attn.c_proj.bias"; break;
      case ParamKind::Ln2Weight: part.name = l + "ln_2.weight"; break;
      case ParamKind::Ln2Bias: part.name = l + "ln_2.bias"; break;
      case ParamKind::FcWeight: part.name = l + "mlp.c_fc.weight"; break;
      case ParamKind::FcBias: part.name = l + "mlp.c_fc.bias"; break;
      case ParamKind::FcProjWeight: part.name = l + "mlp.c_proj.weight"; break;
      case ParamKind::FcProjBias: part.name = l + "mlp.c_proj.bias"; break;
      case ParamKind::LnfWeight: part.name = "ln_f.weight"; break;
      case ParamKind::LnfBias: part.name = "ln_f.bias"; break;
      case ParamKind::LmHead:
      case ParamKind::QueryWeight:
      case ParamKind::KeyValueWeight: MT_FAIL("'", spec.name, "' is a llama parameter, not GPT-2's");
    }
    if (spec.shape.size() == 2 && spec.kind != ParamKind::TokenEmbedding && spec.kind != ParamKind::PositionEmbedding) {
      layout = HfLayout::Transposed;  // Conv1D: [in, out]
      part.shape = {spec.shape[1], spec.shape[0]};
    }
    out.push_back({spec.name, spec.shape, {std::move(part)}, layout});
  }
  return out;
}

namespace {

std::string gpt2_read_prefix(const SafetensorsFolder& folder) {
  return folder.find(std::string(kPrefix) + "wte.weight").file ? kPrefix : "";
}

// lm_head.weight (with or without the prefix) equal to wte: tied, as GPT-2's; the causal mask
// buffers of older files.
bool gpt2_known_extra(const SafetensorsFolder& folder, const std::string& prefix, const std::string& name) {
  if (name == "lm_head.weight" || name == prefix + "lm_head.weight") {
    const SafetensorsFolder::Found head = folder.find(name), wte = folder.find(prefix + "wte.weight");
    MT_REQUIRE(head.file->read(*head.tensor) == wte.file->read(*wte.tensor), "safetensors folder ",
               folder.dir().string(), ": ", name, " differs from ", prefix,
               "wte.weight: untied embeddings, which meshtrain's GPT-2 does not have");
    return true;
  }
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

}  // namespace

const HfFamily& gpt2_hf_family() {
  static const HfFamily family{"GPT-2",          gpt2_config_from_hf, gpt2_hf_config_json, gpt2_hf_tensors,
                               gpt2_read_prefix, kPrefix,             gpt2_known_extra};
  return family;
}

GptConfig read_gpt2_safetensors(const fs::path& dir, const std::optional<GptConfig>& expected,
                                const HfParamVisitor& visit) {
  return read_hf_folder(gpt2_hf_family(), dir, expected, visit);
}

void write_gpt2_safetensors(const fs::path& dir, const GptConfig& config, const HfParamSource& value_of, StDtype stored,
                            std::int64_t shard_bytes) {
  write_hf_folder(gpt2_hf_family(), dir, config, value_of, stored, shard_bytes);
}

}  // namespace mt
