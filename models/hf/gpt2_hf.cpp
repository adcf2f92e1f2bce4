#include "models/hf/gpt2_hf.h"

#include <climits>
#include <cmath>
#include <fstream>
#include <sstream>

#include "io/atomic_file.h"
#include "io/safetensors_folder.h"
#include "models/llmc/llmc_weights.h"  // defines: check_llmc_compatible
#include "runtime/error.h"

namespace mt {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "transformer.";

int required_int(const nlohmann::json& config, const char* key, const std::string& where) {
  const auto it = config.find(key);
  MT_REQUIRE(it != config.end(), where, " has no ", key);
  MT_REQUIRE(it->is_number_integer() && it->get<std::int64_t>() >= 1 && it->get<std::int64_t>() <= INT_MAX, where,
             ": ", key, " is ", it->dump(), ", not a positive integer");
  return static_cast<int>(it->get<std::int64_t>());
}

// A key's value, or `fallback` when it is absent or null.
nlohmann::json value_or(const nlohmann::json& config, const char* key, nlohmann::json fallback) {
  const auto it = config.find(key);
  return it == config.end() || it->is_null() ? fallback : *it;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Buffers HF keeps beside the weights in older GPT-2 files: the causal mask, not parameters.
bool is_gpt2_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

}  // namespace

GptConfig gpt2_config_from_hf(const nlohmann::json& config, const std::string& where) {
  MT_REQUIRE(config.is_object(), where, " is not a JSON object");
  const nlohmann::json type = value_or(config, "model_type", "gpt2");
  MT_REQUIRE(type == "gpt2", where, ": model_type ", type.dump(), " is not gpt2 (meshtrain reads GPT-2 weights)");
  const nlohmann::json act = value_or(config, "activation_function", "gelu_new");
  MT_REQUIRE(act == "gelu_new" || act == "gelu_pytorch_tanh", where, ": activation_function ", act.dump(),
             ": meshtrain's GPT-2 computes gelu_new (GELU's tanh approximation) only");
  MT_REQUIRE(value_or(config, "tie_word_embeddings", true) == true, where,
             ": tie_word_embeddings is false: meshtrain's GPT-2 ties the LM head to wte");
  MT_REQUIRE(value_or(config, "scale_attn_by_inverse_layer_idx", false) == false, where,
             ": scale_attn_by_inverse_layer_idx is true: meshtrain's attention scales by 1/sqrt(head size) only");
  MT_REQUIRE(value_or(config, "scale_attn_weights", true) == true, where,
             ": scale_attn_weights is false: meshtrain's attention scales by 1/sqrt(head size)");
  MT_REQUIRE(value_or(config, "add_cross_attention", false) == false, where,
             ": add_cross_attention is true: meshtrain's GPT-2 is a decoder alone");
  const nlohmann::json eps = value_or(config, "layer_norm_epsilon", 1e-5);
  MT_REQUIRE(eps.is_number() && std::abs(eps.get<double>() - 1e-5) < 1e-12, where, ": layer_norm_epsilon ",
             eps.dump(), ": meshtrain's layernorms use 1e-5");
  GptConfig c;
  c.channels = required_int(config, "n_embd", where);
  c.layers = required_int(config, "n_layer", where);
  c.heads = required_int(config, "n_head", where);
  c.vocab_size = required_int(config, "vocab_size", where);
  const bool has_positions = config.contains("n_positions"), has_ctx = config.contains("n_ctx");
  MT_REQUIRE(has_positions || has_ctx, where, " has neither n_positions nor n_ctx");
  c.max_seq_len = required_int(config, has_positions ? "n_positions" : "n_ctx", where);
  if (has_positions && has_ctx) {
    MT_REQUIRE(required_int(config, "n_ctx", where) == c.max_seq_len, where, ": n_ctx ", config["n_ctx"].dump(),
               " differs from n_positions ", c.max_seq_len);
  }
  const nlohmann::json inner = value_or(config, "n_inner", 4LL * c.channels);
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

GptConfig read_gpt2_hf_config(const fs::path& dir) {
  const fs::path file = dir / "config.json";
  std::ifstream in(file);
  MT_REQUIRE(in.good(), "safetensors folder ", dir.string(), " has no readable config.json (the model's shape is read from it)");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    std::string why = std::string(e.what()).substr(0, 200);
    for (char& ch : why)
      if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) ch = '?';
    MT_FAIL_AS(UsageError, file.string(), " is not valid JSON (", why, ")");
  }
  return gpt2_config_from_hf(json, file.string());
}

nlohmann::ordered_json gpt2_hf_config_json(const GptConfig& c, StDtype stored) {
  const char* torch_dtype = stored == StDtype::F32 ? "float32" : stored == StDtype::BF16 ? "bfloat16" : "float16";
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
  j["torch_dtype"] = torch_dtype;
  return j;
}

std::vector<HfTensor> gpt2_hf_tensors(const GptConfig& config) {
  const std::int64_t C = config.channels;
  std::vector<HfTensor> out;
  for (const ParamSpec& spec : gpt_parameter_specs(config)) {
    HfTensor t{spec.name, spec.shape, "", spec.shape, HfLayout::Same};
    const std::string l = "h." + std::to_string(spec.layer) + ".";
    switch (spec.kind) {
      case ParamKind::TokenEmbedding: t.theirs = "wte.weight", t.shape = {config.vocab_size, C}; break;
      case ParamKind::PositionEmbedding: t.theirs = "wpe.weight"; break;
      case ParamKind::Ln1Weight: t.theirs = l + "ln_1.weight"; break;
      case ParamKind::Ln1Bias: t.theirs = l + "ln_1.bias"; break;
      case ParamKind::QkvWeight: t.theirs = l + "attn.c_attn.weight"; break;
      case ParamKind::QkvBias: t.theirs = l + "attn.c_attn.bias"; break;
      case ParamKind::AttnProjWeight: t.theirs = l + "attn.c_proj.weight"; break;
      case ParamKind::AttnProjBias: t.theirs = l + "attn.c_proj.bias"; break;
      case ParamKind::Ln2Weight: t.theirs = l + "ln_2.weight"; break;
      case ParamKind::Ln2Bias: t.theirs = l + "ln_2.bias"; break;
      case ParamKind::FcWeight: t.theirs = l + "mlp.c_fc.weight"; break;
      case ParamKind::FcBias: t.theirs = l + "mlp.c_fc.bias"; break;
      case ParamKind::FcProjWeight: t.theirs = l + "mlp.c_proj.weight"; break;
      case ParamKind::FcProjBias: t.theirs = l + "mlp.c_proj.bias"; break;
      case ParamKind::LnfWeight: t.theirs = "ln_f.weight"; break;
      case ParamKind::LnfBias: t.theirs = "ln_f.bias"; break;
      case ParamKind::LmHead:
      case ParamKind::QueryWeight:
      case ParamKind::KeyValueWeight: MT_FAIL("'", spec.name, "' is a llama parameter, not GPT-2's");
    }
    if (spec.shape.size() == 2 && spec.kind != ParamKind::TokenEmbedding && spec.kind != ParamKind::PositionEmbedding) {
      t.layout = HfLayout::Transposed;  // Conv1D: [in, out]
      t.shape = {spec.shape[1], spec.shape[0]};
    }
    out.push_back(std::move(t));
  }
  return out;
}

bool is_hf_folder(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::exists(dir / "config.json", ec) &&
         (fs::exists(dir / kStSingleFile, ec) || fs::exists(dir / kStIndexFile, ec));
}

GptConfig read_gpt2_safetensors(const fs::path& dir, const std::optional<GptConfig>& expected,
                                const HfParamVisitor& visit) {
  const GptConfig config = read_gpt2_hf_config(dir);
  if (expected) check_llmc_compatible(*expected, config, dir);
  const SafetensorsFolder folder(dir);
  const std::string where = "safetensors folder " + dir.string();
  const std::string prefix = folder.find(std::string(kPrefix) + "wte.weight").file ? kPrefix : "";
  const std::vector<HfTensor> table = gpt2_hf_tensors(config);

  // Everything checked before the first visit: a bad folder changes no parameter.
  std::vector<SafetensorsFolder::Found> found;
  for (const HfTensor& t : table) {
    const SafetensorsFolder::Found f = folder.find(prefix + t.theirs);
    MT_REQUIRE(f.file != nullptr, where, " lacks tensor '", prefix + t.theirs, "' (config.json: ", config.describe(), ")");
    MT_REQUIRE(f.tensor->shape == t.shape, where, ": tensor '", prefix + t.theirs, "' in ", f.file->path().filename().string(),
               " has shape ", shape_text(f.tensor->shape), ", config.json implies ", shape_text(t.shape));
    found.push_back(f);
  }
  std::size_t known = table.size();
  for (const std::string& name : folder.names()) {
    if (name == "lm_head.weight" || name == prefix + "lm_head.weight") {
      const SafetensorsFolder::Found head = folder.find(name);
      const std::vector<float> a = head.file->read(*head.tensor), b = found[0].file->read(*found[0].tensor);
      MT_REQUIRE(a == b, where, ": ", name, " differs from ", prefix, "wte.weight: untied embeddings, which meshtrain's "
                 "GPT-2 does not have");
      ++known;
    } else if (is_gpt2_buffer(name)) {
      ++known;
    }
  }
  if (known != folder.names().size()) {
    for (const std::string& name : folder.names()) {
      bool ours = name == "lm_head.weight" || name == prefix + "lm_head.weight" || is_gpt2_buffer(name);
      for (const HfTensor& t : table) ours = ours || name == prefix + t.theirs;
      MT_REQUIRE(ours, where, " holds tensor '", name, "', which a GPT-2 of ", config.describe(), " does not have");
    }
  }

  const std::vector<ParamSpec> specs = gpt_parameter_specs(config);
  std::vector<float> theirs, ours;
  for (std::size_t i = 0; i < table.size(); ++i) {
    theirs.resize(static_cast<std::size_t>(found[i].tensor->numel()));
    found[i].file->read(*found[i].tensor, theirs);
    ours.resize(static_cast<std::size_t>(specs[i].numel()));
    hf_to_ours(table[i], theirs, ours);
    visit(specs[i], ours);
  }
  return config;
}

void write_gpt2_safetensors(const fs::path& dir, const GptConfig& config,
                            const std::function<std::span<const float>(const ParamSpec&)>& value_of, StDtype stored,
                            std::int64_t shard_bytes) {
  const std::vector<ParamSpec> specs = gpt_parameter_specs(config);
  const std::vector<HfTensor> table = gpt2_hf_tensors(config);
  // Their layouts held whole until the files are written: a transposed copy of each matrix.
  std::vector<std::vector<float>> theirs(specs.size());
  std::vector<StTensorToWrite> tensors;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    ours_to_hf(table[i], value_of(specs[i]), theirs[i]);
    tensors.push_back({kPrefix + table[i].theirs, table[i].shape, theirs[i]});
  }
  write_safetensors_folder(dir, tensors, stored, shard_bytes, {{"format", "pt"}});
  const std::string text = gpt2_hf_config_json(config, stored).dump(2) + "\n";
  AtomicFile out(dir / "config.json", "config.json");
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace mt
