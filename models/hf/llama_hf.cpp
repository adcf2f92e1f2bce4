#include "models/hf/llama_hf.h"

#include <charconv>

#include "models/hf/hf_json.h"
#include "runtime/error.h"

namespace mt {

namespace {

// Far beyond any real Llama, and small enough that no size computed from them overflows.
constexpr int kMaxWidth = 1 << 24;

// A number key's value as a float, `fallback` when absent or null.
float number_or(const nlohmann::json& config, const char* key, double fallback, const std::string& where) {
  const nlohmann::json v = hf_value_or(config, key, fallback);
  MT_REQUIRE(v.is_number(), where, ": ", key, " is ", v.dump(), ", not a number");
  return static_cast<float>(v.get<double>());
}

// The shortest decimal that reads back as `f`, as a double: 1e-5f is written 1e-05, not
// 9.999999747378752e-06, as Python writes the value it was given.
double shortest(float f) {
  char text[32];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, f);
  double d = 0;
  std::from_chars(text, end, d);
  return d;
}

std::string layer(int l) { return "model.layers." + std::to_string(l) + "."; }

}  // namespace

GptConfig llama_config_from_hf(const nlohmann::json& config, const std::string& where) {
  MT_REQUIRE(config.is_object(), where, " is not a JSON object");
  const nlohmann::json type = hf_value_or(config, "model_type", "");
  MT_REQUIRE(type == "llama", where, ": model_type ", type.dump(), " is not llama");
  const nlohmann::json act = hf_value_or(config, "hidden_act", "silu");
  MT_REQUIRE(act == "silu", where, ": hidden_act ", act.dump(), ": meshtrain's llama computes SwiGLU with silu only");
  MT_REQUIRE(hf_value_or(config, "tie_word_embeddings", false) == false, where,
             ": tie_word_embeddings is true: meshtrain's llama has an LM head apart from the token embedding");
  MT_REQUIRE(hf_value_or(config, "attention_bias", false) == false, where,
             ": attention_bias is true: meshtrain's llama has no biases");
  MT_REQUIRE(hf_value_or(config, "mlp_bias", false) == false, where, ": mlp_bias is true: meshtrain's llama has no biases");
  // RoPE's parameters: transformers 4 writes rope_theta and rope_scaling (null when plain),
  // transformers 5 rope_parameters {"rope_type": "default", "rope_theta": ...}. Either, when given,
  // must be plain RoPE.
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const nlohmann::json rope = hf_value_or(config, key, nullptr);
    const nlohmann::json rope_type = rope.is_object() ? hf_value_or(rope, "rope_type", hf_value_or(rope, "type", "?"))
                                                      : nlohmann::json("?");
    MT_REQUIRE(rope.is_null() || rope_type == "default", where, ": ", key, " is ", rope.dump().substr(0, 120),
               ": meshtrain's RoPE has a base (rope_theta) and no scaling");
  }
  const nlohmann::json parameters = hf_value_or(config, "rope_parameters", nlohmann::json::object());
  GptConfig c;
  c.family = ModelFamily::Llama;
  c.channels = hf_required_int(config, "hidden_size", where);
  c.ffn_hidden = hf_required_int(config, "intermediate_size", where);
  c.heads = hf_required_int(config, "num_attention_heads", where);
  c.layers = hf_required_int(config, "num_hidden_layers", where);
  c.vocab_size = hf_required_int(config, "vocab_size", where);
  c.kv_heads = config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()
                   ? hf_required_int(config, "num_key_value_heads", where)
                   : c.heads;
  c.max_seq_len = config.contains("max_position_embeddings") ? hf_required_int(config, "max_position_embeddings", where)
                                                             : 2048;
  c.norm_eps = number_or(config, "rms_norm_eps", 1e-6, where);
  c.rope_theta = parameters.contains("rope_theta") ? number_or(parameters, "rope_theta", 0, where + ": rope_parameters")
                                                   : number_or(config, "rope_theta", 10000.0, where);
  MT_REQUIRE(c.channels <= kMaxWidth && c.ffn_hidden <= kMaxWidth && c.vocab_size <= kMaxWidth &&
                 c.max_seq_len <= kMaxWidth,
             where, ": hidden_size, intermediate_size, vocab_size and max_position_embeddings must be at most ", kMaxWidth);
  MT_REQUIRE(c.layers <= GptConfig::kMaxLayers, where, ": num_hidden_layers ", c.layers, " is beyond ",
             GptConfig::kMaxLayers);
  MT_REQUIRE(c.channels % c.heads == 0, where, ": hidden_size ", c.channels, " is not divisible by num_attention_heads ",
             c.heads);
  MT_REQUIRE(c.kv_heads <= c.heads && c.heads % c.kv_heads == 0, where, ": num_key_value_heads ", c.kv_heads,
             " does not divide num_attention_heads ", c.heads);
  const nlohmann::json head_dim = hf_value_or(config, "head_dim", c.head_size());
  MT_REQUIRE(head_dim == c.head_size(), where, ": head_dim ", head_dim.dump(), " is not hidden_size / num_attention_heads (",
             c.head_size(), "): meshtrain's heads split the width evenly");
  try {
    c.validate();  // what is left: an odd head size, a theta or an epsilon out of range
  } catch (const UsageError& e) {
    MT_FAIL_AS(UsageError, where, ": ", e.message());
  }
  return c;
}

nlohmann::ordered_json llama_hf_config_json(const GptConfig& c, StDtype stored) {
  nlohmann::ordered_json j;  // in save_pretrained's order: sorted by key
  j["architectures"] = {"LlamaForCausalLM"};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["head_dim"] = c.head_size();
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.channels;
  j["intermediate_size"] = c.mlp_hidden();
  j["max_position_embeddings"] = c.max_seq_len;
  j["mlp_bias"] = false;
  j["model_type"] = "llama";
  j["num_attention_heads"] = c.heads;
  j["num_hidden_layers"] = c.layers;
  j["num_key_value_heads"] = c.kv_head_count();
  j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = shortest(c.norm_eps);
  j["rope_parameters"] = {{"rope_theta", shortest(c.rope_theta)}, {"rope_type", "default"}};  // transformers 5
  j["rope_theta"] = shortest(c.rope_theta);  // transformers 4
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = hf_torch_dtype(stored);
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  return j;
}

std::vector<HfTensor> llama_hf_tensors(const GptConfig& config) {
  const std::int64_t C = config.channels, F = config.mlp_hidden(), V = config.vocab_size;
  const std::int64_t kv = static_cast<std::int64_t>(config.kv_head_count()) * config.head_size();
  std::vector<HfTensor> out;
  for (const ParamSpec& spec : gpt_parameter_specs(config)) {
    const std::string l = layer(spec.layer);
    std::vector<HfPart> parts;
    switch (spec.kind) {
      case ParamKind::TokenEmbedding: parts = {{"model.embed_tokens.weight", {V, C}}}; break;  // unpadded
      case ParamKind::Ln1Weight: parts = {{l + "input_layernorm.weight", {C}}}; break;
      case ParamKind::QueryWeight: parts = {{l + "self_attn.q_proj.weight", {C, C}}}; break;
      case ParamKind::KeyValueWeight:
        parts = {{l + "self_attn.k_proj.weight", {kv, C}}, {l + "self_attn.v_proj.weight", {kv, C}}};
        break;
      case ParamKind::AttnProjWeight: parts = {{l + "self_attn.o_proj.weight", {C, C}}}; break;
      case ParamKind::Ln2Weight: parts = {{l + "post_attention_layernorm.weight", {C}}}; break;
      case ParamKind::FcWeight: parts = {{l + "mlp.gate_proj.weight", {F, C}}, {l + "mlp.up_proj.weight", {F, C}}}; break;
      case ParamKind::FcProjWeight: parts = {{l + "mlp.down_proj.weight", {C, F}}}; break;
      case ParamKind::LnfWeight: parts = {{"model.norm.weight", {C}}}; break;
      case ParamKind::LmHead: parts = {{"lm_head.weight", {V, C}}}; break;  // unpadded
      default: MT_FAIL("'", spec.name, "' is a GPT-2 parameter, not llama's");
    }
    out.push_back({spec.name, spec.shape, std::move(parts), HfLayout::Same});
  }
  return out;
}

namespace {

std::string llama_read_prefix(const SafetensorsFolder&) { return ""; }  // the names are whole

bool llama_known_extra(const SafetensorsFolder&, const std::string&, const std::string& name) {
  return name.ends_with(".self_attn.rotary_emb.inv_freq");
}

}  // namespace

const HfFamily& llama_hf_family() {
  static const HfFamily family{"Llama",           llama_config_from_hf, llama_hf_config_json, llama_hf_tensors,
                               llama_read_prefix, "",                   llama_known_extra};
  return family;
}

}  // namespace mt
