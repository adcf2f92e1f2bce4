// Llama in Hugging Face's conventions (models/hf/llama_hf.h), through the family-agnostic reader
// (models/hf/hf_model.h): a folder made by hand the way LlamaForCausalLM.save_pretrained writes
// one (k_proj and v_proj apart, gate_proj and up_proj apart, an unpadded vocabulary, an untied
// lm_head) loads into the right rows of our parameters; safetensors -> ours -> safetensors gives
// the same bytes in fp32 and bf16, one file or sharded; every bad folder or config.json is one line.
#include "models/hf/llama_hf.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>

#include "io/safetensors_folder.h"
#include "models/hf/hf_model.h"
#include "runtime/error.h"
#include "tests/scratch_dir.h"

namespace mt {
namespace {
namespace fs = std::filesystem;
using testing::ScratchDir;

// GQA 4:2, head size 2, F not 4C, the vocabulary padded from 10 to 128 rows.
constexpr int kLayers = 2, kHeads = 4, kKvHeads = 2, kC = 8, kF = 12, kT = 16, kV = 10;
constexpr int kKv = kKvHeads * (kC / kHeads);  // rows of k_proj and of v_proj

nlohmann::json tiny_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", kC},
          {"intermediate_size", kF},
          {"num_attention_heads", kHeads},
          {"num_key_value_heads", kKvHeads},
          {"num_hidden_layers", kLayers},
          {"vocab_size", kV},
          {"max_position_embeddings", kT},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"rope_scaling", nullptr},
          {"torch_dtype", "float32"}};
}

GptConfig tiny_model() { return llama_config_from_hf(tiny_config(), "x"); }

using Tensors = std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<float>>>;

// HF's tensors of the tiny model by name: element (r, c) of tensor k is k*1000 + r*50 + c (exact in
// fp32 and distinct) when `random` is false, else normal noise.
Tensors hf_tensors_by_hand(bool random = false) {
  Tensors out;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.7f);
  int k = 0;
  const auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
    const std::int64_t rows = shape[0], cols = shape.size() == 2 ? shape[1] : 1;
    std::vector<float> v;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) v.push_back(random ? normal(rng) : static_cast<float>(k * 1000 + r * 50 + c));
    out[name] = {shape, v};
    ++k;
  };
  add("model.embed_tokens.weight", {kV, kC});
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {kC});
    add(p + "self_attn.q_proj.weight", {kC, kC});
    add(p + "self_attn.k_proj.weight", {kKv, kC});
    add(p + "self_attn.v_proj.weight", {kKv, kC});
    add(p + "self_attn.o_proj.weight", {kC, kC});
    add(p + "post_attention_layernorm.weight", {kC});
    add(p + "mlp.gate_proj.weight", {kF, kC});
    add(p + "mlp.up_proj.weight", {kF, kC});
    add(p + "mlp.down_proj.weight", {kC, kF});
  }
  add("model.norm.weight", {kC});
  add("lm_head.weight", {kV, kC});
  return out;
}

void write_folder(const fs::path& dir, const Tensors& tensors, const nlohmann::json& config = tiny_config(),
                  StDtype stored = StDtype::F32, std::int64_t shard_bytes = 0) {
  fs::create_directories(dir);
  std::vector<StTensorToWrite> list;
  for (const auto& [name, t] : tensors) list.push_back({name, t.first, t.second});
  write_safetensors_folder(dir, list, stored, shard_bytes, {{"format", "pt"}});
  std::ofstream(dir / "config.json") << config.dump(2);
}

std::map<std::string, std::vector<float>> load(const fs::path& dir, std::optional<GptConfig> expected = std::nullopt) {
  std::map<std::string, std::vector<float>> out;
  read_hf_safetensors(dir, expected, [&](const ParamSpec& spec, std::span<const float> v) {
    out[spec.name] = std::vector<float>(v.begin(), v.end());
  });
  return out;
}

template <class Fn>
void expect_one_line(Fn&& fn, const std::string& cause) {
  try {
    fn();
    ADD_FAILURE() << "no error; wanted: " << cause;
  } catch (const UsageError& e) {
    EXPECT_NE(e.message().find(cause), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
  }
}

std::vector<float> rows(const std::vector<float>& v, std::int64_t first, std::int64_t count, std::int64_t cols) {
  return {v.begin() + first * cols, v.begin() + (first + count) * cols};
}

TEST(LlamaHf, AHandMadeFolderInHfConventionsLoadsIntoTheRightRows) {
  ScratchDir dir("llamahf");
  const Tensors hf = hf_tensors_by_hand();
  write_folder(dir.path(), hf);
  EXPECT_TRUE(is_hf_folder(dir.path()));
  EXPECT_EQ(read_hf_config(dir.path()).describe(), tiny_model().describe());
  const auto ours = load(dir.path());
  ASSERT_EQ(ours.size(), 1u + 7u * kLayers + 2u);
  const int vp = padded_vocab(kV);
  for (const char* name : {"wte", "lm_head"}) {
    const std::string theirs = name == std::string("wte") ? "model.embed_tokens.weight" : "lm_head.weight";
    ASSERT_EQ(ours.at(name).size(), static_cast<std::size_t>(vp * kC)) << name;
    EXPECT_EQ(rows(ours.at(name), 0, kV, kC), hf.at(theirs).second) << name;
    EXPECT_EQ(rows(ours.at(name), kV, vp - kV, kC), std::vector<float>((vp - kV) * kC, 0.0f)) << name << ": padding";
  }
  for (int l = 0; l < kLayers; ++l) {
    const std::string o = "h." + std::to_string(l) + ".", t = "model.layers." + std::to_string(l) + ".";
    // Linear weights are [out, in] on both sides: the same elements in the same order.
    EXPECT_EQ(ours.at(o + "attn.q.weight"), hf.at(t + "self_attn.q_proj.weight").second);
    EXPECT_EQ(ours.at(o + "attn.proj.weight"), hf.at(t + "self_attn.o_proj.weight").second);
    EXPECT_EQ(ours.at(o + "mlp.proj.weight"), hf.at(t + "mlp.down_proj.weight").second);
    // [k ; v] and [gate ; up] on our rows, k and gate first.
    const auto& kv = ours.at(o + "attn.kv.weight");
    ASSERT_EQ(kv.size(), static_cast<std::size_t>(2 * kKv * kC));
    EXPECT_EQ(rows(kv, 0, kKv, kC), hf.at(t + "self_attn.k_proj.weight").second);
    EXPECT_EQ(rows(kv, kKv, kKv, kC), hf.at(t + "self_attn.v_proj.weight").second);
    const auto& fc = ours.at(o + "mlp.fc.weight");
    ASSERT_EQ(fc.size(), static_cast<std::size_t>(2 * kF * kC));
    EXPECT_EQ(rows(fc, 0, kF, kC), hf.at(t + "mlp.gate_proj.weight").second);
    EXPECT_EQ(rows(fc, kF, kF, kC), hf.at(t + "mlp.up_proj.weight").second);
    EXPECT_EQ(ours.at(o + "ln1.weight"), hf.at(t + "input_layernorm.weight").second);
    EXPECT_EQ(ours.at(o + "ln2.weight"), hf.at(t + "post_attention_layernorm.weight").second);
  }
  EXPECT_EQ(ours.at("lnf.weight"), hf.at("model.norm.weight").second);
  // One element by hand: v_proj (tensor 4 of layer 0) row 1, column 3 is our kv row kKv + 1.
  EXPECT_EQ(ours.at("h.0.attn.kv.weight")[(kKv + 1) * kC + 3], 4 * 1000 + 1 * 50 + 3);
}

TEST(LlamaHf, SafetensorsToOursToSafetensorsIsByteIdenticalInFp32AndBf16OneFileOrSharded) {
  ScratchDir dir("llamahf");
  const Tensors hf = hf_tensors_by_hand(/*random=*/true);
  for (const StDtype d : {StDtype::F32, StDtype::BF16}) {
    for (const std::int64_t shard : {std::int64_t{0}, std::int64_t{1000}}) {
      const std::string label = std::string(st_dtype_name(d)) + "_" + std::to_string(shard);
      const fs::path in = dir / ("in_" + label), out = dir / ("out_" + label);
      write_folder(in, hf, tiny_config(), d, shard);
      const GptConfig config = tiny_model();
      const auto ours = load(in, config);
      write_hf_safetensors(
          out, config, [&](const ParamSpec& spec) { return std::span<const float>(ours.at(spec.name)); }, d, shard);
      EXPECT_EQ(fs::exists(out / kStIndexFile), shard > 0) << label;
      EXPECT_EQ(fs::exists(out / kStSingleFile), shard == 0) << label;
      const SafetensorsFolder a(in), b(out);
      ASSERT_EQ(a.names(), b.names()) << label;
      for (const std::string& name : a.names()) {
        const auto ta = a.find(name), tb = b.find(name);
        EXPECT_EQ(ta.tensor->shape, tb.tensor->shape) << label << " " << name;
        EXPECT_EQ(tb.tensor->dtype, d) << label << " " << name;
        const auto ra = ta.file->raw(*ta.tensor), rb = tb.file->raw(*tb.tensor);
        EXPECT_TRUE(std::equal(ra.begin(), ra.end(), rb.begin(), rb.end())) << label << " " << name;
      }
      // The config.json written reads back as the same model, in LlamaForCausalLM's terms.
      std::ifstream file(out / "config.json");
      const nlohmann::json written = nlohmann::json::parse(file);
      EXPECT_EQ(written["architectures"], nlohmann::json({"LlamaForCausalLM"}));
      EXPECT_EQ(written["num_key_value_heads"], kKvHeads);
      EXPECT_EQ(written["intermediate_size"], kF);
      EXPECT_EQ(written["tie_word_embeddings"], false);
      EXPECT_EQ(written["rms_norm_eps"].get<double>(), 1e-5);  // the decimal, not 1e-5f widened
      EXPECT_EQ(written["torch_dtype"], d == StDtype::F32 ? "float32" : "bfloat16");
      EXPECT_EQ(written["rope_parameters"], nlohmann::json({{"rope_theta", 10000.0}, {"rope_type", "default"}}));
      const GptConfig back = read_hf_config(out);
      EXPECT_EQ(back.describe(), config.describe());
      EXPECT_EQ(back.norm_eps, config.norm_eps);
    }
  }
}

TEST(LlamaHf, BadFoldersGetOneLine) {
  ScratchDir dir("llamahf");
  const Tensors hf = hf_tensors_by_hand();
  const fs::path d = dir.path();
  Tensors missing = hf;
  missing.erase("model.layers.1.self_attn.v_proj.weight");
  write_folder(d / "missing", missing);
  expect_one_line([&] { load(d / "missing"); }, "lacks tensor 'model.layers.1.self_attn.v_proj.weight'");

  Tensors wrong = hf;  // k_proj with a row per query head: config.json says 2 kv heads
  wrong["model.layers.0.self_attn.k_proj.weight"] = {{kC, kC}, std::vector<float>(kC * kC, 1.0f)};
  write_folder(d / "shape", wrong);
  expect_one_line([&] { load(d / "shape"); },
                  "tensor 'model.layers.0.self_attn.k_proj.weight' in model.safetensors has shape [8, 8], config.json "
                  "implies [4, 8]");

  nlohmann::json more_kv = tiny_config();
  more_kv["num_key_value_heads"] = 4;
  write_folder(d / "kv", hf, more_kv);
  expect_one_line([&] { load(d / "kv"); }, "shape [4, 8], config.json implies [8, 8]");

  nlohmann::json deeper = tiny_config();
  deeper["num_hidden_layers"] = 3;
  write_folder(d / "layers", hf, deeper);
  expect_one_line([&] { load(d / "layers"); }, "lacks tensor 'model.layers.2.input_layernorm.weight'");

  Tensors extra = hf;
  extra["model.layers.0.self_attn.q_proj.bias"] = {{kC}, std::vector<float>(kC, 0.0f)};
  write_folder(d / "extra", extra);
  expect_one_line([&] { load(d / "extra"); }, "holds tensor 'model.layers.0.self_attn.q_proj.bias', which a Llama");

  Tensors buffers = hf;  // older files kept RoPE's frequencies: ignored
  buffers["model.layers.1.self_attn.rotary_emb.inv_freq"] = {{1}, {1.0f}};
  write_folder(d / "buffers", buffers);
  EXPECT_EQ(load(d / "buffers").at("lnf.weight"), hf.at("model.norm.weight").second);

  nlohmann::json tied = tiny_config();
  tied["tie_word_embeddings"] = true;
  write_folder(d / "tied", hf, tied);
  expect_one_line([&] { load(d / "tied"); }, "config.json: tie_word_embeddings is true: meshtrain's llama has an LM "
                                             "head apart from the token embedding");

  // A model of another shape or family refuses the folder before reading any tensor.
  write_folder(d / "ok", hf);
  GptConfig other = tiny_model();
  other.kv_heads = 4;
  other.rope_theta = 500000;
  expect_one_line([&] { load(d / "ok", other); },
                  "has kv_heads=2 rope_theta=10000, the model wants kv_heads=4 rope_theta=500000");
  GptConfig gpt2 = tiny_model();
  gpt2.family = ModelFamily::Gpt2;
  gpt2.kv_heads = gpt2.ffn_hidden = 0;
  expect_one_line([&] { load(d / "ok", gpt2); }, "holds a llama model (config.json's model_type), the model is gpt2");
  GptConfig shallower = tiny_model();
  shallower.layers = 1;
  try {
    load(d / "ok", shallower);
    ADD_FAILURE() << "a shape other than the model's loaded";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("has layers=2, the model wants layers=1"), std::string::npos) << e.message();
  }
  nlohmann::json mistral = tiny_config();
  mistral["model_type"] = "mistral";
  std::ofstream(d / "ok" / "config.json") << mistral.dump();
  expect_one_line([&] { load(d / "ok"); }, "model_type \"mistral\" is not one meshtrain runs (gpt2, llama)");
}

TEST(LlamaHf, ConfigsMeshtrainCannotRunAreRefusedInOneLine) {
  const auto refused = [](const char* key, nlohmann::json value, const std::string& cause) {
    nlohmann::json c = tiny_config();
    if (value.is_discarded()) {
      c.erase(key);
    } else {
      c[key] = value;
    }
    expect_one_line([&] { llama_config_from_hf(c, "dir/config.json"); }, "dir/config.json" + cause);
  };
  refused("tie_word_embeddings", true, ": tie_word_embeddings is true");
  refused("hidden_act", "gelu", ": hidden_act \"gelu\": meshtrain's llama computes SwiGLU with silu only");
  refused("attention_bias", true, ": attention_bias is true: meshtrain's llama has no biases");
  refused("mlp_bias", true, ": mlp_bias is true");
  refused("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}},
          ": rope_scaling is {\"factor\":8.0,\"rope_type\":\"llama3\"}: meshtrain's RoPE has a base (rope_theta) and no "
          "scaling");
  refused("rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}},
          ": rope_parameters is {\"factor\":4.0,\"rope_theta\":10000.0,\"rope_type\":\"yarn\"}: meshtrain's RoPE");
  refused("rope_scaling", {{"factor", 2.0}}, ": rope_scaling is {\"factor\":2.0}: meshtrain's RoPE");  // no type
  refused("head_dim", 4, ": head_dim 4 is not hidden_size / num_attention_heads (2)");
  refused("num_key_value_heads", 3, ": num_key_value_heads 3 does not divide num_attention_heads 4");
  refused("model_type", "gpt2", ": model_type \"gpt2\" is not llama");
  refused("hidden_size", nlohmann::json::value_t::discarded, " has no hidden_size");
  refused("intermediate_size", 0, ": intermediate_size is 0, not a positive integer");
  refused("rope_theta", "big", ": rope_theta is \"big\", not a number");
  refused("rope_theta", 0.5, ": model: rope_theta must be a number greater than 1");
  refused("hidden_size", 12, ": model: RoPE rotates pairs of channels: the head size 3");
  // What LlamaConfig defaults when absent or null.
  nlohmann::json old = tiny_config();
  for (const char* key : {"rms_norm_eps", "rope_theta", "max_position_embeddings", "head_dim", "tie_word_embeddings",
                          "hidden_act", "attention_bias", "mlp_bias", "rope_scaling"})
    old.erase(key);
  old["num_key_value_heads"] = nullptr;
  const GptConfig c = llama_config_from_hf(old, "x");
  EXPECT_EQ(c.kv_head_count(), kHeads);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.max_seq_len, 2048);
  EXPECT_EQ(c.mlp_hidden(), kF);
  nlohmann::json with_head_dim = tiny_config();
  with_head_dim["head_dim"] = 2;
  EXPECT_NO_THROW(llama_config_from_hf(with_head_dim, "x"));
}

// config.json exactly as transformers 5.17's LlamaForCausalLM.save_pretrained wrote it for
// scripts/hf_llama_reference.py's model (RoPE's base in rope_parameters, no rope_theta key), and
// the same with Llama 3's base.
TEST(LlamaHf, Transformers5ConfigsReadRopeThetaFromRopeParameters) {
  nlohmann::json saved = nlohmann::json::parse(R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1,
  "dtype": "float32", "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
  "initializer_range": 0.02, "intermediate_size": 160, "max_position_embeddings": 64, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 2,
  "pad_token_id": null, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "tie_word_embeddings": false,
  "transformers_version": "5.17.0", "use_cache": true, "vocab_size": 256})");
  GptConfig want = gpt_preset("llama-tiny");
  want.vocab_size = 256;
  EXPECT_EQ(llama_config_from_hf(saved, "x").describe(), want.describe());
  saved["rope_parameters"]["rope_theta"] = 500000.0;
  EXPECT_EQ(llama_config_from_hf(saved, "x").rope_theta, 500000.0f);
  saved["rope_theta"] = 500000.0;  // both keys, as our writer puts them
  EXPECT_EQ(llama_config_from_hf(saved, "x").rope_theta, 500000.0f);
}

}  // namespace
}  // namespace mt
