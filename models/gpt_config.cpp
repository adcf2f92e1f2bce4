#include "models/gpt_config.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "runtime/error.h"

namespace mt {

int padded_vocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

const char* model_family_name(ModelFamily family) { return family == ModelFamily::Llama ? "llama" : "gpt2"; }

int GptConfig::vocab_rows() const { return padded_vocab == 0 ? mt::padded_vocab(vocab_size) : padded_vocab; }

std::int64_t GptConfig::mlp_hidden() const {
  return is_llama() && ffn_hidden > 0 ? ffn_hidden : 4 * static_cast<std::int64_t>(channels);
}

std::int64_t GptConfig::parameter_count() const {
  const std::int64_t C = channels, L = layers, F = mlp_hidden(), Vp = vocab_rows();
  if (is_llama()) {  // two RMSNorm weights, qkv, o, gate + up, down per layer; embedding, lnf, head
    const std::int64_t per_layer = 2 * C + qkv_width() * C + C * C + 2 * F * C + F * C;
    return 2 * Vp * C + L * per_layer + C;
  }
  const std::int64_t per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (F * C + F) + (F * C + C);
  return Vp * C + static_cast<std::int64_t>(max_seq_len) * C + L * per_layer + 2 * C;
}

std::int64_t GptConfig::real_parameter_count() const {
  const std::int64_t padding = static_cast<std::int64_t>(vocab_rows() - vocab_size) * channels;
  return parameter_count() - (tied_head() ? 1 : 2) * padding;
}

namespace {
// Matmul weights of one layer: qkv, the attention output, the MLP's up (and gate) and down.
double layer_matmul_params(const GptConfig& c) {
  const double C = c.channels;
  return static_cast<double>(c.qkv_width()) * C + C * C + static_cast<double>(c.mlp_up_rows() + c.mlp_hidden()) * C;
}
}  // namespace

GptConfig::PartFlops GptConfig::forward_flops_by_part(int seq_len) const {
  const double C = channels;
  // 2 FLOPs per weight and token, plus the causal attention's two [T, T] products counted in full.
  return {2.0 * layer_matmul_params(*this) + 4.0 * seq_len * C, 2.0 * C * vocab_rows() + 10.0 * vocab_rows(),
          2.0 * C};
}

double GptConfig::training_flops_per_token(int seq_len) const {
  // Matmul parameters: every block weight plus the LM head (real rows only).
  const double C = channels, L = layers;
  const double matmul_params = L * layer_matmul_params(*this) + static_cast<double>(vocab_size) * C;
  return 6.0 * matmul_params + 12.0 * L * C * seq_len;
}

void GptConfig::validate() const {
  // The deepest published transformers have a few hundred layers; far more is a typo, and pipeline
  // stage balancing (parallel/stage_partition.cpp) is quadratic in the layer count.
  MT_REQUIRE(layers >= 1 && layers <= kMaxLayers, "model: layers must be 1 to ", kMaxLayers, ", got ", layers);
  MT_REQUIRE(heads >= 1, "model: heads must be at least 1, got ", heads);
  MT_REQUIRE(channels >= 1 && channels % heads == 0, "model: channels (", channels,
           ") must be a positive multiple of heads (", heads, ")");
  // The MLP is 4 x channels wide, and layouts count that width in an int (`--channels 1000000000`
  // overflowed it; found with commands/tests/fuzz_config_file.cpp).
  MT_REQUIRE(channels <= std::numeric_limits<int>::max() / 4, "model: channels (", channels, ") is too large: at most ",
             std::numeric_limits<int>::max() / 4);
  MT_REQUIRE(max_seq_len >= 1, "model: max_seq_len must be at least 1, got ", max_seq_len);
  MT_REQUIRE(vocab_size >= 1, "model: vocab_size must be at least 1, got ", vocab_size);
  // Padding rounds up to a multiple of 128 in int: vocab_size 2147483647 overflowed it (reproduced
  // with checkpoint/tests/fuzz_full_state.cpp).
  MT_REQUIRE(vocab_size <= std::numeric_limits<int>::max() - 127, "model: vocab_size (", vocab_size,
             ") is too large: at most ", std::numeric_limits<int>::max() - 127);
  MT_REQUIRE(padded_vocab == 0 || padded_vocab >= vocab_size, "model: padded_vocab (", padded_vocab,
           ") is smaller than vocab_size (", vocab_size, ")");
  if (is_llama()) {
    MT_REQUIRE(kv_heads >= 0 && kv_heads <= heads && heads % kv_head_count() == 0, "model: kv_heads (", kv_heads,
               ") must divide heads (", heads, ")");
    MT_REQUIRE(head_size() % 2 == 0, "model: RoPE rotates pairs of channels: the head size ", head_size(),
               " (channels / heads) must be even");
    MT_REQUIRE(ffn_hidden >= 0 && ffn_hidden <= std::numeric_limits<int>::max() / 2, "model: ffn_hidden (",
               ffn_hidden, ") must be 0 (4 x channels) or positive, at most ", std::numeric_limits<int>::max() / 2);
    MT_REQUIRE(std::isfinite(rope_theta) && rope_theta > 1.0f, "model: rope_theta must be a number greater than 1, got ",
               rope_theta);
  } else {
    MT_REQUIRE(kv_heads == 0 || kv_heads == heads, "model: gpt2 has no grouped-query attention (kv_heads ", kv_heads,
               ")");
    MT_REQUIRE(ffn_hidden == 0 || ffn_hidden == 4 * channels, "model: gpt2's MLP is 4 x channels wide (ffn_hidden ",
               ffn_hidden, ")");
  }
  MT_REQUIRE(std::isfinite(norm_eps) && norm_eps > 0.0f && norm_eps < 1.0f, "model: norm_eps must be in (0, 1), got ", norm_eps);
  // Counted in double first: parameter_count() is int64 arithmetic, which a shape like 2^29
  // channels x 2^31 layers would overflow. 2^48 parameters is a thousand times GPT-3.
  const double C = channels, L = layers;
  const double parameters = L * (layer_matmul_params(*this) + 13.0 * C) +
                            (2.0 * static_cast<double>(vocab_rows()) + max_seq_len + 2.0) * C;
  MT_REQUIRE(parameters < 0x1p48, "model: layers=", layers, " channels=", channels, " vocab=", vocab_rows(),
             " max_seq_len=", max_seq_len, " is ", parameters, " parameters, more than meshtrain can count (2^48)");
}

std::string GptConfig::describe() const {
  std::ostringstream os;
  if (is_llama()) os << "family=llama ";
  os << "layers=" << layers << " heads=" << heads << " channels=" << channels << " max_seq_len=" << max_seq_len
     << " vocab=" << vocab_size << "(" << vocab_rows() << ")";
  if (is_llama())
    os << " kv_heads=" << kv_head_count() << " ffn_hidden=" << mlp_hidden() << " rope_theta=" << rope_theta;
  return os.str();
}

namespace {
struct Preset {
  const char* name;
  int layers, heads, channels, max_seq_len;
  int vocab_size = 50257;
  ModelFamily family = ModelFamily::Gpt2;
  int kv_heads = 0, ffn_hidden = 0;
  float rope_theta = 10000, norm_eps = 1e-5f;
};
// tiny is for tests; small trains in minutes on a laptop CPU; the gpt2 family are OpenAI's shapes.
constexpr Preset kPresets[] = {
    {"tiny", 4, 4, 64, 64},           {"small", 6, 6, 384, 256},        {"gpt2", 12, 12, 768, 1024},
    {"gpt2-medium", 24, 16, 1024, 1024}, {"gpt2-large", 36, 20, 1280, 1024}, {"gpt2-xl", 48, 25, 1600, 1024},
    {"gpt3-6.7b", 32, 32, 4096, 2048},   {"gpt3-13b", 40, 40, 5120, 2048},  {"gpt3-175b", 96, 96, 12288, 2048},  // GPT-3 paper, Table 2.1
    // llama-tiny is for tests (GQA 4:2, F not 4C); llama-125m trains here: 126M parameters with
    // cl100k's vocabulary, of which the embedding and the untied head are 103M (8 layers of 512, 8 q
    // heads on 4 kv heads, SwiGLU 1408 = 2.75C, about Llama's 8/3 C rounded to 64); Llama 3's published
    // shapes (vocab 128256, theta 500000) for plan.
    {"llama-tiny", 4, 4, 64, 64, 50257, ModelFamily::Llama, 2, 160},
    {"llama-125m", 8, 8, 512, 1024, 100277, ModelFamily::Llama, 4, 1408},
    {"llama3-8b", 32, 32, 4096, 8192, 128256, ModelFamily::Llama, 8, 14336, 500000.0f},
    {"llama3-70b", 80, 64, 8192, 8192, 128256, ModelFamily::Llama, 8, 28672, 500000.0f},
};
}  // namespace

GptConfig gpt_preset(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) {
      GptConfig c;
      c.layers = p.layers;
      c.heads = p.heads;
      c.channels = p.channels;
      c.max_seq_len = p.max_seq_len;
      c.vocab_size = p.vocab_size;
      c.family = p.family;
      c.kv_heads = p.kv_heads;
      c.ffn_hidden = p.ffn_hidden;
      c.rope_theta = p.rope_theta;
      c.norm_eps = p.norm_eps;
      return c;
    }
  }
  std::string known;
  for (const Preset& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  MT_FAIL_AS(UsageError, "unknown model preset '", name, "' (known: ", known, ")");
}

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

ModelDims layout_dims(const GptConfig& config, int seq_len) {
  const GptConfig::PartFlops flops = config.forward_flops_by_part(seq_len);
  return ModelDims{.layers = config.layers,
                   .heads = config.heads,
                   .mlp_width = static_cast<int>(config.mlp_hidden()),
                   .vocab_rows = config.vocab_rows(),
                   .costs = StageCosts{flops.layer, flops.embedding, flops.head},
                   .tied_embedding = config.tied_head()};
}

}  // namespace mt
