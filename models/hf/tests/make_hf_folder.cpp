// A test helper: writes a Hugging Face folder of random weights for a preset, in its family's names
// and config.json (models/hf/hf_model.h), as the shell tests' source of a model that no training
// made. Usage: make_hf_folder DIR PRESET VOCAB [fp32|bf16|fp16] [SHARD_BYTES]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>

#include "models/hf/hf_model.h"
#include "runtime/error.h"

int main(int argc, char** argv) {
  if (argc < 4 || argc > 6) {
    std::fprintf(stderr, "usage: make_hf_folder DIR PRESET VOCAB [fp32|bf16|fp16] [SHARD_BYTES]\n");
    return 2;
  }
  try {
    mt::GptConfig config = mt::gpt_preset(argv[2]);
    config.vocab_size = std::atoi(argv[3]);
    const std::string dtype = argc > 4 ? argv[4] : "fp32";
    const mt::StDtype stored = dtype == "bf16" ? mt::StDtype::BF16 : dtype == "fp16" ? mt::StDtype::F16 : mt::StDtype::F32;
    const std::int64_t shard = argc > 5 ? std::atoll(argv[5]) : 0;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::map<std::string, std::vector<float>> values;
    for (const mt::ParamSpec& spec : mt::gpt_parameter_specs(config)) {
      std::vector<float>& v = values[spec.name];
      for (std::int64_t i = 0; i < spec.numel(); ++i) v.push_back(spec.decay ? normal(rng) : 1.0f + normal(rng));
    }
    mt::write_hf_safetensors(
        argv[1], config, [&](const mt::ParamSpec& spec) { return std::span<const float>(values.at(spec.name)); },
        stored, shard);
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "%s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
