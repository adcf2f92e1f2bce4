// GPT-2 in Hugging Face's conventions (models/hf/gpt2_hf.h): a file made by hand the way
// save_pretrained writes one (transposed Conv1D weights, "transformer." names, an unpadded
// vocabulary, no lm_head) loads into the right elements of our parameters; our writer round trips;
// every bad folder or config.json is one line.
#include "models/hf/gpt2_hf.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "io/safetensors_folder.h"
#include "runtime/error.h"
#include "tests/scratch_dir.h"

namespace mt {
namespace {
namespace fs = std::filesystem;
using testing::ScratchDir;

constexpr int kLayers = 2, kHeads = 2, kC = 4, kT = 8, kV = 10;

nlohmann::json tiny_config() {
  return {{"model_type", "gpt2"}, {"n_embd", kC},   {"n_layer", kLayers},   {"n_head", kHeads},
          {"vocab_size", kV},     {"n_positions", kT}, {"n_ctx", kT}, {"activation_function", "gelu_new"}};
}

// Element (r, c) of HF tensor number k: distinct everywhere, exact in fp32.
float value_at(int k, std::int64_t r, std::int64_t c) { return static_cast<float>(k * 1000 + r * 50 + c); }

// HF's tensors of the tiny model, by name (without prefix), each filled with value_at.
std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<float>>> hf_tensors_by_hand() {
  std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<float>>> out;
  int k = 0;
  const auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
    const std::int64_t rows = shape[0], cols = shape.size() == 2 ? shape[1] : 1;
    std::vector<float> v;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) v.push_back(value_at(k, r, c));
    out[name] = {shape, v};
    ++k;
  };
  add("wte.weight", {kV, kC});
  add("wpe.weight", {kT, kC});
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {kC});
    add(p + "ln_1.bias", {kC});
    add(p + "attn.c_attn.weight", {kC, 3 * kC});  // Conv1D: [in, out]
    add(p + "attn.c_attn.bias", {3 * kC});
    add(p + "attn.c_proj.weight", {kC, kC});
    add(p + "attn.c_proj.bias", {kC});
    add(p + "ln_2.weight", {kC});
    add(p + "ln_2.bias", {kC});
    add(p + "mlp.c_fc.weight", {kC, 4 * kC});
    add(p + "mlp.c_fc.bias", {4 * kC});
    add(p + "mlp.c_proj.weight", {4 * kC, kC});
    add(p + "mlp.c_proj.bias", {kC});
  }
  add("ln_f.weight", {kC});
  add("ln_f.bias", {kC});
  return out;
}

using Tensors = std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<float>>>;

void write_folder(const fs::path& dir, const Tensors& tensors, const std::string& prefix,
                  const nlohmann::json& config = tiny_config()) {
  fs::create_directories(dir);
  std::vector<StTensorToWrite> list;
  for (const auto& [name, t] : tensors) list.push_back({prefix + name, t.first, t.second});
  write_safetensors(dir / kStSingleFile, list, StDtype::F32, {{"format", "pt"}});
  std::ofstream(dir / "config.json") << config.dump(2);
}

std::map<std::string, std::vector<float>> load(const fs::path& dir, std::optional<GptConfig> expected = std::nullopt) {
  std::map<std::string, std::vector<float>> out;
  read_gpt2_safetensors(dir, expected, [&](const ParamSpec& spec, std::span<const float> v) {
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

TEST(Gpt2Hf, AHandMadeFileInHfConventionsLoadsToTheRightElements) {
  ScratchDir dir("gpt2hf");
  const Tensors hf = hf_tensors_by_hand();
  write_folder(dir.path(), hf, "transformer.");
  const auto ours = load(dir.path());
  ASSERT_EQ(ours.size(), 2u + 12u * kLayers + 2u);
  const int vp = padded_vocab(kV);  // 128 rows: the unpadded 10 and 118 of padding
  ASSERT_EQ(ours.at("wte").size(), static_cast<std::size_t>(vp * kC));
  EXPECT_EQ(ours.at("wte")[7 * kC + 3], hf.at("wte.weight").second[7 * kC + 3]);
  EXPECT_EQ(ours.at("wte")[kV * kC], 0.0f);        // the first padding row
  EXPECT_EQ(ours.at("wte")[vp * kC - 1], 0.0f);    // the last
  EXPECT_EQ(ours.at("wpe")[5 * kC + 1], hf.at("wpe.weight").second[5 * kC + 1]);
  // Our qkv is [3C, C] (out, in); HF's c_attn is [C, 3C] (in, out): ours[o][i] = theirs[i][o].
  const auto& qkv = ours.at("h.1.attn.qkv.weight");
  const auto& c_attn = hf.at("h.1.attn.c_attn.weight").second;
  for (const auto& [o, i] : {std::pair{0, 0}, std::pair{5, 2}, std::pair{11, 3}, std::pair{7, 1}})
    EXPECT_EQ(qkv[static_cast<std::size_t>(o * kC + i)], c_attn[static_cast<std::size_t>(i * 3 * kC + o)]) << o << "," << i;
  // mlp.proj is [C, 4C]; c_proj [4C, C].
  const auto& proj = ours.at("h.0.mlp.proj.weight");
  const auto& c_proj = hf.at("h.0.mlp.c_proj.weight").second;
  EXPECT_EQ(proj[static_cast<std::size_t>(3 * 4 * kC + 13)], c_proj[static_cast<std::size_t>(13 * kC + 3)]);
  EXPECT_EQ(ours.at("h.1.attn.proj.weight")[1 * kC + 2], hf.at("h.1.attn.c_proj.weight").second[2 * kC + 1]);
  EXPECT_EQ(ours.at("h.0.mlp.fc.weight")[9 * kC + 0], hf.at("h.0.mlp.c_fc.weight").second[0 * 4 * kC + 9]);
  EXPECT_EQ(ours.at("h.1.attn.qkv.bias"), hf.at("h.1.attn.c_attn.bias").second);
  EXPECT_EQ(ours.at("lnf.bias"), hf.at("ln_f.bias").second);
  EXPECT_EQ(ours.at("h.0.ln2.weight"), hf.at("h.0.ln_2.weight").second);
}

TEST(Gpt2Hf, UnprefixedNamesATiedLmHeadAndMaskBuffersAreAccepted) {
  ScratchDir dir("gpt2hf");
  Tensors hf = hf_tensors_by_hand();
  hf["lm_head.weight"] = hf.at("wte.weight");
  hf["h.0.attn.bias"] = {{1, 1, kT, kT}, std::vector<float>(kT * kT, 1.0f)};
  write_folder(dir.path(), hf, "");
  EXPECT_EQ(load(dir.path()).at("h.0.ln1.bias"), hf.at("h.0.ln_1.bias").second);
}

TEST(Gpt2Hf, WriteThenReadIsExactInEveryStoredFormAndSharded) {
  ScratchDir dir("gpt2hf");
  GptConfig config;
  config.layers = kLayers, config.heads = kHeads, config.channels = kC, config.max_seq_len = kT, config.vocab_size = kV;
  std::map<std::string, std::vector<float>> values;
  int k = 0;
  for (const ParamSpec& spec : gpt_parameter_specs(config)) {
    std::vector<float> v(static_cast<std::size_t>(spec.numel()));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * static_cast<float>(k) + 0.25f * static_cast<float>(i % 7);
    if (spec.kind == ParamKind::TokenEmbedding) std::fill(v.begin() + kV * kC, v.end(), 0.0f);  // padding
    values[spec.name] = v;
    ++k;
  }
  const auto value_of = [&](const ParamSpec& spec) { return std::span<const float>(values.at(spec.name)); };
  for (const std::int64_t shard : {std::int64_t{0}, std::int64_t{600}}) {
    for (const StDtype d : {StDtype::F32, StDtype::BF16, StDtype::F16}) {
      write_gpt2_safetensors(dir.path(), config, value_of, d, shard);  // small values, exact in all three
      EXPECT_EQ(fs::exists(dir / kStIndexFile), shard > 0);
      EXPECT_TRUE(is_hf_folder(dir.path()));
      const auto back = load(dir.path(), config);
      EXPECT_EQ(back, values) << st_dtype_name(d) << " shard " << shard;
      const SafetensorsFolder folder(dir.path());
      EXPECT_NE(folder.find("transformer.h.1.attn.c_attn.weight").file, nullptr);
      EXPECT_EQ(folder.find("transformer.h.1.attn.c_attn.weight").tensor->shape, (std::vector<std::int64_t>{kC, 3 * kC}));
      EXPECT_EQ(folder.find("transformer.wte.weight").tensor->shape, (std::vector<std::int64_t>{kV, kC}));
      EXPECT_EQ(folder.find("lm_head.weight").file, nullptr);  // tied: left out, as save_pretrained does
    }
  }
  std::ifstream in(dir / "config.json");
  const nlohmann::json written = nlohmann::json::parse(in);
  EXPECT_EQ(written["n_embd"], kC);
  EXPECT_EQ(written["torch_dtype"], "float16");
  EXPECT_EQ(gpt2_config_from_hf(written, "x").describe(), config.describe());
}

TEST(Gpt2Hf, BadFoldersGetOneLine) {
  ScratchDir dir("gpt2hf");
  const Tensors hf = hf_tensors_by_hand();
  const fs::path d = dir.path();
  Tensors missing = hf;
  missing.erase("h.1.ln_2.bias");
  write_folder(d / "missing", missing, "transformer.");
  expect_one_line([&] { load(d / "missing"); }, "lacks tensor 'transformer.h.1.ln_2.bias'");

  Tensors wrong = hf;
  wrong["h.0.mlp.c_fc.weight"] = {{4 * kC, kC}, wrong.at("h.0.mlp.c_fc.weight").second};  // not transposed
  write_folder(d / "shape", wrong, "");
  expect_one_line([&] { load(d / "shape"); }, "tensor 'h.0.mlp.c_fc.weight' in model.safetensors has shape [16, 4], "
                                              "config.json implies [4, 16]");

  nlohmann::json bigger = tiny_config();
  bigger["n_layer"] = 3;
  write_folder(d / "layers", hf, "", bigger);
  expect_one_line([&] { load(d / "layers"); }, "lacks tensor 'h.2.ln_1.weight'");

  Tensors untied = hf;
  untied["lm_head.weight"] = {{kV, kC}, std::vector<float>(kV * kC, 0.5f)};
  write_folder(d / "untied", untied, "");
  expect_one_line([&] { load(d / "untied"); }, "lm_head.weight differs from wte.weight: untied embeddings");

  Tensors extra = hf;
  extra["h.0.attn.q_proj.weight"] = {{kC, kC}, std::vector<float>(kC * kC, 0.0f)};
  write_folder(d / "extra", extra, "");
  expect_one_line([&] { load(d / "extra"); }, "holds tensor 'h.0.attn.q_proj.weight', which a GPT-2");

  write_folder(d / "ok", hf, "");
  GptConfig other = gpt2_config_from_hf(tiny_config(), "x");
  other.layers = 4;
  try {
    load(d / "ok", other);
    ADD_FAILURE() << "a shape other than the model's loaded";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("has layers=2"), std::string::npos) << e.message();
  }
  fs::remove(d / "ok" / "config.json");
  expect_one_line([&] { load(d / "ok"); }, "has no readable config.json");
  std::ofstream(d / "ok" / "config.json") << "{\"n_embd\": ";
  expect_one_line([&] { load(d / "ok"); }, "config.json is not valid JSON");
}

TEST(Gpt2Hf, ConfigsMeshtrainCannotRunAreRefusedInOneLine) {
  const auto refused = [](const char* key, nlohmann::json value, const std::string& cause) {
    nlohmann::json c = tiny_config();
    if (value.is_discarded()) {
      c.erase(key);
    } else {
      c[key] = value;
    }
    expect_one_line([&] { gpt2_config_from_hf(c, "dir/config.json"); }, "dir/config.json" + cause);
  };
  refused("activation_function", "relu", ": activation_function \"relu\": meshtrain's GPT-2 computes gelu_new");
  refused("tie_word_embeddings", false, ": tie_word_embeddings is false");
  refused("model_type", "llama", ": model_type \"llama\" is not gpt2");
  refused("n_embd", nlohmann::json::value_t::discarded, " has no n_embd");
  refused("n_head", 3, ": n_embd 4 is not divisible by n_head 3");
  refused("n_ctx", 16, ": n_ctx 16 differs from n_positions 8");
  refused("n_inner", 12, ": n_inner 12 is not 4 x n_embd (16)");
  refused("layer_norm_epsilon", 1e-6, ": layer_norm_epsilon");
  refused("vocab_size", -3, ": vocab_size is -3, not a positive integer");
  nlohmann::json ok = tiny_config();
  ok["n_inner"] = nullptr;  // null: 4 x n_embd
  ok["activation_function"] = "gelu_pytorch_tanh";
  ok.erase("n_positions");  // n_ctx alone, as old configs have it
  EXPECT_EQ(gpt2_config_from_hf(ok, "x").max_seq_len, kT);
}

}  // namespace
}  // namespace mt
